-- Times are judged on the wall clock at the moment of the check, not at the start of the
-- statement or of the transaction: a token that expires while one statement runs, and a proposal
-- that expires while a transaction stays open, are refused (security review F3 and F6).
\set VERBOSITY terse
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected) VALUES
    ('shopping-a', '770', 'open', true), ('shopping-b', '772', 'open', true);
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-b', 'request_close', allowed => true, roles => ARRAY['supervisor'],
                           tier => 1, confirm_ttl => interval '2 seconds') > 0 AS policy_set;
SET ROLE toolgate_agent;
-- A token that lives two seconds works now, and this backend remembers it verified it.
\set short `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor 2`
SELECT r->>'outcome' AS outcome FROM toolgate.read_order(:'short', '770') r;
-- The same statement, three seconds later: the argument waits for pg_sleep, then the gate runs.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.request_close(CASE WHEN pg_sleep(3)::text = '' THEN :'short' END, 'conv-clock',
       '{"order_id": "770", "reason": "Inspeção validada", "idempotency_key": "clock-770-a"}') r;
-- A proposal that waits two seconds for its answer, answered inside a transaction that began
-- before it expired.
\set sup_b `${TOOLGATE_MINT:?} id shopping-b user-31 supervisor`
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_close(:'sup_b', 'conv-clock-b',
       '{"order_id": "772", "reason": "Inspeção validada", "idempotency_key": "clock-772-a"}') r \gset
\set yes `${TOOLGATE_MINT:?} yes shopping-b :pid sim`
BEGIN;
SELECT pg_catalog.now() AS began \gset
SELECT pg_sleep(3);
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'sup_b', :'yes') r;
COMMIT;
RESET ROLE;
SELECT status, :'began'::timestamptz < expires_at AS began_before_expiry, decided_at > expires_at AS decided_after_expiry,
       (SELECT count(*) FROM maintenance.close_requests WHERE order_id = '772') AS effects
  FROM toolgate.proposals WHERE proposal_id = :'pid';
SELECT kind, rule, detail->>'reason' AS reason FROM toolgate.audit
 WHERE conversation_id IN ('conv-clock', 'conv-clock-b') ORDER BY audit_id;
