//! `toolgate confirm`, the built command: it signs the person's answer with the channel key and
//! submits it to the gate. Its exit status says whether the proposal was applied (0), refused or
//! declined (1), or not submitted at all (2); the ERP's rows say the same; no token is printed.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use toolgate_cli::db;
use toolgate_cli::fixture::{Lab, APP};

/// `toolgate confirm` with `args`, TOOLGATE_IDENTITY_TOKEN and TOOLGATE_DATABASE_URL set to `env`
/// (or removed).
fn confirm(args: &[String], identity_env: Option<&str>, database_env: Option<&str>) -> Output {
    let mut cmd = Command::new(toolgate());
    cmd.arg("confirm").args(args).env_remove("TOOLGATE_IDENTITY_TOKEN").env_remove("TOOLGATE_DATABASE_URL");
    if let Some(token) = identity_env {
        cmd.env("TOOLGATE_IDENTITY_TOKEN", token);
    }
    if let Some(url) = database_env {
        cmd.env("TOOLGATE_DATABASE_URL", url);
    }
    cmd.output().expect("toolgate runs")
}

/// The exit status and the outcome printed; checks that neither token reached either stream.
fn judged(out: &Output, identity: &str) -> (i32, Value) {
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // Every compact JWS the command holds starts with the base64url of '{"', as here: eyJ.
    for stream in [&stdout, &stderr] {
        assert!(!stream.contains(identity) && !stream.contains("eyJ"), "a token was printed: {stream}");
    }
    let code = out.status.code().expect("an exit status");
    // Shown if the test fails: an old command (no `confirm` yet) says so here.
    eprintln!("{} confirm: exit {code}; stderr: {stderr}", toolgate().display());
    let reply = if stdout.trim().is_empty() { Value::Null } else { serde_json::from_str(&stdout).expect(&stdout) };
    (code, reply)
}

async fn propose(lab: &Lab, app: &tokio_postgres::Client, order: &str, key: &str) -> String {
    let call = "SELECT toolgate.call($1, $2, 'request_close', $3)";
    let r = db::json(app, call, &[&lab.supervisor_a(), &"conv-cli", &close_args(order, key)]).await.unwrap();
    assert_eq!(outcome(&r), ("NEEDS_CONFIRMATION", "-"), "{r}");
    r["proposal"]["id"].as_str().unwrap().to_string()
}

/// The ERP's close requests for `order` (the row the tool writes when a close is applied).
async fn close_requests(root: &tokio_postgres::Client, order: &str) -> i64 {
    root.query_one("SELECT count(*) FROM maintenance.close_requests WHERE order_id = $1", &[&order])
        .await
        .unwrap()
        .get(0)
}

/// The options of one `toolgate confirm`: the answer, then where the tokens and the database come from.
fn answer(keys: &Path, proposal: &str, decision: &str, text: &str, more: &[&str]) -> Vec<String> {
    let keys = keys.to_str().expect("a UTF-8 path");
    let answer =
        ["--dir", keys, "--kid", "chan-shopping-a", "--proposal", proposal, "--decision", decision, "--text", text];
    answer.iter().chain(more).map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn confirm_command_applies_the_named_proposal_once_and_says_so_in_its_exit_status() {
    let lab = lab("cli_confirm").await;
    let root = lab.connect("postgres").await.unwrap();
    root.batch_execute(
        "INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected) VALUES \
         ('shopping-a', '921', 'open', true), ('shopping-a', '922', 'open', true)",
    )
    .await
    .unwrap();
    let app = lab.connect(APP).await.unwrap();
    let identity = lab.supervisor_a();
    let identity_file = lab.keys_dir.join("identity.jwt");
    std::fs::write(&identity_file, format!("{identity}\n")).unwrap();
    let conninfo = format!("host={} port={} user={APP} dbname={}", lab.server.host, lab.server.port, lab.dbname);
    let by_options = ["--identity-file", identity_file.to_str().unwrap(), "--database", &conninfo];
    let keys = &lab.keys_dir;

    let pid = propose(&lab, &app, "921", "cli-close-921").await;

    // A proposal id that names no proposal: refused, exit 1, nothing applied.
    let other = "6f1c0000-0000-4000-8000-000000000000";
    let wrong = confirm(&answer(keys, other, "approve", "sim", &by_options), None, None);
    let (code, reply) = judged(&wrong, &identity);
    assert_eq!((code, outcome(&reply)), (1, ("BLOCKED", "proposal_not_live")), "{reply}");
    assert_eq!(close_requests(&root, "921").await, 0);
    assert_eq!(effects(&root, "921").await, 0);

    // The right one, the identity token and the database from the environment: applied, exit 0.
    let right = confirm(&answer(keys, &pid, "approve", "sim", &[]), Some(&identity), Some(&conninfo));
    let (code, reply) = judged(&right, &identity);
    assert_eq!((code, outcome(&reply)), (0, ("SUCCEEDED", "-")), "{reply}");
    assert_eq!(reply["result"]["order_id"], "921");
    assert_eq!(close_requests(&root, "921").await, 1);
    let closing = "SELECT count(*) FROM maintenance.work_orders WHERE order_id = '921' AND status = 'close_requested'";
    assert_eq!(count(&root, closing).await, 1);

    // Answered again: the stored reply, exit 0, still one row.
    let again = confirm(&answer(keys, &pid, "approve", "sim", &by_options), None, None);
    let (code, reply) = judged(&again, &identity);
    assert_eq!((code, outcome(&reply), &reply["replayed"]), (0, ("SUCCEEDED", "-"), &Value::Bool(true)), "{reply}");
    assert_eq!(close_requests(&root, "921").await, 1);
    assert_eq!(effects(&root, "921").await, 1);

    // A decline: CANCELLED, exit 1, nothing applied.
    let declined = propose(&lab, &app, "922", "cli-close-922").await;
    let no = confirm(&answer(keys, &declined, "decline", "não", &by_options), None, None);
    let (code, reply) = judged(&no, &identity);
    assert_eq!((code, outcome(&reply)), (1, ("CANCELLED", "human_declined")), "{reply}");
    assert_eq!(close_requests(&root, "922").await, 0);

    // Not submitted: no identity token anywhere, or no server there. Exit 2, nothing on stdout.
    let no_identity = confirm(&answer(keys, &declined, "approve", "sim", &["--database", &conninfo]), None, None);
    assert_eq!(judged(&no_identity, &identity), (2, Value::Null));
    let nowhere = format!("host={} port=1 user={APP} dbname={}", lab.server.host, lab.dbname);
    let no_server = confirm(&answer(keys, &declined, "approve", "sim", &[]), Some(&identity), Some(&nowhere));
    assert_eq!(judged(&no_server, &identity), (2, Value::Null));

    assert_eq!(count(&root, "SELECT count(*) FROM maintenance.close_requests").await, 1);
}
