//! The invariants, judged from the tables against every call the clients made. Calls are matched
//! to their audit rows by transaction id (`xmin` of the row, the id each call learned before it
//! was sent), and to their effects by key and the transaction that settled it, so each check names
//! the calls that break it rather than comparing totals.

use tokio_postgres::Client;

use super::journal::{Call, Fate, Key, Request};
use crate::Result;

/// One invariant: what it says, the figures behind it, and how many rows break it.
pub struct Finding {
    pub name: &'static str,
    pub figures: String,
    pub violations: i64,
}

/// The (tenant, tool, key) of every effect the ERP recorded.
pub async fn effect_keys(root: &Client) -> Result<Vec<Key>> {
    let rows = root
        .query(
            "SELECT tenant_id, 'request_close', idempotency_key FROM maintenance.close_requests \
             UNION ALL SELECT tenant_id, 'request_purchase_part', idempotency_key FROM maintenance.purchases",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| Key { tenant: r.get(0), tool: r.get(1), key: r.get(2) }).collect())
}

/// The calls as a temporary table next to views of the audit and the effects with their `xmin`.
async fn upload(root: &Client, calls: &[Call]) -> Result<()> {
    root.batch_execute(
        "DROP TABLE IF EXISTS pg_temp.load_calls CASCADE;
         CREATE TEMP TABLE load_calls (seq bigint, kind text, tenant text, tool text, key text, proposal text,
                                       x bigint, fate text, committed boolean, outcome text, rule text,
                                       replayed boolean);
         CREATE OR REPLACE TEMP VIEW load_audit AS
             SELECT audit_id, xmin::text::bigint AS x, kind, outcome, coalesce(rule, '') AS rule, replayed
               FROM toolgate.audit;
         -- The ERP's rows are written in the bound functions' subtransaction, whose id is not the call's:
         -- an effect's transaction is the one that settled its key in the ledger (no row there:
         -- no call's, x NULL).
         CREATE OR REPLACE TEMP VIEW load_effects AS
             SELECT e.tenant, e.tool, e.key, e.proposal, l.xmin::text::bigint AS x
               FROM (SELECT tenant_id AS tenant, 'request_close'::text AS tool, idempotency_key AS key,
                            proposal_id::text AS proposal FROM maintenance.close_requests
                     UNION ALL
                     SELECT tenant_id, 'request_purchase_part', idempotency_key, proposal_id::text
                       FROM maintenance.purchases) e
               LEFT JOIN toolgate.ledger l ON (l.tenant_id, l.tool, l.idempotency_key) = (e.tenant, e.tool, e.key);",
    )
    .await?;
    let seq: Vec<i64> = calls.iter().map(|c| c.seq as i64).collect();
    let kind: Vec<&str> = calls.iter().map(|c| c.kind()).collect();
    let tenant: Vec<Option<&str>> = calls.iter().map(|c| c.key.as_ref().map(|k| k.tenant.as_str())).collect();
    let tool: Vec<Option<&str>> = calls.iter().map(|c| c.key.as_ref().map(|k| k.tool.as_str())).collect();
    let key: Vec<Option<&str>> = calls.iter().map(|c| c.key.as_ref().map(|k| k.key.as_str())).collect();
    let proposal: Vec<Option<&str>> = calls
        .iter()
        .map(|c| match &c.request {
            Request::Confirm { proposal, .. } => Some(proposal.as_str()),
            _ => None,
        })
        .collect();
    // xmin is the 32-bit transaction id; the client learned the 64-bit one (epoch and id).
    let x: Vec<Option<i64>> = calls.iter().map(|c| c.xid.map(|x| x & 0xFFFF_FFFF)).collect();
    let fate: Vec<&str> = calls
        .iter()
        .map(|c| match c.fate {
            Fate::Replied(_) => "replied",
            Fate::Lost => "lost",
            Fate::Raised(_) => "raised",
        })
        .collect();
    let committed: Vec<Option<bool>> = calls.iter().map(|c| c.committed).collect();
    let outcome: Vec<Option<&str>> = calls.iter().map(|c| c.reply().map(|_| c.outcome())).collect();
    let rule: Vec<Option<&str>> = calls.iter().map(|c| c.reply().map(|_| c.rule())).collect();
    let replayed: Vec<Option<bool>> = calls.iter().map(|c| c.reply().map(|_| c.replayed())).collect();
    root.execute(
        "INSERT INTO load_calls SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], \
         $6::text[], $7::bigint[], $8::text[], $9::boolean[], $10::text[], $11::text[], $12::boolean[])",
        &[&seq, &kind, &tenant, &tool, &key, &proposal, &x, &fate, &committed, &outcome, &rule, &replayed],
    )
    .await?;
    root.batch_execute("CREATE INDEX ON load_calls (x); ANALYZE load_calls;").await?;
    Ok(())
}

/// (violations, figures) from a statement returning a bigint and a text.
async fn finding(root: &Client, name: &'static str, sql: &str) -> Result<Finding> {
    let row = root.query_one(sql, &[]).await.map_err(|e| format!("{name}: {e}"))?;
    Ok(Finding { name, violations: row.get(0), figures: row.get(1) })
}

/// Write calls that reported an effect of their own: a non-replayed success.
const MADE: &str =
    "c.fate = 'replied' AND c.outcome = 'SUCCEEDED' AND NOT c.replayed AND c.kind IN ('call', 'confirm')";

pub async fn tables(root: &Client, calls: &[Call]) -> Result<Vec<Finding>> {
    upload(root, calls).await?;
    let mut out = Vec::new();
    out.push(
        finding(
            root,
            "every committed call left exactly one audit row",
            "
        WITH n AS (SELECT x, count(*) AS n FROM load_audit GROUP BY x)
        SELECT count(*) FILTER (WHERE coalesce(n.n, 0) <> 1)
             + (SELECT count(*) FROM (SELECT x FROM load_calls WHERE committed GROUP BY x HAVING count(*) > 1) d),
               format('%s committed calls, %s audit rows', count(*), (SELECT count(*) FROM load_audit))
          FROM load_calls c LEFT JOIN n ON n.x = c.x WHERE c.committed",
        )
        .await?,
    );
    out.push(
        finding(
            root,
            "every audit row says what its call was told",
            "
        SELECT count(*), format('%s replies compared', (SELECT count(*) FROM load_calls WHERE fate = 'replied'))
          FROM load_calls c JOIN load_audit a ON a.x = c.x
         WHERE c.fate = 'replied'
           AND (a.kind, a.outcome, a.rule, a.replayed) IS DISTINCT FROM (c.kind, c.outcome, c.rule, c.replayed)",
        )
        .await?,
    );
    out.push(
        finding(
            root,
            "no audit row or effect from a call that rolled back, nor from no call",
            "
        SELECT (SELECT count(*) FROM load_calls c WHERE c.committed = false AND c.x IS NOT NULL
                   AND (EXISTS (SELECT 1 FROM load_audit a WHERE a.x = c.x)
                        OR EXISTS (SELECT 1 FROM load_effects e WHERE e.x = c.x)))
             + (SELECT count(*) FROM load_audit a
                 WHERE NOT EXISTS (SELECT 1 FROM load_calls c WHERE c.x = a.x AND c.committed IS DISTINCT FROM false)),
               format('%s calls rolled back', (SELECT count(*) FROM load_calls WHERE committed = false))",
        )
        .await?,
    );
    out.push(
        finding(
            root,
            "every effect was made by a call that reported it (or whose reply was lost)",
            &format!(
                "
        SELECT count(*) FILTER (WHERE NOT EXISTS (
                   SELECT 1 FROM load_calls c
                    WHERE c.x = e.x AND (c.tenant, c.tool, c.key) = (e.tenant, e.tool, e.key)
                      AND (({MADE}) OR (c.fate = 'lost' AND c.committed IS DISTINCT FROM false)))),
               format('%s effects', count(*))
          FROM load_effects e"
            ),
        )
        .await?,
    );
    out.push(finding(root, "every success reported made its effect", &format!("
        SELECT count(*) FILTER (WHERE NOT EXISTS (
                   SELECT 1 FROM load_effects e WHERE e.x = c.x AND (e.tenant, e.tool, e.key) = (c.tenant, c.tool, c.key))),
               format('%s successes reported', count(*))
          FROM load_calls c WHERE {MADE}")).await?);
    out.push(
        finding(
            root,
            "effects equal the distinct successful keys",
            "
        WITH s AS (SELECT DISTINCT tenant, tool, key FROM load_calls
                    WHERE fate = 'replied' AND outcome = 'SUCCEEDED' AND kind IN ('call', 'confirm')),
             e AS (SELECT tenant, tool, key FROM load_effects)
        SELECT (SELECT count(*) FROM (SELECT * FROM s EXCEPT SELECT * FROM e) d)
             + (SELECT count(*) FROM (SELECT * FROM e EXCEPT SELECT * FROM s) d)
             + (SELECT count(*) - count(DISTINCT (tenant, tool, key)) FROM e),
               format('%s effects, %s distinct successful keys', (SELECT count(*) FROM e), (SELECT count(*) FROM s))",
        )
        .await?,
    );
    out.push(
        finding(
            root,
            "the ledger settled exactly the effects' keys as SUCCEEDED, and holds no reservation",
            "
        WITH l AS (SELECT tenant_id, tool, idempotency_key FROM toolgate.ledger
                    WHERE state = 'settled' AND reply->>'outcome' = 'SUCCEEDED'),
             e AS (SELECT tenant, tool, key FROM load_effects)
        SELECT (SELECT count(*) FROM (SELECT * FROM l EXCEPT SELECT * FROM e) d)
             + (SELECT count(*) FROM (SELECT * FROM e EXCEPT SELECT * FROM l) d)
             + (SELECT count(*) FROM toolgate.ledger WHERE state = 'reserved'),
               format('%s keys settled SUCCEEDED, %s pending, %s reserved', (SELECT count(*) FROM l),
                      (SELECT count(*) FROM toolgate.ledger WHERE state = 'pending'),
                      (SELECT count(*) FROM toolgate.ledger WHERE state = 'reserved'))",
        )
        .await?,
    );
    out.push(finding(root, "no quota exceeded, and each quota counts exactly the calls it admitted", "
        WITH admitted AS (
            SELECT a.tenant_id, a.actor, a.conversation_id, a.tool, count(*) AS n FROM toolgate.audit_log a
              JOIN toolgate.policies p ON p.tenant_id = a.tenant_id AND p.tool = a.tool
             WHERE a.kind = 'call' AND NOT a.replayed AND a.outcome IN ('SUCCEEDED', 'NEEDS_CONFIRMATION')
               AND p.max_calls_per_conversation IS NOT NULL
             GROUP BY 1, 2, 3, 4)
        SELECT (SELECT count(*) FROM toolgate.quota_usage q JOIN toolgate.policies p USING (tenant_id, tool)
                 WHERE q.used > p.max_calls_per_conversation)
             + (SELECT count(*) FROM admitted a JOIN toolgate.policies p USING (tenant_id, tool)
                 WHERE a.n > p.max_calls_per_conversation)
             + (SELECT count(*) FROM admitted a FULL JOIN toolgate.quota_usage q USING (tenant_id, actor, conversation_id, tool)
                 WHERE coalesce(a.n, 0) <> coalesce(q.used, 0)),
               format('%s quota rows, %s at their limit', (SELECT count(*) FROM toolgate.quota_usage),
                      (SELECT count(*) FROM toolgate.quota_usage q JOIN toolgate.policies p USING (tenant_id, tool)
                        WHERE q.used = p.max_calls_per_conversation))").await?);
    out.push(finding(root, "no limit over its max in any window, and each counts exactly the effects it admitted", "
        WITH m AS (
            SELECT l.tenant_id, l.name, l.max, l.rolling_seconds,
                   CASE WHEN l.measure = 'value'
                        THEN (SELECT coalesce(sum(p.total), 0) FROM maintenance.purchases p WHERE p.tenant_id = l.tenant_id)
                        WHEN l.tool = 'request_close'
                        THEN (SELECT count(*) FROM maintenance.close_requests c WHERE c.tenant_id = l.tenant_id)
                        ELSE (SELECT count(*) FROM maintenance.purchases p WHERE p.tenant_id = l.tenant_id) END AS effects,
                   (SELECT coalesce(sum(u.used), 0) FROM toolgate.limit_usage u
                     WHERE u.tenant_id = l.tenant_id AND u.name = l.name) AS used,
                   (SELECT coalesce(max((SELECT sum(v.used) FROM toolgate.limit_usage v
                                          WHERE v.tenant_id = l.tenant_id AND v.name = l.name
                                            AND v.bucket <= b.bucket
                                            AND (l.rolling_seconds IS NULL AND v.bucket = b.bucket
                                                 OR v.bucket > b.bucket - pg_catalog.make_interval(secs => l.rolling_seconds)))), 0)
                      FROM toolgate.limit_usage b
                     WHERE b.tenant_id = l.tenant_id AND b.name = l.name) AS fullest
              FROM toolgate.limits l)
        SELECT count(*) FILTER (WHERE used <> effects OR fullest > max),
               string_agg(format('%s/%s: %s used of %s (fullest window %s), effects %s', tenant_id, name, used, max,
                                 fullest, effects), '; ' ORDER BY tenant_id, name)
          FROM m").await?);
    out.push(finding(root, "no budget exceeded, and each cost centre spent exactly its purchases", "
        SELECT count(*) FILTER (WHERE c.spent > c.budget OR coalesce(p.total, 0) > c.budget OR c.spent <> coalesce(p.total, 0)),
               format('%s cost centres, %s exhausted (less than R$ 13 left), R$ %s spent', count(*),
                      count(*) FILTER (WHERE c.budget - c.spent < 13), sum(c.spent))
          FROM maintenance.cost_centers c
          LEFT JOIN (SELECT tenant_id, cost_center, sum(total) AS total FROM maintenance.purchases GROUP BY 1, 2) p
          USING (tenant_id, cost_center)").await?);
    out.push(
        finding(
            root,
            "no proposal both applied and superseded (or declined, expired, live)",
            "
        SELECT count(*) FILTER (WHERE p.status <> 'applied' AND (
                   EXISTS (SELECT 1 FROM load_effects e WHERE e.proposal = p.proposal_id::text)
                   OR EXISTS (SELECT 1 FROM load_calls c WHERE c.proposal = p.proposal_id::text AND c.kind = 'confirm'
                               AND c.fate = 'replied' AND c.outcome = 'SUCCEEDED')))
             + count(*) FILTER (WHERE p.status = 'applied'
                   AND (SELECT count(*) FROM load_effects e WHERE e.proposal = p.proposal_id::text) <> 1)
             + count(*) FILTER (WHERE p.status <> 'declined' AND EXISTS (
                   SELECT 1 FROM load_calls c WHERE c.proposal = p.proposal_id::text AND c.kind = 'confirm'
                      AND c.fate = 'replied' AND c.outcome = 'CANCELLED')),
               format('%s proposals: %s applied, %s superseded, %s declined, %s live', count(*),
                      count(*) FILTER (WHERE status = 'applied'), count(*) FILTER (WHERE status = 'superseded'),
                      count(*) FILTER (WHERE status = 'declined'), count(*) FILTER (WHERE status = 'live'))
          FROM toolgate.proposals p",
        )
        .await?,
    );
    out.push(finding(root, "at most one live proposal per conversation", "
        SELECT count(*) FILTER (WHERE n > 1), format('%s conversations with a live proposal', count(*))
          FROM (SELECT count(*) AS n FROM toolgate.proposals WHERE status = 'live' GROUP BY tenant_id, conversation_id) d").await?);
    Ok(out)
}
