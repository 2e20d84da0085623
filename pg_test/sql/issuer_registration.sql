-- Registering an identity provider (issue 15): the JWKS document is checked before anything is
-- written, each refusal names the key and the reason, and nothing is left half-written. Keys are
-- built here from bytes (the PyJWT-made documents are in tests/identity_providers.rs).
-- Then correcting one (issue 28): alter_issuer, drop_issuer, unset_tenant_issuer, and what
-- set_tenant_issuer says it replaced; tokens are EdDSA ones made by `mint jwt`.
\set VERBOSITY terse
CREATE FUNCTION pg_temp.b64url(b bytea) RETURNS text LANGUAGE sql
RETURN pg_catalog.rtrim(pg_catalog.translate(pg_catalog.encode(b, 'base64'), E'+/\n', '-_'), '=');
-- An RSA modulus of BITS bits (its top bit set), as the JWK "n" of a key with kid KID.
CREATE FUNCTION pg_temp.rsa(kid text, bits int) RETURNS jsonb LANGUAGE sql
RETURN jsonb_build_object('kty', 'RSA', 'kid', kid, 'e', 'AQAB',
       'n', pg_temp.b64url('\x80'::bytea || decode(repeat('ff', bits / 8 - 1), 'hex')));
SET ROLE toolgate_admin;
-- Refused, each with its reason:
SELECT toolgate.add_issuer('idp-x', 'https://idp.example/', ARRAY['toolgate'],
       jsonb_build_object('keys', jsonb_build_array(pg_temp.rsa('short', 1024))), 'tenant');
SELECT toolgate.add_issuer('idp-x', 'https://idp.example/', ARRAY['toolgate'],
       '{"keys": [{"kty": "oct", "kid": "h", "k": "c2VjcmV0"}]}', 'tenant');
SELECT toolgate.add_issuer('idp-x', 'https://idp.example/', ARRAY['toolgate'],
       jsonb_build_object('keys', jsonb_build_array(pg_temp.rsa('k', 2048) || '{"alg": "HS256"}')), 'tenant');
SELECT toolgate.add_issuer('idp-x', 'https://idp.example/', ARRAY['toolgate'],
       jsonb_build_object('keys', jsonb_build_array(pg_temp.rsa('k', 2048), pg_temp.rsa('k', 2048))), 'tenant');
SELECT toolgate.add_issuer('idp-x', 'https://idp.example/', ARRAY['toolgate'],
       '{"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "w", "x": "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}]}', 'tenant');
SELECT toolgate.add_issuer('idp-x', 'https://idp.example/', ARRAY['toolgate'], '{"keys": []}', 'tenant');
SELECT toolgate.add_issuer('idp-x', 'https://idp.example/', ARRAY[]::text[],
       jsonb_build_object('keys', jsonb_build_array(pg_temp.rsa('k', 2048))), 'tenant');
RESET ROLE;
SELECT count(*) AS issuers FROM toolgate.issuers;
-- The issuers' URLs an MCP server serves for its resource as its authorization_servers (RFC
-- 9728): none yet. The agent may read them, and nothing else of an issuer.
SET ROLE toolgate_agent;
SELECT toolgate.authorization_servers('toolgate') AS authorization_servers;
RESET ROLE;
SET ROLE toolgate_admin;
-- Accepted: an RSA signing key, and an encryption key that is skipped (1 signing key).
SELECT toolgate.add_issuer('idp-x', 'https://idp.example/', ARRAY['toolgate'],
       jsonb_build_object('keys', jsonb_build_array(pg_temp.rsa('k1', 2048),
                                                    pg_temp.rsa('enc', 2048) || '{"use": "enc"}')), 'tenant');
-- Rotation refuses a bad document and keeps the old one; an unknown issuer is an error.
SELECT toolgate.set_issuer_keys('idp-x', jsonb_build_object('keys', jsonb_build_array(pg_temp.rsa('k2', 1024))));
SELECT toolgate.set_issuer_keys('idp-nobody', jsonb_build_object('keys', jsonb_build_array(pg_temp.rsa('k2', 2048))));
SELECT toolgate.set_issuer_keys('idp-x', jsonb_build_object('keys', jsonb_build_array(pg_temp.rsa('k2', 2048), pg_temp.rsa('k1', 2048))));
-- A tenant trusts one issuer; one claim value is one tenant.
SELECT toolgate.set_tenant_issuer('shopping-d', 'idp-x', 'org_d');
SELECT toolgate.set_tenant_issuer('shopping-d', 'idp-x', 'org_d2');
SELECT toolgate.set_tenant_issuer('shopping-a', 'idp-x', 'org_d2');
SELECT toolgate.set_tenant_issuer('no-such-tenant', 'idp-x', 'org_z');
RESET ROLE;
SELECT issuer, iss, audiences, jsonb_array_length(jwks->'keys') AS keys, tenant_claim, actor_claim, roles_claim
  FROM toolgate.issuers;
SELECT tenant_id, issuer, claim_value FROM toolgate.tenant_issuers ORDER BY tenant_id;
-- Corrections (issue 28). alter_issuer takes add_issuer's arguments by the same names, each one
-- left out (or NULL) kept, and checks them as add_issuer does; a refusal writes nothing.
\set xk `${TOOLGATE_MINT:?} key iss-x-ed`
\set yk `${TOOLGATE_MINT:?} key iss-y-ed`
CREATE FUNCTION pg_temp.okp(kid text, x text) RETURNS jsonb LANGUAGE sql
RETURN jsonb_build_object('keys', jsonb_build_array(jsonb_build_object('kty', 'OKP', 'crv', 'Ed25519', 'kid', kid, 'x', x)));
-- What a token gets: the tenant of an agent's listing, or the reason of a DBA's dry run.
CREATE FUNCTION pg_temp.verdict(token text) RETURNS text LANGUAGE sql
RETURN coalesce(toolgate.tools(token)->'result'->>'tenant',
                'refused: ' || (toolgate.explain_call(token, 'request_close', 'conv-iss', '{}')->'steps'->0->'detail'->>'reason'));
SET ROLE toolgate_admin;
SELECT toolgate.alter_issuer('idp-nobody', audiences => ARRAY['toolgate']);
SELECT toolgate.alter_issuer('idp-x');
SELECT toolgate.alter_issuer('idp-x', jwks => jsonb_build_object('keys', jsonb_build_array(pg_temp.rsa('short', 1024))));
SELECT toolgate.alter_issuer('idp-x', audiences => ARRAY[]::text[]);
SELECT toolgate.alter_issuer('idp-x', audiences => ARRAY['toolgate', NULL]);
SELECT toolgate.alter_issuer('idp-x', tenant_claim => '');
SELECT toolgate.add_issuer('idp-y', 'https://idp-y.example/', ARRAY['toolgate'], pg_temp.okp('iss-y-ed', :'yk'), 'org');
SELECT toolgate.alter_issuer('idp-x', iss => 'https://idp-y.example/');
RESET ROLE;
-- Two issuers: their iss, sorted, and nothing else of them. Only those whose audiences include
-- the resource asked for (T10 of the third security review): another server's resource is told
-- none of them.
SET ROLE toolgate_agent;
SELECT toolgate.authorization_servers('toolgate') AS authorization_servers;
SELECT toolgate.authorization_servers('https://mcp.other.example/mcp') AS other_resource;
RESET ROLE;
SELECT issuer, iss, audiences, jsonb_path_query_array(jwks, '$.keys[*].kid') AS kids, tenant_claim, actor_claim, roles_claim
  FROM toolgate.issuers ORDER BY issuer;
-- Accepted: an Ed25519 key in place of the RSA ones, the tenant in claim "org", the roles in "groups".
SET ROLE toolgate_admin;
SELECT toolgate.alter_issuer('idp-x', jwks => pg_temp.okp('iss-x-ed', :'xk'), tenant_claim => 'org', roles_claim => 'groups');
RESET ROLE;
SELECT issuer, iss, audiences, jsonb_path_query_array(jwks, '$.keys[*].kid') AS kids, tenant_claim, actor_claim, roles_claim
  FROM toolgate.issuers ORDER BY issuer;
\set old_aud `${TOOLGATE_MINT:?} jwt iss-x-ed '{"iss": "https://idp.example/", "aud": "toolgate", "sub": "u-50", "org": "org_d2", "groups": ["supervisor"]}'`
\set new_aud `${TOOLGATE_MINT:?} jwt iss-x-ed '{"iss": "https://idp.example/", "aud": "toolgate-v2", "sub": "u-50", "org": "org_d2", "groups": ["supervisor"]}'`
SELECT pg_temp.verdict(:'old_aud') AS old_audience, pg_temp.verdict(:'new_aud') AS new_audience;
-- Another session (psql of $PGBIN, set by scripts/lib.sh, or of PATH) changes the audiences and
-- commits; this one, which verified (and remembers) the old audience's token, follows at its
-- next call.
\set other `"${PGBIN:+$PGBIN/}psql" -X -q -At -v ON_ERROR_STOP=1 -d :'DBNAME' -c 'SET ROLE toolgate_admin' -c "SELECT toolgate.alter_issuer('idp-x', audiences => ARRAY['toolgate-v2'])" 2>&1`
SELECT :'other' AS other_session_signing_keys;
SELECT pg_temp.verdict(:'old_aud') AS old_audience, pg_temp.verdict(:'new_aud') AS new_audience;
-- A claim renamed in this session: the same token no longer carries the tenant; renamed back.
SET ROLE toolgate_admin;
SELECT toolgate.alter_issuer('idp-x', tenant_claim => 'org_id');
RESET ROLE;
SELECT pg_temp.verdict(:'new_aud') AS tenant_claim_org_id;
SET ROLE toolgate_admin;
SELECT toolgate.alter_issuer('idp-x', tenant_claim => 'org');
RESET ROLE;
SELECT pg_temp.verdict(:'new_aud') AS tenant_claim_org;
-- set_tenant_issuer names the mapping it replaces (the same mapping again changes nothing), and
-- the tenant's own Ed25519 identity keys, which stay trusted alongside the issuer until revoked.
\set dk `${TOOLGATE_MINT:?} key idp-shopping-d-extra`
\set ed `${TOOLGATE_MINT:?} idkey idp-shopping-d-extra shopping-d user-41 supervisor`
\set y_tok `${TOOLGATE_MINT:?} jwt iss-y-ed '{"iss": "https://idp-y.example/", "aud": "toolgate", "sub": "u-60", "org": "org_y", "roles": ["supervisor"]}'`
SET ROLE toolgate_admin;
SELECT toolgate.add_key('shopping-d', 'idp-shopping-d-extra', 'identity', :'dk');
SELECT toolgate.set_tenant_issuer('shopping-d', 'idp-y', 'org_y');
SELECT toolgate.set_tenant_issuer('shopping-d', 'idp-y', 'org_y');
RESET ROLE;
SELECT tenant_id, issuer, claim_value FROM toolgate.tenant_issuers ORDER BY tenant_id;
SELECT pg_temp.verdict(:'new_aud') AS idp_x_token, pg_temp.verdict(:'y_tok') AS idp_y_token,
       pg_temp.verdict(:'ed') AS ed25519_token;
SET ROLE toolgate_admin;
SELECT toolgate.revoke_key('idp-shopping-d-extra');
RESET ROLE;
SELECT pg_temp.verdict(:'y_tok') AS idp_y_token, pg_temp.verdict(:'ed') AS ed25519_token_revoked;
-- drop_issuer: refused (with a hint) while a tenant trusts the issuer; unmapped, it goes with its
-- keys, and its tokens with it.
SET ROLE toolgate_admin;
SELECT toolgate.set_tenant_issuer('shopping-a', 'idp-x', 'org_a');
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT toolgate.drop_issuer('idp-x');
\set VERBOSITY terse
SELECT toolgate.unset_tenant_issuer('shopping-a');
SELECT toolgate.unset_tenant_issuer('shopping-a');
SELECT toolgate.drop_issuer('idp-x');
SELECT toolgate.drop_issuer('idp-x');
RESET ROLE;
SELECT issuer FROM toolgate.issuers ORDER BY issuer;
SET ROLE toolgate_agent;
SELECT toolgate.authorization_servers('toolgate') AS authorization_servers;
RESET ROLE;
SELECT tenant_id, issuer, claim_value FROM toolgate.tenant_issuers ORDER BY tenant_id;
SELECT pg_temp.verdict(:'new_aud') AS dropped_issuer_token;
-- Only toolgate_admin may execute them (the owner aside): SECURITY DEFINER, search_path pinned.
SELECT p.oid::regprocedure AS function, p.prosecdef, p.proconfig,
       array(SELECT CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
               FROM aclexplode(p.proacl) a
              WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner ORDER BY 1) AS execute
  FROM pg_proc p
 WHERE p.oid IN ('toolgate.alter_issuer(text, text, text[], jsonb, text, text, text)'::regprocedure,
                 'toolgate.drop_issuer(text)'::regprocedure, 'toolgate.unset_tenant_issuer(text)'::regprocedure,
                 'toolgate.set_tenant_issuer(text, text, text)'::regprocedure)
 ORDER BY p.oid::regprocedure::text;
-- authorization_servers is the agent's (and the owner's) alone: SECURITY DEFINER, STABLE, search_path pinned.
SELECT p.oid::regprocedure AS function, p.prosecdef, p.provolatile, p.proconfig,
       array(SELECT CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
               FROM aclexplode(p.proacl) a
              WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner ORDER BY 1) AS execute
  FROM pg_proc p
 WHERE p.oid = 'toolgate.authorization_servers(text)'::regprocedure;
-- The agent may do none of it.
SET ROLE toolgate_agent;
SELECT toolgate.set_tenant_issuer('shopping-d', 'idp-x', 'org_e');
SELECT toolgate.unset_tenant_issuer('shopping-d');
SELECT toolgate.alter_issuer('idp-y', audiences => ARRAY['agent']);
SELECT toolgate.drop_issuer('idp-y');
SELECT count(*) FROM toolgate.issuers;
RESET ROLE;
DELETE FROM toolgate.tenant_issuers;
DELETE FROM toolgate.issuers;
