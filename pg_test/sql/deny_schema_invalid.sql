-- Valid JSON of the wrong shape is REJECTED schema_invalid with JSON Pointer paths, never an
-- exception; too big, too deep, NaN-like and out-of-range numbers are refused before the schema.
-- Nothing reaches the ERP; every call leaves an audit row.
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
-- An extra property.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->'errors' AS errors
  FROM toolgate.request_close(:'sup', 'conv-schema',
       '{"order_id": "747", "reason": "Inspeção validada", "idempotency_key": "schema-747-a", "dangerous_extra": true}') r;
-- A tenant smuggled into the arguments is just another unknown property.
SELECT r->>'rule' AS rule, r->'errors'->0->>'keyword' AS keyword
  FROM toolgate.request_close(:'sup', 'conv-schema',
       '{"order_id": "747", "reason": "Inspeção validada", "idempotency_key": "schema-747-b", "tenant": "shopping-b"}') r;
-- Wrong types, a bad pattern, a short key, a missing property.
SELECT e->>'instancePath' AS path, e->>'keyword' AS keyword
  FROM toolgate.request_close(:'sup', 'conv-schema', '{"order_id": "74a", "reason": 5, "idempotency_key": "short"}') r,
       jsonb_array_elements(r->'errors') e;
SELECT e->>'instancePath' AS path, e->>'keyword' AS keyword, e->>'message' AS message
  FROM toolgate.request_close(:'sup', 'conv-schema', '{"order_id": "747"}') r, jsonb_array_elements(r->'errors') e;
-- Not an object, NULL.
SELECT r->>'rule' AS rule, r->'errors'->0->>'keyword' AS keyword FROM toolgate.request_close(:'sup', 'conv-schema', '[1, 2]') r;
SELECT r->>'rule' AS rule, r->'errors'->0->>'keyword' AS keyword FROM toolgate.request_close(:'sup', 'conv-schema', NULL) r;
-- A number no double can hold, a huge one, absurd nesting, 17 KiB of arguments.
SELECT r->>'rule' AS rule, r->'errors' AS errors FROM toolgate.request_close(:'sup', 'conv-schema', '{"order_id": 1e400}') r;
SELECT r->>'rule' AS rule, r->'errors' AS errors FROM toolgate.request_close(:'sup', 'conv-schema', '{"order_id": 1e30}') r;
SELECT r->>'rule' AS rule, r->'errors'->0->>'keyword' AS keyword
  FROM toolgate.request_close(:'sup', 'conv-schema', (repeat('[', 40) || '1' || repeat(']', 40))::jsonb) r;
SELECT r->>'rule' AS rule, r->'errors'->0->>'keyword' AS keyword
  FROM toolgate.request_close(:'sup', 'conv-schema', jsonb_build_object('reason', repeat('x', 17000))) r;
-- NaN and Infinity are not JSON: Postgres refuses them before the gate is called.
SELECT toolgate.request_close(NULL, 'conv-schema', '{"order_id": NaN}');
-- A conversation id is required and printable.
SELECT r->>'rule' AS rule, r->'errors'->0->>'keyword' AS keyword
  FROM toolgate.request_close(:'sup', NULL, '{"order_id": "747", "reason": "Inspeção validada", "idempotency_key": "schema-747-c"}') r;
RESET ROLE;
SELECT count(*) AS effects FROM maintenance.close_requests WHERE order_id = '747';
SELECT count(*) AS ledger_rows FROM toolgate.ledger WHERE idempotency_key LIKE 'schema-%';
SELECT outcome, rule, count(*), bool_and(args_hmac IS NULL OR length(args_hmac) = 64) AS hmac_only
  FROM toolgate.audit WHERE conversation_id = 'conv-schema' OR (conversation_id IS NULL AND rule = 'schema_invalid')
 GROUP BY outcome, rule;
