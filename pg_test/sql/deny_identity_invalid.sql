-- Identity comes only from a verified Ed25519 token. Anything else is BLOCKED identity_invalid,
-- audited with a reason code and never with the token.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set args '{"order_id": "748", "reason": "Inspeção validada", "idempotency_key": "identity-748-a"}'
\set good `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
-- NULL, empty, garbage.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(NULL, 'conv-id', :'args') r;
SELECT r->>'rule' AS rule FROM toolgate.request_close('', 'conv-id', :'args') r;
SELECT r->>'rule' AS rule FROM toolgate.request_close('not.a.token', 'conv-id', :'args') r;
-- Expired one second ago.
\set expired `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor -1`
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'expired', 'conv-id', :'args') r;
-- alg "none" with the good token's claims and no signature.
SELECT r->>'rule' AS rule
  FROM toolgate.request_close(
       translate(encode('{"alg":"none","kid":"idp-shopping-a"}'::bytea, 'base64'), '+/=', '-_')
       || '.' || split_part(:'good', '.', 2) || '.', 'conv-id', :'args') r;
-- Signed by shopping-b's identity provider but claiming shopping-a.
\set wrong_idp `${TOOLGATE_MINT:?} idkey idp-shopping-b shopping-a user-17 supervisor`
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'wrong_idp', 'conv-id', :'args') r;
-- Signed by shopping-a's channel key: a channel key proves no identity.
\set channel_signed `${TOOLGATE_MINT:?} idkey chan-shopping-a shopping-a user-17 supervisor`
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'channel_signed', 'conv-id', :'args') r;
-- Signed by a key nobody registered.
\set unused `${TOOLGATE_MINT:?} key rogue-idp`
\set rogue `${TOOLGATE_MINT:?} idkey rogue-idp shopping-a user-17 supervisor`
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'rogue', 'conv-id', :'args') r;
-- The good token with its signature cut off.
SELECT r->>'rule' AS rule FROM toolgate.request_close(split_part(:'good', '.', 1) || '.' || split_part(:'good', '.', 2) || '.', 'conv-id', :'args') r;
-- Reads need an identity too.
SELECT r->>'rule' AS rule FROM toolgate.read_order(NULL, '748') r;
RESET ROLE;
SELECT count(*) AS effects FROM maintenance.close_requests WHERE order_id = '748';
SELECT tenant_id, actor, detail->>'reason' AS reason, count(*)
  FROM toolgate.audit WHERE rule = 'identity_invalid' GROUP BY 1, 2, 3 ORDER BY 3;
-- The good token never reached a row.
SELECT count(*) AS rows_with_token FROM toolgate.audit a WHERE a::text LIKE '%' || split_part(:'good', '.', 3) || '%';
