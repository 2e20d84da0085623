-- Tier 0 in the policy row: the call applies directly, no proposal, one effect.
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-c user-40 supervisor`
SELECT r->>'outcome' AS outcome, r ? 'proposal' AS has_proposal, r->'result'->>'order_id' AS order_id,
       r->'result'->>'status' AS status
  FROM toolgate.request_close(:'sup', 'conv-tier0',
       '{"order_id": "801", "reason": "Inspeção validada", "idempotency_key": "tier0-801-a"}') r;
RESET ROLE;
SELECT status FROM maintenance.work_orders WHERE tenant_id = 'shopping-c' AND order_id = '801';
SELECT count(*) AS proposals FROM toolgate.proposals WHERE tenant_id = 'shopping-c';
SELECT count(*) AS effects FROM maintenance.close_requests WHERE tenant_id = 'shopping-c';
