//! A timeout says nothing about whether the effect happened. The reply is lost after commit (the
//! connection is dropped before the result is read); the client reconnects and retries with the
//! same key: one effect, one suppressed duplicate.

mod common;

use common::*;
use toolgate_cli::db;
use toolgate_cli::fixture::{APP, DBA};
use toolgate_cli::keys;

#[tokio::test]
async fn confirmed_close_lost_after_commit_is_replayed_not_repeated() {
    let lab = lab("lost_reply_tier1").await;
    let root = lab.connect("postgres").await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    let id = lab.supervisor_a();
    let args = close_args("742", "lost-742-a");
    let proposal = db::request_close(&app, &id, "conv-lost", &args).await.unwrap();
    let pid = proposal["proposal"]["id"].as_str().unwrap().to_string();
    let yes = keys::confirmation(&lab.a.channel, &pid, "approve", "sim", keys::now(), "typed");
    let id2 = id.clone();
    lab.lose_reply("lost-742-a", |lossy| async move {
        let _never_read = db::confirm(&lossy, &id2, &yes).await;
    })
    .await
    .unwrap();
    assert_eq!(effects(&root, "742").await, 1, "the confirmation committed");

    let app = lab.connect(APP).await.unwrap();
    let retry = db::request_close(&app, &id, "conv-lost", &args).await.unwrap();
    assert_eq!(outcome(&retry), ("SUCCEEDED", "-"));
    assert_eq!(retry["replayed"], true);
    let again = db::request_close(&app, &id, "conv-lost", &args).await.unwrap();
    assert_eq!(again["result"], retry["result"]);
    assert_eq!(effects(&root, "742").await, 1);
    assert_eq!(
        count(&root, "SELECT duplicates_suppressed FROM toolgate.panel WHERE tenant_id = 'shopping-a'").await,
        2
    );
}

#[tokio::test]
async fn tier0_close_lost_after_commit_is_replayed_not_repeated() {
    let lab = lab("lost_reply_tier0").await;
    let dba = lab.connect(DBA).await.unwrap();
    dba.execute("SELECT toolgate.set_policy('shopping-a', 'request_close', true, ARRAY['supervisor'], 0)", &[])
        .await
        .unwrap();
    let root = lab.connect("postgres").await.unwrap();
    let id = lab.supervisor_a();
    let args = close_args("742", "lost-742-t0");
    let (id2, args2) = (id.clone(), args.clone());
    lab.lose_reply("lost-742-t0", |lossy| async move {
        let _never_read = db::request_close(&lossy, &id2, "conv-lost", &args2).await;
    })
    .await
    .unwrap();
    assert_eq!(effects(&root, "742").await, 1);

    let app = lab.connect(APP).await.unwrap();
    let retry = db::request_close(&app, &id, "conv-lost", &args).await.unwrap();
    assert_eq!(outcome(&retry), ("SUCCEEDED", "-"));
    assert_eq!(retry["replayed"], true);
    assert_eq!(effects(&root, "742").await, 1);
    assert_eq!(
        count(&root, "SELECT duplicates_suppressed FROM toolgate.panel WHERE tenant_id = 'shopping-a'").await,
        1
    );

    // A retry with a new key is a new operation: the ERP state refuses a second close.
    let rotated = db::request_close(&app, &id, "conv-lost", &close_args("742", "lost-742-t0-rotated")).await.unwrap();
    assert_eq!(outcome(&rotated), ("BLOCKED", "state_not_allowed"));
    assert_eq!(effects(&root, "742").await, 1);
}
