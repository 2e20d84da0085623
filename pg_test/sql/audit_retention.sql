-- The audit's retention (docs/audit.md#retention), in a tenant of its own: a retention shorter
-- than toolgate.min_retention refused; purge() removes whole sealed periods past it and nothing
-- else (not a sealed period that ends too late, not a row not sealed yet), leaving a signed
-- record; verify_audit reports the purged checkpoints as purged, not tampered, and a forged
-- record as not verifying; bad input; who may.
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('ret', 'Retention');
RESET ROLE;
-- Three rows of 400 days ago and two of 10 days ago (written as the superuser can, backdated),
-- sealed three to a checkpoint: checkpoint 1's period ends 10 days ago, checkpoint 2's now.
INSERT INTO toolgate.audit (at, kind, tenant_id, tool, outcome, duration_us)
SELECT now() - interval '400 days' + n * interval '1 second', 'call', 'ret', 'request_close', 'SUCCEEDED', n
  FROM generate_series(1, 3) n
UNION ALL
SELECT now() - interval '10 days' + n * interval '1 second', 'call', 'ret', 'request_close', 'BLOCKED', n
  FROM generate_series(1, 2) n;
SELECT checkpoint, sealed_rows FROM toolgate.seal('ret', batch => 3);
SELECT checkpoint, status, detail FROM toolgate.verify_audit('ret');

-- A legal minimum of 30 days: a retention of one day refused, naming both.
SET toolgate.min_retention = '30d';
SET ROLE toolgate_admin;
SELECT toolgate.set_retention('ret', '1 day');
SELECT toolgate.set_retention('ret', '0 seconds');
SELECT toolgate.set_retention('nobody', '1 year');
SELECT toolgate.set_retention('ret', '90 days');
SELECT tenant_id, keep FROM toolgate.audit_retention WHERE tenant_id = 'ret';
RESET ROLE;

-- On-call's scheduler purges. With 90 days kept nothing is old enough (checkpoint 1's period
-- ended 10 days ago); with 5 days set before the minimum of 30 days was, still nothing (the
-- minimum wins); with no minimum, checkpoint 1's three rows go, checkpoint 2's stay (its period
-- ends now), and a second purge finds nothing more.
SET ROLE toolgate_operator;
SELECT * FROM toolgate.purge('ret');
RESET ROLE;
RESET toolgate.min_retention;
SET ROLE toolgate_admin;
SELECT toolgate.set_retention('ret', '5 days');
RESET ROLE;
SET toolgate.min_retention = '30d';
SET ROLE toolgate_operator;
SELECT * FROM toolgate.purge('ret');
RESET ROLE;
RESET toolgate.min_retention;
SET ROLE toolgate_operator;
SELECT * FROM toolgate.purge('ret');
SELECT * FROM toolgate.purge('ret');
RESET ROLE;
SELECT count(*) AS rows_left, min(duration_us) FILTER (WHERE outcome = 'BLOCKED') AS blocked_left
  FROM toolgate.audit WHERE tenant_id = 'ret';
SELECT seq FROM toolgate.audit_checkpoints WHERE tenant_id = 'ret' ORDER BY seq;
SET ROLE toolgate_auditor;
SELECT through_seq, purged_rows FROM toolgate.audit_purges WHERE tenant_id = 'ret';
SELECT checkpoint, status, regexp_replace(detail, ' \(before .*', '') AS detail FROM toolgate.verify_audit('ret');
RESET ROLE;

-- A purge record forged (more rows than it removed): it no longer verifies, and the purged
-- checkpoint's rows are compared as if never purged.
SET session_replication_role = replica;
UPDATE toolgate.audit_purges SET purged_rows = 2 WHERE tenant_id = 'ret';
RESET session_replication_role;
SELECT checkpoint, status, regexp_replace(detail, ' \(before .*', '') AS detail FROM toolgate.verify_audit('ret');

-- Who may: the agent neither sets retention nor purges; the auditor reads, does not purge; an
-- operator does not set retention. The purge record is append-only.
SET ROLE toolgate_agent;
SELECT toolgate.set_retention('ret', '1 year');
SELECT * FROM toolgate.purge();
SELECT count(*) FROM toolgate.audit_purges;
SET ROLE toolgate_auditor;
SELECT * FROM toolgate.purge();
SET ROLE toolgate_operator;
SELECT toolgate.set_retention('ret', '1 year');
SELECT * FROM toolgate.purge('nobody');
RESET ROLE;
DELETE FROM toolgate.audit_purges WHERE tenant_id = 'ret';
SET ROLE toolgate_admin;
SELECT toolgate.set_retention('ret', NULL);
RESET ROLE;
SELECT count(*) AS retention_rows FROM toolgate.audit_retention WHERE tenant_id = 'ret';
