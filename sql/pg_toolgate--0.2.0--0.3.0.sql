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
                                       'administrators', 'erp_endpoint_history', 'limits', 'limit_history',
                                       'seal_keys', 'audit_retention'];
    tenant_tables constant text[] := ARRAY['ledger', 'proposals', 'conversations', 'quota_usage', 'audit', 'outbox',
                                           'limit_usage', 'audit_checkpoints', 'audit_purges', 'person_keys',
                                           'erasures', 'approvals'];
    entry_points constant text[] := ARRAY['toolgate.tenant_call(text,text,text,text,jsonb)',
                                          'toolgate.tenant_read(text,text,text,jsonb)',
                                          'toolgate.tenant_confirm(text,text,text)',
                                          'toolgate.tenant_approve(text,text,text,text,text)',
                                          'toolgate.tenant_pending(text,text)',
                                          'toolgate.tenant_approval_history(text,text)',
                                          'toolgate.tenant_audit_trail(text,text,jsonb)',
                                          'toolgate.tenant_claim_outbox(text,integer,interval,text[])',
                                          'toolgate.renew_outbox(text,text,text,uuid,interval)',
                                          'toolgate.note_outbox(text,text,text,uuid,text,jsonb)',
                                          'toolgate.settle_outbox(text,text,text,uuid,text,jsonb,interval,jsonb)',
                                          'toolgate.resolve_outbox(text,text,text,text,text,jsonb)',
                                          'toolgate.requeue_outbox(text,text,text,text)',
                                          'toolgate.tenant_seal(text,integer,interval)'];
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

    -- The audit's rows so far moved to their months' partitions, while it is one server's: once
    -- distributed, Citus cannot attach a partition that holds rows.
    IF NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = 'toolgate.audit'::regclass) THEN
        PERFORM toolgate.audit_partitions();
    END IF;
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
    VALUES ('dispatch', intent.tenant_id, session_user, intent.tool,
            toolgate.audited_target(intent.tenant_id, intent.tool, intent.args, intent.target), intent.proposal_id, word,
            CASE WHEN outcome = 'REJECTED' THEN 'erp_rejected' END,
            CASE WHEN outcome = 'SUCCEEDED' AND intent.state <> 'PARTIAL' THEN 1 ELSE 0 END,
            pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
                'endpoint', intent.endpoint, 'attempts', intent.attempts, 'state', new_state, 'error', error,
                'asked_by', toolgate.pseudonym(intent.tenant_id, intent.actor), 'value', intent.value,
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


------------------------------------------------------------------------------------------------
-- 2. The audit's seal (docs/audit.md): the seal keys and the checkpoints, the
--    functions that seal and verify and what they need from the library (as sql/seal.sql
--    installs them), their grants (as sql/finalize.sql), and the append-only trigger naming the
--    table it guards (as sql/bootstrap.sql).
------------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION toolgate.audit_is_append_only() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- A partition of the audit is the audit: its name is the whole table's.
    RAISE EXCEPTION '% is append-only',
                    coalesce(pg_catalog.pg_partition_root(TG_RELID), TG_RELID)::pg_catalog.regclass::text
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE FUNCTION toolgate.seal_new_seed() RETURNS bytea
STRICT VOLATILE PARALLEL UNSAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'seal_new_seed_wrapper';
CREATE FUNCTION toolgate.seal_public_key(seed bytea) RETURNS bytea
IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'seal_public_key_wrapper';
CREATE FUNCTION toolgate.seal_signature(seed bytea, message bytea) RETURNS bytea
IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'seal_signature_wrapper';
CREATE FUNCTION toolgate.seal_signature_valid(public_key bytea, message bytea, signature bytea) RETURNS boolean
IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'seal_signature_valid_wrapper';
CREATE FUNCTION toolgate.seal_lock(tenant text) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'seal_lock_wrapper';
CREATE FUNCTION toolgate.wait_for_writers(rel oid) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'wait_for_writers_wrapper';
CREATE FUNCTION toolgate.min_retention() RETURNS integer
STRICT STABLE PARALLEL SAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'min_retention_wrapper';

-- The seal keys. The newest not retired signs; a retired key keeps its public half, so what it
-- signed still verifies, and loses its seed, so it signs nothing again. The first seal makes the
-- first key (none is made at CREATE EXTENSION: pg_dump keeps these rows, and a restore's own
-- CREATE EXTENSION must not make one of the same number).
CREATE TABLE toolgate.seal_keys (
    key_id     integer PRIMARY KEY,
    public_key bytea NOT NULL CHECK (pg_catalog.length(public_key) = 32),
    secret     bytea CHECK (pg_catalog.length(secret) = 32),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    retired_at timestamptz,
    CONSTRAINT seal_keys_retired_have_no_secret CHECK ((secret IS NULL) = (retired_at IS NOT NULL))
);

-- One row per checkpoint: a tenant's audit rows whose time is in [sealed_from, sealed_to)
-- (sealed_from NULL: since the first), their ids and leaves (the SHA-256 of each row, 32 bytes
-- each, in the same order: by time, then id), the SHA-256 of the leaves, the hash of the
-- checkpoint before (NULL for the first), and the signature of all of it
-- (toolgate.checkpoint_message). Append-only, as the audit is.
CREATE TABLE toolgate.audit_checkpoints (
    tenant_id   text NOT NULL,
    seq         bigint NOT NULL CHECK (seq >= 1),
    sealed_from timestamptz,
    sealed_to   timestamptz NOT NULL,
    rows        integer NOT NULL CHECK (rows >= 1),
    audit_ids   bigint[] NOT NULL,
    leaves      bytea NOT NULL,
    root        bytea NOT NULL,
    prev        bytea,
    key_id      integer NOT NULL,
    signature   bytea NOT NULL,
    sealed_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (tenant_id, seq)
);
CREATE TRIGGER audit_checkpoints_no_update_or_delete BEFORE UPDATE OR DELETE ON toolgate.audit_checkpoints
    FOR EACH ROW EXECUTE FUNCTION toolgate.audit_is_append_only();
CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON toolgate.audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.audit_is_append_only();

SELECT pg_catalog.pg_extension_config_dump('toolgate.seal_keys', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.audit_checkpoints', '');

-- The seal keys' public halves: what an auditor copies out to verify checkpoints elsewhere.
CREATE VIEW toolgate.seal_public_keys AS
SELECT k.key_id, pg_catalog.encode(k.public_key, 'hex') AS public_key, k.created_at, k.retired_at
  FROM toolgate.seal_keys k;

-- A row as its leaf hashes it: every column, in a JSON array whose text depends on no setting
-- (the time as seconds since the epoch). The columns are named, not the row: on a Citus worker
-- the row of a shard is of the shard's type, not toolgate.audit's. SQL functions PostgreSQL
-- inlines into the seal's queries, so every name in them is qualified.
CREATE FUNCTION toolgate.audit_canonical(
    audit_id bigint, at timestamptz, kind text, tenant_id text, conversation_id text, actor text, role text,
    tool text, target text, proposal_id uuid, outcome text, rule text, replayed boolean, effects integer,
    detail jsonb, args_hmac text, schema_version integer, policy_version integer, duration_us bigint
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.jsonb_build_array(
        'toolgate.audit/1', audit_id, EXTRACT(epoch FROM at), kind, tenant_id, conversation_id, actor, role, tool,
        target, proposal_id, outcome, rule, replayed, effects, detail, args_hmac, schema_version, policy_version,
        duration_us)::text
$$;

-- A row's leaf: the SHA-256 of its canonical text, in UTF-8.
CREATE FUNCTION toolgate.audit_leaf(
    audit_id bigint, at timestamptz, kind text, tenant_id text, conversation_id text, actor text, role text,
    tool text, target text, proposal_id uuid, outcome text, rule text, replayed boolean, effects integer,
    detail jsonb, args_hmac text, schema_version integer, policy_version integer, duration_us bigint
) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.sha256(pg_catalog.convert_to(toolgate.audit_canonical(
        audit_id, at, kind, tenant_id, conversation_id, actor, role, tool, target, proposal_id, outcome, rule,
        replayed, effects, detail, args_hmac, schema_version, policy_version, duration_us), 'UTF8'))
$$;

-- What a checkpoint's signature signs, and what the next checkpoint's `prev` is the SHA-256 of.
CREATE FUNCTION toolgate.checkpoint_message(c toolgate.audit_checkpoints) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.convert_to(pg_catalog.jsonb_build_array(
        'toolgate.checkpoint/1', c.tenant_id, c.seq, EXTRACT(epoch FROM c.sealed_from), EXTRACT(epoch FROM c.sealed_to),
        c.rows, pg_catalog.encode(c.root, 'hex'),
        pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.array_to_string(c.audit_ids, ','), 'UTF8')), 'hex'),
        pg_catalog.encode(c.prev, 'hex'), c.key_id)::text, 'UTF8')
$$;

-- Refuse, before anything is sealed, a seal that cannot be exact: a transaction other than READ
-- COMMITTED (its snapshot would be older than the wait for the audit's writers), a batch below 1.
CREATE FUNCTION toolgate.seal_refuse_unfit(batch integer) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'toolgate.seal runs under READ COMMITTED: it reads what the audit''s writers committed while it waited for them'
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    IF batch IS NULL OR batch < 1 THEN
        RAISE EXCEPTION 'toolgate.seal: batch must be at least 1' USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- The tenants a seal covers: every tenant, and the calls whose identity was not verified
-- ('(unverified)'), in name order.
CREATE FUNCTION toolgate.seal_tenants() RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT x.id FROM (SELECT n.tenant_id AS id FROM toolgate.tenants n UNION SELECT '(unverified)') x ORDER BY 1
$$;

-- One tenant's seal, once its writers are waited for: its rows of a time before `horizon` since
-- its last checkpoint, in checkpoints of at most `batch` rows (the rows of one instant stay
-- together), signed with `k`.
CREATE FUNCTION toolgate.seal_tenant(t text, batch integer, horizon timestamptz, k toolgate.seal_keys)
RETURNS TABLE (tenant_id text, checkpoint bigint, sealed_rows integer, sealed_to timestamptz)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    head toolgate.audit_checkpoints;
    c toolgate.audit_checkpoints;
    cut timestamptz;
BEGIN
    LOOP
        head := NULL;
        SELECT * INTO head FROM toolgate.audit_checkpoints x WHERE x.tenant_id = t ORDER BY x.seq DESC LIMIT 1;
        -- This checkpoint's end: the time of the first row past `batch`, unless every row before
        -- it shares its time (then the next time after it); the horizon when fewer are left.
        SELECT a.at INTO cut FROM toolgate.audit a
         WHERE a.tenant_id = t AND a.at >= coalesce(head.sealed_to, '-infinity') AND a.at < horizon
         ORDER BY a.at OFFSET batch LIMIT 1;
        IF cut IS NOT NULL AND NOT EXISTS (SELECT FROM toolgate.audit a WHERE a.tenant_id = t
                                              AND a.at >= coalesce(head.sealed_to, '-infinity') AND a.at < cut) THEN
            SELECT min(a.at) INTO cut FROM toolgate.audit a WHERE a.tenant_id = t AND a.at > cut AND a.at < horizon;
        END IF;
        cut := coalesce(cut, horizon);
        c := NULL;
        SELECT pg_catalog.array_agg(a.audit_id ORDER BY a.at, a.audit_id),
               pg_catalog.string_agg(toolgate.audit_leaf(
                   a.audit_id, a.at, a.kind, a.tenant_id, a.conversation_id, a.actor, a.role, a.tool, a.target, a.proposal_id,
                       a.outcome, a.rule, a.replayed, a.effects, a.detail, a.args_hmac, a.schema_version, a.policy_version,
                       a.duration_us), ''::bytea ORDER BY a.at, a.audit_id),
               count(*)
          INTO c.audit_ids, c.leaves, c.rows
          FROM toolgate.audit a
         WHERE a.tenant_id = t AND a.at >= coalesce(head.sealed_to, '-infinity') AND a.at < cut;
        EXIT WHEN c.rows = 0;
        c.tenant_id := t;
        c.seq := coalesce(head.seq, 0) + 1;
        c.sealed_from := head.sealed_to;
        c.sealed_to := cut;
        c.root := pg_catalog.sha256(c.leaves);
        c.prev := CASE WHEN head.seq IS NOT NULL THEN pg_catalog.sha256(toolgate.checkpoint_message(head)) END;
        c.key_id := k.key_id;
        c.signature := toolgate.seal_signature(k.secret, toolgate.checkpoint_message(c));
        c.sealed_at := pg_catalog.clock_timestamp();
        INSERT INTO toolgate.audit_checkpoints SELECT (c).*;
        seal_tenant.tenant_id := t;
        checkpoint := c.seq;
        sealed_rows := c.rows;
        seal_tenant.sealed_to := cut;
        RETURN NEXT;
        EXIT WHEN cut = horizon;
    END LOOP;
END
$$;

-- The key that signs now; the first seal makes the first one, from PostgreSQL's strong random
-- source (two first seals at once make one).
CREATE FUNCTION toolgate.seal_key() RETURNS toolgate.seal_keys
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    k toolgate.seal_keys;
    seed bytea;
BEGIN
    SELECT * INTO k FROM toolgate.seal_keys s WHERE s.retired_at IS NULL ORDER BY s.key_id DESC LIMIT 1;
    IF NOT FOUND AND NOT EXISTS (SELECT FROM toolgate.seal_keys) THEN
        seed := toolgate.seal_new_seed();
        INSERT INTO toolgate.seal_keys (key_id, public_key, secret) VALUES (1, toolgate.seal_public_key(seed), seed)
            ON CONFLICT (key_id) DO NOTHING;
        SELECT * INTO k FROM toolgate.seal_keys s WHERE s.retired_at IS NULL ORDER BY s.key_id DESC LIMIT 1;
    END IF;
    IF k.key_id IS NULL THEN
        RAISE EXCEPTION 'toolgate.seal: no seal key signs (toolgate.rotate_seal_key() makes one)'
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN k;
END
$$;

-- Seal the audit rows written since each tenant's last checkpoint (one tenant, or every tenant
-- seal_tenants() names), in checkpoints of at most `batch` rows. First it notes the time, then
-- waits for every transaction that was writing the audit then to end: every row of an earlier
-- time is committed or gone, so a row never arrives later in a period already sealed. Calls do
-- not wait for it. Returns each checkpoint written; none for a tenant with nothing new. On a
-- Citus cluster a tenant's rows are on its worker, and so is its seal: tenant_seal.
CREATE FUNCTION toolgate.seal(tenant text DEFAULT NULL, batch integer DEFAULT 10000)
RETURNS TABLE (tenant_id text, checkpoint bigint, sealed_rows integer, sealed_to timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    tenants text[];
    t text;
    horizon timestamptz;
    k toolgate.seal_keys;
BEGIN
    PERFORM toolgate.seal_refuse_unfit(batch);
    IF toolgate.distributed('toolgate.audit') THEN
        RAISE EXCEPTION 'toolgate.seal seals one server''s audit; on a Citus cluster each tenant''s is sealed on its worker'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'SELECT * FROM toolgate.tenant_seal(tenant) for each tenant of toolgate.seal_tenants(), each as a '
                         'statement of its own (toolgate audit seal does).';
    END IF;
    IF seal.tenant IS NULL THEN
        tenants := ARRAY(SELECT toolgate.seal_tenants());
    ELSIF seal.tenant IN (SELECT toolgate.seal_tenants()) THEN
        tenants := ARRAY[seal.tenant];
    ELSE
        RAISE EXCEPTION 'toolgate.seal: unknown tenant %', seal.tenant USING ERRCODE = 'no_data_found';
    END IF;
    -- One sealer per tenant, taken in name order (two seals of every tenant never deadlock).
    FOREACH t IN ARRAY tenants LOOP
        PERFORM toolgate.seal_lock(t);
    END LOOP;
    horizon := pg_catalog.clock_timestamp();
    PERFORM toolgate.wait_for_writers('toolgate.audit'::regclass);
    k := toolgate.seal_key();
    FOREACH t IN ARRAY tenants LOOP
        RETURN QUERY SELECT * FROM toolgate.seal_tenant(t, batch, horizon, k);
    END LOOP;
END
$$;

-- One tenant's seal, where its rows are: seal()'s for one tenant on one server; on a Citus
-- cluster, delegated to the tenant's worker (distribute() makes it so), called on the coordinator
-- as a statement of its own, outside a transaction block. There it also waits for the writers
-- of the tenant's shard of the audit (a refusal audited on the coordinator writes the shard, not
-- the distributed table), and leaves the last `margin` unsealed (NULL: a minute on a cluster,
-- nothing on one server): such a row's time is the coordinator's clock, read before its insert
-- reaches the worker.
CREATE FUNCTION toolgate.tenant_seal(tenant text, batch integer DEFAULT 10000, margin interval DEFAULT NULL)
RETURNS TABLE (tenant_id text, checkpoint bigint, sealed_rows integer, sealed_to timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    -- On Citus (toolgate.distribute() ran) each tenant is sealed on its worker.
    spread constant boolean := toolgate.distributed('toolgate.audit');
    horizon timestamptz;
    shard text;
BEGIN
    PERFORM toolgate.seal_refuse_unfit(batch);
    IF tenant IS NULL OR tenant NOT IN (SELECT toolgate.seal_tenants()) THEN
        RAISE EXCEPTION 'toolgate.tenant_seal: unknown tenant %', coalesce(tenant, 'NULL') USING ERRCODE = 'no_data_found';
    END IF;
    IF NOT toolgate.tenant_is_here(tenant) THEN
        RAISE EXCEPTION 'toolgate.tenant_seal: tenant %''s audit is on another node', tenant
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Call it on the coordinator as a statement of its own, outside a transaction block: Citus then runs it on the tenant''s worker.';
    END IF;
    IF margin < interval '0' THEN
        RAISE EXCEPTION 'toolgate.tenant_seal: margin must not be negative' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM toolgate.seal_lock(tenant);
    horizon := pg_catalog.clock_timestamp()
               - coalesce(margin, CASE WHEN spread THEN interval '1 minute' ELSE interval '0' END);
    PERFORM toolgate.wait_for_writers('toolgate.audit'::regclass);
    IF spread THEN
        EXECUTE 'SELECT pg_catalog.shard_name(''toolgate.audit''::pg_catalog.regclass,
                                              pg_catalog.get_shard_id_for_distribution_column(''toolgate.audit'', $1))'
           INTO shard USING tenant;
        PERFORM toolgate.wait_for_writers(shard::regclass);
    END IF;
    RETURN QUERY SELECT * FROM toolgate.seal_tenant(tenant, batch, horizon, toolgate.seal_key());
END
$$;

-- Whether `rel` is a Citus table (toolgate.distribute() ran): false without Citus.
CREATE FUNCTION toolgate.distributed(rel regclass) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    distributed boolean := false;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1)' INTO distributed USING rel;
    END IF;
    RETURN distributed;
END
$$;

-- Whether the outbox is a Citus table (toolgate.distribute() ran): claims are then per tenant.
CREATE OR REPLACE FUNCTION toolgate.outbox_distributed() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN toolgate.distributed('toolgate.outbox');
END
$$;

-- Check a tenant's audit against its checkpoints, for the checkpoints that overlap [since, until)
-- (NULL: unbounded). One row per finding, in the checkpoints' order:
--   verified            the checkpoint's signature, chain and rows hold (detail: how many rows)
--   changed             a sealed row differs from what was sealed (its time moved out of the
--                       checkpoint's period included)
--   removed             a sealed row is gone
--   inserted            a row in the checkpoint's period that was not sealed
--   checkpoint_invalid  the checkpoint's signature, its chain to the one before or its own
--                       leaves do not hold: its rows are not compared
--   checkpoint_missing  a checkpoint number is missing from the chain
--   purged              the checkpoints up to this one had their rows removed past retention
--                       (toolgate.purge, whose signed record verifies): their rows are not
--                       compared, the checkpoints themselves still are
--   purge_invalid       the newest purge's record does not verify: its checkpoints' rows are
--                       compared as if never purged
--   unsealed            rows written since the last checkpoint (detail: how many); not evidence
--                       of anything, only not sealed yet
--   empty               nothing to verify in the range
CREATE FUNCTION toolgate.verify_audit(tenant_id text, since timestamptz DEFAULT NULL, until timestamptz DEFAULT NULL)
RETURNS TABLE (checkpoint bigint, status text, audit_id bigint, at timestamptz, detail text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    lo constant timestamptz := coalesce(since, '-infinity');
    hi constant timestamptz := coalesce(until, 'infinity');
    c toolgate.audit_checkpoints;
    before toolgate.audit_checkpoints;
    newest toolgate.audit_checkpoints;
    k toolgate.seal_keys;
    found_any boolean := false;
    sound boolean;
    r record;
    n bigint;
    first_id bigint;
    pr toolgate.audit_purges;
    pc toolgate.audit_checkpoints;
    purged_through bigint := 0;
BEGIN
    IF verify_audit.tenant_id IS NULL OR (verify_audit.tenant_id <> '(unverified)'
        AND NOT EXISTS (SELECT FROM toolgate.tenants x WHERE x.tenant_id = verify_audit.tenant_id)) THEN
        RAISE EXCEPTION 'toolgate.verify_audit: unknown tenant %', coalesce(verify_audit.tenant_id, 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
    -- The newest purge, if its record verifies: the checkpoints up to it have no rows to compare.
    SELECT * INTO pr FROM toolgate.audit_purges x WHERE x.tenant_id = verify_audit.tenant_id
     ORDER BY x.through_seq DESC LIMIT 1;
    IF pr.through_seq IS NOT NULL THEN
        SELECT * INTO pc FROM toolgate.audit_checkpoints x
         WHERE x.tenant_id = pr.tenant_id AND x.seq = pr.through_seq;
        SELECT * INTO k FROM toolgate.seal_keys s WHERE s.key_id = pr.key_id;
        checkpoint := pr.through_seq; audit_id := NULL; at := NULL;
        IF pc.seq IS NULL OR k.key_id IS NULL
           OR NOT toolgate.seal_signature_valid(k.public_key, toolgate.purge_message(pr, toolgate.checkpoint_message(pc)),
                                                pr.signature) THEN
            status := 'purge_invalid';
            detail := pg_catalog.format('the record of the purge through checkpoint %s does not verify: its rows are compared as if never purged',
                                        pr.through_seq);
            RETURN NEXT;
        ELSE
            purged_through := pr.through_seq;
            IF pr.sealed_to > lo THEN
                status := 'purged';
                detail := pg_catalog.format('the rows of checkpoints 1 to %s (before %s) were removed past retention; the last purge, on %s, removed %s',
                                            pr.through_seq, pr.sealed_to, pr.purged_at, pr.purged_rows);
                RETURN NEXT;
            END IF;
        END IF;
    END IF;
    FOR c IN SELECT * FROM toolgate.audit_checkpoints x
              WHERE x.tenant_id = verify_audit.tenant_id AND x.sealed_to > lo AND coalesce(x.sealed_from, '-infinity') < hi
              ORDER BY x.seq LOOP
        found_any := true;
        IF before.seq IS NULL AND c.seq > 1 THEN
            SELECT * INTO before FROM toolgate.audit_checkpoints x
             WHERE x.tenant_id = c.tenant_id AND x.seq < c.seq ORDER BY x.seq DESC LIMIT 1;
        END IF;
        IF coalesce(before.seq, 0) <> c.seq - 1 THEN
            checkpoint := coalesce(before.seq, 0) + 1; status := 'checkpoint_missing'; audit_id := NULL; at := NULL;
            detail := CASE WHEN coalesce(before.seq, 0) + 1 = c.seq - 1
                           THEN pg_catalog.format('checkpoint %s is missing', c.seq - 1)
                           ELSE pg_catalog.format('checkpoints %s to %s are missing', coalesce(before.seq, 0) + 1, c.seq - 1) END;
            RETURN NEXT;
        END IF;
        sound := true;
        checkpoint := c.seq; audit_id := NULL; at := NULL;
        SELECT * INTO k FROM toolgate.seal_keys s WHERE s.key_id = c.key_id;
        IF NOT FOUND OR NOT toolgate.seal_signature_valid(k.public_key, toolgate.checkpoint_message(c), c.signature) THEN
            status := 'checkpoint_invalid';
            detail := pg_catalog.format('its signature does not verify with seal key %s', c.key_id);
            sound := false;
        ELSIF (c.seq = 1 AND c.prev IS NOT NULL)
              OR (before.seq = c.seq - 1 AND c.prev IS DISTINCT FROM pg_catalog.sha256(toolgate.checkpoint_message(before))) THEN
            status := 'checkpoint_invalid';
            detail := pg_catalog.format('it does not chain from checkpoint %s', c.seq - 1);
            sound := false;
        ELSIF before.seq = c.seq - 1 AND c.sealed_from IS DISTINCT FROM before.sealed_to THEN
            status := 'checkpoint_invalid';
            detail := pg_catalog.format('its period does not begin where checkpoint %s ended', before.seq);
            sound := false;
        ELSIF pg_catalog.sha256(c.leaves) <> c.root OR pg_catalog.length(c.leaves) <> 32 * c.rows
              OR pg_catalog.cardinality(c.audit_ids) <> c.rows THEN
            status := 'checkpoint_invalid';
            detail := 'its leaves do not match its root';
            sound := false;
        END IF;
        IF NOT sound THEN
            RETURN NEXT;
        ELSIF c.seq > purged_through THEN
            FOR r IN
                WITH sealed AS (
                    SELECT s.id, s.pos, pg_catalog.substr(c.leaves, (s.pos::integer - 1) * 32 + 1, 32) AS leaf
                      FROM pg_catalog.unnest(c.audit_ids) WITH ORDINALITY AS s(id, pos)
                ), present AS (
                    SELECT a.audit_id AS id, a.at, toolgate.audit_leaf(
                       a.audit_id, a.at, a.kind, a.tenant_id, a.conversation_id, a.actor, a.role, a.tool, a.target, a.proposal_id,
                       a.outcome, a.rule, a.replayed, a.effects, a.detail, a.args_hmac, a.schema_version, a.policy_version,
                       a.duration_us) AS leaf
                      FROM toolgate.audit a
                     WHERE a.tenant_id = c.tenant_id AND a.at >= coalesce(c.sealed_from, '-infinity') AND a.at < c.sealed_to
                )
                SELECT coalesce(s.id, p.id) AS id, p.at,
                       CASE WHEN s.id IS NULL THEN 'inserted'
                            WHEN p.id IS NOT NULL THEN 'changed'
                            WHEN EXISTS (SELECT FROM toolgate.audit a WHERE a.tenant_id = c.tenant_id AND a.audit_id = s.id)
                            THEN 'moved'
                            ELSE 'removed' END AS finding
                  FROM sealed s FULL JOIN present p ON p.id = s.id
                 WHERE s.leaf IS DISTINCT FROM p.leaf
                 ORDER BY coalesce(s.pos, 0), p.at, coalesce(s.id, p.id)
            LOOP
                status := CASE r.finding WHEN 'moved' THEN 'changed' ELSE r.finding END;
                audit_id := r.id;
                at := r.at;
                detail := CASE r.finding
                              WHEN 'changed' THEN 'the row differs from what was sealed'
                              WHEN 'moved' THEN 'its time was moved out of the checkpoint''s period'
                              WHEN 'removed' THEN 'the sealed row is gone'
                              ELSE 'the row was not sealed: it was written into a period already sealed' END;
                sound := false;
                RETURN NEXT;
            END LOOP;
            IF sound THEN
                status := 'verified'; audit_id := NULL; at := NULL;
                detail := pg_catalog.format('%s %s', c.rows, CASE c.rows WHEN 1 THEN 'row' ELSE 'rows' END);
                RETURN NEXT;
            END IF;
        END IF;
        before := c;
    END LOOP;
    -- What the last checkpoint does not cover yet.
    SELECT * INTO newest FROM toolgate.audit_checkpoints x WHERE x.tenant_id = verify_audit.tenant_id ORDER BY x.seq DESC LIMIT 1;
    SELECT count(*), min(a.audit_id) INTO n, first_id FROM toolgate.audit a
     WHERE a.tenant_id = verify_audit.tenant_id AND a.at >= greatest(lo, coalesce(newest.sealed_to, '-infinity')) AND a.at < hi;
    IF n > 0 THEN
        checkpoint := NULL; status := 'unsealed'; audit_id := first_id; at := NULL;
        detail := pg_catalog.format('%s %s not sealed yet', n, CASE n WHEN 1 THEN 'row' ELSE 'rows' END);
        RETURN NEXT;
    ELSIF NOT found_any THEN
        checkpoint := NULL; status := 'empty'; audit_id := NULL; at := NULL;
        detail := 'no audit rows and no checkpoints in the range';
        RETURN NEXT;
    END IF;
END
$$;

-- Retire the seal key that signs (its seed is erased; its public half stays, so what it signed
-- still verifies) and make a new one, which signs from the next seal on. Returns the new key.
-- An administrator's of this database (toolgate.administers), as every change of configuration.
CREATE FUNCTION toolgate.rotate_seal_key() RETURNS TABLE (key_id integer, public_key text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    who text := toolgate.caller();
    seed bytea := toolgate.seal_new_seed();
    next_id integer;
BEGIN
    IF NOT toolgate.administers(who) THEN
        RAISE EXCEPTION 'pg_toolgate: % does not administer the gate in database %', who, pg_catalog.current_database()
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'toolgate.administrators lists the roles whose members administer this database.';
    END IF;
    -- Two rotations, one after the other.
    LOCK TABLE toolgate.seal_keys IN SHARE ROW EXCLUSIVE MODE;
    UPDATE toolgate.seal_keys s SET secret = NULL, retired_at = pg_catalog.now() WHERE s.retired_at IS NULL;
    SELECT coalesce(max(s.key_id), 0) + 1 INTO next_id FROM toolgate.seal_keys s;
    INSERT INTO toolgate.seal_keys (key_id, public_key, secret) VALUES (next_id, toolgate.seal_public_key(seed), seed);
    key_id := next_id;
    public_key := pg_catalog.encode(toolgate.seal_public_key(seed), 'hex');
    RETURN NEXT;
END
$$;

-- The sealed audit, for a copy outside the database (toolgate audit export, docs/audit.md): one
-- tenant's checkpoints after number `after`, at most `max_checkpoints`, each after its rows in
-- the order they were sealed. A row (`item` 'row'): its columns (`at` in UTC), the exact text its
-- leaf is the SHA-256 of (`canonical`) and that leaf as the row is now. A checkpoint
-- ('checkpoint'): its columns, what it signed (`message`, whose SHA-256 the next checkpoint's
-- `prev` is), its signature and its key's public half. A sealed row no longer there is not
-- exported: the checkpoint's `rows` and `root` then tell whoever checks the copy.
CREATE FUNCTION toolgate.export_audit(tenant_id text, after bigint DEFAULT 0, max_checkpoints integer DEFAULT 10)
RETURNS TABLE (checkpoint bigint, item text, audit_id bigint, record jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    c toolgate.audit_checkpoints;
    utc constant text := 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"';
BEGIN
    FOR c IN SELECT * FROM toolgate.audit_checkpoints x
              WHERE x.tenant_id = export_audit.tenant_id AND x.seq > coalesce(export_audit.after, 0)
              ORDER BY x.seq LIMIT greatest(coalesce(export_audit.max_checkpoints, 10), 0) LOOP
        RETURN QUERY
        SELECT c.seq, 'row'::text, r.audit_id,
               pg_catalog.jsonb_build_object(
                   'tenant_id', r.tenant_id, 'checkpoint', c.seq, 'audit_id', r.audit_id,
                   'at', pg_catalog.to_char(r.at AT TIME ZONE 'UTC', utc), 'kind', r.kind,
                   'conversation_id', r.conversation_id, 'actor', r.actor, 'role', r.role, 'tool', r.tool,
                   'target', r.target, 'proposal_id', r.proposal_id, 'outcome', r.outcome, 'rule', r.rule,
                   'replayed', r.replayed, 'effects', r.effects, 'detail', r.detail, 'args_hmac', r.args_hmac,
                   'schema_version', r.schema_version, 'policy_version', r.policy_version,
                   'duration_us', r.duration_us, 'canonical', r.canonical,
                   'leaf', pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(r.canonical, 'UTF8')), 'hex'))
          FROM (SELECT a.*,
                       toolgate.audit_canonical(
                           a.audit_id, a.at, a.kind, a.tenant_id, a.conversation_id, a.actor, a.role, a.tool, a.target,
                           a.proposal_id, a.outcome, a.rule, a.replayed, a.effects, a.detail, a.args_hmac,
                           a.schema_version, a.policy_version, a.duration_us) AS canonical
                  FROM toolgate.audit a
                 WHERE a.tenant_id = c.tenant_id AND a.audit_id = ANY (c.audit_ids)) r
         -- The seal's order (a row whose time was moved since is out of it: its leaf says so too).
         ORDER BY r.at, r.audit_id;
        checkpoint := c.seq; item := 'checkpoint'; audit_id := NULL;
        record := pg_catalog.jsonb_build_object(
            'tenant_id', c.tenant_id, 'checkpoint', c.seq,
            'sealed_from', pg_catalog.to_char(c.sealed_from AT TIME ZONE 'UTC', utc),
            'sealed_to', pg_catalog.to_char(c.sealed_to AT TIME ZONE 'UTC', utc),
            'rows', c.rows, 'audit_ids', pg_catalog.to_jsonb(c.audit_ids),
            'root', pg_catalog.encode(c.root, 'hex'), 'prev', pg_catalog.encode(c.prev, 'hex'), 'key_id', c.key_id,
            'public_key', (SELECT pg_catalog.encode(k.public_key, 'hex') FROM toolgate.seal_keys k WHERE k.key_id = c.key_id),
            'signature', pg_catalog.encode(c.signature, 'hex'),
            'message', pg_catalog.convert_from(toolgate.checkpoint_message(c), 'UTF8'));
        RETURN NEXT;
    END LOOP;
END
$$;

------------------------------------------------------------------------------------------------
-- Retention (docs/audit.md#retention): how long each tenant's audit is kept, and purge() removing
-- what is older, whole sealed periods only, leaving a signed record of what it removed, so that
-- verify_audit still spans the gap: it reports those checkpoints purged, not tampered.
------------------------------------------------------------------------------------------------

-- How long a tenant's audit is kept ('*': every tenant without a row of its own). No row: kept
-- for ever.
CREATE TABLE toolgate.audit_retention (
    tenant_id text PRIMARY KEY,
    keep      interval NOT NULL CHECK (keep > interval '0'),
    set_by    text NOT NULL,
    set_at    timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE TRIGGER audit_retention_administered BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.audit_retention
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.require_administrator();

-- One row per purge of a tenant: its checkpoints up to through_seq had their rows removed
-- (purged_rows of them), signed as a checkpoint is (toolgate.purge_message). Append-only.
CREATE TABLE toolgate.audit_purges (
    tenant_id   text NOT NULL,
    through_seq bigint NOT NULL CHECK (through_seq >= 1),
    sealed_to   timestamptz NOT NULL,
    purged_rows bigint NOT NULL CHECK (purged_rows >= 0),
    purged_at   timestamptz NOT NULL,
    key_id      integer NOT NULL,
    signature   bytea NOT NULL,
    PRIMARY KEY (tenant_id, through_seq)
);
CREATE TRIGGER audit_purges_no_update_or_delete BEFORE UPDATE OR DELETE ON toolgate.audit_purges
    FOR EACH ROW EXECUTE FUNCTION toolgate.audit_is_append_only();
CREATE TRIGGER audit_purges_no_truncate BEFORE TRUNCATE ON toolgate.audit_purges
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.audit_is_append_only();

SELECT pg_catalog.pg_extension_config_dump('toolgate.audit_retention', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.audit_purges', '');

-- What a purge's signature signs: the tenant, the last checkpoint purged and the hash of its
-- message (so the record names that very checkpoint), the end of its period, the rows removed,
-- when, and the key.
CREATE FUNCTION toolgate.purge_message(p toolgate.audit_purges, last_message bytea) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.convert_to(pg_catalog.jsonb_build_array(
        'toolgate.purge/1', p.tenant_id, p.through_seq, pg_catalog.encode(pg_catalog.sha256(last_message), 'hex'),
        EXTRACT(epoch FROM p.sealed_to), p.purged_rows, EXTRACT(epoch FROM p.purged_at), p.key_id)::text, 'UTF8')
$$;

-- Keep `tenant_id`'s audit (NULL: every tenant without a row of its own) for `keep` (NULL: for
-- ever). Refused below toolgate.min_retention, the legal minimum the DBA sets. Administrators'.
CREATE FUNCTION toolgate.set_retention(tenant_id text, keep interval) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    who text := toolgate.caller();
    scope text := coalesce(set_retention.tenant_id, '*');
    minimum interval := pg_catalog.justify_hours(pg_catalog.make_interval(secs => toolgate.min_retention()));
BEGIN
    IF scope <> '*' AND NOT EXISTS (SELECT FROM toolgate.tenants t WHERE t.tenant_id = scope) THEN
        RAISE EXCEPTION 'set_retention: unknown tenant %', scope USING ERRCODE = 'no_data_found';
    END IF;
    IF keep IS NULL THEN
        DELETE FROM toolgate.audit_retention r WHERE r.tenant_id = scope;
        RETURN;
    END IF;
    IF keep <= interval '0' THEN
        RAISE EXCEPTION 'set_retention: keep must be longer than nothing, not %', keep
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF keep < minimum THEN
        RAISE EXCEPTION 'set_retention: keep (%) is shorter than toolgate.min_retention (%)', keep, minimum
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'toolgate.min_retention is the legal minimum the DBA set for this server.';
    END IF;
    -- (excluded.set_at, not now(): on a Citus cluster, where this is a reference table, DO UPDATE
    -- takes no function that is not immutable.)
    INSERT INTO toolgate.audit_retention AS r (tenant_id, keep, set_by, set_at) VALUES (scope, keep, who, pg_catalog.now())
    ON CONFLICT ON CONSTRAINT audit_retention_pkey
    DO UPDATE SET keep = excluded.keep, set_by = excluded.set_by, set_at = excluded.set_at;
END
$$;

-- Remove each tenant's audit rows past its retention (one tenant, or every tenant
-- seal_tenants() names): only whole sealed periods, those whose checkpoint's period ended before
-- now() - keep (never younger than toolgate.min_retention), the checkpoints kept; then a signed
-- record of what was removed. A month's partition whose every row is so removed, and whose month
-- is over, is dropped whole (the audit's lock is taken for that instant); other rows are deleted.
-- Returns, per tenant purged, the last checkpoint purged and the rows removed. Rows not sealed
-- yet are never removed: seal first. On a Citus cluster it runs on the coordinator: a tenant's
-- rows are deleted on its worker, a month dropped on every node.
CREATE FUNCTION toolgate.purge(tenant text DEFAULT NULL)
RETURNS TABLE (tenant_id text, through_checkpoint bigint, purged_rows bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    t text;
    keep interval;
    cutoff timestamptz;
    done bigint;
    upto toolgate.audit_checkpoints;
    p toolgate.audit_purges;
    k toolgate.seal_keys;
    removed bigint;
    spread constant boolean := toolgate.distributed('toolgate.audit');
    -- Per tenant to purge, in the same order: its name, its last checkpoint to purge, the rows
    -- removed with dropped partitions; and each one's end of what is purged, by name (ISO 8601).
    names text[] := '{}';
    ends jsonb := '{}';
    uptos toolgate.audit_checkpoints[] := '{}';
    dropped bigint[] := '{}';
    i integer;
    part record;
    whole boolean;
    counted record;
BEGIN
    IF spread THEN
        -- This transaction's SET LOCALs reach the workers too (audit_triggers, below).
        SET LOCAL citus.propagate_set_commands = 'local';
    END IF;
    IF purge.tenant IS NOT NULL AND purge.tenant NOT IN (SELECT toolgate.seal_tenants()) THEN
        RAISE EXCEPTION 'toolgate.purge: unknown tenant %', purge.tenant USING ERRCODE = 'no_data_found';
    END IF;
    FOR t IN SELECT s FROM toolgate.seal_tenants() s WHERE purge.tenant IS NULL OR s = purge.tenant LOOP
        SELECT r.keep INTO keep FROM toolgate.audit_retention r WHERE r.tenant_id IN (t, '*')
         ORDER BY r.tenant_id = '*' LIMIT 1;
        CONTINUE WHEN keep IS NULL;
        keep := greatest(keep, pg_catalog.make_interval(secs => toolgate.min_retention()));
        cutoff := pg_catalog.now() - keep;
        -- Two purges of a tenant take turns, and on one server its seal waits for this (and this
        -- for it). A seal on a Citus worker does not; nor need it: it only adds checkpoints after
        -- the newest, and this removes only rows of checkpoints before it.
        PERFORM toolgate.seal_lock(t);
        SELECT coalesce(max(x.through_seq), 0) INTO done FROM toolgate.audit_purges x WHERE x.tenant_id = t;
        upto := NULL;
        SELECT * INTO upto FROM toolgate.audit_checkpoints c
         WHERE c.tenant_id = t AND c.seq > done AND c.sealed_to <= cutoff ORDER BY c.seq DESC LIMIT 1;
        CONTINUE WHEN upto.seq IS NULL;
        names := names || t;
        uptos := uptos || upto;
        dropped := dropped || 0::bigint;
        ends := ends || pg_catalog.jsonb_build_object(
            t, pg_catalog.to_char(upto.sealed_to AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'));
    END LOOP;
    IF pg_catalog.cardinality(names) = 0 THEN
        RETURN;
    END IF;
    -- A month over whose every row is of a tenant purged here, in a period purged: dropped whole.
    FOR part IN SELECT m.partition, m.ends FROM toolgate.audit_months() m
                 WHERE m.ends <= toolgate.audit_month(pg_catalog.now())
                   AND m.ends <= (SELECT max(u.sealed_to) FROM pg_catalog.unnest(uptos) u) LOOP
        EXECUTE pg_catalog.format(
            'SELECT NOT EXISTS (SELECT 1 FROM %s a WHERE a.at >= coalesce(($1 OPERATOR(pg_catalog.->>) a.tenant_id)::timestamptz, ''-infinity''))',
            part.partition)
          INTO whole USING ends;
        CONTINUE WHEN NOT whole;
        FOR counted IN EXECUTE pg_catalog.format('SELECT a.tenant_id, count(*) AS n FROM %s a GROUP BY 1', part.partition) LOOP
            i := pg_catalog.array_position(names, counted.tenant_id);
            dropped[i] := dropped[i] + counted.n;
        END LOOP;
        EXECUTE pg_catalog.format('DROP TABLE %s', part.partition);
    END LOOP;
    FOR i IN 1 .. pg_catalog.cardinality(names) LOOP
        t := names[i];
        upto := uptos[i];
        -- The audit is append-only to everyone, its owner included; this function alone removes
        -- rows, with its triggers off for this statement.
        PERFORM toolgate.audit_triggers(false);
        DELETE FROM toolgate.audit a WHERE a.tenant_id = t AND a.at < upto.sealed_to;
        GET DIAGNOSTICS removed = ROW_COUNT;
        PERFORM toolgate.audit_triggers(true);
        removed := removed + dropped[i];
        k := toolgate.seal_key();
        p := ROW(t, upto.seq, upto.sealed_to, removed, pg_catalog.clock_timestamp(), k.key_id, ''::bytea);
        p.signature := toolgate.seal_signature(k.secret, toolgate.purge_message(p, toolgate.checkpoint_message(upto)));
        INSERT INTO toolgate.audit_purges SELECT (p).*;
        purge.tenant_id := t;
        through_checkpoint := upto.seq;
        purge.purged_rows := removed;
        RETURN NEXT;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION toolgate.seal_new_seed(), toolgate.seal_public_key(bytea), toolgate.seal_signature(bytea, bytea),
                       toolgate.seal_signature_valid(bytea, bytea, bytea), toolgate.seal_lock(text),
                       toolgate.wait_for_writers(oid),
                       toolgate.audit_canonical(bigint, timestamptz, text, text, text, text, text, text, text, uuid, text,
                                                text, boolean, integer, jsonb, text, integer, integer, bigint),
                       toolgate.audit_leaf(bigint, timestamptz, text, text, text, text, text, text, text, uuid, text,
                                           text, boolean, integer, jsonb, text, integer, integer, bigint),
                       toolgate.export_audit(text, bigint, integer), toolgate.seal_refuse_unfit(integer),
                       toolgate.seal_tenants(), toolgate.seal_tenant(text, integer, timestamptz, toolgate.seal_keys),
                       toolgate.seal_key(), toolgate.tenant_seal(text, integer, interval), toolgate.distributed(regclass),
                       toolgate.min_retention(), toolgate.purge_message(toolgate.audit_purges, bytea),
                       toolgate.set_retention(text, interval), toolgate.purge(text),
                       toolgate.checkpoint_message(toolgate.audit_checkpoints), toolgate.seal(text, integer),
                       toolgate.verify_audit(text, timestamptz, timestamptz), toolgate.rotate_seal_key() FROM PUBLIC;
REVOKE ALL ON toolgate.seal_keys, toolgate.audit_checkpoints, toolgate.seal_public_keys, toolgate.audit_retention,
              toolgate.audit_purges FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.seal(text, integer), toolgate.tenant_seal(text, integer, interval),
                          toolgate.seal_tenants()
TO toolgate_operator, toolgate_admin;
GRANT EXECUTE ON FUNCTION toolgate.verify_audit(text, timestamptz, timestamptz)
TO toolgate_auditor, toolgate_admin, toolgate_operator;
GRANT EXECUTE ON FUNCTION toolgate.rotate_seal_key() TO toolgate_admin;
GRANT EXECUTE ON FUNCTION toolgate.export_audit(text, bigint, integer) TO toolgate_auditor, toolgate_admin;
GRANT SELECT ON toolgate.audit_checkpoints, toolgate.seal_public_keys TO toolgate_auditor, toolgate_admin;
GRANT EXECUTE ON FUNCTION toolgate.set_retention(text, interval) TO toolgate_admin;
GRANT EXECUTE ON FUNCTION toolgate.purge(text) TO toolgate_operator, toolgate_admin;
GRANT SELECT ON toolgate.audit_retention, toolgate.audit_purges TO toolgate_auditor, toolgate_admin, toolgate_operator;

------------------------------------------------------------------------------------------------
-- 3. Metrics for a Prometheus exporter (docs/observability.md): the views it reads, as
--    sql/views.sql installs them, and their grants (as sql/finalize.sql).
------------------------------------------------------------------------------------------------

-- Every tenant a metric is kept for.
CREATE VIEW toolgate.metric_tenants AS
SELECT n.tenant_id FROM toolgate.tenants n UNION ALL SELECT '(unverified)';

-- Calls, confirmations, reads and deliveries audited in the last five minutes, by tool and outcome.
CREATE VIEW toolgate.metric_calls AS
SELECT t.tenant_id, a.tool, a.outcome, count(*) AS last_5m
  FROM toolgate.metric_tenants t
  CROSS JOIN LATERAL (SELECT x.tool, x.outcome::text AS outcome FROM toolgate.audit x
                       WHERE x.tenant_id = t.tenant_id AND x.at > pg_catalog.now() - interval '5 minutes') a
 GROUP BY 1, 2, 3;

-- Refusals (BLOCKED, REJECTED) of the last five minutes, by tool and rule.
CREATE VIEW toolgate.metric_refusals AS
SELECT t.tenant_id, a.tool, a.rule, count(*) AS last_5m
  FROM toolgate.metric_tenants t
  CROSS JOIN LATERAL (SELECT x.tool, x.rule FROM toolgate.audit x
                       WHERE x.tenant_id = t.tenant_id AND x.at > pg_catalog.now() - interval '5 minutes'
                         AND x.outcome IN ('BLOCKED', 'REJECTED') AND x.rule IS NOT NULL) a
 GROUP BY 1, 2, 3;

-- Proposals waiting for a person now, and those that expired unanswered in the last hour.
CREATE VIEW toolgate.metric_proposals AS
SELECT t.tenant_id,
       count(*) FILTER (WHERE p.status = 'live' AND p.expires_at > pg_catalog.now()) AS waiting,
       count(*) FILTER (WHERE p.status IN ('live', 'expired') AND p.expires_at <= pg_catalog.now()
                          AND p.expires_at > pg_catalog.now() - interval '1 hour') AS expired_unanswered_1h
  FROM toolgate.metric_tenants t
  JOIN toolgate.proposals p ON p.tenant_id = t.tenant_id
 WHERE p.status IN ('live', 'expired') AND p.expires_at > pg_catalog.now() - interval '1 hour'
 GROUP BY 1;

-- The outbox: intents due now and how long the oldest has waited (the lag), and those that need a
-- person (DEAD, UNCERTAIN).
CREATE VIEW toolgate.metric_outbox AS
SELECT t.tenant_id,
       count(*) FILTER (WHERE o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL') AND o.next_attempt_at <= pg_catalog.now())
           AS due,
       coalesce(EXTRACT(epoch FROM pg_catalog.now() - min(o.next_attempt_at) FILTER (
           WHERE o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL') AND o.next_attempt_at <= pg_catalog.now())), 0)
           AS oldest_due_seconds,
       count(*) FILTER (WHERE o.state = 'DEAD') AS dead,
       count(*) FILTER (WHERE o.state = 'UNCERTAIN') AS uncertain
  FROM toolgate.metric_tenants t
  JOIN toolgate.outbox o ON o.tenant_id = t.tenant_id
 WHERE o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL', 'DEAD')
 GROUP BY 1;

-- The seal's lag: how old the oldest row not sealed yet is (0: none), and how long ago the newest
-- checkpoint was written (NaN: never).
CREATE VIEW toolgate.metric_seal AS
SELECT t.tenant_id,
       coalesce(EXTRACT(epoch FROM pg_catalog.now() - (
           SELECT min(a.at) FROM toolgate.audit a
            WHERE a.tenant_id = t.tenant_id AND a.at >= coalesce(c.sealed_to, '-infinity'))), 0) AS oldest_unsealed_seconds,
       coalesce(EXTRACT(epoch FROM pg_catalog.now() - c.sealed_at), 'NaN') AS last_checkpoint_age_seconds
  FROM toolgate.metric_tenants t
  LEFT JOIN LATERAL (SELECT x.sealed_to, x.sealed_at FROM toolgate.audit_checkpoints x
                      WHERE x.tenant_id = t.tenant_id ORDER BY x.seq DESC LIMIT 1) c ON true;

-- What verify_audit finds wrong (changed, removed, inserted rows, invalid or missing checkpoints)
-- in the checkpoints of the last day. Costly (it reads every row sealed that day): the exporter
-- caches it for ten minutes.
CREATE VIEW toolgate.metric_audit_findings AS
SELECT t.tenant_id, count(*) FILTER (WHERE v.status NOT IN ('verified', 'unsealed', 'empty')) AS last_1d
  FROM toolgate.metric_tenants t
  CROSS JOIN LATERAL toolgate.verify_audit(t.tenant_id, since => pg_catalog.now() - interval '1 day') v
 GROUP BY 1;

REVOKE ALL ON toolgate.metric_tenants, toolgate.metric_calls, toolgate.metric_refusals, toolgate.metric_proposals,
              toolgate.metric_outbox, toolgate.metric_seal, toolgate.metric_audit_findings FROM PUBLIC;
GRANT SELECT ON toolgate.metric_tenants, toolgate.metric_calls, toolgate.metric_refusals, toolgate.metric_proposals,
                toolgate.metric_outbox, toolgate.metric_seal, toolgate.metric_audit_findings
TO toolgate_auditor, toolgate_admin, toolgate_operator;

------------------------------------------------------------------------------------------------
-- 4. Erasure of a person (docs/audit.md#erasure-of-a-person): the audit names each person by
--    a pseudonym under a key of their own, the keys in person_keys, erase_actor destroying one;
--    the outbox's audit rows name who asked by pseudonym, and a personal target (a value a
--    tool's schema marks "x-personal") by its pseudonym; audit_log and effects read the person
--    back. The audit's existing rows are given their pseudonyms here: no row of 0.2.0 is sealed
--    (the seal is new in 0.3.0), so none of them is in a checkpoint yet.
------------------------------------------------------------------------------------------------

CREATE FUNCTION toolgate.pseudonym(tenant text, person text) RETURNS text
STRICT VOLATILE PARALLEL UNSAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'pseudonym_wrapper';
CREATE FUNCTION toolgate.audited_target(tenant text, tool text, args jsonb, target text) RETURNS text
STRICT VOLATILE PARALLEL UNSAFE LANGUAGE c
AS 'pg_toolgate-@CARGO_VERSION@', 'audited_target_wrapper';

-- One row per person a tenant's audit names (an actor, or a personal value of a call's
-- arguments): their key and the pseudonym it gives. Written by the gate the first time the audit
-- names them; removed by erase_actor only.
CREATE TABLE toolgate.person_keys (
    tenant_id  text NOT NULL,
    person     text NOT NULL,
    key        bytea NOT NULL CHECK (pg_catalog.octet_length(key) = 32),
    pseudonym  text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (tenant_id, person),
    UNIQUE (tenant_id, pseudonym)
);

-- One row per erasure: which pseudonym names nobody any more, since when, and who erased it.
-- Append-only, as the audit.
CREATE TABLE toolgate.erasures (
    tenant_id text NOT NULL,
    pseudonym text NOT NULL,
    erased_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    erased_by text NOT NULL,
    PRIMARY KEY (tenant_id, pseudonym)
);
CREATE TRIGGER erasures_no_update_or_delete BEFORE UPDATE OR DELETE ON toolgate.erasures
    FOR EACH ROW EXECUTE FUNCTION toolgate.audit_is_append_only();
CREATE TRIGGER erasures_no_truncate BEFORE TRUNCATE ON toolgate.erasures
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.audit_is_append_only();

-- pg_dump keeps the audit, so it keeps who its pseudonyms are, and what was erased.
SELECT pg_catalog.pg_extension_config_dump('toolgate.person_keys', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.erasures', '');

-- Erase `actor` of `tenant_id` (a token's subject, or a value a tool's schema marks personal):
-- their key is destroyed, so the audit's rows of them (their calls, confirmations and reads, the
-- deliveries of what they asked for, the calls whose target they are) keep a pseudonym that
-- names nobody; the gate's own state (the ledger's keys, proposals, conversations, quota and
-- limit counters, the outbox's intents, the approvals they decided) names them by that pseudonym
-- from now on. An actor the tenant's audit never named (or already erased) is left as it is:
-- erased is false, with a NOTICE saying so. The ERP's tables are the DBA's to erase. An
-- administrator's.
CREATE FUNCTION toolgate.erase_actor(tenant_id text, actor text)
RETURNS TABLE (erased boolean, pseudonym text, audit_rows bigint, gate_rows bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    who text := toolgate.caller();
    t constant text := erase_actor.tenant_id;
    someone constant text := erase_actor.actor;
    gone text;
    n bigint;
    total bigint := 0;
BEGIN
    IF NOT toolgate.administers(who) THEN
        RAISE EXCEPTION 'pg_toolgate: % does not administer the gate in database %', who, pg_catalog.current_database()
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'toolgate.administrators lists the roles whose members administer this database.';
    END IF;
    IF t IS NULL OR someone IS NULL THEN
        RAISE EXCEPTION 'erase_actor: tenant_id and actor are both needed' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT EXISTS (SELECT FROM toolgate.tenants x WHERE x.tenant_id = t) THEN
        RAISE EXCEPTION 'erase_actor: unknown tenant %', t USING ERRCODE = 'no_data_found';
    END IF;
    DELETE FROM toolgate.person_keys k WHERE k.tenant_id = t AND k.person = someone RETURNING k.pseudonym INTO gone;
    IF gone IS NULL THEN
        RAISE NOTICE 'erase_actor: the audit of tenant % names no such actor (never named, or erased already): nothing erased', t;
        erased := false;
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO toolgate.erasures (tenant_id, pseudonym, erased_by) VALUES (t, gone, who);
    UPDATE toolgate.ledger l SET actor = gone WHERE l.tenant_id = t AND l.actor = someone;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    UPDATE toolgate.proposals p SET actor = gone WHERE p.tenant_id = t AND p.actor = someone;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    UPDATE toolgate.conversations c SET actor = gone WHERE c.tenant_id = t AND c.actor = someone;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    UPDATE toolgate.quota_usage q SET actor = gone WHERE q.tenant_id = t AND q.actor = someone;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    UPDATE toolgate.limit_usage u SET subject = gone WHERE u.tenant_id = t AND u.subject = someone;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    UPDATE toolgate.outbox o SET actor = gone WHERE o.tenant_id = t AND o.actor = someone;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    UPDATE toolgate.approvals x SET approver = gone WHERE x.tenant_id = t AND x.approver = someone;
    GET DIAGNOSTICS n = ROW_COUNT; total := total + n;
    erased := true;
    pseudonym := gone;
    SELECT count(*) INTO audit_rows FROM toolgate.audit a
     WHERE a.tenant_id = t AND (a.actor = gone OR a.target = gone OR (a.kind = 'dispatch' AND a.detail->>'asked_by' = gone));
    gate_rows := total;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE FUNCTION toolgate.outbox_claim(tenant text, batch integer, lease interval, skip text[])
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
                  due.in_doubt AS sent_before, o.claim, o.target, o.proposal_id, o.actor, o.args
    ), started AS (
        INSERT INTO toolgate.audit (kind, tenant_id, actor, tool, target, proposal_id, outcome, effects, detail,
                                    duration_us)
        SELECT 'dispatch', c.tenant_id, session_user, c.tool, toolgate.audited_target(c.tenant_id, c.tool, c.args, c.target),
               c.proposal_id, 'PENDING', 0,
               pg_catalog.jsonb_build_object('phase', 'start', 'attempt', c.attempts, 'endpoint', c.endpoint,
                                             'state', c.state, 'sent_before', c.sent_before,
                                             'asked_by', toolgate.pseudonym(c.tenant_id, c.actor)),
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

CREATE OR REPLACE FUNCTION toolgate.note_outbox(tenant text, tool text, key text, claim uuid, phase text,
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
    VALUES ('dispatch', intent.tenant_id, session_user, intent.tool,
            toolgate.audited_target(intent.tenant_id, intent.tool, intent.args, intent.target), intent.proposal_id, 'PENDING', 0,
            pg_catalog.jsonb_build_object('phase', phase, 'attempt', intent.attempts, 'endpoint', intent.endpoint,
                                          'asked_by', toolgate.pseudonym(intent.tenant_id, intent.actor)) || coalesce(said, '{}'),
            0);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION toolgate.requeue_outbox(tenant text, tool text, key text, note text)
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
    VALUES ('dispatch', intent.tenant_id, session_user, intent.tool,
            toolgate.audited_target(intent.tenant_id, intent.tool, intent.args, intent.target), intent.proposal_id, 'UNCERTAIN', 0,
            pg_catalog.jsonb_build_object('endpoint', intent.endpoint, 'attempts', intent.attempts,
                                          'state', 'UNCERTAIN', 'requeued_by', who, 'note', note,
                                          'was', intent.state,
                                          'asked_by', toolgate.pseudonym(intent.tenant_id, intent.actor)),
            0);
    RETURN pg_catalog.jsonb_build_object('tenant', intent.tenant_id, 'tool', intent.tool, 'key', intent.idempotency_key,
                                         'was', intent.state, 'state', 'UNCERTAIN');
END
$$;

CREATE OR REPLACE VIEW toolgate.audit_log AS
SELECT a.audit_id, a.at, a.kind, a.tenant_id, a.conversation_id, coalesce(k.person, a.actor) AS actor, a.role, a.tool,
       coalesce(t.person, a.target) AS target, a.proposal_id, a.outcome, a.rule, a.replayed, a.detail, a.args_hmac,
       a.schema_version, a.policy_version, a.duration_us
  FROM toolgate.audit a
  LEFT JOIN toolgate.person_keys k ON k.tenant_id = a.tenant_id AND k.pseudonym = a.actor
  LEFT JOIN toolgate.person_keys t ON t.tenant_id = a.tenant_id AND t.pseudonym = a.target;

CREATE OR REPLACE VIEW toolgate.effects AS
SELECT a.tenant_id, a.tool, coalesce(t.person, a.target) AS target, coalesce(k.person, a.by) AS actor, a.proposal_id,
       a.value, a.at
  FROM (SELECT x.tenant_id, x.tool, x.target, CASE WHEN x.kind = 'dispatch' THEN x.detail->>'asked_by' ELSE x.actor END AS by,
               x.proposal_id, (x.detail->'value'->>'amount')::numeric AS value, x.at
          FROM toolgate.audit x
         WHERE (x.outcome = 'SUCCEEDED' AND NOT x.replayed AND x.kind IN ('call', 'confirm'))
            OR (x.kind = 'dispatch' AND x.effects > 0)) a
  LEFT JOIN toolgate.person_keys k ON k.tenant_id = a.tenant_id AND k.pseudonym = a.by
  LEFT JOIN toolgate.person_keys t ON t.tenant_id = a.tenant_id AND t.pseudonym = a.target;

-- The rows written before: each person's subject becomes their pseudonym (the append-only
-- trigger set aside for these two statements). On a Citus cluster (toolgate.distribute() ran)
-- they are left as they are: see docs/upgrades.md.
DO $erasure$
BEGIN
    IF toolgate.distributed('toolgate.audit') THEN
        RAISE NOTICE 'pg_toolgate update: the audit is distributed; its rows of 0.2.0 keep their actors';
        RETURN;
    END IF;
    ALTER TABLE toolgate.audit DISABLE TRIGGER audit_no_update_or_delete;
    UPDATE toolgate.audit a SET actor = toolgate.pseudonym(a.tenant_id, a.actor)
     WHERE a.actor IS NOT NULL AND a.kind <> 'dispatch' AND a.tenant_id <> '(unverified)';
    UPDATE toolgate.audit a
       SET detail = pg_catalog.jsonb_set(a.detail, '{asked_by}',
                                         pg_catalog.to_jsonb(toolgate.pseudonym(a.tenant_id, a.detail->>'asked_by')))
     WHERE a.kind = 'dispatch' AND a.detail->>'asked_by' IS NOT NULL;
    ALTER TABLE toolgate.audit ENABLE TRIGGER audit_no_update_or_delete;
END
$erasure$;

REVOKE ALL ON FUNCTION toolgate.pseudonym(text, text), toolgate.audited_target(text, text, jsonb, text),
                       toolgate.erase_actor(text, text) FROM PUBLIC;
REVOKE ALL ON toolgate.person_keys, toolgate.erasures FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.erase_actor(text, text) TO toolgate_admin;
GRANT SELECT ON toolgate.erasures TO toolgate_auditor, toolgate_admin;

------------------------------------------------------------------------------------------------
-- 5. The audit partitioned by month (docs/audit.md#partitions): 0.2.0's audit table becomes the
--    default partition of a partitioned toolgate.audit, every row kept where it is, and the
--    first toolgate.audit_partitions() (`toolgate audit seal` runs it) moves them to their
--    months. On a Citus cluster (toolgate.distribute() ran) the audit stays one table: see
--    docs/upgrades.md.
------------------------------------------------------------------------------------------------

DO $partitions$
DECLARE
    v record;
    views text[] := '{}';
    q text;
BEGIN
    IF toolgate.distributed('toolgate.audit') THEN
        RAISE NOTICE 'pg_toolgate update: the audit is distributed; it stays one table, not partitioned by month';
        RETURN;
    END IF;
    -- The views over the audit, made again below over the partitioned table.
    FOR v IN SELECT DISTINCT r.ev_class::pg_catalog.regclass AS name, pg_catalog.pg_get_viewdef(r.ev_class) AS query
               FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
              WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
                AND d.refobjid = 'toolgate.audit'::pg_catalog.regclass LOOP
        views := views || pg_catalog.format('CREATE OR REPLACE VIEW %s AS %s', v.name, v.query);
    END LOOP;
    ALTER TABLE toolgate.audit RENAME TO audit_default;
    ALTER TABLE toolgate.audit_default DROP CONSTRAINT audit_pkey;
    ALTER INDEX toolgate.audit_tenant_at RENAME TO audit_default_tenant_id_at_idx;
    ALTER INDEX toolgate.audit_tenant_tool_at RENAME TO audit_default_tenant_id_tool_at_idx;
    DROP TRIGGER audit_no_update_or_delete ON toolgate.audit_default;

    -- The NOT NULL constraints named as CREATE TABLE names them on a fresh install: PostgreSQL 18
    -- names them (<table>_<column>_not_null), and would add a digit to a name the old table,
    -- now audit_default, still holds.
    CREATE TABLE toolgate.audit (
        audit_id        bigint CONSTRAINT audit_audit_id_not_null NOT NULL,
        at              timestamptz CONSTRAINT audit_at_not_null NOT NULL DEFAULT pg_catalog.clock_timestamp(),
        kind            toolgate.audit_kind CONSTRAINT audit_kind_not_null NOT NULL,
        tenant_id       text CONSTRAINT audit_tenant_id_not_null NOT NULL,
        conversation_id text,
        actor           text,
        role            text,
        tool            text CONSTRAINT audit_tool_not_null NOT NULL,
        target          text,
        proposal_id     uuid,
        outcome         toolgate.outcome CONSTRAINT audit_outcome_not_null NOT NULL,
        rule            text,
        replayed        boolean CONSTRAINT audit_replayed_not_null NOT NULL DEFAULT false,
        effects         integer CONSTRAINT audit_effects_not_null NOT NULL DEFAULT 0,
        detail          jsonb CONSTRAINT audit_detail_not_null NOT NULL DEFAULT '{}',
        args_hmac       text,
        schema_version  integer,
        policy_version  integer,
        duration_us     bigint CONSTRAINT audit_duration_us_not_null NOT NULL,
        PRIMARY KEY (tenant_id, audit_id, at)
    ) PARTITION BY RANGE (at);
    CREATE INDEX audit_tenant_at ON toolgate.audit (tenant_id, at);
    CREATE INDEX audit_tenant_tool_at ON toolgate.audit (tenant_id, tool, at);
    ALTER TABLE toolgate.audit ALTER COLUMN audit_id
        SET DEFAULT toolgate.node_audit_id(pg_catalog.nextval('toolgate.audit_audit_id_seq'));
    ALTER SEQUENCE toolgate.audit_audit_id_seq OWNED BY toolgate.audit.audit_id;
    CREATE TRIGGER audit_no_update_or_delete BEFORE UPDATE OR DELETE ON toolgate.audit
        FOR EACH ROW EXECUTE FUNCTION toolgate.audit_is_append_only();
    CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON toolgate.audit
        FOR EACH STATEMENT EXECUTE FUNCTION toolgate.audit_is_append_only();
    ALTER TABLE toolgate.audit ATTACH PARTITION toolgate.audit_default DEFAULT;
    PERFORM pg_catalog.pg_extension_config_dump('toolgate.audit', '');
    REVOKE ALL ON toolgate.audit FROM PUBLIC;
    FOREACH q IN ARRAY views LOOP
        EXECUTE q;
    END LOOP;
END
$partitions$;

-- The first instant of `at`'s calendar month in UTC.
CREATE FUNCTION toolgate.audit_month(at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.timezone('UTC', pg_catalog.date_trunc('month', pg_catalog.timezone('UTC', at)))
$$;

-- Make the audit's partition of this month and of the `ahead` months after it, and of each
-- month whose rows wait in the default partition (rows of a month that had none when they were
-- written), moving those rows into it. Returns each partition made, its month and the rows it
-- received. A partition is made apart and then attached, which takes the audit's lock in a mode
-- calls' inserts do not wait for (the default partition's is taken whole, while it is checked).
-- Does nothing to an audit that is not partitioned (a 0.2.0 audit distributed on Citus before
-- the update: docs/audit.md#partitions). On a Citus cluster it runs on the coordinator, where
-- Citus makes each partition on every worker, and leaves a month whose rows are in the default
-- partition without one (a NOTICE says so: Citus cannot attach a partition that holds rows);
-- distribute() runs it first, so the rows written before are in their months.
CREATE FUNCTION toolgate.audit_partitions(ahead integer DEFAULT 2)
RETURNS TABLE (partition text, month timestamptz, moved_rows bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, toolgate, pg_temp SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD'
AS $$
#variable_conflict use_column
DECLARE
    here constant timestamptz := toolgate.audit_month(pg_catalog.now());
    spread constant boolean := toolgate.distributed('toolgate.audit');
    columns text;
    m timestamptz;
    name text;
    waiting boolean;
BEGIN
    IF ahead IS NULL OR ahead NOT BETWEEN 0 AND 24 THEN
        RAISE EXCEPTION 'toolgate.audit_partitions: ahead is 0 to 24 months, not %', coalesce(ahead::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = 'toolgate.audit'::pg_catalog.regclass) <> 'p' THEN
        RETURN;
    END IF;
    IF spread THEN
        -- The partitions' append-only triggers run on every node: what Citus calls unsafe.
        PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
    END IF;
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO columns
      FROM pg_catalog.pg_attribute a
     WHERE a.attrelid = 'toolgate.audit'::pg_catalog.regclass AND a.attnum > 0 AND NOT a.attisdropped;
    FOR m IN SELECT x.m FROM (SELECT DISTINCT toolgate.audit_month(d.at) AS m FROM toolgate.audit_default d
                              UNION
                              SELECT pg_catalog.generate_series(here, here + pg_catalog.make_interval(months => ahead),
                                                                interval '1 month')) x
              ORDER BY x.m LOOP
        name := 'audit_' || pg_catalog.to_char(m, 'YYYY_MM');
        CONTINUE WHEN pg_catalog.to_regclass(pg_catalog.format('toolgate.%I', name)) IS NOT NULL;
        -- (SELECT 1: Citus plans an EXISTS of no column over a distributed table wrongly.)
        waiting := EXISTS (SELECT 1 FROM toolgate.audit_default d WHERE d.at >= m AND d.at < m + interval '1 month');
        IF waiting AND spread THEN
            -- Citus cannot attach a partition that holds rows: the month stays in the default one.
            RAISE NOTICE 'toolgate.audit_partitions: rows of % are in the default partition of a distributed audit; that month gets no partition of its own',
                         pg_catalog.to_char(m, 'YYYY-MM');
            CONTINUE;
        END IF;
        EXECUTE pg_catalog.format('CREATE TABLE toolgate.%I (LIKE toolgate.audit)', name);
        moved_rows := 0;
        IF waiting THEN
            -- The audit is append-only to everyone, its owner included; its rows move with its
            -- triggers off for this statement.
            PERFORM toolgate.audit_triggers(false);
            EXECUTE pg_catalog.format(
                'WITH moved AS (DELETE FROM toolgate.audit_default d WHERE d.at >= $1 AND d.at < $2 RETURNING %2$s) '
                'INSERT INTO toolgate.%1$I (%2$s) SELECT %2$s FROM moved', name, columns)
              USING m, m + interval '1 month';
            GET DIAGNOSTICS moved_rows = ROW_COUNT;
            PERFORM toolgate.audit_triggers(true);
        END IF;
        EXECUTE pg_catalog.format('ALTER TABLE toolgate.audit ATTACH PARTITION toolgate.%I FOR VALUES FROM (%L) TO (%L)',
                                  name, m, m + interval '1 month');
        EXECUTE pg_catalog.format('CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON toolgate.%I '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION toolgate.audit_is_append_only()', name);
        partition := 'toolgate.' || pg_catalog.quote_ident(name);
        month := m;
        RETURN NEXT;
    END LOOP;
END
$$;

-- The audit's monthly partitions, the oldest first: each one's name and the end of its month
-- (the default partition is not one of them).
CREATE FUNCTION toolgate.audit_months() RETURNS TABLE (partition regclass, ends timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD'
AS $$
    SELECT c.oid::regclass, b.m[1]::timestamptz
      FROM pg_catalog.pg_inherits i
      JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid,
           LATERAL pg_catalog.regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)') AS b(m)
     WHERE i.inhparent = 'toolgate.audit'::regclass AND b.m IS NOT NULL
     ORDER BY 2
$$;

-- The audit's append-only triggers set aside (enabled false) or back (true) for the rest of the
-- transaction (session_replication_role; the owner, a superuser, may). purge() calls it as a
-- statement of its own: from inside a statement of a function is where Citus sends a SET LOCAL
-- on to the workers, when citus.propagate_set_commands is 'local' (purge sets it), so that on a
-- cluster the triggers of the tenant's shard are set aside too.
CREATE FUNCTION toolgate.audit_triggers(enabled boolean) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF enabled THEN
        SET LOCAL session_replication_role = origin;
    ELSE
        SET LOCAL session_replication_role = replica;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION toolgate.audit_month(timestamptz), toolgate.audit_months(), toolgate.audit_partitions(integer),
                       toolgate.audit_triggers(boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate.audit_partitions(integer) TO toolgate_operator, toolgate_admin;

------------------------------------------------------------------------------------------------
-- 6. Maker-checker (docs/approvals.md): the role toolgate_approver (made, or adopted as a group
--    role, as sql/bootstrap.sql does for the others), the policy row's approval rules, who asked
--    on each proposal, the approvals, the approvers' functions, and set_policy taking the rules.
------------------------------------------------------------------------------------------------

DO $roles$
DECLARE
    r constant text := 'toolgate_approver';
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

ALTER TABLE toolgate.policies
    -- Maker-checker (docs/approvals.md). NULL approver_roles: the requester confirms their own
    -- proposal through their channel. Set: only a person holding one of these roles decides it,
    -- through toolgate.approve; the requester's own channel "yes" no longer applies it.
    ADD COLUMN approver_roles             text[] CHECK (pg_catalog.cardinality(approver_roles) > 0),
    -- The approver may not be the requester (the verified iss and sub, never a name).
    ADD COLUMN distinct_approver          boolean NOT NULL DEFAULT true,
    -- Distinct approvals needed: `quorum` when the value is above quorum_above (always when
    -- quorum_above is NULL), else one.
    ADD COLUMN quorum                     integer NOT NULL DEFAULT 1 CHECK (quorum BETWEEN 1 AND 16),
    ADD COLUMN quorum_above               numeric(14, 2) CHECK (quorum_above >= 0),
    -- Proposals of this tier and above are approved only in the approvals console (toolgate.approve,
    -- a person's own sign-in): a channel-signed "yes", whose key may sit on the agent's host, does
    -- not apply them. With no approver_roles the requester approves their own there. NULL: never.
    ADD COLUMN console_only_tier          integer CHECK (console_only_tier BETWEEN 1 AND 3);

-- Who asked, as verified (an approval compares the issuer and subject; the effect an approval
-- applies judges the requester's roles). NULL on the proposals made before this update.
ALTER TABLE toolgate.proposals ADD COLUMN actor_iss text, ADD COLUMN actor_roles text[];

-- Who may read the tenant's audit in the approvals console; nobody until set.
ALTER TABLE toolgate.tenants ADD COLUMN auditor_roles text[] CHECK (pg_catalog.cardinality(auditor_roles) > 0);

-- Every approver's decision on a proposal: who (the verified issuer, '' for a token of
-- toolgate.keys, and subject), what they decided, the digest of the arguments they decided on,
-- and when. One row per approver and proposal: nobody approves the same proposal twice.
CREATE TABLE toolgate.approvals (
    tenant_id    text NOT NULL,
    proposal_id  uuid NOT NULL,
    approver_iss text NOT NULL,
    approver     text NOT NULL,
    decision     text NOT NULL CHECK (decision IN ('approve', 'decline')),
    args_digest  text NOT NULL,
    decided_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, proposal_id, approver_iss, approver)
);
SELECT pg_catalog.pg_extension_config_dump('toolgate.approvals', '');

-- The approvers' entry points, in Rust (src/entry.rs), created with the library pgrx created its
-- own functions with (toolgate.caller's), as sql/api.sql does for the agent's.
DO $create$
DECLARE
    f record;
BEGIN
    FOR f IN VALUES
        ('toolgate.approve(identity text, proposal_id text, decision text, word text DEFAULT NULL)', 'approve'),
        ('toolgate.tenant_approve(tenant text, identity text, proposal_id text, decision text, word text DEFAULT NULL)',
         'tenant_approve'),
        ('toolgate.pending(identity text)', 'pending'),
        ('toolgate.tenant_pending(tenant text, identity text)', 'tenant_pending'),
        ('toolgate.approval_history(identity text)', 'approval_history'),
        ('toolgate.tenant_approval_history(tenant text, identity text)', 'tenant_approval_history'),
        ('toolgate.audit_trail(identity text, filters jsonb DEFAULT ''{}'')', 'audit_trail'),
        ('toolgate.tenant_audit_trail(tenant text, identity text, filters jsonb DEFAULT ''{}'')', 'tenant_audit_trail')
    LOOP
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION %s RETURNS jsonb LANGUAGE c VOLATILE SECURITY DEFINER '
            'SET search_path = pg_catalog, toolgate, pg_temp AS %L, %L',
            f.column1,
            (SELECT p.probin FROM pg_catalog.pg_proc p WHERE p.oid = 'toolgate.caller()'::pg_catalog.regprocedure),
            f.column2 || '_wrapper');
    END LOOP;
END
$create$;

COMMENT ON FUNCTION toolgate.approve(text, text, text, text) IS
    'An approver''s decision (approve or decline) on a proposal of their tenant, proven by their own identity token; the approval that completes the quorum applies it.';
COMMENT ON FUNCTION toolgate.tenant_approve(text, text, text, text, text) IS
    'toolgate.approve routed by the tenant (a Citus cluster runs it on the tenant''s node); the token must name that tenant.';
COMMENT ON FUNCTION toolgate.pending(text) IS
    'The live proposals the approver whose identity token this is may decide, newest first.';
COMMENT ON FUNCTION toolgate.tenant_pending(text, text) IS
    'toolgate.pending routed by the tenant; the token must name that tenant.';
COMMENT ON FUNCTION toolgate.approval_history(text) IS
    'What was decided in the approver''s tenant on the tools they approve (the last 90 days), newest first.';
COMMENT ON FUNCTION toolgate.tenant_approval_history(text, text) IS
    'toolgate.approval_history routed by the tenant; the token must name that tenant.';
COMMENT ON FUNCTION toolgate.audit_trail(text, jsonb) IS
    'The tenant''s audit for a person of an auditor role (toolgate.set_tenant_auditors): rows filtered by tool, outcome, actor and time, calls per hour, spend per day, top refusals.';
COMMENT ON FUNCTION toolgate.tenant_audit_trail(text, text, jsonb) IS
    'toolgate.audit_trail routed by the tenant; the token must name that tenant.';

-- The roles whose people may read the tenant's audit in the approvals console; NULL: nobody.
CREATE FUNCTION toolgate.set_tenant_auditors(tenant_id text, roles text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    IF roles IS NOT NULL AND (pg_catalog.cardinality(roles) = 0 OR pg_catalog.array_position(roles, NULL) IS NOT NULL
                              OR EXISTS (SELECT FROM pg_catalog.unnest(roles) r WHERE r = '')) THEN
        RAISE EXCEPTION 'set_tenant_auditors: roles must name at least one role, none empty (NULL: nobody)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE toolgate.tenants t SET auditor_roles = set_tenant_auditors.roles
     WHERE t.tenant_id = set_tenant_auditors.tenant_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown tenant %', tenant_id USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

DROP FUNCTION toolgate.set_policy(text, text, boolean, text[], integer, numeric, integer, interval, numeric, numeric,
                                  text[], text[]);
-- Create the (tenant, tool) policy row, or change what the call names of it: a setting left out
-- (or NULL) keeps the row's value, and only `clear` drops a limit (max_value,
-- max_calls_per_conversation, tier2_above, tier3_above, target_states, approver_roles,
-- quorum_above, console_only_tier), so a change never drops a rule it did not name. The approval
-- rules (approver_roles, distinct_approver, quorum, quorum_above, console_only_tier) are
-- docs/approvals.md's. A new row needs allowed, roles and tier; its confirm_ttl defaults to 5
-- minutes. Every call makes a new version and a policy_history row (who, when, old and new
-- values); the new version is returned. This is the only way a policy changes for anyone but the
-- owner.
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
    clear text[] DEFAULT '{}',
    approver_roles text[] DEFAULT NULL,
    distinct_approver boolean DEFAULT NULL,
    quorum integer DEFAULT NULL,
    quorum_above numeric DEFAULT NULL,
    console_only_tier integer DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    who text := toolgate.caller();
    before toolgate.policies;
    after toolgate.policies;
    clearable constant text[] := ARRAY['max_value', 'max_calls_per_conversation', 'tier2_above', 'tier3_above',
                                       'target_states', 'approver_roles', 'quorum_above', 'console_only_tier'];
    named constant text[] := ARRAY[
        CASE WHEN max_value IS NOT NULL THEN 'max_value' END,
        CASE WHEN max_calls_per_conversation IS NOT NULL THEN 'max_calls_per_conversation' END,
        CASE WHEN tier2_above IS NOT NULL THEN 'tier2_above' END,
        CASE WHEN tier3_above IS NOT NULL THEN 'tier3_above' END,
        CASE WHEN target_states IS NOT NULL THEN 'target_states' END,
        CASE WHEN approver_roles IS NOT NULL THEN 'approver_roles' END,
        CASE WHEN quorum_above IS NOT NULL THEN 'quorum_above' END,
        CASE WHEN console_only_tier IS NOT NULL THEN 'console_only_tier' END];
    bad text;
BEGIN
    SELECT c INTO bad FROM pg_catalog.unnest(coalesce(set_policy.clear, '{}')) c
     WHERE c IS NULL OR c <> ALL (clearable) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'set_policy: clear names %, which is not a limit that can be dropped', coalesce(bad, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'clear takes max_value, max_calls_per_conversation, tier2_above, tier3_above, target_states, '
                         'approver_roles, quorum_above, console_only_tier';
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
                                            approver_roles, distinct_approver, quorum, quorum_above,
                                            console_only_tier, version, updated_by)
        VALUES (tenant_id, tool, allowed, roles, tier, tier2_above, tier3_above, max_value,
                max_calls_per_conversation, coalesce(confirm_ttl, interval '5 minutes'), target_states,
                approver_roles, coalesce(distinct_approver, true), coalesce(quorum, 1), quorum_above,
                console_only_tier, 1, who)
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
            approver_roles = CASE WHEN 'approver_roles' = ANY (set_policy.clear) THEN NULL
                                  ELSE coalesce(set_policy.approver_roles, p.approver_roles) END,
            distinct_approver = coalesce(set_policy.distinct_approver, p.distinct_approver),
            quorum = coalesce(set_policy.quorum, p.quorum),
            quorum_above = CASE WHEN 'quorum_above' = ANY (set_policy.clear) THEN NULL
                                ELSE coalesce(set_policy.quorum_above, p.quorum_above) END,
            console_only_tier = CASE WHEN 'console_only_tier' = ANY (set_policy.clear) THEN NULL
                                     ELSE coalesce(set_policy.console_only_tier, p.console_only_tier) END,
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

REVOKE ALL ON TABLE toolgate.approvals FROM PUBLIC;
REVOKE ALL ON FUNCTION toolgate.approve(text, text, text, text),
                       toolgate.tenant_approve(text, text, text, text, text),
                       toolgate.pending(text),
                       toolgate.tenant_pending(text, text),
                       toolgate.approval_history(text),
                       toolgate.tenant_approval_history(text, text),
                       toolgate.audit_trail(text, jsonb),
                       toolgate.tenant_audit_trail(text, text, jsonb),
                       toolgate.set_tenant_auditors(text, text[]),
                       toolgate.set_policy(text, text, boolean, text[], integer, numeric, integer, interval, numeric,
                                           numeric, text[], text[], text[], boolean, integer, numeric, integer)
FROM PUBLIC;
GRANT USAGE ON SCHEMA toolgate TO toolgate_approver;
-- Approvers (docs/approvals.md): a person's decision on a proposal, and what waits for them;
-- each proven by the approver's own identity token; and for a person of the tenant's auditor
-- roles, its audit (toolgate.audit_trail, docs/console.md). Auditors and administrators read who
-- decided what.
GRANT EXECUTE ON FUNCTION toolgate.approve(text, text, text, text), toolgate.tenant_approve(text, text, text, text, text),
                          toolgate.pending(text), toolgate.tenant_pending(text, text),
                          toolgate.approval_history(text), toolgate.tenant_approval_history(text, text),
                          toolgate.audit_trail(text, jsonb), toolgate.tenant_audit_trail(text, text, jsonb)
TO toolgate_approver;
GRANT EXECUTE ON FUNCTION toolgate.set_tenant_auditors(text, text[]) TO toolgate_admin;
GRANT SELECT ON toolgate.approvals TO toolgate_auditor, toolgate_admin;
GRANT EXECUTE ON FUNCTION toolgate.set_policy(text, text, boolean, text[], integer, numeric, integer, interval, numeric,
                                              numeric, text[], text[], text[], boolean, integer, numeric, integer)
TO toolgate_admin;
