//! A purchase while another purchase holds the cost centre, proven deterministically: the target
//! function locks the cost centre with the order (every row the effect will write), so the second
//! purchase waits there, then judges the budget the first left (`budget_exceeded` at the domain
//! step, no quota consumed), never overspends and never fails with an error. Parallel bursts
//! (tests/purchases.rs) rarely land in that window; an open transaction holds it open on purpose.
//! Without that lock the second would pass the domain step on a stale budget and meet the
//! effect's own guard (`spent + amount <= budget`) instead: a different outcome, which this test
//! tells apart.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;
use toolgate_cli::db;
use toolgate_cli::fixture::{APP, DBA};

#[tokio::test]
async fn a_purchase_that_waited_for_the_budget_is_refused_not_overspent() {
    let lab = lab("budget_taken_meanwhile").await;
    let dba = lab.connect(DBA).await.unwrap();
    dba.execute(
        "SELECT toolgate.set_policy('shopping-a', 'request_purchase_part', true, ARRAY['supervisor'], 0, \
         max_value => 900, max_calls_per_conversation => 5, clear => ARRAY['tier2_above', 'tier3_above'])",
        &[],
    )
    .await
    .unwrap();
    let root = lab.connect("postgres").await.unwrap();
    // R$ 560,00 left: room for one motor (R$ 480,00), not two.
    root.batch_execute(
        "UPDATE maintenance.cost_centers SET spent = 1440.00 WHERE tenant_id = 'shopping-a' AND cost_center = 'CC-MANUT'",
    )
    .await
    .unwrap();
    let id = lab.supervisor_a();
    // Two orders: the gate locks a purchase's order at the target step, so two purchases for one
    // order would wait there instead, before the domain step.
    let motor = |order: &str, key: &str| json!({"order_id": order, "part_id": "B42-MOTOR", "quantity": 1, "cost_center": "CC-MANUT", "idempotency_key": key});

    // The first purchase charges the budget in a transaction it keeps open…
    let first = lab.connect(APP).await.unwrap();
    first.batch_execute("BEGIN").await.unwrap();
    let r1 = db::request_purchase_part(&first, &id, "conv-first", &motor("741", "meanwhile-motor-1")).await.unwrap();
    assert_eq!(outcome(&r1), ("SUCCEEDED", "-"), "{r1}");

    // …so the second waits for the cost centre at its target step.
    let second = lab.connect(APP).await.unwrap();
    let (id2, args2) = (id.clone(), motor("742", "meanwhile-motor-2"));
    let waiting = tokio::spawn(async move { db::request_purchase_part(&second, &id2, "conv-second", &args2).await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!waiting.is_finished(), "the second purchase did not wait for the first");
    first.batch_execute("COMMIT").await.unwrap();

    let r2 = waiting.await.unwrap().expect("the waiting purchase gets an outcome, not an error");
    assert_eq!(outcome(&r2), ("BLOCKED", "budget_exceeded"), "{r2}");
    let spent: String = root
        .query_one(
            "SELECT spent::text FROM maintenance.cost_centers WHERE tenant_id = 'shopping-a' AND cost_center = 'CC-MANUT'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(spent, "1920.00");
    assert_eq!(count(&root, "SELECT count(*) FROM maintenance.purchases").await, 1);
    // The refused purchase consumed no quota: it was refused before step 6.
    assert_eq!(
        count(
            &root,
            "SELECT coalesce(sum(used), 0)::bigint FROM toolgate.quota_usage WHERE conversation_id = 'conv-second'"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &root,
            "SELECT count(*) FROM toolgate.audit WHERE rule = 'budget_exceeded' AND detail->>'available' = '80.00'"
        )
        .await,
        1
    );
}
