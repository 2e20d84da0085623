-- The value is quantity × the catalogue's unit price, in exact decimals, never an argument:
-- over the policy's max_value, or a quantity over the part's own limit, is BLOCKED
-- value_over_limit, and consumes no quota.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
-- 2 × R$ 480,00 = R$ 960,00 > R$ 900,00.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup', 'conv-value',
       '{"order_id": "753", "part_id": "B42-MOTOR", "quantity": 2, "cost_center": "CC-MANUT", "idempotency_key": "value-753-a"}') r;
-- 3 motors: more than the part allows per purchase (2), whatever the value.
SELECT r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup', 'conv-value',
       '{"order_id": "753", "part_id": "B42-MOTOR", "quantity": 3, "cost_center": "CC-MANUT", "idempotency_key": "value-753-b"}') r;
-- A price smuggled into the arguments is an unknown property, not a discount.
SELECT r->>'rule' AS rule, r->'errors'->0->>'keyword' AS keyword FROM toolgate.request_purchase_part(:'sup', 'conv-value',
       '{"order_id": "753", "part_id": "B42-MOTOR", "quantity": 2, "cost_center": "CC-MANUT", "idempotency_key": "value-753-c", "unit_price": 0.01}') r;
RESET ROLE;
SELECT detail FROM toolgate.audit WHERE rule = 'value_over_limit' ORDER BY audit_id;
SELECT count(*) AS quota_rows FROM toolgate.quota_usage WHERE conversation_id = 'conv-value';
SELECT count(*) AS purchases FROM maintenance.purchases WHERE idempotency_key LIKE 'value-%';
