-- One idempotency key, one intent: the same key with other arguments is REJECTED
-- idempotency_key_reused, never the old result. Key order and whitespace do not matter (RFC 8785).
\set VERBOSITY terse
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'sup', 'conv-reuse',
       '{"order_id": "749", "reason": "Inspeção validada", "idempotency_key": "reuse-749-a"}') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.request_close(:'sup', 'conv-reuse',
       '{"order_id": "749", "reason": "Outro motivo qualquer", "idempotency_key": "reuse-749-a"}') r;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.request_close(:'sup', 'conv-reuse',
       '{"idempotency_key": "reuse-749-a",   "reason": "Inspeção validada", "order_id": "749"}') r;
-- Another tenant's identical key is another key.
\set sup_c `${TOOLGATE_MINT:?} id shopping-c user-40 supervisor`
SELECT r->>'outcome' AS outcome FROM toolgate.request_close(:'sup_c', 'conv-reuse',
       '{"order_id": "806", "reason": "Outro motivo qualquer", "idempotency_key": "reuse-749-a"}') r;
RESET ROLE;
SELECT tenant_id, state FROM toolgate.ledger WHERE idempotency_key = 'reuse-749-a' ORDER BY 1;
