-- Erasure of a person on a cluster: distribute() gives the persons' keys and the erasures the
-- layout of the tenant's other rows; the calls made on each tenant's worker named their actors by
-- pseudonyms made there, beside the audit; erase_actor, run on the coordinator, destroys one
-- person's key on their tenant's worker, and the audit, sealed before, still verifies.
SELECT logicalrelid::text AS relation, partmethod,
       colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'toolgate.ledger'::regclass)
           AS with_the_ledger
  FROM pg_dist_partition
 WHERE logicalrelid::text IN ('toolgate.person_keys', 'toolgate.erasures') ORDER BY 1;
-- No row of the audit names anyone by their subject; auditors read user-17 back on the coordinator.
SELECT count(*) FILTER (WHERE a.actor = 'user-17') AS in_clear, count(*) FILTER (WHERE a.actor ~ '^p:') > 0 AS pseudonyms
  FROM toolgate.audit a WHERE a.tenant_id = 'shopping-a' AND a.kind <> 'dispatch';
SELECT count(*) > 0 AS read_back FROM toolgate.audit_log WHERE tenant_id = 'shopping-a' AND actor = 'user-17';
-- The key of shopping-a's user-17 is on the worker that holds shopping-a's audit.
SELECT (SELECT nodeport FROM pg_dist_shard_placement
         WHERE shardid = get_shard_id_for_distribution_column('toolgate.person_keys', 'shopping-a'))
     = (SELECT nodeport FROM pg_dist_shard_placement
         WHERE shardid = get_shard_id_for_distribution_column('toolgate.audit', 'shopping-a')) AS with_its_audit;
SET ROLE toolgate_admin;
SELECT erased, audit_rows > 0 AS audit_rows FROM toolgate.erase_actor('shopping-a', 'user-17');
RESET ROLE;
SELECT count(*) AS read_back FROM toolgate.audit_log WHERE tenant_id = 'shopping-a' AND actor = 'user-17';
SELECT count(*) AS ledger_naming_them FROM toolgate.ledger WHERE tenant_id = 'shopping-a' AND actor = 'user-17';
SELECT v.status, count(*) > 0 AS some FROM toolgate.verify_audit('shopping-a') v GROUP BY 1 ORDER BY 1;
