-- Seed 001's order of checks: allowlist first, value second, quota last. The two cheap denials
-- leave the conversation's counter untouched; then exactly the quota (3) is admitted.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
\set sup_b `${TOOLGATE_MINT:?} id shopping-b user-31 supervisor`
-- Not on shopping-b's allowlist (no purchase row).
SELECT r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup_b', 'c1',
       '{"order_id": "743", "part_id": "F-200", "quantity": 1, "cost_center": "CC-OBRAS", "idempotency_key": "seed001-b-1"}') r;
-- Over shopping-a's value limit.
SELECT r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup', 'c1',
       '{"order_id": "753", "part_id": "B42-MOTOR", "quantity": 2, "cost_center": "CC-MANUT", "idempotency_key": "seed001-a-1"}') r;
RESET ROLE;
SELECT count(*) AS counter_rows FROM toolgate.quota_usage WHERE conversation_id = 'c1';
SET ROLE toolgate_agent;
SELECT i, r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule
  FROM generate_series(1, 4) i,
       toolgate.request_purchase_part(:'sup', 'c1', jsonb_build_object('order_id', '753', 'part_id', 'F-200',
           'quantity', 1, 'cost_center', 'CC-MANUT', 'idempotency_key', 'seed001-a-ok-' || i)) r
 ORDER BY i;
RESET ROLE;
SELECT tenant_id, conversation_id, tool, used FROM toolgate.quota_usage WHERE conversation_id = 'c1';
