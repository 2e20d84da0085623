//! Purchases under concurrency, over real connections: N parallel calls against a quota of q
//! admit exactly q; parallel purchases against one budget never overspend it, and the calls the
//! budget refused consume no quota.

mod common;

use common::*;
use serde_json::json;
use toolgate_cli::db;
use toolgate_cli::fixture::{Lab, APP, DBA};

async fn tier0_purchases(lab: &Lab, quota: i32) {
    let dba = lab.connect(DBA).await.unwrap();
    dba.execute(
        "SELECT toolgate.set_policy('shopping-a', 'request_purchase_part', true, ARRAY['supervisor'], 0, \
         max_value => 900, max_calls_per_conversation => $1, clear => ARRAY['tier2_above', 'tier3_above'])",
        &[&quota],
    )
    .await
    .unwrap();
}

async fn fire(lab: &Lab, calls: usize, part: &str, conversation: impl Fn(usize) -> String) -> Vec<(String, String)> {
    let id = lab.supervisor_a();
    let mut tasks = Vec::new();
    for i in 0..calls {
        let client = lab.connect(APP).await.unwrap();
        let (id, conv) = (id.clone(), conversation(i));
        let args = json!({"order_id": "741", "part_id": part, "quantity": 1, "cost_center": "CC-MANUT",
                          "idempotency_key": format!("parallel-{part}-{i}")});
        tasks.push(tokio::spawn(async move {
            let r = db::request_purchase_part(&client, &id, &conv, &args).await.unwrap();
            let (o, rule) = outcome(&r);
            (o.to_string(), rule.to_string())
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

fn tally(results: &[(String, String)], outcome: &str, rule: &str) -> usize {
    results.iter().filter(|(o, r)| o == outcome && r == rule).count()
}

#[tokio::test]
async fn parallel_purchases_against_one_quota_admit_exactly_q() {
    let lab = lab("parallel_quota").await;
    tier0_purchases(&lab, 5).await;
    let root = lab.connect("postgres").await.unwrap();
    let results = fire(&lab, 20, "F-200", |_| "conv-one".to_string()).await;
    assert_eq!(tally(&results, "SUCCEEDED", "-"), 5, "{results:?}");
    assert_eq!(tally(&results, "BLOCKED", "rate_over_limit"), 15, "{results:?}");
    assert_eq!(
        count(&root, "SELECT used::bigint FROM toolgate.quota_usage WHERE conversation_id = 'conv-one'").await,
        5
    );
    assert_eq!(count(&root, "SELECT count(*) FROM maintenance.purchases").await, 5);
}

#[tokio::test]
async fn parallel_purchases_against_one_budget_never_overspend() {
    let lab = lab("parallel_budget").await;
    tier0_purchases(&lab, 10).await;
    let root = lab.connect("postgres").await.unwrap();
    // R$ 480,00 each against R$ 2.000,00: four fit, whatever the interleaving.
    let results = fire(&lab, 16, "B42-MOTOR", |i| format!("conv-{i}")).await;
    assert_eq!(tally(&results, "SUCCEEDED", "-"), 4, "{results:?}");
    assert_eq!(tally(&results, "BLOCKED", "budget_exceeded"), 12, "{results:?}");
    let (spent, budget): (String, String) = {
        let row = root
            .query_one(
                "SELECT spent::text, budget::text FROM maintenance.cost_centers WHERE cost_center = 'CC-MANUT'",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((spent.as_str(), budget.as_str()), ("1920.00", "2000.00"));
    assert_eq!(count(&root, "SELECT count(*) FROM maintenance.purchases").await, 4);
    // Refused purchases consumed no quota, wherever the budget refused them.
    assert_eq!(count(&root, "SELECT coalesce(sum(used), 0)::bigint FROM toolgate.quota_usage").await, 4);
}
