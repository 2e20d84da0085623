-- The audit's seal on a cluster: distribute() gives the checkpoints the layout of the tenant's
-- other rows, makes the seal keys a reference table and delegates tenant_seal by tenant. seal()
-- on the coordinator refuses, saying how; tenant_seal, a statement of its own, seals a tenant's
-- rows on its worker, where the checkpoints stay, and the coordinator verifies them. In a
-- transaction block Citus does not delegate it, and it refuses (docs/audit.md).
SELECT logicalrelid::text AS relation, partmethod,
       colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'toolgate.ledger'::regclass)
           AS with_the_ledger
  FROM pg_dist_partition
 WHERE logicalrelid::text IN ('toolgate.audit_checkpoints', 'toolgate.seal_keys') ORDER BY 1;
\set VERBOSITY terse
SELECT * FROM toolgate.seal();
-- (A margin of none: the scenarios before wrote their rows moments ago; by default the last
-- minute is left for a row the coordinator stamped to reach the worker.)
SELECT tenant_id, checkpoint, sealed_rows > 0 AS sealed FROM toolgate.tenant_seal('shopping-a', margin => '0');
SELECT tenant_id, checkpoint, sealed_rows > 0 AS sealed FROM toolgate.tenant_seal('shopping-c', margin => '0');
SELECT tenant_id, checkpoint FROM toolgate.tenant_seal('shopping-a', margin => '0');
SELECT tenant_id, checkpoint FROM toolgate.tenant_seal('shopping-c');
-- Each tenant's checkpoints are on the worker that holds its ledger, the two tenants on both.
SELECT t.tenant_id,
       (SELECT nodeport FROM pg_dist_shard_placement
         WHERE shardid = get_shard_id_for_distribution_column('toolgate.audit_checkpoints', t.tenant_id))
     = (SELECT nodeport FROM pg_dist_shard_placement
         WHERE shardid = get_shard_id_for_distribution_column('toolgate.ledger', t.tenant_id)) AS with_its_tenant
  FROM (VALUES ('shopping-a'), ('shopping-c')) t(tenant_id) ORDER BY 1;
SELECT count(DISTINCT p.nodeport) AS workers
  FROM (VALUES ('shopping-a'), ('shopping-c')) t(tenant_id)
  JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('toolgate.ledger', t.tenant_id);
SELECT v.status, count(*) FROM toolgate.verify_audit('shopping-a') v GROUP BY 1 ORDER BY 1;
SELECT v.status, count(*) FROM toolgate.verify_audit('shopping-c') v GROUP BY 1 ORDER BY 1;
BEGIN;
SELECT * FROM toolgate.tenant_seal('shopping-a');
ROLLBACK;
-- The audit's partitions on a cluster: distribute() made this month's and the next two, each
-- distributed with the tenant's other rows; made on the coordinator, a later month's partition
-- is distributed the same. A month whose rows are in the default partition gets none (Citus
-- cannot attach a partition that holds rows; a NOTICE names the month), and its rows stay found.
SELECT m.partition IS NOT NULL AS partitioned, p.partmethod,
       p.colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'toolgate.ledger'::regclass)
           AS with_the_ledger,
       count(*)
  FROM toolgate.audit_months() m JOIN pg_dist_partition p ON p.logicalrelid = m.partition
 GROUP BY 1, 2, 3;
SELECT count(*) AS made_again FROM toolgate.audit_partitions();
SELECT count(*) AS made_ahead FROM toolgate.audit_partitions(ahead => 3);
SELECT count(*) AS distributed_with_the_ledger
  FROM toolgate.audit_months() m JOIN pg_dist_partition p ON p.logicalrelid = m.partition
 WHERE p.colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'toolgate.ledger'::regclass);
INSERT INTO toolgate.audit (at, kind, tenant_id, tool, outcome, duration_us)
VALUES (now() - interval '5 years', 'call', '(unverified)', 'request_close', 'BLOCKED', 1);
SET client_min_messages = warning;
SELECT count(*) AS made_for_the_old_row FROM toolgate.audit_partitions();
RESET client_min_messages;
SELECT count(*) AS old_rows_in_the_default FROM toolgate.audit_default WHERE at < now() - interval '4 years';
