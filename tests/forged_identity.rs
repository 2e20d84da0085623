//! Forged identities, each BLOCKED identity_invalid with its reason in the audit, none reaching
//! the ERP: alg none, HS256 keyed with the public key, an unknown kid, another tenant's kid, an
//! expired token, the tenant claim swapped after signing.

mod common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::*;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;
use toolgate_cli::db;
use toolgate_cli::fixture::APP;
use toolgate_cli::keys;
use toolgate_core::token::{parse_public_key, Signer};

fn claims(tenant: &str, exp_in: i64) -> serde_json::Value {
    json!({"sub": "user-17", "tenant": tenant, "role": "supervisor", "iat": keys::now(), "exp": keys::now() + exp_in})
}

#[tokio::test]
async fn forged_identities_are_blocked_with_their_reason() {
    let lab = lab("forged_identity").await;
    let root = lab.connect("postgres").await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    let good = lab.supervisor_a();
    let parts: Vec<&str> = good.split('.').collect();

    let none =
        format!("{}.{}.", URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT","kid":"idp-shopping-a"}"#), parts[1]);

    let public = parse_public_key(&lab.a.idp.public_key()).unwrap();
    let mut hs = Header::new(Algorithm::HS256);
    hs.kid = Some("idp-shopping-a".into());
    let hs256 = encode(&hs, &claims("shopping-a", 600), &EncodingKey::from_secret(&public).unwrap()).unwrap();

    let unknown = Signer::from_seed("idp-nobody", [7; 32]).sign(&claims("shopping-a", 600));
    let other_tenant_kid = lab.b.idp.sign(&claims("shopping-a", 600));
    let expired = lab.a.idp.sign(&claims("shopping-a", -1));
    let swapped = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims("shopping-b", 600)).unwrap()),
        parts[2]
    );

    for (name, token, reason) in [
        ("alg none", none, "algorithm"),
        ("HS256 keyed with the public key", hs256, "algorithm"),
        ("unknown kid", unknown, "unknown_kid"),
        ("kid of another tenant", other_tenant_kid, "wrong_tenant"),
        ("expired", expired, "expired"),
        ("tenant swapped after signing", swapped, "signature"),
    ] {
        let key = format!("forged-{reason}-{}", name.len());
        let reply = db::request_close(&app, &token, "conv-forged", &close_args("742", &key)).await.unwrap();
        assert_eq!(outcome(&reply), ("BLOCKED", "identity_invalid"), "{name}");
        let got = last_reason(&root).await;
        assert_eq!(got, reason, "{name}");
        let read = db::read_order(&app, &token, "742").await.unwrap();
        assert_eq!(outcome(&read), ("BLOCKED", "identity_invalid"), "{name} (read)");
    }
    assert_eq!(effects(&root, "742").await, 0);
    assert_eq!(count(&root, "SELECT count(*) FROM toolgate.ledger").await, 0);
    // The good token still works: the failures were the forgeries, not the fixture.
    let ok = db::request_close(&app, &good, "conv-forged", &close_args("742", "forged-control")).await.unwrap();
    assert_eq!(outcome(&ok), ("NEEDS_CONFIRMATION", "-"));
}
