//! A conninfo or URL resolved as libpq resolves it, before anything connects: the string's own
//! settings first, then its service's (`service=`, or `PGSERVICE`) from `pg_service.conf`, then the
//! `PG*` environment variables, then the defaults (the socket directory, port 5432, the operating
//! system's user name, a database named as the user); and when no password is given, the password
//! file's (`passfile=`, `PGPASSFILE`, or `~/.pgpass`). Each setting remembers where it came from,
//! so an error names it there (`PGSSLMODE`, `pg_service.conf line 3`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where libpq's default socket directory is: Debian's and PGDG's libpq use `/var/run/postgresql`,
/// a libpq built from PostgreSQL's source `/tmp`. The first of them that exists.
pub(crate) fn default_socket_dir() -> &'static str {
    ["/var/run/postgresql", "/tmp"].into_iter().find(|d| Path::new(d).is_dir()).unwrap_or("/tmp")
}

/// Where the system-wide `pg_service.conf` is when `PGSYSCONFDIR` is not set (Debian's libpq).
const SYSCONFDIR: &str = "/etc/postgresql-common";

/// libpq's connection settings this reads, each with its environment variable.
const KEYWORDS: &[(&str, Option<&str>)] = &[
    ("service", Some("PGSERVICE")),
    ("user", Some("PGUSER")),
    ("password", Some("PGPASSWORD")),
    ("passfile", Some("PGPASSFILE")),
    ("channel_binding", Some("PGCHANNELBINDING")),
    ("connect_timeout", Some("PGCONNECT_TIMEOUT")),
    ("dbname", Some("PGDATABASE")),
    ("host", Some("PGHOST")),
    ("hostaddr", Some("PGHOSTADDR")),
    ("port", Some("PGPORT")),
    ("client_encoding", Some("PGCLIENTENCODING")),
    ("options", Some("PGOPTIONS")),
    ("application_name", Some("PGAPPNAME")),
    ("fallback_application_name", None),
    ("keepalives", None),
    ("keepalives_idle", None),
    ("keepalives_interval", None),
    ("keepalives_count", None),
    ("tcp_user_timeout", None),
    ("sslmode", Some("PGSSLMODE")),
    ("sslnegotiation", Some("PGSSLNEGOTIATION")),
    ("sslcompression", Some("PGSSLCOMPRESSION")),
    ("sslcert", Some("PGSSLCERT")),
    ("sslkey", Some("PGSSLKEY")),
    ("sslcertmode", Some("PGSSLCERTMODE")),
    ("sslpassword", None),
    ("sslrootcert", Some("PGSSLROOTCERT")),
    ("sslcrl", Some("PGSSLCRL")),
    ("sslcrldir", Some("PGSSLCRLDIR")),
    ("sslsni", Some("PGSSLSNI")),
    ("sslkeylogfile", None),
    ("requirepeer", Some("PGREQUIREPEER")),
    ("require_auth", Some("PGREQUIREAUTH")),
    ("ssl_min_protocol_version", Some("PGSSLMINPROTOCOLVERSION")),
    ("ssl_max_protocol_version", Some("PGSSLMAXPROTOCOLVERSION")),
    ("min_protocol_version", Some("PGMINPROTOCOLVERSION")),
    ("max_protocol_version", Some("PGMAXPROTOCOLVERSION")),
    ("gssencmode", Some("PGGSSENCMODE")),
    ("krbsrvname", Some("PGKRBSRVNAME")),
    ("gsslib", Some("PGGSSLIB")),
    ("gssdelegation", Some("PGGSSDELEGATION")),
    ("replication", None),
    ("target_session_attrs", Some("PGTARGETSESSIONATTRS")),
    ("load_balance_hosts", Some("PGLOADBALANCEHOSTS")),
    ("scram_client_key", None),
    ("scram_server_key", None),
];

fn known(key: &str) -> bool {
    KEYWORDS.iter().any(|(k, _)| *k == key)
}

/// Where a setting came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    Given,
    Service(PathBuf, usize),
    Env(&'static str),
    Default,
    Passfile(PathBuf, usize),
}

/// One resolved setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Setting {
    pub value: String,
    pub origin: Origin,
}

/// The settings, by keyword.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Settings(pub BTreeMap<String, Setting>);

impl Settings {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|s| s.value.as_str())
    }

    /// `key` with where it came from, for an error: `sslmode`, `sslmode (PGSSLMODE)`,
    /// `sslmode (pg_service.conf line 3)`.
    pub fn name(&self, key: &str) -> String {
        match self.0.get(key).map(|s| &s.origin) {
            Some(Origin::Service(file, line)) => format!("{key} (from {} line {line})", file.display()),
            Some(Origin::Env(var)) => format!("{key} (from {var})"),
            Some(Origin::Passfile(file, line)) => format!("{key} (from {} line {line})", file.display()),
            _ => key.to_string(),
        }
    }

    fn unset(&self, key: &str) -> bool {
        self.get(key).is_none_or(str::is_empty)
    }

    fn put(&mut self, key: &str, value: String, origin: Origin) {
        self.0.insert(key.to_string(), Setting { value, origin });
    }
}

/// What resolving reads of the process: its environment (`HOME` too) and its user's name.
pub(crate) struct Process<'a> {
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub user: &'a dyn Fn() -> Option<String>,
}

/// `conninfo` (a conninfo or a URL) resolved as libpq resolves it; warnings (a password file
/// others can read, ignored as libpq ignores it) go to `warn`.
pub(crate) fn resolve(conninfo: &str, process: &Process, warn: &mut dyn FnMut(String)) -> Result<Settings, String> {
    let mut settings = Settings::default();
    let trimmed = conninfo.trim();
    let given = if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
        uri_pairs(trimmed)?
    } else {
        let pairs = crate::conninfo_pairs(conninfo)?;
        if let Some((key, _)) = pairs.iter().find(|(k, _)| !known(k)) {
            return Err(format!("the database conninfo has an invalid connection option \"{key}\""));
        }
        pairs
    };
    for (key, value) in given {
        settings.put(&key, value, Origin::Given);
    }
    // The service: its settings fill what the string did not set.
    let service = match settings.get("service") {
        Some(s) if !s.is_empty() => Some(s.to_string()),
        _ => (process.env)("PGSERVICE").filter(|s| !s.is_empty()),
    };
    if let Some(service) = service {
        read_service(&service, &mut settings, process)?;
    }
    // The environment fills what is still unset (a variable set to "" counts, as in libpq).
    for (key, var) in KEYWORDS {
        if let Some(var) = var {
            if !settings.0.contains_key(*key) {
                if let Some(value) = (process.env)(var) {
                    settings.put(key, value, Origin::Env(var));
                }
            }
        }
    }
    // The defaults.
    if settings.unset("host") && settings.unset("hostaddr") {
        settings.put("host", default_socket_dir().to_string(), Origin::Default);
    }
    if settings.unset("port") {
        settings.put("port", "5432".into(), Origin::Default);
    }
    if settings.unset("user") {
        let user = (process.user)().ok_or("the database user is not set, and this process's user has no name")?;
        settings.put("user", user, Origin::Default);
    }
    if settings.unset("dbname") {
        let user = settings.get("user").unwrap_or_default().to_string();
        settings.put("dbname", user, Origin::Default);
    }
    if settings.unset("password") {
        password_from_file(&mut settings, process, warn)?;
    }
    Ok(settings)
}

/// The `key=value` pairs of a `postgresql://` URL, as libpq reads them:
/// `postgresql://[user[:password]@][host][:port][,host[:port]…][/dbname][?key=value&…]`, every
/// part percent-decoded; `ssl=true` is `sslmode=require`.
fn uri_pairs(uri: &str) -> Result<Vec<(String, String)>, String> {
    let decode = |s: &str, what: &str| {
        crate::percent_decode(s).ok_or_else(|| format!("the database URL's {what} is not percent-encoded right"))
    };
    let rest = uri.split_once("://").map_or("", |(_, r)| r);
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = before_query.split_once('/').unwrap_or((before_query, ""));
    let mut pairs = Vec::new();
    let netloc = match authority.rsplit_once('@') {
        Some((userinfo, netloc)) => {
            let (user, password) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            if !user.is_empty() {
                pairs.push(("user".to_string(), decode(user, "user")?));
            }
            if let Some(p) = password {
                pairs.push(("password".to_string(), decode(p, "password")?));
            }
            netloc
        }
        None => authority,
    };
    if !netloc.is_empty() {
        let (mut hosts, mut ports) = (Vec::new(), Vec::new());
        for part in netloc.split(',') {
            let (host, port) = if let Some(inner) = part.strip_prefix('[') {
                let (host, after) =
                    inner.split_once(']').ok_or("the database URL has an IPv6 host without its closing \"]\"")?;
                (host, after.strip_prefix(':').unwrap_or(""))
            } else {
                part.split_once(':').unwrap_or((part, ""))
            };
            hosts.push(decode(host, "host")?);
            ports.push(decode(port, "port")?);
        }
        if hosts.iter().any(|h| !h.is_empty()) {
            pairs.push(("host".to_string(), hosts.join(",")));
        }
        if ports.iter().any(|p| !p.is_empty()) {
            pairs.push(("port".to_string(), ports.join(",")));
        }
    }
    if !path.is_empty() {
        pairs.push(("dbname".to_string(), decode(path, "database name")?));
    }
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let Some((key, value)) = param.split_once('=') else {
            return Err(format!("the database URL's parameter \"{param}\" has no \"=\""));
        };
        let (key, value) = (decode(key, "parameter name")?, decode(value, key)?);
        let (key, value) =
            if key == "ssl" && value == "true" { ("sslmode".to_string(), "require".to_string()) } else { (key, value) };
        if !known(&key) {
            return Err(format!("the database URL has an invalid parameter \"{key}\""));
        }
        pairs.push((key, value));
    }
    Ok(pairs)
}

/// The settings of `service`, from the first of the user's file (`PGSERVICEFILE`, or
/// `~/.pg_service.conf`) and the system's (`$PGSYSCONFDIR/pg_service.conf`) that defines it; each
/// fills a setting not already set.
fn read_service(service: &str, settings: &mut Settings, process: &Process) -> Result<(), String> {
    let home = (process.env)("HOME").map(PathBuf::from);
    let user_file = (process.env)("PGSERVICEFILE").map(PathBuf::from).or(home.map(|h| h.join(".pg_service.conf")));
    let system_file =
        PathBuf::from((process.env)("PGSYSCONFDIR").unwrap_or_else(|| SYSCONFDIR.to_string())).join("pg_service.conf");
    for file in user_file.into_iter().chain([system_file]) {
        if !file.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("the service file {} cannot be read: {e}", file.display()))?;
        let mut inside = false;
        let mut found = false;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[') {
                if found {
                    break;
                }
                inside = name.strip_suffix(']') == Some(service);
                found = inside;
                continue;
            }
            if !inside {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("syntax error in service file {}, line {}", file.display(), n + 1));
            };
            if key == "service" {
                return Err(format!(
                    "the service file {} nests a service at line {}: not supported (as libpq)",
                    file.display(),
                    n + 1
                ));
            }
            if !known(key) {
                return Err(format!(
                    "the service file {} has an invalid connection option \"{key}\" at line {}",
                    file.display(),
                    n + 1
                ));
            }
            if !settings.0.contains_key(key) {
                settings.put(key, value.to_string(), Origin::Service(file.clone(), n + 1));
            }
        }
        if found {
            return Ok(());
        }
    }
    Err(format!(
        "the database service \"{service}\" is not defined (in PGSERVICEFILE, ~/.pg_service.conf or PGSYSCONFDIR)"
    ))
}

/// The password of the password file's first line that matches the connection (for a list of
/// hosts, the first host that has one). The file is ignored, with a warning, when its group or
/// others may read it (as libpq).
fn password_from_file(settings: &mut Settings, process: &Process, warn: &mut dyn FnMut(String)) -> Result<(), String> {
    let file = match settings.get("passfile").filter(|f| !f.is_empty()) {
        Some(f) => PathBuf::from(f),
        None => match (process.env)("HOME") {
            Some(home) => PathBuf::from(home).join(".pgpass"),
            None => return Ok(()),
        },
    };
    let Ok(meta) = std::fs::metadata(&file) else { return Ok(()) };
    if !meta.is_file() {
        return Ok(());
    }
    use std::os::unix::fs::PermissionsExt;
    if meta.permissions().mode() & 0o077 != 0 {
        warn(format!(
            "WARNING: password file \"{}\" has group or world access; permissions should be u=rw (0600) or less",
            file.display()
        ));
        return Ok(());
    }
    let Ok(text) = std::fs::read_to_string(&file) else { return Ok(()) };
    let hosts: Vec<String> = match settings.get("host").filter(|h| !h.is_empty()) {
        Some(h) => h.split(',').map(String::from).collect(),
        None => settings.get("hostaddr").unwrap_or_default().split(',').map(String::from).collect(),
    };
    let ports: Vec<&str> = settings.get("port").unwrap_or("5432").split(',').collect();
    let (db, user) = (settings.get("dbname").unwrap_or_default(), settings.get("user").unwrap_or_default());
    for (i, host) in hosts.iter().enumerate() {
        let port = match ports.get(i).or(ports.first()).copied() {
            Some(p) if !p.is_empty() => p,
            _ => "5432",
        };
        // "localhost" matches a Unix socket in the default directory (as libpq).
        let host = if host.is_empty() || host == default_socket_dir() { "localhost" } else { host.as_str() };
        for (n, line) in text.lines().enumerate() {
            if line.starts_with('#') {
                continue;
            }
            let fields = passfile_fields(line.trim_end_matches('\r'));
            let [h, p, d, u, password] = fields.as_slice() else { continue };
            let matches = |field: &str, value: &str| field == "*" || field == value;
            if matches(h, host) && matches(p, port) && matches(d, db) && matches(u, user) {
                if !password.is_empty() {
                    let (db_line, file) = (n + 1, file.clone());
                    settings.put("password", password.clone(), Origin::Passfile(file, db_line));
                }
                return Ok(());
            }
        }
    }
    Ok(())
}

/// A password file's line split at its unescaped colons (`\:` and `\\` are escapes): five fields,
/// the last the rest of the line.
fn passfile_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().unwrap().extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

/// The name of the user this process runs as (libpq's default user).
pub(crate) fn os_user() -> Option<String> {
    // SAFETY: getpwuid_r writes only into the buffers given; the name is copied out before they go.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 4096];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(libc::geteuid(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found);
        if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        std::ffi::CStr::from_ptr(pwd.pw_name).to_str().ok().map(String::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn resolved(conninfo: &str, env: &[(&str, &str)]) -> Result<Settings, String> {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let process = Process { env: &lookup, user: &|| Some("osuser".to_string()) };
        resolve(conninfo, &process, &mut |_| {})
    }

    fn values(s: &Settings) -> Vec<(String, String)> {
        s.0.iter().map(|(k, v)| (k.clone(), v.value.clone())).collect()
    }

    #[test]
    fn urls_are_read_as_libpq_reads_them() {
        let s =
            resolved("postgresql://u%40x:p%3Aw@h1:5433,[::1]:5434/db%20x?sslmode=verify-full&ssl=true", &[]).unwrap();
        assert_eq!(s.get("user"), Some("u@x"));
        assert_eq!(s.get("password"), Some("p:w"));
        assert_eq!(s.get("host"), Some("h1,::1"));
        assert_eq!(s.get("port"), Some("5433,5434"));
        assert_eq!(s.get("dbname"), Some("db x"));
        assert_eq!(s.get("sslmode"), Some("require"), "ssl=true, the later, wins");
        let s = resolved("postgresql://%2Fvar%2Frun%2Fpostgresql/erp", &[]).unwrap();
        assert_eq!(s.get("host"), Some("/var/run/postgresql"));
        assert!(resolved("postgresql://h/db?bogus=1", &[]).unwrap_err().contains("\"bogus\""));
        assert!(resolved("postgresql://h/db?sslmode", &[]).unwrap_err().contains("no \"=\""));
        assert!(resolved("host=h bogus=1", &[]).unwrap_err().contains("\"bogus\""));
    }

    #[test]
    fn the_string_then_the_environment_then_the_defaults() {
        let s = resolved("dbname=erp", &[("PGDATABASE", "other"), ("PGUSER", "app"), ("PGPORT", "5440")]).unwrap();
        assert_eq!(s.get("dbname"), Some("erp"));
        assert_eq!(s.get("user"), Some("app"));
        assert_eq!(s.name("user"), "user (from PGUSER)");
        assert_eq!(s.get("port"), Some("5440"));
        assert_eq!(s.get("host"), Some(default_socket_dir()));
        let s = resolved("", &[]).unwrap();
        assert_eq!((s.get("user"), s.get("dbname"), s.get("port")), (Some("osuser"), Some("osuser"), Some("5432")));
        let s = resolved("", &[("PGSSLMODE", "verify-full"), ("PGAPPNAME", "x")]).unwrap();
        assert_eq!(s.get("sslmode"), Some("verify-full"));
        assert_eq!(s.get("application_name"), Some("x"));
    }

    #[test]
    fn a_service_fills_what_the_string_left_and_the_environment_what_is_left_after() {
        let dir = std::env::temp_dir().join(format!("pgconn-service-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let user_file = dir.join("user.conf");
        std::fs::write(&user_file, "# mine\n[erp]\nhost=db.example\ndbname=erp\n\n[other]\nport=1\n").unwrap();
        std::fs::write(dir.join("pg_service.conf"), "[sys]\nport=6000\nuser=sysuser\n[bad]\nbogus=1\n").unwrap();
        let file = user_file.to_str().unwrap();
        let sys = dir.to_str().unwrap();
        let env = [("PGSERVICEFILE", file), ("PGSYSCONFDIR", sys), ("PGDATABASE", "envdb"), ("PGPORT", "7000")];
        let s = resolved("service=erp dbname=given", &env).unwrap();
        assert_eq!(values(&s).iter().find(|(k, _)| k == "host").unwrap().1, "db.example");
        assert_eq!(s.get("dbname"), Some("given"), "the string wins over the service");
        assert_eq!(s.get("port"), Some("7000"), "the environment fills what the service left");
        assert!(s.name("host").contains("line 3"), "{}", s.name("host"));
        let s = resolved("", &[env[0], env[1], env[2], env[3], ("PGSERVICE", "sys")]).unwrap();
        assert_eq!((s.get("port"), s.get("dbname")), (Some("6000"), Some("envdb")), "the service wins over PG*");
        assert!(resolved("service=nowhere", &env).unwrap_err().contains("\"nowhere\" is not defined"));
        assert!(resolved("service=bad", &env).unwrap_err().contains("\"bogus\""));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_password_file_gives_the_first_matching_line_and_only_when_only_its_user_reads_it() {
        let dir = std::env::temp_dir().join(format!("pgconn-pass-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pass");
        std::fs::write(
            &file,
            "# comment\nother:*:*:*:no\ndb.example:5432:erp:app:first\\:one\n*:*:*:app:second\nlocalhost:*:*:*:local\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let env = [("PGPASSFILE", file.to_str().unwrap())];
        let s = resolved("host=db.example dbname=erp user=app", &env).unwrap();
        assert_eq!(s.get("password"), Some("first:one"));
        assert!(s.name("password").contains("line 3"));
        assert_eq!(resolved("host=db2 dbname=erp user=app", &env).unwrap().get("password"), Some("second"));
        let socket = format!("host={} user=x", default_socket_dir());
        assert_eq!(resolved(&socket, &env).unwrap().get("password"), Some("local"));
        assert_eq!(resolved("host=db.example user=app password=given", &env).unwrap().get("password"), Some("given"));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let mut warned = Vec::new();
        let env: Vec<(String, String)> = vec![("PGPASSFILE".into(), file.to_str().unwrap().into())];
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let process = Process { env: &lookup, user: &|| Some("app".to_string()) };
        let s = resolve("host=db2", &process, &mut |w| warned.push(w)).unwrap();
        assert_eq!(s.get("password"), None);
        assert!(warned[0].contains("group or world access"), "{warned:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn passfile_lines_are_split_at_unescaped_colons() {
        assert_eq!(passfile_fields("h:5432:d:u:p:w"), vec!["h", "5432", "d", "u", "p:w"]);
        assert_eq!(passfile_fields("h\\:x:*:d:u\\\\:pw"), vec!["h:x", "*", "d", "u\\", "pw"]);
    }

    #[test]
    fn this_process_has_a_user_name() {
        assert!(os_user().is_some_and(|u| !u.is_empty()));
    }
}
