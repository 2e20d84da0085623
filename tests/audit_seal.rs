//! `toolgate audit seal` and `toolgate audit export`, the built command, against a real server.
//! The seal: what real calls wrote, sealed as a login of toolgate_operator into checkpoints
//! verify_audit then finds whole; an agent's login and an unknown tenant refused (exit 2, nothing
//! printed); a second run seals only what is new. The export: as an auditor's login, every sealed
//! row and checkpoint, checked outside the database as a copy's keeper would (each leaf the
//! SHA-256 of its row's text, each root of its leaves, each signature by its key, each checkpoint
//! chained to the one before); a second run with the state file writes only what is new; CSV
//! the same lines. With --purge, the seal then removes what is past a tenant's retention. What the
//! seal guarantees under concurrency is the isolation spec seal_waits'.

mod common;

use common::*;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::process::{Command, Output};
use toolgate_cli::db;
use toolgate_cli::fixture::{Lab, APP};

/// `toolgate audit SUBCOMMAND` with `args`, TOOLGATE_DATABASE_URL removed.
fn audit(subcommand: &str, args: &[&str]) -> Output {
    Command::new(toolgate())
        .args(["audit", subcommand])
        .args(args)
        .env_remove("TOOLGATE_DATABASE_URL")
        .output()
        .expect("toolgate runs")
}

fn seal(args: &[&str]) -> Output {
    audit("seal", args)
}

/// The audit's partitions made, as printed first: (name, month, rows moved) per line.
fn partitions_made(out: &Output) -> Vec<(String, String, i64)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.strip_prefix("partition\t"))
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 3, "name, month, rows moved: {line}");
            (f[0].to_string(), f[1].to_string(), f[2].parse().unwrap())
        })
        .collect()
}

/// The checkpoints printed: (tenant, checkpoint, rows) per line.
fn printed(out: &Output) -> Vec<(String, i64, i64)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| !line.starts_with("partition\t"))
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 4, "tenant, checkpoint, rows, end: {line}");
            (f[0].to_string(), f[1].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect()
}

fn conninfo(lab: &Lab, user: &str) -> String {
    format!("host={} port={} user={user} dbname={}", lab.server.host, lab.server.port, lab.dbname)
}

#[tokio::test]
async fn the_seal_command_seals_what_calls_wrote_and_verify_finds_it_whole() {
    let lab = lab("audit_seal").await;
    let root = lab.connect("postgres").await.unwrap();
    root.batch_execute(
        "DO $$ BEGIN CREATE ROLE toolgate_seal_it LOGIN IN ROLE toolgate_operator; \
         EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
         DO $$ BEGIN CREATE ROLE toolgate_export_it LOGIN IN ROLE toolgate_auditor; \
         EXCEPTION WHEN duplicate_object THEN NULL; END $$",
    )
    .await
    .unwrap();
    let app = lab.connect(APP).await.unwrap();
    for n in 0..4 {
        let key = format!("seal-it-{n}");
        db::read_order(&app, &lab.supervisor_a(), &format!("90{n}")).await.unwrap();
        let call = "SELECT toolgate.call($1, 'conv-seal', 'request_close', $2)";
        db::json(&app, call, &[&lab.supervisor_a(), &close_args("1", &key)]).await.unwrap();
    }
    let written = count(&root, "SELECT count(*) FROM toolgate.audit WHERE tenant_id = 'shopping-a'").await;
    assert!(written >= 8, "{written} audit rows");

    // The agent's login may not seal: exit 2, the reason on stderr, nothing sealed.
    let refused = seal(&["--database", &conninfo(&lab, APP)]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("permission denied"), "{refused:?}");
    assert!(refused.stdout.is_empty());
    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.audit_checkpoints").await, 0);

    // On-call's login seals every tenant: shopping-a's rows in checkpoints of at most 5.
    let operator = conninfo(&lab, "toolgate_seal_it");
    let sealed = seal(&["--database", &operator, "--batch", "5"]);
    assert_eq!(sealed.status.code(), Some(0), "{sealed:?}");
    // First the audit's partitions: this month's, which receives every row written so far (all
    // in the default partition until now), and the next two months'.
    let made = partitions_made(&sealed);
    let month = db::json(&root, "SELECT to_jsonb(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM'))", &[]).await.unwrap();
    let all_rows = count(&root, "SELECT count(*) FROM toolgate.audit").await;
    assert_eq!(made.len(), 3, "{made:?}");
    assert_eq!(
        (made[0].0.replace('_', "-"), Some(made[0].1.as_str()), made[0].2),
        (format!("toolgate.audit-{}", made[0].1), month.as_str(), all_rows),
        "{made:?}"
    );
    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.audit_default").await, 0);
    let lines = printed(&sealed);
    let shopping_a: Vec<_> = lines.iter().filter(|(t, _, _)| t == "shopping-a").collect();
    assert_eq!(shopping_a.iter().map(|(_, _, rows)| rows).sum::<i64>(), written, "{lines:?}");
    assert!(shopping_a.iter().all(|(_, _, rows)| *rows <= 5) && shopping_a[0].1 == 1, "{lines:?}");

    // Each tenant verifies whole; nothing left to seal until a call writes again.
    let tampered = "SELECT count(*) FROM toolgate.tenants t, toolgate.verify_audit(t.tenant_id) v \
                    WHERE v.status NOT IN ('verified', 'empty')";
    assert_eq!(count(&root, tampered).await, 0);
    let again = seal(&["--database", &operator, "--tenant", "shopping-a"]);
    assert_eq!((again.status.code(), printed(&again), partitions_made(&again)), (Some(0), vec![], vec![]));
    db::read_order(&app, &lab.supervisor_a(), "901").await.unwrap();
    let next = seal(&["--database", &operator, "--tenant", "shopping-a"]);
    let after = shopping_a.last().unwrap().1 + 1;
    assert_eq!(printed(&next), vec![("shopping-a".to_string(), after, 1)]);

    // An unknown tenant: exit 2, said on stderr.
    let unknown = seal(&["--database", &operator, "--tenant", "nobody"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown tenant nobody"), "{unknown:?}");

    // The export, as an auditor: every sealed row once, then its checkpoint, each checked here.
    let auditor = conninfo(&lab, "toolgate_export_it");
    let state = lab.keys_dir.join("export-state.json");
    let _ = std::fs::remove_file(&state);
    let state_arg = state.to_str().unwrap();
    let first = audit("export", &["--database", &auditor, "--state", state_arg]);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let lines = checked_export(&String::from_utf8_lossy(&first.stdout));
    let sealed_rows = count(&root, "SELECT sum(rows)::bigint FROM toolgate.audit_checkpoints").await;
    let sealed_checkpoints = count(&root, "SELECT count(*) FROM toolgate.audit_checkpoints").await;
    assert_eq!(lines, (sealed_checkpoints as usize, sealed_rows as usize));
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(kept["shopping-a"], after, "{kept}");

    // Nothing new: nothing written. A call sealed since: only its checkpoint and row.
    let none = audit("export", &["--database", &auditor, "--state", state_arg]);
    assert_eq!((none.status.code(), none.stdout.len()), (Some(0), 0), "{none:?}");
    db::read_order(&app, &lab.supervisor_a(), "902").await.unwrap();
    assert_eq!(printed(&seal(&["--database", &operator, "--tenant", "shopping-a"])).len(), 1);
    let more = audit("export", &["--database", &auditor, "--state", state_arg]);
    let out = String::from_utf8_lossy(&more.stdout);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains(&format!("\"checkpoint\":{}", after + 1)), "{out}");

    // CSV, one tenant from the beginning: a header, then the same lines.
    let csv = audit("export", &["--database", &auditor, "--format", "csv", "--tenant", "shopping-a", "--after", "0"]);
    let text = String::from_utf8_lossy(&csv.stdout);
    let header = text.lines().next().unwrap();
    assert!(header.starts_with("type,tenant_id,checkpoint,audit_id,at,"), "{header}");
    let tenant_rows =
        count(&root, "SELECT sum(rows)::bigint FROM toolgate.audit_checkpoints WHERE tenant_id = 'shopping-a'").await;
    assert_eq!(text.lines().filter(|l| l.starts_with("row,shopping-a,")).count(), tenant_rows as usize);
    assert_eq!(text.lines().filter(|l| l.starts_with("checkpoint,shopping-a,")).count() as i64, after + 1);

    // The agent's login may not export.
    let refused = audit("export", &["--database", &conninfo(&lab, APP)]);
    assert_eq!((refused.status.code(), refused.stdout.len()), (Some(2), 0), "{refused:?}");

    // The timer's run with --purge, once shopping-a keeps its audit one second: sealed periods
    // past it removed, every row of them, with a signed record verify_audit reports as purged.
    root.batch_execute("SELECT toolgate.set_retention('shopping-a', '1 second')").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let purged = seal(&["--database", &operator, "--tenant", "shopping-a", "--purge"]);
    assert_eq!(purged.status.code(), Some(0), "{purged:?}");
    let out = String::from_utf8_lossy(&purged.stdout);
    assert_eq!(out, format!("shopping-a\tpurged\t{}\t{tenant_rows}\n", after + 1));
    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.audit WHERE tenant_id = 'shopping-a'").await, 0);
    let purge_records = "SELECT count(*) FROM toolgate.verify_audit('shopping-a') v WHERE v.status = 'purged'";
    assert_eq!(count(&root, purge_records).await, 1);
    let tampered = "SELECT count(*) FROM toolgate.tenants t, toolgate.verify_audit(t.tenant_id) v \
                    WHERE v.status NOT IN ('verified', 'empty', 'purged')";
    assert_eq!(count(&root, tampered).await, 0);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Check an export as its keeper would, with nothing but the lines: each row's leaf is the
/// SHA-256 of its text, each checkpoint's root the SHA-256 of its rows' leaves in order, its
/// signature its key's over its message, and its `prev` the SHA-256 of the tenant's previous
/// message. Returns (checkpoints, rows).
fn checked_export(out: &str) -> (usize, usize) {
    let (mut checkpoints, mut rows) = (0, 0);
    let mut leaves: Vec<u8> = Vec::new();
    let mut previous: std::collections::HashMap<String, String> = Default::default();
    for line in out.lines() {
        let v: Value = serde_json::from_str(line).expect(line);
        let tenant = v["tenant_id"].as_str().unwrap().to_string();
        match v["type"].as_str() {
            Some("row") => {
                let leaf = Sha256::digest(v["canonical"].as_str().unwrap().as_bytes());
                assert_eq!(hex(&leaf), v["leaf"].as_str().unwrap(), "{line}");
                let canonical: Value = serde_json::from_str(v["canonical"].as_str().unwrap()).unwrap();
                assert_eq!(canonical[1], v["audit_id"], "the text is the row's: {line}");
                leaves.extend_from_slice(&leaf);
                rows += 1;
            }
            Some("checkpoint") => {
                assert_eq!(hex(&Sha256::digest(&leaves)), v["root"].as_str().unwrap(), "{line}");
                assert_eq!(leaves.len() / 32, v["rows"].as_u64().unwrap() as usize, "{line}");
                let message = v["message"].as_str().unwrap();
                let signed = toolgate_core::seal::verify(
                    &unhex(v["public_key"].as_str().unwrap()),
                    message.as_bytes(),
                    &unhex(v["signature"].as_str().unwrap()),
                );
                assert!(signed, "{line}");
                assert_eq!(v["prev"].as_str().map(str::to_string), previous.get(&tenant).cloned(), "{line}");
                previous.insert(tenant, hex(&Sha256::digest(message.as_bytes())));
                leaves.clear();
                checkpoints += 1;
            }
            other => panic!("a line of type {other:?}: {line}"),
        }
    }
    assert!(leaves.is_empty(), "rows after the last checkpoint");
    (checkpoints, rows)
}
