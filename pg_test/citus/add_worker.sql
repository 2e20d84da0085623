-- A worker added after toolgate.distribute(): the sequence docs/scale-out.md gives ("A worker
-- added later"), with the examples' ERP owners; scripts/citus.sh runs it on the coordinator, as
-- a superuser, while clients call (psql variables host and port: the new node, already running
-- with Citus created in the database).
-- Citus moves a table's shards over connections it opens as the table's owner: the ERPs' owners
-- may log in, with no password (pg_hba.conf lets them in from the cluster's nodes only). Once,
-- before the first move; harmless again.
ALTER ROLE maintenance_owner LOGIN;
ALTER ROLE refunds_owner LOGIN;
SELECT citus_add_node(:'host', :port) > 0 AS added;
-- What the ERPs' owners need of the extension (their row-level security calls
-- toolgate.current_tenant()), on the new worker too: Citus does not carry a grant on an
-- extension's function. Run on every worker; granting again is harmless.
SELECT bool_and(success) AS granted FROM run_command_on_workers($$
    SET citus.enable_ddl_propagation = off;
    GRANT USAGE ON SCHEMA toolgate TO maintenance_owner, refunds_owner;
    GRANT EXECUTE ON FUNCTION toolgate.current_tenant() TO maintenance_owner, refunds_owner;
    GRANT EXECUTE ON FUNCTION toolgate.current_actor() TO refunds_owner$$);
-- The configuration copied to it, then the layout again: the bound functions made there. (Its
-- audit ids need nothing: each node draws from its own range, toolgate.node_audit_id.)
SELECT replicate_reference_tables();
SELECT count(*) > 0 AS distributed FROM toolgate.distribute();
-- Citus made the bound functions there with PUBLIC's default EXECUTE: revoked again, everywhere.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA maintenance, refunds FROM PUBLIC;
