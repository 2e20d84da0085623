//! Issue 28: toolgate_admin is a role of the whole cluster, so membership alone would let the DBA
//! of one database administer the gate in every other. Each database lists the roles whose
//! members administer it (`toolgate.administrators`); a change to the configuration by anyone
//! else is refused, whatever function or grant it comes through. Two databases of one cluster,
//! each with a DBA of its own.

mod common;

use common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;
use toolgate_cli::fixture::{DBA, ONCALL};

/// A login `name`, a member of toolgate_admin and of the group role `group` (made if missing;
/// roles are cluster-wide, so idempotently).
async fn dba(root: &Client, name: &str, group: &str) {
    root.batch_execute(&format!(
        "DO $$ BEGIN CREATE ROLE {group} NOLOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$; \
         DO $$ BEGIN CREATE ROLE {name} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$; \
         SET client_min_messages = error; \
         GRANT toolgate_admin TO {name}; GRANT {group} TO {name}; \
         RESET client_min_messages"
    ))
    .await
    .unwrap_or_else(|e| panic!("login {name}: {e}"));
}

/// The message of a statement's error, asserting its SQLSTATE.
async fn refused_with(client: &Client, sql: &str, state: SqlState) -> String {
    match client.batch_execute(sql).await {
        Ok(()) => panic!("{sql} succeeded"),
        Err(e) => {
            assert_eq!(e.code(), Some(&state), "{sql}: {e}");
            e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default()
        }
    }
}

#[tokio::test]
async fn each_database_has_administrators_of_its_own() {
    let one = lab("administrators_one").await;
    let two = lab("administrators_two").await;
    let root_one = one.connect("postgres").await.expect("superuser, database one");
    let root_two = two.connect("postgres").await.expect("superuser, database two");
    dba(&root_one, "it_dba_one", "it_erp_one_admins").await;
    dba(&root_one, "it_dba_two", "it_erp_two_admins").await;

    // Installed, the list is toolgate_admin itself: any member administers, as before.
    assert_eq!(
        count(&root_one, "SELECT count(*) FROM toolgate.administrators WHERE role_name = 'toolgate_admin'").await,
        1
    );
    let alice = one.connect("it_dba_one").await.expect("it_dba_one, database one");
    alice.batch_execute("SELECT toolgate.add_tenant('adm-before', 'Before the list')").await.expect("as before");

    // A shared cluster: each database names its own DBAs' role instead.
    for (root, group) in [(&root_one, "it_erp_one_admins"), (&root_two, "it_erp_two_admins")] {
        root.batch_execute(&format!(
            "SELECT toolgate.add_administrator('{group}'); SELECT toolgate.remove_administrator('toolgate_admin')"
        ))
        .await
        .expect("the owner changes the list");
    }
    let bob = two.connect("it_dba_two").await.expect("it_dba_two, database two");
    alice.batch_execute("SELECT toolgate.add_tenant('adm-one', 'Database one')").await.expect("alice administers one");
    bob.batch_execute("SELECT toolgate.add_tenant('adm-two', 'Database two')").await.expect("bob administers two");

    // Each is refused in the other's database, through every kind of change, and nothing is left.
    let alice_in_two = two.connect("it_dba_one").await.expect("it_dba_one, database two");
    let bob_in_one = one.connect("it_dba_two").await.expect("it_dba_two, database one");
    for (client, db) in [(&alice_in_two, &two.dbname), (&bob_in_one, &one.dbname)] {
        let message =
            refused_with(client, "SELECT toolgate.add_tenant('adm-x', 'Not mine')", SqlState::INSUFFICIENT_PRIVILEGE)
                .await;
        assert!(message.contains(&format!("does not administer the gate in database {db}")), "{message}");
        for sql in [
            "SELECT toolgate.set_policy('shopping-a', 'request_close', false, ARRAY['supervisor'], 1)",
            "SELECT toolgate.revoke_key('idp-shopping-a')",
            "SELECT toolgate.set_writes_enabled(true)",
        ] {
            refused_with(client, sql, SqlState::INSUFFICIENT_PRIVILEGE).await;
        }
    }
    for root in [&root_one, &root_two] {
        assert_eq!(count(root, "SELECT count(*) FROM toolgate.tenants WHERE tenant_id = 'adm-x'").await, 0);
        assert_eq!(
            count(root, "SELECT count(*) FROM toolgate.keys WHERE kid = 'idp-shopping-a' AND revoked_at IS NOT NULL")
                .await,
            0
        );
    }
    assert_eq!(count(&root_one, "SELECT count(*) FROM toolgate.tenants WHERE tenant_id LIKE 'adm-%'").await, 2);
    assert_eq!(count(&root_two, "SELECT count(*) FROM toolgate.tenants WHERE tenant_id LIKE 'adm-%'").await, 1);

    // On-call may still turn writes off anywhere its role reaches; turning them on is an
    // administrator's. The fixture's DBA login, a member of toolgate_admin only, no longer
    // administers database one.
    let oncall = one.connect(ONCALL).await.expect("on-call");
    oncall.batch_execute("SELECT toolgate.set_writes_enabled(false)").await.expect("off");
    let fixture_dba = one.connect(DBA).await.expect("the fixture's DBA");
    refused_with(&fixture_dba, "SELECT toolgate.set_writes_enabled(true)", SqlState::INSUFFICIENT_PRIVILEGE).await;
    alice.batch_execute("SELECT toolgate.set_writes_enabled(true)").await.expect("alice turns writes on");
    // On-call's refusal names who may, not toolgate_admin, which no longer administers here.
    let message =
        refused_with(&oncall, "SELECT toolgate.set_writes_enabled(true)", SqlState::INSUFFICIENT_PRIVILEGE).await;
    assert_eq!(message, format!("only an administrator of the gate in database {} may turn writes on", one.dbname));

    // Only the owner changes the list; removing a role takes its members' administration away.
    refused_with(&alice, "SELECT toolgate.add_administrator('toolgate_admin')", SqlState::INSUFFICIENT_PRIVILEGE).await;
    root_one.batch_execute("SELECT toolgate.remove_administrator('it_erp_one_admins')").await.expect("removed");
    refused_with(&alice, "SELECT toolgate.add_tenant('adm-after', 'After')", SqlState::INSUFFICIENT_PRIVILEGE).await;
    let message = refused_with(
        &root_one,
        "SELECT toolgate.remove_administrator('it_erp_one_admins')",
        SqlState::UNDEFINED_OBJECT,
    )
    .await;
    assert!(message.contains("does not administer"), "{message}");
}
