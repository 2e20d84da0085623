-- The dispatcher's functions (issue 24, second slice), on the intents outbox_tools queued:
-- claim_outbox and settle_outbox are toolgate_dispatcher's alone (not the agent's, the
-- administrator's or the auditor's), and the dispatcher reads no table. A claim takes what is
-- due while writes are on for the tool (the kill switch holds the queue), counts an attempt and
-- leases the row with a claim id; settle, presenting that claim (no other: T9 of the third
-- security review), writes the outbox's state, the ledger's reply (the retry with the same key,
-- the status query, answers it, replayed; the ERP's words in it marked untrusted) and an audit
-- row of kind dispatch, once.
\set VERBOSITY terse
SELECT rolcanlogin, rolsuper FROM pg_roles WHERE rolname = 'toolgate_dispatcher';
SELECT r AS role, has_function_privilege(r, 'toolgate.claim_outbox(integer, interval, text[])', 'EXECUTE') AS claims,
       has_function_privilege(r, 'toolgate.settle_outbox(text, text, text, uuid, text, jsonb, interval, jsonb)', 'EXECUTE') AS settles
  FROM unnest(ARRAY['toolgate_agent', 'toolgate_admin', 'toolgate_auditor', 'toolgate_operator', 'toolgate_dispatcher']) r;
SET ROLE toolgate_agent;
SELECT count(*) FROM toolgate.claim_outbox(10);
SELECT toolgate.settle_outbox('shopping-a', 'remote_order', 'remote-key-1', NULL, 'SUCCEEDED', '{}');
RESET ROLE;
SET ROLE toolgate_dispatcher;
SELECT count(*) FROM toolgate.outbox;
SELECT count(*) FROM toolgate.ledger;

-- The kill switch holds the queue: globally, then for one tool.
RESET ROLE;
SELECT toolgate.set_writes_enabled(false);
SET ROLE toolgate_dispatcher;
SELECT count(*) AS claimed_while_off FROM toolgate.claim_outbox(10);
RESET ROLE;
SELECT toolgate.set_writes_enabled(true);
SELECT toolgate.set_writes_enabled(false, 'remote_order_t1');
SET ROLE toolgate_dispatcher;
SELECT tenant_id, tool, idempotency_key, endpoint, base_url, auth_kind, per_second, per_minute,
       request->>'method' AS method, length(request->>'path') AS path_length, attempts, sent_before,
       claim IS NOT NULL AS has_claim
  FROM toolgate.claim_outbox(10);
-- Leased: not claimed again at once.
SELECT count(*) AS claimed_again FROM toolgate.claim_outbox(10);
SELECT toolgate.claim_outbox(0);
RESET ROLE;
SELECT toolgate.set_writes_enabled(true, 'remote_order_t1');
SELECT idempotency_key, state, attempts, claimed_at IS NOT NULL AS claimed, next_attempt_at > now() AS leased
  FROM toolgate.outbox WHERE idempotency_key LIKE 'remote-key-_' ORDER BY 1;

-- The claim the dispatcher was given (read here as the superuser: the dispatcher reads no table).
SELECT claim AS claim1 FROM toolgate.outbox WHERE idempotency_key = 'remote-key-1' \gset

-- Settled: the outbox, the ledger's reply, one audit row of kind dispatch. Only with the claim:
-- none, or another, is refused.
SET ROLE toolgate_dispatcher;
SELECT toolgate.settle_outbox('shopping-a', 'remote_order', 'remote-key-1', NULL, 'SUCCEEDED', '{}');
SELECT toolgate.settle_outbox('shopping-a', 'remote_order', 'remote-key-1', gen_random_uuid(), 'SUCCEEDED', '{}');
SELECT r->>'outcome' AS outcome, r->>'isError' AS is_error, r->'result'->>'state' AS state, r->'result'->'erp' AS erp
  FROM toolgate.settle_outbox('shopping-a', 'remote_order', 'remote-key-1', :'claim1', 'SUCCEEDED',
                              '{"status": "DONE", "result": {"purchase_id": "PO-1"}}') r;
SELECT toolgate.settle_outbox('shopping-a', 'remote_order', 'remote-key-1', :'claim1', 'SUCCEEDED', '{}');
SELECT toolgate.settle_outbox('shopping-a', 'remote_order', 'remote-key-1', :'claim1', 'DONE', '{}');
SELECT toolgate.settle_outbox('shopping-a', 'remote_order', 'no-such-key', :'claim1', 'SUCCEEDED', '{}');
RESET ROLE;
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'outcome' AS outcome, r->>'isError' AS is_error, r->>'replayed' AS replayed, r->'result'->'erp' AS erp
  FROM toolgate.call(:'sup', 'remote-c1', 'remote_order',
       '{"order_id": "900", "part": "filter", "quantity": 2, "mode": "ok", "idempotency_key": "remote-key-1"}') r;
RESET ROLE;

-- A business refusal: REJECTED erp_rejected, final.
SET ROLE toolgate_dispatcher;
SELECT idempotency_key, attempts, sent_before FROM toolgate.claim_outbox(10);
RESET ROLE;
SELECT claim AS claim2 FROM toolgate.outbox WHERE idempotency_key = 'remote-key-2' \gset
SET ROLE toolgate_dispatcher;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->>'isError' AS is_error
  FROM toolgate.settle_outbox('shopping-a', 'remote_order_t1', 'remote-key-2', :'claim2', 'REJECTED',
                              '{"error": "part_discontinued"}') r;
RESET ROLE;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->>'replayed' AS replayed, r->'result'->>'error' AS error
  FROM toolgate.call(:'sup', 'remote-c2', 'remote_order_t1',
       '{"order_id": "901", "part": "belt", "quantity": 4, "mode": "ok", "idempotency_key": "remote-key-2"}') r;
RESET ROLE;
SELECT idempotency_key, state, attempts, last_error, settled_at IS NOT NULL AS settled
  FROM toolgate.outbox WHERE idempotency_key LIKE 'remote-key-_' ORDER BY 1;
-- Who asked is named by pseudonym (docs/audit.md#erasure-of-a-person): the person's key reads it back.
SELECT a.kind, a.tool, a.target, a.outcome, a.rule, a.effects, a.actor, k.person AS asked_by, a.detail - 'asked_by' AS detail
  FROM toolgate.audit a LEFT JOIN toolgate.person_keys k ON (k.tenant_id, k.pseudonym) = (a.tenant_id, a.detail->>'asked_by')
 WHERE a.kind = 'dispatch' ORDER BY a.audit_id;
SET ROLE toolgate_dispatcher;
SELECT count(*) AS nothing_due FROM toolgate.claim_outbox(10);
RESET ROLE;
SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE contypid = 'toolgate.audit_kind'::regtype;
