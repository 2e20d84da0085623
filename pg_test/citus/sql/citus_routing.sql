-- A call that does not run where its tenant's rows are, on a cluster: BLOCKED routing_required,
-- audited under its tenant, nothing read or written for it; the caller is told by name to use the
-- tenant-routed entry points, each the statement's only call, outside a transaction block.
SET SESSION AUTHORIZATION toolgate_citus_app;
\set supa `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
-- 1. The tenant-less entry points: Citus cannot route them, so they run on the coordinator.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.call(:'supa', 'route-1', 'request_close',
       '{"order_id": "742", "reason": "Inspeção validada", "idempotency_key": "route-call-742"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.read(:'supa', 'read_order', '{"order_id": "742"}') r;
-- 2. A routed call in a transaction block: Citus does not delegate it either.
BEGIN;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.tenant_call('shopping-a', :'supa', 'route-2', 'request_close',
       '{"order_id": "742", "reason": "Inspeção validada", "idempotency_key": "route-block-742"}') r;
COMMIT;
-- 3. The same read, delegated: it runs.
SELECT r->>'outcome' AS outcome, r->'result'->>'order_id' AS order_id
  FROM toolgate.tenant_read('shopping-a', :'supa', 'read_order', '{"order_id": "742"}') r;
-- 4. The listing still answers on the coordinator: it reads reference tables only.
SELECT toolgate.tools(:'supa')->>'outcome' AS listing;
RESET SESSION AUTHORIZATION;
-- Each refusal audited under its tenant, with its reason; nothing in the ledger for their keys.
SELECT tenant_id, tool, outcome, rule, detail->>'reason' AS reason, detail->>'routed' AS routed
  FROM toolgate.audit WHERE rule = 'routing_required' ORDER BY at;
SELECT idempotency_key, count(*) AS ledger_rows FROM toolgate.ledger
 WHERE idempotency_key LIKE 'route-%' GROUP BY 1 ORDER BY 1;
