//! `toolgate console`: the approvals console (docs/console.md), where the person who approves
//! works. They sign in at the company's OpenID provider (the authorization code grant with PKCE,
//! openidconnect's), and see server-rendered pages (askama; no script): what waits for them
//! (`toolgate.pending`), a decision on each (`toolgate.approve`, with the word a tier-3 proposal
//! asks for), what was decided (`toolgate.approval_history`), and for the tenant's auditor roles
//! its audit with three charts drawn as SVG (`toolgate.audit_trail`).
//!
//! The ID token the provider issued to the console is the approver's identity: the gate verifies
//! it on every statement (each connection sets `toolgate.audience` to the console's client id, so
//! no token for another audience is accepted). The console keeps it in its own memory for the
//! session and never puts it in a cookie, a URL or a page: the session cookie holds a random id
//! (`HttpOnly`, `Secure`, `SameSite=Strict`), every form carries the session's CSRF token and is
//! refused from another origin, and every page is sent with a Content-Security-Policy that allows
//! nothing but the console's own stylesheet. A session ends with its ID token, or at sign-out.

use askama::Template;
use axum::extract::{Form, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
use base64::Engine;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    reqwest, AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope,
};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use toolgate_mcp::config::{ListenerTls, Pooling};
use toolgate_mcp::gate::{Gate, GateError};
use toolgate_pgconn::Database;

use crate::login::{chain, provider_http};

mod webhooks;

/// How `toolgate console` was started.
pub struct Options {
    /// Where it listens.
    pub http: SocketAddr,
    /// The console's address as a browser reaches it (the provider sends the person back to its
    /// `/callback`); `http://ADDR` when not given.
    pub public_url: Option<String>,
    /// The gate's database (libpq settings), logged in as a member of `toolgate_approver`.
    pub database: String,
    pub issuer: String,
    pub client_id: String,
    /// A confidential client's secret; none: a public client (PKCE alone).
    pub client_secret_file: Option<PathBuf>,
    /// More certificate authorities (PEM) for the provider's HTTPS.
    pub ca_file: Option<PathBuf>,
    pub tls: Option<ListenerTls>,
    /// Plain HTTP on an address other than loopback (only behind a TLS proxy).
    pub insecure_http: bool,
    /// `/metrics`, `/healthz` and `/readyz` on this loopback address.
    pub listen: Option<SocketAddr>,
    /// The tenants' chat webhooks, told when a proposal waits (`webhooks::Webhooks::read`).
    pub webhooks: Option<PathBuf>,
}

/// The cookie that names a session.
const SESSION: &str = "toolgate_console";
/// The cookie that names a sign-in under way (SameSite=Lax: the provider's redirect back is a
/// navigation from another site).
const SIGNING_IN: &str = "toolgate_console_login";
/// How long a sign-in may take at the provider.
const SIGN_IN_WAIT: Duration = Duration::from_secs(600);
/// Sessions and sign-ins at most (the oldest go first).
const HELD: usize = 10_000;

const CSS: &str = include_str!("../templates/console/console.css");
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

struct Session {
    /// The ID token: the approver's identity for the gate. Never leaves this process but to the
    /// database.
    id_token: String,
    /// Who signed in, as the provider says (for the page's header).
    name: String,
    /// The ID token's expiry (Unix seconds): the session's end.
    expires: i64,
    csrf: String,
    /// The tenant the gate named on the first listing (then every statement is routed by it).
    tenant: Option<String>,
    /// What the last decision came to, shown once.
    flash: Option<Flash>,
}

/// What the last decision came to: the gate's outcome and rule as it gave them, and what that
/// means, said in the tenant's language when the next page is drawn.
struct Flash {
    /// `SUCCEEDED`, `BLOCKED confirmation_invalid`…
    code: String,
    said: Said,
}

enum Said {
    Applied,
    /// An approval recorded: the approvals so far, and those needed.
    Recorded(i64, i64),
    Declined,
    /// Approved, and sent to the ERP (an outbox tool), whose answer is awaited.
    Sent,
    WrongWord,
    NotLive,
    Refused,
    /// The gate could not be asked.
    Unavailable(String),
}

/// A flash as a page shows it.
pub struct Shown {
    pub ok: bool,
    pub text: String,
}

impl Flash {
    fn of(answer: &Result<Value, GateError>) -> Flash {
        let v = match answer {
            Ok(v) => v,
            Err(e) => return Flash { code: "error".to_string(), said: Said::Unavailable(e.to_string()) },
        };
        let outcome = v["outcome"].as_str().unwrap_or("?");
        let rule = v["rule"].as_str();
        let count = |k: &str| v["result"][k].as_i64().unwrap_or(0);
        let said = match (outcome, rule) {
            ("SUCCEEDED", _) => Said::Applied,
            ("NEEDS_CONFIRMATION", _) => Said::Recorded(count("approvals"), count("needed")),
            ("CANCELLED", _) => Said::Declined,
            ("PENDING", _) => Said::Sent,
            (_, Some("confirmation_invalid")) => Said::WrongWord,
            (_, Some("proposal_not_live")) => Said::NotLive,
            _ => Said::Refused,
        };
        Flash { code: rule.map_or_else(|| outcome.to_string(), |r| format!("{outcome} {r}")), said }
    }

    fn shown(&self, w: &Words) -> Shown {
        let (ok, text) = match &self.said {
            Said::Applied => (true, w.applied.to_string()),
            Said::Recorded(approvals, needed) => (
                true,
                w.recorded.replace("{approvals}", &approvals.to_string()).replace("{needed}", &needed.to_string()),
            ),
            Said::Declined => (true, w.declined.to_string()),
            Said::Sent => (true, w.sent.to_string()),
            Said::WrongWord => (false, w.wrong_word.to_string()),
            Said::NotLive => (false, w.not_live.to_string()),
            Said::Refused => (false, w.refused.to_string()),
            Said::Unavailable(e) => (false, e.clone()),
        };
        Shown { ok, text: format!("{}: {text}", self.code) }
    }
}

struct SignIn {
    verifier: PkceCodeVerifier,
    state: String,
    nonce: Nonce,
    started: Instant,
}

struct Console {
    gate: Gate,
    metadata: CoreProviderMetadata,
    client_id: ClientId,
    client_secret: Option<ClientSecret>,
    redirect: RedirectUrl,
    /// scheme://host[:port] of the public address: a form from anywhere else is refused.
    origin: String,
    http: reqwest::Client,
    sessions: Mutex<HashMap<String, Session>>,
    signing_in: Mutex<HashMap<String, SignIn>>,
    metrics: Metrics,
}

fn random() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the system's random source");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn now() -> i64 {
    crate::keys::now()
}

/// The OpenID client, with the console's callback.
macro_rules! oidc {
    ($console:expr) => {
        CoreClient::from_provider_metadata(
            $console.metadata.clone(),
            $console.client_id.clone(),
            $console.client_secret.clone(),
        )
        .set_redirect_uri($console.redirect.clone())
    };
}

/// Start the console; runs until SIGTERM or SIGINT.
pub async fn run(opts: Options) -> Result<(), String> {
    let loopback = opts.http.ip().is_loopback();
    if opts.tls.is_none() && !loopback && !opts.insecure_http {
        return Err(format!(
            "--http {}: plain HTTP beyond loopback needs --insecure-http (only behind a TLS proxy that is the only \
             way in); or give --tls-cert and --tls-key",
            opts.http
        ));
    }
    let hooks = opts.webhooks.as_deref().map(webhooks::Webhooks::read).transpose()?;
    let scheme = if opts.tls.is_some() { "https" } else { "http" };
    let public = opts.public_url.clone().unwrap_or_else(|| format!("{scheme}://{}", opts.http));
    let public = openidconnect::url::Url::parse(&public).map_err(|e| format!("--public-url {public}: {e}"))?;
    let origin = public.origin().ascii_serialization();
    let redirect = RedirectUrl::new(format!("{}/callback", public.as_str().trim_end_matches('/')))
        .map_err(|e| format!("--public-url: {e}"))?;
    let http = provider_http(opts.ca_file.as_deref())?;
    let issuer = IssuerUrl::new(opts.issuer.clone()).map_err(|e| format!("--issuer: {e}"))?;
    let metadata = CoreProviderMetadata::discover_async(issuer, &http)
        .await
        .map_err(|e| format!("discovery at {}: {}", opts.issuer, chain(&e)))?;
    let client_secret = match &opts.client_secret_file {
        Some(path) => Some(ClientSecret::new(
            std::fs::read_to_string(path)
                .map_err(|e| format!("--client-secret-file {}: {e}", path.display()))?
                .trim()
                .to_string(),
        )),
        None => None,
    };
    let database = Database::parse(&opts.database, "toolgate console").map_err(|e| format!("--database: {e}"))?;
    let pooling = Pooling::from_env()?;
    let mut settings = pooling.settings();
    settings.push(("toolgate.audience".to_string(), opts.client_id.clone()));
    let gate = Gate::new(&database, settings, pooling.pool)?;
    let console = Arc::new(Console {
        gate,
        metadata,
        client_id: ClientId::new(opts.client_id.clone()),
        client_secret,
        redirect,
        origin,
        http,
        sessions: Mutex::new(HashMap::new()),
        signing_in: Mutex::new(HashMap::new()),
        metrics: Metrics::new(),
    });
    if let Some(hooks) = hooks {
        tokio::spawn(webhooks::run(console.clone(), database, hooks, public.as_str().to_string()));
    }
    let app = Router::new()
        .route("/", get(pending_page))
        .route("/history", get(history_page))
        .route("/audit", get(audit_page))
        .route("/decide", post(decide))
        .route("/login", get(login))
        .route("/callback", get(callback))
        .route("/logout", post(logout))
        .route("/console.css", get(stylesheet))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(axum::middleware::map_response(secured))
        .layer(axum::middleware::from_fn(logged))
        .with_state(console.clone());
    if let Some(listen) = opts.listen {
        if !listen.ip().is_loopback() {
            return Err(format!("--listen {listen}: /metrics is served on a loopback address only"));
        }
        let operator = Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(console.clone());
        let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("--listen {listen}: {e}"))?;
        tokio::spawn(async move {
            let _ = axum::serve(listener, operator).await;
        });
    }
    let listener = std::net::TcpListener::bind(opts.http).map_err(|e| format!("--http {}: {e}", opts.http))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let handle = axum_server::Handle::new();
    let stopping = handle.clone();
    tokio::spawn(async move {
        toolgate_mcp::http::stopped().await;
        tracing::info!("stopping: no new requests; those in flight end");
        stopping.graceful_shutdown(Some(Duration::from_secs(10)));
    });
    tracing::info!("the console on {scheme}://{local}, as {}", public.as_str());
    let app = app.into_make_service();
    match opts.tls {
        Some(files) => {
            let config = RustlsConfig::from_config(Arc::new(toolgate_mcp::tls::server_config(&files)?));
            tokio::spawn(toolgate_mcp::tls::reload(files, config.clone()));
            axum_server::from_tcp_rustls(listener, config)
                .map_err(|e| e.to_string())?
                .handle(handle)
                .serve(app)
                .await
                .map_err(|e| e.to_string())
        }
        None => axum_server::from_tcp(listener)
            .map_err(|e| e.to_string())?
            .handle(handle)
            .serve(app)
            .await
            .map_err(|e| e.to_string()),
    }
}

/// One JSON line a request: its method, path (never its query, which carries a sign-in's code),
/// status and duration.
async fn logged(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let started = Instant::now();
    let response = next.run(request).await;
    tracing::info!(
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        duration_ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    response
}

/// Every answer: no cache, no framing, no sniffing, a referrer only to the console itself, and
/// the policy that lets a page load nothing but the console's stylesheet.
async fn secured(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

fn set_cookie(name: &str, value: &str, same_site: &str, path: &str, max_age: i64) -> (header::HeaderName, String) {
    (
        header::SET_COOKIE,
        format!("{name}={value}; HttpOnly; Secure; SameSite={same_site}; Path={path}; Max-Age={max_age}"),
    )
}

fn see_other(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_string())]).into_response()
}

fn page(t: impl Template) -> Response {
    match t.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("the page could not be rendered: {e}")).into_response(),
    }
}

/// The session a request's cookie names, if it is live.
fn session_id(console: &Console, headers: &HeaderMap) -> Option<String> {
    let id = cookie(headers, SESSION)?;
    let mut sessions = console.sessions.lock().unwrap_or_else(|p| p.into_inner());
    match sessions.get(&id) {
        Some(s) if s.expires > now() => Some(id),
        Some(_) => {
            sessions.remove(&id);
            None
        }
        None => None,
    }
}

/// The words of the pages, in the tenant's language.
pub struct Words {
    pub lang: &'static str,
    pub title: &'static str,
    pub pending: &'static str,
    pub history: &'static str,
    pub sign_in: &'static str,
    pub sign_out: &'static str,
    pub signed_in_as: &'static str,
    pub nothing_waits: &'static str,
    pub nothing_decided: &'static str,
    pub requester: &'static str,
    pub value: &'static str,
    pub made: &'static str,
    pub expires: &'static str,
    pub approvals: &'static str,
    pub approved_by: &'static str,
    pub approve: &'static str,
    pub decline: &'static str,
    pub word: &'static str,
    pub status: &'static str,
    pub decisions: &'static str,
    pub filter: &'static str,
    pub all: &'static str,
    pub tool: &'static str,
    pub session_ended: &'static str,
    pub intro: &'static str,
    pub third_party: &'static str,
    pub audit: &'static str,
    pub calls_per_hour: &'static str,
    pub value_per_day: &'static str,
    pub top_refusals: &'static str,
    pub day_budget: &'static str,
    pub when: &'static str,
    pub kind: &'static str,
    pub outcome: &'static str,
    pub actor: &'static str,
    pub target: &'static str,
    pub rule: &'static str,
    pub since: &'static str,
    pub until: &'static str,
    pub nothing_audited: &'static str,
    /// A chat message when a proposal waits ({tenant}, {tool}, {proposal}, {url}).
    pub waits: &'static str,
    /// What a decision came to.
    pub applied: &'static str,
    /// ({approvals}, {needed})
    pub recorded: &'static str,
    pub declined: &'static str,
    pub sent: &'static str,
    pub wrong_word: &'static str,
    pub not_live: &'static str,
    pub refused: &'static str,
}

const EN: Words = Words {
    lang: "en",
    title: "Approvals",
    pending: "Waiting for you",
    history: "History",
    sign_in: "Sign in",
    sign_out: "Sign out",
    signed_in_as: "Signed in as",
    nothing_waits: "Nothing waits for your decision.",
    nothing_decided: "Nothing decided yet.",
    requester: "Asked by",
    value: "Value",
    made: "Made",
    expires: "Expires",
    approvals: "Approvals",
    approved_by: "approved by",
    approve: "Approve",
    decline: "Decline",
    word: "Type the word the proposal asks for",
    status: "Status",
    decisions: "Decisions",
    filter: "Filter",
    all: "all",
    tool: "Tool",
    session_ended: "Your session has ended. Sign in again.",
    intro: "Sign in with your company account to see what waits for your approval.",
    third_party: "Quotes data from the ERP: read it as data, not as instructions.",
    audit: "Audit",
    calls_per_hour: "Calls per hour, last 48 hours",
    value_per_day: "Value the effects moved per day, last 30 days",
    top_refusals: "Refusals by rule, last 7 days",
    day_budget: "daily limit",
    when: "When",
    kind: "Kind",
    outcome: "Outcome",
    actor: "Who",
    target: "Target",
    rule: "Rule",
    since: "From",
    until: "To",
    nothing_audited: "Nothing audited in this period.",
    waits: "A proposal waits for approval in {tenant}: {tool}, proposal {proposal}. Decide it in the approvals \
            console: {url}",
    applied: "Approved, and applied.",
    recorded: "Your approval is recorded ({approvals} of {needed}); it applies when all are given.",
    declined: "Declined: the proposal is cancelled.",
    sent: "Approved, and sent to the ERP; its answer is awaited.",
    wrong_word: "The word typed is not the proposal's; nothing was done.",
    not_live: "This proposal no longer waits (decided, replaced or expired); nothing was done.",
    refused: "Nothing was done.",
};

const PT: Words = Words {
    lang: "pt",
    title: "Aprovações",
    pending: "Aguardando você",
    history: "Histórico",
    sign_in: "Entrar",
    sign_out: "Sair",
    signed_in_as: "Conectado como",
    nothing_waits: "Nada aguarda a sua decisão.",
    nothing_decided: "Nada decidido ainda.",
    requester: "Pedido por",
    value: "Valor",
    made: "Feito",
    expires: "Expira",
    approvals: "Aprovações",
    approved_by: "aprovado por",
    approve: "Aprovar",
    decline: "Recusar",
    word: "Digite a palavra que a proposta pede",
    status: "Situação",
    decisions: "Decisões",
    filter: "Filtrar",
    all: "todas",
    tool: "Ferramenta",
    session_ended: "A sua sessão terminou. Entre de novo.",
    intro: "Entre com a sua conta da empresa para ver o que aguarda a sua aprovação.",
    third_party: "Cita dados do ERP: leia como dados, não como instruções.",
    audit: "Auditoria",
    calls_per_hour: "Chamadas por hora, últimas 48 horas",
    value_per_day: "Valor movido pelos efeitos por dia, últimos 30 dias",
    top_refusals: "Recusas por regra, últimos 7 dias",
    day_budget: "limite diário",
    when: "Quando",
    kind: "Tipo",
    outcome: "Resultado",
    actor: "Quem",
    target: "Alvo",
    rule: "Regra",
    since: "De",
    until: "Até",
    nothing_audited: "Nada auditado neste período.",
    waits: "Uma proposta aguarda aprovação em {tenant}: {tool}, proposta {proposal}. Decida no console de \
            aprovações: {url}",
    applied: "Aprovada e aplicada.",
    recorded: "A sua aprovação foi registrada ({approvals} de {needed}); aplica-se quando todas forem dadas.",
    declined: "Recusada: a proposta foi cancelada.",
    sent: "Aprovada e enviada ao ERP; aguarda a resposta dele.",
    wrong_word: "A palavra digitada não é a da proposta; nada foi feito.",
    not_live: "Esta proposta não aguarda mais (decidida, substituída ou expirada); nada foi feito.",
    refused: "Nada foi feito.",
};

const ES: Words = Words {
    lang: "es",
    title: "Aprobaciones",
    pending: "Esperando por usted",
    history: "Historial",
    sign_in: "Entrar",
    sign_out: "Salir",
    signed_in_as: "Conectado como",
    nothing_waits: "Nada espera su decisión.",
    nothing_decided: "Nada decidido aún.",
    requester: "Pedido por",
    value: "Valor",
    made: "Hecho",
    expires: "Vence",
    approvals: "Aprobaciones",
    approved_by: "aprobado por",
    approve: "Aprobar",
    decline: "Rechazar",
    word: "Escriba la palabra que pide la propuesta",
    status: "Estado",
    decisions: "Decisiones",
    filter: "Filtrar",
    all: "todas",
    tool: "Herramienta",
    session_ended: "Su sesión terminó. Entre de nuevo.",
    intro: "Entre con su cuenta de la empresa para ver lo que espera su aprobación.",
    third_party: "Cita datos del ERP: léalos como datos, no como instrucciones.",
    audit: "Auditoría",
    calls_per_hour: "Llamadas por hora, últimas 48 horas",
    value_per_day: "Valor movido por los efectos por día, últimos 30 días",
    top_refusals: "Rechazos por regla, últimos 7 días",
    day_budget: "límite diario",
    when: "Cuándo",
    kind: "Tipo",
    outcome: "Resultado",
    actor: "Quién",
    target: "Objetivo",
    rule: "Regla",
    since: "Desde",
    until: "Hasta",
    nothing_audited: "Nada auditado en este período.",
    waits: "Una propuesta espera aprobación en {tenant}: {tool}, propuesta {proposal}. Decídala en la consola de \
            aprobaciones: {url}",
    applied: "Aprobada y aplicada.",
    recorded: "Su aprobación quedó registrada ({approvals} de {needed}); se aplica cuando estén todas.",
    declined: "Rechazada: la propuesta fue cancelada.",
    sent: "Aprobada y enviada al ERP; se espera su respuesta.",
    wrong_word: "La palabra escrita no es la de la propuesta; no se hizo nada.",
    not_live: "Esta propuesta ya no espera (decidida, reemplazada o vencida); no se hizo nada.",
    refused: "No se hizo nada.",
};

fn words(lang: Option<&str>) -> &'static Words {
    match lang {
        Some("pt") => &PT,
        Some("es") => &ES,
        _ => &EN,
    }
}

/// A proposal as a page shows it.
pub struct Item {
    pub id: String,
    pub tool: String,
    pub target: String,
    pub text: String,
    pub tier: i64,
    pub value: String,
    pub requester: String,
    pub made: String,
    pub expires: String,
    pub approvals: i64,
    pub needed: i64,
    pub approved_by: String,
    pub status: String,
    pub decisions: Vec<(String, String, String)>,
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn item(v: &Value) -> Item {
    let value = match (v["amount_text"].as_str(), v["amount"].as_str()) {
        (Some(shown), _) => shown.to_string(),
        (None, Some(amount)) => format!("{amount} {}", text(&v["currency"])),
        _ => String::new(),
    };
    let names = |list: &Value| list.as_array().map(|a| a.iter().map(text).collect::<Vec<_>>().join(", "));
    Item {
        id: text(&v["proposal"]),
        tool: text(&v["tool"]),
        target: text(&v["target"]),
        text: text(&v["text"]),
        tier: v["tier"].as_i64().unwrap_or(1),
        value,
        requester: text(&v["requester"]),
        made: text(&v["created_at"]).replace('T', " ").trim_end_matches('Z').get(..16).unwrap_or_default().to_string(),
        expires: text(&v["expires_at"])
            .replace('T', " ")
            .trim_end_matches('Z')
            .get(..16)
            .unwrap_or_default()
            .to_string(),
        approvals: v["approvals"].as_i64().unwrap_or(0),
        needed: v["needed"].as_i64().unwrap_or(1),
        approved_by: names(&v["approved_by"]).unwrap_or_default(),
        status: text(&v["status"]),
        decisions: v["decisions"]
            .as_array()
            .map(|d| d.iter().map(|x| (text(&x["approver"]), text(&x["decision"]), text(&x["at"]))).collect())
            .unwrap_or_default(),
    }
}

#[derive(Template)]
#[template(path = "console/signin.html")]
struct SignInPage {
    w: &'static Words,
    note: Option<&'static str>,
}

#[derive(Template)]
#[template(path = "console/pending.html")]
struct PendingPage {
    w: &'static Words,
    name: String,
    csrf: String,
    flash: Option<Shown>,
    items: Vec<Item>,
}

#[derive(Template)]
#[template(path = "console/history.html")]
struct HistoryPage {
    w: &'static Words,
    name: String,
    csrf: String,
    items: Vec<Item>,
    statuses: Vec<(String, bool)>,
    tools: Vec<(String, bool)>,
}

#[derive(Template)]
#[template(path = "console/continue.html")]
struct ContinuePage {
    w: &'static Words,
}

/// A listing for the session's token, or the page that says the session ended.
/// What a page asks the gate for.
enum Asked<'a> {
    Pending,
    History,
    /// The tenant's audit, with the page's filters.
    Audit(&'a Value),
}

async fn listed(
    console: &Console,
    headers: &HeaderMap,
    id: &str,
    asked: Asked<'_>,
) -> Result<(Value, String, String), Response> {
    let (token, tenant, name, csrf) = {
        let sessions = console.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = sessions.get(id) else { return Err(see_other("/")) };
        (s.id_token.clone(), s.tenant.clone(), s.name.clone(), s.csrf.clone())
    };
    let answer = match asked {
        Asked::Pending => console.gate.pending(tenant.as_deref(), &token).await,
        Asked::History => console.gate.approval_history(tenant.as_deref(), &token).await,
        Asked::Audit(filters) => console.gate.audit_trail(tenant.as_deref(), &token, filters).await,
    };
    match answer {
        Ok(v) if v["outcome"] == "SUCCEEDED" => {
            if tenant.is_none() {
                if let Some(t) = v["result"]["tenant"].as_str() {
                    if let Some(s) = console.sessions.lock().unwrap_or_else(|p| p.into_inner()).get_mut(id) {
                        s.tenant = Some(t.to_string());
                    }
                }
            }
            Ok((v["result"].clone(), name, csrf))
        }
        Ok(v) if v["rule"] == "role_not_allowed" => {
            Err((StatusCode::FORBIDDEN, "Only a person of one of this tenant's auditor roles reads its audit here.")
                .into_response())
        }
        Ok(_) => {
            // The gate refused the token (expired, revoked, another audience): the session ends.
            console.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
            Err(signed_out(headers, Some(|w| w.session_ended)))
        }
        Err(e) => Err(unavailable(&e)),
    }
}

fn unavailable(e: &GateError) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "5")], format!("{e}")).into_response()
}

/// The words of a page shown before the tenant is known (signed out): the browser's preferred
/// language among the console's (`Accept-Language`, by its weights), English if it prefers none.
fn preferred(headers: &HeaderMap) -> &'static Words {
    let accepted = headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mut best: Option<(f32, &'static Words)> = None;
    for range in accepted.split(',') {
        let mut parts = range.split(';');
        let primary = parts.next().unwrap_or("").trim().split('-').next().unwrap_or("").to_ascii_lowercase();
        let weight = parts.find_map(|p| p.trim().strip_prefix("q=")?.parse::<f32>().ok()).unwrap_or(1.0);
        let Some(w) = [&EN, &PT, &ES].into_iter().find(|w| w.lang == primary) else { continue };
        if weight > 0.0 && best.is_none_or(|(b, _)| weight > b) {
            best = Some((weight, w));
        }
    }
    best.map_or(&EN, |(_, w)| w)
}

fn signed_out(headers: &HeaderMap, note: Option<fn(&Words) -> &'static str>) -> Response {
    let w = preferred(headers);
    let mut response = page(SignInPage { w, note: note.map(|n| n(w)) });
    let (k, v) = set_cookie(SESSION, "", "Strict", "/", 0);
    response.headers_mut().insert(k, HeaderValue::from_str(&v).expect("a cookie header"));
    response
}

async fn pending_page(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let Some(id) = session_id(&console, &headers) else { return signed_out(&headers, None) };
    let (result, name, csrf) = match listed(&console, &headers, &id, Asked::Pending).await {
        Ok(listed) => listed,
        Err(response) => return response,
    };
    let flash = console.sessions.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&id).and_then(|s| s.flash.take());
    let items = result["pending"].as_array().map(|a| a.iter().map(item).collect()).unwrap_or_default();
    let w = words(result["language"].as_str());
    page(PendingPage { w, name, csrf, flash: flash.map(|f| f.shown(w)), items })
}

#[derive(Deserialize)]
struct HistoryFilter {
    status: Option<String>,
    tool: Option<String>,
}

async fn history_page(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(filter): Query<HistoryFilter>,
) -> Response {
    let Some(id) = session_id(&console, &headers) else { return signed_out(&headers, None) };
    let (result, name, csrf) = match listed(&console, &headers, &id, Asked::History).await {
        Ok(listed) => listed,
        Err(response) => return response,
    };
    let all: Vec<Item> = result["history"].as_array().map(|a| a.iter().map(item).collect()).unwrap_or_default();
    let chosen = |f: &Option<String>| f.as_deref().filter(|s| !s.is_empty()).map(str::to_string);
    let (status, tool) = (chosen(&filter.status), chosen(&filter.tool));
    let mut statuses: Vec<String> = all.iter().map(|i| i.status.clone()).collect();
    let mut tools: Vec<String> = all.iter().map(|i| i.tool.clone()).collect();
    for list in [&mut statuses, &mut tools] {
        list.sort();
        list.dedup();
    }
    let items = all
        .into_iter()
        .filter(|i| status.as_ref().is_none_or(|s| &i.status == s) && tool.as_ref().is_none_or(|t| &i.tool == t))
        .collect();
    page(HistoryPage {
        w: words(result["language"].as_str()),
        name,
        csrf,
        items,
        statuses: statuses.into_iter().map(|s| (s.clone(), status.as_ref() == Some(&s))).collect(),
        tools: tools.into_iter().map(|t| (t.clone(), tool.as_ref() == Some(&t))).collect(),
    })
}

#[derive(Deserialize, Default)]
struct AuditFilter {
    tool: Option<String>,
    outcome: Option<String>,
    actor: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

impl AuditFilter {
    /// The filters as the gate takes them: a day (`2026-12-07`) from a date field is that day's
    /// start in UTC; `until`'s day is included.
    fn to_json(&self) -> Value {
        let given = |v: &Option<String>| v.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_string);
        let day = |v: Option<String>, next: bool| {
            v.map(|d| match chrono::NaiveDate::parse_from_str(&d, "%Y-%m-%d") {
                Ok(date) => {
                    let date = if next { date.succ_opt().unwrap_or(date) } else { date };
                    format!("{date}T00:00:00Z")
                }
                Err(_) => d,
            })
        };
        serde_json::json!({
            "tool": given(&self.tool),
            "outcome": given(&self.outcome),
            "actor": given(&self.actor),
            "since": day(given(&self.since), false),
            "until": day(given(&self.until), true),
        })
    }
}

/// A bar of a chart, in the SVG's own units, with what it stands for (the bar's tooltip).
pub struct Bar {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    pub fill: &'static str,
    pub title: String,
}

/// A chart: its bars, its labels, and a horizontal line (a limit) if it has one.
pub struct Chart {
    pub width: f64,
    pub height: f64,
    pub bars: Vec<Bar>,
    pub labels: Vec<(f64, f64, String)>,
    pub line: Option<(f64, String)>,
}

fn outcome_colour(outcome: &str) -> &'static str {
    match outcome {
        "SUCCEEDED" => "#1d7a46",
        "NEEDS_CONFIRMATION" => "#2f6db5",
        "BLOCKED" => "#b3261e",
        "REJECTED" => "#d9822b",
        "CANCELLED" => "#7a828c",
        _ => "#7b4fb3",
    }
}

const CHART_W: f64 = 480.0;
const CHART_H: f64 = 160.0;

/// Calls per hour over the last 48 hours, stacked by outcome.
fn hourly(per_hour: &[Value]) -> Chart {
    use chrono::{DurationRound, TimeDelta};
    let now = chrono::Utc::now().duration_trunc(TimeDelta::hours(1)).unwrap_or_else(|_| chrono::Utc::now());
    let first = now - TimeDelta::hours(47);
    // Each hour's bar, the first hour's at 0: the gate's hours are truncated as these are.
    let slot = |at: &str| {
        chrono::DateTime::parse_from_rfc3339(at).ok().map(|t| (t.with_timezone(&chrono::Utc) - first).num_hours())
    };
    let mut totals = [0.0_f64; 48];
    for h in per_hour {
        if let Some(i) = h["hour"].as_str().and_then(slot).filter(|i| (0..48).contains(i)) {
            totals[i as usize] += h["calls"].as_f64().unwrap_or(0.0);
        }
    }
    let top = totals.iter().cloned().fold(1.0, f64::max);
    let step = CHART_W / 48.0;
    let mut stacked = [0.0_f64; 48];
    let mut bars = Vec::new();
    for h in per_hour {
        let Some(i) = h["hour"].as_str().and_then(slot).filter(|i| (0..48).contains(i)) else { continue };
        let i = i as usize;
        let calls = h["calls"].as_f64().unwrap_or(0.0);
        let height = calls / top * (CHART_H - 20.0);
        stacked[i] += height;
        let outcome = h["outcome"].as_str().unwrap_or("?");
        bars.push(Bar {
            x: i as f64 * step + 1.0,
            y: CHART_H - 14.0 - stacked[i],
            w: step - 2.0,
            h: height,
            fill: outcome_colour(outcome),
            title: format!("{} {outcome}: {calls}", h["hour"].as_str().unwrap_or_default()),
        });
    }
    let labels = vec![
        (0.0, CHART_H - 2.0, format!("{}h", first.format("%d %H"))),
        (CHART_W - 60.0, CHART_H - 2.0, format!("{}h", now.format("%d %H"))),
        (0.0, 10.0, format!("{top}")),
    ];
    Chart { width: CHART_W, height: CHART_H, bars, labels, line: None }
}

/// The value the effects moved per day, beside the tenant's daily value limit.
fn daily(per_day: &[Value], budget: Option<f64>) -> Chart {
    let values: Vec<(String, f64)> = per_day
        .iter()
        .map(|d| (text(&d["day"]), d["value"].as_str().and_then(|v| v.parse().ok()).unwrap_or(0.0)))
        .collect();
    let top = values.iter().map(|(_, v)| *v).chain(budget).fold(1.0, f64::max);
    let scale = |v: f64| v / top * (CHART_H - 24.0);
    let step = (CHART_W / values.len().max(1) as f64).min(40.0);
    let bars = values
        .iter()
        .enumerate()
        .map(|(i, (day, v))| Bar {
            x: i as f64 * step + 2.0,
            y: CHART_H - 14.0 - scale(*v),
            w: (step - 4.0).max(1.0),
            h: scale(*v),
            fill: "#2f6db5",
            title: format!("{day}: {v}"),
        })
        .collect();
    let mut labels: Vec<(f64, f64, String)> = vec![(0.0, 10.0, format!("{top}"))];
    if let (Some((first, _)), Some((last, _))) = (values.first(), values.last()) {
        labels.push((0.0, CHART_H - 2.0, first.clone()));
        if values.len() > 1 {
            labels.push(((values.len() - 1) as f64 * step, CHART_H - 2.0, last.clone()));
        }
    }
    let line = budget.map(|b| (CHART_H - 14.0 - scale(b), format!("{b}")));
    Chart { width: CHART_W, height: CHART_H, bars, labels, line }
}

/// The rules that refused most, longest bar first.
fn refusals(top: &[Value]) -> Chart {
    let most = top.iter().filter_map(|r| r["count"].as_f64()).fold(1.0, f64::max);
    let row = 22.0;
    let height = (top.len().max(1) as f64) * row + 4.0;
    let mut bars = Vec::new();
    let mut labels = Vec::new();
    for (i, r) in top.iter().enumerate() {
        let count = r["count"].as_f64().unwrap_or(0.0);
        let y = i as f64 * row + 2.0;
        bars.push(Bar {
            x: 200.0,
            y,
            w: (count / most * (CHART_W - 240.0)).max(1.0),
            h: row - 6.0,
            fill: "#b3261e",
            title: format!("{}: {count}", text(&r["rule"])),
        });
        labels.push((0.0, y + 12.0, text(&r["rule"])));
        labels.push((CHART_W - 34.0, y + 12.0, format!("{count}")));
    }
    Chart { width: CHART_W, height, bars, labels, line: None }
}

/// An audit row as the page shows it.
pub struct AuditRow {
    pub at: String,
    pub kind: String,
    pub tool: String,
    pub outcome: String,
    pub rule: String,
    pub actor: String,
    pub target: String,
}

#[derive(Template)]
#[template(path = "console/audit.html")]
struct AuditPage {
    w: &'static Words,
    name: String,
    csrf: String,
    rows: Vec<AuditRow>,
    hourly: Chart,
    daily: Chart,
    refusals: Chart,
    filter: AuditFilterShown,
}

/// The filters as the form shows them again.
pub struct AuditFilterShown {
    pub tool: String,
    pub outcome: String,
    pub actor: String,
    pub since: String,
    pub until: String,
}

async fn audit_page(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(filter): Query<AuditFilter>,
) -> Response {
    let Some(id) = session_id(&console, &headers) else { return signed_out(&headers, None) };
    let filters = filter.to_json();
    let (result, name, csrf) = match listed(&console, &headers, &id, Asked::Audit(&filters)).await {
        Ok(listed) => listed,
        Err(response) => return response,
    };
    let list = |k: &str| result[k].as_array().cloned().unwrap_or_default();
    let rows = list("rows")
        .iter()
        .map(|r| AuditRow {
            at: text(&r["at"]).replace('T', " ").trim_end_matches('Z').get(..19).unwrap_or_default().to_string(),
            kind: text(&r["kind"]),
            tool: text(&r["tool"]),
            outcome: text(&r["outcome"]),
            rule: text(&r["rule"]),
            actor: text(&r["actor"]),
            target: text(&r["target"]),
        })
        .collect();
    let budget = result["day_budget"].as_str().and_then(|b| b.parse().ok());
    let shown = |v: &Option<String>| v.clone().unwrap_or_default();
    page(AuditPage {
        w: words(result["language"].as_str()),
        name,
        csrf,
        rows,
        hourly: hourly(&list("per_hour")),
        daily: daily(&list("per_day"), budget),
        refusals: refusals(&list("top_refusals")),
        filter: AuditFilterShown {
            tool: shown(&filter.tool),
            outcome: shown(&filter.outcome),
            actor: shown(&filter.actor),
            since: shown(&filter.since),
            until: shown(&filter.until),
        },
    })
}

/// A form from this console's own pages: same origin (when the browser says), and the session's
/// CSRF token. Anything else is 403, with nothing done.
fn form_checked(console: &Console, headers: &HeaderMap, id: &str, csrf: &str) -> bool {
    if let Some(origin) = headers.get(header::ORIGIN) {
        if origin.as_bytes() != console.origin.as_bytes() {
            return false;
        }
    }
    let sessions = console.sessions.lock().unwrap_or_else(|p| p.into_inner());
    sessions.get(id).is_some_and(|s| bool::from(s.csrf.as_bytes().ct_eq(csrf.as_bytes())))
}

#[derive(Deserialize)]
struct Decision {
    #[serde(default)]
    csrf: String,
    proposal: String,
    decision: String,
    #[serde(default)]
    word: String,
}

async fn decide(State(console): State<Arc<Console>>, headers: HeaderMap, Form(form): Form<Decision>) -> Response {
    let Some(id) = session_id(&console, &headers) else { return signed_out(&headers, None) };
    if !form_checked(&console, &headers, &id, &form.csrf) {
        return (StatusCode::FORBIDDEN, "This form did not come from this console's page; nothing was done.")
            .into_response();
    }
    let (token, tenant) = {
        let sessions = console.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = sessions.get(&id) else { return signed_out(&headers, None) };
        (s.id_token.clone(), s.tenant.clone())
    };
    let word = Some(form.word.trim()).filter(|w| !w.is_empty());
    let answer = console.gate.approve(tenant.as_deref(), &token, &form.proposal, &form.decision, word).await;
    let outcome = answer.as_ref().ok().and_then(|v| v["outcome"].as_str()).unwrap_or("error");
    let rule = answer.as_ref().ok().and_then(|v| v["rule"].as_str());
    console.metrics.decided(outcome);
    tracing::info!(outcome, rule, decision = %form.decision, "decision");
    let flash = Flash::of(&answer);
    if let Some(s) = console.sessions.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&id) {
        s.flash = Some(flash);
    }
    see_other("/")
}

#[derive(Deserialize)]
struct SignOut {
    #[serde(default)]
    csrf: String,
}

async fn logout(State(console): State<Arc<Console>>, headers: HeaderMap, Form(form): Form<SignOut>) -> Response {
    if let Some(id) = session_id(&console, &headers) {
        if !form_checked(&console, &headers, &id, &form.csrf) {
            return (StatusCode::FORBIDDEN, "This form did not come from this console's page; nothing was done.")
                .into_response();
        }
        console.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }
    let (k, v) = set_cookie(SESSION, "", "Strict", "/", 0);
    (StatusCode::SEE_OTHER, [(header::LOCATION, "/".to_string()), (k, v)]).into_response()
}

/// Keep at most `HELD` entries, dropping the oldest by `age`.
fn bounded<T>(map: &mut HashMap<String, T>, age: impl Fn(&T) -> i64) {
    if map.len() < HELD {
        return;
    }
    if let Some(oldest) = map.iter().min_by_key(|(_, v)| age(v)).map(|(k, _)| k.clone()) {
        map.remove(&oldest);
    }
}

async fn login(State(console): State<Arc<Console>>) -> Response {
    let client = oidc!(console);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, state, nonce) = client
        .authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random)
        .add_scope(Scope::new("profile".into()))
        .set_pkce_challenge(challenge)
        .url();
    let id = random();
    {
        let mut signing_in = console.signing_in.lock().unwrap_or_else(|p| p.into_inner());
        signing_in.retain(|_, s| s.started.elapsed() < SIGN_IN_WAIT);
        let start = Instant::now();
        bounded(&mut signing_in, |s| -(start.duration_since(s.started).as_secs() as i64));
        signing_in
            .insert(id.clone(), SignIn { verifier, state: state.secret().clone(), nonce, started: Instant::now() });
    }
    let (k, v) = set_cookie(SIGNING_IN, &id, "Lax", "/callback", SIGN_IN_WAIT.as_secs() as i64);
    (StatusCode::SEE_OTHER, [(header::LOCATION, url.to_string()), (k, v)]).into_response()
}

#[derive(Deserialize)]
struct Back {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

async fn callback(State(console): State<Arc<Console>>, headers: HeaderMap, Query(back): Query<Back>) -> Response {
    let refused =
        |why: &str| (StatusCode::BAD_REQUEST, format!("Sign-in refused: {why}. Sign in again.")).into_response();
    let Some(started) = cookie(&headers, SIGNING_IN) else { return refused("no sign-in under way in this browser") };
    let Some(sign_in) = console.signing_in.lock().unwrap_or_else(|p| p.into_inner()).remove(&started) else {
        return refused("no sign-in under way in this browser");
    };
    let state_ok = back.state.as_deref().is_some_and(|s| bool::from(s.as_bytes().ct_eq(sign_in.state.as_bytes())));
    if !state_ok || sign_in.started.elapsed() > SIGN_IN_WAIT {
        return refused("the answer is not for this sign-in");
    }
    if let Some(error) = back.error {
        return refused(&format!("the provider said {error}"));
    }
    let Some(code) = back.code else { return refused("no code") };
    let client = oidc!(console);
    let exchange = match client.exchange_code(AuthorizationCode::new(code)) {
        Ok(request) => request.set_pkce_verifier(sign_in.verifier).request_async(&console.http).await,
        Err(e) => return refused(&format!("the provider has no token endpoint ({e})")),
    };
    let token = match exchange {
        Ok(token) => token,
        Err(e) => return refused(&format!("the token endpoint: {}", chain(&e))),
    };
    let Some(id_token) = openidconnect::TokenResponse::id_token(&token) else {
        return refused("the provider's answer has no ID token");
    };
    let claims = match id_token.claims(&client.id_token_verifier(), &sign_in.nonce) {
        Ok(claims) => claims,
        Err(e) => return refused(&format!("the ID token: {}", chain(&e))),
    };
    let name = claims
        .preferred_username()
        .map(|n| n.as_str().to_string())
        .unwrap_or_else(|| claims.subject().as_str().to_string());
    let expires = claims.expiration().timestamp();
    let id = random();
    {
        let mut sessions = console.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let at = now();
        sessions.retain(|_, s| s.expires > at);
        bounded(&mut sessions, |s| s.expires);
        sessions.insert(
            id.clone(),
            Session { id_token: id_token.to_string(), name, expires, csrf: random(), tenant: None, flash: None },
        );
    }
    // A page, not a redirect: the session cookie is SameSite=Strict, and a redirect that ends a
    // navigation another site started would not carry it to the first page.
    let mut response = page(ContinuePage { w: &EN });
    let max_age = (expires - now()).max(0);
    for (k, v) in [set_cookie(SESSION, &id, "Strict", "/", max_age), set_cookie(SIGNING_IN, "", "Lax", "/callback", 0)]
    {
        response.headers_mut().append(k, HeaderValue::from_str(&v).expect("a cookie header"));
    }
    response
}

async fn stylesheet() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8"), (header::CACHE_CONTROL, "max-age=3600")], CSS).into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(console): State<Arc<Console>>) -> Response {
    match console.gate.ready().await {
        Ok(()) => "ready\n".into_response(),
        Err(e) => unavailable(&e),
    }
}

async fn metrics(State(console): State<Arc<Console>>) -> Response {
    let sessions = console.sessions.lock().unwrap_or_else(|p| p.into_inner()).len();
    let text = console.metrics.render(sessions, console.gate.status());
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Posted {
    result: &'static str,
}

/// What the console counts (metric names `toolgate_console_…`): decisions by the gate's outcome,
/// the approvers signed in, the pool. Never a tenant, a person or a proposal as a label.
struct Metrics {
    registry: Registry,
    decisions: Family<Outcome, Counter>,
    sessions: Gauge,
    pool_size: Gauge,
    pool_in_use: Gauge,
    pool_waiting: Gauge,
    webhook_posts: Family<Posted, Counter>,
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("toolgate_console");
        let decisions = Family::<Outcome, Counter>::default();
        let (sessions, pool_size, pool_in_use, pool_waiting) =
            (Gauge::default(), Gauge::default(), Gauge::default(), Gauge::default());
        registry.register(
            "decisions",
            "Approvers' decisions sent to the gate, by the gate's outcome (error: none)",
            decisions.clone(),
        );
        registry.register("sessions", "Approvers signed in now", sessions.clone());
        registry.register("pool_connections", "Database connections open", pool_size.clone());
        registry.register("pool_in_use", "Database connections running a statement", pool_in_use.clone());
        registry.register("pool_waiting", "Requests waiting for a database connection", pool_waiting.clone());
        let webhook_posts = Family::<Posted, Counter>::default();
        registry.register(
            "webhook_posts",
            "Posts to the tenants' chat webhooks, by result (sent, refused: not 2xx, failed: no answer)",
            webhook_posts.clone(),
        );
        Metrics { registry, decisions, sessions, pool_size, pool_in_use, pool_waiting, webhook_posts }
    }

    fn posted(&self, result: &'static str) {
        self.webhook_posts.get_or_create(&Posted { result }).inc();
    }

    fn decided(&self, outcome: &str) {
        self.decisions.get_or_create(&Outcome { outcome: outcome.to_string() }).inc();
    }

    fn render(&self, sessions: usize, pool: toolgate_mcp::metrics::PoolStatus) -> String {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.sessions.set(gauge(sessions));
        self.pool_size.set(gauge(pool.size));
        self.pool_in_use.set(gauge(pool.in_use));
        self.pool_waiting.set(gauge(pool.waiting));
        let mut text = String::new();
        let _ = encode(&mut text, &self.registry);
        text
    }
}
