-- A confirmation runs authorization again, sensitivity included: a purchase proposed under a
-- complete policy row, whose row then lost its quota, is BLOCKED policy_incomplete when the person
-- answers, and nothing is bought.
\set VERBOSITY terse
\set pk `${TOOLGATE_MINT:?} key chan-shopping-c`
SELECT toolgate.add_key('shopping-c', 'chan-shopping-c', 'channel', :'pk');
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-c', 'request_purchase_part', allowed => true, roles => ARRAY['supervisor'],
                           tier => 1, max_value => 500, max_calls_per_conversation => 5) > 0 AS complete;
SET ROLE toolgate_agent;
\set sup_c `${TOOLGATE_MINT:?} id shopping-c user-70 supervisor`
SELECT r->>'outcome' AS outcome, r->'proposal'->>'tier' AS tier, r->'proposal'->>'id' AS pid
  FROM toolgate.request_purchase_part(:'sup_c', 'conv-incomplete-later',
       '{"order_id": "853", "part_id": "F-200", "quantity": 2, "cost_center": "CC-C", "idempotency_key": "incomplete-later-853"}') r \gset
SELECT :'outcome' AS outcome, :'tier' AS tier;
-- The DBA drops the row's quota before the person answers.
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-c', 'request_purchase_part', clear => ARRAY['max_calls_per_conversation']) > 0
       AS incomplete;
SET ROLE toolgate_agent;
\set yes `${TOOLGATE_MINT:?} yes shopping-c :pid sim`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'sup_c', :'yes') r;
RESET ROLE;
SELECT count(*) AS purchases FROM maintenance.purchases WHERE idempotency_key = 'incomplete-later-853';
SELECT outcome, rule, detail->'missing' AS missing
  FROM toolgate.audit WHERE kind = 'confirm' AND tenant_id = 'shopping-c';
