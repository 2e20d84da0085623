//! The gate's SQL entry points, on one connection as the application login, made again after it
//! is lost, with the server's session settings applied to each new connection (over HTTP, the
//! audience every token must name: `toolgate.audience`; the waits a call may make:
//! `lock_timeout`, `statement_timeout`). Errors carry an SQLSTATE and a message only.

use serde_json::Value;
use tokio::sync::Mutex;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls};

/// Why a statement gave no outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateError {
    /// No connection: the server is down or unreachable (the next call connects again).
    Unavailable,
    /// The server raised an error: its SQLSTATE and message.
    Sql { code: String, message: String },
}

impl std::fmt::Display for GateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateError::Unavailable => write!(f, "the database is unavailable; nothing was applied; try again"),
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

/// The connection to the gate.
pub struct Gate {
    config: Config,
    /// Settings (name, value) made on every new connection before it serves a call.
    settings: Vec<(String, String)>,
    client: Mutex<Option<Client>>,
}

impl Gate {
    pub fn new(config: Config, settings: Vec<(String, String)>) -> Gate {
        Gate { config, settings, client: Mutex::new(None) }
    }

    /// A new connection, its settings made.
    async fn connect(&self) -> Result<Client, GateError> {
        let (client, connection) = self.config.connect(NoTls).await.map_err(|e| {
            eprintln!("toolgate mcp: cannot connect: {}", e.as_db_error().map_or(e.to_string(), |d| d.to_string()));
            GateError::Unavailable
        })?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        for (name, value) in &self.settings {
            client.query_one("SELECT pg_catalog.set_config($1, $2, false)", &[name, value]).await.map_err(|e| {
                eprintln!(
                    "toolgate mcp: cannot set {name}: {}",
                    e.as_db_error().map_or(e.to_string(), |d| d.to_string())
                );
                GateError::Unavailable
            })?;
        }
        Ok(client)
    }

    /// Run a statement that returns one jsonb value (NULL: `Value::Null`).
    async fn json(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Value, GateError> {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_none_or(Client::is_closed) {
            *slot = None;
            *slot = Some(self.connect().await?);
        }
        let client = slot.as_ref().expect("connected above");
        let result = client.query_one(sql, params).await;
        let lost = client.is_closed();
        if lost {
            *slot = None;
        }
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
                None => {
                    *slot = None;
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

    /// `toolgate.call(identity, conversation, tool, args)`.
    pub async fn call(&self, identity: &str, conversation: &str, tool: &str, args: &Value) -> Result<Value, GateError> {
        self.json(
            "SELECT toolgate.call($1::text, $2::text, $3::text, $4::jsonb)",
            &[&identity, &conversation, &tool, args],
        )
        .await
    }

    /// `toolgate.read(identity, tool, args)`.
    pub async fn read(&self, identity: &str, tool: &str, args: &Value) -> Result<Value, GateError> {
        self.json("SELECT toolgate.read($1::text, $2::text, $3::jsonb)", &[&identity, &tool, args]).await
    }

    /// `toolgate.confirm(identity, confirmation)`.
    pub async fn confirm(&self, identity: &str, confirmation: &str) -> Result<Value, GateError> {
        self.json("SELECT toolgate.confirm($1::text, $2::text)", &[&identity, &confirmation]).await
    }
}
