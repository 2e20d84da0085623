//! `toolgate login` (issue 46) against an OpenID provider the test starts
//! (tests/oidc/login_provider.py, over HTTPS with its own CA): the browser's flow (code + PKCE,
//! back to a loopback port, a forged redirect refused) and the device flow, each signed in by the person the provider's
//! script plays; the token lands in a 0600 file and the gate takes it; a refresh when due and not
//! before; a used refresh token ends the session; --keep refreshes until the provider stops
//! taking the refresh token; a denial, a state file others may read and an untrusted certificate
//! each end with their own exit status and say why.

mod common;

use common::oidc::{python, repository, Provider};
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use toolgate_cli::db;
use toolgate_cli::fixture::{APP, DBA};

const CLIENT: &str = "toolgate-cli";

impl Provider {
    fn person(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.file("person.json")).unwrap()).unwrap()
    }

    /// The person at `url`, approving or denying.
    fn answer(&self, url: &str, approve: bool) {
        let mut person = Command::new(python());
        person.arg(repository().join("tests/oidc/login_provider.py")).arg("person").arg(&self.dir).arg(url);
        if !approve {
            person.arg("deny");
        }
        let out = person.output().unwrap();
        assert!(out.status.success(), "the person's browser failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `toolgate login` with the provider's issuer, client and CA, and `more`.
    fn login(&self, token_file: &Path, more: &[&str]) -> Command {
        let mut c = Command::new(toolgate());
        c.arg("login")
            .args(["--issuer", &self.issuer, "--client-id", CLIENT, "--ca-file"])
            .arg(self.file("ca.pem"))
            .arg("--token-file")
            .arg(token_file)
            .args(more)
            .env_remove("BROWSER")
            .env_remove("TOOLGATE_IDENTITY_TOKEN_FILE");
        c
    }

    /// `toolgate login --refresh` of `token_file`, and `more`.
    fn refresh(&self, token_file: &Path, more: &[&str]) -> Command {
        let mut c = Command::new(toolgate());
        c.args(["login", "--refresh", "--token-file"])
            .arg(token_file)
            .args(more)
            .env_remove("TOOLGATE_IDENTITY_TOKEN_FILE");
        c
    }

    /// A device sign-in: the person opens the printed address and answers.
    fn device_login(&self, token_file: &Path, more: &[&str], approve: bool) -> Output {
        let mut child = self.login(token_file, &[&["--device"], more].concat()).stderr(Stdio::piped()).spawn().unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut said = String::new();
        let url = loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "toolgate login ended before the address: {said}");
            said.push_str(&line);
            if let Some(url) = line.strip_prefix("Or open: ") {
                break url.trim().to_string();
            }
        };
        assert!(said.contains("enter the code"), "{said}");
        self.answer(&url, approve);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
        let status = child.wait().unwrap();
        Output { status, stdout: vec![], stderr: format!("{said}{rest}").into_bytes() }
    }
}

fn said(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn claims(token: &str) -> Value {
    use base64::Engine;
    let payload = token.trim().split('.').nth(1).unwrap();
    serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

fn state(token_file: &Path) -> PathBuf {
    PathBuf::from(format!("{}.login", token_file.display()))
}

/// What the gate says of a token: its tools listing's outcome (SUCCEEDED lists the tools).
async fn gate_says(app: &tokio_postgres::Client, token: &str) -> String {
    let listing = db::json(app, "SELECT toolgate.tools($1)", &[&token.trim()]).await.unwrap();
    listing["outcome"].as_str().unwrap_or("a listing").to_string()
}

#[tokio::test]
async fn a_person_signs_in_and_the_token_is_kept_fresh() {
    let lab = lab("login").await;
    let dir = keys_dir().join("login-provider");
    let provider = Provider::start(&dir, None);
    let sub = provider.person()["sub"].as_str().unwrap().to_string();
    // The DBA registers the provider as docs/identity.md says: its JWKS, the API audience (the
    // access token's) and the client's (the ID token's), the tenant claim.
    let jwks: Value = serde_json::from_str(&std::fs::read_to_string(provider.file("jwks.json")).unwrap()).unwrap();
    let dba = lab.connect(DBA).await.unwrap();
    dba.query_one(
        "SELECT toolgate.add_issuer('login-idp', $1, ARRAY['toolgate', $2], $3::jsonb, 'tenant')",
        &[&provider.issuer, &CLIENT, &jwks],
    )
    .await
    .unwrap();
    dba.execute("SELECT toolgate.set_tenant_issuer('shopping-a', 'login-idp', 'shopping-a')", &[]).await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    let work = dir.join("home");
    std::fs::create_dir_all(&work).unwrap();

    // 1. The browser's flow: BROWSER is the person, who signs in and is sent back to the loopback.
    // Before that, another page sends the loopback a code with a state of its own: refused, and
    // the person's own sign-in still completes.
    let token_file = work.join("identity-token");
    let out = provider.login(&token_file, &[]).env("BROWSER", provider.file("forging-browser")).output().unwrap();
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(std::fs::read_to_string(provider.file("forged")).unwrap().trim(), "400", "a forged redirect taken");
    assert!(said(&out).contains(&format!("signed in as {sub}")), "{}", said(&out));
    assert_eq!((mode(&token_file), mode(&state(&token_file))), (0o600, 0o600));
    let first = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(claims(&first)["aud"][0], "toolgate", "the access token by default");
    assert_eq!(claims(&first)["sub"], sub.as_str());
    assert!(!std::fs::read_to_string(state(&token_file)).unwrap().contains(first.trim()), "the state holds no token");
    assert_eq!(gate_says(&app, &first).await, "SUCCEEDED", "the gate takes the token");

    // 2. A refresh before it is due changes nothing; one that is due writes a new token.
    let out = provider.refresh(&token_file, &[]).output().unwrap();
    assert!(out.status.success() && said(&out).contains("not due"), "{}", said(&out));
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), first);
    let used = std::fs::read(state(&token_file)).unwrap();
    std::thread::sleep(Duration::from_millis(1100)); // a new iat
    let out = Command::new(toolgate())
        .args(["login", "--refresh", "--before", "100000"])
        .env("TOOLGATE_IDENTITY_TOKEN_FILE", &token_file)
        .output()
        .unwrap();
    assert!(out.status.success() && said(&out).contains("refreshed"), "{}", said(&out));
    let second = std::fs::read_to_string(&token_file).unwrap();
    assert_ne!(second, first);
    assert_eq!(mode(&token_file), 0o600);
    assert_eq!(gate_says(&app, &second).await, "SUCCEEDED");

    // 3. The refresh token it replaced, used again (a copy of the old state): the provider ends
    // the session, so the current one is refused too. Both say to sign in again.
    let stale = work.join("stale-token");
    std::fs::write(&stale, &first).unwrap();
    std::fs::write(state(&stale), &used).unwrap();
    std::fs::set_permissions(state(&stale), std::fs::Permissions::from_mode(0o600)).unwrap();
    for file in [&stale, &token_file] {
        let out = provider.refresh(file, &["--before", "100000"]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", said(&out));
        assert!(said(&out).contains("sign in again"), "{}", said(&out));
    }
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), second, "a refused refresh leaves the token");

    // 4. The device flow, the ID token asked for: its audience is the client.
    let id_file = work.join("id-token");
    let out = provider.device_login(&id_file, &["--id-token"], true);
    assert!(out.status.success(), "{}", said(&out));
    let id = std::fs::read_to_string(&id_file).unwrap();
    assert_eq!(claims(&id)["aud"], CLIENT);
    assert_eq!(gate_says(&app, &id).await, "SUCCEEDED");

    // 5. --keep refreshes before each expiry (here: 298 s ahead of 300), until the provider
    // stops taking the refresh token; then it ends, saying so.
    let mut keep = provider
        .refresh(&id_file, &["--keep", "--before", "298"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut seen = vec![id.clone()];
    let started = Instant::now();
    while seen.len() < 3 {
        assert!(started.elapsed() < Duration::from_secs(30), "--keep refreshed {} times", seen.len() - 1);
        std::thread::sleep(Duration::from_millis(200));
        let now = std::fs::read_to_string(&id_file).unwrap();
        if !seen.contains(&now) {
            seen.push(now);
        }
    }
    assert_eq!(gate_says(&app, seen.last().unwrap()).await, "SUCCEEDED");
    std::fs::write(provider.file("deny-refresh"), "").unwrap();
    let ended = Instant::now();
    let status = loop {
        if let Some(status) = keep.try_wait().unwrap() {
            break status;
        }
        assert!(ended.elapsed() < Duration::from_secs(20), "--keep went on after the refusal");
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(keep.stderr.as_mut().unwrap(), &mut out).unwrap();
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(out.contains("refreshed") && out.contains("sign in again"), "{out}");
    std::fs::remove_file(provider.file("deny-refresh")).unwrap();

    // 6. The person says no, in either flow: exit 1, and no token written.
    let denied = work.join("denied-token");
    let out = provider.device_login(&denied, &[], false);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("denied"), "{}", said(&out));
    let out = provider.login(&denied, &[]).env("BROWSER", provider.file("deny-browser")).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("access_denied"), "{}", said(&out));
    assert!(!denied.exists() && !state(&denied).exists());

    // 7. A state file its group may read is not used; a provider whose certificate is not
    // trusted is not spoken to. Both exit 2 and say why.
    std::fs::set_permissions(state(&token_file), std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = provider.refresh(&token_file, &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("group or others may read"), "{}", said(&out));
    let out = Command::new(toolgate())
        .args(["login", "--device", "--issuer", &provider.issuer, "--client-id", CLIENT, "--token-file"])
        .arg(work.join("untrusted"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("discovery at"), "{}", said(&out));
}
