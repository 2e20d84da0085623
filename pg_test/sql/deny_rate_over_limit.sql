-- Two close requests per conversation for shopping-c: the third is BLOCKED rate_over_limit.
-- Denials before the quota step and replays consume nothing; another conversation has its own.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-c user-40 supervisor`
\set tech `${TOOLGATE_MINT:?} id shopping-c user-41 technician`
-- Denied by role and by state first: no quota spent.
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'tech', 'conv-quota', '{"order_id": "802", "reason": "Inspeção validada", "idempotency_key": "quota-802-t"}') r;
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'sup', 'conv-quota', '{"order_id": "801", "reason": "Inspeção validada", "idempotency_key": "quota-801-a"}') r;
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'sup', 'conv-quota', '{"order_id": "802", "reason": "Inspeção validada", "idempotency_key": "quota-802-a"}') r;
-- A replay of the same key is free.
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.request_close(:'sup', 'conv-quota', '{"order_id": "802", "reason": "Inspeção validada", "idempotency_key": "quota-802-a"}') r;
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'sup', 'conv-quota', '{"order_id": "803", "reason": "Inspeção validada", "idempotency_key": "quota-803-a"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'sup', 'conv-quota', '{"order_id": "804", "reason": "Inspeção validada", "idempotency_key": "quota-804-a"}') r;
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'sup', 'conv-quota-2', '{"order_id": "804", "reason": "Inspeção validada", "idempotency_key": "quota-804-b"}') r;
RESET ROLE;
SELECT conversation_id, used FROM toolgate.quota_usage WHERE tenant_id = 'shopping-c' ORDER BY 1;
SELECT order_id, status FROM maintenance.work_orders WHERE tenant_id = 'shopping-c' ORDER BY 1;
