-- explain_call is a dry run for the DBA: which step would decide and why. It changes nothing:
-- no audit row, no quota, no ledger row, no proposal.
\set VERBOSITY terse
\set sup `${TOOLGATE_MINT:?} id shopping-c user-40 supervisor`
\set sup_a `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT count(*) AS audit_before FROM toolgate.audit \gset
SET ROLE toolgate_admin;
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule, coalesce(r->>'decided_by', '-') AS decided_by,
       jsonb_path_query_array(r, '$.steps[*].step') AS steps
  FROM toolgate.explain_call(:'sup', 'request_close', 'conv-explain',
       '{"order_id": "805", "reason": "Inspeção validada", "idempotency_key": "explain-805-a"}') r;
SELECT r->>'rule' AS rule, r->>'decided_by' AS decided_by, r->'steps'->-1 AS last_step
  FROM toolgate.explain_call(:'sup_a', 'request_close', 'conv-explain',
       '{"order_id": "744", "reason": "Inspeção validada", "idempotency_key": "explain-744-a"}') r;
SELECT r->>'outcome' AS outcome, r->'steps'->-1 AS last_step
  FROM toolgate.explain_call(:'sup_a', 'request_close', 'conv-explain',
       '{"order_id": "742", "reason": "Inspeção validada", "idempotency_key": "explain-742-a"}') r;
SELECT r->>'rule' AS rule, r->>'decided_by' AS decided_by
  FROM toolgate.explain_call('garbage', 'request_close', 'conv-explain', '{}') r;
-- A purchase: each step's verdict with the arithmetic, the budget, the quota left and the tier.
SELECT jsonb_pretty(r->'steps') FROM toolgate.explain_call(:'sup_a', 'request_purchase_part', 'conv-explain',
       '{"order_id": "753", "part_id": "F-200", "quantity": 9, "cost_center": "CC-MANUT", "idempotency_key": "explain-753-a"}') r;
SELECT r->>'rule' AS rule, r->'steps'->-1->'detail' AS detail FROM toolgate.explain_call(:'sup_a', 'request_purchase_part', 'conv-explain',
       '{"order_id": "753", "part_id": "F-200", "quantity": 4, "cost_center": "CC-PEQ", "idempotency_key": "explain-753-b"}') r;
RESET ROLE;
SELECT count(*) - :audit_before AS new_audit_rows FROM toolgate.audit;
SELECT count(*) AS ledger_rows FROM toolgate.ledger WHERE idempotency_key LIKE 'explain-%';
SELECT count(*) AS proposals FROM toolgate.proposals WHERE idempotency_key LIKE 'explain-%';
SELECT count(*) AS quota_rows FROM toolgate.quota_usage WHERE conversation_id = 'conv-explain';
SELECT status FROM maintenance.work_orders WHERE tenant_id = 'shopping-c' AND order_id = '805';
