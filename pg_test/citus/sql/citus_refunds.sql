-- Seed 001's refund test on the cluster, through tenant_call: allowlist first, value second,
-- quota last (the two cheap denials leave the conversation's counter untouched), a retry that
-- replays, the order's availability and state, and another tenant's order. acme's rows and
-- refunds' ERP are on one worker; the quota counts exactly there.
SET SESSION AUTHORIZATION toolgate_citus_app;
\set acme `${TOOLGATE_MINT:?} id acme ana atendente`
\set bravo `${TOOLGATE_MINT:?} id bravo bia atendente`
-- Not on acme's allowlist; over acme's value limit (R$ 480,00 > R$ 200,00).
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_call('acme', :'acme', 'c1', 'cancelar_assinatura',
       '{"assinatura_id": "s1", "idempotency_key": "seed001-cancel-1"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_call('acme', :'acme', 'c1', 'emitir_reembolso',
       '{"valor_brl": "480.00", "pedido_id": "p1", "idempotency_key": "seed001-over-1"}') r;
-- Two admitted, the third over the quota; a retry of the first replays.
SELECT r->>'outcome' AS outcome, r->'result'->>'valor' AS valor FROM toolgate.tenant_call('acme', :'acme', 'c1', 'emitir_reembolso',
       '{"valor_brl": "10.00", "pedido_id": "p1", "idempotency_key": "seed001-ok-1"}') r;
SELECT r->>'outcome' AS outcome, r->'result'->>'valor' AS valor FROM toolgate.tenant_call('acme', :'acme', 'c1', 'emitir_reembolso',
       '{"valor_brl": "10.00", "pedido_id": "p1", "idempotency_key": "seed001-ok-2"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_call('acme', :'acme', 'c1', 'emitir_reembolso',
       '{"valor_brl": "10.00", "pedido_id": "p1", "idempotency_key": "seed001-ok-3"}') r;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.tenant_call('acme', :'acme', 'c1', 'emitir_reembolso',
       '{"valor_brl": "10.00", "pedido_id": "p1", "idempotency_key": "seed001-ok-1"}') r;
-- More than the order has left, an order in a state the row does not allow, bravo's order asked
-- by acme (as missing as one that does not exist), and bravo, which has no row for the tool.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_call('acme', :'acme', 'c2', 'emitir_reembolso',
       '{"valor_brl": "90.00", "pedido_id": "p2", "idempotency_key": "seed001-budget-1"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_call('acme', :'acme', 'c2', 'emitir_reembolso',
       '{"valor_brl": "9.00", "pedido_id": "p3", "idempotency_key": "seed001-state-1"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_call('acme', :'acme', 'c2', 'emitir_reembolso',
       '{"valor_brl": "9.00", "pedido_id": "p4", "idempotency_key": "seed001-bravos-1"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_call('bravo', :'bravo', 'c1', 'emitir_reembolso',
       '{"valor_brl": "1.00", "pedido_id": "p4", "idempotency_key": "seed001-bravo-1"}') r;
-- The read tool: the customer's note comes back as marked data.
SELECT r->>'outcome' AS outcome, r->'result'->'observacao'->>'untrusted' AS untrusted
  FROM toolgate.tenant_read('acme', :'acme', 'consultar_pedido', '{"pedido_id": "p2"}') r;
RESET SESSION AUTHORIZATION;
SELECT tenant_id, pedido_id, valor, idempotency_key FROM refunds.reembolsos ORDER BY idempotency_key;
SELECT tenant_id, pedido_id, reembolsado FROM refunds.pedidos ORDER BY tenant_id, pedido_id;
SELECT tenant_id, conversation_id, tool, used FROM toolgate.quota_usage WHERE tenant_id IN ('acme', 'bravo') ORDER BY 2;
SELECT tool, outcome, coalesce(rule, '-') AS rule, replayed, count(*)
  FROM toolgate.audit WHERE tenant_id IN ('acme', 'bravo') GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4;
