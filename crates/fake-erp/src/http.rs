//! The routes. Every request but `/_fake/*` goes through [`gate`]: the rate limiter and the bearer
//! check for the API (not for `/oauth/token`), then the fault chosen for it, if any.

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

use crate::fault::{Fault, Matcher};
use crate::state::Refreshed;
use crate::{fresh_token, Connection, Shared};

/// The header that chooses a fault for one request.
pub const FAULT_HEADER: &str = "x-fake-fault";

/// The largest request body read.
const MAX_BODY: usize = 1024 * 1024;

type Erp = State<Arc<Shared>>;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/oauth/token", post(token))
        .route("/purchases", post(create_purchase).get(purchases))
        .route("/protocols/{protocol}", get(protocol))
        .route("/requests/{key}", get(request_state))
        .route("/_fake/effects", get(effects))
        .route("/_fake/reset", post(reset))
        .route("/_fake/refresh-token", post(new_refresh_token))
        .route("/_fake/expire-tokens", post(expire_tokens))
        .route("/_fake/faults", post(queue_fault).get(list_faults).delete(clear_faults))
        .route("/_fake/config", get(config).put(set_config))
        .layer(middleware::from_fn_with_state(shared.clone(), gate))
        .with_state(shared)
}

fn answer(status: u16, body: Value) -> Response {
    (StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), Json(body)).into_response()
}

async fn gate(State(erp): Erp, ConnectInfo(conn): ConnectInfo<Connection>, req: Request, next: Next) -> Response {
    let (method, path) = (req.method().as_str().to_string(), req.uri().path().to_string());
    if path.starts_with("/_fake/") {
        return next.run(req).await;
    }
    let header = match req.headers().get(FAULT_HEADER).map(|v| v.to_str().map_err(|_| "not text".to_string())) {
        None => None,
        Some(text) => match text.and_then(Fault::parse) {
            Ok(fault) => Some(fault),
            Err(e) => return answer(400, json!({"error": "bad_fault", "detail": e})),
        },
    };
    let write = method == Method::POST.as_str() && path == "/purchases";
    let key = req.headers().get("idempotency-key").and_then(|v| v.to_str().ok()).map(|k| k.trim().to_string());
    let fault = {
        let mut state = erp.lock();
        let now = Instant::now();
        if path != "/oauth/token" {
            if let Err(limited) = state.admit(now) {
                let secs = limited.retry_after_secs();
                let body = json!({
                    "error": "rate_limited", "window": limited.window,
                    "retry_after_ms": u64::try_from(limited.retry_after.as_millis()).unwrap_or(u64::MAX),
                });
                let mut response = answer(429, body);
                response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
                return response;
            }
            let bearer = req.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer);
            if !state.authorized(bearer, now) {
                return invalid_token();
            }
        }
        if let Some(key) = key.as_deref().filter(|k| write && !k.is_empty()) {
            if !state.begin_write(key) {
                return answer(409, json!({"error": "request_in_progress", "idempotency_key": key}));
            }
        }
        let fault = header.or_else(|| state.take_fault(&method, &path));
        if fault.is_some() {
            state.fault_fired();
        }
        if fault == Some(Fault::ExpireTokens) && path != "/oauth/token" {
            state.expire_access_tokens();
            state.refused_token();
            if let Some(key) = key.as_deref().filter(|_| write) {
                state.end_write(key);
            }
            return invalid_token();
        }
        fault
    };
    // Until the write is answered (or, when its client has gone, done): the key is in flight.
    let in_flight = key.filter(|k| write && !k.is_empty()).map(|key| InFlight { erp: erp.clone(), key });
    match fault {
        None => next.run(req).await,
        Some(Fault::InternalError) => answer(500, json!({"error": "internal_error"})),
        Some(Fault::Unavailable) => {
            let mut response = answer(503, json!({"error": "unavailable"}));
            response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(1));
            response
        }
        Some(Fault::RateLimited) => {
            let mut response = answer(429, json!({"error": "rate_limited"}));
            response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(0));
            response
        }
        Some(Fault::DropBefore) => {
            conn.drop_without_answer();
            StatusCode::NO_CONTENT.into_response()
        }
        Some(Fault::ExpireTokens) => {
            // Only /oauth/token gets here: the refresh is done, and its access token expires at once.
            let response = next.run(req).await;
            erp.lock().expire_access_tokens();
            response
        }
        Some(Fault::Drop) => {
            let response = next.run(req).await;
            conn.drop_without_answer();
            response
        }
        Some(Fault::Late(wait)) => {
            // Read the body now: once the client gives up, the connection that carries it is gone.
            let (parts, body) = req.into_parts();
            let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
                return answer(400, json!({"error": "body_unreadable"}));
            };
            let req = Request::from_parts(parts, Body::from(body));
            // A task of its own, so the request is handled even when the client has gone away.
            let handled = tokio::spawn(async move {
                let _in_flight = in_flight;
                tokio::time::sleep(wait).await;
                next.run(req).await
            });
            handled.await.unwrap_or_else(|_| answer(500, json!({"error": "internal_error"})))
        }
        Some(
            fault @ (Fault::Refuse(_)
            | Fault::RejectLater(_)
            | Fault::Failed(_)
            | Fault::PendingBare(_)
            | Fault::Worded(_)
            | Fault::Answer(_)),
        ) if write => {
            let mut req = req;
            req.extensions_mut().insert(fault);
            next.run(req).await
        }
        Some(Fault::Refuse(code) | Fault::Failed(code)) => answer(422, json!({"error": code})),
        Some(Fault::RejectLater(_) | Fault::PendingBare(_) | Fault::Worded(_) | Fault::Answer(_)) => {
            next.run(req).await
        }
        Some(Fault::Huge(bytes)) => {
            let (mut parts, body) = next.run(req).await.into_parts();
            let body = axum::body::to_bytes(body, MAX_BODY).await.unwrap_or_default();
            let mut value: Value = serde_json::from_slice(&body).unwrap_or_else(|_| json!({}));
            if let Some(fields) = value.as_object_mut() {
                fields.insert("padding".into(), Value::String("x".repeat(bytes)));
            }
            parts.headers.remove(axum::http::header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(value.to_string()))
        }
    }
}

/// A write's key while the write is being handled: no longer in flight once this is dropped.
struct InFlight {
    erp: Arc<Shared>,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.erp.lock().end_write(&self.key);
    }
}

/// `401 {"error": "invalid_token"}` with its `WWW-Authenticate`.
fn invalid_token() -> Response {
    let mut response = answer(401, json!({"error": "invalid_token"}));
    response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer error=\"invalid_token\""));
    response
}

/// The token of an `Authorization: Bearer <token>` header value.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    Some(token.trim()).filter(|t| scheme.eq_ignore_ascii_case("bearer") && !t.is_empty())
}

/// `application/x-www-form-urlencoded` pairs (a query string or a form body), decoded.
fn form_pairs(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push(high * 16 + low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `POST /oauth/token`, `grant_type=refresh_token&refresh_token=…` as a form (or the same names in
/// a JSON object).
async fn token(State(erp): Erp, headers: HeaderMap, body: Bytes) -> Response {
    let json =
        headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/json"));
    let field = |name: &str| -> Option<String> {
        if json {
            let value: Value = serde_json::from_slice(&body).ok()?;
            value.get(name)?.as_str().map(str::to_string)
        } else {
            let text = std::str::from_utf8(&body).ok()?;
            form_pairs(text).into_iter().find(|(n, _)| n == name).map(|(_, v)| v)
        }
    };
    if field("grant_type").as_deref() != Some("refresh_token") {
        return answer(400, json!({"error": "unsupported_grant_type"}));
    }
    let Some(presented) = field("refresh_token") else {
        return answer(400, json!({"error": "invalid_request", "error_description": "refresh_token is missing"}));
    };
    match erp.lock().refresh(&presented, fresh_token, Instant::now()) {
        Refreshed::Issued { access_token, refresh_token, expires_in } => answer(
            200,
            json!({
                "access_token": access_token, "token_type": "Bearer",
                "expires_in": expires_in, "refresh_token": refresh_token,
            }),
        ),
        Refreshed::InvalidGrant => answer(
            400,
            json!({"error": "invalid_grant", "error_description": "the refresh token is not the current one"}),
        ),
    }
}

/// `POST /purchases` with `Idempotency-Key`.
async fn create_purchase(State(erp): Erp, req: Request) -> Response {
    let fault = req.extensions().get::<Fault>().cloned();
    let key = match req.headers().get("idempotency-key").map(|v| v.to_str()) {
        None => None,
        Some(Ok(key)) if !key.trim().is_empty() => Some(key.trim().to_string()),
        Some(_) => return answer(400, json!({"error": "invalid_idempotency_key"})),
    };
    let Ok(body) = axum::body::to_bytes(req.into_body(), MAX_BODY).await else {
        return answer(400, json!({"error": "body_unreadable"}));
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return answer(400, json!({"error": "invalid_body", "detail": "not JSON"}));
    };
    let reply = erp.lock().write(key.as_deref(), body, fault.as_ref(), || erp.names(), Instant::now());
    let mut response = answer(reply.status, reply.body);
    if reply.replayed {
        response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

/// `GET /purchases?idempotency_key=K` is the state query by key; without it, every purchase.
async fn purchases(State(erp): Erp, uri: Uri) -> Response {
    let pairs = form_pairs(uri.query().unwrap_or(""));
    let mut state = erp.lock();
    match pairs.into_iter().find(|(n, _)| n == "idempotency_key") {
        Some((_, key)) => answer(200, state.query_key(&key, Instant::now())),
        None => answer(200, json!({"items": state.purchases(Instant::now())})),
    }
}

/// `GET /requests/{key}`: the state query by key.
async fn request_state(State(erp): Erp, Path(key): Path<String>) -> Response {
    answer(200, erp.lock().query_key(&key, Instant::now()))
}

/// `GET /protocols/{protocol}`.
async fn protocol(State(erp): Erp, Path(protocol): Path<String>) -> Response {
    match erp.lock().protocol(&protocol, Instant::now()) {
        Some(state) => answer(200, state),
        None => answer(404, json!({"error": "protocol_not_found", "protocol": protocol})),
    }
}

async fn effects(State(erp): Erp) -> Response {
    answer(200, erp.effects())
}

async fn reset(State(erp): Erp) -> Response {
    answer(200, json!({"refresh_token": erp.reset()}))
}

/// A new refresh token replaces the current one (as re-authorising the application would).
async fn new_refresh_token(State(erp): Erp) -> Response {
    let token = fresh_token("rt");
    erp.lock().set_refresh_token(token.clone());
    answer(200, json!({"refresh_token": token}))
}

async fn expire_tokens(State(erp): Erp) -> Response {
    answer(200, json!({"expired": erp.lock().expire_access_tokens()}))
}

/// `{"fault": "drop", "times": 1, "on": "POST /purchases"}`; `times` defaults to 1 and `on` to the
/// write endpoint.
async fn queue_fault(State(erp): Erp, body: Bytes) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return answer(400, json!({"error": "invalid_body", "detail": "not JSON"}));
    };
    let fault = match body.get("fault").and_then(Value::as_str).map(Fault::parse) {
        Some(Ok(fault)) => fault,
        Some(Err(e)) => return answer(400, json!({"error": "bad_fault", "detail": e})),
        None => return answer(400, json!({"error": "bad_fault", "detail": "fault: a string"})),
    };
    let times = match body.get("times") {
        None => 1,
        Some(n) => match n.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) => n,
            None => return answer(400, json!({"error": "bad_fault", "detail": "times: a whole number"})),
        },
    };
    let on = match body.get("on") {
        None => Matcher::default(),
        Some(Value::String(on)) => match Matcher::parse(on) {
            Ok(on) => on,
            Err(e) => return answer(400, json!({"error": "bad_fault", "detail": e})),
        },
        Some(_) => return answer(400, json!({"error": "bad_fault", "detail": "on: a string"})),
    };
    let mut state = erp.lock();
    state.queue_fault(fault, times, on);
    answer(200, json!({"queued": state.queued_faults()}))
}

async fn list_faults(State(erp): Erp) -> Response {
    answer(200, json!({"queued": erp.lock().queued_faults()}))
}

async fn clear_faults(State(erp): Erp) -> Response {
    answer(200, json!({"cleared": erp.lock().clear_faults()}))
}

async fn config(State(erp): Erp) -> Response {
    answer(200, erp.lock().settings.to_json())
}

async fn set_config(State(erp): Erp, body: Bytes) -> Response {
    let Ok(change) = serde_json::from_slice::<Value>(&body) else {
        return answer(400, json!({"error": "invalid_body", "detail": "not JSON"}));
    };
    let mut state = erp.lock();
    match state.settings.update(&change) {
        Ok(()) => answer(200, state.settings.to_json()),
        Err(e) => answer(400, json!({"error": "invalid_setting", "detail": e})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode() {
        let pairs = form_pairs("grant_type=refresh_token&refresh_token=a%2Bb+c&x&bad=%zz%4");
        assert_eq!(pairs[0], ("grant_type".into(), "refresh_token".into()));
        assert_eq!(pairs[1], ("refresh_token".into(), "a+b c".into()));
        assert_eq!(pairs[2], ("x".into(), "".into()));
        assert_eq!(pairs[3], ("bad".into(), "%zz%4".into()));
    }

    #[test]
    fn bearer_needs_the_scheme() {
        assert_eq!(bearer("Bearer at-1"), Some("at-1"));
        assert_eq!(bearer("bearer  at-1 "), Some("at-1"));
        assert_eq!(bearer("Basic at-1"), None);
        assert_eq!(bearer("Bearer"), None);
    }
}
