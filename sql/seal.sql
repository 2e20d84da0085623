------------------------------------------------------------------------------------------------
-- The audit's seal (docs/audit.md): each tenant's audit rows, in the order of their time, hashed
-- into checkpoints that chain to one another and are signed with an Ed25519 key the extension
-- keeps. toolgate.seal() (or tenant_seal, tenant by tenant) writes them, run by a scheduler,
-- never by a call; verify_audit() says which row was changed, removed or inserted since it was
-- sealed. A call never waits for a seal: the seal waits for the calls (src/seal.rs).
------------------------------------------------------------------------------------------------

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

------------------------------------------------------------------------------------------------
-- The audit's partitions (docs/audit.md#partitions): one per calendar month in UTC, made ahead
-- by audit_partitions() (a statement of its own, which `toolgate audit seal` runs before it
-- seals), so that purge() can drop a month whole. Both run with the time in UTC, whatever the
-- session's: a month is the same span on every server.
------------------------------------------------------------------------------------------------

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
