-- The layout of a Citus cluster, after 00_setup built seed 000's ERP and fixture on the
-- coordinator as on one node: seed 001's ERP too, then toolgate.distribute() and the ERPs' tables
-- distributed by tenant, co-located with the gate's.
ALTER DATABASE toolgate_citus RESET citus.enable_ddl_propagation;
SET client_min_messages = warning;
SET citus.enable_ddl_propagation = off;
\getenv root TOOLGATE_ROOT
\set ECHO none
\o /dev/null
\i :root/examples/refunds/refunds.sql
\o
\set ECHO all
\set pk `${TOOLGATE_MINT:?} key idp-acme`
SELECT toolgate.add_key('acme', 'idp-acme', 'identity', :'pk');
\set pk `${TOOLGATE_MINT:?} key idp-bravo`
SELECT toolgate.add_key('bravo', 'idp-bravo', 'identity', :'pk');
SET citus.enable_ddl_propagation = on;
-- What the examples granted on the extension's functions (their row-level security calls
-- toolgate.current_tenant()), granted on the workers too: Citus does not carry a grant on an
-- extension's function.
SELECT success FROM run_command_on_workers($$
    SET citus.enable_ddl_propagation = off;
    GRANT USAGE ON SCHEMA toolgate TO maintenance_owner, refunds_owner;
    GRANT EXECUTE ON FUNCTION toolgate.current_tenant() TO maintenance_owner, refunds_owner;
    GRANT EXECUTE ON FUNCTION toolgate.current_actor() TO refunds_owner$$);

-- The layout, the ERPs' tables with it.
SELECT * FROM toolgate.distribute(ARRAY['maintenance.work_orders', 'maintenance.parts', 'maintenance.cost_centers',
                                        'maintenance.purchases', 'maintenance.close_requests', 'refunds.pedidos',
                                        'refunds.reembolsos', 'refunds.assinaturas']);
-- The examples revoked EXECUTE from PUBLIC on their functions; now that the functions are on
-- every node, the revocation is carried there too (the gate refuses a bound function PUBLIC may
-- execute: without this, every call is BLOCKED tool_misconfigured on the workers).
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA maintenance, refunds FROM PUBLIC;

-- Where things are: every tenant table co-located with the ledger, the configuration on every node.
-- (The audit's monthly partitions, named by the month, are citus_seal's.)
SELECT logicalrelid::text AS relation, CASE partmethod WHEN 'h' THEN 'hash' WHEN 'n' THEN 'reference' END AS method,
       CASE WHEN partmethod = 'h' THEN colocationid = (SELECT colocationid FROM pg_dist_partition
                                                       WHERE logicalrelid = 'toolgate.ledger'::regclass) END AS with_ledger
  FROM pg_dist_partition
 WHERE logicalrelid NOT IN (SELECT m.partition FROM toolgate.audit_months() m)
 ORDER BY partmethod, 1;
-- The tenants of both examples, spread over both workers.
SELECT t.tenant_id, dense_rank() OVER (ORDER BY s.nodeport) AS worker
  FROM toolgate.tenants t,
       LATERAL (SELECT nodeport FROM pg_dist_shard_placement
                 WHERE shardid = get_shard_id_for_distribution_column('toolgate.ledger', t.tenant_id)) s
 ORDER BY t.tenant_id;
-- What the workers hold: the configuration rows, the functions the tools are bound to, without
-- EXECUTE for PUBLIC, and the ERPs' row-level security on every shard.
SELECT result AS tenants_on_each_worker FROM run_command_on_workers($$SELECT count(*) FROM toolgate.tenants$$);
SELECT result AS bound_functions_public_cannot_run FROM run_command_on_workers($$
    SELECT count(*) FILTER (WHERE NOT has_function_privilege('public', f::regprocedure, 'EXECUTE'))
      FROM toolgate.tool_bindings b, unnest(ARRAY[b.target, b.value, b.effect, b.reader]) f WHERE f IS NOT NULL$$);
SELECT result AS shards_without_row_security FROM run_command_on_workers($$
    SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname IN ('maintenance', 'refunds') AND c.relkind = 'r' AND c.relname ~ '_[0-9]+$'
       AND NOT (c.relrowsecurity AND c.relforcerowsecurity)$$);
