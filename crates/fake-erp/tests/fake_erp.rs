//! The fake ERP over real HTTP on 127.0.0.1: each test starts its own on a free port and talks to
//! it with the crate's small client, so what is checked is what a dispatcher would see on the wire.

use serde_json::{json, Value};
use std::io::BufRead;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use toolgate_erp_client::{self as client, CallError, Reply};
use toolgate_fake_erp::{Config, FakeErp, Fault, Matcher, Settings};

/// Limits no test reaches unless it means to.
fn roomy() -> Settings {
    Settings { per_second: 100_000, per_minute: 1_000_000, async_delay: Duration::ZERO, ..Settings::default() }
}

async fn start(settings: Settings) -> FakeErp {
    toolgate_fake_erp::start("127.0.0.1:0".parse().unwrap(), Config { settings, refresh_token: None }).await.unwrap()
}

async fn refresh(addr: SocketAddr, token: &str) -> Result<Reply, CallError> {
    let form = format!("grant_type=refresh_token&refresh_token={token}");
    let headers = [("Content-Type", "application/x-www-form-urlencoded")];
    client::call(addr, "POST", "/oauth/token", &headers, Some(form.as_bytes()), Duration::from_secs(10)).await
}

/// A fresh access token (the refresh token rotates).
async fn access(erp: &FakeErp) -> String {
    let reply = refresh(erp.addr(), &erp.refresh_token()).await.unwrap();
    assert_eq!(reply.status, 200, "{:?}", reply.json());
    reply.json()["access_token"].as_str().unwrap().to_string()
}

fn order(order_id: &str) -> Value {
    json!({"tenant": "acme", "order_id": order_id, "part": "BRG-6204", "quantity": 4, "value": "51.20"})
}

/// `POST /purchases` with a key (if any), a fault header (if any), and a timeout.
async fn purchase_with(
    erp: &FakeErp,
    token: &str,
    key: Option<&str>,
    body: &Value,
    fault: Option<&str>,
    timeout: Duration,
) -> Result<Reply, CallError> {
    let bearer = format!("Bearer {token}");
    let mut headers = vec![("Authorization", bearer.as_str()), ("Content-Type", "application/json")];
    if let Some(key) = key {
        headers.push(("Idempotency-Key", key));
    }
    if let Some(fault) = fault {
        headers.push(("X-Fake-Fault", fault));
    }
    let body = body.to_string();
    client::call(erp.addr(), "POST", "/purchases", &headers, Some(body.as_bytes()), timeout).await
}

async fn purchase(erp: &FakeErp, token: &str, key: &str, body: &Value) -> Reply {
    purchase_with(erp, token, Some(key), body, None, Duration::from_secs(10)).await.unwrap()
}

async fn get(erp: &FakeErp, token: &str, path: &str) -> Reply {
    let bearer = format!("Bearer {token}");
    client::json(erp.addr(), "GET", path, &[("Authorization", &bearer)], None).await.unwrap()
}

/// The state query by key, by both of its routes, which must agree. They are asked one after the
/// other: a key whose state changed in between (PENDING turning DONE) is asked again by both.
async fn state_of(erp: &FakeErp, token: &str, key: &str) -> Value {
    let mut seen = Vec::new();
    for _ in 0..3 {
        let by_request = get(erp, token, &format!("/requests/{key}")).await;
        let by_query = get(erp, token, &format!("/purchases?idempotency_key={key}")).await;
        assert_eq!((by_request.status, by_query.status), (200, 200));
        if by_request.json() == by_query.json() {
            return by_request.json();
        }
        seen.push((by_request.json(), by_query.json()));
    }
    panic!("the two routes of the state query disagree three times running: {seen:?}");
}

async fn control(erp: &FakeErp, method: &str, path: &str, body: Option<Value>) -> Value {
    let reply = client::json(erp.addr(), method, path, &[], body.as_ref()).await.unwrap();
    assert_eq!(reply.status, 200, "{method} {path}: {:?}", reply.json());
    reply.json()
}

async fn effects(erp: &FakeErp) -> Value {
    control(erp, "GET", "/_fake/effects", None).await
}

/// Poll `check` every 50 ms until it gives a value, for at most ten seconds.
async fn eventually<F, Fut>(what: &str, mut check: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<Value>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// --- tokens ---

#[tokio::test]
async fn a_refresh_rotates_the_token_and_the_old_one_is_refused() {
    let erp = start(roomy()).await;
    let first = erp.refresh_token();
    let reply = refresh(erp.addr(), &first).await.unwrap();
    assert_eq!(reply.status, 200);
    let body = reply.json();
    let second = body["refresh_token"].as_str().unwrap().to_string();
    assert_ne!(second, first);
    assert_eq!(body["token_type"], "Bearer");
    assert!(body["access_token"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(body["expires_in"], 3600);

    let stale = refresh(erp.addr(), &first).await.unwrap();
    assert_eq!((stale.status, stale.json()["error"].as_str()), (400, Some("invalid_grant")));
    let unknown = refresh(erp.addr(), "rt-never-issued").await.unwrap();
    assert_eq!(unknown.status, 400);

    // The same names in a JSON body work too.
    let by_json = client::json(
        erp.addr(),
        "POST",
        "/oauth/token",
        &[],
        Some(&json!({"grant_type": "refresh_token", "refresh_token": second})),
    )
    .await
    .unwrap();
    assert_eq!(by_json.status, 200);
    let third = by_json.json()["refresh_token"].as_str().unwrap().to_string();
    assert_eq!(refresh(erp.addr(), &second).await.unwrap().status, 400);

    // Two refreshes with the same token at once: one wins, the other is refused. A client that
    // lets two of its workers refresh loses the race half the time.
    let (a, b) = tokio::join!(refresh(erp.addr(), &third), refresh(erp.addr(), &third));
    let mut statuses = [a.unwrap().status, b.unwrap().status];
    statuses.sort();
    assert_eq!(statuses, [200, 400]);

    let wrong_grant = client::call(
        erp.addr(),
        "POST",
        "/oauth/token",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        Some(b"grant_type=password&username=a"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!((wrong_grant.status, wrong_grant.json()["error"].as_str()), (400, Some("unsupported_grant_type")));

    let counted = effects(&erp).await;
    assert_eq!((counted["refreshes"].as_u64(), counted["refused_refreshes"].as_u64()), (Some(3), Some(4)));
}

#[tokio::test]
async fn an_expired_or_unknown_access_token_is_401_and_applies_nothing() {
    let erp = start(Settings { token_ttl: Duration::from_millis(1500), ..roomy() }).await;
    let token = access(&erp).await;
    assert_eq!(get(&erp, &token, "/requests/k").await.status, 200);

    let none = client::json(erp.addr(), "GET", "/requests/k", &[], None).await.unwrap();
    assert_eq!(none.status, 401);
    assert_eq!(none.header("www-authenticate"), Some("Bearer error=\"invalid_token\""));
    assert_eq!(get(&erp, "at-never-issued", "/requests/k").await.status, 401);

    tokio::time::sleep(Duration::from_millis(1700)).await;
    let expired = get(&erp, &token, "/requests/k").await;
    assert_eq!((expired.status, expired.json()["error"].as_str()), (401, Some("invalid_token")));
    let write = purchase(&erp, &token, "k", &order("WO-1")).await;
    assert_eq!(write.status, 401);

    // The control endpoint expires every token at once, for a test that wants a 401 now.
    let fresh = access(&erp).await;
    assert_eq!(get(&erp, &fresh, "/requests/k").await.status, 200);
    assert_eq!(control(&erp, "POST", "/_fake/expire-tokens", None).await["expired"], 1);
    assert_eq!(get(&erp, &fresh, "/requests/k").await.status, 401);

    let counted = effects(&erp).await;
    assert_eq!((counted["effects"].as_u64(), counted["writes_received"].as_u64()), (Some(0), Some(0)));
    assert_eq!(counted["unauthorized"], 5);
}

#[tokio::test]
async fn expire_tokens_makes_a_401_now_or_a_refresh_answer_a_stale_token() {
    let erp = start(roomy()).await;
    let token = access(&erp).await;
    // On a write: the token presented expires, the write answers 401 and applies nothing.
    erp.queue_fault(Fault::ExpireTokens, 1, Matcher::default());
    let refused = purchase(&erp, &token, "key-1", &order("WO-1")).await;
    assert_eq!((refused.status, refused.json()["error"].as_str()), (401, Some("invalid_token")));
    assert_eq!(get(&erp, &token, "/requests/key-1").await.status, 401);
    let fresh = access(&erp).await;
    assert_eq!(state_of(&erp, &fresh, "key-1").await["status"], "NOT_FOUND");

    // On the token endpoint: the refresh rotates, and the access token it answers is stale.
    erp.queue_fault(Fault::ExpireTokens, 1, Matcher::parse("/oauth/token").unwrap());
    let held = erp.refresh_token();
    let reply = refresh(erp.addr(), &held).await.unwrap();
    assert_eq!(reply.status, 200);
    assert_ne!(erp.refresh_token(), held, "rotated");
    let stale = reply.json()["access_token"].as_str().unwrap().to_string();
    assert_eq!(get(&erp, &stale, "/requests/key-1").await.status, 401);
    assert_eq!(get(&erp, &fresh, "/requests/key-1").await.status, 401, "every token expired");

    // The handle expires tokens and changes settings as the control endpoints do.
    let token = access(&erp).await;
    assert_eq!(erp.expire_access_tokens(), 1);
    assert_eq!(get(&erp, &token, "/requests/key-1").await.status, 401);
    assert_eq!(erp.configure(&json!({"per_second": 3})).unwrap()["per_second"], 3);
    assert!(erp.configure(&json!({"per_second": 4, "per_hour": 1})).is_err());
    assert_eq!(control(&erp, "GET", "/_fake/config", None).await["per_second"], 3);

    let counted = effects(&erp).await;
    assert_eq!((counted["effects"].as_u64(), counted["writes_received"].as_u64()), (Some(0), Some(0)));
    assert_eq!((counted["refreshes"].as_u64(), counted["unauthorized"].as_u64()), (Some(4), Some(5)));
    assert_eq!(counted["faults_fired"], 2);
}

// --- idempotency ---

#[tokio::test]
async fn a_replayed_key_gets_the_same_answer_and_makes_one_effect() {
    let erp = start(Settings { async_delay: Duration::from_secs(60), ..roomy() }).await;
    let token = access(&erp).await;
    let first = purchase(&erp, &token, "key-1", &order("WO-7")).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.json()["status"], "PENDING");
    assert_eq!(first.header("idempotent-replayed"), None);
    let again = purchase(&erp, &token, "key-1", &order("WO-7")).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json(), first.json());
    assert_eq!(again.header("idempotent-replayed"), Some("true"));

    let counted = effects(&erp).await;
    assert_eq!(counted["effects"], 1);
    assert_eq!(counted["writes_received"], 2);
    assert_eq!(counted["by_key"]["key-1"], json!({"status": "PENDING", "effects": 1}));
    assert_eq!(counted["by_order"]["acme/WO-7"], 1);

    // The same order under another key is another purchase: what a resend with a new key does.
    let other = purchase(&erp, &token, "key-2", &order("WO-7")).await;
    assert_ne!(other.json()["protocol"], first.json()["protocol"]);
    assert_eq!(effects(&erp).await["by_order"]["acme/WO-7"], 2);
}

#[tokio::test]
async fn a_key_reused_with_another_body_is_refused_and_changes_nothing() {
    let erp = start(roomy()).await;
    let token = access(&erp).await;
    assert_eq!(purchase(&erp, &token, "key-1", &order("WO-1")).await.status, 200);
    let mut changed = order("WO-1");
    changed["quantity"] = json!(40);
    let reused = purchase(&erp, &token, "key-1", &changed).await;
    assert_eq!((reused.status, reused.json()["error"].as_str()), (409, Some("idempotency_key_reused")));

    let counted = effects(&erp).await;
    assert_eq!(counted["effects"], 1);
    let state = state_of(&erp, &token, "key-1").await;
    assert_eq!((state["status"].as_str(), state["result"]["quantity"].as_u64()), (Some("DONE"), Some(4)));
}

#[tokio::test]
async fn writes_without_a_key_each_make_an_effect_unless_a_key_is_required() {
    let erp = start(roomy()).await;
    let token = access(&erp).await;
    for _ in 0..2 {
        let reply = purchase_with(&erp, &token, None, &order("WO-3"), None, Duration::from_secs(10)).await.unwrap();
        assert_eq!(reply.status, 200);
    }
    assert_eq!(effects(&erp).await["by_order"]["acme/WO-3"], 2);

    let config = control(&erp, "PUT", "/_fake/config", Some(json!({"require_idempotency_key": true}))).await;
    assert_eq!(config["require_idempotency_key"], true);
    let refused = purchase_with(&erp, &token, None, &order("WO-3"), None, Duration::from_secs(10)).await.unwrap();
    assert_eq!((refused.status, refused.json()["error"].as_str()), (400, Some("idempotency_key_required")));

    // A malformed body is refused without being kept under its key.
    let mut bad = order("WO-4");
    bad["quantity"] = json!(0);
    let malformed = purchase(&erp, &token, "key-4", &bad).await;
    assert_eq!((malformed.status, malformed.json()["error"].as_str()), (400, Some("invalid_body")));
    assert_eq!(purchase(&erp, &token, "key-4", &order("WO-4")).await.status, 200);
    assert_eq!(effects(&erp).await["effects"], 3);
}

// --- the async protocol and the state query ---

#[tokio::test]
async fn a_write_is_pending_then_done_when_its_protocol_is_polled() {
    let delay = Duration::from_millis(1000);
    let erp = start(Settings { async_delay: delay, ..roomy() }).await;
    let token = access(&erp).await;
    let sent = Instant::now();
    let reply = purchase(&erp, &token, "key-1", &order("WO-1")).await;
    assert_eq!(reply.status, 200);
    let protocol = reply.json()["protocol"].as_str().unwrap().to_string();
    assert_eq!(reply.json(), json!({"protocol": protocol, "status": "PENDING"}));

    let path = format!("/protocols/{protocol}");
    let polled = get(&erp, &token, &path).await;
    assert_eq!((polled.status, polled.json()["status"].as_str()), (200, Some("PENDING")));
    assert_eq!(effects(&erp).await["pending"], 1);

    let done = eventually("the protocol is DONE", || async {
        let state = get(&erp, &token, &path).await.json();
        (state["status"] != "PENDING").then_some(state)
    })
    .await;
    assert!(sent.elapsed() >= delay, "DONE after {:?}", sent.elapsed());
    assert_eq!(done["status"], "DONE");
    assert_eq!(done["idempotency_key"], "key-1");
    let result = &done["result"];
    assert!(result["purchase_id"].as_str().is_some_and(|id| id.starts_with("PO-")));
    assert_eq!(
        (&result["tenant"], &result["order_id"], &result["part"]),
        (&json!("acme"), &json!("WO-1"), &json!("BRG-6204"))
    );
    assert_eq!((&result["quantity"], &result["value"]), (&json!(4), &json!("51.20")));
    let counted = effects(&erp).await;
    assert_eq!((counted["done"].as_u64(), counted["pending"].as_u64()), (Some(1), Some(0)));

    let unknown = get(&erp, &token, "/protocols/PRT-999999").await;
    assert_eq!((unknown.status, unknown.json()["error"].as_str()), (404, Some("protocol_not_found")));
}

#[tokio::test]
async fn the_state_query_by_key_says_not_found_pending_then_done() {
    let erp = start(Settings { async_delay: Duration::from_millis(800), ..roomy() }).await;
    let token = access(&erp).await;
    assert_eq!(state_of(&erp, &token, "key-1").await, json!({"idempotency_key": "key-1", "status": "NOT_FOUND"}));

    let protocol = purchase(&erp, &token, "key-1", &order("WO-1")).await.json()["protocol"].clone();
    let pending = state_of(&erp, &token, "key-1").await;
    assert_eq!((&pending["status"], &pending["protocol"]), (&json!("PENDING"), &protocol));

    let done = eventually("the key is DONE", || async {
        let state = state_of(&erp, &token, "key-1").await;
        (state["status"] == "DONE").then_some(state)
    })
    .await;
    assert_eq!((&done["protocol"], &done["result"]["order_id"]), (&protocol, &json!("WO-1")));
    // The protocol says the same.
    assert_eq!(get(&erp, &token, &format!("/protocols/{}", protocol.as_str().unwrap())).await.json(), done);
    // And the listing has it.
    let listed = get(&erp, &token, "/purchases").await.json();
    assert_eq!(listed["items"], json!([done]));
    // Each state query answered is counted (two a call of state_of), the listing is not.
    let counted = effects(&erp).await;
    let queries = counted["state_queries"].as_u64().unwrap();
    assert!(queries >= 6 && queries % 2 == 0, "{counted}");
}

// --- rate limits ---

#[tokio::test]
async fn the_per_second_window_answers_429_with_retry_after() {
    let erp = start(Settings { per_second: 3, ..roomy() }).await;
    let token = access(&erp).await;
    for _ in 0..3 {
        assert_eq!(get(&erp, &token, "/requests/k").await.status, 200);
    }
    let limited = get(&erp, &token, "/requests/k").await;
    assert_eq!(limited.status, 429);
    assert_eq!(limited.header("retry-after"), Some("1"));
    let body = limited.json();
    assert_eq!((body["error"].as_str(), body["window"].as_str()), (Some("rate_limited"), Some("second")));
    let wait = body["retry_after_ms"].as_u64().unwrap();
    assert!((1..=1000).contains(&wait), "{wait}");
    // A write is limited the same way, and not applied.
    assert_eq!(purchase(&erp, &token, "key-1", &order("WO-1")).await.status, 429);

    tokio::time::sleep(Duration::from_millis(wait + 50)).await;
    assert_eq!(get(&erp, &token, "/requests/k").await.status, 200);
    let counted = effects(&erp).await;
    assert_eq!((counted["rate_limited"].as_u64(), counted["effects"].as_u64()), (Some(2), Some(0)));
}

#[tokio::test]
async fn the_per_minute_window_answers_429_with_retry_after() {
    let erp = start(Settings { per_second: 100, per_minute: 3, ..roomy() }).await;
    let token = access(&erp).await;
    for _ in 0..3 {
        assert_eq!(get(&erp, &token, "/requests/k").await.status, 200);
    }
    for _ in 0..2 {
        // Refused requests do not count: the wait does not grow.
        let limited = get(&erp, &token, "/requests/k").await;
        assert_eq!((limited.status, limited.json()["window"].as_str()), (429, Some("minute")));
        let secs: u64 = limited.header("retry-after").unwrap().parse().unwrap();
        assert!((50..=60).contains(&secs), "Retry-After {secs}");
    }
    // The token endpoint is not limited: a client can refresh while it waits.
    assert_eq!(refresh(erp.addr(), &erp.refresh_token()).await.unwrap().status, 200);
    // Loosening the limit at run time admits again.
    control(&erp, "PUT", "/_fake/config", Some(json!({"per_minute": 4}))).await;
    assert_eq!(get(&erp, &token, "/requests/k").await.status, 200);
    assert_eq!(get(&erp, &token, "/requests/k").await.status, 429);
}

// --- faults ---

#[tokio::test]
async fn late_the_answer_comes_after_the_client_gave_up_and_the_write_is_applied() {
    let erp = start(roomy()).await;
    let token = access(&erp).await;
    let gave_up =
        purchase_with(&erp, &token, Some("key-1"), &order("WO-1"), Some("late:1500"), Duration::from_millis(200)).await;
    assert!(matches!(gave_up, Err(CallError::Timeout)), "{gave_up:?}");
    // Not applied yet: the client cannot tell, the ERP has not done it.
    assert_eq!(state_of(&erp, &token, "key-1").await["status"], "NOT_FOUND");
    assert_eq!(effects(&erp).await["effects"], 0);

    let state = eventually("the late write is applied", || async {
        let state = state_of(&erp, &token, "key-1").await;
        (state["status"] != "NOT_FOUND").then_some(state)
    })
    .await;
    assert_eq!(state["status"], "DONE");
    let counted = effects(&erp).await;
    assert_eq!((counted["effects"].as_u64(), counted["faults_fired"].as_u64()), (Some(1), Some(1)));

    // The reconciled resend with the same key is a replay.
    let resent = purchase(&erp, &token, "key-1", &order("WO-1")).await;
    assert_eq!((resent.status, resent.header("idempotent-replayed")), (200, Some("true")));
    assert_eq!(resent.json()["protocol"], state["protocol"]);
    assert_eq!(effects(&erp).await["by_order"]["acme/WO-1"], 1);
}

#[tokio::test]
async fn late_a_resend_with_the_same_key_while_the_first_waits_is_refused_409() {
    let erp = start(roomy()).await;
    let token = access(&erp).await;
    let gave_up =
        purchase_with(&erp, &token, Some("key-1"), &order("WO-1"), Some("late:1000"), Duration::from_millis(100)).await;
    assert!(matches!(gave_up, Err(CallError::Timeout)), "{gave_up:?}");
    // The first is still being handled: the key is in flight, and the resend is turned away.
    let resent = purchase(&erp, &token, "key-1", &order("WO-1")).await;
    assert_eq!((resent.status, resent.json()["error"].as_str()), (409, Some("request_in_progress")));
    let counted = eventually("the late request is handled", || async {
        let counted = effects(&erp).await;
        (counted["writes_received"] == 1).then_some(counted)
    })
    .await;
    assert_eq!(
        (counted["in_progress_refused"].as_u64(), counted["writes_by_key"]["key-1"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(effects(&erp).await["by_order"]["acme/WO-1"], 1);
    // Handled: the key is free again, and a resend is the replay.
    let replayed = purchase(&erp, &token, "key-1", &order("WO-1")).await;
    assert_eq!((replayed.status, replayed.header("idempotent-replayed")), (200, Some("true")));
}

#[tokio::test]
async fn drop_the_write_is_applied_and_the_connection_closes_without_an_answer() {
    let erp = start(Settings { async_delay: Duration::from_secs(60), ..roomy() }).await;
    let token = access(&erp).await;
    // Queued, as a test does when the client under test sends no fault header.
    let queued = control(&erp, "POST", "/_fake/faults", Some(json!({"fault": "drop"}))).await;
    assert_eq!(queued["queued"], json!([{"fault": "drop", "times": 1, "on": "POST /purchases"}]));

    let lost = purchase_with(&erp, &token, Some("key-1"), &order("WO-1"), None, Duration::from_secs(10)).await;
    assert!(matches!(lost, Err(CallError::Closed)), "{lost:?}");
    assert_eq!(control(&erp, "GET", "/_fake/faults", None).await["queued"], json!([]));

    let counted = effects(&erp).await;
    assert_eq!(counted["effects"], 1);
    assert_eq!(counted["by_key"]["key-1"], json!({"status": "PENDING", "effects": 1}));
    let state = state_of(&erp, &token, "key-1").await;
    assert_eq!(state["status"], "PENDING");

    let resent = purchase(&erp, &token, "key-1", &order("WO-1")).await;
    assert_eq!((resent.status, resent.header("idempotent-replayed")), (200, Some("true")));
    assert_eq!(resent.json()["protocol"], state["protocol"]);
    assert_eq!(effects(&erp).await["effects"], 1);
}

#[tokio::test]
async fn drop_before_closes_the_connection_and_applies_nothing() {
    let erp = start(roomy()).await;
    let token = access(&erp).await;
    let lost =
        purchase_with(&erp, &token, Some("key-1"), &order("WO-1"), Some("drop-before"), Duration::from_secs(10)).await;
    assert!(matches!(lost, Err(CallError::Closed)), "{lost:?}");
    assert_eq!(state_of(&erp, &token, "key-1").await["status"], "NOT_FOUND");
    let counted = effects(&erp).await;
    assert_eq!((counted["effects"].as_u64(), counted["writes_received"].as_u64()), (Some(0), Some(0)));
}

#[tokio::test]
async fn server_errors_500_and_503_apply_nothing() {
    let erp = start(roomy()).await;
    let token = access(&erp).await;
    control(&erp, "POST", "/_fake/faults", Some(json!({"fault": "500"}))).await;
    control(&erp, "POST", "/_fake/faults", Some(json!({"fault": "503", "times": 2}))).await;

    let first = purchase(&erp, &token, "key-1", &order("WO-1")).await;
    assert_eq!((first.status, first.json()["error"].as_str()), (500, Some("internal_error")));
    assert_eq!(state_of(&erp, &token, "key-1").await["status"], "NOT_FOUND");
    for _ in 0..2 {
        let busy = purchase(&erp, &token, "key-1", &order("WO-1")).await;
        assert_eq!((busy.status, busy.header("retry-after")), (503, Some("1")));
    }
    assert_eq!(effects(&erp).await["effects"], 0);

    // The queue is used up: the next try is applied, once.
    let applied = purchase(&erp, &token, "key-1", &order("WO-1")).await;
    assert_eq!((applied.status, applied.header("idempotent-replayed")), (200, None));
    let counted = effects(&erp).await;
    assert_eq!((counted["effects"].as_u64(), counted["faults_fired"].as_u64()), (Some(1), Some(3)));
}

#[tokio::test]
async fn refuse_is_a_business_4xx_kept_as_the_keys_final_answer() {
    let erp = start(roomy()).await;
    let token = access(&erp).await;
    let refused = purchase_with(
        &erp,
        &token,
        Some("key-1"),
        &order("WO-1"),
        Some("refuse:part_discontinued"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!((refused.status, refused.json()), (422, json!({"error": "part_discontinued"})));
    assert_eq!(
        state_of(&erp, &token, "key-1").await,
        json!({"idempotency_key": "key-1", "status": "REJECTED", "error": "part_discontinued"})
    );
    // Sent again without the fault, the key still answers its refusal.
    let again = purchase(&erp, &token, "key-1", &order("WO-1")).await;
    assert_eq!((again.status, again.header("idempotent-replayed")), (422, Some("true")));
    let counted = effects(&erp).await;
    assert_eq!((counted["effects"].as_u64(), counted["rejected"].as_u64()), (Some(0), Some(1)));
    assert_eq!(counted["by_key"]["key-1"]["status"], "REJECTED");
}

#[tokio::test]
async fn reject_later_accepts_then_the_protocol_ends_rejected() {
    let erp = start(Settings { async_delay: Duration::from_millis(300), ..roomy() }).await;
    let token = access(&erp).await;
    let accepted = purchase_with(
        &erp,
        &token,
        Some("key-1"),
        &order("WO-1"),
        Some("reject-later:no_stock"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!((accepted.status, accepted.json()["status"].as_str()), (200, Some("PENDING")));
    let path = format!("/protocols/{}", accepted.json()["protocol"].as_str().unwrap());
    let ended = eventually("the protocol ends", || async {
        let state = get(&erp, &token, &path).await.json();
        (state["status"] != "PENDING").then_some(state)
    })
    .await;
    assert_eq!((ended["status"].as_str(), ended["error"].as_str()), (Some("REJECTED"), Some("no_stock")));
    assert_eq!(state_of(&erp, &token, "key-1").await["status"], "REJECTED");
    let counted = effects(&erp).await;
    assert_eq!((counted["effects"].as_u64(), counted["rejected"].as_u64()), (Some(0), Some(1)));
}

#[tokio::test]
async fn queued_faults_wait_for_the_requests_they_match() {
    let erp = start(roomy()).await;
    let token = access(&erp).await;
    control(&erp, "POST", "/_fake/faults", Some(json!({"fault": "503", "on": "GET /protocols"}))).await;
    let protocol =
        purchase(&erp, &token, "key-1", &order("WO-1")).await.json()["protocol"].as_str().unwrap().to_string();
    assert_eq!(state_of(&erp, &token, "key-1").await["status"], "DONE");
    let path = format!("/protocols/{protocol}");
    assert_eq!(get(&erp, &token, &path).await.status, 503);
    assert_eq!(get(&erp, &token, &path).await.status, 200);

    // A refresh whose answer is lost has still rotated the token: the client's copy is stale.
    control(&erp, "POST", "/_fake/faults", Some(json!({"fault": "drop", "on": "POST /oauth/token"}))).await;
    let held = erp.refresh_token();
    assert!(matches!(refresh(erp.addr(), &held).await, Err(CallError::Closed)));
    assert_eq!(refresh(erp.addr(), &held).await.unwrap().status, 400);

    // Faults that cannot be read are refused, and nothing is queued.
    for bad in [json!({"fault": "404"}), json!({"fault": "drop", "on": "purchases"}), json!({"times": 1})] {
        let reply = client::json(erp.addr(), "POST", "/_fake/faults", &[], Some(&bad)).await.unwrap();
        assert_eq!((reply.status, reply.json()["error"].as_str()), (400, Some("bad_fault")), "{bad}");
    }
    let bad_header =
        purchase_with(&erp, &token, Some("key-2"), &order("WO-2"), Some("explode"), Duration::from_secs(10))
            .await
            .unwrap();
    assert_eq!((bad_header.status, bad_header.json()["error"].as_str()), (400, Some("bad_fault")));
    assert_eq!(control(&erp, "GET", "/_fake/faults", None).await["queued"], json!([]));
    assert_eq!(effects(&erp).await["effects"], 1);
}

// --- control ---

#[tokio::test]
async fn reset_forgets_everything_and_issues_the_refresh_token_again() {
    let erp = start(roomy()).await;
    let token = access(&erp).await;
    purchase(&erp, &token, "key-1", &order("WO-1")).await;
    control(&erp, "POST", "/_fake/faults", Some(json!({"fault": "500", "times": 5}))).await;
    let stale = erp.refresh_token();

    let fresh = control(&erp, "POST", "/_fake/reset", None).await["refresh_token"].as_str().unwrap().to_string();
    assert_ne!(fresh, stale);
    let counted = effects(&erp).await;
    assert_eq!((counted["effects"].as_u64(), counted["refreshes"].as_u64()), (Some(0), Some(0)));
    assert_eq!(control(&erp, "GET", "/_fake/faults", None).await["queued"], json!([]));
    assert_eq!(get(&erp, &token, "/requests/key-1").await.status, 401);
    assert_eq!(refresh(erp.addr(), &stale).await.unwrap().status, 400);
    assert_eq!(refresh(erp.addr(), &fresh).await.unwrap().status, 200);

    // A new refresh token on demand replaces the current one.
    let current = erp.refresh_token();
    let issued =
        control(&erp, "POST", "/_fake/refresh-token", None).await["refresh_token"].as_str().unwrap().to_string();
    assert_eq!(refresh(erp.addr(), &current).await.unwrap().status, 400);
    assert_eq!(refresh(erp.addr(), &issued).await.unwrap().status, 200);
}

#[tokio::test]
async fn the_binary_prints_its_address_and_refresh_token_as_one_json_line() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate-fake-erp"))
        .args(["--listen", "127.0.0.1:0", "--per-second", "2", "--async-delay-ms", "0", "--refresh-token", "rt-start"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let started: Value = serde_json::from_str(&line).unwrap();
    let addr: SocketAddr = started["listen"].as_str().unwrap().parse().unwrap();
    assert_ne!(addr.port(), 0);
    assert_eq!(started["base_url"], format!("http://{addr}"));
    assert_eq!(started["refresh_token"], "rt-start");

    let refreshed = refresh(addr, "rt-start").await;
    let config = client::json(addr, "GET", "/_fake/config", &[], None).await;
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(refreshed.unwrap().status, 200);
    let config = config.unwrap().json();
    assert_eq!((config["per_second"].as_u64(), config["async_delay_ms"].as_u64()), (Some(2), Some(0)));
    assert_eq!(config["token_ttl_ms"], 3_600_000);
}

#[tokio::test]
async fn synchronous_a_write_is_done_at_once() {
    let erp = start(Settings { synchronous: true, async_delay: Duration::from_secs(60), ..roomy() }).await;
    let token = access(&erp).await;
    let done = purchase(&erp, &token, "key-1", &order("WO-1")).await;
    assert_eq!((done.status, done.json()["status"].as_str()), (200, Some("DONE")), "{:?}", done.json());
    assert_eq!(done.json()["result"]["order_id"], "WO-1");
    assert_eq!(state_of(&erp, &token, "key-1").await["status"], "DONE");
    let counted = effects(&erp).await;
    assert_eq!((counted["effects"].as_u64(), counted["done"].as_u64()), (Some(1), Some(1)));
}
