-- pg_toolgate: who may do what (docs/architecture.md §2). Runs last. PUBLIC gets nothing; nobody but the
-- owner may create objects in the schema.

REVOKE ALL ON SCHEMA toolgate FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA toolgate FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA toolgate FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA toolgate FROM PUBLIC;

GRANT USAGE ON SCHEMA toolgate TO toolgate_admin, toolgate_operator, toolgate_agent, toolgate_auditor, toolgate_dispatcher,
                                  toolgate_approver;

-- The application: the entry points, and nothing else.
GRANT EXECUTE ON FUNCTION
    toolgate.read_order(text, text),
    toolgate.request_close(text, text, jsonb),
    toolgate.request_purchase_part(text, text, jsonb),
    toolgate.confirm(text, text),
    toolgate.call(text, text, text, jsonb),
    toolgate.read(text, text, jsonb),
    toolgate.tenant_call(text, text, text, text, jsonb),
    toolgate.tenant_confirm(text, text, text),
    toolgate.tenant_read(text, text, text, jsonb),
    toolgate.tools(text),
    toolgate.authorization_servers(text)
TO toolgate_agent;

-- The DBA: configuration as rows, through functions that validate and version them.
GRANT EXECUTE ON FUNCTION
    toolgate.add_tenant(text, text),
    toolgate.set_tenant_locale(text, text, text, text, integer),
    toolgate.add_key(text, text, text, text),
    toolgate.revoke_key(text),
    toolgate.add_issuer(text, text, text[], jsonb, text, text, text),
    toolgate.alter_issuer(text, text, text[], jsonb, text, text, text),
    toolgate.set_issuer_keys(text, jsonb),
    toolgate.drop_issuer(text),
    toolgate.set_tenant_issuer(text, text, text),
    toolgate.unset_tenant_issuer(text),
    toolgate.set_tool_schema(text, jsonb),
    toolgate.set_policy(text, text, boolean, text[], integer, numeric, integer, interval, numeric, numeric, text[],
                        text[], text[], boolean, integer, numeric, integer),
    toolgate.policy_at(text, text, timestamptz),
    toolgate.set_tenant_time_zone(text, text),
    toolgate.set_limit(text, text, numeric, text, interval, text, text, text, boolean),
    toolgate.drop_limit(text, text),
    toolgate.limits_usage(text),
    toolgate.set_writes_enabled(boolean, text),
    toolgate.explain_call(text, text, text, jsonb),
    toolgate.define_tool(text, text, jsonb, boolean, regprocedure, regprocedure, regprocedure, text, text[], text),
    toolgate.define_read_tool(text, text, jsonb, regprocedure, text[]),
    toolgate.define_outbox_tool(text, text, jsonb, boolean, regprocedure, regprocedure, text, regprocedure, regprocedure,
                                text, text[], text),
    toolgate.add_erp_endpoint(text, text, text, integer, integer),
    toolgate.set_erp_answers(text, jsonb),
    toolgate.check_erp_answers(jsonb),
    toolgate.erp_answers_contract(),
    toolgate.path_segment(text),
    toolgate.set_consent_translation(text, text, text),
    toolgate.hardening_report(pg_catalog.regrole),
    toolgate.binding_report(text)
TO toolgate_admin;
-- toolgate.harden_agent_login stays the owner's: it revokes and grants on pg_catalog's functions.
GRANT SELECT ON toolgate.tenants, toolgate.keys, toolgate.issuers, toolgate.tenant_issuers, toolgate.tools, toolgate.tool_schemas,
                toolgate.policies, toolgate.policy_history, toolgate.write_switches,
                toolgate.tool_bindings, toolgate.tool_history, toolgate.administrators,
                toolgate.erp_endpoints, toolgate.erp_endpoint_history, toolgate.outbox,
                toolgate.limits, toolgate.limit_history, toolgate.limit_usage
TO toolgate_admin;
-- toolgate.repoint_erp_endpoint stays the owner's until the DBA grants it to a role of their
-- choosing: moving an endpoint sends its queued intents to another host.
-- toolgate.add_administrator and remove_administrator stay the owner's.
GRANT SELECT ON toolgate.administrators TO toolgate_auditor;

-- Which version and library a database runs: for whoever looks after it.
GRANT EXECUTE ON FUNCTION toolgate.version() TO toolgate_admin, toolgate_operator, toolgate_auditor;

-- On-call: turn writes off (the function refuses to turn them on), see the switches.
GRANT EXECUTE ON FUNCTION toolgate.set_writes_enabled(boolean, text) TO toolgate_operator;
GRANT SELECT ON toolgate.write_switches TO toolgate_operator;

-- Audit and privacy: the views, and which policy was in force when.
GRANT EXECUTE ON FUNCTION toolgate.policy_at(text, text, timestamptz) TO toolgate_auditor;
GRANT SELECT ON toolgate.policy_history, toolgate.erp_endpoint_history, toolgate.limit_history TO toolgate_auditor;
GRANT EXECUTE ON FUNCTION toolgate.limits_usage(text) TO toolgate_auditor;
-- The audit's seal (docs/audit.md): on-call's scheduler seals, auditors verify and read the
-- checkpoints and the seal keys' public halves; rotating the key is an administrator's.
GRANT EXECUTE ON FUNCTION toolgate.seal(text, integer), toolgate.tenant_seal(text, integer, interval),
                          toolgate.seal_tenants()
TO toolgate_operator, toolgate_admin;
GRANT EXECUTE ON FUNCTION toolgate.verify_audit(text, timestamptz, timestamptz)
TO toolgate_auditor, toolgate_admin, toolgate_operator;
GRANT EXECUTE ON FUNCTION toolgate.rotate_seal_key() TO toolgate_admin;
GRANT EXECUTE ON FUNCTION toolgate.export_audit(text, bigint, integer) TO toolgate_auditor, toolgate_admin;
-- What a Prometheus exporter reads (docs/observability.md): counts per tenant, no row's content.
GRANT SELECT ON toolgate.metric_tenants, toolgate.metric_calls, toolgate.metric_refusals, toolgate.metric_proposals,
                toolgate.metric_outbox, toolgate.metric_seal, toolgate.metric_audit_findings
TO toolgate_auditor, toolgate_admin, toolgate_operator;
GRANT SELECT ON toolgate.audit_checkpoints, toolgate.seal_public_keys TO toolgate_auditor, toolgate_admin;
-- Retention: an administrator sets it, on-call's scheduler purges; both, and auditors, read it.
GRANT EXECUTE ON FUNCTION toolgate.set_retention(text, interval) TO toolgate_admin;
GRANT EXECUTE ON FUNCTION toolgate.purge(text), toolgate.audit_partitions(integer) TO toolgate_operator, toolgate_admin;
GRANT SELECT ON toolgate.audit_retention, toolgate.audit_purges TO toolgate_auditor, toolgate_admin, toolgate_operator;
-- Erasure of a person: an administrator's; auditors see what was erased, never the keys.
GRANT EXECUTE ON FUNCTION toolgate.erase_actor(text, text) TO toolgate_admin;
GRANT SELECT ON toolgate.erasures TO toolgate_auditor, toolgate_admin;
GRANT SELECT ON toolgate.tool_catalog TO toolgate_admin, toolgate_auditor;
GRANT SELECT ON toolgate.audit_log, toolgate.panel, toolgate.effects, toolgate.alert_denials_per_hour,
                toolgate.alert_repeated_denials, toolgate.alert_tool_not_allowed, toolgate.alert_outbox
TO toolgate_auditor, toolgate_admin, toolgate_operator;

-- Approvers (docs/approvals.md): a person's decision on a proposal, and what waits for them;
-- each proven by the approver's own identity token; and for a person of the tenant's auditor
-- roles, its audit (toolgate.audit_trail, docs/console.md). Auditors and administrators read who
-- decided what.
GRANT EXECUTE ON FUNCTION toolgate.approve(text, text, text, text), toolgate.tenant_approve(text, text, text, text, text),
                          toolgate.pending(text), toolgate.tenant_pending(text, text),
                          toolgate.approval_history(text), toolgate.tenant_approval_history(text, text),
                          toolgate.audit_trail(text, jsonb), toolgate.tenant_audit_trail(text, text, jsonb)
TO toolgate_approver;
GRANT EXECUTE ON FUNCTION toolgate.set_tenant_auditors(text, text[]) TO toolgate_admin;
GRANT SELECT ON toolgate.approvals TO toolgate_auditor, toolgate_admin;

-- The dispatcher (toolgate dispatch): claims the outbox's due intents and settles what the ERP
-- answered, and nothing else; it reads no table.
GRANT EXECUTE ON FUNCTION toolgate.claim_outbox(integer, interval, text[]),
                          toolgate.tenant_claim_outbox(text, integer, interval, text[]),
                          toolgate.outbox_due_tenants(integer, text[]), toolgate.outbox_distributed(),
                          toolgate.renew_outbox(text, text, text, uuid, interval),
                          toolgate.note_outbox(text, text, text, uuid, text, jsonb),
                          toolgate.outbox_gauges(),
                          toolgate.settle_outbox(text, text, text, uuid, text, jsonb, interval, jsonb),
                          toolgate.erp_access_token(text, text), toolgate.erp_refresh_begin(text, text, bigint, text),
                          toolgate.erp_refresh_end(text, text, text)
TO toolgate_dispatcher;
-- A person's word on an intent the dispatcher could not settle (DEAD, UNCERTAIN): the DBA may
-- grant these to another role of administrators (on-call, say).
GRANT EXECUTE ON FUNCTION toolgate.resolve_outbox(text, text, text, text, text, jsonb),
                          toolgate.requeue_outbox(text, text, text, text)
TO toolgate_admin;
