//! A backend remembers the identity tokens it verified, to skip the Ed25519 check on the next
//! call; that must never weaken a check. On one connection: a key revoked after a successful
//! call fails the very next call, and a token that expires between two calls fails the second.

mod common;

use common::*;
use std::time::Duration;
use toolgate_cli::db;
use toolgate_cli::fixture::{APP, DBA};
use toolgate_cli::keys;

#[tokio::test]
async fn a_remembered_token_still_meets_revocation_and_expiry() {
    let lab = lab("token_cache").await;
    let root = lab.connect("postgres").await.unwrap();
    let app = lab.connect(APP).await.unwrap();

    let short = keys::identity(&lab.a.idp, "user-17", "shopping-a", "supervisor", 2);
    assert_eq!(outcome(&db::read_order(&app, &short, "742").await.unwrap()), ("SUCCEEDED", "-"));
    assert_eq!(outcome(&db::read_order(&app, &short, "742").await.unwrap()), ("SUCCEEDED", "-"));
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(outcome(&db::read_order(&app, &short, "742").await.unwrap()), ("BLOCKED", "identity_invalid"));
    let reason = last_reason(&root).await;
    assert_eq!(reason, "expired");

    let token = lab.supervisor_a();
    assert_eq!(outcome(&db::read_order(&app, &token, "742").await.unwrap()), ("SUCCEEDED", "-"));
    let dba = lab.connect(DBA).await.unwrap();
    dba.execute("SELECT toolgate.revoke_key('idp-shopping-a')", &[]).await.unwrap();
    assert_eq!(outcome(&db::read_order(&app, &token, "742").await.unwrap()), ("BLOCKED", "identity_invalid"));
    let reason = last_reason(&root).await;
    assert_eq!(reason, "revoked_kid", "a revoked key is named as such");
}
