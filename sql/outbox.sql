------------------------------------------------------------------------------------------------
-- Outbox tools (issue 24): a write tool whose effect is delivered to an ERP outside the
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
CREATE TABLE toolgate.erp_endpoints (
    name       text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    base_url   text NOT NULL CHECK (base_url ~ '^https?://[^\s/?#@]+(/[^\s?#@]*)?$'),
    auth_kind  text NOT NULL CHECK (auth_kind IN ('none', 'bearer', 'refresh_token')),
    per_second integer CHECK (per_second > 0),
    per_minute integer CHECK (per_minute > 0),
    defined_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    defined_by text NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('toolgate.erp_endpoints', '');
CREATE TRIGGER erp_endpoints_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.erp_endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();
COMMENT ON TABLE toolgate.erp_endpoints IS
    'The ERPs outbox tools deliver to: base URL, kind of authentication, rate limits. No secret is kept here.';

-- An outbox tool's binding: `request` instead of `effect`, the endpoint it goes to, and the
-- optional `finish` the dispatcher runs in the database once the ERP has done its part.
ALTER TABLE toolgate.tool_bindings ADD COLUMN request text, ADD COLUMN finish text,
    ADD COLUMN endpoint text REFERENCES toolgate.erp_endpoints;
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
    request         jsonb NOT NULL,
    endpoint        text NOT NULL,
    state           text NOT NULL DEFAULT 'PENDING'
                    CHECK (state IN ('PENDING', 'UNCERTAIN', 'SUCCEEDED', 'PARTIAL', 'REJECTED', 'DEAD')),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (tenant_id, tool, idempotency_key)
);
CREATE INDEX outbox_pending ON toolgate.outbox (created_at) WHERE state = 'PENDING';
SELECT pg_catalog.pg_extension_config_dump('toolgate.outbox', '');
COMMENT ON TABLE toolgate.outbox IS
    'Intents of outbox tools, written with the ledger and the audit row; delivered to the ERP by the dispatcher.';

-- Name an ERP, or change one: its base URL (http or https, no credentials in it), the kind of
-- authentication the dispatcher uses (none, bearer, refresh_token) and its rate limits per second
-- and per minute (NULL: none).
CREATE FUNCTION toolgate.add_erp_endpoint(
    name text,
    base_url text,
    auth_kind text DEFAULT 'none',
    per_second integer DEFAULT NULL,
    per_minute integer DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    IF name IS NULL OR name !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'an endpoint''s name is a lower-case identifier (a-z, 0-9, _), not %', coalesce(name, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF base_url IS NULL OR base_url !~ '^https?://[^\s/?#@]+(/[^\s?#@]*)?$' THEN
        RAISE EXCEPTION 'base_url is an http(s) URL with no credentials, query or fragment in it'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Credentials are the dispatcher''s, never a table''s.';
    END IF;
    IF auth_kind IS NULL OR auth_kind NOT IN ('none', 'bearer', 'refresh_token') THEN
        RAISE EXCEPTION 'auth_kind is none, bearer or refresh_token, not %', coalesce(auth_kind, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF per_second <= 0 OR per_minute <= 0 THEN
        RAISE EXCEPTION 'rate limits are more than zero, or NULL for none' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO toolgate.erp_endpoints AS e (name, base_url, auth_kind, per_second, per_minute, defined_by)
    VALUES (add_erp_endpoint.name, add_erp_endpoint.base_url, add_erp_endpoint.auth_kind,
            add_erp_endpoint.per_second, add_erp_endpoint.per_minute, toolgate.caller())
    ON CONFLICT ON CONSTRAINT erp_endpoints_pkey DO UPDATE SET
        base_url = excluded.base_url, auth_kind = excluded.auth_kind, per_second = excluded.per_second,
        per_minute = excluded.per_minute, defined_at = pg_catalog.now(), defined_by = excluded.defined_by;
END
$$;
COMMENT ON FUNCTION toolgate.add_erp_endpoint(text, text, text, integer, integer) IS
    'Name an ERP outbox tools deliver to (base URL, auth kind, rate limits), or change it.';

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
    fault text;
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
    IF amounts IS NULL OR amounts NOT IN ('positive', 'non_negative', 'any') THEN
        RAISE EXCEPTION 'amounts is positive (more than zero, the default), non_negative (zero allowed) or any (credits allowed), not %',
            coalesce(amounts, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF array_position(target_states, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'target_states holds state names, not NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF EXISTS (SELECT 1 FROM toolgate.tools t WHERE t.tool = define_outbox_tool.tool AND t.kind <> 'write') THEN
        RAISE EXCEPTION 'tool % is a read tool', tool USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF sensitive AND value IS NULL THEN
        RAISE EXCEPTION 'a sensitive tool needs a value function (the money at stake)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    fault := coalesce(toolgate.binding_fault(target::text, 'target'), toolgate.binding_fault(request::text, 'request'),
                      toolgate.binding_fault(value::text, 'value'), toolgate.binding_fault(finish::text, 'finish'));
    IF fault IS NOT NULL THEN
        RAISE EXCEPTION '%', fault USING ERRCODE = 'invalid_function_definition';
    END IF;
    fault := coalesce(toolgate.definer_fault(who, target, 'target'), toolgate.definer_fault(who, request, 'request'),
                      toolgate.definer_fault(who, value, 'value'), toolgate.definer_fault(who, finish, 'finish'));
    IF fault IS NOT NULL THEN
        RAISE EXCEPTION '%', fault USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- One warning for each owner, naming the first of its functions.
    FOR fault IN SELECT DISTINCT ON (p.proowner) toolgate.binding_warning(f.fn, f.what)
                   FROM ROWS FROM (pg_catalog.unnest(ARRAY[target, request, value, finish]),
                                   pg_catalog.unnest(ARRAY['target', 'request', 'value', 'finish'])) WITH ORDINALITY AS f(fn, what, n)
                   JOIN pg_catalog.pg_proc p ON p.oid = f.fn
                  WHERE toolgate.binding_warning(f.fn, f.what) IS NOT NULL
                  ORDER BY p.proowner, f.n LOOP
        RAISE WARNING '%', fault;
    END LOOP;
    PERFORM toolgate.check_tool_schema(schema);
    IF NOT coalesce(schema->'required' ? 'idempotency_key', false)
       OR schema->'properties'->'idempotency_key'->>'type' IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'the schema must require a string idempotency_key (the retry key)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF consent IS NOT NULL THEN
        PERFORM toolgate.check_consent_template(consent, schema, value IS NOT NULL);
    END IF;

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
        version = b.version + 1, defined_at = pg_catalog.now(), defined_by = excluded.defined_by
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
