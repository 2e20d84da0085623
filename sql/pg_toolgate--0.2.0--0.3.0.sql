-- pg_toolgate 0.2.0 → 0.3.0: every C function of the extension pointed at 0.3.0's library (each
-- version's library is a file of its own, docs/upgrades.md), then the schema changes of 0.3.0,
-- each with its section.
\echo Use "ALTER EXTENSION pg_toolgate UPDATE TO '0.3.0'" to load this file. \quit

------------------------------------------------------------------------------------------------
-- 0. The library: every C function of the extension is pointed at the library installed with
--    this script (CREATE OR REPLACE keeps its oid, grants and every other attribute); a function
--    whose symbol that library no longer has is left for the sections below, which drop or
--    replace it. After an update from 0.1.0 through 0.2.0's script (which points at the same
--    library), there is nothing left to do here.
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
-- 1. Limits over time (docs/limits.md): the tenant's time zone, the limit rows, their history and
--    counters, the functions that define and show them (as sql/limits.sql installs them), their
--    grants (as sql/finalize.sql), what an outbox intent took from them and its settlement giving
--    it back (as sql/outbox.sql), and distribute() taking the new tables on a Citus cluster (as
--    sql/citus.sql).
------------------------------------------------------------------------------------------------

ALTER TABLE toolgate.tenants ADD COLUMN time_zone text NOT NULL DEFAULT 'UTC';
ALTER TABLE toolgate.outbox ADD COLUMN limits jsonb;

-- One row per limit; a configuration row, cached by every backend until it changes (as the policy
-- rows are), versioned in limit_history. A limit is always one tenant's. No foreign keys: Citus
-- keeps these as reference tables beside the ones they would point at; set_limit checks the
-- tenant and the tool instead.
CREATE TABLE toolgate.limits (
    tenant_id       text NOT NULL,
    name            text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    -- NULL: every write tool of the tenant.
    tool            text,
    -- NULL: every caller; else only callers holding this role.
    role            text,
    -- Each actor (the token's subject) has a counter of their own; false: one for all callers.
    per_actor       boolean NOT NULL,
    -- 'calls' counts calls; 'value' adds up their value, in the tenant's currency.
    measure         text NOT NULL CHECK (measure IN ('calls', 'value')),
    -- A rolling window of this many seconds, or a calendar period in the tenant's time zone.
    rolling_seconds integer CHECK (rolling_seconds BETWEEN 1 AND 31622400),
    calendar        text CHECK (calendar IN ('day', 'week', 'month')),
    max             numeric(14, 2) NOT NULL CHECK (max > 0),
    version         integer NOT NULL DEFAULT 1,
    updated_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_by      text NOT NULL,
    PRIMARY KEY (tenant_id, name),
    CONSTRAINT limits_one_window CHECK ((rolling_seconds IS NULL) <> (calendar IS NULL)),
    CONSTRAINT limits_whole_calls CHECK (measure = 'value' OR max = pg_catalog.trunc(max))
);

-- Every version of every limit: who changed it, when, from what to what (NULL new: dropped).
CREATE TABLE toolgate.limit_history (
    history_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  text NOT NULL,
    name       text NOT NULL,
    version    integer NOT NULL,
    changed_at timestamptz NOT NULL,
    changed_by text NOT NULL,
    old        jsonb,
    new        jsonb
);
CREATE INDEX limit_history_at ON toolgate.limit_history (tenant_id, name, changed_at);

-- What each counter used, per bucket: a calendar limit has one bucket per period (its start), a
-- rolling one buckets of a sixtieth of its window (at least a second), summed over the window.
-- subject is the actor for a per-actor limit, '' otherwise. `used` is never below zero: a domain,
-- as for the other tables every call writes (sql/bootstrap.sql says why).
CREATE DOMAIN toolgate.limit_used AS numeric(16, 2) CHECK (VALUE >= 0);
CREATE TABLE toolgate.limit_usage (
    tenant_id  text NOT NULL,
    name       text NOT NULL,
    subject    text NOT NULL,
    bucket     timestamptz NOT NULL,
    used       toolgate.limit_used NOT NULL,
    PRIMARY KEY (tenant_id, name, subject, bucket)
);

CREATE TRIGGER limits_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.limits
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('limits');

SELECT pg_catalog.pg_extension_config_dump('toolgate.limits', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.limit_history', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.limit_history_history_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.limit_usage', '');

-- Where the tenant's calendar days, weeks (from Monday) and months begin: a time zone PostgreSQL
-- knows ('America/Sao_Paulo', 'UTC'). A period already begun keeps what it counted.
CREATE FUNCTION toolgate.set_tenant_time_zone(tenant_id text, time_zone text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    IF time_zone IS NULL OR NOT EXISTS (SELECT FROM pg_catalog.pg_timezone_names z WHERE z.name = time_zone) THEN
        RAISE EXCEPTION 'set_tenant_time_zone: time_zone % is not a time zone PostgreSQL knows',
                        coalesce(pg_catalog.quote_literal(time_zone), 'NULL')
            USING ERRCODE = 'invalid_parameter_value', HINT = 'A name from pg_timezone_names, e.g. America/Sao_Paulo.';
    END IF;
    UPDATE toolgate.tenants t SET time_zone = set_tenant_time_zone.time_zone
     WHERE t.tenant_id = set_tenant_time_zone.tenant_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown tenant %', tenant_id USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- Define or change a limit (every argument given, as a limit is a whole: a rolling window or a
-- calendar one, never both). A change takes effect on the next call; what the counter used so far
-- still counts. Returns the limit's version.
CREATE FUNCTION toolgate.set_limit(
    tenant_id text,
    name text,
    max numeric,
    measure text DEFAULT 'calls',
    rolling interval DEFAULT NULL,
    calendar text DEFAULT NULL,
    tool text DEFAULT NULL,
    role text DEFAULT NULL,
    per_actor boolean DEFAULT false
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    who text := toolgate.caller();
    seconds numeric;
    before toolgate.limits;
    after toolgate.limits;
BEGIN
    IF NOT EXISTS (SELECT FROM toolgate.tenants t WHERE t.tenant_id = set_limit.tenant_id) THEN
        RAISE EXCEPTION 'set_limit: unknown tenant %', coalesce(tenant_id, 'NULL') USING ERRCODE = 'no_data_found';
    END IF;
    IF name IS NULL OR name !~ '^[a-z0-9][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'set_limit: name must match ^[a-z0-9][a-z0-9_.-]{0,62}$' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF measure IS NULL OR measure NOT IN ('calls', 'value') THEN
        RAISE EXCEPTION 'set_limit: measure must be calls or value' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max IS NULL OR max <= 0 THEN
        RAISE EXCEPTION 'set_limit: max must be above zero' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF measure = 'calls' AND max <> pg_catalog.trunc(max) THEN
        RAISE EXCEPTION 'set_limit: max counts calls: a whole number' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (rolling IS NULL) = (calendar IS NULL) THEN
        RAISE EXCEPTION 'set_limit: give one window, rolling (an interval) or calendar (day, week or month)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF calendar IS NOT NULL AND calendar NOT IN ('day', 'week', 'month') THEN
        RAISE EXCEPTION 'set_limit: calendar must be day, week or month' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF rolling IS NOT NULL THEN
        -- A month or a day in an interval has no fixed length; a rolling window counts seconds.
        IF pg_catalog.date_part('month', rolling) <> 0 OR pg_catalog.date_part('year', rolling) <> 0 THEN
            RAISE EXCEPTION 'set_limit: rolling must be in days, hours, minutes or seconds (use calendar for months)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        seconds := pg_catalog.date_part('epoch', rolling);
        IF seconds < 1 OR seconds > 31622400 OR seconds <> pg_catalog.trunc(seconds) THEN
            RAISE EXCEPTION 'set_limit: rolling must be whole seconds, from 1 second to 366 days'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF tool IS NOT NULL AND NOT EXISTS (SELECT FROM toolgate.tools t WHERE t.tool = set_limit.tool AND t.kind <> 'read')
    THEN
        RAISE EXCEPTION 'set_limit: tool % is not a write tool defined here', tool USING ERRCODE = 'no_data_found';
    END IF;
    IF measure = 'value' AND tool IS NOT NULL
       AND NOT EXISTS (SELECT FROM toolgate.tool_bindings b WHERE b.tool = set_limit.tool AND b.value IS NOT NULL) THEN
        RAISE EXCEPTION 'set_limit: tool % has no value function, so a value limit cannot count it', tool
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF role IS NOT NULL AND role !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$' THEN
        RAISE EXCEPTION 'set_limit: role is a role name from the tokens (letters, digits, _ . : -)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF per_actor IS NULL THEN
        RAISE EXCEPTION 'set_limit: per_actor must be true or false' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- One change at a time per limit: the row itself is the lock, as for the policy rows. A first
    -- row is inserted unless a concurrent first insert won; then that row is locked and updated.
    -- (No ON CONFLICT DO UPDATE: Citus takes none that calls now() on a reference table.)
    LOOP
        SELECT * INTO before FROM toolgate.limits l
         WHERE l.tenant_id = set_limit.tenant_id AND l.name = set_limit.name FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO toolgate.limits AS l (tenant_id, name, tool, role, per_actor, measure, rolling_seconds, calendar,
                                          max, version, updated_by)
        VALUES (tenant_id, name, tool, role, per_actor, measure, seconds::integer, calendar, max, 1, who)
        ON CONFLICT ON CONSTRAINT limits_pkey DO NOTHING
        RETURNING * INTO after;
        EXIT WHEN FOUND;
    END LOOP;
    IF before.version IS NOT NULL THEN
        UPDATE toolgate.limits l
           SET tool = set_limit.tool, role = set_limit.role, per_actor = set_limit.per_actor,
               measure = set_limit.measure, rolling_seconds = seconds::integer, calendar = set_limit.calendar,
               max = set_limit.max, version = before.version + 1, updated_at = pg_catalog.now(), updated_by = who
         WHERE l.tenant_id = set_limit.tenant_id AND l.name = set_limit.name
        RETURNING * INTO after;
    END IF;
    -- What was counted under another measure or subject means nothing under the new one.
    IF before.version IS NOT NULL
       AND (before.measure, before.per_actor) IS DISTINCT FROM (after.measure, after.per_actor) THEN
        DELETE FROM toolgate.limit_usage u WHERE u.tenant_id = set_limit.tenant_id AND u.name = set_limit.name;
    END IF;
    INSERT INTO toolgate.limit_history (tenant_id, name, version, changed_at, changed_by, old, new)
    VALUES (after.tenant_id, after.name, after.version, pg_catalog.now(), who,
            CASE WHEN before.version IS NULL THEN NULL ELSE pg_catalog.to_jsonb(before) END,
            pg_catalog.to_jsonb(after));
    RETURN after.version;
END
$$;

-- Drop a limit, and what its counters used. True if there was one.
CREATE FUNCTION toolgate.drop_limit(tenant_id text, name text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    before toolgate.limits;
BEGIN
    DELETE FROM toolgate.limits l WHERE l.tenant_id = drop_limit.tenant_id AND l.name = drop_limit.name
    RETURNING * INTO before;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM toolgate.limit_usage u WHERE u.tenant_id = drop_limit.tenant_id AND u.name = drop_limit.name;
    INSERT INTO toolgate.limit_history (tenant_id, name, version, changed_at, changed_by, old, new)
    VALUES (before.tenant_id, before.name, before.version + 1, pg_catalog.now(), toolgate.caller(),
            pg_catalog.to_jsonb(before), NULL);
    RETURN true;
END
$$;

-- Each limit of a tenant, each counter of it (subject: the actor, '' for a shared one) with what
-- it used in its window now, and when that window ends (a calendar one) or slides (a rolling one).
-- A limit nothing has counted yet shows once, with subject NULL and used 0.
-- (PL/pgSQL, the counters read first by the tenant alone: on Citus, one router query to the
-- tenant's worker, then joined with the reference tables here.)
CREATE FUNCTION toolgate.limits_usage(tenant_id text)
RETURNS TABLE (name text, tool text, role text, per_actor boolean, measure text, "window" text, max numeric,
               subject text, used numeric, window_start timestamptz, window_end timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    RETURN QUERY
    WITH counted AS MATERIALIZED (
        SELECT u.name AS limit_name, u.subject AS counter, u.bucket, u.used AS bucket_used
          FROM toolgate.limit_usage u
         WHERE u.tenant_id = limits_usage.tenant_id
    ), l AS (
        SELECT l.*, t.time_zone,
               CASE WHEN l.calendar IS NOT NULL
                    THEN pg_catalog.date_trunc(l.calendar, pg_catalog.statement_timestamp(), t.time_zone)
                    ELSE pg_catalog.statement_timestamp() - pg_catalog.make_interval(secs => l.rolling_seconds)
               END AS starts,
               greatest(1, l.rolling_seconds / 60) AS width
          FROM toolgate.limits l JOIN toolgate.tenants t ON t.tenant_id = l.tenant_id
         WHERE l.tenant_id = limits_usage.tenant_id
    ), c AS (
        SELECT l.name AS limit_name, k.counter, sum(k.bucket_used) AS in_window
          FROM l JOIN counted k ON k.limit_name = l.name
         WHERE CASE WHEN l.calendar IS NOT NULL THEN k.bucket = l.starts
                    ELSE k.bucket > l.starts - pg_catalog.make_interval(secs => l.width) END
         GROUP BY 1, 2
    )
    SELECT l.name, l.tool, l.role, l.per_actor, l.measure,
           coalesce(l.calendar, l.rolling_seconds || ' s'), l.max, c.counter, coalesce(c.in_window, 0),
           l.starts,
           CASE WHEN l.calendar IS NOT NULL
                THEN (pg_catalog.timezone(l.time_zone, l.starts) + ('1 ' || l.calendar)::interval) AT TIME ZONE l.time_zone
                ELSE pg_catalog.statement_timestamp() END
      FROM l LEFT JOIN c ON c.limit_name = l.name
     ORDER BY l.name, c.counter;
END
$$;

REVOKE ALL ON FUNCTION toolgate.set_tenant_time_zone(text, text), toolgate.drop_limit(text, text),
                       toolgate.set_limit(text, text, numeric, text, interval, text, text, text, boolean),
                       toolgate.limits_usage(text) FROM PUBLIC;
REVOKE ALL ON toolgate.limits, toolgate.limit_history, toolgate.limit_usage FROM PUBLIC;
REVOKE ALL ON SEQUENCE toolgate.limit_history_history_id_seq FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    toolgate.set_tenant_time_zone(text, text),
    toolgate.set_limit(text, text, numeric, text, interval, text, text, text, boolean),
    toolgate.drop_limit(text, text),
    toolgate.limits_usage(text)
TO toolgate_admin;
GRANT SELECT ON toolgate.limits, toolgate.limit_history, toolgate.limit_usage TO toolgate_admin;
GRANT SELECT ON toolgate.limit_history TO toolgate_auditor;
GRANT EXECUTE ON FUNCTION toolgate.limits_usage(text) TO toolgate_auditor;

CREATE OR REPLACE FUNCTION toolgate.distribute(erp_tables regclass[] DEFAULT '{}') RETURNS TABLE (object text, layout text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    reference constant text[] := ARRAY['tenants', 'keys', 'issuers', 'tenant_issuers', 'tools', 'tool_schemas',
                                       'erp_endpoints', 'tool_bindings', 'erp_credentials', 'policies',
                                       'policy_history', 'tool_history', 'write_switches', 'audit_key',
                                       'administrators', 'erp_endpoint_history', 'limits', 'limit_history'];
    tenant_tables constant text[] := ARRAY['ledger', 'proposals', 'conversations', 'quota_usage', 'audit', 'outbox',
                                           'limit_usage'];
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
        -- A configuration table a later version added (no foreign keys): on its own.
        IF NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = format('toolgate.%I', t)::regclass) THEN
            PERFORM create_reference_table(format('toolgate.%I', t)::regclass);
        END IF;
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

CREATE OR REPLACE FUNCTION toolgate.outbox_settle(intent toolgate.outbox, outcome text, reply jsonb, retry_in interval,
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
    -- effect refuses in the database: the conversation's quota (the call that queued it) and
    -- what it took from the tenant's limits over time.
    IF new_state = 'REJECTED' THEN
        UPDATE toolgate.quota_usage q SET used = q.used - 1, updated_at = pg_catalog.now()
         WHERE q.tenant_id = intent.tenant_id AND q.actor = intent.actor
           AND q.conversation_id = intent.conversation_id AND q.tool = intent.tool AND q.used > 0;
        UPDATE toolgate.limit_usage u SET used = u.used - c.amount
          FROM pg_catalog.jsonb_to_recordset(coalesce(intent.limits, '[]')) AS c(name text, subject text, bucket bigint,
                                                                                  amount numeric)
         WHERE u.tenant_id = intent.tenant_id AND u.name = c.name AND u.subject = c.subject
           AND u.bucket = pg_catalog.to_timestamp(c.bucket) AND u.used >= c.amount;
    END IF;
    RETURN stored;
END
$$;
COMMENT ON FUNCTION toolgate.outbox_settle(toolgate.outbox, text, jsonb, interval, jsonb, jsonb) IS
    'settle_outbox''s and resolve_outbox''s settlement of one locked intent; executable by no role.';
