//! Finding F2: the application's login could fill the cluster's shared lock table (advisory locks,
//! temporary tables) and take every connection slot. `toolgate.harden_agent_login` takes the
//! unbounded ways away from one agent login and bounds the rest; `toolgate.hardening_report` says
//! how a login stands (docs/hardening.md).
//!
//! Each test hardens a login of its own, made here (roles are cluster-wide, so idempotently, and
//! reset to no limit and no defaults first): the fixture's shared `toolgate_app` is never
//! hardened, and tests running side by side never share a connection limit.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;
use toolgate_cli::db;
use toolgate_cli::fixture::{Lab, APP, DBA};
use toolgate_cli::keys;

/// A login role `name` (LOGIN, no attribute, no connection limit, no defaults), a member of
/// toolgate_agent when `agent`, of no toolgate role otherwise.
async fn login(root: &Client, name: &str, agent: bool) {
    root.batch_execute(&format!(
        "DO $$ BEGIN CREATE ROLE {name} LOGIN; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$; \
         ALTER ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOREPLICATION CONNECTION LIMIT -1; \
         ALTER ROLE {name} RESET ALL; \
         SET client_min_messages = error; \
         {membership}; \
         RESET client_min_messages",
        membership = if agent {
            format!("GRANT toolgate_agent TO {name}")
        } else {
            format!("REVOKE toolgate_agent FROM {name}")
        }
    ))
    .await
    .unwrap_or_else(|e| panic!("login {name}: {e}"));
}

/// A connection as `login` to the lab's database, or the error the server gave.
async fn connect(lab: &Lab, login: &str) -> Result<Client, tokio_postgres::Error> {
    connect_to(lab, login, &lab.dbname).await
}

async fn connect_to(lab: &Lab, login: &str, dbname: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::Config::new()
        .host(&lab.server.host)
        .port(lab.server.port)
        .user(login)
        .dbname(dbname)
        .application_name("toolgate-hardening")
        .connect(tokio_postgres::NoTls)
        .await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// `toolgate.harden_agent_login(login, …)` as the extension owner: the statements it ran.
async fn harden(root: &Client, login: &str, extra: &str) -> Vec<String> {
    root.query(&format!("SELECT toolgate.harden_agent_login('{login}'{extra})"), &[])
        .await
        .unwrap_or_else(|e| panic!("harden {login}: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// `toolgate.hardening_report(login)`: check name → (ok, detail).
async fn report(client: &Client, login: &str) -> BTreeMap<String, (bool, String)> {
    client
        .query("SELECT check_name, ok, detail FROM toolgate.hardening_report($1::text::regrole)", &[&login])
        .await
        .unwrap_or_else(|e| panic!("report {login}: {e}"))
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

const CHECKS: [&str; 9] = [
    "advisory_lock_functions",
    "connection_limit",
    "idle_in_transaction_session_timeout",
    "large_objects",
    "lock_table",
    "other_databases",
    "schema_create",
    "statement_timeout",
    "temporary_tables",
];

/// One call of every advisory-lock function of pg_catalog, every overload, as the server lists them.
async fn advisory_calls(root: &Client) -> Vec<String> {
    let rows = root
        .query(
            "SELECT p.proname::text, pg_get_function_identity_arguments(p.oid) FROM pg_proc p \
             WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname ~ '^pg_(try_)?advisory_(xact_)?lock(_shared)?$' \
             ORDER BY 1, 2",
            &[],
        )
        .await
        .unwrap();
    let calls: Vec<String> = rows
        .iter()
        .map(|r| {
            let (name, args): (String, String) = (r.get(0), r.get(1));
            let values = match args.as_str() {
                "bigint" => "7::bigint",
                "integer, integer" => "7::integer, 8::integer",
                other => panic!("{name}({other}): an overload this test does not know"),
            };
            format!("SELECT pg_catalog.{name}({values})")
        })
        .collect();
    assert_eq!(calls.len(), 16, "{calls:?}");
    calls
}

/// The SQLSTATE a connection attempt failed with (panics if it succeeded).
fn connect_refused(result: Result<Client, tokio_postgres::Error>) -> SqlState {
    match result {
        Ok(_) => panic!("the connection was accepted"),
        Err(e) => e.code().cloned().unwrap_or_else(|| panic!("{e}")),
    }
}

/// Connect as `login`, retrying for a few seconds while the server still counts a connection that
/// was just closed against the role's limit.
async fn connect_eventually(lab: &Lab, login: &str) -> Client {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match connect(lab, login).await {
            Ok(c) => return c,
            Err(e) if e.code() == Some(&SqlState::TOO_MANY_CONNECTIONS) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("{login}: {e}"),
        }
    }
}

/// `SHOW setting` on `client`.
async fn show(client: &Client, setting: &str) -> String {
    client.query_one(&format!("SHOW {setting}"), &[]).await.unwrap().get(0)
}

/// One boolean.
async fn flag(client: &Client, sql: &str) -> bool {
    client.query_one(sql, &[]).await.expect(sql).get(0)
}

/// The number before `marker` in `text` ("… × up to 412 relation locks …").
fn number_before(text: &str, marker: &str) -> i64 {
    let head = &text[..text.find(marker).unwrap_or_else(|| panic!("{marker:?} not in {text:?}"))];
    let digits: String = head.trim_end().chars().rev().take_while(|c| c.is_ascii_digit()).collect();
    digits
        .chars()
        .rev()
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number before {marker:?} in {text:?}"))
}

/// A supervisor's close of 742 proposed and confirmed through the gate on `client`. The entry
/// points run as the extension owner, whose privileges the step leaves alone (the gate may take
/// advisory locks of its own inside them).
async fn close_742(lab: &Lab, client: &Client, key: &str) {
    let id = lab.supervisor_a();
    let proposal = db::request_close(client, &id, &format!("conv-{key}"), &close_args("742", key)).await.unwrap();
    assert_eq!(outcome(&proposal), ("NEEDS_CONFIRMATION", "-"), "{proposal}");
    let pid = proposal["proposal"]["id"].as_str().unwrap();
    let yes = keys::confirmation(&lab.a.channel, pid, "approve", "sim", keys::now(), "typed");
    let done = db::confirm(client, &id, &yes).await.unwrap();
    assert_eq!(outcome(&done), ("SUCCEEDED", "-"), "{done}");
}

#[tokio::test]
async fn hardened_login_loses_advisory_locks_and_temp_other_roles_keep_them() {
    let lab = lab("hardening_locks").await;
    let root = lab.connect("postgres").await.unwrap();
    login(&root, "hardening_app", true).await;
    login(&root, "hardening_other", false).await;
    login(&root, "hardening_late", false).await;
    let calls = advisory_calls(&root).await;

    // Before: the reviewer's attack, bounded. One statement takes 1000 session locks (the real
    // one took every free entry of the lock table); a fair share is max_locks_per_transaction.
    let app = connect(&lab, "hardening_app").await.unwrap();
    let taken = count(&app, "SELECT count(pg_advisory_lock(2, g)) FROM generate_series(1, 1000) g").await;
    let held =
        count(&app, "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'").await;
    let fair = count(&app, "SELECT current_setting('max_locks_per_transaction')::bigint").await;
    assert_eq!((taken, held), (1000, 1000));
    assert!(held > 10 * fair, "{held} locks held, a fair share is {fair}");
    app.batch_execute("SELECT pg_advisory_unlock_all()").await.unwrap();
    for call in &calls {
        app.batch_execute(call).await.unwrap_or_else(|e| panic!("before hardening, {call}: {e}"));
    }
    app.batch_execute("SELECT pg_advisory_unlock_all(); CREATE TEMP TABLE before_hardening (x int)").await.unwrap();
    // A large object outlives the session (up to 1 GB a call): PUBLIC may make them by default.
    app.batch_execute("SELECT lo_unlink(lo_from_bytea(0, 'x'))").await.unwrap();

    let done = harden(&root, "hardening_app", "").await;
    // The schema public gives PUBLIC no CREATE here (PostgreSQL 15's default): no GRANT for it.
    assert_eq!(done.len(), 10, "{done:#?}");
    assert!(done.iter().any(|s| s.starts_with("REVOKE CREATE ON SCHEMA public FROM PUBLIC, ")), "{done:#?}");
    assert!(done[0].starts_with("ALTER ROLE hardening_app CONNECTION LIMIT 10"), "{done:#?}");

    // After: every advisory-lock function and TEMP are refused, on a session that was already
    // open (and had made temporary tables) as on a new one, and through SET ROLE toolgate_agent.
    let fresh = connect(&lab, "hardening_app").await.unwrap();
    for client in [&app, &fresh] {
        for call in &calls {
            assert_eq!(refused(client, call).await, SqlState::INSUFFICIENT_PRIVILEGE, "{call}");
        }
        assert_eq!(
            refused(client, "SELECT count(pg_advisory_lock(2, g)) FROM generate_series(1, 1000000) g").await,
            SqlState::INSUFFICIENT_PRIVILEGE
        );
        assert_eq!(refused(client, "CREATE TEMP TABLE t (x int)").await, SqlState::INSUFFICIENT_PRIVILEGE);
        for lo in ["SELECT lo_from_bytea(0, 'x')", "SELECT lo_create(0)", "SELECT lo_creat(-1)"] {
            assert_eq!(refused(client, lo).await, SqlState::INSUFFICIENT_PRIVILEGE, "{lo}");
        }
        assert_eq!(
            refused(client, "CREATE TEMPORARY TABLE t AS SELECT 1 AS x").await,
            SqlState::INSUFFICIENT_PRIVILEGE
        );
    }
    assert_eq!(
        refused(&fresh, "SET ROLE toolgate_agent; SELECT pg_try_advisory_xact_lock(1)").await,
        SqlState::INSUFFICIENT_PRIVILEGE
    );
    fresh.batch_execute("RESET ROLE").await.unwrap();
    assert_eq!(
        count(
            &root,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        .await,
        0
    );

    // Its gate calls still work: the entry points run as the extension owner.
    close_742(&lab, &fresh, "hardening-742").await;

    // Another ordinary login, created before hardening, keeps both.
    let other = connect(&lab, "hardening_other").await.unwrap();
    for call in &calls {
        other.batch_execute(call).await.unwrap_or_else(|e| panic!("other login, {call}: {e}"));
    }
    other
        .batch_execute(
            "SELECT pg_advisory_unlock_all(); CREATE TEMP TABLE mine (x int); INSERT INTO mine VALUES (1); \
             SELECT lo_unlink(lo_from_bytea(0, 'x'))",
        )
        .await
        .unwrap();
    // So does the DBA's login, through set_policy (SECURITY DEFINER) and directly.
    let dba = lab.connect(DBA).await.unwrap();
    dba.batch_execute(
        "SELECT toolgate.set_policy('shopping-b', 'request_close', true, ARRAY['supervisor'], 1); \
         SELECT pg_advisory_xact_lock(5); CREATE TEMP TABLE dba_tmp (x int)",
    )
    .await
    .unwrap();

    // A role without the grants here (as a role created after the run is) has neither, until the
    // step runs again; running it again changes nothing for the hardened login.
    root.batch_execute(
        "REVOKE EXECUTE ON FUNCTION pg_advisory_lock(bigint), pg_try_advisory_xact_lock(integer, integer) FROM hardening_late; \
         DO $$ BEGIN EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM hardening_late', current_database()); END $$",
    )
    .await
    .unwrap();
    let late = connect(&lab, "hardening_late").await.unwrap();
    assert_eq!(refused(&late, "SELECT pg_advisory_lock(1::bigint)").await, SqlState::INSUFFICIENT_PRIVILEGE);
    assert_eq!(refused(&late, "CREATE TEMP TABLE late (x int)").await, SqlState::INSUFFICIENT_PRIVILEGE);
    let again = harden(&root, "hardening_app", "").await;
    assert_eq!(again.len(), 10, "{again:#?}");
    late.batch_execute(
        "SELECT pg_advisory_lock(1::bigint), pg_try_advisory_xact_lock(1, 2); CREATE TEMP TABLE late (x int)",
    )
    .await
    .unwrap();
    for call in &calls {
        assert_eq!(refused(&fresh, call).await, SqlState::INSUFFICIENT_PRIVILEGE, "after a second run, {call}");
    }
    assert_eq!(refused(&fresh, "CREATE TEMP TABLE t (x int)").await, SqlState::INSUFFICIENT_PRIVILEGE);
}

#[tokio::test]
async fn connection_limit_holds_and_the_superuser_still_connects() {
    let lab = lab("hardening_limit").await;
    let root = lab.connect("postgres").await.unwrap();
    login(&root, "hardening_limit_app", true).await;
    harden(&root, "hardening_limit_app", ", connection_limit => 3").await;

    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect_eventually(&lab, "hardening_limit_app").await);
    }
    assert_eq!(connect_refused(connect(&lab, "hardening_limit_app").await), SqlState::TOO_MANY_CONNECTIONS);
    // The limit is the role's, in every database.
    assert_eq!(
        connect_refused(connect_to(&lab, "hardening_limit_app", "postgres").await),
        SqlState::TOO_MANY_CONNECTIONS
    );
    let su = connect(&lab, "postgres").await.unwrap();
    assert_eq!(count(&su, "SELECT count(*) FROM pg_stat_activity WHERE usename = 'hardening_limit_app'").await, 3);
    // The login cannot lift its own limit.
    assert_eq!(
        refused(&held[0], "ALTER ROLE CURRENT_USER CONNECTION LIMIT -1").await,
        SqlState::INSUFFICIENT_PRIVILEGE
    );
    // A slot given back can be taken again.
    drop(held.pop());
    held.push(connect_eventually(&lab, "hardening_limit_app").await);
    assert_eq!(connect_refused(connect(&lab, "hardening_limit_app").await), SqlState::TOO_MANY_CONNECTIONS);
}

#[tokio::test]
async fn a_full_house_of_the_hardened_login_leaves_the_server_usable() {
    let lab = lab("hardening_full_house").await;
    let root = lab.connect("postgres").await.unwrap();
    login(&root, "hardening_house_app", true).await;
    harden(&root, "hardening_house_app", "").await;
    let checks = report(&root, "hardening_house_app").await;
    let (fits, detail) = &checks["lock_table"];
    assert!(fits, "{detail}");
    let estimate = number_before(detail, "relation locks");
    let limit = count(&root, "SELECT rolconnlimit::bigint FROM pg_roles WHERE rolname = 'hardening_house_app'").await;
    assert_eq!(limit, 10);

    // Every connection the login may open, each in an open transaction that has read every
    // relation of pg_catalog and information_schema it may read: as many relation locks as it
    // can hold.
    let mut house = Vec::new();
    for i in 0..limit {
        let c = connect_eventually(&lab, "hardening_house_app").await;
        if i == 0 {
            // The role's defaults in this database apply to its new connections.
            assert_eq!(show(&c, "statement_timeout").await, "15s");
            assert_eq!(show(&c, "idle_in_transaction_session_timeout").await, "30s");
        }
        // The house stays full while it is built: on a slow machine its first connections would
        // otherwise reach the role's idle-in-transaction timeout before the last one opens.
        c.batch_execute(
            "SET idle_in_transaction_session_timeout = 0; BEGIN; \
             DO $$ DECLARE rel regclass; BEGIN \
               FOR rel IN SELECT c.oid FROM pg_catalog.pg_class c \
                           WHERE c.relnamespace IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace) \
                             AND c.relkind IN ('r', 'v', 'm') AND pg_catalog.has_table_privilege(c.oid, 'SELECT') LOOP \
                 EXECUTE pg_catalog.format('SELECT count(*) FROM %s', rel); \
               END LOOP; END $$",
        )
        .await
        .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        let locks =
            count(&c, "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation'").await;
        assert!(locks >= 250, "connection {i} holds only {locks} relation locks");
        assert!(locks <= estimate, "connection {i} holds {locks} relation locks, the report's estimate is {estimate}");
        house.push(c);
    }
    assert_eq!(connect_refused(connect(&lab, "hardening_house_app").await), SqlState::TOO_MANY_CONNECTIONS);
    let held = count(
        &root,
        "SELECT count(*) FROM pg_locks JOIN pg_stat_activity USING (pid) WHERE usename = 'hardening_house_app'",
    )
    .await;
    assert!(held >= 2500, "the login's connections hold only {held} locks");

    // The superuser and the DBA still connect; another agent connection's gate calls succeed.
    let su = connect(&lab, "postgres").await.unwrap();
    assert_eq!(count(&su, "SELECT 1::bigint").await, 1);
    let dba = connect(&lab, DBA).await.unwrap();
    dba.batch_execute("SELECT count(*) FROM toolgate.audit_log").await.unwrap();
    let app = connect(&lab, APP).await.unwrap();
    let read = db::read_order(&app, &lab.supervisor_a(), "742").await.unwrap();
    assert_eq!(outcome(&read), ("SUCCEEDED", "-"), "{read}");
    close_742(&lab, &app, "house-742").await;
    assert_eq!(effects(&root, "742").await, 1);

    for c in &house {
        c.batch_execute("COMMIT").await.unwrap();
    }
}

#[tokio::test]
async fn timeouts_are_the_logins_defaults_in_this_database() {
    let lab = lab("hardening_timeouts").await;
    let root = lab.connect("postgres").await.unwrap();
    login(&root, "hardening_timeouts_app", true).await;
    let done = harden(
        &root,
        "hardening_timeouts_app",
        ", statement_timeout => '1 second', idle_in_transaction_session_timeout => '1500 ms'",
    )
    .await;
    assert!(done.iter().any(|s| s.ends_with("SET statement_timeout = '1000ms'")), "{done:#?}");

    let app = connect(&lab, "hardening_timeouts_app").await.unwrap();
    assert_eq!(show(&app, "statement_timeout").await, "1s");
    assert_eq!(show(&app, "idle_in_transaction_session_timeout").await, "1500ms");
    assert_eq!(refused(&app, "SELECT pg_sleep(3)").await, SqlState::QUERY_CANCELED);

    // A transaction left open longer than the idle timeout ends with its connection.
    let idle = connect(&lab, "hardening_timeouts_app").await.unwrap();
    idle.batch_execute("BEGIN; SELECT 1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(idle.batch_execute("SELECT 1").await.is_err(), "the idle transaction outlived its timeout");
    assert!(idle.is_closed());

    // Defaults, not barriers: the login may SET them away for its session…
    app.batch_execute("SET statement_timeout = 0; SELECT pg_sleep(1.2)").await.unwrap();
    // …and they are this database's: in another database it may connect to, they do not apply.
    let elsewhere = connect_to(&lab, "hardening_timeouts_app", "postgres").await.unwrap();
    assert_eq!(show(&elsewhere, "statement_timeout").await, "0");
}

#[tokio::test]
async fn report_flags_before_and_passes_after_except_other_databases() {
    let lab = lab("hardening_report").await;
    let root = lab.connect("postgres").await.unwrap();
    login(&root, "hardening_report_app", true).await;
    let dba = lab.connect(DBA).await.unwrap();
    // PostgreSQL 14's default, which pg_upgrade keeps: anyone may create in the schema public.
    root.batch_execute("GRANT CREATE ON SCHEMA public TO PUBLIC").await.unwrap();

    let before = report(&dba, "hardening_report_app").await;
    assert_eq!(before.keys().map(String::as_str).collect::<Vec<_>>(), CHECKS);
    for (check, (ok, detail)) in &before {
        assert!(!ok, "before hardening, {check} passed: {detail}");
    }
    assert!(before["advisory_lock_functions"].1.contains("hardening_report_app (16 of 16)"), "{:?}", before);
    assert!(before["lock_table"].1.contains("(no limit)"), "{:?}", before);
    assert!(before["schema_create"].1.contains("public (hardening_report_app"), "{:?}", before);

    let done = harden(&root, "hardening_report_app", "").await;
    // PUBLIC had CREATE on public: every other role keeps it.
    assert!(done.iter().any(|s| s.starts_with("GRANT CREATE ON SCHEMA public TO ")), "{done:#?}");
    let after = report(&dba, "hardening_report_app").await;
    assert_eq!(after.keys().map(String::as_str).collect::<Vec<_>>(), CHECKS);
    for (check, (ok, detail)) in &after {
        if check == "other_databases" {
            // The test cluster's postgres database grants CONNECT to PUBLIC.
            assert!(!ok, "{detail}");
            assert!(detail.contains("postgres"), "{detail}");
            assert!(!detail.contains(&lab.dbname), "{detail}");
        } else {
            assert!(ok, "after hardening, {check} failed: {detail}");
        }
    }
    assert!(after["connection_limit"].1.contains("at most 10 connections"), "{:?}", after);

    // Drift is reported: the login drops its own timeout default (which it may), and someone grants
    // an advisory-lock function to toolgate_agent. Running the step again repairs both.
    let app = connect(&lab, "hardening_report_app").await.unwrap();
    app.batch_execute(&format!("ALTER ROLE CURRENT_USER IN DATABASE \"{}\" RESET statement_timeout", lab.dbname))
        .await
        .unwrap();
    root.batch_execute("GRANT EXECUTE ON FUNCTION pg_advisory_lock(bigint) TO toolgate_agent").await.unwrap();
    let drifted = report(&dba, "hardening_report_app").await;
    assert!(!drifted["statement_timeout"].0, "{:?}", drifted["statement_timeout"]);
    let (ok, detail) = &drifted["advisory_lock_functions"];
    assert!(!ok && detail.contains("toolgate_agent (1 of 16)"), "{detail}");
    assert!(drifted["idle_in_transaction_session_timeout"].0);
    harden(&root, "hardening_report_app", "").await;
    let repaired = report(&dba, "hardening_report_app").await;
    for (check, (ok, detail)) in &repaired {
        assert_eq!(*ok, check != "other_databases", "{check}: {detail}");
    }
}

#[tokio::test]
async fn unfit_logins_are_refused_and_nothing_is_done() {
    let lab = lab("hardening_refusals").await;
    let root = lab.connect("postgres").await.unwrap();
    login(&root, "hardening_plain", false).await;
    login(&root, "hardening_creator", true).await;
    root.batch_execute("ALTER ROLE hardening_creator CREATEDB").await.unwrap();
    let dba = lab.connect(DBA).await.unwrap();
    let untouched = "SELECT (SELECT proacl IS NULL FROM pg_proc WHERE oid = 'pg_advisory_lock(bigint)'::regprocedure) \
                       AND (SELECT datacl IS NULL FROM pg_database WHERE datname = current_database()) \
                       AND (SELECT rolconnlimit = -1 FROM pg_roles WHERE rolname = 'hardening_creator') \
                       AND NOT EXISTS (SELECT FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole \
                                        WHERE r.rolname = 'hardening_creator')";
    assert!(flag(&root, untouched).await);

    for target in ["postgres", "hardening_plain", "toolgate_agent", "toolgate_admin", "hardening_creator"] {
        let code = refused(&root, &format!("SELECT toolgate.harden_agent_login('{target}')")).await;
        assert_eq!(code, SqlState::INVALID_PARAMETER_VALUE, "harden {target}");
        let code = refused(&dba, &format!("SELECT * FROM toolgate.hardening_report('{target}')")).await;
        assert_eq!(code, SqlState::INVALID_PARAMETER_VALUE, "report {target}");
    }
    let err = root.query("SELECT toolgate.harden_agent_login('hardening_creator')", &[]).await.unwrap_err();
    let message = err.as_db_error().unwrap().message().to_string();
    assert!(message.contains("CREATEDB"), "{message}");
    let err = root.query("SELECT toolgate.harden_agent_login('hardening_plain')", &[]).await.unwrap_err();
    let message = err.as_db_error().unwrap().message().to_string();
    assert!(message.contains("not a member of toolgate_agent"), "{message}");

    // Arguments out of range, on a login that is fit: refused as well, before anything is done.
    login(&root, "hardening_fit", true).await;
    for extra in [
        ", connection_limit => 0",
        ", connection_limit => NULL",
        ", statement_timeout => '0'",
        ", idle_in_transaction_session_timeout => '-1 s'",
    ] {
        let code = refused(&root, &format!("SELECT toolgate.harden_agent_login('hardening_fit'{extra})")).await;
        assert_eq!(code, SqlState::INVALID_PARAMETER_VALUE, "{extra}");
    }
    assert!(flag(&root, untouched).await, "a refused call changed something");
    assert_eq!(count(&root, "SELECT rolconnlimit::bigint FROM pg_roles WHERE rolname = 'hardening_fit'").await, -1);

    // Only the extension owner may run the step; toolgate_admin may read the report; the agent
    // may do neither.
    assert_eq!(
        refused(&dba, "SELECT toolgate.harden_agent_login('hardening_fit')").await,
        SqlState::INSUFFICIENT_PRIVILEGE
    );
    assert_eq!(report(&dba, "hardening_fit").await.len(), CHECKS.len());
    let fit = connect(&lab, "hardening_fit").await.unwrap();
    assert_eq!(
        refused(&fit, "SELECT toolgate.harden_agent_login('hardening_fit')").await,
        SqlState::INSUFFICIENT_PRIVILEGE
    );
    assert_eq!(
        refused(&fit, "SELECT * FROM toolgate.hardening_report('hardening_fit')").await,
        SqlState::INSUFFICIENT_PRIVILEGE
    );
}
