-- pg_toolgate: tools a DBA binds to their own ERP (docs/architecture.md §12). A defined tool is a
-- row in toolgate.tools, its argument contract in toolgate.tool_schemas, and its binding here:
-- the DBA's functions that find the target, say the value and make the effect. The gate's steps
-- (identity, contract, idempotency, policy, state, value, quota, confirmation, audit) are the
-- same for every tool: the extension ships none of its own.

-- The functions a defined tool is bound to. Each is (ctx jsonb, args jsonb) RETURNS jsonb:
--   target  finds and locks what the call is about in ctx->>'tenant' (and every row the effect
--           will write: the gate takes no lock of the ERP's after this one); returns
--           {"id": …, "tenant": …, "state": …} or NULL (target_not_found)
--   value   (optional; required for a sensitive tool) the money at stake:
--           {"amount": …, "account": …, "available": …, "limit": …}; ctx->'target' is the
--           target's object. `available` is what the account has left, `limit` the most this
--           target allows (a part's own purchase limit, say); both optional
--   effect  makes the change; returns the result object, or NULL when the state moved under the
--           call; ctx->'target' and ctx->'value' are what the steps before found
-- consent: the template of the text a person reads before a tier >= 1 effect (NULL: the gate's
-- own). Placeholders {tenant}, {tool}, {target.NAME} (any field of the target's object),
-- {value.NAME} (any field of the value's object; amount and available shown as money) and
-- {args.NAME}; the gate fills and quotes every value.
-- amounts: what a write tool's value function may answer (else value_over_limit): positive (more
-- than zero, the default), non_negative (zero too) or any (credits, below zero, too). Amounts are
-- rounded by the gate to the minor unit of the tenant's currency (toolgate.set_tenant_locale; half
-- away from zero) before anything sees them.
-- target_states: the states (the ERP's own names) the target may be in for this tool; a tenant's
-- policy row may name its own (toolgate.set_policy's target_states). NULL in both: any state.
-- A read tool (define_read_tool) has one function instead:
--   reader  returns what was asked, in ctx->>'tenant', or NULL (target_not_found); the strings at
--           the JSON Pointers in `untrusted` (a segment * is every element of an array or member of an object; every string below a pointer, keys too, is marked) come back
--           marked as untrusted third-party data. Nothing a reader writes is kept.
-- Each function is kept as its signature, schema-qualified as regprocedure prints it
-- ('shop.invoice(jsonb,jsonb)'), and found again by that name at every use: not as a regprocedure
-- (an OID), which pg_upgrade refuses in a table, and which a dump would have to restore after the
-- DBA's functions.
CREATE TABLE toolgate.tool_bindings (
    tool       text PRIMARY KEY REFERENCES toolgate.tools,
    kind       text NOT NULL CHECK (kind IN ('write', 'read')),
    target     text,
    value      text,
    effect     text,
    reader     text,
    untrusted  text[] NOT NULL DEFAULT '{}',
    consent    text,
    version    integer NOT NULL,
    defined_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    defined_by text NOT NULL,
    target_states text[] CHECK (array_position(target_states, NULL) IS NULL),
    amounts    text CHECK (amounts IN ('positive', 'non_negative', 'any')),
    CHECK (CASE kind WHEN 'write' THEN target IS NOT NULL AND effect IS NOT NULL AND reader IS NULL
                     ELSE reader IS NOT NULL AND target IS NULL AND value IS NULL AND effect IS NULL
                          AND consent IS NULL AND target_states IS NULL END)
);

-- Every version of every definition: who changed it, when, from what to what.
CREATE TABLE toolgate.tool_history (
    history_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tool       text NOT NULL,
    version    integer NOT NULL,
    changed_at timestamptz NOT NULL,
    changed_by text NOT NULL,
    old        jsonb,
    new        jsonb
);
CREATE INDEX tool_history_at ON toolgate.tool_history (tool, changed_at);

SELECT pg_catalog.pg_extension_config_dump('toolgate.tool_bindings', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.tool_history', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.tool_history_history_id_seq', '');

CREATE TRIGGER tool_bindings_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.tool_bindings
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('tool_bindings');

-- The schema names of a search_path setting as a function's proconfig keeps it ('pg_catalog,
-- shop, pg_temp', '"My Shop", pg_temp'), each as PostgreSQL reads it: a quoted name unquoted, any
-- other downcased. NULL when the setting is not a plain list of names (it is then refused).
CREATE FUNCTION toolgate.search_path_names(setting text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN setting ~ '^\s*("([^"]|"")+"|[^",\s]+)(\s*,\s*("([^"]|"")+"|[^",\s]+))*\s*$' THEN
        (SELECT pg_catalog.array_agg(CASE WHEN pg_catalog.starts_with(m[1], '"')
                                          THEN pg_catalog.replace(pg_catalog.substr(m[1], 2, pg_catalog.length(m[1]) - 2), '""', '"')
                                          ELSE pg_catalog.lower(m[1]) END ORDER BY n)
           FROM pg_catalog.regexp_matches(setting, '("(?:[^"]|"")+"|[^",\s]+)', 'g') WITH ORDINALITY AS t(m, n))
    END
$$;

-- Why the function named `fn` (a signature, as tool_bindings keeps it) may not be bound (NULL: it
-- may; no name: nothing to check). Checked by define_tool and again by the gate at every use
-- (its verdict kept until a function, a role, a membership or a schema changes), so a function
-- changed after its definition fails closed (BLOCKED tool_misconfigured). It must:
--   * exist with the binding signature and be SECURITY DEFINER;
--   * be owned by a role that is neither a superuser nor BYPASSRLS (row-level security must bind
--     it) and that no agent login can act as;
--   * pin a search_path that ends with pg_temp (else the caller's temporary schema is searched
--     first), names no $user and no schema that does not exist, and in whose schemas (and the
--     function's own) neither PUBLIC nor any role an agent login can reach (SET ROLE included,
--     through NOINHERIT roles too) may CREATE: a bound function runs in the agent's backend, so
--     an object the agent could plant where its path resolves would run as the function's owner;
--   * be executable by neither PUBLIC nor any role an agent login can reach (the application must
--     never reach an effect around the gate).
-- "An agent login": any role that is a member of toolgate_agent and not a superuser.
CREATE FUNCTION toolgate.binding_fault(fn text, what text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    WITH f AS (
        SELECT p.*, o.rolsuper AS owner_super, o.rolbypassrls AS owner_bypassrls,
               toolgate.search_path_names((SELECT pg_catalog.substr(c, 13) FROM pg_catalog.unnest(p.proconfig) c
                                            WHERE pg_catalog.starts_with(c, 'search_path=') LIMIT 1)) AS path
          FROM pg_catalog.pg_proc p LEFT JOIN pg_catalog.pg_roles o ON o.oid = p.proowner
         WHERE p.oid = pg_catalog.to_regprocedure(fn)
    ), reach AS (
        SELECT x.oid FROM pg_catalog.pg_roles x
         WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_roles a
                        WHERE NOT a.rolsuper AND pg_catalog.pg_has_role(a.oid, 'toolgate_agent', 'MEMBER')
                          AND pg_catalog.pg_has_role(a.oid, x.oid, 'MEMBER'))
    ), schemas AS (
        SELECT s.name, n.oid, n.nspacl, n.nspowner
          FROM f, LATERAL (SELECT pg_catalog.unnest(f.path) AS name
                           UNION SELECT n.nspname::text FROM pg_catalog.pg_namespace n WHERE n.oid = f.pronamespace) s
          LEFT JOIN pg_catalog.pg_namespace n
                 ON n.oid = pg_catalog.to_regnamespace(pg_catalog.quote_ident(s.name))
         WHERE s.name <> 'pg_temp'
    )
    SELECT CASE
        WHEN fn IS NULL THEN NULL
        WHEN f.oid IS NULL THEN pg_catalog.format('%s function %s does not exist', what, fn)
        WHEN f.prokind <> 'f' OR f.proretset OR f.prorettype <> 'jsonb'::regtype
             OR f.pronargs <> 2 OR f.proargtypes[0] <> 'jsonb'::regtype OR f.proargtypes[1] <> 'jsonb'::regtype
            THEN pg_catalog.format('%s function %s must take (ctx jsonb, args jsonb) and return jsonb', what, fn)
        WHEN NOT f.prosecdef THEN pg_catalog.format('%s function %s must be SECURITY DEFINER', what, fn)
        WHEN f.owner_super THEN pg_catalog.format('%s function %s must not be owned by a superuser', what, fn)
        WHEN f.owner_bypassrls
            THEN pg_catalog.format('%s function %s must not be owned by a role with BYPASSRLS', what, fn)
        WHEN f.path IS NULL
            THEN pg_catalog.format('%s function %s must pin its search_path (SET search_path = …, pg_temp)', what, fn)
        WHEN f.path[pg_catalog.cardinality(f.path)] <> 'pg_temp'
             OR 'pg_temp' = ANY (f.path[1:pg_catalog.cardinality(f.path) - 1])
            THEN pg_catalog.format('%s function %s must end its search_path with pg_temp, listed once', what, fn)
        WHEN '$user' = ANY (f.path)
            THEN pg_catalog.format('%s function %s must not have $user in its search_path', what, fn)
        WHEN EXISTS (SELECT 1 FROM schemas s WHERE s.oid IS NULL OR s.name ~ '^pg_(toast_)?temp_')
            THEN pg_catalog.format('%s function %s has a schema on its search_path that does not exist: %s', what, fn,
                                   (SELECT pg_catalog.string_agg(s.name, ', ' ORDER BY s.name) FROM schemas s
                                     WHERE s.oid IS NULL OR s.name ~ '^pg_(toast_)?temp_'))
        WHEN EXISTS (SELECT 1 FROM schemas s
                      WHERE EXISTS (SELECT 1 FROM pg_catalog.aclexplode(coalesce(s.nspacl, pg_catalog.acldefault('n', s.nspowner))) a
                                     WHERE a.privilege_type = 'CREATE'
                                       AND (a.grantee = 0 OR a.grantee IN (SELECT reach.oid FROM reach)))
                         OR s.nspowner IN (SELECT reach.oid FROM reach))
            THEN pg_catalog.format('%s function %s searches a schema where PUBLIC or an agent login may CREATE: %s', what, fn,
                                   (SELECT pg_catalog.string_agg(s.name, ', ' ORDER BY s.name) FROM schemas s
                                     WHERE EXISTS (SELECT 1 FROM pg_catalog.aclexplode(coalesce(s.nspacl, pg_catalog.acldefault('n', s.nspowner))) a
                                                    WHERE a.privilege_type = 'CREATE'
                                                      AND (a.grantee = 0 OR a.grantee IN (SELECT reach.oid FROM reach)))
                                        OR s.nspowner IN (SELECT reach.oid FROM reach)))
        WHEN EXISTS (SELECT 1 FROM pg_catalog.aclexplode(coalesce(f.proacl, pg_catalog.acldefault('f', f.proowner))) a
                      WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
            THEN pg_catalog.format('%s function %s must not be executable by PUBLIC', what, fn)
        WHEN f.proowner IN (SELECT reach.oid FROM reach)
             OR EXISTS (SELECT 1 FROM pg_catalog.aclexplode(coalesce(f.proacl, pg_catalog.acldefault('f', f.proowner))) a
                         WHERE a.privilege_type = 'EXECUTE' AND a.grantee IN (SELECT reach.oid FROM reach))
            THEN pg_catalog.format('%s function %s must not be executable or owned by toolgate_agent or a role its members can reach', what, fn)
    END
    FROM (SELECT 1) one LEFT JOIN f ON true
$$;

-- Why the role `who`, defining a tool, may not bind the function `fn` (NULL: it may): it must be
-- able to name it (USAGE on its schema) and to execute it. define_tool takes a regprocedure, which
-- an OID can fill: without this, a delegated admin could bind, and read through explain_call, a
-- function it has no right to.
CREATE FUNCTION toolgate.definer_fault(who text, fn regprocedure, what text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN fn IS NULL THEN NULL
        WHEN NOT pg_catalog.has_schema_privilege(who, p.pronamespace, 'USAGE')
          OR NOT pg_catalog.has_function_privilege(who, p.oid, 'EXECUTE')
            THEN pg_catalog.format('%s may not bind %s function %s: it needs USAGE on its schema and EXECUTE on it',
                                   who, what, fn)
    END
    FROM pg_catalog.pg_proc p WHERE p.oid = fn
$$;

-- A warning for define_tool (NULL: none): the owner of `fn` owns tables with row-level security
-- enabled but not forced, which their owner is not bound by, so a function without a tenant
-- filter of its own would cross tenants there.
CREATE FUNCTION toolgate.binding_warning(fn regprocedure, what text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.format('%s function %s is owned by %s, which owns %s table(s) whose row-level security does not bind their owner (%s): a binding role that does not own the tables, or FORCE ROW LEVEL SECURITY, keeps tenants apart',
                             what, fn, p.proowner::regrole, pg_catalog.count(*),
                             pg_catalog.string_agg(c.oid::regclass::text, ', ' ORDER BY c.oid::regclass::text))
      FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_class c ON c.relowner = p.proowner
     WHERE p.oid = fn AND c.relkind IN ('r', 'p') AND c.relrowsecurity AND NOT c.relforcerowsecurity
     GROUP BY p.proowner
$$;

-- What every definition records: the tool's row (its row is the lock, so concurrent
-- definitions of one tool take turns) and, when the schema changed, its next schema version.
CREATE FUNCTION toolgate.record_tool(tool text, kind text, description text, sensitive boolean, schema jsonb,
                                     who text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    INSERT INTO toolgate.tools AS t (tool, kind, sensitive, description, defined_by)
    VALUES (tool, kind, sensitive, description, who)
    ON CONFLICT ON CONSTRAINT tools_pkey DO UPDATE SET
        sensitive = excluded.sensitive, description = excluded.description, defined_by = excluded.defined_by;
    IF (SELECT s.schema FROM toolgate.tool_schemas s WHERE s.tool = record_tool.tool
         ORDER BY s.version DESC LIMIT 1) IS DISTINCT FROM record_tool.schema THEN
        INSERT INTO toolgate.tool_schemas (tool, version, schema, created_by)
        SELECT record_tool.tool, coalesce(max(s.version), 0) + 1, record_tool.schema, who
          FROM toolgate.tool_schemas s WHERE s.tool = record_tool.tool;
    END IF;
END
$$;

-- The checks every write tool's definition passes, define_tool's and define_outbox_tool's alike.
-- Its options: how amounts may be signed, the target states, and that the tool is not a read tool.
CREATE FUNCTION toolgate.check_write_options(tool text, target_states text[], amounts text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    IF amounts IS NULL OR amounts NOT IN ('positive', 'non_negative', 'any') THEN
        RAISE EXCEPTION 'amounts is positive (more than zero, the default), non_negative (zero allowed) or any (credits allowed), not %',
            coalesce(amounts, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF array_position(target_states, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'target_states holds state names, not NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF EXISTS (SELECT 1 FROM toolgate.tools t WHERE t.tool = check_write_options.tool AND t.kind <> 'write') THEN
        RAISE EXCEPTION 'tool % is a read tool', tool USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- The functions it binds, in order (`fns[i]` is its `whats[i]` function; NULL: none bound): the
-- first that is unsafe to call (binding_fault) or that `who` may not bind (definer_fault) is
-- refused; then one warning for each owner, naming the first of its functions.
CREATE FUNCTION toolgate.check_bound_functions(who text, fns regprocedure[], whats text[]) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    fault text;
BEGIN
    FOR i IN 1 .. pg_catalog.array_length(fns, 1) LOOP
        fault := toolgate.binding_fault(fns[i]::text, whats[i]);
        IF fault IS NOT NULL THEN
            RAISE EXCEPTION '%', fault USING ERRCODE = 'invalid_function_definition';
        END IF;
    END LOOP;
    FOR i IN 1 .. pg_catalog.array_length(fns, 1) LOOP
        fault := toolgate.definer_fault(who, fns[i], whats[i]);
        IF fault IS NOT NULL THEN
            RAISE EXCEPTION '%', fault USING ERRCODE = 'insufficient_privilege';
        END IF;
    END LOOP;
    FOR fault IN SELECT DISTINCT ON (p.proowner) toolgate.binding_warning(f.fn, f.what)
                   FROM ROWS FROM (pg_catalog.unnest(fns), pg_catalog.unnest(whats)) WITH ORDINALITY AS f(fn, what, n)
                   JOIN pg_catalog.pg_proc p ON p.oid = f.fn
                  WHERE toolgate.binding_warning(f.fn, f.what) IS NOT NULL
                  ORDER BY p.proowner, f.n LOOP
        RAISE WARNING '%', fault;
    END LOOP;
END
$$;

-- Its argument contract: a schema that compiles and requires a string idempotency_key, and a
-- consent template that fits it.
CREATE FUNCTION toolgate.check_write_contract(schema jsonb, consent text, has_value boolean) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    PERFORM toolgate.check_tool_schema(schema);
    IF NOT coalesce(schema->'required' ? 'idempotency_key', false)
       OR schema->'properties'->'idempotency_key'->>'type' IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'the schema must require a string idempotency_key (the retry key)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF consent IS NOT NULL THEN
        PERFORM toolgate.check_consent_template(consent, schema, has_value);
    END IF;
END
$$;

-- Define a write tool, or change its definition: one transaction, so a refused definition leaves
-- nothing behind. Returns the definition's version; every version is in toolgate.tool_history.
-- A changed schema becomes the tool's next schema version (calls name the version that judged
-- them).
CREATE FUNCTION toolgate.define_tool(
    tool text,
    description text,
    schema jsonb,
    sensitive boolean,
    target regprocedure,
    effect regprocedure,
    value regprocedure DEFAULT NULL,
    consent text DEFAULT NULL,
    target_states text[] DEFAULT NULL,
    amounts text DEFAULT 'positive'
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    who text := toolgate.caller();
    before toolgate.tool_bindings;
    after toolgate.tool_bindings;
BEGIN
    PERFORM toolgate.check_tool_name(tool);
    IF description IS NULL OR pg_catalog.btrim(description) = '' OR schema IS NULL OR sensitive IS NULL
       OR target IS NULL OR effect IS NULL THEN
        RAISE EXCEPTION 'define_tool needs a description, a schema, sensitive, a target and an effect function'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM toolgate.check_write_options(tool, target_states, amounts);
    IF EXISTS (SELECT 1 FROM toolgate.tool_bindings b WHERE b.tool = define_tool.tool AND b.request IS NOT NULL) THEN
        RAISE EXCEPTION 'tool % is an outbox tool: redefine it with define_outbox_tool', tool
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF sensitive AND value IS NULL THEN
        RAISE EXCEPTION 'a sensitive tool needs a value function (the money at stake)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM toolgate.check_bound_functions(who, ARRAY[target, effect, value], ARRAY['target', 'effect', 'value']);
    PERFORM toolgate.check_write_contract(schema, consent, value IS NOT NULL);

    PERFORM toolgate.record_tool(tool, 'write', description, sensitive, schema, who);
    SELECT * INTO before FROM toolgate.tool_bindings b WHERE b.tool = define_tool.tool;
    INSERT INTO toolgate.tool_bindings AS b (tool, kind, target, value, effect, consent, target_states, amounts,
                                             version, defined_by)
    VALUES (tool, 'write', target::text, value::text, effect::text, consent, target_states, amounts, 1, who)
    ON CONFLICT ON CONSTRAINT tool_bindings_pkey DO UPDATE SET
        target = excluded.target, value = excluded.value, effect = excluded.effect, consent = excluded.consent,
        target_states = excluded.target_states, amounts = excluded.amounts,
        version = b.version + 1, defined_at = excluded.defined_at, defined_by = excluded.defined_by
    RETURNING * INTO after;
    INSERT INTO toolgate.tool_history (tool, version, changed_at, changed_by, old, new)
    VALUES (after.tool, after.version, pg_catalog.now(), who,
            CASE WHEN before.version IS NULL THEN NULL ELSE pg_catalog.to_jsonb(before) END,
            pg_catalog.to_jsonb(after) || pg_catalog.jsonb_build_object('description', description,
                                                                         'sensitive', sensitive));
    RETURN after.version;
END
$$;

-- Define or redefine a read tool: its schema and the reader function, and the JSON Pointers of
-- the third-party text in what it returns. The same checks as define_tool; no retry key needed.
CREATE FUNCTION toolgate.define_read_tool(
    tool text,
    description text,
    schema jsonb,
    reader regprocedure,
    untrusted text[] DEFAULT '{}'
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    who text := toolgate.caller();
    fault text;
    before toolgate.tool_bindings;
    after toolgate.tool_bindings;
BEGIN
    PERFORM toolgate.check_tool_name(tool);
    IF description IS NULL OR pg_catalog.btrim(description) = '' OR schema IS NULL OR reader IS NULL
       OR untrusted IS NULL THEN
        RAISE EXCEPTION 'define_read_tool needs a description, a schema, a reader function and untrusted'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF EXISTS (SELECT 1 FROM toolgate.tools t WHERE t.tool = define_read_tool.tool
                 AND t.kind <> 'read') THEN
        RAISE EXCEPTION 'tool % is already a write tool', tool USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(untrusted) p WHERE p IS NULL OR (p <> '' AND p !~ '^/.{0,199}$')) THEN
        RAISE EXCEPTION 'untrusted holds JSON Pointers: empty or starting with /'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    fault := toolgate.binding_fault(reader::text, 'reader');
    IF fault IS NOT NULL THEN
        RAISE EXCEPTION '%', fault USING ERRCODE = 'invalid_function_definition';
    END IF;
    fault := toolgate.definer_fault(who, reader, 'reader');
    IF fault IS NOT NULL THEN
        RAISE EXCEPTION '%', fault USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM toolgate.check_tool_schema(schema);

    PERFORM toolgate.record_tool(tool, 'read', description, false, schema, who);
    SELECT * INTO before FROM toolgate.tool_bindings b WHERE b.tool = define_read_tool.tool;
    INSERT INTO toolgate.tool_bindings AS b (tool, kind, reader, untrusted, version, defined_by)
    VALUES (tool, 'read', reader::text, untrusted, 1, who)
    ON CONFLICT ON CONSTRAINT tool_bindings_pkey DO UPDATE SET
        reader = excluded.reader, untrusted = excluded.untrusted,
        version = b.version + 1, defined_at = excluded.defined_at, defined_by = excluded.defined_by
    RETURNING * INTO after;
    INSERT INTO toolgate.tool_history (tool, version, changed_at, changed_by, old, new)
    VALUES (after.tool, after.version, pg_catalog.now(), who,
            CASE WHEN before.version IS NULL THEN NULL ELSE pg_catalog.to_jsonb(before) END,
            pg_catalog.to_jsonb(after) || pg_catalog.jsonb_build_object('description', description));
    RETURN after.version;
END
$$;

-- The entry points written in Rust, created with the library pgrx created its own functions with
-- (as toolgate.confirm is, sql/api.sql):
--   read:  any read tool a DBA defined: identity, schema, the policy row and role, then the reader;
--   call:  any write tool a DBA defined: the whole gate (src/entry.rs);
--   tools: the tools an identity may call (an agent host's tool list): those whose policy row for
--          the caller's tenant allows them and lists one of the caller's roles, with description,
--          newest schema, base tier and whether writes are on. Not a call: nothing is audited.
DO $create$
DECLARE
    library constant text := (SELECT p.probin FROM pg_catalog.pg_proc p WHERE p.oid = 'toolgate.caller()'::pg_catalog.regprocedure);
BEGIN
    EXECUTE pg_catalog.format($sql$
        CREATE FUNCTION toolgate.read(identity text, tool text, args jsonb) RETURNS jsonb
        LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
        AS %L, 'read_wrapper'
    $sql$, library);
    EXECUTE pg_catalog.format($sql$
        CREATE FUNCTION toolgate.call(identity text, conversation_id text, tool text, args jsonb) RETURNS jsonb
        LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
        AS %L, 'call_wrapper'
    $sql$, library);
    EXECUTE pg_catalog.format($sql$
        CREATE FUNCTION toolgate.tools(identity text) RETURNS jsonb
        LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
        AS %L, 'tools_wrapper'
    $sql$, library);
    EXECUTE pg_catalog.format($sql$
        CREATE FUNCTION toolgate.tenant_call(tenant text, identity text, conversation_id text, tool text, args jsonb)
        RETURNS jsonb
        LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
        AS %L, 'tenant_call_wrapper'
    $sql$, library);
    EXECUTE pg_catalog.format($sql$
        CREATE FUNCTION toolgate.tenant_read(tenant text, identity text, tool text, args jsonb) RETURNS jsonb
        LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
        AS %L, 'tenant_read_wrapper'
    $sql$, library);
END
$create$;
COMMENT ON FUNCTION toolgate.tools(text) IS
    'The tools the identity''s tenant and role may call, each with its newest schema: what an agent host lists.';
-- call and read routed by the tenant: what a client of a Citus cluster calls, so the call runs on
-- the node that holds the tenant's rows (docs/scale-out.md). A token of another tenant is
-- BLOCKED identity_invalid (tenant_mismatch). On one node they are call and read with one check
-- more.
COMMENT ON FUNCTION toolgate.tenant_call(text, text, text, text, jsonb) IS
    'toolgate.call routed by the tenant (a Citus cluster runs it on the tenant''s node); the token must name that tenant.';
COMMENT ON FUNCTION toolgate.tenant_read(text, text, text, jsonb) IS
    'toolgate.read routed by the tenant (a Citus cluster runs it on the tenant''s node); the token must name that tenant.';

-- The contract's three entry points are three tools by name, defined by the DBA like any other
-- (examples/maintenance binds them to a maintenance ERP). SQL-standard bodies, bound when they are
-- created (no search_path is ever consulted), and inlined into the caller's statement.
CREATE FUNCTION toolgate.request_close(identity text, conversation_id text, args jsonb) RETURNS jsonb
LANGUAGE sql VOLATILE PARALLEL UNSAFE
RETURN toolgate.call(identity, conversation_id, 'request_close', args);

CREATE FUNCTION toolgate.request_purchase_part(identity text, conversation_id text, args jsonb) RETURNS jsonb
LANGUAGE sql VOLATILE PARALLEL UNSAFE
RETURN toolgate.call(identity, conversation_id, 'request_purchase_part', args);

CREATE FUNCTION toolgate.read_order(identity text, order_id text) RETURNS jsonb
LANGUAGE sql VOLATILE PARALLEL UNSAFE
RETURN toolgate.read(identity, 'read_order', pg_catalog.jsonb_build_object('order_id', order_id));

COMMENT ON FUNCTION toolgate.request_close(text, text, jsonb) IS
    'The tool request_close through the whole gate (toolgate.call); tier >= 1 returns a proposal to confirm.';
COMMENT ON FUNCTION toolgate.request_purchase_part(text, text, jsonb) IS
    'The tool request_purchase_part through the whole gate (toolgate.call).';
COMMENT ON FUNCTION toolgate.read_order(text, text) IS
    'The read tool read_order (toolgate.read): third-party text comes back marked untrusted.';
COMMENT ON FUNCTION toolgate.call(text, text, text, jsonb) IS
    'Call any write tool defined with define_tool: the whole gate runs.';
COMMENT ON FUNCTION toolgate.define_tool(text, text, jsonb, boolean, regprocedure, regprocedure, regprocedure, text,
                                         text[], text) IS
    'Define or redefine a write tool bound to the DBA''s own functions; versioned in tool_history.';
COMMENT ON FUNCTION toolgate.read(text, text, jsonb) IS
    'Call a read tool defined with define_read_tool: third-party text comes back marked untrusted.';
COMMENT ON FUNCTION toolgate.define_read_tool(text, text, jsonb, regprocedure, text[]) IS
    'Define or redefine a read tool bound to the DBA''s reader function; versioned in tool_history.';
COMMENT ON FUNCTION toolgate.current_tenant() IS
    'The verified tenant of the gate call in progress (NULL outside one): for the ERP''s row-level security.';

------------------------------------------------------------------------------------------------
-- Who administers the gate in this database. toolgate_admin is a role of the whole cluster, and
-- its members are the same in every database; each database lists the roles whose members
-- administer the gate in it. A change to the configuration (tenants, keys, issuers and their
-- mappings, tools, their schemas and bindings, policy rows, turning writes on) by a caller —
-- the role SET ROLE left, toolgate.caller() — that is not a superuser, not the extension's owner
-- and not a member of a role listed here is refused. Installed, the list is toolgate_admin
-- itself: every member of it administers, as before. On a cluster shared by several databases
-- the owner replaces it with a role of this database's own (add_administrator, then
-- remove_administrator('toolgate_admin')).
------------------------------------------------------------------------------------------------

CREATE TABLE toolgate.administrators (
    role_name name PRIMARY KEY,
    added_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    added_by  text NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('toolgate.administrators', '');
INSERT INTO toolgate.administrators (role_name, added_by) VALUES ('toolgate_admin', 'CREATE EXTENSION');

-- Whether role `who` administers the gate in this database.
CREATE FUNCTION toolgate.administers(who text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = who AND r.rolsuper)
        OR EXISTS (SELECT 1 FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_roles r ON r.oid = e.extowner
                    WHERE e.extname = 'pg_toolgate' AND r.rolname = who)
        OR EXISTS (SELECT 1 FROM toolgate.administrators a JOIN pg_catalog.pg_roles r ON r.rolname = a.role_name
                    WHERE pg_catalog.pg_has_role(who, r.oid, 'MEMBER'))
$$;

CREATE FUNCTION toolgate.require_administrator() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, toolgate, pg_temp AS $$
DECLARE
    who text := toolgate.caller();
BEGIN
    IF NOT toolgate.administers(who) THEN
        RAISE EXCEPTION 'pg_toolgate: % does not administer the gate in database %', who, pg_catalog.current_database()
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'toolgate_admin is a role of the whole cluster; toolgate.administrators lists the roles '
                         'whose members administer this database (the extension''s owner changes it with '
                         'toolgate.add_administrator and toolgate.remove_administrator).';
    END IF;
    IF TG_LEVEL = 'ROW' THEN
        RETURN NEW;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER tenants_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.tenants
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();
CREATE TRIGGER keys_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.keys
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();
CREATE TRIGGER issuers_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.issuers
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();
CREATE TRIGGER tenant_issuers_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.tenant_issuers
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();
CREATE TRIGGER tools_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.tools
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();
CREATE TRIGGER tool_schemas_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.tool_schemas
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();
CREATE TRIGGER tool_bindings_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.tool_bindings
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();
CREATE TRIGGER policies_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.policies
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();
-- Turning writes off is on-call's too (toolgate_operator); turning them on is an administrator's.
CREATE TRIGGER write_switches_administered BEFORE INSERT OR UPDATE ON toolgate.write_switches
    FOR EACH ROW WHEN (NEW.enabled) EXECUTE FUNCTION toolgate.require_administrator();

-- The extension's owner (or a superuser) names who administers: the members of `role`.
CREATE FUNCTION toolgate.add_administrator(role regrole) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, toolgate, pg_temp AS $$
BEGIN
    IF role IS NULL THEN
        RAISE EXCEPTION 'role must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    INSERT INTO toolgate.administrators (role_name, added_by) VALUES (role::text, toolgate.caller())
    ON CONFLICT ON CONSTRAINT administrators_pkey DO NOTHING;
END
$$;

CREATE FUNCTION toolgate.remove_administrator(role text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, toolgate, pg_temp AS $$
BEGIN
    DELETE FROM toolgate.administrators a WHERE a.role_name = role;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'role % does not administer the gate in this database', role
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON TABLE toolgate.administrators IS
    'The roles whose members administer the gate in this database (toolgate_admin alone grants nothing here otherwise).';
