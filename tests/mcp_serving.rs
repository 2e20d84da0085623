//! `toolgate mcp --http` as a service many agents share: calls run on a pool of connections, so
//! one tenant's call waiting on a row lock does not hold another tenant's requests; a full pool
//! answers 503 with `Retry-After` at once; `/healthz`, `/readyz` and `/metrics` say what an
//! operator needs. Each over a real server process and real connections.

mod common;

use common::mcp::{database, free_addr, get, ping, tool_call, Mcp};
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio_postgres::Client;
use toolgate_cli::keys;

/// Hold order 742 of shopping-a's row lock, on a connection of its own, until ROLLBACK.
async fn hold_742(holder: &Client) {
    holder
        .batch_execute(
            "BEGIN; SELECT 1 FROM maintenance.work_orders WHERE tenant_id = 'shopping-a' AND order_id = '742' FOR UPDATE",
        )
        .await
        .unwrap();
}

/// Until a backend of the MCP server waits for a lock.
async fn until_a_call_waits(root: &Client) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let waiting = count(
            root,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'toolgate-mcp' AND wait_event_type = 'Lock'",
        )
        .await;
        if waiting > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "no call of the server ever waited for the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn one_tenants_wait_does_not_hold_the_others() {
    let lab = lab("mcp_head_of_line").await;
    let root = lab.connect("postgres").await.unwrap();
    let holder = lab.connect("postgres").await.unwrap();
    let listen = free_addr();
    let mcp = Mcp::start_with(
        &["--listen", &listen.to_string()],
        &[("TOOLGATE_DATABASE_URL", database(&lab)), ("TOOLGATE_LOCK_TIMEOUT", "60".into())],
    )
    .await;
    let a = keys::identity_for(&lab.a.idp, "user-17", "shopping-a", "supervisor", 600, &[mcp.resource()]);
    let b = keys::identity_for(&lab.b.idp, "user-31", "shopping-b", "supervisor", 600, &[mcp.resource()]);
    hold_742(&holder).await;
    let waiting = {
        let (mcp_addr, a) = (mcp.addr, a.clone());
        tokio::spawn(async move {
            let body = tool_call("request_close", close_args("742", "hol-key-742")).to_string().into_bytes();
            let bearer = format!("Bearer {a}");
            let headers = [
                ("Authorization", bearer.as_str()),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
                ("MCP-Protocol-Version", "2025-11-25"),
                ("Toolgate-Conversation", "hol-conversation"),
            ];
            toolgate_fake_erp::client::call(mcp_addr, "POST", "/mcp", &headers, Some(&body), Duration::from_secs(90))
                .await
                .unwrap()
        })
    };
    until_a_call_waits(&root).await;
    // shopping-b's requests, each a statement of the gate, run while shopping-a's call waits.
    for body in [
        ping(),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
        tool_call("read_order", json!({"order_id": "743"})),
    ] {
        let reply = mcp.post(&b, body.clone()).await;
        assert_eq!(reply.status, 200, "{body}: {}", String::from_utf8_lossy(&reply.body));
        assert!(!String::from_utf8_lossy(&reply.body).contains("\"isError\":true"), "{body}");
    }
    assert!(!waiting.is_finished(), "shopping-a's call should still be waiting for the lock");
    assert_eq!(get(listen, "/readyz").await.status, 200, "ready while a call waits");
    holder.batch_execute("ROLLBACK").await.unwrap();
    let reply = waiting.await.unwrap();
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    assert_eq!(reply.status, 200, "{text}");
    assert!(!text.contains("\"isError\":true"), "{text}");
    let metrics = String::from_utf8_lossy(&get(listen, "/metrics").await.body).into_owned();
    assert!(metrics.contains("toolgate_mcp_calls_total{tool=\"read_order\",outcome="), "{metrics}");
    assert!(metrics.contains("toolgate_mcp_calls_total{tool=\"request_close\",outcome="), "{metrics}");
    assert!(metrics.contains("toolgate_mcp_requests_total{method=\"tools/call\"} 2"), "{metrics}");
    assert!(metrics.contains("toolgate_mcp_request_duration_seconds_count{method=\"ping\"} 1"), "{metrics}");
    assert!(!metrics.contains("shopping-") && !metrics.contains(&a), "no tenant, no token: {metrics}");
}

#[tokio::test]
async fn a_full_pool_answers_503_at_once() {
    let lab = lab("mcp_pool_full").await;
    let root = lab.connect("postgres").await.unwrap();
    let holder = lab.connect("postgres").await.unwrap();
    let listen = free_addr();
    let mcp = Mcp::start_with(
        &["--listen", &listen.to_string()],
        &[
            ("TOOLGATE_DATABASE_URL", database(&lab)),
            ("TOOLGATE_LOCK_TIMEOUT", "60".into()),
            ("TOOLGATE_POOL_SIZE", "1".into()),
            ("TOOLGATE_POOL_QUEUE", "0".into()),
        ],
    )
    .await;
    let a = keys::identity_for(&lab.a.idp, "user-17", "shopping-a", "supervisor", 600, &[mcp.resource()]);
    let b = keys::identity_for(&lab.b.idp, "user-31", "shopping-b", "supervisor", 600, &[mcp.resource()]);
    assert_eq!(mcp.post(&b, ping()).await.status, 200, "the pool's one connection serves when free");
    hold_742(&holder).await;
    let waiting = {
        let a = a.clone();
        let addr = mcp.addr;
        tokio::spawn(async move {
            let body = tool_call("request_close", close_args("742", "pool-key-742")).to_string().into_bytes();
            let bearer = format!("Bearer {a}");
            let headers = [
                ("Authorization", bearer.as_str()),
                ("Content-Type", "application/json"),
                ("Toolgate-Conversation", "pool-conversation"),
                ("Accept", "application/json, text/event-stream"),
            ];
            toolgate_fake_erp::client::call(addr, "POST", "/mcp", &headers, Some(&body), Duration::from_secs(90))
                .await
                .unwrap()
        })
    };
    until_a_call_waits(&root).await;
    let started = Instant::now();
    let busy = mcp.post(&b, ping()).await;
    assert_eq!(busy.status, 503, "{}", String::from_utf8_lossy(&busy.body));
    assert_eq!(busy.header("retry-after"), Some("1"));
    assert!(started.elapsed() < Duration::from_secs(5), "answered at once, not after the pool's wait");
    let metrics = String::from_utf8_lossy(&get(listen, "/metrics").await.body).into_owned();
    assert!(metrics.contains("toolgate_mcp_refused_total{reason=\"busy\"} 1"), "{metrics}");
    assert!(metrics.contains("toolgate_mcp_pool_in_use 1"), "{metrics}");
    assert!(metrics.contains("toolgate_mcp_pool_max_connections 1"), "{metrics}");
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(waiting.await.unwrap().status, 200);
    assert_eq!(mcp.post(&b, ping()).await.status, 200, "served again once the connection is free");
    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.ledger WHERE idempotency_key = 'pool-key-742'").await, 1);
}

#[tokio::test]
async fn health_is_the_process_and_readiness_the_database() {
    let lab = lab("mcp_health").await;
    let mcp = Mcp::start(&[("TOOLGATE_DATABASE_URL", database(&lab))]).await;
    assert_eq!(mcp.get("/healthz").await.status, 200);
    assert_eq!(mcp.get("/readyz").await.status, 200);
    let closed = free_addr();
    let down = Mcp::start(&[(
        "TOOLGATE_DATABASE_URL",
        format!("host=127.0.0.1 port={} user=nobody dbname=nowhere connect_timeout=2", closed.port()),
    )])
    .await;
    assert_eq!(down.get("/healthz").await.status, 200, "the process is up");
    let ready = down.get("/readyz").await;
    assert_eq!(ready.status, 503, "{}", String::from_utf8_lossy(&ready.body));
    assert!(String::from_utf8_lossy(&ready.body).contains("unavailable"));
}
