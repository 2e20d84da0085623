-- The auditor's view: one audit row per call, the panel's counters, the alerts. No token and no
-- raw argument anywhere.
\set VERBOSITY terse
SET ROLE toolgate_auditor;
SELECT tenant_id, schema_valid, schema_rejected, blocked_actions, duplicates_suppressed,
       confirmation_denied, partial_results, effects
  FROM toolgate.panel ORDER BY tenant_id NULLS LAST;
SELECT tenant_id, conversation_id, tool, denials FROM toolgate.alert_repeated_denials ORDER BY 1, 2;
SELECT tenant_id, sum(denials) AS denials FROM toolgate.alert_denials_per_hour GROUP BY 1 ORDER BY 1 NULLS LAST;
SELECT count(*) FROM toolgate.audit;
-- Nothing of the arguments but their HMAC.
SELECT count(*) AS rows_with_raw_args FROM toolgate.audit_log a
 WHERE a::text LIKE '%Inspeção validada%' OR a::text LIKE '%dangerous_extra%';
SELECT count(*) AS rows_with_tokens FROM toolgate.audit_log a WHERE a::text LIKE '%eyJ%';
RESET ROLE;
-- The audit is append-only, even for its owner.
UPDATE toolgate.audit SET outcome = 'SUCCEEDED' WHERE audit_id = 1;
DELETE FROM toolgate.audit WHERE audit_id = 1;
TRUNCATE toolgate.audit;
