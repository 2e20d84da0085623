-- A supervisor's close request becomes a proposal naming target, action, consequence and
-- tenant; a channel-signed "sim" from the same person applies it, with the ledger and audit.
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'outcome' AS outcome, coalesce(r->>'rule', '-') AS rule, r->'proposal'->>'tier' AS tier,
       r->'proposal'->>'text' AS text, r->'proposal'->>'id' AS pid
  FROM toolgate.request_close(:'sup', 'conv-happy',
       '{"order_id": "746", "reason": "Inspeção validada", "idempotency_key": "happy-746-a"}') r \gset
\echo :outcome :rule tier :tier
\echo :text
-- Nothing changed yet.
SELECT r->'result'->>'status' AS status FROM toolgate.read_order(:'sup', '746') r;
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed, r->'result'->>'order_id' AS order_id,
       r->'result'->>'status' AS status
  FROM toolgate.confirm(:'sup', :'yes') r;
SELECT r->'result'->>'status' AS status FROM toolgate.read_order(:'sup', '746') r;
RESET ROLE;
SELECT tenant_id, order_id, requested_by, idempotency_key FROM maintenance.close_requests WHERE order_id = '746';
SELECT state, reply->>'outcome' AS reply FROM toolgate.ledger WHERE idempotency_key = 'happy-746-a';
SELECT status FROM toolgate.proposals WHERE idempotency_key = 'happy-746-a';
SELECT kind, outcome, coalesce(rule, '-') AS rule, target, policy_version, schema_version
  FROM toolgate.audit WHERE tenant_id = 'shopping-a' AND target = '746' ORDER BY audit_id;
