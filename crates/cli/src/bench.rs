//! Benchmark preparation that pgbench cannot do itself: proposals made before the run, each
//! with a confirmation the tenant's channel signed, so the gated confirm workload measures the
//! gate and not a signing process.

use serde_json::json;
use tokio_postgres::Client;
use toolgate_core::token::Signer;

use crate::keys;
use crate::Result;

/// Make `count` live proposals for tenant `bench1` through the gate (one per conversation, so
/// none supersedes another) and store a channel-signed "sim" for each in `bench.confirmations`,
/// numbered from 1.
pub async fn confirmations(db: &Client, identity: &str, channel: &Signer, count: i64) -> Result<()> {
    // Orders of their own, far above the run's (numbered from 1).
    db.execute(
        "INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected) \
         SELECT 'bench1', (500000000 + g)::text, 'open', true FROM generate_series(1, $1::bigint) g \
         ON CONFLICT DO NOTHING",
        &[&count],
    )
    .await?;
    // A thousand calls a statement: each proposal keeps its conversation's row locked until the
    // statement's transaction ends, and a statement of a thousand keeps that transaction small.
    for first in (1..=count).step_by(1000) {
        let last = (first + 999).min(count);
        db.execute(
            "SELECT toolgate.request_close($1, 'pre-' || g, jsonb_build_object('order_id', (500000000 + g)::text, \
             'reason', 'benchmark close', 'idempotency_key', 'prepared-' || g)) \
             FROM generate_series($2::bigint, $3::bigint) g",
            &[&identity, &first, &last],
        )
        .await?;
    }
    let rows = db
        .query(
            "SELECT proposal_id::text FROM toolgate.proposals \
             WHERE tenant_id = 'bench1' AND conversation_id LIKE 'pre-%' AND status = 'live' ORDER BY created_at, proposal_id",
            &[],
        )
        .await?;
    if rows.len() as i64 != count {
        return Err(format!("expected {count} live proposals, found {}", rows.len()).into());
    }
    let exp = keys::now() + 6 * 3600;
    let (mut ids, mut tokens) = (Vec::new(), Vec::new());
    for row in &rows {
        let id: String = row.get(0);
        tokens.push(channel.sign(&json!({
            "proposal": id, "decision": "approve", "text": "sim", "at": keys::now(), "exp": exp
        })));
        ids.push(id);
    }
    db.execute(
        "INSERT INTO bench.confirmations (n, proposal_id, token) \
         SELECT n, p::uuid, t FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS x(p, t, n)",
        &[&ids, &tokens],
    )
    .await?;
    Ok(())
}
