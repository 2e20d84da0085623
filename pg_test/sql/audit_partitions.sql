-- The audit partitioned by month (docs/audit.md#partitions), in a tenant of its own. Rows of a
-- month without a partition wait in the default one; audit_partitions() makes this month's and
-- the next two months' partitions and each month's whose rows wait, moving them there, the months
-- in UTC whatever the session's time zone; a window of one month reads that month's partition
-- alone; each partition is append-only; purge() drops a month whole when every row of it is past
-- retention and deletes the rows of a month it cannot drop; bad input; who may. Names of months
-- depend on today: each is shown as what it is relative to now.
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('part', 'Partitions');
RESET ROLE;
-- One row early in the month of four years ago, two early in the month of three years ago (and
-- one of another tenant's there), two early in the month of two years ago, and two of now
-- (written as the superuser can, backdated): every one in the default partition.
INSERT INTO toolgate.audit (at, kind, tenant_id, tool, outcome, duration_us)
SELECT toolgate.audit_month(now() - interval '4 years') + interval '1 day', 'call', 'part', 'request_close', 'SUCCEEDED', 0
UNION ALL
SELECT toolgate.audit_month(now() - interval '3 years') + interval '1 day' + n * interval '1 second',
       'call', 'part', 'request_close', 'SUCCEEDED', n
  FROM generate_series(1, 2) n
UNION ALL
SELECT toolgate.audit_month(now() - interval '3 years') + interval '2 days', 'call', 'other', 'request_close', 'BLOCKED', 99
UNION ALL
SELECT toolgate.audit_month(now() - interval '2 years') + n * interval '1 day', 'call', 'part', 'request_close', 'BLOCKED', 10 + n
  FROM generate_series(1, 2) n
UNION ALL
SELECT now() - n * interval '1 second', 'call', 'part', 'request_close', 'SUCCEEDED', 20 + n
  FROM generate_series(1, 2) n;
SELECT tableoid::regclass AS partition, count(*) FROM toolgate.audit WHERE tenant_id IN ('part', 'other') GROUP BY 1;

-- Bad input; the agent and the auditor may not make partitions.
SELECT * FROM toolgate.audit_partitions(-1);
SELECT * FROM toolgate.audit_partitions(25);
SELECT * FROM toolgate.audit_partitions(NULL);
SET ROLE toolgate_agent;
SELECT * FROM toolgate.audit_partitions();
SET ROLE toolgate_auditor;
SELECT * FROM toolgate.audit_partitions();
RESET ROLE;

-- On-call's scheduler makes them, in a session whose time zone is not UTC: the default partition
-- is left empty, each row is in the partition of its month in UTC, whose bounds are that month's,
-- and this month and the next two have one. A second run makes nothing.
SET TimeZone = 'America/Sao_Paulo';
SET ROLE toolgate_operator;
CREATE TEMP TABLE made AS SELECT * FROM toolgate.audit_partitions();
RESET ROLE;
SELECT count(*) AS rows_left_in_default FROM toolgate.audit_default;
SELECT bool_and(tableoid::regclass::text = 'toolgate.audit_' || to_char(at AT TIME ZONE 'UTC', 'YYYY_MM')) AS each_in_its_month,
       count(*) AS part_rows
  FROM toolgate.audit WHERE tenant_id IN ('part', 'other');
SELECT bool_and(m.ends = toolgate.audit_month(m.ends)
                AND m.partition::text = 'toolgate.audit_' || to_char((m.ends - interval '1 day') AT TIME ZONE 'UTC', 'YYYY_MM')
                AND pg_get_expr(c.relpartbound, c.oid) = format('FOR VALUES FROM (%L) TO (%L)',
                        toolgate.audit_month(m.ends - interval '1 day'), m.ends)) AS bounds_are_months
  FROM toolgate.audit_months() m JOIN pg_class c ON c.oid = m.partition;
-- The partitions of the months four, three and two years ago (each counted again after the purge).
CREATE TEMP VIEW old_months AS
SELECT count(*) FILTER (WHERE toolgate.audit_month(ends - interval '1 day') = toolgate.audit_month(now() - interval '4 years'))
           AS four_years_ago,
       count(*) FILTER (WHERE toolgate.audit_month(ends - interval '1 day') = toolgate.audit_month(now() - interval '3 years'))
           AS three_years_ago,
       count(*) FILTER (WHERE toolgate.audit_month(ends - interval '1 day') = toolgate.audit_month(now() - interval '2 years'))
           AS two_years_ago
  FROM toolgate.audit_months();
SELECT (SELECT count(*) FROM toolgate.audit_months() WHERE ends > toolgate.audit_month(now())) AS from_this_month_on, *
  FROM old_months;
SELECT sum(moved_rows) = (SELECT count(*) FROM toolgate.audit) AS every_row_moved FROM made;
SELECT count(*) AS made_again FROM toolgate.audit_partitions();
RESET TimeZone;

-- A window of one month reads that month's partition alone (neither the default nor another).
SELECT toolgate.audit_month(now()) AS month_starts, toolgate.audit_month(toolgate.audit_month(now()) + interval '40 days') AS month_ends
\gset
SET ROLE toolgate_auditor;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
CREATE FUNCTION pg_temp.relations(query text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    plan jsonb;
BEGIN
    EXECUTE 'EXPLAIN (COSTS OFF, FORMAT JSON) ' || query INTO plan;
    RETURN QUERY
    WITH RECURSIVE node(n) AS (SELECT plan->0->'Plan' UNION ALL SELECT c FROM node, jsonb_array_elements(n->'Plans') c)
    SELECT DISTINCT n->>'Relation Name' FROM node WHERE n ? 'Relation Name' AND n->>'Relation Name' LIKE 'audit%';
END
$$;
SELECT relation = 'audit_' || to_char(now() AT TIME ZONE 'UTC', 'YYYY_MM') AS this_months_alone
  FROM pg_temp.relations(format($$SELECT at, tool, outcome FROM toolgate.audit_log
                                  WHERE tenant_id = 'part' AND at >= %L AND at < %L$$, :'month_starts', :'month_ends')) relation;
RESET enable_bitmapscan;
RESET enable_seqscan;
RESET ROLE;

-- Each partition is append-only, as the audit is, even to the superuser (what verify_audit
-- catches past that is docs/audit.md's).
CREATE FUNCTION pg_temp.refused(statement text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'done';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || regexp_replace(SQLERRM, 'audit_[0-9]{4}_[0-9]{2}', 'audit_YYYY_MM');
END
$$;
SELECT pg_temp.refused(format('%s %s %s', verb, (SELECT partition FROM toolgate.audit_months() ORDER BY ends LIMIT 1), rest))
  FROM (VALUES ('TRUNCATE', ''), ('DELETE FROM', ''), ('UPDATE', 'SET outcome = ''BLOCKED''')) v(verb, rest);
SELECT pg_temp.refused('TRUNCATE toolgate.audit_default');

-- Sealed four to a checkpoint, kept a year, purged: checkpoint 1 holds the rows of four and
-- three years ago and the first of two years ago, and ends at the second. The month of four years
-- ago is dropped whole; that of three years ago is not (another tenant's row is in it, kept), nor
-- that of two years ago (its second row is in checkpoint 2, which ends now): their rows of
-- checkpoint 1 are deleted. The record counts both; the audit verifies, its first checkpoint
-- purged; the other tenant's row is still there.
SELECT checkpoint, sealed_rows FROM toolgate.seal('part', batch => 4);
SET ROLE toolgate_admin;
SELECT toolgate.set_retention('part', '1 year');
RESET ROLE;
SET ROLE toolgate_operator;
SELECT * FROM toolgate.purge('part');
RESET ROLE;
SELECT * FROM old_months;
SELECT tenant_id, duration_us FROM toolgate.audit WHERE tenant_id IN ('part', 'other') ORDER BY at;
SELECT checkpoint, status, regexp_replace(detail, ' \(before .*', '') AS detail FROM toolgate.verify_audit('part');
SET ROLE toolgate_admin;
SELECT toolgate.set_retention('part', NULL);
RESET ROLE;
