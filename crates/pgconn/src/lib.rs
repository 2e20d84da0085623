//! How every `toolgate` process connects to PostgreSQL: a libpq conninfo
//! (`host=db.example dbname=erp user=erp_app sslmode=verify-full`) or URL
//! (`postgresql://erp_app@db.example/erp?sslmode=verify-full`), resolved as libpq resolves it (its
//! service, the `PG*` environment variables, the defaults, the password file: `libpq.rs`), carried
//! out by tokio-postgres, with the TLS
//! settings libpq has and tokio-postgres does not (`sslmode=verify-ca|verify-full`, `sslrootcert`,
//! `sslcert`, `sslkey`, `sslsni`, `ssl_min_protocol_version`, `ssl_max_protocol_version`) read here
//! as libpq reads them and carried out by rustls (no OpenSSL at run time).
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow`, `prefer` (the default) | when the server offers it | not checked, unless a root file is there (then as `verify-ca`) |
//! | `require` | always | as `prefer` |
//! | `verify-ca` | always | signed by a CA of `sslrootcert` |
//! | `verify-full` | always | as `verify-ca`, and issued for the host connected to |
//!
//! `sslrootcert` defaults to `~/.postgresql/root.crt` (used when present; required by `verify-*`);
//! `sslrootcert=system` is the platform's trust store and implies `verify-full`. A client
//! certificate is `sslcert`/`sslkey`, by default `~/.postgresql/postgresql.crt`/`.key` when present.
//! A Unix socket never carries TLS (as libpq). Errors name the setting at fault and never repeat
//! the conninfo, which may hold a password.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::{Client, Config};
pub use tokio_postgres_rustls::MakeRustlsConnect;

mod libpq;

/// What a connection checks of the server's certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// No TLS at all.
    Off,
    /// Encrypted, the certificate not checked.
    Encrypt,
    /// Signed by a trusted CA.
    Ca,
    /// Signed by a trusted CA and issued for the host.
    Full,
}

/// A database to connect to: tokio-postgres' settings and the TLS connector they need.
#[derive(Clone)]
pub struct Database {
    config: Config,
    tls: MakeRustlsConnect,
    verify: Verify,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Database")
            .field("hosts", &self.config.get_hosts())
            .field("dbname", &self.config.get_dbname())
            .field("user", &self.config.get_user())
            .field("verify", &self.verify)
            .finish()
    }
}

/// The TLS settings of a resolved conninfo, each with its name for an error (`sslmode`, or
/// `sslmode (from PGSSLMODE)`).
#[derive(Default, Debug, PartialEq, Eq)]
struct TlsSettings {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    sslcert: Option<String>,
    sslkey: Option<String>,
    sslsni: Option<String>,
    min_protocol: Option<String>,
    max_protocol: Option<String>,
    names: std::collections::BTreeMap<&'static str, String>,
}

impl TlsSettings {
    /// Take `key=value` if it is a TLS setting this carries out; false when it is not one.
    fn take(&mut self, key: &str, value: String, name: String) -> bool {
        let (slot, key) = match key {
            "sslmode" => (&mut self.sslmode, "sslmode"),
            "sslrootcert" => (&mut self.sslrootcert, "sslrootcert"),
            "sslcert" => (&mut self.sslcert, "sslcert"),
            "sslkey" => (&mut self.sslkey, "sslkey"),
            "sslsni" => (&mut self.sslsni, "sslsni"),
            "ssl_min_protocol_version" => (&mut self.min_protocol, "ssl_min_protocol_version"),
            "ssl_max_protocol_version" => (&mut self.max_protocol, "ssl_max_protocol_version"),
            _ => return false,
        };
        *slot = Some(value);
        self.names.insert(key, name);
        true
    }

    /// "the database setting sslmode", naming where it came from when that was not the conninfo.
    fn setting(&self, key: &str) -> String {
        format!("the database setting {}", self.names.get(key).map_or(key, String::as_str))
    }
}

/// Whether a setting libpq has and tokio-postgres lacks may be left aside: only when leaving it
/// aside weakens nothing (a GSSAPI encryption merely preferred, no compression, one encoding).
/// Every other one is refused, naming it: ignoring `sslcrl` or `require_auth` would connect where
/// libpq refuses.
fn set_aside(key: &str, value: &str) -> Option<bool> {
    let fine = match key {
        "gssencmode" => matches!(value, "disable" | "prefer"),
        "sslcompression" => value == "0",
        "sslcertmode" => matches!(value, "disable" | "allow"),
        "client_encoding" => value.eq_ignore_ascii_case("utf8") || value.eq_ignore_ascii_case("utf-8"),
        "min_protocol_version" => value == "3.0",
        "max_protocol_version" => true,
        "sslpassword" | "sslcrl" | "sslcrldir" | "requirepeer" | "require_auth" | "krbsrvname" | "gsslib"
        | "gssdelegation" | "replication" | "sslkeylogfile" | "scram_client_key" | "scram_server_key" => false,
        _ => return None,
    };
    Some(fine || value.is_empty())
}

impl Database {
    /// A libpq conninfo or URL resolved as libpq resolves it (its service, the `PG*` environment
    /// variables, the password file; `libpq.rs`), with the application name `application` unless
    /// it names one.
    pub fn parse(conninfo: &str, application: &str) -> Result<Database, String> {
        Database::parse_with_env(conninfo, application, &|k| std::env::var(k).ok())
    }

    /// [`Database::parse`] with the environment `env` (`HOME` too) in place of the process's.
    pub fn parse_with_env(
        conninfo: &str,
        application: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Database, String> {
        let process = libpq::Process { env, user: &libpq::os_user };
        // A password file others may read is ignored with libpq's own warning, on standard error.
        let settings = libpq::resolve(conninfo, &process, &mut |w| eprintln!("{w}"))?;
        Database::from_settings(&settings, application, env("HOME").map(PathBuf::from).as_deref())
    }

    fn from_settings(settings: &libpq::Settings, application: &str, home: Option<&Path>) -> Result<Database, String> {
        let mut tls = TlsSettings::default();
        let mut pairs: Vec<(&str, String)> = Vec::new();
        for (key, setting) in &settings.0 {
            let value = setting.value.clone();
            if tls.take(key, value.clone(), settings.name(key)) {
                continue;
            }
            match key.as_str() {
                "service" | "passfile" | "fallback_application_name" => {}
                "keepalives_count" => pairs.push(("keepalives_retries", value)),
                // An empty entry of a host list is the default socket directory (as libpq).
                "host" => pairs.push((
                    "host",
                    value
                        .split(',')
                        .map(|h| if h.is_empty() { libpq::default_socket_dir() } else { h })
                        .collect::<Vec<_>>()
                        .join(","),
                )),
                other => match set_aside(other, &value) {
                    Some(true) => {}
                    Some(false) => {
                        return Err(format!(
                            "the database setting {} is not supported (see docs/deploy.md)",
                            settings.name(other)
                        ))
                    }
                    None => pairs.push((other, value)),
                },
            }
        }
        // Each setting checked alone first, so an error names it (and where it came from).
        for (key, value) in &pairs {
            Config::from_str(&conninfo_pair(key, value)).map_err(|e| {
                let key = if *key == "keepalives_retries" { "keepalives_count" } else { key };
                format!("the database setting {} is not valid: {}", settings.name(key), chain(&e))
            })?;
        }
        let text: Vec<String> = pairs.iter().map(|(k, v)| conninfo_pair(k, v)).collect();
        let mut config = Config::from_str(&text.join(" "))
            .map_err(|e| format!("the database settings are not valid: {}", chain(&e)))?;
        if config.get_application_name().is_none() {
            config.application_name(
                settings.get("fallback_application_name").filter(|a| !a.is_empty()).unwrap_or(application),
            );
        }
        let (tls_connector, verify) = connector(&tls, home)?;
        let unix_only = !config.get_hosts().is_empty() && config.get_hosts().iter().all(|h| !matches!(h, Host::Tcp(_)));
        config.ssl_mode(match verify {
            _ if unix_only => SslMode::Disable,
            Verify::Off => SslMode::Disable,
            Verify::Encrypt | Verify::Ca if matches!(tls.sslmode.as_deref(), None | Some("allow") | Some("prefer")) => {
                SslMode::Prefer
            }
            _ => SslMode::Require,
        });
        Ok(Database { config, tls: tls_connector, verify: if unix_only { Verify::Off } else { verify } })
    }

    /// tokio-postgres' settings (for a pool).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The TLS connector (for a pool).
    pub fn tls(&self) -> MakeRustlsConnect {
        self.tls.clone()
    }

    /// What the server's certificate is checked for.
    pub fn verify(&self) -> Verify {
        self.verify
    }

    /// One connection; its driver runs on the current runtime until the client is dropped.
    pub async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        let (client, connection) = self.config.connect(self.tls.clone()).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }
}

impl Database {
    /// One connection that `LISTEN`s on `channel`, and a receiver that gets a wake-up for the
    /// notifications that arrive (several at once may come as one: a wake-up, not a count). The
    /// receiver ends (`None`) when the connection does.
    pub async fn listen(
        &self,
        channel: &str,
    ) -> Result<(Client, tokio::sync::mpsc::Receiver<()>), tokio_postgres::Error> {
        self.listen_as(channel, 1, |_| ()).await
    }

    /// One connection that `LISTEN`s on `channel`, and a receiver that gets each notification's
    /// payload in the order they arrive; while `capacity` wait unread, newer ones are dropped.
    /// The receiver ends (`None`) when the connection does.
    pub async fn notifications(
        &self,
        channel: &str,
        capacity: usize,
    ) -> Result<(Client, tokio::sync::mpsc::Receiver<String>), tokio_postgres::Error> {
        self.listen_as(channel, capacity, |n| n.payload().to_string()).await
    }

    async fn listen_as<T: Send + 'static>(
        &self,
        channel: &str,
        capacity: usize,
        each: impl Fn(&tokio_postgres::Notification) -> T + Send + 'static,
    ) -> Result<(Client, tokio::sync::mpsc::Receiver<T>), tokio_postgres::Error> {
        let (client, mut connection) = self.config.connect(self.tls.clone()).await?;
        let (heard, hearing) = tokio::sync::mpsc::channel(capacity);
        tokio::spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                        if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) = heard.try_send(each(&n)) {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        client.batch_execute(&format!("LISTEN {}", quote_ident(channel))).await?;
        Ok((client, hearing))
    }
}

/// `name` as an SQL identifier, double-quoted.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Why a connection failed, in a line: the server's message, or the TLS or network error with
/// what caused it (tokio-postgres' own text stops at "error performing TLS handshake").
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.to_string(),
        None => chain(e),
    }
}

/// An error and its causes, in a line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    text
}

/// `key='value'`, quoted as a conninfo quotes.
fn conninfo_pair(key: &str, value: &str) -> String {
    format!("{key}='{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The `key = value` pairs of a conninfo, as libpq reads them: values bare or single-quoted, a
/// backslash escaping the next character.
fn conninfo_pairs(conninfo: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut chars = conninfo.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            // Not the word itself: it may be part of a password.
            return Err(format!(
                "the database conninfo has a word without \"=\" after its setting {} (a value with spaces is \
                 quoted: key='a b')",
                pairs.len()
            ));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(format!("the database conninfo's {key} has an unterminated quoted string")),
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The rustls connector the settings describe, and what it checks.
fn connector(tls: &TlsSettings, home: Option<&Path>) -> Result<(MakeRustlsConnect, Verify), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let system = tls.sslrootcert.as_deref() == Some("system");
    let mode = match (tls.sslmode.as_deref(), system) {
        (None, true) => "verify-full",
        (None, false) => "prefer",
        (Some(mode), _) => mode,
    };
    if !matches!(mode, "disable" | "allow" | "prefer" | "require" | "verify-ca" | "verify-full") {
        return Err(format!("{} has an invalid value \"{mode}\"", tls.setting("sslmode")));
    }
    if system && mode != "verify-full" {
        return Err(format!(
            "{}=\"{mode}\" may not be used with sslrootcert=system (use verify-full)",
            tls.setting("sslmode")
        ));
    }
    let dot = |name: &str| home.map(|h| h.join(".postgresql").join(name));
    // The root file: named (it must exist), or the default one when it is there.
    let root_file = match tls.sslrootcert.as_deref() {
        Some("system") => None,
        Some(path) => {
            if !Path::new(path).is_file() {
                return Err(format!("{} names \"{path}\", which is not a readable file", tls.setting("sslrootcert")));
            }
            Some(PathBuf::from(path))
        }
        None => dot("root.crt").filter(|p| p.is_file()),
    };
    let mut verify = match mode {
        "disable" => Verify::Off,
        "verify-ca" => Verify::Ca,
        "verify-full" => Verify::Full,
        _ if root_file.is_some() => Verify::Ca,
        _ => Verify::Encrypt,
    };
    if matches!(verify, Verify::Ca | Verify::Full) && root_file.is_none() && !system {
        return Err(format!(
            "{}={mode} needs a root certificate: set sslrootcert (a PEM file of the CA, or \"system\"), or put it \
             in ~/.postgresql/root.crt",
            tls.setting("sslmode")
        ));
    }
    let mut roots = RootCertStore::empty();
    if let Some(file) = &root_file {
        let certs = CertificateDer::pem_file_iter(file)
            .and_then(|i| i.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("{}: cannot read {}: {e}", tls.setting("sslrootcert"), file.display()))?;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!("{}: {} holds no certificate", tls.setting("sslrootcert"), file.display()));
        }
    } else if system {
        let found = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(found.certs);
        if roots.is_empty() {
            return Err("the database setting sslrootcert=system: the platform's trust store is empty".into());
        }
    }
    let versions = protocol_versions(tls)?;
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("the database's TLS settings: {e}"))?;
    let server: Arc<dyn ServerCertVerifier> = match verify {
        Verify::Off | Verify::Encrypt => Arc::new(Unchecked(provider.clone())),
        Verify::Ca | Verify::Full => {
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| format!("{}: {e}", tls.setting("sslrootcert")))?;
            if verify == Verify::Ca {
                Arc::new(AnyName(webpki))
            } else {
                webpki
            }
        }
    };
    let builder = builder.dangerous().with_custom_certificate_verifier(server);
    // The client certificate: named (both files must exist), or the default pair when it is there.
    let cert_file = match tls.sslcert.as_deref() {
        Some(path) => Some(PathBuf::from(path)),
        None => dot("postgresql.crt").filter(|p| p.is_file()),
    };
    let mut config = match cert_file {
        None => builder.with_no_client_auth(),
        Some(cert) => {
            let key = match tls.sslkey.as_deref() {
                Some(path) => PathBuf::from(path),
                None => dot("postgresql.key").unwrap_or_default(),
            };
            let chain = CertificateDer::pem_file_iter(&cert)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{}: cannot read {}: {e}", tls.setting("sslcert"), cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(&key)
                .map_err(|e| format!("{}: cannot read {}: {e}", tls.setting("sslkey"), key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the database setting sslcert/sslkey: {e}"))?
        }
    };
    match tls.sslsni.as_deref() {
        None | Some("1") => {}
        Some("0") => config.enable_sni = false,
        Some(other) => return Err(format!("{} has an invalid value \"{other}\"", tls.setting("sslsni"))),
    }
    if mode == "disable" {
        verify = Verify::Off;
    }
    Ok((MakeRustlsConnect::new(config), verify))
}

/// `ssl_min_protocol_version` (libpq's default TLSv1.2) and `ssl_max_protocol_version`.
fn protocol_versions(tls: &TlsSettings) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let rank = |key: &str, value: Option<&str>, default: u8| match value {
        None | Some("") => Ok(default),
        Some("TLSv1") | Some("TLSv1.1") if key == "ssl_max_protocol_version" => {
            Err(format!("{}: TLS before 1.2 is not offered", tls.setting(key)))
        }
        Some("TLSv1") | Some("TLSv1.1") | Some("TLSv1.2") => Ok(2),
        Some("TLSv1.3") => Ok(3),
        Some(other) => Err(format!("{} has an invalid value \"{other}\"", tls.setting(key))),
    };
    let min = rank("ssl_min_protocol_version", tls.min_protocol.as_deref(), 2)?;
    let max = rank("ssl_max_protocol_version", tls.max_protocol.as_deref(), 3)?;
    if min > max {
        return Err("the database settings ssl_min_protocol_version is above ssl_max_protocol_version".into());
    }
    Ok([(2, &rustls::version::TLS12), (3, &rustls::version::TLS13)]
        .into_iter()
        .filter(|(rank, _)| (min..=max).contains(rank))
        .map(|(_, v)| v)
        .collect())
}

/// `prefer`/`require` without a root file: the channel is encrypted and the handshake's signatures
/// checked, the certificate's issuer and name are not (libpq's behaviour; `verify-full` is what
/// stops a man in the middle).
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked as `verify-full` checks it; only a name that does not match
/// is accepted.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(s: &str) -> Vec<(String, String)> {
        conninfo_pairs(s).unwrap()
    }

    #[test]
    fn conninfo_is_read_as_libpq_reads_it() {
        assert_eq!(
            pairs("host=db  port = 5432 password='a b\\'c' user=x\\ y"),
            vec![
                ("host".into(), "db".into()),
                ("port".into(), "5432".into()),
                ("password".into(), "a b'c".into()),
                ("user".into(), "x y".into())
            ]
        );
        assert!(conninfo_pairs("host=h pass word").unwrap_err().contains("without \"=\" after its setting 1"));
        assert!(conninfo_pairs("password='open").unwrap_err().contains("unterminated"));
    }

    /// A conninfo resolved with no environment (the user "u"), and the database it describes.
    fn resolved(conninfo: &str) -> Result<Database, String> {
        let process = libpq::Process { env: &|_| None, user: &|| Some("u".to_string()) };
        let settings = libpq::resolve(conninfo, &process, &mut |_| {})?;
        Database::from_settings(&settings, "t", Some(Path::new("/nonexistent-home")))
    }

    #[test]
    fn tls_settings_are_taken_out_of_both_forms() {
        let db = resolved("host=db dbname=erp sslmode=require password='p q'").unwrap();
        assert_eq!((db.verify(), db.config().get_ssl_mode()), (Verify::Encrypt, SslMode::Require));
        assert_eq!(db.config().get_password(), Some(&b"p q"[..]));
        let db = resolved("postgresql://u@db/erp?application_name=x&sslmode=disable").unwrap();
        assert_eq!((db.verify(), db.config().get_application_name()), (Verify::Off, Some("x")));
        let err = resolved("postgresql://u@db/erp?sslmode=verify-ca&sslrootcert=%2Fnonexistent.pem").err().unwrap();
        assert!(err.contains("sslrootcert names \"/nonexistent.pem\""), "{err}");
        assert!(resolved("host=db sslcrl=/x").err().unwrap().contains("sslcrl is not supported"));
        assert!(resolved("host=db gssencmode=prefer sslcompression=0 client_encoding=UTF8").is_ok());
        assert!(resolved("host=db gssencmode=require").err().unwrap().contains("gssencmode"));
        assert!(resolved("host=db port=x").err().unwrap().contains("setting port is not valid"));
        let db = resolved("host=db keepalives_count=3 fallback_application_name=f").unwrap();
        assert_eq!((db.config().get_keepalives_retries(), db.config().get_application_name()), (Some(3), Some("f")));
    }

    #[test]
    fn modes_decide_what_is_checked() {
        let db = |s: &str| resolved(s).map(|d| d.verify());
        assert_eq!(db("host=h").unwrap(), Verify::Encrypt);
        assert_eq!(db("host=h sslmode=disable").unwrap(), Verify::Off);
        assert_eq!(db("host=h sslmode=require").unwrap(), Verify::Encrypt);
        assert!(db("host=h sslmode=verify-full").unwrap_err().contains("needs a root certificate"));
        assert!(db("host=h sslmode=verify-ca").unwrap_err().contains("needs a root certificate"));
        assert!(db("host=h sslmode=sometimes").unwrap_err().contains("sslmode has an invalid value"));
        assert!(db("host=h sslrootcert=/nonexistent.pem sslmode=require").unwrap_err().contains("sslrootcert"));
        assert!(db("host=h sslrootcert=system sslmode=require").unwrap_err().contains("verify-full"));
        assert!(db("host=h ssl_min_protocol_version=TLSv1.3 ssl_max_protocol_version=TLSv1.2")
            .unwrap_err()
            .contains("above"));
    }

    #[test]
    fn an_error_names_where_the_setting_came_from() {
        let process = libpq::Process {
            env: &|k| (k == "PGSSLMODE").then(|| "sometimes".to_string()),
            user: &|| Some("u".to_string()),
        };
        let settings = libpq::resolve("host=h", &process, &mut |_| {}).unwrap();
        let err = Database::from_settings(&settings, "t", None).err().unwrap();
        assert!(err.contains("sslmode (from PGSSLMODE) has an invalid value"), "{err}");
    }

    #[test]
    fn unix_sockets_never_carry_tls_and_errors_never_repeat_the_password() {
        let db = Database::parse("host=/run/postgresql dbname=erp sslmode=require", "t").unwrap();
        assert_eq!(db.verify(), Verify::Off);
        assert_eq!(db.config().get_ssl_mode(), SslMode::Disable);
        let err = Database::parse("host=db password=hunter2 sslmode=nope", "t").unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
        let err = Database::parse("host=db password=hunter2 bogus=1", "t").unwrap_err();
        assert!(!err.contains("hunter2") && err.contains("bogus"), "{err}");
        let err = Database::parse("host=db sslpassword=hunter2", "t").unwrap_err();
        assert!(!err.contains("hunter2") && err.contains("sslpassword"), "{err}");
        let db = Database::parse("postgresql://u:hunter2@db/erp", "toolgate").unwrap();
        assert!(!format!("{db:?}").contains("hunter2"));
        assert_eq!(db.config().get_application_name(), Some("toolgate"));
    }
}
