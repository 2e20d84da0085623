-- The audit's seal (docs/audit.md), in a tenant of its own: real calls' rows sealed into signed,
-- chained checkpoints; each kind of tampering a superuser can do to the rows or the checkpoints
-- found by verify_audit; rows not sealed yet told apart from tampered ones; a key rotation that
-- keeps old checkpoints verifiable; bad input; who may seal and verify.
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('seal', 'Sealed');
RESET ROLE;
\set pk `${TOOLGATE_MINT:?} key idp-seal`
SELECT toolgate.add_key('seal', 'idp-seal', 'identity', :'pk') IS NULL AS added;
\set tok `${TOOLGATE_MINT:?} id seal ana supervisor`
-- Nothing yet.
SELECT checkpoint, status, audit_id, detail FROM toolgate.verify_audit('seal');
-- Five calls (refused: their arguments are not the tool's), five audit rows.
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM generate_series(1, 5) n,
       toolgate.request_close(:'tok', 'conv-seal', jsonb_build_object('order_id', '1', 'reason', 'x',
                              'idempotency_key', 'seal-' || n)) r;
RESET ROLE;
CREATE TEMP TABLE first_id AS SELECT min(audit_id) AS id FROM toolgate.audit WHERE tenant_id = 'seal';
SELECT checkpoint, status, audit_id - (SELECT id FROM first_id) AS row, detail FROM toolgate.verify_audit('seal');
-- On-call's scheduler seals: one checkpoint of five rows; a second seal has nothing to add.
SET ROLE toolgate_operator;
SELECT tenant_id, checkpoint, sealed_rows FROM toolgate.seal('seal');
SELECT tenant_id, checkpoint, sealed_rows FROM toolgate.seal('seal');
RESET ROLE;
-- Three more calls, sealed two rows to a checkpoint: checkpoints 2 and 3, chained.
SET ROLE toolgate_agent;
SELECT count(*) AS calls FROM generate_series(6, 8) n,
       toolgate.request_close(:'tok', 'conv-seal', jsonb_build_object('order_id', '1', 'reason', 'x',
                              'idempotency_key', 'seal-' || n)) r;
RESET ROLE;
SELECT checkpoint, status, audit_id - (SELECT id FROM first_id) AS row, detail FROM toolgate.verify_audit('seal');
SELECT tenant_id, checkpoint, sealed_rows FROM toolgate.seal('seal', batch => 2);
SET ROLE toolgate_auditor;
SELECT checkpoint, status, detail FROM toolgate.verify_audit('seal');
SELECT seq, rows, prev IS NULL AS first, key_id, length(signature) AS signature_bytes, length(leaves) AS leaf_bytes
  FROM toolgate.audit_checkpoints WHERE tenant_id = 'seal' ORDER BY seq;
SELECT key_id, length(public_key) AS hex_digits, retired_at IS NULL AS signing FROM toolgate.seal_public_keys ORDER BY key_id;
RESET ROLE;

-- A superuser, triggers off, edits a sealed row, deletes one, writes one into a sealed period and
-- moves one's time out of its checkpoint: each is found, with the row.
SET session_replication_role = replica;
UPDATE toolgate.audit SET outcome = 'SUCCEEDED' WHERE audit_id = (SELECT id + 1 FROM first_id);
DELETE FROM toolgate.audit WHERE audit_id = (SELECT id + 3 FROM first_id);
INSERT INTO toolgate.audit (at, kind, tenant_id, tool, outcome, duration_us)
SELECT at, 'call', 'seal', 'request_close', 'SUCCEEDED', 1 FROM toolgate.audit WHERE audit_id = (SELECT id + 6 FROM first_id);
UPDATE toolgate.audit SET at = at + interval '1 day' WHERE audit_id = (SELECT id + 7 FROM first_id);
RESET session_replication_role;
SELECT checkpoint, status, audit_id - (SELECT id FROM first_id) AS row, detail FROM toolgate.verify_audit('seal');
-- A range: only the checkpoints it overlaps, and the rows since the last.
SELECT checkpoint, status FROM toolgate.verify_audit('seal', since => (SELECT sealed_to FROM toolgate.audit_checkpoints
                                                                         WHERE tenant_id = 'seal' AND seq = 2));
-- The checkpoints themselves: one's counts edited (its signature fails), one removed (the chain
-- has a gap, and the next no longer chains).
SET session_replication_role = replica;
UPDATE toolgate.audit_checkpoints SET rows = 4 WHERE tenant_id = 'seal' AND seq = 1;
DELETE FROM toolgate.audit_checkpoints WHERE tenant_id = 'seal' AND seq = 2;
RESET session_replication_role;
SELECT checkpoint, status, detail FROM toolgate.verify_audit('seal') WHERE checkpoint IS NOT NULL;

-- A rotated key: the old one keeps its public half and loses its seed; what it signed verifies,
-- the next checkpoint is signed by the new one.
SELECT toolgate.add_tenant('seal-b', 'Sealed B');
\set pk `${TOOLGATE_MINT:?} key idp-seal-b`
SELECT toolgate.add_key('seal-b', 'idp-seal-b', 'identity', :'pk') IS NULL AS added;
\set tokb `${TOOLGATE_MINT:?} id seal-b bia supervisor`
SET ROLE toolgate_agent;
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'tokb', 'conv-b', '{"order_id": "1", "reason": "x", "idempotency_key": "b-1"}') r;
RESET ROLE;
SELECT checkpoint, sealed_rows FROM toolgate.seal('seal-b');
SET ROLE toolgate_admin;
SELECT key_id, length(public_key) AS hex_digits FROM toolgate.rotate_seal_key();
RESET ROLE;
SELECT count(*) FILTER (WHERE secret IS NULL) AS without_seed, count(*) FILTER (WHERE retired_at IS NULL) AS signing
  FROM toolgate.seal_keys;
SET ROLE toolgate_agent;
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'tokb', 'conv-b', '{"order_id": "1", "reason": "x", "idempotency_key": "b-2"}') r;
RESET ROLE;
SELECT checkpoint, sealed_rows FROM toolgate.seal('seal-b');
SELECT c.seq, c.key_id = (SELECT max(key_id) FROM toolgate.seal_keys) AS by_newest_key
  FROM toolgate.audit_checkpoints c WHERE c.tenant_id = 'seal-b' ORDER BY c.seq;
SELECT checkpoint, status, detail FROM toolgate.verify_audit('seal-b');
-- The export, for a copy outside the database (toolgate audit export): the checkpoints after the
-- first, each after its rows; a row's leaf is the SHA-256 of the text it carries, a checkpoint
-- carries what it signed.
SET ROLE toolgate_auditor;
SELECT checkpoint, item, audit_id IS NOT NULL AS has_id,
       record->>'leaf' = encode(sha256(convert_to(record->>'canonical', 'UTF8')), 'hex') AS leaf_of_its_text,
       record->>'message' LIKE '["toolgate.checkpoint/1", "seal-b", ' || checkpoint || ',%' AS its_message,
       length(record->>'signature') AS signature_hex
  FROM toolgate.export_audit('seal-b', after => 1);
SELECT count(*) AS nothing_after FROM toolgate.export_audit('seal-b', after => 2);
RESET ROLE;
-- Whoever can read the signing key (a superuser can) can forge a checkpoint that holds on its
-- own, but not the chain after it: seal-b's first row edited and its checkpoint signed again.
SET session_replication_role = replica;
DO $$
DECLARE
    c toolgate.audit_checkpoints;
BEGIN
    SELECT * INTO c FROM toolgate.audit_checkpoints WHERE tenant_id = 'seal-b' AND seq = 1;
    UPDATE toolgate.audit SET outcome = 'SUCCEEDED' WHERE tenant_id = 'seal-b' AND audit_id = c.audit_ids[1];
    SELECT string_agg(toolgate.audit_leaf(a.audit_id, a.at, a.kind, a.tenant_id, a.conversation_id, a.actor, a.role,
                                          a.tool, a.target, a.proposal_id, a.outcome, a.rule, a.replayed, a.effects,
                                          a.detail, a.args_hmac, a.schema_version, a.policy_version, a.duration_us),
                      ''::bytea ORDER BY a.at, a.audit_id) INTO c.leaves
      FROM toolgate.audit a WHERE a.tenant_id = 'seal-b' AND a.audit_id = ANY (c.audit_ids);
    c.root := sha256(c.leaves);
    SELECT key_id INTO c.key_id FROM toolgate.seal_keys WHERE retired_at IS NULL;
    c.signature := toolgate.seal_signature((SELECT secret FROM toolgate.seal_keys WHERE key_id = c.key_id),
                                           toolgate.checkpoint_message(c));
    DELETE FROM toolgate.audit_checkpoints WHERE tenant_id = 'seal-b' AND seq = 1;
    INSERT INTO toolgate.audit_checkpoints SELECT (c).*;
END
$$;
RESET session_replication_role;
SELECT checkpoint, status, detail FROM toolgate.verify_audit('seal-b');

-- One tenant at a time, as a Citus cluster seals (tenant_seal runs where the tenant's rows are:
-- on one server, here), over the tenants seal_tenants() names.
SET ROLE toolgate_agent;
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'tokb', 'conv-b', '{"order_id": "1", "reason": "x", "idempotency_key": "b-3"}') r;
SET ROLE toolgate_operator;
SELECT tenant_id, checkpoint, sealed_rows FROM toolgate.tenant_seal('seal-b');
SELECT tenant_id, checkpoint, sealed_rows FROM toolgate.tenant_seal('seal-b');
SELECT t FROM toolgate.seal_tenants() t WHERE t IN ('seal', 'seal-b', '(unverified)', 'nobody');
RESET ROLE;
SELECT checkpoint, status, detail FROM toolgate.verify_audit('seal-b') WHERE checkpoint = 3;

-- Bad input: an unknown tenant, a batch below one, a margin below none, a snapshot older than the
-- wait.
SELECT * FROM toolgate.seal('nobody');
SELECT * FROM toolgate.tenant_seal('nobody');
SELECT * FROM toolgate.tenant_seal(NULL);
SELECT * FROM toolgate.tenant_seal('seal', margin => '-1 second');
SELECT * FROM toolgate.seal('seal', batch => 0);
SELECT * FROM toolgate.verify_audit('nobody');
SELECT * FROM toolgate.verify_audit(NULL);
-- Every tenant at once (and the calls whose identity was not verified, '(unverified)').
SELECT count(DISTINCT tenant_id) >= 2 AS tenants_sealed FROM toolgate.seal();
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM toolgate.seal('seal');
ROLLBACK;

-- Who may: the agent neither seals nor verifies, nor reads the checkpoints; the auditor verifies
-- and does not seal; nobody but an administrator rotates the key; the checkpoints are
-- append-only, whoever writes.
SET ROLE toolgate_agent;
SELECT * FROM toolgate.seal('seal');
SELECT * FROM toolgate.verify_audit('seal');
SELECT count(*) FROM toolgate.audit_checkpoints;
SELECT count(*) FROM toolgate.export_audit('seal');
SELECT * FROM toolgate.tenant_seal('seal');
SELECT count(*) FROM toolgate.metric_audit_findings;
SET ROLE toolgate_auditor;
-- The metrics an exporter reads (docs/observability.md): what verify_audit finds in each tenant.
SELECT tenant_id, last_1d FROM toolgate.metric_audit_findings WHERE tenant_id IN ('seal', 'seal-b') ORDER BY 1;
SELECT * FROM toolgate.seal('seal');
SELECT * FROM toolgate.rotate_seal_key();
SELECT count(*) FROM toolgate.seal_keys;
SET ROLE toolgate_operator;
SELECT * FROM toolgate.rotate_seal_key();
RESET ROLE;
DELETE FROM toolgate.audit_checkpoints WHERE tenant_id = 'seal-b';
UPDATE toolgate.audit_checkpoints SET rows = 1 WHERE tenant_id = 'seal-b';
TRUNCATE toolgate.audit_checkpoints;
