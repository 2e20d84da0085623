-- The auditor's questions the docs ask are each answered by an index of the audit, not a read of
-- the whole table. Sequential and bitmap scans are turned off: on a few rows the planner rightly
-- reads the table, and the question is which index it can use. audit_log reads each row's person
-- back through person_keys: in a tenant of a thousand people, each looked up by its pseudonym
-- (the index condition names it), not by reading the tenant's keys. Each plan is shown as the
-- scans it makes (the plan's text differs between PostgreSQL versions; its scans do not).
INSERT INTO toolgate.person_keys (tenant_id, person, key, pseudonym)
SELECT 'shopping-a', 'person-' || n, pg_catalog.sha256(n::text::bytea), 'p:indexes-' || n
  FROM generate_series(1, 1000) n;
ANALYZE toolgate.person_keys;
CREATE FUNCTION pg_temp.scans(query text) RETURNS TABLE (scan text, relation text, index text, by_pseudonym boolean)
LANGUAGE plpgsql AS $$
DECLARE
    plan jsonb;
BEGIN
    EXECUTE 'EXPLAIN (COSTS OFF, FORMAT JSON) ' || query INTO plan;
    RETURN QUERY
    WITH RECURSIVE node(n) AS (SELECT plan->0->'Plan'
                               UNION ALL SELECT c FROM node, jsonb_array_elements(n->'Plans') c)
    SELECT n->>'Node Type', n->>'Relation Name', n->>'Index Name', (n->>'Index Cond') LIKE '%pseudonym%'
      FROM node WHERE n ? 'Relation Name' ORDER BY 2, 3, 1;
END
$$;
SET ROLE toolgate_auditor;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
-- What one tool did in a tenant over a time window (audit_tenant_tool_at).
SELECT * FROM pg_temp.scans($$
SELECT at, actor, target, outcome, rule FROM toolgate.audit_log
 WHERE tenant_id = 'shopping-a' AND tool = 'purchase_part'
   AND at >= '2026-11-01 00:00+00' AND at < '2026-12-01 00:00+00'
 ORDER BY at$$);
-- What a tenant did over a time window (audit_tenant_at).
SELECT * FROM pg_temp.scans($$
SELECT at, tool, actor, target, outcome, rule FROM toolgate.audit_log
 WHERE tenant_id = 'shopping-a' AND at >= '2026-11-01 00:00+00' AND at < '2026-12-01 00:00+00'
 ORDER BY at$$);
RESET enable_bitmapscan;
RESET enable_seqscan;
RESET ROLE;
DELETE FROM toolgate.person_keys WHERE tenant_id = 'shopping-a' AND person LIKE 'person-%';
