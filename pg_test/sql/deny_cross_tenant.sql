-- Order 743 belongs to shopping-b. For shopping-a it answers exactly like an order that does not
-- exist: the same BLOCKED target_not_found, for writes and for reads.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT a = b AS indistinguishable, a->>'outcome' AS outcome, a->>'rule' AS rule
  FROM toolgate.request_close(:'sup', 'conv-cross', '{"order_id": "743", "reason": "Inspeção validada", "idempotency_key": "cross-743-a"}') a,
       toolgate.request_close(:'sup', 'conv-cross', '{"order_id": "999", "reason": "Inspeção validada", "idempotency_key": "cross-999-a"}') b;
SELECT a = b AS indistinguishable, a->>'rule' AS rule
  FROM toolgate.read_order(:'sup', '743') a, toolgate.read_order(:'sup', '999') b;
RESET ROLE;
SELECT status FROM maintenance.work_orders WHERE order_id = '743';
SELECT count(*) AS ledger_rows FROM toolgate.ledger WHERE idempotency_key LIKE 'cross-%';
