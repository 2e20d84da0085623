-- Configuration reaches the workers' backends, as it does a single node's: a key revoked, an
-- issuer's keys rotated and writes turned off on the coordinator are seen by the very backend on a
-- worker that verified (and remembers) a token a moment before. The configuration tables are
-- reference tables: each node's copy fires the trigger that tells that node's backends.
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected, note) VALUES
    ('shopping-c', '880', 'open', true, ''), ('shopping-c', '881', 'open', true, ''),
    ('shopping-c', '882', 'open', true, '');
SET SESSION AUTHORIZATION toolgate_citus_app;
\set supc `${TOOLGATE_MINT:?} id shopping-c user-40 supervisor`
SELECT r->>'outcome' AS outcome FROM toolgate.tenant_read('shopping-c', :'supc', 'read_order', '{"order_id": "880"}') r;
RESET SESSION AUTHORIZATION;
-- The worker backend that runs the application's calls for shopping-c: when it started.
SELECT (SELECT string_agg(result, ',') FROM run_command_on_placements('toolgate.ledger',
            $$SELECT string_agg(backend_start::text, ',') FROM pg_stat_activity WHERE usename = 'toolgate_citus_app'$$)
        WHERE shardid = get_shard_id_for_distribution_column('toolgate.ledger', 'shopping-c')) AS before \gset

-- 1. The key revoked: the same token, in the same worker backend, is refused at once.
SET ROLE toolgate_admin;
SELECT toolgate.revoke_key('idp-shopping-c');
RESET ROLE;
SET SESSION AUTHORIZATION toolgate_citus_app;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->'content'->0->>'text' AS text
  FROM toolgate.tenant_read('shopping-c', :'supc', 'read_order', '{"order_id": "880"}') r;
RESET SESSION AUTHORIZATION;
SELECT (SELECT string_agg(result, ',') FROM run_command_on_placements('toolgate.ledger',
            $$SELECT string_agg(backend_start::text, ',') FROM pg_stat_activity WHERE usename = 'toolgate_citus_app'$$)
        WHERE shardid = get_shard_id_for_distribution_column('toolgate.ledger', 'shopping-c')) = :'before' AS same_worker_backend;

-- 2. An issuer for shopping-c, its key rotated: the old key's token refused, the new one's accepted.
\set k1 `${TOOLGATE_MINT:?} key iss-c-1`
\set k2 `${TOOLGATE_MINT:?} key iss-c-2`
SET ROLE toolgate_admin;
SELECT toolgate.add_issuer('idp-c', 'https://idp-c.example/', ARRAY['toolgate'],
       jsonb_build_object('keys', jsonb_build_array(jsonb_build_object('kty', 'OKP', 'crv', 'Ed25519', 'kid', 'iss-c-1', 'x', :'k1'))),
       'org', roles_claim => 'groups');
SELECT toolgate.set_tenant_issuer('shopping-c', 'idp-c', 'org_c');
RESET ROLE;
\set old `${TOOLGATE_MINT:?} jwt iss-c-1 '{"iss": "https://idp-c.example/", "aud": "toolgate", "sub": "u-41", "org": "org_c", "groups": ["supervisor"]}'`
\set new `${TOOLGATE_MINT:?} jwt iss-c-2 '{"iss": "https://idp-c.example/", "aud": "toolgate", "sub": "u-41", "org": "org_c", "groups": ["supervisor"]}'`
SET SESSION AUTHORIZATION toolgate_citus_app;
SELECT r->>'outcome' AS outcome FROM toolgate.tenant_read('shopping-c', :'old', 'read_order', '{"order_id": "880"}') r;
RESET SESSION AUTHORIZATION;
SET ROLE toolgate_admin;
SELECT toolgate.set_issuer_keys('idp-c',
       jsonb_build_object('keys', jsonb_build_array(jsonb_build_object('kty', 'OKP', 'crv', 'Ed25519', 'kid', 'iss-c-2', 'x', :'k2'))));
RESET ROLE;
SET SESSION AUTHORIZATION toolgate_citus_app;
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule
  FROM toolgate.tenant_read('shopping-c', :'old', 'read_order', '{"order_id": "880"}') r;
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule
  FROM toolgate.tenant_read('shopping-c', :'new', 'read_order', '{"order_id": "880"}') r;
-- 3. The kill switch: writes off for everyone, reads go on; on again, the write applies.
SELECT r->>'outcome' AS outcome, r->'result'->>'status' AS status FROM toolgate.tenant_call('shopping-c', :'new', 'cfg-1',
       'request_close', '{"order_id": "880", "reason": "Inspeção validada", "idempotency_key": "citus-cfg-880"}') r;
RESET SESSION AUTHORIZATION;
SELECT toolgate.set_writes_enabled(false);
SET SESSION AUTHORIZATION toolgate_citus_app;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_call('shopping-c', :'new', 'cfg-2',
       'request_close', '{"order_id": "881", "reason": "Inspeção validada", "idempotency_key": "citus-cfg-881"}') r;
SELECT r->>'outcome' AS outcome FROM toolgate.tenant_read('shopping-c', :'new', 'read_order', '{"order_id": "881"}') r;
RESET SESSION AUTHORIZATION;
SELECT toolgate.set_writes_enabled(true);
SET SESSION AUTHORIZATION toolgate_citus_app;
SELECT r->>'outcome' AS outcome, r->'result'->>'status' AS status FROM toolgate.tenant_call('shopping-c', :'new', 'cfg-3',
       'request_close', '{"order_id": "881", "reason": "Inspeção validada", "idempotency_key": "citus-cfg-881b"}') r;
RESET SESSION AUTHORIZATION;
SELECT (SELECT string_agg(result, ',') FROM run_command_on_placements('toolgate.ledger',
            $$SELECT string_agg(backend_start::text, ',') FROM pg_stat_activity WHERE usename = 'toolgate_citus_app'$$)
        WHERE shardid = get_shard_id_for_distribution_column('toolgate.ledger', 'shopping-c')) = :'before' AS same_worker_backend;
SELECT order_id, status FROM maintenance.work_orders WHERE order_id IN ('880', '881', '882') ORDER BY 1;
