-- Limits over time on a cluster: the limit rows and their history are reference tables (a copy on
-- every node, read by every call like the policy rows), the counters are distributed with the
-- tenant's other rows: a call consumes its limits on its tenant's worker, refused there with when
-- the limit frees up, and nothing leaves that worker.
SELECT logicalrelid::text AS relation, partmethod,
       colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'toolgate.ledger'::regclass)
           AS with_the_ledger
  FROM pg_dist_partition
 WHERE logicalrelid::text IN ('toolgate.limits', 'toolgate.limit_history', 'toolgate.limit_usage') ORDER BY 1;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected, note) VALUES
    ('shopping-c', '870', 'open', true, ''), ('shopping-c', '871', 'open', true, '');
SET ROLE toolgate_admin;
SELECT toolgate.set_limit('shopping-c', 'closes-per-hour', max => 1, rolling => '1 hour', tool => 'request_close')
    AS version;
SELECT toolgate.set_limit('shopping-c', 'calls-per-day', max => 100, calendar => 'day', per_actor => true) AS version;
RESET ROLE;
-- (citus_config revoked shopping-c's first identity key: a key of its own here.)
\set pk `${TOOLGATE_MINT:?} key idp-shopping-c-limits`
SELECT toolgate.add_key('shopping-c', 'idp-shopping-c-limits', 'identity', :'pk') IS NULL AS added;
SET SESSION AUTHORIZATION toolgate_citus_app;
\set supc `${TOOLGATE_MINT:?} idkey idp-shopping-c-limits shopping-c user-40 supervisor`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.tenant_call('shopping-c', :'supc', 'citus-limits', 'request_close',
       '{"order_id": "870", "reason": "Inspeção validada", "idempotency_key": "citus-limits-870"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->'result'->>'limit' AS limit,
       (r->'result'->>'retry_after')::int BETWEEN 3540 AND 3660 AS retry_in_the_hour
  FROM toolgate.tenant_call('shopping-c', :'supc', 'citus-limits', 'request_close',
       '{"order_id": "871", "reason": "Inspeção validada", "idempotency_key": "citus-limits-871"}') r;
RESET SESSION AUTHORIZATION;
-- The counter's rows are on the worker that holds shopping-c's ledger, and both calls ran there.
SELECT (SELECT nodeport FROM pg_dist_shard_placement
         WHERE shardid = get_shard_id_for_distribution_column('toolgate.limit_usage', 'shopping-c'))
     = (SELECT nodeport FROM pg_dist_shard_placement
         WHERE shardid = get_shard_id_for_distribution_column('toolgate.ledger', 'shopping-c')) AS with_its_tenant;
SELECT name, subject, used FROM toolgate.limits_usage('shopping-c');
SELECT order_id, status FROM maintenance.work_orders WHERE tenant_id = 'shopping-c' AND order_id IN ('870', '871')
 ORDER BY 1;
SET ROLE toolgate_admin;
SELECT toolgate.drop_limit('shopping-c', 'closes-per-hour') AS dropped, toolgate.drop_limit('shopping-c', 'calls-per-day') AS also;
RESET ROLE;
