-- The kill switch. On-call turns writes off (globally, or for one tool) and cannot turn them
-- back on; reads keep working; only an administrator reopens.
\set VERBOSITY terse
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
\set args '{"order_id": "748", "reason": "Inspeção validada", "idempotency_key": "switch-748-a"}'
SET ROLE toolgate_operator;
SELECT toolgate.set_writes_enabled(false);
SELECT toolgate.set_writes_enabled(true);
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'sup', 'conv-switch', :'args') r;
SELECT r->>'outcome' AS outcome, r->'result'->>'status' AS status FROM toolgate.read_order(:'sup', '748') r;
-- The agent cannot touch the switch at all.
SELECT toolgate.set_writes_enabled(true);
SET ROLE toolgate_admin;
SELECT toolgate.set_writes_enabled(true);
-- Off for request_close only.
SET ROLE toolgate_operator;
SELECT toolgate.set_writes_enabled(false, 'request_close');
SET ROLE toolgate_agent;
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'sup', 'conv-switch', :'args') r;
SET ROLE toolgate_admin;
SELECT toolgate.set_writes_enabled(true, 'request_close');
SELECT toolgate.set_writes_enabled(false, 'no_such_tool');
SELECT scope, enabled, changed_by FROM toolgate.write_switches ORDER BY scope;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'sup', 'conv-switch', :'args') r;
RESET ROLE;
SELECT count(*) AS effects FROM maintenance.close_requests WHERE order_id = '748';
