-- State comes from the ERP, never from the arguments: an order must be open and inspected to be
-- closed.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.request_close(:'sup', 'conv-state', '{"order_id": "744", "reason": "Inspeção validada", "idempotency_key": "state-744-a"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.request_close(:'sup', 'conv-state', '{"order_id": "745", "reason": "Inspeção validada", "idempotency_key": "state-745-a"}') r;
RESET ROLE;
SELECT target, detail FROM toolgate.audit WHERE rule = 'state_not_allowed' ORDER BY audit_id;
