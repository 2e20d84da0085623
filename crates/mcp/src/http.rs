//! `toolgate mcp --http ADDR`: Streamable HTTP at `/mcp`, for any tenant's people. Every request
//! carries `Authorization: Bearer <identity token>`, which the gate checks (`toolgate.tools`)
//! before the request reaches the MCP handler: a missing or refused token is a 401 pointing at the
//! Protected Resource Metadata (RFC 9728) served at `/.well-known/oauth-protected-resource/mcp`.
//! The server keeps nothing that must survive: what must is in the database, and a `requestState`
//! and an `Mcp-Session-Id` (revisions before 2026-07-28, [`crate::session`]) are sealed with
//! `TOOLGATE_STATE_KEY_FILE`'s key, so processes behind one URL serve one conversation.

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use axum_server::tls_rustls::RustlsConfig;
use rmcp::transport::streamable_http_server::session::local::SessionConfig;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Http;
use crate::gate::{GateError, RequestRecord};
use crate::listings::Listings;
use crate::request::{bearer, Trace};
use crate::server::{listing_of, unverified_claims, ToolgateServer, Verified};
use crate::session::{self, Opening, SealedSessions, SealedStore, Sealer, OPENING};
use tower::ServiceExt;

/// How long an `Mcp-Session-Id` opens after `initialize`.
const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

/// Where RFC 9728 puts the metadata of `resource`: `/.well-known/oauth-protected-resource`
/// inserted between its origin and its path.
fn metadata_url(resource: &str) -> String {
    let scheme_end = resource.find("://").map_or(0, |i| i + 3);
    let path_start = resource[scheme_end..].find('/').map_or(resource.len(), |i| scheme_end + i);
    let (origin, path) = resource.split_at(path_start);
    format!("{origin}/.well-known/oauth-protected-resource{}", path.trim_end_matches('/'))
}

/// The largest request body read (rmcp's own limit is the same).
const MAX_BODY: usize = 4 * 1024 * 1024;

struct Shared {
    server: ToolgateServer,
    /// Requests without an MCP session (protocol 2026-07-28, and any without `Mcp-Session-Id`).
    stateless: StreamableHttpService<ToolgateServer, NeverSessionManager>,
    /// `initialize` before 2026-07-28, and requests of its session.
    sessions: StreamableHttpService<ToolgateServer, SealedSessions>,
    sealer: Sealer,
    read_timeout: Duration,
    listings: Listings,
    resource: String,
    metadata: String,
}

/// Serve until SIGINT or SIGTERM: plain HTTP, or HTTPS with `--tls-cert` and `--tls-key`.
pub async fn serve(server: ToolgateServer) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let crate::config::Transport::Http(Http {
        addr,
        resource,
        allowed_hosts,
        listen,
        tls,
        read_timeout,
        listing_ttl,
        ..
    }) = &server.transport
    else {
        return Err("not configured for HTTP".into());
    };
    let (addr, resource, listen, tls, read_timeout) = (*addr, resource.clone(), *listen, tls.clone(), *read_timeout);
    let listings = Listings::new(*listing_ttl);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_allowed_hosts(allowed_hosts.clone());
    let handler = server.clone();
    let stateless = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        config.clone(),
    );
    let sealer = Sealer::new(server.states().clone(), SESSION_TTL);
    let mut session_config = config.with_legacy_session_mode(true).with_json_response(false);
    session_config.session_store = Some(Arc::new(SealedStore(sealer.clone())));
    let handler = server.clone();
    // An idle session leaves this process after a while; its id brings it back (SealedStore).
    let mut idle = SessionConfig::default();
    idle.keep_alive = Some(Duration::from_secs(600));
    let sessions = SealedSessions::new(sealer.clone(), idle);
    let sessions = StreamableHttpService::new(move || Ok(handler.clone()), Arc::new(sessions), session_config);
    let shared = Arc::new(Shared {
        server,
        stateless,
        sessions,
        sealer,
        metadata: metadata_url(&resource),
        resource: resource.clone(),
        read_timeout,
        listings,
    });
    let app = Router::new()
        .route("/mcp", axum::routing::any(mcp))
        .route_layer(middleware::from_fn_with_state(shared.clone(), check_bearer))
        .route("/.well-known/oauth-protected-resource", get(protected_resource))
        .route("/.well-known/oauth-protected-resource/mcp", get(protected_resource))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(shared.clone());
    if let Some(listen) = listen {
        let operator = Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("--listen {listen}: {e}"))?;
        tracing::info!("/metrics, /healthz and /readyz on {}", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, operator).await;
        });
    }
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    // SIGTERM or SIGINT: no new connection is taken; requests in flight (each one transaction of
    // the gate, bounded by the statement timeout) get SHUTDOWN_GRACE to end.
    let handle = axum_server::Handle::new();
    let stopping = handle.clone();
    tokio::spawn(async move {
        stopped().await;
        tracing::info!("stopping: no new requests; those in flight end");
        stopping.graceful_shutdown(Some(SHUTDOWN_GRACE));
    });
    let app = app.into_make_service();
    match tls {
        Some(files) => {
            let config = RustlsConfig::from_config(Arc::new(crate::tls::server_config(&files)?));
            tokio::spawn(crate::tls::reload(files, config.clone()));
            let mut server = axum_server::from_tcp_rustls(listener, config)?.handle(handle);
            read_timeouts(server.http_builder(), read_timeout);
            tracing::info!("Streamable HTTP over TLS on {local} for {resource}");
            server.serve(app).await?;
        }
        None => {
            let mut server = axum_server::from_tcp(listener)?.handle(handle);
            read_timeouts(server.http_builder(), read_timeout);
            tracing::info!("Streamable HTTP on {local} for {resource}");
            server.serve(app).await?;
        }
    }
    Ok(())
}

/// How long the server waits for a connection to stop on SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// A client that dribbles its headers is cut off after `timeout` (hyper's header read timeout; the
/// body has its own in `check_bearer`), so it does not hold a connection slot for ever.
fn read_timeouts(
    builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    timeout: Duration,
) {
    builder.http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(timeout);
}

/// SIGTERM or SIGINT.
pub async fn stopped() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

/// Every request to `/mcp` carries a token the gate accepts, or is answered 401. When the token
/// cannot be checked (the database is unreachable, or every connection is busy), the request is
/// answered 503 with `Retry-After`: never served unchecked, never queued without end.
async fn check_bearer(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let trace = Trace::of(request.headers().get("traceparent").and_then(|v| v.to_str().ok()));
    let record = Arc::new(RequestRecord::default());
    let (method, response) = checked(&shared, request, next, &trace, &record, started).await;
    let (tool, outcome) = record.get().unzip();
    tracing::info!(
        method = method.as_deref().unwrap_or("-"),
        tool = tool.as_deref(),
        outcome = outcome.as_deref(),
        status = response.status().as_u16(),
        duration_ms = started.elapsed().as_secs_f64() * 1000.0,
        trace_id = %trace.0,
        "request"
    );
    response
}

/// `check_bearer`'s work: the MCP method (when the body names one) and the answer.
async fn checked(
    shared: &Arc<Shared>,
    request: Request,
    next: Next,
    trace: &Trace,
    record: &Arc<RequestRecord>,
    started: Instant,
) -> (Option<String>, Response) {
    let metrics = shared.server.gate.metrics();
    let token = request.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer);
    let Some(token) = token.map(String::from) else {
        metrics.refused("unauthorized");
        return (None, unread_body(unauthorized(shared, None)));
    };
    // A body that is not JSON is JSON-RPC's parse error, as the client expects, not a bare 4xx.
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(shared.read_timeout, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => {
            metrics.refused("too_large");
            return (
                None,
                unread_body((StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large").into_response()),
            );
        }
        Err(_) => {
            metrics.refused("slow_body");
            return (
                None,
                unread_body((StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time").into_response()),
            );
        }
    };
    // The method, and an initialize's parameters (who opens a session keeps them).
    let (method, init) = match parts.method {
        axum::http::Method::POST => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(mut message) => {
                let method = message["method"].as_str().unwrap_or("other").to_string();
                let init = (method == "initialize").then(|| message["params"].take());
                (method, init)
            }
            Err(_) => {
                metrics.refused("parse_error");
                let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error: the body is not JSON"}});
                return (None, (StatusCode::BAD_REQUEST, Json(error)).into_response());
            }
        },
        ref other => (other.as_str().to_string(), None),
    };
    let mut request = Request::from_parts(parts, axum::body::Body::from(bytes));
    request.extensions_mut().insert(trace.clone());
    request.extensions_mut().insert(record.clone());
    // A call verifies the token again in the gate: a listing verified a moment ago serves it.
    if method == "tools/call" {
        if let Some(listing) = shared.listings.get(&token) {
            let response = serve_checked(shared, request, next, &token, listing, init).await;
            metrics.request(&method, started.elapsed());
            return (Some(method), response);
        }
    }
    match shared.server.gate.tools(&token).await {
        Ok(outcome) => match listing_of(&outcome) {
            Ok(listing) => {
                let listing = Arc::new(listing);
                shared.listings.put(&token, listing.clone());
                let response = serve_checked(shared, request, next, &token, listing, init).await;
                metrics.request(&method, started.elapsed());
                (Some(method), response)
            }
            Err(why) => {
                shared.listings.forget(&token);
                metrics.refused("unauthorized");
                (Some(method), unauthorized(shared, Some(&why)))
            }
        },
        Err(e) => {
            let (reason, description, retry) = match e {
                GateError::Busy => ("busy", "every database connection is busy: try again in a moment", "1"),
                _ => ("unavailable", "the token cannot be checked now: the database is unavailable", "5"),
            };
            tracing::warn!(trace_id = %trace.0, "the bearer token cannot be checked: {e}");
            metrics.refused(reason);
            let body = json!({"error": "temporarily_unavailable", "error_description": description});
            let mut response = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
            response.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static(retry));
            (Some(method), response)
        }
    }
}

/// A request whose token the gate accepted (`listing`), served: one with an `Mcp-Session-Id` only
/// if that session was opened by the same caller with this server's key (else 404, as for a
/// session that never was); an `initialize` with who opens the session, for [`SealedSessions`].
async fn serve_checked(
    shared: &Shared,
    mut request: Request,
    next: Next,
    token: &str,
    listing: Arc<crate::server::Listing>,
    init: Option<serde_json::Value>,
) -> Response {
    let claims = unverified_claims(token).unwrap_or_default();
    let who = session::who(
        claims["iss"].as_str().unwrap_or_default(),
        claims["sub"].as_str().unwrap_or_default(),
        &listing.tenant,
    );
    request.extensions_mut().insert(Verified(listing));
    let session = request.headers().get("mcp-session-id").map(|v| v.to_str().unwrap_or_default().to_string());
    if let Some(id) = session {
        let opened = shared.sealer.open(&id);
        if opened.as_ref().is_none_or(|o| o.who != who) {
            tracing::warn!(
                "an Mcp-Session-Id was refused: {}",
                if opened.is_none() { "not sealed by this key, or expired" } else { "another caller's" }
            );
            shared.server.gate.metrics().refused("session_not_found");
            return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
        }
        return next.run(request).await;
    }
    match init {
        Some(init) => OPENING.scope(Opening { who, init }, next.run(request)).await,
        None => next.run(request).await,
    }
}

/// `/mcp` once checked: `initialize` before 2026-07-28 and requests of a session to the session
/// service, every other request to the stateless one.
async fn mcp(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let opening = OPENING.try_with(|o| o.init["protocolVersion"].as_str().is_some_and(|v| v < "2026-07-28"));
    let in_session = request.headers().contains_key("mcp-session-id") || opening.unwrap_or(false);
    let delete = request.method() == axum::http::Method::DELETE;
    let response = if in_session {
        shared.sessions.clone().oneshot(request).await
    } else {
        shared.stateless.clone().oneshot(request).await
    };
    let mut response = match response {
        Ok(r) => r.map(axum::body::Body::new),
        Err(never) => match never {},
    };
    // A session ended by DELETE: 204, which the SDKs' clients expect (rmcp answers 202).
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// An answer given before the request's body was read whole: the connection cannot carry another
/// request (what is left of the body is still on it), so it says `Connection: close`. Without it a
/// client may send its next request on a connection the server is closing, and see no answer.
fn unread_body(mut response: Response) -> Response {
    response.headers_mut().insert(axum::http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// `GET /healthz`: the process is up.
async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: a connection of the pool runs `SELECT 1`.
async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    match shared.server.gate.ready().await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// `GET /metrics`: Prometheus text.
async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let gate = &shared.server.gate;
    (
        [(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        gate.metrics().render(gate.status()),
    )
        .into_response()
}

/// 401, with `WWW-Authenticate` naming the metadata (and, for a refused token, why).
fn unauthorized(shared: &Shared, refused: Option<&str>) -> Response {
    let challenge = match refused {
        None => format!("Bearer resource_metadata=\"{}\"", shared.metadata),
        Some(why) => format!(
            "Bearer error=\"invalid_token\", error_description=\"{}\", resource_metadata=\"{}\"",
            why.replace(['"', '\\'], "'"),
            shared.metadata
        ),
    };
    let body = match refused {
        None => {
            json!({"error": "invalid_request", "error_description": "an identity token is required: Authorization: Bearer <token>"})
        }
        Some(why) => json!({"error": "invalid_token", "error_description": why}),
    };
    let mut response = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(WWW_AUTHENTICATE, v);
    }
    response
}

/// RFC 9728 Protected Resource Metadata: this resource, and as authorization servers the
/// registered issuers whose audiences include it (not every tenant's provider: on a shared server
/// that list would be the customer list).
async fn protected_resource(State(shared): State<Arc<Shared>>) -> Response {
    match shared.server.gate.authorization_servers(&shared.resource).await {
        Ok(servers) => Json(json!({
            "resource": shared.resource,
            "authorization_servers": servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "pg_toolgate",
        }))
        .into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"error": e.to_string()}))).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_sits_before_the_path() {
        assert_eq!(
            metadata_url("https://mcp.example.com/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:8808/mcp"),
            "http://127.0.0.1:8808/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(metadata_url("https://h.example"), "https://h.example/.well-known/oauth-protected-resource");
    }
}
