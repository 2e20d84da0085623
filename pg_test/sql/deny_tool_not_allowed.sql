-- Missing configuration is a denial, never a permissive default: shopping-d has no policy row.
-- A row that says allowed = false denies too.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup_d `${TOOLGATE_MINT:?} id shopping-d user-50 supervisor`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.request_close(:'sup_d', 'conv-tool', '{"order_id": "748", "reason": "Inspeção validada", "idempotency_key": "tool-748-a"}') r;
-- Seed 001's third alert: a tenant trying a tool it has no row for.
SET ROLE toolgate_auditor;
SELECT tenant_id, tool, attempts FROM toolgate.alert_tool_not_allowed;
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-d', 'request_close', allowed => false, roles => ARRAY['supervisor'], tier => 1);
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.request_close(:'sup_d', 'conv-tool', '{"order_id": "748", "reason": "Inspeção validada", "idempotency_key": "tool-748-b"}') r;
RESET ROLE;
SELECT detail->>'reason' AS reason, policy_version FROM toolgate.audit WHERE rule = 'tool_not_allowed' ORDER BY audit_id;
