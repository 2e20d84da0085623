//! Maker-checker seen from outside (docs/approvals.md): a proposal that approvers decide tells
//! the agent who must decide it (on the call and on its retry), notifies `toolgate_pending` when
//! the call commits (the tenant, the tool and the proposal; never its text), and an approver's
//! approval applies it once, which the agent's retry then replays.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;
use tokio_postgres::{AsyncMessage, Config, NoTls};
use toolgate_cli::db;
use toolgate_cli::fixture::{APP, DBA};
use toolgate_cli::keys;

#[tokio::test]
async fn a_proposal_for_approvers_is_announced_and_applied_by_an_approval() {
    let lab = lab("approvals_announced").await;
    let dba = lab.connect(DBA).await.unwrap();
    dba.batch_execute("SELECT toolgate.set_policy('shopping-a', 'request_close', approver_roles => ARRAY['manager'])")
        .await
        .unwrap();
    let root = lab.connect("postgres").await.unwrap();
    root.batch_execute(
        "DO $$ BEGIN CREATE ROLE toolgate_test_approver LOGIN IN ROLE toolgate_approver; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$",
    )
    .await
    .unwrap();

    // A listener, as an approvals console would be.
    let (listener, mut connection) = Config::new()
        .host(&lab.server.host)
        .port(lab.server.port)
        .user("postgres")
        .dbname(&lab.dbname)
        .connect(NoTls)
        .await
        .unwrap();
    let (heard, mut hearing) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notification(n) = message {
                let _ = heard.send((n.channel().to_string(), n.payload().to_string()));
            }
        }
    });
    listener.batch_execute("LISTEN toolgate_pending").await.unwrap();

    let app = lab.connect(APP).await.unwrap();
    let requester = lab.supervisor_a();
    let args = close_args("742", "approvals-742");
    let proposed = db::request_close(&app, &requester, "conv-approvals", &args).await.unwrap();
    assert_eq!(proposed["outcome"], "NEEDS_CONFIRMATION");
    assert_eq!(proposed["result"]["approvers"], serde_json::json!(["manager"]), "{proposed}");
    assert_eq!(proposed["result"]["needed"], 1);
    let pid = proposed["proposal"]["id"].as_str().unwrap().to_string();

    let (channel, payload) = tokio::time::timeout(Duration::from_secs(10), hearing.recv()).await.unwrap().unwrap();
    assert_eq!(channel, "toolgate_pending");
    let payload: Value = serde_json::from_str(&payload).unwrap();
    assert_eq!(payload, serde_json::json!({"tenant": "shopping-a", "tool": "request_close", "proposal": pid}));

    // The retry while it waits says the same: approvers decide it.
    let waiting = db::request_close(&app, &requester, "conv-approvals", &args).await.unwrap();
    assert_eq!(waiting["outcome"], "NEEDS_CONFIRMATION");
    assert_eq!(waiting["result"]["approvers"], serde_json::json!(["manager"]), "{waiting}");

    // The requester's own channel yes does not apply it.
    let yes = keys::confirmation(&lab.a.channel, &pid, "approve", "sim", keys::now(), "typed");
    let own = db::confirm(&app, &requester, &yes).await.unwrap();
    assert_eq!(outcome(&own), ("BLOCKED", "approval_required"));

    // A manager of the tenant approves, with their own identity token.
    let manager = keys::identity(&lab.a.idp, "user-99", "shopping-a", "manager", 600);
    let approver = lab.connect("toolgate_test_approver").await.unwrap();
    let approved: Value =
        approver.query_one("SELECT toolgate.approve($1, $2, 'approve')", &[&manager, &pid]).await.unwrap().get(0);
    assert_eq!(outcome(&approved), ("SUCCEEDED", "-"), "{approved}");
    assert_eq!(effects(&root, "742").await, 1);

    let replayed = db::request_close(&app, &requester, "conv-approvals", &args).await.unwrap();
    assert_eq!(outcome(&replayed), ("SUCCEEDED", "-"));
    assert_eq!(replayed["replayed"], true);
    assert_eq!(effects(&root, "742").await, 1);
    // The agent's login cannot approve.
    let refused = refused(&app, &format!("SELECT toolgate.approve('{manager}', '{pid}', 'approve')")).await;
    assert_eq!(refused, tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE);
}
