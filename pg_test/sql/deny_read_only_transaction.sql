-- In a read-only transaction the gate cannot write its audit row, so it refuses every call at
-- entry, before any token is read, with one fixed error (the same for a valid and an invalid
-- token), no detail and no backtrace, and writes a LOG line (security review F7).
\set VERBOSITY default
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
\set args '{"order_id": "746", "reason": "Inspeção validada", "idempotency_key": "read-only-746"}'
BEGIN READ ONLY;
SELECT toolgate.request_close(:'sup', 'conv-ro', :'args');
ROLLBACK;
BEGIN READ ONLY;
SELECT toolgate.request_close('not.a.token', 'conv-ro', :'args');
ROLLBACK;
BEGIN READ ONLY;
SELECT toolgate.read_order(:'sup', '746');
ROLLBACK;
BEGIN READ ONLY;
SELECT toolgate.confirm(:'sup', 'not.a.token');
ROLLBACK;
SET default_transaction_read_only = on;
SELECT toolgate.request_purchase_part(:'sup', 'conv-ro', '{}');
RESET default_transaction_read_only;
RESET ROLE;
SELECT count(*) AS audit_rows FROM toolgate.audit WHERE conversation_id = 'conv-ro';
