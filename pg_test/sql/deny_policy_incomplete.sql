-- Purchases are sensitive: a policy row without max_value or without a per-conversation quota
-- is BLOCKED policy_incomplete, never defaulted. A tenant with no purchase row is
-- tool_not_allowed.
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-d', 'request_purchase_part', allowed => true, roles => ARRAY['supervisor'], tier => 0);
SET ROLE toolgate_agent;
\set sup_d `${TOOLGATE_MINT:?} id shopping-d user-50 supervisor`
\set sup_b `${TOOLGATE_MINT:?} id shopping-b user-31 supervisor`
\set args '{"order_id": "743", "part_id": "B-ONLY", "quantity": 1, "cost_center": "CC-OBRAS", "idempotency_key": "incomplete-743-a"}'
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup_d', 'conv-incomplete', :'args') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup_b', 'conv-incomplete', :'args') r;
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-d', 'request_purchase_part', allowed => true, roles => ARRAY['supervisor'],
                           tier => 0, max_value => 100);
SET ROLE toolgate_agent;
SELECT r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup_d', 'conv-incomplete', :'args') r;
RESET ROLE;
SELECT tenant_id, detail FROM toolgate.audit WHERE rule IN ('policy_incomplete', 'tool_not_allowed')
   AND conversation_id = 'conv-incomplete' ORDER BY audit_id;
