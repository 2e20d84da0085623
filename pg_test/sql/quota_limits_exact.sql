-- A quota of q admits exactly q calls per conversation: 0 admits none, 1 admits one.
\set VERBOSITY terse
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected, note) VALUES
    ('shopping-c', '807', 'open', true, ''),
    ('shopping-c', '808', 'open', true, '');
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-c', 'request_close', allowed => true, roles => ARRAY['supervisor'],
                           tier => 0, max_calls_per_conversation => 0) > 0 AS none;
SET ROLE toolgate_agent;
\set sup_c `${TOOLGATE_MINT:?} id shopping-c user-70 supervisor`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'sup_c', 'conv-quota-zero',
       '{"order_id": "807", "reason": "Inspeção validada", "idempotency_key": "quota-zero-807"}') r;
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-c', 'request_close', allowed => true, roles => ARRAY['supervisor'],
                           tier => 0, max_calls_per_conversation => 1) > 0 AS one;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'sup_c', 'conv-quota-one',
       '{"order_id": "807", "reason": "Inspeção validada", "idempotency_key": "quota-one-807"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'sup_c', 'conv-quota-one',
       '{"order_id": "808", "reason": "Inspeção validada", "idempotency_key": "quota-one-808"}') r;
-- Put the set-up's policy back.
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-c', 'request_close', allowed => true, roles => ARRAY['supervisor'],
                           tier => 0, max_calls_per_conversation => 2) > 0 AS restored;
RESET ROLE;
SELECT order_id, status FROM maintenance.work_orders WHERE order_id IN ('807', '808') ORDER BY 1;
