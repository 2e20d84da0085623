//! `toolgate seal`: one run of `toolgate.seal()` (docs/audit.md), for a timer (cron, a systemd
//! timer) where pg_cron is not installed. It connects as libpq does, seals, prints each
//! checkpoint written and exits: nothing runs between seals, so it has no metrics of its own.

use crate::{db, Result};

/// One checkpoint written: its tenant, number, rows, and the end of the period it seals.
pub struct Sealed {
    pub tenant: String,
    pub checkpoint: i64,
    pub rows: i32,
    pub sealed_to: String,
}

/// Seal `tenant`'s audit (every tenant's when None) in checkpoints of at most `batch` rows.
pub async fn run(conninfo: &str, tenant: Option<&str>, batch: i32) -> Result<Vec<Sealed>> {
    let client = db::connect_to(conninfo).await?;
    let rows = client
        .query(
            "SELECT s.tenant_id, s.checkpoint, s.sealed_rows, \
                    pg_catalog.to_char(s.sealed_to AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') \
               FROM toolgate.seal($1, $2) s",
            &[&tenant, &batch],
        )
        .await
        .map_err(|e| format!("toolgate.seal: {}", toolgate_pgconn::describe(&e)))?;
    Ok(rows
        .iter()
        .map(|r| Sealed { tenant: r.get(0), checkpoint: r.get(1), rows: r.get(2), sealed_to: r.get(3) })
        .collect())
}
