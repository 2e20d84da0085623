//! `toolgate mcp --http` as a service many agents share: calls run on a pool of connections, so
//! one tenant's call waiting on a row lock does not hold another tenant's requests; a full pool
//! answers 503 with `Retry-After` at once; `/healthz`, `/readyz` and `/metrics` say what an
//! operator needs. Each over a real server process and real connections.

mod common;

use common::mcp::{database, free_addr, get, ping, post_to, tool_call, Mcp};
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
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'toolgate-mcp' AND wait_event_type = 'Lock' \
              AND datname = current_database()",
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
            let body = tool_call("request_close", close_args("742", "hol-key-742"));
            post_to(mcp_addr, &a, "hol-conversation", &body, &[], Duration::from_secs(90)).await.unwrap()
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
            let body = tool_call("request_close", close_args("742", "pool-key-742"));
            post_to(addr, &a, "pool-conversation", &body, &[], Duration::from_secs(90)).await.unwrap()
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

/// A CA of the test's, and a certificate it signs for `names`: (CA PEM, certificate PEM, key PEM).
fn certificate(ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>, cn: &str, names: &[&str]) -> (String, String) {
    let mut params = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    let key = rcgen::KeyPair::generate().unwrap();
    (params.signed_by(&key, ca).unwrap().pem(), key.serialize_pem())
}

fn test_ca() -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, "toolgate listener test CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap()
}

/// One HTTP/1.1 request over TLS to `addr`, trusting `ca` only: the status and the certificate the
/// server presented.
async fn https(addr: std::net::SocketAddr, ca: &str, request: &str) -> Result<(u16, String, Vec<u8>), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    roots.add(tokio_rustls::rustls::pki_types::CertificateDer::from_pem_slice(ca.as_bytes()).unwrap()).unwrap();
    let config = tokio_rustls::rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let presented = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    tls.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, text, presented))
}

fn post_request(addr: std::net::SocketAddr, token: &str, body: &serde_json::Value) -> String {
    let body = body.to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn https_on_the_listener_and_a_certificate_renewed_in_place() {
    let lab = lab("mcp_https").await;
    let dir = keys_dir().join("mcp-https");
    std::fs::create_dir_all(&dir).unwrap();
    let ca = test_ca();
    let (cert, key) = certificate(&ca, "first", &["localhost", "127.0.0.1"]);
    let (cert_file, key_file) = (dir.join("server.crt"), dir.join("server.key"));
    std::fs::write(&cert_file, &cert).unwrap();
    std::fs::write(&key_file, &key).unwrap();
    let addr = free_addr();
    let mcp = Mcp::start_on(
        addr,
        &["--tls-cert", cert_file.to_str().unwrap(), "--tls-key", key_file.to_str().unwrap()],
        &[("TOOLGATE_DATABASE_URL", database(&lab)), ("TOOLGATE_RESOURCE_URL", format!("https://{addr}/mcp"))],
    )
    .await;
    let token =
        keys::identity_for(&lab.a.idp, "user-17", "shopping-a", "supervisor", 600, &[format!("https://{addr}/mcp")]);
    let ca_pem = ca.pem();
    let (status, text, first) = https(addr, &ca_pem, &post_request(addr, &token, &ping())).await.unwrap();
    assert_eq!(status, 200, "{text}");
    let (status, text, _) = https(
        addr,
        &ca_pem,
        &format!("GET /.well-known/oauth-protected-resource/mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(&format!("\"resource\":\"https://{addr}/mcp\"")), "{text}");
    // Plain HTTP to the TLS port gets no MCP answer.
    let plain = toolgate_erp_client::call(addr, "GET", "/healthz", &[], None, Duration::from_secs(5)).await;
    assert!(plain.map(|r| r.status != 200).unwrap_or(true), "plain HTTP served on the TLS port");

    // Renewal: new files, SIGHUP; new connections get the new certificate, without a restart.
    let (cert2, key2) = certificate(&ca, "second", &["localhost", "127.0.0.1"]);
    std::fs::write(&key_file, &key2).unwrap();
    std::fs::write(&cert_file, &cert2).unwrap();
    let status = std::process::Command::new("kill").args(["-HUP", &mcp.pid().to_string()]).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, text, presented) = https(addr, &ca_pem, &post_request(addr, &token, &ping())).await.unwrap();
        assert_eq!(status, 200, "{text}");
        if presented != first {
            break;
        }
        assert!(Instant::now() < deadline, "the renewed certificate was never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A certificate of another CA is refused by a client that trusts only the test's.
    let other = test_ca();
    let err = https(addr, &other.pem(), &post_request(addr, &token, &ping())).await.err().unwrap_or_default();
    assert!(err.contains("UnknownIssuer") || err.contains("invalid peer certificate"), "{err}");
}

#[tokio::test]
async fn plain_http_beyond_loopback_needs_to_be_asked_for() {
    let lab = lab("mcp_insecure").await;
    let run = |args: &[&str]| {
        std::process::Command::new(toolgate())
            .args(["mcp", "--http", "0.0.0.0:0"])
            .args(args)
            .env("TOOLGATE_DATABASE_URL", database(&lab))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut refused = run(&[]);
    let deadline = Instant::now() + Duration::from_secs(15);
    while refused.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            refused.kill().unwrap();
            let _ = refused.wait();
            panic!("plain HTTP was served beyond loopback without --insecure-http");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = refused.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("--insecure-http") && said.contains("--tls-cert"), "{said}");
    let mut started = run(&["--insecure-http"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(started.try_wait().unwrap().is_none(), "--insecure-http serves plain HTTP beyond loopback");
    started.kill().unwrap();
    let _ = started.wait();
}

#[tokio::test]
async fn a_slow_client_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let lab = lab("mcp_slowloris").await;
    let mcp = Mcp::start(&[("TOOLGATE_DATABASE_URL", database(&lab)), ("TOOLGATE_READ_TIMEOUT", "1".into())]).await;
    let token = keys::identity_for(&lab.a.idp, "user-17", "shopping-a", "supervisor", 600, &[mcp.resource()]);
    // Headers dribbled, never finished: the connection is closed.
    let mut headers = tokio::net::TcpStream::connect(mcp.addr).await.unwrap();
    headers.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
    let mut body = tokio::net::TcpStream::connect(mcp.addr).await.unwrap();
    // A body announced and never finished: 408.
    body.write_all(
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n\
             Content-Length: 100\r\n\r\n{{\"jsonrpc\""
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // Meanwhile, others are served.
    assert_eq!(mcp.post(&token, ping()).await.status, 200);
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), headers.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "a client dribbling its headers still holds its connection after 15 s");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), body.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "a client that never finishes its body still holds its connection after 15 s");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
}

/// Calls, reads and confirmations take the tenant-routed entry points (`tenant_call`,
/// `tenant_read`, `tenant_confirm`) with the tenant of the gate's own listing for the token, so on
/// a Citus coordinator each runs on its tenant's node (`scripts/citus.sh` shows where); counted
/// here by the server's own function statistics.
#[tokio::test]
async fn calls_take_the_tenant_routed_entry_points() {
    let lab = lab("mcp_routed").await;
    let root = lab.connect("postgres").await.unwrap();
    root.batch_execute(&format!("ALTER DATABASE {} SET track_functions = 'all'", lab.dbname)).await.unwrap();
    let mcp = Mcp::start(&[("TOOLGATE_DATABASE_URL", database(&lab))]).await;
    let token = keys::identity_for(&lab.b.idp, "user-31", "shopping-b", "supervisor", 600, &[mcp.resource()]);
    let read = mcp.post(&token, tool_call("read_order", json!({"order_id": "743"}))).await;
    assert!(
        String::from_utf8_lossy(&read.body).contains("\"outcome\":\"SUCCEEDED\""),
        "{}",
        String::from_utf8_lossy(&read.body)
    );
    let close = mcp.post(&token, tool_call("request_close", close_args("743", "routed-key-743"))).await;
    assert_eq!(close.status, 200);
    // The server's backends write their statistics as they end.
    drop(mcp);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let row = root
            .query_one(
                "SELECT coalesce(sum(calls) FILTER (WHERE funcname = 'tenant_read'), 0)::int8,
                        coalesce(sum(calls) FILTER (WHERE funcname = 'tenant_call'), 0)::int8,
                        coalesce(sum(calls) FILTER (WHERE funcname IN ('read', 'call')), 0)::int8
                   FROM pg_stat_user_functions WHERE schemaname = 'toolgate'",
                &[],
            )
            .await
            .unwrap();
        let (tenant_read, tenant_call, plain): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        if tenant_read >= 1 && tenant_call >= 1 {
            assert_eq!(plain, 0, "a call took the tenant-less entry point");
            break;
        }
        assert!(Instant::now() < deadline, "tenant_read {tenant_read}, tenant_call {tenant_call}, call/read {plain}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A `tools/call` may reuse the listing the gate gave for its token moments ago
/// (`TOOLGATE_LISTING_TTL`) instead of asking the gate twice, but the call itself still verifies
/// the token in the gate: a key revoked meanwhile refuses the call (nothing applied, audited), and
/// `tools/list` asks the gate every time (401).
#[tokio::test]
async fn a_reused_listing_never_lets_a_revoked_token_act() {
    let lab = lab("mcp_listing_reuse").await;
    let root = lab.connect("postgres").await.unwrap();
    let mcp = Mcp::start(&[("TOOLGATE_DATABASE_URL", database(&lab)), ("TOOLGATE_LISTING_TTL", "600".into())]).await;
    let token = keys::identity_for(&lab.a.idp, "user-17", "shopping-a", "supervisor", 600, &[mcp.resource()]);
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    assert_eq!(mcp.post(&token, list.clone()).await.status, 200);
    let first = mcp.post(&token, tool_call("read_order", json!({"order_id": "742"}))).await;
    assert!(String::from_utf8_lossy(&first.body).contains("\"outcome\":\"SUCCEEDED\""));
    root.execute("SELECT toolgate.revoke_key('idp-shopping-a')", &[]).await.unwrap();
    let call = mcp.post(&token, tool_call("request_close", close_args("742", "revoked-key-742"))).await;
    let text = String::from_utf8_lossy(&call.body).into_owned();
    assert!(call.status == 401 || (text.contains("\"isError\":true") && text.contains("identity_invalid")), "{text}");
    assert_eq!(
        count(&root, "SELECT count(*) FROM maintenance.close_requests WHERE idempotency_key = 'revoked-key-742'").await,
        0
    );
    assert_eq!(mcp.post(&token, list).await.status, 401, "tools/list asks the gate each time");
}

/// A request's `traceparent` reaches the audit row of its call (`detail.trace_id`), and the
/// server writes one JSON line for the request with its method, tool, outcome, status, duration and
/// trace id, never the token or an argument's value.
#[tokio::test]
async fn a_traceparent_reaches_the_audit_and_the_log() {
    let lab = lab("mcp_trace").await;
    let root = lab.connect("postgres").await.unwrap();
    let log = keys_dir().join("mcp-trace.log");
    let mcp = Mcp::start_logging(&[("TOOLGATE_DATABASE_URL", database(&lab))], &log).await;
    let token = keys::identity_for(&lab.b.idp, "user-31", "shopping-b", "supervisor", 600, &[mcp.resource()]);
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let body = tool_call("read_order", json!({"order_id": "743"}));
    let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
    let more = [("traceparent", traceparent.as_str())];
    let reply = post_to(mcp.addr, &token, "trace-conversation", &body, &more, Duration::from_secs(30)).await.unwrap();
    assert_eq!(reply.status, 200);
    let audited: Option<String> = root
        .query_one(
            "SELECT detail->>'trace_id' FROM toolgate.audit WHERE kind = 'read' ORDER BY audit_id DESC LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(audited.as_deref(), Some(trace), "the call's audit row names the request's trace");
    // A request without one gets a trace of the server's own, not the last request's.
    assert_eq!(mcp.post(&token, tool_call("read_order", json!({"order_id": "743"}))).await.status, 200);
    let next: Option<String> = root
        .query_one(
            "SELECT detail->>'trace_id' FROM toolgate.audit WHERE kind = 'read' ORDER BY audit_id DESC LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(next.as_deref().is_some_and(|t| t.len() == 32 && t != trace), "{next:?}");
    drop(mcp);
    let lines = std::fs::read_to_string(&log).unwrap();
    let request = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["fields"]["trace_id"] == trace)
        .unwrap_or_else(|| panic!("no JSON line for the request: {lines}"));
    let fields = &request["fields"];
    assert_eq!(
        (fields["method"].as_str(), fields["tool"].as_str()),
        (Some("tools/call"), Some("read_order")),
        "{request}"
    );
    assert_eq!((fields["outcome"].as_str(), fields["status"].as_u64()), (Some("SUCCEEDED"), Some(200)), "{request}");
    assert!(fields["duration_ms"].as_f64().is_some(), "{request}");
    assert!(!lines.contains(&token) && !lines.contains("\"743\""), "a token or an argument in the log");
}

/// SIGTERM: the server takes no new connection, lets the call in flight finish and answer, then
/// exits 0: a rolling restart drops no call.
#[tokio::test]
async fn sigterm_finishes_the_calls_in_flight() {
    let lab = lab("mcp_sigterm").await;
    let root = lab.connect("postgres").await.unwrap();
    let holder = lab.connect("postgres").await.unwrap();
    let mut mcp =
        Mcp::start(&[("TOOLGATE_DATABASE_URL", database(&lab)), ("TOOLGATE_LOCK_TIMEOUT", "60".into())]).await;
    let token = keys::identity_for(&lab.a.idp, "user-17", "shopping-a", "supervisor", 600, &[mcp.resource()]);
    hold_742(&holder).await;
    let in_flight = {
        let (addr, token) = (mcp.addr, token.clone());
        tokio::spawn(async move {
            let body = tool_call("request_close", close_args("742", "term-key-742"));
            post_to(addr, &token, "term-conversation", &body, &[], Duration::from_secs(60)).await.unwrap()
        })
    };
    until_a_call_waits(&root).await;
    let status = std::process::Command::new("kill").args(["-TERM", &mcp.pid().to_string()]).status().unwrap();
    assert!(status.success());
    // No new connection is taken once the listener has stopped.
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(mcp.addr).await.is_ok() {
        assert!(Instant::now() < deadline, "the server still takes connections after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(mcp.exited().is_none(), "the server left before its call in flight ended");
    holder.batch_execute("ROLLBACK").await.unwrap();
    let reply = in_flight.await.unwrap();
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    assert_eq!(reply.status, 200, "{text}");
    assert!(!text.contains("\"isError\":true"), "{text}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(code) = mcp.exited() {
            break code;
        }
        assert!(Instant::now() < deadline, "the server did not exit after its last call");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(code.success(), "exit status {code:?}");
    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.ledger WHERE idempotency_key = 'term-key-742'").await, 1);
}
