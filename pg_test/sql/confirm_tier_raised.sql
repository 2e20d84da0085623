-- Consent was given for the tier the person read. If the policy asks for a higher tier by the time
-- the answer arrives, the answer is BLOCKED confirmation_invalid (tier_raised) and nothing changes,
-- even though the words would satisfy the new tier.
\set VERBOSITY terse
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected, note)
    VALUES ('shopping-a', '790', 'open', true, '');
SET ROLE toolgate_agent;
\set sup `${TOOLGATE_MINT:?} id shopping-a user-17 supervisor`
SELECT r->>'outcome' AS outcome, r->'proposal'->>'tier' AS tier, r->'proposal'->>'id' AS pid
  FROM toolgate.request_close(:'sup', 'conv-tier-raised',
       '{"order_id": "790", "reason": "Inspeção validada", "idempotency_key": "tier-raised-790"}') r \gset
SELECT :'outcome' AS outcome, :'tier' AS tier;
-- Meanwhile the DBA raises close requests to tier 2 (a "sim" is still a tier-2 answer).
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-a', 'request_close', allowed => true, roles => ARRAY['supervisor'], tier => 2) > 0 AS raised;
SET ROLE toolgate_agent;
\set yes `${TOOLGATE_MINT:?} yes shopping-a :pid sim`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->>'isError' AS is_error FROM toolgate.confirm(:'sup', :'yes') r;
RESET ROLE;
SELECT status FROM maintenance.work_orders WHERE tenant_id = 'shopping-a' AND order_id = '790';
SELECT count(*) AS close_requests FROM maintenance.close_requests WHERE order_id = '790';
SELECT outcome, rule, detail->>'reason' AS reason, detail->>'tier' AS tier
  FROM toolgate.audit WHERE kind = 'confirm' AND target = '790';
-- Put seed 000's policy back.
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-a', 'request_close', allowed => true, roles => ARRAY['supervisor'], tier => 1) > 0 AS restored;
RESET ROLE;
