-- pg_toolgate: what auditors and operators read. Views run with the owner's rights, so
-- toolgate_auditor reads these and nothing underneath them.

-- One row per call, confirmation and read. No token and no raw argument is ever stored. The
-- audit keeps each person's pseudonym (docs/audit.md#erasure-of-a-person): `actor` (and a
-- `target` a tool's schema marks personal) is the person while their key exists, and the
-- pseudonym once they were erased (`actor` of a delivery: the dispatcher's role).
CREATE VIEW toolgate.audit_log AS
SELECT a.audit_id, a.at, a.kind, a.tenant_id, a.conversation_id, coalesce(k.person, a.actor) AS actor, a.role, a.tool,
       coalesce(t.person, a.target) AS target, a.proposal_id, a.outcome, a.rule, a.replayed, a.detail, a.args_hmac,
       a.schema_version, a.policy_version, a.duration_us
  FROM toolgate.audit a
  LEFT JOIN toolgate.person_keys k ON k.tenant_id = a.tenant_id AND k.pseudonym = a.actor
  LEFT JOIN toolgate.person_keys t ON t.tenant_id = a.tenant_id AND t.pseudonym = a.target;

-- The ERP changes the gate made, per tenant: the ERP's rows are the DBA's, so the gate's record
-- of each change is the audit row of the call or confirmation that made it (the first, never a
-- replay), with its target and the value the value function gave. An outbox tool's PENDING is
-- not one (the ERP has done nothing yet when the intent is queued): its effect is the dispatch
-- settlement that learned the ERP did it, under the actor who asked for it (named as in audit_log).
CREATE VIEW toolgate.effects AS
SELECT a.tenant_id, a.tool, coalesce(t.person, a.target) AS target, coalesce(k.person, a.by) AS actor, a.proposal_id,
       a.value, a.at
  FROM (SELECT x.tenant_id, x.tool, x.target, CASE WHEN x.kind = 'dispatch' THEN x.detail->>'asked_by' ELSE x.actor END AS by,
               x.proposal_id, (x.detail->'value'->>'amount')::numeric AS value, x.at
          FROM toolgate.audit x
         WHERE (x.outcome = 'SUCCEEDED' AND NOT x.replayed AND x.kind IN ('call', 'confirm'))
            OR (x.kind = 'dispatch' AND x.effects > 0)) a
  LEFT JOIN toolgate.person_keys k ON k.tenant_id = a.tenant_id AND k.pseudonym = a.by
  LEFT JOIN toolgate.person_keys t ON t.tenant_id = a.tenant_id AND t.pseudonym = a.target;

-- Seed 000's counters per tenant, plus the effects the gate made, the outbox's intents not
-- yet delivered (pending) and those given up after the dispatcher's attempts (dead_letters). Calls whose identity failed have no verified tenant and are counted under tenant_id NULL.
CREATE VIEW toolgate.panel AS
WITH calls AS (
    SELECT a.tenant_id,
           count(*) FILTER (WHERE a.kind = 'call'
                              AND a.rule IS DISTINCT FROM 'schema_invalid'
                              AND a.rule IS DISTINCT FROM 'identity_invalid') AS schema_valid,
           count(*) FILTER (WHERE a.rule = 'schema_invalid') AS schema_rejected,
           count(*) FILTER (WHERE a.outcome = 'BLOCKED') AS blocked_actions,
           count(*) FILTER (WHERE a.replayed) AS duplicates_suppressed,
           count(*) FILTER (WHERE a.rule = 'human_declined' AND NOT a.replayed) AS confirmation_denied,
           count(*) FILTER (WHERE a.outcome = 'PARTIAL' AND NOT a.replayed) AS partial_results
      FROM toolgate.audit a
     GROUP BY a.tenant_id
), made AS (
    SELECT e.tenant_id, count(*) AS effects FROM toolgate.effects e GROUP BY e.tenant_id
), queued AS (
    SELECT o.tenant_id, count(*) FILTER (WHERE o.state = 'PENDING') AS pending,
           count(*) FILTER (WHERE o.state = 'DEAD') AS dead_letters
      FROM toolgate.outbox o WHERE o.state IN ('PENDING', 'DEAD') GROUP BY o.tenant_id
)
SELECT coalesce(c.tenant_id, m.tenant_id, q.tenant_id) AS tenant_id,
       coalesce(c.schema_valid, 0) AS schema_valid,
       coalesce(c.schema_rejected, 0) AS schema_rejected,
       coalesce(c.blocked_actions, 0) AS blocked_actions,
       coalesce(c.duplicates_suppressed, 0) AS duplicates_suppressed,
       coalesce(c.confirmation_denied, 0) AS confirmation_denied,
       coalesce(c.partial_results, 0) AS partial_results,
       coalesce(m.effects, 0) AS effects,
       coalesce(q.pending, 0) AS pending,
       coalesce(q.dead_letters, 0) AS dead_letters
  FROM calls c FULL JOIN made m ON m.tenant_id = c.tenant_id
  FULL JOIN queued q ON q.tenant_id = coalesce(c.tenant_id, m.tenant_id);

-- Seed 001's three alerts.
CREATE VIEW toolgate.alert_denials_per_hour AS
SELECT tenant_id, pg_catalog.date_trunc('hour', at) AS hour, count(*) AS denials
  FROM toolgate.audit
 WHERE outcome IN ('BLOCKED', 'REJECTED')
 GROUP BY tenant_id, pg_catalog.date_trunc('hour', at);

CREATE VIEW toolgate.alert_repeated_denials AS
SELECT tenant_id, conversation_id, tool, count(*) AS denials, min(at) AS first_at, max(at) AS last_at
  FROM toolgate.audit
 WHERE outcome IN ('BLOCKED', 'REJECTED') AND conversation_id IS NOT NULL
 GROUP BY tenant_id, conversation_id, tool
HAVING count(*) >= 3;

-- tool_not_allowed for a tool the tenant has no policy row for: injected content pushing the
-- agent toward a capability it does not have, or a misrouted call. Check configuration first.
CREATE VIEW toolgate.alert_tool_not_allowed AS
SELECT a.tenant_id, a.tool, count(*) AS attempts, max(a.at) AS last_at
  FROM toolgate.audit a
 WHERE a.rule = 'tool_not_allowed'
   AND NOT EXISTS (SELECT 1 FROM toolgate.policies p WHERE p.tenant_id = a.tenant_id AND p.tool = a.tool)
 GROUP BY a.tenant_id, a.tool;

-- The outbox's intents that need a person: DEAD (given up after the dispatcher's attempts; the
-- ledger answers UNCERTAIN until someone reconciles it with the ERP), PARTIAL (the ERP did it, the
-- finish function is not done), UNCERTAIN (sent, not known yet), and PENDING ones older than 15
-- minutes (the dispatcher is not running, or writes are off). No argument and no request: what
-- the intent is, where it stands, and the ERP's last error word.
CREATE VIEW toolgate.alert_outbox AS
SELECT o.tenant_id, o.tool, o.idempotency_key, o.target, o.endpoint, o.state, o.attempts, o.last_error,
       o.created_at, o.claimed_at, o.next_attempt_at
  FROM toolgate.outbox o
 WHERE o.state IN ('DEAD', 'PARTIAL', 'UNCERTAIN')
    OR (o.state = 'PENDING' AND o.created_at < pg_catalog.now() - interval '15 minutes');

-- Every tool a call can name, with the schema in force: those a DBA defined
-- (toolgate.define_tool, define_read_tool). What an MCP server lists as its tools.
CREATE VIEW toolgate.tool_catalog AS
SELECT t.tool, t.kind, t.description, t.sensitive, s.version AS schema_version, s.schema,
       t.defined_by, b.version AS definition_version, b.defined_at
  FROM toolgate.tools t
  JOIN LATERAL (SELECT ts.version, ts.schema FROM toolgate.tool_schemas ts
                 WHERE ts.tool = t.tool ORDER BY ts.version DESC LIMIT 1) s ON true
  LEFT JOIN toolgate.tool_bindings b ON b.tool = t.tool;

------------------------------------------------------------------------------------------------
-- Metrics (docs/observability.md): what a Prometheus exporter reads
-- (observability/postgres_exporter/queries.yaml), each a gauge per tenant (and '(unverified)'),
-- each tenant read through its own index range, so a scrape never reads the whole audit.
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
