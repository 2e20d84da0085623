-- Seed 000's lab on the cluster, as the application's login, through the entry points routed by
-- tenant: each call is delegated to the worker that holds its tenant's rows and runs there whole
-- (the gate, the ERP's bound functions and their row-level security, in one backend).
SET SESSION AUTHORIZATION toolgate_citus_app;
\set supa `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
\set supb `${TOOLGATE_MINT:?} id shopping-b user-31 supervisor`
RESET SESSION AUTHORIZATION;
-- Two-phase commits so far, on each node (none are recovered in this suite).
CREATE TEMP TABLE twopc AS
SELECT nodeport, result::int AS before FROM run_command_on_all_nodes($$SELECT count(*) FROM pg_dist_transaction$$)
  JOIN pg_dist_node USING (nodeid);
SET SESSION AUTHORIZATION toolgate_citus_app;

-- 1. Invalid arguments (no reason): REJECTED schema_invalid.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.tenant_call('shopping-a', :'supa', 'lab-1', 'request_close',
       '{"order_id": "742", "idempotency_key": "lab-invalid-742"}') r;
-- 2. Another tenant's order: exactly what an order that does not exist gets, for writes and reads.
-- (Each call is a statement of its own: a statement calling two is not delegated, and runs on the
-- coordinator, where the gate refuses it: routing_required, citus_routing.)
SELECT toolgate.tenant_call('shopping-a', :'supa', 'lab-2', 'request_close',
       '{"order_id": "743", "reason": "Inspeção validada", "idempotency_key": "lab-cross-743"}') AS a \gset
SELECT toolgate.tenant_call('shopping-a', :'supa', 'lab-2', 'request_close',
       '{"order_id": "999", "reason": "Inspeção validada", "idempotency_key": "lab-cross-999"}') AS b \gset
SELECT :'a'::jsonb = :'b'::jsonb AS indistinguishable, :'a'::jsonb->>'outcome' AS outcome, :'a'::jsonb->>'rule' AS rule;
SELECT toolgate.tenant_read('shopping-a', :'supa', 'read_order', '{"order_id": "743"}') AS a \gset
SELECT toolgate.tenant_read('shopping-a', :'supa', 'read_order', '{"order_id": "999"}') AS b \gset
SELECT :'a'::jsonb = :'b'::jsonb AS indistinguishable, :'a'::jsonb->>'rule' AS rule;
-- 3. A token routed to another tenant's worker: refused there, nothing run for it.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule
  FROM toolgate.tenant_call('shopping-b', :'supa', 'lab-3', 'request_close',
       '{"order_id": "742", "reason": "Inspeção validada", "idempotency_key": "lab-routed-742"}') r;
-- 4. A close becomes a proposal; the person's "sim", signed by the channel, applies it once.
SELECT r->>'outcome' AS outcome, r->'proposal'->>'tier' AS tier, r->'proposal'->>'id' AS pid
  FROM toolgate.tenant_call('shopping-a', :'supa', 'lab-4', 'request_close',
       '{"order_id": "742", "reason": "Inspeção validada", "idempotency_key": "lab-close-742"}') r \gset
\echo :outcome tier :tier
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->'result'->>'status' AS status, r->>'replayed' AS replayed
  FROM toolgate.tenant_confirm('shopping-a', :'supa', :'yes') r;
-- 5. The reply lost and the call retried with the same key, and the confirmation sent twice:
-- the same reply, replayed, and still one effect.
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed
  FROM toolgate.tenant_call('shopping-a', :'supa', 'lab-4', 'request_close',
       '{"order_id": "742", "reason": "Inspeção validada", "idempotency_key": "lab-close-742"}') r;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.tenant_confirm('shopping-a', :'supa', :'yes') r;
-- 6. A person who says no: CANCELLED human_declined, nothing applied.
SELECT r->'proposal'->>'id' AS pid
  FROM toolgate.tenant_call('shopping-a', :'supa', 'lab-6', 'request_close',
       '{"order_id": "746", "reason": "Inspeção validada", "idempotency_key": "lab-close-746"}') r \gset
\set no `${TOOLGATE_MINT:?} yes shopping-a :pid não 0 typed decline`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_confirm('shopping-a', :'supa', :'no') r;
-- 7. A note that says to ignore the rules comes back marked as untrusted data.
SELECT r->>'outcome' AS outcome, r->'result'->'note' AS note
  FROM toolgate.tenant_read('shopping-b', :'supb', 'read_order', '{"order_id": "743"}') r;
-- 8. A purchase on the budget, confirmed: the cost centre charged once.
SELECT r->>'outcome' AS outcome, r->'proposal'->>'tier' AS tier, r->'proposal'->>'id' AS pid
  FROM toolgate.tenant_call('shopping-a', :'supa', 'lab-8', 'request_purchase_part',
       '{"order_id": "741", "part_id": "F-200", "quantity": 2, "cost_center": "CC-MANUT", "idempotency_key": "lab-buy-741"}') r \gset
\echo :outcome tier :tier
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->'result'->>'total' AS total, r->'result'->>'budget_left' AS budget_left
  FROM toolgate.tenant_confirm('shopping-a', :'supa', :'yes') r;
RESET SESSION AUTHORIZATION;

-- What the ERP and the gate hold.
SELECT tenant_id, order_id, status FROM maintenance.work_orders WHERE order_id IN ('742', '743', '746') ORDER BY 2;
SELECT count(*) AS close_requests FROM maintenance.close_requests WHERE order_id = '742';
SELECT count(*) AS purchases, sum(total) AS total FROM maintenance.purchases WHERE idempotency_key = 'lab-buy-741';
SELECT spent FROM maintenance.cost_centers WHERE tenant_id = 'shopping-a' AND cost_center = 'CC-MANUT';
SELECT idempotency_key, state FROM toolgate.ledger WHERE idempotency_key LIKE 'lab-%' ORDER BY 1;
SELECT tenant_id, kind, outcome, coalesce(rule, '-') AS rule, replayed, count(*)
  FROM toolgate.audit WHERE conversation_id LIKE 'lab-%' OR detail->>'reason' = 'tenant_mismatch'
 GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5;

-- Where each call ran. The plan of a routed call: one task, on the worker holding the tenant's shard.
\getenv keys TOOLGATE_KEYS
\o :keys/plan-a.txt
EXPLAIN (COSTS OFF) SELECT toolgate.tenant_call('shopping-a', NULL, NULL, NULL, NULL);
\o :keys/plan-b.txt
EXPLAIN (COSTS OFF) SELECT toolgate.tenant_call('shopping-b', NULL, NULL, NULL, NULL);
\o
\set tasks_a `sed -n 's/.*Task Count: \([0-9]*\).*/\1/p' :keys/plan-a.txt`
\set port_a `sed -n 's/.*Node: .*port=\([0-9]*\).*/\1/p' :keys/plan-a.txt`
\set tasks_b `sed -n 's/.*Task Count: \([0-9]*\).*/\1/p' :keys/plan-b.txt`
\set port_b `sed -n 's/.*Node: .*port=\([0-9]*\).*/\1/p' :keys/plan-b.txt`
SELECT tenant, tasks, port = (SELECT nodeport FROM pg_dist_shard_placement
                               WHERE shardid = get_shard_id_for_distribution_column('toolgate.ledger', tenant)) AS on_its_worker
  FROM (VALUES ('shopping-a', :'tasks_a', :'port_a'::int), ('shopping-b', :'tasks_b', :'port_b'::int)) v(tenant, tasks, port);
-- Every audit row of the lab's calls drew its id on the node holding its tenant's shard (each
-- node draws from its own range: its group id × 2^48), never on the coordinator.
WITH drawn AS MATERIALIZED (SELECT tenant_id, audit_id >> 48 AS on_group FROM toolgate.audit WHERE conversation_id LIKE 'lab-%')
SELECT tenant_id, count(*) AS rows,
       bool_and(on_group = (SELECT p.groupid FROM pg_dist_placement p
                             WHERE p.shardid = get_shard_id_for_distribution_column('toolgate.audit', tenant_id))) AS on_its_node
  FROM drawn GROUP BY 1 ORDER BY 1;
-- And no call needed a two-phase commit, on any node.
SELECT t.nodeport = (SELECT nodeport FROM pg_dist_node WHERE groupid = 0) AS coordinator,
       r.result::int - t.before AS two_phase_commits
  FROM twopc t JOIN pg_dist_node n USING (nodeport)
  JOIN run_command_on_all_nodes($$SELECT count(*) FROM pg_dist_transaction$$) r USING (nodeid)
 ORDER BY 1 DESC, t.nodeport;
