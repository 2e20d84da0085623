//! Confirmations that must not count: forged, replayed for another proposal, older than their
//! proposal, for a superseded proposal, for an expired one.

mod common;

use common::*;
use serde_json::Value;
use toolgate_cli::db;
use toolgate_cli::fixture::{Lab, APP, DBA};
use toolgate_cli::keys;
use toolgate_core::token::Signer;

async fn propose(lab: &Lab, app: &tokio_postgres::Client, conv: &str, order: &str, key: &str) -> String {
    let r = db::request_close(app, &lab.supervisor_a(), conv, &close_args(order, key)).await.unwrap();
    assert_eq!(outcome(&r), ("NEEDS_CONFIRMATION", "-"), "{r}");
    r["proposal"]["id"].as_str().unwrap().to_string()
}

fn yes(lab: &Lab, pid: &str, at: i64) -> String {
    keys::confirmation(&lab.a.channel, pid, "approve", "sim", at, "typed")
}

#[tokio::test]
async fn forged_replayed_stale_superseded_and_expired_confirmations_fail() {
    let lab = lab("forged_confirmation").await;
    let root = lab.connect("postgres").await.unwrap();
    let root_orders = "INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected) VALUES \
                       ('shopping-a', '901', 'open', true), ('shopping-a', '902', 'open', true), \
                       ('shopping-a', '903', 'open', true), ('shopping-a', '904', 'open', true)";
    root.batch_execute(root_orders).await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    let id = lab.supervisor_a();

    // Forged: signed by a key the tenant never registered, and by the model's own guess of a
    // channel key (the identity provider's).
    let a = propose(&lab, &app, "conv-a", "901", "fconf-901").await;
    for forged in [
        Signer::from_seed("chan-shopping-a", [9; 32]).sign(&serde_json::json!({
            "proposal": a, "decision": "approve", "text": "sim", "at": keys::now(), "exp": keys::now() + 60})),
        keys::confirmation(&lab.a.idp, &a, "approve", "sim", keys::now(), "typed"),
    ] {
        let r = db::confirm(&app, &id, &forged).await.unwrap();
        assert_eq!(outcome(&r), ("BLOCKED", "confirmation_invalid"));
    }

    // Older than its proposal.
    let r = db::confirm(&app, &id, &yes(&lab, &a, keys::now() - 3600)).await.unwrap();
    assert_eq!(outcome(&r), ("BLOCKED", "confirmation_invalid"));
    assert_eq!(last_reason(&root).await, "older_than_proposal");

    // A real one applies A; replaying it cannot apply B, whose id it does not carry.
    let token_a = yes(&lab, &a, keys::now());
    assert_eq!(outcome(&db::confirm(&app, &id, &token_a).await.unwrap()), ("SUCCEEDED", "-"));
    let b = propose(&lab, &app, "conv-a", "902", "fconf-902").await;
    let replay: Value = db::confirm(&app, &id, &token_a).await.unwrap();
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["result"]["order_id"], "901");
    assert_eq!(effects(&root, "902").await, 0);
    assert_eq!(
        count(&root, &format!("SELECT count(*) FROM toolgate.proposals WHERE proposal_id = '{b}' AND status = 'live'"))
            .await,
        1
    );

    // Superseded: a newer proposal in the same conversation replaces B.
    let _c = propose(&lab, &app, "conv-a", "903", "fconf-903").await;
    let r = db::confirm(&app, &id, &yes(&lab, &b, keys::now())).await.unwrap();
    assert_eq!(outcome(&r), ("BLOCKED", "proposal_not_live"));
    assert_eq!(last_reason(&root).await, "superseded");

    // Expired: a one-second confirmation window.
    let dba = lab.connect(DBA).await.unwrap();
    dba.execute(
        "SELECT toolgate.set_policy('shopping-a', 'request_close', true, ARRAY['supervisor'], 1, confirm_ttl => interval '1 second')",
        &[],
    )
    .await
    .unwrap();
    let d = propose(&lab, &app, "conv-d", "904", "fconf-904").await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let r = db::confirm(&app, &id, &yes(&lab, &d, keys::now())).await.unwrap();
    assert_eq!(outcome(&r), ("BLOCKED", "proposal_not_live"));
    assert_eq!(last_reason(&root).await, "expired");

    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.effects").await, 1);
}
