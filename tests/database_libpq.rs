//! libpq as users know it: the `PG*` environment variables, the password file and the service
//! file, read by `toolgate_pgconn` (which every `toolgate` process connects through) exactly as
//! libpq reads them. Each case gives psql (libpq itself) and `toolgate_pgconn` the same conninfo
//! and the same environment against the suite's real server, where one role signs in only with a
//! SCRAM password, and asks both who they connected as. A test binary of its own with one test: it
//! changes `pg_hba.conf` of the server every test uses, and puts it back at the end.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use toolgate_pgconn::{describe, Database};

const USER: &str = "libpq_user";
const PASSWORD: &str = "a pass:word\\with escapes";

/// `pg_hba.conf` put back as it was, even when an assertion fails.
struct Restore {
    hba: PathBuf,
    original: String,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.hba, &self.original);
        let s = server();
        let _ = Command::new(psql())
            .args(["-X", "-q", "-h", &s.host, "-p", &s.port.to_string(), "-U", "postgres", "-d", "postgres", "-c"])
            .arg("SELECT pg_reload_conf()")
            .status();
    }
}

/// The psql of the server's version (`PGBIN`, which scripts/lib.sh sets), else the one on the path.
fn psql() -> PathBuf {
    std::env::var_os("PGBIN").map_or_else(|| PathBuf::from("psql"), |b| Path::new(&b).join("psql"))
}

const ASK: &str = "SELECT current_user || ' ' || current_database() || ' ' || current_setting('application_name')";

/// What psql connects as with `conninfo` and exactly the environment `env` (and `HOME`): `Ok("user
/// db application")`, or `Err` with its message.
fn by_libpq(conninfo: &str, env: &[(&str, String)], home: &Path) -> Result<String, String> {
    let mut command = Command::new(psql());
    command.env_clear().env("HOME", home).env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for (k, v) in env {
        command.env(k, v);
    }
    // psql names itself when nothing else does; toolgate_pgconn is given the same name below.
    let out = command.args(["-X", "-A", "-t", "-w", "-c", ASK, "-d", conninfo]).output().expect("psql runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The same through `toolgate_pgconn`.
async fn by_toolgate(conninfo: &str, env: &[(&str, String)], home: &Path) -> Result<String, String> {
    let lookup = |k: &str| match k {
        "HOME" => Some(home.display().to_string()),
        _ => env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()),
    };
    let db = Database::parse_with_env(conninfo, "psql", &lookup)?;
    let client = db.connect().await.map_err(|e| describe(&e))?;
    client.query_one(ASK, &[]).await.map(|r| r.get::<_, String>(0)).map_err(|e| describe(&e))
}

/// A case: its name, the conninfo, the environment, and whether libpq connects.
type Case<'a> = (&'a str, String, Vec<(&'a str, String)>, bool);

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test]
async fn conninfo_environment_password_file_and_service_are_read_as_libpq_reads_them() {
    let s = server();
    let root = s.connect("postgres", "postgres").await.expect("the superuser connects");
    let hba = PathBuf::from(root.query_one("SHOW hba_file", &[]).await.unwrap().get::<_, String>(0));
    let original = std::fs::read_to_string(&hba).unwrap();
    let _restore = Restore { hba: hba.clone(), original: original.clone() };
    // libpq_user signs in with its password only, over TCP and the socket alike.
    std::fs::write(
        &hba,
        format!("local all {USER} scram-sha-256\nhost all {USER} 127.0.0.1/32 scram-sha-256\n{original}"),
    )
    .unwrap();
    let quoted = PASSWORD.replace('\'', "''");
    root.batch_execute(&format!(
        "DROP ROLE IF EXISTS {USER}; SET password_encryption = 'scram-sha-256'; \
         CREATE ROLE {USER} LOGIN PASSWORD '{quoted}'; SELECT pg_reload_conf()"
    ))
    .await
    .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    let dir = keys_dir().join("libpq-test");
    let _ = std::fs::remove_dir_all(&dir);
    let (home, other, sys) = (dir.join("home"), dir.join("other"), dir.join("sysconf"));
    for d in [&home, &other, &sys] {
        std::fs::create_dir_all(d).unwrap();
    }
    let port = s.port.to_string();
    let socket = s.host.clone();
    // The password file's escapes: a colon and a backslash in the password.
    let escaped = PASSWORD.replace('\\', "\\\\").replace(':', "\\:");
    let pgpass = home.join(".pgpass");
    write(&pgpass, &format!("# the suite's\nnowhere:*:*:*:wrong\n127.0.0.1:{port}:*:{USER}:{escaped}\n"), 0o600);
    let elsewhere = other.join("pass");
    write(&elsewhere, &format!("*:*:*:{USER}:{escaped}\n"), 0o600);
    let socket_line = other.join("socket-pass");
    write(&socket_line, &format!("{}:{port}:postgres:{USER}:{escaped}\n", socket.replace(':', "\\:")), 0o600);
    let services = other.join("services.conf");
    write(
        &services,
        &format!(
            "# the user's\n[erp]\nhost=127.0.0.1\nport={port}\nuser={USER}\ndbname=postgres\n\n\
             [erp_socket]\nhost={socket}\nport={port}\nuser=postgres\n"
        ),
        0o644,
    );
    write(
        &home.join(".pg_service.conf"),
        &format!("[home_svc]\nhost={socket}\nport={port}\nuser=postgres\ndbname=template1\n"),
        0o644,
    );
    write(
        &sys.join("pg_service.conf"),
        &format!("[sys_svc]\nhost=127.0.0.1\nport={port}\nuser={USER}\napplication_name=from_service\n"),
        0o644,
    );

    let tcp = format!("host=127.0.0.1 port={port} user={USER} dbname=postgres");
    let e = |pairs: &[(&'static str, &str)]| pairs.iter().map(|(k, v)| (*k, v.to_string())).collect::<Vec<_>>();
    let (p, h, sk) = (port.as_str(), socket.as_str(), sys.to_str().unwrap());
    let (sf, ef, sl) = (services.to_str().unwrap(), elsewhere.to_str().unwrap(), socket_line.to_str().unwrap());
    let url_socket = format!("postgresql://postgres@{}:{port}/template1", socket.replace('/', "%2F"));
    let cases: Vec<Case> = vec![
        (
            "PGHOST, PGPORT, PGUSER, PGDATABASE",
            String::new(),
            e(&[("PGHOST", h), ("PGPORT", p), ("PGUSER", "postgres"), ("PGDATABASE", "template1")]),
            true,
        ),
        ("PGAPPNAME", format!("host={h} port={p} user=postgres"), e(&[("PGAPPNAME", "from_env")]), true),
        (
            "the string over the environment",
            format!("host={h} port={p} dbname=postgres"),
            e(&[("PGUSER", "postgres"), ("PGDATABASE", "template1")]),
            true,
        ),
        ("dbname defaults to the user", format!("host={h} port={p}"), e(&[("PGUSER", "postgres")]), true),
        (
            "PGPASSWORD",
            String::new(),
            e(&[
                ("PGHOST", "127.0.0.1"),
                ("PGPORT", p),
                ("PGUSER", USER),
                ("PGDATABASE", "postgres"),
                ("PGPASSWORD", PASSWORD),
            ]),
            true,
        ),
        ("a wrong PGPASSWORD", tcp.clone(), e(&[("PGPASSWORD", "wrong")]), false),
        ("~/.pgpass", tcp.clone(), vec![], true),
        ("a password in the string over ~/.pgpass", format!("{tcp} password=wrong"), vec![], false),
        ("PGPASSWORD over ~/.pgpass", tcp.clone(), e(&[("PGPASSWORD", "wrong")]), false),
        ("PGPASSFILE", tcp.clone(), e(&[("PGPASSFILE", ef)]), true),
        ("passfile= in the string", format!("{tcp} passfile={ef}"), e(&[("PGPASSFILE", "/nonexistent")]), true),
        (
            "a socket directory matched by its path",
            format!("host={h} port={p} user={USER} dbname=postgres"),
            e(&[("PGPASSFILE", sl)]),
            true,
        ),
        (
            "no line for this database",
            format!("host={h} port={p} user={USER} dbname=template1"),
            e(&[("PGPASSFILE", sl)]),
            false,
        ),
        ("service= from PGSERVICEFILE", "service=erp".into(), e(&[("PGSERVICEFILE", sf)]), true),
        ("PGSERVICE", String::new(), e(&[("PGSERVICEFILE", sf), ("PGSERVICE", "erp")]), true),
        (
            "the string over the service",
            "service=erp_socket dbname=template1".into(),
            e(&[("PGSERVICEFILE", sf)]),
            true,
        ),
        (
            "the service over the environment",
            "service=erp_socket".into(),
            e(&[("PGSERVICEFILE", sf), ("PGUSER", USER), ("PGDATABASE", "template1")]),
            true,
        ),
        ("~/.pg_service.conf", "service=home_svc".into(), vec![], true),
        ("PGSYSCONFDIR", "service=sys_svc dbname=postgres".into(), e(&[("PGSYSCONFDIR", sk)]), true),
        (
            "a service no file defines",
            "service=nowhere".into(),
            e(&[("PGSERVICEFILE", sf), ("PGSYSCONFDIR", sk)]),
            false,
        ),
        ("a URL, with ~/.pgpass", format!("postgresql://{USER}@127.0.0.1:{p}/postgres"), vec![], true),
        ("a URL to a socket directory", url_socket, e(&[("PGAPPNAME", "url")]), true),
        (
            "a URL's query over the environment",
            format!("postgresql:///postgres?host={h}&port={p}&user=postgres"),
            e(&[("PGHOST", "/nonexistent"), ("PGDATABASE", "template1")]),
            true,
        ),
    ];
    let mut compared = 0;
    for (name, conninfo, env, connects) in &cases {
        let libpq = by_libpq(conninfo, env, &home);
        let ours = by_toolgate(conninfo, env, &home).await;
        assert_eq!(libpq.is_ok(), *connects, "{name}: libpq itself: {libpq:?}");
        match (&libpq, &ours) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}: connected as another"),
            (Err(_), Err(_)) => {}
            _ => panic!("{name}: libpq {libpq:?}, toolgate_pgconn {ours:?}"),
        }
        compared += 1;
    }

    // A password file others may read is ignored, with libpq's warning (here, on the server's
    // side, the refusal).
    write(&pgpass, &std::fs::read_to_string(&pgpass).unwrap(), 0o644);
    assert!(by_libpq(&tcp, &[], &home).is_err(), "libpq ignores a password file others may read");
    assert!(by_toolgate(&tcp, &[], &home).await.is_err(), "so does toolgate_pgconn");
    compared += 1;

    // Errors name the setting and where it came from, never the password.
    let err =
        Database::parse_with_env("host=h", "t", &|k: &str| (k == "PGSSLMODE").then(|| "sometimes".into())).unwrap_err();
    assert!(err.contains("sslmode (from PGSSLMODE)"), "{err}");
    let quoted = PASSWORD.replace('\\', "\\\\").replace('\'', "\\'");
    let given = Database::parse_with_env(&format!("service=erp password='{quoted}'"), "t", &|k: &str| {
        (k == "PGSERVICEFILE").then(|| services.display().to_string())
    });
    assert!(given.is_ok(), "{:?}", given.err());
    let err = Database::parse_with_env(&format!("service=erp password={PASSWORD}"), "t", &|_: &str| None).unwrap_err();
    assert!(!err.contains("pass:word"), "a malformed conninfo's error repeats none of it: {err}");
    let err = Database::parse_with_env("service=nowhere password=hunter2", "t", &|_: &str| None).unwrap_err();
    assert!(err.contains("\"nowhere\"") && !err.contains("hunter2"), "{err}");
    eprintln!("{compared} cases connected (or were refused) alike by libpq and toolgate_pgconn");
    root.batch_execute(&format!("DROP ROLE {USER}")).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
