-- A confirmation counts only when the tenant's channel signed it, for this very proposal, from
-- the person who asked, after the proposal was made, in words that say yes.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
\set other `${TOOLGATE_MINT:?} id shopping-a user-18 supervisor`
\set args '{"order_id": "748", "reason": "Inspeção validada", "idempotency_key": "confirm-748-a"}'
SELECT r->'proposal'->>'id' AS pid FROM toolgate.request_close(:'sup', 'conv-confirm', :'args') r \gset
-- "sim" as a prefix is not "sim".
\set t `${TOOLGATE_MINT:?} yes shopping-a :pid 'sim, mas não feche'`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'t') r;
-- Typed before the proposal existed.
\set t `${TOOLGATE_MINT:?} yes shopping-a :pid sim -120`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'t') r;
-- Another supervisor's session.
\set t `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'other', :'t') r;
-- Signed by the identity provider's key, or by another tenant's channel: forged.
\set t `${TOOLGATE_MINT:?} confkey idp-shopping-a :pid sim`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'t') r;
\set t `${TOOLGATE_MINT:?} confkey chan-shopping-b :pid sim`
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'sup', :'t') r;
-- Garbage and NULL.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'sup', 'x.y.z') r;
SELECT r->>'rule' AS rule FROM toolgate.confirm(:'sup', NULL) r;
-- None of that moved anything; the proposal is still live and a real "sim" applies it.
\set t `${TOOLGATE_MINT:?} yes shopping-a :pid Sim.`
SELECT r->>'outcome' AS outcome FROM toolgate.confirm(:'sup', :'t') r;
RESET ROLE;
SELECT detail->>'reason' AS reason, count(*) FROM toolgate.audit
 WHERE kind = 'confirm' AND rule = 'confirmation_invalid' GROUP BY 1 ORDER BY 1;
SELECT count(*) AS effects FROM maintenance.close_requests WHERE order_id = '748';
