//! Races over real concurrent connections: one key used by two calls at once makes one effect,
//! the second waits and replays; N parallel calls against a quota of q admit exactly q.

mod common;

use common::*;
use std::time::Duration;
use toolgate_cli::db;
use toolgate_cli::fixture::{APP, DBA};

#[tokio::test]
async fn one_key_two_concurrent_calls_one_effect() {
    let lab = lab("race_same_key").await;
    let dba = lab.connect(DBA).await.unwrap();
    dba.execute("SELECT toolgate.set_policy('shopping-a', 'request_close', true, ARRAY['supervisor'], 0)", &[])
        .await
        .unwrap();
    let root = lab.connect("postgres").await.unwrap();
    let first = lab.connect(APP).await.unwrap();
    let second = lab.connect(APP).await.unwrap();
    let id = lab.supervisor_a();
    let args = close_args("742", "race-742");

    // The first call holds its reservation in an open transaction…
    first.batch_execute("BEGIN").await.unwrap();
    let r1 = db::request_close(&first, &id, "conv-race", &args).await.unwrap();
    assert_eq!(outcome(&r1), ("SUCCEEDED", "-"));
    // …the second call with the same key must wait for it.
    let (id2, args2) = (id.clone(), args.clone());
    let waiting = tokio::spawn(async move { db::request_close(&second, &id2, "conv-race", &args2).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the second call did not wait for the first");
    first.batch_execute("COMMIT").await.unwrap();
    let r2 = waiting.await.unwrap();
    assert_eq!(outcome(&r2), ("SUCCEEDED", "-"));
    assert_eq!(r2["replayed"], true);
    assert_eq!(r2["result"], r1["result"]);
    assert_eq!(effects(&root, "742").await, 1);
}

#[tokio::test]
async fn parallel_calls_against_a_quota_admit_exactly_q() {
    let lab = lab("race_quota").await;
    let dba = lab.connect(DBA).await.unwrap();
    dba.execute(
        "SELECT toolgate.set_policy('shopping-a', 'request_close', true, ARRAY['supervisor'], 1, max_calls_per_conversation => 3)",
        &[],
    )
    .await
    .unwrap();
    let root = lab.connect("postgres").await.unwrap();
    let id = lab.supervisor_a();
    let mut calls = Vec::new();
    for i in 0..12 {
        let client = lab.connect(APP).await.unwrap();
        let id = id.clone();
        calls.push(tokio::spawn(async move {
            db::request_close(&client, &id, "conv-quota", &close_args("742", &format!("quota-742-{i}"))).await.unwrap()
        }));
    }
    let mut admitted = 0;
    let mut limited = 0;
    for c in calls {
        match outcome(&c.await.unwrap()) {
            ("NEEDS_CONFIRMATION", _) => admitted += 1,
            ("BLOCKED", "rate_over_limit") => limited += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((admitted, limited), (3, 9));
    assert_eq!(
        count(&root, "SELECT used::bigint FROM toolgate.quota_usage WHERE conversation_id = 'conv-quota'").await,
        3
    );
    // One live proposal per conversation: the three superseded each other.
    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.proposals WHERE status = 'live'").await, 1);
}
