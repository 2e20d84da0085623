------------------------------------------------------------------------------------------------
-- Limits over time (docs/limits.md): a tenant's calls, or the value they move, per rolling window
-- or per calendar day, week or month in the tenant's time zone; counted per actor or together,
-- for one tool or all, for one role or all. The gate consumes every limit that applies to a call
-- in the call's own transaction, before the effect (src/gate/limits.rs), so no window is ever
-- over its limit, under any concurrency.
------------------------------------------------------------------------------------------------

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
