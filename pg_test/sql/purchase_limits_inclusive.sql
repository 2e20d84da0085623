-- The limits are inclusive: a purchase whose catalogue total is exactly the policy's max_value and
-- exactly what its cost centre has left is admitted; one centavo more would not be. The next
-- purchase finds nothing left.
\set VERBOSITY terse
INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget)
    VALUES ('shopping-c', 'CC-EXATO', 'Orçamento exato', 25.00);
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-c', 'request_purchase_part', allowed => true, roles => ARRAY['supervisor'],
                           tier => 0, max_value => 25.00, max_calls_per_conversation => 5) > 0 AS set;
SET ROLE toolgate_agent;
\set sup_c `${TOOLGATE_MINT:?} id shopping-c user-70 supervisor`
-- 2 × F-200 at R$ 12,50: R$ 25,00, the limit and the budget exactly.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->'result'->>'total' AS total, r->'result'->>'budget_left' AS left
  FROM toolgate.request_purchase_part(:'sup_c', 'conv-exact',
       '{"order_id": "805", "part_id": "F-200", "quantity": 2, "cost_center": "CC-EXATO", "idempotency_key": "exact-805-a"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.request_purchase_part(:'sup_c', 'conv-exact',
       '{"order_id": "805", "part_id": "F-200", "quantity": 1, "cost_center": "CC-EXATO", "idempotency_key": "exact-805-b"}') r;
RESET ROLE;
SELECT budget, spent FROM maintenance.cost_centers WHERE tenant_id = 'shopping-c' AND cost_center = 'CC-EXATO';
