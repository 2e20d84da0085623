------------------------------------------------------------------------------------------------
-- Erasure of a person (docs/audit.md#erasure-of-a-person). The audit names each person by a
-- pseudonym, a keyed hash under a random key of their own (toolgate.pseudonym, in Rust); the keys
-- are here. erase_actor destroys a person's key (crypto-shredding): the audit, unchanged, still
-- verifies and still counts, but nothing in the database says whose its pseudonym was.
------------------------------------------------------------------------------------------------

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
