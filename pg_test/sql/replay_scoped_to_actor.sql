-- An idempotency key answers the actor who reserved it. Another actor of the same tenant who
-- sends it gets REJECTED idempotency_key_reused: not the first actor's reply (a settled key), not
-- their proposal and its challenge (a pending key), not even whether the arguments match.
\set VERBOSITY terse
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected) VALUES
    ('shopping-a', '774', 'open', true), ('shopping-c', '875', 'open', true);
SET ROLE toolgate_agent;
\set args '{"order_id": "774", "reason": "Inspeção validada", "idempotency_key": "actor-774-a"}'
\set maria `${TOOLGATE_MINT:?} id shopping-a maria supervisor`
\set joao `${TOOLGATE_MINT:?} id shopping-a joao supervisor`
-- A pending key: Maria's proposal.
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'maria', 'conv-actor', :'args') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r ? 'proposal' AS has_proposal
  FROM toolgate.request_close(:'joao', 'conv-actor-j', :'args') r;
-- Maria's retry still gets her proposal.
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.request_close(:'maria', 'conv-actor', :'args') r;
-- A settled key (shopping-c applies at once).
\set args_c '{"order_id": "875", "reason": "Inspeção validada", "idempotency_key": "actor-875-a"}'
\set ana `${TOOLGATE_MINT:?} id shopping-c ana supervisor`
\set rui `${TOOLGATE_MINT:?} id shopping-c rui supervisor`
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'ana', 'conv-actor-c', :'args_c') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r ? 'result' AS has_result
  FROM toolgate.request_close(:'rui', 'conv-actor-r', :'args_c') r;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.request_close(:'ana', 'conv-actor-c', :'args_c') r;
RESET ROLE;
SELECT actor, rule, detail->>'reason' AS reason FROM toolgate.audit_log
 WHERE conversation_id LIKE 'conv-actor%' AND rule IS NOT NULL ORDER BY audit_id;
