//! What `toolgate mcp --http` counts, in Prometheus' text format (metric names `toolgate_mcp_…`),
//! served with `/healthz` and `/readyz` on the `--listen` address (loopback, as the dispatcher's).
//! Never a tenant, a token or an argument as a label: tools and outcomes only.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Method {
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Call {
    tool: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Refusal {
    reason: String,
}

type Latencies = Family<Method, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 0.5 ms to about 33 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 17))
}

/// What a pool holds now, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStatus {
    pub size: usize,
    pub max_size: usize,
    pub in_use: usize,
    pub waiting: usize,
}

/// The server's counters.
pub struct Metrics {
    registry: Registry,
    requests: Family<Method, Counter>,
    latency: Latencies,
    calls: Family<Call, Counter>,
    refused: Family<Refusal, Counter>,
    pool_size: Gauge,
    pool_max: Gauge,
    pool_in_use: Gauge,
    pool_waiting: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("toolgate_mcp");
        let requests = Family::<Method, Counter>::default();
        let latency: Latencies = Family::new_with_constructor(latency_histogram);
        let calls = Family::<Call, Counter>::default();
        let refused = Family::<Refusal, Counter>::default();
        let (pool_size, pool_max, pool_in_use, pool_waiting) =
            (Gauge::default(), Gauge::default(), Gauge::default(), Gauge::default());
        registry.register("requests", "MCP requests answered, by JSON-RPC method", requests.clone());
        registry.register("request_duration_seconds", "Time to answer an MCP request, by method", latency.clone());
        registry.register(
            "calls",
            "Gate entry points run, by tool (confirm: a person's answer) and the gate's outcome (error: none)",
            calls.clone(),
        );
        registry.register(
            "refused",
            "Requests refused before the gate: unauthorized (401), busy and unavailable (503), too_large \
             (413), slow_body (408), parse_error",
            refused.clone(),
        );
        registry.register("pool_connections", "Database connections open", pool_size.clone());
        registry.register(
            "pool_max_connections",
            "Database connections at most (TOOLGATE_POOL_SIZE)",
            pool_max.clone(),
        );
        registry.register("pool_in_use", "Database connections running a statement", pool_in_use.clone());
        registry.register("pool_waiting", "Requests waiting for a database connection", pool_waiting.clone());
        Metrics { registry, requests, latency, calls, refused, pool_size, pool_max, pool_in_use, pool_waiting }
    }
}

impl Metrics {
    /// An MCP request answered.
    pub fn request(&self, method: &str, took: Duration) {
        let label = Method { method: known_method(method).to_string() };
        self.requests.get_or_create(&label).inc();
        self.latency.get_or_create(&label).observe(took.as_secs_f64());
    }

    /// A gate entry point's outcome (`error` when it gave none).
    pub fn call(&self, tool: &str, outcome: &str) {
        self.calls.get_or_create(&Call { tool: tool.to_string(), outcome: outcome.to_string() }).inc();
    }

    /// A request refused before the gate.
    pub fn refused(&self, reason: &str) {
        self.refused.get_or_create(&Refusal { reason: reason.to_string() }).inc();
    }

    /// The text of every metric, the pool's gauges read now.
    pub fn render(&self, pool: PoolStatus) -> String {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.pool_size.set(gauge(pool.size));
        self.pool_max.set(gauge(pool.max_size));
        self.pool_in_use.set(gauge(pool.in_use));
        self.pool_waiting.set(gauge(pool.waiting));
        let mut text = String::new();
        let _ = encode(&mut text, &self.registry);
        text
    }
}

/// A method as a label: MCP's own, or `other` (a client's made-up method never grows the series).
fn known_method(method: &str) -> &str {
    match method {
        "initialize"
        | "ping"
        | "tools/list"
        | "tools/call"
        | "notifications/initialized"
        | "notifications/cancelled"
        | "resources/list"
        | "prompts/list"
        | "logging/setLevel"
        | "completion/complete"
        | "GET"
        | "DELETE" => method,
        _ => "other",
    }
}
