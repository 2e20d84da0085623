//! A `toolgate mcp --http` process for the tests that drive it over HTTP, and what they send it.

use serde_json::{json, Value};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolgate_cli::fixture::APP;
use toolgate_erp_client::{self as client, Reply};

use super::toolgate;

/// A `toolgate mcp --http` process on a free loopback port, killed when dropped.
pub struct Mcp {
    child: Child,
    pub addr: SocketAddr,
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Mcp {
    pub async fn start(env: &[(&str, String)]) -> Mcp {
        Mcp::start_with(&[], env).await
    }

    /// With more arguments after `--http ADDR` (such as `--listen`).
    pub async fn start_with(args: &[&str], env: &[(&str, String)]) -> Mcp {
        Mcp::start_on(free_addr(), args, env).await
    }

    /// On `addr` (free), with more arguments and the environment `env` (which may name its own
    /// `TOOLGATE_RESOURCE_URL`).
    pub async fn start_on(addr: SocketAddr, args: &[&str], env: &[(&str, String)]) -> Mcp {
        Mcp::spawn(addr, args, env, Stdio::inherit()).await
    }

    /// Its log lines (standard error) written to `log`.
    pub async fn start_logging(env: &[(&str, String)], log: &std::path::Path) -> Mcp {
        let file = std::fs::File::create(log).unwrap();
        Mcp::spawn(free_addr(), &[], env, Stdio::from(file)).await
    }

    async fn spawn(addr: SocketAddr, args: &[&str], env: &[(&str, String)], stderr: Stdio) -> Mcp {
        let child = Command::new(toolgate())
            .args(["mcp", "--http", &addr.to_string()])
            .args(args)
            .env("TOOLGATE_RESOURCE_URL", format!("http://{addr}/mcp"))
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("toolgate mcp starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(Instant::now() < deadline, "toolgate mcp --http never listened on {addr}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Mcp { child, addr }
    }

    /// The server's exit status, once it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn resource(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// One JSON-RPC request to /mcp with `token` (and the conversation header).
    pub async fn post(&self, token: &str, body: Value) -> Reply {
        post_to(self.addr, token, "sr3-conversation", &body, &[], Duration::from_secs(30)).await.unwrap()
    }

    pub async fn get(&self, path: &str) -> Reply {
        get(self.addr, path).await
    }
}

/// One JSON-RPC request to `addr`'s /mcp as a host sends it: `token`, `conversation`, and any
/// `more` headers; waits at most `wait`.
pub async fn post_to(
    addr: SocketAddr,
    token: &str,
    conversation: &str,
    body: &Value,
    more: &[(&str, &str)],
    wait: Duration,
) -> Result<Reply, String> {
    post_as_host(addr, token, Some(conversation), body, more, wait).await
}

/// The same, with the conversation header only when there is one (a stock host sends none).
pub async fn post_as_host(
    addr: SocketAddr,
    token: &str,
    conversation: Option<&str>,
    body: &Value,
    more: &[(&str, &str)],
    wait: Duration,
) -> Result<Reply, String> {
    let bearer = format!("Bearer {token}");
    let bytes = body.to_string().into_bytes();
    let mut headers = vec![
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    headers.extend(conversation.map(|c| ("Toolgate-Conversation", c)));
    headers.extend_from_slice(more);
    client::call(addr, "POST", "/mcp", &headers, Some(&bytes), wait).await.map_err(|e| format!("no answer: {e:?}"))
}

/// `GET path` of `addr`.
pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    client::call(addr, "GET", path, &[], None, Duration::from_secs(10)).await.unwrap()
}

/// A free loopback address.
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// A `tools/call` of `name` with `arguments`.
pub fn tool_call(name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
}

pub fn ping() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})
}

pub fn database(lab: &toolgate_cli::fixture::Lab) -> String {
    format!("host={} port={} user={APP} dbname={}", lab.server.host, lab.server.port, lab.dbname)
}
