-- define_tool refuses what it cannot run safely, with a clear error and its SQLSTATE, and leaves
-- nothing half-registered: a function of the wrong signature, not SECURITY DEFINER, without a
-- pinned search_path, executable by PUBLIC or the agent, owned by a superuser; a schema that does
-- not compile or fetches remote refs, or has no retry key; a sensitive tool without a value
-- function; a consent template with names the gate cannot fill; target_states holding a NULL; a
-- write tool's name for a read tool.
\set VERBOSITY terse
SET client_min_messages = warning;
-- One line per attempt: the SQLSTATE and the message, or what define_tool returned.
CREATE FUNCTION pg_temp.try(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    EXECUTE 'SELECT ' || statement INTO result;
    RETURN 'ok: ' || result;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
DO $$ BEGIN CREATE ROLE bad_owner NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
CREATE SCHEMA bad AUTHORIZATION bad_owner;
GRANT USAGE ON SCHEMA bad TO toolgate_admin;
SET ROLE bad_owner;
CREATE FUNCTION bad.ok(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ SELECT NULL::jsonb $$;
CREATE FUNCTION bad.signature(ctx text, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ SELECT NULL::jsonb $$;
CREATE FUNCTION bad.invoker(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$ SELECT NULL::jsonb $$;
CREATE FUNCTION bad.no_path(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER AS $$ SELECT NULL::jsonb $$;
CREATE FUNCTION bad.public(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ SELECT NULL::jsonb $$;
CREATE FUNCTION bad.agent(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ SELECT NULL::jsonb $$;
REVOKE EXECUTE ON FUNCTION bad.ok(jsonb, jsonb), bad.signature(text, jsonb), bad.invoker(jsonb, jsonb),
    bad.no_path(jsonb, jsonb), bad.agent(jsonb, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION bad.agent(jsonb, jsonb) TO toolgate_agent;
-- The delegated admin defines tools below: it must be able to execute what it binds.
GRANT EXECUTE ON FUNCTION bad.ok(jsonb, jsonb), bad.signature(text, jsonb), bad.invoker(jsonb, jsonb),
    bad.no_path(jsonb, jsonb) TO toolgate_admin;
RESET ROLE;
CREATE FUNCTION bad.superuser(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ SELECT NULL::jsonb $$;
REVOKE EXECUTE ON FUNCTION bad.superuser(jsonb, jsonb) FROM PUBLIC;
RESET client_min_messages;

\set schema '{"type": "object", "additionalProperties": false, "required": ["id", "idempotency_key"], "properties": {"id": {"type": "string"}, "idempotency_key": {"type": "string", "minLength": 8}}}'
SELECT (SELECT count(*) FROM toolgate.tools) AS tools, (SELECT count(*) FROM toolgate.tool_schemas) AS schemas,
       (SELECT count(*) FROM toolgate.tool_bindings) AS bindings, (SELECT count(*) FROM toolgate.tool_history) AS history
\gset before_
SET ROLE toolgate_admin;
SELECT pg_temp.try(format(s, :'schema')) AS attempt FROM (VALUES
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, false, ''bad.signature(text, jsonb)'', ''bad.ok(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, false, ''bad.invoker(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, false, ''bad.ok(jsonb, jsonb)'', ''bad.no_path(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, false, ''bad.ok(jsonb, jsonb)'', ''bad.public(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, false, ''bad.ok(jsonb, jsonb)'', ''bad.agent(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, false, ''bad.superuser(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, false, ''bad.missing(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, true, ''bad.ok(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', ''{"type": 12}'', false, ''bad.ok(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', ''{"$ref": "https://example.com/schema.json"}'', false, ''bad.ok(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', ''{"type": "object", "properties": {"id": {"type": "string"}}}'', false, ''bad.ok(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, false, ''bad.ok(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'', consent => ''Probe {args.other}'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, false, ''bad.ok(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'', consent => ''Probe {value.amount}'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, false, ''bad.ok(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'', consent => ''Probe {args.id'')'),
    ('toolgate.define_tool(''probe'', ''A probe.'', %L, false, ''bad.ok(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'', target_states => ARRAY[''open'', NULL])'),
    ('toolgate.define_tool(''Probe Tool'', ''A probe.'', %L, false, ''bad.ok(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'')'),
    ('toolgate.define_tool(''probe'', NULL, %L, false, ''bad.ok(jsonb, jsonb)'', ''bad.ok(jsonb, jsonb)'')'),
    ('toolgate.define_read_tool(''probe'', ''A probe.'', %L, ''bad.public(jsonb, jsonb)'')'),
    ('toolgate.define_read_tool(''probe'', ''A probe.'', %L, ''bad.ok(jsonb, jsonb)'', ARRAY[''notes/text''])'),
    ('toolgate.define_read_tool(''request_close'', ''A probe.'', %L, ''bad.ok(jsonb, jsonb)'')')
) AS t(s);
RESET ROLE;
-- Nothing of any of them was kept.
SELECT (SELECT count(*) FROM toolgate.tools) = :before_tools AS tools_unchanged,
       (SELECT count(*) FROM toolgate.tool_schemas) = :before_schemas AS schemas_unchanged,
       (SELECT count(*) FROM toolgate.tool_bindings) = :before_bindings AS bindings_unchanged,
       (SELECT count(*) FROM toolgate.tool_history) = :before_history AS history_unchanged;

-- A good definition, then a change of its template: two versions, one schema version, history.
SET ROLE toolgate_admin;
SELECT toolgate.define_tool('probe', 'A probe.', :'schema', false, 'bad.ok(jsonb, jsonb)', 'bad.ok(jsonb, jsonb)');
SELECT toolgate.define_tool('probe', 'A probe.', :'schema', false, 'bad.ok(jsonb, jsonb)', 'bad.ok(jsonb, jsonb)',
                            consent => 'Probe {args.id} (tenant {tenant}).');
RESET ROLE;
SELECT tool, version, consent FROM toolgate.tool_bindings WHERE tool = 'probe';
SELECT tool, version, old->>'consent' AS old_consent, new->>'consent' AS new_consent, changed_by
  FROM toolgate.tool_history WHERE tool = 'probe' ORDER BY version;
SELECT tool, version FROM toolgate.tool_schemas WHERE tool = 'probe';
-- The agent cannot define tools, nor run the bound functions.
SET ROLE toolgate_agent;
SELECT toolgate.define_tool('probe2', 'A probe.', :'schema', false, NULL, NULL);
SELECT bad.ok('{}', '{}');
RESET ROLE;
