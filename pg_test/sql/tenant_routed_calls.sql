-- The entry points routed by a tenant (tenant_call, tenant_read, tenant_confirm: what a Citus
-- cluster delegates to the node holding the tenant's rows). On one node they are call, read and
-- confirm with one check more: the verified token must name the tenant the call was routed by;
-- another tenant, or none, is BLOCKED identity_invalid (tenant_mismatch) before anything else is
-- read or written, and audited as unverified.
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected, note) VALUES
    ('shopping-c', '870', 'open', true, ''),
    ('shopping-a', '871', 'open', true, '');
SET ROLE toolgate_agent;
\set supc `${TOOLGATE_MINT:?} id shopping-c user-40 supervisor`
\set supa `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
-- Routed by another tenant, or by none: refused, whatever the arguments.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.tenant_call('shopping-a', :'supc', 'conv-routed', 'request_close',
       '{"order_id": "870", "reason": "Inspeção validada", "idempotency_key": "routed-870-b"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.tenant_call(NULL, :'supc', 'conv-routed', 'request_close',
       '{"order_id": "870", "reason": "Inspeção validada", "idempotency_key": "routed-870-c"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.tenant_read('shopping-a', :'supc', 'read_order', '{"order_id": "870"}') r;
-- Routed by the token's tenant: the whole gate (shopping-c applies a close at once).
SELECT r->>'outcome' AS outcome, r->'result'->>'status' AS status
  FROM toolgate.tenant_call('shopping-c', :'supc', 'conv-routed', 'request_close',
       '{"order_id": "870", "reason": "Inspeção validada", "idempotency_key": "routed-870-a"}') r;
SELECT r->>'outcome' AS outcome, r->'result'->>'status' AS status
  FROM toolgate.tenant_read('shopping-c', :'supc', 'read_order', '{"order_id": "870"}') r;
-- A confirmation routed by another tenant is refused too; routed by its own, it applies.
SELECT r->>'outcome' AS outcome, r->'proposal'->>'id' AS pid
  FROM toolgate.tenant_call('shopping-a', :'supa', 'conv-routed', 'request_close',
       '{"order_id": "871", "reason": "Inspeção validada", "idempotency_key": "routed-871-a"}') r \gset
\echo :outcome
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_confirm('shopping-c', :'supa', :'yes') r;
SELECT r->>'outcome' AS outcome, r->'result'->>'status' AS status
  FROM toolgate.tenant_confirm('shopping-a', :'supa', :'yes') r;
RESET ROLE;
SELECT order_id, status FROM maintenance.work_orders WHERE order_id IN ('870', '871') ORDER BY 1;
SELECT idempotency_key, state FROM toolgate.ledger WHERE idempotency_key LIKE 'routed-%' ORDER BY 1;
SELECT kind, tenant_id, outcome, rule, detail->>'reason' AS reason
  FROM toolgate.audit WHERE detail->>'reason' = 'tenant_mismatch' ORDER BY audit_id;
-- toolgate.distribute() lays the tables out on a Citus coordinator; without Citus it refuses.
\set VERBOSITY terse
SELECT * FROM toolgate.distribute();
