-- A verified technician of shopping-a is not a supervisor: BLOCKED role_not_allowed.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set tech `${TOOLGATE_MINT:?} id shopping-a user-22 technician`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.request_close(:'tech', 'conv-role', '{"order_id": "748", "reason": "Inspeção validada", "idempotency_key": "role-748-a"}') r;
RESET ROLE;
SELECT detail->>'role' AS role, policy_version FROM toolgate.audit WHERE rule = 'role_not_allowed';
