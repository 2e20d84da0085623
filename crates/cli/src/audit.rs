//! `toolgate audit seal` and `toolgate audit export` (docs/audit.md): one run of the seal,
//! tenant by tenant, for a timer (on a Citus cluster, the way to seal), with the purge of what is
//! past retention after it (`--purge`), and the sealed audit streamed
//! out, checkpoint by checkpoint, for a copy the database's owner cannot change. Both connect as
//! libpq does, do their work and exit: nothing runs between runs, so neither has metrics of its own.

use futures_util::{pin_mut, TryStreamExt};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use tokio_postgres::Client;

use crate::{db, Result};

/// One checkpoint written: its tenant, number, rows, and the end of the period it seals.
pub struct Sealed {
    pub tenant: String,
    pub checkpoint: i64,
    pub rows: i32,
    pub sealed_to: String,
}

/// A monthly partition of the audit made: its name, month (YYYY-MM, UTC) and the rows moved into
/// it from the default partition.
pub struct Partition {
    pub name: String,
    pub month: String,
    pub moved: i64,
}

/// Make the audit's partitions of this month and the next two, and of any month whose rows wait
/// in the default partition (`toolgate.audit_partitions`, a statement of its own: on a Citus
/// cluster it runs on the coordinator, which makes them on every worker). Run before each seal,
/// so a month has its partition before its first row, and a purge can drop it whole.
pub async fn partitions(conninfo: &str) -> Result<Vec<Partition>> {
    let client = db::connect_to(conninfo).await?;
    let rows = client
        .query(
            "SELECT p.partition, pg_catalog.to_char(p.month AT TIME ZONE 'UTC', 'YYYY-MM'), p.moved_rows \
               FROM toolgate.audit_partitions() p",
            &[],
        )
        .await
        .map_err(|e| format!("toolgate.audit_partitions: {}", toolgate_pgconn::describe(&e)))?;
    Ok(rows.iter().map(|r| Partition { name: r.get(0), month: r.get(1), moved: r.get(2) }).collect())
}

/// Seal `tenant`'s audit (every tenant's `toolgate.seal_tenants()` names, when None) in
/// checkpoints of at most `batch` rows: tenant by tenant, each `toolgate.tenant_seal` a statement
/// of its own, so that on a Citus cluster each runs on its tenant's worker (on one server it is
/// `toolgate.seal` for that tenant).
pub async fn seal(conninfo: &str, tenant: Option<&str>, batch: i32) -> Result<Vec<Sealed>> {
    let client = db::connect_to(conninfo).await?;
    let fail = |what: &str, e: tokio_postgres::Error| format!("{what}: {}", toolgate_pgconn::describe(&e));
    let tenants: Vec<String> = match tenant {
        Some(t) => vec![t.to_string()],
        None => client
            .query("SELECT t FROM toolgate.seal_tenants() t", &[])
            .await
            .map_err(|e| fail("toolgate.seal_tenants", e))?
            .iter()
            .map(|r| r.get(0))
            .collect(),
    };
    let statement = client
        .prepare(
            "SELECT s.tenant_id, s.checkpoint, s.sealed_rows, \
                    pg_catalog.to_char(s.sealed_to AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') \
               FROM toolgate.tenant_seal($1, $2) s",
        )
        .await
        .map_err(|e| fail("toolgate.tenant_seal", e))?;
    let mut sealed = Vec::new();
    for tenant in &tenants {
        let rows = client.query(&statement, &[tenant, &batch]).await.map_err(|e| fail("toolgate.tenant_seal", e))?;
        sealed.extend(rows.iter().map(|r| Sealed {
            tenant: r.get(0),
            checkpoint: r.get(1),
            rows: r.get(2),
            sealed_to: r.get(3),
        }));
    }
    Ok(sealed)
}

/// One tenant's purge: the last checkpoint whose rows were removed, and how many.
pub struct Purged {
    pub tenant: String,
    pub through_checkpoint: i64,
    pub rows: i64,
}

/// Remove what is past each tenant's retention (`toolgate.purge`: whole sealed periods only, a
/// signed record of each purge), `tenant`'s only when given; on a Citus cluster, on the
/// coordinator, which deletes each tenant's rows on its worker.
pub async fn purge(conninfo: &str, tenant: Option<&str>) -> Result<Vec<Purged>> {
    let client = db::connect_to(conninfo).await?;
    let rows = client
        .query("SELECT p.tenant_id, p.through_checkpoint, p.purged_rows FROM toolgate.purge($1) p", &[&tenant])
        .await
        .map_err(|e| format!("toolgate.purge: {}", toolgate_pgconn::describe(&e)))?;
    Ok(rows.iter().map(|r| Purged { tenant: r.get(0), through_checkpoint: r.get(1), rows: r.get(2) }).collect())
}

/// How `export` writes: JSON Lines, or CSV with a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Jsonl,
    Csv,
}

/// The CSV columns: a line's `type` and `tenant_id`, a row's columns, then a checkpoint's.
pub const CSV_COLUMNS: [&str; 32] = [
    "type",
    "tenant_id",
    "checkpoint",
    "audit_id",
    "at",
    "kind",
    "conversation_id",
    "actor",
    "role",
    "tool",
    "target",
    "proposal_id",
    "outcome",
    "rule",
    "replayed",
    "effects",
    "detail",
    "args_hmac",
    "schema_version",
    "policy_version",
    "duration_us",
    "canonical",
    "leaf",
    "sealed_from",
    "sealed_to",
    "rows",
    "audit_ids",
    "root",
    "prev",
    "key_id",
    "public_key",
    "signature",
];

/// Where each tenant's export has reached: the last checkpoint written, per tenant.
pub type Positions = BTreeMap<String, i64>;

/// The positions kept in `file` (none yet: every checkpoint is new).
pub fn read_positions(file: &Path) -> Result<Positions> {
    match std::fs::read_to_string(file) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            format!("the state file {} is not a JSON object of checkpoint numbers: {e}", file.display()).into()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Positions::new()),
        Err(e) => Err(format!("the state file {} is unreadable: {e}", file.display()).into()),
    }
}

/// Keep `positions` in `file`, whole or not at all (a new file renamed over the old).
pub fn write_positions(file: &Path, positions: &Positions) -> Result<()> {
    let partial = file.with_extension("partial");
    std::fs::write(&partial, serde_json::to_vec_pretty(positions)?)
        .and_then(|()| std::fs::rename(&partial, file))
        .map_err(|e| format!("the state file {} cannot be written: {e}", file.display()).into())
}

/// Write every sealed checkpoint after `positions` (each tenant that has checkpoints, or only
/// `tenant`), each after its rows, to `out` in `format`; after each checkpoint, `out` is flushed
/// and `keep` is given the new positions. Returns how many checkpoints and rows were written.
pub async fn export(
    client: &Client,
    tenant: Option<&str>,
    positions: &mut Positions,
    format: Format,
    out: &mut impl Write,
    mut keep: impl FnMut(&Positions) -> Result<()>,
) -> Result<(u64, u64)> {
    let tenants: Vec<String> = match tenant {
        Some(t) => vec![t.to_string()],
        None => client
            .query("SELECT DISTINCT c.tenant_id FROM toolgate.audit_checkpoints c ORDER BY 1", &[])
            .await
            .map_err(|e| format!("toolgate.audit_checkpoints: {}", toolgate_pgconn::describe(&e)))?
            .iter()
            .map(|r| r.get(0))
            .collect(),
    };
    // A CSV export that starts from the beginning has a header; one that goes on from where an
    // earlier run stopped appends to what it wrote.
    let header = positions.values().all(|&n| n == 0);
    let mut sink = match format {
        Format::Jsonl => Sink::Jsonl(out),
        Format::Csv => Sink::Csv(Box::new(csv::Writer::from_writer(out))),
    };
    if let (Sink::Csv(w), true) = (&mut sink, header) {
        w.write_record(CSV_COLUMNS)?;
    }
    let (mut checkpoints, mut rows) = (0u64, 0u64);
    let statement = client
        .prepare("SELECT e.item, e.checkpoint, e.record FROM toolgate.export_audit($1, $2, 10) e")
        .await
        .map_err(|e| format!("toolgate.export_audit: {}", toolgate_pgconn::describe(&e)))?;
    for tenant in tenants {
        loop {
            let after = positions.get(&tenant).copied().unwrap_or(0);
            let stream = client
                .query_raw(&statement, [&tenant as &(dyn tokio_postgres::types::ToSql + Sync), &after])
                .await
                .map_err(|e| format!("toolgate.export_audit: {}", toolgate_pgconn::describe(&e)))?;
            pin_mut!(stream);
            let mut more = false;
            while let Some(line) = stream.try_next().await.map_err(|e| toolgate_pgconn::describe(&e))? {
                let (item, checkpoint, record): (String, i64, Value) = (line.get(0), line.get(1), line.get(2));
                sink.line(&item, &tenant, record)?;
                if item == "checkpoint" {
                    sink.flush()?;
                    positions.insert(tenant.clone(), checkpoint);
                    keep(positions)?;
                    checkpoints += 1;
                    more = true;
                } else {
                    rows += 1;
                }
            }
            if !more {
                break;
            }
        }
    }
    sink.flush()?;
    Ok((checkpoints, rows))
}

/// Where the lines go: JSON Lines straight out, or CSV records through their writer.
enum Sink<'w, W: Write> {
    Jsonl(&'w mut W),
    Csv(Box<csv::Writer<&'w mut W>>),
}

impl<W: Write> Sink<'_, W> {
    /// One line: a JSON object with its `type`, or a CSV record of `CSV_COLUMNS`.
    fn line(&mut self, item: &str, tenant: &str, record: Value) -> Result<()> {
        let Value::Object(fields) = record else {
            return Err("toolgate.export_audit returned a record that is not an object".into());
        };
        match self {
            Sink::Jsonl(out) => {
                let mut line = Map::new();
                line.insert("type".into(), Value::String(item.into()));
                line.extend(fields);
                serde_json::to_writer(&mut **out, &Value::Object(line))?;
                out.write_all(b"\n")?;
            }
            Sink::Csv(w) => {
                let cell = |name: &str| match (name, fields.get(name)) {
                    ("type", _) => item.to_string(),
                    ("tenant_id", _) => tenant.to_string(),
                    (_, None | Some(Value::Null)) => String::new(),
                    (_, Some(Value::String(s))) => s.clone(),
                    (_, Some(other)) => other.to_string(),
                };
                w.write_record(CSV_COLUMNS.iter().map(|c| cell(c)))?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        match self {
            Sink::Jsonl(out) => out.flush()?,
            Sink::Csv(w) => w.flush()?,
        }
        Ok(())
    }
}
