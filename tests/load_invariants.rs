//! The load's invariants are checks that can fail. A short load over concurrent connections holds
//! them all; then each is broken by hand in the tables — in a transaction rolled back afterwards —
//! and must report a violation, and a client that was told something else than its audit row says
//! must too.

mod common;

use common::*;
use toolgate_cli::load::journal::Fate;
use toolgate_cli::load::{self, check};

/// Each invariant, and a change to the tables that breaks it.
const BREAKS: [(&str, &str); 10] = [
    (
        "every committed call left exactly one audit row",
        "ALTER TABLE toolgate.audit DISABLE TRIGGER audit_no_update_or_delete;
         DELETE FROM toolgate.audit WHERE audit_id = (SELECT max(audit_id) FROM toolgate.audit)",
    ),
    (
        "no audit row or effect from a call that rolled back, nor from no call",
        "INSERT INTO toolgate.audit (kind, tenant_id, tool, outcome, duration_us)
         VALUES ('read', 'shopping-b', 'read_order', 'SUCCEEDED', 1)",
    ),
    (
        "every effect was made by a call that reported it (or whose reply was lost)",
        "INSERT INTO maintenance.close_requests (tenant_id, order_id, reason, requested_by, idempotency_key)
         SELECT tenant_id, order_id, 'not through the gate', 'nobody', 'forged-key-0001'
           FROM maintenance.work_orders WHERE tenant_id = 'shopping-b' LIMIT 1",
    ),
    (
        "every success reported made its effect",
        "DELETE FROM maintenance.close_requests WHERE request_id = \
         (SELECT request_id FROM maintenance.close_requests ORDER BY requested_at, request_id LIMIT 1)",
    ),
    (
        "effects equal the distinct successful keys",
        "DELETE FROM maintenance.purchases WHERE purchase_id = \
         (SELECT purchase_id FROM maintenance.purchases ORDER BY purchased_at, purchase_id LIMIT 1)",
    ),
    (
        "the ledger settled exactly the effects' keys as SUCCEEDED, and holds no reservation",
        "UPDATE toolgate.ledger SET state = 'reserved', reply = NULL
          WHERE (tenant_id, tool, idempotency_key) = (SELECT tenant_id, tool, idempotency_key FROM toolgate.ledger
                                                        WHERE state = 'settled' LIMIT 1)",
    ),
    (
        "no quota exceeded, and each quota counts exactly the calls it admitted",
        "UPDATE toolgate.quota_usage SET used = used + 1
          WHERE (tenant_id, conversation_id, tool) = (SELECT tenant_id, conversation_id, tool FROM toolgate.quota_usage LIMIT 1)",
    ),
    (
        "no budget exceeded, and each cost centre spent exactly its purchases",
        "UPDATE maintenance.cost_centers SET spent = spent + 1 WHERE cost_center = 'CC-B-BIG'",
    ),
    (
        "no proposal both applied and superseded (or declined, expired, live)",
        "UPDATE toolgate.proposals SET status = 'superseded'
          WHERE proposal_id = (SELECT proposal_id FROM toolgate.proposals WHERE status = 'applied' LIMIT 1)",
    ),
    (
        "at most one live proposal per conversation",
        "DROP INDEX toolgate.proposals_one_live_per_conversation;
         UPDATE toolgate.proposals SET status = 'live' WHERE (tenant_id, conversation_id) =
             (SELECT tenant_id, conversation_id FROM toolgate.proposals GROUP BY 1, 2 HAVING count(*) > 1 LIMIT 1)",
    ),
];

#[tokio::test]
async fn every_load_invariant_fails_when_its_rows_are_broken() {
    let opts = load::Options {
        server: server(),
        dbname: "it_load_invariants".into(),
        keys_dir: keys_dir(),
        connections: 12,
        calls: 500,
        seed: 7,
        duration: None,
        crash: false,
        journal: None,
    };
    let report = load::run(&opts).await.expect("the load runs");
    assert_eq!(report.violations, 0, "a load on an intact gate holds every invariant");
    let root = server().connect("postgres", &opts.dbname).await.unwrap();

    for (name, sql) in BREAKS {
        root.batch_execute("BEGIN").await.unwrap();
        root.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        let findings = check::tables(&root, &report.calls).await.unwrap();
        root.batch_execute("ROLLBACK").await.unwrap();
        let finding = findings.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no invariant {name:?}"));
        assert!(finding.violations > 0, "{name:?} still held after: {sql}");
    }

    // A client told SUCCEEDED where its audit row says otherwise.
    let mut calls = report.calls.clone();
    let told = calls.iter_mut().find(|c| c.outcome() == "BLOCKED").expect("the mix has denials");
    if let Fate::Replied(reply) = &mut told.fate {
        reply["outcome"] = "SUCCEEDED".into();
    }
    let findings = check::tables(&root, &calls).await.unwrap();
    let says = findings.iter().find(|f| f.name == "every audit row says what its call was told").unwrap();
    assert!(says.violations > 0);

    // And every invariant holds again on the untouched tables.
    let findings = check::tables(&root, &report.calls).await.unwrap();
    assert!(findings.iter().all(|f| f.violations == 0));
}
