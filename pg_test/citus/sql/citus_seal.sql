-- The audit's seal on a cluster: distribute() gives the checkpoints the layout of the tenant's
-- other rows and makes the seal keys a reference table; sealing itself does not run on a cluster
-- yet, and says so (docs/audit.md).
SELECT logicalrelid::text AS relation, partmethod,
       colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'toolgate.ledger'::regclass)
           AS with_the_ledger
  FROM pg_dist_partition
 WHERE logicalrelid::text IN ('toolgate.audit_checkpoints', 'toolgate.seal_keys') ORDER BY 1;
\set VERBOSITY terse
SELECT * FROM toolgate.seal();
SELECT count(*) AS checkpoints FROM toolgate.audit_checkpoints;
