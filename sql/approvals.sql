------------------------------------------------------------------------------------------------
-- Maker-checker (docs/approvals.md): a proposal whose policy row names approver roles is decided
-- by people holding one of them, each proven by their own verified identity token, through
-- toolgate.approve; the approval that completes the quorum applies the effect in its own
-- transaction (src/gate/approval.rs). toolgate_approver may execute approve and pending and
-- nothing of the agent's; the agent's role never gains them.
------------------------------------------------------------------------------------------------

-- Every approver's decision on a proposal: who (the verified issuer, '' for a token of
-- toolgate.keys, and subject), what they decided, the digest of the arguments they decided on,
-- and when. One row per approver and proposal: nobody approves the same proposal twice.
CREATE TABLE toolgate.approvals (
    tenant_id    text NOT NULL,
    proposal_id  uuid NOT NULL,
    approver_iss text NOT NULL,
    approver     text NOT NULL,
    decision     text NOT NULL CHECK (decision IN ('approve', 'decline')),
    args_digest  text NOT NULL,
    decided_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, proposal_id, approver_iss, approver)
);
SELECT pg_catalog.pg_extension_config_dump('toolgate.approvals', '');

-- The approvers' entry points, in Rust (src/entry.rs), created with the library pgrx created its
-- own functions with (toolgate.caller's), as sql/api.sql does for the agent's.
DO $create$
DECLARE
    f record;
BEGIN
    FOR f IN VALUES
        ('toolgate.approve(identity text, proposal_id text, decision text, word text DEFAULT NULL)', 'approve'),
        ('toolgate.tenant_approve(tenant text, identity text, proposal_id text, decision text, word text DEFAULT NULL)',
         'tenant_approve'),
        ('toolgate.pending(identity text)', 'pending'),
        ('toolgate.tenant_pending(tenant text, identity text)', 'tenant_pending'),
        ('toolgate.approval_history(identity text)', 'approval_history'),
        ('toolgate.tenant_approval_history(tenant text, identity text)', 'tenant_approval_history'),
        ('toolgate.audit_trail(identity text, filters jsonb DEFAULT ''{}'')', 'audit_trail'),
        ('toolgate.tenant_audit_trail(tenant text, identity text, filters jsonb DEFAULT ''{}'')', 'tenant_audit_trail')
    LOOP
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION %s RETURNS jsonb LANGUAGE c VOLATILE SECURITY DEFINER '
            'SET search_path = pg_catalog, toolgate, pg_temp AS %L, %L',
            f.column1,
            (SELECT p.probin FROM pg_catalog.pg_proc p WHERE p.oid = 'toolgate.caller()'::pg_catalog.regprocedure),
            f.column2 || '_wrapper');
    END LOOP;
END
$create$;

COMMENT ON FUNCTION toolgate.approve(text, text, text, text) IS
    'An approver''s decision (approve or decline) on a proposal of their tenant, proven by their own identity token; the approval that completes the quorum applies it.';
COMMENT ON FUNCTION toolgate.tenant_approve(text, text, text, text, text) IS
    'toolgate.approve routed by the tenant (a Citus cluster runs it on the tenant''s node); the token must name that tenant.';
COMMENT ON FUNCTION toolgate.pending(text) IS
    'The live proposals the approver whose identity token this is may decide, newest first.';
COMMENT ON FUNCTION toolgate.tenant_pending(text, text) IS
    'toolgate.pending routed by the tenant; the token must name that tenant.';
COMMENT ON FUNCTION toolgate.approval_history(text) IS
    'What was decided in the approver''s tenant on the tools they approve (the last 90 days), newest first.';
COMMENT ON FUNCTION toolgate.tenant_approval_history(text, text) IS
    'toolgate.approval_history routed by the tenant; the token must name that tenant.';
COMMENT ON FUNCTION toolgate.audit_trail(text, jsonb) IS
    'The tenant''s audit for a person of an auditor role (toolgate.set_tenant_auditors): rows filtered by tool, outcome, actor and time, calls per hour, spend per day, top refusals.';
COMMENT ON FUNCTION toolgate.tenant_audit_trail(text, text, jsonb) IS
    'toolgate.audit_trail routed by the tenant; the token must name that tenant.';

-- The roles whose people may read the tenant's audit in the approvals console; NULL: nobody.
CREATE FUNCTION toolgate.set_tenant_auditors(tenant_id text, roles text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, toolgate, pg_temp
AS $$
BEGIN
    IF roles IS NOT NULL AND (pg_catalog.cardinality(roles) = 0 OR pg_catalog.array_position(roles, NULL) IS NOT NULL
                              OR EXISTS (SELECT FROM pg_catalog.unnest(roles) r WHERE r = '')) THEN
        RAISE EXCEPTION 'set_tenant_auditors: roles must name at least one role, none empty (NULL: nobody)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE toolgate.tenants t SET auditor_roles = set_tenant_auditors.roles
     WHERE t.tenant_id = set_tenant_auditors.tenant_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown tenant %', tenant_id USING ERRCODE = 'no_data_found';
    END IF;
END
$$;
