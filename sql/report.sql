-- pg_toolgate: what is wrong or risky in a tool's binding, for the DBA who bound it,
-- before an agent finds it. toolgate.binding_report(tool) returns one row per finding:
--   error    what define_tool refuses and the gate fails closed on (binding_fault's reason, or
--            definer_fault's for the role that defined the tool), quoted as they say it;
--   warning  what the gate cannot enforce: the row-level security of the tables the functions
--            touch, an owner that owns them, recent answers of the target that the gate refused,
--            binary floating point where money is computed.
-- A clean binding (examples/maintenance's tools, examples/refunds's) returns no row.

-- A bound function's body as text, without its comments and string literals (so that a word in
-- a comment or a message is not taken for code): prosrc, or for a SQL-standard body (BEGIN
-- ATOMIC, RETURN) its deparsed text. A heuristic: E'' and dollar-quoted strings inside the body
-- are kept.
CREATE FUNCTION toolgate.binding_code(fn pg_catalog.regprocedure) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.regexp_replace(
               CASE WHEN p.prosqlbody IS NULL THEN p.prosrc ELSE pg_catalog.pg_get_function_sqlbody(p.oid) END,
               '--[^\n]*|/\*([^*]|\*+[^*/])*\*+/|''([^'']|'''')*''', ' ', 'g')
      FROM pg_catalog.pg_proc p WHERE p.oid = fn
$$;

-- The tables (and partitioned tables) a bound function touches, outside the system's and the
-- extension's schemas. For a SQL-standard body, those PostgreSQL recorded it depends on
-- (pg_depend). For any other body a heuristic: each name written after FROM, JOIN, UPDATE, INTO,
-- TABLE, USING or TRUNCATE (outside comments and literals), schema-qualified as written or else
-- resolved in the function's pinned search_path (its own schema when none is pinned), the first
-- schema that has it. It misses what the body reaches through a second name of a FROM list
-- (FROM a, b), dynamic SQL, views and the functions it calls.
CREATE FUNCTION toolgate.binding_relations(fn pg_catalog.regprocedure) RETURNS SETOF pg_catalog.regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    WITH f AS (
        SELECT p.oid, p.prosqlbody IS NOT NULL AS atomic,
               coalesce(toolgate.search_path_names((SELECT pg_catalog.substr(c, 13) FROM pg_catalog.unnest(p.proconfig) c
                                                     WHERE pg_catalog.starts_with(c, 'search_path=') LIMIT 1)),
                        ARRAY[p.pronamespace::pg_catalog.regnamespace::text]) AS path
          FROM pg_catalog.pg_proc p WHERE p.oid = fn
    ), found AS (
        SELECT d.refobjid AS rel
          FROM f JOIN pg_catalog.pg_depend d
            ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = f.oid
           AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
         WHERE f.atomic
        UNION
        SELECT CASE WHEN m[1] ~ '^("([^"]|"")+"|[^".]+)\.' THEN pg_catalog.to_regclass(m[1])
                    ELSE (SELECT r.rel FROM pg_catalog.unnest(f.path) WITH ORDINALITY AS s(name, n),
                                 LATERAL (SELECT pg_catalog.to_regclass(pg_catalog.quote_ident(s.name) || '.' || m[1]) AS rel) r
                           WHERE s.name <> 'pg_temp' AND r.rel IS NOT NULL ORDER BY s.n LIMIT 1) END
          FROM f, LATERAL pg_catalog.regexp_matches(toolgate.binding_code(f.oid),
                   '\m(?:from|join|update|into|table|using|truncate)\s+((?:"(?:[^"]|"")+"|[[:alpha:]_][[:alnum:]_$]*)(?:\.(?:"(?:[^"]|"")+"|[[:alpha:]_][[:alnum:]_$]*))?)',
                   'gi') AS m
         WHERE NOT f.atomic
    )
    SELECT DISTINCT c.oid::pg_catalog.regclass
      FROM found JOIN pg_catalog.pg_class c ON c.oid = found.rel
     WHERE c.relkind IN ('r', 'p')
       AND c.relnamespace::pg_catalog.regnamespace::text NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'toolgate')
$$;

-- The findings for `tool` (an unknown tool is an error: unknown tool …, 22023), errors first,
-- then in the order of the functions (target, value, effect, request, finish, reader):
--   * each bound function that binding_fault refuses (every call BLOCKED tool_misconfigured), or
--     else that definer_fault refuses to the role that defined the tool (its redefinition as it
--     stands would be refused): error, with their reason;
--   * each table a function touches (binding_relations, a heuristic) without row-level security:
--     warning (only the function's own WHERE keeps tenants apart);
--   * each such table its owner owns (or is a member of the owner of) whose row-level security is
--     not forced: warning, a separate binding role recommended. No policy helps here: PostgreSQL
--     applies no policy at all to a table's owner unless the table forces row-level security;
--   * each such table with row-level security that binds the function's owner but no permissive
--     policy for PUBLIC or a role of that owner: warning (the function sees none of its rows);
--   * when the touched tables show none of the above for an owner, define_tool's own warning
--     (binding_warning: the owner owns other tables whose security does not bind it);
--   * the target's (a reader's) answers the gate refused in the last 30 days because of their
--     tenant (a tenant that is not a string, or none): warning, quoting the audit's detail;
--   * real, double precision, float, float4 or float8 in the body of a value, effect, request or
--     finish function (outside comments and literals): warning (money in binary floating point).
-- (The functions' signatures are binding_fault's: (jsonb, jsonb) RETURNS jsonb, never a float.)
CREATE FUNCTION toolgate.binding_report(tool text)
RETURNS TABLE (severity text, function text, finding text, advice text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    b toolgate.tool_bindings;
BEGIN
    SELECT * INTO b FROM toolgate.tool_bindings t WHERE t.tool = binding_report.tool;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown tool %', coalesce(binding_report.tool, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH fns AS (
        SELECT f.what, f.fn, f.n, pg_catalog.to_regprocedure(f.fn) AS oid, toolgate.binding_fault(f.fn, f.what) AS fault
          FROM (VALUES ('target', b.target, 1), ('value', b.value, 2), ('effect', b.effect, 3),
                       ('request', b.request, 4), ('finish', b.finish, 5), ('reader', b.reader, 6)) AS f(what, fn, n)
         WHERE f.fn IS NOT NULL
    ), rels AS (
        SELECT f.what, f.fn, f.n, p.proowner, r.rel, c.relrowsecurity AS rls, c.relforcerowsecurity AS forced,
               pg_catalog.pg_has_role(p.proowner, c.relowner, 'USAGE') AS owns
          FROM fns f JOIN pg_catalog.pg_proc p ON p.oid = f.oid
         CROSS JOIN LATERAL toolgate.binding_relations(f.oid) AS r(rel)
          JOIN pg_catalog.pg_class c ON c.oid = r.rel
    ), found (sev, n, k, fn_label, what_found, todo) AS (
        SELECT 'error', f.n, 1, f.what || ' ' || f.fn, f.fault,
               CASE WHEN f.fault LIKE '%search_path%'
                        THEN pg_catalog.format('ALTER FUNCTION %s SET search_path = pg_catalog, <its schemas>, pg_temp: schemas that exist, no $user, pg_temp last', f.fn)
                    WHEN f.fault LIKE '%searches a schema where%'
                        THEN 'REVOKE CREATE on those schemas FROM PUBLIC and from every role an agent login can reach'
                    WHEN f.fault LIKE '%does not exist'
                        THEN 'create the function again with this signature, or redefine the tool with one that exists'
                    WHEN f.fault LIKE '%must take%' THEN 'bind a function (ctx jsonb, args jsonb) RETURNS jsonb'
                    WHEN f.fault LIKE '%SECURITY DEFINER' THEN pg_catalog.format('ALTER FUNCTION %s SECURITY DEFINER', f.fn)
                    WHEN f.fault LIKE '%superuser' OR f.fault LIKE '%BYPASSRLS'
                        THEN pg_catalog.format('ALTER FUNCTION %s OWNER TO a binding role with neither SUPERUSER nor BYPASSRLS', f.fn)
                    WHEN f.fault LIKE '%by PUBLIC' THEN pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f.fn)
                    ELSE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s from the agent''s roles, and give it an owner no agent login can reach', f.fn)
               END || ': until then every call is BLOCKED tool_misconfigured'
          FROM fns f WHERE f.fault IS NOT NULL
        UNION ALL
        SELECT 'error', f.n, 2, f.what || ' ' || f.fn, d.fault || ' (the tool as it is bound could not be defined again)',
               pg_catalog.format('GRANT USAGE on its schema and EXECUTE ON FUNCTION %s TO %I, or redefine the tool as a role that has them',
                                 f.fn, b.defined_by)
          FROM fns f, LATERAL (SELECT toolgate.definer_fault(b.defined_by, f.oid, f.what) AS fault) d
         WHERE f.fault IS NULL AND d.fault IS NOT NULL
           AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = b.defined_by)
        UNION ALL
        SELECT 'warning', r.n, 3, r.what || ' ' || r.fn,
               pg_catalog.format('%s function touches table %s, which has no row-level security: only the function''s own WHERE keeps tenants apart there',
                                 r.what, r.rel),
               pg_catalog.format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY; CREATE POLICY tenant ON %s USING (tenant_id = toolgate.current_tenant())',
                                 r.rel, r.rel)
          FROM rels r WHERE NOT r.rls
        UNION ALL
        SELECT 'warning', r.n, 4, r.what || ' ' || r.fn,
               pg_catalog.format('%s function''s owner %s owns table %s, whose row-level security does not bind its owner (%s)',
                                 r.what, r.proowner::pg_catalog.regrole, r.rel,
                                 CASE WHEN r.rls THEN 'enabled, not forced: no policy applies to the owner' ELSE 'none, and not forced' END),
               pg_catalog.format('own the bound functions by a separate binding role that does not own the tables (granted only the rows'' privileges it needs), or ALTER TABLE %s FORCE ROW LEVEL SECURITY',
                                 r.rel)
          FROM rels r WHERE r.owns AND NOT r.forced
        UNION ALL
        SELECT 'warning', r.n, 5, r.what || ' ' || r.fn,
               pg_catalog.format('table %s has row-level security but no permissive policy for PUBLIC or the %s function''s owner %s: the function sees none of its rows',
                                 r.rel, r.what, r.proowner::pg_catalog.regrole),
               pg_catalog.format('CREATE POLICY tenant ON %s TO %s USING (tenant_id = toolgate.current_tenant())', r.rel, r.proowner::pg_catalog.regrole)
          FROM rels r
         WHERE r.rls AND (r.forced OR NOT r.owns)
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_policy pol
                            WHERE pol.polrelid = r.rel AND pol.polpermissive
                              AND (0::pg_catalog.oid = ANY (pol.polroles)
                                   OR EXISTS (SELECT 1 FROM pg_catalog.unnest(pol.polroles) AS pr(role)
                                               WHERE pg_catalog.pg_has_role(r.proowner, pr.role, 'USAGE'))))
        UNION ALL
        SELECT o.sev, o.n, o.k, o.fn_label, o.what_found, o.todo
          FROM (SELECT DISTINCT ON (p.proowner) 'warning' AS sev, f.n, 6 AS k, f.what || ' ' || f.fn AS fn_label,
                       w.warning AS what_found,
                       'own the bound functions by a separate binding role that does not own the tables, or FORCE ROW LEVEL SECURITY on them' AS todo
                  FROM fns f JOIN pg_catalog.pg_proc p ON p.oid = f.oid,
                       LATERAL (SELECT toolgate.binding_warning(f.oid, f.what) AS warning) w
                 WHERE w.warning IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM rels r WHERE r.proowner = p.proowner AND r.owns AND NOT r.forced)
                 ORDER BY p.proowner, f.n) o
        UNION ALL
        SELECT 'warning', f.n, 7, f.what || ' ' || f.fn,
               pg_catalog.format('%s call(s) in the last 30 days were BLOCKED tool_misconfigured for the %s function''s answer: %s',
                                 a.calls, f.what, a.detail),
               'return {"id": …, "tenant": …, "state": …} with "tenant" the text ctx->>''tenant'' (a number, or no tenant, is refused)'
          FROM fns f,
               LATERAL (SELECT au.detail, pg_catalog.count(*) AS calls FROM toolgate.audit au
                         WHERE au.tool = b.tool AND au.rule = 'tool_misconfigured'
                           AND au.at > pg_catalog.now() - interval '30 days'
                           AND au.detail->>'function' = f.what AND au.detail->>'reason' LIKE '%tenant%'
                         GROUP BY au.detail) a
         WHERE f.what IN ('target', 'reader')
        UNION ALL
        SELECT 'warning', f.n, 8, f.what || ' ' || f.fn,
               pg_catalog.format('%s function computes with binary floating point (%s): an amount in it gains or loses cents',
                                 f.what, x.words),
               'compute money in numeric ((args->>''amount'')::numeric), never cast to real, double precision or float'
          FROM fns f,
               LATERAL (SELECT pg_catalog.string_agg(DISTINCT pg_catalog.lower(pg_catalog.regexp_replace(m[1], '\s+', ' ', 'g')), ', ') AS words
                          FROM pg_catalog.regexp_matches(toolgate.binding_code(f.oid),
                                                         '\m(real|double\s+precision|float4|float8|float)\M', 'gi') AS m) x
         WHERE f.what IN ('value', 'effect', 'request', 'finish') AND x.words IS NOT NULL
    )
    SELECT found.sev, found.fn_label, found.what_found, found.todo
      FROM found
     ORDER BY found.sev = 'warning', found.n, found.k, found.what_found;
END
$$;
COMMENT ON FUNCTION toolgate.binding_report(text) IS
    'What is wrong (error: the gate refuses it) or risky (warning) in a tool''s binding; no row: nothing found.';
