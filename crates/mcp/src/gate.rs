//! The gate's SQL entry points, on a pool of connections as the application login
//! (deadpool-postgres: connections made as they are needed up to the pool's size, a lost one
//! replaced, TLS as the conninfo's `sslmode` says), with the server's session settings applied to
//! each new connection (over HTTP, the audience every token must name: `toolgate.audience`; the
//! waits a call may make: `lock_timeout`, `statement_timeout`). A connection is taken for one
//! statement and given back at once: none is held while a person thinks. When every connection is
//! busy and the queue of requests waiting for one is full, or one waited too long, the answer is
//! `Busy` at once, never a wait without end. Errors carry an SQLSTATE and a message only.

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, Timeouts};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::types::ToSql;
use toolgate_pgconn::{describe, Database};

use crate::metrics::{Metrics, PoolStatus};

/// Why a statement gave no outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateError {
    /// No connection: the server is down or unreachable (the next call connects again).
    Unavailable,
    /// Every connection is in use and the queue for one is full (or the wait was too long).
    Busy,
    /// The server raised an error: its SQLSTATE and message.
    Sql { code: String, message: String },
}

impl std::fmt::Display for GateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateError::Unavailable => write!(f, "the database is unavailable; nothing was applied; try again"),
            GateError::Busy => write!(
                f,
                "the server is busy (every database connection is in use); nothing was applied; try again in a \
                 moment with the same idempotency_key"
            ),
            // lock_timeout (55P03) and statement_timeout (57014): the call's transaction rolled back.
            GateError::Sql { code, message } if code == "55P03" || code == "57014" => write!(
                f,
                "the call waited too long ({message}) and was rolled back: nothing was applied; try again with \
                 the same idempotency_key"
            ),
            GateError::Sql { code, message } => write!(f, "the database answered SQLSTATE {code}: {message}"),
        }
    }
}

/// `toolgate.trace_id` set for the session's next statements (`false`: not local to a transaction:
/// each call is one statement, its own transaction).
const SET_TRACE: &str = "SELECT pg_catalog.set_config('toolgate.trace_id', $1::text, false)";

/// Where a call goes and what it carries besides its arguments: the caller's tenant (from the
/// gate's listing for the token; `None`: the tenant-less entry points), the request's trace id,
/// and where the request's log line learns the tool and the outcome.
#[derive(Default, Clone, Copy)]
pub struct Route<'a> {
    pub tenant: Option<&'a str>,
    pub trace: Option<&'a str>,
    pub record: Option<&'a RequestRecord>,
}

/// What a request's log line says of the gate: the last entry point's tool and outcome.
#[derive(Default, Debug)]
pub struct RequestRecord(std::sync::Mutex<Option<(String, String)>>);

impl RequestRecord {
    fn set(&self, tool: &str, outcome: &str) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((tool.to_string(), outcome.to_string()));
    }

    /// The tool and the outcome, if the request ran an entry point.
    pub fn get(&self) -> Option<(String, String)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// How many connections, and how many requests may wait for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSize {
    /// `TOOLGATE_POOL_SIZE`: connections at most.
    pub size: usize,
    /// `TOOLGATE_POOL_QUEUE`: requests waiting for a connection at most; one more is `Busy`.
    pub queue: usize,
    /// `TOOLGATE_POOL_WAIT`: the longest a request waits for a connection.
    pub wait: Duration,
}

/// The connections to the gate.
pub struct Gate {
    pool: Pool,
    metrics: Metrics,
    queue: usize,
    timeouts: Timeouts,
}

impl Gate {
    pub fn new(database: &Database, settings: Vec<(String, String)>, size: PoolSize) -> Result<Gate, String> {
        let settings = Arc::new(settings);
        let manager = Manager::from_config(
            database.config().clone(),
            database.tls(),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(size.size.max(1))
            .runtime(Runtime::Tokio1)
            .post_create(Hook::async_fn(move |client, _| {
                let settings = settings.clone();
                Box::pin(async move {
                    for (name, value) in settings.iter() {
                        client
                            .query_one("SELECT pg_catalog.set_config($1, $2, false)", &[name, value])
                            .await
                            .map_err(|e| HookError::Message(format!("cannot set {name}: {}", describe(&e)).into()))?;
                    }
                    Ok(())
                })
            }))
            .build()
            .map_err(|e| format!("the database pool: {e}"))?;
        // A connection that cannot be made in 10 s is an unavailable database (a conninfo's own
        // connect_timeout may say less).
        let timeouts = Timeouts {
            wait: Some(size.wait),
            create: Some(Duration::from_secs(10)),
            recycle: Some(Duration::from_secs(5)),
        };
        Ok(Gate { pool, metrics: Metrics::default(), queue: size.queue, timeouts })
    }

    /// What the pool holds now.
    pub fn status(&self) -> PoolStatus {
        let s = self.pool.status();
        PoolStatus { size: s.size, max_size: s.max_size, in_use: s.size - s.available, waiting: s.waiting }
    }

    /// A connection, or why none: `Busy` at once when every connection is in use and the queue is
    /// full.
    async fn connection(&self) -> Result<deadpool_postgres::Object, GateError> {
        let s = self.pool.status();
        if s.available == 0 && s.size >= s.max_size && s.waiting >= self.queue {
            return Err(GateError::Busy);
        }
        self.pool.timeout_get(&self.timeouts).await.map_err(|e| match e {
            PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => GateError::Busy,
            PoolError::Backend(e) => {
                tracing::warn!("cannot connect: {}", describe(&e));
                GateError::Unavailable
            }
            other => {
                tracing::warn!("cannot connect: {other}");
                GateError::Unavailable
            }
        })
    }

    /// Whether a connection can run `SELECT 1` now (`/readyz`).
    pub async fn ready(&self) -> Result<(), GateError> {
        self.json("SELECT to_jsonb(1)", &[]).await.map(|_| ())
    }

    /// Run a statement that returns one jsonb value (NULL: `Value::Null`).
    async fn json(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Value, GateError> {
        self.run(None, sql, params).await
    }

    /// `json`, the statement prepared once per connection; with `trace`, `toolgate.trace_id` set
    /// to it first (pipelined: no round trip more), so the call's audit row names the trace.
    async fn run(&self, trace: Option<&str>, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Value, GateError> {
        let client = self.connection().await?;
        let result = match trace {
            None => match client.prepare_cached(sql).await {
                Ok(statement) => client.query_one(&statement, params).await,
                Err(e) => Err(e),
            },
            Some(trace) => {
                // Both prepared first (once per connection), so the two executions go out in this
                // order on the first poll of each, the setting before the call.
                let prepared = match client.prepare_cached(SET_TRACE).await {
                    Ok(set) => client.prepare_cached(sql).await.map(|call| (set, call)),
                    Err(e) => Err(e),
                };
                match prepared {
                    Ok((set, call)) => {
                        let traced: [&(dyn ToSql + Sync); 1] = [&trace];
                        match tokio::join!(client.query_one(&set, &traced), client.query_one(&call, params)) {
                            (Err(e), _) | (_, Err(e)) => Err(e),
                            (Ok(_), Ok(row)) => Ok(row),
                        }
                    }
                    Err(e) => Err(e),
                }
            }
        };
        let lost = client.is_closed();
        match result {
            Ok(row) => {
                Ok(row.try_get::<_, Option<Value>>(0).map_err(|_| GateError::Unavailable)?.unwrap_or(Value::Null))
            }
            Err(e) => match e.as_db_error() {
                // Class 57 (operator intervention) and 08 (connection exception): the server went away.
                Some(db) if lost && (db.code().code().starts_with("57") || db.code().code().starts_with("08")) => {
                    Err(GateError::Unavailable)
                }
                Some(db) => {
                    Err(GateError::Sql { code: db.code().code().to_string(), message: db.message().to_string() })
                }
                // The connection broke: it is dropped from the pool (a closed one is never handed out
                // again), and the next call gets a new one.
                None => {
                    let _ = deadpool_postgres::Object::take(client);
                    Err(GateError::Unavailable)
                }
            },
        }
    }

    /// `toolgate.tools(identity)`.
    pub async fn tools(&self, identity: &str) -> Result<Value, GateError> {
        self.json("SELECT toolgate.tools($1::text)", &[&identity]).await
    }

    /// `toolgate.authorization_servers(resource)`: the `iss` of every registered issuer that may
    /// issue tokens for `resource`.
    pub async fn authorization_servers(&self, resource: &str) -> Result<Value, GateError> {
        self.json("SELECT toolgate.authorization_servers($1::text)", &[&resource]).await
    }

    /// `toolgate.tenant_call(tenant, identity, conversation, tool, args)` when the caller's tenant
    /// is known (from the gate's own listing for the same token: on a Citus coordinator the call
    /// runs whole on the node that holds the tenant; the gate refuses a tenant the token does not
    /// name), else `toolgate.call(identity, conversation, tool, args)`.
    pub async fn call(
        &self,
        route: &Route<'_>,
        identity: &str,
        conversation: &str,
        tool: &str,
        args: &Value,
    ) -> Result<Value, GateError> {
        let outcome = match route.tenant {
            Some(tenant) => {
                self.run(
                    route.trace,
                    "SELECT toolgate.tenant_call($1::text, $2::text, $3::text, $4::text, $5::jsonb)",
                    &[&tenant, &identity, &conversation, &tool, args],
                )
                .await
            }
            None => {
                self.run(
                    route.trace,
                    "SELECT toolgate.call($1::text, $2::text, $3::text, $4::jsonb)",
                    &[&identity, &conversation, &tool, args],
                )
                .await
            }
        };
        self.counted(route, tool, outcome)
    }

    /// `toolgate.tenant_read(tenant, identity, tool, args)`, or `toolgate.read(identity, tool,
    /// args)` when the tenant is not known (as `call`).
    pub async fn read(&self, route: &Route<'_>, identity: &str, tool: &str, args: &Value) -> Result<Value, GateError> {
        let outcome = match route.tenant {
            Some(tenant) => {
                self.run(
                    route.trace,
                    "SELECT toolgate.tenant_read($1::text, $2::text, $3::text, $4::jsonb)",
                    &[&tenant, &identity, &tool, args],
                )
                .await
            }
            None => {
                self.run(route.trace, "SELECT toolgate.read($1::text, $2::text, $3::jsonb)", &[&identity, &tool, args])
                    .await
            }
        };
        self.counted(route, tool, outcome)
    }

    /// `toolgate.tenant_confirm(tenant, identity, confirmation)`, or `toolgate.confirm(identity,
    /// confirmation)` when the tenant is not known (as `call`).
    pub async fn confirm(&self, route: &Route<'_>, identity: &str, confirmation: &str) -> Result<Value, GateError> {
        let outcome = match route.tenant {
            Some(tenant) => {
                self.run(
                    route.trace,
                    "SELECT toolgate.tenant_confirm($1::text, $2::text, $3::text)",
                    &[&tenant, &identity, &confirmation],
                )
                .await
            }
            None => {
                self.run(route.trace, "SELECT toolgate.confirm($1::text, $2::text)", &[&identity, &confirmation]).await
            }
        };
        self.counted(route, "confirm", outcome)
    }

    /// `toolgate.tenant_pending(tenant, identity)`, or `toolgate.pending(identity)` when the tenant
    /// is not known: what the approver whose token this is may decide (docs/approvals.md).
    pub async fn pending(&self, tenant: Option<&str>, identity: &str) -> Result<Value, GateError> {
        match tenant {
            Some(tenant) => {
                self.json("SELECT toolgate.tenant_pending($1::text, $2::text)", &[&tenant, &identity]).await
            }
            None => self.json("SELECT toolgate.pending($1::text)", &[&identity]).await,
        }
    }

    /// `toolgate.tenant_approval_history(tenant, identity)`, or `toolgate.approval_history(identity)`.
    pub async fn approval_history(&self, tenant: Option<&str>, identity: &str) -> Result<Value, GateError> {
        match tenant {
            Some(tenant) => {
                self.json("SELECT toolgate.tenant_approval_history($1::text, $2::text)", &[&tenant, &identity]).await
            }
            None => self.json("SELECT toolgate.approval_history($1::text)", &[&identity]).await,
        }
    }

    /// `toolgate.tenant_audit_trail(tenant, identity, filters)`, or `toolgate.audit_trail`: the
    /// tenant's audit for a person of an auditor role.
    pub async fn audit_trail(&self, tenant: Option<&str>, identity: &str, filters: &Value) -> Result<Value, GateError> {
        match tenant {
            Some(tenant) => {
                self.json(
                    "SELECT toolgate.tenant_audit_trail($1::text, $2::text, $3::jsonb)",
                    &[&tenant, &identity, filters],
                )
                .await
            }
            None => self.json("SELECT toolgate.audit_trail($1::text, $2::jsonb)", &[&identity, filters]).await,
        }
    }

    /// `toolgate.tenant_approve(tenant, identity, proposal, decision, word)`, or `toolgate.approve`
    /// when the tenant is not known: an approver's decision on a proposal.
    pub async fn approve(
        &self,
        tenant: Option<&str>,
        identity: &str,
        proposal: &str,
        decision: &str,
        word: Option<&str>,
    ) -> Result<Value, GateError> {
        let outcome = match tenant {
            Some(tenant) => {
                self.json(
                    "SELECT toolgate.tenant_approve($1::text, $2::text, $3::text, $4::text, $5::text)",
                    &[&tenant, &identity, &proposal, &decision, &word],
                )
                .await
            }
            None => {
                self.json(
                    "SELECT toolgate.approve($1::text, $2::text, $3::text, $4::text)",
                    &[&identity, &proposal, &decision, &word],
                )
                .await
            }
        };
        self.counted(&Route::default(), "approve", outcome)
    }

    /// The server's counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// `outcome`, counted under `tool`, and kept for the request's log line.
    fn counted(&self, route: &Route<'_>, tool: &str, outcome: Result<Value, GateError>) -> Result<Value, GateError> {
        let word = match &outcome {
            Ok(o) => o["outcome"].as_str().unwrap_or("none"),
            Err(_) => "error",
        };
        self.metrics.call(tool, word);
        if let Some(record) = route.record {
            record.set(tool, word);
        }
        outcome
    }
}
