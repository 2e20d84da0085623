-- The cost centre must belong to the tenant and have budget left: 4 × R$ 12,50 = R$ 50,00 does
-- not fit CC-PEQ's R$ 30,00. A purchase that fits reserves its total on the effect.
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-c', 'request_purchase_part', allowed => true, roles => ARRAY['supervisor'],
                           tier => 0, max_value => 500, max_calls_per_conversation => 10);
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup', 'conv-budget',
       '{"order_id": "753", "part_id": "F-200", "quantity": 4, "cost_center": "CC-PEQ", "idempotency_key": "budget-753-a"}') r;
-- Tier 0 in shopping-c: applies at once and reserves the total.
\set sup_c `${TOOLGATE_MINT:?} id shopping-c user-40 supervisor`
SELECT r->>'outcome' AS outcome, r->'result'->>'total' AS total, r->'result'->>'budget_left' AS budget_left
  FROM toolgate.request_purchase_part(:'sup_c', 'conv-budget',
       '{"order_id": "853", "part_id": "F-200", "quantity": 20, "cost_center": "CC-C", "idempotency_key": "budget-853-a"}') r;
RESET ROLE;
SELECT detail FROM toolgate.audit WHERE rule = 'budget_exceeded' ORDER BY audit_id;
SELECT tenant_id, cost_center, budget, spent FROM maintenance.cost_centers WHERE cost_center IN ('CC-PEQ', 'CC-C') ORDER BY 1;
