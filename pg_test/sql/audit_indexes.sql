-- The auditor's questions the docs ask are each answered by an index of the audit, not a read of
-- the whole table. Sequential and bitmap scans are turned off: on a few rows the planner rightly
-- reads the table, and the question is which index it can use.
SET ROLE toolgate_auditor;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
-- What one tool did in a tenant over a time window (audit_tenant_tool_at).
EXPLAIN (COSTS OFF)
SELECT at, actor, target, outcome, rule FROM toolgate.audit_log
 WHERE tenant_id = 'shopping-a' AND tool = 'purchase_part'
   AND at >= '2026-11-01 00:00+00' AND at < '2026-12-01 00:00+00'
 ORDER BY at;
-- What a tenant did over a time window (audit_tenant_at).
EXPLAIN (COSTS OFF)
SELECT at, tool, actor, target, outcome, rule FROM toolgate.audit_log
 WHERE tenant_id = 'shopping-a' AND at >= '2026-11-01 00:00+00' AND at < '2026-12-01 00:00+00'
 ORDER BY at;
RESET enable_bitmapscan;
RESET enable_seqscan;
RESET ROLE;
