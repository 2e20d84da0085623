//! The agent's whole path measured (`toolgate bench-agent`, for `scripts/bench-agent.sh`): N
//! concurrent MCP sessions over Streamable HTTP to a running `toolgate mcp --http`, each with its
//! own bearer token, conversation and keep-alive connection, doing tier-0 closes (a fresh order and
//! key each) through `tools/call`; or the same closes as direct SQL (`toolgate.tenant_call`, what
//! the server runs) on N connections; or the agent path while one session of another tenant waits
//! on a row lock (head-of-line). Prints one TSV line: mode, sessions, calls, seconds, calls/s, p50
//! and p99 in milliseconds. Fails unless every call answered SUCCEEDED and each made one effect.

use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::db::{self, Server};
use crate::keys;
use crate::Result;

/// What is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `tools/call` through the MCP server.
    Agent,
    /// `SELECT toolgate.tenant_call(…)` on a connection of the application's login.
    Sql,
    /// The agent path while one session of tenant `bench2` waits on a held row lock.
    Blocked,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Mode, String> {
        match s {
            "agent" => Ok(Mode::Agent),
            "sql" => Ok(Mode::Sql),
            "blocked" => Ok(Mode::Blocked),
            _ => Err(format!("{s:?}: agent, sql or blocked")),
        }
    }
}

/// One run.
pub struct Run {
    pub server: Server,
    pub dbname: String,
    /// The application's login (a member of `toolgate_agent`), for the direct SQL.
    pub login: String,
    /// The benchmark's keys (`idp-bench.key`, `idp-bench2.key`).
    pub keys_dir: PathBuf,
    /// The MCP server's `/mcp` (and the audience of the sessions' tokens: its resource URL).
    pub mcp: SocketAddr,
    pub resource: String,
    pub mode: Mode,
    pub sessions: usize,
    pub seconds: f64,
}

/// What a run measured.
pub struct Figures {
    pub calls: usize,
    pub seconds: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// A keep-alive HTTP/1.1 connection to the MCP server, as an agent host keeps one.
struct Session {
    addr: SocketAddr,
    stream: Option<BufReader<TcpStream>>,
    head: String,
}

impl Session {
    fn new(addr: SocketAddr, token: &str, conversation: &str) -> Session {
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n\
             Toolgate-Conversation: {conversation}\r\n"
        );
        Session { addr, stream: None, head }
    }

    /// POST `body`; the status and the body of the answer.
    async fn post(&mut self, body: &[u8]) -> Result<(u16, Vec<u8>)> {
        if self.stream.is_none() {
            let tcp = TcpStream::connect(self.addr).await?;
            tcp.set_nodelay(true)?;
            self.stream = Some(BufReader::new(tcp));
        }
        let stream = self.stream.as_mut().expect("connected above");
        let mut request = format!("{}Content-Length: {}\r\n\r\n", self.head, body.len()).into_bytes();
        request.extend_from_slice(body);
        stream.get_mut().write_all(&request).await?;
        let mut line = String::new();
        stream.read_line(&mut line).await?;
        let status: u16 = line.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or("no HTTP status line")?;
        let (mut length, mut chunked, mut close) = (None, false, false);
        loop {
            line.clear();
            if stream.read_line(&mut line).await? == 0 {
                return Err("the server closed the connection mid-answer".into());
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
                match name.as_str() {
                    "content-length" => length = value.parse::<usize>().ok(),
                    "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                    "connection" => close = value.eq_ignore_ascii_case("close"),
                    _ => {}
                }
            }
        }
        let mut answer = Vec::new();
        if chunked {
            loop {
                line.clear();
                stream.read_line(&mut line).await?;
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16)?;
                let mut chunk = vec![0; size + 2];
                stream.read_exact(&mut chunk).await?;
                if size == 0 {
                    break;
                }
                answer.extend_from_slice(&chunk[..size]);
            }
        } else {
            answer.resize(length.ok_or("an answer without its length")?, 0);
            stream.read_exact(&mut answer).await?;
        }
        if close {
            self.stream = None;
        }
        Ok((status, answer))
    }
}

fn close_args(order: i64) -> Value {
    json!({"order_id": order.to_string(), "reason": "benchmark close", "idempotency_key": format!("agent-key-{order}")})
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// One run of `run.mode` with `run.sessions` sessions for `run.seconds`.
pub async fn run(run: &Run) -> Result<Figures> {
    let root = run.server.connect("postgres", &run.dbname).await?;
    // Orders of the run: taken from the benchmark's sequence, so no two runs share one.
    let budget = 200_000i64;
    let first: i64 = root.query_one("SELECT nextval('bench.orders')", &[]).await?.get(0);
    root.execute("SELECT setval('bench.orders', $1)", &[&(first + budget)]).await?;
    let next = Arc::new(AtomicI64::new(first));
    let before =
        db::count(&root, "SELECT count(*) FROM maintenance.close_requests WHERE tenant_id = 'bench'", &[]).await?;
    let signer = keys::load(&run.keys_dir, "idp-bench")?;
    let deadline = Instant::now() + Duration::from_secs_f64(run.seconds);

    // Head-of-line: an order of bench2 held FOR UPDATE, and one bench2 session closing it (each
    // try waits for the server's lock_timeout, then again) while the bench sessions run.
    let mut blocker = None;
    if run.mode == Mode::Blocked {
        // An order of its own each run: the last run's waiting call closed its order when the lock
        // went, and a closed order is passed over without waiting.
        let order: i64 = root.query_one("SELECT nextval('bench.blocked')", &[]).await?.get(0);
        let holder = run.server.connect("postgres", &run.dbname).await?;
        holder
            .batch_execute(&format!(
                "BEGIN; SELECT 1 FROM maintenance.work_orders WHERE tenant_id = 'bench2' AND order_id = '{order}' FOR UPDATE"
            ))
            .await?;
        let token = keys::identity_for(
            &keys::load(&run.keys_dir, "idp-bench2")?,
            "bench2-user",
            "bench2",
            "supervisor",
            3600,
            std::slice::from_ref(&run.resource),
        );
        let mut session = Session::new(run.mcp, &token, "bench2-blocked");
        let task = tokio::spawn(async move {
            // A fresh key each try: a replay would answer at once without waiting for the order.
            let fresh =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
            let mut tries = 0u32;
            while Instant::now() < deadline {
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                    "name": "request_close", "arguments": {"order_id": order.to_string(), "reason": "benchmark close",
                    "idempotency_key": format!("blocked-{fresh}-{tries}")}}})
                .to_string();
                if session.post(body.as_bytes()).await.is_err() {
                    break;
                }
                tries += 1;
            }
            tries
        });
        // The blocked call waits before the others start.
        let waiting = Instant::now() + Duration::from_secs(10);
        while db::count(
            &root,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'toolgate-mcp' AND wait_event_type = 'Lock' \
              AND datname = current_database()",
            &[],
        )
        .await?
            == 0
        {
            if Instant::now() > waiting {
                return Err("the blocked session never waited for its lock".into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        blocker = Some((holder, task));
    }

    let started = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..run.sessions {
        let next = next.clone();
        let conversation = format!("bench-agent-{s}");
        let task = match run.mode {
            Mode::Sql => {
                let client = run.server.connect(&run.login, &run.dbname).await?;
                let token = keys::identity(&signer, &format!("bench-user-{s}"), "bench", "supervisor", 3600);
                tokio::spawn(async move {
                    let statement = client
                        .prepare("SELECT toolgate.tenant_call('bench', $1, $2, 'request_close', $3::jsonb)")
                        .await
                        .map_err(|e| e.to_string())?;
                    let mut latencies = Vec::new();
                    while Instant::now() < deadline {
                        let order = next.fetch_add(1, Ordering::Relaxed);
                        let at = Instant::now();
                        let row = client
                            .query_one(&statement, &[&token, &conversation, &close_args(order)])
                            .await
                            .map_err(|e| e.to_string())?;
                        latencies.push(at.elapsed());
                        let reply: Value = row.get(0);
                        if reply["outcome"] != "SUCCEEDED" {
                            return Err(format!("a direct call answered {reply}"));
                        }
                    }
                    Ok::<_, String>(latencies)
                })
            }
            Mode::Agent | Mode::Blocked => {
                let token = keys::identity_for(
                    &signer,
                    &format!("bench-user-{s}"),
                    "bench",
                    "supervisor",
                    3600,
                    std::slice::from_ref(&run.resource),
                );
                let mut session = Session::new(run.mcp, &token, &conversation);
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    while Instant::now() < deadline {
                        let order = next.fetch_add(1, Ordering::Relaxed);
                        let body = json!({"jsonrpc": "2.0", "id": order, "method": "tools/call", "params": {
                            "name": "request_close", "arguments": close_args(order)}})
                        .to_string();
                        let at = Instant::now();
                        let (status, answer) = session.post(body.as_bytes()).await.map_err(|e| e.to_string())?;
                        latencies.push(at.elapsed());
                        let reply: Value = serde_json::from_slice(&answer).map_err(|e| e.to_string())?;
                        if status != 200 || reply["result"]["structuredContent"]["outcome"] != "SUCCEEDED" {
                            return Err(format!("an agent call answered {status}: {reply}"));
                        }
                    }
                    Ok::<_, String>(latencies)
                })
            }
        };
        tasks.push(task);
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some((holder, task)) = blocker {
        holder.batch_execute("ROLLBACK").await?;
        task.await?;
    }
    latencies.sort();
    let after =
        db::count(&root, "SELECT count(*) FROM maintenance.close_requests WHERE tenant_id = 'bench'", &[]).await?;
    if (after - before) as usize != latencies.len() {
        return Err(format!("{} closes answered SUCCEEDED, {} applied", latencies.len(), after - before).into());
    }
    let used = next.load(Ordering::Relaxed);
    if used - first >= budget {
        return Err("the run used more orders than it took".into());
    }
    // The orders not used go back to the next run.
    root.execute("SELECT setval('bench.orders', $1)", &[&(used - 1).max(first)]).await?;
    Ok(Figures {
        calls: latencies.len(),
        seconds,
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
    })
}
