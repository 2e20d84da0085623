//! The server's configuration, from its environment. Nothing here decides anything: it says where
//! the gate is, who calls it, and how the person's answers are signed.

use serde_json::Value;
use std::collections::HashMap;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use toolgate_core::token::Signer;

pub use crate::gate::PoolSize;

/// The longest the server waits for the person's answer unless `TOOLGATE_CONFIRM_WAIT` says.
pub const DEFAULT_CONFIRM_WAIT: Duration = Duration::from_secs(300);

/// The longest a call waits for a row lock unless `TOOLGATE_LOCK_TIMEOUT` says.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest one statement (a call) runs unless `TOOLGATE_STATEMENT_TIMEOUT` says.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest a client may take to send a request's headers, then its body, unless
/// `TOOLGATE_READ_TIMEOUT` says.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a bearer token's listing serves its `tools/call` requests unless
/// `TOOLGATE_LISTING_TTL` says.
pub const DEFAULT_LISTING_TTL: Duration = Duration::from_secs(10);

/// The longest a request waits for a database connection unless `TOOLGATE_POOL_WAIT` says.
pub const DEFAULT_POOL_WAIT: Duration = Duration::from_secs(5);

/// Connections to the database unless `TOOLGATE_POOL_SIZE` says: four per core (a call spends
/// most of its time waiting on the database's answer, not on this process's CPU).
pub fn default_pool_size() -> usize {
    4 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What `toolgate mcp` reads from its environment.
pub struct Config {
    /// `TOOLGATE_DATABASE_URL`: the application login's conninfo or URL, TLS as its `sslmode` says.
    pub database: toolgate_pgconn::Database,
    /// `TOOLGATE_POOL_SIZE`, `TOOLGATE_POOL_QUEUE` and `TOOLGATE_POOL_WAIT`.
    pub pool: PoolSize,
    /// Who calls, and how their answers are carried: one person on stdio, or anyone over HTTP.
    pub transport: Transport,
    /// `TOOLGATE_CONFIRM_WAIT` (seconds).
    pub confirm_wait: Duration,
    /// `TOOLGATE_LOCK_TIMEOUT` (seconds; 0: no limit): how long a call waits for a row lock
    /// (`lock_timeout`) before it is rolled back, so one waiting call does not hold the server.
    pub lock_timeout: Duration,
    /// `TOOLGATE_STATEMENT_TIMEOUT` (seconds; 0: no limit): how long one call may run
    /// (`statement_timeout`).
    pub statement_timeout: Duration,
    /// `TOOLGATE_STATE_KEY_FILE`: the secret (32 bytes or more) a `requestState` (protocol
    /// 2026-07-28) is sealed with. Without it each process makes one of its own, so a state one
    /// process sealed is refused by another: set the same file on every process behind one URL.
    pub state_key: Vec<u8>,
}

/// The transport's own configuration.
#[allow(clippy::large_enum_variant)] // one per process
pub enum Transport {
    Stdio(Stdio),
    Http(Http),
}

/// stdio: one process per person, as hosts run stdio servers.
pub struct Stdio {
    /// `TOOLGATE_IDENTITY_TOKEN_FILE` or `TOOLGATE_IDENTITY_TOKEN`.
    pub identity: Identity,
    /// `TOOLGATE_CHANNEL_KEY_FILE` and `TOOLGATE_CHANNEL_KID`: without it the server never confirms.
    pub channel: Option<Signer>,
    /// `TOOLGATE_CONVERSATION`, or one fresh id per process. Never a tool argument.
    pub conversation: String,
    /// `TOOLGATE_CHANNEL_MESSAGE_FILE`: where the gateway appends the channel-signed answers of
    /// the person, one compact JWS a line, the newest last.
    pub message_file: Option<PathBuf>,
}

/// Streamable HTTP at `/mcp`: any tenant's people, each request with its bearer token.
pub struct Http {
    /// `toolgate mcp --http ADDR`.
    pub addr: SocketAddr,
    /// `TOOLGATE_CHANNEL_KEYS`: each tenant's channel key. A tenant without one can read and
    /// propose, never confirm through the server.
    pub channels: HashMap<String, Signer>,
    /// `TOOLGATE_RESOURCE_URL`: the URL hosts reach `/mcp` at (RFC 9728's `resource`); by default
    /// `http://ADDR/mcp`.
    pub resource: String,
    /// `TOOLGATE_ALLOWED_HOSTS` (comma-separated): the `Host` headers served (DNS rebinding);
    /// by default loopback and the resource URL's host.
    pub allowed_hosts: Vec<String>,
    /// `toolgate mcp --listen ADDR` (loopback only): `/metrics`, `/healthz` and `/readyz` for the
    /// operator, as `toolgate dispatch --listen`. `/healthz` and `/readyz` are also on `/mcp`'s
    /// address, for a load balancer.
    pub listen: Option<SocketAddr>,
    /// `--tls-cert FILE --tls-key FILE`: serve HTTPS with this certificate chain and key (PEM),
    /// read again on SIGHUP or when either file changes.
    pub tls: Option<ListenerTls>,
    /// `TOOLGATE_READ_TIMEOUT` (seconds): the longest a client may take to send a request's
    /// headers, and then its body.
    pub read_timeout: Duration,
    /// `TOOLGATE_LISTING_TTL` (seconds; 0: none): how long the gate's listing for a bearer token
    /// serves that token's `tools/call` requests without asking the gate first (the call itself
    /// verifies the token in the gate).
    pub listing_ttl: Duration,
}

/// The listener's certificate and key files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How `toolgate mcp` was started: its command line.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--http ADDR`.
    pub http: Option<String>,
    /// `--listen ADDR`.
    pub listen: Option<String>,
    /// `--tls-cert FILE`.
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key FILE`.
    pub tls_key: Option<PathBuf>,
    /// `--insecure-http`: plain HTTP on an address other than loopback (behind a TLS proxy).
    pub insecure_http: bool,
}

impl Config {
    /// The configuration of the process's environment; `http` is `--http ADDR`.
    pub fn from_env(http: Option<&str>) -> Result<Config, String> {
        Config::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.is_empty()), http)
    }

    /// The configuration of the environment and the command line.
    pub fn from_options(options: &Options) -> Result<Config, String> {
        let mut config = Config::from_env(options.http.as_deref())?;
        config.apply(options)?;
        Ok(config)
    }

    /// The command line's listener settings: `--listen`, `--tls-cert`/`--tls-key`, and whether
    /// plain HTTP may be served beyond loopback.
    pub fn apply(&mut self, options: &Options) -> Result<(), String> {
        if let Some(listen) = &options.listen {
            self.listen(listen)?;
        }
        let tls = match (&options.tls_cert, &options.tls_key) {
            (Some(cert), Some(key)) => Some(ListenerTls { cert: cert.clone(), key: key.clone() }),
            (None, None) => None,
            _ => return Err("--tls-cert and --tls-key go together".into()),
        };
        let Transport::Http(http) = &mut self.transport else {
            if tls.is_some() || options.insecure_http {
                return Err("--tls-cert, --tls-key and --insecure-http go with --http".into());
            }
            return Ok(());
        };
        if tls.is_none() && !http.addr.ip().is_loopback() && !options.insecure_http {
            return Err(format!(
                "--http {}: plain HTTP beyond loopback would carry every bearer token in clear (the MCP \
                 authorization spec requires HTTPS): give --tls-cert and --tls-key, or --insecure-http when a TLS \
                 proxy in front is the only way in",
                http.addr
            ));
        }
        if tls.is_some() && http.resource == format!("http://{}/mcp", http.addr) {
            // The default resource URL follows the scheme served.
            http.resource = format!("https://{}/mcp", http.addr);
        }
        http.tls = tls;
        Ok(())
    }

    /// `--listen ADDR`: where the operator's endpoints are served (HTTP only; a loopback address).
    pub fn listen(&mut self, addr: &str) -> Result<(), String> {
        let Transport::Http(http) = &mut self.transport else {
            return Err("--listen goes with --http: a stdio server has no metrics endpoint".into());
        };
        let parsed: SocketAddr = addr.parse().map_err(|e| format!("--listen {addr:?}: an address and port ({e})"))?;
        if !parsed.ip().is_loopback() {
            return Err(format!(
                "--listen {addr}: a loopback address only (127.0.0.1, ::1): /metrics is plain HTTP; put a TLS proxy \
                 in front for a scraper elsewhere"
            ));
        }
        http.listen = Some(parsed);
        Ok(())
    }

    /// The configuration `var` gives (an unset or empty variable: `None`).
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>, http: Option<&str>) -> Result<Config, String> {
        let url = var("TOOLGATE_DATABASE_URL").ok_or("TOOLGATE_DATABASE_URL is not set")?;
        let database = toolgate_pgconn::Database::parse(&url, "toolgate-mcp")
            .map_err(|e| format!("TOOLGATE_DATABASE_URL: {e}"))?;
        let transport = match http {
            None => Transport::Stdio(Stdio::from_lookup(&var)?),
            Some(addr) => Transport::Http(Http::from_lookup(&var, addr)?),
        };
        let confirm_wait = seconds(&var, "TOOLGATE_CONFIRM_WAIT", DEFAULT_CONFIRM_WAIT)?;
        let Pooling { pool, lock_timeout, statement_timeout } = Pooling::from_lookup(&var)?;
        let state_key = match var("TOOLGATE_STATE_KEY_FILE") {
            Some(file) => {
                let key = fs::read(&file).map_err(|e| format!("TOOLGATE_STATE_KEY_FILE {file}: {e}"))?;
                let key = key.trim_ascii().to_vec();
                if key.len() < 32 {
                    return Err(format!("TOOLGATE_STATE_KEY_FILE {file}: a secret of 32 bytes or more"));
                }
                key
            }
            None => random_bytes::<32>()?.to_vec(),
        };
        Ok(Config { database, pool, transport, confirm_wait, lock_timeout, statement_timeout, state_key })
    }

    /// What every connection to the gate sets first: the waits a call may make, and over HTTP the
    /// audience each token must name (the resource URL, RFC 8707: a token issued for another
    /// resource, or for none, is refused by the gate itself).
    pub fn session_settings(&self) -> Vec<(String, String)> {
        let pooling =
            Pooling { pool: self.pool, lock_timeout: self.lock_timeout, statement_timeout: self.statement_timeout };
        let mut settings = pooling.settings();
        if let Transport::Http(http) = &self.transport {
            settings.push(("toolgate.audience".to_string(), http.resource.clone()));
        }
        settings
    }
}

/// A setting of whole seconds (`default` when unset).
fn seconds(var: &impl Fn(&str) -> Option<String>, name: &str, default: Duration) -> Result<Duration, String> {
    match var(name) {
        Some(s) => {
            Ok(Duration::from_secs(s.trim().parse().map_err(|_| format!("{name} {s:?}: a whole number of seconds"))?))
        }
        None => Ok(default),
    }
}

/// How a process around the gate holds its connections, the same for each (`toolgate mcp
/// --http`, `toolgate console`): `TOOLGATE_POOL_SIZE`, `TOOLGATE_POOL_QUEUE`,
/// `TOOLGATE_POOL_WAIT`, and the waits a statement may make, `TOOLGATE_LOCK_TIMEOUT` and
/// `TOOLGATE_STATEMENT_TIMEOUT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pooling {
    pub pool: PoolSize,
    pub lock_timeout: Duration,
    pub statement_timeout: Duration,
}

impl Pooling {
    pub fn from_lookup(var: &impl Fn(&str) -> Option<String>) -> Result<Pooling, String> {
        let count = |name: &str, default: usize| -> Result<usize, String> {
            match var(name) {
                Some(s) => s.trim().parse().map_err(|_| format!("{name} {s:?}: a whole number")),
                None => Ok(default),
            }
        };
        let size = count("TOOLGATE_POOL_SIZE", default_pool_size())?;
        if size == 0 {
            return Err("TOOLGATE_POOL_SIZE 0: at least one connection".into());
        }
        let pool = PoolSize {
            size,
            queue: count("TOOLGATE_POOL_QUEUE", 8 * size)?,
            wait: seconds(var, "TOOLGATE_POOL_WAIT", DEFAULT_POOL_WAIT)?,
        };
        Ok(Pooling {
            pool,
            lock_timeout: seconds(var, "TOOLGATE_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT)?,
            statement_timeout: seconds(var, "TOOLGATE_STATEMENT_TIMEOUT", DEFAULT_STATEMENT_TIMEOUT)?,
        })
    }

    /// The process's environment.
    pub fn from_env() -> Result<Pooling, String> {
        Pooling::from_lookup(&|name: &str| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// The waits every connection sets first.
    pub fn settings(&self) -> Vec<(String, String)> {
        let millis = |d: Duration| format!("{}ms", d.as_millis());
        vec![
            ("lock_timeout".to_string(), millis(self.lock_timeout)),
            ("statement_timeout".to_string(), millis(self.statement_timeout)),
        ]
    }
}

impl Stdio {
    fn from_lookup(var: &impl Fn(&str) -> Option<String>) -> Result<Stdio, String> {
        let identity = match (var("TOOLGATE_IDENTITY_TOKEN_FILE"), var("TOOLGATE_IDENTITY_TOKEN")) {
            (Some(file), _) => Identity::File { path: PathBuf::from(file), cached: Mutex::new(None) },
            (None, Some(token)) => Identity::Token(token.trim().to_string()),
            (None, None) => return Err("set TOOLGATE_IDENTITY_TOKEN_FILE or TOOLGATE_IDENTITY_TOKEN".into()),
        };
        let channel = match (var("TOOLGATE_CHANNEL_KEY_FILE"), var("TOOLGATE_CHANNEL_KID")) {
            (Some(file), Some(kid)) => Some(signer(&kid, Path::new(&file), "TOOLGATE_CHANNEL_KEY_FILE")?),
            (None, None) => None,
            _ => return Err("TOOLGATE_CHANNEL_KEY_FILE and TOOLGATE_CHANNEL_KID go together".into()),
        };
        let conversation = match var("TOOLGATE_CONVERSATION") {
            Some(c) => c,
            None => fresh_conversation()?,
        };
        let message_file = var("TOOLGATE_CHANNEL_MESSAGE_FILE").map(PathBuf::from);
        Ok(Stdio { identity, channel, conversation, message_file })
    }
}

impl Http {
    fn from_lookup(var: &impl Fn(&str) -> Option<String>, addr: &str) -> Result<Http, String> {
        let addr: SocketAddr =
            addr.parse().map_err(|_| format!("--http {addr:?}: an address and port, such as 127.0.0.1:8808"))?;
        for stdio_only in ["TOOLGATE_IDENTITY_TOKEN_FILE", "TOOLGATE_IDENTITY_TOKEN", "TOOLGATE_CHANNEL_KEY_FILE"] {
            if var(stdio_only).is_some() {
                return Err(format!(
                    "{stdio_only} is for stdio; over HTTP each request carries its bearer token and the \
                     channel keys come from TOOLGATE_CHANNEL_KEYS"
                ));
            }
        }
        let channels = match var("TOOLGATE_CHANNEL_KEYS") {
            Some(file) => channel_keys(Path::new(&file))?,
            None => HashMap::new(),
        };
        let resource = var("TOOLGATE_RESOURCE_URL").unwrap_or_else(|| format!("http://{addr}/mcp"));
        let mut allowed_hosts: Vec<String> = match var("TOOLGATE_ALLOWED_HOSTS") {
            Some(list) => list.split(',').map(|h| h.trim().to_string()).filter(|h| !h.is_empty()).collect(),
            None => ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec(),
        };
        if let Some(host) = authority(&resource) {
            if !allowed_hosts.iter().any(|h| h == host) {
                allowed_hosts.push(host.to_string());
            }
        }
        let read_timeout = match var("TOOLGATE_READ_TIMEOUT") {
            Some(s) => match s.trim().parse::<u64>() {
                Ok(n) if n > 0 => Duration::from_secs(n),
                _ => return Err(format!("TOOLGATE_READ_TIMEOUT {s:?}: a whole number of seconds, 1 or more")),
            },
            None => DEFAULT_READ_TIMEOUT,
        };
        let listing_ttl = match var("TOOLGATE_LISTING_TTL") {
            Some(s) => Duration::from_secs(
                s.trim().parse().map_err(|_| format!("TOOLGATE_LISTING_TTL {s:?}: a whole number of seconds"))?,
            ),
            None => DEFAULT_LISTING_TTL,
        };
        Ok(Http { addr, channels, resource, allowed_hosts, listen: None, tls: None, read_timeout, listing_ttl })
    }
}

/// `host[:port]` of an `http(s)://` URL.
fn authority(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"))?;
    rest.split(['/', '?', '#']).next().filter(|a| !a.is_empty())
}

/// The signer of the key in `file` (PKCS#8 PEM or `toolgate keygen`'s older format).
fn signer(kid: &str, file: &Path, what: &str) -> Result<Signer, String> {
    let text = fs::read_to_string(file).map_err(|e| format!("{what} {}: {e}", file.display()))?;
    Signer::from_key_text(kid, &text).map_err(|e| format!("{what} {}: {e}", file.display()))
}

/// `TOOLGATE_CHANNEL_KEYS`: `{"tenant": {"kid": …, "key_file": …}, …}`, a relative `key_file`
/// read from the JSON file's directory.
fn channel_keys(file: &Path) -> Result<HashMap<String, Signer>, String> {
    let what = format!("TOOLGATE_CHANNEL_KEYS {}", file.display());
    let text = fs::read_to_string(file).map_err(|e| format!("{what}: {e}"))?;
    let Ok(Value::Object(tenants)) = serde_json::from_str::<Value>(&text) else {
        return Err(format!("{what}: a JSON object mapping each tenant to {{\"kid\": …, \"key_file\": …}}"));
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut channels = HashMap::with_capacity(tenants.len());
    for (tenant, entry) in tenants {
        let (Some(kid), Some(key_file)) = (entry["kid"].as_str(), entry["key_file"].as_str()) else {
            return Err(format!("{what}: tenant {tenant:?} needs \"kid\" and \"key_file\" strings"));
        };
        channels.insert(tenant, signer(kid, &dir.join(key_file), &what)?);
    }
    Ok(channels)
}

fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness: {e}"))?;
    Ok(bytes)
}

/// One fresh conversation id: `mcp-` and 32 random hex digits.
fn fresh_conversation() -> Result<String, String> {
    let bytes = random_bytes::<16>()?;
    Ok(format!("mcp-{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// Where the caller's identity token comes from.
pub enum Identity {
    Token(String),
    /// A file a sidecar refreshes: read again whenever its modification time or length changes.
    File {
        path: PathBuf,
        cached: Mutex<Option<(SystemTime, u64, String)>>,
    },
}

impl Identity {
    /// The token to send now. The error names the file, never the token.
    pub fn token(&self) -> Result<String, String> {
        match self {
            Identity::Token(t) => Ok(t.clone()),
            Identity::File { path, cached } => {
                let unreadable =
                    |e: std::io::Error| format!("the identity token file {} is unreadable: {e}", path.display());
                let meta = fs::metadata(path).map_err(unreadable)?;
                let stamp = (meta.modified().map_err(unreadable)?, meta.len());
                let mut cached = cached.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((modified, len, token)) = cached.as_ref() {
                    if (*modified, *len) == stamp {
                        return Ok(token.clone());
                    }
                }
                let token = fs::read_to_string(path).map_err(unreadable)?.trim().to_string();
                *cached = Some((stamp.0, stamp.1, token.clone()));
                Ok(token)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| vars.get(k).cloned()
    }

    fn config(vars: &[(&str, &str)]) -> Result<Config, String> {
        Config::from_lookup(lookup(vars), None)
    }

    fn stdio(c: &Config) -> &Stdio {
        match &c.transport {
            Transport::Stdio(s) => s,
            Transport::Http(_) => panic!("not stdio"),
        }
    }

    #[test]
    fn conninfo_and_url_both_parse() {
        let c = config(&[
            ("TOOLGATE_DATABASE_URL", "host=/tmp/x/socket port=5433 user=toolgate_app dbname=lab"),
            ("TOOLGATE_IDENTITY_TOKEN", "t"),
        ])
        .unwrap();
        assert_eq!(c.database.config().get_ports(), &[5433]);
        assert_eq!(c.database.config().get_user(), Some("toolgate_app"));
        assert_eq!(c.database.config().get_application_name(), Some("toolgate-mcp"));
        assert!(stdio(&c).conversation.starts_with("mcp-") && stdio(&c).conversation.len() == 36);
        assert_eq!(c.confirm_wait, DEFAULT_CONFIRM_WAIT);
        assert_eq!(c.state_key.len(), 32);
        assert!(stdio(&c).channel.is_none() && stdio(&c).message_file.is_none());
        let c = config(&[
            ("TOOLGATE_DATABASE_URL", "postgresql://toolgate_app@localhost:5434/lab"),
            ("TOOLGATE_IDENTITY_TOKEN", "t"),
            ("TOOLGATE_CONVERSATION", "conv-1"),
            ("TOOLGATE_CONFIRM_WAIT", "7"),
        ])
        .unwrap();
        assert_eq!(c.database.config().get_dbname(), Some("lab"));
        assert_eq!(stdio(&c).conversation, "conv-1");
        assert_eq!(c.confirm_wait, Duration::from_secs(7));
    }

    #[test]
    fn connections_are_told_the_waits_and_over_http_the_audience() {
        let c = config(&[("TOOLGATE_DATABASE_URL", "host=/tmp"), ("TOOLGATE_IDENTITY_TOKEN", "t")]).unwrap();
        let settings = c.session_settings();
        assert!(settings.contains(&("lock_timeout".into(), "5000ms".into())), "{settings:?}");
        assert!(settings.contains(&("statement_timeout".into(), "30000ms".into())), "{settings:?}");
        assert!(!settings.iter().any(|(n, _)| n == "toolgate.audience"), "stdio expects no audience");
        let http = Config::from_lookup(
            lookup(&[
                ("TOOLGATE_DATABASE_URL", "host=/tmp"),
                ("TOOLGATE_RESOURCE_URL", "https://mcp.example.com/mcp"),
                ("TOOLGATE_LOCK_TIMEOUT", "2"),
            ]),
            Some("127.0.0.1:8808"),
        )
        .unwrap();
        let settings = http.session_settings();
        assert!(settings.contains(&("toolgate.audience".into(), "https://mcp.example.com/mcp".into())), "{settings:?}");
        assert!(settings.contains(&("lock_timeout".into(), "2000ms".into())), "{settings:?}");
    }

    #[test]
    fn the_pool_and_the_operator_address_are_read() {
        let vars = [("TOOLGATE_DATABASE_URL", "host=/tmp"), ("TOOLGATE_IDENTITY_TOKEN", "t")];
        let c = config(&vars).unwrap();
        assert_eq!(c.pool.size, default_pool_size());
        assert_eq!((c.pool.queue, c.pool.wait), (8 * c.pool.size, DEFAULT_POOL_WAIT));
        let mut more = vars.to_vec();
        more.extend([("TOOLGATE_POOL_SIZE", "3"), ("TOOLGATE_POOL_QUEUE", "0"), ("TOOLGATE_POOL_WAIT", "2")]);
        let c = config(&more).unwrap();
        assert_eq!(c.pool, PoolSize { size: 3, queue: 0, wait: Duration::from_secs(2) });
        let zero =
            [("TOOLGATE_DATABASE_URL", "host=/tmp"), ("TOOLGATE_IDENTITY_TOKEN", "t"), ("TOOLGATE_POOL_SIZE", "0")];
        assert!(config(&zero).err().unwrap().contains("at least one"));
        let e = config(&[("TOOLGATE_DATABASE_URL", "host=db sslmode=verify-full sslrootcert=/nonexistent.pem")])
            .err()
            .unwrap();
        assert!(e.contains("TOOLGATE_DATABASE_URL") && e.contains("sslrootcert"), "{e}");
        let mut stdio = config(&vars).unwrap();
        assert!(stdio.listen("127.0.0.1:9808").unwrap_err().contains("goes with --http"));
        let mut http =
            Config::from_lookup(lookup(&[("TOOLGATE_DATABASE_URL", "host=/tmp")]), Some("127.0.0.1:8808")).unwrap();
        assert!(http.listen("0.0.0.0:9808").unwrap_err().contains("loopback"));
        http.listen("127.0.0.1:9808").unwrap();
        let Transport::Http(h) = &http.transport else { panic!("http") };
        assert_eq!(h.listen, Some("127.0.0.1:9808".parse().unwrap()));
    }

    #[test]
    fn what_is_missing_is_named() {
        assert!(config(&[]).err().unwrap().contains("TOOLGATE_DATABASE_URL"));
        let e = config(&[("TOOLGATE_DATABASE_URL", "host=/tmp")]).err().unwrap();
        assert!(e.contains("TOOLGATE_IDENTITY_TOKEN"), "{e}");
        let e = config(&[
            ("TOOLGATE_DATABASE_URL", "host=/tmp"),
            ("TOOLGATE_IDENTITY_TOKEN", "t"),
            ("TOOLGATE_CHANNEL_KID", "chan-a"),
        ])
        .err()
        .unwrap();
        assert!(e.contains("go together"), "{e}");
    }

    #[test]
    fn http_takes_channel_keys_per_tenant() {
        let dir = std::env::temp_dir().join(format!("toolgate-mcp-http-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let signer = Signer::from_seed("chan-a", [5; 32]);
        fs::write(dir.join("chan-a.pem"), signer.to_pkcs8_pem()).unwrap();
        fs::write(dir.join("keys.json"), r#"{"tenant-a": {"kid": "chan-a", "key_file": "chan-a.pem"}}"#).unwrap();
        fs::write(dir.join("state.key"), "0123456789abcdef0123456789abcdef\n").unwrap();
        let keys = dir.join("keys.json").display().to_string();
        let state = dir.join("state.key").display().to_string();
        let base = [("TOOLGATE_DATABASE_URL", "host=/tmp"), ("TOOLGATE_CHANNEL_KEYS", keys.as_str())];
        let c = Config::from_lookup(
            lookup(&[base[0], base[1], ("TOOLGATE_STATE_KEY_FILE", &state)]),
            Some("127.0.0.1:8808"),
        )
        .unwrap();
        assert_eq!(c.state_key, b"0123456789abcdef0123456789abcdef");
        let Transport::Http(h) = &c.transport else { panic!("not http") };
        assert_eq!(h.addr.port(), 8808);
        assert_eq!(h.resource, "http://127.0.0.1:8808/mcp");
        assert!(h.allowed_hosts.contains(&"127.0.0.1:8808".to_string()), "{:?}", h.allowed_hosts);
        assert_eq!(h.channels["tenant-a"].kid(), "chan-a");
        let with_url = [base[0], ("TOOLGATE_RESOURCE_URL", "https://mcp.example.com/mcp")];
        let c = Config::from_lookup(lookup(&with_url), Some("0.0.0.0:80")).unwrap();
        let Transport::Http(h) = &c.transport else { panic!("not http") };
        assert!(h.allowed_hosts.contains(&"mcp.example.com".to_string()) && h.channels.is_empty());
        let e = Config::from_lookup(lookup(&[base[0], ("TOOLGATE_IDENTITY_TOKEN", "t")]), Some("127.0.0.1:1"));
        assert!(e.err().unwrap().contains("is for stdio"));
        fs::write(dir.join("short.key"), "too short").unwrap();
        let short = dir.join("short.key").display().to_string();
        let e = Config::from_lookup(lookup(&[base[0], ("TOOLGATE_STATE_KEY_FILE", &short)]), Some("127.0.0.1:1"));
        assert!(e.err().unwrap().contains("32 bytes"));
        fs::write(dir.join("keys.json"), r#"{"tenant-a": {"kid": "chan-a"}}"#).unwrap();
        let e = Config::from_lookup(lookup(&base), Some("127.0.0.1:1"));
        assert!(e.err().unwrap().contains("key_file"));
        assert!(Config::from_lookup(lookup(&base[..1]), Some("nowhere")).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_token_file_is_read_again_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("toolgate-mcp-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("identity");
        fs::write(&file, "first\n").unwrap();
        let identity = Identity::File { path: file.clone(), cached: Mutex::new(None) };
        assert_eq!(identity.token().unwrap(), "first");
        fs::write(&file, "second-token\n").unwrap();
        assert_eq!(identity.token().unwrap(), "second-token");
        fs::remove_file(&file).unwrap();
        assert!(identity.token().unwrap_err().contains("unreadable"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
