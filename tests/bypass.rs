//! Bypass attempts by the application's own login (a member of toolgate_agent), the position a
//! prompt-injected agent with a SQL connection would be in. Every one fails with a permission
//! error; the gate still decides.

mod common;

use common::*;
use tokio_postgres::error::SqlState;
use toolgate_cli::db;
use toolgate_cli::fixture::APP;

async fn tables(lab: &toolgate_cli::fixture::Lab) -> Vec<String> {
    let root = lab.connect("postgres").await.unwrap();
    root.query("SELECT tablename::text FROM pg_tables WHERE schemaname = 'toolgate' ORDER BY 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn agent_cannot_write_any_table() {
    let lab = lab("bypass_writes").await;
    let app = lab.connect(APP).await.unwrap();
    let all = tables(&lab).await;
    assert!(all.len() >= 13, "{all:?}");
    for t in &all {
        for sql in [
            format!("INSERT INTO toolgate.{t} DEFAULT VALUES"),
            format!("UPDATE toolgate.{t} SET tenant_id = tenant_id"),
            format!("DELETE FROM toolgate.{t}"),
            format!("TRUNCATE toolgate.{t}"),
        ] {
            // Tables without tenant_id fail on the column before the privilege check would; the
            // privilege check is what every other table shows.
            let code = refused(&app, &sql).await;
            assert!(code == SqlState::INSUFFICIENT_PRIVILEGE || code == SqlState::UNDEFINED_COLUMN, "{sql}: {code:?}");
        }
        let code = refused(&app, &format!("DELETE FROM toolgate.{t}")).await;
        assert_eq!(code, SqlState::INSUFFICIENT_PRIVILEGE, "DELETE FROM {t}");
    }
}

#[tokio::test]
async fn agent_cannot_read_keys_ledger_audit_or_secret() {
    let lab = lab("bypass_reads").await;
    let app = lab.connect(APP).await.unwrap();
    for t in tables(&lab).await {
        assert_eq!(
            refused(&app, &format!("SELECT * FROM toolgate.{t}")).await,
            SqlState::INSUFFICIENT_PRIVILEGE,
            "{t}"
        );
    }
    for v in
        ["audit_log", "panel", "effects", "alert_denials_per_hour", "alert_repeated_denials", "alert_tool_not_allowed"]
    {
        assert_eq!(
            refused(&app, &format!("SELECT * FROM toolgate.{v}")).await,
            SqlState::INSUFFICIENT_PRIVILEGE,
            "{v}"
        );
    }
    assert_eq!(refused(&app, "SELECT nextval('toolgate.audit_audit_id_seq')").await, SqlState::INSUFFICIENT_PRIVILEGE);
}

#[tokio::test]
async fn agent_cannot_call_internal_or_admin_functions() {
    let lab = lab("bypass_functions").await;
    let app = lab.connect(APP).await.unwrap();
    for call in [
        "SELECT toolgate.gate_explain('request_close', NULL, NULL, NULL)",
        "SELECT toolgate.parse_public_key('x')",
        "SELECT toolgate.check_tool_schema('{}')",
        "SELECT toolgate.caller()",
        "SELECT toolgate.iso_utc(now())",
        "SELECT toolgate.add_tenant('evil', 'Evil')",
        "SELECT toolgate.add_key('shopping-a', 'evil', 'identity', 'x')",
        "SELECT toolgate.revoke_key('idp-shopping-a')",
        "SELECT toolgate.set_policy('shopping-a', 'request_close', true, ARRAY['technician'], 0)",
        "SELECT toolgate.set_tool_schema('request_close', '{}')",
        "SELECT toolgate.set_writes_enabled(true)",
        "SELECT toolgate.explain_call(NULL, 'request_close', 'c', '{}')",
        "SELECT toolgate.define_tool('evil', 'Evil', '{}', false, NULL, NULL)",
        "SELECT toolgate.define_read_tool('evil', 'Evil', '{}', NULL)",
        "SELECT toolgate.binding_fault(NULL, 'target')",
        "SELECT toolgate.check_consent_template('x', '{}', false)",
        "SELECT toolgate.record_tool('evil', 'write', 'Evil', false, '{}', 'evil')",
        "SELECT toolgate.check_tool_name('evil')",
        "SELECT toolgate.current_tenant()",
    ] {
        assert_eq!(refused(&app, call).await, SqlState::INSUFFICIENT_PRIVILEGE, "{call}");
    }
}

#[tokio::test]
async fn agent_cannot_become_another_role() {
    let lab = lab("bypass_set_role").await;
    let app = lab.connect(APP).await.unwrap();
    for role in ["toolgate_admin", "toolgate_operator", "toolgate_auditor", "postgres"] {
        assert_eq!(refused(&app, &format!("SET ROLE {role}")).await, SqlState::INSUFFICIENT_PRIVILEGE, "{role}");
        assert_eq!(
            refused(&app, &format!("SET SESSION AUTHORIZATION {role}")).await,
            SqlState::INSUFFICIENT_PRIVILEGE,
            "{role}"
        );
    }
    assert_eq!(refused(&app, "CREATE TABLE toolgate.squat (x int)").await, SqlState::INSUFFICIENT_PRIVILEGE);
    assert_eq!(refused(&app, "CREATE SCHEMA evil").await, SqlState::INSUFFICIENT_PRIVILEGE);
}

#[tokio::test]
async fn temp_objects_named_like_the_gates_change_nothing() {
    let lab = lab("bypass_temp").await;
    let root = lab.connect("postgres").await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    // Shadows of the gate's tables and functions in the session's temp schema, searched first.
    app.batch_execute(
        "CREATE TEMP TABLE work_orders (tenant_id text, order_id text, status text, inspected bool, note text);
         INSERT INTO work_orders VALUES ('shopping-a', '743', 'open', true, '');
         CREATE TEMP TABLE policies (tenant_id text, tool text, allowed bool, roles text[], tier int);
         CREATE TEMP TABLE write_switches (scope text, enabled bool);
         CREATE TEMP TABLE keys (kid text, tenant_id text);
         CREATE FUNCTION pg_temp.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT 'infinity'::timestamptz $$;
         SET search_path = pg_temp, toolgate, public;",
    )
    .await
    .unwrap();
    let id = lab.supervisor_a();
    let cross = db::request_close(&app, &id, "conv-temp", &close_args("743", "temp-743-a")).await.unwrap();
    assert_eq!(outcome(&cross), ("BLOCKED", "target_not_found"));
    let real = db::request_close(&app, &id, "conv-temp", &close_args("742", "temp-742-a")).await.unwrap();
    assert_eq!(outcome(&real), ("NEEDS_CONFIRMATION", "-"));
    assert_eq!(effects(&root, "743").await, 0);
    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.proposals WHERE target = '742'").await, 1);
}

/// The DBA's own ERP behind the gate (examples/refunds): the agent reaches neither its tables nor
/// its bound functions, not even when the ERP's schema is open to everyone; a grant of a bound
/// function to the agent makes the gate refuse the tool rather than leave a way around it.
#[tokio::test]
async fn agent_cannot_reach_a_dbas_erp_or_its_bound_functions() {
    let lab = lab("bypass_dba_erp").await;
    let root = lab.connect("postgres").await.unwrap();
    root.batch_execute(include_str!("../examples/refunds/refunds.sql")).await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    for sql in ["SELECT * FROM refunds.pedidos", "SELECT refunds.emitir_reembolso('{}', '{}')"] {
        assert_eq!(refused(&app, sql).await, SqlState::INSUFFICIENT_PRIVILEGE, "{sql}");
    }
    root.batch_execute("GRANT USAGE ON SCHEMA refunds TO PUBLIC").await.unwrap();
    let functions: Vec<String> = root
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'refunds'::regnamespace ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(functions.len() >= 7, "{functions:?}");
    for f in &functions {
        let call = format!("SELECT {}('{{\"tenant\": \"bravo\"}}', '{{}}')", f.split('(').next().unwrap());
        assert_eq!(refused(&app, &call).await, SqlState::INSUFFICIENT_PRIVILEGE, "{call}");
    }
    for t in ["pedidos", "reembolsos", "assinaturas"] {
        for sql in [format!("SELECT * FROM refunds.{t}"), format!("DELETE FROM refunds.{t}")] {
            assert_eq!(refused(&app, &sql).await, SqlState::INSUFFICIENT_PRIVILEGE, "{sql}");
        }
    }
    // A DBA's mistake: the effect granted to the application. The gate refuses to run the tool.
    root.batch_execute("GRANT EXECUTE ON FUNCTION refunds.emitir_reembolso(jsonb, jsonb) TO toolgate_agent")
        .await
        .unwrap();
    let idp = toolgate_cli::keys::generate(&lab.keys_dir, "idp-acme").unwrap();
    root.execute("SELECT toolgate.add_key('acme', $1, 'identity', $2)", &[&idp.kid(), &idp.public_key()])
        .await
        .unwrap();
    let token = toolgate_cli::keys::identity(&idp, "ana", "acme", "atendente", 600);
    let args = serde_json::json!({"valor_brl": "10.00", "pedido_id": "p1", "idempotency_key": "bypass-refund-1"});
    let reply =
        db::json(&app, "SELECT toolgate.call($1, 'c1', 'emitir_reembolso', $2)", &[&token, &args]).await.unwrap();
    assert_eq!(outcome(&reply), ("BLOCKED", "tool_misconfigured"), "{reply}");
    assert_eq!(count(&root, "SELECT count(*) FROM refunds.reembolsos").await, 0);
}
