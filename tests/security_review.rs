//! The security review's findings that need real connections: a snapshot exported by one session
//! and imported by another (F1), advisory locks held by a client (F4), read-only transactions
//! (F7), `explain_call` failing inside a caller's exception block (F9), a schema version rolled
//! back and made again (F10), ids in replies (F11), `nbf` and a token's lifetime, and an
//! argument datum too large to render. Each test fails on the code the review attacked.

mod common;

use common::*;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio_postgres::error::SqlState;
use toolgate_cli::db;
use toolgate_cli::fixture::{APP, DBA};
use toolgate_cli::keys;

/// The server log's length now: what a test writes to it comes after.
fn log_mark() -> u64 {
    std::fs::metadata(std::env::var("TOOLGATE_TEST_LOG").expect("TOOLGATE_TEST_LOG")).map(|m| m.len()).unwrap_or(0)
}

/// The server log from `mark` on, once it holds `needle` (the logger writes asynchronously).
async fn log_since(mark: u64, needle: &str) -> String {
    let path = std::env::var("TOOLGATE_TEST_LOG").expect("TOOLGATE_TEST_LOG");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let all = std::fs::read(&path).unwrap_or_default();
        let text = String::from_utf8_lossy(&all[(mark as usize).min(all.len())..]).into_owned();
        if text.contains(needle) || Instant::now() > deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// F1: an agent exports a snapshot, the DBA raises the close policy to tier 1, and another
/// session imports the old snapshot. Its call, and every later call of that backend, must see
/// tier 1: nothing applies without a person.
#[tokio::test]
async fn f1_an_imported_snapshot_does_not_pin_old_configuration() {
    let lab = lab("sr_snapshot").await;
    let root = lab.connect("postgres").await.unwrap();
    let dba = lab.connect(DBA).await.unwrap();
    let holder = lab.connect(APP).await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    let token = lab.supervisor_a();
    let policy = |tier: i32| {
        format!("SELECT toolgate.set_policy('shopping-a', 'request_close', true, ARRAY['supervisor'], {tier})")
    };

    dba.batch_execute(&policy(0)).await.unwrap();
    holder.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await.unwrap();
    let snapshot: String = holder.query_one("SELECT pg_export_snapshot()", &[]).await.unwrap().get(0);
    dba.batch_execute(&policy(1)).await.unwrap();

    app.batch_execute(&format!("BEGIN ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '{snapshot}'"))
        .await
        .unwrap();
    let inside = db::request_close(&app, &token, "conv-snap", &close_args("742", "snap-742-a")).await.unwrap();
    assert_eq!(outcome(&inside), ("NEEDS_CONFIRMATION", "-"), "under the imported snapshot: {inside}");
    app.batch_execute("ROLLBACK").await.unwrap();
    let after = db::request_close(&app, &token, "conv-snap", &close_args("742", "snap-742-b")).await.unwrap();
    assert_eq!(outcome(&after), ("NEEDS_CONFIRMATION", "-"), "in a new transaction: {after}");
    holder.batch_execute("COMMIT").await.unwrap();
    assert_eq!(effects(&root, "742").await, 0);
}

/// F4: tenant A's login holds the advisory locks the gate used to serialize on (a conversation
/// of tenant B's, and B's policy row). B's proposal and the DBA's set_policy go on regardless.
#[tokio::test]
async fn f4_advisory_locks_a_client_holds_block_nobody() {
    let lab = lab("sr_advisory").await;
    let root = lab.connect("postgres").await.unwrap();
    root.batch_execute("INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected) VALUES ('shopping-b', '744', 'open', true)")
        .await
        .unwrap();
    let attacker = lab.connect(APP).await.unwrap();
    attacker
        .batch_execute(
            "SELECT pg_advisory_lock(29799, hashtext('shopping-b/conv-b1')), \
             pg_advisory_lock(hashtext('toolgate.policies'), hashtext('shopping-b/request_close'))",
        )
        .await
        .unwrap();
    let app = lab.connect(APP).await.unwrap();
    app.batch_execute("SET statement_timeout = '5s'").await.unwrap();
    let reply = db::request_close(&app, &lab.supervisor_b(), "conv-b1", &close_args("744", "advisory-744-a")).await;
    assert_eq!(outcome(&reply.expect("not blocked by the client's lock")), ("NEEDS_CONFIRMATION", "-"));
    let dba = lab.connect(DBA).await.unwrap();
    dba.batch_execute("SET statement_timeout = '5s'").await.unwrap();
    dba.batch_execute("SELECT toolgate.set_policy('shopping-b', 'request_close', true, ARRAY['supervisor'], 1)")
        .await
        .expect("set_policy not blocked by the client's lock");
}

/// F7: in a read-only transaction, a valid and an invalid token get the same error: SQLSTATE
/// 25006, one fixed message, no detail, no hint; and each leaves a LOG line.
#[tokio::test]
async fn f7_read_only_transactions_are_refused_alike_and_logged() {
    let lab = lab("sr_read_only").await;
    let app = lab.connect(APP).await.unwrap();
    let mark = log_mark();
    let mut seen = Vec::new();
    for token in [lab.supervisor_a(), "not.a.token".to_string()] {
        app.batch_execute("BEGIN READ ONLY").await.unwrap();
        let e = db::request_close(&app, &token, "conv-ro", &close_args("742", "ro-742-a")).await.unwrap_err();
        let e =
            e.downcast_ref::<tokio_postgres::Error>().and_then(|e| e.as_db_error()).expect("a database error").clone();
        app.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(e.code(), &SqlState::READ_ONLY_SQL_TRANSACTION);
        assert_eq!((e.detail(), e.hint()), (None, None), "{e:?}");
        seen.push(e.message().to_string());
    }
    assert_eq!(seen[0], seen[1]);
    let log = log_since(mark, "read_only_transaction").await;
    assert!(log.matches("\"event\":\"toolgate_refusal\"").count() >= 2, "{log}");
    assert!(!log.contains("not.a.token"), "the log holds what the caller sent");
}

/// F9: `explain_call` whose gate raises (here: the ERP's write fails with a serialization
/// failure, which the gate raises for the client to retry), inside a PL/pgSQL exception block. The block's own work commits, and the backend still logs its denials.
#[tokio::test]
async fn f9_explain_call_failing_inside_an_exception_block_leaves_the_caller_whole() {
    let lab = lab("sr_explain").await;
    let root = lab.connect("postgres").await.unwrap();
    let dba = lab.connect(DBA).await.unwrap();
    dba.batch_execute("SELECT toolgate.set_policy('shopping-a', 'request_close', true, ARRAY['supervisor'], 0)")
        .await
        .unwrap();
    root.batch_execute(
        "CREATE TABLE public.after_explain (n int); \
         CREATE FUNCTION public.erp_refuses() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN RAISE EXCEPTION 'the ERP refuses' USING ERRCODE = 'serialization_failure'; END $$; \
         CREATE TRIGGER erp_refuses BEFORE INSERT ON maintenance.close_requests \
         FOR EACH ROW EXECUTE FUNCTION public.erp_refuses();",
    )
    .await
    .unwrap();
    let token = lab.supervisor_a();
    let args = close_args("742", "explain-742-a").to_string();
    // The block reads the token and the arguments from this session's settings.
    root.execute("SELECT set_config('sr.token', $1, false), set_config('sr.args', $2, false)", &[&token, &args])
        .await
        .unwrap();
    root.batch_execute(
        "DO $$ BEGIN \
           BEGIN PERFORM toolgate.explain_call(current_setting('sr.token'), 'request_close', 'conv-x', current_setting('sr.args')::jsonb); \
           EXCEPTION WHEN others THEN INSERT INTO public.after_explain VALUES (1); END; \
           INSERT INTO public.after_explain VALUES (2); END $$",
    )
    .await
    .expect("the DO block runs");
    let other = lab.connect("postgres").await.unwrap();
    let rows = count(&other, "SELECT count(*) FROM public.after_explain WHERE n IN (1, 2)").await;
    assert_eq!(rows, 2, "the caller's own work after the failed explain_call is committed");
    // The same backend writes the LOG line of its next denial: it is not left in dry-run mode.
    let mark = log_mark();
    let denied =
        db::request_close(&root, &token, "conv-after-explain", &close_args("743", "explain-743-b")).await.unwrap();
    assert_eq!(outcome(&denied), ("BLOCKED", "target_not_found"));
    let log = log_since(mark, "conv-after-explain").await;
    assert!(log.contains("conv-after-explain"), "no denial LOG line after the failed explain_call: {log}");
}

/// F10: a schema version made in a transaction that rolled back, then made again with other
/// content, in the same backend: the new content is the one enforced.
#[tokio::test]
async fn f10_a_rolled_back_schema_version_is_never_enforced() {
    let lab = lab("sr_schema").await;
    let root = lab.connect("postgres").await.unwrap();
    let token = lab.supervisor_a();
    let schema = |min: u32| {
        json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
               "additionalProperties": false, "required": ["order_id", "reason", "idempotency_key"],
               "properties": {"order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"},
                              "reason": {"type": "string", "minLength": min, "maxLength": 120},
                              "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}}})
    };
    root.batch_execute("BEGIN").await.unwrap();
    root.execute("SELECT toolgate.set_tool_schema('request_close', $1)", &[&schema(60)]).await.unwrap();
    let strict = db::request_close(&root, &token, "conv-schema", &close_args("742", "schema-742-a")).await.unwrap();
    assert_eq!(outcome(&strict), ("REJECTED", "schema_invalid"));
    root.batch_execute("ROLLBACK").await.unwrap();
    let v: i32 =
        root.query_one("SELECT toolgate.set_tool_schema('request_close', $1)", &[&schema(9)]).await.unwrap().get(0);
    assert_eq!(v, 2, "the rolled-back version number comes back");
    let lax = db::request_close(&root, &token, "conv-schema", &close_args("742", "schema-742-b")).await.unwrap();
    assert_eq!(outcome(&lax), ("NEEDS_CONFIRMATION", "-"), "{lax}");
}

/// F11: the ids a reply carries say nothing about other tenants' volume: random UUIDs.
#[tokio::test]
async fn f11_ids_in_replies_are_random() {
    let lab = lab("sr_ids").await;
    let dba = lab.connect(DBA).await.unwrap();
    dba.batch_execute("SELECT toolgate.set_policy('shopping-a', 'request_close', true, ARRAY['supervisor'], 0)")
        .await
        .unwrap();
    let app = lab.connect(APP).await.unwrap();
    let reply =
        db::request_close(&app, &lab.supervisor_a(), "conv-ids", &close_args("742", "ids-742-a")).await.unwrap();
    assert_eq!(outcome(&reply), ("SUCCEEDED", "-"));
    let id = reply["result"]["request_id"].as_str().expect("a string id");
    assert!(uuid::Uuid::parse_str(id).is_ok_and(|u| u.get_version_num() == 4), "{id}");
}

/// A token valid only later (`nbf`), one that lives for ever, one longer than the configured
/// lifetime: identity_invalid with their reasons. Only a superuser may change the lifetime.
#[tokio::test]
async fn tokens_not_yet_valid_or_living_too_long_are_refused() {
    let lab = lab("sr_lifetime").await;
    let root = lab.connect("postgres").await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    let now = keys::now();
    let claims = |extra: serde_json::Value| {
        let mut c = json!({"sub": "user-17", "tenant": "shopping-a", "role": "supervisor", "exp": now + 600});
        c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        lab.a.idp.sign(&c)
    };
    for (token, reason) in [
        (claims(json!({"nbf": now + 3600})), "not_yet_valid"),
        (claims(json!({"exp": i64::MAX})), "lifetime"),
        (claims(json!({"iat": now - 3 * 86400, "exp": now + 600})), "lifetime"),
    ] {
        assert_eq!(outcome(&db::read_order(&app, &token, "742").await.unwrap()), ("BLOCKED", "identity_invalid"));
        assert_eq!(last_reason(&root).await, reason);
    }
    assert_eq!(refused(&app, "SET toolgate.max_token_lifetime = 999999999").await, SqlState::INSUFFICIENT_PRIVILEGE);
    root.batch_execute("SET toolgate.max_token_lifetime = '5min'").await.unwrap();
    let ten_minutes = claims(json!({}));
    assert_eq!(outcome(&db::read_order(&root, &ten_minutes, "742").await.unwrap()), ("BLOCKED", "identity_invalid"));
    assert_eq!(last_reason(&root).await, "lifetime");
    assert_eq!(outcome(&db::read_order(&app, &ten_minutes, "742").await.unwrap()), ("SUCCEEDED", "-"));
}

/// An argument datum far over the bound is refused by its stored size, as schema_invalid.
#[tokio::test]
async fn an_oversized_argument_is_refused_by_its_size() {
    let lab = lab("sr_oversize").await;
    let app = lab.connect(APP).await.unwrap();
    let args = json!({"order_id": "742", "reason": "x".repeat(4 << 20), "idempotency_key": "oversize-742-a"});
    let reply = db::request_close(&app, &lab.supervisor_a(), "conv-big", &args).await.unwrap();
    assert_eq!(outcome(&reply), ("REJECTED", "schema_invalid"));
    assert_eq!(reply["errors"][0]["keyword"], "maxBytes");
}

/// Review of 0.2.0, item 16: a valid token tested inside `BEGIN … ROLLBACK` leaves no audit row.
/// With `toolgate.log_calls` on (superuser-only), every call leaves its LOG line, without the
/// token; off (the default), only denials do. The application's login cannot turn it off.
#[tokio::test]
async fn a_rolled_back_call_leaves_a_line_when_log_calls_is_on() {
    let lab = lab("sr_log_calls").await;
    let root = lab.connect("postgres").await.unwrap();
    let token = lab.supervisor_a();
    root.batch_execute("SET ROLE toolgate_agent").await.unwrap();
    let mark = log_mark();
    for (conversation, key) in [("conv-log-off", "log-742-off"), ("conv-log-on", "log-742-on")] {
        if conversation == "conv-log-on" {
            root.batch_execute("RESET ROLE; SET toolgate.log_calls = on; SET ROLE toolgate_agent").await.unwrap();
        }
        root.batch_execute("BEGIN").await.unwrap();
        let reply = db::request_close(&root, &token, conversation, &close_args("742", key)).await.unwrap();
        assert_eq!(outcome(&reply), ("NEEDS_CONFIRMATION", "-"), "{reply}");
        root.batch_execute("ROLLBACK").await.unwrap();
    }
    let log = log_since(mark, "conv-log-on").await;
    assert_eq!(log.matches("\"conversation\":\"conv-log-on\"").count(), 1, "{log}");
    assert!(log.contains("\"event\":\"toolgate_call\""), "{log}");
    assert!(!log.contains("conv-log-off"), "a call logged with the setting off: {log}");
    assert!(!log.contains(&token), "the log holds the token");
    let app = lab.connect(APP).await.unwrap();
    db::request_close(&app, &token, "conv-log-app", &close_args("742", "log-742-app")).await.unwrap();
    let e = app.batch_execute("SET toolgate.log_calls = off").await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{e}");
}

/// A listing (`toolgate.tools`) refused for its token leaves no audit row, only a LOG line: the
/// line names why (here `expired`), so an operator can tell an expired token from a forged one.
#[tokio::test]
async fn a_refused_listing_logs_why() {
    let lab = lab("sr_tools_log").await;
    let app = lab.connect(APP).await.unwrap();
    let now = keys::now();
    let expired = lab.a.idp.sign(
        &serde_json::json!({"sub": "user-17", "tenant": "shopping-a", "role": "supervisor", "iat": now - 600, "exp": now - 1}),
    );
    let mark = log_mark();
    let listing = db::json(&app, "SELECT toolgate.tools($1)", &[&expired]).await.unwrap();
    assert_eq!(outcome(&listing), ("BLOCKED", "identity_invalid"));
    let log = log_since(mark, "\"entry\":\"tools\"").await;
    assert!(
        log.contains(r#"{"entry":"tools","event":"toolgate_refusal","reason":"identity_invalid: expired"}"#),
        "{log}"
    );
    assert!(!log.contains(&expired), "the log holds the token");
}
