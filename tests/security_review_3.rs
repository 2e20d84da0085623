//! The third security review's findings (docs/security.md, "Review 3"), each over real
//! connections, a real dispatcher and a real `toolgate mcp --http` process: an endpoint moved by
//! an administrator (T1), tokens not issued for the MCP server (T2), ERP answers of any size (T4),
//! a path that climbs out of the endpoint's base path written before the gate refused it (T5), one
//! waiting call holding the MCP server (T6), a colleague naming your conversation (T7), the
//! bearer check when the database is down (T8), a settlement from a lost lease (T9) and the
//! issuers the metadata names (T10). T3 (the ERP's words
//! marked untrusted) is in `outbox_dispatch.rs` and pg_test's `outbox_dispatch`; T5's refusal at the
//! call and T1's SQL side are in pg_test's `outbox_tools`. Each test fails on the code the review
//! attacked.

mod common;

use common::mcp::{database, ping, Mcp};
use common::outbox::{setup, TOOL};
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use toolgate_cli::fixture::APP;
use toolgate_cli::{db, dispatch, keys};
use toolgate_fake_erp::{Config, Fault, Matcher, Settings};

/// A second fake ERP: where an administrator who moved the endpoint would have it go.
async fn attacker_erp() -> toolgate_fake_erp::FakeErp {
    let settings = Settings { per_second: 0, per_minute: 0, ..Settings::default() };
    toolgate_fake_erp::start("127.0.0.1:0".parse().unwrap(), Config { settings, refresh_token: None }).await.unwrap()
}

/// T1: an administrator with the repoint function moves the endpoint to a host of theirs after
/// the dispatcher has stored the ERP's credentials. The credentials are dropped with the move, the
/// dispatcher (whose allowlist does not name the new origin) sends nothing there, not even a
/// refresh, and the credentials are handed out only for the origin they were given for.
#[tokio::test]
async fn t1_a_moved_endpoint_reaches_nothing_and_takes_no_credentials() {
    let s = setup("sr3_moved").await;
    assert_eq!(outcome(&s.call("o1", "moved-key-1").await), ("PENDING", "-"));
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 1);
    let stored = count(&s.root, "SELECT count(*) FROM toolgate.erp_credentials WHERE access_token IS NOT NULL").await;
    assert_eq!(stored, 1, "the dispatcher stored the ERP's tokens");

    // The dispatcher's login is given the credentials for the origin they were made for, and no other.
    let dispatcher = s.lab.connect(common::outbox::DISPATCHER).await.unwrap();
    let real = dispatch::origin(&s.erp.base_url()).unwrap();
    let token = |origin: &str| {
        let origin = origin.to_string();
        let dispatcher = &dispatcher;
        async move {
            let row = dispatcher
                .query_one("SELECT access_token FROM toolgate.erp_access_token('fake_erp', $1)", &[&origin])
                .await
                .unwrap();
            row.get::<_, Option<String>>(0)
        }
    };
    assert!(token(&real).await.is_some());
    assert_eq!(token("http://erp.attacker.example").await, None);
    let refused = dispatcher
        .query_one(
            "SELECT * FROM toolgate.erp_refresh_begin('fake_erp', 'http://erp.attacker.example', 0, 'seed')",
            &[],
        )
        .await;
    assert!(refused.is_err(), "a refresh for another origin than the endpoint's is refused");

    // Moved: the credentials go with the move.
    let attacker = attacker_erp().await;
    s.root.execute("SELECT toolgate.repoint_erp_endpoint('fake_erp', $1)", &[&attacker.base_url()]).await.unwrap();
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.erp_credentials").await, 0);
    assert_eq!(outcome(&s.call("o2", "moved-key-2").await), ("PENDING", "-"));
    // The dispatcher's allowlist names the real ERP only (both listen on 127.0.0.1, other ports).
    let report = s.dispatch().await;
    assert_eq!(report.count("PENDING"), 1, "{report:?}");
    let attacker_saw = attacker.effects();
    assert_eq!(
        (attacker_saw["writes_received"].as_i64(), attacker_saw["refreshes"].as_i64()),
        (Some(0), Some(0)),
        "nothing reached the new host: {attacker_saw}"
    );
    assert_eq!(s.last_error("moved-key-2").await.as_deref(), Some("origin_not_allowed"));

    // Moved back by the DBA: delivered, the credentials seeded again from the endpoint's own file.
    s.root.execute("SELECT toolgate.repoint_erp_endpoint('fake_erp', $1)", &[&s.erp.base_url()]).await.unwrap();
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 1);
    assert_eq!(s.erp_key("moved-key-2"), ("DONE".to_string(), 1));
    let history = count(&s.root, "SELECT count(*) FROM toolgate.erp_endpoint_history WHERE credentials_dropped").await;
    assert_eq!(history, 1, "the move that dropped the credentials is in the history");
}

/// T1: a dispatcher connects to loopback and private addresses only when its configuration says
/// so; and a refresh token file seeds only the endpoint it is named for.
#[tokio::test]
async fn t1_private_addresses_and_token_files_are_the_dispatchers_to_allow() {
    let s = setup("sr3_private").await;
    assert_eq!(outcome(&s.call("o1", "private-key-1").await), ("PENDING", "-"));
    let closed = dispatch::Options { allow_private_addresses: false, ..s.options() };
    assert_eq!(dispatch::run(&closed).await.unwrap().count("PENDING"), 1);
    let other_file = dispatch::Options {
        refresh_token_files: [("other_erp".to_string(), s.token_file.clone())].into(),
        ..s.options()
    };
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    assert_eq!(dispatch::run(&other_file).await.unwrap().count("PENDING"), 1);
    assert_eq!((s.erp("writes_received"), s.erp("refreshes")), (0, 0), "nothing reached the ERP");
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.erp_credentials").await, 0);
    // Allowed, and its own file: delivered.
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 1);
}

/// T4: an answer larger than the dispatcher reads is not kept: a write applied with a huge answer
/// is learned by asking the ERP for the key (a small answer), and when that is huge too the
/// intent is UNCERTAIN `answer_too_large`; the ledger never holds the padding.
#[tokio::test]
async fn t4_huge_answers_are_not_read_whole() {
    let s = setup("sr3_huge").await;
    let opts = dispatch::Options { max_answer_bytes: 64 * 1024, ..s.options() };
    assert_eq!(outcome(&s.call("o1", "huge-key-1").await), ("PENDING", "-"));
    s.erp.queue_fault(Fault::Huge(2 * 1024 * 1024), 1, Matcher::parse("POST /purchases").unwrap());
    assert_eq!(dispatch::run(&opts).await.unwrap().count("SUCCEEDED"), 1);
    assert_eq!(s.erp_key("huge-key-1"), ("DONE".to_string(), 1));

    assert_eq!(outcome(&s.call("o2", "huge-key-2").await), ("PENDING", "-"));
    s.erp.queue_fault(Fault::Huge(2 * 1024 * 1024), 1, Matcher::parse("POST /purchases").unwrap());
    s.erp.queue_fault(Fault::Huge(2 * 1024 * 1024), 1, Matcher::parse("GET /requests").unwrap());
    assert_eq!(dispatch::run(&opts).await.unwrap().count("UNCERTAIN"), 1);
    let (state, error) = (s.outbox("huge-key-2").await.0, s.last_error("huge-key-2").await);
    assert_eq!((state.as_str(), error.as_deref()), ("UNCERTAIN", Some("answer_too_large")));
    let largest = count(&s.root, "SELECT max(pg_column_size(reply))::bigint FROM toolgate.ledger").await;
    assert!(largest < 64 * 1024, "a ledger reply of {largest} bytes");
    // Asked again later, with a small answer: SUCCEEDED, applied once.
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    assert_eq!(dispatch::run(&opts).await.unwrap().count("SUCCEEDED"), 1);
    assert_eq!(s.erp_key("huge-key-2"), ("DONE".to_string(), 1));
}

/// T5: an intent whose path climbs out of the endpoint's base path (written before the gate
/// refused such paths, or by hand) is not sent.
#[tokio::test]
async fn t5_a_climbing_path_is_never_sent() {
    let s = setup("sr3_climb").await;
    assert_eq!(outcome(&s.call("o1", "climb-key-1").await), ("PENDING", "-"));
    s.root
        .batch_execute(
            "UPDATE toolgate.outbox SET request = jsonb_set(request, '{path}', '\"/purchases/%2e%2e/%2e%2e/admin\"') \
             WHERE idempotency_key = 'climb-key-1'",
        )
        .await
        .unwrap();
    assert_eq!(s.dispatch().await.count("REJECTED"), 1);
    assert_eq!(s.erp("writes_received"), 0);
    // Refused by the dispatcher itself, not by the ERP (which would answer a 4xx of its own).
    assert_eq!(s.last_error("climb-key-1").await.as_deref(), Some("bad_request_path"));
}

/// T9: a dispatcher whose lease ran out, the intent claimed again by another since, cannot settle
/// it: only the current claim settles.
#[tokio::test]
async fn t9_a_settlement_from_a_lost_lease_is_refused() {
    let s = setup("sr3_fence").await;
    assert_eq!(outcome(&s.call("o1", "fence-key-1").await), ("PENDING", "-"));
    let first = s.lab.connect(common::outbox::DISPATCHER).await.unwrap();
    let second = s.lab.connect(common::outbox::DISPATCHER).await.unwrap();
    let lost: String =
        first.query_one("SELECT claim::text FROM toolgate.claim_outbox(10, '1 second')", &[]).await.unwrap().get(0);
    // The lease ends; another dispatcher claims the intent.
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    let held: String =
        second.query_one("SELECT claim::text FROM toolgate.claim_outbox(10, '1 minute')", &[]).await.unwrap().get(0);
    assert_ne!(lost, held);
    let settle = "SELECT toolgate.settle_outbox('shopping-a', $1, 'fence-key-1', $2::text::uuid, 'SUCCEEDED', \
                  '{\"status\": \"DONE\"}')->>'outcome'";
    let refused = first.query_one(settle, &[&TOOL, &lost]).await.expect_err("the lost lease settles nothing");
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE));
    assert_eq!(s.outbox("fence-key-1").await.0, "PENDING");
    let settled: String = second.query_one(settle, &[&TOOL, &held]).await.unwrap().get(0);
    assert_eq!(settled, "SUCCEEDED");
}

/// T2 on the SQL path: a session that sets `toolgate.audience` (what `toolgate mcp --http` does)
/// refuses a token that does not name it, one without `aud`, and a token it verified before the
/// setting (remembered by the backend); a token that names it among others passes.
#[tokio::test]
async fn t2_a_session_audience_refuses_tokens_issued_for_others() {
    let lab = lab("sr3_audience").await;
    let root = lab.connect("postgres").await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    let resource = "https://mcp.shopping.example/mcp";
    let mint = |aud: &[&str]| {
        let aud: Vec<String> = aud.iter().map(|a| a.to_string()).collect();
        keys::identity_for(&lab.a.idp, "user-17", "shopping-a", "supervisor", 600, &aud)
    };
    let read = |token: String| {
        let app = &app;
        async move {
            db::json(app, "SELECT toolgate.read($1, 'read_order', '{\"order_id\": \"742\"}')", &[&token]).await.unwrap()
        }
    };
    let none = mint(&[]);
    assert_eq!(outcome(&read(none.clone()).await), ("SUCCEEDED", "-"), "no audience asked: as before");
    app.execute("SELECT pg_catalog.set_config('toolgate.audience', $1, false)", &[&resource]).await.unwrap();
    for (name, token) in [
        ("no aud (remembered)", none),
        ("another resource", mint(&["https://mcp.other.example/mcp"])),
        ("the SQL application", mint(&["toolgate"])),
    ] {
        let reply = read(token).await;
        assert_eq!(outcome(&reply), ("BLOCKED", "identity_invalid"), "{name}: {reply}");
        assert_eq!(last_reason(&root).await, "audience", "{name}");
    }
    assert_eq!(outcome(&read(mint(&["toolgate", resource])).await), ("SUCCEEDED", "-"));
    assert_eq!(outcome(&read(mint(&[resource])).await), ("SUCCEEDED", "-"));
}

/// T2 over HTTP: the server's resource URL is the audience the gate requires; a token issued for
/// another MCP resource, for the SQL application, or for none is a 401, and the metadata lists
/// only the issuers that may issue tokens for this resource (T10).
#[tokio::test]
async fn t2_t10_the_mcp_server_is_its_tokens_audience() {
    let lab = lab("sr3_mcp_audience").await;
    let root = lab.connect("postgres").await.unwrap();
    let mcp = Mcp::start(&[("TOOLGATE_DATABASE_URL", database(&lab))]).await;
    let mint = |aud: &[String]| keys::identity_for(&lab.a.idp, "user-17", "shopping-a", "supervisor", 600, aud);
    for (name, aud) in [
        ("no aud", vec![]),
        ("another MCP resource", vec!["https://mcp.other.example/mcp".to_string()]),
        ("the SQL application", vec!["toolgate".to_string()]),
    ] {
        let reply = mcp.post(&mint(&aud), ping()).await;
        assert_eq!(reply.status, 401, "{name}: {}", String::from_utf8_lossy(&reply.body));
        assert!(reply.header("www-authenticate").unwrap_or_default().contains("invalid_token"), "{name}");
    }
    let ok = mcp.post(&mint(&[mcp.resource()]), ping()).await;
    assert_eq!(ok.status, 200, "{}", String::from_utf8_lossy(&ok.body));

    // T10: two tenants' issuers, one of them for this resource: the metadata names that one.
    let idp = toolgate_core::token::Signer::from_seed("idp-k", [9; 32]);
    let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "idp-k", "x": idp.public_key()}]});
    root.execute(
        "SELECT toolgate.add_issuer('ours', 'https://idp.ours.example/', ARRAY[$1], $2::jsonb, 'tenant')",
        &[&mcp.resource(), &jwks],
    )
    .await
    .unwrap();
    root.execute(
        "SELECT toolgate.add_issuer('theirs', 'https://idp.another-customer.example/', ARRAY['their-app'], $1::jsonb, 'tenant')",
        &[&jwks],
    )
    .await
    .unwrap();
    let metadata = mcp.get("/.well-known/oauth-protected-resource/mcp").await.json();
    assert_eq!(metadata["resource"], mcp.resource());
    assert_eq!(metadata["authorization_servers"], json!(["https://idp.ours.example/"]), "{metadata}");
}

/// T8: when the token cannot be checked (the database is down), the server answers 503 with
/// Retry-After, never the request served unchecked.
#[tokio::test]
async fn t8_the_bearer_check_fails_closed() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mcp = Mcp::start(&[(
        "TOOLGATE_DATABASE_URL",
        format!("host=127.0.0.1 port={} user={APP} dbname=nowhere connect_timeout=2", closed.port()),
    )])
    .await;
    for body in [ping(), json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})] {
        let reply = mcp.post("junk.junk.junk", body).await;
        assert_eq!(reply.status, 503, "{}", String::from_utf8_lossy(&reply.body));
        assert!(reply.header("retry-after").is_some());
    }
}

/// T6: a call that waits on a row lock is rolled back after the server's lock timeout and told so
/// (nothing applied), instead of holding the server's connection for the statement's whole life.
#[tokio::test]
async fn t6_a_call_waiting_on_a_lock_gives_up() {
    let lab = lab("sr3_lock").await;
    let root = lab.connect("postgres").await.unwrap();
    let holder = lab.connect("postgres").await.unwrap();
    let mcp = Mcp::start(&[("TOOLGATE_DATABASE_URL", database(&lab)), ("TOOLGATE_LOCK_TIMEOUT", "1".into())]).await;
    let token = keys::identity_for(&lab.a.idp, "user-17", "shopping-a", "supervisor", 600, &[mcp.resource()]);
    holder
        .batch_execute(
            "BEGIN; SELECT 1 FROM maintenance.work_orders WHERE tenant_id = 'shopping-a' AND order_id = '742' FOR UPDATE",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "request_close", "arguments": close_args("742", "lock-key-742")}});
    let reply = mcp.post(&token, call).await;
    let waited = started.elapsed();
    holder.batch_execute("ROLLBACK").await.unwrap();
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    assert_eq!(reply.status, 200, "{text}");
    assert!(text.contains("\"isError\":true") && text.contains("nothing was applied"), "{text}");
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.ledger WHERE idempotency_key = 'lock-key-742'").await, 0);
}

/// T7: another person of the tenant who sends the same conversation id neither supersedes the
/// first person's live proposal nor uses their quota: a conversation is each person's own.
#[tokio::test]
async fn t7_a_colleague_cannot_take_over_your_conversation() {
    let lab = lab("sr3_conversation").await;
    let root = lab.connect("postgres").await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    let maria = lab.supervisor_a();
    let joao = keys::identity(&lab.a.idp, "user-18", "shopping-a", "supervisor", 3600);
    let purchase = |key: &str| json!({"order_id": "741", "part_id": "F-200", "quantity": 1, "cost_center": "CC-MANUT", "idempotency_key": key});
    let call = |token: &str, tool: &str, args: Value| {
        let (app, token, tool) = (&app, token.to_string(), tool.to_string());
        async move {
            db::json(app, "SELECT toolgate.call($1, 'shared-conversation', $2, $3)", &[&token, &tool, &args])
                .await
                .unwrap()
        }
    };
    let first = call(&maria, "request_close", close_args("742", "shared-close-maria")).await;
    assert_eq!(outcome(&first), ("NEEDS_CONFIRMATION", "-"), "{first}");
    let proposal = first["proposal"]["id"].as_str().unwrap().to_string();
    let second = call(&joao, "request_close", close_args("742", "shared-close-joao")).await;
    assert_eq!(outcome(&second), ("NEEDS_CONFIRMATION", "-"), "{second}");
    let status: String = root
        .query_one("SELECT status::text FROM toolgate.proposals WHERE proposal_id = $1::text::uuid", &[&proposal])
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "live", "maria's proposal was superseded by joao's");

    // The purchase quota (3 a conversation): joao spends his in the shared conversation…
    for i in 0..3 {
        let reply = call(&joao, "request_purchase_part", purchase(&format!("shared-buy-joao-{i}"))).await;
        assert_eq!(outcome(&reply), ("NEEDS_CONFIRMATION", "-"), "{reply}");
    }
    let over = call(&joao, "request_purchase_part", purchase("shared-buy-joao-3")).await;
    assert_eq!(outcome(&over), ("BLOCKED", "rate_over_limit"), "{over}");
    // …and maria's is whole.
    for i in 0..3 {
        let reply = call(&maria, "request_purchase_part", purchase(&format!("shared-buy-maria-{i}"))).await;
        assert_eq!(outcome(&reply), ("NEEDS_CONFIRMATION", "-"), "{reply}");
    }
    let quota = count(
        &root,
        "SELECT count(*) FROM toolgate.quota_usage WHERE conversation_id = 'shared-conversation' AND used = 3",
    )
    .await;
    assert_eq!(quota, 2, "one count each");
}

/// T11 (round 2's R12, decided): another person of the tenant who replays an applied
/// confirmation gets nothing back (`confirmation_invalid`, `other_actor`), as a key answers only
/// the person who sent it; the person who confirmed gets the stored reply again.
#[tokio::test]
async fn t11_a_confirmation_replays_only_for_its_person() {
    let lab = lab("sr3_replay").await;
    let root = lab.connect("postgres").await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    let maria = lab.supervisor_a();
    let joao = keys::identity(&lab.a.idp, "user-18", "shopping-a", "supervisor", 3600);
    let proposal = db::request_close(&app, &maria, "conv-replay", &close_args("742", "replay-742-a")).await.unwrap();
    let id = proposal["proposal"]["id"].as_str().unwrap().to_string();
    let yes = keys::confirmation(&lab.a.channel, &id, "approve", "sim", keys::now(), "typed");
    let confirm = |token: &str| {
        let (app, token, yes) = (&app, token.to_string(), yes.clone());
        async move { db::json(app, "SELECT toolgate.confirm($1, $2)", &[&token, &yes]).await.unwrap() }
    };
    assert_eq!(outcome(&confirm(&maria).await), ("SUCCEEDED", "-"));
    let other = confirm(&joao).await;
    assert_eq!(outcome(&other), ("BLOCKED", "confirmation_invalid"), "{other}");
    assert!(other.get("result").is_none_or(Value::is_null), "the stored reply reached another person: {other}");
    assert_eq!(last_reason(&root).await, "other_actor");
    let again = confirm(&maria).await;
    assert_eq!((outcome(&again), again["replayed"].as_bool()), (("SUCCEEDED", "-"), Some(true)), "{again}");
    assert_eq!(effects(&root, "742").await, 1);
}
