//! The dispatcher's fault matrix (issue 24): one test a row, each a fault the fake ERP plays on real
//! HTTP on 127.0.0.1 while `toolgate dispatch --once` (dispatch::run) delivers outbox intents. Every
//! row ends with the same checks, in [`Setup::settle_row`]:
//! - after enough runs (each due intent forced due as root) every intent is final, SUCCEEDED or
//!   REJECTED; nothing is lost, nothing dead-lettered;
//! - the ERP's effects are the keys that ended SUCCEEDED: one effect each, none for a REJECTED key,
//!   none under another key (its count by order), so no duplicate;
//! - the status query (the same call with the same key) answers the final outcome, replayed;
//! - where the fault hid the answer, the final state came from the ERP's state query by key (the
//!   fake counts those) and the write was not sent again.
//!
//! Each row prints one line of a Markdown table; the first to finish prints the header too:
//! `cargo test --test outbox_faults -- --nocapture | grep '^|'` is the table.

mod common;

use common::*;
use serde_json::json;
use std::net::TcpListener;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};
use toolgate_cli::dispatch::{self, Options, Report};
use toolgate_fake_erp::{Fault, Matcher};

use common::outbox::{self, marked_field, TOOL};
/// Dispatch runs a row may take before an intent still open fails it.
const MAX_RUNS: usize = 6;

/// The outbox's test setup (tests/common/outbox.rs), and the outcomes of each dispatch run, for
/// the table.
struct Setup {
    base: outbox::Setup,
    runs: Mutex<Vec<String>>,
}

impl std::ops::Deref for Setup {
    type Target = outbox::Setup;
    fn deref(&self) -> &outbox::Setup {
        &self.base
    }
}

async fn setup(name: &str) -> Setup {
    Setup { base: outbox::setup(name).await, runs: Mutex::new(Vec::new()) }
}

/// One intent of a row: its order and key.
struct Intent {
    order: String,
    key: String,
}

/// What a row expects of an intent at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Final {
    Succeeded,
    Rejected,
}

/// How the final state was learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Learned {
    /// From the write's own answer (and its protocol): no state query needed.
    Answer,
    /// The fault hid the answer: from the state query by key, and the write was not sent again.
    Reconciled,
    /// The ERP said nothing was applied: sent again with the same key.
    Resent,
    /// Nothing reached the ERP before (no connection): sent with the same key, without asking.
    NeverSent,
}

impl Setup {
    /// One dispatch run with `opts`, recorded for the table.
    async fn dispatch_with(&self, opts: &Options) -> Report {
        let report = dispatch::run(opts).await.expect("the dispatcher runs");
        let mut outcomes: Vec<(&String, &usize)> = report.settled.iter().collect();
        outcomes.sort();
        let words: Vec<String> =
            outcomes.iter().map(|(o, n)| if **n == 1 { o.to_string() } else { format!("{n}×{o}") }).collect();
        self.runs.lock().unwrap().push(if words.is_empty() { "-".into() } else { words.join("+") });
        report
    }

    async fn dispatch(&self) -> Report {
        self.dispatch_with(&self.options()).await
    }

    /// Every intent due now (as root), as if its retry delay had passed.
    async fn force_due(&self) {
        self.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    }

    /// Runs (each intent forced due first) until no intent is PENDING or UNCERTAIN.
    async fn drain(&self, opts: &Options) {
        while self.open().await > 0 {
            assert!(self.runs.lock().unwrap().len() < MAX_RUNS, "still open after {MAX_RUNS} runs");
            self.force_due().await;
            self.dispatch_with(opts).await;
        }
    }

    async fn open(&self) -> i64 {
        count(&self.root, "SELECT count(*) FROM toolgate.outbox WHERE state IN ('PENDING', 'UNCERTAIN')").await
    }

    /// `n` calls (orders o1.., keys `PREFIX-1`..), each answered PENDING.
    async fn intents(&self, prefix: &str, n: usize) -> Vec<Intent> {
        let mut intents = Vec::new();
        for i in 1..=n {
            let intent = Intent { order: format!("o{i}"), key: format!("{prefix}-{i}") };
            let reply = self.call(&intent.order, &intent.key).await;
            assert_eq!(outcome(&reply), ("PENDING", "-"), "{reply}");
            intents.push(intent);
        }
        assert_eq!(self.erp("writes_received"), 0, "nothing is sent by the call");
        intents
    }

    /// Wait (bounded) until the ERP's record of `key` is `status`.
    async fn erp_reaches(&self, key: &str, status: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.erp_key(key).0 != status {
            assert!(Instant::now() < deadline, "the ERP never had {key} {status}: {}", self.erp.effects());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The audit's notes within attempts (`toolgate.note_outbox`) of `phase`: each one's detail.
    async fn notes(&self, phase: &str) -> Vec<serde_json::Value> {
        let rows = self
            .root
            .query(
                "SELECT detail FROM toolgate.audit WHERE kind = 'dispatch' AND outcome = 'PENDING' \
                 AND detail->>'phase' = $1 ORDER BY audit_id",
                &[&phase],
            )
            .await
            .unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    }

    async fn outbox(&self, key: &str) -> String {
        self.root
            .query_one("SELECT state FROM toolgate.outbox WHERE idempotency_key = $1", &[&key])
            .await
            .unwrap()
            .get(0)
    }

    /// Drain, check every intent's end against `expected` and the ERP's own count, and print the
    /// row.
    async fn settle_row(&self, fault: &str, intents: &[Intent], expected: Final, learned: Learned, opts: &Options) {
        self.drain(opts).await;
        let effects = self.erp.effects();
        let (mut succeeded, mut rejected) = (0i64, 0i64);
        for intent in intents {
            let state = self.outbox(&intent.key).await;
            let (erp_status, erp_effects) = self.erp_key(&intent.key);
            let status = self.call(&intent.order, &intent.key).await;
            assert_eq!(status["replayed"], true, "{}: {status}", intent.key);
            match expected {
                Final::Succeeded => {
                    succeeded += 1;
                    assert_eq!(state, "SUCCEEDED", "{}", intent.key);
                    assert_eq!((erp_status.as_str(), erp_effects), ("DONE", 1), "{}: {effects}", intent.key);
                    assert_eq!(outcome(&status), ("SUCCEEDED", "-"), "{status}");
                    assert_eq!(marked_field(&status["result"]["erp"], "status"), Some("DONE"), "{status}");
                    assert_eq!(
                        marked_field(&status["result"]["erp"], "idempotency_key"),
                        Some(format!("shopping-a:{TOOL}:{}", intent.key).as_str())
                    );
                }
                Final::Rejected => {
                    rejected += 1;
                    assert_eq!(state, "REJECTED", "{}", intent.key);
                    assert_eq!((erp_status.as_str(), erp_effects), ("REJECTED", 0), "{}: {effects}", intent.key);
                    assert_eq!(outcome(&status), ("REJECTED", "erp_rejected"), "{status}");
                }
            }
        }
        // The ERP's effects are the keys that succeeded, one each; no other key, no order twice.
        assert_eq!(effects["effects"].as_i64(), Some(succeeded), "{effects}");
        assert_eq!(effects["by_key"].as_object().unwrap().len(), intents.len(), "{effects}");
        for (order, n) in effects["by_order"].as_object().unwrap() {
            assert!(n.as_i64().unwrap() <= 1, "order {order} done {n} times: {effects}");
        }
        assert_eq!(
            count(&self.root, "SELECT count(*) FROM toolgate.outbox WHERE state NOT IN ('SUCCEEDED', 'REJECTED')")
                .await,
            0
        );
        let (writes, queries) =
            (effects["writes_received"].as_i64().unwrap(), effects["state_queries"].as_i64().unwrap());
        match learned {
            Learned::Answer => assert_eq!(writes, intents.len() as i64, "one write an intent: {effects}"),
            Learned::Reconciled => {
                assert_eq!(writes, intents.len() as i64, "never sent again: {effects}");
                assert!(queries >= intents.len() as i64, "asked the ERP by key: {effects}");
            }
            Learned::Resent => assert!(queries >= 1, "asked the ERP by key before sending again: {effects}"),
            Learned::NeverSent => {
                assert_eq!((writes, queries), (intents.len() as i64, 0), "sent once, nothing to ask: {effects}")
            }
        }
        let outcomes = match (succeeded, rejected) {
            (s, 0) => format!("{s} SUCCEEDED"),
            (0, r) => format!("{r} REJECTED"),
            (s, r) => format!("{s} SUCCEEDED, {r} REJECTED"),
        };
        let runs = self.runs.lock().unwrap().clone();
        row(&format!(
            "| {fault} | {} | {} ({writes} writes handled, {queries} state queries) | {outcomes} | {}: {} |",
            intents.len(),
            effects["effects"],
            runs.len(),
            runs.join(" → ")
        ));
    }
}

/// One line of the table, the header first.
fn row(line: &str) {
    static HEADER: Once = Once::new();
    static OUT: Mutex<()> = Mutex::new(());
    let _one_at_a_time = OUT.lock().unwrap_or_else(|p| p.into_inner());
    HEADER.call_once(|| {
        println!("| fault | intents | ERP effects | final outcomes | runs |");
        println!("|---|---|---|---|---|");
    });
    println!("{line}");
}

#[tokio::test]
async fn late_answer_after_the_clients_timeout() {
    let s = setup("faults_late").await;
    let intents = s.intents("late-key", 1).await;
    let opts = Options { timeout: Duration::from_millis(500), ..s.options() };
    // Handled 1.5 s after it arrives: the dispatcher gave up after 0.5 s, asked, and was told
    // NOT_FOUND (the ERP has not got to it yet): nothing applied as far as anyone knows.
    s.erp.queue_fault(Fault::Late(Duration::from_millis(1500)), 1, Matcher::default());
    assert_eq!(s.dispatch_with(&opts).await.count("PENDING"), 1);
    assert_eq!(s.outbox("late-key-1").await, "PENDING");
    // Then the ERP applies it; the next run asks first and learns it is done: not sent again.
    s.erp_reaches("late-key-1", "DONE").await;
    s.settle_row(
        "answer after the client's timeout (late 1.5 s > 0.5 s)",
        &intents,
        Final::Succeeded,
        Learned::Reconciled,
        &opts,
    )
    .await;
    assert_eq!(s.runs.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn drop_after_applying() {
    let s = setup("faults_drop").await;
    let intents = s.intents("drop-key", 1).await;
    s.erp.queue_fault(Fault::Drop, 1, Matcher::default());
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 1, "reconciled in the same attempt");
    s.settle_row("applied, then the connection dropped", &intents, Final::Succeeded, Learned::Reconciled, &s.options())
        .await;
}

#[tokio::test]
async fn drop_before_handling() {
    let s = setup("faults_drop_before").await;
    let intents = s.intents("dropb-key", 1).await;
    s.erp.queue_fault(Fault::DropBefore, 1, Matcher::default());
    // Asked at once: NOT_FOUND, so PENDING and sent again (the same key) on the next run.
    assert_eq!(s.dispatch().await.count("PENDING"), 1);
    assert_eq!((s.erp("state_queries"), s.erp("writes_received"), s.erp("effects")), (1, 0, 0));
    s.settle_row("connection dropped before handling", &intents, Final::Succeeded, Learned::Resent, &s.options()).await;
    assert_eq!(s.erp("writes_received"), 1);
}

#[tokio::test]
async fn internal_error_500() {
    let s = setup("faults_500").await;
    let intents = s.intents("fivehundred", 1).await;
    s.erp.queue_fault(Fault::InternalError, 1, Matcher::default());
    assert_eq!(s.dispatch().await.count("PENDING"), 1);
    assert_eq!(s.erp("effects"), 0);
    s.settle_row("500", &intents, Final::Succeeded, Learned::Resent, &s.options()).await;
    // The 500 answered before the ERP handled anything; the write sent again (the same key) is
    // the only one it handled.
    assert_eq!(s.erp("writes_received"), 1);
}

#[tokio::test]
async fn unavailable_503_with_retry_after() {
    let s = setup("faults_503").await;
    let intents = s.intents("unavailable", 2).await;
    s.erp.queue_fault(Fault::Unavailable, 2, Matcher::default());
    assert_eq!(s.dispatch().await.count("PENDING"), 2);
    // Not due before the dispatcher's own retry delay.
    assert_eq!(s.dispatch().await.claimed, 0);
    s.runs.lock().unwrap().pop();
    s.settle_row("503 with Retry-After", &intents, Final::Succeeded, Learned::Resent, &s.options()).await;
    assert_eq!((s.erp("writes_received"), s.erp("faults_fired")), (2, 2));
}

#[tokio::test]
async fn business_refusal_4xx() {
    let s = setup("faults_refuse").await;
    let intents = s.intents("refused-key", 1).await;
    s.erp.queue_fault(Fault::Refuse("part_discontinued".into()), 1, Matcher::default());
    assert_eq!(s.dispatch().await.count("REJECTED"), 1);
    s.settle_row("business 4xx refusal (422)", &intents, Final::Rejected, Learned::Answer, &s.options()).await;
    let status = s.call("o1", "refused-key-1").await;
    assert_eq!(status["result"]["error"]["text"], "part_discontinued", "{status}");
    // Final: never claimed again.
    s.force_due().await;
    assert_eq!(s.dispatch().await.claimed, 0);
}

#[tokio::test]
async fn async_protocol_ends_rejected() {
    let s = setup("faults_reject_later").await;
    let intents = s.intents("later-key", 2).await;
    s.erp.queue_fault(Fault::RejectLater("no_stock".into()), 2, Matcher::default());
    assert_eq!(s.dispatch().await.count("REJECTED"), 2);
    let polls = s.notes("poll").await;
    assert_eq!(polls.len(), 2, "one note for each run of polls: {polls:?}");
    assert!(polls.iter().all(|p| p["ended"] == "REJECTED" && p["polls"].as_i64() >= Some(1)), "{polls:?}");
    s.settle_row("async protocol ends REJECTED", &intents, Final::Rejected, Learned::Answer, &s.options()).await;
    assert_eq!(s.call("o2", "later-key-2").await["result"]["error"]["text"], "no_stock");
}

#[tokio::test]
async fn async_protocol_pending_past_settle_within() {
    let s = setup("faults_slow_protocol").await;
    s.erp.configure(&json!({"async_delay_ms": 1500})).unwrap();
    let intents = s.intents("slow-key", 1).await;
    let opts = Options { settle_within: Duration::from_millis(300), ..s.options() };
    assert_eq!(s.dispatch_with(&opts).await.count("UNCERTAIN"), 1);
    let polls = s.notes("poll").await;
    assert_eq!((polls.len(), &polls[0]["ended"]), (1, &json!("still_pending")), "{polls:?}");
    // A note needs the intent's claim: none is written for one the caller does not hold (here
    // UNCERTAIN, claimed by nobody).
    let noted: bool = s
        .root
        .query_one(
            "SELECT toolgate.note_outbox('shopping-a', $1, 'slow-key-1', gen_random_uuid(), 'ask', '{}')",
            &[&TOOL],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!noted && s.notes("ask").await.is_empty());
    let status = s.call("o1", "slow-key-1").await;
    assert_eq!((outcome(&status), status["replayed"].as_bool()), (("UNCERTAIN", "-"), Some(true)), "{status}");
    // Once the ERP is done, the next run asks by key and settles it, without sending it again.
    s.erp_reaches("slow-key-1", "DONE").await;
    s.settle_row(
        "async protocol pending past settle_within (1.5 s > 0.3 s)",
        &intents,
        Final::Succeeded,
        Learned::Reconciled,
        &opts,
    )
    .await;
}

#[tokio::test]
async fn rate_limited_429_waited_out() {
    let s = setup("faults_429").await;
    let intents = s.intents("limited-key", 3).await;
    // One request a second at the ERP; the endpoint declares no window, so the dispatcher meets
    // 429s and waits their Retry-After.
    s.erp.configure(&json!({"per_second": 1, "async_delay_ms": 0})).unwrap();
    s.dispatch().await;
    assert!(s.erp("rate_limited") > 0, "{}", s.erp.effects());
    let limited = s.erp("rate_limited");
    // Each 429 waited out and sent again is on record (a 6th in a row would leave it for later).
    let resends = s.notes("resend").await;
    assert!(!resends.is_empty() && resends.len() as i64 <= limited, "{resends:?}");
    assert!(resends.iter().all(|r| r["reason"] == "rate_limited" && r["status"] == 429), "{resends:?}");
    s.settle_row(
        &format!("429 per-second window ({limited} × 429, Retry-After waited)"),
        &intents,
        Final::Succeeded,
        Learned::Answer,
        &s.options(),
    )
    .await;
}

#[tokio::test]
async fn unauthorized_401_refreshed_once() {
    let s = setup("faults_401").await;
    let intents = s.intents("stale-key", 1).await;
    // The access token the dispatcher got is revoked when its write arrives.
    s.erp.queue_fault(Fault::ExpireTokens, 1, Matcher::default());
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 1);
    assert_eq!((s.erp("unauthorized"), s.erp("refreshes")), (1, 2), "the first token, then one refresh");
    let resends = s.notes("resend").await;
    assert_eq!(resends.len(), 1, "{resends:?}");
    assert_eq!((&resends[0]["reason"], &resends[0]["status"]), (&json!("unauthorized"), &json!(401)));
    assert_eq!(resends[0]["attempt"], 1, "{resends:?}");
    assert_eq!(std::fs::read_to_string(&s.token_file).unwrap().trim(), s.erp.refresh_token());
    s.settle_row(
        "401 (access token revoked), refreshed once",
        &intents,
        Final::Succeeded,
        Learned::Answer,
        &s.options(),
    )
    .await;
}

#[tokio::test]
async fn concurrent_401s_in_one_dispatcher_refresh_once() {
    let s = setup("faults_401_concurrent").await;
    let intents = s.intents("stale-many", 8).await;
    // The first refresh answers an access token that is already stale: the four intents in flight
    // all meet a 401 with it, and one refresh serves them all.
    s.erp.queue_fault(Fault::ExpireTokens, 1, Matcher::parse("POST /oauth/token").unwrap());
    let opts = Options { concurrency: 4, ..s.options() };
    let report = s.dispatch_with(&opts).await;
    assert_eq!((report.claimed, report.count("SUCCEEDED")), (8, 8), "{report:?}");
    let effects = s.erp.effects();
    assert_eq!(effects["unauthorized"], 4, "each intent in flight met the stale token: {effects}");
    assert_eq!(effects["refreshes"], 2, "the stale token's refresh and exactly one more: {effects}");
    assert_eq!(effects["refused_refreshes"], 0, "{effects}");
    assert_eq!(std::fs::read_to_string(&s.token_file).unwrap().trim(), s.erp.refresh_token());
    s.settle_row(
        "4 concurrent 401s in one dispatcher, one refresh",
        &intents,
        Final::Succeeded,
        Learned::Answer,
        &opts,
    )
    .await;
}

#[tokio::test]
async fn erp_down_connection_refused() {
    let s = setup("faults_down").await;
    let intents = s.intents("down-key", 2).await;
    // Nothing listens at the endpoint's address.
    let dead = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    s.move_endpoint(&format!("http://{dead}")).await;
    assert_eq!(s.dispatch().await.count("PENDING"), 2);
    // Down for a second attempt too: still PENDING (nothing was sent), not UNCERTAIN.
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    assert_eq!(s.dispatch().await.count("PENDING"), 2);
    for intent in &intents {
        assert_eq!(outcome(&s.call(&intent.order, &intent.key).await), ("PENDING", "-"));
    }
    assert_eq!((s.erp("writes_received"), s.erp("refreshes")), (0, 0), "nothing reached it");
    // Up again: delivered with the same keys.
    s.move_endpoint(&s.erp.base_url()).await;
    s.settle_row(
        "ERP down (connection refused) twice, then up",
        &intents,
        Final::Succeeded,
        Learned::NeverSent,
        &s.options(),
    )
    .await;
    assert_eq!(s.erp("writes_received"), 2);
}

#[tokio::test]
async fn fault_on_the_reconciliation_query() {
    let s = setup("faults_reconcile").await;
    let intents = s.intents("asked-key", 1).await;
    // The write is applied and its answer lost; the state query asked next fails too (503).
    s.erp.queue_fault(Fault::Drop, 1, Matcher::default());
    s.erp.queue_fault(Fault::Unavailable, 1, Matcher::parse("GET /requests").unwrap());
    assert_eq!(s.dispatch().await.count("UNCERTAIN"), 1);
    let status = s.call("o1", "asked-key-1").await;
    assert_eq!(outcome(&status), ("UNCERTAIN", "-"), "{status}");
    assert_eq!(s.erp("faults_fired"), 2);
    s.settle_row(
        "applied and dropped, then 503 on the state query",
        &intents,
        Final::Succeeded,
        Learned::Reconciled,
        &s.options(),
    )
    .await;
    // The 503 answered before the query was handled: one state query answered, the second run's.
    assert_eq!(s.erp("state_queries"), 1);
}

#[tokio::test]
async fn failure_said_in_a_200_body() {
    let s = setup("faults_200_failed").await;
    let intents = s.intents("failed-key", 2).await;
    s.erp.queue_fault(Fault::Failed("card_declined".into()), 2, Matcher::parse("POST /purchases").unwrap());
    assert_eq!(s.dispatch().await.count("REJECTED"), 2);
    s.settle_row(
        "200 {\"status\": \"FAILED\"} (a refusal in the body)",
        &intents,
        Final::Rejected,
        Learned::Answer,
        &s.options(),
    )
    .await;
    assert_eq!(s.call("o1", "failed-key-1").await["result"]["error"]["text"], "card_declined");
}

#[tokio::test]
async fn pending_without_a_protocol_is_asked_by_key() {
    let s = setup("faults_pending_bare").await;
    let intents = s.intents("bare-key", 2).await;
    s.erp.queue_fault(Fault::PendingBare(None), 2, Matcher::parse("POST /purchases").unwrap());
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 2);
    let asked = s.notes("ask").await;
    assert!(asked.len() >= 2 && asked.iter().all(|a| a["status"] == 200), "each state query on record: {asked:?}");
    s.settle_row(
        "200 {\"status\": \"PENDING\"} with no protocol",
        &intents,
        Final::Succeeded,
        Learned::Reconciled,
        &s.options(),
    )
    .await;
}

#[tokio::test]
async fn pending_without_a_protocol_then_refused() {
    let s = setup("faults_pending_bare_refused").await;
    let intents = s.intents("bare-refused", 2).await;
    s.erp.queue_fault(Fault::PendingBare(Some("no_stock".into())), 2, Matcher::parse("POST /purchases").unwrap());
    assert_eq!(s.dispatch().await.count("REJECTED"), 2);
    s.settle_row(
        "200 {\"status\": \"PENDING\"} with no protocol, refused later",
        &intents,
        Final::Rejected,
        Learned::Reconciled,
        &s.options(),
    )
    .await;
    assert_eq!(s.call("o2", "bare-refused-2").await["result"]["error"]["text"], "no_stock");
}

/// An ERP that turns every request away at the door (`fault` on every write) for `max_attempts`
/// attempts: REJECTED with its reason (`error`), not DEAD, and nothing was done there.
async fn refused_at_every_attempt(name: &str, fault: Fault, error: &str, label: &str) {
    let s = setup(name).await;
    let intents = s.intents(name, 2).await;
    s.erp.queue_fault(fault, 1000, Matcher::parse("POST /purchases").unwrap());
    let opts = Options { max_attempts: 2, ..s.options() };
    assert_eq!(s.dispatch_with(&opts).await.count("PENDING"), 2, "the first attempt: tried again later");
    s.force_due().await;
    assert_eq!(s.dispatch_with(&opts).await.count("REJECTED"), 2, "the last attempt: the ERP's refusal");
    for intent in &intents {
        assert_eq!(s.outbox(&intent.key).await, "REJECTED");
        assert_eq!(s.last_error(&intent.key).await.as_deref(), Some(error));
        let status = s.call(&intent.order, &intent.key).await;
        assert_eq!(outcome(&status), ("REJECTED", "erp_rejected"), "{status}");
        assert_eq!(status["result"]["error"]["text"], error, "{status}");
    }
    let effects = s.erp.effects();
    assert_eq!((effects["effects"].as_i64(), effects["writes_received"].as_i64()), (Some(0), Some(0)), "{effects}");
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE state = 'DEAD'").await, 0);
    let runs = s.runs.lock().unwrap().clone();
    row(&format!(
        "| {label} | 2 | 0 (0 writes handled) | 2 REJECTED ({error}) | {}: {} |",
        runs.len(),
        runs.join(" → ")
    ));
}

#[tokio::test]
async fn rate_limited_429_on_every_attempt_is_rejected() {
    refused_at_every_attempt("faults_429_forever", Fault::RateLimited, "rate_limited", "429 on every try, 2 attempts")
        .await;
}

#[tokio::test]
async fn unauthorized_401_on_every_attempt_is_rejected() {
    refused_at_every_attempt("faults_401_forever", Fault::ExpireTokens, "unauthorized", "401 on every try, 2 attempts")
        .await;
}

/// An ERP that answers 409 for a key it is still processing (Stripe's way): not a refusal. The
/// first attempt times out while the ERP takes 1.5 s; the second, sent while it is still at it,
/// meets the 409 and leaves the intent UNCERTAIN; the next asks by key and settles it.
#[tokio::test]
async fn conflict_409_for_a_key_in_flight_is_not_a_refusal() {
    let s = setup("faults_409_in_flight").await;
    let intents = s.intents("inflight-key", 1).await;
    s.erp.queue_fault(Fault::Late(Duration::from_millis(1500)), 1, Matcher::parse("POST /purchases").unwrap());
    let opts = Options { timeout: Duration::from_millis(500), ..s.options() };
    assert_eq!(s.dispatch_with(&opts).await.count("PENDING"), 1, "timed out; the ERP has no such key yet");
    s.force_due().await;
    assert_eq!(s.dispatch_with(&opts).await.count("UNCERTAIN"), 1, "409 request_in_progress: not final");
    assert_eq!(s.last_error("inflight-key-1").await.as_deref(), Some("in_progress"));
    assert!(s.erp("in_progress_refused") >= 1, "{}", s.erp.effects());
    s.erp_reaches("inflight-key-1", "DONE").await;
    s.settle_row("409 for a key still in flight", &intents, Final::Succeeded, Learned::Reconciled, &opts).await;
}

#[tokio::test]
async fn a_status_word_the_contract_does_not_know_is_not_success() {
    let s = setup("faults_unknown_status").await;
    let intents = s.intents("worded-key", 2).await;
    s.erp.queue_fault(Fault::Worded("ON_HOLD".into()), 2, Matcher::parse("POST /purchases").unwrap());
    assert_eq!(s.dispatch().await.count("UNCERTAIN"), 2);
    assert_eq!(s.last_error("worded-key-1").await.as_deref(), Some("unknown_status"));
    s.settle_row(
        "200 {\"status\": \"ON_HOLD\"} (a word of its own)",
        &intents,
        Final::Succeeded,
        Learned::Reconciled,
        &s.options(),
    )
    .await;
}

#[tokio::test]
async fn an_erp_without_the_async_protocol() {
    let s = setup("faults_synchronous").await;
    let intents = s.intents("sync-key", 2).await;
    s.erp.configure(&json!({"synchronous": true})).unwrap();
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 2);
    s.settle_row("no async protocol: 200 DONE at once", &intents, Final::Succeeded, Learned::Answer, &s.options())
        .await;
}

/// An answer larger than the dispatcher reads (`--max-answer-bytes`), on the write and on the
/// state query alike: never kept, the intent left UNCERTAIN and asked again; once the ERP answers
/// in a sane size, SUCCEEDED, applied once (security review 3's T4 has the single-step version).
#[tokio::test]
async fn oversized_answer() {
    let s = setup("faults_huge").await;
    let intents = s.intents("huge-key", 2).await;
    let opts = Options { max_answer_bytes: 64 * 1024, ..s.options() };
    s.erp.queue_fault(Fault::Huge(1024 * 1024), 2, Matcher::parse("POST /purchases").unwrap());
    s.erp.queue_fault(Fault::Huge(1024 * 1024), 2, Matcher::parse("GET /requests").unwrap());
    assert_eq!(s.dispatch_with(&opts).await.count("UNCERTAIN"), 2);
    s.settle_row("an answer of 1 MiB, over --max-answer-bytes", &intents, Final::Succeeded, Learned::Reconciled, &opts)
        .await;
    let largest = count(&s.root, "SELECT max(pg_column_size(reply))::bigint FROM toolgate.ledger").await;
    assert!(largest < 64 * 1024, "a ledger reply of {largest} bytes");
}

/// A multi-line order the ERP did but for one line, which it refused (its answer names the line):
/// not SUCCEEDED, not sent again. The intent is done; the agent is told PARTIAL, the refused line
/// named (as untrusted text, with the ERP's reason); applied once.
#[tokio::test]
async fn an_order_line_refused_is_partial_naming_it() {
    let s = setup("faults_lines_refused").await;
    let intents = s.intents("lines-key", 2).await;
    let answer = json!({"status": "DONE", "lines": [
        {"id": "L1", "status": "DONE"}, {"id": "L2", "status": "REJECTED", "error": "out_of_stock"}]});
    s.erp.queue_fault(Fault::Answer(answer.to_string()), 2, Matcher::parse("POST /purchases").unwrap());
    assert_eq!(s.dispatch().await.count("PARTIAL"), 2);
    s.force_due().await;
    assert_eq!(s.dispatch().await.claimed, 0, "done: never claimed again");
    for intent in &intents {
        assert_eq!(s.outbox(&intent.key).await, "SUCCEEDED", "the delivery is over");
        assert_eq!(s.last_error(&intent.key).await.as_deref(), Some("lines_refused"));
        assert_eq!(s.erp_key(&intent.key), ("DONE".to_string(), 1), "{}", s.erp.effects());
        let status = s.call(&intent.order, &intent.key).await;
        assert_eq!((outcome(&status), &status["replayed"]), (("PARTIAL", "-"), &json!(true)), "{status}");
        let lines = status["result"]["refused_lines"].as_array().expect("the refused lines");
        assert_eq!(lines.len(), 1, "{status}");
        assert_eq!(marked_field(&lines[0], "line"), Some("L2"), "{status}");
        assert_eq!(marked_field(&lines[0], "error"), Some("out_of_stock"), "{status}");
        let text = status["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("but for 1 of its lines") && !text.contains("out_of_stock"), "{text}");
    }
    let effects = s.erp.effects();
    assert_eq!((effects["effects"].as_i64(), effects["writes_received"].as_i64()), (Some(2), Some(2)), "{effects}");
    let audited = count(
        &s.root,
        "SELECT count(*) FROM toolgate.audit WHERE kind = 'dispatch' AND outcome = 'PARTIAL' \
         AND effects = 1 AND (detail->>'refused_lines')::int = 1",
    )
    .await;
    assert_eq!(audited, 2);
    let runs = s.runs.lock().unwrap().clone();
    row(&format!(
        "| a 2-line order, line L2 refused (`answer:` with `lines`) | 2 | 2 (2 writes handled) | 2 PARTIAL, L2 named | {}: {} |",
        runs.len(),
        runs.join(" → ")
    ));
}

/// An ERP whose words are its own (`POSTED`): not taken for success until the endpoint says how
/// its ERP answers (`toolgate.set_erp_answers`); then the intents left UNCERTAIN are settled by
/// asking the ERP, and the next one is read from its answer at once.
#[tokio::test]
async fn an_endpoint_says_how_its_erp_answers() {
    let s = setup("faults_erp_words").await;
    let intents = s.intents("words-key", 2).await;
    s.erp.queue_fault(Fault::Worded("POSTED".into()), 2, Matcher::parse("POST /purchases").unwrap());
    assert_eq!(s.dispatch().await.count("UNCERTAIN"), 2, "a word the contract does not know");
    let reading: serde_json::Value = s
        .root
        .query_one("SELECT toolgate.set_erp_answers('fake_erp', '{\"done\": [\"posted\", \"DONE\"]}')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(reading["done"], json!(["DONE", "POSTED"]), "{reading}");
    // FAILED stays a refusal until the endpoint's own refusals are given too.
    let twice = s.root.query_one("SELECT toolgate.set_erp_answers('fake_erp', '{\"done\": [\"FAILED\"]}')", &[]).await;
    let refused = twice.expect_err("a word in two lists").as_db_error().unwrap().message().to_string();
    assert!(refused.contains("FAILED is in two lists"), "{refused}");
    assert_eq!(reading["refused"][0], "REJECTED", "the rest is the contract's: {reading}");
    s.settle_row(
        "200 {\"status\": \"POSTED\"}, then the endpoint's words said (`set_erp_answers`)",
        &intents,
        Final::Succeeded,
        Learned::Reconciled,
        &s.options(),
    )
    .await;
    let asked = s.erp("state_queries");
    assert_eq!(outcome(&s.call("o3", "words-key-3").await), ("PENDING", "-"));
    s.erp.queue_fault(Fault::Worded("Posted".into()), 1, Matcher::parse("POST /purchases").unwrap());
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 1);
    assert_eq!(s.erp("state_queries"), asked, "read from its answer: {}", s.erp.effects());
    let said = "SELECT count(*) FROM toolgate.erp_endpoint_history WHERE new->'answers' <> 'null'::jsonb";
    assert_eq!(count(&s.root, said).await, 1);
}
