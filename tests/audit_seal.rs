//! `toolgate seal`, the built command, against a real server: it seals what real calls wrote,
//! as a login of toolgate_operator, into checkpoints verify_audit then finds whole; it refuses
//! an agent's login and an unknown tenant (exit 2, nothing printed), and a second run seals only
//! what is new. What the seal guarantees under concurrency is the isolation spec seal_waits'.

mod common;

use common::*;
use std::process::{Command, Output};
use toolgate_cli::db;
use toolgate_cli::fixture::{Lab, APP};

/// `toolgate seal` with `args`, TOOLGATE_DATABASE_URL removed.
fn seal(args: &[&str]) -> Output {
    Command::new(toolgate()).arg("seal").args(args).env_remove("TOOLGATE_DATABASE_URL").output().expect("toolgate runs")
}

/// The checkpoints printed: (tenant, checkpoint, rows) per line.
fn printed(out: &Output) -> Vec<(String, i64, i64)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
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
    let lines = printed(&sealed);
    let shopping_a: Vec<_> = lines.iter().filter(|(t, _, _)| t == "shopping-a").collect();
    assert_eq!(shopping_a.iter().map(|(_, _, rows)| rows).sum::<i64>(), written, "{lines:?}");
    assert!(shopping_a.iter().all(|(_, _, rows)| *rows <= 5) && shopping_a[0].1 == 1, "{lines:?}");

    // Each tenant verifies whole; nothing left to seal until a call writes again.
    let tampered = "SELECT count(*) FROM toolgate.tenants t, toolgate.verify_audit(t.tenant_id) v \
                    WHERE v.status NOT IN ('verified', 'empty')";
    assert_eq!(count(&root, tampered).await, 0);
    let again = seal(&["--database", &operator, "--tenant", "shopping-a"]);
    assert_eq!((again.status.code(), printed(&again)), (Some(0), vec![]));
    db::read_order(&app, &lab.supervisor_a(), "901").await.unwrap();
    let next = seal(&["--database", &operator, "--tenant", "shopping-a"]);
    let after = shopping_a.last().unwrap().1 + 1;
    assert_eq!(printed(&next), vec![("shopping-a".to_string(), after, 1)]);

    // An unknown tenant: exit 2, said on stderr.
    let unknown = seal(&["--database", &operator, "--tenant", "nobody"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown tenant nobody"), "{unknown:?}");
}
