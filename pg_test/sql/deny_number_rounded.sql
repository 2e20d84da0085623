-- A number is judged as the caller sent it. 0.99999999999999999999 used to be read as the double
-- 1.0 before the schema saw it, and passed "type": "integer", "minimum": 1 (security review F12).
-- A number a double would round is refused before validation; one a double holds is validated.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'rule' AS rule, r->'errors'->0->>'instancePath' AS path, r->'errors'->0->>'keyword' AS keyword
  FROM toolgate.request_purchase_part(:'sup', 'conv-number', '{"order_id": "741", "part_id": "F-200",
       "quantity": 0.99999999999999999999, "cost_center": "CC-MANUT", "idempotency_key": "number-741-a"}') r;
SELECT r->>'rule' AS rule, r->'errors'->0->>'instancePath' AS path, r->'errors'->0->>'keyword' AS keyword
  FROM toolgate.request_purchase_part(:'sup', 'conv-number', '{"order_id": "741", "part_id": "F-200",
       "quantity": 0.5, "cost_center": "CC-MANUT", "idempotency_key": "number-741-b"}') r;
RESET ROLE;
SELECT count(*) AS purchases FROM maintenance.purchases WHERE idempotency_key LIKE 'number-%';
