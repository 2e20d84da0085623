//! The database stopped with `pg_ctl stop -m immediate` in the middle of a dispatcher's batch,
//! then started again: the dispatcher (`toolgate dispatch`, a process of its own, polling)
//! connects again and goes on; intents it had claimed are claimed again when their lease ends
//! and reconciled by key first. 0 intents lost, 0 effects twice at the ERP. A test binary of its
//! own, with one test: it stops the server every test of the suite uses, so nothing else may run
//! beside it (cargo runs test binaries one after another).

mod common;

use common::outbox::*;
use common::*;
use std::path::PathBuf;
use std::time::Duration;
use toolgate_fake_erp::{Fault, Matcher};

#[tokio::test]
async fn the_database_stopped_immediately_mid_batch_loses_and_duplicates_nothing() {
    let s = setup("dispatch_crash").await;
    const N: usize = 30;
    for i in 1..=N {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("crash-key-{i}")).await), ("PENDING", "-"));
    }
    let data: String = s.root.query_one("SHOW data_directory", &[]).await.unwrap().get(0);
    let data = PathBuf::from(data);
    let log = std::env::var("TOOLGATE_TEST_LOG").expect("TOOLGATE_TEST_LOG: the server's log file");
    // Every write is applied 300 ms after it arrives, whether or not anyone still waits for it.
    s.erp.queue_fault(Fault::Late(Duration::from_millis(300)), N as u32, Matcher::parse("POST /purchases").unwrap());
    let pg_ctl_bin = pg_ctl_of(&data);
    let child = s.spawn_dispatcher(&["--retry-delay", "0.3"]);
    for _ in 0..200 {
        if s.erp.effects()["writes_received"].as_i64().unwrap_or(0) >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Mid-batch: requests in flight, their settlements not yet written.
    pg_ctl(&pg_ctl_bin, &data, &["stop", "-m", "immediate", "-w"]);
    let sent = s.erp.effects()["writes_received"].as_i64().unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    pg_ctl(&pg_ctl_bin, &data, &["-l", &log, "-w", "-t", "60", "start"]);

    // The dispatcher connects again by itself.
    let root = s.lab.connect("postgres").await.unwrap();
    let open = wait_final(&root, 300).await;
    drop(child);
    assert!((1..N as i64).contains(&sent), "stopped mid-run: {sent} of {N} sent");
    assert_eq!(open, 0, "0 lost intents");
    let effects = s.erp.effects();
    for (key, state) in effects["by_key"].as_object().unwrap() {
        assert_eq!(state["effects"], 1, "0 duplicates: {key}: {state}");
    }
    assert_eq!(effects["effects"], N, "{effects}");
    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.outbox WHERE state = 'SUCCEEDED'").await, N as i64);
    assert_eq!(
        count(&root, "SELECT count(*) FROM toolgate.audit WHERE kind = 'dispatch' AND outcome = 'SUCCEEDED'").await,
        N as i64,
        "each intent settled SUCCEEDED once"
    );
    let app = s.lab.connect(toolgate_cli::fixture::APP).await.unwrap();
    for i in 1..=N {
        let args = serde_json::json!({"order_id": format!("o{i}"), "part": "filter", "quantity": 2,
                                      "idempotency_key": format!("crash-key-{i}")});
        let status = toolgate_cli::db::json(
            &app,
            "SELECT toolgate.call($1, 'conv-erp', $2, $3)",
            &[&s.lab.supervisor_a(), &TOOL, &args],
        )
        .await
        .unwrap();
        assert_eq!((outcome(&status), status["replayed"].as_bool()), (("SUCCEEDED", "-"), Some(true)), "{status}");
    }
}
