//! `toolgate dispatch`: delivers the intents of outbox tools to their ERPs (issue 24).
//!
//! Logged in as a member of `toolgate_dispatcher`, it claims the intents that are due with
//! `toolgate.claim_outbox` (`FOR UPDATE SKIP LOCKED`: several dispatchers side by side; nothing
//! while writes are off for the tool; on a Citus cluster tenant by tenant, each claim delegated to
//! the tenant's node: `toolgate.tenant_claim_outbox`), sends each with the idempotency key
//! `TENANT:TOOL:KEY` (the agent's key percent-encoded; the same for every attempt of an intent),
//! and settles what the ERP answered with `toolgate.settle_outbox`, which writes the outbox row,
//! the ledger's reply for the key and an audit row of kind `dispatch` in one transaction. What
//! happens within an attempt (a resend after a 401 or a 429, a state query, a run of polls) is
//! put on record too (`toolgate.note_outbox`). Running on (not `--once`), it listens on
//! `toolgate_outbox`, which each outbox call notifies as it commits, besides polling.
//!
//! What each answer becomes:
//! - `2xx` with `{"status": "PENDING", "protocol": P}` (the async protocol): `GET /protocols/P` is
//!   polled until `DONE` (SUCCEEDED) or `REJECTED` (REJECTED `erp_rejected`), for a bounded time;
//!   still pending then: UNCERTAIN, and the next attempt asks the ERP by key first;
//! - any other `2xx`: read by its status word, as the endpoint's reading says (the contract of
//!   docs/binding.md, `toolgate.erp_answers_contract()`, or what `toolgate.set_erp_answers` said
//!   for an ERP of other words and fields): done is SUCCEEDED with the ERP's answer (with order
//!   lines, some refused: SUCCEEDED with those lines named, which the ledger answers PARTIAL; all
//!   refused: REJECTED), a refusal REJECTED, PENDING without a protocol asked for by key, a word
//!   the reading does not know UNCERTAIN;
//! - `401`: the access token is refreshed (one refresh for any number of requests that met the
//!   same stale token, in this process and in every other dispatcher: `toolgate.erp_credentials`)
//!   and the request sent again;
//! - `429`: it waits `Retry-After` and sends again, a bounded number of times;
//! - another `4xx`: the ERP's business refusal, REJECTED `erp_rejected`, never retried;
//! - no connection: nothing was sent, PENDING, tried again later with the same key;
//! - a timeout, a dropped connection, a `5xx`: the request may have been applied, so it is not sent
//!   again: the ERP is asked for the key's state (`GET /requests/KEY`): `DONE` is SUCCEEDED,
//!   `REJECTED` REJECTED, `NOT_FOUND` PENDING (sent again later, the same key), anything else
//!   UNCERTAIN (asked again later);
//! - an intent claimed again after an attempt that may have reached the ERP is reconciled the same
//!   way before anything is sent.
//!
//! After `max_attempts` attempts an intent still PENDING or UNCERTAIN is settled DEAD (the ledger
//! answers UNCERTAIN; a person reconciles it).
//!
//! A PARTIAL intent (the ERP did its part and the tool's finish function has not: it failed at
//! the settlement) is claimed again after the retry delay and settled SUCCEEDED again without a
//! word to the ERP: `settle_outbox` runs the finish function once more, with the ERP's answer it
//! kept. It is never dead-lettered: it stays on the panel (`partial_results`) until it is done.
//!
//! The ERP's conventions this first version knows (those of `toolgate-fake-erp`, seed 004's ERP):
//! `POST /oauth/token` (`grant_type=refresh_token`, the refresh token rotating on every use), the
//! state query `GET /requests/{key}` and the protocol `GET /protocols/{protocol}`, all under the
//! endpoint's base URL, `http` or `https` (rustls: the Mozilla roots, and `--ca-file`'s for an
//! ERP whose certificate a private authority signed; a handshake that fails sends nothing). The
//! credentials of an endpoint whose `auth_kind` is `bearer` or `refresh_token` are
//! kept in the database, shared by every dispatcher (`toolgate.erp_credentials`, which no role
//! reads: `erp_access_token`, `erp_refresh_begin` and `erp_refresh_end` are the dispatcher's way
//! in); `--refresh-token-file NAME=FILE` seeds endpoint NAME's (and only that endpoint's) the
//! first time and is rewritten on every rotation too, so it always holds the current refresh
//! token. The credentials stored for an endpoint are bound to the origin they were given for: the
//! dispatcher asks for them naming the origin it is about to send to, and gets none for another.
//!
//! Where it sends is its own configuration's to allow, never only the database's, which an
//! administrator can write: it delivers only to the origins given with `--allow-origin`, and only
//! to public addresses unless `--allow-private-addresses` (loopback, private, link-local and
//! unique-local ranges, where an attacker who moved an endpoint would aim: a cloud's metadata
//! service at 169.254.169.254, say), judged on the address the host resolves to, the one it
//! connects to. An intent whose endpoint fails either is not sent (PENDING, `origin_not_allowed`
//! or `address_not_allowed`, said on standard error for the operator), nor is one whose path would
//! climb out of the endpoint's base path (REJECTED `bad_request_path`; the gate refuses such a
//! path when the call is made). An answer larger than `--max-answer-bytes` (1 MiB by default) is
//! not read on: a refusal (a 4xx) is REJECTED `answer_too_large`, and anything else is treated as
//! an answer lost (the ERP is asked for the key's state; too large again: UNCERTAIN).
//!
//! Each claim comes with a claim id that `settle_outbox` must present: a dispatcher whose lease
//! ran out and whose intent another dispatcher claimed since cannot settle it.

use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, Semaphore};
use tokio_postgres::Client;
use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use toolgate_erp_client::{CallError, Reply};

use crate::{db, Result};

mod connections;

/// How a dispatcher runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The dispatcher login's libpq conninfo or URL.
    pub database: String,
    /// Drain what is due, then return; otherwise poll every `poll` until stopped.
    pub once: bool,
    pub poll: Duration,
    /// Intents claimed at a time.
    pub batch: i32,
    /// Intents in flight at once within a batch.
    pub concurrency: usize,
    /// Each endpoint's refresh token file, by endpoint name (`--refresh-token-file NAME=FILE`).
    pub refresh_token_files: HashMap<String, PathBuf>,
    /// The origins (`scheme://host[:port]`) it may send to (`--allow-origin`); none: it sends
    /// nothing.
    pub allowed_origins: Vec<String>,
    /// Whether it may connect to loopback, private, link-local and unique-local addresses.
    pub allow_private_addresses: bool,
    /// The longest ERP answer body it reads.
    pub max_answer_bytes: usize,
    /// More certificate authorities to trust for `https` endpoints (PEM), beside the Mozilla roots.
    pub ca_file: Option<PathBuf>,
    /// One HTTP exchange's timeout.
    pub timeout: Duration,
    /// How long a connection to an ERP stays open for the next exchange (HTTP keep-alive); zero:
    /// a connection per exchange.
    pub keep_alive: Duration,
    /// How long the async protocol is polled before the intent is left UNCERTAIN.
    pub settle_within: Duration,
    /// Attempts before an intent is dead-lettered.
    pub max_attempts: i32,
    /// When an intent left PENDING, UNCERTAIN or PARTIAL is tried again after its first attempt;
    /// doubled at each attempt after that (with a fifth either way of jitter), up to
    /// `max_retry_delay`.
    pub retry_delay: Duration,
    /// The longest wait between two attempts of an intent.
    pub max_retry_delay: Duration,
    /// How long a claim holds an intent before another dispatcher may take it.
    pub lease: Duration,
    /// Stops the dispatcher when it turns true (the command's SIGTERM and SIGINT): it claims
    /// nothing more, lets the deliveries in flight end within `shutdown_grace`, hands back the
    /// rest and returns.
    pub stop: Option<tokio::sync::watch::Receiver<bool>>,
    /// How long the deliveries in flight are given to end once stopped.
    pub shutdown_grace: Duration,
    /// What it counts, for `/metrics` (`--listen`).
    pub metrics: Option<Arc<crate::observe::Metrics>>,
    /// Attempts in a row that could not reach an endpoint (no connection, no answer, a 5xx and no
    /// state) before its circuit opens: its intents are not claimed for `breaker_cooldown`
    /// (doubled while it keeps failing, ten minutes at most), so one failing ERP does not take
    /// every slot from the others. 0: never.
    pub breaker_failures: u32,
    pub breaker_cooldown: Duration,
}

/// When an intent whose attempt `attempts` just ended is tried again: `base`, doubled at each
/// attempt after the first, at most `cap`, and a fifth more or less at random, so the intents one
/// outage left behind do not all come back at once. A stuck intent is tried, and audited, a bounded
/// number of times a day: `cap` apart once the doubling reaches it (24 a day at an hour).
pub fn backoff(base: Duration, cap: Duration, attempts: i32) -> Duration {
    let doubled = base.saturating_mul(1u32 << attempts.saturating_sub(1).clamp(0, 20)).min(cap.max(base));
    doubled.mul_f64(0.8 + 0.4 * fastrand::f64())
}

/// The longest ERP answer body read unless `--max-answer-bytes` says: 1 MiB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// The origin of an `http(s)` URL as the gate writes it (`toolgate.endpoint_origin`):
/// `scheme://host[:port]`, lower-cased, without the scheme's default port; `None` for anything
/// else.
pub fn origin(url: &str) -> Option<String> {
    let lower = url.to_ascii_lowercase();
    let scheme = if lower.starts_with("https://") {
        "https"
    } else if lower.starts_with("http://") {
        "http"
    } else {
        return None;
    };
    let rest = &lower[scheme.len() + 3..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    if authority.is_empty() || authority.contains(['@', '?', '#']) {
        return None;
    }
    let default = if scheme == "https" { ":443" } else { ":80" };
    Some(format!("{scheme}://{}", authority.strip_suffix(default).unwrap_or(authority)))
}

/// An `--allow-origin` value: an origin, with no path (a trailing `/` aside).
pub fn allowed_origin(value: &str) -> std::result::Result<String, String> {
    let trimmed = value.trim().trim_end_matches('/');
    match origin(trimmed) {
        Some(o) if trimmed.matches('/').count() == 2 => Ok(o),
        _ => Err(format!("--allow-origin {value:?}: an origin, scheme://host[:port] (http or https), with no path")),
    }
}

/// Whether `ip` is in a range a dispatcher connects to only when told it may: loopback, private
/// (10/8, 172.16/12, 192.168/16, 100.64/10), link-local (169.254/16, fe80::/10), unique-local
/// (fc00::/7), unspecified, broadcast, 0/8, and IPv4 addresses mapped into IPv6 alike.
pub fn private_address(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (a == 100 && (64..128).contains(&b))
                || a == 0
        }
        std::net::IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return private_address(std::net::IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback() || v6.is_unspecified() || (first & 0xffc0) == 0xfe80 || (first & 0xfe00) == 0xfc00
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            database: String::new(),
            once: true,
            poll: Duration::from_secs(2),
            batch: 32,
            concurrency: 4,
            refresh_token_files: HashMap::new(),
            allowed_origins: Vec::new(),
            allow_private_addresses: false,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            ca_file: None,
            timeout: Duration::from_secs(10),
            keep_alive: Duration::from_secs(4),
            settle_within: Duration::from_secs(10),
            max_attempts: 8,
            retry_delay: Duration::from_secs(30),
            max_retry_delay: Duration::from_secs(3600),
            lease: Duration::from_secs(300),
            stop: None,
            shutdown_grace: Duration::from_secs(30),
            metrics: None,
            breaker_failures: 5,
            breaker_cooldown: Duration::from_secs(30),
        }
    }
}

/// What one run did, by the outcome settled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub claimed: usize,
    pub settled: HashMap<String, usize>,
    /// Intents whose claim was lost before they were settled (another dispatcher holds them).
    pub lost: usize,
    /// Intents cut short when the dispatcher was stopped, and handed back.
    pub handed_back: usize,
}

impl Report {
    pub fn count(&self, outcome: &str) -> usize {
        self.settled.get(outcome).copied().unwrap_or(0)
    }
}

/// One claimed intent: a row of `toolgate.claim_outbox`, as JSON.
#[derive(Clone, Debug, serde::Deserialize)]
struct Intent {
    #[serde(rename = "tenant_id")]
    tenant: String,
    tool: String,
    #[serde(rename = "idempotency_key")]
    key: String,
    endpoint: String,
    base_url: String,
    auth_kind: String,
    per_second: Option<i32>,
    per_minute: Option<i32>,
    request: Value,
    attempts: i32,
    sent_before: bool,
    /// `PARTIAL`: the ERP did its part, only the tool's finish function is left.
    state: String,
    /// The claim `settle_outbox` must present.
    claim: String,
    /// How its endpoint's ERP answers: the contract, or what `toolgate.set_erp_answers` said.
    answers: Reading,
}

impl Intent {
    /// The idempotency key the ERP sees: the same for every attempt of this intent.
    fn erp_key(&self) -> String {
        format!("{}:{}:{}", self.tenant, self.tool, encode(&self.key))
    }
}

/// Percent-encode everything but unreserved characters, `:` and `@` (safe in a header value and
/// in a path segment).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Where an endpoint's requests go: its address, the `Host` header (the authority as the base URL
/// gives it), the name its TLS certificate must be valid for, whether it is TLS, and the path
/// prefix (no trailing `/`).
#[derive(Clone, Debug)]
struct Link {
    addr: SocketAddr,
    /// The origin, as `origin` writes it: what the endpoint's credentials are bound to.
    origin: String,
    authority: String,
    host: String,
    tls: bool,
    prefix: String,
}

/// `http(s)://host[:port]/prefix` → its link (the host resolved now).
async fn target(base_url: &str) -> std::result::Result<Link, String> {
    let (tls, rest) = match (base_url.strip_prefix("https://"), base_url.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        _ => return Err("an endpoint is http:// or https://".into()),
    };
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
            (host.trim_start_matches('[').trim_end_matches(']'), port.parse::<u16>().map_err(|_| "a bad port")?)
        }
        _ => (authority.trim_start_matches('[').trim_end_matches(']'), if tls { 443 } else { 80 }),
    };
    let addr = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve the endpoint's host: {e}"))?
        .next()
        .ok_or("the endpoint's host has no address")?;
    Ok(Link {
        addr,
        origin: origin(base_url).unwrap_or_default(),
        authority: authority.to_string(),
        host: host.to_string(),
        tls,
        prefix: prefix.to_string(),
    })
}

/// The TLS client configuration: the Mozilla roots (webpki-roots), and the certificates of
/// `ca_file` (PEM) if given, for an ERP whose certificate a private authority signed.
fn tls_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(file) = ca_file {
        let certs = CertificateDer::pem_file_iter(file)
            .map_err(|e| format!("--ca-file {}: {e}", file.display()))?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| format!("--ca-file {}: {e}", file.display()))?;
        if certs.is_empty() {
            return Err(format!("--ca-file {}: no certificate in it", file.display()).into());
        }
        for cert in certs {
            roots.add(cert).map_err(|e| format!("--ca-file {}: {e}", file.display()))?;
        }
    }
    let config = ClientConfig::builder_with_provider(Arc::new(tokio_rustls::rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// What an attempt ended with, as `settle_outbox` takes it: the outcome, the ERP's answer (or the
/// dispatcher's error word), and the order lines the ERP refused, if it refused some.
struct Settlement {
    outcome: &'static str,
    reply: Value,
    refused: Option<Value>,
}

fn settled(outcome: &'static str, reply: Value) -> Settlement {
    Settlement { outcome, reply, refused: None }
}

/// An endpoint's access token as this process knows it, and its generation: how many times the
/// endpoint's credentials were refreshed, by any dispatcher (`toolgate.erp_credentials`). A
/// request that met a stale token refreshes only if nobody did since.
#[derive(Default)]
struct Token {
    access: Option<String>,
    generation: i64,
}

/// Requests sent per endpoint, for its windows.
type Sent = HashMap<String, VecDeque<Instant>>;

struct Dispatcher {
    db: Arc<Client>,
    /// The connections settlements go through, one backend each: a settlement is a transaction
    /// that commits (and runs the tool's finish function), so the deliveries in flight settle in
    /// parallel instead of one after another on `db`'s backend.
    settling: deadpool_postgres::Pool,
    /// `--concurrency`: the deliveries in flight at once (the intents held beyond wait here).
    slots: Semaphore,
    /// The connections to the ERPs, kept open between exchanges.
    connections: connections::Connections,
    /// A connection of its own for the credentials: a refresh holds their row's lock in a
    /// transaction while it trades the refresh token at the ERP.
    credentials: Mutex<Client>,
    opts: Options,
    /// Per endpoint.
    tokens: Mutex<HashMap<String, Token>>,
    sent: Mutex<Sent>,
    /// Per endpoint.
    breakers: std::sync::Mutex<HashMap<String, Breaker>>,
    /// The outbox is distributed by tenant (Citus, `toolgate.outbox_distributed()`): claims are
    /// made tenant by tenant, each on the node that holds the tenant.
    per_tenant: bool,
    /// The claim's statements on `db`, prepared once.
    claims: Claims,
}

/// The statements a claim takes, prepared on the dispatcher's connection when it connects.
struct Claims {
    /// `claim_outbox` (one node).
    all: tokio_postgres::Statement,
    /// `outbox_due_tenants`, then `tenant_claim_outbox` for each (Citus).
    due_tenants: tokio_postgres::Statement,
    tenant: tokio_postgres::Statement,
}

impl Claims {
    async fn prepare(db: &Client) -> std::result::Result<Claims, tokio_postgres::Error> {
        Ok(Claims {
            all: db
                .prepare(
                    "SELECT coalesce(pg_catalog.jsonb_agg(c), '[]') \
                     FROM toolgate.claim_outbox($1, pg_catalog.make_interval(secs => $2), $3) c",
                )
                .await?,
            due_tenants: db.prepare("SELECT tenant_id, due FROM toolgate.outbox_due_tenants($1, $2)").await?,
            // As Citus delegates it: the function alone, its arguments parameters.
            tenant: db
                .prepare("SELECT toolgate.tenant_claim_outbox($1, $2, pg_catalog.make_interval(secs => $3), $4)")
                .await?,
        })
    }
}

/// An endpoint's circuit breaker: attempts in a row that could not reach it, and, once open,
/// until when its intents are left alone and for how long it opens next time.
#[derive(Debug, Default)]
struct Breaker {
    failures: u32,
    open_until: Option<Instant>,
    cooldown: Duration,
}

/// Whether an attempt's settlement says the ERP could not be reached or would not say (what
/// counts toward its breaker), as opposed to an answer of any kind.
fn unreachable(s: &Settlement) -> bool {
    matches!(s.outcome, "PENDING" | "UNCERTAIN")
        && matches!(
            s.reply["error"].as_str(),
            Some("no_connection" | "endpoint_unreachable" | "state_unknown" | "not_applied")
        )
}

/// Run as `opts` says: drain once (an error ends the run), or poll until the process is stopped
/// (an error, say the database restarting, is reported on standard error, and the dispatcher
/// connects again after `poll` and goes on: what it had claimed and not settled is claimed again
/// once its lease ends, and reconciled first).
pub async fn run(opts: &Options) -> Result<Report> {
    if opts.lease < opts.timeout * 2 {
        return Err(format!(
            "the lease ({:.1} s) is at least twice the timeout ({:.1} s): a request goes out only while the \
             claim has a timeout's time left, and it is renewed every third of the lease",
            opts.lease.as_secs_f64(),
            opts.timeout.as_secs_f64()
        )
        .into());
    }
    let mut report = Report::default();
    let mut stop = opts.stop.clone();
    loop {
        let drained = drain(opts, &mut report).await;
        if let Some(metrics) = &opts.metrics {
            metrics.connection(None);
        }
        match drained {
            Ok(()) => return Ok(report),
            Err(e) if opts.once => return Err(e),
            Err(e) => {
                eprintln!("toolgate dispatch: {e}; connecting again in {:.1} s", opts.poll.as_secs_f64());
                tokio::select! {
                    _ = tokio::time::sleep(opts.poll) => {}
                    _ = stopped(&mut stop) => return Ok(report),
                }
            }
        }
    }
}

/// Resolves once `stop` is true (never without one).
async fn stopped(stop: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match stop {
        Some(stop) => {
            let _ = stop.wait_for(|stopped| *stopped).await;
        }
        None => std::future::pending().await,
    }
}

/// `run`, owning its options (for a spawned task).
pub async fn run_owned(opts: Options) -> Result<Report> {
    run(&opts).await
}

/// A claim this process holds, and when its lease ends as this process counts it: from the
/// moment before the claim (or its last renewal) was asked for, so never later than the
/// database's.
struct Held {
    until: std::sync::Mutex<Instant>,
}

impl Held {
    fn new(until: Instant) -> Held {
        Held { until: std::sync::Mutex::new(until) }
    }

    fn extend(&self, until: Instant) {
        let mut held = self.until.lock().unwrap_or_else(|p| p.into_inner());
        *held = (*held).max(until);
    }

    /// Whether a request that may take `timeout` ends before the lease does.
    fn may_send(&self, timeout: Duration) -> bool {
        Instant::now() + timeout <= *self.until.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What one delivery ended with: the outcome settled, or `None` when the claim was lost to
/// another dispatcher (nothing settled by this one).
type Delivered = Result<Option<String>>;

/// One connection's run: `run` without the reconnection. Deliveries stream: `concurrency` of them
/// in flight, a slot freed filled at once without waiting for the others; the process holds at
/// most as many intents again, waiting for a slot, and every intent it holds, waiting or in
/// flight, has its claim renewed every third of the lease, so no other dispatcher takes it
/// meanwhile (and a claim fetches several intents, not one commit an intent).
async fn drain(opts: &Options, report: &mut Report) -> Result<()> {
    let database = db::database(&opts.database)?;
    let db = Arc::new(db::connect(&database).await?);
    let credentials = Mutex::new(db::connect(&database).await?);
    if let Some(metrics) = &opts.metrics {
        metrics.connection(Some(db.clone()));
    }
    let settling = deadpool_postgres::Pool::builder(deadpool_postgres::Manager::from_config(
        database.config().clone(),
        database.tls(),
        deadpool_postgres::ManagerConfig { recycling_method: deadpool_postgres::RecyclingMethod::Fast },
    ))
    .max_size(opts.concurrency.clamp(1, 16))
    .build()
    .map_err(|e| format!("the settlements' connections: {e}"))?;
    let per_tenant: bool = db.query_one("SELECT toolgate.outbox_distributed()", &[]).await?.get(0);
    // Woken when an outbox call commits (`toolgate.outbox_notify`), besides each poll, which stays
    // for the intents that come due by time (retries). Not on Citus: the calls, and so their
    // notifications, are the workers'; there it polls.
    let mut woken = if per_tenant || opts.once {
        None
    } else {
        Some(
            database
                .listen("toolgate_outbox")
                .await
                .map_err(|e| format!("cannot listen: {}", toolgate_pgconn::describe(&e)))?,
        )
    };
    let claims = Claims::prepare(&db).await?;
    let dispatcher = Arc::new(Dispatcher {
        per_tenant,
        claims,
        db,
        settling,
        slots: Semaphore::new(opts.concurrency.max(1)),
        connections: connections::Connections::new(
            opts.keep_alive,
            opts.concurrency,
            tls_config(opts.ca_file.as_deref())?,
        ),
        credentials,
        opts: opts.clone(),
        tokens: Mutex::new(HashMap::new()),
        sent: Mutex::new(HashMap::new()),
        breakers: std::sync::Mutex::new(HashMap::new()),
    });
    let slots = opts.concurrency.max(1);
    let mut tasks: tokio::task::JoinSet<Delivered> = tokio::task::JoinSet::new();
    // What each delivery in flight holds, to hand it back if it must be cut short.
    let mut holding: Holding = HashMap::new();
    let mut stop = opts.stop.clone();
    // Drained once: claiming stops at the first claim that brings no intent it has not claimed
    // before (one due again at once, after a retry delay of zero or a finish that keeps failing,
    // is tried at most once more).
    let mut seen = std::collections::HashSet::new();
    let mut claiming = true;
    loop {
        if stop.as_ref().is_some_and(|s| *s.borrow()) {
            return dispatcher.shut_down(tasks, holding, report).await;
        }
        // It holds up to twice its slots: those beyond wait for a slot, their claims renewed
        // meanwhile, so a claim fetches several intents at once instead of one commit an intent;
        // it claims again once half its slots' worth can be fetched, or when nothing waits.
        let free = 2 * slots - tasks.len();
        if claiming && (free >= slots.div_ceil(2) || tasks.len() < slots) {
            let intents = dispatcher.claim(free.min(opts.batch.max(1) as usize) as i32).await?;
            report.claimed += intents.len();
            let mut fresh = 0;
            for (intent, held) in intents {
                if seen.insert(format!("{}\u{1f}{}\u{1f}{}", intent.tenant, intent.tool, intent.key)) {
                    fresh += 1;
                }
                let task = tasks.spawn(dispatcher.clone().deliver_and_settle(intent.clone(), held));
                holding.insert(task.id(), (intent, Instant::now()));
            }
            observe_in_flight(opts, tasks.len());
            if opts.once && fresh == 0 {
                claiming = false;
            }
        }
        if tasks.is_empty() {
            if opts.once && !claiming {
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep(opts.poll) => {}
                _ = stopped(&mut stop) => {}
                w = wake(&mut woken) => w?,
            }
            continue;
        }
        // A delivery ends, or, with a slot free, the next poll comes, or the dispatcher is stopped.
        let poll = tasks.len() < 2 * slots && claiming;
        tokio::select! {
            done = tasks.join_next_with_id() => {
                if let Some(done) = done {
                    record(opts, done, &mut holding, report)?;
                    observe_in_flight(opts, tasks.len());
                }
            }
            _ = tokio::time::sleep(opts.poll), if poll => {}
            w = wake(&mut woken), if poll => w?,
            _ = stopped(&mut stop) => {}
        }
    }
}

/// The next wake-up of a dispatcher that listens (never, for one that does not); an error once
/// the listening connection is lost (the dispatcher connects again).
async fn wake(woken: &mut Option<(Client, tokio::sync::mpsc::Receiver<()>)>) -> Result<()> {
    match woken {
        Some((_, woken)) => match woken.recv().await {
            Some(()) => Ok(()),
            None => Err("the connection that listens for new intents was lost".into()),
        },
        None => std::future::pending().await,
    }
}

/// The deliveries in flight: what each holds and when it was claimed.
type Holding = HashMap<tokio::task::Id, (Intent, Instant)>;

fn observe_in_flight(opts: &Options, n: usize) {
    if let Some(metrics) = &opts.metrics {
        metrics.set_in_flight(n);
    }
}

/// A delivery that ended: its outcome counted, or its error (the database's) returned.
fn record(
    opts: &Options,
    done: std::result::Result<(tokio::task::Id, Delivered), tokio::task::JoinError>,
    holding: &mut Holding,
    report: &mut Report,
) -> Result<()> {
    match done {
        Ok((id, delivered)) => {
            let held = holding.remove(&id);
            let outcome = match delivered? {
                Some(outcome) => {
                    *report.settled.entry(outcome.clone()).or_default() += 1;
                    outcome
                }
                None => {
                    report.lost += 1;
                    "lost".to_string()
                }
            };
            if let (Some(metrics), Some((intent, claimed))) = (&opts.metrics, held) {
                metrics.delivered(&intent.endpoint, &outcome, claimed.elapsed());
            }
            Ok(())
        }
        Err(e) => {
            holding.remove(&e.id());
            Err(e.to_string().into())
        }
    }
}

impl Dispatcher {
    /// Stopped: nothing more is claimed; the deliveries in flight get `shutdown_grace` to end and
    /// be settled; the others are cut short and handed back (their lease put a second ahead with
    /// `renew_outbox`, so another dispatcher takes them over at once, asking the ERP for their
    /// keys first: they may have been sent).
    async fn shut_down(
        &self,
        mut tasks: tokio::task::JoinSet<Delivered>,
        mut holding: Holding,
        report: &mut Report,
    ) -> Result<()> {
        let deadline = tokio::time::Instant::now() + self.opts.shutdown_grace;
        let mut first_error = None;
        while let Ok(Some(done)) = tokio::time::timeout_at(deadline, tasks.join_next_with_id()).await {
            if let Err(e) = record(&self.opts, done, &mut holding, report) {
                first_error.get_or_insert(e);
            }
        }
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        for (intent, claimed) in holding.values() {
            let handed = self
                .db
                .query_one(
                    "SELECT toolgate.renew_outbox($1, $2, $3, $4::text::uuid, interval '1 second')",
                    &[&intent.tenant, &intent.tool, &intent.key, &intent.claim],
                )
                .await;
            match handed {
                Ok(_) => {
                    report.handed_back += 1;
                    if let Some(metrics) = &self.opts.metrics {
                        metrics.delivered(&intent.endpoint, "handed_back", claimed.elapsed());
                    }
                }
                Err(e) => eprintln!(
                    "toolgate dispatch: intent {} of tool {} not handed back ({e}): claimed again when its lease ends",
                    intent.key, intent.tool
                ),
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The endpoints whose circuit is open now.
    fn open_circuits(&self) -> Vec<String> {
        let now = Instant::now();
        let breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        breakers.iter().filter(|(_, b)| b.open_until.is_some_and(|until| until > now)).map(|(e, _)| e.clone()).collect()
    }

    /// Count an attempt at `endpoint` toward its breaker: one that could not reach it adds a
    /// failure (opening the circuit at `breaker_failures` in a row, for a cool-down doubled each
    /// time it opens again without an answer between), any answer closes it.
    fn breaker(&self, endpoint: &str, s: &Settlement) {
        if self.opts.breaker_failures == 0 {
            return;
        }
        let mut breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        let b = breakers.entry(endpoint.to_string()).or_default();
        if !unreachable(s) {
            *b = Breaker::default();
            return;
        }
        b.failures += 1;
        if b.failures >= self.opts.breaker_failures {
            b.cooldown = if b.cooldown.is_zero() {
                self.opts.breaker_cooldown
            } else {
                (b.cooldown * 2).min(Duration::from_secs(600))
            };
            b.open_until = Some(Instant::now() + b.cooldown);
            b.failures = 0;
            eprintln!(
                "toolgate dispatch: endpoint {endpoint}: {} attempts in a row could not reach it: its intents are left \
                 alone for {:.0} s",
                self.opts.breaker_failures,
                b.cooldown.as_secs_f64()
            );
        }
        if let Some(metrics) = &self.opts.metrics {
            metrics.breaker(endpoint, b.open_until.is_some_and(|until| until > Instant::now()));
        }
    }

    /// Claim up to `n` due intents, each with its lease as this process counts it. On one node,
    /// one `toolgate.claim_outbox`; on a Citus cluster, the tenants with intents due, longest
    /// waiting first (`toolgate.outbox_due_tenants`), then `toolgate.tenant_claim_outbox` for each
    /// until `n` are held: a call Citus delegates to the node that holds the tenant, since it
    /// locks rows only within one shard.
    async fn claim(&self, n: i32) -> Result<Vec<(Intent, Held)>> {
        let asked = Instant::now();
        let skip = self.open_circuits();
        let lease = self.opts.lease.as_secs_f64();
        let mut claimed: Vec<Intent> = Vec::new();
        if self.per_tenant {
            let tenants = self.db.query(&self.claims.due_tenants, &[&n, &skip]).await?;
            for t in &tenants {
                let left = n - claimed.len() as i32;
                if left <= 0 {
                    break;
                }
                let (tenant, due): (String, i64) = (t.get(0), t.get(1));
                let batch = left.min(i32::try_from(due).unwrap_or(i32::MAX));
                let row = self.db.query_one(&self.claims.tenant, &[&tenant, &batch, &lease, &skip]).await?;
                claimed.extend(serde_json::from_value::<Vec<Intent>>(row.get(0))?);
            }
        } else {
            let row = self.db.query_one(&self.claims.all, &[&n, &lease, &skip]).await?;
            claimed = serde_json::from_value(row.get(0))?;
        }
        Ok(claimed.into_iter().map(|intent| (intent, Held::new(asked + self.opts.lease))).collect())
    }

    /// Deliver one claimed intent and settle it, the claim renewed meanwhile.
    async fn deliver_and_settle(self: Arc<Self>, intent: Intent, held: Held) -> Delivered {
        // PARTIAL: the ERP has it; nothing is sent, the settlement runs the finish function again.
        let settlement = if intent.state == "PARTIAL" {
            settled("SUCCEEDED", Value::Null)
        } else {
            let delivery = async {
                let _slot = self.slots.acquire().await;
                self.deliver(&intent, &held).await
            };
            match self.keep(&intent, &held, delivery).await {
                Some(s) => {
                    self.breaker(&intent.endpoint, &s);
                    s
                }
                None => return Ok(None),
            }
        };
        self.settle(&intent, settlement).await
    }

    /// Run `delivery`, renewing the claim every third of the lease (`toolgate.renew_outbox`);
    /// `None` as soon as a renewal finds the claim lost (its lease ran out and another dispatcher
    /// claimed the intent): the delivery is dropped there, and nothing more is sent for it. A
    /// renewal that fails (the database unreachable) leaves the lease as it was: no request goes
    /// out once too little of it is left (`Held::may_send`).
    async fn keep(
        &self,
        intent: &Intent,
        held: &Held,
        delivery: impl std::future::Future<Output = Settlement>,
    ) -> Option<Settlement> {
        tokio::pin!(delivery);
        let every = self.opts.lease / 3;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                settlement = &mut delivery => return Some(settlement),
                _ = tick.tick() => {
                    let asked = Instant::now();
                    let renewed = self
                        .db
                        .query_one(
                            "SELECT toolgate.renew_outbox($1, $2, $3, $4::text::uuid, \
                             pg_catalog.make_interval(secs => $5))",
                            &[&intent.tenant, &intent.tool, &intent.key, &intent.claim, &self.opts.lease.as_secs_f64()],
                        )
                        .await;
                    match renewed {
                        Ok(row) if row.get::<_, bool>(0) => held.extend(asked + self.opts.lease),
                        Ok(_) => {
                            eprintln!(
                                "toolgate dispatch: intent {} of tool {} (tenant {}): the claim was lost (its lease \
                                 ran out and another dispatcher holds it): stopped, nothing more sent",
                                intent.key, intent.tool, intent.tenant
                            );
                            return None;
                        }
                        Err(e) => eprintln!(
                            "toolgate dispatch: intent {} of tool {}: the claim was not renewed: {}; nothing more \
                             is sent for it once its lease runs short",
                            intent.key,
                            intent.tool,
                            e.as_db_error().map_or_else(|| e.to_string(), |d| d.to_string())
                        ),
                    }
                }
            }
        }
    }

    /// Settle `intent`; the outcome it was settled with (PARTIAL when the ERP did it and the
    /// tool's finish function did not), or `None` when the claim is no longer this process's
    /// (said on standard error with the server's words; the intent is another dispatcher's).
    async fn settle(&self, intent: &Intent, s: Settlement) -> Delivered {
        let last = intent.attempts >= self.opts.max_attempts;
        let outcome = match s.outcome {
            // The ERP said no every time (401, 429) and no attempt may have reached it: its refusal.
            "PENDING" if last && !intent.sent_before && refused_at_the_door(&s.reply) => "REJECTED",
            "PENDING" | "UNCERTAIN" if last => "DEAD",
            other => other,
        };
        let db = match self.settling.get().await {
            Ok(db) => db,
            Err(e) => {
                return Err(format!(
                    "cannot settle intent {} of tool {} (tenant {}) {outcome}: no connection: {e}",
                    intent.key, intent.tool, intent.tenant
                )
                .into())
            }
        };
        // The function alone in the statement: Citus delegates it to the tenant's node. Prepared
        // once per connection of the pool, not at every settlement.
        const SETTLE: &str = "SELECT toolgate.settle_outbox($1, $2, $3, $4::text::uuid, $5, $6, \
                              pg_catalog.make_interval(secs => $7), $8)";
        let settled = match db.prepare_cached(SETTLE).await {
            Ok(statement) => {
                db.query_one(
                    &statement,
                    &[
                        &intent.tenant,
                        &intent.tool,
                        &intent.key,
                        &intent.claim,
                        &outcome,
                        &s.reply,
                        &backoff(self.opts.retry_delay, self.opts.max_retry_delay, intent.attempts).as_secs_f64(),
                        &s.refused,
                    ],
                )
                .await
            }
            Err(e) => Err(e),
        };
        let row = match settled {
            Ok(row) => row,
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE) => {
                eprintln!(
                    "toolgate dispatch: intent {} of tool {} (tenant {}) not settled {outcome}: {}",
                    intent.key,
                    intent.tool,
                    intent.tenant,
                    e.as_db_error().map_or_else(|| e.to_string(), |d| d.to_string())
                );
                return Ok(None);
            }
            Err(e) => {
                return Err(format!(
                    "cannot settle intent {} of tool {} (tenant {}) {outcome}: {}",
                    intent.key,
                    intent.tool,
                    intent.tenant,
                    e.as_db_error().map_or_else(|| e.to_string(), |d| d.to_string())
                )
                .into())
            }
        };
        let stored: Value = row.get(0);
        Ok(Some(if stored["outcome"] == "PARTIAL" { "PARTIAL" } else { outcome }.to_string()))
    }

    /// One attempt: reconcile first if an earlier attempt may have reached the ERP, else send.
    /// Nothing goes to an origin this dispatcher was not told it may reach, nor to a private
    /// address unless it was told it may.
    async fn deliver(&self, intent: &Intent, held: &Held) -> Settlement {
        if origin(&intent.base_url).is_none_or(|o| !self.opts.allowed_origins.contains(&o)) {
            eprintln!(
                "toolgate dispatch: endpoint {} points at {}, an origin this dispatcher may not reach \
                 (--allow-origin): nothing sent",
                intent.endpoint, intent.base_url
            );
            return settled("PENDING", json!({"error": "origin_not_allowed"}));
        }
        let link = match target(&intent.base_url).await {
            Ok(t) => t,
            Err(e) => return settled("PENDING", json!({"error": "endpoint_unreachable", "detail": e})),
        };
        if !self.opts.allow_private_addresses && private_address(link.addr.ip()) {
            eprintln!(
                "toolgate dispatch: endpoint {} resolves to {}, a private, loopback or link-local address \
                 (--allow-private-addresses): nothing sent",
                intent.endpoint,
                link.addr.ip()
            );
            return settled("PENDING", json!({"error": "address_not_allowed"}));
        }
        let erp = Erp { d: self, intent, link, held };
        // NOT_FOUND: never applied, so it is sent (with the same key).
        if intent.sent_before {
            if let Some(done) = erp.reconcile().await {
                return done;
            }
        }
        erp.send().await
    }

    /// The access token for `intent`'s endpoint and its generation: this process's, else the one
    /// another dispatcher stored, else a new one (refreshed).
    async fn access(&self, intent: &Intent, link: &Link) -> std::result::Result<(Option<String>, i64), String> {
        if intent.auth_kind == "none" {
            return Ok((None, 0));
        }
        let mut tokens = self.tokens.lock().await;
        let token = tokens.entry(token_key(&intent.endpoint, link)).or_default();
        if token.access.is_none() {
            let row = self
                .db
                .query_one(
                    "SELECT access_token, generation FROM toolgate.erp_access_token($1, $2)",
                    &[&intent.endpoint, &link.origin],
                )
                .await
                .map_err(credentials_error)?;
            (token.access, token.generation) = (row.get(0), row.get(1));
        }
        if token.access.is_none() {
            self.refresh(token, &intent.endpoint, link).await?;
        }
        Ok((token.access.clone(), token.generation))
    }

    /// After a 401 with the token of `generation`: refresh, unless someone did meanwhile.
    async fn refreshed(&self, endpoint: &str, generation: i64, link: &Link) -> std::result::Result<(), String> {
        let mut tokens = self.tokens.lock().await;
        let token = tokens.entry(token_key(endpoint, link)).or_default();
        if token.generation != generation {
            return Ok(());
        }
        self.refresh(token, endpoint, link).await
    }

    /// One refresh for every dispatcher: under the lock of the endpoint's credentials for the
    /// origin it points at (`toolgate.erp_refresh_begin`, seeded from the endpoint's own
    /// `--refresh-token-file NAME=FILE` the first time), unless
    /// another dispatcher refreshed since `token` was read, when its access token is taken
    /// instead, `POST /oauth/token` with the current refresh token; the rotated one is written to
    /// the file (if any) and stored with the new access token (`erp_refresh_end`) before the lock
    /// is released and the access token used (the old refresh token no longer works).
    async fn refresh(&self, token: &mut Token, endpoint: &str, link: &Link) -> std::result::Result<(), String> {
        let file = self.opts.refresh_token_files.get(endpoint).map(PathBuf::as_path);
        let seed = match file {
            Some(file) => {
                Some(std::fs::read_to_string(file).map_err(|e| format!("the refresh token file is unreadable: {e}"))?)
            }
            None => None,
        };
        let mut credentials = self.credentials.lock().await;
        let tx = credentials.transaction().await.map_err(credentials_error)?;
        let row = tx
            .query_one(
                "SELECT refresh_token, access_token, generation FROM toolgate.erp_refresh_begin($1, $2, $3, $4)",
                &[&endpoint, &link.origin, &token.generation, &seed],
            )
            .await
            .map_err(credentials_error)?;
        let (current, stored, generation): (Option<String>, Option<String>, i64) = (row.get(0), row.get(1), row.get(2));
        let Some(current) = current else {
            // Refreshed by another dispatcher meanwhile.
            tx.commit().await.map_err(credentials_error)?;
            (token.access, token.generation) = (stored, generation);
            return Ok(());
        };
        let form = format!("grant_type=refresh_token&refresh_token={}", encode(current.trim()));
        let reply = self
            .http(
                link,
                "POST",
                "/oauth/token",
                &[("Content-Type", "application/x-www-form-urlencoded")],
                Some(form.as_bytes()),
            )
            .await
            .map_err(|e| format!("token endpoint: {e}"))?;
        let body = reply.json();
        let (Some(access), Some(next)) = (body["access_token"].as_str(), body["refresh_token"].as_str()) else {
            return Err(format!("token endpoint answered {} {}", reply.status, body["error"].as_str().unwrap_or("")));
        };
        if let Some(file) = file {
            write_secret(file, next).map_err(|e| format!("cannot write the refresh token file: {e}"))?;
        }
        let row = tx
            .query_one("SELECT toolgate.erp_refresh_end($1, $2, $3)", &[&endpoint, &next, &access])
            .await
            .map_err(credentials_error)?;
        tx.commit().await.map_err(credentials_error)?;
        (token.access, token.generation) = (Some(access.to_string()), row.get(0));
        Ok(())
    }

    /// One HTTP exchange with an endpoint, `path` under its prefix, TLS if it is `https`, within
    /// the timeout, over a connection kept from an earlier exchange if there is one
    /// (`connections`). A connection or a TLS handshake that fails is `Connect`: nothing of the
    /// request was sent.
    async fn http(
        &self,
        link: &Link,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> std::result::Result<Reply, CallError> {
        let exchange = self.connections.exchange(link, method, path, headers, body, self.opts.max_answer_bytes);
        tokio::time::timeout(self.opts.timeout, exchange).await.unwrap_or(Err(CallError::Timeout))
    }

    /// Wait until both of the endpoint's windows have room, then count this request.
    async fn pace(&self, intent: &Intent) {
        let (per_second, per_minute) =
            (intent.per_second.unwrap_or(0) as usize, intent.per_minute.unwrap_or(0) as usize);
        if per_second == 0 && per_minute == 0 {
            return;
        }
        loop {
            let wait = {
                let mut sent = self.sent.lock().await;
                let times = sent.entry(intent.base_url.clone()).or_default();
                let now = Instant::now();
                while times.front().is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60)) {
                    times.pop_front();
                }
                let mut wait = Duration::ZERO;
                let n = times.len();
                let last_second =
                    times.iter().rev().take_while(|t| now.duration_since(**t) < Duration::from_secs(1)).count();
                if per_second > 0 && last_second >= per_second {
                    wait = wait.max((times[n - per_second] + Duration::from_secs(1)).saturating_duration_since(now));
                }
                if per_minute > 0 && n >= per_minute {
                    wait = wait.max((times[n - per_minute] + Duration::from_secs(60)).saturating_duration_since(now));
                }
                if wait.is_zero() {
                    times.push_back(now);
                    return;
                }
                wait
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// Where this process keeps an endpoint's access token: per endpoint and origin, so a token
/// read for one host is never sent to another after the endpoint is moved.
fn token_key(endpoint: &str, link: &Link) -> String {
    format!("{endpoint}\u{1f}{}", link.origin)
}

/// A failure reading or storing an endpoint's credentials, with the server's message.
fn credentials_error(e: tokio_postgres::Error) -> String {
    format!("the endpoint's credentials: {}", e.as_db_error().map_or_else(|| e.to_string(), |d| d.to_string()))
}

/// Write `secret` to `file` (0600), by a rename so a reader never sees half of it.
fn write_secret(file: &Path, secret: &str) -> std::io::Result<()> {
    let tmp = file.with_extension("tmp");
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp)?;
        std::io::Write::write_all(&mut f, format!("{secret}\n").as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(tmp, file)
}

/// One intent's exchanges with its ERP.
struct Erp<'a> {
    d: &'a Dispatcher,
    intent: &'a Intent,
    link: Link,
    held: &'a Held,
}

/// Why a write was not sent: too little of the claim's lease was left for it.
const LEASE_SHORT: &str = "lease_short";

/// 429s waited out per exchange before the intent is left for later.
const RATE_LIMITED_TRIES: u32 = 5;

impl Erp<'_> {
    /// Put on record, in the audit (`toolgate.note_outbox`), what happened within the attempt:
    /// a resend (`resend`), a state query (`ask`), a run of polls (`poll`). Best effort: a note
    /// the database does not take is said on standard error and the delivery goes on (the
    /// attempt's start and its settlement are audited anyway).
    async fn note(&self, phase: &str, detail: Value) {
        let i = self.intent;
        let noted = self
            .d
            .db
            .query_one(
                // The function alone in the statement: Citus delegates it to the tenant's node.
                "SELECT toolgate.note_outbox($1, $2, $3, $4::text::uuid, $5, $6)",
                &[&i.tenant, &i.tool, &i.key, &i.claim, &phase, &detail],
            )
            .await;
        if let Err(e) = noted {
            eprintln!(
                "toolgate dispatch: intent {} of tool {}: the {phase} was not put on record: {}",
                i.key,
                i.tool,
                e.as_db_error().map_or_else(|| e.to_string(), |d| d.to_string())
            );
        }
    }

    /// No access token to send with: said on standard error (the operator's to mend), and the
    /// attempt ends before anything is sent.
    fn no_token(&self, why: String) -> CallError {
        eprintln!("toolgate dispatch: endpoint {}: no access token: {why}", self.intent.endpoint);
        CallError::Broken(format!("no access token: {why}"))
    }

    /// One request with the token, the windows, a 401 refreshed once and 429s waited out.
    async fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> std::result::Result<Reply, CallError> {
        let bytes = body.map(|b| b.to_string().into_bytes());
        let mut refreshed = false;
        let mut limited = 0;
        loop {
            let (token, generation) = match self.d.access(self.intent, &self.link).await {
                Ok(t) => t,
                Err(e) => return Err(self.no_token(e)),
            };
            let bearer = token.map(|t| format!("Bearer {t}"));
            let mut headers: Vec<(&str, &str)> = Vec::new();
            if let Some(bearer) = &bearer {
                headers.push(("Authorization", bearer));
            }
            if let Some(key) = key {
                headers.push(("Idempotency-Key", key));
            }
            if bytes.is_some() {
                headers.push(("Content-Type", "application/json"));
            }
            self.d.pace(self.intent).await;
            // A write goes out only if it ends (answered or timed out) while the claim is still
            // this process's: no other dispatcher can hold the intent meanwhile.
            if key.is_some() && !self.held.may_send(self.d.opts.timeout) {
                return Err(CallError::Broken(LEASE_SHORT.into()));
            }
            let reply = self.d.http(&self.link, method, path, &headers, bytes.as_deref()).await?;
            match reply.status {
                401 if !refreshed && self.intent.auth_kind != "none" => {
                    refreshed = true;
                    if let Err(e) = self.d.refreshed(&self.intent.endpoint, generation, &self.link).await {
                        return Err(self.no_token(e));
                    }
                    self.note("resend", json!({"reason": "unauthorized", "status": 401})).await;
                }
                429 if limited < RATE_LIMITED_TRIES => {
                    limited += 1;
                    let secs = reply.header("retry-after").and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(1);
                    let wait = secs.min(120);
                    self.note("resend", json!({"reason": "rate_limited", "status": 429, "wait_s": wait})).await;
                    tokio::time::sleep(Duration::from_secs(wait)).await;
                }
                _ => return Ok(reply),
            }
        }
    }

    /// Send the request; what became of it.
    async fn send(&self) -> Settlement {
        let request = &self.intent.request;
        let method = request["method"].as_str().unwrap_or("POST");
        let path = request["path"].as_str().unwrap_or("/");
        let body = request.get("body").filter(|b| !b.is_null());
        let key = self.intent.erp_key();
        // The gate refuses such a path when the call is made; an intent written before is not sent.
        if toolgate_core::request::climbs(path) {
            return settled("REJECTED", json!({"error": "bad_request_path"}));
        }
        match self.exchange(method, path, body, Some(&key)).await {
            // Refused at the door: nothing reached the ERP.
            Err(CallError::Connect(e)) => {
                settled("PENDING", json!({"error": "no_connection", "detail": e.to_string()}))
            }
            // A refusal too long to read: still a refusal (its body is not kept).
            Err(CallError::TooLarge(Some(status)))
                if (400..500).contains(&status) && !matches!(status, 401 | 408 | 409 | 425 | 429) =>
            {
                settled("REJECTED", json!({"error": "answer_too_large", "status": status}))
            }
            // Not sent: it cannot be written as HTTP, now or later.
            Err(CallError::Broken(e)) if e.starts_with(connections::UNSENDABLE) => {
                settled("REJECTED", json!({"error": "unsendable_request", "detail": e}))
            }
            Err(CallError::Broken(e)) if e.starts_with("no access token") => {
                settled("PENDING", json!({"error": "unauthorized", "detail": e}))
            }
            // Not sent: too little of the lease was left (the claim could not be renewed).
            Err(CallError::Broken(e)) if e == LEASE_SHORT => settled("PENDING", json!({"error": LEASE_SHORT})),
            // Sent, and no answer: it may have been applied. Ask, never send again.
            Err(_) => self.reconcile().await.unwrap_or_else(|| settled("PENDING", json!({"error": "not_applied"}))),
            Ok(reply) => self.answered(reply).await,
        }
    }

    /// What the ERP's answer to the write says (the contract in docs/binding.md).
    async fn answered(&self, reply: Reply) -> Settlement {
        let body = reply.json();
        let reading = &self.intent.answers;
        match reply.status {
            200..=299 => match reading.status(&body, true) {
                Status::Done => reading.done(body),
                Status::Refused => settled("REJECTED", reading.refusal(&body, reply.status)),
                // Not done yet: its protocol polled, else the ERP asked for the key's state.
                Status::Pending => match reading.protocol(&body) {
                    Some(protocol) => self.follow(&protocol).await,
                    None => self
                        .reconcile()
                        .await
                        .unwrap_or_else(|| settled("UNCERTAIN", json!({"error": "still_pending"}))),
                },
                Status::Unknown => settled("UNCERTAIN", json!({"error": "unknown_status", "status": reply.status})),
            },
            401 | 429 => {
                settled("PENDING", json!({"error": if reply.status == 401 { "unauthorized" } else { "rate_limited" }}))
            }
            // The key is being processed (another request with it is in flight): not final, the
            // next attempt asks the ERP for the key's state.
            409 | 425 => settled("UNCERTAIN", json!({"error": "in_progress", "status": reply.status})),
            408 | 500..=599 => {
                if reply.status == 503 {
                    // Unavailable for a while: the state query waits what it asked (capped).
                    let secs = reply.header("retry-after").and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(0);
                    tokio::time::sleep(Duration::from_secs(secs.min(RETRY_AFTER_CAP_SECS))).await;
                }
                self.reconcile().await.unwrap_or_else(|| settled("PENDING", json!({"error": "not_applied"})))
            }
            _ => settled("REJECTED", reading.refusal(&body, reply.status)),
        }
    }

    /// Poll the async protocol until it is final, for a bounded time.
    async fn follow(&self, protocol: &str) -> Settlement {
        let deadline = Instant::now() + self.d.opts.settle_within;
        let mut wait = Duration::from_millis(50);
        let mut polls = 0;
        loop {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(1));
            polls += 1;
            if let Ok(reply) = self.exchange("GET", &format!("/protocols/{}", encode(protocol)), None, None).await {
                if let Some(done) = self.intent.answers.final_state(&reply) {
                    self.note("poll", json!({"polls": polls, "ended": done.outcome})).await;
                    return done;
                }
            }
            if Instant::now() >= deadline {
                self.note("poll", json!({"polls": polls, "ended": "still_pending"})).await;
                return settled("UNCERTAIN", json!({"error": "still_pending", "protocol": protocol}));
            }
        }
    }

    /// Ask the ERP for the key's state: `None` if it never got it (NOT_FOUND); a pending one is
    /// followed to its end, for a bounded time.
    async fn reconcile(&self) -> Option<Settlement> {
        let path = format!("/requests/{}", encode(&self.intent.erp_key()));
        let asked = self.exchange("GET", &path, None, None).await;
        let reading = &self.intent.answers;
        // The answer read once: for the audit's note, then for the state it says.
        let (status, body) = match &asked {
            Ok(r) => (json!(r.status), (r.status == 200).then(|| r.json())),
            Err(_) => (json!(null), None),
        };
        let word = body.as_ref().and_then(|b| reading.word(b));
        let ended = word.clone().unwrap_or_else(|| "no_answer".into());
        self.note("ask", json!({"status": status, "ended": ended})).await;
        let body = match (asked, body) {
            (_, Some(body)) => body,
            (Err(CallError::TooLarge(_)), _) => {
                return Some(settled("UNCERTAIN", json!({"error": "answer_too_large"})))
            }
            _ => return Some(settled("UNCERTAIN", json!({"error": "state_unknown"}))),
        };
        if word.is_some_and(|w| w == "NOT_FOUND") {
            return None;
        }
        match reading.status(&body, false) {
            Status::Pending => match reading.protocol(&body) {
                Some(protocol) => Some(self.follow(&protocol).await),
                None => Some(settled("UNCERTAIN", json!({"error": "still_pending"}))),
            },
            Status::Done => Some(reading.done(body)),
            Status::Refused => Some(settled("REJECTED", reading.refusal(&body, 200))),
            Status::Unknown => Some(settled("UNCERTAIN", json!({"error": "state_unknown"}))),
        }
    }
}

/// What an ERP's answer says of the request, by its status word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Done,
    Pending,
    Refused,
    /// A word the reading does not know: not taken for success.
    Unknown,
}

/// How long a `Retry-After` is waited at most, in seconds.
const RETRY_AFTER_CAP_SECS: u64 = 30;

/// How an endpoint's ERP answers, as the claim brings it (`toolgate.erp_answers_contract()`, with
/// what `toolgate.set_erp_answers` changed): JSON pointers to the status word, the refusal's
/// reason, the protocol to poll and the order lines (each line's id, status and reason), the
/// words of each kind (upper-case), and what a write's `2xx` with no status says.
#[derive(Clone, Debug, serde::Deserialize)]
struct Reading {
    status: String,
    error: String,
    protocol: String,
    absent: String,
    done: Vec<String>,
    pending: Vec<String>,
    refused: Vec<String>,
    lines: Option<String>,
    line_id: String,
    line_status: String,
    line_error: String,
}

impl Reading {
    /// The status word at `pointer` in `body`, upper-case: a string trimmed, a boolean or a number
    /// by its text; `None` when there is none (or it is null).
    fn word_at(body: &Value, pointer: &str) -> Option<String> {
        match body.pointer(pointer)? {
            Value::Null => None,
            Value::String(w) => Some(w.trim().to_ascii_uppercase()),
            Value::Bool(b) => Some(b.to_string().to_ascii_uppercase()),
            Value::Number(n) => Some(n.to_string()),
            // A list or an object is no word: never one of the lists.
            other => Some(format!("{other}")),
        }
    }

    /// The answer's status word.
    fn word(&self, body: &Value) -> Option<String> {
        Self::word_at(body, &self.status)
    }

    fn kind(&self, word: Option<String>, absent_is_done: bool) -> Status {
        let Some(word) = word else {
            return if absent_is_done && self.absent == "done" { Status::Done } else { Status::Unknown };
        };
        if self.done.contains(&word) {
            Status::Done
        } else if self.pending.contains(&word) {
            Status::Pending
        } else if self.refused.contains(&word) {
            Status::Refused
        } else {
            Status::Unknown
        }
    }

    /// Read `body`'s status: no status at all is done only for the answer to the write itself
    /// (`absent_is_done`: a 2xx that says nothing more, when the reading's `absent` is `done`),
    /// never for a state query or a protocol, which must say.
    fn status(&self, body: &Value, absent_is_done: bool) -> Status {
        self.kind(self.word(body), absent_is_done)
    }

    /// The async protocol to poll, if the answer names one.
    fn protocol(&self, body: &Value) -> Option<String> {
        match body.pointer(&self.protocol)? {
            Value::String(p) if !p.is_empty() => Some(p.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// A refusal's reply for the ledger: the ERP's reason (else its status word, for a `2xx`,
    /// else `http_STATUS`) and the HTTP status; never the rest of the body.
    fn refusal(&self, body: &Value, status: u16) -> Value {
        let error = body
            .pointer(&self.error)
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| self.word(body).filter(|_| (200..300).contains(&status)))
            .unwrap_or_else(|| format!("http_{status}"));
        json!({"error": error, "status": status})
    }

    /// A done answer, read line by line when it has lines: none refused is SUCCEEDED; some
    /// refused (the others done) SUCCEEDED with the refused ones named, which the ledger answers
    /// PARTIAL; all refused REJECTED (`lines_refused`); a line pending or in a word the reading
    /// does not know, UNCERTAIN (`line_status_unknown`: asked by key later, never taken for done).
    fn done(&self, body: Value) -> Settlement {
        let Some(lines) = self.lines.as_deref().and_then(|p| body.pointer(p)).and_then(Value::as_array) else {
            return settled("SUCCEEDED", body);
        };
        let mut refused = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if !line.is_object() {
                return settled("UNCERTAIN", json!({"error": "line_status_unknown", "line": i}));
            }
            match self.kind(Self::word_at(line, &self.line_status), true) {
                Status::Done => {}
                Status::Refused => {
                    let id = line.pointer(&self.line_id).filter(|v| !v.is_null()).cloned().unwrap_or(json!(i));
                    let error = line.pointer(&self.line_error).filter(|v| !v.is_null()).cloned();
                    refused.push(json!({"line": id, "error": error}));
                }
                Status::Pending | Status::Unknown => {
                    return settled("UNCERTAIN", json!({"error": "line_status_unknown", "line": i}))
                }
            }
        }
        if refused.is_empty() {
            settled("SUCCEEDED", body)
        } else if refused.len() == lines.len() {
            Settlement {
                outcome: "REJECTED",
                reply: json!({"error": "lines_refused", "status": 200}),
                refused: Some(Value::Array(refused)),
            }
        } else {
            Settlement { outcome: "SUCCEEDED", reply: body, refused: Some(Value::Array(refused)) }
        }
    }

    /// A protocol's or a key's state, if final.
    fn final_state(&self, reply: &Reply) -> Option<Settlement> {
        if reply.status != 200 {
            return None;
        }
        let body = reply.json();
        match self.status(&body, false) {
            Status::Done => Some(self.done(body)),
            Status::Refused => Some(settled("REJECTED", self.refusal(&body, 200))),
            Status::Pending | Status::Unknown => None,
        }
    }
}

/// Whether an attempt's reply says the ERP turned the request away before handling it (401 or
/// 429 that did not clear, or no access token to be had).
fn refused_at_the_door(reply: &Value) -> bool {
    matches!(reply["error"].as_str(), Some("unauthorized" | "rate_limited"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract as `toolgate.erp_answers_contract()` has it (the claim brings it from there),
    /// with `changes` over it as `toolgate.set_erp_answers` would store them.
    fn reading(changes: Value) -> Reading {
        let mut contract = json!({"status": "/status", "error": "/error", "protocol": "/protocol", "absent": "done",
            "done": ["DONE", "SUCCEEDED", "SUCCESS", "COMPLETED", "APPLIED", "OK"],
            "pending": ["PENDING", "PROCESSING", "IN_PROGRESS", "ACCEPTED", "QUEUED"],
            "refused": ["REJECTED", "FAILED", "FAILURE", "ERROR", "DECLINED", "DENIED", "CANCELLED", "CANCELED"],
            "lines": "/lines", "line_id": "/id", "line_status": "/status", "line_error": "/error"});
        for (k, v) in changes.as_object().unwrap() {
            contract[k] = v.clone();
        }
        serde_json::from_value(contract).unwrap()
    }

    #[test]
    fn keys_are_encoded_for_headers_and_paths() {
        assert_eq!(encode("remote-key_1.~"), "remote-key_1.~");
        assert_eq!(encode("a b\r\nc/%"), "a%20b%0D%0Ac%2F%25");
        let intent = Intent {
            tenant: "t1".into(),
            tool: "order_part".into(),
            key: "k 1".into(),
            endpoint: "erp".into(),
            base_url: String::new(),
            auth_kind: "none".into(),
            per_second: None,
            per_minute: None,
            request: Value::Null,
            attempts: 1,
            sent_before: false,
            state: "PENDING".into(),
            claim: String::new(),
            answers: reading(json!({})),
        };
        assert_eq!(intent.erp_key(), "t1:order_part:k%201");
    }

    #[test]
    fn answers_are_read_by_their_status_word() {
        let contract = reading(json!({}));
        for (body, write, status) in [
            (json!({"id": 7}), true, Status::Done),
            (json!("created"), true, Status::Done),
            (json!({"status": "done"}), true, Status::Done),
            (json!({"status": "Succeeded"}), false, Status::Done),
            (json!({"status": "PENDING", "protocol": "P"}), true, Status::Pending),
            (json!({"status": "accepted"}), true, Status::Pending),
            (json!({"status": "FAILED", "error": "card_declined"}), true, Status::Refused),
            (json!({"status": "declined"}), false, Status::Refused),
            (json!({"status": "ON_HOLD"}), true, Status::Unknown),
            (json!({"status": 3}), true, Status::Unknown),
            (json!({"id": 7}), false, Status::Unknown),
        ] {
            assert_eq!(contract.status(&body, write), status, "{body} (the write's answer: {write})");
        }
        let refusal = |body: Value, status| contract.refusal(&body, status);
        assert_eq!(refusal(json!({"status": "FAILED", "error": "card_declined"}), 200)["error"], "card_declined");
        assert_eq!(refusal(json!({"status": "declined"}), 200)["error"], "DECLINED");
        assert_eq!(refusal(json!({"detail": "x"}), 422), json!({"error": "http_422", "status": 422}));
        assert!(refused_at_the_door(&json!({"error": "rate_limited"})));
        assert!(!refused_at_the_door(&json!({"error": "no_connection"})));
    }

    #[test]
    fn an_endpoint_says_how_its_erp_answers() {
        let erp = reading(json!({"status": "/result/state", "error": "/result/reason", "protocol": "/job",
                                 "done": ["POSTED", "TRUE"], "refused": ["VOIDED", "FALSE"], "absent": "unknown"}));
        for (body, status) in [
            (json!({"result": {"state": "posted"}}), Status::Done),
            (json!({"result": {"state": true}}), Status::Done),
            (json!({"result": {"state": false}}), Status::Refused),
            (json!({"result": {"state": "Voided", "reason": "budget"}}), Status::Refused),
            (json!({"result": {"state": "PENDING"}}), Status::Pending),
            // The contract's words it did not keep, and no status at all, are not taken for done.
            (json!({"result": {"state": "DONE"}}), Status::Unknown),
            (json!({"status": "DONE"}), Status::Unknown),
            (json!({"id": 7}), Status::Unknown),
        ] {
            assert_eq!(erp.status(&body, true), status, "{body}");
        }
        assert_eq!(erp.refusal(&json!({"result": {"state": "VOIDED", "reason": "budget"}}), 200)["error"], "budget");
        assert_eq!(erp.protocol(&json!({"job": 42})).as_deref(), Some("42"));
        assert_eq!(erp.protocol(&json!({"protocol": "P"})), None);
    }

    #[test]
    fn order_lines_refused_are_named() {
        let contract = reading(json!({}));
        let some = contract.done(json!({"status": "DONE", "lines": [
            {"id": "L1", "status": "DONE"}, {"id": "L2", "status": "REJECTED", "error": "out_of_stock"}, {"sku": 9}]}));
        assert_eq!((some.outcome, some.refused), ("SUCCEEDED", Some(json!([{"line": "L2", "error": "out_of_stock"}]))));
        let all = contract.done(json!({"lines": [{"status": "FAILED"}, {"status": "DECLINED", "error": "x"}]}));
        assert_eq!(all.outcome, "REJECTED");
        assert_eq!(all.reply["error"], "lines_refused");
        assert_eq!(all.refused, Some(json!([{"line": 0, "error": null}, {"line": 1, "error": "x"}])));
        for unsure in [
            json!({"lines": [{"status": "DONE"}, {"status": "BACKORDERED"}]}),
            json!({"lines": [{"status": "PENDING"}]}),
            json!({"lines": ["L1"]}),
        ] {
            let s = contract.done(unsure.clone());
            assert_eq!((s.outcome, s.reply["error"].as_str()), ("UNCERTAIN", Some("line_status_unknown")), "{unsure}");
        }
        let plain = contract.done(json!({"status": "DONE", "lines": "n/a"}));
        assert_eq!((plain.outcome, plain.refused), ("SUCCEEDED", None));
        let unread = reading(json!({"lines": null})).done(json!({"lines": [{"status": "REJECTED"}]}));
        assert_eq!((unread.outcome, unread.refused), ("SUCCEEDED", None));
    }

    #[test]
    fn retries_back_off_to_their_cap_with_jitter() {
        let (base, cap) = (Duration::from_secs(30), Duration::from_secs(3600));
        for (attempts, doubled) in [(1, 30.0), (2, 60.0), (3, 120.0), (7, 1920.0), (8, 3600.0), (40, 3600.0)] {
            for _ in 0..50 {
                let wait = backoff(base, cap, attempts).as_secs_f64();
                assert!((doubled * 0.8..=doubled * 1.2).contains(&wait), "attempt {attempts}: {wait}");
            }
        }
        assert_eq!(backoff(Duration::ZERO, cap, 5), Duration::ZERO);
        let waits: std::collections::HashSet<u128> = (0..20).map(|_| backoff(base, cap, 1).as_millis()).collect();
        assert!(waits.len() > 1, "jittered");
    }

    #[test]
    fn a_request_goes_out_only_with_a_timeouts_time_of_lease_left() {
        let held = Held::new(Instant::now() + Duration::from_secs(2));
        assert!(held.may_send(Duration::from_secs(1)));
        assert!(!held.may_send(Duration::from_secs(3)));
        held.extend(Instant::now() + Duration::from_secs(5));
        assert!(held.may_send(Duration::from_secs(3)));
        held.extend(Instant::now());
        assert!(held.may_send(Duration::from_secs(3)), "a renewal never shortens the lease");
    }

    #[test]
    fn origins_are_written_as_the_gate_writes_them() {
        assert_eq!(origin("HTTPS://ERP.Example.com:443/api/v1").as_deref(), Some("https://erp.example.com"));
        assert_eq!(origin("http://127.0.0.1:80").as_deref(), Some("http://127.0.0.1"));
        assert_eq!(origin("http://127.0.0.1:8099/x").as_deref(), Some("http://127.0.0.1:8099"));
        assert_eq!(origin("https://[::1]:8443/").as_deref(), Some("https://[::1]:8443"));
        assert_eq!(origin("ftp://h/"), None);
        assert_eq!(origin("http://user@h/"), None);
        assert_eq!(allowed_origin("https://erp.example.com/").unwrap(), "https://erp.example.com");
        assert_eq!(allowed_origin("http://127.0.0.1:8099").unwrap(), "http://127.0.0.1:8099");
        assert!(allowed_origin("https://erp.example.com/api").is_err());
        assert!(allowed_origin("erp.example.com").is_err());
    }

    #[test]
    fn private_addresses_are_told_apart() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:169.254.169.254",
            "::ffff:127.0.0.1",
        ] {
            assert!(private_address(private.parse().unwrap()), "{private}");
        }
        for public in ["8.8.8.8", "172.32.0.1", "100.128.0.1", "2001:4860::8888", "::ffff:1.1.1.1"] {
            assert!(!private_address(public.parse().unwrap()), "{public}");
        }
    }

    #[tokio::test]
    async fn base_urls_name_an_address_and_a_prefix() {
        let link = target("http://127.0.0.1:8099/api/").await.unwrap();
        assert_eq!(
            (link.addr.to_string(), link.prefix.as_str(), link.tls),
            ("127.0.0.1:8099".to_string(), "/api", false)
        );
        assert_eq!(target("http://127.0.0.1:8099").await.unwrap().prefix, "");
        let link = target("https://127.0.0.1/erp").await.unwrap();
        assert_eq!(
            (link.addr.port(), link.authority.as_str(), link.host.as_str(), link.tls),
            (443, "127.0.0.1", "127.0.0.1", true)
        );
        assert!(target("ftp://127.0.0.1/").await.is_err());
    }
}
