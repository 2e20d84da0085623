//! A database loaded with seed 000's fixture: the extension, login roles for the application,
//! on-call, DBA and auditor, key pairs for each tenant's identity provider and channel (private
//! halves in a key directory, public halves registered), seed 000's maintenance ERP
//! (examples/maintenance) with its tools, tenants, policies and work orders.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_postgres::Client;
use toolgate_core::token::Signer;

use crate::db::Server;
use crate::{keys, Result};

/// Seed 000's maintenance ERP (examples/maintenance): its tables, and the tools bound to them.
pub const ERP: &str = include_str!("../../../examples/maintenance/maintenance.sql");
/// The seed-000 fixture (tenants, policies, orders 742 and 743).
pub const SEED: &str = include_str!("../../../examples/maintenance/seed000.sql");

/// Login roles the fixture creates, each a member of one toolgate role.
pub const APP: &str = "toolgate_app";
pub const ONCALL: &str = "toolgate_oncall";
pub const DBA: &str = "toolgate_dba";
pub const AUDITOR: &str = "toolgate_audit_reader";

const LOGINS: [(&str, &str); 4] =
    [(APP, "toolgate_agent"), (ONCALL, "toolgate_operator"), (DBA, "toolgate_admin"), (AUDITOR, "toolgate_auditor")];

/// One tenant's two signers.
pub struct Tenant {
    pub id: &'static str,
    pub idp: Signer,
    pub channel: Signer,
}

/// A loaded fixture.
pub struct Lab {
    pub server: Server,
    pub dbname: String,
    pub keys_dir: PathBuf,
    pub a: Tenant,
    pub b: Tenant,
}

impl Lab {
    /// Create database `dbname` afresh on `server` and load the fixture; keys go under `keys_dir`.
    pub async fn create(server: &Server, dbname: &str, keys_dir: &Path) -> Result<Lab> {
        let root = server.connect("postgres", "postgres").await?;
        root.batch_execute(&format!("DROP DATABASE IF EXISTS \"{dbname}\" WITH (FORCE)")).await?;
        root.batch_execute(&format!("CREATE DATABASE \"{dbname}\"")).await?;
        let db = server.connect("postgres", dbname).await?;
        db.batch_execute("CREATE EXTENSION pg_toolgate").await?;
        for (login, role) in LOGINS {
            // Roles are cluster-wide: another database's fixture may have made them already.
            db.batch_execute(&format!(
                "DO $$ BEGIN CREATE ROLE {login} LOGIN IN ROLE {role}; \
                 EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
            ))
            .await?;
        }
        db.batch_execute(ERP).await?;
        db.batch_execute(SEED).await?;

        let keys_dir = keys_dir.join(dbname);
        if keys_dir.exists() {
            std::fs::remove_dir_all(&keys_dir)?;
        }
        let dba = server.connect(DBA, dbname).await?;
        let a = Tenant::register(&dba, &keys_dir, "shopping-a").await?;
        let b = Tenant::register(&dba, &keys_dir, "shopping-b").await?;
        Ok(Lab { server: server.clone(), dbname: dbname.to_string(), keys_dir, a, b })
    }

    /// A connection as `login` to the lab's database.
    pub async fn connect(&self, login: &str) -> Result<Client> {
        self.server.connect(login, &self.dbname).await
    }

    /// Make a call on a connection of its own and drop that connection once the server has
    /// settled `key` in the ledger, without the reply ever being read: a reply lost after commit.
    pub async fn lose_reply<F, Fut>(&self, key: &str, call: F) -> Result<()>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let root = self.connect("postgres").await?;
        let task = tokio::spawn(call(self.connect(APP).await?));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let settled: i64 = root
                .query_one(
                    "SELECT count(*) FROM toolgate.ledger WHERE idempotency_key = $1 AND state = 'settled'",
                    &[&key],
                )
                .await?
                .get(0);
            if settled > 0 {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{key} never settled").into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        task.abort();
        Ok(())
    }

    /// Seed 000's identity: user-17, supervisor of shopping-a.
    pub fn supervisor_a(&self) -> String {
        keys::identity(&self.a.idp, "user-17", self.a.id, "supervisor", 3600)
    }

    /// A supervisor of shopping-b.
    pub fn supervisor_b(&self) -> String {
        keys::identity(&self.b.idp, "user-31", self.b.id, "supervisor", 3600)
    }
}

impl Tenant {
    async fn register(dba: &Client, dir: &Path, id: &'static str) -> Result<Tenant> {
        let idp = keys::generate(dir, &format!("idp-{id}"))?;
        let channel = keys::generate(dir, &format!("chan-{id}"))?;
        for (signer, purpose) in [(&idp, "identity"), (&channel, "channel")] {
            dba.execute(
                "SELECT toolgate.add_key($1, $2, $3, $4)",
                &[&id, &signer.kid(), &purpose, &signer.public_key()],
            )
            .await?;
        }
        Ok(Tenant { id, idp, channel })
    }
}
