-- A retry with the same key never makes a second proposal or a second effect: a pending key
-- returns the same proposal, a settled key replays the stored result; both count as suppressed
-- duplicates and consume no quota.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
\set args '{"order_id": "750", "reason": "Inspeção validada", "idempotency_key": "replay-750-a"}'
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_close(:'sup', 'conv-replay', :'args') r \gset
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed, r->'proposal'->>'id' = :'pid' AS same_proposal
  FROM toolgate.request_close(:'sup', 'conv-replay', :'args') r;
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.confirm(:'sup', :'yes') r;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed, r->'result'->>'status' AS status
  FROM toolgate.request_close(:'sup', 'conv-replay', :'args') r;
-- The same confirmation again replays too.
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.confirm(:'sup', :'yes') r;
RESET ROLE;
SELECT count(*) AS effects FROM maintenance.close_requests WHERE order_id = '750';
SELECT count(*) AS proposals FROM toolgate.proposals WHERE idempotency_key = 'replay-750-a';
SELECT kind, outcome, replayed FROM toolgate.audit WHERE conversation_id = 'conv-replay' ORDER BY audit_id;
