//! The approvals console (docs/console.md), driven over HTTP as a browser would, against an
//! OpenID provider the test starts (tests/oidc/login_provider.py: code + PKCE, HTTPS with its own
//! CA) and the gate: an approver signs in and sees the proposal an agent made; a form without the
//! session's CSRF token, or from another origin, is refused; the approval applies the effect once
//! and the agent's retry replays it; the requester cannot approve their own; a quorum of two needs
//! the second person; a tier-3 wrong word is refused; the token is never in a page or a cookie;
//! signing out ends the session. At a console-only tier the requester approves her own there,
//! and a tenant's chat webhook hears that a proposal waits, without its text.

mod common;

use base64::Engine;
use common::oidc::{repository, Provider};
use common::*;
use serde_json::{json, Value};
use sha2::Digest;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolgate_cli::db;
use toolgate_cli::fixture::{APP, DBA};

const CONSOLE_CLIENT: &str = "toolgate-console";
const LOGIN: &str = "toolgate_test_console";

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Who may sign in at the provider: the requester (a supervisor), two managers, a technician.
fn people() -> Value {
    json!([
        {"username": "maria", "tenant": "shopping-a", "roles": ["supervisor"]},
        {"username": "joao", "tenant": "shopping-a", "roles": ["manager"]},
        {"username": "ana", "tenant": "shopping-a", "roles": ["manager"]},
        {"username": "rui", "tenant": "shopping-a", "roles": ["technician"]},
        {"username": "iris", "tenant": "shopping-a", "roles": ["auditor"]}
    ])
}

impl Provider {
    fn password(&self, username: &str) -> String {
        let people: Value =
            serde_json::from_str(&std::fs::read_to_string(self.dir.join("people.json")).unwrap()).unwrap();
        people[username]["password"].as_str().unwrap().to_string()
    }

    fn http(&self) -> reqwest::Client {
        let ca = std::fs::read(self.dir.join("ca.pem")).unwrap();
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
            .build()
            .unwrap()
    }

    /// The person at the provider's sign-in page `authorize` (an authorization request): signs in
    /// and allows; returns where the provider sends the browser back.
    async fn sign_in(&self, http: &reqwest::Client, authorize: &str, username: &str) -> String {
        let page = http.get(authorize).send().await.unwrap().text().await.unwrap();
        let request = between(&page, r#"name="request" value=""#, "\"");
        let action = reqwest::Url::parse(authorize).unwrap().join(&between(&page, r#"action=""#, "\"")).unwrap();
        let form = [
            ("request", request.as_str()),
            ("username", username),
            ("password", &self.password(username)),
            ("answer", "approve"),
        ];
        let back = http.post(action).form(&form).send().await.unwrap();
        assert_eq!(back.status(), 302, "the provider's sign-in");
        back.headers()["location"].to_str().unwrap().to_string()
    }

    /// An access token for the API (audience `toolgate`) of `username`, as `toolgate login`
    /// would get it: the code grant with PKCE for the command-line client.
    async fn access_token(&self, username: &str) -> String {
        let http = self.http();
        let verifier = "v".repeat(43) + &username.len().to_string();
        let challenge =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
        let redirect = "http://127.0.0.1:9/callback";
        let authorize = reqwest::Url::parse_with_params(
            &format!("{}/authorize", self.issuer),
            &[
                ("client_id", "toolgate-cli"),
                ("response_type", "code"),
                ("scope", "openid"),
                ("redirect_uri", redirect),
                ("state", "s"),
                ("code_challenge", &challenge),
                ("code_challenge_method", "S256"),
            ],
        )
        .unwrap();
        let back = self.sign_in(&http, authorize.as_str(), username).await;
        let code = reqwest::Url::parse(&back).unwrap().query_pairs().find(|(k, _)| k == "code").unwrap().1.to_string();
        let form = [
            ("grant_type", "authorization_code"),
            ("client_id", "toolgate-cli"),
            ("code", &code),
            ("redirect_uri", redirect),
            ("code_verifier", &verifier),
        ];
        let tokens: Value =
            http.post(format!("{}/token", self.issuer)).form(&form).send().await.unwrap().json().await.unwrap();
        tokens["access_token"].as_str().unwrap().to_string()
    }
}

fn between(text: &str, start: &str, end: &str) -> String {
    let from = text.find(start).unwrap_or_else(|| panic!("{start} not in {text}")) + start.len();
    text[from..from + text[from..].find(end).unwrap()].to_string()
}

/// `toolgate console`, on a free loopback port.
struct Console {
    _child: Killed,
    addr: SocketAddr,
    /// Its standard error: the JSON log lines.
    log: PathBuf,
}

impl Console {
    async fn start(provider: &Provider, dbname: &str, extra: &[std::ffi::OsString]) -> Console {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let s = server();
        let log = keys_dir().join(format!("{dbname}-console.log"));
        let child = Command::new(toolgate())
            .args(["console", "--http", &addr.to_string(), "--issuer", &provider.issuer])
            .args(["--client-id", CONSOLE_CLIENT, "--ca-file"])
            .arg(provider.dir.join("ca.pem"))
            .args(["--database", &format!("host={} port={} dbname={dbname} user={LOGIN}", s.host, s.port)])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("toolgate console starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(Instant::now() < deadline, "toolgate console never listened on {addr}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Console { _child: Killed(child), addr, log }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// A browser's session at the console: its cookie and the page's CSRF token.
struct Browser {
    http: reqwest::Client,
    cookie: String,
}

fn set_cookie(response: &reqwest::Response, name: &str) -> Option<String> {
    response.headers().get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()).find_map(|v| {
        let (pair, attributes) = v.split_once(';')?;
        let (k, value) = pair.split_once('=')?;
        (k == name).then(|| {
            assert!(
                attributes.contains("HttpOnly") && attributes.contains("Secure"),
                "{name} is HttpOnly and Secure: {v}"
            );
            value.to_string()
        })
    })
}

impl Browser {
    /// `username` signs in at the console through the provider. On the way: the provider's answer
    /// brought back by a browser without the sign-in's cookie is refused, and so is the same answer
    /// brought back twice.
    async fn sign_in(console: &Console, provider: &Provider, username: &str) -> Browser {
        let http = provider.http();
        let start = http.get(console.url("/login")).send().await.unwrap();
        assert_eq!(start.status(), 303);
        let login = set_cookie(&start, "toolgate_console_login").expect("a sign-in cookie");
        let authorize = start.headers()["location"].to_str().unwrap().to_string();
        assert!(authorize.contains("code_challenge_method=S256") && authorize.contains("nonce="), "{authorize}");
        let back = provider.sign_in(&http, &authorize, username).await;
        assert!(back.starts_with(&console.url("/callback?")), "{back}");
        assert_eq!(http.get(&back).send().await.unwrap().status(), 400, "another browser's answer");
        let with_login = format!("toolgate_console_login={login}");
        let done = http.get(&back).header("cookie", &with_login).send().await.unwrap();
        assert_eq!(done.status(), 200, "the callback");
        let cookie = set_cookie(&done, "toolgate_console").expect("a session cookie");
        let strict = done
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.starts_with("toolgate_console=") && v.contains("SameSite=Strict"));
        assert!(strict, "the session cookie is SameSite=Strict");
        assert_eq!(http.get(&back).header("cookie", &with_login).send().await.unwrap().status(), 400, "taken once");
        Browser { http, cookie }
    }

    async fn get(&self, url: &str) -> (u16, String, reqwest::header::HeaderMap) {
        let r = self.http.get(url).header("cookie", format!("toolgate_console={}", self.cookie)).send().await.unwrap();
        let (status, headers) = (r.status().as_u16(), r.headers().clone());
        (status, r.text().await.unwrap(), headers)
    }

    async fn post(&self, url: &str, origin: Option<&str>, form: &[(&str, &str)]) -> (u16, Option<String>) {
        let mut r = self.http.post(url).header("cookie", format!("toolgate_console={}", self.cookie)).form(form);
        if let Some(origin) = origin {
            r = r.header("origin", origin);
        }
        let r = r.send().await.unwrap();
        (r.status().as_u16(), r.headers().get("location").map(|l| l.to_str().unwrap().to_string()))
    }

    /// The pending page, and its CSRF token.
    async fn pending(&self, console: &Console) -> (String, String) {
        let (status, page, headers) = self.get(&console.url("/")).await;
        assert_eq!(status, 200, "{page}");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'none'") && csp.contains("form-action 'self'"), "{csp}");
        let csrf = between(&page, r#"name="csrf" value=""#, "\"");
        (page, csrf)
    }

    /// Decide `proposal` from the console's own page; the flash message the next page shows.
    async fn decide(&self, console: &Console, proposal: &str, decision: &str, word: &str) -> String {
        let (_, csrf) = self.pending(console).await;
        let origin = console.url("");
        let form = [("csrf", csrf.as_str()), ("proposal", proposal), ("decision", decision), ("word", word)];
        let (status, location) = self.post(&console.url("/decide"), Some(&origin), &form).await;
        assert_eq!((status, location.as_deref()), (303, Some("/")));
        let (page, _) = self.pending(console).await;
        between(&page, "role=\"status\">", "</p>")
    }
}

/// A lab whose shopping-a trusts the provider for both the agent's tokens and the console's, and
/// whose closes need a manager's approval and purchases above R$ 100,00 two managers'; the
/// console running on it.
struct Setup {
    lab: toolgate_cli::fixture::Lab,
    provider: Provider,
    console: Console,
    root: tokio_postgres::Client,
    app: tokio_postgres::Client,
}

async fn setup(name: &str) -> Setup {
    setup_with(name, &[]).await
}

/// The same, the console started with more arguments.
async fn setup_with(name: &str, extra: &[std::ffi::OsString]) -> Setup {
    let lab = lab(name).await;
    let provider = Provider::start(&keys_dir().join(format!("{name}-provider")), Some(&people()));
    let root = lab.connect("postgres").await.unwrap();
    root.batch_execute(&format!(
        "DO $$ BEGIN CREATE ROLE {LOGIN} LOGIN IN ROLE toolgate_approver; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
    ))
    .await
    .unwrap();
    let dba = lab.connect(DBA).await.unwrap();
    let jwks = std::fs::read_to_string(provider.dir.join("jwks.json")).unwrap();
    dba.execute(
        "SELECT toolgate.add_issuer('console-idp', $1, ARRAY['toolgate', $2], $3::text::jsonb, 'tenant')",
        &[&provider.issuer, &CONSOLE_CLIENT, &jwks],
    )
    .await
    .unwrap();
    dba.batch_execute(
        "SELECT toolgate.set_tenant_issuer('shopping-a', 'console-idp', 'shopping-a'); \
         SELECT toolgate.set_policy('shopping-a', 'request_close', approver_roles => ARRAY['manager']); \
         SELECT toolgate.set_policy('shopping-a', 'request_purchase_part', approver_roles => ARRAY['manager'], \
                                    quorum => 2, quorum_above => 100); \
         SELECT toolgate.set_tenant_auditors('shopping-a', ARRAY['auditor']);",
    )
    .await
    .unwrap();
    let console = Console::start(&provider, &lab.dbname, extra).await;
    let app = lab.connect(APP).await.unwrap();
    Setup { lab, provider, console, root, app }
}

#[tokio::test]
async fn an_approver_decides_in_the_console_what_an_agent_proposed() {
    let Setup { lab: _lab, provider, console, root, app } = setup("console").await;

    // Maria's agent proposes to close order 742, with her token from the company's provider.
    let maria = provider.access_token("maria").await;
    let args = close_args("742", "console-742");
    let proposed = db::request_close(&app, &maria, "conv-console", &args).await.unwrap();
    assert_eq!(proposed["outcome"], "NEEDS_CONFIRMATION", "{proposed}");
    let close = proposed["proposal"]["id"].as_str().unwrap().to_string();

    // Signed out: a page that only offers to sign in, in the browser's language among the
    // console's (English when it prefers none of them).
    let anonymous = provider.http().get(console.url("/")).send().await.unwrap().text().await.unwrap();
    assert!(anonymous.contains(r#"href="/login""#) && !anonymous.contains("742"), "{anonymous}");
    assert!(anonymous.contains(r#"lang="en""#), "{anonymous}");
    for (accepted, lang) in
        [("pt-BR,pt;q=0.9,en;q=0.8", "pt"), ("fr-FR, es;q=0.4, en;q=0.7", "en"), ("es-AR", "es"), ("pt;q=0, de", "en")]
    {
        let r = provider.http().get(console.url("/")).header("accept-language", accepted).send().await.unwrap();
        let page = r.text().await.unwrap();
        assert!(page.contains(&format!(r#"lang="{lang}""#)), "{accepted}: {page}");
    }

    let joao = Browser::sign_in(&console, &provider, "joao").await;
    let (page, csrf) = joao.pending(&console).await;
    assert!(page.contains(&format!(r#"value="{close}""#)) && page.contains("742"), "{page}");
    assert!(page.contains("Aguarda a decisão de quem aprova.") && !page.contains("responda sim"), "{page}");
    assert!(!page.contains("eyJ"), "no token in a page");
    assert!(!joao.cookie.contains("eyJ"), "no token in a cookie");

    // Forms that are not the console's own page's: refused, nothing done.
    let form = [("proposal", close.as_str()), ("decision", "approve"), ("word", "")];
    let (status, _) = joao.post(&console.url("/decide"), None, &form).await;
    assert_eq!(status, 403, "no CSRF token");
    let with_csrf = [("csrf", csrf.as_str()), ("proposal", close.as_str()), ("decision", "approve"), ("word", "")];
    let (status, _) = joao.post(&console.url("/decide"), Some("https://evil.example"), &with_csrf).await;
    assert_eq!(status, 403, "another origin");
    let (status, _) = provider
        .http()
        .post(console.url("/decide"))
        .form(&with_csrf)
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(status, 200, "without a session: the sign-in page");
    assert_eq!(effects(&root, "742").await, 0);

    // Rui (a technician) signs in: nothing waits for him, and his forged approval is refused.
    let rui = Browser::sign_in(&console, &provider, "rui").await;
    let (page, _) = rui.pending(&console).await;
    assert!(!page.contains(&close), "{page}");
    let flash = rui.decide(&console, &close, "approve", "").await;
    assert!(flash.contains("approver_not_allowed"), "{flash}");

    // Maria herself: her own proposal is not hers to approve.
    let own = Browser::sign_in(&console, &provider, "maria").await;
    let flash = own.decide(&console, &close, "approve", "").await;
    assert!(flash.contains("approver_not_allowed") || flash.contains("approver_is_requester"), "{flash}");
    assert_eq!(effects(&root, "742").await, 0);

    // João approves: applied once (said in the tenant's language), and the agent's retry replays it.
    let flash = joao.decide(&console, &close, "approve", "").await;
    assert_eq!(flash, "SUCCEEDED: Aprovada e aplicada.");
    assert_eq!(effects(&root, "742").await, 1);
    let retry = db::request_close(&app, &maria, "conv-console", &args).await.unwrap();
    assert_eq!((retry["outcome"].as_str(), retry["replayed"].as_bool()), (Some("SUCCEEDED"), Some(true)));
    let (_, history, _) = joao.get(&console.url("/history")).await;
    assert!(history.contains(&close) && history.contains(": approve (") && history.contains("applied"), "{history}");

    // A purchase of R$ 480,00 (tier 3, above 100): two managers, each typing the word.
    let buy = json!({"order_id": "741", "part_id": "B42-MOTOR", "quantity": 1, "cost_center": "CC-MANUT",
                     "idempotency_key": "console-motor"});
    let proposed = db::request_purchase_part(&app, &maria, "conv-console-buy", &buy).await.unwrap();
    let motor = proposed["proposal"]["id"].as_str().unwrap().to_string();
    let (page, _) = joao.pending(&console).await;
    let word = between(&page, "CONFIRMAR-", " ");
    let word = format!("CONFIRMAR-{}", &word[..6]);
    let flash = joao.decide(&console, &motor, "approve", "CONFIRMAR-000000").await;
    assert_eq!(flash, "BLOCKED confirmation_invalid: A palavra digitada não é a da proposta; nada foi feito.");
    let flash = joao.decide(&console, &motor, "approve", &word).await;
    assert!(flash.starts_with("NEEDS_CONFIRMATION: A sua aprovação foi registrada (1 de 2)"), "{flash}");
    let ana = Browser::sign_in(&console, &provider, "ana").await;
    let (page, _) = ana.pending(&console).await;
    assert!(page.contains("1 / 2 ·"), "the quorum so far, and who approved: {page}");
    let purchases = "SELECT count(*) FROM maintenance.purchases WHERE order_id = '741'";
    assert_eq!(count(&root, purchases).await, 0);
    let flash = ana.decide(&console, &motor, "approve", &word).await;
    assert!(flash.starts_with("SUCCEEDED"), "{flash}");
    assert_eq!(count(&root, purchases).await, 1);

    // The log: a JSON line a request and a decision, never a token, a sign-in's code or a cookie.
    let log = std::fs::read_to_string(&console.log).unwrap();
    let lines: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert!(lines.iter().any(|l| l["fields"]["path"] == "/decide" && l["fields"]["status"] == 303), "{log}");
    assert!(lines.iter().any(|l| l["fields"]["message"] == "decision" && l["fields"]["outcome"] == "SUCCEEDED"));
    assert!(!log.contains("eyJ") && !log.contains("code=") && !log.contains(&joao.cookie), "{log}");

    // The audit: Iris (an auditor) reads it, filtered, with its charts; João (a manager) may not.
    let iris = Browser::sign_in(&console, &provider, "iris").await;
    let (status, audit, headers) = iris.get(&console.url("/audit")).await;
    assert_eq!(status, 200, "{audit}");
    assert!(headers["content-security-policy"].to_str().unwrap().contains("default-src 'none'"));
    assert_eq!(audit.matches("<svg").count(), 3, "three charts: {audit}");
    assert!(audit.contains("<td>request_close</td>") && audit.contains("<td>SUCCEEDED</td>"), "{audit}");
    assert!(audit.contains("<td>confirmation_invalid</td>"), "the wrong word's refusal: {audit}");
    let (_, filtered, _) = iris.get(&console.url("/audit?outcome=BLOCKED&tool=request_purchase_part")).await;
    assert!(filtered.contains("<td>BLOCKED</td>") && !filtered.contains("<td>SUCCEEDED</td>"), "{filtered}");
    let (status, _, _) = joao.get(&console.url("/audit")).await;
    assert_eq!(status, 403, "not an auditor");

    // Signing out ends the session: the cookie no longer opens a page.
    let (_, csrf) = ana.pending(&console).await;
    let (status, _) = ana.post(&console.url("/logout"), Some(&console.url("")), &[("csrf", csrf.as_str())]).await;
    assert_eq!(status, 303);
    let (_, page, _) = ana.get(&console.url("/")).await;
    assert!(page.contains(r#"href="/login""#) && !page.contains("CONFIRMAR"), "{page}");
}

/// The same in Debian's Chromium, headless, through Selenium (tests/console/browser.py): each page
/// as a person sees it, its screenshot kept in the test's output (docs/console.md shows them).
#[tokio::test]
async fn the_console_in_a_real_browser() {
    let Setup { lab: _lab, provider, console, root, app } = setup("console_browser").await;
    let maria = provider.access_token("maria").await;
    let close = db::request_close(&app, &maria, "conv-browser", &close_args("742", "browser-742")).await.unwrap();
    let close = close["proposal"]["id"].as_str().unwrap().to_string();
    let buy = json!({"order_id": "741", "part_id": "B42-MOTOR", "quantity": 1, "cost_center": "CC-MANUT",
                     "idempotency_key": "browser-motor"});
    let motor = db::request_purchase_part(&app, &maria, "conv-browser-buy", &buy).await.unwrap();
    let motor = motor["proposal"]["id"].as_str().unwrap().to_string();

    let shots = keys_dir().join("console-screenshots");
    let python = std::env::var("TOOLGATE_BROWSER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repository().join("target/browser/bin/python"));
    let out = Command::new(&python)
        .arg(repository().join("tests/console/browser.py"))
        .arg(console.url(""))
        .arg(&provider.dir)
        .arg(&shots)
        .args([&close, &motor])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/setup.sh installs Selenium and Chromium)", python.display()));
    assert!(out.status.success(), "the browser: {}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(seen["joao_heading"], "Aguardando você", "the tenant's language: {seen}");
    let cards = seen["joao_cards"].to_string();
    assert!(cards.contains(&format!("p-{close}")) && cards.contains(&format!("p-{motor}")), "{seen}");
    let session = seen["session_cookie"].as_array().unwrap();
    assert_eq!(session.len(), 1, "{seen}");
    assert_eq!(session[0], json!({"name": "toolgate_console", "httpOnly": true, "secure": true, "sameSite": "Strict"}));
    assert_eq!((seen["token_in_cookie"].as_bool(), seen["token_in_page"].as_bool()), (Some(false), Some(false)));
    assert!(seen["close_flash"].as_str().unwrap().starts_with("SUCCEEDED"), "{seen}");
    assert!(seen["motor_wrong_word"].as_str().unwrap().contains("confirmation_invalid"), "{seen}");
    assert!(seen["motor_first"].as_str().unwrap().starts_with("NEEDS_CONFIRMATION"), "{seen}");
    assert!(seen["joao_history"].to_string().contains(&format!("h-{close}")), "{seen}");
    assert_eq!(seen["maria_cards"], json!([]), "the requester sees nothing to approve: {seen}");
    assert!(seen["ana_quorum"].as_str().unwrap().contains("1 / 2"), "{seen}");
    assert!(seen["motor_second"].as_str().unwrap().starts_with("SUCCEEDED"), "{seen}");
    assert_eq!(effects(&root, "742").await, 1);
    assert_eq!(count(&root, "SELECT count(*) FROM maintenance.purchases WHERE order_id = '741'").await, 1);
    assert_eq!(seen["audit_charts"], 3, "{seen}");
    for page in ["signin", "pending", "approved", "quorum", "history", "requester", "applied", "audit"] {
        let shot = shots.join(format!("{page}.png"));
        let bytes = std::fs::read(&shot).unwrap_or_else(|e| panic!("{}: {e}", shot.display()));
        assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 5_000, "{} is a screenshot", shot.display());
    }
}

/// A purchase at a console-only tier of a row without approvers: the agent is told the person
/// decides in the console, and the requester herself, signed in at the console, sees it and
/// approves it (a manager does not see it); the agent's retry replays. Meanwhile the tenant's
/// chat webhook (a receiver the test runs) is told that something waits: the tool, the proposal's
/// id, the console's address, in the language the file gives, never the proposal's text.
#[tokio::test]
async fn the_requester_approves_her_own_in_the_console_and_the_chat_hears() {
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hooks/acme", hook.local_addr().unwrap());
    let (heard, mut hearing) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = hook.accept().await {
            let heard = heard.clone();
            tokio::spawn(async move {
                if let Some(request) = read_request(&mut stream).await {
                    let _ = heard.send(request);
                }
                let _ = tokio::io::AsyncWriteExt::write_all(
                    &mut stream,
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                )
                .await;
            });
        }
    });
    std::fs::create_dir_all(keys_dir()).unwrap();
    let file = keys_dir().join("console-webhooks.json");
    std::fs::write(&file, json!({"shopping-a": {"url": hook_url, "language": "pt"}}).to_string()).unwrap();
    let operator = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let extra = ["--webhooks".into(), file.into_os_string(), "--listen".into(), operator.to_string().into()];
    let Setup { lab, provider, console, root, app } = setup_with("console_only", &extra).await;
    let dba = lab.connect(DBA).await.unwrap();
    dba.batch_execute(
        "SELECT toolgate.set_policy('shopping-a', 'request_purchase_part', console_only_tier => 3, \
                                    clear => ARRAY['approver_roles'])",
    )
    .await
    .unwrap();

    let maria = provider.access_token("maria").await;
    let buy = json!({"order_id": "741", "part_id": "B42-MOTOR", "quantity": 1, "cost_center": "CC-MANUT",
                     "idempotency_key": "console-only-motor"});
    let proposed = db::request_purchase_part(&app, &maria, "conv-console-only", &buy).await.unwrap();
    assert_eq!(proposed["outcome"], "NEEDS_CONFIRMATION", "{proposed}");
    assert_eq!(proposed["result"]["decided_in"], "console", "{proposed}");
    let motor = proposed["proposal"]["id"].as_str().unwrap().to_string();
    let text = proposed["proposal"]["text"].as_str().unwrap().to_string();
    assert!(text.contains("console de aprovações"), "{text}");
    let word = text.split_whitespace().find(|w| w.starts_with("CONFIRMAR-")).unwrap().trim_end_matches('.').to_string();

    // The chat tool hears of it: a JSON {"text"} in Portuguese naming the tool, the proposal and
    // the console; nothing of the proposal's text.
    let (head, body) = tokio::time::timeout(Duration::from_secs(10), hearing.recv()).await.unwrap().unwrap();
    assert!(head.starts_with("POST /hooks/acme HTTP/1.1"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    let message: Value = serde_json::from_str(&body).unwrap();
    let said = message["text"].as_str().unwrap();
    assert_eq!(message.as_object().unwrap().len(), 1, "{message}");
    assert!(said.starts_with("Uma proposta aguarda aprovação em shopping-a: request_purchase_part"), "{said}");
    assert!(said.contains(&motor) && said.contains(&console.url("/")), "{said}");
    assert!(!said.contains("B42") && !said.contains(&word), "the proposal's text stays out: {said}");

    // Ana, a manager, has nothing to decide; Maria, signed in, has her own, and approves it.
    let ana = Browser::sign_in(&console, &provider, "ana").await;
    let (page, _) = ana.pending(&console).await;
    assert!(!page.contains(&format!("p-{motor}")), "{page}");
    let own = Browser::sign_in(&console, &provider, "maria").await;
    let (page, _) = own.pending(&console).await;
    assert!(page.contains(&format!("p-{motor}")), "{page}");
    let flash = own.decide(&console, &motor, "approve", &word).await;
    assert!(flash.starts_with("SUCCEEDED"), "{flash}");
    assert_eq!(count(&root, "SELECT count(*) FROM maintenance.purchases WHERE order_id = '741'").await, 1);
    let replayed = db::request_purchase_part(&app, &maria, "conv-console-only", &buy).await.unwrap();
    assert_eq!(outcome(&replayed), ("SUCCEEDED", "-"), "{replayed}");
    assert_eq!(replayed["replayed"], true, "{replayed}");

    // The console counted the post.
    let metrics = reqwest::get(format!("http://{operator}/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("toolgate_console_webhook_posts_total{result=\"sent\"} 1"), "{metrics}");
}

/// One HTTP/1.1 request from `stream`: its head and its body (by Content-Length).
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<(String, String)> {
    use tokio::io::AsyncReadExt;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&bytes).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return Some((head.to_string(), body.to_string()));
            }
        }
    }
}

/// A webhooks file the console cannot use stops it before it serves, naming what is wrong: a
/// webhook in clear beyond this machine, a language it does not speak, a field it does not know.
#[test]
fn a_webhooks_file_it_cannot_use_stops_the_console() {
    let cases = [
        (json!({"acme": {"url": "http://chat.example.com/hooks/1"}}), "a webhook is https"),
        (json!({"acme": {"url": "https://chat.example.com/hooks/1", "language": "fr"}}), "language fr"),
        (json!({"acme": {"url": "https://chat.example.com/hooks/1", "channel": "#x"}}), "unknown field"),
    ];
    std::fs::create_dir_all(keys_dir()).unwrap();
    for (i, (hooks, expected)) in cases.into_iter().enumerate() {
        let file = keys_dir().join(format!("console-bad-webhooks-{i}.json"));
        std::fs::write(&file, hooks.to_string()).unwrap();
        let out = Command::new(toolgate())
            .args(["console", "--http", "127.0.0.1:0", "--issuer", "https://127.0.0.1:9", "--client-id", "x"])
            .args(["--database", "host=/nonexistent", "--webhooks"])
            .arg(&file)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{said}");
        assert!(said.contains("--webhooks") && said.contains(expected), "{expected}: {said}");
    }
}
