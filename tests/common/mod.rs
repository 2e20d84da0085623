//! What every client integration test needs: the running server `scripts/test.sh` started (with
//! pg_toolgate installed), and a fresh database loaded with seed 000's fixture per test.
// Allowed: every test binary includes this module and uses a different part of it.
#![allow(dead_code)]

pub mod mcp;
pub mod oidc;
pub mod outbox;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;
use toolgate_cli::db::Server;
use toolgate_cli::fixture::Lab;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the integration tests through scripts/test.sh, which starts the server")
    })
}

pub fn server() -> Server {
    Server { host: var("TOOLGATE_TEST_HOST"), port: var("TOOLGATE_TEST_PORT").parse().expect("a port") }
}

pub fn keys_dir() -> PathBuf {
    PathBuf::from(var("TOOLGATE_TEST_KEYS"))
}

/// A fresh database named after the test, with the fixture loaded.
pub async fn lab(name: &str) -> Lab {
    Lab::create(&server(), &format!("it_{name}"), &keys_dir()).await.expect("fixture loads")
}

pub fn close_args(order_id: &str, key: &str) -> Value {
    json!({"order_id": order_id, "reason": "Inspeção validada pelo supervisor", "idempotency_key": key})
}

pub fn outcome(reply: &Value) -> (&str, &str) {
    (reply["outcome"].as_str().unwrap_or_default(), reply["rule"].as_str().unwrap_or("-"))
}

pub async fn count(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.expect(sql).get(0)
}

/// The `reason` the newest audit row gives for its outcome ('' if it gives none).
pub async fn last_reason(root: &Client) -> String {
    root.query_one("SELECT coalesce(detail->>'reason', '') FROM toolgate.audit ORDER BY audit_id DESC LIMIT 1", &[])
        .await
        .expect("the newest audit row")
        .get(0)
}

/// The ERP's effects for `order_id`.
pub async fn effects(root: &Client, order_id: &str) -> i64 {
    root.query_one("SELECT count(*) FROM toolgate.effects WHERE target = $1", &[&order_id])
        .await
        .expect("effects")
        .get(0)
}

/// The SQLSTATE a statement failed with (panics if it succeeded).
pub async fn refused(client: &Client, sql: &str) -> SqlState {
    match client.batch_execute(sql).await {
        Ok(()) => panic!("{sql} succeeded"),
        Err(e) => e.code().cloned().unwrap_or_else(|| panic!("{sql}: {e}")),
    }
}

/// The `toolgate` command: TOOLGATE_BIN (scripts/test.sh exports it), or the one beside this test
/// (scripts/mutants.sh copies both into one directory), or cargo's target/debug/toolgate (cargo
/// does not build another package's binaries for a test: `cargo build -p toolgate-cli` first).
pub fn toolgate() -> PathBuf {
    if let Some(bin) = std::env::var_os("TOOLGATE_BIN").filter(|b| !b.is_empty()) {
        return bin.into();
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let candidates: Vec<PathBuf> = exe.ancestors().skip(1).take(2).map(|dir| dir.join("toolgate")).collect();
    candidates.iter().find(|p| p.is_file()).cloned().unwrap_or_else(|| {
        panic!("no toolgate command in {candidates:?}: build it (cargo build -p toolgate-cli) or set TOOLGATE_BIN")
    })
}

/// The server's `pg_ctl`, from its own installation (found from the running postmaster's executable).
pub fn pg_ctl_of(data: &Path) -> PathBuf {
    let pid = std::fs::read_to_string(data.join("postmaster.pid")).expect("the server is running");
    let pid = pid.lines().next().unwrap().trim().to_string();
    let postgres = std::fs::read_link(format!("/proc/{pid}/exe")).expect("the postmaster's executable");
    postgres.parent().unwrap().join("pg_ctl")
}

/// `pg_ctl -D data args`, as the server's own user.
pub fn pg_ctl(bin: &Path, data: &Path, args: &[&str]) {
    let status = Command::new("runuser")
        .args(["-u", "postgres", "--", "env", "-u", "RUST_BACKTRACE"])
        .arg(bin)
        .arg("-D")
        .arg(data)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("pg_ctl runs");
    assert!(status.success(), "pg_ctl {args:?}");
}
