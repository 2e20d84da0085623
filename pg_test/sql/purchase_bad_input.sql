-- Bad input to request_purchase_part: a clear outcome, nothing written but the audit row.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT q AS quantity, r->>'rule' AS rule, r->'errors'->0->>'instancePath' AS path, r->'errors'->0->>'keyword' AS keyword
  FROM unnest(ARRAY['0', '-1', '1e30', '2.5', '"3"', '101', 'null', '[3]']) AS q,
       toolgate.request_purchase_part(:'sup', 'conv-bad',
           ('{"order_id": "753", "part_id": "F-200", "cost_center": "CC-MANUT", "idempotency_key": "bad-753-a", "quantity": ' || q || '}')::jsonb) r;
-- 3.0 is the integer 3 (JSON Schema), and the same intent as 3 (RFC 8785).
SELECT r->>'outcome' AS outcome, r->'proposal'->>'tier' AS tier FROM toolgate.request_purchase_part(:'sup', 'conv-bad',
       '{"order_id": "753", "part_id": "F-200", "quantity": 3.0, "cost_center": "CC-MANUT", "idempotency_key": "bad-753-b"}') r;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.request_purchase_part(:'sup', 'conv-bad',
       '{"order_id": "753", "part_id": "F-200", "quantity": 3, "cost_center": "CC-MANUT", "idempotency_key": "bad-753-b"}') r;
-- NaN and Infinity are not JSON anywhere in the arguments.
SELECT toolgate.request_purchase_part(NULL, 'conv-bad', '{"quantity": Infinity}');
SELECT toolgate.request_purchase_part(NULL, 'conv-bad', '{"nested": {"x": NaN}}');
-- Money smuggled in as extra properties.
SELECT e->>'keyword' AS keyword, e->>'message' AS message FROM toolgate.request_purchase_part(:'sup', 'conv-bad',
       '{"order_id": "753", "part_id": "F-200", "quantity": 1, "cost_center": "CC-MANUT", "idempotency_key": "bad-753-c", "total": 0.01, "approved": true}') r,
       jsonb_array_elements(r->'errors') e;
RESET ROLE;
SELECT count(*) AS purchases FROM maintenance.purchases WHERE idempotency_key LIKE 'bad-%';
SELECT rule, count(*) FROM toolgate.audit WHERE conversation_id = 'conv-bad' GROUP BY rule ORDER BY rule NULLS LAST;
