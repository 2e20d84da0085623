//! MCP sessions over Streamable HTTP (protocol revisions before 2026-07-28): `initialize` is
//! answered with an `Mcp-Session-Id`, sealed with the state key, so a host that sends no
//! `Toolgate-Conversation` can write, and any process with the key serves the session; the id is
//! the opener's alone. Each over real server processes and real connections.

mod common;

use common::mcp::{database, free_addr, post_as_host, Mcp};
use common::*;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;
use toolgate_cli::keys;
use toolgate_erp_client::Reply;

/// One request to `addr`'s /mcp as a stock host sends it: a bearer token, no conversation header,
/// and the session id when there is one.
async fn post(addr: SocketAddr, token: &str, session: Option<&str>, body: &Value) -> Reply {
    let more: Vec<(&str, &str)> = session.map(|id| ("Mcp-Session-Id", id)).into_iter().collect();
    post_as_host(addr, token, None, body, &more, Duration::from_secs(30)).await.unwrap()
}

fn text(reply: &Reply) -> String {
    String::from_utf8_lossy(&reply.body).into_owned()
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "stock-host", "version": "1"}}})
}

fn close(id: u32, order: &str, key: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "request_close", "arguments": close_args(order, key)}})
}

#[tokio::test]
async fn a_session_is_the_conversation_any_process_serves_and_its_opener_owns() {
    let lab = lab("mcp_sessions").await;
    let root = lab.connect("postgres").await.unwrap();
    let dir = keys_dir().join("mcp-sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let (key, other_key) = (dir.join("state.key"), dir.join("other-state.key"));
    std::fs::write(&key, [0x5au8; 32]).unwrap();
    std::fs::write(&other_key, [0xa5u8; 32]).unwrap();
    let (addr_a, addr_b, addr_c) = (free_addr(), free_addr(), free_addr());
    // One URL (the resource tokens are issued for), three processes: two share the state key.
    let resource = format!("http://{addr_a}/mcp");
    let env = |key: &std::path::Path| {
        vec![
            ("TOOLGATE_DATABASE_URL", database(&lab)),
            ("TOOLGATE_RESOURCE_URL", resource.clone()),
            ("TOOLGATE_STATE_KEY_FILE", key.display().to_string()),
        ]
    };
    let a = Mcp::start_on(addr_a, &[], &env(&key)).await;
    let b = Mcp::start_on(addr_b, &[], &env(&key)).await;
    let c = Mcp::start_on(addr_c, &[], &env(&other_key)).await;
    let token =
        keys::identity_for(&lab.a.idp, "user-17", "shopping-a", "supervisor", 600, std::slice::from_ref(&resource));

    // Without a session or the header, a write is refused by name, nothing written.
    let refused = post(a.addr, &token, None, &close(2, "742", "no-conversation")).await;
    assert!(text(&refused).contains("No conversation"), "{}", text(&refused));

    // initialize opens a session.
    let opened = post(a.addr, &token, None, &initialize()).await;
    assert_eq!(opened.status, 200, "{}", text(&opened));
    let id = opened.header("mcp-session-id").expect("an Mcp-Session-Id on initialize").to_string();
    assert!(text(&opened).contains("\"protocolVersion\":\"2025-11-25\""), "{}", text(&opened));
    assert!(!text(&opened).contains("listChanged"), "over HTTP nobody hears a list change");
    // One version: the server's, the extension's in this database, and Cargo's.
    let extension: String = root.query_one("SELECT toolgate.version()->>'extension'", &[]).await.unwrap().get(0);
    assert_eq!(extension, env!("CARGO_PKG_VERSION"), "the extension installed is this tree's");
    let server_info = format!("\"serverInfo\":{{\"name\":\"toolgate\",\"version\":\"{extension}\"");
    assert!(text(&opened).contains(&server_info), "serverInfo names another version: {}", text(&opened));
    let said = std::process::Command::new(toolgate()).arg("--version").output().expect("toolgate --version");
    assert_eq!(String::from_utf8_lossy(&said.stdout).trim(), format!("toolgate {extension}"));
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(a.addr, &token, Some(&id), &initialized).await.status, 202);

    // A write in the session, on this process and on the other: one conversation.
    let first = post(a.addr, &token, Some(&id), &close(3, "742", "session-742")).await;
    assert!(text(&first).contains("NEEDS_CONFIRMATION"), "{}", text(&first));
    let second = post(b.addr, &token, Some(&id), &close(4, "742", "session-742-b")).await;
    assert_eq!(second.status, 200, "the other process serves the session: {}", text(&second));
    assert!(text(&second).contains("NEEDS_CONFIRMATION"), "{}", text(&second));
    let conversations: Vec<String> = root
        .query(
            "SELECT DISTINCT conversation_id FROM toolgate.audit WHERE tool = 'request_close' AND outcome = 'NEEDS_CONFIRMATION'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(conversations.len(), 1, "{conversations:?}");
    assert!(conversations[0].starts_with("mcp-") && conversations[0].len() == 36, "{conversations:?}");

    // Another person of the tenant, an id changed by a byte, and a process with another key: a
    // session that never was, nothing applied.
    let audited = count(&root, "SELECT count(*) FROM toolgate.audit").await;
    let other =
        keys::identity_for(&lab.a.idp, "user-99", "shopping-a", "supervisor", 600, std::slice::from_ref(&resource));
    let theirs = post(b.addr, &other, Some(&id), &close(5, "742", "stolen-session")).await;
    assert_eq!(theirs.status, 404, "another person's token with the id: {}", text(&theirs));
    let mut tampered = id.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(post(a.addr, &token, Some(&tampered), &close(6, "742", "tampered-session")).await.status, 404);
    assert_eq!(post(c.addr, &token, Some(&id), &close(7, "742", "other-key-session")).await.status, 404);
    assert_eq!(
        count(&root, "SELECT count(*) FROM toolgate.audit").await,
        audited,
        "a refused session reached the gate"
    );
    drop((a, b, c));
}
