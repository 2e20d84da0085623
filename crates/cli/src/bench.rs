//! Benchmark preparation that pgbench cannot do itself: proposals made before the run, each
//! with a confirmation the tenant's channel signed, so the gated confirm workload measures the
//! gate and not a signing process; and the outbox dispatcher's throughput against the fake ERP.

use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_postgres::Client;
use toolgate_core::token::Signer;
use toolgate_fake_erp::{Config, FakeErp, Settings};

use crate::db::{self, Server};
use crate::Result;
use crate::{dispatch, keys};

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

/// One run of the dispatcher's benchmark (`toolgate bench-dispatch`).
#[derive(Clone, Debug)]
pub struct DispatchRun {
    pub server: Server,
    /// A database bench/setup.sql loaded (its outbox tool `erp_purchase_part`, endpoint `bench_erp`),
    /// where no other dispatcher's intents wait.
    pub dbname: String,
    /// The benchmark's keys (`idp-bench.key`); the ERP's refresh token is written here too.
    pub keys_dir: PathBuf,
    /// Intents enqueued, then delivered.
    pub intents: i64,
    /// Intents the dispatcher claims at a time, and keeps in flight at once.
    pub batch: i32,
    pub concurrency: usize,
    /// The fake ERP does each write at once and answers DONE (no protocol to poll).
    pub synchronous: bool,
    /// Steady: for this long, `clients` clients enqueue intents through the gate as fast as they
    /// can while the dispatcher, polling every `poll` and woken by the calls' notifications if
    /// `notify`, delivers them (`intents` then ignored); the queue's lag is sampled every 100 ms.
    pub steady: Option<Duration>,
    pub clients: usize,
    /// The enqueuing sessions' `toolgate.outbox_notify`.
    pub notify: bool,
    pub poll: Duration,
}

/// What a run measured: the dispatcher's wall time from its start (its connection included) until
/// every intent was settled.
#[derive(Clone, Debug)]
pub struct DispatchFigures {
    pub intents: i64,
    pub seconds: f64,
    /// CPU the dispatcher's thread spent (it runs on the benchmark's main thread; the fake ERP on
    /// a thread of its own), per intent.
    pub cpu_us_per_intent: f64,
    /// Steady runs: the longest wait of an intent due and not yet claimed, sampled every 100 ms,
    /// and the same at the last sample before the enqueuing stopped.
    pub max_lag: Option<f64>,
    pub last_lag: Option<f64>,
}

/// CPU time of the calling thread so far (Linux: /proc/thread-self/stat, in clock ticks of
/// 10 ms: user + system).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

impl DispatchFigures {
    pub fn per_second(&self) -> f64 {
        self.intents as f64 / self.seconds
    }
}

/// The login the dispatcher runs as (made once per cluster).
const DISPATCHER: &str = "toolgate_bench_dispatcher";

/// Enqueue `intents` intents of `erp_purchase_part` through the gate (each call answers PENDING),
/// start the fake ERP on 127.0.0.1 (no rate limits, no faults, writes done at once), point the
/// endpoint `bench_erp` at it, and time `dispatch::run` (drain once) until all are settled. Then
/// check what the ERP did and what the gate recorded: one effect per intent, each sent once, and
/// every outbox row SUCCEEDED; anything else is an error, not a figure.
pub async fn dispatch(run: &DispatchRun) -> Result<DispatchFigures> {
    let db = run.server.connect("postgres", &run.dbname).await?;
    db.batch_execute(&format!(
        "DO $$ BEGIN CREATE ROLE {DISPATCHER} LOGIN IN ROLE toolgate_dispatcher; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
    ))
    .await?;
    // Every earlier run's intents were checked SUCCEEDED: this run's keys follow theirs.
    let before = db::count(&db, "SELECT count(*) FROM toolgate.outbox", &[]).await?;
    let pending = db::count(&db, "SELECT count(*) FROM toolgate.outbox WHERE state <> 'SUCCEEDED'", &[]).await?;
    if pending > 0 {
        return Err(format!("{pending} intent(s) of an earlier run are not SUCCEEDED").into());
    }
    let identity = keys::identity(&keys::load(&run.keys_dir, "idp-bench")?, "bench-user", "bench", "supervisor", 3600);
    if let Some(span) = run.steady {
        return steady(run, &db, &identity, before, span).await;
    }
    // A thousand calls a statement, as `confirmations` makes its proposals; the orders are the
    // outbox workload's (900000165 and on), which an outbox call leaves open.
    for first in (1..=run.intents).step_by(1000) {
        let last = (first + 999).min(run.intents);
        let row = db
            .query_one(
                "SELECT count(*) FILTER (WHERE r->>'outcome' = 'PENDING'), count(*), \
                        min(r::text) FILTER (WHERE r->>'outcome' IS DISTINCT FROM 'PENDING') \
                   FROM (SELECT toolgate.call($1, 'dispatch-bench', 'erp_purchase_part', \
                                jsonb_build_object('order_id', (900000165 + g % 64)::text, 'part_id', 'P-1', \
                                                   'quantity', 1, 'idempotency_key', 'dispatch-key-' || g)) AS r \
                           FROM generate_series($2::bigint, $3::bigint) g) s",
                &[&identity, &(before + first), &(before + last)],
            )
            .await?;
        let (answered_pending, calls): (i64, i64) = (row.get(0), row.get(1));
        if answered_pending != calls {
            let other: Option<String> = row.get(2);
            return Err(format!(
                "{} of {calls} outbox calls did not answer PENDING: {}",
                calls - answered_pending,
                other.unwrap_or_default()
            )
            .into());
        }
    }
    let queued = db::count(&db, "SELECT count(*) FROM toolgate.outbox WHERE state = 'PENDING'", &[]).await?;
    if queued != run.intents {
        return Err(format!("{queued} intents PENDING in the outbox, expected {}", run.intents).into());
    }

    let erp = FakeErpThread::start(run.synchronous)?;
    let opts = point_at(run, &db, &erp).await?;
    let (started, cpu) = (Instant::now(), thread_cpu());
    let report = dispatch::run(&opts).await?;
    let (seconds, cpu) = (started.elapsed().as_secs_f64(), thread_cpu() - cpu);
    let n = run.intents as usize;
    if report.claimed != n || report.count("SUCCEEDED") != n {
        return Err(format!(
            "the dispatcher claimed {} and settled {:?}, expected {n} SUCCEEDED",
            report.claimed, report.settled
        )
        .into());
    }
    verify(&db, erp, before, run.intents).await?;
    let cpu_us_per_intent = cpu.as_secs_f64() * 1e6 / run.intents as f64;
    Ok(DispatchFigures { intents: run.intents, seconds, cpu_us_per_intent, max_lag: None, last_lag: None })
}

/// A steady run: `run.clients` clients call the outbox tool back to back for `span` (each in a
/// session whose `toolgate.outbox_notify` is `run.notify`) while the dispatcher, polling every
/// `run.poll` and listening, delivers; then everything is delivered and checked.
async fn steady(
    run: &DispatchRun,
    db: &Client,
    identity: &str,
    before: i64,
    span: Duration,
) -> Result<DispatchFigures> {
    let erp = FakeErpThread::start(run.synchronous)?;
    let mut opts = point_at(run, db, &erp).await?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    (opts.once, opts.poll, opts.stop) = (false, run.poll, Some(stopped));
    let cpu = thread_cpu();
    let started = Instant::now();
    let dispatcher = tokio::spawn(dispatch::run_owned(opts));
    let sampler = run.server.connect("postgres", &run.dbname).await?;
    let next_key = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(before + 1));
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..run.clients.max(1) {
        let client = run.server.connect("postgres", &run.dbname).await?;
        client
            .batch_execute(&format!("SET toolgate.outbox_notify = {}", if run.notify { "on" } else { "off" }))
            .await?;
        let (identity, next_key) = (identity.to_string(), next_key.clone());
        clients.spawn(async move {
            while started.elapsed() < span {
                let key = next_key.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let reply: serde_json::Value = client
                    .query_one(
                        "SELECT toolgate.call($1, 'dispatch-bench', 'erp_purchase_part', \
                                jsonb_build_object('order_id', (900000165 + $2::bigint % 64)::text, 'part_id', 'P-1', \
                                                   'quantity', 1, 'idempotency_key', 'dispatch-key-' || $2::bigint))",
                        &[&identity, &key],
                    )
                    .await
                    .map_err(|e| e.to_string())?
                    .get(0);
                if reply["outcome"] != "PENDING" {
                    return Err(format!("an outbox call did not answer PENDING: {reply}"));
                }
            }
            Ok::<(), String>(())
        });
    }
    let (mut max_lag, mut last_lag) = (0f64, 0f64);
    while started.elapsed() < span {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let lag: f64 = sampler.query_one("SELECT oldest_due_seconds FROM toolgate.outbox_gauges()", &[]).await?.get(0);
        (max_lag, last_lag) = (max_lag.max(lag), lag);
    }
    while let Some(done) = clients.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    let enqueuing = started.elapsed();
    let enqueued = next_key.load(std::sync::atomic::Ordering::Relaxed) - before - 1;
    // Then the rest is delivered (within five minutes), and the dispatcher stopped.
    for _ in 0..3000 {
        if db::count(db, "SELECT count(*) FROM toolgate.outbox WHERE state <> 'SUCCEEDED'", &[]).await? == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(true);
    let report = dispatcher.await.map_err(|e| e.to_string())??;
    let cpu = thread_cpu() - cpu;
    if report.count("SUCCEEDED") != enqueued as usize {
        return Err(format!("the dispatcher settled {:?}, expected {enqueued} SUCCEEDED", report.settled).into());
    }
    verify(db, erp, before, enqueued).await?;
    // The thread ran the enqueuing client too: its CPU is not the dispatcher's alone here.
    let cpu_us_per_intent = cpu.as_secs_f64() * 1e6 / enqueued as f64;
    Ok(DispatchFigures {
        intents: enqueued,
        seconds: enqueuing.as_secs_f64(),
        cpu_us_per_intent,
        max_lag: Some(max_lag),
        last_lag: Some(last_lag),
    })
}

/// Point the endpoint `bench_erp` at `erp` (a new one each run, with a refresh token of its own)
/// and write its refresh token where the dispatcher reads it: the dispatcher's options.
async fn point_at(run: &DispatchRun, db: &Client, erp: &FakeErpThread) -> Result<dispatch::Options> {
    let token_file = run.keys_dir.join("erp-refresh-token");
    std::fs::write(&token_file, format!("{}\n", erp.erp.refresh_token()))?;
    // Each run's ERP is a new one, with a refresh token of its own: the tokens the dispatchers
    // kept from an earlier run's ERP (`toolgate.erp_credentials`) go, so this run's file seeds them.
    db.batch_execute(&format!(
        "SELECT toolgate.repoint_erp_endpoint('bench_erp', '{}'); \
         DELETE FROM toolgate.erp_credentials WHERE endpoint = 'bench_erp'",
        erp.erp.base_url()
    ))
    .await?;
    let opts = dispatch::Options {
        database: format!("host={} port={} user={DISPATCHER} dbname={}", run.server.host, run.server.port, run.dbname),
        once: true,
        batch: run.batch,
        concurrency: run.concurrency,
        refresh_token_files: [("bench_erp".to_string(), token_file)].into(),
        allowed_origins: vec![dispatch::origin(&erp.erp.base_url()).ok_or("the fake ERP's URL")?],
        allow_private_addresses: true,
        ..dispatch::Options::default()
    };
    Ok(opts)
}

/// What the ERP did and the gate recorded after `intents` were delivered: one effect per intent,
/// each sent once, every outbox row SUCCEEDED with its audit row; anything else is an error.
async fn verify(db: &Client, erp: FakeErpThread, before: i64, intents: i64) -> Result<()> {
    let effects = erp.erp.effects();
    drop(erp);
    let erp_count = |what: &str| effects[what].as_i64().unwrap_or(-1);
    let (made, writes_received) = (erp_count("effects"), erp_count("writes_received"));
    if made != intents || erp_count("done") != intents || writes_received != intents {
        return Err(format!(
            "the ERP made {made} effect(s) ({} done) from {writes_received} write(s), expected {} of each",
            erp_count("done"),
            intents
        )
        .into());
    }
    let row = db
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE state = 'SUCCEEDED'), \
                    (SELECT count(*) FROM toolgate.audit WHERE kind = 'dispatch' AND outcome = 'SUCCEEDED') \
               FROM toolgate.outbox",
            &[],
        )
        .await?;
    let (rows, succeeded, audited): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    let total = before + intents;
    if rows != total || succeeded != total || audited != total {
        return Err(format!(
            "the outbox holds {rows} intent(s), {succeeded} SUCCEEDED, with {audited} dispatch audit row(s) \
             SUCCEEDED; expected {total} of each"
        )
        .into());
    }
    Ok(())
}

/// The fake ERP on a thread and runtime of its own, as an ERP in another process would be: the
/// dispatcher under test does not share its thread with the server it sends to.
struct FakeErpThread {
    erp: FakeErp,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeErpThread {
    fn start(synchronous: bool) -> Result<Self> {
        let settings = Settings {
            per_second: 0,
            per_minute: 0,
            async_delay: Duration::ZERO,
            require_idempotency_key: true,
            synchronous,
            ..Settings::default()
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            runtime.block_on(async move {
                let config = Config { settings, refresh_token: None };
                let _ = ready_tx.send(toolgate_fake_erp::start("127.0.0.1:0".parse().unwrap(), config).await);
                let _ = stopped.await;
            });
        });
        let erp = ready_rx.recv().map_err(|_| "the fake ERP's thread ended")??;
        Ok(FakeErpThread { erp, stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for FakeErpThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
