-- The person says no: CANCELLED human_declined, nothing changes, and the key stays settled as
-- declined (a retry replays the refusal; a new intent needs a new key).
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
\set args '{"order_id": "747", "reason": "Inspeção validada", "idempotency_key": "declined-747-a"}'
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_close(:'sup', 'conv-declined', :'args') r \gset
\set no `${TOOLGATE_MINT:?} yes shopping-a :pid não 0 typed decline`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->>'isError' AS is_error FROM toolgate.confirm(:'sup', :'no') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->>'replayed' AS replayed
  FROM toolgate.request_close(:'sup', 'conv-declined', :'args') r;
-- A "yes" for the declined proposal changes nothing either.
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.confirm(:'sup', :'yes') r;
RESET ROLE;
SELECT status FROM maintenance.work_orders WHERE order_id = '747';
SELECT status FROM toolgate.proposals WHERE idempotency_key = 'declined-747-a';
