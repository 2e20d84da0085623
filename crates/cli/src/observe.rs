//! The dispatcher's HTTP side, for the platform that runs it (`toolgate dispatch --listen ADDR`):
//! `GET /metrics` (Prometheus text, metric names `toolgate_dispatch_…`) and `GET /healthz`
//! (`200 ok` while it holds a working connection to the database, `503` otherwise). Plain HTTP,
//! so only on a loopback address: a scraper on the same host, or a sidecar that adds TLS.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_postgres::Client;

use crate::Result;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Delivery {
    endpoint: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Endpoint {
    endpoint: String,
}

type Latencies = Family<Endpoint, Histogram, fn() -> Histogram>;

/// What a dispatcher counts, and the connection its scrapes read the queue's gauges through.
pub struct Metrics {
    registry: Registry,
    deliveries: Family<Delivery, Counter>,
    latency: Latencies,
    in_flight: Gauge,
    due: Gauge,
    oldest_due: Gauge<f64, AtomicU64>,
    uncertain: Gauge,
    dead: Gauge,
    partial: Gauge,
    up: Gauge,
    breaker_open: Family<Endpoint, Gauge>,
    connected: AtomicBool,
    /// The dispatcher's current connection, for the queue's gauges (`toolgate.outbox_gauges`).
    db: Mutex<Option<Arc<Client>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn latency_histogram() -> Histogram {
    // 1 ms to about 65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("toolgate_dispatch");
        let deliveries = Family::<Delivery, Counter>::default();
        let latency: Latencies = Family::new_with_constructor(latency_histogram);
        let (in_flight, due, uncertain, dead, partial, up) = (
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
        );
        let oldest_due = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "deliveries",
            "Attempts ended, by endpoint and outcome (SUCCEEDED, REJECTED, PENDING, UNCERTAIN, DEAD, PARTIAL, lost, handed_back)",
            deliveries.clone(),
        );
        registry.register("delivery_seconds", "An attempt's time, from its claim to its settlement", latency.clone());
        registry.register(
            "held",
            "Intents this dispatcher holds: in flight, or claimed and waiting for a slot",
            in_flight.clone(),
        );
        registry.register("due", "Intents due now, not yet claimed (every dispatcher's queue)", due.clone());
        registry.register(
            "oldest_due_seconds",
            "How long the oldest intent due now has waited: the queue's lag",
            oldest_due.clone(),
        );
        registry.register("uncertain", "Intents UNCERTAIN: sent, the ERP has not said", uncertain.clone());
        registry.register("dead", "Intents DEAD: given up, for a person (resolve_outbox)", dead.clone());
        registry.register("partial", "Intents PARTIAL: done by the ERP, their finish not yet", partial.clone());
        registry.register("up", "1 while the dispatcher holds a working database connection", up.clone());
        let breaker_open = Family::<Endpoint, Gauge>::default();
        registry.register(
            "breaker_open",
            "1 while an endpoint's circuit is open: its intents are left alone for a while",
            breaker_open.clone(),
        );
        Metrics {
            registry,
            deliveries,
            latency,
            in_flight,
            due,
            oldest_due,
            uncertain,
            dead,
            partial,
            up,
            breaker_open,
            connected: AtomicBool::new(false),
            db: Mutex::new(None),
        }
    }
}

impl Metrics {
    /// An attempt at `endpoint` ended with `outcome` after `took`.
    pub fn delivered(&self, endpoint: &str, outcome: &str, took: Duration) {
        let endpoint = endpoint.to_string();
        self.deliveries.get_or_create(&Delivery { endpoint: endpoint.clone(), outcome: outcome.to_string() }).inc();
        self.latency.get_or_create(&Endpoint { endpoint }).observe(took.as_secs_f64());
    }

    /// Whether `endpoint`'s circuit is open.
    pub fn breaker(&self, endpoint: &str, open: bool) {
        self.breaker_open.get_or_create(&Endpoint { endpoint: endpoint.to_string() }).set(i64::from(open));
    }

    pub fn set_in_flight(&self, n: usize) {
        self.in_flight.set(n as i64);
    }

    /// The dispatcher connected (`Some`) or lost its connection (`None`).
    pub fn connection(&self, db: Option<Arc<Client>>) {
        self.connected.store(db.is_some(), std::sync::atomic::Ordering::Relaxed);
        self.up.set(i64::from(db.is_some()));
        *self.db.lock().unwrap_or_else(|p| p.into_inner()) = db;
    }

    fn healthy(&self) -> bool {
        self.connected.load(std::sync::atomic::Ordering::Relaxed)
            && self.db.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|db| !db.is_closed())
    }

    /// The queue's gauges, read now; the text of every metric.
    async fn render(&self) -> String {
        let db = self.db.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(db) = db {
            let read = db
                .query_one(
                    "SELECT due, oldest_due_seconds, uncertain, dead, partial FROM toolgate.outbox_gauges()",
                    &[],
                )
                .await;
            if let Ok(row) = read {
                self.due.set(row.get(0));
                self.oldest_due.set(row.get(1));
                self.uncertain.set(row.get(2));
                self.dead.set(row.get(3));
                self.partial.set(row.get(4));
            }
        }
        self.up.set(i64::from(self.healthy()));
        let mut text = String::new();
        let _ = encode(&mut text, &self.registry);
        text
    }
}

/// Whether `addr` is a loopback address, the only kind `--listen` takes (plain HTTP).
pub fn loopback(addr: &str) -> std::result::Result<SocketAddr, String> {
    let parsed: SocketAddr = addr.parse().map_err(|e| format!("--listen {addr:?}: an address and port ({e})"))?;
    if !parsed.ip().is_loopback() {
        return Err(format!(
            "--listen {addr}: a loopback address only (127.0.0.1, ::1): /metrics is plain HTTP; put a TLS proxy in front \
             for a scraper elsewhere"
        ));
    }
    Ok(parsed)
}

/// Serve `/metrics` and `/healthz` on `addr` until the process ends; the address bound.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("--listen {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(health))
        .route("/readyz", get(health))
        .with_state(metrics);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(bound)
}

async fn scrape(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], metrics.render().await)
}

async fn health(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    if metrics.healthy() {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "no database connection\n")
    }
}
