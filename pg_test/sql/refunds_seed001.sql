-- Seed 001's test against examples/refunds: an ERP the extension knows nothing of (its own
-- schema, owner and tables), bound with define_tool and driven through toolgate.call. The order
-- of the checks is seed 001's: allowlist first, value second, quota last; the two cheap denials
-- leave the conversation's counter untouched. Then the state and availability rules, and a
-- tenant with no row.
\set VERBOSITY terse
SET client_min_messages = warning;
\getenv root TOOLGATE_ROOT
\set ECHO none
\o /dev/null
\i :root/examples/refunds/refunds.sql
\o
\set ECHO all
RESET client_min_messages;
\set pk `${TOOLGATE_MINT:?} key idp-acme`
SELECT toolgate.add_key('acme', 'idp-acme', 'identity', :'pk');
\set pk `${TOOLGATE_MINT:?} key idp-bravo`
SELECT toolgate.add_key('bravo', 'idp-bravo', 'identity', :'pk');
SELECT tool, sensitive, defined_by IS NOT NULL AS defined FROM toolgate.tools ORDER BY tool;
SELECT tool, version, target, value, effect FROM toolgate.tool_bindings ORDER BY tool;
SET ROLE toolgate_auditor;
SELECT tool, kind, sensitive, schema_version, definition_version, schema->'required' AS required
  FROM toolgate.tool_catalog ORDER BY tool;
RESET ROLE;

SET ROLE toolgate_agent;
\set acme `${TOOLGATE_MINT:?} id acme ana atendente`
\set bravo `${TOOLGATE_MINT:?} id bravo bia atendente`
-- Not on acme's allowlist (its row says no).
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'acme', 'c1', 'cancelar_assinatura',
       '{"assinatura_id": "s1", "idempotency_key": "seed001-cancel-1"}') r;
-- Over acme's value limit (R$ 480,00 > R$ 200,00).
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'acme', 'c1', 'emitir_reembolso',
       '{"valor_brl": "480.00", "pedido_id": "p1", "idempotency_key": "seed001-over-1"}') r;
RESET ROLE;
SELECT count(*) AS counter_rows FROM toolgate.quota_usage WHERE tenant_id = 'acme' AND conversation_id = 'c1';
SET ROLE toolgate_agent;
-- Two admitted, the third over the quota.
SELECT i, r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule, r->'result'->>'valor' AS valor
  FROM generate_series(1, 3) i,
       toolgate.call(:'acme', 'c1', 'emitir_reembolso',
                     jsonb_build_object('valor_brl', '10.00', 'pedido_id', 'p1', 'idempotency_key', 'seed001-ok-' || i)) r
 ORDER BY i;
-- A retry of the first: its reply again, no second refund, no quota.
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.call(:'acme', 'c1', 'emitir_reembolso',
       '{"valor_brl": "10.00", "pedido_id": "p1", "idempotency_key": "seed001-ok-1"}') r;
-- More than the order has left (R$ 90,00 of R$ 80,00), an order in a state the row does not
-- allow, an order that does not exist, and bravo's order p4 asked by acme (as
-- missing as one that does not exist).
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'acme', 'c2', 'emitir_reembolso',
       '{"valor_brl": "90.00", "pedido_id": "p2", "idempotency_key": "seed001-budget-1"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'acme', 'c2', 'emitir_reembolso',
       '{"valor_brl": "9.00", "pedido_id": "p3", "idempotency_key": "seed001-state-1"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'acme', 'c2', 'emitir_reembolso',
       '{"valor_brl": "9.00", "pedido_id": "p9", "idempotency_key": "seed001-none-1"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'acme', 'c2', 'emitir_reembolso',
       '{"valor_brl": "9.00", "pedido_id": "p4", "idempotency_key": "seed001-bravos-1"}') r;
-- The schema holds for a defined tool as for any: a tenant in the arguments, a number for text.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->'errors' AS errors FROM toolgate.call(:'acme', 'c2',
       'emitir_reembolso', '{"valor_brl": 9, "pedido_id": "p1", "tenant": "bravo", "idempotency_key": "seed001-schema-1"}') r;
-- bravo has no row for the tool: not allowed, whatever it asks.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'bravo', 'c1', 'emitir_reembolso',
       '{"valor_brl": "1.00", "pedido_id": "p1", "idempotency_key": "seed001-bravo-1"}') r;
-- An unknown tool, and a name no tool could have (the audit keeps a fixed text for it).
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'acme', 'c3', 'emitir_reembolsos', '{}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'acme', 'c3', repeat('Ω', 5000), '{}') r;
-- The read tool: the customer's note comes back as marked data (it tries to instruct the agent);
-- bravo cannot read acme's order; reads go on while writes are off; a read tool is not a write
-- tool, nor the other way round.
SELECT r->>'outcome' AS outcome, r->'result'->'observacao' AS observacao, r->'content'->0->>'text' AS summary
  FROM toolgate.read(:'acme', 'consultar_pedido', '{"pedido_id": "p2"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.read(:'bravo', 'consultar_pedido', '{"pedido_id": "p2"}') r;
RESET ROLE;
SELECT toolgate.set_writes_enabled(false);
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->'result'->>'reembolsado' AS reembolsado
  FROM toolgate.read(:'acme', 'consultar_pedido', '{"pedido_id": "p1"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.call(:'acme', 'c4', 'emitir_reembolso',
       '{"valor_brl": "1.00", "pedido_id": "p1", "idempotency_key": "seed001-off-1"}') r;
RESET ROLE;
SELECT toolgate.set_writes_enabled(true);
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->'errors'->0->>'message' AS error
  FROM toolgate.call(:'acme', 'c4', 'consultar_pedido', '{"pedido_id": "p1"}') r;
SELECT r->>'outcome' AS outcome, r->'errors'->0->>'message' AS error
  FROM toolgate.read(:'acme', 'emitir_reembolso', '{"pedido_id": "p1"}') r;
-- The agent cannot reach the ERP or its functions around the gate.
SELECT refunds.emitir_reembolso('{"tenant": "acme"}', '{"valor_brl": "1.00", "pedido_id": "p1"}');
SELECT count(*) FROM refunds.pedidos;
RESET ROLE;
SELECT tenant_id, pedido_id, valor, pedido_por, idempotency_key FROM refunds.reembolsos ORDER BY reembolso_id;
SELECT tenant_id, pedido_id, reembolsado FROM refunds.pedidos ORDER BY tenant_id, pedido_id;
SELECT tenant_id, conversation_id, tool, used FROM toolgate.quota_usage WHERE tenant_id IN ('acme', 'bravo');
SELECT tenant_id, tool, outcome, coalesce(rule, '-') AS rule, replayed, detail
  FROM toolgate.audit WHERE tenant_id IN ('acme', 'bravo') ORDER BY audit_id;
