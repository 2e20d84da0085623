-- A console-only tier (docs/approvals.md): proposals at or above it are approved only through
-- toolgate.approve, a person's own sign-in, never by a channel-signed "yes" (whose key may sit on
-- the agent's host). Without approver roles the requester approves their own there, and nobody
-- else does; with approver roles the approvers decide, as before. Below the tier the channel
-- confirms, as it always did. explain_call shows who would decide. Bad values are refused and
-- change nothing.
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('conly', 'Console only');
SELECT toolgate.set_policy('conly', 'request_purchase_part', allowed => true, roles => ARRAY['technician'],
                           tier => 1, tier3_above => 5000, max_value => 10000, max_calls_per_conversation => 10,
                           console_only_tier => 3) AS v;
SELECT toolgate.set_policy('conly', 'request_purchase_part', console_only_tier => 4);
SELECT toolgate.set_policy('conly', 'request_purchase_part', console_only_tier => 0);
SELECT toolgate.set_policy('conly', 'request_purchase_part', console_only_tier => 2, clear => ARRAY['console_only_tier']);
SELECT console_only_tier, version FROM toolgate.policies WHERE tenant_id = 'conly';
SELECT h.new->>'console_only_tier' AS versioned FROM toolgate.policy_history h WHERE h.tenant_id = 'conly';
RESET ROLE;
\set pk `${TOOLGATE_MINT:?} key idp-conly`
SELECT toolgate.add_key('conly', 'idp-conly', 'identity', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key chan-conly`
SELECT toolgate.add_key('conly', 'chan-conly', 'channel', :'pk') IS NULL AS added;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected, note)
SELECT 'conly', n::text, 'open', true, '' FROM generate_series(930, 933) n;
INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget) VALUES ('conly', 'CC-C', 'Console', 50000.00);
INSERT INTO maintenance.parts (tenant_id, part_id, name, unit_price, max_quantity)
VALUES ('conly', 'P-30', 'Peça', 100.00, 100);

\set tom `${TOOLGATE_MINT:?} id conly tom technician`
\set tia `${TOOLGATE_MINT:?} id conly tia technician`
\set bob `${TOOLGATE_MINT:?} id conly bob buyer`

-- explain_call shows the DBA who would decide a tier-3 purchase: the requester, in the console.
SET ROLE toolgate_admin;
SELECT r->>'outcome' AS outcome, r->'reply'->'result' AS result
  FROM toolgate.explain_call(:'tom', 'request_purchase_part', 'k0',
       '{"order_id": "930", "part_id": "P-30", "quantity": 60, "cost_center": "CC-C", "idempotency_key": "conly-key-0"}') r;
RESET ROLE;

-- Below the tier (R$ 300,00, tier 1): the channel's "yes" applies it, as it always did.
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->'result' AS result, r->'proposal'->>'id' AS small
  FROM toolgate.request_purchase_part(:'tom', 'k1',
       '{"order_id": "930", "part_id": "P-30", "quantity": 3, "cost_center": "CC-C", "idempotency_key": "conly-key-1"}') r \gset
\echo :outcome :result
\set yes `${TOOLGATE_MINT:?} yes conly :small sim`
SELECT r->>'outcome' AS outcome FROM toolgate.confirm(:'tom', :'yes') r;

-- Tier 3 (R$ 6.000,00): the reply says the person decides in the console; the text says so in
-- the tenant's language, with the word to type there.
SELECT r->>'outcome' AS outcome, r->'result' AS result, r->'proposal'->>'id' AS big,
       substring(r->'proposal'->>'text' from 'CONFIRMAR-[0-9A-F]{6}') AS word,
       r->'proposal'->>'text' LIKE '%Aguarda a sua decisão no console de aprovações. Para confirmar, digite exatamente: CONFIRMAR-%' AS told
  FROM toolgate.request_purchase_part(:'tom', 'k2',
       '{"order_id": "931", "part_id": "P-30", "quantity": 60, "cost_center": "CC-C", "idempotency_key": "conly-key-2"}') r \gset
\echo :outcome :result :told
-- Tom's channel "yes" with the right word does not apply it: a key on the agent's host could sign it.
\set yes `${TOOLGATE_MINT:?} yes conly :big :word`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'tom', :'yes') r;
-- The retry with the same key says who decides, again.
SELECT r->>'outcome' AS outcome, r->'result' AS result FROM toolgate.request_purchase_part(:'tom', 'k2',
       '{"order_id": "931", "part_id": "P-30", "quantity": 60, "cost_center": "CC-C", "idempotency_key": "conly-key-2"}') r;
RESET ROLE;
SELECT count(*) AS purchases FROM maintenance.purchases WHERE tenant_id = 'conly';

-- In the console: Tom sees his own proposal; Tia (same role) and Bob see nothing, and may not
-- decide it; Tom's wrong word records nothing; his own sign-in with the word applies it.
SET ROLE toolgate_approver;
SELECT p->>'target' AS target, p->>'requester' AS requester, p->>'needed' AS needed
  FROM jsonb_array_elements(toolgate.pending(:'tom')->'result'->'pending') p;
SELECT jsonb_array_length(toolgate.pending(:'tia')->'result'->'pending') AS tia,
       jsonb_array_length(toolgate.pending(:'bob')->'result'->'pending') AS bob;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'tia', :'big', 'approve', :'word') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'bob', :'big', 'decline') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'tom', :'big', 'approve', 'CONFIRMAR-000000') r;
SELECT r->>'outcome' AS outcome FROM toolgate.approve(:'tom', :'big', 'approve', :'word') r;
SELECT h->>'target' AS target, h->>'status' AS status
  FROM jsonb_array_elements(toolgate.approval_history(:'tom')->'result'->'history') h;
SELECT jsonb_array_length(toolgate.approval_history(:'tia')->'result'->'history') AS tia;
RESET ROLE;
SELECT order_id, total FROM maintenance.purchases WHERE tenant_id = 'conly' ORDER BY order_id;
-- The agent's retry gets the outcome the console's approval gave.
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.request_purchase_part(:'tom', 'k2',
       '{"order_id": "931", "part_id": "P-30", "quantity": 60, "cost_center": "CC-C", "idempotency_key": "conly-key-2"}') r;

-- With approver roles too, the approvers decide (Bob, a buyer); the tier changes nothing there.
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('conly', 'request_purchase_part', approver_roles => ARRAY['buyer']) AS v;
SET ROLE toolgate_agent;
SELECT r->'result' AS result, r->'proposal'->>'id' AS other,
       substring(r->'proposal'->>'text' from 'CONFIRMAR-[0-9A-F]{6}') AS word
  FROM toolgate.request_purchase_part(:'tom', 'k3',
       '{"order_id": "932", "part_id": "P-30", "quantity": 60, "cost_center": "CC-C", "idempotency_key": "conly-key-3"}') r \gset
\echo :result
SET ROLE toolgate_approver;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'tom', :'other', 'approve', :'word') r;
SELECT r->>'outcome' AS outcome FROM toolgate.approve(:'bob', :'other', 'approve', :'word') r;
RESET ROLE;

-- Cleared: the channel confirms tier 3 again.
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('conly', 'request_purchase_part', clear => ARRAY['approver_roles', 'console_only_tier']) AS v;
SET ROLE toolgate_agent;
SELECT r->'result' AS result, r->'proposal'->>'id' AS last,
       substring(r->'proposal'->>'text' from 'CONFIRMAR-[0-9A-F]{6}') AS word
  FROM toolgate.request_purchase_part(:'tom', 'k4',
       '{"order_id": "933", "part_id": "P-30", "quantity": 60, "cost_center": "CC-C", "idempotency_key": "conly-key-4"}') r \gset
\echo :result
\set yes `${TOOLGATE_MINT:?} yes conly :last :word`
SELECT r->>'outcome' AS outcome FROM toolgate.confirm(:'tom', :'yes') r;
RESET ROLE;
SELECT order_id, total FROM maintenance.purchases WHERE tenant_id = 'conly' ORDER BY order_id;
SELECT kind, outcome, rule, detail->>'reason' AS reason FROM toolgate.audit WHERE tenant_id = 'conly' ORDER BY audit_id;
