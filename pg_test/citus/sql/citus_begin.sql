-- pg_toolgate on a Citus cluster, as a DBA lays it out (docs/scale-out.md). First the extension,
-- on the coordinator: Citus makes it on every worker.
SET client_min_messages = warning;
CREATE EXTENSION pg_toolgate;
SELECT w.result = e.extversion AS at_the_coordinators_version_on_each_worker
  FROM run_command_on_workers($$SELECT extversion FROM pg_extension WHERE extname = 'pg_toolgate'$$) w,
       pg_extension e WHERE e.extname = 'pg_toolgate';
-- The layout keeps a copy of the configuration on the coordinator: refused, and said so, until the
-- coordinator is registered in Citus's metadata.
SELECT * FROM toolgate.distribute();
\getenv cport PGPORT
SELECT citus_set_coordinator_host('127.0.0.1', :cport);
-- The ERPs' owners and the application's login, made before the examples: Citus makes a role on
-- every node, and a role made inside an example's transaction would not be there yet.
CREATE ROLE maintenance_owner NOLOGIN;
CREATE ROLE refunds_owner NOLOGIN;
CREATE ROLE toolgate_citus_app LOGIN;
GRANT toolgate_agent TO toolgate_citus_app;
SELECT result AS app_on_each_worker FROM run_command_on_workers($$SELECT pg_has_role('toolgate_citus_app', 'toolgate_agent', 'MEMBER')$$);
CREATE ROLE toolgate_citus_approver LOGIN;
GRANT toolgate_approver TO toolgate_citus_approver;
-- Then the examples and seed 000's fixture as they are (00_setup, the single-node suite's own set-up),
-- with Citus's propagation of DDL off: they create their functions as their NOLOGIN owners, whom
-- Citus could not log in as on the workers. distribute() puts the bound functions on every node
-- afterwards, create_distributed_table the tables (citus_setup).
ALTER DATABASE toolgate_citus SET citus.enable_ddl_propagation = off;
