-- Another tenant's order, part or cost centre is exactly as missing as one that does not exist:
-- BLOCKED target_not_found, and the reply does not say which.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup', 'conv-target',
       '{"order_id": "743", "part_id": "F-200", "quantity": 1, "cost_center": "CC-MANUT", "idempotency_key": "target-743-a"}') r;
SELECT r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup', 'conv-target',
       '{"order_id": "753", "part_id": "B-ONLY", "quantity": 1, "cost_center": "CC-MANUT", "idempotency_key": "target-753-a"}') r;
SELECT r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup', 'conv-target',
       '{"order_id": "753", "part_id": "F-200", "quantity": 1, "cost_center": "CC-OBRAS", "idempotency_key": "target-753-b"}') r;
SELECT r->>'rule' AS rule FROM toolgate.request_purchase_part(:'sup', 'conv-target',
       '{"order_id": "753", "part_id": "NO-SUCH-PART", "quantity": 1, "cost_center": "CC-MANUT", "idempotency_key": "target-753-c"}') r;
SELECT count(DISTINCT r::text) AS distinct_replies
  FROM unnest(ARRAY['743:F-200:CC-MANUT', '753:B-ONLY:CC-MANUT', '753:F-200:CC-OBRAS', '753:NO-SUCH-PART:CC-MANUT']) WITH ORDINALITY AS t(x, i),
       toolgate.request_purchase_part(:'sup', 'conv-target', jsonb_build_object(
           'order_id', split_part(x, ':', 1), 'part_id', split_part(x, ':', 2), 'quantity', 1,
           'cost_center', split_part(x, ':', 3), 'idempotency_key', 'target-distinct-' || i)) r;
-- A closed order takes no purchase.
SELECT r->>'rule' AS rule, r->>'outcome' AS outcome FROM toolgate.request_purchase_part(:'sup', 'conv-target',
       '{"order_id": "745", "part_id": "F-200", "quantity": 1, "cost_center": "CC-MANUT", "idempotency_key": "target-745-a"}') r;
RESET ROLE;
SELECT count(*) AS purchases FROM maintenance.purchases WHERE idempotency_key LIKE 'target-%';
SELECT count(*) AS quota_rows FROM toolgate.quota_usage WHERE conversation_id = 'conv-target';
