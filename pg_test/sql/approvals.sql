-- Maker-checker (docs/approvals.md), in a tenant of its own: the approval rules' bad input, the
-- requester's own "yes" refused where approvers decide, pending, an approver of the wrong role,
-- the requester approving their own, a quorum of two above a value, one approval below it, a
-- decline, a tier-3 word, another tenant's approver, the agent's role kept away from approve,
-- and an approver's erasure reaching their decisions.
\set VERBOSITY terse
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('appr', 'Approvals');
SELECT toolgate.set_policy('appr', 'request_close', allowed => true, roles => ARRAY['supervisor', 'technician'],
                           tier => 1, approver_roles => ARRAY['supervisor']) AS v;
SELECT toolgate.set_policy('appr', 'request_purchase_part', allowed => true, roles => ARRAY['technician'],
                           tier => 1, tier3_above => 5000, max_value => 10000, max_calls_per_conversation => 10,
                           approver_roles => ARRAY['buyer'], quorum => 2, quorum_above => 500) AS v;
-- Bad approval rules, each refused naming what is wrong; the row is unchanged.
SELECT toolgate.set_policy('appr', 'request_close', quorum => 0);
SELECT toolgate.set_policy('appr', 'request_close', approver_roles => '{}');
SELECT toolgate.set_policy('appr', 'request_close', quorum_above => -1);
SELECT toolgate.set_policy('appr', 'request_close', approver_roles => ARRAY['x'], clear => ARRAY['approver_roles']);
SELECT approver_roles, distinct_approver, quorum, quorum_above, version FROM toolgate.policies
 WHERE tenant_id = 'appr' ORDER BY tool;
RESET ROLE;
\set pk `${TOOLGATE_MINT:?} key idp-appr`
SELECT toolgate.add_key('appr', 'idp-appr', 'identity', :'pk') IS NULL AS added;
\set pk `${TOOLGATE_MINT:?} key chan-appr`
SELECT toolgate.add_key('appr', 'chan-appr', 'channel', :'pk') IS NULL AS added;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected, note)
SELECT 'appr', n::text, 'open', true, '' FROM generate_series(920, 925) n;
INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget) VALUES ('appr', 'CC-A', 'Aprovações', 50000.00);
INSERT INTO maintenance.parts (tenant_id, part_id, name, unit_price, max_quantity)
VALUES ('appr', 'P-20', 'Peça', 100.00, 100);

\set sam `${TOOLGATE_MINT:?} id appr sam supervisor`
\set sue `${TOOLGATE_MINT:?} id appr sue supervisor`
\set tom `${TOOLGATE_MINT:?} id appr tom technician`
\set bob `${TOOLGATE_MINT:?} id appr bob buyer`
\set ben `${TOOLGATE_MINT:?} id appr ben buyer`
\set eve `${TOOLGATE_MINT:?} id shopping-a eve supervisor`

-- Sam asks to close order 920; his own channel "yes" does not apply it.
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->'proposal'->>'id' AS close FROM toolgate.request_close(:'sam', 'c1',
       '{"order_id": "920", "reason": "Inspeção validada", "idempotency_key": "appr-920"}') r \gset
\echo :outcome
\set yes `${TOOLGATE_MINT:?} yes appr :close sim`
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.confirm(:'sam', :'yes') r;
-- The agent's role cannot reach an approver's functions.
SELECT toolgate.approve(:'sam', :'close', 'approve');
SELECT toolgate.pending(:'sue');
RESET ROLE;
SELECT status FROM toolgate.proposals WHERE proposal_id = :'close';

SET ROLE toolgate_approver;
-- What waits for Sue: Sam's close. Nothing for Sam (his own), for Tom (no approver role) or for
-- Bob (a buyer approves purchases).
SELECT p->>'tool' AS tool, p->>'target' AS target, p->>'requester' AS requester, p->>'approvals' AS approvals,
       p->>'needed' AS needed
  FROM jsonb_array_elements(toolgate.pending(:'sue')->'result'->'pending') p;
SELECT jsonb_array_length(toolgate.pending(:'sam')->'result'->'pending') AS sam,
       jsonb_array_length(toolgate.pending(:'tom')->'result'->'pending') AS tom,
       jsonb_array_length(toolgate.pending(:'bob')->'result'->'pending') AS bob;
SELECT toolgate.pending('not a token')->>'rule' AS rule;
-- Refused: a decision that is neither word, Sam approving his own, Tom (wrong role), Eve (another
-- tenant's supervisor: no such proposal in hers), a proposal id that is not one.
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'sue', :'close', 'maybe') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'sam', :'close', 'approve') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'tom', :'close', 'approve') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'eve', :'close', 'approve') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'sue', 'nope', 'approve') r;
RESET ROLE;
SELECT status FROM maintenance.work_orders WHERE tenant_id = 'appr' AND order_id = '920';
-- Sue approves: applied at once (one approval needed), for Sam.
SET ROLE toolgate_approver;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'sue', :'close', 'approve') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'sue', :'close', 'approve') r;
RESET ROLE;
SELECT status FROM maintenance.work_orders WHERE tenant_id = 'appr' AND order_id = '920';
-- Sam's agent retries with the same key: the outcome the approval gave.
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed FROM toolgate.request_close(:'sam', 'c1',
       '{"order_id": "920", "reason": "Inspeção validada", "idempotency_key": "appr-920"}') r;

-- A purchase of R$ 1.000,00 (above 500): two buyers must approve.
SELECT r->>'outcome' AS outcome, r->'proposal'->>'id' AS buy FROM toolgate.request_purchase_part(:'tom', 'b1',
       '{"order_id": "921", "part_id": "P-20", "quantity": 10, "cost_center": "CC-A", "idempotency_key": "appr-buy-1"}') r \gset
\echo :outcome
SET ROLE toolgate_approver;
SELECT r->>'outcome' AS outcome, (r->'result') - 'proposal' AS result, r->'result'->>'proposal' = :'buy' AS same
  FROM toolgate.approve(:'bob', :'buy', 'approve') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'bob', :'buy', 'approve') r;
SELECT jsonb_array_length(toolgate.pending(:'bob')->'result'->'pending') AS bob,
       (toolgate.pending(:'ben')->'result'->'pending'->0->>'approvals') AS ben_sees_approvals;
RESET ROLE;
SELECT count(*) AS purchases FROM maintenance.purchases WHERE tenant_id = 'appr';
SET ROLE toolgate_approver;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'ben', :'buy', 'approve') r;
RESET ROLE;
SELECT count(*) AS purchases, sum(total) AS total FROM maintenance.purchases WHERE tenant_id = 'appr';

-- R$ 300,00 (not above 500): one buyer is enough.
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS small FROM toolgate.request_purchase_part(:'tom', 'b2',
       '{"order_id": "922", "part_id": "P-20", "quantity": 3, "cost_center": "CC-A", "idempotency_key": "appr-buy-2"}') r \gset
SET ROLE toolgate_approver;
SELECT r->>'outcome' AS outcome FROM toolgate.approve(:'ben', :'small', 'approve') r;

-- A decline by any approver cancels at once; a later approval finds it decided.
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS declined FROM toolgate.request_purchase_part(:'tom', 'b3',
       '{"order_id": "923", "part_id": "P-20", "quantity": 8, "cost_center": "CC-A", "idempotency_key": "appr-buy-3"}') r \gset
SET ROLE toolgate_approver;
SELECT r->>'outcome' AS outcome FROM toolgate.approve(:'bob', :'buy', 'approve') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'bob', :'declined', 'decline') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'ben', :'declined', 'approve') r;
SET ROLE toolgate_agent;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule, r->>'replayed' AS replayed
  FROM toolgate.request_purchase_part(:'tom', 'b3',
       '{"order_id": "923", "part_id": "P-20", "quantity": 8, "cost_center": "CC-A", "idempotency_key": "appr-buy-3"}') r;

-- Tier 3 (R$ 6.000,00): the challenge word, exactly; a wrong word records nothing.
SELECT r->'proposal'->>'id' AS big, substring(r->'proposal'->>'text' from 'CONFIRMAR-[0-9A-F]{6}') AS word
  FROM toolgate.request_purchase_part(:'tom', 'b4',
       '{"order_id": "924", "part_id": "P-20", "quantity": 60, "cost_center": "CC-A", "idempotency_key": "appr-buy-4"}') r \gset
SET ROLE toolgate_approver;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'bob', :'big', 'approve', 'sim') r;
SELECT r->>'outcome' AS outcome, r->'result'->>'approvals' AS approvals
  FROM toolgate.approve(:'bob', :'big', 'approve', :'word') r;
SELECT r->>'outcome' AS outcome FROM toolgate.approve(:'ben', :'big', 'approve', :'word') r;
RESET ROLE;
SELECT order_id, total FROM maintenance.purchases WHERE tenant_id = 'appr' ORDER BY order_id;

-- An approval after the proposal expired: refused, and the proposal marked expired.
SET ROLE toolgate_agent;
SELECT r->'proposal'->>'id' AS late FROM toolgate.request_purchase_part(:'tom', 'b5',
       '{"order_id": "925", "part_id": "P-20", "quantity": 1, "cost_center": "CC-A", "idempotency_key": "appr-buy-5"}') r \gset
RESET ROLE;
UPDATE toolgate.proposals SET expires_at = now() - interval '1 second' WHERE proposal_id = :'late';
SET ROLE toolgate_approver;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'ben', :'late', 'approve') r;
RESET ROLE;
SELECT status FROM toolgate.proposals WHERE proposal_id = :'late';

-- What was decided on the tools Bob approves (purchases), in the tenant's language and money;
-- Sue sees the closes. Tom approves nothing.
SET ROLE toolgate_approver;
SELECT r->'result'->>'language' AS language, h->>'target' AS target, h->>'status' AS status,
       h->>'amount_text' AS amount, h->'decisions' @> '[{"approver": "bob"}]' AS bob_decided
  FROM toolgate.approval_history(:'bob') r, jsonb_array_elements(r->'result'->'history') h ORDER BY 2;
SELECT h->>'target' AS target, h->>'status' AS status
  FROM jsonb_array_elements(toolgate.approval_history(:'sue')->'result'->'history') h;
SELECT jsonb_array_length(toolgate.approval_history(:'tom')->'result'->'history') AS tom;
RESET ROLE;

-- The tenant's audit in the console: for its auditor roles only; filtered; charts' figures.
SET ROLE toolgate_admin;
SELECT toolgate.set_tenant_auditors('appr', '{}');
SELECT toolgate.set_tenant_auditors('nobody', ARRAY['auditor']);
SELECT toolgate.set_tenant_auditors('appr', ARRAY['auditor']);
RESET ROLE;
\set iris `${TOOLGATE_MINT:?} id appr iris auditor`
SET ROLE toolgate_approver;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.audit_trail(:'sue') r;
SELECT r->'result'->>'language' AS language, jsonb_array_length(r->'result'->'rows') AS rows,
       r->'result'->'top_refusals'->0 AS top_refusal, r->'result'->>'day_budget' AS day_budget,
       (SELECT sum((h->>'calls')::int) FROM jsonb_array_elements(r->'result'->'per_hour') h) AS calls_48h,
       (SELECT sum((d->>'value')::numeric) FROM jsonb_array_elements(r->'result'->'per_day') d) AS value_30d
  FROM toolgate.audit_trail(:'iris') r;
SELECT x->>'kind' AS kind, x->>'tool' AS tool, x->>'actor' AS actor, x->>'target' AS target
  FROM jsonb_array_elements(toolgate.audit_trail(:'iris', '{"tool": "request_close", "outcome": "SUCCEEDED"}')
                            ->'result'->'rows') x;
SELECT jsonb_array_length(toolgate.audit_trail(:'iris', '{"since": "2999-01-01T00:00:00Z"}')->'result'->'rows') AS future;
RESET ROLE;

-- Who decided what, on the digest they decided on; the audit names each decision.
SELECT p.idempotency_key, a.approver, a.decision, a.args_digest = p.args_digest AS same_digest
  FROM toolgate.approvals a JOIN toolgate.proposals p USING (tenant_id, proposal_id)
 WHERE a.tenant_id = 'appr' ORDER BY a.decided_at;
SELECT kind, tool, outcome, rule, detail->'approvals' AS approvals FROM toolgate.audit
 WHERE tenant_id = 'appr' AND kind = 'confirm' ORDER BY audit_id;
SELECT tool, count(*) AS effects FROM toolgate.effects WHERE tenant_id = 'appr' GROUP BY tool ORDER BY tool;

-- Erasing an approver reaches the decisions they made: the approvals name their pseudonym.
SET ROLE toolgate_admin;
SELECT erased, gate_rows FROM toolgate.erase_actor('appr', 'bob');
RESET ROLE;
SELECT count(*) FILTER (WHERE approver = 'bob') AS bob,
       count(*) FILTER (WHERE approver = (SELECT pseudonym FROM toolgate.erasures WHERE tenant_id = 'appr')) AS erased
  FROM toolgate.approvals WHERE tenant_id = 'appr';
