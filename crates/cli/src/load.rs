//! Load with invariants. Many connections drive a bounded, seeded mix of calls through the gate —
//! new keys, repeated keys, keys reused with other arguments, denials, reads, proposals,
//! confirmations (some twice at once) and declines — and then the tables are judged against every
//! call the clients made: effects equal the distinct successful keys, no quota or budget was
//! exceeded, every call left exactly one audit row, no proposal is both applied and superseded.
//!
//! With `crash`, lost replies are expected (backends killed, the server stopped and restarted):
//! workers reconnect, and afterwards every call whose reply was lost is retried with its key.
//! With `journal`, the calls are written to a file and judged later by `retry_journal` on another
//! server (a promoted standby), which retries every write and confirmation first.

pub mod check;
pub mod journal;
mod mix;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

use crate::db::Server;
use crate::demo::Checks;
use crate::fixture::Lab;
use crate::Result;
use journal::{Call, Conn, Fate, Request, Tokens};
use mix::{Expect, Mix};

pub struct Options {
    pub server: Server,
    pub dbname: String,
    /// Where `Lab::create` generates the run's keys (under DIR/DBNAME).
    pub keys_dir: PathBuf,
    pub connections: usize,
    /// The mix is bounded: at most this many calls.
    pub calls: usize,
    pub seed: u64,
    /// Stop driving after this long even if calls remain.
    pub duration: Option<Duration>,
    /// Lost replies are expected: reconnect, and retry them with their key at the end.
    pub crash: bool,
    /// Write every call to this file and stop before judging (a failover's first half).
    pub journal: Option<PathBuf>,
}

/// A failover's second half: on the promoted standby, retry every write and confirmation of the
/// first half's journal, then judge the tables against both halves.
pub struct RetryOptions {
    pub server: Server,
    pub dbname: String,
    pub keys_dir: PathBuf,
    pub journal: PathBuf,
    pub connections: usize,
}

/// Whether every invariant held, and the calls they were judged against.
pub struct Report {
    pub violations: i64,
    pub calls: Vec<Call>,
}

/// The lab's extra rows for load: shopping-b applies closes and purchases at once (tier 0) with a
/// quota per conversation and small budgets, so that quota and budget races happen; limits over
/// time that the run fills (shopping-b's closes per rolling hour and purchases' value per day,
/// shopping-a's confirmed purchases per day), so that their races happen too; both tenants get
/// enough orders for the run.
fn setup_sql(orders: usize) -> String {
    format!(
        "SET ROLE toolgate_admin;
         SELECT toolgate.set_policy('shopping-b', 'request_close', allowed => true,
                roles => ARRAY['supervisor'], tier => 0, max_calls_per_conversation => {q});
         SELECT toolgate.set_policy('shopping-b', 'request_purchase_part', allowed => true,
                roles => ARRAY['supervisor'], tier => 0, max_value => 300, max_calls_per_conversation => {q});
         SELECT toolgate.set_limit('shopping-b', 'closes-per-hour', max => 120, rolling => '1 hour',
                tool => 'request_close');
         SELECT toolgate.set_limit('shopping-b', 'spend-per-day', max => 8000, measure => 'value',
                calendar => 'day', tool => 'request_purchase_part');
         SELECT toolgate.set_limit('shopping-a', 'spend-per-day', max => 1500, measure => 'value',
                calendar => 'day', tool => 'request_purchase_part', per_actor => true);
         RESET ROLE;
         INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected)
              SELECT 'shopping-a', ({a_close} + i)::text, 'open', true FROM generate_series(0, {n}) i
              UNION ALL SELECT 'shopping-a', ({a_buy} + i)::text, 'open', false FROM generate_series(0, {m}) i
              UNION ALL SELECT 'shopping-b', ({b_close} + i)::text, 'open', true FROM generate_series(0, {n}) i
              UNION ALL SELECT 'shopping-b', ({b_buy} + i)::text, 'open', false FROM generate_series(0, {m}) i;
         INSERT INTO maintenance.parts (tenant_id, part_id, name, unit_price, max_quantity) VALUES
              ('shopping-b', 'V-10', 'Válvula', 40.00, 5);
         INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget) VALUES
              ('shopping-a', 'CC-A-SMALL', 'Pequenos reparos A', 400.00),
              ('shopping-b', 'CC-B-1', 'Pequenos reparos B1', 150.00),
              ('shopping-b', 'CC-B-2', 'Pequenos reparos B2', 150.00),
              ('shopping-b', 'CC-B-BIG', 'Obras grandes', 1000000.00);",
        q = mix::B_QUOTA,
        n = orders - 1,
        m = mix::BUY_ORDERS - 1,
        a_close = mix::A_CLOSE_ORDERS,
        a_buy = mix::A_BUY_ORDERS,
        b_close = mix::B_CLOSE_ORDERS,
        b_buy = mix::B_BUY_ORDERS,
    )
}

pub async fn run(opts: &Options) -> Result<Report> {
    let started = Instant::now();
    let lab = Lab::create(&opts.server, &opts.dbname, &opts.keys_dir).await?;
    let root = lab.connect("postgres").await?;
    // Pools and conversations are sized for the calls the run can make: a run bounded by time
    // makes about a hundred a second here.
    let sizing = opts.duration.map_or(opts.calls, |d| opts.calls.min(d.as_secs() as usize * 100));
    let orders = (sizing / 4).max(2000);
    root.batch_execute(&setup_sql(orders)).await?;
    let tokens = Arc::new(Tokens::load(&lab.keys_dir)?);
    let mix = Arc::new(Mix::new(opts.seed, opts.calls, sizing, orders));
    println!(
        "load: {} connections, at most {} calls{}, seed {}{}",
        opts.connections,
        opts.calls,
        opts.duration.map(|d| format!(" or {} s", d.as_secs())).unwrap_or_default(),
        opts.seed,
        if opts.crash { ", lost replies expected" } else { "" }
    );

    let deadline = opts.duration.map(|d| Instant::now() + d);
    let drive = Instant::now();
    let mut workers = Vec::new();
    for w in 0..opts.connections {
        let (mix, tokens, server, db) = (mix.clone(), tokens.clone(), opts.server.clone(), opts.dbname.clone());
        let crash = opts.crash;
        workers.push(tokio::spawn(async move { worker(w, &mix, &tokens, &server, &db, crash, deadline).await }));
    }
    for w in workers {
        w.await??;
    }
    let mut calls = mix.take_calls();
    let driven = drive.elapsed();
    println!(
        "  drove {} calls in {:.1} s ({:.0} calls/s)",
        calls.len(),
        driven.as_secs_f64(),
        calls.len() as f64 / driven.as_secs_f64().max(0.001)
    );

    if let Some(path) = &opts.journal {
        journal::save(path, &calls)?;
        print_counts(&calls);
        println!("  journal: {} calls written to {}", calls.len(), path.display());
        return Ok(Report { violations: mix.violations().len() as i64, calls });
    }

    let mut retried = RetryStats::default();
    if opts.crash {
        let root = wait_for_server(&opts.server, &opts.dbname).await?;
        settle_lost(&root, &mut calls).await?;
        let lost: Vec<Call> = calls.iter().filter(|c| c.lost()).cloned().collect();
        retried = retry(&lab.keys_dir, &opts.server, &opts.dbname, &root, &mix, &lost, &mut calls, 8).await?;
        disown_reused(&mut calls);
    }
    let root = lab.connect("postgres").await?;
    let violations = judge(&root, &calls, &mix, opts.crash, &retried).await?;
    println!("load: {violations} violations ({:.1} s in all)", started.elapsed().as_secs_f64());
    Ok(Report { violations, calls })
}

pub async fn retry_journal(opts: &RetryOptions) -> Result<Report> {
    let root = wait_for_server(&opts.server, &opts.dbname).await?;
    // The keys the first half's `Lab::create` generated for this database.
    let keys_dir = opts.keys_dir.join(&opts.dbname);
    let mut calls = journal::load(&opts.journal)?;
    // Before any new transaction: the promoted standby knows which lost calls committed (and
    // reached it); ids it never saw are handed out again to the retries.
    settle_lost(&root, &mut calls).await?;
    let mix = Mix::resume(&calls);
    println!(
        "failover: {} calls in the journal ({} replies lost)",
        calls.len(),
        calls.iter().filter(|c| c.lost()).count()
    );
    let writes: Vec<Call> = calls
        .iter()
        .filter(|c| c.retry_of.is_none() && c.key.is_some() && !matches!(c.request, Request::Read { .. }))
        .cloned()
        .collect();
    let retried =
        retry(&keys_dir, &opts.server, &opts.dbname, &root, &mix, &writes, &mut calls, opts.connections).await?;
    disown_reused(&mut calls);
    let violations = judge(&root, &calls, &mix, true, &retried).await?;
    println!("failover: {} retries, {} duplicates, {violations} violations", retried.retries, retried.duplicates);
    Ok(Report { violations, calls })
}

/// Wait (up to two minutes) until the server takes connections again.
async fn wait_for_server(server: &Server, dbname: &str) -> Result<Client> {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        match server.connect("postgres", dbname).await {
            Ok(c) if c.simple_query("SELECT 1").await.is_ok() => return Ok(c),
            _ if Instant::now() < until => tokio::time::sleep(Duration::from_millis(250)).await,
            Ok(_) => return Err("the server never answered".into()),
            Err(e) => return Err(e),
        }
    }
}

async fn worker(
    w: usize,
    mix: &Mix,
    tokens: &Tokens,
    server: &Server,
    dbname: &str,
    crash: bool,
    deadline: Option<Instant>,
) -> Result<()> {
    let mut rng = fastrand::Rng::with_seed(mix.seed.wrapping_add(w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut client: Option<Conn> = None;
    let over = || deadline.is_some_and(|d| Instant::now() >= d);
    while !over() {
        let conn = match &client {
            Some(c) if !c.client.is_closed() => c,
            _ => match Conn::open(server, dbname).await {
                Ok(c) => client.insert(c),
                Err(_) if crash => {
                    // The server is down or recovering: wait for it, as an application would.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(e) => return Err(e),
            },
        };
        let Some(planned) = mix.plan(&mut rng) else { break };
        match conn.send(&planned.request, tokens).await {
            Some((xid, fate)) => {
                let lost = matches!(fate, Fate::Lost);
                mix.record(planned, Some(xid), fate, None);
                if lost {
                    client = None;
                }
            }
            None => {
                // Nothing was sent: give the slot back and reconnect.
                mix.unplan(planned);
                client = None;
                if !crash {
                    return Err("a connection closed under the load".into());
                }
            }
        }
    }
    Ok(())
}

/// After a crash, an id that no WAL record carried is handed out again. A transaction that
/// committed is in the WAL, so a lost call whose id a later call got did not commit, and the id's
/// audit row and effect are the later call's. (Two committed calls with one id would be a broken
/// server: check::tables reports it.)
fn disown_reused(calls: &mut [Call]) {
    let mut owner = BTreeMap::new();
    for c in calls.iter() {
        if let Some(x) = c.xid {
            let seq = owner.entry(x).or_insert(c.seq);
            *seq = (*seq).max(c.seq);
        }
    }
    for c in calls.iter_mut() {
        if c.lost() && c.xid.is_some_and(|x| owner[&x] != c.seq) {
            (c.xid, c.committed) = (None, Some(false));
        }
    }
}

/// Ask the server whether each lost call's transaction committed.
async fn settle_lost(root: &Client, calls: &mut [Call]) -> Result<()> {
    disown_reused(calls);
    for c in calls.iter_mut().filter(|c| c.lost()) {
        let Some(xid) = c.xid else { continue };
        let status = root.query_one("SELECT pg_xact_status($1::text::xid8)", &[&xid.to_string()]).await;
        c.committed = match status {
            Ok(row) => match row.get::<_, Option<String>>(0).as_deref() {
                Some("committed") => Some(true),
                Some("aborted") => Some(false),
                _ => None,
            },
            // "transaction ID … is in the future": never logged, so never committed.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE) => {
                c.xid = None;
                Some(false)
            }
            Err(e) => return Err(e.into()),
        };
    }
    Ok(())
}

#[derive(Default)]
pub struct RetryStats {
    pub retries: usize,
    /// Retries whose original was settled (a reply we read, or a lost call whose key had an
    /// effect before the retry), and that replayed it.
    pub replayed: usize,
    /// Retries that made an effect again: for a key that had one, or a call told SUCCEEDED.
    pub duplicates: usize,
    /// Retries of settled calls that did not replay them.
    pub not_replayed: usize,
}

/// Retry each of `originals` with its key (a new token, the same arguments; a confirmation is the
/// same answer signed again) and append the retries to `calls`.
// Allowed: each argument is one piece of the run's state the retries need; a struct made only to
// carry them here would be one more name for the same things.
#[allow(clippy::too_many_arguments)]
async fn retry(
    keys_dir: &std::path::Path,
    server: &Server,
    dbname: &str,
    root: &Client,
    mix: &Mix,
    originals: &[Call],
    calls: &mut Vec<Call>,
    connections: usize,
) -> Result<RetryStats> {
    let tokens = Arc::new(Tokens::load(keys_dir)?);
    let before: HashSet<journal::Key> = check::effect_keys(root).await?.into_iter().collect();
    let queue = Arc::new(std::sync::Mutex::new(originals.to_vec()));
    let done = Arc::new(std::sync::Mutex::new(Vec::new()));
    let next_seq = Arc::new(std::sync::atomic::AtomicU64::new(calls.iter().map(|c| c.seq + 1).max().unwrap_or(0)));
    let mut tasks = Vec::new();
    for _ in 0..connections.max(1) {
        let (queue, done, tokens, server, db, next_seq) =
            (queue.clone(), done.clone(), tokens.clone(), server.clone(), dbname.to_string(), next_seq.clone());
        tasks.push(tokio::spawn(async move {
            let conn = Conn::open(&server, &db).await?;
            loop {
                let Some(original) = queue.lock().expect("no panics while held").pop() else { break };
                let Some((xid, fate)) = conn.send(&original.request, &tokens).await else {
                    return Err::<(), crate::Error>("the connection closed during the retries".into());
                };
                let committed = matches!(fate, Fate::Replied(_)).then_some(true);
                let seq = next_seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let call = Call {
                    seq,
                    op: format!("retry:{}", original.op),
                    request: original.request.clone(),
                    key: original.key.clone(),
                    xid: Some(xid),
                    fate,
                    committed,
                    retry_of: Some(original.seq),
                };
                done.lock().expect("no panics while held").push((original, call));
            }
            Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let pairs = std::mem::take(&mut *done.lock().expect("no panics while held"));
    let mut stats = RetryStats::default();
    for (original, call) in pairs {
        stats.retries += 1;
        let had_effect = original.key.as_ref().is_some_and(|k| before.contains(k));
        let settled = settled_reply(&original);
        // The effect happened before (the key has one, or the caller was told SUCCEEDED) and the
        // retry made it again.
        let succeeded_anew = call.outcome() == "SUCCEEDED" && !call.replayed();
        if succeeded_anew && (had_effect || original.outcome() == "SUCCEEDED") {
            stats.duplicates += 1;
        }
        if let Some(prev) = settled {
            if Expect::Replay(prev.clone()).allows(&call) {
                stats.replayed += 1;
            } else {
                stats.not_replayed += 1;
                mix.violation(format!(
                    "retry of call {} ({} {} replayed={}) got {} {} replayed={}",
                    original.seq,
                    original.outcome(),
                    original.rule(),
                    original.replayed(),
                    call.outcome(),
                    call.rule(),
                    call.replayed()
                ));
            }
        } else if had_effect && call.outcome() == "SUCCEEDED" && call.replayed() {
            stats.replayed += 1;
        }
        if let Fate::Raised(e) = &call.fate {
            mix.violation(format!("retry of call {} raised: {e}", original.seq));
        }
        calls.push(call);
    }
    calls.sort_by_key(|c| c.seq);
    Ok(stats)
}

/// The reply a retry must replay: a write or confirmation whose reply settled its key.
fn settled_reply(original: &Call) -> Option<&serde_json::Value> {
    let reply = original.reply()?;
    match (&original.request, original.outcome()) {
        (Request::Write { .. }, "SUCCEEDED") => Some(reply),
        (Request::Confirm { .. }, "SUCCEEDED" | "CANCELLED") => Some(reply),
        _ => None,
    }
}

fn print_counts(calls: &[Call]) {
    let mut by_outcome: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut by_op: BTreeMap<&str, usize> = BTreeMap::new();
    for c in calls {
        let label = match &c.fate {
            Fate::Replied(_) => c.outcome().to_string(),
            Fate::Lost => "(reply lost)".to_string(),
            Fate::Raised(_) => "(raised)".to_string(),
        };
        let entry = by_outcome.entry(label).or_default();
        entry.0 += 1;
        if c.replayed() {
            entry.1 += 1;
        }
        *by_op.entry(c.op.as_str()).or_default() += 1;
    }
    let outcomes: Vec<String> = by_outcome
        .iter()
        .map(|(o, (n, r))| if *r > 0 { format!("{o} {n} ({r} replayed)") } else { format!("{o} {n}") })
        .collect();
    println!("  outcomes: {}", outcomes.join(", "));
    let ops: Vec<String> = by_op.iter().map(|(o, n)| format!("{o} {n}")).collect();
    println!("  mix: {}", ops.join(", "));
}

/// Print the counts and every invariant; the number of violations.
async fn judge(root: &Client, calls: &[Call], mix: &Mix, crash: bool, retried: &RetryStats) -> Result<i64> {
    print_counts(calls);
    let lost = calls.iter().filter(|c| c.lost()).count();
    if crash || lost > 0 {
        let committed = calls.iter().filter(|c| c.lost() && c.committed == Some(true)).count();
        let unknown = calls.iter().filter(|c| c.lost() && c.committed.is_none()).count();
        println!("  lost replies: {lost} ({committed} had committed, {unknown} unknowable)");
        println!(
            "  retries: {} ({} replayed a settled key, {} not replayed, {} second effects)",
            retried.retries, retried.replayed, retried.not_replayed, retried.duplicates
        );
    }
    let findings = check::tables(root, calls).await?;
    let mut checks = Checks::default();
    let mut violations = 0;
    println!("  invariants:");
    for f in &findings {
        checks.that(&format!("{} ({})", f.name, f.figures), f.violations == 0);
        violations += f.violations;
    }
    let client = mix.violations();
    let raised = calls.iter().filter(|c| matches!(c.fate, Fate::Raised(_))).count() as i64;
    checks.that(&format!("no call raised instead of returning an outcome ({raised} raised)"), raised == 0);
    checks.that(
        &format!("every reply is one the mix allows, every settled key replays ({} not)", client.len()),
        client.is_empty(),
    );
    if !crash {
        checks.that(&format!("no reply was lost ({lost} lost)"), lost == 0);
        violations += lost as i64;
    }
    checks.that(
        &format!("no retry made a second effect ({} second effects)", retried.duplicates),
        retried.duplicates == 0,
    );
    for v in client.iter().take(10) {
        println!("    violation: {v}");
    }
    for c in calls.iter().filter(|c| matches!(c.fate, Fate::Raised(_))).take(10) {
        if let Fate::Raised(e) = &c.fate {
            println!("    raised: call {} ({}): {e}", c.seq, c.op);
        }
    }
    Ok(violations + raised + client.len() as i64 + retried.duplicates as i64)
}
