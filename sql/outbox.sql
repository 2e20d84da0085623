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
ALTER TABLE toolgate.tool_bindings ADD COLUMN request text, ADD COLUMN finish text,
    ADD COLUMN endpoint text REFERENCES toolgate.erp_endpoints;
-- A write tool's consent template in other languages: {"en": "...", "es": "..."} (toolgate.set_consent_translation);
-- a tenant whose language has one reads it instead of `consent`.
ALTER TABLE toolgate.tool_bindings ADD COLUMN consent_translations jsonb
    CHECK (pg_catalog.jsonb_typeof(consent_translations) = 'object');
ALTER TABLE toolgate.tool_bindings DROP CONSTRAINT tool_bindings_check;
ALTER TABLE toolgate.tool_bindings ADD CONSTRAINT tool_bindings_check
    CHECK (CASE kind WHEN 'write' THEN target IS NOT NULL AND reader IS NULL
                                       AND (effect IS NULL) = (request IS NOT NULL)
                                       AND (request IS NULL) = (endpoint IS NULL)
                                       AND (finish IS NULL OR request IS NOT NULL)
                     ELSE reader IS NOT NULL AND target IS NULL AND value IS NULL AND effect IS NULL
                          AND consent IS NULL AND target_states IS NULL
                          AND request IS NULL AND finish IS NULL AND endpoint IS NULL END);

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
    -- What the call took from the tenant's limits over time (src/gate/limits.rs): each limit's
    -- name, subject, bucket and amount; given back if the ERP refuses the intent.
    limits          jsonb,
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
CREATE FUNCTION toolgate.outbox_distributed() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN toolgate.distributed('toolgate.outbox');
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
    VALUES ('dispatch', intent.tenant_id, session_user, intent.tool,
            toolgate.audited_target(intent.tenant_id, intent.tool, intent.args, intent.target), intent.proposal_id, 'PENDING', 0,
            pg_catalog.jsonb_build_object('phase', phase, 'attempt', intent.attempts, 'endpoint', intent.endpoint,
                                          'asked_by', toolgate.pseudonym(intent.tenant_id, intent.actor)) || coalesce(said, '{}'),
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
