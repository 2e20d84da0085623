//! Identity from the identity providers companies already run (issue 15): a Keycloak-style and an
//! Auth0-style issuer registered with the JWKS documents PyJWT exports, tokens PyJWT signs
//! (RS256, PS256, ES256, EdDSA), and the red team's token tricks, each BLOCKED identity_invalid
//! with its reason in the audit and nothing reaching the ERP.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use tokio_postgres::error::SqlState;
use toolgate_cli::db;
use toolgate_cli::fixture::{Lab, APP, DBA};
use toolgate_cli::keys;

const KC_ISS: &str = "https://sso.shopping-a.test/realms/shopping";
const A0_ISS: &str = "https://shopping-b.eu.auth0.com/";
const A0_AUD: &str = "https://erp.shopping-b.test/api";
const A0_ROLES: &str = "https://shopping-b.test/roles";

/// The PyJWT minter (tests/oidc/pyjwt_mint.py) under the Python scripts/setup.sh prepared.
fn mint(dir: &PathBuf, command: &str, input: Option<&Value>) -> Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var("TOOLGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target/pyjwt/bin/python"));
    let mut child = Command::new(&python)
        .arg(root.join("tests/oidc/pyjwt_mint.py"))
        .arg(dir)
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/setup.sh installs it)", python.display()));
    if let Some(input) = input {
        child.stdin.take().unwrap().write_all(input.to_string().as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "pyjwt_mint.py {command} failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn tokens(dir: &PathBuf, specs: &[Value]) -> Vec<String> {
    let out = mint(dir, "tokens", Some(&Value::from(specs.to_vec())));
    out.as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
}

/// Claims of the Keycloak-style issuer for tenant shopping-a.
fn kc(extra: Value) -> Value {
    let now = keys::now();
    let mut c = json!({"iss": KC_ISS, "aud": ["account", "toolgate"], "sub": "f1c2-kc-user", "azp": "erp-agent",
                       "tenant": "shopping-a", "roles": ["supervisor", "offline_access"], "iat": now, "exp": now + 300});
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

/// Claims of the Auth0-style issuer: the organisation in org_id, roles in a namespaced claim.
fn a0(extra: Value) -> Value {
    let now = keys::now();
    let mut c = json!({"iss": A0_ISS, "aud": A0_AUD, "sub": "auth0|6512", "org_id": "org_9fK2",
                       A0_ROLES: ["supervisor"], "iat": now, "exp": now + 300});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

fn spec(key: &str, alg: &str, claims: Value) -> Value {
    json!({"key": key, "alg": alg, "claims": claims})
}

async fn register(lab: &Lab, dir: &PathBuf) -> Value {
    let jwks = mint(dir, "jwks", None);
    let dba = lab.connect(DBA).await.unwrap();
    let n: i32 = dba
        .query_one(
            "SELECT toolgate.add_issuer('keycloak-shopping', $1, ARRAY['toolgate'], $2::jsonb, 'tenant')",
            &[&KC_ISS, &jwks["keycloak"]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 3, "the encryption key is skipped");
    dba.execute("SELECT toolgate.set_tenant_issuer('shopping-a', 'keycloak-shopping', 'shopping-a')", &[])
        .await
        .unwrap();
    dba.query_one(
        "SELECT toolgate.add_issuer('auth0-shopping-b', $1, ARRAY[$2], $3::jsonb, 'org_id', 'sub', $4)",
        &[&A0_ISS, &A0_AUD, &jwks["auth0"], &A0_ROLES],
    )
    .await
    .unwrap();
    dba.execute("SELECT toolgate.set_tenant_issuer('shopping-b', 'auth0-shopping-b', 'org_9fK2')", &[]).await.unwrap();
    // Another provider whose key has the Keycloak key's kid, trusted by no tenant.
    dba.query_one(
        "SELECT toolgate.add_issuer('evil', 'https://evil.test/', ARRAY['toolgate'], $1::jsonb, 'tenant')",
        &[&jwks["evil"]],
    )
    .await
    .unwrap();
    jwks
}

#[tokio::test]
async fn tokens_of_registered_issuers_pass_and_tricks_are_blocked() {
    let lab = lab("identity_providers").await;
    let dir = keys_dir().join("identity_providers-pyjwt");
    let jwks = register(&lab, &dir).await;
    let root = lab.connect("postgres").await.unwrap();
    let app = lab.connect(APP).await.unwrap();

    // The matrix: each library-signed algorithm, each issuer, the gate's read and write paths.
    let good = tokens(
        &dir,
        &[
            spec("kc-rs", "RS256", kc(json!({}))),
            spec("kc-es", "ES256", kc(json!({}))),
            spec("kc-ed", "EdDSA", kc(json!({}))),
            spec("a0-rs", "RS256", a0(json!({}))),
            spec("a0-rs", "PS256", a0(json!({}))),
        ],
    );
    for (i, (token, order)) in good.iter().zip(["742", "742", "742", "743", "743"]).enumerate() {
        let read = db::read_order(&app, token, order).await.unwrap();
        assert_eq!(outcome(&read), ("SUCCEEDED", "-"), "good token {i}: {read}");
    }
    let close = db::request_close(&app, &good[0], "conv-oidc", &close_args("742", "oidc-rs256")).await.unwrap();
    assert_eq!(outcome(&close), ("NEEDS_CONFIRMATION", "-"), "{close}");
    let audit = root
        .query_one("SELECT tenant_id, actor, role FROM toolgate.audit_log ORDER BY audit_id DESC LIMIT 1", &[])
        .await
        .unwrap();
    assert_eq!(
        (audit.get::<_, String>(0), audit.get::<_, String>(1), audit.get::<_, String>(2)),
        ("shopping-a".to_string(), "f1c2-kc-user".to_string(), "offline_access,supervisor".to_string())
    );

    // An identity token never passes as a confirmation, whatever its algorithm.
    let pid = close["proposal"]["id"].as_str().unwrap().to_string();
    for (i, token) in good.iter().enumerate() {
        let confirm = db::confirm(&app, &good[0], token).await.unwrap();
        assert_eq!(outcome(&confirm), ("BLOCKED", "confirmation_invalid"), "identity token {i} as a confirmation");
    }
    let live: i64 = count(
        &root,
        &format!("SELECT count(*) FROM toolgate.proposals WHERE proposal_id::text = '{pid}' AND status = 'live'"),
    )
    .await;
    assert_eq!(live, 1, "the proposal is still waiting for a real confirmation");

    let a_roles = |roles: Value| kc(json!({"roles": roles}));
    let evil_jwk = json!({"jwk": "evil-rs"});
    let mut tricks = vec![
        ("another audience", spec("kc-rs", "RS256", kc(json!({"aud": "another-app"}))), "audience"),
        ("no audience", spec("kc-rs", "RS256", kc(json!({"aud": null}))), "audience"),
        (
            "an unregistered issuer",
            spec("kc-rs", "RS256", kc(json!({"iss": "https://sso.shopping-a.test/realms/other"}))),
            "unknown_issuer",
        ),
        ("another issuer with the same kid", spec("evil-rs", "RS256", kc(json!({}))), "signature"),
        (
            "a tenant whose issuer is another",
            spec("evil-rs", "RS256", kc(json!({"iss": "https://evil.test/", "aud": "toolgate"}))),
            "unmapped_tenant",
        ),
        ("a tenant of another issuer", spec("kc-rs", "RS256", kc(json!({"tenant": "shopping-b"}))), "unmapped_tenant"),
        (
            "an organisation mapped to no tenant",
            spec("a0-rs", "RS256", a0(json!({"org_id": "org_other"}))),
            "unmapped_tenant",
        ),
        (
            "RS256 under the P-256 key's kid",
            json!({"key": "kc-rs", "alg": "RS256", "claims": kc(json!({})), "headers": {"kid": "kc-es"}}),
            "algorithm",
        ),
        (
            "RS256 under the Ed25519 key's kid",
            json!({"key": "kc-rs", "alg": "RS256", "claims": kc(json!({})), "headers": {"kid": "kc-ed"}}),
            "algorithm",
        ),
        (
            "EdDSA under the RSA key's kid",
            json!({"key": "kc-ed", "alg": "EdDSA", "claims": kc(json!({})), "headers": {"kid": "kc-rs"}}),
            "algorithm",
        ),
        ("PS256 where the JWK names RS256", spec("kc-rs", "PS256", kc(json!({}))), "algorithm"),
        (
            "HS256 keyed with the RSA public key",
            json!({"key": "kc-rs", "hmac_public": true, "claims": kc(json!({}))}),
            "algorithm",
        ),
        (
            "its own key in a jwk header",
            json!({"key": "evil-rs", "alg": "RS256", "claims": kc(json!({})), "headers": evil_jwk}),
            "embedded_key",
        ),
        (
            "a jku header",
            json!({"key": "kc-rs", "alg": "RS256", "claims": kc(json!({})), "headers": {"jku": "https://evil.test/jwks"}}),
            "embedded_key",
        ),
        (
            "an x5c header",
            json!({"key": "kc-rs", "alg": "RS256", "claims": kc(json!({})), "headers": {"x5c": ["MIIBIjANBgkq"]}}),
            "embedded_key",
        ),
        ("expired", spec("kc-es", "ES256", kc(json!({"exp": keys::now() - 1}))), "expired"),
        ("valid only later", spec("kc-es", "ES256", kc(json!({"nbf": keys::now() + 120}))), "not_yet_valid"),
        ("no roles", spec("kc-es", "ES256", a_roles(json!([]))), "claims"),
    ];
    let dup = format!(
        r#"{{"iss":"{KC_ISS}","aud":"toolgate","sub":"u","tenant":"shopping-b","tenant":"shopping-a","roles":"supervisor","exp":{}}}"#,
        keys::now() + 300
    );
    tricks.push(("a claim named twice", json!({"key": "kc-rs", "alg": "RS256", "payload": dup}), "claims"));
    let specs: Vec<Value> = tricks.iter().map(|t| t.1.clone()).collect();
    let forged = tokens(&dir, &specs);
    for ((name, _, reason), token) in tricks.iter().zip(&forged) {
        let key = format!("oidc-{}", name.replace(' ', "-"));
        let reply = db::request_close(&app, token, "conv-oidc-forged", &close_args("742", &key)).await.unwrap();
        assert_eq!(outcome(&reply), ("BLOCKED", "identity_invalid"), "{name}: {reply}");
        assert_eq!(last_reason(&root).await, *reason, "{name}");
    }

    // Roles: a token with several gets the union of what each allows (one allowed role is
    // enough); one without an allowed role is refused; a single role may be a string.
    let roles = tokens(
        &dir,
        &[
            spec("kc-rs", "RS256", a_roles(json!(["technician"]))),
            spec("kc-rs", "RS256", a_roles(json!(["technician", "supervisor"]))),
            spec("kc-rs", "RS256", a_roles(json!("supervisor"))),
        ],
    );
    let r = db::request_close(&app, &roles[0], "conv-oidc-roles", &close_args("742", "oidc-roles-0")).await.unwrap();
    assert_eq!(outcome(&r), ("BLOCKED", "role_not_allowed"), "{r}");
    for (i, t) in roles[1..].iter().enumerate() {
        let r = db::request_close(&app, t, "conv-oidc-roles", &close_args("742", &format!("oidc-roles-{}", i + 1)))
            .await
            .unwrap();
        assert_eq!(outcome(&r), ("NEEDS_CONFIRMATION", "-"), "{r}");
    }

    // The clock skew is configurable (toolgate.clock_skew): valid in two minutes passes with 300 s.
    let later = &forged[16];
    root.batch_execute(&format!("ALTER ROLE {APP} IN DATABASE \"{}\" SET toolgate.clock_skew = 300", lab.dbname))
        .await
        .unwrap();
    let skewed = lab.connect(APP).await.unwrap();
    let r = db::read_order(&skewed, later, "742").await.unwrap();
    assert_eq!(outcome(&r), ("SUCCEEDED", "-"), "{r}");
    // Not a client's to change.
    assert_eq!(refused(&skewed, "SET toolgate.clock_skew = 3600").await, SqlState::INSUFFICIENT_PRIVILEGE);

    // Rotation: the new document replaces the old whole; a token this backend already verified
    // under a key that left is refused on its next call.
    let dba = lab.connect(DBA).await.unwrap();
    let r = db::read_order(&app, &good[2], "742").await.unwrap();
    assert_eq!(outcome(&r), ("SUCCEEDED", "-"));
    dba.query_one("SELECT toolgate.set_issuer_keys('keycloak-shopping', $1::jsonb)", &[&jwks["keycloak-rotated"]])
        .await
        .unwrap();
    let r = db::read_order(&app, &good[2], "742").await.unwrap();
    assert_eq!(outcome(&r), ("BLOCKED", "identity_invalid"), "the EdDSA key left the document");
    assert_eq!(last_reason(&root).await, "unknown_kid");
    let r = db::read_order(&app, &good[0], "742").await.unwrap();
    assert_eq!(outcome(&r), ("SUCCEEDED", "-"), "the RSA key stayed");
    let rotated = tokens(&dir, &[spec("kc-rs-2", "RS256", kc(json!({})))]);
    let r = db::read_order(&app, &rotated[0], "742").await.unwrap();
    assert_eq!(outcome(&r), ("SUCCEEDED", "-"), "the new key verifies");

    // Nothing of a token reaches a table.
    for token in good.iter().chain(&forged) {
        let sig = token.rsplit('.').next().unwrap();
        let hits = count(
            &root,
            &format!("SELECT count(*) FROM toolgate.audit WHERE detail::text LIKE '%{}%'", &sig[..20.min(sig.len())]),
        )
        .await;
        assert_eq!(hits, 0);
    }
    assert_eq!(effects(&root, "742").await, 0);
}

#[tokio::test]
async fn weak_symmetric_and_broken_documents_are_refused_and_leave_nothing() {
    let lab = lab("identity_provider_keys").await;
    let dir = keys_dir().join("identity_provider_keys-pyjwt");
    let jwks = mint(&dir, "jwks", None);
    let dba = lab.connect(DBA).await.unwrap();
    let root = lab.connect("postgres").await.unwrap();
    let oct = json!({"keys": [{"kty": "oct", "kid": "h", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ"}]});
    let mut twice = jwks["auth0"].clone();
    let first = twice["keys"][0].clone();
    twice["keys"].as_array_mut().unwrap().push(first);
    for (name, doc) in [
        ("RSA of 1024 bits", jwks["weak"].clone()),
        ("HMAC key", oct),
        ("kid twice", twice),
        ("no keys", json!({"keys": []})),
    ] {
        let err = dba
            .query_one(
                "SELECT toolgate.add_issuer('x', 'https://x.test/', ARRAY['toolgate'], $1::jsonb, 'tenant')",
                &[&doc],
            )
            .await
            .expect_err(name);
        assert_eq!(err.code(), Some(&SqlState::INVALID_PARAMETER_VALUE), "{name}: {err}");
    }
    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.issuers").await, 0);
    // The agent can neither register issuers nor read them.
    let app = lab.connect(APP).await.unwrap();
    assert_eq!(
        refused(&app, "SELECT toolgate.add_issuer('x', 'https://x.test/', ARRAY['a'], '{}'::jsonb, 'tenant')").await,
        SqlState::INSUFFICIENT_PRIVILEGE
    );
    assert_eq!(refused(&app, "SELECT * FROM toolgate.issuers").await, SqlState::INSUFFICIENT_PRIVILEGE);
    assert_eq!(refused(&app, "SELECT * FROM toolgate.tenant_issuers").await, SqlState::INSUFFICIENT_PRIVILEGE);
}
