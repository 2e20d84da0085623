-- What the person is shown and what counts as consent, per tier. The policy row of shopping-a:
-- tier 1, raised to 2 above R$ 100 and to 3 above R$ 400. The text names part, quantity, unit
-- price, total, cost centre, order and tenant; tier 2 adds the budget before and after; tier 3
-- takes only the exact challenge word, typed.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
-- Tier 1: 4 × F-200 = R$ 50,00.
SELECT r->'proposal'->>'tier' AS tier, r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS pid
  FROM toolgate.request_purchase_part(:'sup', 'conv-tier1',
       '{"order_id": "753", "part_id": "F-200", "quantity": 4, "cost_center": "CC-MANUT", "idempotency_key": "tier1-753-a"}') r \gset
\echo tier :tier
\echo :text
\set t `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->'result'->>'total' AS total, r->'result'->>'budget_left' AS budget_left
  FROM toolgate.confirm(:'sup', :'t') r;
-- Tier 2: 10 × F-200 = R$ 125,00; the budget is shown; "sim" is enough.
SELECT r->'proposal'->>'tier' AS tier, r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS pid
  FROM toolgate.request_purchase_part(:'sup', 'conv-tier2',
       '{"order_id": "753", "part_id": "F-200", "quantity": 10, "cost_center": "CC-MANUT", "idempotency_key": "tier2-753-a"}') r \gset
\echo tier :tier
\echo :text
\set t `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->'result'->>'total' AS total FROM toolgate.confirm(:'sup', :'t') r;
-- Tier 3: 1 × B42-MOTOR = R$ 480,00.
SELECT r->'proposal'->>'tier' AS tier, r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS pid
  FROM toolgate.request_purchase_part(:'sup', 'conv-tier3',
       '{"order_id": "753", "part_id": "B42-MOTOR", "quantity": 1, "cost_center": "CC-MANUT", "idempotency_key": "tier3-753-a"}') r \gset
\echo tier :tier
SELECT regexp_replace(:'text', 'CONFIRMAR-[0-9A-F]{6}', 'CONFIRMAR-XXXXXX') AS text;
SELECT substring(:'text' from 'CONFIRMAR-[0-9A-F]{6}') AS word \gset
-- A plain "sim", the word said by voice, the word in lower case: none is consent at tier 3.
\set t `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'t') r;
\set t `${TOOLGATE_MINT:?} yes shopping-a :pid :word 0 voice`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'t') r;
SELECT lower(:'word') AS lower_word \gset
\set t `${TOOLGATE_MINT:?} yes shopping-a :pid :lower_word`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'t') r;
-- The exact word, typed.
\set t `${TOOLGATE_MINT:?} yes shopping-a :pid :word`
SELECT r->>'outcome' AS outcome, r->'result'->>'total' AS total FROM toolgate.confirm(:'sup', :'t') r;
RESET ROLE;
SELECT part_id, quantity, unit_price, total, cost_center FROM maintenance.purchases
 WHERE order_id = '753' ORDER BY purchased_at, total;
SELECT spent FROM maintenance.cost_centers WHERE cost_center = 'CC-MANUT';
SELECT detail->>'reason' AS reason, detail->>'tier' AS tier FROM toolgate.audit
 WHERE kind = 'confirm' AND rule = 'confirmation_invalid' AND conversation_id = 'conv-tier3' ORDER BY audit_id;
