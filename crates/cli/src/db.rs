//! Connections to a pg_toolgate database, and calls that return its jsonb outcomes.

use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls};
use toolgate_pgconn::Database;

use crate::Result;

/// Where the server is: a socket directory (or host) and a port.
#[derive(Clone, Debug)]
pub struct Server {
    pub host: String,
    pub port: u16,
}

impl Server {
    /// A connection as `user` to `dbname`; its driver runs on the current runtime.
    pub async fn connect(&self, user: &str, dbname: &str) -> Result<Client> {
        let (client, connection) = Config::new()
            .host(&self.host)
            .port(self.port)
            .user(user)
            .dbname(dbname)
            .application_name("toolgate")
            .connect(NoTls)
            .await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }
}

/// A connection described by a libpq conninfo (`host=/var/run/postgresql dbname=erp user=erp_app`)
/// or URL (`postgresql://erp_app@db:5432/erp?sslmode=verify-full`), TLS as its `sslmode` says; its
/// driver runs on the current runtime. Errors never repeat the conninfo, which may hold a password.
pub async fn connect_to(conninfo: &str) -> Result<Client> {
    connect(&database(conninfo)?).await
}

/// A connection to `database`, or why not in a line (the server's message, or the TLS or network
/// error and its cause).
pub async fn connect(database: &Database) -> Result<Client> {
    database.connect().await.map_err(|e| format!("cannot connect: {}", toolgate_pgconn::describe(&e)).into())
}

/// A libpq conninfo or URL read (`toolgate_pgconn`), with the application name `toolgate` unless
/// it names one.
pub fn database(conninfo: &str) -> Result<Database> {
    Ok(Database::parse(conninfo, "toolgate")?)
}

/// Run a statement that returns one jsonb value.
pub async fn json(client: &Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Value> {
    Ok(client.query_one(sql, params).await?.get(0))
}

/// `toolgate.request_close(identity, conversation_id, args)`.
pub async fn request_close(client: &Client, identity: &str, conversation: &str, args: &Value) -> Result<Value> {
    json(client, "SELECT toolgate.request_close($1, $2, $3)", &[&identity, &conversation, args]).await
}

/// `toolgate.request_purchase_part(identity, conversation_id, args)`.
pub async fn request_purchase_part(client: &Client, identity: &str, conversation: &str, args: &Value) -> Result<Value> {
    json(client, "SELECT toolgate.request_purchase_part($1, $2, $3)", &[&identity, &conversation, args]).await
}

/// `toolgate.confirm(identity, confirmation)`.
pub async fn confirm(client: &Client, identity: &str, confirmation: &str) -> Result<Value> {
    json(client, "SELECT toolgate.confirm($1, $2)", &[&identity, &confirmation]).await
}

/// `toolgate.read_order(identity, order_id)`.
pub async fn read_order(client: &Client, identity: &str, order_id: &str) -> Result<Value> {
    json(client, "SELECT toolgate.read_order($1, $2)", &[&identity, &order_id]).await
}

/// One bigint.
pub async fn count(client: &Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<i64> {
    Ok(client.query_one(sql, params).await?.get(0))
}

/// `(outcome, rule)` of a reply, for comparisons.
pub fn verdict(reply: &Value) -> (String, String) {
    (reply["outcome"].as_str().unwrap_or_default().to_string(), reply["rule"].as_str().unwrap_or_default().to_string())
}
