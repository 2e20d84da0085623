-- Every change to a policy row goes through set_policy, bumps its version and leaves a history
-- row (who, when, old and new). Every audit row names the version it was judged under, and
-- policy_at answers what was in force at a moment.
\set VERBOSITY terse
SELECT now() AS before_change \gset
SELECT pg_sleep(0.01);
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-a', 'request_close', allowed => true, roles => ARRAY['supervisor', 'technician'], tier => 1);
SELECT toolgate.set_policy('shopping-a', 'request_close', allowed => true, roles => ARRAY['supervisor'], tier => 1);
SET ROLE toolgate_agent;
\set tech `${TOOLGATE_MINT:?} id shopping-a user-22 technician`
SELECT r->>'rule' AS rule FROM toolgate.request_close(:'tech', 'conv-version',
       '{"order_id": "742", "reason": "Inspeção validada", "idempotency_key": "version-742-a"}') r;
RESET ROLE;
SELECT version, changed_by, old->'roles' AS old_roles, new->'roles' AS new_roles
  FROM toolgate.policy_history WHERE tenant_id = 'shopping-a' AND tool = 'request_close' ORDER BY version;
SELECT policy_version FROM toolgate.audit WHERE conversation_id = 'conv-version';
SET ROLE toolgate_auditor;
SELECT version, roles FROM toolgate.policy_at('shopping-a', 'request_close', :'before_change');
SELECT version, roles FROM toolgate.policy_at('shopping-a', 'request_close', now());
SELECT version IS NULL AS no_policy_then FROM toolgate.policy_at('shopping-a', 'request_close', '2000-01-01');
RESET ROLE;
-- The admin reads policy rows but cannot write them except through set_policy.
SET ROLE toolgate_admin;
UPDATE toolgate.policies SET tier = 0;
RESET ROLE;
-- A change names what it changes: a setting left out keeps the row's value, and only clear drops
-- a limit, so naming max_value alone never drops the quota.
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('policy-named', 'Policy named');
SELECT toolgate.set_policy('policy-named', 'request_purchase_part', allowed => true, roles => ARRAY['supervisor'],
                           tier => 1, max_value => 500, max_calls_per_conversation => 5, tier3_above => 400,
                           confirm_ttl => interval '10 minutes') AS version;
SELECT toolgate.set_policy('policy-named', 'request_purchase_part', max_value => 900) AS version;
SELECT toolgate.set_policy('policy-named', 'request_purchase_part', roles => ARRAY['supervisor', 'buyer'],
                           clear => ARRAY['tier3_above']) AS version;
SELECT allowed, roles, tier, max_value, max_calls_per_conversation, tier3_above, confirm_ttl, version
  FROM toolgate.policies WHERE tenant_id = 'policy-named';
SELECT version, old->'max_calls_per_conversation' AS old_quota, new->'max_calls_per_conversation' AS new_quota,
       new->'max_value' AS new_max_value
  FROM toolgate.policy_history WHERE tenant_id = 'policy-named' ORDER BY version;
-- What cannot be cleared, a setting both given and cleared, and a new row without its basics are
-- refused, nothing changed.
SELECT toolgate.set_policy('policy-named', 'request_purchase_part', clear => ARRAY['tier']);
SELECT toolgate.set_policy('policy-named', 'request_purchase_part', max_value => 1, clear => ARRAY['max_value']);
SELECT toolgate.set_policy('policy-named', 'request_close', max_value => 1);
SELECT count(*) AS versions FROM toolgate.policy_history WHERE tenant_id = 'policy-named';
RESET ROLE;
