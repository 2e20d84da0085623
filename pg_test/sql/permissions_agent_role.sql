-- toolgate_agent reaches the gate through its entry points and nothing else: no table,
-- sequence, view or internal function, no object in the schema.
\set VERBOSITY terse
SET ROLE toolgate_agent;
SELECT count(*) FROM maintenance.work_orders;
SELECT * FROM toolgate.keys;
SELECT * FROM toolgate.ledger;
SELECT * FROM toolgate.audit_key;
SELECT * FROM toolgate.audit_log;
SELECT * FROM toolgate.panel;
INSERT INTO maintenance.close_requests (tenant_id, order_id, reason, requested_by, idempotency_key)
VALUES ('shopping-a', '742', 'bypass', 'me', 'bypass-1');
UPDATE maintenance.work_orders SET status = 'closed';
DELETE FROM toolgate.audit;
INSERT INTO toolgate.policies (tenant_id, tool, allowed, roles, tier, confirm_ttl)
VALUES ('shopping-d', 'request_close', true, '{supervisor}', 0, '1 hour');
SELECT nextval('toolgate.audit_audit_id_seq');
SELECT toolgate.gate_explain('request_close', NULL, NULL, NULL);
SELECT toolgate.parse_public_key('x');
SELECT toolgate.set_policy('shopping-d', 'request_close', true, '{supervisor}', 0);
SELECT toolgate.add_key('shopping-d', 'mine', 'identity', 'x');
SELECT toolgate.explain_call(NULL, 'request_close', 'c', '{}');
CREATE TABLE toolgate.squat (x int);
CREATE FUNCTION toolgate.request_close(int) RETURNS int LANGUAGE sql AS 'SELECT 1';
-- What it may do.
SELECT r->>'rule' AS rule FROM toolgate.read_order(NULL, '742') r;
SELECT toolgate.authorization_servers('toolgate') AS authorization_servers;
RESET ROLE;
-- Every entry point is SECURITY DEFINER with a pinned search_path, pg_temp last; or, for the three
-- named after their tools, a SQL-standard body bound when it was created (no search_path is ever
-- consulted) that runs with the caller's rights and calls one of those.
SELECT p.proname, l.lanname AS language, p.prosecdef, p.proconfig, p.prosqlbody IS NOT NULL AS bound_body
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
 WHERE n.nspname = 'toolgate' AND has_function_privilege('toolgate_agent', p.oid, 'EXECUTE')
 ORDER BY 1;
-- And PUBLIC can execute nothing in the schema.
SELECT count(*) AS public_functions FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'toolgate' AND has_function_privilege('public', p.oid, 'EXECUTE');
