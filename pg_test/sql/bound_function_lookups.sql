-- What a server process keeps of a tool's bound functions between calls (the function manager's
-- lookup, with the owner SECURITY DEFINER runs as and the settings it applies) is dropped when a
-- function changes: the next call in the same session runs as the new owner, under the new
-- search_path. And a confirmation asks the target function once: the rows it locked before the
-- proposal are the target step 4 judges, seen in the confirmation's own context.
\set VERBOSITY terse
SET client_min_messages = warning;
DO $$ BEGIN CREATE ROLE lookup_owner_a NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
DO $$ BEGIN CREATE ROLE lookup_owner_b NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
GRANT USAGE ON SCHEMA toolgate TO lookup_owner_a, lookup_owner_b;
CREATE SCHEMA lookup AUTHORIZATION lookup_owner_a;
GRANT USAGE ON SCHEMA lookup TO lookup_owner_b;
SET ROLE lookup_owner_a;
CREATE TABLE lookup.calls (n serial, fn text, conversation text, proposal text, run_as text);
GRANT INSERT ON lookup.calls TO lookup_owner_b;
GRANT USAGE ON SEQUENCE lookup.calls_n_seq TO lookup_owner_b;
CREATE FUNCTION lookup.target(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, lookup, pg_temp AS $$
BEGIN
    INSERT INTO lookup.calls (fn, conversation, proposal, run_as)
    VALUES ('target', ctx->>'conversation', ctx->>'proposal_id', current_user);
    RETURN jsonb_build_object('id', args->>'id', 'tenant', ctx->>'tenant', 'state', 'ok');
END $$;
CREATE FUNCTION lookup.effect(ctx jsonb, args jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, lookup, pg_temp AS $$
BEGIN
    INSERT INTO lookup.calls (fn, conversation, proposal, run_as)
    VALUES ('effect', ctx->>'conversation', ctx->>'proposal_id', current_user);
    RETURN jsonb_build_object('run_as', current_user, 'search_path', current_setting('search_path'));
END $$;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA lookup FROM PUBLIC;
RESET ROLE;
\set schema '{"type": "object", "additionalProperties": false, "required": ["id", "idempotency_key"], "properties": {"id": {"type": "string"}, "idempotency_key": {"type": "string", "minLength": 8}}}'
SELECT toolgate.define_tool('lookup_now', 'Apply at once.', :'schema', false,
                            'lookup.target(jsonb, jsonb)', 'lookup.effect(jsonb, jsonb)') AS version;
SELECT toolgate.define_tool('lookup_later', 'Apply once confirmed.', :'schema', false,
                            'lookup.target(jsonb, jsonb)', 'lookup.effect(jsonb, jsonb)') AS version;
SELECT toolgate.set_policy('shopping-a', 'lookup_now', allowed => true, roles => ARRAY['supervisor'], tier => 0);
SELECT toolgate.set_policy('shopping-a', 'lookup_later', allowed => true, roles => ARRAY['supervisor'], tier => 1);
RESET client_min_messages;

-- One session throughout: the lookups it keeps after the first call must not outlive a change.
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'outcome' AS outcome, r->'result'->>'run_as' AS run_as, r->'result'->>'search_path' AS search_path
  FROM toolgate.call(:'sup', 'lookup-1', 'lookup_now', '{"id": "x", "idempotency_key": "lookup-key-1"}') r;
RESET ROLE;
ALTER FUNCTION lookup.effect(jsonb, jsonb) OWNER TO lookup_owner_b;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->'result'->>'run_as' AS run_as, r->'result'->>'search_path' AS search_path
  FROM toolgate.call(:'sup', 'lookup-2', 'lookup_now', '{"id": "x", "idempotency_key": "lookup-key-2"}') r;
RESET ROLE;
ALTER FUNCTION lookup.effect(jsonb, jsonb) SET search_path = pg_catalog, pg_temp;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->'result'->>'run_as' AS run_as, r->'result'->>'search_path' AS search_path
  FROM toolgate.call(:'sup', 'lookup-3', 'lookup_now', '{"id": "x", "idempotency_key": "lookup-key-3"}') r;

-- Tier 1: the target function runs for the proposal, and once more for the confirmation (in its
-- conversation, with its proposal), not twice.
SELECT r->'proposal'->>'id' AS pid
  FROM toolgate.call(:'sup', 'lookup-4', 'lookup_later', '{"id": "y", "idempotency_key": "lookup-key-4"}') r \gset
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome FROM toolgate.confirm(:'sup', :'yes') r;
RESET ROLE;
SELECT fn, conversation, proposal IS NOT NULL AS with_proposal, proposal = :'pid' AS its_proposal, run_as
  FROM lookup.calls ORDER BY n;
