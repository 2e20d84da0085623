-- Only a live proposal can be confirmed: not one superseded by a newer proposal in the same
-- conversation, not an expired one, not an unknown id, not another tenant's.
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-b', 'request_close', allowed => true, roles => ARRAY['supervisor'],
                           tier => 1, confirm_ttl => interval '1 second');
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->'proposal'->>'id' AS old FROM toolgate.request_close(:'sup', 'conv-live',
       '{"order_id": "751", "reason": "Inspeção validada", "idempotency_key": "live-751-a"}') r \gset
SELECT r->'proposal'->>'id' AS new FROM toolgate.request_close(:'sup', 'conv-live',
       '{"order_id": "752", "reason": "Inspeção validada", "idempotency_key": "live-752-a"}') r \gset
\set t `${TOOLGATE_MINT:?} yes shopping-a :old sim`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'t') r;
-- Unknown proposal.
\set t `${TOOLGATE_MINT:?} yes shopping-a 00000000-0000-4000-8000-000000000000 sim`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'t') r;
-- shopping-b's proposal, confirmed from shopping-a with shopping-a's channel.
\set sup_b `${TOOLGATE_MINT:?} id shopping-b user-31 supervisor`
SELECT r->'proposal'->>'id' AS pid_b FROM toolgate.request_close(:'sup_b', 'conv-live',
       '{"order_id": "760", "reason": "Inspeção validada", "idempotency_key": "live-760-a"}') r \gset
\set t `${TOOLGATE_MINT:?} yes shopping-a :pid_b sim`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'t') r;
-- shopping-b's own proposal expires after a second.
SELECT pg_sleep(1.5);
\set t `${TOOLGATE_MINT:?} yes shopping-b :pid_b sim`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'sup_b', :'t') r;
RESET ROLE;
SELECT idempotency_key, status FROM toolgate.proposals
 WHERE idempotency_key IN ('live-751-a', 'live-752-a', 'live-760-a') ORDER BY 1;
SELECT detail->>'reason' AS reason FROM toolgate.audit WHERE rule = 'proposal_not_live' ORDER BY audit_id;
