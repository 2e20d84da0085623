-- pg_toolgate: roles and tables. Runs before anything else in the extension script.
--
-- Every table belongs to the extension owner. Client roles get no table privilege at all
-- (see finalize.sql): they reach these rows only through the SECURITY DEFINER entry points.

-- Roles are cluster-wide and outlive the extension; create them once. One that exists already
-- (made by hand, by CREATE EXTENSION in another database, or left by DROP EXTENSION) is adopted
-- only as a group role: one that can log in, has a password or any attribute beyond NOLOGIN is
-- refused, nothing created. A member that may grant it on (ADMIN OPTION: on PostgreSQL 16 and
-- later the non-superuser who created a role has it) is named in a WARNING; its other members
-- (expected: the logins a DBA granted it) in a NOTICE.
DO $roles$
DECLARE
    r text;
    bad text;
    admins text;
    members text;
BEGIN
    FOREACH r IN ARRAY ARRAY['toolgate_admin', 'toolgate_operator', 'toolgate_agent', 'toolgate_auditor', 'toolgate_dispatcher',
                              'toolgate_approver'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN unique_violation OR duplicate_object THEN
                NULL;  -- made meanwhile by a CREATE EXTENSION in another database: a group role too
            END;
            CONTINUE;
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
                      HINT = pg_catalog.format('ALTER ROLE %I NOLOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS NOREPLICATION PASSWORD NULL, then CREATE EXTENSION again.', r);
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
    END LOOP;
END
$roles$;

-- Every timestamp in a reply: ISO 8601 in UTC, whatever the session's DateStyle and TimeZone.
-- IMMUTABLE although to_char is not: the zone is fixed and the format has no field a setting or
-- the locale changes (Citus refuses any function that is not IMMUTABLE in an INSERT's RETURNING).
CREATE FUNCTION toolgate.iso_utc(ts timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN pg_catalog.to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');

------------------------------------------------------------------------------------------------
-- Configuration: tenants, keys, tools, policy, kill switch.
------------------------------------------------------------------------------------------------

CREATE TABLE toolgate.tenants (
    tenant_id  text PRIMARY KEY CHECK (tenant_id ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- How the tenant reads what the gate writes for a person (toolgate.set_tenant_locale): the
    -- language of the proposal's sentences and of the words that consent; the currency (ISO 4217)
    -- and its minor unit, to which the gate rounds every amount once; how 1234.56 is written
    -- (symbol, spacing and separators: 'R$ 1.234,56', '$1,234.56', '1.234,56 €'). Checked by
    -- toolgate.check_locale, the gate's own reading of them (sql/api.sql: tenants_locale_check).
    language     text NOT NULL DEFAULT 'pt',
    currency     text NOT NULL DEFAULT 'BRL',
    minor_unit   smallint NOT NULL DEFAULT 2,
    money_format text NOT NULL DEFAULT 'R$ 1.234,56',
    -- Where the tenant's calendar days, weeks and months begin (toolgate.set_tenant_time_zone): the
    -- windows of its calendar limits (sql/limits.sql). A name PostgreSQL knows (pg_timezone_names).
    time_zone    text NOT NULL DEFAULT 'UTC',
    -- Who may read the tenant's audit in the approvals console (toolgate.audit_trail): a person
    -- holding one of these roles, from the same tokens as callers (toolgate.set_tenant_auditors).
    -- NULL: nobody there.
    auditor_roles text[] CHECK (pg_catalog.cardinality(auditor_roles) > 0)
);

-- Public keys only: the private halves stay with the identity provider and the channel.
CREATE TABLE toolgate.keys (
    kid        text PRIMARY KEY CHECK (length(kid) BETWEEN 1 AND 128),
    tenant_id  text NOT NULL REFERENCES toolgate.tenants,
    purpose    text NOT NULL CHECK (purpose IN ('identity', 'channel')),
    public_key bytea NOT NULL CHECK (length(public_key) = 32),
    active     boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    revoked_at timestamptz
);

-- Trusted identity providers (Keycloak, Auth0, Okta…): the `iss` their tokens name, the `aud`
-- values this database accepts, their JWKS document as published (public keys only; pasted in by
-- the DBA, never fetched), and which claims carry the tenant, the actor and the roles. One
-- provider may serve several tenants: tenant_issuers says which claim value is which tenant.
CREATE TABLE toolgate.issuers (
    issuer       text PRIMARY KEY CHECK (issuer ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    iss          text NOT NULL UNIQUE CHECK (length(iss) BETWEEN 1 AND 512),
    audiences    text[] NOT NULL CHECK (cardinality(audiences) BETWEEN 1 AND 16
                                        AND array_position(audiences, NULL) IS NULL),
    jwks         jsonb NOT NULL,
    tenant_claim text NOT NULL CHECK (length(tenant_claim) BETWEEN 1 AND 128),
    actor_claim  text NOT NULL DEFAULT 'sub' CHECK (length(actor_claim) BETWEEN 1 AND 128),
    roles_claim  text NOT NULL DEFAULT 'roles' CHECK (length(roles_claim) BETWEEN 1 AND 128),
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    keys_changed_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- A tenant's trusted issuer, and the value of that issuer's tenant claim that means this tenant
-- (an Auth0 org_id "org_9fK2" for tenant "acme", say). One issuer per tenant.
CREATE TABLE toolgate.tenant_issuers (
    tenant_id   text PRIMARY KEY REFERENCES toolgate.tenants,
    issuer      text NOT NULL REFERENCES toolgate.issuers,
    claim_value text NOT NULL CHECK (length(claim_value) BETWEEN 1 AND 128),
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    UNIQUE (issuer, claim_value)
);

-- The tools a DBA defined (toolgate.define_tool, define_read_tool; sql/registry.sql).
CREATE TABLE toolgate.tools (
    tool        text PRIMARY KEY,
    sensitive   boolean NOT NULL,
    description text NOT NULL,
    -- Who defined it.
    defined_by  text NOT NULL,
    -- A write tool (toolgate.call, the gate's eight steps) or a read tool (toolgate.read).
    kind        text NOT NULL DEFAULT 'write' CHECK (kind IN ('write', 'read'))
);

-- JSON Schemas (draft 2020-12) per tool, append-only: the newest version is in force and every
-- audit row names the version that judged it.
CREATE TABLE toolgate.tool_schemas (
    tool       text NOT NULL REFERENCES toolgate.tools,
    version    integer NOT NULL CHECK (version >= 1),
    schema     jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    created_by text NOT NULL DEFAULT CURRENT_USER,
    PRIMARY KEY (tool, version)
);

-- One row per (tenant, tool). No row: the tool is not allowed (fail closed). Changed only
-- through toolgate.set_policy; every change bumps `version` and leaves a policy_history row.
CREATE TABLE toolgate.policies (
    tenant_id                  text NOT NULL REFERENCES toolgate.tenants,
    tool                       text NOT NULL REFERENCES toolgate.tools,
    allowed                    boolean NOT NULL,
    roles                      text[] NOT NULL,
    -- 0: applies at once; 1: "yes"; 2: "yes" with the budget shown; 3: typed challenge word.
    tier                       integer NOT NULL CHECK (tier BETWEEN 0 AND 3),
    -- A value above these raises the tier to 2 or 3.
    tier2_above                numeric(14, 2) CHECK (tier2_above >= 0),
    tier3_above                numeric(14, 2) CHECK (tier3_above >= 0),
    max_value                  numeric(14, 2) CHECK (max_value >= 0),
    max_calls_per_conversation integer CHECK (max_calls_per_conversation >= 0),
    confirm_ttl                interval NOT NULL CHECK (confirm_ttl > interval '0'),
    -- The states the tool's target may be in (the ERP's own names); NULL: the tool's own
    -- target_states (toolgate.define_tool), and any state if that is NULL too.
    target_states              text[],
    version                    integer NOT NULL DEFAULT 1,
    updated_at                 timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_by                 text NOT NULL,
    -- Maker-checker (docs/approvals.md). NULL approver_roles: the requester confirms their own
    -- proposal through their channel. Set: only a person holding one of these roles decides it,
    -- through toolgate.approve; the requester's own channel "yes" no longer applies it.
    approver_roles             text[] CHECK (pg_catalog.cardinality(approver_roles) > 0),
    -- The approver may not be the requester (the verified iss and sub, never a name).
    distinct_approver          boolean NOT NULL DEFAULT true,
    -- Distinct approvals needed: `quorum` when the value is above quorum_above (always when
    -- quorum_above is NULL), else one.
    quorum                     integer NOT NULL DEFAULT 1 CHECK (quorum BETWEEN 1 AND 16),
    quorum_above               numeric(14, 2) CHECK (quorum_above >= 0),
    -- Proposals of this tier and above are approved only in the approvals console (toolgate.approve,
    -- a person's own sign-in): a channel-signed "yes", whose key may sit on the agent's host, does
    -- not apply them. With no approver_roles the requester approves their own there. NULL: never.
    console_only_tier          integer CHECK (console_only_tier BETWEEN 1 AND 3),
    PRIMARY KEY (tenant_id, tool)
);

-- Every version of every policy row: who changed it, when, from what to what.
CREATE TABLE toolgate.policy_history (
    history_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  text NOT NULL,
    tool       text NOT NULL,
    version    integer NOT NULL,
    changed_at timestamptz NOT NULL,
    changed_by text NOT NULL,
    old        jsonb,
    new        jsonb
);
CREATE INDEX policy_history_at ON toolgate.policy_history (tenant_id, tool, changed_at);

-- Kill switch: scope '*' is global, any other scope is a tool. No row: writes on (policy rows
-- are what allow a write; a switch can only take it away).
CREATE TABLE toolgate.write_switches (
    scope      text PRIMARY KEY,
    enabled    boolean NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    changed_by text NOT NULL
);

-- The HMAC key of the audit's args_hmac, readable by the owner only: 32 bytes from two v4
-- UUIDs (244 bits of pg_strong_random), made once here. Not dumped: a restored database gets a
-- key of its own (see docs/security.md, the threat model's caveats).
CREATE TABLE toolgate.audit_key (
    key_id     integer PRIMARY KEY DEFAULT 1 CHECK (key_id = 1),
    secret     bytea NOT NULL CHECK (length(secret) >= 32),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
INSERT INTO toolgate.audit_key (secret) VALUES (pg_catalog.decode(pg_catalog.replace(
    pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text, '-', ''), 'hex'));

------------------------------------------------------------------------------------------------
-- Gate state: idempotency ledger, proposals, quota.
------------------------------------------------------------------------------------------------

-- The closed lists of the tables every call writes are domains, not table CHECKs: PostgreSQL
-- reads and plans a table's CHECK constraints from their stored text at each statement that
-- writes the table (a few microseconds each, in every call), a domain's once per server process.
-- The rule is the same: a value outside the list is refused, whoever writes it.
CREATE DOMAIN toolgate.ledger_state AS text CHECK (VALUE IN ('reserved', 'pending', 'settled'));
CREATE DOMAIN toolgate.proposal_status AS text
    CHECK (VALUE IN ('live', 'superseded', 'expired', 'declined', 'applied', 'invalidated'));
CREATE DOMAIN toolgate.proposal_tier AS integer CHECK (VALUE BETWEEN 1 AND 3);
CREATE DOMAIN toolgate.audit_kind AS text CHECK (VALUE IN ('call', 'confirm', 'read', 'dispatch'));
CREATE DOMAIN toolgate.outcome AS text
    CHECK (VALUE IN ('SUCCEEDED', 'NEEDS_CONFIRMATION', 'REJECTED', 'BLOCKED', 'CANCELLED', 'PENDING',
                     'UNCERTAIN', 'PARTIAL'));
CREATE DOMAIN toolgate.counter AS integer CHECK (VALUE >= 0);

-- One row per (tenant, tool, idempotency key). 'reserved' never outlives its transaction;
-- 'pending' waits for a person; 'settled' holds the reply every retry gets back.
CREATE TABLE toolgate.ledger (
    tenant_id       text NOT NULL,
    tool            text NOT NULL,
    idempotency_key text NOT NULL,
    args_digest     text NOT NULL,
    -- The actor who reserved the key: only they get its reply or its proposal back.
    actor           text NOT NULL,
    state           toolgate.ledger_state NOT NULL,
    proposal_id     uuid,
    reply           jsonb,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    settled_at      timestamptz,
    PRIMARY KEY (tenant_id, tool, idempotency_key),
    CHECK ((state = 'settled') = (reply IS NOT NULL))
);

-- The tenant leads every key of the tables a call writes (ledger, proposals, conversations,
-- quota_usage, audit, outbox), and every statement the gate runs on them names the tenant: a
-- tenant's rows can be kept together, on one node of a cluster (docs/scale-out.md).
CREATE TABLE toolgate.proposals (
    proposal_id     uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
    tenant_id       text NOT NULL,
    conversation_id text NOT NULL,
    actor           text NOT NULL,
    tool            text NOT NULL,
    target          text NOT NULL,
    args            jsonb NOT NULL,
    args_digest     text NOT NULL,
    idempotency_key text NOT NULL,
    text            text NOT NULL,
    tier            toolgate.proposal_tier NOT NULL,
    challenge       text,
    schema_version  integer NOT NULL,
    policy_version  integer NOT NULL,
    status          toolgate.proposal_status NOT NULL,
    -- Proposal times are the wall clock's, not the transaction's start: a confirmation is judged
    -- against the moment it is checked.
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    expires_at      timestamptz NOT NULL,
    decided_at      timestamptz,
    -- What the person read the decision on (the value's amount and account, a digest of the
    -- tool's definition): a confirmation finding another is refused, and the proposal invalidated.
    -- NULL definition: a proposal made before 0.2.0, confirmed as 0.1.0 confirmed it.
    amount          numeric,
    account         text,
    definition      text,
    -- The language the text was written in (the answer is judged in it) and the currency of the
    -- amount; NULL: a proposal made before 0.2.0 (Portuguese, reais).
    language        text,
    currency        text,
    -- Who asked, as verified: the issuer ('' for a token of toolgate.keys) and every role the
    -- token carried. An approval compares the issuer and subject (distinct_approver); the effect
    -- an approval applies judges the requester's roles. NULL: a proposal made before 0.3.0.
    actor_iss       text,
    actor_roles     text[],
    PRIMARY KEY (tenant_id, proposal_id),
    CHECK ((tier = 3) = (challenge IS NOT NULL))
);
-- One live proposal per conversation of each person: a new one supersedes the old. A
-- conversation id is the caller's to choose, so it is each person's own (the verified subject is
-- part of every key that names one): another person of the tenant sending the same id neither
-- supersedes this person's proposal nor uses their quota.
CREATE UNIQUE INDEX proposals_one_live_per_conversation
    ON toolgate.proposals (tenant_id, actor, conversation_id) WHERE status = 'live';

-- One row per conversation (of one person) that ever had a proposal: the lock that serializes
-- its proposals (a row no client can reach, unlike an advisory lock), and when it last had one.
CREATE TABLE toolgate.conversations (
    tenant_id        text NOT NULL,
    conversation_id  text NOT NULL,
    last_proposal_at timestamptz NOT NULL,
    actor            text NOT NULL,
    PRIMARY KEY (tenant_id, actor, conversation_id)
);

-- Calls admitted per (tenant, person, conversation, tool). The tenant leads the key: conversation
-- ids are the caller's and may collide across tenants, and across the people of one.
CREATE TABLE toolgate.quota_usage (
    tenant_id       text NOT NULL,
    conversation_id text NOT NULL,
    tool            text NOT NULL,
    used            toolgate.counter NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    actor           text NOT NULL,
    PRIMARY KEY (tenant_id, actor, conversation_id, tool)
);

------------------------------------------------------------------------------------------------
-- Audit: one append-only row per call, confirmation and read. Never a token, never raw args.
------------------------------------------------------------------------------------------------

CREATE TABLE toolgate.audit (
    -- toolgate.node_audit_id() of the sequence below (the default, sql/citus.sql): unique on every
    -- node of a Citus cluster.
    audit_id        bigint NOT NULL,
    at              timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    kind            toolgate.audit_kind NOT NULL,
    -- '(unverified)' for a call whose identity was not verified: never a tenant id.
    tenant_id       text NOT NULL,
    conversation_id text,
    actor           text,
    role            text,
    tool            text NOT NULL,
    target          text,
    proposal_id     uuid,
    outcome         toolgate.outcome NOT NULL,
    rule            text,
    replayed        boolean NOT NULL DEFAULT false,
    -- Effects the ERP recorded in this call's transaction.
    effects         integer NOT NULL DEFAULT 0,
    detail          jsonb NOT NULL DEFAULT '{}',
    args_hmac       text,
    schema_version  integer,
    policy_version  integer,
    duration_us     bigint NOT NULL,
    -- The time is in the key: the audit is partitioned by it.
    PRIMARY KEY (tenant_id, audit_id, at)
) PARTITION BY RANGE (at);
-- A partition per calendar month (UTC), made ahead by toolgate.audit_partitions (sql/seal.sql),
-- which `toolgate audit seal` runs before it seals; a purge drops a month's partition whole once every row of it is past its
-- tenant's retention. A row of a month that has no partition yet lands in the default one, and
-- audit_partitions moves it to its month's when it makes it. Only the default partition is the
-- extension's own (pg_dump keeps its rows with the configuration); the months are tables
-- audit_partitions makes, which pg_dump keeps as such.
CREATE TABLE toolgate.audit_default PARTITION OF toolgate.audit DEFAULT;
-- The auditor's two commonest questions: what a tenant did over a time window, and what one tool
-- did in a tenant over a time window (pg_test/sql/audit_indexes.sql shows each plan).
CREATE INDEX audit_tenant_at ON toolgate.audit (tenant_id, at);
CREATE INDEX audit_tenant_tool_at ON toolgate.audit (tenant_id, tool, at);
CREATE SEQUENCE toolgate.audit_audit_id_seq AS bigint OWNED BY toolgate.audit.audit_id;

CREATE FUNCTION toolgate.audit_is_append_only() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- A partition of the audit is the audit: its name is the whole table's.
    RAISE EXCEPTION '% is append-only',
                    coalesce(pg_catalog.pg_partition_root(TG_RELID), TG_RELID)::pg_catalog.regclass::text
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_no_update_or_delete BEFORE UPDATE OR DELETE ON toolgate.audit
    FOR EACH ROW EXECUTE FUNCTION toolgate.audit_is_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON toolgate.audit
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.audit_is_append_only();
-- A row trigger reaches every partition; a TRUNCATE trigger is each partition's own.
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON toolgate.audit_default
    FOR EACH STATEMENT EXECUTE FUNCTION toolgate.audit_is_append_only();

------------------------------------------------------------------------------------------------
-- pg_dump keeps configuration and history: every row of these tables is the DBA's (the
-- extension ships no tool of its own).
------------------------------------------------------------------------------------------------

SELECT pg_catalog.pg_extension_config_dump('toolgate.tenants', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.keys', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.issuers', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.tenant_issuers', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.tools', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.tool_schemas', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.policies', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.policy_history', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.policy_history_history_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.write_switches', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.ledger', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.proposals', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.conversations', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.quota_usage', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.audit', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.audit_default', '');
SELECT pg_catalog.pg_extension_config_dump('toolgate.audit_audit_id_seq', '');
