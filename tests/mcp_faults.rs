//! `toolgate mcp --http` through faults, as an agent host meets them and retries them: the
//! database stopped with `pg_ctl stop -m immediate` while 16 sessions close orders, and the server
//! killed (-9) in the middle of a call and started again. Each host retries a call that was not
//! answered SUCCEEDED with the same idempotency key until it is. Judged from the tables: each key
//! one effect, none lost. A test binary of its own: it stops the server every test uses, and its
//! two tests take turns (`SERIAL`).

mod common;

use common::mcp::{database, post_to, tool_call, Mcp};
use common::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::Client;
use toolgate_cli::keys;

/// One test at a time: one stops the database the other uses.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Closes of shopping-a at tier 0, with orders 10001 and on.
async fn tier0(root: &Client, orders: usize) {
    root.batch_execute(&format!(
        "SET ROLE toolgate_admin;
         SELECT toolgate.set_policy('shopping-a', 'request_close', true, ARRAY['supervisor'], 0,
                                    max_calls_per_conversation => 1000000);
         RESET ROLE;
         INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected)
         SELECT 'shopping-a', (10000 + g)::text, 'open', true FROM generate_series(1, {orders}) g;"
    ))
    .await
    .unwrap();
}

/// One `tools/call` of a close as `token`: the gate's outcome word, or why there was none.
async fn close(addr: SocketAddr, token: &str, conversation: &str, order: usize) -> Result<String, String> {
    let body = tool_call("request_close", close_args(&(10000 + order).to_string(), &format!("fault-key-{order}")));
    let reply = post_to(addr, token, conversation, &body, &[], Duration::from_secs(30)).await?;
    if reply.status != 200 {
        return Err(format!("HTTP {}", reply.status));
    }
    let answer: Value = serde_json::from_slice(&reply.body).map_err(|e| e.to_string())?;
    match answer["result"]["structuredContent"]["outcome"].as_str() {
        Some(word) => Ok(word.to_string()),
        None => {
            let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
            assert!(text.contains("nothing was applied"), "an error that does not say nothing was applied: {answer}");
            Err(text)
        }
    }
}

/// Retry `order`'s close with its key until the gate answers SUCCEEDED (as a host retries).
async fn close_until_done(addr: SocketAddr, token: &str, conversation: &str, order: usize, failures: &AtomicUsize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match close(addr, token, conversation, order).await {
            Ok(word) if word == "SUCCEEDED" => return,
            Ok(word) => panic!("order {order}: {word}"),
            Err(_) => {
                failures.fetch_add(1, Ordering::Relaxed);
                assert!(Instant::now() < deadline, "order {order} never succeeded");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn one_effect_each(root: &Client, orders: usize) {
    let row = root
        .query_one(
            "SELECT count(*), count(DISTINCT idempotency_key) FROM maintenance.close_requests \
              WHERE tenant_id = 'shopping-a' AND idempotency_key LIKE 'fault-key-%'",
            &[],
        )
        .await
        .unwrap();
    let (effects, keys): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((effects, keys), (orders as i64, orders as i64), "one effect per key, none lost");
}

#[tokio::test]
async fn the_database_stopped_under_sixteen_sessions() {
    const SESSIONS: usize = 16;
    const EACH: usize = 20;
    let _turn = SERIAL.lock().await;
    let lab = lab("mcp_db_restart").await;
    let root = lab.connect("postgres").await.unwrap();
    tier0(&root, SESSIONS * EACH).await;
    let data = PathBuf::from(root.query_one("SHOW data_directory", &[]).await.unwrap().get::<_, String>(0));
    let log = std::env::var("TOOLGATE_TEST_LOG").expect("TOOLGATE_TEST_LOG: the server's log file");
    let pg_ctl_bin = pg_ctl_of(&data);
    let mcp = Mcp::start(&[("TOOLGATE_DATABASE_URL", database(&lab))]).await;
    let done = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicUsize::new(0));
    let mut sessions = Vec::new();
    for s in 0..SESSIONS {
        let token =
            keys::identity_for(&lab.a.idp, &format!("user-{s}"), "shopping-a", "supervisor", 600, &[mcp.resource()]);
        let (addr, done, failures) = (mcp.addr, done.clone(), failures.clone());
        sessions.push(tokio::spawn(async move {
            for i in 1..=EACH {
                close_until_done(addr, &token, &format!("fault-conv-{s}"), s * EACH + i, &failures).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    while done.load(Ordering::Relaxed) < SESSIONS * EACH / 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(root);
    pg_ctl(&pg_ctl_bin, &data, &["stop", "-m", "immediate", "-w"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    pg_ctl(&pg_ctl_bin, &data, &["-l", &log, "-w", "-t", "60", "start"]);
    for session in sessions {
        session.await.unwrap();
    }
    let root = lab.connect("postgres").await.unwrap();
    one_effect_each(&root, SESSIONS * EACH).await;
    let failed = failures.load(Ordering::Relaxed);
    eprintln!(
        "{} closes by {SESSIONS} sessions, {failed} tries refused or unanswered during the outage, retried",
        SESSIONS * EACH
    );
    assert!(failed > 0, "no call met the outage: the test proved nothing");
    assert_eq!(mcp.get("/readyz").await.status, 200, "the same server process serves on");
}

#[tokio::test]
async fn the_server_killed_mid_call_and_started_again() {
    let _turn = SERIAL.lock().await;
    let lab = lab("mcp_server_kill").await;
    let root = lab.connect("postgres").await.unwrap();
    tier0(&root, 1).await;
    let holder = lab.connect("postgres").await.unwrap();
    holder
        .batch_execute(
            "BEGIN; SELECT 1 FROM maintenance.work_orders WHERE tenant_id = 'shopping-a' AND order_id = '10001' FOR UPDATE",
        )
        .await
        .unwrap();
    let env = [("TOOLGATE_DATABASE_URL", database(&lab)), ("TOOLGATE_LOCK_TIMEOUT", "60".into())];
    let addr = common::mcp::free_addr();
    let first = Mcp::start_on(addr, &[], &env).await;
    let token = keys::identity_for(&lab.a.idp, "user-17", "shopping-a", "supervisor", 600, &[first.resource()]);
    let in_flight = {
        let token = token.clone();
        tokio::spawn(async move { close(addr, &token, "kill-conv", 1).await })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(
        &root,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'toolgate-mcp' AND wait_event_type = 'Lock' \
              AND datname = current_database()",
    )
    .await
        == 0
    {
        assert!(Instant::now() < deadline, "the call never reached the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // kill -9 (Child::kill) while the call waits in the database.
    drop(first);
    assert!(in_flight.await.unwrap().is_err(), "the host got no answer");
    let second = Mcp::start_on(addr, &[], &env).await;
    // The first server's call is still in its backend; the lock goes, that call commits, and the
    // host's retry with the same key is answered from it.
    holder.batch_execute("ROLLBACK").await.unwrap();
    let failures = AtomicUsize::new(0);
    close_until_done(second.addr, &token, "kill-conv", 1, &failures).await;
    one_effect_each(&root, 1).await;
}
