-- pg_toolgate 0.1.0 → 0.2.0: the extension ships no ERP and no tool of its own any more; every
-- tool is bound to the DBA's functions (toolgate.define_tool). A 0.1.0 database keeps all of its
-- configuration and history, and its built-in ERP becomes the DBA's: the tables work_orders,
-- parts, cost_centers, purchases and close_requests, with their rows, move to the schema
-- `maintenance` owned by the role `maintenance_owner`, exactly as examples/maintenance builds
-- them (row-level security included), and the tools request_close, request_purchase_part and the
-- read tool read_order are bound to them with that example's functions. Calls go on working:
-- live proposals can be confirmed, settled keys replay. Two things a DBA may want to look at
-- afterwards (both in docs/upgrades.md):
--   * reads now need a policy row like writes: every tenant with a policy row gets one for
--     read_order, for the roles its rows already name;
--   * toolgate.effects lists the audit rows of the changes the gate made (one per successful
--     call or confirmation), without the idempotency key: the ERP's rows are the DBA's.
\echo Use "ALTER EXTENSION pg_toolgate UPDATE TO '0.2.0'" to load this file. \quit

------------------------------------------------------------------------------------------------
-- 0. The library. From 0.2.0 each version's library is a file of its own,
--    pg_toolgate-VERSION in $libdir, installed beside the older ones, so a database not yet updated
--    goes on using its own. First of all, every C function of the extension is pointed at the
--    library installed with this script (CREATE OR REPLACE keeps its oid, grants and every other
--    attribute); a function whose symbol that library no longer has is left for the sections
--    below, which drop or replace it.
------------------------------------------------------------------------------------------------

DO $library$
DECLARE
    library constant text := 'pg_toolgate-@CARGO_VERSION@';
    f record;
    old_def text;
    new_def text;
BEGIN
    FOR f IN
        SELECT p.oid, p.probin
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
         WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.deptype = 'e'
           AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_toolgate')
           AND p.prolang = (SELECT l.oid FROM pg_catalog.pg_language l WHERE l.lanname = 'c')
           AND p.probin IS DISTINCT FROM library
    LOOP
        -- pg_get_functiondef writes the library on a line of its own: AS 'file', $function$symbol$function$
        old_def := pg_catalog.pg_get_functiondef(f.oid);
        new_def := pg_catalog.replace(old_def, E'\nAS ' || pg_catalog.quote_literal(f.probin) || ',',
                                      E'\nAS ' || pg_catalog.quote_literal(library) || ',');
        IF new_def = old_def THEN
            RAISE EXCEPTION 'pg_toolgate update: cannot point % at %', f.oid::pg_catalog.regprocedure, library;
        END IF;
        BEGIN
            EXECUTE new_def;
        EXCEPTION WHEN undefined_function THEN
            NULL;
        END;
    END LOOP;
END
$library$;

------------------------------------------------------------------------------------------------
-- 1. The registry: tool-level target states, no shipped tools, the entry points named after
--    their tools as SQL functions over toolgate.call / toolgate.read.
------------------------------------------------------------------------------------------------

ALTER TABLE toolgate.tool_bindings
    ADD COLUMN target_states text[] CHECK (array_position(target_states, NULL) IS NULL);
ALTER TABLE toolgate.tool_bindings
    ADD COLUMN amounts text CHECK (amounts IN ('positive', 'non_negative', 'any'));
-- An outbox tool's binding (the rest in section 4): its request and finish functions
-- and the ERP endpoint it goes to. Here, so that define_tool (section 3) finds the columns.
CREATE TABLE toolgate.erp_endpoints (
    name       text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    base_url   text NOT NULL CHECK (base_url ~ '^https?://[^\s/?#@]+(/[^\s?#@]*)?$'),
    auth_kind  text NOT NULL CHECK (auth_kind IN ('none', 'bearer', 'refresh_token')),
    per_second integer CHECK (per_second > 0),
    per_minute integer CHECK (per_minute > 0),
    -- How the dispatcher reads its answers, where they differ from the contract
    -- (toolgate.set_erp_answers; NULL: the contract, toolgate.erp_answers_contract()).
    answers    jsonb CHECK (pg_catalog.jsonb_typeof(answers) = 'object'),
    defined_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    defined_by text NOT NULL
);
ALTER TABLE toolgate.tool_bindings ADD COLUMN request text, ADD COLUMN finish text,
    ADD COLUMN endpoint text REFERENCES toolgate.erp_endpoints;
-- A write tool's consent template in other languages: {"en": "...", "es": "..."} (toolgate.set_consent_translation);
-- a tenant whose language has one reads it instead of `consent`.
ALTER TABLE toolgate.tool_bindings ADD COLUMN consent_translations jsonb
    CHECK (pg_catalog.jsonb_typeof(consent_translations) = 'object');
-- A proposal keeps what the person read the decision on: the amount, the account, and a digest
-- of the tool's definition; a confirmation finding another is refused and invalidates it.
-- A proposal made before the update has none of them (NULL): it is confirmed as 0.1.0 confirmed
-- it, for the few minutes it may still live.
ALTER TABLE toolgate.proposals ADD COLUMN amount numeric, ADD COLUMN account text, ADD COLUMN definition text;
-- Tenants read proposals in their own language and currency (toolgate.set_tenant_locale); every
-- tenant there is now reads Portuguese and reais, as before. A proposal keeps its language and
-- currency (NULL for one made before the update: Portuguese, reais).
ALTER TABLE toolgate.proposals ADD COLUMN language text, ADD COLUMN currency text;
ALTER TABLE toolgate.tenants
    ADD COLUMN language     text NOT NULL DEFAULT 'pt',
    ADD COLUMN currency     text NOT NULL DEFAULT 'BRL',
    ADD COLUMN minor_unit   smallint NOT NULL DEFAULT 2,
    ADD COLUMN money_format text NOT NULL DEFAULT 'R$ 1.234,56';
CREATE TRIGGER tenants_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.tenants
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('tenants');
CREATE FUNCTION toolgate.check_locale(language text, currency text, money_format text, minor_unit integer)
RETURNS integer IMMUTABLE PARALLEL SAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'check_locale_wrapper';
ALTER TABLE toolgate.tenants ADD CONSTRAINT tenants_locale_check
    CHECK (toolgate.check_locale(language, currency, money_format, minor_unit) = minor_unit);
CREATE FUNCTION toolgate.set_tenant_locale(tenant_id text, language text, currency text, money_format text,
                                           minor_unit integer DEFAULT NULL) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    unit integer := toolgate.check_locale(language, currency, money_format, minor_unit);
BEGIN
    UPDATE toolgate.tenants t
       SET language = set_tenant_locale.language, currency = set_tenant_locale.currency, minor_unit = unit,
           money_format = set_tenant_locale.money_format
     WHERE t.tenant_id = set_tenant_locale.tenant_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown tenant %', tenant_id USING ERRCODE = 'no_data_found';
    END IF;
END
$$;
REVOKE ALL ON FUNCTION toolgate.check_locale(text, text, text, integer),
                      toolgate.set_tenant_locale(text, text, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.set_tenant_locale(text, text, text, text, integer) TO toolgate_admin;

-- A write tool's consent template in one of the languages the gate writes ('pt', 'en', 'es'): a
-- tenant reading that language (toolgate.set_tenant_locale) reads it instead of the tool's own
-- `consent`; NULL removes it. Checked as define_tool checks `consent`, against the tool's newest
-- schema. A new version of the definition: live proposals of the tool are confirmed no more.
-- Redefining the tool keeps its translations.
CREATE FUNCTION toolgate.set_consent_translation(tool text, language text, template text) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    who text := toolgate.caller();
    before toolgate.tool_bindings;
    after toolgate.tool_bindings;
    newest jsonb;
BEGIN
    SELECT * INTO before FROM toolgate.tool_bindings b WHERE b.tool = set_consent_translation.tool AND b.kind = 'write';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no write tool %', tool USING ERRCODE = 'no_data_found';
    END IF;
    IF language IS NULL OR language NOT IN ('pt', 'en', 'es') THEN
        RAISE EXCEPTION 'language % is not one the gate writes (pt, en, es)', language
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF template IS NOT NULL THEN
        SELECT s.schema INTO newest FROM toolgate.tool_schemas s
         WHERE s.tool = set_consent_translation.tool ORDER BY s.version DESC LIMIT 1;
        PERFORM toolgate.check_consent_template(template, newest, before.value IS NOT NULL);
    END IF;
    UPDATE toolgate.tool_bindings b
       SET consent_translations = CASE WHEN template IS NULL
                                       THEN NULLIF(coalesce(b.consent_translations, '{}') - language, '{}')
                                       ELSE coalesce(b.consent_translations, '{}')
                                            || pg_catalog.jsonb_build_object(language, template) END,
           version = b.version + 1, defined_at = pg_catalog.now(), defined_by = who
     WHERE b.tool = set_consent_translation.tool
    RETURNING * INTO after;
    INSERT INTO toolgate.tool_history (tool, version, changed_at, changed_by, old, new)
    VALUES (after.tool, after.version, pg_catalog.now(), who, pg_catalog.to_jsonb(before), pg_catalog.to_jsonb(after));
    RETURN after.version;
END
$$;
REVOKE ALL ON FUNCTION toolgate.set_consent_translation(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.set_consent_translation(text, text, text) TO toolgate_admin;
ALTER TABLE toolgate.tool_bindings DROP CONSTRAINT tool_bindings_check;
ALTER TABLE toolgate.tool_bindings ADD CONSTRAINT tool_bindings_check
    CHECK (CASE kind WHEN 'write' THEN target IS NOT NULL AND effect IS NOT NULL AND reader IS NULL
                     ELSE reader IS NOT NULL AND target IS NULL AND value IS NULL AND effect IS NULL
                          AND consent IS NULL AND target_states IS NULL END);

-- Every row of these is the DBA's now.
SELECT pg_catalog.pg_extension_config_dump('toolgate.tools', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.tool_schemas', '');

-- A binding keeps its functions' signatures as text, found again by name at every use: a
-- regprocedure column (an OID) is one pg_upgrade refuses.
ALTER TABLE toolgate.tool_bindings ALTER COLUMN target TYPE text USING target::text,
                                   ALTER COLUMN value TYPE text USING value::text,
                                   ALTER COLUMN effect TYPE text USING effect::text,
                                   ALTER COLUMN reader TYPE text USING reader::text;
DROP FUNCTION toolgate.binding_fault(regprocedure, text);
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
REVOKE ALL ON FUNCTION toolgate.binding_fault(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION toolgate.search_path_names(text) FROM PUBLIC;

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

REVOKE ALL ON FUNCTION toolgate.definer_fault(text, regprocedure, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION toolgate.binding_warning(regprocedure, text) FROM PUBLIC;

DROP FUNCTION toolgate.invoke_binding(regprocedure, jsonb, jsonb);
DROP FUNCTION toolgate.define_tool(text, text, jsonb, boolean, regprocedure, regprocedure, regprocedure, text);

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

REVOKE ALL ON FUNCTION toolgate.check_write_options(text, text[], text),
                      toolgate.check_bound_functions(text, regprocedure[], text[]),
                      toolgate.check_write_contract(jsonb, text, boolean) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION toolgate.define_read_tool(
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

-- The tools an identity may call (an agent host's tool list): those whose policy row for the
-- caller's tenant allows them and lists one of the caller's roles, with description, newest
-- schema, base tier and whether writes are on. Not a call: nothing is audited.
CREATE FUNCTION toolgate.tools(identity text) RETURNS jsonb
LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS 'pg_toolgate-@CARGO_VERSION@', 'tools_wrapper';
COMMENT ON FUNCTION toolgate.tools(text) IS
    'The tools the identity''s tenant and role may call, each with its newest schema: what an agent host lists.';
REVOKE ALL ON FUNCTION toolgate.tools(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.tools(text) TO toolgate_agent;

-- The contract's three entry points keep their names, signatures and grants; they are the gate's
-- generic entry points called with their tool's name (the C functions they were are replaced).
CREATE OR REPLACE FUNCTION toolgate.request_close(identity text, conversation_id text, args jsonb) RETURNS jsonb
LANGUAGE sql VOLATILE PARALLEL UNSAFE
RETURN toolgate.call(identity, conversation_id, 'request_close', args);

CREATE OR REPLACE FUNCTION toolgate.request_purchase_part(identity text, conversation_id text, args jsonb) RETURNS jsonb
LANGUAGE sql VOLATILE PARALLEL UNSAFE
RETURN toolgate.call(identity, conversation_id, 'request_purchase_part', args);

CREATE OR REPLACE FUNCTION toolgate.read_order(identity text, order_id text) RETURNS jsonb
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
REVOKE ALL ON FUNCTION toolgate.define_tool(text, text, jsonb, boolean, regprocedure, regprocedure, regprocedure,
                                            text, text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.define_tool(text, text, jsonb, boolean, regprocedure, regprocedure, regprocedure,
                                               text, text[], text) TO toolgate_admin;

-- The effects the gate made are its audit rows: the ERP's tables are the DBA's.
DROP VIEW toolgate.panel;
DROP VIEW toolgate.effects;
CREATE VIEW toolgate.effects AS
SELECT a.tenant_id, a.tool, a.target, CASE WHEN a.kind = 'dispatch' THEN a.detail->>'asked_by' ELSE a.actor END AS actor,
       a.proposal_id, (a.detail->'value'->>'amount')::numeric AS value, a.at
  FROM toolgate.audit a
 WHERE (a.outcome = 'SUCCEEDED' AND NOT a.replayed AND a.kind IN ('call', 'confirm'))
    OR (a.kind = 'dispatch' AND a.effects > 0);

-- Seed 000's counters per tenant, plus the effects the gate made. Calls whose identity
-- failed have no verified tenant and are counted under tenant_id NULL.
CREATE VIEW toolgate.panel AS
WITH calls AS (
    SELECT a.tenant_id,
           count(*) FILTER (WHERE a.kind = 'call'
                              AND a.rule IS DISTINCT FROM 'schema_invalid'
                              AND a.rule IS DISTINCT FROM 'identity_invalid') AS schema_valid,
           count(*) FILTER (WHERE a.rule = 'schema_invalid') AS schema_rejected,
           count(*) FILTER (WHERE a.outcome = 'BLOCKED') AS blocked_actions,
           count(*) FILTER (WHERE a.replayed) AS duplicates_suppressed,
           count(*) FILTER (WHERE a.rule = 'human_declined' AND NOT a.replayed) AS confirmation_denied,
           count(*) FILTER (WHERE a.outcome = 'PARTIAL' AND NOT a.replayed) AS partial_results
      FROM toolgate.audit a
     GROUP BY a.tenant_id
), made AS (
    SELECT e.tenant_id, count(*) AS effects FROM toolgate.effects e GROUP BY e.tenant_id
)
SELECT coalesce(c.tenant_id, m.tenant_id) AS tenant_id,
       coalesce(c.schema_valid, 0) AS schema_valid,
       coalesce(c.schema_rejected, 0) AS schema_rejected,
       coalesce(c.blocked_actions, 0) AS blocked_actions,
       coalesce(c.duplicates_suppressed, 0) AS duplicates_suppressed,
       coalesce(c.confirmation_denied, 0) AS confirmation_denied,
       coalesce(c.partial_results, 0) AS partial_results,
       coalesce(m.effects, 0) AS effects
  FROM calls c FULL JOIN made m ON m.tenant_id = c.tenant_id;

REVOKE ALL ON toolgate.effects, toolgate.panel FROM PUBLIC;
GRANT SELECT ON toolgate.panel, toolgate.effects TO toolgate_auditor, toolgate_admin, toolgate_operator;

------------------------------------------------------------------------------------------------
-- 2. The built-in ERP becomes the DBA's: examples/maintenance's schema, owner and row-level
--    security, with the rows it had.
------------------------------------------------------------------------------------------------

-- A role of that name made before (by hand, or by an earlier run) is used only if it is the same
-- kind of role: one that can log in, or has members, is refused (its members would act as the
-- ERP's owner).
DO $$
BEGIN
    CREATE ROLE maintenance_owner NOLOGIN;
EXCEPTION WHEN duplicate_object THEN
    IF EXISTS (SELECT FROM pg_catalog.pg_authid a WHERE a.rolname = 'maintenance_owner'
                  AND (a.rolcanlogin OR a.rolpassword IS NOT NULL OR a.rolsuper OR a.rolbypassrls))
       OR EXISTS (SELECT FROM pg_catalog.pg_auth_members m WHERE m.roleid = 'maintenance_owner'::regrole) THEN
        RAISE EXCEPTION 'role maintenance_owner already exists and can log in, has a password, an attribute or members'
            USING ERRCODE = 'invalid_object_definition';
    END IF;
END
$$;
GRANT USAGE ON SCHEMA toolgate TO maintenance_owner;
GRANT EXECUTE ON FUNCTION toolgate.current_tenant() TO maintenance_owner;

CREATE SCHEMA maintenance AUTHORIZATION maintenance_owner;
ALTER EXTENSION pg_toolgate DROP SCHEMA maintenance;

-- Out of the extension (and out of pg_extension_config_dump: pg_dump dumps them as the DBA's own
-- tables from now on), into the schema, to the owner; the tenant is theirs to check, not a
-- reference into the extension's tables.
ALTER EXTENSION pg_toolgate DROP TABLE toolgate.work_orders;
ALTER EXTENSION pg_toolgate DROP TABLE toolgate.parts;
ALTER EXTENSION pg_toolgate DROP TABLE toolgate.cost_centers;
ALTER EXTENSION pg_toolgate DROP TABLE toolgate.purchases;
ALTER EXTENSION pg_toolgate DROP TABLE toolgate.close_requests;
ALTER TABLE toolgate.work_orders DROP CONSTRAINT work_orders_tenant_id_fkey;
ALTER TABLE toolgate.parts DROP CONSTRAINT parts_tenant_id_fkey;
ALTER TABLE toolgate.cost_centers DROP CONSTRAINT cost_centers_tenant_id_fkey;
ALTER TABLE toolgate.work_orders SET SCHEMA maintenance;
ALTER TABLE toolgate.parts SET SCHEMA maintenance;
ALTER TABLE toolgate.cost_centers SET SCHEMA maintenance;
ALTER TABLE toolgate.purchases SET SCHEMA maintenance;
ALTER TABLE toolgate.close_requests SET SCHEMA maintenance;
ALTER TABLE maintenance.work_orders OWNER TO maintenance_owner;
ALTER TABLE maintenance.parts OWNER TO maintenance_owner;
ALTER TABLE maintenance.cost_centers OWNER TO maintenance_owner;
ALTER TABLE maintenance.purchases OWNER TO maintenance_owner;
ALTER TABLE maintenance.close_requests OWNER TO maintenance_owner;
-- The tenant leads every key, as in the example (a cluster can distribute them by tenant).
ALTER TABLE maintenance.purchases DROP CONSTRAINT purchases_pkey, ADD PRIMARY KEY (tenant_id, purchase_id);
ALTER TABLE maintenance.close_requests DROP CONSTRAINT close_requests_pkey, ADD PRIMARY KEY (tenant_id, request_id);
-- The order's number and state checked by domains, as in the example (a domain's check is
-- prepared once per server process, a table's CHECK at every statement that writes the table).
CREATE DOMAIN maintenance.order_number AS text CHECK (VALUE ~ '^[0-9]{1,10}$');
CREATE DOMAIN maintenance.order_status AS text CHECK (VALUE IN ('open', 'close_requested', 'closed'));
ALTER EXTENSION pg_toolgate DROP DOMAIN maintenance.order_number;
ALTER EXTENSION pg_toolgate DROP DOMAIN maintenance.order_status;
ALTER DOMAIN maintenance.order_number OWNER TO maintenance_owner;
ALTER DOMAIN maintenance.order_status OWNER TO maintenance_owner;
ALTER TABLE maintenance.work_orders DROP CONSTRAINT work_orders_order_id_check,
    DROP CONSTRAINT work_orders_status_check,
    ALTER COLUMN order_id TYPE maintenance.order_number, ALTER COLUMN status TYPE maintenance.order_status;

-- The tenant a second time: even the owner's own functions see only the rows of the tenant the
-- gate verified for the call in progress (and none outside a call).
ALTER TABLE maintenance.work_orders ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE maintenance.parts ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE maintenance.cost_centers ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE maintenance.purchases ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE maintenance.close_requests ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON maintenance.work_orders USING (tenant_id = toolgate.current_tenant());
CREATE POLICY tenant ON maintenance.parts USING (tenant_id = toolgate.current_tenant());
CREATE POLICY tenant ON maintenance.cost_centers USING (tenant_id = toolgate.current_tenant());
CREATE POLICY tenant ON maintenance.purchases USING (tenant_id = toolgate.current_tenant());
CREATE POLICY tenant ON maintenance.close_requests USING (tenant_id = toolgate.current_tenant());

-- examples/maintenance's binding functions, as that example defines them, owned by the ERP's
-- owner and executable by nobody else.
-- request_close's target: the order, locked until the call ends (no row: NULL). Its state in
-- this ERP's words: an open order that nobody inspected yet is 'uninspected', not 'open'.
CREATE FUNCTION maintenance.order_to_close(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    result jsonb;
BEGIN
    SELECT jsonb_build_object('id', order_id, 'tenant', tenant_id,
                              'state', CASE WHEN status = 'open' AND NOT inspected THEN 'uninspected'
                                            ELSE status END)
      INTO result
      FROM maintenance.work_orders
     WHERE tenant_id = ctx->>'tenant' AND order_id = args->>'order_id'
       FOR UPDATE;
    RETURN result;
END
$$;

-- request_close's effect: the order's new status, only if it is still open and inspected, then the
-- close request for the order it closed (none if it moved: NULL, and the gate answers
-- state_not_allowed). An error leaves nothing of it: the gate runs its bound functions in a
-- subtransaction. Each statement names the tenant and returns plain columns: on a Citus cluster
-- each runs on the tenant's node, in the call's backend (docs/scale-out.md).
CREATE FUNCTION maintenance.close_order(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    closed text;
    request uuid;
BEGIN
    UPDATE maintenance.work_orders SET status = 'close_requested', updated_at = now()
     WHERE tenant_id = ctx->>'tenant' AND order_id = args->>'order_id' AND status = 'open' AND inspected
    RETURNING order_id INTO closed;
    IF closed IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO maintenance.close_requests (tenant_id, order_id, reason, requested_by, idempotency_key, proposal_id)
    VALUES (ctx->>'tenant', closed, args->>'reason', ctx->>'actor', ctx->>'idempotency_key', (ctx->>'proposal_id')::uuid)
    RETURNING request_id INTO request;
    RETURN jsonb_build_object('order_id', closed, 'status', 'close_requested', 'request_id', request,
                              'summary', 'Close of work order ' || closed || ' requested (ERP request ' || request || ').');
END
$$;

-- request_purchase_part's target: the order, with the part and the cost centre it names, all in
-- the caller's tenant (one of them missing: NULL, target_not_found). It locks the order and the
-- cost centre, every row the effect writes, before the gate goes on, and gives what the value is
-- made of: the part's price and limit, what the cost centre's budget has left.
CREATE FUNCTION maintenance.order_to_buy_for(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    result jsonb;
BEGIN
    SELECT jsonb_build_object('id', w.order_id, 'tenant', w.tenant_id, 'state', w.status,
                              'part', p.name, 'unit_price', p.unit_price, 'max_quantity', p.max_quantity,
                              'cost_center', c.cost_center, 'available', c.budget - c.spent)
      FROM maintenance.work_orders w
      JOIN maintenance.parts p ON p.tenant_id = w.tenant_id AND p.part_id = args->>'part_id'
      JOIN maintenance.cost_centers c ON c.tenant_id = w.tenant_id AND c.cost_center = args->>'cost_center'
     WHERE w.tenant_id = ctx->>'tenant' AND w.order_id = args->>'order_id'
       FOR UPDATE OF w, c
    INTO result;
    RETURN result;
END
$$;

-- Its value, from what the target read under its locks (no row is read twice): quantity × the
-- catalogue's unit price, drawn on the cost centre, against what its budget has left; the part's
-- own per-purchase limit is the most this purchase may be worth. The unit price is also given as
-- a person reads it, for the consent text.
CREATE FUNCTION maintenance.purchase_value(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    price numeric := (ctx->'target'->>'unit_price')::numeric;
BEGIN
    RETURN jsonb_build_object('amount', (args->>'quantity')::numeric * price,
                              'account', ctx->'target'->>'cost_center',
                              'available', ctx->'target'->'available',
                              'limit', (ctx->'target'->>'max_quantity')::numeric * price,
                              'unit_price', 'R$ ' || translate(to_char(price, 'FM999,999,990.00'), ',.', '.,'));
END
$$;

-- Its effect: charge the total the person consented to, taking the amount only if the budget still
-- has it, in one statement (parallel purchases never overspend, and `spent <= budget` holds in the
-- table too; NULL when it no longer does), then record the purchase it paid for.
CREATE FUNCTION maintenance.buy_part(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    left_after numeric;
    p maintenance.purchases;
BEGIN
    UPDATE maintenance.cost_centers c SET spent = c.spent + (ctx->'value'->>'amount')::numeric
     WHERE c.tenant_id = ctx->>'tenant' AND c.cost_center = args->>'cost_center'
           AND c.spent + (ctx->'value'->>'amount')::numeric <= c.budget
    RETURNING c.budget - c.spent INTO left_after;
    IF left_after IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO maintenance.purchases (tenant_id, order_id, part_id, quantity, unit_price, total, cost_center,
                                       requested_by, idempotency_key, proposal_id)
    VALUES (ctx->>'tenant', args->>'order_id', args->>'part_id', (args->>'quantity')::numeric,
            (ctx->'value'->>'amount')::numeric / (args->>'quantity')::numeric, (ctx->'value'->>'amount')::numeric,
            args->>'cost_center', ctx->>'actor', ctx->>'idempotency_key', (ctx->>'proposal_id')::uuid)
    RETURNING * INTO p;
    RETURN jsonb_build_object('purchase_id', p.purchase_id, 'order_id', p.order_id, 'part_id', p.part_id,
                              'quantity', p.quantity, 'unit_price', p.unit_price::text, 'total', p.total::text,
                              'cost_center', p.cost_center, 'budget_left', left_after::text,
                              'summary', 'Purchase ' || p.purchase_id || ' recorded: ' || p.quantity || ' × '
                                         || p.part_id || ' for work order ' || p.order_id || '.');
END
$$;

-- read_order's reader: the order as the agent may see it. The note is third-party text;
-- define_read_tool names it, and the gate returns it marked untrusted.
CREATE FUNCTION maintenance.order_as_read(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, maintenance, pg_temp
AS $$
DECLARE
    result jsonb;
BEGIN
    SELECT jsonb_build_object('order_id', w.order_id, 'status', w.status, 'inspected', w.inspected, 'note', w.note)
      FROM maintenance.work_orders w
     WHERE w.tenant_id = ctx->>'tenant' AND w.order_id = args->>'order_id'
    INTO result;
    RETURN result;
END
$$;

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'maintenance'::regnamespace LOOP
        EXECUTE pg_catalog.format('ALTER EXTENSION pg_toolgate DROP FUNCTION %s', f);
        EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO maintenance_owner', f);
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;

------------------------------------------------------------------------------------------------
-- 3. The three tools, bound to it (each keeps the schema version in force), and read_order's
--    policy rows.
------------------------------------------------------------------------------------------------

SELECT toolgate.define_tool(
    tool => 'request_close',
    description => 'Request that a work order be closed.',
    schema => (SELECT s.schema FROM toolgate.tool_schemas s WHERE s.tool = 'request_close'
               ORDER BY s.version DESC LIMIT 1),
    sensitive => false,
    target => 'maintenance.order_to_close(jsonb, jsonb)',
    effect => 'maintenance.close_order(jsonb, jsonb)',
    consent => 'Solicitar fechamento da OS {target.id} (tenant {tenant}). Consequência: a OS passa a '
               'close_requested e sai da fila de trabalho. Motivo informado: {args.reason}.',
    target_states => ARRAY['open']);

SELECT toolgate.define_tool(
    tool => 'request_purchase_part',
    description => 'Buy parts from the catalogue for a work order, charged to a cost centre.',
    schema => (SELECT s.schema FROM toolgate.tool_schemas s WHERE s.tool = 'request_purchase_part'
               ORDER BY s.version DESC LIMIT 1),
    sensitive => true,
    target => 'maintenance.order_to_buy_for(jsonb, jsonb)',
    effect => 'maintenance.buy_part(jsonb, jsonb)',
    value => 'maintenance.purchase_value(jsonb, jsonb)',
    consent => 'Comprar {args.quantity} × {target.part} (peça {args.part_id}) a {value.unit_price} cada, '
               'total {value.amount}, no centro de custo {value.account}, para a OS {target.id} (tenant {tenant}).',
    target_states => ARRAY['open']);

SELECT toolgate.define_read_tool(
    tool => 'read_order',
    description => 'Read a work order: its status, whether it was inspected, and its note.',
    schema => $schema$
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["order_id"],
        "properties": {"order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"}}
    }
    $schema$,
    reader => 'maintenance.order_as_read(jsonb, jsonb)',
    untrusted => ARRAY['/note']);

SELECT toolgate.set_policy(p.tenant_id, 'read_order', allowed => true, roles => p.roles, tier => 0)
  FROM (SELECT tenant_id, array_agg(DISTINCT r ORDER BY r) AS roles
          FROM toolgate.policies, unnest(roles) r
         GROUP BY tenant_id) p
 WHERE NOT EXISTS (SELECT 1 FROM toolgate.policies x WHERE x.tenant_id = p.tenant_id AND x.tool = 'read_order');

-- Every tool is someone's now.
ALTER TABLE toolgate.tools ALTER COLUMN defined_by SET NOT NULL;

------------------------------------------------------------------------------------------------
-- Hardening: large objects and CREATE in schemas (a bound function's search_path) are taken away
-- from the agent login and reported.
------------------------------------------------------------------------------------------------

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
REVOKE ALL ON FUNCTION toolgate.large_object_functions() FROM PUBLIC;

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
CREATE OR REPLACE FUNCTION toolgate.harden_agent_login(
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
CREATE OR REPLACE FUNCTION toolgate.hardening_report(login pg_catalog.regrole)
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

------------------------------------------------------------------------------------------------
-- Issuers a DBA can correct: alter_issuer, drop_issuer, unset_tenant_issuer, and
-- set_tenant_issuer naming the mapping it replaces and the tenant's own identity keys.
------------------------------------------------------------------------------------------------

-- Make `issuer` the tenant's trusted issuer: its tokens whose tenant claim is claim_value act for
-- tenant_id (and no other issuer's tokens do). A tenant trusts one issuer: a mapping this
-- replaces is named in a NOTICE (the same mapping again changes nothing). The tenant's own active
-- Ed25519 identity keys (toolgate.keys) stay trusted alongside the issuer, and a NOTICE names them
-- (toolgate.revoke_key ends one).
CREATE OR REPLACE FUNCTION toolgate.set_tenant_issuer(tenant_id text, issuer text, claim_value text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    old_issuer text;
    old_value text;
    kids text;
BEGIN
    LOOP
        SELECT t.issuer, t.claim_value INTO old_issuer, old_value
          FROM toolgate.tenant_issuers t WHERE t.tenant_id = set_tenant_issuer.tenant_id FOR UPDATE;
        IF FOUND THEN
            IF old_issuer IS DISTINCT FROM issuer OR old_value IS DISTINCT FROM claim_value THEN
                UPDATE toolgate.tenant_issuers t
                   SET issuer = set_tenant_issuer.issuer, claim_value = set_tenant_issuer.claim_value,
                       created_at = pg_catalog.now()
                 WHERE t.tenant_id = set_tenant_issuer.tenant_id;
                RAISE NOTICE 'tenant %: issuer % (claim value %) replaced by issuer % (claim value %)',
                    tenant_id, old_issuer, old_value, issuer, claim_value;
            END IF;
            EXIT;
        END IF;
        -- No mapping yet; one made meanwhile by another session is found by the next turn.
        INSERT INTO toolgate.tenant_issuers (tenant_id, issuer, claim_value)
        VALUES (tenant_id, issuer, claim_value)
        ON CONFLICT ON CONSTRAINT tenant_issuers_pkey DO NOTHING;
        EXIT WHEN FOUND;
    END LOOP;
    SELECT pg_catalog.string_agg(k.kid, ', ' ORDER BY k.kid) INTO kids
      FROM toolgate.keys k
     WHERE k.tenant_id = set_tenant_issuer.tenant_id AND k.purpose = 'identity' AND k.active;
    IF kids IS NOT NULL THEN
        RAISE NOTICE 'tenant % also accepts identity tokens signed by its own Ed25519 key(s) %', tenant_id, kids
            USING HINT = 'Revoke each with toolgate.revoke_key(kid) for the issuer to be the only way in.';
    END IF;
END
$$;

-- The tenant no longer trusts any issuer (its Ed25519 identity keys, if any, still count). The
-- mapping removed is named in a NOTICE.
CREATE FUNCTION toolgate.unset_tenant_issuer(tenant_id text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    old_issuer text;
    old_value text;
BEGIN
    DELETE FROM toolgate.tenant_issuers t WHERE t.tenant_id = unset_tenant_issuer.tenant_id
    RETURNING t.issuer, t.claim_value INTO old_issuer, old_value;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tenant % has no issuer', tenant_id USING ERRCODE = 'no_data_found';
    END IF;
    RAISE NOTICE 'tenant %: issuer % (claim value %) no longer trusted', tenant_id, old_issuer, old_value;
END
$$;

-- Correct a registered issuer: each argument given (add_issuer's names) replaces that field, NULL
-- or left out keeps it. Checked as add_issuer checks them (a JWKS document by check_jwks, and
-- counts as a rotation; the rest by the table's constraints). Each backend's next call uses the
-- new registration (the issuers_changed trigger), tokens it verified before included. Returns
-- the number of signing keys the issuer now has.
CREATE FUNCTION toolgate.alter_issuer(
    issuer text,
    iss text DEFAULT NULL,
    audiences text[] DEFAULT NULL,
    jwks jsonb DEFAULT NULL,
    tenant_claim text DEFAULT NULL,
    actor_claim text DEFAULT NULL,
    roles_claim text DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    n integer := toolgate.check_jwks(jwks);
    kept jsonb;
BEGIN
    IF pg_catalog.num_nonnulls(iss, audiences, jwks, tenant_claim, actor_claim, roles_claim) = 0 THEN
        RAISE EXCEPTION 'nothing to change for issuer %', issuer USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Name the fields to change, e.g. audiences => ARRAY[''toolgate'']; NULL keeps a field.';
    END IF;
    UPDATE toolgate.issuers i
       SET iss = COALESCE(alter_issuer.iss, i.iss),
           audiences = COALESCE(alter_issuer.audiences, i.audiences),
           jwks = COALESCE(alter_issuer.jwks, i.jwks),
           tenant_claim = COALESCE(alter_issuer.tenant_claim, i.tenant_claim),
           actor_claim = COALESCE(alter_issuer.actor_claim, i.actor_claim),
           roles_claim = COALESCE(alter_issuer.roles_claim, i.roles_claim),
           keys_changed_at = CASE WHEN alter_issuer.jwks IS NULL THEN i.keys_changed_at ELSE pg_catalog.now() END
     WHERE i.issuer = alter_issuer.issuer
    RETURNING i.jwks INTO kept;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown issuer %', issuer USING ERRCODE = 'no_data_found';
    END IF;
    RETURN COALESCE(n, toolgate.check_jwks(kept));
END
$$;

-- Remove a registered issuer with its keys: its tokens are refused from each backend's next call
-- (unknown_issuer). Refused while a tenant trusts it.
CREATE FUNCTION toolgate.drop_issuer(issuer text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    tenants text;
BEGIN
    -- Locked first: a mapping being made now (its foreign key check) is waited for, and seen below.
    PERFORM 1 FROM toolgate.issuers i WHERE i.issuer = drop_issuer.issuer FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown issuer %', issuer USING ERRCODE = 'no_data_found';
    END IF;
    SELECT pg_catalog.string_agg(pg_catalog.format('%s (claim value %s)', t.tenant_id, t.claim_value), ', '
                                 ORDER BY t.tenant_id)
      INTO tenants
      FROM toolgate.tenant_issuers t WHERE t.issuer = drop_issuer.issuer;
    IF tenants IS NOT NULL THEN
        RAISE EXCEPTION 'issuer % is trusted by tenant %', issuer, tenants
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Map each tenant to another issuer (toolgate.set_tenant_issuer) or to none (toolgate.unset_tenant_issuer) first.';
    END IF;
    DELETE FROM toolgate.issuers i WHERE i.issuer = drop_issuer.issuer;
END
$$;

COMMENT ON FUNCTION toolgate.alter_issuer(text, text, text[], jsonb, text, text, text) IS
    'Correct a registered identity provider: each field given replaces the stored one, NULL keeps it.';
COMMENT ON FUNCTION toolgate.drop_issuer(text) IS
    'Remove a registered identity provider and its keys; refused while a tenant trusts it.';
COMMENT ON FUNCTION toolgate.unset_tenant_issuer(text) IS
    'The tenant trusts no identity provider any more (its own Ed25519 identity keys still count).';
REVOKE ALL ON FUNCTION toolgate.alter_issuer(text, text, text[], jsonb, text, text, text), toolgate.drop_issuer(text),
                      toolgate.unset_tenant_issuer(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.alter_issuer(text, text, text[], jsonb, text, text, text), toolgate.drop_issuer(text),
                          toolgate.unset_tenant_issuer(text) TO toolgate_admin;

------------------------------------------------------------------------------------------------
-- The issuers' URLs for the agent: what an MCP server lists as its authorization servers.
------------------------------------------------------------------------------------------------

-- The iss of the registered issuers whose accepted audiences include `resource`, distinct and
-- sorted (bytewise), as a JSON array ([] when none): the authorization_servers an MCP server,
-- connected as the application's login, serves for its resource URL in its OAuth Protected
-- Resource Metadata (RFC 9728). Only the issuers that may issue tokens for that resource: on a
-- server shared by many tenants, the others' providers (the customer list) are not shown. Issuer
-- URLs are public; nothing else of an issuer (audiences, keys, claims) is returned. An agent
-- entry point, like tools.
CREATE FUNCTION toolgate.authorization_servers(resource text) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT COALESCE(pg_catalog.jsonb_agg(DISTINCT i.iss COLLATE pg_catalog."C" ORDER BY i.iss COLLATE pg_catalog."C"),
                    '[]'::pg_catalog.jsonb)
      FROM toolgate.issuers i
     WHERE authorization_servers.resource OPERATOR(pg_catalog.=) ANY (i.audiences)
$$;
COMMENT ON FUNCTION toolgate.authorization_servers(text) IS
    'The iss of the identity providers whose audiences include the resource, sorted: an MCP server''s authorization_servers (RFC 9728).';
REVOKE ALL ON FUNCTION toolgate.authorization_servers(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.authorization_servers(text) TO toolgate_agent;

------------------------------------------------------------------------------------------------
-- The version a database runs and the library it calls.
------------------------------------------------------------------------------------------------

-- Which version of the extension this database runs, and which library file its C functions
-- call: after a new version is installed, a database not yet updated keeps the old library
-- ("library_current": false until ALTER EXTENSION pg_toolgate UPDATE runs in it).
CREATE FUNCTION toolgate.version() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT pg_catalog.jsonb_build_object(
               'extension', e.extversion,
               'library', lib.library,
               'library_current', lib.library = 'pg_toolgate-' || e.extversion)
      FROM pg_catalog.pg_extension e,
           LATERAL (SELECT pg_catalog.string_agg(DISTINCT pg_catalog.regexp_replace(p.probin, '^.*/', ''), ', ') AS library
                      FROM pg_catalog.pg_proc p
                      JOIN pg_catalog.pg_depend d
                        ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
                     WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.refobjid = e.oid
                       AND d.deptype = 'e' AND p.probin IS NOT NULL) lib
     WHERE e.extname = 'pg_toolgate'
$$;
COMMENT ON FUNCTION toolgate.version() IS
    'The extension version this database runs and the library file its C functions call.';
REVOKE ALL ON FUNCTION toolgate.version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.version() TO toolgate_admin, toolgate_operator, toolgate_auditor;

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
REVOKE ALL ON TABLE toolgate.administrators FROM PUBLIC;
REVOKE ALL ON FUNCTION toolgate.administers(text), toolgate.require_administrator(), toolgate.add_administrator(regrole),
                      toolgate.remove_administrator(text) FROM PUBLIC;
GRANT SELECT ON toolgate.administrators TO toolgate_admin, toolgate_auditor;

------------------------------------------------------------------------------------------------
-- 4. Outbox tools: ERPs behind an HTTP API. The outcome words PENDING and UNCERTAIN,
--    the endpoints, the outbox, define_outbox_tool, and the panel's pending count; as
--    sql/outbox.sql installs them.
------------------------------------------------------------------------------------------------


------------------------------------------------------------------------------------------------
-- Outbox tools: a write tool whose effect is delivered to an ERP outside the
-- database, behind an HTTP API. Steps 1 to 7 are any write tool's (the same target and value
-- functions, policy, quota, confirmation); at step 8 the gate does not run an effect function:
-- it calls the DBA's `request` function, which turns the call into the HTTP request to make,
-- and writes that intent to toolgate.outbox in the call's own transaction, with the ledger's
-- settlement and the audit row. The call answers PENDING (accepted, not yet done); a retry with
-- the same key replays the ledger's reply (the status query), so an intent is never enqueued
-- twice. Nothing is sent before the call commits: a dispatcher (a later slice) delivers it.
------------------------------------------------------------------------------------------------

-- The ERPs the gate's dispatcher may deliver to, by name. No secret here: the credentials are
-- the dispatcher's, kept where only its role reads them; a base URL with user:password@ in it
-- is refused.
-- (toolgate.erp_endpoints is created in section 1, before define_tool is called.)
SELECT pg_catalog.pg_extension_config_dump('toolgate.erp_endpoints', '');
CREATE TRIGGER erp_endpoints_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.erp_endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();
COMMENT ON TABLE toolgate.erp_endpoints IS
    'The ERPs outbox tools deliver to: base URL, kind of authentication, rate limits. No secret is kept here.';
-- An outbox tool's definition digest holds its endpoint's base URL (a consent given for one host
-- never applies to another): backends that cached a binding are told when an endpoint changes.
CREATE TRIGGER erp_endpoints_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.erp_endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('erp_endpoints');

-- Every change of an endpoint: who made it, when, from what to what, and whether the stored
-- credentials were dropped (an origin change drops them: they were given for the old host).
CREATE TABLE toolgate.erp_endpoint_history (
    history_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint            text NOT NULL,
    changed_at          timestamptz NOT NULL DEFAULT pg_catalog.now(),
    changed_by          text NOT NULL,
    old                 jsonb,
    new                 jsonb NOT NULL,
    credentials_dropped boolean NOT NULL DEFAULT false
);
CREATE INDEX erp_endpoint_history_at ON toolgate.erp_endpoint_history (endpoint, changed_at);
SELECT pg_catalog.pg_extension_config_dump('toolgate.erp_endpoint_history', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.erp_endpoint_history_history_id_seq', '');
CREATE TRIGGER erp_endpoint_history_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON toolgate.erp_endpoint_history FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();
COMMENT ON TABLE toolgate.erp_endpoint_history IS
    'Every change of an ERP endpoint (add_erp_endpoint, repoint_erp_endpoint): who, when, from what to what.';

-- The origin of an endpoint's base URL: scheme://host[:port], lower-cased, without the scheme's
-- default port. The stored credentials of an endpoint belong to its origin.
CREATE FUNCTION toolgate.endpoint_origin(base_url text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT pg_catalog.regexp_replace(pg_catalog.substring(pg_catalog.lower(base_url), '^https?://[^/]+'),
                                     '^(https://.+):443$|^(http://.+):80$', '\1\2')
$$;

-- Refuse a base URL no endpoint may have: not http(s), credentials, a query or a fragment in it,
-- or a host that is a link-local address written as such (169.254.0.0/16, fe80::/10: where cloud
-- metadata services answer). The dispatcher judges the address a name resolves to, at each send.
CREATE FUNCTION toolgate.check_endpoint_url(base_url text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    host text;
    address inet;
BEGIN
    IF base_url IS NULL OR base_url !~ '^https?://[^\s/?#@]+(/[^\s?#@]*)?$' THEN
        RAISE EXCEPTION 'base_url is an http(s) URL with no credentials, query or fragment in it'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Credentials are the dispatcher''s, never a table''s.';
    END IF;
    host := pg_catalog.btrim(pg_catalog.substring(base_url, '^https?://(\[[^]/]*\]|[^/:]+)'), '[]');
    BEGIN
        address := host::inet;
    EXCEPTION WHEN invalid_text_representation THEN
        address := NULL;
    END;
    IF address << inet '169.254.0.0/16' OR address << inet 'fe80::/10' OR address << inet '::ffff:169.254.0.0/112' THEN
        RAISE EXCEPTION 'base_url names a link-local address (%): no ERP is reached there', host
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Link-local addresses are where cloud metadata services answer.';
    END IF;
END
$$;

-- An outbox tool's binding: `request` instead of `effect`, the endpoint it goes to, and the
-- optional `finish` the dispatcher runs in the database once the ERP has done its part.
-- (Its columns request, finish and endpoint are added in section 1.)
ALTER TABLE toolgate.tool_bindings DROP CONSTRAINT tool_bindings_check;
ALTER TABLE toolgate.tool_bindings ADD CONSTRAINT tool_bindings_check
    CHECK (CASE kind WHEN 'write' THEN target IS NOT NULL AND reader IS NULL
                                       AND (effect IS NULL) = (request IS NOT NULL)
                                       AND (request IS NULL) = (endpoint IS NULL)
                                       AND (finish IS NULL OR request IS NOT NULL)
                     ELSE reader IS NOT NULL AND target IS NULL AND value IS NULL AND effect IS NULL
                          AND consent IS NULL AND target_states IS NULL
                          AND request IS NULL AND finish IS NULL AND endpoint IS NULL END);

-- The intents: one row per key an outbox tool settled, written in the transaction of the call
-- (or the confirmation) that accepted it. Tenant-shaped: the ledger's key leads with the tenant.
-- `args` are the clean arguments (schema-checked), `value` what the value function said,
-- `request` what the DBA's request function built ({method, path, body}; the dispatcher adds
-- the base URL, the credentials and the idempotency key). Read by administrators only: it holds
-- the arguments, which the audit never keeps.
CREATE TABLE toolgate.outbox (
    tenant_id       text NOT NULL,
    tool            text NOT NULL,
    idempotency_key text NOT NULL,
    args            jsonb NOT NULL,
    target          text NOT NULL,
    value           jsonb,
    proposal_id     uuid,
    -- Who made the call (the verified token's subject and role) and in which conversation: the
    -- context the finish function runs in at the settlement, as the effect would have.
    actor           text NOT NULL,
    role            text NOT NULL,
    conversation_id text,
    request         jsonb NOT NULL,
    endpoint        text NOT NULL,
    state           text NOT NULL DEFAULT 'PENDING'
                    CHECK (state IN ('PENDING', 'UNCERTAIN', 'SUCCEEDED', 'PARTIAL', 'REJECTED', 'DEAD')),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- The dispatcher's: when the row may be claimed next (a claim leases it ahead), when it was
    -- last claimed, when it was settled for good, and the ERP's last error word (never a body).
    next_attempt_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    claimed_at      timestamptz,
    settled_at      timestamptz,
    last_error      text,
    -- What the ERP answered when it did its part: a PARTIAL intent's finish is retried with it.
    erp_reply       jsonb,
    -- The order lines the ERP refused when it did the rest ([{"line", "error"}]): the ledger
    -- answers PARTIAL, naming them.
    refused_lines   jsonb,
    -- An attempt may have reached the ERP and nobody knows what became of it (claimed and not
    -- settled since, or settled UNCERTAIN): the next attempt asks the ERP for the key first.
    in_doubt        boolean NOT NULL DEFAULT false,
    -- The current claim (claim_outbox's), which the settlement must present; NULL once settled.
    claim           uuid,
    PRIMARY KEY (tenant_id, tool, idempotency_key)
);
CREATE INDEX outbox_pending ON toolgate.outbox (created_at) WHERE state = 'PENDING';
CREATE INDEX outbox_due ON toolgate.outbox (next_attempt_at) WHERE state IN ('PENDING', 'UNCERTAIN', 'PARTIAL');
-- The amounts still reserved on an account: what its open intents draw on it (the gate's budget
-- check for an outbox tool).
CREATE INDEX outbox_open_by_account ON toolgate.outbox (tenant_id, (value->>'account'))
    WHERE state IN ('PENDING', 'UNCERTAIN', 'PARTIAL', 'DEAD');
SELECT pg_catalog.pg_extension_config_dump('toolgate.outbox', '');
COMMENT ON TABLE toolgate.outbox IS
    'Intents of outbox tools, written with the ledger and the audit row; delivered to the ERP by the dispatcher.';

-- Name an ERP, or change one: its kind of authentication the dispatcher uses (none, bearer,
-- refresh_token) and its rate limits per second and per minute (NULL: none). The base URL (http or
-- https, no credentials in it) is given once: an endpoint that exists keeps its URL here, and
-- moving it is toolgate.repoint_erp_endpoint's, a function only the roles the DBA chooses run.
-- Every change is in toolgate.erp_endpoint_history.
CREATE FUNCTION toolgate.add_erp_endpoint(
    name text,
    base_url text,
    auth_kind text DEFAULT 'none',
    per_second integer DEFAULT NULL,
    per_minute integer DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    before toolgate.erp_endpoints;
    after toolgate.erp_endpoints;
BEGIN
    IF name IS NULL OR name !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'an endpoint''s name is a lower-case identifier (a-z, 0-9, _), not %', coalesce(name, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM toolgate.check_endpoint_url(base_url);
    IF auth_kind IS NULL OR auth_kind NOT IN ('none', 'bearer', 'refresh_token') THEN
        RAISE EXCEPTION 'auth_kind is none, bearer or refresh_token, not %', coalesce(auth_kind, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF per_second <= 0 OR per_minute <= 0 THEN
        RAISE EXCEPTION 'rate limits are more than zero, or NULL for none' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO before FROM toolgate.erp_endpoints e WHERE e.name = add_erp_endpoint.name FOR UPDATE;
    IF FOUND AND before.base_url <> add_erp_endpoint.base_url THEN
        RAISE EXCEPTION 'endpoint % is at %: add_erp_endpoint does not move it', name, before.base_url
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Moving an endpoint is toolgate.repoint_erp_endpoint''s, which only the roles the DBA '
                         'grants it to may run (its stored credentials stay with the old origin).';
    END IF;
    INSERT INTO toolgate.erp_endpoints AS e (name, base_url, auth_kind, per_second, per_minute, defined_by)
    VALUES (add_erp_endpoint.name, add_erp_endpoint.base_url, add_erp_endpoint.auth_kind,
            add_erp_endpoint.per_second, add_erp_endpoint.per_minute, toolgate.caller())
    ON CONFLICT ON CONSTRAINT erp_endpoints_pkey DO UPDATE SET
        auth_kind = excluded.auth_kind, per_second = excluded.per_second,
        per_minute = excluded.per_minute, defined_at = excluded.defined_at, defined_by = excluded.defined_by
    RETURNING * INTO after;
    INSERT INTO toolgate.erp_endpoint_history (endpoint, changed_by, old, new)
    VALUES (after.name, toolgate.caller(),
            CASE WHEN before.name IS NOT NULL THEN pg_catalog.to_jsonb(before) END, pg_catalog.to_jsonb(after));
END
$$;
COMMENT ON FUNCTION toolgate.add_erp_endpoint(text, text, text, integer, integer) IS
    'Name an ERP outbox tools deliver to (base URL, auth kind, rate limits), or change its auth kind and limits.';

-- Move an endpoint to another base URL: what an ERP's migration needs, and what would send its
-- credentials and every queued intent to another host, so it is not an administrator's alone.
-- Executable by the extension's owner only until the DBA grants it to a role of their choosing
-- (whose members must administer the gate too). An origin change drops the endpoint's stored
-- credentials (the dispatcher seeds new ones from its own --refresh-token-file NAME=FILE), and
-- every outbox tool bound to the endpoint gets a new definition digest, so no live proposal made
-- for the old host is confirmed. The dispatcher delivers only to origins on its own allowlist
-- (--allow-origin). Recorded in toolgate.erp_endpoint_history. Returns what changed.
CREATE FUNCTION toolgate.repoint_erp_endpoint(name text, base_url text) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    before toolgate.erp_endpoints;
    after toolgate.erp_endpoints;
    dropped boolean := false;
BEGIN
    PERFORM toolgate.check_endpoint_url(base_url);
    SELECT * INTO before FROM toolgate.erp_endpoints e WHERE e.name = repoint_erp_endpoint.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no ERP endpoint named % (toolgate.add_erp_endpoint)', coalesce(name, 'NULL')
            USING ERRCODE = 'undefined_object';
    END IF;
    UPDATE toolgate.erp_endpoints e
       SET base_url = repoint_erp_endpoint.base_url, defined_at = pg_catalog.now(), defined_by = toolgate.caller()
     WHERE e.name = before.name
    RETURNING * INTO after;
    IF toolgate.endpoint_origin(before.base_url) <> toolgate.endpoint_origin(after.base_url) THEN
        DELETE FROM toolgate.erp_credentials c WHERE c.endpoint = after.name;
        dropped := FOUND;
    END IF;
    INSERT INTO toolgate.erp_endpoint_history (endpoint, changed_by, old, new, credentials_dropped)
    VALUES (after.name, toolgate.caller(), pg_catalog.to_jsonb(before), pg_catalog.to_jsonb(after), dropped);
    RETURN pg_catalog.jsonb_build_object('endpoint', after.name, 'from', before.base_url, 'to', after.base_url,
                                         'credentials_dropped', dropped);
END
$$;
COMMENT ON FUNCTION toolgate.repoint_erp_endpoint(text, text) IS
    'Move an ERP endpoint to another base URL (the owner''s until granted): an origin change drops its credentials; recorded in erp_endpoint_history.';

-- How the dispatcher reads an ERP's answers when the endpoint says nothing else: the contract of
-- docs/binding.md. Pointers (RFC 6901) into a JSON answer: `status` the status word, `error` the
-- refusal's reason, `protocol` the async protocol to poll, `lines` an array of order lines, each
-- read by `line_id`, `line_status` and `line_error`; the words of each kind (compared upper-case,
-- a boolean or a number by its text); `absent`: what a 2xx to the write with no status says
-- (`done` or `unknown`). The state query's own NOT_FOUND is not a word of these lists.
CREATE FUNCTION toolgate.erp_answers_contract() RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT '{"status": "/status", "error": "/error", "protocol": "/protocol", "absent": "done",
             "done": ["DONE", "SUCCEEDED", "SUCCESS", "COMPLETED", "APPLIED", "OK"],
             "pending": ["PENDING", "PROCESSING", "IN_PROGRESS", "ACCEPTED", "QUEUED"],
             "refused": ["REJECTED", "FAILED", "FAILURE", "ERROR", "DECLINED", "DENIED", "CANCELLED", "CANCELED"],
             "lines": "/lines", "line_id": "/id", "line_status": "/status", "line_error": "/error"}'::jsonb
$$;
COMMENT ON FUNCTION toolgate.erp_answers_contract() IS
    'How the dispatcher reads an ERP''s answers unless its endpoint says otherwise (toolgate.set_erp_answers).';

-- An endpoint's reading of its answers, checked: `answers` names only what differs from the
-- contract (the keys of erp_answers_contract()); a list given replaces the contract's list of its
-- kind. Returns the reading in full, the words upper-cased. Refused: an unknown key, a pointer
-- that is not one ('' or starting with /), a list that is not 1 to 64 words, a word in two lists
-- or NOT_FOUND, an `absent` other than done or unknown.
CREATE FUNCTION toolgate.check_erp_answers(answers jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    contract constant jsonb := toolgate.erp_answers_contract();
    reading jsonb := contract;
    k text;
    v jsonb;
    words text[];
    seen text[] := '{}';
BEGIN
    IF answers IS NULL THEN
        RETURN contract;
    END IF;
    IF pg_catalog.jsonb_typeof(answers) <> 'object' THEN
        RAISE EXCEPTION 'answers is a JSON object (what differs from toolgate.erp_answers_contract())'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR k, v IN SELECT * FROM pg_catalog.jsonb_each(answers) LOOP
        IF NOT contract ? k THEN
            RAISE EXCEPTION 'answers has no key %: status, error, protocol, absent, done, pending, refused, lines, line_id, line_status, line_error', k
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF k IN ('done', 'pending', 'refused') THEN
            IF pg_catalog.jsonb_typeof(v) <> 'array' OR pg_catalog.jsonb_array_length(v) NOT BETWEEN 1 AND 64
               OR EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v) w
                           WHERE pg_catalog.jsonb_typeof(w) <> 'string'
                              OR pg_catalog.length(pg_catalog.btrim(w #>> '{}')) NOT BETWEEN 1 AND 64) THEN
                RAISE EXCEPTION 'answers.% is a list of 1 to 64 words (each 1 to 64 characters)', k
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            v := (SELECT pg_catalog.jsonb_agg(DISTINCT pg_catalog.upper(pg_catalog.btrim(w #>> '{}')))
                    FROM pg_catalog.jsonb_array_elements(v) w);
        ELSIF k = 'absent' THEN
            IF v IS DISTINCT FROM '"done"' AND v IS DISTINCT FROM '"unknown"' THEN
                RAISE EXCEPTION 'answers.absent is "done" or "unknown"' USING ERRCODE = 'invalid_parameter_value';
            END IF;
        ELSIF NOT (pg_catalog.jsonb_typeof(v) = 'string' AND (v #>> '{}' = '' OR v #>> '{}' LIKE '/%')
                   AND pg_catalog.length(v #>> '{}') <= 200)
              AND NOT (k = 'lines' AND v = 'null') THEN
            RAISE EXCEPTION 'answers.% is a JSON pointer ('''' or starting with /, at most 200 characters)%', k,
                CASE WHEN k = 'lines' THEN ', or null: no lines' ELSE '' END
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        reading := reading || pg_catalog.jsonb_build_object(k, v);
    END LOOP;
    FOREACH k IN ARRAY ARRAY['done', 'pending', 'refused'] LOOP
        words := ARRAY(SELECT pg_catalog.jsonb_array_elements_text(reading->k));
        IF words && seen THEN
            RAISE EXCEPTION 'answers: % is in two lists of words', (SELECT pg_catalog.min(w) FROM pg_catalog.unnest(words) w
                                                                   WHERE w = ANY (seen))
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF 'NOT_FOUND' = ANY (words) THEN
            RAISE EXCEPTION 'answers: NOT_FOUND is the state query''s word for a key the ERP never received'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        seen := seen || words;
    END LOOP;
    RETURN reading;
END
$$;
COMMENT ON FUNCTION toolgate.check_erp_answers(jsonb) IS
    'An endpoint''s reading of its ERP''s answers, checked and filled in from the contract.';

-- Say how an ERP that does not keep the contract answers (its field names, its words, its order
-- lines), so the dispatcher reads it right: `answers` as check_erp_answers takes it (kept as
-- given, its words upper-cased; the rest is the contract's); NULL or {} goes back to the contract. For administrators; recorded in toolgate.erp_endpoint_history. Returns
-- the reading in full.
CREATE FUNCTION toolgate.set_erp_answers(endpoint text, answers jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    reading constant jsonb := toolgate.check_erp_answers(answers);
    before toolgate.erp_endpoints;
    after toolgate.erp_endpoints;
BEGIN
    SELECT * INTO before FROM toolgate.erp_endpoints e WHERE e.name = set_erp_answers.endpoint FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no ERP endpoint named % (toolgate.add_erp_endpoint)', coalesce(endpoint, 'NULL')
            USING ERRCODE = 'undefined_object';
    END IF;
    UPDATE toolgate.erp_endpoints e
       SET answers = (SELECT pg_catalog.jsonb_object_agg(k, reading->k)
                        FROM pg_catalog.jsonb_object_keys(set_erp_answers.answers) k),
           defined_at = pg_catalog.now(), defined_by = toolgate.caller()
     WHERE e.name = before.name
    RETURNING * INTO after;
    INSERT INTO toolgate.erp_endpoint_history (endpoint, changed_by, old, new)
    VALUES (after.name, toolgate.caller(), pg_catalog.to_jsonb(before), pg_catalog.to_jsonb(after));
    RETURN reading;
END
$$;
COMMENT ON FUNCTION toolgate.set_erp_answers(text, jsonb) IS
    'How the dispatcher reads an endpoint''s answers (field names, status words, order lines), where its ERP does not keep the contract.';

-- Define an outbox tool, or change its definition: define_tool's checks and versioning, with a
-- `request` function instead of an effect (the same (ctx jsonb, args jsonb) RETURNS jsonb shape
-- and the same safety checks, at definition and at every use), the named endpoint, and an
-- optional `finish` function (checked alike) the dispatcher runs after the ERP did its part.
-- `request` receives what an effect would (ctx->'target', ctx->'value', the proposal id at a
-- confirmation) and returns {"method": GET|POST|PUT|PATCH|DELETE, "path": "/…", "body": …}.
CREATE FUNCTION toolgate.define_outbox_tool(
    tool text,
    description text,
    schema jsonb,
    sensitive boolean,
    target regprocedure,
    request regprocedure,
    endpoint text,
    value regprocedure DEFAULT NULL,
    finish regprocedure DEFAULT NULL,
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
       OR target IS NULL OR request IS NULL OR endpoint IS NULL THEN
        RAISE EXCEPTION 'define_outbox_tool needs a description, a schema, sensitive, a target and a request function and an endpoint'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM toolgate.erp_endpoints e WHERE e.name = define_outbox_tool.endpoint) THEN
        RAISE EXCEPTION 'no ERP endpoint named % (toolgate.add_erp_endpoint)', endpoint
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM toolgate.check_write_options(tool, target_states, amounts);
    IF sensitive AND value IS NULL THEN
        RAISE EXCEPTION 'a sensitive tool needs a value function (the money at stake)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM toolgate.check_bound_functions(who, ARRAY[target, request, value, finish],
                                           ARRAY['target', 'request', 'value', 'finish']);
    PERFORM toolgate.check_write_contract(schema, consent, value IS NOT NULL);

    PERFORM toolgate.record_tool(tool, 'write', description, sensitive, schema, who);
    SELECT * INTO before FROM toolgate.tool_bindings b WHERE b.tool = define_outbox_tool.tool;
    INSERT INTO toolgate.tool_bindings AS b (tool, kind, target, value, request, finish, endpoint, consent,
                                             target_states, amounts, version, defined_by)
    VALUES (tool, 'write', target::text, value::text, request::text, finish::text, endpoint, consent, target_states,
            amounts, 1, who)
    ON CONFLICT ON CONSTRAINT tool_bindings_pkey DO UPDATE SET
        target = excluded.target, value = excluded.value, effect = NULL, request = excluded.request,
        finish = excluded.finish, endpoint = excluded.endpoint, consent = excluded.consent,
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
COMMENT ON FUNCTION toolgate.define_outbox_tool(text, text, jsonb, boolean, regprocedure, regprocedure, text,
                                                regprocedure, regprocedure, text, text[], text) IS
    'Define or redefine a write tool whose effect is delivered to an ERP endpoint through the outbox; answers PENDING.';

DROP VIEW toolgate.panel;
CREATE VIEW toolgate.panel AS
WITH calls AS (
    SELECT a.tenant_id,
           count(*) FILTER (WHERE a.kind = 'call'
                              AND a.rule IS DISTINCT FROM 'schema_invalid'
                              AND a.rule IS DISTINCT FROM 'identity_invalid') AS schema_valid,
           count(*) FILTER (WHERE a.rule = 'schema_invalid') AS schema_rejected,
           count(*) FILTER (WHERE a.outcome = 'BLOCKED') AS blocked_actions,
           count(*) FILTER (WHERE a.replayed) AS duplicates_suppressed,
           count(*) FILTER (WHERE a.rule = 'human_declined' AND NOT a.replayed) AS confirmation_denied,
           count(*) FILTER (WHERE a.outcome = 'PARTIAL' AND NOT a.replayed) AS partial_results
      FROM toolgate.audit a
     GROUP BY a.tenant_id
), made AS (
    SELECT e.tenant_id, count(*) AS effects FROM toolgate.effects e GROUP BY e.tenant_id
), queued AS (
    SELECT o.tenant_id, count(*) FILTER (WHERE o.state = 'PENDING') AS pending,
           count(*) FILTER (WHERE o.state = 'DEAD') AS dead_letters
      FROM toolgate.outbox o WHERE o.state IN ('PENDING', 'DEAD') GROUP BY o.tenant_id
)
SELECT coalesce(c.tenant_id, m.tenant_id, q.tenant_id) AS tenant_id,
       coalesce(c.schema_valid, 0) AS schema_valid,
       coalesce(c.schema_rejected, 0) AS schema_rejected,
       coalesce(c.blocked_actions, 0) AS blocked_actions,
       coalesce(c.duplicates_suppressed, 0) AS duplicates_suppressed,
       coalesce(c.confirmation_denied, 0) AS confirmation_denied,
       coalesce(c.partial_results, 0) AS partial_results,
       coalesce(m.effects, 0) AS effects,
       coalesce(q.pending, 0) AS pending,
       coalesce(q.dead_letters, 0) AS dead_letters
  FROM calls c FULL JOIN made m ON m.tenant_id = c.tenant_id
  FULL JOIN queued q ON q.tenant_id = coalesce(c.tenant_id, m.tenant_id);

REVOKE ALL ON toolgate.panel, toolgate.erp_endpoints, toolgate.outbox FROM PUBLIC;
GRANT SELECT ON toolgate.panel TO toolgate_auditor, toolgate_admin, toolgate_operator;
GRANT SELECT ON toolgate.erp_endpoints, toolgate.outbox TO toolgate_admin;
REVOKE ALL ON FUNCTION toolgate.add_erp_endpoint(text, text, text, integer, integer),
                      toolgate.set_erp_answers(text, jsonb), toolgate.check_erp_answers(jsonb),
                      toolgate.erp_answers_contract(),
                      toolgate.define_outbox_tool(text, text, jsonb, boolean, regprocedure, regprocedure, text,
                                                  regprocedure, regprocedure, text, text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.add_erp_endpoint(text, text, text, integer, integer),
                          toolgate.set_erp_answers(text, jsonb), toolgate.check_erp_answers(jsonb),
                          toolgate.erp_answers_contract(),
                          toolgate.define_outbox_tool(text, text, jsonb, boolean, regprocedure, regprocedure, text,
                                                      regprocedure, regprocedure, text, text[], text) TO toolgate_admin;

------------------------------------------------------------------------------------------------
-- 5. The dispatcher: the role toolgate_dispatcher (made, or adopted as a group role,
--    as sql/bootstrap.sql does for the others), the audit's kind `dispatch`, claim_outbox and
--    settle_outbox (the outbox's columns for them are made with the table in section 4).
------------------------------------------------------------------------------------------------

DO $roles$
DECLARE
    r constant text := 'toolgate_dispatcher';
    bad text;
    admins text;
    members text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
        BEGIN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
        EXCEPTION WHEN unique_violation OR duplicate_object THEN
            NULL;
        END;
        RETURN;
    END IF;
    SELECT pg_catalog.concat_ws(', ',
               CASE WHEN a.rolcanlogin THEN 'LOGIN' END, CASE WHEN a.rolpassword IS NOT NULL THEN 'a password' END,
               CASE WHEN a.rolsuper THEN 'SUPERUSER' END, CASE WHEN a.rolcreaterole THEN 'CREATEROLE' END,
               CASE WHEN a.rolcreatedb THEN 'CREATEDB' END, CASE WHEN a.rolbypassrls THEN 'BYPASSRLS' END,
               CASE WHEN a.rolreplication THEN 'REPLICATION' END)
      INTO bad FROM pg_catalog.pg_authid a WHERE a.rolname = r;
    IF bad <> '' THEN
        RAISE EXCEPTION 'role % already exists with %: pg_toolgate''s roles are group roles', r, bad
            USING ERRCODE = 'invalid_object_definition',
                  HINT = pg_catalog.format('ALTER ROLE %I NOLOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS NOREPLICATION PASSWORD NULL, then update again.', r);
    END IF;
    SELECT pg_catalog.string_agg(DISTINCT m.member::pg_catalog.regrole::text, ', ') FILTER (WHERE m.admin_option),
           pg_catalog.string_agg(DISTINCT m.member::pg_catalog.regrole::text, ', ') FILTER (WHERE NOT m.admin_option)
      INTO admins, members FROM pg_catalog.pg_auth_members m WHERE m.roleid = r::pg_catalog.regrole;
    IF admins IS NOT NULL THEN
        RAISE WARNING 'role % already exists and % may grant it to others (ADMIN OPTION)', r, admins
            USING HINT = pg_catalog.format('REVOKE ADMIN OPTION FOR %I FROM …, unless that is meant.', r);
    END IF;
    IF members IS NOT NULL THEN
        RAISE NOTICE 'role % already exists and is granted to %: they keep what pg_toolgate grants it', r, members;
    END IF;
END
$roles$;


------------------------------------------------------------------------------------------------
-- The dispatcher: `toolgate dispatch`, logged in as a member of
-- toolgate_dispatcher, claims the intents that are due and settles what the ERP answered. It
-- reaches the outbox only through these two functions; it reads no other table of the gate.
------------------------------------------------------------------------------------------------

-- Claim up to `batch` intents whose next attempt is due, oldest first, skipping the rows another
-- dispatcher holds (FOR UPDATE SKIP LOCKED: several dispatchers side by side). Only while writes
-- are on for the tool (global switch and the tool's): the kill switch holds the queue. A claimed
-- intent counts an attempt and is leased: its next attempt is put `lease` ahead, so a dispatcher
-- that dies before it settles leaves the intent to be claimed again after that, never at once.
-- `sent_before` says an earlier attempt may have reached the ERP (`in_doubt`: claimed and never
-- settled, or settled UNCERTAIN), not merely that there was one: the dispatcher then asks the ERP
-- for the key's state before it sends anything again. A PARTIAL intent (the ERP did its
-- part, the finish function has not) is claimed too: the dispatcher sends nothing for it and
-- settles it SUCCEEDED again, which runs the finish function once more. Each claim is a new
-- random `claim` that the settlement must present: a dispatcher whose lease was lost (the intent
-- claimed again by another since) cannot settle it, and no login settles an intent it did not
-- claim. Each claim is an attempt's start, audited (kind `dispatch`, outcome PENDING, `detail`
-- `{"phase": "start", "attempt": n, …}`): an attempt cut short by a kill still leaves its row.
-- `skip` names endpoints to leave alone (the dispatcher's open circuit breakers: an ERP that
-- keeps failing does not take every slot from the others).
-- On a Citus cluster (toolgate.distribute()) the outbox is split by tenant and Citus locks rows
-- only within one shard: claim_outbox refuses there, and the dispatcher claims tenant by tenant
-- instead (toolgate.outbox_due_tenants, then toolgate.tenant_claim_outbox).
CREATE FUNCTION toolgate.claim_outbox(batch integer, lease interval DEFAULT '5 minutes', skip text[] DEFAULT '{}')
RETURNS TABLE (tenant_id text, tool text, idempotency_key text, endpoint text, base_url text, auth_kind text,
               per_second integer, per_minute integer, request jsonb, attempts integer, sent_before boolean,
               state text, claim uuid, answers jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    IF toolgate.outbox_distributed() THEN
        RAISE EXCEPTION 'the outbox is distributed by tenant (Citus): claim tenant by tenant'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'toolgate.outbox_due_tenants() names the tenants with intents due; toolgate.tenant_claim_outbox(tenant, …) claims one tenant''s on the node that holds it. toolgate dispatch does so by itself.';
    END IF;
    RETURN QUERY SELECT * FROM toolgate.outbox_claim(NULL, batch, lease, skip);
END
$$;
COMMENT ON FUNCTION toolgate.claim_outbox(integer, interval, text[]) IS
    'The dispatcher''s: claim up to batch due intents (FOR UPDATE SKIP LOCKED) while writes are on for their tools.';

-- claim_outbox for one tenant's intents, as a JSON array of claim_outbox's rows (a function
-- Citus delegates answers one value): the dispatcher's claim on a Citus cluster, where
-- toolgate.distribute() delegates it to the node that holds the tenant, so the whole claim (the
-- rows locked, leased, their attempts audited) runs in one backend there. Works on one node too.
CREATE FUNCTION toolgate.tenant_claim_outbox(tenant text, batch integer, lease interval DEFAULT '5 minutes',
                                             skip text[] DEFAULT '{}')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    IF tenant IS NULL THEN
        RAISE EXCEPTION 'tenant is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(c)), '[]')
              FROM toolgate.outbox_claim(tenant, batch, lease, skip) c);
END
$$;
COMMENT ON FUNCTION toolgate.tenant_claim_outbox(text, integer, interval, text[]) IS
    'The dispatcher''s on Citus: claim_outbox for one tenant''s intents (a JSON array of its rows), delegated to the tenant''s node.';

-- The tenants with intents due now (as claim_outbox counts them), the longest-waiting first, and
-- how many each: what the dispatcher claims from, tenant by tenant, on a Citus cluster. A read
-- of every node; it locks nothing.
CREATE FUNCTION toolgate.outbox_due_tenants(lim integer DEFAULT 64, skip text[] DEFAULT '{}')
RETURNS TABLE (tenant_id text, due bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    -- PL/pgSQL: Citus plans no parameter of a SQL function.
    RETURN QUERY
    SELECT o.tenant_id, count(*)
      FROM toolgate.outbox o
     WHERE o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL') AND o.next_attempt_at <= pg_catalog.clock_timestamp()
       AND o.endpoint <> ALL (coalesce(skip, '{}'))
       AND NOT EXISTS (SELECT 1 FROM toolgate.write_switches w WHERE NOT w.enabled AND w.scope IN ('*', o.tool))
     GROUP BY o.tenant_id
     ORDER BY min(o.next_attempt_at), o.tenant_id
     LIMIT greatest(coalesce(lim, 64), 1);
END
$$;
COMMENT ON FUNCTION toolgate.outbox_due_tenants(integer, text[]) IS
    'The dispatcher''s on Citus: the tenants with intents due now, longest-waiting first, and how many each.';

-- Whether the outbox is a Citus table (toolgate.distribute() ran): claims are then per tenant.
CREATE FUNCTION toolgate.outbox_distributed() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    distributed boolean := false;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = ''toolgate.outbox''::regclass)'
           INTO distributed;
    END IF;
    RETURN distributed;
END
$$;
COMMENT ON FUNCTION toolgate.outbox_distributed() IS
    'True when the outbox is distributed by tenant (Citus): the dispatcher claims tenant by tenant.';

-- The claim itself, claim_outbox's and tenant_claim_outbox's: every tenant's intents (`tenant`
-- NULL) or one tenant's. The time and the claims' random part are drawn once, before the
-- statement: Citus runs no volatile function in an UPDATE of a distributed table. Each claim is
-- still its own: the random part and the intent's tool and key, hashed.
CREATE FUNCTION toolgate.outbox_claim(tenant text, batch integer, lease interval, skip text[])
RETURNS TABLE (tenant_id text, tool text, idempotency_key text, endpoint text, base_url text, auth_kind text,
               per_second integer, per_minute integer, request jsonb, attempts integer, sent_before boolean,
               state text, claim uuid, answers jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    at constant timestamptz := pg_catalog.clock_timestamp();
    seed constant text := pg_catalog.gen_random_uuid()::text;
BEGIN
    IF batch IS NULL OR batch < 1 OR batch > 1000 THEN
        RAISE EXCEPTION 'batch is between 1 and 1000, not %', coalesce(batch::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF lease IS NULL OR lease < interval '1 second' THEN
        RAISE EXCEPTION 'lease is at least a second' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH due AS (
        SELECT o.tenant_id, o.tool, o.idempotency_key, o.in_doubt
          FROM toolgate.outbox o
         WHERE (tenant IS NULL OR o.tenant_id = tenant)
           AND o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL') AND o.next_attempt_at <= at
           AND o.endpoint <> ALL (coalesce(skip, '{}'))
           AND NOT EXISTS (SELECT 1 FROM toolgate.write_switches w
                            WHERE NOT w.enabled AND w.scope IN ('*', o.tool))
         ORDER BY o.next_attempt_at, o.created_at
         LIMIT batch
           FOR UPDATE OF o SKIP LOCKED
    ), claimed AS (
        UPDATE toolgate.outbox o
           SET attempts = o.attempts + 1, claimed_at = at, next_attempt_at = at + lease,
               in_doubt = o.state <> 'PARTIAL',
               claim = pg_catalog.md5(seed || '/' || o.tool || '/' || o.idempotency_key)::uuid
          FROM due
         WHERE (tenant IS NULL OR o.tenant_id = tenant)
           AND (o.tenant_id, o.tool, o.idempotency_key) = (due.tenant_id, due.tool, due.idempotency_key)
        RETURNING o.tenant_id, o.tool, o.idempotency_key, o.endpoint, o.request, o.attempts, o.state,
                  due.in_doubt AS sent_before, o.claim, o.target, o.proposal_id, o.actor
    ), started AS (
        INSERT INTO toolgate.audit (kind, tenant_id, actor, tool, target, proposal_id, outcome, effects, detail,
                                    duration_us)
        SELECT 'dispatch', c.tenant_id, session_user, c.tool, c.target, c.proposal_id, 'PENDING', 0,
               pg_catalog.jsonb_build_object('phase', 'start', 'attempt', c.attempts, 'endpoint', c.endpoint,
                                             'state', c.state, 'sent_before', c.sent_before, 'asked_by', c.actor),
               0
          FROM claimed c
    )
    SELECT c.tenant_id, c.tool, c.idempotency_key, c.endpoint, e.base_url, e.auth_kind, e.per_second, e.per_minute,
           c.request, c.attempts, c.sent_before, c.state, c.claim,
           toolgate.erp_answers_contract() || coalesce(e.answers, '{}')
      FROM claimed c JOIN toolgate.erp_endpoints e ON e.name = c.endpoint
     ORDER BY c.tenant_id, c.tool, c.idempotency_key;
END
$$;
COMMENT ON FUNCTION toolgate.outbox_claim(text, integer, interval, text[]) IS
    'claim_outbox''s and tenant_claim_outbox''s claim of due intents, every tenant''s or one''s; executable by no role.';

-- Keep a claim: put the intent's next attempt `lease` ahead again, while the dispatcher that
-- holds it is still delivering it (a slow ERP, the async protocol polled, 429s waited out), so no
-- other dispatcher claims it meanwhile. True if `claim` is still the intent's current one and the
-- intent is still open; false otherwise (the lease ran out and another dispatcher claimed it, or
-- it was settled): the dispatcher then stops delivering it at once and sends nothing more for it.
CREATE FUNCTION toolgate.renew_outbox(tenant text, tool text, key text, claim uuid,
                                      lease interval DEFAULT '5 minutes')
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    -- Drawn before the statement: Citus runs no volatile function in an UPDATE of its tables.
    at constant timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF lease IS NULL OR lease < interval '1 second' THEN
        RAISE EXCEPTION 'lease is at least a second' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE toolgate.outbox o SET next_attempt_at = at + lease
     WHERE o.tenant_id = tenant AND o.tool = renew_outbox.tool AND o.idempotency_key = key
       AND o.claim = renew_outbox.claim AND o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL');
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION toolgate.renew_outbox(text, text, text, uuid, interval) IS
    'The dispatcher''s: keep a claim while its intent is being delivered; false once the claim is lost.';

-- Put on record what happened within an attempt, between its start and its settlement: a request
-- sent again after a 401 (the token refreshed) or a 429 (its Retry-After waited), the ERP asked
-- for the key's state, the async protocol polled. `phase`: resend, ask or poll; `detail`, what
-- the dispatcher says of it (reason, status, wait_s, polls, ended: nothing else is kept). An
-- audit row of kind `dispatch`, outcome PENDING, for the intent `claim` holds; false, and nothing
-- written, once the claim is lost. The dispatcher writes a bounded number an attempt (each 401
-- and 429 resend, each state query, each run of polls), so a stuck intent's rows a day are bounded
-- by its attempts a day.
CREATE FUNCTION toolgate.note_outbox(tenant text, tool text, key text, claim uuid, phase text,
                                     detail jsonb DEFAULT '{}')
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    intent toolgate.outbox;
    said jsonb;
BEGIN
    IF phase IS NULL OR phase NOT IN ('resend', 'ask', 'poll') THEN
        RAISE EXCEPTION 'phase is resend, ask or poll, not %', coalesce(phase, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF detail IS NOT NULL AND pg_catalog.jsonb_typeof(detail) <> 'object' THEN
        RAISE EXCEPTION 'detail is a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO intent FROM toolgate.outbox o
     WHERE o.tenant_id = tenant AND o.tool = note_outbox.tool AND o.idempotency_key = key
       AND o.claim = note_outbox.claim AND o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL');
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Only the words the dispatcher has, each short: never a body, a header or a token.
    SELECT pg_catalog.jsonb_object_agg(k, CASE WHEN pg_catalog.jsonb_typeof(v) = 'string'
                                               THEN pg_catalog.to_jsonb(pg_catalog.left(v #>> '{}', 100)) ELSE v END)
      INTO said
      FROM pg_catalog.jsonb_each(coalesce(detail, '{}')) AS d(k, v)
     WHERE k IN ('reason', 'status', 'wait_s', 'polls', 'ended')
       AND pg_catalog.jsonb_typeof(v) IN ('string', 'number');
    INSERT INTO toolgate.audit (kind, tenant_id, actor, tool, target, proposal_id, outcome, effects, detail, duration_us)
    VALUES ('dispatch', intent.tenant_id, session_user, intent.tool, intent.target, intent.proposal_id, 'PENDING', 0,
            pg_catalog.jsonb_build_object('phase', phase, 'attempt', intent.attempts, 'endpoint', intent.endpoint,
                                          'asked_by', intent.actor) || coalesce(said, '{}'),
            0);
    RETURN true;
END
$$;
COMMENT ON FUNCTION toolgate.note_outbox(text, text, text, uuid, text, jsonb) IS
    'The dispatcher''s: an audit row for a resend, a state query or a run of polls within an attempt it holds.';

-- The queue's gauges, for the dispatcher's /metrics: intents due now and how long the oldest of
-- them has waited (the lag), and how many are UNCERTAIN, DEAD and PARTIAL. Counts only: no tenant,
-- no key.
CREATE FUNCTION toolgate.outbox_gauges(OUT due bigint, OUT oldest_due_seconds double precision,
                                       OUT uncertain bigint, OUT dead bigint, OUT partial bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT (SELECT count(*) FROM toolgate.outbox o
             WHERE o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL') AND o.next_attempt_at <= pg_catalog.clock_timestamp()),
           coalesce((SELECT extract(epoch FROM pg_catalog.clock_timestamp() - min(o.next_attempt_at))::float8
                       FROM toolgate.outbox o
                      WHERE o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL')
                        AND o.next_attempt_at <= pg_catalog.clock_timestamp()), 0),
           (SELECT count(*) FROM toolgate.outbox o WHERE o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL') AND o.state = 'UNCERTAIN'),
           (SELECT count(*) FROM toolgate.outbox o WHERE o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL', 'DEAD') AND o.state = 'DEAD'),
           (SELECT count(*) FROM toolgate.outbox o WHERE o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL') AND o.state = 'PARTIAL')
$$;
COMMENT ON FUNCTION toolgate.outbox_gauges() IS
    'The dispatcher''s /metrics: intents due and the oldest one''s wait, UNCERTAIN, DEAD and PARTIAL counts.';

-- The finish function's runner (Rust): settle_outbox's, with the intent's call context.
CREATE FUNCTION toolgate.outbox_finish(intent jsonb, erp jsonb) RETURNS jsonb
STRICT VOLATILE PARALLEL UNSAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'outbox_finish_wrapper';

-- Settle what the ERP answered for one intent, in one transaction: the outbox intent's state, the
-- ledger's reply for its key (so a retry with the same key, the status query, answers it,
-- replayed), an audit intent of kind `dispatch` (no argument, no secret: the endpoint, the
-- attempts, the outbox state), and, when the ERP did it, the tool's finish function. `outcome`:
--   SUCCEEDED  the ERP did it; `reply` is its answer (the ledger's result carries it). The finish
--              function, if the tool has one, then applies the follow-up in this database, in a
--              subtransaction: done, the intent is SUCCEEDED; not done (it raised, answered NULL,
--              or the binding changed unsafely), the intent is PARTIAL: the ERP's part is done
--              and is never asked for again, the ledger answers PARTIAL, and the dispatcher
--              settles it SUCCEEDED again after `retry_in`, which runs the finish function with
--              the ERP's answer kept from the first time (`reply` is then ignored);
--   REJECTED   the ERP refused it (a business 4xx): REJECTED erp_rejected, never retried;
-- `refused` (SUCCEEDED or REJECTED only): the order lines the ERP refused, as the dispatcher read
-- them ([{"line": …, "error": …}], 1 to 1,000): with SUCCEEDED, it did the rest, and the ledger
-- answers PARTIAL naming them (the intent is done: never sent again, its finish run as for
-- SUCCEEDED); with REJECTED, every line was refused.
--   PENDING    nothing reached the ERP (or it says it has no such key): tried again, same key,
--              after `retry_in`; the ledger keeps PENDING;
--   UNCERTAIN  sent, and the ERP did not say whether it applied it: the ledger answers
--              UNCERTAIN, and the next attempt (after `retry_in`) asks the ERP first;
--   DEAD       given up after the dispatcher's bound of attempts: the ledger answers UNCERTAIN
--              (nobody knows), the intent stays DEAD for a person to reconcile.
-- Only an intent in PENDING or UNCERTAIN is settled, or a PARTIAL one SUCCEEDED; anything else
-- (already final) is refused, and so is a settlement whose `claim` is not the intent's current
-- one (claim_outbox's: the lease was lost to another dispatcher, or it was never claimed). The
-- ERP's words (its answer, its error) reach the ledger's reply marked as untrusted third-party
-- text, as a read tool's do.
CREATE FUNCTION toolgate.settle_outbox(tenant text, tool text, key text, claim uuid, outcome text, reply jsonb,
                                       retry_in interval DEFAULT '30 seconds', refused jsonb DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    intent toolgate.outbox;
BEGIN
    IF outcome IS NULL OR outcome NOT IN ('SUCCEEDED', 'REJECTED', 'PENDING', 'UNCERTAIN', 'DEAD') THEN
        RAISE EXCEPTION 'outcome is SUCCEEDED, REJECTED, PENDING, UNCERTAIN or DEAD, not %', coalesce(outcome, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF retry_in IS NULL OR retry_in < interval '0' THEN
        RAISE EXCEPTION 'retry_in is an interval of zero or more' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF refused IS NOT NULL AND (outcome NOT IN ('SUCCEEDED', 'REJECTED') OR pg_catalog.jsonb_typeof(refused) <> 'array'
                                OR pg_catalog.jsonb_array_length(refused) NOT BETWEEN 1 AND 1000
                                OR EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(refused) l
                                            WHERE pg_catalog.jsonb_typeof(l) <> 'object')) THEN
        RAISE EXCEPTION 'refused is NULL or, with SUCCEEDED or REJECTED, a list of 1 to 1000 order lines (objects)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO intent FROM toolgate.outbox o
     WHERE o.tenant_id = tenant AND o.tool = settle_outbox.tool AND o.idempotency_key = key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no intent % of tool % for tenant %', key, tool, tenant USING ERRCODE = 'no_data_found';
    END IF;
    IF claim IS NULL OR intent.claim IS DISTINCT FROM claim THEN
        RAISE EXCEPTION 'intent % of tool % is not held by this claim (claimed again since, settled, or never claimed)',
            key, tool USING ERRCODE = 'object_not_in_prerequisite_state',
                            HINT = 'Settle only what toolgate.claim_outbox returned, with its claim, within its lease.';
    END IF;
    IF intent.state = 'PARTIAL' THEN
        IF outcome <> 'SUCCEEDED' THEN
            RAISE EXCEPTION 'intent % of tool % is PARTIAL: the ERP did its part, only its finish is left (settle it SUCCEEDED)',
                key, tool USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
    ELSIF intent.state NOT IN ('PENDING', 'UNCERTAIN') THEN
        RAISE EXCEPTION 'intent % of tool % is settled already (%)', key, tool, intent.state
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN toolgate.outbox_settle(intent, outcome, reply, retry_in, NULL, refused);
END
$$;
COMMENT ON FUNCTION toolgate.settle_outbox(text, text, text, uuid, text, jsonb, interval, jsonb) IS
    'The dispatcher''s: settle one intent (outbox state, the ledger''s reply for its key, an audit intent of kind dispatch).';

-- The settlement itself, settle_outbox's and resolve_outbox's: `intent` is the outbox row, locked
-- by the caller, which checked it may be settled with `outcome`. `resolution`, a person's
-- (resolve_outbox), is added to the audit row's detail. Executable by no role.
CREATE FUNCTION toolgate.outbox_settle(intent toolgate.outbox, outcome text, reply jsonb, retry_in interval,
                                       resolution jsonb, refused jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    answer jsonb := CASE WHEN intent.state = 'PARTIAL' THEN coalesce(intent.erp_reply, 'null'::jsonb)
                         ELSE coalesce(reply, 'null'::jsonb) END;
    -- The order lines the ERP refused (kept with a PARTIAL intent whose finish is retried).
    lines jsonb := CASE WHEN intent.state = 'PARTIAL' THEN intent.refused_lines ELSE refused END;
    new_state text;
    word text;
    said text;
    result jsonb;
    stored jsonb;
    error text;
    finished jsonb;
    at timestamptz;
    next_at timestamptz;
    doubt boolean;
BEGIN
    -- What the ERP said, as a short word for the outbox and the audit (never its body there).
    error := CASE WHEN pg_catalog.jsonb_typeof(answer) = 'object' AND answer ? 'error'
                  THEN pg_catalog.left(answer->>'error', 200) END;
    new_state := outcome;
    word := CASE outcome WHEN 'DEAD' THEN 'UNCERTAIN' ELSE outcome END;
    IF outcome = 'SUCCEEDED' THEN
        -- NULL: the tool has no finish function (any more). An error the runner lets go on up (one
        -- a client would retry: a lock not available, a deadlock) is not done either.
        BEGIN
            finished := toolgate.outbox_finish(pg_catalog.to_jsonb(intent), answer);
        EXCEPTION WHEN OTHERS THEN
            finished := pg_catalog.jsonb_build_object('done', false, 'error', pg_catalog.jsonb_build_object(
                'function', 'finish', 'reason', 'raised', 'sqlstate', SQLSTATE));
        END;
        IF finished IS NOT NULL AND NOT (finished->>'done')::boolean THEN
            new_state := 'PARTIAL';
            word := 'PARTIAL';
            error := 'finish_failed';
        END IF;
        -- The ERP did the order but for some lines: done here, PARTIAL to the agent.
        IF lines IS NOT NULL THEN
            word := 'PARTIAL';
            error := coalesce(error, 'lines_refused');
        END IF;
    END IF;
    result := pg_catalog.jsonb_build_object('state', word, 'tool', intent.tool, 'target', intent.target,
                                            'endpoint', intent.endpoint, 'attempts', intent.attempts);
    said := CASE word
        WHEN 'SUCCEEDED' THEN pg_catalog.format('%s on «%s»: done by the ERP (endpoint %s)%s.', intent.tool, intent.target,
                                                intent.endpoint, CASE WHEN finished IS NOT NULL THEN ', and here' ELSE '' END)
        WHEN 'PARTIAL' THEN CASE WHEN new_state = 'PARTIAL'
            THEN pg_catalog.format('%s on «%s»: done by the ERP (endpoint %s)%s; the follow-up in this database is not done yet, and the gate completes it. Do not ask for it again: the ERP has it.',
                                   intent.tool, intent.target, intent.endpoint,
                                   CASE WHEN lines IS NOT NULL THEN pg_catalog.format(' but for %s of its lines, which it refused (result.refused_lines)',
                                                                                      pg_catalog.jsonb_array_length(lines)) ELSE '' END)
            ELSE pg_catalog.format('%s on «%s»: done by the ERP (endpoint %s)%s but for %s of its lines, which it refused (result.refused_lines names them). Do not ask for it again with this key: the ERP has the rest; a refused line needs a call of its own.',
                                   intent.tool, intent.target, intent.endpoint,
                                   CASE WHEN finished IS NOT NULL THEN ', and here' ELSE '' END, pg_catalog.jsonb_array_length(lines)) END
        WHEN 'REJECTED' THEN CASE WHEN resolution IS NULL
            THEN pg_catalog.format('%s on «%s»: refused by the ERP (endpoint %s); nothing was done there. A retry with this key answers the same.',
                                   intent.tool, intent.target, intent.endpoint)
            ELSE pg_catalog.format('%s on «%s»: not done by the ERP (endpoint %s), as a person found there; nothing was done. A retry with this key answers the same.',
                                   intent.tool, intent.target, intent.endpoint) END
        WHEN 'PENDING' THEN pg_catalog.format('%s on «%s»: accepted and queued for the ERP (endpoint %s), not yet done. Call again with the same idempotency_key to learn its state; a new key would ask for it a second time.',
                                              intent.tool, intent.target, intent.endpoint)
        ELSE CASE outcome
            WHEN 'UNCERTAIN' THEN pg_catalog.format('%s on «%s»: sent to the ERP (endpoint %s), which has not said whether it did it; the gate asks it again. Do not ask for it again with a new key.',
                                                    intent.tool, intent.target, intent.endpoint)
            ELSE pg_catalog.format('%s on «%s»: sent to the ERP (endpoint %s) %s times without a final answer; an operator reconciles it. Do not ask for it again with a new key.',
                                   intent.tool, intent.target, intent.endpoint, intent.attempts) END END;
    IF word IN ('SUCCEEDED', 'PARTIAL') THEN
        result := result || pg_catalog.jsonb_build_object('erp', toolgate.mark_untrusted(answer));
    END IF;
    IF lines IS NOT NULL THEN
        result := result || pg_catalog.jsonb_build_object('refused_lines', toolgate.mark_untrusted(lines));
    END IF;
    IF new_state = 'SUCCEEDED' AND finished IS NOT NULL THEN
        result := result || pg_catalog.jsonb_build_object('finish', finished->'result');
    ELSIF new_state = 'PARTIAL' THEN
        result := result || pg_catalog.jsonb_build_object('pending', 'finish', 'error', finished->'error');
    ELSIF outcome = 'REJECTED' THEN
        result := result || pg_catalog.jsonb_build_object('error', toolgate.mark_untrusted(pg_catalog.to_jsonb(error)));
    END IF;
    stored := pg_catalog.jsonb_build_object(
        'outcome', word, 'isError', outcome = 'REJECTED', 'replayed', false, 'result', result,
        'content', pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('type', 'text', 'text', said)));
    IF outcome = 'REJECTED' THEN
        stored := stored || '{"rule": "erp_rejected"}'::jsonb;
    END IF;

    -- After the finish function; reckoned before the statement (Citus runs no volatile function
    -- in an UPDATE of its tables, nor a stable one in its CASE).
    at := pg_catalog.clock_timestamp();
    next_at := at + retry_in;
    -- In doubt: UNCERTAIN, or PENDING after a request went out (the ERP said it has no such key,
    -- but the request may still be on its way); not when nothing left the dispatcher. (Reckoned
    -- here too: Citus mistakes a CASE on a parameter in an UPDATE.)
    doubt := CASE new_state WHEN 'UNCERTAIN' THEN true
                 WHEN 'PENDING' THEN coalesce(error NOT IN ('no_connection', 'endpoint_unreachable', 'unauthorized',
                                                            'rate_limited', 'origin_not_allowed',
                                                            'address_not_allowed'), true)
                 ELSE false END;
    UPDATE toolgate.outbox o
       SET state = new_state, last_error = error, claim = NULL,
           in_doubt = doubt,
           erp_reply = CASE WHEN outcome = 'SUCCEEDED' THEN answer ELSE o.erp_reply END,
           refused_lines = lines,
           settled_at = CASE WHEN new_state IN ('SUCCEEDED', 'REJECTED', 'DEAD') THEN at END,
           next_attempt_at = CASE WHEN new_state IN ('PENDING', 'UNCERTAIN', 'PARTIAL') THEN next_at
                                  ELSE o.next_attempt_at END
     WHERE o.tenant_id = intent.tenant_id AND o.tool = intent.tool AND o.idempotency_key = intent.idempotency_key;
    UPDATE toolgate.ledger l SET reply = stored, settled_at = pg_catalog.now()
     WHERE l.tenant_id = intent.tenant_id AND l.tool = intent.tool AND l.idempotency_key = intent.idempotency_key
       AND l.state = 'settled';
    -- `effects` 1 on the settlement that learned the ERP did it (not on a PARTIAL one finished
    -- later): toolgate.effects lists it, under the actor who asked for it.
    INSERT INTO toolgate.audit (kind, tenant_id, actor, tool, target, proposal_id, outcome, rule, effects, detail,
                                duration_us)
    VALUES ('dispatch', intent.tenant_id, session_user, intent.tool, intent.target, intent.proposal_id, word,
            CASE WHEN outcome = 'REJECTED' THEN 'erp_rejected' END,
            CASE WHEN outcome = 'SUCCEEDED' AND intent.state <> 'PARTIAL' THEN 1 ELSE 0 END,
            pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
                'endpoint', intent.endpoint, 'attempts', intent.attempts, 'state', new_state, 'error', error,
                'asked_by', intent.actor, 'value', intent.value,
                'finish', CASE WHEN new_state = 'PARTIAL' THEN finished->'error' END,
                'refused_lines', pg_catalog.jsonb_array_length(lines)) || coalesce(resolution, '{}')),
            0);
    -- What the call consumed is given back when its effect did not happen, as for a tool whose
    -- effect refuses in the database: the conversation's quota (the call that queued it).
    IF new_state = 'REJECTED' THEN
        UPDATE toolgate.quota_usage q SET used = q.used - 1, updated_at = pg_catalog.now()
         WHERE q.tenant_id = intent.tenant_id AND q.actor = intent.actor
           AND q.conversation_id = intent.conversation_id AND q.tool = intent.tool AND q.used > 0;
    END IF;
    RETURN stored;
END
$$;
COMMENT ON FUNCTION toolgate.outbox_settle(toolgate.outbox, text, jsonb, interval, jsonb, jsonb) IS
    'settle_outbox''s and resolve_outbox''s settlement of one locked intent; executable by no role.';

-- A person's word on an intent the dispatcher could not settle: DEAD (given up after its
-- attempts) or UNCERTAIN (sent, the ERP has not said), once they have looked at the ERP.
-- `outcome` SUCCEEDED: the ERP did it — settled as the dispatcher would have, the tool's finish
-- function run once (PARTIAL if it is not done: the dispatcher then finishes it), `reply` what
-- the ERP shows for it (its answer to the state query, say; the finish function reads it as
-- ctx->'erp'); REJECTED: it did not, and it will not — settled REJECTED (`not_applied`), the
-- conversation's quota given back. `note` (required, at most 500 characters) says how it was
-- found; the audit row of kind `dispatch` keeps it with the resolver. Granted to toolgate_admin;
-- a role the DBA grants it to must administer the gate too. Not while a dispatcher holds the
-- intent (its lease not yet run out).
CREATE FUNCTION toolgate.resolve_outbox(tenant text, tool text, key text, outcome text, note text,
                                        reply jsonb DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    intent toolgate.outbox;
    who text := toolgate.caller();
BEGIN
    PERFORM toolgate.outbox_person_checks(who, note);
    IF outcome IS NULL OR outcome NOT IN ('SUCCEEDED', 'REJECTED') THEN
        RAISE EXCEPTION 'outcome is SUCCEEDED (the ERP did it) or REJECTED (it did not), not %', coalesce(outcome, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    intent := toolgate.outbox_for_a_person(tenant, tool, key);
    UPDATE toolgate.outbox o SET claim = NULL
     WHERE o.tenant_id = intent.tenant_id AND o.tool = intent.tool AND o.idempotency_key = intent.idempotency_key;
    RETURN toolgate.outbox_settle(intent, outcome,
                                  CASE WHEN outcome = 'REJECTED' THEN '{"error": "not_applied"}'::jsonb
                                       ELSE coalesce(reply, '{}'::jsonb) END,
                                  interval '0', pg_catalog.jsonb_build_object('resolved_by', who, 'note', note,
                                                                              'was', intent.state), NULL);
END
$$;
COMMENT ON FUNCTION toolgate.resolve_outbox(text, text, text, text, text, jsonb) IS
    'A person settles a DEAD or UNCERTAIN intent they checked at the ERP: SUCCEEDED (finish run once) or REJECTED (quota given back); audited.';

-- Hand a DEAD or UNCERTAIN intent back to the dispatcher, as new: its attempts counted from zero,
-- due now, and in doubt (the dispatcher asks the ERP for its key before it sends anything, so it
-- is never sent twice). For when the cause is mended (the ERP back, its credentials renewed, the
-- origin allowed) and the ERP itself should say. `note` as for resolve_outbox; audited.
CREATE FUNCTION toolgate.requeue_outbox(tenant text, tool text, key text, note text)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    intent toolgate.outbox;
    who text := toolgate.caller();
    at constant timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM toolgate.outbox_person_checks(who, note);
    intent := toolgate.outbox_for_a_person(tenant, tool, key);
    UPDATE toolgate.outbox o
       SET state = 'UNCERTAIN', attempts = 0, in_doubt = true, claim = NULL, settled_at = NULL,
           next_attempt_at = at
     WHERE o.tenant_id = intent.tenant_id AND o.tool = intent.tool AND o.idempotency_key = intent.idempotency_key;
    INSERT INTO toolgate.audit (kind, tenant_id, actor, tool, target, proposal_id, outcome, effects, detail, duration_us)
    VALUES ('dispatch', intent.tenant_id, session_user, intent.tool, intent.target, intent.proposal_id, 'UNCERTAIN', 0,
            pg_catalog.jsonb_build_object('endpoint', intent.endpoint, 'attempts', intent.attempts,
                                          'state', 'UNCERTAIN', 'requeued_by', who, 'note', note,
                                          'was', intent.state, 'asked_by', intent.actor),
            0);
    RETURN pg_catalog.jsonb_build_object('tenant', intent.tenant_id, 'tool', intent.tool, 'key', intent.idempotency_key,
                                         'was', intent.state, 'state', 'UNCERTAIN');
END
$$;
COMMENT ON FUNCTION toolgate.requeue_outbox(text, text, text, text) IS
    'Hand a DEAD or UNCERTAIN intent back to the dispatcher, attempts from zero, asked by key first; audited.';

-- resolve_outbox's and requeue_outbox's checks of the person: they administer the gate, and say
-- why in a note of at most 500 characters.
CREATE FUNCTION toolgate.outbox_person_checks(who text, note text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    IF NOT toolgate.administers(who) THEN
        RAISE EXCEPTION 'pg_toolgate: % does not administer the gate in database %', who, pg_catalog.current_database()
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF note IS NULL OR pg_catalog.btrim(note) = '' OR pg_catalog.length(note) > 500 THEN
        RAISE EXCEPTION 'a note says how the intent was found (at most 500 characters)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- The intent a person resolves or requeues, locked: DEAD or UNCERTAIN, and not held by a
-- dispatcher now.
CREATE FUNCTION toolgate.outbox_for_a_person(tenant text, tool text, key text) RETURNS toolgate.outbox
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    intent toolgate.outbox;
BEGIN
    SELECT * INTO intent FROM toolgate.outbox o
     WHERE o.tenant_id = tenant AND o.tool = outbox_for_a_person.tool AND o.idempotency_key = key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no intent % of tool % for tenant %', key, tool, tenant USING ERRCODE = 'no_data_found';
    END IF;
    IF intent.state NOT IN ('DEAD', 'UNCERTAIN') THEN
        RAISE EXCEPTION 'intent % of tool % is %: only a DEAD or UNCERTAIN intent is resolved or requeued by a person',
            key, tool, intent.state USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF intent.claim IS NOT NULL AND intent.next_attempt_at > pg_catalog.clock_timestamp() THEN
        RAISE EXCEPTION 'intent % of tool % is being delivered by a dispatcher now', key, tool
            USING ERRCODE = 'lock_not_available', HINT = 'Try again once its attempt is settled or its lease has run out.';
    END IF;
    RETURN intent;
END
$$;

GRANT USAGE ON SCHEMA toolgate TO toolgate_dispatcher;
REVOKE ALL ON FUNCTION toolgate.claim_outbox(integer, interval, text[]),
                      toolgate.tenant_claim_outbox(text, integer, interval, text[]),
                      toolgate.outbox_due_tenants(integer, text[]), toolgate.outbox_distributed(),
                      toolgate.outbox_claim(text, integer, interval, text[]),
                      toolgate.renew_outbox(text, text, text, uuid, interval),
                          toolgate.note_outbox(text, text, text, uuid, text, jsonb),
                      toolgate.outbox_gauges(),
                      toolgate.settle_outbox(text, text, text, uuid, text, jsonb, interval, jsonb),
                      toolgate.outbox_finish(jsonb, jsonb),
                      toolgate.outbox_settle(toolgate.outbox, text, jsonb, interval, jsonb, jsonb),
                      toolgate.resolve_outbox(text, text, text, text, text, jsonb),
                      toolgate.requeue_outbox(text, text, text, text),
                      toolgate.outbox_person_checks(text, text),
                      toolgate.outbox_for_a_person(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.resolve_outbox(text, text, text, text, text, jsonb),
                          toolgate.requeue_outbox(text, text, text, text)
TO toolgate_admin;
GRANT EXECUTE ON FUNCTION toolgate.claim_outbox(integer, interval, text[]),
                          toolgate.tenant_claim_outbox(text, integer, interval, text[]),
                          toolgate.outbox_due_tenants(integer, text[]), toolgate.outbox_distributed(),
                          toolgate.renew_outbox(text, text, text, uuid, interval),
                          toolgate.note_outbox(text, text, text, uuid, text, jsonb),
                          toolgate.outbox_gauges(),
                          toolgate.settle_outbox(text, text, text, uuid, text, jsonb, interval, jsonb)
TO toolgate_dispatcher;

-- The outbox's intents that need a person: DEAD (given up after the dispatcher's attempts; the
-- ledger answers UNCERTAIN until someone reconciles it with the ERP), PARTIAL (the ERP did it, the
-- finish function is not done), UNCERTAIN (sent, not known yet), and PENDING ones older than 15
-- minutes (the dispatcher is not running, or writes are off). No argument and no request: what
-- the intent is, where it stands, and the ERP's last error word.
CREATE VIEW toolgate.alert_outbox AS
SELECT o.tenant_id, o.tool, o.idempotency_key, o.target, o.endpoint, o.state, o.attempts, o.last_error,
       o.created_at, o.claimed_at, o.next_attempt_at
  FROM toolgate.outbox o
 WHERE o.state IN ('DEAD', 'PARTIAL', 'UNCERTAIN')
    OR (o.state = 'PENDING' AND o.created_at < pg_catalog.now() - interval '15 minutes');
-- The ERPs' rotating credentials, for the dispatchers (seed 004's client): per endpoint, the
-- current refresh token (each use of it returns the next, and the old one stops working) and the
-- access token it was traded for, with a generation that counts the refreshes, and the origin
-- they were given for. Shared by every dispatcher, so one refresh serves all of them: a
-- dispatcher whose request met a stale access token (a 401) refreshes only if nobody did since it
-- read that token, while holding this row's lock, and the others wait for that refresh and take
-- its token. They are handed out only for the origin they were given for, and only while the
-- endpoint is still there (repoint_erp_endpoint drops them when the origin changes). No role reads
-- the table; the dispatcher reaches it through the three functions below only. It is not dumped
-- with the extension's configuration (a dump keeps no secret): after a restore, the dispatcher
-- seeds it again from its --refresh-token-file NAME=FILE.
CREATE TABLE toolgate.erp_credentials (
    endpoint      text PRIMARY KEY REFERENCES toolgate.erp_endpoints ON DELETE CASCADE,
    origin        text NOT NULL,
    refresh_token text NOT NULL,
    access_token  text,
    generation    bigint NOT NULL DEFAULT 0 CHECK (generation >= 0),
    refreshed_at  timestamptz
);
COMMENT ON TABLE toolgate.erp_credentials IS
    'The ERPs'' current refresh and access tokens, each for one origin, shared by the dispatchers; read by no role.';

-- Whether `origin` is where endpoint `endpoint` points now (what a dispatcher about to send
-- there must show before it is given the endpoint's credentials).
CREATE FUNCTION toolgate.endpoint_at(endpoint text, origin text) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT coalesce((SELECT toolgate.endpoint_origin(e.base_url) = endpoint_at.origin
                       FROM toolgate.erp_endpoints e WHERE e.name = endpoint_at.endpoint), false)
$$;

-- The endpoint's access token now and its generation, for a dispatcher about to send to `origin`
-- (no credentials for that origin, or the endpoint is elsewhere now: NULL, generation 0).
CREATE FUNCTION toolgate.erp_access_token(endpoint text, origin text, OUT access_token text, OUT generation bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT c.access_token, coalesce(c.generation, 0)
      FROM (SELECT 1) one
      LEFT JOIN toolgate.erp_credentials c
        ON c.endpoint = erp_access_token.endpoint AND c.origin = erp_access_token.origin
       AND toolgate.endpoint_at(erp_access_token.endpoint, erp_access_token.origin)
$$;
COMMENT ON FUNCTION toolgate.erp_access_token(text, text) IS
    'The dispatcher''s: the endpoint''s current access token and its generation, for the origin it points at.';

-- Begin a refresh, inside the caller's transaction, for a dispatcher about to send to `origin`:
-- lock the endpoint's credentials (made from `seed`, the dispatcher's refresh token file for this
-- endpoint, if there are none yet). Refused when the endpoint no longer points at `origin`, and
-- when the credentials were given for another origin. If their generation is no longer `seen`,
-- another dispatcher refreshed meanwhile: its access token comes back and the caller uses it
-- (refresh_token NULL). Otherwise the refresh token comes back, and the caller trades it at the
-- ERP and calls erp_refresh_end before it commits, the row locked all along.
CREATE FUNCTION toolgate.erp_refresh_begin(endpoint text, origin text, seen bigint, seed text DEFAULT NULL,
                                           OUT refresh_token text, OUT access_token text, OUT generation bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    c toolgate.erp_credentials;
BEGIN
    -- The endpoint's row locked first: it cannot move while its credentials are handed out.
    PERFORM FROM toolgate.erp_endpoints e WHERE e.name = erp_refresh_begin.endpoint FOR SHARE;
    IF NOT toolgate.endpoint_at(endpoint, origin) THEN
        RAISE EXCEPTION 'endpoint % does not point at % (it was moved, or there is no such endpoint)', endpoint, origin
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF seed IS NOT NULL AND pg_catalog.btrim(seed) <> '' THEN
        INSERT INTO toolgate.erp_credentials AS e (endpoint, origin, refresh_token)
        VALUES (erp_refresh_begin.endpoint, erp_refresh_begin.origin, pg_catalog.btrim(seed))
        ON CONFLICT ON CONSTRAINT erp_credentials_pkey DO NOTHING;
    END IF;
    SELECT * INTO c FROM toolgate.erp_credentials e WHERE e.endpoint = erp_refresh_begin.endpoint FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no refresh token for endpoint % (give the dispatcher --refresh-token-file %=FILE)', endpoint, endpoint
            USING ERRCODE = 'no_data_found';
    END IF;
    IF c.origin <> origin THEN
        RAISE EXCEPTION 'the credentials of endpoint % were given for %, not %', endpoint, c.origin, origin
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    generation := c.generation;
    IF c.generation <> seen AND c.access_token IS NOT NULL THEN
        access_token := c.access_token;
    ELSE
        refresh_token := c.refresh_token;
    END IF;
END
$$;
COMMENT ON FUNCTION toolgate.erp_refresh_begin(text, text, bigint, text) IS
    'The dispatcher''s: lock the endpoint''s credentials for a refresh at the origin it points at, unless another dispatcher refreshed since `seen`.';

-- End a refresh begun in this transaction: the rotated refresh token and the new access token;
-- the new generation.
CREATE FUNCTION toolgate.erp_refresh_end(endpoint text, refresh_token text, access_token text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    advanced bigint;
BEGIN
    IF refresh_token IS NULL OR pg_catalog.btrim(refresh_token) = '' OR access_token IS NULL THEN
        RAISE EXCEPTION 'a refresh ends with a refresh token and an access token' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    UPDATE toolgate.erp_credentials c
       SET refresh_token = erp_refresh_end.refresh_token, access_token = erp_refresh_end.access_token,
           generation = c.generation + 1, refreshed_at = pg_catalog.now()
     WHERE c.endpoint = erp_refresh_end.endpoint
    RETURNING c.generation INTO advanced;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no credentials for endpoint %', endpoint USING ERRCODE = 'no_data_found';
    END IF;
    RETURN advanced;
END
$$;
COMMENT ON FUNCTION toolgate.erp_refresh_end(text, text, text) IS
    'The dispatcher''s: store the rotated refresh token and the new access token; the new generation.';
REVOKE ALL ON toolgate.erp_credentials FROM PUBLIC;
REVOKE ALL ON FUNCTION toolgate.erp_access_token(text, text), toolgate.erp_refresh_begin(text, text, bigint, text),
                      toolgate.erp_refresh_end(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.erp_access_token(text, text), toolgate.erp_refresh_begin(text, text, bigint, text),
                          toolgate.erp_refresh_end(text, text, text) TO toolgate_dispatcher;

REVOKE ALL ON toolgate.alert_outbox FROM PUBLIC;
GRANT SELECT ON toolgate.alert_outbox TO toolgate_auditor, toolgate_admin, toolgate_operator;

-- toolgate.binding_report: what is wrong or risky in a tool's binding, as sql/report.sql
-- makes it; toolgate_admin's, as finalize.sql grants it.

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
REVOKE ALL ON FUNCTION toolgate.binding_code(pg_catalog.regprocedure), toolgate.binding_relations(pg_catalog.regprocedure),
                      toolgate.binding_report(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.binding_report(text) TO toolgate_admin;

------------------------------------------------------------------------------------------------
-- 6. Keys a cluster can distribute by tenant (docs/scale-out.md): the tenant leads the primary
--    keys of proposals and audit, an unverified call is audited under '(unverified)' instead of
--    NULL, iso_utc is IMMUTABLE (Citus refuses anything else in an INSERT's RETURNING), and each
--    configuration trigger names its table (on a Citus node it fires on a shard, another relation).
------------------------------------------------------------------------------------------------

ALTER TABLE toolgate.proposals DROP CONSTRAINT proposals_pkey;
ALTER TABLE toolgate.proposals ADD PRIMARY KEY (tenant_id, proposal_id);
-- The audit is append-only; its trigger is set aside for this one rewrite of unverified rows.
ALTER TABLE toolgate.audit DISABLE TRIGGER audit_no_update_or_delete;
UPDATE toolgate.audit SET tenant_id = '(unverified)' WHERE tenant_id IS NULL;
ALTER TABLE toolgate.audit ENABLE TRIGGER audit_no_update_or_delete;
ALTER TABLE toolgate.audit ALTER COLUMN tenant_id SET NOT NULL;
ALTER TABLE toolgate.audit DROP CONSTRAINT audit_pkey;
ALTER TABLE toolgate.audit ADD PRIMARY KEY (tenant_id, audit_id);
ALTER FUNCTION toolgate.iso_utc(timestamptz) IMMUTABLE;

-- The kill switch's time from the row it inserts (Citus refuses now() in DO UPDATE SET).
CREATE OR REPLACE FUNCTION toolgate.set_writes_enabled(enabled boolean, tool text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    who text := toolgate.caller();
    scope text := coalesce(tool, '*');
BEGIN
    IF enabled IS NULL THEN
        RAISE EXCEPTION 'enabled must be true or false' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF tool IS NOT NULL AND NOT EXISTS (SELECT 1 FROM toolgate.tools t WHERE t.tool = set_writes_enabled.tool) THEN
        RAISE EXCEPTION 'unknown tool %', tool USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enabled AND NOT toolgate.administers(who) THEN
        RAISE EXCEPTION 'only an administrator of the gate in database % may turn writes on',
                        pg_catalog.current_database()
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'toolgate.administrators lists the roles whose members administer this database.';
    END IF;
    IF NOT pg_catalog.pg_has_role(who, 'toolgate_admin', 'USAGE')
       AND NOT pg_catalog.pg_has_role(who, 'toolgate_operator', 'USAGE') THEN
        RAISE EXCEPTION 'only toolgate_operator or toolgate_admin may turn writes off'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO toolgate.write_switches AS w (scope, enabled, changed_by)
    VALUES (scope, enabled, who)
    ON CONFLICT ON CONSTRAINT write_switches_pkey DO UPDATE SET
        enabled = excluded.enabled, changed_at = excluded.changed_at, changed_by = excluded.changed_by;
END
$$;

CREATE OR REPLACE FUNCTION toolgate.config_changed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, toolgate, pg_temp AS $$
BEGIN
    PERFORM toolgate.signal_config_change(pg_catalog.format('toolgate.%I', TG_ARGV[0])::pg_catalog.regclass);
    RETURN NULL;
END
$$;
DO $triggers$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['keys', 'issuers', 'tenant_issuers', 'tools', 'tool_schemas', 'tool_bindings', 'policies',
                             'write_switches'] LOOP
        EXECUTE pg_catalog.format('DROP TRIGGER %I ON toolgate.%I', t || '_changed', t);
        EXECUTE pg_catalog.format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.%I '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed(%L)', t || '_changed', t, t);
    END LOOP;
END
$triggers$;

-- call, confirm and read routed by the tenant (a Citus cluster runs them on the tenant's node).
CREATE FUNCTION toolgate.tenant_call(tenant text, identity text, conversation_id text, tool text, args jsonb)
RETURNS jsonb
LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS 'pg_toolgate-@CARGO_VERSION@', 'tenant_call_wrapper';
CREATE FUNCTION toolgate.tenant_read(tenant text, identity text, tool text, args jsonb) RETURNS jsonb
LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS 'pg_toolgate-@CARGO_VERSION@', 'tenant_read_wrapper';
CREATE FUNCTION toolgate.tenant_confirm(tenant text, identity text, confirmation text) RETURNS jsonb
LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS 'pg_toolgate-@CARGO_VERSION@', 'tenant_confirm_wrapper';
COMMENT ON FUNCTION toolgate.tenant_call(text, text, text, text, jsonb) IS
    'toolgate.call routed by the tenant (a Citus cluster runs it on the tenant''s node); the token must name that tenant.';
COMMENT ON FUNCTION toolgate.tenant_read(text, text, text, jsonb) IS
    'toolgate.read routed by the tenant (a Citus cluster runs it on the tenant''s node); the token must name that tenant.';
COMMENT ON FUNCTION toolgate.tenant_confirm(text, text, text) IS
    'toolgate.confirm routed by the tenant (a Citus cluster runs it on the tenant''s node); the token must name that tenant.';
REVOKE ALL ON FUNCTION toolgate.tenant_call(text, text, text, text, jsonb), toolgate.tenant_read(text, text, text, jsonb),
                      toolgate.tenant_confirm(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.tenant_call(text, text, text, text, jsonb), toolgate.tenant_read(text, text, text, jsonb),
                          toolgate.tenant_confirm(text, text, text) TO toolgate_agent;

-- toolgate.distribute(): the layout of a Citus cluster (sql/citus.sql).
CREATE FUNCTION toolgate.distribute(erp_tables regclass[] DEFAULT '{}') RETURNS TABLE (object text, layout text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    reference constant text[] := ARRAY['tenants', 'keys', 'issuers', 'tenant_issuers', 'tools', 'tool_schemas',
                                       'erp_endpoints', 'tool_bindings', 'erp_credentials', 'policies',
                                       'policy_history', 'tool_history', 'write_switches', 'audit_key',
                                       'administrators', 'erp_endpoint_history'];
    tenant_tables constant text[] := ARRAY['ledger', 'proposals', 'conversations', 'quota_usage', 'audit', 'outbox'];
    entry_points constant text[] := ARRAY['toolgate.tenant_call(text,text,text,text,jsonb)',
                                          'toolgate.tenant_read(text,text,text,jsonb)',
                                          'toolgate.tenant_confirm(text,text,text)',
                                          'toolgate.tenant_claim_outbox(text,integer,interval,text[])',
                                          'toolgate.renew_outbox(text,text,text,uuid,interval)',
                                          'toolgate.note_outbox(text,text,text,uuid,text,jsonb)',
                                          'toolgate.settle_outbox(text,text,text,uuid,text,jsonb,interval,jsonb)',
                                          'toolgate.resolve_outbox(text,text,text,text,text,jsonb)',
                                          'toolgate.requeue_outbox(text,text,text,text)'];
    t text;
    erp regclass;
    fk record;
    fks text[] := '{}';
    fn text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'toolgate.distribute needs Citus: CREATE EXTENSION citus, and add the workers, first'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF NOT citus_is_coordinator() THEN
        RAISE EXCEPTION 'toolgate.distribute runs on the Citus coordinator'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    -- The reference tables keep a copy on the coordinator, which running this again, and a call
    -- refused there (routing_required, audited), need: it must be in Citus's metadata.
    IF NOT EXISTS (SELECT FROM pg_dist_node WHERE groupid = 0) THEN
        RAISE EXCEPTION 'toolgate.distribute needs the coordinator registered in Citus''s metadata'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'SELECT citus_set_coordinator_host(''<its host name>'', <its port>) first, then run it again.';
    END IF;
    IF NOT toolgate.administers(session_user) THEN
        RAISE EXCEPTION 'only an administrator of this database may distribute pg_toolgate'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- The configuration's triggers (administrators only; tell backends a row changed) run on each
    -- node's copy: what Citus calls unsafe triggers, here on purpose.
    SET LOCAL citus.enable_unsafe_triggers = on;
    -- Functions are distributed in the same transaction as tables: one connection per node.
    SET LOCAL citus.multi_shard_modify_mode = 'sequential';

    IF NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = 'toolgate.tenants'::regclass) THEN
        -- Citus turns a table referenced by a foreign key into a Citus table only with the whole
        -- graph at once, which it cannot do for an extension's tables: the keys between the
        -- configuration tables are set aside (here and on the workers, where CREATE EXTENSION made
        -- them too) and made again between the reference tables.
        FOR fk IN SELECT c.conrelid::regclass AS rel, c.conname, pg_get_constraintdef(c.oid) AS def
                    FROM pg_constraint c
                   WHERE c.contype = 'f' AND c.connamespace = 'toolgate'::regnamespace
                   ORDER BY c.conrelid::regclass::text, c.conname LOOP
            EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.rel, fk.conname);
            PERFORM run_command_on_workers(format('ALTER TABLE %s DROP CONSTRAINT %I', fk.rel, fk.conname));
            fks := fks || format('ALTER TABLE %s ADD CONSTRAINT %I %s', fk.rel, fk.conname, fk.def);
        END LOOP;
        FOREACH t IN ARRAY reference LOOP
            PERFORM create_reference_table(format('toolgate.%I', t)::regclass);
        END LOOP;
        FOREACH t IN ARRAY fks LOOP
            EXECUTE t;
        END LOOP;
    END IF;
    FOREACH t IN ARRAY reference LOOP
        object := 'toolgate.' || t; layout := 'reference';
        RETURN NEXT;
    END LOOP;

    FOREACH t IN ARRAY tenant_tables LOOP
        IF NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = format('toolgate.%I', t)::regclass) THEN
            IF t = 'ledger' THEN
                PERFORM create_distributed_table('toolgate.ledger', 'tenant_id');
            ELSE
                PERFORM create_distributed_table(format('toolgate.%I', t)::regclass, 'tenant_id',
                                                 colocate_with => 'toolgate.ledger');
            END IF;
        END IF;
        object := 'toolgate.' || t; layout := 'distributed by tenant_id';
        RETURN NEXT;
    END LOOP;

    FOREACH erp IN ARRAY erp_tables LOOP
        IF NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = erp) THEN
            PERFORM create_distributed_table(erp, 'tenant_id', colocate_with => 'toolgate.ledger');
        END IF;
        object := erp::text; layout := 'distributed by tenant_id';
        RETURN NEXT;
    END LOOP;

    FOREACH fn IN ARRAY entry_points LOOP
        IF NOT EXISTS (SELECT FROM pg_dist_object o WHERE o.classid = 'pg_proc'::regclass AND o.objid = fn::regprocedure
                                                      AND o.distribution_argument_index IS NOT NULL) THEN
            PERFORM create_distributed_function(fn::regprocedure, distribution_arg_name => 'tenant',
                                               colocate_with => 'toolgate.ledger');
        END IF;
        object := fn; layout := 'delegated by tenant';
        RETURN NEXT;
    END LOOP;

    -- Every bound function on every node (a delegated call runs them there).
    FOR fn IN SELECT DISTINCT f FROM toolgate.tool_bindings b,
                  LATERAL unnest(ARRAY[b.target, b.value, b.effect, b.reader, b.request, b.finish]) AS f
               WHERE f IS NOT NULL ORDER BY f LOOP
        IF NOT EXISTS (SELECT FROM pg_dist_object o WHERE o.classid = 'pg_proc'::regclass AND o.objid = fn::regprocedure) THEN
            PERFORM create_distributed_function(fn::regprocedure);
        END IF;
        object := fn; layout := 'on every node';
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION toolgate.distribute(regclass[]) IS
    'On a Citus coordinator: the extension''s tables (and the ERP tables given) distributed by tenant, configuration as reference tables, the tenant_* entry points delegated to the tenant''s node.';
REVOKE ALL ON FUNCTION toolgate.distribute(regclass[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.distribute(regclass[]) TO toolgate_admin;

-- Whether a call for `tenant` runs where the tenant's rows are: always on one node; on a Citus
-- cluster (toolgate.distribute() ran), only on the node that holds the tenant's shard, where Citus
-- delegated a tenant_* call. The gate refuses a call anywhere else (routing_required): its rows,
-- and the row-level security of the ERP's, are on another node. Read under the placements of
-- now, so a shard moved away is seen at once.
CREATE FUNCTION toolgate.tenant_is_here(tenant text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    here boolean := true;
BEGIN
    -- Static SQL, planned once a backend (a string EXECUTEd was planned at every call): PL/pgSQL
    -- resolves Citus's names only when the branch first runs, which is never without Citus.
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = 'toolgate.ledger'::pg_catalog.regclass)
               OR EXISTS (SELECT FROM pg_catalog.pg_dist_placement p JOIN pg_catalog.pg_dist_local_group l USING (groupid)
                           WHERE p.shardid = pg_catalog.get_shard_id_for_distribution_column('toolgate.ledger', tenant))
          INTO here;
    END IF;
    RETURN here;
END
$$;
COMMENT ON FUNCTION toolgate.tenant_is_here(text) IS
    'The gate''s: true unless the ledger is distributed (Citus) and the tenant''s shard is on another node.';
REVOKE ALL ON FUNCTION toolgate.tenant_is_here(text) FROM PUBLIC;

------------------------------------------------------------------------------------------------
-- The closed lists of the tables every call writes as domains, not table CHECKs (as
-- sql/bootstrap.sql makes them): the proposal's status (with the word 'invalidated'), the
-- audit's kind and outcome (with 'dispatch', PENDING, UNCERTAIN and PARTIAL). The views over the
-- audit are made again around the change of its columns' types, as sql/views.sql makes them.
------------------------------------------------------------------------------------------------

DROP VIEW toolgate.panel;
DROP VIEW toolgate.effects;
DROP VIEW toolgate.audit_log;
DROP VIEW toolgate.alert_denials_per_hour;
DROP VIEW toolgate.alert_repeated_denials;
DROP VIEW toolgate.alert_tool_not_allowed;
-- (The table's constraints go first: the domains' take their names.)
ALTER TABLE toolgate.ledger DROP CONSTRAINT ledger_state_check;
ALTER TABLE toolgate.proposals DROP CONSTRAINT proposals_status_check, DROP CONSTRAINT proposals_tier_check;
ALTER TABLE toolgate.quota_usage DROP CONSTRAINT quota_usage_used_check;
ALTER TABLE toolgate.audit DROP CONSTRAINT audit_kind_check, DROP CONSTRAINT audit_outcome_check;
CREATE DOMAIN toolgate.ledger_state AS text CHECK (VALUE IN ('reserved', 'pending', 'settled'));
CREATE DOMAIN toolgate.proposal_status AS text
    CHECK (VALUE IN ('live', 'superseded', 'expired', 'declined', 'applied', 'invalidated'));
CREATE DOMAIN toolgate.proposal_tier AS integer CHECK (VALUE BETWEEN 1 AND 3);
CREATE DOMAIN toolgate.audit_kind AS text CHECK (VALUE IN ('call', 'confirm', 'read', 'dispatch'));
CREATE DOMAIN toolgate.outcome AS text
    CHECK (VALUE IN ('SUCCEEDED', 'NEEDS_CONFIRMATION', 'REJECTED', 'BLOCKED', 'CANCELLED', 'PENDING',
                     'UNCERTAIN', 'PARTIAL'));
CREATE DOMAIN toolgate.counter AS integer CHECK (VALUE >= 0);

ALTER TABLE toolgate.ledger ALTER COLUMN state TYPE toolgate.ledger_state;
ALTER TABLE toolgate.proposals ALTER COLUMN status TYPE toolgate.proposal_status,
    ALTER COLUMN tier TYPE toolgate.proposal_tier;
ALTER TABLE toolgate.quota_usage ALTER COLUMN used TYPE toolgate.counter;
ALTER TABLE toolgate.audit ALTER COLUMN kind TYPE toolgate.audit_kind, ALTER COLUMN outcome TYPE toolgate.outcome;

CREATE VIEW toolgate.audit_log AS
SELECT audit_id, at, kind, tenant_id, conversation_id, actor, role, tool, target, proposal_id,
       outcome, rule, replayed, detail, args_hmac, schema_version, policy_version, duration_us
  FROM toolgate.audit;

CREATE VIEW toolgate.effects AS
SELECT a.tenant_id, a.tool, a.target, CASE WHEN a.kind = 'dispatch' THEN a.detail->>'asked_by' ELSE a.actor END AS actor,
       a.proposal_id, (a.detail->'value'->>'amount')::numeric AS value, a.at
  FROM toolgate.audit a
 WHERE (a.outcome = 'SUCCEEDED' AND NOT a.replayed AND a.kind IN ('call', 'confirm'))
    OR (a.kind = 'dispatch' AND a.effects > 0);

CREATE VIEW toolgate.panel AS
WITH calls AS (
    SELECT a.tenant_id,
           count(*) FILTER (WHERE a.kind = 'call'
                              AND a.rule IS DISTINCT FROM 'schema_invalid'
                              AND a.rule IS DISTINCT FROM 'identity_invalid') AS schema_valid,
           count(*) FILTER (WHERE a.rule = 'schema_invalid') AS schema_rejected,
           count(*) FILTER (WHERE a.outcome = 'BLOCKED') AS blocked_actions,
           count(*) FILTER (WHERE a.replayed) AS duplicates_suppressed,
           count(*) FILTER (WHERE a.rule = 'human_declined' AND NOT a.replayed) AS confirmation_denied,
           count(*) FILTER (WHERE a.outcome = 'PARTIAL' AND NOT a.replayed) AS partial_results
      FROM toolgate.audit a
     GROUP BY a.tenant_id
), made AS (
    SELECT e.tenant_id, count(*) AS effects FROM toolgate.effects e GROUP BY e.tenant_id
), queued AS (
    SELECT o.tenant_id, count(*) FILTER (WHERE o.state = 'PENDING') AS pending,
           count(*) FILTER (WHERE o.state = 'DEAD') AS dead_letters
      FROM toolgate.outbox o WHERE o.state IN ('PENDING', 'DEAD') GROUP BY o.tenant_id
)
SELECT coalesce(c.tenant_id, m.tenant_id, q.tenant_id) AS tenant_id,
       coalesce(c.schema_valid, 0) AS schema_valid,
       coalesce(c.schema_rejected, 0) AS schema_rejected,
       coalesce(c.blocked_actions, 0) AS blocked_actions,
       coalesce(c.duplicates_suppressed, 0) AS duplicates_suppressed,
       coalesce(c.confirmation_denied, 0) AS confirmation_denied,
       coalesce(c.partial_results, 0) AS partial_results,
       coalesce(m.effects, 0) AS effects,
       coalesce(q.pending, 0) AS pending,
       coalesce(q.dead_letters, 0) AS dead_letters
  FROM calls c FULL JOIN made m ON m.tenant_id = c.tenant_id
  FULL JOIN queued q ON q.tenant_id = coalesce(c.tenant_id, m.tenant_id);

CREATE VIEW toolgate.alert_denials_per_hour AS
SELECT tenant_id, pg_catalog.date_trunc('hour', at) AS hour, count(*) AS denials
  FROM toolgate.audit
 WHERE outcome IN ('BLOCKED', 'REJECTED')
 GROUP BY tenant_id, pg_catalog.date_trunc('hour', at);

CREATE VIEW toolgate.alert_repeated_denials AS
SELECT tenant_id, conversation_id, tool, count(*) AS denials, min(at) AS first_at, max(at) AS last_at
  FROM toolgate.audit
 WHERE outcome IN ('BLOCKED', 'REJECTED') AND conversation_id IS NOT NULL
 GROUP BY tenant_id, conversation_id, tool
HAVING count(*) >= 3;

CREATE VIEW toolgate.alert_tool_not_allowed AS
SELECT a.tenant_id, a.tool, count(*) AS attempts, max(a.at) AS last_at
  FROM toolgate.audit a
 WHERE a.rule = 'tool_not_allowed'
   AND NOT EXISTS (SELECT 1 FROM toolgate.policies p WHERE p.tenant_id = a.tenant_id AND p.tool = a.tool)
 GROUP BY a.tenant_id, a.tool;

GRANT SELECT ON toolgate.audit_log, toolgate.panel, toolgate.effects, toolgate.alert_denials_per_hour,
                toolgate.alert_repeated_denials, toolgate.alert_tool_not_allowed
TO toolgate_auditor, toolgate_admin, toolgate_operator;

------------------------------------------------------------------------------------------------
-- 7. The third security review (docs/security.md, "Review 3"), where sections 1 to 6 do not hold
--    it already (an endpoint's URL given once, its history and origin-bound credentials, claims,
--    authorization_servers for one resource: above): the C functions that mark the ERP's words
--    untrusted and encode a path segment, the new functions' privileges, and a conversation
--    keyed by the person too. As sql/outbox.sql and sql/bootstrap.sql install them.
------------------------------------------------------------------------------------------------

CREATE FUNCTION toolgate.mark_untrusted(value jsonb) RETURNS jsonb
IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'mark_untrusted_wrapper';
CREATE FUNCTION toolgate.path_segment(value text) RETURNS text
IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'path_segment_wrapper';

REVOKE ALL ON toolgate.erp_endpoint_history FROM PUBLIC;
REVOKE ALL ON FUNCTION toolgate.mark_untrusted(jsonb), toolgate.path_segment(text), toolgate.endpoint_origin(text),
                      toolgate.check_endpoint_url(text), toolgate.repoint_erp_endpoint(text, text),
                      toolgate.endpoint_at(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.path_segment(text) TO toolgate_admin;
GRANT SELECT ON toolgate.erp_endpoint_history TO toolgate_admin, toolgate_auditor;

-- A conversation is each person's own (T7): the live proposal, the conversation's lock row and
-- the quota's count are keyed by the verified subject too. The rows 0.1.0 wrote are given the
-- person who last proposed in that conversation, or last called the tool in it ('' if nobody did).
DROP INDEX toolgate.proposals_one_live_per_conversation;
CREATE UNIQUE INDEX proposals_one_live_per_conversation
    ON toolgate.proposals (tenant_id, actor, conversation_id) WHERE status = 'live';
ALTER TABLE toolgate.conversations ADD COLUMN actor text;
UPDATE toolgate.conversations c
   SET actor = coalesce((SELECT p.actor FROM toolgate.proposals p
                          WHERE p.tenant_id = c.tenant_id AND p.conversation_id = c.conversation_id
                          ORDER BY p.created_at DESC LIMIT 1), '');
ALTER TABLE toolgate.conversations ALTER COLUMN actor SET NOT NULL;
ALTER TABLE toolgate.conversations DROP CONSTRAINT conversations_pkey;
ALTER TABLE toolgate.conversations ADD PRIMARY KEY (tenant_id, actor, conversation_id);
ALTER TABLE toolgate.quota_usage ADD COLUMN actor text;
UPDATE toolgate.quota_usage q
   SET actor = coalesce((SELECT a.actor FROM toolgate.audit a
                          WHERE a.tenant_id = q.tenant_id AND a.conversation_id = q.conversation_id
                            AND a.tool = q.tool AND a.kind = 'call' AND a.actor IS NOT NULL
                          ORDER BY a.at DESC LIMIT 1), '');
ALTER TABLE toolgate.quota_usage ALTER COLUMN actor SET NOT NULL;
ALTER TABLE toolgate.quota_usage DROP CONSTRAINT quota_usage_pkey;
ALTER TABLE toolgate.quota_usage ADD PRIMARY KEY (tenant_id, actor, conversation_id, tool);

------------------------------------------------------------------------------------------------
-- 8. Audit ids that cannot collide on any node of a Citus cluster (issue 45): the identity column
--    becomes the audit's sequence under the node's group (toolgate.node_audit_id), as
--    sql/bootstrap.sql and sql/citus.sql install it. The sequence goes on from the last id.
------------------------------------------------------------------------------------------------

-- The identity's sequence leaves the extension first, so pg_dump's list of what to dump keeps no
-- trace of it; the new one takes its name.
ALTER EXTENSION pg_toolgate DROP SEQUENCE toolgate.audit_audit_id_seq;
ALTER TABLE toolgate.audit ALTER COLUMN audit_id DROP IDENTITY;
CREATE SEQUENCE toolgate.audit_audit_id_seq AS bigint OWNED BY toolgate.audit.audit_id;
SELECT pg_catalog.setval('toolgate.audit_audit_id_seq', max(audit_id)) FROM toolgate.audit HAVING max(audit_id) IS NOT NULL;
SELECT pg_catalog.pg_extension_config_dump('toolgate.audit_audit_id_seq', '');
CREATE FUNCTION toolgate.node_audit_id(n bigint) RETURNS bigint
VOLATILE STRICT PARALLEL UNSAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'node_audit_id_wrapper';
CREATE FUNCTION toolgate.node_group() RETURNS integer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    node integer;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL THEN
        EXECUTE 'SELECT groupid FROM pg_catalog.pg_dist_local_group' INTO node;
    END IF;
    RETURN coalesce(node, 0);
END
$$;
COMMENT ON FUNCTION toolgate.node_group() IS
    'The gate''s: this node''s Citus group id, 0 without Citus (the high bits of the audit ids drawn here).';
ALTER TABLE toolgate.audit ALTER COLUMN audit_id
    SET DEFAULT toolgate.node_audit_id(pg_catalog.nextval('toolgate.audit_audit_id_seq'));
REVOKE ALL ON FUNCTION toolgate.node_group(), toolgate.node_audit_id(bigint) FROM PUBLIC;
REVOKE ALL ON SEQUENCE toolgate.audit_audit_id_seq FROM PUBLIC;

------------------------------------------------------------------------------------------------
-- 9. set_policy changes only what a call names (issue 46): a setting left out keeps the row's
--    value, and `clear` drops a limit; before, a call that named only max_value dropped the
--    quota. As sql/api.sql installs it.
------------------------------------------------------------------------------------------------

DROP FUNCTION toolgate.set_policy(text, text, boolean, text[], integer, numeric, integer, interval, numeric, numeric,
                                  text[]);
CREATE FUNCTION toolgate.set_policy(
    tenant_id text,
    tool text,
    allowed boolean DEFAULT NULL,
    roles text[] DEFAULT NULL,
    tier integer DEFAULT NULL,
    max_value numeric DEFAULT NULL,
    max_calls_per_conversation integer DEFAULT NULL,
    confirm_ttl interval DEFAULT NULL,
    tier2_above numeric DEFAULT NULL,
    tier3_above numeric DEFAULT NULL,
    target_states text[] DEFAULT NULL,
    clear text[] DEFAULT '{}'
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    who text := toolgate.caller();
    before toolgate.policies;
    after toolgate.policies;
    clearable constant text[] := ARRAY['max_value', 'max_calls_per_conversation', 'tier2_above', 'tier3_above',
                                       'target_states'];
    named constant text[] := ARRAY[
        CASE WHEN max_value IS NOT NULL THEN 'max_value' END,
        CASE WHEN max_calls_per_conversation IS NOT NULL THEN 'max_calls_per_conversation' END,
        CASE WHEN tier2_above IS NOT NULL THEN 'tier2_above' END,
        CASE WHEN tier3_above IS NOT NULL THEN 'tier3_above' END,
        CASE WHEN target_states IS NOT NULL THEN 'target_states' END];
    bad text;
BEGIN
    SELECT c INTO bad FROM pg_catalog.unnest(coalesce(set_policy.clear, '{}')) c
     WHERE c IS NULL OR c <> ALL (clearable) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'set_policy: clear names %, which is not a limit that can be dropped', coalesce(bad, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'clear takes max_value, max_calls_per_conversation, tier2_above, tier3_above, target_states';
    END IF;
    SELECT c INTO bad FROM pg_catalog.unnest(set_policy.clear) c WHERE c = ANY (named) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'set_policy: % is both given and cleared', bad USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One change at a time per (tenant, tool), so versions never repeat: the row itself is the
    -- lock (no advisory lock, which any client could take and hold). A first row is inserted
    -- unless a concurrent first insert won; then that row is locked and updated.
    LOOP
        SELECT * INTO before FROM toolgate.policies p
         WHERE p.tenant_id = set_policy.tenant_id AND p.tool = set_policy.tool FOR UPDATE;
        EXIT WHEN FOUND;
        IF allowed IS NULL OR roles IS NULL OR tier IS NULL THEN
            RAISE EXCEPTION 'set_policy: a new policy row for (%, %) needs allowed, roles and tier', tenant_id, tool
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        INSERT INTO toolgate.policies AS p (tenant_id, tool, allowed, roles, tier, tier2_above, tier3_above,
                                            max_value, max_calls_per_conversation, confirm_ttl, target_states,
                                            version, updated_by)
        VALUES (tenant_id, tool, allowed, roles, tier, tier2_above, tier3_above, max_value,
                max_calls_per_conversation, coalesce(confirm_ttl, interval '5 minutes'), target_states, 1, who)
        ON CONFLICT ON CONSTRAINT policies_pkey DO NOTHING
        RETURNING * INTO after;
        EXIT WHEN FOUND;
    END LOOP;
    IF before.version IS NOT NULL THEN
        UPDATE toolgate.policies p SET
            allowed = coalesce(set_policy.allowed, p.allowed),
            roles = coalesce(set_policy.roles, p.roles),
            tier = coalesce(set_policy.tier, p.tier),
            tier2_above = CASE WHEN 'tier2_above' = ANY (set_policy.clear) THEN NULL
                               ELSE coalesce(set_policy.tier2_above, p.tier2_above) END,
            tier3_above = CASE WHEN 'tier3_above' = ANY (set_policy.clear) THEN NULL
                               ELSE coalesce(set_policy.tier3_above, p.tier3_above) END,
            max_value = CASE WHEN 'max_value' = ANY (set_policy.clear) THEN NULL
                             ELSE coalesce(set_policy.max_value, p.max_value) END,
            max_calls_per_conversation = CASE WHEN 'max_calls_per_conversation' = ANY (set_policy.clear) THEN NULL
                                              ELSE coalesce(set_policy.max_calls_per_conversation,
                                                            p.max_calls_per_conversation) END,
            confirm_ttl = coalesce(set_policy.confirm_ttl, p.confirm_ttl),
            target_states = CASE WHEN 'target_states' = ANY (set_policy.clear) THEN NULL
                                 ELSE coalesce(set_policy.target_states, p.target_states) END,
            version = before.version + 1,
            updated_at = pg_catalog.now(),
            updated_by = who
         WHERE p.tenant_id = set_policy.tenant_id AND p.tool = set_policy.tool
        RETURNING * INTO after;
    END IF;
    INSERT INTO toolgate.policy_history (tenant_id, tool, version, changed_at, changed_by, old, new)
    VALUES (after.tenant_id, after.tool, after.version, pg_catalog.now(), who,
            CASE WHEN before.version IS NULL THEN NULL ELSE pg_catalog.to_jsonb(before) END,
            pg_catalog.to_jsonb(after));
    RETURN after.version;
END
$$;
REVOKE ALL ON FUNCTION toolgate.set_policy(text, text, boolean, text[], integer, numeric, integer, interval, numeric,
                                         numeric, text[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.set_policy(text, text, boolean, text[], integer, numeric, integer, interval, numeric,
                                              numeric, text[], text[]) TO toolgate_admin;

-- The auditor's question "what did this tool do in this tenant, and when" read an index on
-- (tenant, time) and filtered every row of the window by tool: now an index answers it. Built in
-- the update's transaction, so calls wait (their audit rows) while it is built on a large audit.
CREATE INDEX audit_tenant_tool_at ON toolgate.audit (tenant_id, tool, at);
