-- pg_toolgate: hardening of the application's login (docs/hardening.md).
--
-- A member of toolgate_agent can do nothing to the gate's rows, but PostgreSQL gives every role
-- ways to exhaust what the whole cluster shares: advisory locks and temporary tables take entries
-- in the shared lock table (an unbounded number, in one statement), and connections take slots.
-- toolgate.harden_agent_login takes the unbounded ways away from one agent login and bounds the
-- rest; toolgate.hardening_report says how a login stands.
--
-- Function privileges and TEMPORARY are per database: both functions act on, and report about,
-- the database they run in. The connection limit is the role's, for the whole cluster.

-- The functions of pg_catalog that take an advisory lock, every overload, found by name.
CREATE FUNCTION toolgate.advisory_lock_functions() RETURNS SETOF pg_catalog.regprocedure
LANGUAGE sql STABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT p.oid::pg_catalog.regprocedure
      FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace
       AND p.proname = ANY (ARRAY['pg_advisory_lock', 'pg_advisory_lock_shared',
                                  'pg_advisory_xact_lock', 'pg_advisory_xact_lock_shared',
                                  'pg_try_advisory_lock', 'pg_try_advisory_lock_shared',
                                  'pg_try_advisory_xact_lock', 'pg_try_advisory_xact_lock_shared'])
     ORDER BY p.oid::pg_catalog.regprocedure::text
$$;

-- The functions of pg_catalog that create a large object, every overload: PUBLIC may execute
-- them by default, each call can store up to 1 GB, and what they store outlives the session.
CREATE FUNCTION toolgate.large_object_functions() RETURNS SETOF pg_catalog.regprocedure
LANGUAGE sql STABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT p.oid::pg_catalog.regprocedure
      FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace
       AND p.proname = ANY (ARRAY['lo_creat', 'lo_create', 'lo_from_bytea', 'lo_import'])
     ORDER BY p.oid::pg_catalog.regprocedure::text
$$;

-- Refuse, with SQLSTATE 22023 (invalid_parameter_value), a login the hardening cannot make
-- safe: a superuser, a role with CREATEROLE, CREATEDB, BYPASSRLS or REPLICATION (or a member of
-- one: SET ROLE reaches it), one of pg_toolgate's own roles, a role that is not a member of
-- toolgate_agent, or one that owns the current database (an owner keeps TEMPORARY whatever is
-- revoked).
CREATE FUNCTION toolgate.hardening_refuse_unfit(login pg_catalog.regrole) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    name text;
    bad record;
BEGIN
    IF login IS NULL THEN
        RAISE EXCEPTION 'login must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT r.rolname INTO name FROM pg_catalog.pg_roles r WHERE r.oid = login;
    IF name IS NULL THEN
        RAISE EXCEPTION 'role with OID % does not exist', login::pg_catalog.oid
            USING ERRCODE = 'undefined_object';
    END IF;
    IF name = ANY (ARRAY['toolgate_admin', 'toolgate_operator', 'toolgate_agent', 'toolgate_auditor']) THEN
        RAISE EXCEPTION 'role % is one of pg_toolgate''s own roles, not an application login', name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Create a login for the application: CREATE ROLE app LOGIN IN ROLE toolgate_agent.';
    END IF;
    -- The login itself first, then every role it can SET ROLE to.
    SELECT r.rolname,
           pg_catalog.concat_ws(', ',
               CASE WHEN r.rolsuper THEN 'SUPERUSER' END,
               CASE WHEN r.rolcreaterole THEN 'CREATEROLE' END,
               CASE WHEN r.rolcreatedb THEN 'CREATEDB' END,
               CASE WHEN r.rolbypassrls THEN 'BYPASSRLS' END,
               CASE WHEN r.rolreplication THEN 'REPLICATION' END) AS attributes
      INTO bad
      FROM pg_catalog.pg_roles r
     WHERE pg_catalog.pg_has_role(login, r.oid, 'MEMBER')
       AND (r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolbypassrls OR r.rolreplication)
     ORDER BY r.oid <> login, r.rolname
     LIMIT 1;
    IF FOUND THEN
        IF bad.rolname = name THEN
            RAISE EXCEPTION 'login % has %: an application login must have none of SUPERUSER, CREATEROLE, CREATEDB, BYPASSRLS, REPLICATION',
                name, bad.attributes
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RAISE EXCEPTION 'login % is a member of role %, which has %: it can SET ROLE to it',
            name, bad.rolname, bad.attributes
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT pg_catalog.pg_has_role(login, 'toolgate_agent', 'MEMBER') THEN
        RAISE EXCEPTION 'login % is not a member of toolgate_agent', name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Only the application''s login (a member of toolgate_agent) is hardened; other roles keep advisory locks and TEMPORARY.';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_database d
                WHERE d.datname = pg_catalog.current_database()
                  AND pg_catalog.pg_has_role(login, d.datdba, 'MEMBER')) THEN
        RAISE EXCEPTION 'login % owns database % (or is a member of its owner): an owner keeps TEMPORARY',
            name, pg_catalog.current_database()
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- A time setting as stored in pg_db_role_setting ('15s', '15000', '1min', …) in milliseconds;
-- NULL when it is not a number of a time unit.
CREATE FUNCTION toolgate.hardening_setting_ms(value text) RETURNS numeric
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT m[1]::numeric * CASE coalesce(m[2], 'ms')
                               WHEN 'us' THEN 0.001 WHEN 'ms' THEN 1 WHEN 's' THEN 1000
                               WHEN 'min' THEN 60000 WHEN 'h' THEN 3600000 WHEN 'd' THEN 86400000 END
      FROM pg_catalog.regexp_match(value, '^\s*([0-9]+(?:\.[0-9]+)?)\s*(us|ms|s|min|h|d)?\s*$') AS m
$$;

-- Harden one agent login in the current database. Refuses (22023, nothing done) a login
-- hardening_refuse_unfit refuses, a connection_limit below 1 or one that would leave no slot to
-- anyone else, and a timeout that is not between 1 ms and 2147483647 ms. Otherwise, in one
-- transaction, it runs and returns these statements, in this order:
--   ALTER ROLE login CONNECTION LIMIT n                              (the whole cluster)
--   ALTER ROLE login IN DATABASE db SET statement_timeout = '…ms'   (this database)
--   ALTER ROLE login IN DATABASE db SET idle_in_transaction_session_timeout = '…ms'
--   REVOKE EXECUTE ON FUNCTION <every advisory-lock function> FROM PUBLIC, <the login and every
--          role it can SET ROLE to>
--   GRANT EXECUTE ON FUNCTION <the same> TO <every other role>
--   REVOKE TEMPORARY ON DATABASE db FROM PUBLIC, <the login and every role it can SET ROLE to>
--   GRANT TEMPORARY ON DATABASE db TO <every other role>
--   REVOKE EXECUTE ON FUNCTION <every large-object creating function> FROM PUBLIC, <the same>
--   GRANT EXECUTE ON FUNCTION <the same> TO <every other role>
--   REVOKE CREATE ON SCHEMA public FROM PUBLIC, <the same>        (when the schema public exists)
--   GRANT CREATE ON SCHEMA public TO <every other role>           (only if PUBLIC had CREATE there:
--          PostgreSQL 14's default, kept by pg_upgrade; an object planted in public would run in
--          any function whose search_path lists it)
-- "Every other role": every role that exists now, is not a superuser (they need no grant), not a
-- pg_* predefined role, not a member of toolgate_agent and not a role the login can SET ROLE to.
-- A GRANT with no such role is left out. Running it again is safe and grants roles created since.
-- Only the extension owner may execute it (finalize.sql grants it to nobody), and the owner must
-- be a superuser: nobody else may change privileges on pg_catalog's functions.
CREATE FUNCTION toolgate.harden_agent_login(
    login pg_catalog.regrole,
    connection_limit integer DEFAULT 10,
    statement_timeout interval DEFAULT interval '15 seconds',
    idle_in_transaction_session_timeout interval DEFAULT interval '30 seconds'
) RETURNS SETOF text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    db text := pg_catalog.current_database();
    name text;
    slots integer := pg_catalog.current_setting('max_connections')::integer
                   - pg_catalog.current_setting('superuser_reserved_connections')::integer;
    statement_ms numeric;
    idle_ms numeric;
    functions text;
    lo_functions text;
    public_create boolean;
    reach text;
    others text;
    stmt text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER AND r.rolsuper) THEN
        RAISE EXCEPTION 'toolgate.harden_agent_login must be owned by a superuser; % is not one', CURRENT_USER
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM toolgate.hardening_refuse_unfit(login);
    IF connection_limit IS NULL OR connection_limit < 1 OR connection_limit >= slots THEN
        RAISE EXCEPTION 'connection_limit must be between 1 and % (max_connections - superuser_reserved_connections - 1), not %',
            slots - 1, coalesce(connection_limit::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    statement_ms := pg_catalog.round(EXTRACT(epoch FROM harden_agent_login.statement_timeout) * 1000);
    idle_ms := pg_catalog.round(EXTRACT(epoch FROM harden_agent_login.idle_in_transaction_session_timeout) * 1000);
    IF statement_ms IS NULL OR statement_ms NOT BETWEEN 1 AND 2147483647 THEN
        RAISE EXCEPTION 'statement_timeout must be between 1 ms and 2147483647 ms, not %',
            coalesce(harden_agent_login.statement_timeout::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF idle_ms IS NULL OR idle_ms NOT BETWEEN 1 AND 2147483647 THEN
        RAISE EXCEPTION 'idle_in_transaction_session_timeout must be between 1 ms and 2147483647 ms, not %',
            coalesce(harden_agent_login.idle_in_transaction_session_timeout::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    SELECT r.rolname INTO name FROM pg_catalog.pg_roles r WHERE r.oid = login;
    SELECT pg_catalog.string_agg('pg_catalog.' || f::text, ', ' ORDER BY f::text)
      INTO functions FROM toolgate.advisory_lock_functions() f;
    SELECT pg_catalog.string_agg('pg_catalog.' || f::text, ', ' ORDER BY f::text)
      INTO lo_functions FROM toolgate.large_object_functions() f;
    SELECT EXISTS (SELECT 1 FROM pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) a
                    WHERE a.grantee = 0 AND a.privilege_type = 'CREATE')
      INTO public_create FROM pg_catalog.pg_namespace n WHERE n.nspname = 'public';
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rolname), ', ' ORDER BY r.rolname)
      INTO reach FROM pg_catalog.pg_roles r
     WHERE pg_catalog.pg_has_role(login, r.oid, 'MEMBER');
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rolname), ', ' ORDER BY r.rolname)
      INTO others FROM pg_catalog.pg_roles r
     WHERE r.rolname !~ '^pg_'
       AND NOT r.rolsuper
       AND NOT pg_catalog.pg_has_role(r.oid, 'toolgate_agent', 'MEMBER')
       AND NOT pg_catalog.pg_has_role(login, r.oid, 'MEMBER');

    FOR stmt IN
        SELECT s FROM pg_catalog.unnest(ARRAY[
            pg_catalog.format('ALTER ROLE %I CONNECTION LIMIT %s', name, connection_limit),
            pg_catalog.format('ALTER ROLE %I IN DATABASE %I SET statement_timeout = %L',
                              name, db, statement_ms || 'ms'),
            pg_catalog.format('ALTER ROLE %I IN DATABASE %I SET idle_in_transaction_session_timeout = %L',
                              name, db, idle_ms || 'ms'),
            pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC, %s', functions, reach),
            CASE WHEN others IS NOT NULL
                 THEN pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', functions, others) END,
            pg_catalog.format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC, %s', db, reach),
            CASE WHEN others IS NOT NULL
                 THEN pg_catalog.format('GRANT TEMPORARY ON DATABASE %I TO %s', db, others) END,
            pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC, %s', lo_functions, reach),
            CASE WHEN others IS NOT NULL
                 THEN pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', lo_functions, others) END,
            CASE WHEN public_create IS NOT NULL
                 THEN pg_catalog.format('REVOKE CREATE ON SCHEMA public FROM PUBLIC, %s', reach) END,
            CASE WHEN public_create AND others IS NOT NULL
                 THEN pg_catalog.format('GRANT CREATE ON SCHEMA public TO %s', others) END
        ]) WITH ORDINALITY AS t(s, i)
         WHERE s IS NOT NULL  -- no other role: no GRANT
         ORDER BY i
    LOOP
        EXECUTE stmt;
        RETURN NEXT stmt;
    END LOOP;
END
$$;

-- How a login stands in the current database, one row per check. Refuses what
-- harden_agent_login refuses. Checks:
--   connection_limit            the role has a connection limit (not -1)
--   statement_timeout           a role default above 0 applies in this database (ALTER ROLE …
--   idle_in_transaction_session_timeout   IN DATABASE, or for every database)
--   advisory_lock_functions     neither the login nor a role it can SET ROLE to may execute one
--   temporary_tables            neither the login nor a role it can SET ROLE to has TEMPORARY here
--   large_objects               neither may execute a function that creates a large object
--   schema_create               neither may CREATE in any schema of this database (an object it
--                               planted where a bound function's search_path resolves would run
--                               as that function's owner; define_tool refuses such paths too)
--   other_databases             it may CONNECT to no other database of the cluster (the lock
--                               table is the cluster's: a login that connects elsewhere can fill
--                               it there). pg_hba.conf is not looked at.
--   lock_table                  (connection limit + max_prepared_transactions) × the relation
--                               locks one of its transactions can hold fits in half of the shared
--                               lock table, max_locks_per_transaction × (max_connections +
--                               max_prepared_transactions). Relation locks one transaction can
--                               hold, an estimate: every table, view and index of pg_catalog and
--                               information_schema (views reach the tables under them), every
--                               other relation it may read, and their indexes and TOAST tables.
CREATE FUNCTION toolgate.hardening_report(login pg_catalog.regrole)
RETURNS TABLE (check_name text, ok boolean, detail text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    db pg_catalog.oid;
    name text;
    limit_set integer;
    setting text;
    value text;
    in_db boolean;
    ms numeric;
    n integer;
    list text;
    max_locks integer := pg_catalog.current_setting('max_locks_per_transaction')::integer;
    max_conn integer := pg_catalog.current_setting('max_connections')::integer;
    max_prep integer := pg_catalog.current_setting('max_prepared_transactions')::integer;
    slots integer := pg_catalog.current_setting('max_connections')::integer
                   - pg_catalog.current_setting('superuser_reserved_connections')::integer;
    holders integer;
    per_xact bigint;
    capacity bigint;
BEGIN
    PERFORM toolgate.hardening_refuse_unfit(login);
    SELECT d.oid INTO db FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database();
    SELECT r.rolname, r.rolconnlimit INTO name, limit_set FROM pg_catalog.pg_roles r WHERE r.oid = login;

    check_name := 'connection_limit';
    ok := limit_set >= 0;
    detail := CASE WHEN ok THEN pg_catalog.format('%s may open at most %s connections', name, limit_set)
                   ELSE pg_catalog.format('%s has no connection limit: it may take all %s connection slots not reserved for superusers',
                                          name, slots) END;
    RETURN NEXT;

    FOREACH setting IN ARRAY ARRAY['statement_timeout', 'idle_in_transaction_session_timeout'] LOOP
        value := NULL;
        SELECT pg_catalog.substr(s.cfg, pg_catalog.length(setting) + 2), d.setdatabase <> 0
          INTO value, in_db
          FROM pg_catalog.pg_db_role_setting d
               CROSS JOIN LATERAL pg_catalog.unnest(d.setconfig) AS s(cfg)
         WHERE d.setrole = login
           AND d.setdatabase IN (0, db)
           AND pg_catalog.starts_with(s.cfg, setting || '=')
         ORDER BY d.setdatabase DESC
         LIMIT 1;
        ms := toolgate.hardening_setting_ms(value);
        check_name := setting;
        ok := coalesce(ms > 0, false);
        detail := CASE
            WHEN value IS NULL THEN pg_catalog.format('%s has no default %s in database %s', name, setting,
                                                      pg_catalog.current_database())
            WHEN NOT ok THEN pg_catalog.format('%s''s default %s is %s: no timeout', name, setting, value)
            ELSE pg_catalog.format('%s = %s, %s''s default %s (a default: the login can SET it away)',
                                   setting, value, name,
                                   CASE WHEN in_db THEN 'in database ' || pg_catalog.current_database()
                                        ELSE 'in every database' END)
        END;
        RETURN NEXT;
    END LOOP;

    SELECT pg_catalog.count(*) INTO n FROM toolgate.advisory_lock_functions();
    SELECT pg_catalog.string_agg(pg_catalog.format('%s (%s of %s)', e.rolname, e.executable, n), ', ' ORDER BY e.rolname)
      INTO list
      FROM (SELECT r.rolname, pg_catalog.count(*) AS executable
              FROM toolgate.advisory_lock_functions() f, pg_catalog.pg_roles r
             WHERE pg_catalog.pg_has_role(login, r.oid, 'MEMBER')
               AND pg_catalog.has_function_privilege(r.oid, f::pg_catalog.oid, 'EXECUTE')
             GROUP BY r.rolname) e;
    check_name := 'advisory_lock_functions';
    ok := n > 0 AND list IS NULL;
    detail := CASE WHEN ok THEN pg_catalog.format('none of the %s advisory-lock functions is executable by %s or a role it can SET ROLE to', n, name)
                   ELSE 'advisory-lock functions executable in this database by ' || list END;
    RETURN NEXT;

    SELECT pg_catalog.string_agg(r.rolname, ', ' ORDER BY r.rolname)
      INTO list
      FROM pg_catalog.pg_roles r
     WHERE pg_catalog.pg_has_role(login, r.oid, 'MEMBER')
       AND pg_catalog.has_database_privilege(r.oid, db, 'TEMPORARY');
    check_name := 'temporary_tables';
    ok := list IS NULL;
    detail := CASE WHEN ok THEN pg_catalog.format('neither %s nor a role it can SET ROLE to may create temporary tables in database %s',
                                                  name, pg_catalog.current_database())
                   ELSE pg_catalog.format('TEMPORARY on database %s: %s', pg_catalog.current_database(), list) END;
    RETURN NEXT;

    SELECT pg_catalog.count(*) INTO n FROM toolgate.large_object_functions();
    SELECT pg_catalog.string_agg(pg_catalog.format('%s (%s of %s)', e.rolname, e.executable, n), ', ' ORDER BY e.rolname)
      INTO list
      FROM (SELECT r.rolname, pg_catalog.count(*) AS executable
              FROM toolgate.large_object_functions() f, pg_catalog.pg_roles r
             WHERE pg_catalog.pg_has_role(login, r.oid, 'MEMBER')
               AND pg_catalog.has_function_privilege(r.oid, f::pg_catalog.oid, 'EXECUTE')
             GROUP BY r.rolname) e;
    check_name := 'large_objects';
    ok := n > 0 AND list IS NULL;
    detail := CASE WHEN ok THEN pg_catalog.format('none of the %s large-object creating functions is executable by %s or a role it can SET ROLE to', n, name)
                   ELSE 'large-object creating functions executable in this database by ' || list END;
    RETURN NEXT;

    SELECT pg_catalog.string_agg(pg_catalog.format('%s (%s)', s.nspname, s.roles), ', ' ORDER BY s.nspname)
      INTO list
      FROM (SELECT n.nspname::text, pg_catalog.string_agg(r.rolname, ', ' ORDER BY r.rolname) AS roles
              FROM pg_catalog.pg_namespace n, pg_catalog.pg_roles r
             WHERE n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
               AND pg_catalog.pg_has_role(login, r.oid, 'MEMBER')
               AND pg_catalog.has_schema_privilege(r.oid, n.oid, 'CREATE')
             GROUP BY n.nspname) s;
    check_name := 'schema_create';
    ok := list IS NULL;
    detail := CASE WHEN ok THEN pg_catalog.format('neither %s nor a role it can SET ROLE to may CREATE in a schema of database %s',
                                                  name, pg_catalog.current_database())
                   ELSE pg_catalog.format('CREATE in database %s: %s', pg_catalog.current_database(), list) END;
    RETURN NEXT;

    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(d.datname), ', ' ORDER BY d.datname)
      INTO list
      FROM pg_catalog.pg_database d
     WHERE d.oid <> db
       AND d.datallowconn
       AND d.datconnlimit <> 0
       AND pg_catalog.has_database_privilege(login, d.oid, 'CONNECT');
    check_name := 'other_databases';
    ok := list IS NULL;
    detail := CASE WHEN ok THEN pg_catalog.format('%s may CONNECT to no other database (pg_hba.conf not checked)', name)
                   ELSE pg_catalog.format('%s may CONNECT to %s, where it can fill the cluster''s lock table: REVOKE CONNECT ON DATABASE … FROM PUBLIC there, or reject it in pg_hba.conf (which this report does not read)',
                                          name, list) END;
    RETURN NEXT;

    WITH reach AS (
        SELECT r.oid FROM pg_catalog.pg_roles r WHERE pg_catalog.pg_has_role(login, r.oid, 'MEMBER')
    ), readable AS (
        SELECT c.oid, c.reltoastrelid
          FROM pg_catalog.pg_class c
         WHERE c.relkind IN ('r', 'v', 'm', 'p', 'f', 'S')
           AND (c.relnamespace IN ('pg_catalog'::pg_catalog.regnamespace, 'information_schema'::pg_catalog.regnamespace)
                OR EXISTS (SELECT 1 FROM reach
                            WHERE pg_catalog.has_any_column_privilege(reach.oid, c.oid, 'SELECT')))
    )
    SELECT (SELECT pg_catalog.count(*) FROM readable)
         + (SELECT pg_catalog.count(*) FROM pg_catalog.pg_index i WHERE i.indrelid IN (SELECT readable.oid FROM readable))
         + 2 * (SELECT pg_catalog.count(*) FROM readable WHERE readable.reltoastrelid <> 0)
      INTO per_xact;
    holders := CASE WHEN limit_set < 0 OR limit_set > slots THEN slots ELSE limit_set END + max_prep;
    capacity := max_locks::bigint * (max_conn + max_prep);
    check_name := 'lock_table';
    ok := holders * per_xact <= capacity / 2;
    detail := pg_catalog.format(
        '%s %s%s × up to %s relation locks each = %s, %s half of the shared lock table (%s = max_locks_per_transaction %s × (max_connections %s + max_prepared_transactions %s))',
        holders - max_prep,
        CASE WHEN limit_set < 0 THEN 'connections (no limit)' ELSE 'connections' END,
        CASE WHEN max_prep > 0 THEN pg_catalog.format(' + %s prepared transactions', max_prep) ELSE '' END,
        per_xact, holders * per_xact, CASE WHEN ok THEN 'within' ELSE 'over' END,
        capacity, max_locks, max_conn, max_prep);
    RETURN NEXT;
END
$$;

