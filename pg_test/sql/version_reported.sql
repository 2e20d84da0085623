-- toolgate.version(): the extension version this database runs, the library file its C functions
-- call (each version's library is a file of its own, pg_toolgate-VERSION), and whether that is
-- the version's own. Whoever looks after the database may call it; the agent may not.
\set VERBOSITY terse
SELECT v->>'extension' = e.extversion AS extension_matches,
       v->>'library' = 'pg_toolgate-' || e.extversion AS library_is_versioned,
       v->>'library_current' AS library_current
  FROM toolgate.version() v, pg_catalog.pg_extension e WHERE e.extname = 'pg_toolgate';
-- Every C function of the extension calls that one library.
SELECT count(DISTINCT p.probin) AS libraries, bool_and(pg_catalog.regexp_replace(p.probin, '^.*/', '') = 'pg_toolgate-' || e.extversion) AS all_versioned
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_toolgate'
 WHERE p.probin IS NOT NULL;
SET ROLE toolgate_auditor;
SELECT (toolgate.version())->>'library_current' AS auditor_sees;
SET ROLE toolgate_operator;
SELECT (toolgate.version())->>'library_current' AS operator_sees;
SET ROLE toolgate_agent;
SELECT toolgate.version();
RESET ROLE;
