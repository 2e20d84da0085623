-- pg_toolgate: the SQL surface. Every function here is SECURITY DEFINER with a pinned
-- search_path (pg_temp last and explicit) and schema-qualified SQL inside; finalize.sql decides
-- who may EXECUTE which. The tool registry and its entry points are in registry.sql.

------------------------------------------------------------------------------------------------
-- Agent entry points (docs/architecture.md §4): the Rust functions themselves (src/entry.rs), with
-- no wrapper in between (confirm here; call and read in registry.sql). `args` reaches the gate as
-- the jsonb's text, so that a number Rust cannot hold (1e400) is a schema_invalid outcome rather
-- than an exception.
------------------------------------------------------------------------------------------------

-- The entry points written in Rust are created with the library pgrx created its own functions
-- with (toolgate.caller's): each version's library is a file of its own, pg_toolgate-VERSION.
DO $create$
BEGIN
    EXECUTE pg_catalog.format($sql$
        CREATE FUNCTION toolgate.confirm(identity text, confirmation text) RETURNS jsonb
        LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
        AS %L, 'confirm_wrapper'
    $sql$, (SELECT p.probin FROM pg_catalog.pg_proc p WHERE p.oid = 'toolgate.caller()'::pg_catalog.regprocedure));
    EXECUTE pg_catalog.format($sql$
        CREATE FUNCTION toolgate.tenant_confirm(tenant text, identity text, confirmation text) RETURNS jsonb
        LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
        AS %L, 'tenant_confirm_wrapper'
    $sql$, (SELECT p.probin FROM pg_catalog.pg_proc p WHERE p.oid = 'toolgate.caller()'::pg_catalog.regprocedure));
END
$create$;

COMMENT ON FUNCTION toolgate.confirm(text, text) IS
    'Apply or decline a proposal with a channel-signed confirmation token.';
COMMENT ON FUNCTION toolgate.tenant_confirm(text, text, text) IS
    'toolgate.confirm routed by the tenant (a Citus cluster runs it on the tenant''s node); the token must name that tenant.';

-- Backends cache the configuration rows every call reads (keys, issuers, tools, their schemas and
-- bindings, policy rows, switches) until told they changed: any write to those tables, by
-- anyone, tells them. Each trigger names its table: on a Citus node the trigger fires on a shard
-- of the table (another relation), and the backends there watch the table.
CREATE FUNCTION toolgate.config_changed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, toolgate, pg_temp AS $$
BEGIN
    PERFORM toolgate.signal_config_change(pg_catalog.format('toolgate.%I', TG_ARGV[0])::pg_catalog.regclass);
    RETURN NULL;
END
$$;
CREATE TRIGGER tenants_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.tenants
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('tenants');
CREATE TRIGGER keys_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.keys
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('keys');
CREATE TRIGGER issuers_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.issuers
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('issuers');
CREATE TRIGGER tenant_issuers_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.tenant_issuers
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('tenant_issuers');
CREATE TRIGGER tools_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.tools
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('tools');
CREATE TRIGGER tool_schemas_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.tool_schemas
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('tool_schemas');
CREATE TRIGGER policies_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.policies
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('policies');
CREATE TRIGGER write_switches_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON toolgate.write_switches
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.config_changed('write_switches');

------------------------------------------------------------------------------------------------
-- DBA surface (docs/architecture.md §4): tenants, keys, tool schemas, policy, kill switch, dry runs.
------------------------------------------------------------------------------------------------

CREATE FUNCTION toolgate.add_tenant(tenant_id text, name text) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$ INSERT INTO toolgate.tenants (tenant_id, name) VALUES (tenant_id, name) $$;

-- A tenant's locale is what the gate can read: the same check as set_tenant_locale's, raising its
-- reason, for a row written any other way.
ALTER TABLE toolgate.tenants ADD CONSTRAINT tenants_locale_check
    CHECK (toolgate.check_locale(language, currency, money_format, minor_unit) = minor_unit);

-- How a tenant reads what the gate writes for a person: the language of the proposal's sentences
-- and of the words that consent ('pt', 'en', 'es'), the currency (ISO 4217) and how 1234.56 is
-- written in it; minor_unit is ISO 4217's for the codes the gate lists (give it for another). A
-- new tenant reads Portuguese and reais until this is called. A live proposal keeps the language
-- it was written in; one with an amount is invalidated at its confirmation if the currency changed.
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

-- public_key: the JWK "x" (base64url of the 32 raw bytes) or a PEM "PUBLIC KEY" block.
CREATE FUNCTION toolgate.add_key(tenant_id text, kid text, purpose text, public_key text) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    INSERT INTO toolgate.keys (tenant_id, kid, purpose, public_key)
    VALUES (tenant_id, kid, purpose, toolgate.parse_public_key(public_key))
$$;

-- A revoked key verifies nothing from then on; its row stays for the record.
CREATE FUNCTION toolgate.revoke_key(kid text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    UPDATE toolgate.keys k SET active = false, revoked_at = pg_catalog.now()
     WHERE k.kid = revoke_key.kid AND k.active;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no active key %', kid USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- A trusted identity provider: its iss, the audiences accepted, its JWKS document (the JSON at
-- its jwks_uri; RSA >= 2048 bits, P-256 and Ed25519 signing keys only, each kid once), and the
-- claims that carry the tenant, the actor and the roles. Tokens whose payload names this iss
-- are verified against these keys only.
CREATE FUNCTION toolgate.add_issuer(
    issuer text,
    iss text,
    audiences text[],
    jwks jsonb,
    tenant_claim text,
    actor_claim text DEFAULT 'sub',
    roles_claim text DEFAULT 'roles'
) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    n integer := toolgate.check_jwks(jwks);
BEGIN
    INSERT INTO toolgate.issuers (issuer, iss, audiences, jwks, tenant_claim, actor_claim, roles_claim)
    VALUES (issuer, iss, audiences, jwks, tenant_claim, actor_claim, roles_claim);
    RETURN n;
END
$$;

-- Key rotation: the provider's new JWKS document replaces the old one whole (keep the old key in
-- it while tokens signed with it are still alive). Returns the number of signing keys.
CREATE FUNCTION toolgate.set_issuer_keys(issuer text, jwks jsonb) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    n integer := toolgate.check_jwks(jwks);
BEGIN
    UPDATE toolgate.issuers i SET jwks = set_issuer_keys.jwks, keys_changed_at = pg_catalog.now()
     WHERE i.issuer = set_issuer_keys.issuer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown issuer %', issuer USING ERRCODE = 'no_data_found';
    END IF;
    RETURN n;
END
$$;

-- Make `issuer` the tenant's trusted issuer: its tokens whose tenant claim is claim_value act for
-- tenant_id (and no other issuer's tokens do). A tenant trusts one issuer: a mapping this
-- replaces is named in a NOTICE (the same mapping again changes nothing). The tenant's own active
-- Ed25519 identity keys (toolgate.keys) stay trusted alongside the issuer, and a NOTICE names them
-- (toolgate.revoke_key ends one).
CREATE FUNCTION toolgate.set_tenant_issuer(tenant_id text, issuer text, claim_value text) RETURNS void
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

-- A new version of a tool's argument contract; it must compile as draft 2020-12.
CREATE FUNCTION toolgate.set_tool_schema(tool text, schema jsonb) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
DECLARE
    v integer;
BEGIN
    PERFORM toolgate.check_tool_schema(schema);
    SELECT max(s.version) + 1 INTO v FROM toolgate.tool_schemas s WHERE s.tool = set_tool_schema.tool;
    IF v IS NULL THEN
        RAISE EXCEPTION 'unknown tool %', tool USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO toolgate.tool_schemas (tool, version, schema, created_by)
    VALUES (tool, v, schema, toolgate.caller());
    RETURN v;
END
$$;

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

-- The policy row in force for (tenant, tool) at a moment: all NULL when there was none.
CREATE FUNCTION toolgate.policy_at(tenant_id text, tool text, at timestamptz) RETURNS toolgate.policies
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
    SELECT (pg_catalog.jsonb_populate_record(NULL::toolgate.policies, h.new)).*
      FROM toolgate.policy_history h
     WHERE h.tenant_id = policy_at.tenant_id AND h.tool = policy_at.tool AND h.changed_at <= policy_at.at
     ORDER BY h.changed_at DESC, h.history_id DESC
     LIMIT 1
$$;

-- The kill switch, global (tool NULL) or per tool. toolgate_operator may only turn writes off;
-- turning them back on takes an administrator of the gate in this database (toolgate.administers).
CREATE FUNCTION toolgate.set_writes_enabled(enabled boolean, tool text DEFAULT NULL) RETURNS void
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

-- A dry run of a write call: which step would decide and why. Changes nothing.
CREATE FUNCTION toolgate.explain_call(identity text, tool text, conversation_id text, args jsonb) RETURNS jsonb
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$ SELECT toolgate.gate_explain(tool, identity, conversation_id, args::text) $$;

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
