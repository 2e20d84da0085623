-- Retention on a cluster: purge(), on the coordinator, deletes a tenant's sealed rows past its
-- retention on the tenant's worker (the audit's append-only triggers set aside there for that
-- statement only), drops a month's partition whose every row goes, on every node, and leaves its
-- signed record beside the tenant's checkpoints; the audit still verifies across the gap, and
-- stays append-only. Months are named relative to now.
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('aged', 'Aged');
RESET ROLE;
-- The month of four years ago has its partition (made as audit_partitions made it then); the month
-- of three years ago has none (its rows are in the default partition). Rows written as the
-- superuser can, backdated: one four years ago, two three years ago, one now.
SET citus.enable_unsafe_triggers = on;
DO $$
DECLARE
    m constant timestamptz := toolgate.audit_month(now() - interval '4 years');
BEGIN
    EXECUTE format('CREATE TABLE toolgate.%I PARTITION OF toolgate.audit FOR VALUES FROM (%L) TO (%L)',
                   'audit_' || to_char(m AT TIME ZONE 'UTC', 'YYYY_MM'), m,
                   toolgate.audit_month(m + interval '40 days'));
    EXECUTE format('CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON toolgate.%I '
                   'FOR EACH STATEMENT EXECUTE FUNCTION toolgate.audit_is_append_only()',
                   'audit_' || to_char(m AT TIME ZONE 'UTC', 'YYYY_MM'));
END
$$;
RESET citus.enable_unsafe_triggers;
INSERT INTO toolgate.audit (at, kind, tenant_id, tool, outcome, duration_us)
VALUES (toolgate.audit_month(now() - interval '4 years') + interval '1 day', 'call', 'aged', 'request_close', 'SUCCEEDED', 1),
       (toolgate.audit_month(now() - interval '3 years') + interval '1 day', 'call', 'aged', 'request_close', 'SUCCEEDED', 2),
       (toolgate.audit_month(now() - interval '3 years') + interval '2 days', 'call', 'aged', 'request_close', 'BLOCKED', 3),
       (now() - interval '1 minute', 'call', 'aged', 'request_close', 'SUCCEEDED', 4);
SELECT tenant_id, checkpoint, sealed_rows FROM toolgate.tenant_seal('aged', batch => 1, margin => '0');
SET ROLE toolgate_admin;
SELECT toolgate.set_retention('aged', '1 year');
RESET ROLE;
-- Checkpoints 1 and 2 are past a year: the month of four years ago is dropped whole, the first
-- row of three years ago deleted on the tenant's worker; the record is on that worker too. In
-- the purge's own transaction, after it, the audit is append-only again there.
BEGIN;
SET ROLE toolgate_operator;
SELECT * FROM toolgate.purge('aged');
RESET ROLE;
DO $$
BEGIN
    DELETE FROM toolgate.audit WHERE tenant_id = 'aged';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'refused: %', regexp_replace(SQLERRM, 'audit_[0-9]+', 'audit');
END
$$;
COMMIT;
SET ROLE toolgate_operator;
SELECT * FROM toolgate.purge('aged');
RESET ROLE;
SELECT count(*) AS four_years_ago FROM toolgate.audit_months() m
 WHERE toolgate.audit_month(m.ends - interval '1 day') = toolgate.audit_month(now() - interval '4 years');
SELECT duration_us FROM toolgate.audit WHERE tenant_id = 'aged' ORDER BY at;
SELECT (SELECT nodeport FROM pg_dist_shard_placement
         WHERE shardid = get_shard_id_for_distribution_column('toolgate.audit_purges', 'aged'))
     = (SELECT nodeport FROM pg_dist_shard_placement
         WHERE shardid = get_shard_id_for_distribution_column('toolgate.audit', 'aged')) AS record_with_its_audit;
SELECT checkpoint, status, regexp_replace(detail, ' \(before .*', '') AS detail FROM toolgate.verify_audit('aged');
-- And so it stays.
DO $$
BEGIN
    DELETE FROM toolgate.audit WHERE tenant_id = 'aged';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'refused: %', regexp_replace(SQLERRM, 'audit_[0-9]+', 'audit');
END
$$;
SELECT count(*) AS aged_rows FROM toolgate.audit WHERE tenant_id = 'aged';
SET ROLE toolgate_admin;
SELECT toolgate.set_retention('aged', NULL);
RESET ROLE;
