//! The remembered identity tokens (src/gate/identity.rs) are tied to the key row that verified
//! them: if that row's public key, purpose or tenant changes — even by a superuser's direct
//! UPDATE — the very next call with the same token on the same connection is judged afresh and
//! refused, never served from memory.

mod common;

use common::*;
use toolgate_cli::db;
use toolgate_cli::fixture::APP;

#[tokio::test]
async fn a_remembered_token_is_refused_once_its_key_row_changes() {
    let lab = lab("token_cache_key_rows").await;
    let root = lab.connect("postgres").await.unwrap();
    let app = lab.connect(APP).await.unwrap();
    let token = lab.supervisor_a();
    let own_key = lab.a.idp.public_key();
    let other_key = lab.b.idp.public_key();

    let changes = [
        (format!("UPDATE toolgate.keys SET public_key = toolgate.parse_public_key('{other_key}') WHERE kid = 'idp-shopping-a'"), "signature"),
        ("UPDATE toolgate.keys SET purpose = 'channel' WHERE kid = 'idp-shopping-a'".to_string(), "wrong_purpose"),
        ("UPDATE toolgate.keys SET tenant_id = 'shopping-b' WHERE kid = 'idp-shopping-a'".to_string(), "wrong_tenant"),
    ];
    for (sql, reason) in changes {
        // A good call on this connection: the token is now remembered.
        assert_eq!(outcome(&db::read_order(&app, &token, "742").await.unwrap()), ("SUCCEEDED", "-"), "before {reason}");
        root.batch_execute(&sql).await.unwrap();
        let r = db::read_order(&app, &token, "742").await.unwrap();
        assert_eq!(outcome(&r), ("BLOCKED", "identity_invalid"), "after the key row changed ({reason}): {r}");
        let got = last_reason(&root).await;
        assert_eq!(got, reason);
        // Put the row back as the DBA registered it.
        root.execute(
            "UPDATE toolgate.keys SET public_key = toolgate.parse_public_key($1), purpose = 'identity', \
             tenant_id = 'shopping-a' WHERE kid = 'idp-shopping-a'",
            &[&own_key],
        )
        .await
        .unwrap();
    }
    assert_eq!(outcome(&db::read_order(&app, &token, "742").await.unwrap()), ("SUCCEEDED", "-"));
}
