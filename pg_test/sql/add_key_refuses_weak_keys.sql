-- A small-order Ed25519 public key (here the identity point) verifies forged signatures under
-- lenient checks. add_key refuses it, and verification is strict: even a weak key row written
-- around add_key verifies nothing (security review F8).
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.add_key('shopping-d', 'weak-idp', 'identity', 'AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA');
RESET ROLE;
SELECT count(*) AS weak_rows FROM toolgate.keys WHERE kid = 'weak-idp';
-- The owner writes the row directly; a token signed with R = the identity point and S = 0.
INSERT INTO toolgate.keys (tenant_id, kid, purpose, public_key)
VALUES ('shopping-d', 'weak-idp', 'identity', '\x0100000000000000000000000000000000000000000000000000000000000000');
CREATE FUNCTION pg_temp.b64url(b bytea) RETURNS text LANGUAGE sql
RETURN pg_catalog.rtrim(pg_catalog.translate(pg_catalog.encode(b, 'base64'), E'+/\n', '-_'), '=');
SELECT pg_temp.b64url(pg_catalog.convert_to('{"alg":"EdDSA","kid":"weak-idp"}', 'UTF8')) || '.' ||
       pg_temp.b64url(pg_catalog.convert_to(pg_catalog.format(
           '{"sub":"mallory","tenant":"shopping-d","role":"supervisor","exp":%s}',
           extract(epoch FROM pg_catalog.now())::bigint + 600), 'UTF8')) || '.' ||
       pg_temp.b64url('\x01'::bytea || pg_catalog.decode(pg_catalog.repeat('00', 63), 'hex')) AS forged \gset
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.read_order(:'forged', '741') r;
RESET ROLE;
SELECT detail->>'reason' AS reason FROM toolgate.audit WHERE kind = 'read' ORDER BY audit_id DESC LIMIT 1;
DELETE FROM toolgate.keys WHERE kid = 'weak-idp';
