-- Maker-checker on a cluster: the approvals are distributed with the tenant's other rows, and
-- tenant_approve and tenant_pending run on the tenant's worker, as tenant_confirm does. A
-- supervisor's close waits for another supervisor's approval there; the requester's own approval
-- is refused; an approval through the tenant-less entry point on the coordinator is a named,
-- audited refusal.
SELECT logicalrelid::text AS relation, partmethod,
       colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'toolgate.ledger'::regclass)
           AS with_the_ledger
  FROM pg_dist_partition WHERE logicalrelid = 'toolgate.approvals'::regclass;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected, note) VALUES
    ('shopping-c', '890', 'open', true, '');
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-c', 'request_close', tier => 1, approver_roles => ARRAY['supervisor']) AS version
    \gset
RESET ROLE;
\set pk `${TOOLGATE_MINT:?} key idp-shopping-c-appr`
SELECT toolgate.add_key('shopping-c', 'idp-shopping-c-appr', 'identity', :'pk') IS NULL AS added;
\set ana `${TOOLGATE_MINT:?} idkey idp-shopping-c-appr shopping-c user-50 supervisor`
\set bia `${TOOLGATE_MINT:?} idkey idp-shopping-c-appr shopping-c user-51 supervisor`
SET SESSION AUTHORIZATION toolgate_citus_app;
SELECT r->>'outcome' AS outcome, r->'proposal'->>'id' AS pid
  FROM toolgate.tenant_call('shopping-c', :'ana', 'citus-approvals', 'request_close',
       '{"order_id": "890", "reason": "Inspeção validada", "idempotency_key": "citus-approvals-890"}') r \gset
\echo :outcome
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION toolgate_citus_approver;
SELECT p->>'target' AS target, p->>'requester' AS requester, p->>'needed' AS needed
  FROM jsonb_array_elements(toolgate.tenant_pending('shopping-c', :'bia')->'result'->'pending') p;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_approve('shopping-c', :'ana', :'pid', 'approve') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.approve(:'bia', :'pid', 'approve') r;
SELECT r->>'outcome' AS outcome, r->>'rule' AS rule FROM toolgate.tenant_approve('shopping-c', :'bia', :'pid', 'approve') r;
RESET SESSION AUTHORIZATION;
-- Applied on the tenant's worker: the order, the approval beside the ledger, the agent's replay.
SELECT status FROM maintenance.work_orders WHERE tenant_id = 'shopping-c' AND order_id = '890';
SELECT approver, decision FROM toolgate.approvals WHERE tenant_id = 'shopping-c';
SELECT (SELECT nodeport FROM pg_dist_shard_placement
         WHERE shardid = get_shard_id_for_distribution_column('toolgate.approvals', 'shopping-c'))
     = (SELECT nodeport FROM pg_dist_shard_placement
         WHERE shardid = get_shard_id_for_distribution_column('toolgate.ledger', 'shopping-c')) AS with_its_tenant;
SET SESSION AUTHORIZATION toolgate_citus_app;
SELECT r->>'outcome' AS outcome, r->>'replayed' AS replayed
  FROM toolgate.tenant_call('shopping-c', :'ana', 'citus-approvals', 'request_close',
       '{"order_id": "890", "reason": "Inspeção validada", "idempotency_key": "citus-approvals-890"}') r;
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION toolgate_citus_approver;
SELECT h->>'target' AS target, h->>'status' AS status
  FROM jsonb_array_elements(toolgate.tenant_approval_history('shopping-c', :'bia')->'result'->'history') h;
RESET SESSION AUTHORIZATION;
-- The tenant's audit for its auditor roles, on its worker.
SET ROLE toolgate_admin;
SELECT toolgate.set_tenant_auditors('shopping-c', ARRAY['supervisor']);
RESET ROLE;
SET SESSION AUTHORIZATION toolgate_citus_approver;
SELECT r->>'outcome' AS outcome, jsonb_array_length(r->'result'->'rows') > 0 AS has_rows,
       jsonb_array_length(r->'result'->'per_hour') > 0 AS has_hours
  FROM toolgate.tenant_audit_trail('shopping-c', :'bia', '{"tool": "request_close"}') r;
RESET SESSION AUTHORIZATION;
SET ROLE toolgate_admin;
SELECT toolgate.set_tenant_auditors('shopping-c', NULL);
RESET ROLE;
SELECT tool, outcome, rule FROM toolgate.audit
 WHERE tenant_id = 'shopping-c' AND kind = 'confirm' AND proposal_id = :'pid'::uuid ORDER BY audit_id;
SET ROLE toolgate_admin;
SELECT toolgate.set_policy('shopping-c', 'request_close', tier => 0, clear => ARRAY['approver_roles']) > :version
    AS restored;
RESET ROLE;
