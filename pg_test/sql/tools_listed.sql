-- toolgate.tools: what an agent host lists for a caller. Exactly the tools whose policy row for
-- the caller's verified tenant allows them and lists one of the caller's roles, each with its
-- newest schema as stored; writes stay listed while they are switched off; a DBA's change is
-- seen by the next listing. A refused token gets the gate's BLOCKED identity_invalid. Nothing is
-- audited: a listing is not a call. It runs last: the scenarios before it defined more tools
-- and gave shopping-a and shopping-d policy rows for them.
\set VERBOSITY terse
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
\set tech `${TOOLGATE_MINT:?} id shopping-a user-22 technician`
\set supb `${TOOLGATE_MINT:?} id shopping-b user-31 supervisor`
\set supd `${TOOLGATE_MINT:?} id shopping-d user-40 supervisor`
\set expired `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor -1`
SELECT count(*) AS audit_rows_before FROM toolgate.audit \gset
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'isError' AS is_error, r->'result'->>'tenant' AS tenant,
       r->'content'->0->>'text' AS text
  FROM toolgate.tools(:'sup') r;
SELECT t->>'name' AS name, t->>'kind' AS kind, t->>'tier' AS tier, t->>'sensitive' AS sensitive,
       t->>'writes_enabled' AS writes_enabled, t->>'schema_version' AS schema_version,
       t->'inputSchema'->'required' AS required
  FROM jsonb_array_elements(toolgate.tools(:'sup')->'result'->'tools') t;
-- A technician of shopping-a: the read only. shopping-b has no purchase row.
SELECT t->>'name' AS technician_a FROM jsonb_array_elements(toolgate.tools(:'tech')->'result'->'tools') t;
SELECT t->>'name' AS supervisor_b FROM jsonb_array_elements(toolgate.tools(:'supb')->'result'->'tools') t;
SELECT t->>'name' AS supervisor_d FROM jsonb_array_elements(toolgate.tools(:'supd')->'result'->'tools') t;
-- Refused tokens: no list at all.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->>'isError' AS is_error, r ? 'result' AS has_result
  FROM toolgate.tools(:'expired') r;
SELECT r->>'rule' AS rule FROM toolgate.tools(NULL) r;
SELECT r->>'rule' AS rule FROM toolgate.tools('not.a.token') r;
RESET ROLE;
-- The schema is the newest one stored, unchanged.
SELECT t->'inputSchema' = (SELECT schema FROM toolgate.tool_schemas s WHERE s.tool = t->>'name'
                             ORDER BY version DESC LIMIT 1) AS schema_as_stored
  FROM jsonb_array_elements(toolgate.tools(:'sup')->'result'->'tools') t;
-- Writes off for request_close: still listed, marked; on again.
SET ROLE toolgate_operator;
SELECT toolgate.set_writes_enabled(false, 'request_close');
SET ROLE toolgate_agent;
SELECT t->>'name' AS name, t->>'writes_enabled' AS writes_enabled
  FROM jsonb_array_elements(toolgate.tools(:'sup')->'result'->'tools') t;
SET ROLE toolgate_admin;
SELECT toolgate.set_writes_enabled(true, 'request_close');
-- The DBA forbids request_purchase_part for shopping-a: gone from the next listing; allowed
-- again, back. A role taken off the row: gone for that role.
SELECT toolgate.set_policy('shopping-a', 'request_purchase_part', allowed => false,
                           roles => ARRAY['supervisor'], tier => 1, max_value => 900,
                           max_calls_per_conversation => 3, tier2_above => 100, tier3_above => 400);
SET ROLE toolgate_agent;
SELECT t->>'name' AS after_forbid FROM jsonb_array_elements(toolgate.tools(:'sup')->'result'->'tools') t;
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-a', 'request_purchase_part', allowed => true,
                           roles => ARRAY['supervisor'], tier => 1, max_value => 900,
                           max_calls_per_conversation => 3, tier2_above => 100, tier3_above => 400);
SELECT toolgate.set_policy('shopping-a', 'read_order', allowed => true, roles => ARRAY['supervisor'], tier => 0);
SET ROLE toolgate_agent;
SELECT t->>'name' AS supervisor_a FROM jsonb_array_elements(toolgate.tools(:'sup')->'result'->'tools') t;
SELECT t->>'name' AS technician_a FROM jsonb_array_elements(toolgate.tools(:'tech')->'result'->'tools') t;
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-a', 'read_order', allowed => true,
                           roles => ARRAY['supervisor', 'technician'], tier => 0);
RESET ROLE;
SELECT count(*) - :audit_rows_before AS audit_rows_added FROM toolgate.audit;
-- Only the application's role may list.
SET ROLE toolgate_auditor;
SELECT toolgate.tools(:'sup');
RESET ROLE;
