-- Registering an identity provider (issue 15): the JWKS document is checked before anything is
-- written, each refusal names the key and the reason, and nothing is left half-written. Keys are
-- built here from bytes (the PyJWT-made documents are in tests/identity_providers.rs).
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
-- The agent may do none of it.
SET ROLE toolgate_agent;
SELECT toolgate.set_tenant_issuer('shopping-d', 'idp-x', 'org_e');
SELECT count(*) FROM toolgate.issuers;
RESET ROLE;
DELETE FROM toolgate.tenant_issuers;
DELETE FROM toolgate.issuers;
