-- read_order is tenant-scoped, returns third-party text marked as untrusted data with
-- instruction-like fragments flagged, and changes no ERP, ledger or quota row.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup_b `${TOOLGATE_MINT:?} id shopping-b user-31 supervisor`
SELECT jsonb_pretty(r) FROM toolgate.read_order(:'sup_b', '743') r;
-- A malformed id is a contract violation, not an exception.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.read_order(:'sup_b', '74 3; DROP TABLE x') r;
RESET ROLE;
SELECT status FROM maintenance.work_orders WHERE order_id = '743';
-- Reads record the route, the order read and the count, not the content; a refused argument
-- is not recorded.
SELECT kind, tool, target, outcome, detail FROM toolgate.audit WHERE kind = 'read' AND tenant_id = 'shopping-b' ORDER BY audit_id;
