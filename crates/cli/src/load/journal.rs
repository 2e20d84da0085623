//! One call of a load run: what was asked, in which transaction, and what came back. Every call
//! runs in a transaction whose id the client learns first, so a reply lost to a killed backend or
//! a stopped server can still be judged: the server says whether that transaction committed, and
//! the audit row and the ledger row of the effect's key carry the same id (`xmin`). The journal
//! is kept so lost replies can be retried with their key, and written to a file so a second run
//! on a promoted standby can retry everything a first run did on the old primary.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, SimpleQueryMessage, Statement};
use toolgate_core::token::Signer;

use crate::db::Server;
use crate::fixture::APP;
use crate::{keys, Result};

/// Whose identity token a call carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Who {
    /// user-17, supervisor of shopping-a (tier-1 closes, tiered purchases).
    SupA,
    /// user-31, supervisor of shopping-b (everything applies at once).
    SupB,
    /// A technician of shopping-a: no policy lets that role write.
    TechA,
    /// user-17 with a token that expired.
    ExpiredA,
}

impl Who {
    pub fn tenant(self) -> &'static str {
        match self {
            Who::SupB => "shopping-b",
            Who::SupA | Who::TechA | Who::ExpiredA => "shopping-a",
        }
    }
}

/// What a call asks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Request {
    Write { who: Who, tool: String, conversation: String, args: Value },
    Confirm { who: Who, proposal: String, decision: String, text: String },
    Read { who: Who, order_id: String },
}

/// What came back.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Fate {
    Replied(Value),
    /// The connection died before the reply (and the COMMIT's) arrived.
    Lost,
    /// The server raised instead of returning an outcome.
    Raised(String),
}

/// The idempotency key a call writes under: the request's, or its proposal's for a confirmation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    pub tenant: String,
    pub tool: String,
    pub key: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Call {
    pub seq: u64,
    pub op: String,
    pub request: Request,
    pub key: Option<Key>,
    /// The transaction's id (xid8), learned before the call was sent.
    pub xid: Option<i64>,
    pub fate: Fate,
    /// Did the transaction commit? Known for a reply; asked of the server for a lost one; None
    /// when nobody can tell (a lost call's id may be reused after a failover).
    pub committed: Option<bool>,
    /// The call this one retries.
    pub retry_of: Option<u64>,
}

impl Call {
    pub fn reply(&self) -> Option<&Value> {
        match &self.fate {
            Fate::Replied(v) => Some(v),
            _ => None,
        }
    }

    pub fn outcome(&self) -> &str {
        self.reply().and_then(|r| r["outcome"].as_str()).unwrap_or("")
    }

    pub fn rule(&self) -> &str {
        self.reply().and_then(|r| r["rule"].as_str()).unwrap_or("")
    }

    pub fn replayed(&self) -> bool {
        self.reply().is_some_and(|r| r["replayed"] == true)
    }

    pub fn lost(&self) -> bool {
        matches!(self.fate, Fate::Lost)
    }

    /// The audit row's `kind` for this call.
    pub fn kind(&self) -> &'static str {
        match self.request {
            Request::Write { .. } => "call",
            Request::Confirm { .. } => "confirm",
            Request::Read { .. } => "read",
        }
    }
}

/// Mints the tokens a call carries, as the tenants' identity providers and channels would.
pub struct Tokens {
    a_idp: Signer,
    a_channel: Signer,
    b_idp: Signer,
    /// Identity tokens live an hour: signed once per run (and again after half an hour).
    minted: Mutex<HashMap<Who, (String, Instant)>>,
}

impl Tokens {
    /// The signers of a lab's key directory (`Lab::keys_dir`), as `Lab::create` generated them.
    pub fn load(dir: &Path) -> Result<Tokens> {
        Ok(Tokens {
            a_idp: keys::load(dir, "idp-shopping-a")?,
            a_channel: keys::load(dir, "chan-shopping-a")?,
            b_idp: keys::load(dir, "idp-shopping-b")?,
            minted: Mutex::new(HashMap::new()),
        })
    }

    pub fn identity(&self, who: Who) -> String {
        let mut minted = self.minted.lock().expect("no panics while held");
        if let Some((token, at)) = minted.get(&who) {
            if at.elapsed() < Duration::from_secs(1800) {
                return token.clone();
            }
        }
        let token = self.sign_identity(who);
        minted.insert(who, (token.clone(), Instant::now()));
        token
    }

    fn sign_identity(&self, who: Who) -> String {
        match who {
            Who::SupA => keys::identity(&self.a_idp, "user-17", "shopping-a", "supervisor", 3600),
            Who::SupB => keys::identity(&self.b_idp, "user-31", "shopping-b", "supervisor", 3600),
            Who::TechA => keys::identity(&self.a_idp, "user-18", "shopping-a", "technician", 3600),
            Who::ExpiredA => keys::identity(&self.a_idp, "user-17", "shopping-a", "supervisor", -600),
        }
    }

    /// shopping-a's channel signs what the person answered (only shopping-a asks for answers).
    pub fn answer(&self, proposal: &str, decision: &str, text: &str) -> String {
        keys::confirmation(&self.a_channel, proposal, decision, text, keys::now(), "typed")
    }
}

/// Was this error the connection going away (the call's fate unknown), rather than the server
/// refusing the statement?
pub fn connection_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        // 08: connection exception; 57P01-03: terminated, crash shutdown, cannot connect now.
        Some(code) => code.code().starts_with("08") || code.code().starts_with("57P"),
        None => std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

/// A connection of the application's login with the contract's four entry points prepared.
pub struct Conn {
    pub client: Client,
    close: Statement,
    purchase: Statement,
    confirm: Statement,
    read: Statement,
}

impl Conn {
    pub async fn open(server: &Server, dbname: &str) -> Result<Conn> {
        let client = server.connect(APP, dbname).await?;
        Ok(Conn {
            close: client.prepare("SELECT toolgate.request_close($1, $2, $3)").await?,
            purchase: client.prepare("SELECT toolgate.request_purchase_part($1, $2, $3)").await?,
            confirm: client.prepare("SELECT toolgate.confirm($1, $2)").await?,
            read: client.prepare("SELECT toolgate.read_order($1, $2)").await?,
            client,
        })
    }

    /// Send one call in a transaction of its own, whose id it learns first. `None`: the
    /// connection died before the call was sent, so nothing of it can have committed.
    pub async fn send(&self, request: &Request, tokens: &Tokens) -> Option<(i64, Fate)> {
        let client = &self.client;
        let xid = match client.simple_query("BEGIN; SELECT pg_current_xact_id()::text").await {
            Ok(messages) => messages.iter().find_map(|m| match m {
                SimpleQueryMessage::Row(row) => row.get(0).and_then(|x| x.parse::<i64>().ok()),
                _ => None,
            })?,
            Err(_) => return None,
        };
        let answer;
        let (statement, identity, params): (&Statement, String, Vec<&(dyn ToSql + Sync)>) = match request {
            Request::Write { who, tool, conversation, args } => {
                let statement = if tool == "request_close" { &self.close } else { &self.purchase };
                (statement, tokens.identity(*who), vec![conversation, args])
            }
            Request::Confirm { who, proposal, decision, text } => {
                answer = tokens.answer(proposal, decision, text);
                (&self.confirm, tokens.identity(*who), vec![&answer])
            }
            Request::Read { who, order_id } => (&self.read, tokens.identity(*who), vec![order_id]),
        };
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&identity];
        all.extend(params);
        // One after the other: the call must run inside the transaction whose id was learned.
        let reply = client.query_one(statement, &all).await;
        let commit = client.batch_execute("COMMIT").await;
        let fate = match (reply, commit) {
            (Ok(row), Ok(())) => Fate::Replied(row.get(0)),
            (Err(e), _) | (_, Err(e)) if connection_lost(&e) => Fate::Lost,
            (Err(e), _) | (_, Err(e)) => Fate::Raised(raised(&e)),
        };
        Some((xid, fate))
    }
}

/// What a call that raised was told: the server's SQLSTATE and message when it sent one (the
/// error's own text says only "db error").
fn raised(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        None => format!("{e}"),
    }
}

pub fn save(path: &Path, calls: &[Call]) -> Result<()> {
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    for call in calls {
        serde_json::to_writer(&mut out, call)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

pub fn load(path: &Path) -> Result<Vec<Call>> {
    let file = std::io::BufReader::new(std::fs::File::open(path)?);
    file.lines().map(|line| Ok(serde_json::from_str(&line?)?)).collect()
}
