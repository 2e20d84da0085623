//! The dispatcher (issue 24, second slice) against the fake ERP, in process on 127.0.0.1: an
//! outbox tool's call answers PENDING; `toolgate dispatch --once` (dispatch::run) sends the intent
//! with its idempotency key and settles what the ERP answered in the ledger (the status query
//! replays it), the outbox and the audit (kind `dispatch`). Each test compares what the ERP did
//! (its own count, by key) with what the gate reports.

mod common;

use common::outbox::*;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;
use toolgate_cli::dispatch;
use toolgate_cli::fixture::APP;
use toolgate_fake_erp::{Fault, Matcher};

#[tokio::test]
async fn an_intent_is_delivered_once_and_the_retry_answers_succeeded() {
    let s = setup("dispatch_happy").await;
    let first = s.call("o1", "happy-key-1").await;
    let detail: Value =
        s.root.query_one("SELECT detail FROM toolgate.audit ORDER BY audit_id DESC LIMIT 1", &[]).await.unwrap().get(0);
    assert_eq!(outcome(&first), ("PENDING", "-"), "{first} {detail}");
    assert_eq!(s.erp("writes_received"), 0, "nothing is sent by the call");

    let report = s.dispatch().await;
    assert_eq!((report.claimed, report.count("SUCCEEDED")), (1, 1), "{report:?}");
    assert_eq!(s.erp_key("happy-key-1"), ("DONE".to_string(), 1));
    assert_eq!((s.erp("effects"), s.erp("writes_received")), (1, 1));
    // The refresh token rotated, and the file holds the one that works now.
    assert_eq!(std::fs::read_to_string(&s.token_file).unwrap().trim(), s.erp.refresh_token());

    let status = s.call("o1", "happy-key-1").await;
    assert_eq!(outcome(&status), ("SUCCEEDED", "-"), "{status}");
    assert_eq!((status["replayed"].as_bool(), status["isError"].as_bool()), (Some(true), Some(false)));
    // The ERP's words come back marked as untrusted third-party text, as a read tool's do.
    assert_eq!(marked_field(&status["result"]["erp"], "status"), Some("DONE"), "{status}");
    assert_eq!(s.outbox("happy-key-1").await, ("SUCCEEDED".to_string(), 1));
    assert_eq!(s.dispatch_audit("SUCCEEDED").await, 1);
    // The dispatch audit row keeps no argument and no secret.
    let detail: Value = s
        .root
        .query_one("SELECT to_jsonb(a) FROM toolgate.audit a WHERE kind = 'dispatch' AND detail->>'phase' IS NULL", &[])
        .await
        .unwrap()
        .get(0);
    let text = detail.to_string();
    assert!(!text.contains("filter") && !text.contains("rt-") && !text.contains("at-"), "{text}");
    assert_eq!(detail["actor"], DISPATCHER);

    // Nothing is due any more: a second run sends nothing.
    assert_eq!(s.dispatch().await.claimed, 0);
    assert_eq!(s.erp("writes_received"), 1);
}

#[tokio::test]
async fn a_business_refusal_is_rejected_erp_rejected_and_never_retried() {
    let s = setup("dispatch_refused").await;
    s.erp.queue_fault(Fault::Refuse("part_discontinued".into()), 1, Matcher::default());
    assert_eq!(outcome(&s.call("o2", "refused-key-1").await), ("PENDING", "-"));
    let report = s.dispatch().await;
    assert_eq!(report.count("REJECTED"), 1, "{report:?}");
    let status = s.call("o2", "refused-key-1").await;
    assert_eq!(outcome(&status), ("REJECTED", "erp_rejected"), "{status}");
    assert_eq!((status["replayed"].as_bool(), status["isError"].as_bool()), (Some(true), Some(true)));
    assert_eq!(status["result"]["error"]["text"], "part_discontinued", "marked untrusted: {status}");
    assert_eq!(s.erp("effects"), 0);
    assert_eq!(s.outbox("refused-key-1").await, ("REJECTED".to_string(), 1));
    // Final: a later run claims nothing and sends nothing.
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now() - interval '1 hour'").await.unwrap();
    assert_eq!(s.dispatch().await.claimed, 0);
    assert_eq!(s.erp("writes_received"), 1);
    assert_eq!(s.dispatch_audit("REJECTED").await, 1);
}

#[tokio::test]
async fn a_dropped_connection_is_reconciled_by_key_not_resent() {
    let s = setup("dispatch_drop").await;
    // Applied, then the connection closed without a byte of the answer.
    s.erp.queue_fault(Fault::Drop, 1, Matcher::default());
    assert_eq!(outcome(&s.call("o3", "dropped-key-1").await), ("PENDING", "-"));
    let report = s.dispatch().await;
    assert_eq!(report.count("SUCCEEDED"), 1, "{report:?}");
    assert_eq!(s.erp("faults_fired"), 1, "the fault fired");
    assert_eq!(s.erp_key("dropped-key-1"), ("DONE".to_string(), 1));
    assert_eq!((s.erp("effects"), s.erp("writes_received")), (1, 1), "asked, never sent again");
    let status = s.call("o3", "dropped-key-1").await;
    assert_eq!(outcome(&status), ("SUCCEEDED", "-"), "{status}");
    assert_eq!(status["replayed"], true);
}

#[tokio::test]
async fn a_500_leaves_it_pending_and_the_next_run_sends_it_with_the_same_key() {
    let s = setup("dispatch_500").await;
    s.erp.queue_fault(Fault::InternalError, 1, Matcher::default());
    assert_eq!(outcome(&s.call("o4", "fivehundred-1").await), ("PENDING", "-"));
    let report = s.dispatch().await;
    assert_eq!(report.count("PENDING"), 1, "{report:?}");
    assert_eq!(s.erp("effects"), 0);
    assert_eq!(s.outbox("fivehundred-1").await, ("PENDING".to_string(), 1));
    assert_eq!(outcome(&s.call("o4", "fivehundred-1").await), ("PENDING", "-"));
    // Not due before its retry delay.
    assert_eq!(s.dispatch().await.claimed, 0);
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    let report = s.dispatch().await;
    assert_eq!(report.count("SUCCEEDED"), 1, "{report:?}");
    assert_eq!(s.erp_key("fivehundred-1"), ("DONE".to_string(), 1));
    assert_eq!(s.erp("effects"), 1);
    assert_eq!(s.outbox("fivehundred-1").await, ("SUCCEEDED".to_string(), 2));
    let status = s.call("o4", "fivehundred-1").await;
    assert_eq!((outcome(&status), status["replayed"].as_bool()), (("SUCCEEDED", "-"), Some(true)));
}

#[tokio::test]
async fn writes_turned_off_hold_the_queue() {
    let s = setup("dispatch_switch").await;
    assert_eq!(outcome(&s.call("o5", "switch-key-1").await), ("PENDING", "-"));
    s.root.batch_execute(&format!("SELECT toolgate.set_writes_enabled(false, '{TOOL}')")).await.unwrap();
    assert_eq!(s.dispatch().await.claimed, 0);
    s.root.batch_execute(&format!("SELECT toolgate.set_writes_enabled(true, '{TOOL}')")).await.unwrap();
    s.root.batch_execute("SELECT toolgate.set_writes_enabled(false, NULL)").await.unwrap();
    assert_eq!(s.dispatch().await.claimed, 0);
    assert_eq!((s.erp("writes_received"), s.erp("unauthorized")), (0, 0), "nothing sent");
    assert_eq!(s.outbox("switch-key-1").await, ("PENDING".to_string(), 0));
    s.root.batch_execute("SELECT toolgate.set_writes_enabled(true, NULL)").await.unwrap();
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 1);
    assert_eq!(s.erp_key("switch-key-1"), ("DONE".to_string(), 1));
}

#[tokio::test]
async fn two_dispatchers_send_each_of_twenty_intents_once() {
    let s = setup("dispatch_two").await;
    for i in 1..=20 {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("twenty-key-{i}")).await), ("PENDING", "-"));
    }
    // Two dispatchers, each its own connections and token state, started together: one refresh
    // serves both (the fake's refresh token rotates on every use, so a second would be refused).
    s.erp.queue_fault(Fault::Late(Duration::from_millis(20)), 20, Matcher::default());
    let mut one = s.options();
    one.batch = 3;
    one.concurrency = 2;
    let two = one.clone();
    let (r1, r2) = tokio::join!(dispatch::run(&one), dispatch::run(&two));
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    assert_eq!(r1.claimed + r2.claimed, 20, "{r1:?} {r2:?}");
    assert_eq!(r1.count("SUCCEEDED") + r2.count("SUCCEEDED"), 20, "{r1:?} {r2:?}");
    let effects = s.erp.effects();
    let by_key = effects["by_key"].as_object().unwrap();
    assert_eq!(by_key.len(), 20);
    for (key, state) in by_key {
        assert_eq!(state["effects"], 1, "{key}: {state}");
    }
    assert_eq!((s.erp("effects"), s.erp("writes_received")), (20, 20));
    assert_eq!(
        count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE state = 'SUCCEEDED' AND attempts = 1").await,
        20
    );
    assert_eq!(s.dispatch_audit("SUCCEEDED").await, 20);
    assert_eq!((s.erp("refreshes"), s.erp("refused_refreshes")), (1, 0), "one refresh for both dispatchers");

    // Every access token expires at the ERP: the 401s both dispatchers meet make one refresh.
    for i in 21..=30 {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("twenty-key-{i}")).await), ("PENDING", "-"));
    }
    toolgate_erp_client::call(s.erp.addr(), "POST", "/_fake/expire-tokens", &[], None, Duration::from_secs(2))
        .await
        .unwrap();
    let (r1, r2) = tokio::join!(dispatch::run(&one), dispatch::run(&two));
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    assert_eq!(r1.count("SUCCEEDED") + r2.count("SUCCEEDED"), 10, "{r1:?} {r2:?}");
    assert_eq!((s.erp("refreshes"), s.erp("refused_refreshes")), (2, 0), "one more refresh, for both");
    assert_eq!(std::fs::read_to_string(&s.token_file).unwrap().trim(), s.erp.refresh_token());
}

#[tokio::test]
async fn connections_to_the_erp_are_kept_open_between_exchanges() {
    let s = setup("dispatch_keep_alive").await;
    let calls = |from: usize, to: usize| {
        let s = &s;
        async move {
            for i in from..=to {
                let key = format!("kept-key-{i}");
                assert_eq!(outcome(&s.call(&format!("o{i}"), &key).await), ("PENDING", "-"));
            }
        }
    };
    let mut one = s.options();
    one.concurrency = 1;
    // The refresh and four writes on one connection.
    calls(1, 4).await;
    assert_eq!(dispatch::run(&one).await.unwrap().count("SUCCEEDED"), 4);
    assert_eq!((s.erp("connections"), s.erp("refreshes")), (1, 1), "{}", s.erp.effects());

    // The second write, on the first one's connection, is applied and the connection closed
    // without an answer: the state query that asks for the lost answer, and the writes after it,
    // on a second connection; the request that may have been written is never written again.
    calls(5, 10).await;
    s.erp.queue_fault(Fault::Late(Duration::ZERO), 1, Matcher::default());
    s.erp.queue_fault(Fault::Drop, 1, Matcher::default());
    let report = dispatch::run(&one).await.unwrap();
    assert_eq!(report.count("SUCCEEDED"), 6, "{report:?}");
    assert_eq!((s.erp("connections"), s.erp("faults_fired")), (3, 2), "{}", s.erp.effects());
    assert_eq!((s.erp("effects"), s.erp("writes_received")), (10, 10), "asked, never sent again");
    assert_eq!(s.erp("state_queries"), 1);

    // Keep-alive off: a connection per exchange.
    calls(11, 15).await;
    one.keep_alive = Duration::ZERO;
    assert_eq!(dispatch::run(&one).await.unwrap().count("SUCCEEDED"), 5);
    // A write and its protocol's polls each on a connection of its own.
    assert!(s.erp("connections") >= 3 + 5, "{}", s.erp.effects());
    assert_eq!(s.erp("writes_received"), 15);
}

/// `setup`, with `erp_order` redefined with a finish function: once the ERP has done its part it
/// marks the order `purchased` in this database, under row-level security on
/// `toolgate.current_tenant()` (so it finds the order only in the context of the call that made
/// the intent), and raises while `remote.finish_broken` says so.
async fn finish_setup(name: &str) -> Setup {
    let s = setup(name).await;
    s.root
        .batch_execute(&format!(
            "SET ROLE it_remote_owner;
             ALTER TABLE remote.orders ADD COLUMN purchased integer NOT NULL DEFAULT 0,
                                       ADD COLUMN erp_protocol text;
             CREATE TABLE remote.finish_broken (broken boolean NOT NULL);
             INSERT INTO remote.finish_broken VALUES (false);
             RESET ROLE;
             GRANT USAGE ON SCHEMA toolgate TO it_remote_owner;
             GRANT EXECUTE ON FUNCTION toolgate.current_tenant() TO it_remote_owner;
             ALTER TABLE remote.orders ENABLE ROW LEVEL SECURITY;
             ALTER TABLE remote.orders FORCE ROW LEVEL SECURITY;
             CREATE POLICY tenant ON remote.orders USING (tenant_id = toolgate.current_tenant());
             SET ROLE it_remote_owner;
             CREATE FUNCTION remote.finish(ctx jsonb, args jsonb) RETURNS jsonb
             LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, remote, pg_temp AS $f$
             DECLARE done jsonb;
             BEGIN
                 IF (SELECT broken FROM remote.finish_broken) THEN
                     RAISE EXCEPTION 'the work order cannot be updated now' USING ERRCODE = 'lock_not_available';
                 END IF;
                 UPDATE remote.orders o SET purchased = o.purchased + 1, erp_protocol = ctx->'erp'->>'protocol'
                  WHERE o.id = ctx->'target'->>'id'
                 RETURNING jsonb_build_object('order_id', o.id, 'purchased', o.purchased) INTO done;
                 RETURN done;
             END
             $f$;
             REVOKE EXECUTE ON FUNCTION remote.finish(jsonb, jsonb) FROM PUBLIC;
             RESET ROLE;
             SET client_min_messages = warning;
             SELECT toolgate.define_outbox_tool(t.tool, t.description, s.schema, false,
                        'remote.target(jsonb, jsonb)', 'remote.request(jsonb, jsonb)', 'fake_erp',
                        finish => 'remote.finish(jsonb, jsonb)')
               FROM toolgate.tools t JOIN toolgate.tool_schemas s ON s.tool = t.tool
              WHERE t.tool = '{TOOL}' ORDER BY s.version DESC LIMIT 1;"
        ))
        .await
        .unwrap();
    s
}

impl Setup {
    /// The order's (purchased, ERP protocol) as its owner sees it (row-level security aside).
    async fn order(&self, id: &str) -> (i32, Option<String>) {
        let row = self
            .root
            .query_one(
                "SELECT purchased, erp_protocol FROM remote.orders WHERE tenant_id = 'shopping-a' AND id = $1",
                &[&id],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    }
}

#[tokio::test]
async fn finish_applies_the_follow_up_in_the_context_of_the_call() {
    let s = finish_setup("dispatch_finish").await;
    let first = s.call("o6", "finish-key-1").await;
    assert_eq!(outcome(&first), ("PENDING", "-"), "{first} {}", last_reason(&s.root).await);
    assert_eq!(s.order("o6").await, (0, None), "nothing before the ERP did its part");
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 1);
    let (purchased, protocol) = s.order("o6").await;
    assert_eq!(purchased, 1, "finish found the order under the call's tenant");
    assert!(protocol.is_some_and(|p| !p.is_empty()), "finish saw what the ERP answered");
    let status = s.call("o6", "finish-key-1").await;
    assert_eq!((outcome(&status), status["replayed"].as_bool()), (("SUCCEEDED", "-"), Some(true)), "{status}");
    assert_eq!(status["result"]["finish"], json!({"order_id": "o6", "purchased": 1}), "{status}");
    // One effect, listed under the actor who asked for it, not the dispatcher.
    let rows =
        s.root.query("SELECT actor FROM toolgate.effects WHERE tool = $1 AND target = 'o6'", &[&TOOL]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_ne!(rows[0].get::<_, String>(0), DISPATCHER);
}

#[tokio::test]
async fn a_failed_finish_is_partial_and_a_later_run_finishes_without_resending() {
    let s = finish_setup("dispatch_partial").await;
    s.root.batch_execute("UPDATE remote.finish_broken SET broken = true").await.unwrap();
    assert_eq!(outcome(&s.call("o7", "partial-key-1").await), ("PENDING", "-"));
    let report = s.dispatch().await;
    assert_eq!(report.count("PARTIAL"), 1, "the ERP did it, the finish did not: {report:?}");
    assert_eq!(s.erp_key("partial-key-1"), ("DONE".to_string(), 1));
    assert_eq!(s.order("o7").await.0, 0, "nothing of the failed finish stays");

    // The status query: PARTIAL, not an error, with what was done and what is left.
    let status = s.call("o7", "partial-key-1").await;
    assert_eq!(outcome(&status), ("PARTIAL", "-"), "{status}");
    assert_eq!((status["isError"].as_bool(), status["replayed"].as_bool()), (Some(false), Some(true)));
    // The ERP's words come back marked as untrusted third-party text, as a read tool's do.
    assert_eq!(marked_field(&status["result"]["erp"], "status"), Some("DONE"), "{status}");
    assert_eq!(status["result"]["pending"], "finish", "{status}");
    assert_eq!(status["result"]["error"]["sqlstate"], "55P03", "{status}");
    assert_eq!(s.outbox("partial-key-1").await, ("PARTIAL".to_string(), 1));
    assert_eq!(count(&s.root, "SELECT partial_results FROM toolgate.panel WHERE tenant_id = 'shopping-a'").await, 1);
    assert_eq!(s.dispatch_audit("PARTIAL").await, 1);
    let alert: (String, Option<String>) = {
        let row = s.root.query_one("SELECT state, last_error FROM toolgate.alert_outbox", &[]).await.unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(alert, ("PARTIAL".to_string(), Some("finish_failed".to_string())), "an operator sees it");
    // The ERP did it once: toolgate.effects lists it once already.
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.effects WHERE target = 'o7'").await, 1);

    // Still broken: tried again after the delay, still PARTIAL, nothing sent to the ERP.
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    assert_eq!(s.dispatch().await.count("PARTIAL"), 1);
    assert_eq!(s.outbox("partial-key-1").await, ("PARTIAL".to_string(), 2));
    // Mended: the next run finishes it, and only it.
    s.root.batch_execute("UPDATE remote.finish_broken SET broken = false").await.unwrap();
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 1);
    assert_eq!(s.outbox("partial-key-1").await, ("SUCCEEDED".to_string(), 3));
    assert_eq!(s.order("o7").await.0, 1, "finished once");
    assert_eq!((s.erp("effects"), s.erp("writes_received")), (1, 1), "the ERP was asked once");
    let status = s.call("o7", "partial-key-1").await;
    assert_eq!(outcome(&status), ("SUCCEEDED", "-"), "{status}");
    assert_eq!(status["result"]["finish"]["purchased"], 1, "{status}");
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.effects WHERE target = 'o7'").await, 1);
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.alert_outbox").await, 0);
    // Final: nothing is claimed again.
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    assert_eq!(s.dispatch().await.claimed, 0);
}

#[tokio::test]
async fn a_dispatcher_killed_mid_send_loses_nothing_and_duplicates_nothing() {
    let s = setup("dispatch_killed").await;
    const N: usize = 24;
    for i in 1..=N {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("killed-key-{i}")).await), ("PENDING", "-"));
    }
    // Every write is applied 400 ms after it arrives, whether or not anyone still waits for it.
    s.erp.queue_fault(Fault::Late(Duration::from_millis(400)), N as u32, Matcher::parse("POST /purchases").unwrap());
    let o = s.options();
    let child = s.spawn_dispatcher(&["--retry-delay", "0.5"]);
    // Killed while requests are in flight: some applied with nobody to hear the answer.
    for _ in 0..200 {
        if s.erp("writes_received") >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    drop(child); // SIGKILL
    let sent_before = s.erp("writes_received");
    assert!((1..N as i64).contains(&sent_before), "killed mid-run: {sent_before} of {N} sent");

    // Another dispatcher takes over once the dead one's leases end; what may have been sent is
    // asked for by key first.
    let mut takeover = o.clone();
    takeover.retry_delay = Duration::from_millis(200);
    let mut final_states = 0;
    for _ in 0..60 {
        dispatch::run(&takeover).await.expect("the dispatcher runs");
        final_states =
            count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE state IN ('SUCCEEDED', 'REJECTED', 'DEAD')")
                .await;
        if final_states == N as i64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(final_states, N as i64, "0 lost intents");
    let effects = s.erp.effects();
    for (key, state) in effects["by_key"].as_object().unwrap() {
        assert_eq!(state["effects"], 1, "0 duplicates: {key}: {state}");
    }
    assert_eq!(effects["effects"], N, "{effects}");
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE state = 'SUCCEEDED'").await, N as i64);
    assert_eq!(s.dispatch_audit("SUCCEEDED").await, N as i64, "each intent settled SUCCEEDED once");
    // The attempts the kill cut short were audited when they started.
    let started = count(&s.root, "SELECT count(*) FROM toolgate.audit WHERE detail->>'phase' = 'start'").await;
    let ended =
        count(&s.root, "SELECT count(*) FROM toolgate.audit WHERE kind = 'dispatch' AND detail->>'phase' IS NULL")
            .await;
    assert!(started > ended, "{started} attempts started, {ended} ended: the killed ones are audited too");
    for i in 1..=N {
        let status = s.call(&format!("o{i}"), &format!("killed-key-{i}")).await;
        assert_eq!((outcome(&status), status["replayed"].as_bool()), (("SUCCEEDED", "-"), Some(true)), "{status}");
    }
}

/// The load invariants, for the outbox: 32 client connections call the outbox tool (a quarter of
/// the calls retry a key already used: the status query) while two dispatchers poll side by side
/// and the ERP drops, delays and fails some requests; then, with every intent final, each key
/// was enqueued once, settled once, done once by the ERP, and the ledger, the outbox, the audit
/// and the ERP's own count agree. OUTBOX_LOAD_CALLS sets the calls (default 640; the docs' long
/// run: 20000).
#[tokio::test]
async fn two_dispatchers_and_32_clients_settle_each_intent_exactly_once() {
    let s = setup("dispatch_load").await;
    let calls: usize = std::env::var("OUTBOX_LOAD_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(640);
    const CLIENTS: usize = 32;
    let post = || Matcher::parse("POST /purchases").unwrap();
    s.erp.queue_fault(Fault::Drop, 12, post());
    s.erp.queue_fault(Fault::InternalError, 12, post());
    s.erp.queue_fault(Fault::Late(Duration::from_millis(2500)), 6, post());
    let mut o = s.options();
    (o.once, o.poll, o.retry_delay, o.lease, o.batch) =
        (false, Duration::from_millis(100), Duration::from_millis(300), Duration::from_secs(10), 16);
    // The faults come in a row: the ERP's circuit may open, for a second at a time here.
    o.breaker_cooldown = Duration::from_secs(1);
    let dispatchers = [tokio::spawn(dispatch::run_owned(o.clone())), tokio::spawn(dispatch::run_owned(o.clone()))];

    let started = std::time::Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let app = s.lab.connect(APP).await.unwrap();
        let who = s.lab.supervisor_a();
        let per_client = calls / CLIENTS + usize::from(c < calls % CLIENTS);
        clients.spawn(async move {
            let mut seen = Vec::new();
            for i in 0..per_client {
                // Every fourth call retries one of this client's keys (same arguments).
                let n = if i % 4 == 3 && !seen.is_empty() { seen[i % seen.len()] } else { i };
                let key = format!("load-{c}-{n}");
                let args = json!({"order_id": format!("o{}", 1 + (c + n) % 40), "part": "filter", "quantity": 1,
                                  "idempotency_key": key});
                let reply = toolgate_cli::db::json(
                    &app,
                    "SELECT toolgate.call($1, $2, $3, $4)",
                    &[&who, &format!("conv-load-{c}"), &TOOL, &args],
                )
                .await
                .unwrap();
                let verdict = reply["outcome"].as_str().unwrap_or_default().to_string();
                assert!(["PENDING", "SUCCEEDED", "UNCERTAIN"].contains(&verdict.as_str()), "{reply}");
                assert_eq!(reply["replayed"] == true, n != i, "only a key used before replays: {reply}");
                if n == i {
                    seen.push(i);
                }
            }
            seen.len()
        });
    }
    let mut keys = 0;
    while let Some(done) = clients.join_next().await {
        keys += done.unwrap();
    }
    let called = started.elapsed();
    // Everything final: the dispatchers go on until then (bounded).
    let open = wait_final(&s.root, 600).await;
    for d in dispatchers {
        d.abort();
    }
    let keys = keys as i64;
    let effects = s.erp.effects();
    println!(
        "outbox load: {calls} calls over {CLIENTS} connections in {:.1} s, {keys} keys; ERP: {} writes received, \
         {} effects, {} faults fired",
        called.as_secs_f64(),
        effects["writes_received"],
        effects["effects"],
        effects["faults_fired"]
    );
    assert_eq!(open, 0, "every intent final");
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.outbox").await, keys, "each key enqueued once");
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE state = 'SUCCEEDED'").await, keys);
    assert_eq!(effects["effects"], keys, "the ERP did each once: {effects}");
    for (key, state) in effects["by_key"].as_object().unwrap() {
        assert_eq!(state["effects"], 1, "0 duplicates: {key}: {state}");
    }
    assert_eq!(s.dispatch_audit("SUCCEEDED").await, keys, "each intent settled SUCCEEDED once");
    assert_eq!(
        count(
            &s.root,
            "SELECT count(*) FROM toolgate.ledger WHERE tool = 'erp_order' AND reply->>'outcome' = 'SUCCEEDED'"
        )
        .await,
        keys,
        "the status query answers SUCCEEDED for every key"
    );
    assert_eq!(
        count(&s.root, "SELECT count(*) FROM toolgate.audit WHERE kind = 'call' AND tool = 'erp_order'").await,
        calls as i64,
        "one audit row a call"
    );
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.effects WHERE tool = 'erp_order'").await, keys);
}

#[tokio::test]
async fn an_https_endpoint_is_reached_over_tls_only_with_a_trusted_certificate() {
    use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio_rustls::rustls::ServerConfig;

    let s = setup("dispatch_tls").await;
    // A TLS front for the fake ERP on 127.0.0.1, its certificate signed by nobody the dispatcher
    // knows unless told (--ca-file).
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let ca_file = s.lab.keys_dir.join("erp-ca.pem");
    std::fs::write(&ca_file, cert.cert.pem()).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
    let config = ServerConfig::builder_with_provider(std::sync::Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = listener.local_addr().unwrap();
    let backend = s.erp.addr();
    let handshakes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = handshakes.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let mut plain = tokio::net::TcpStream::connect(backend).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    s.move_endpoint(&format!("https://{front}/")).await;
    assert_eq!(outcome(&s.call("o1", "tls-key-1").await), ("PENDING", "-"));

    // Not trusted: the handshake fails, nothing is sent (not even the refresh token).
    let report = s.dispatch().await;
    assert_eq!(report.count("PENDING"), 1, "{report:?}");
    assert_eq!((s.erp("writes_received"), s.erp("refreshes")), (0, 0));
    assert_eq!(handshakes.load(std::sync::atomic::Ordering::SeqCst), 0);

    // Trusted: delivered over TLS, the same key.
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    let mut trusted = s.options();
    trusted.ca_file = Some(ca_file);
    let report = dispatch::run(&trusted).await.unwrap();
    assert_eq!(report.count("SUCCEEDED"), 1, "{report:?}");
    assert_eq!(s.erp_key("tls-key-1"), ("DONE".to_string(), 1));
    // The refresh, the write and its protocol's polls over one TLS connection (keep-alive).
    assert_eq!(handshakes.load(std::sync::atomic::Ordering::SeqCst), 1, "{}", s.erp.effects());
    let status = s.call("o1", "tls-key-1").await;
    assert_eq!((outcome(&status), status["replayed"].as_bool()), (("SUCCEEDED", "-"), Some(true)), "{status}");
}

#[tokio::test]
async fn an_intent_still_unknown_after_its_attempts_is_dead_lettered_for_a_person() {
    let s = setup("dispatch_dead").await;
    // Every write answered 500, every state query 503: the ERP never says.
    s.erp.queue_fault(Fault::InternalError, 10, Matcher::parse("POST /purchases").unwrap());
    s.erp.queue_fault(Fault::Unavailable, 10, Matcher::parse("GET /requests").unwrap());
    assert_eq!(outcome(&s.call("o9", "dead-key-1").await), ("PENDING", "-"));
    let mut o = s.options();
    (o.max_attempts, o.retry_delay) = (3, Duration::ZERO);
    let mut settled = Vec::new();
    for _ in 0..3 {
        let report = dispatch::run(&o).await.unwrap();
        settled.extend(report.settled.keys().cloned());
    }
    assert_eq!(settled.last().map(String::as_str), Some("DEAD"), "{settled:?}");
    assert_eq!(s.outbox("dead-key-1").await, ("DEAD".to_string(), 3));
    // The ledger answers UNCERTAIN (nobody knows), not an error; the panel and the alert show it.
    let status = s.call("o9", "dead-key-1").await;
    assert_eq!((outcome(&status), status["isError"].as_bool()), (("UNCERTAIN", "-"), Some(false)), "{status}");
    assert_eq!(count(&s.root, "SELECT dead_letters FROM toolgate.panel WHERE tenant_id = 'shopping-a'").await, 1);
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.alert_outbox WHERE state = 'DEAD'").await, 1);
    // Final for the dispatcher: never claimed again.
    s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
    assert_eq!(dispatch::run(&o).await.unwrap().claimed, 0);
    assert_eq!(s.erp("effects"), 0);
}

/// `n` dispatchers polling side by side, `o` each, until every intent is final (bounded); the
/// ERP's effects then.
async fn dispatchers_until_final(s: &Setup, n: usize, o: &dispatch::Options) -> Value {
    let dispatchers: Vec<_> = (0..n).map(|_| tokio::spawn(dispatch::run_owned(o.clone()))).collect();
    let open = wait_final(&s.root, 300).await;
    for d in dispatchers {
        d.abort();
    }
    assert_eq!(open, 0, "every intent final");
    s.erp.effects()
}

/// Issue 43's first finding: a claim used to lease a whole batch while only `--concurrency`
/// intents were in flight, so the intents still waiting when the lease ended were claimed and
/// sent by the other dispatcher too. Now an intent is claimed only when a slot is free to send
/// it: with a queue far slower than the lease (8 writes of 300 ms one at a time in each of three
/// dispatchers, leases of 1 s), each key reaches the ERP once, none while another request with it
/// is in flight, and each intent is claimed once.
#[tokio::test]
async fn a_queue_slower_than_the_lease_is_sent_by_one_dispatcher_per_key() {
    let s = setup("dispatch_slow_queue").await;
    const N: i64 = 12;
    for i in 1..=N {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("slow-queue-{i}")).await), ("PENDING", "-"));
    }
    s.erp.queue_fault(Fault::Late(Duration::from_millis(300)), N as u32, Matcher::parse("POST /purchases").unwrap());
    let mut o = s.options();
    (o.once, o.poll, o.batch, o.concurrency, o.lease, o.timeout) =
        (false, Duration::from_millis(100), 32, 1, Duration::from_secs(1), Duration::from_millis(500));
    let effects = dispatchers_until_final(&s, 3, &o).await;
    for (key, writes) in effects["writes_by_key"].as_object().unwrap() {
        assert_eq!(writes, 1, "{key} sent once: {effects}");
    }
    assert_eq!((effects["writes_received"].as_i64(), effects["in_progress_refused"].as_i64()), (Some(N), Some(0)));
    assert_eq!(
        count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE state = 'SUCCEEDED' AND attempts = 1").await,
        N,
        "each intent claimed once"
    );
    assert_eq!(s.dispatch_audit("SUCCEEDED").await, N);
}

/// A delivery longer than the lease (the ERP's protocol takes 2.5 s, leases of 1 s): the claim is
/// renewed while it lasts, so the other dispatcher never takes the intent over (nothing is asked
/// by key, nothing claimed twice).
#[tokio::test]
async fn a_delivery_longer_than_the_lease_keeps_its_claim() {
    let s = setup("dispatch_long_delivery").await;
    const N: i64 = 3;
    for i in 1..=N {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("long-delivery-{i}")).await), ("PENDING", "-"));
    }
    s.erp.configure(&json!({"async_delay_ms": 2500})).unwrap();
    let mut o = s.options();
    (o.once, o.poll, o.concurrency, o.lease, o.timeout) =
        (false, Duration::from_millis(100), 4, Duration::from_secs(1), Duration::from_millis(500));
    let effects = dispatchers_until_final(&s, 2, &o).await;
    assert_eq!(
        (effects["writes_received"].as_i64(), effects["state_queries"].as_i64()),
        (Some(N), Some(0)),
        "{effects}"
    );
    assert_eq!(
        count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE state = 'SUCCEEDED' AND attempts = 1").await,
        N,
        "each intent claimed once"
    );
}

#[tokio::test]
async fn a_lease_shorter_than_two_timeouts_is_refused() {
    let s = setup("dispatch_lease_short").await;
    let o = dispatch::Options { lease: Duration::from_secs(3), timeout: Duration::from_secs(2), ..s.options() };
    let refused = dispatch::run(&o).await.expect_err("refused");
    assert!(refused.to_string().contains("at least twice the timeout"), "{refused}");
}

/// The endpoint's own window, one request a second: a second intent claimed with the first waits
/// about a second in the dispatcher before it may go out.
async fn one_request_a_second(s: &Setup) {
    s.root
        .batch_execute(&format!(
            "SET ROLE toolgate_admin; SELECT toolgate.add_erp_endpoint('fake_erp', '{}', 'refresh_token', 1); RESET ROLE",
            s.erp.base_url()
        ))
        .await
        .unwrap();
}

/// A claim that cannot be renewed (here the dispatcher may not run `renew_outbox`; in life, the
/// database out of reach) sends nothing once too little of its lease is left: the intent waiting
/// behind the endpoint's window is not sent after its lease (1 s) could have ended, and is tried
/// again later, asked by key first.
#[tokio::test]
async fn a_claim_not_renewed_sends_nothing_once_its_lease_runs_short() {
    let s = setup("dispatch_lease_runs_short").await;
    for i in 1..=2 {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("short-lease-{i}")).await), ("PENDING", "-"));
    }
    one_request_a_second(&s).await;
    s.root
        .batch_execute(
            "REVOKE EXECUTE ON FUNCTION toolgate.renew_outbox(text, text, text, uuid, interval) FROM toolgate_dispatcher",
        )
        .await
        .unwrap();
    let o = dispatch::Options {
        concurrency: 2,
        lease: Duration::from_secs(1),
        timeout: Duration::from_millis(500),
        ..s.options()
    };
    let report = dispatch::run(&o).await.unwrap();
    assert_eq!((report.count("SUCCEEDED"), report.count("PENDING")), (1, 1), "{report:?}");
    assert_eq!(s.erp("writes_received"), 1, "the second was not sent: {}", s.erp.effects());
    let short: i64 = count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE last_error = 'lease_short'").await;
    assert_eq!(short, 1);

    // Renewed again: it goes out, asked for by key first (it might have been sent).
    s.root
        .batch_execute(
            "GRANT EXECUTE ON FUNCTION toolgate.renew_outbox(text, text, text, uuid, interval) TO toolgate_dispatcher;
             UPDATE toolgate.outbox SET next_attempt_at = now()",
        )
        .await
        .unwrap();
    assert_eq!(dispatch::run(&o).await.unwrap().count("SUCCEEDED"), 1);
    let effects = s.erp.effects();
    assert_eq!((effects["writes_received"].as_i64(), effects["effects"].as_i64()), (Some(2), Some(2)), "{effects}");
    for (key, writes) in effects["writes_by_key"].as_object().unwrap() {
        assert_eq!(writes, 1, "{key} sent once: {effects}");
    }
}

/// A claim lost while its intent waits (here taken from it as root; in life, its lease ran out and
/// another dispatcher claimed it) is dropped at the next renewal: nothing is sent for it, nothing
/// settled, and the dispatcher does not wait out the endpoint's window (a minute) for it.
#[tokio::test]
async fn a_claim_lost_while_waiting_is_dropped_at_once() {
    let s = setup("dispatch_claim_lost").await;
    for i in 1..=2 {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("lost-claim-{i}")).await), ("PENDING", "-"));
    }
    s.root
        .batch_execute(&format!(
            "SET ROLE toolgate_admin; \
             SELECT toolgate.add_erp_endpoint('fake_erp', '{}', 'refresh_token', NULL, 1); RESET ROLE",
            s.erp.base_url()
        ))
        .await
        .unwrap();
    let o = dispatch::Options {
        concurrency: 2,
        lease: Duration::from_secs(3),
        timeout: Duration::from_secs(1),
        ..s.options()
    };
    // The first write is refused at once (nothing more to ask the ERP for it).
    s.erp.queue_fault(Fault::Failed("no_stock".into()), 1, Matcher::parse("POST /purchases").unwrap());
    let run = tokio::spawn(dispatch::run_owned(o));
    // Once the first is settled, the second waits for the endpoint's minute: take its claim away.
    for _ in 0..250 {
        if count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE state = 'REJECTED'").await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stolen = s
        .root
        .execute(
            "UPDATE toolgate.outbox SET claim = gen_random_uuid() WHERE state = 'PENDING' AND claim IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(stolen, 1);
    let report = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("dropped at the next renewal, not after the endpoint's minute")
        .unwrap()
        .unwrap();
    assert_eq!((report.count("REJECTED"), report.lost), (1, 1), "{report:?}");
    assert_eq!(s.erp("writes_received"), 1, "nothing sent for the lost claim");
    assert_eq!(
        count(&s.root, "SELECT count(*) FROM toolgate.audit WHERE kind = 'dispatch' AND outcome <> 'PENDING'").await,
        1,
        "only the first settled"
    );
}

/// `n` intents of `prefix` made DEAD: every write answered 500 and every state query 503, one
/// attempt each.
async fn dead_intents(s: &Setup, prefix: &str, n: usize) {
    for i in 1..=n {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("{prefix}-{i}")).await), ("PENDING", "-"));
    }
    s.erp.queue_fault(Fault::InternalError, n as u32, Matcher::parse("POST /purchases").unwrap());
    s.erp.queue_fault(Fault::Unavailable, n as u32, Matcher::parse("GET /requests").unwrap());
    let o = dispatch::Options { max_attempts: 1, ..s.options() };
    assert_eq!(dispatch::run(&o).await.unwrap().count("DEAD"), n, "{}", s.erp.effects());
}

/// Issue 43's fifth finding: a DEAD intent could not be resolved by any documented means. A person
/// who checked the ERP says what became of it (`resolve_outbox`, audited with their note): done
/// there (the finish function runs once, the ledger answers SUCCEEDED) or not done (REJECTED, the
/// conversation's quota given back); or hands it back to the dispatcher (`requeue_outbox`), which
/// asks the ERP for the key before it sends anything.
#[tokio::test]
async fn a_person_resolves_or_requeues_a_dead_intent() {
    let s = finish_setup("dispatch_resolve").await;
    s.root
        .batch_execute(&format!(
            "SELECT toolgate.set_policy('shopping-a', '{TOOL}', true, ARRAY['supervisor'], 0, \
             max_calls_per_conversation => 4)"
        ))
        .await
        .unwrap();
    dead_intents(&s, "resolve-key", 4).await;
    let used = || count(&s.root, "SELECT coalesce(sum(used), 0)::bigint FROM toolgate.quota_usage");
    assert_eq!(used().await, 4);
    let resolve = "SELECT toolgate.resolve_outbox('shopping-a', $1, $2, $3, $4)";

    // Not the agent's, nor the dispatcher's; a note is required; only DEAD or UNCERTAIN.
    let refused = s.app.query_one(resolve, &[&TOOL, &"resolve-key-1", &"SUCCEEDED", &"seen"]).await.unwrap_err();
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE), "{refused}");
    // Granted to a role that does not administer the gate (here the dispatcher's login): refused.
    s.root
        .batch_execute(&format!(
            "GRANT EXECUTE ON FUNCTION toolgate.resolve_outbox(text, text, text, text, text, jsonb) TO {DISPATCHER}"
        ))
        .await
        .unwrap();
    let dispatcher = s.lab.connect(DISPATCHER).await.unwrap();
    let refused = dispatcher.query_one(resolve, &[&TOOL, &"resolve-key-1", &"SUCCEEDED", &"seen"]).await.unwrap_err();
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE), "{refused}");
    let refused = s.root.query_one(resolve, &[&TOOL, &"resolve-key-1", &"SUCCEEDED", &" "]).await.unwrap_err();
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE), "{refused}");
    let refused = s.root.query_one(resolve, &[&TOOL, &"resolve-key-1", &"PENDING", &"seen"]).await.unwrap_err();
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE), "{refused}");

    // 1: the ERP shows it done. The finish function runs once, in the call's context.
    let reply: Value = s
        .root
        .query_one(
            "SELECT toolgate.resolve_outbox('shopping-a', $1, 'resolve-key-1', 'SUCCEEDED', \
             'PO-77 in the ERP''s purchase list', '{\"protocol\": \"PRT-77\", \"status\": \"DONE\"}')",
            &[&TOOL],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(reply["outcome"], "SUCCEEDED", "{reply}");
    assert_eq!(s.order("o1").await, (1, Some("PRT-77".to_string())));
    let status = s.call("o1", "resolve-key-1").await;
    assert_eq!((outcome(&status), status["replayed"].as_bool()), (("SUCCEEDED", "-"), Some(true)), "{status}");
    let refused = s.root.query_one(resolve, &[&TOOL, &"resolve-key-1", &"REJECTED", &"again"]).await.unwrap_err();
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE));

    // 2: not in the ERP. REJECTED, the conversation's call given back, no follow-up.
    let reply: Value =
        s.root.query_one(resolve, &[&TOOL, &"resolve-key-2", &"REJECTED", &"not in the ERP"]).await.unwrap().get(0);
    assert_eq!(
        (reply["outcome"].as_str(), reply["rule"].as_str()),
        (Some("REJECTED"), Some("erp_rejected")),
        "{reply}"
    );
    assert_eq!(s.order("o2").await.0, 0);
    assert_eq!(used().await, 3, "the call that was not done is given back");

    // 3: the ERP is back: handed to the dispatcher, which asks by key (NOT_FOUND) and sends it.
    let reply: Value = s
        .root
        .query_one("SELECT toolgate.requeue_outbox('shopping-a', $1, 'resolve-key-3', 'ERP back up')", &[&TOOL])
        .await
        .unwrap()
        .get(0);
    assert_eq!((reply["was"].as_str(), reply["state"].as_str()), (Some("DEAD"), Some("UNCERTAIN")), "{reply}");
    let queries = s.erp("state_queries");
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 1);
    assert_eq!((s.erp("state_queries") - queries, s.erp("effects")), (1, 1), "asked by key first, then sent once");
    assert_eq!(s.order("o3").await.0, 1);

    // 4: handed back too, and claimed by a dispatcher (its lease of a second running): while it is
    // held, no person settles it.
    s.root
        .query_one("SELECT toolgate.requeue_outbox('shopping-a', $1, 'resolve-key-4', 'ERP back up')", &[&TOOL])
        .await
        .unwrap();
    let held = dispatcher.query("SELECT * FROM toolgate.claim_outbox(1, interval '1 second')", &[]).await.unwrap();
    assert_eq!(held.len(), 1);
    let refused = s.root.query_one(resolve, &[&TOOL, &"resolve-key-4", &"REJECTED", &"gone"]).await.unwrap_err();
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE), "{refused}");

    // Audited: who, why, from what.
    let rows = s
        .root
        .query(
            "SELECT outcome, detail->>'note', detail->>'was', (detail ? 'resolved_by') OR (detail ? 'requeued_by') \
             FROM toolgate.audit WHERE kind = 'dispatch' AND detail ? 'note' ORDER BY audit_id",
            &[],
        )
        .await
        .unwrap();
    let rows: Vec<(String, String, String, bool)> =
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    assert_eq!(
        rows,
        [
            ("SUCCEEDED".into(), "PO-77 in the ERP's purchase list".into(), "DEAD".into(), true),
            ("REJECTED".into(), "not in the ERP".into(), "DEAD".into(), true),
            ("UNCERTAIN".into(), "ERP back up".into(), "DEAD".into(), true),
            ("UNCERTAIN".into(), "ERP back up".into(), "DEAD".into(), true),
        ]
    );
}

/// Issue 43's eighth finding: the budget check ignored queued calls, so three of 40 against a
/// budget of 100 all passed and the ERP did all three. An outbox tool's open intents are reserved
/// on their account: the third is `budget_exceeded`; an intent the ERP refuses frees its share.
#[tokio::test]
async fn queued_calls_are_reserved_on_their_account() {
    let s = setup("dispatch_reserved").await;
    s.root
        .batch_execute(&format!(
            "SET ROLE it_remote_owner;
             CREATE FUNCTION remote.value(ctx jsonb, args jsonb) RETURNS jsonb
             LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, remote, pg_temp AS $f$
                 SELECT jsonb_build_object('amount', 40, 'account', 'CC-1', 'available', 100)
             $f$;
             REVOKE EXECUTE ON FUNCTION remote.value(jsonb, jsonb) FROM PUBLIC;
             RESET ROLE;
             SET client_min_messages = warning;
             SELECT toolgate.define_outbox_tool(t.tool, t.description, s.schema, false,
                        'remote.target(jsonb, jsonb)', 'remote.request(jsonb, jsonb)', 'fake_erp',
                        value => 'remote.value(jsonb, jsonb)')
               FROM toolgate.tools t JOIN toolgate.tool_schemas s ON s.tool = t.tool
              WHERE t.tool = '{TOOL}' ORDER BY s.version DESC LIMIT 1;"
        ))
        .await
        .unwrap();
    assert_eq!(outcome(&s.call("o1", "reserved-key-1").await), ("PENDING", "-"));
    assert_eq!(outcome(&s.call("o2", "reserved-key-2").await), ("PENDING", "-"));
    let third = s.call("o3", "reserved-key-3").await;
    assert_eq!(outcome(&third), ("BLOCKED", "budget_exceeded"), "{third}");
    let audited: Value = s
        .root
        .query_one(
            "SELECT detail FROM toolgate.audit WHERE kind = 'call' AND outcome = 'BLOCKED' ORDER BY audit_id DESC LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        (audited["reserved"].as_str(), audited["available"].as_str()),
        (Some("80"), Some("20")),
        "100 available, 80 reserved by the two queued: {audited}"
    );

    // The ERP refuses the first: its 40 are free again, and a new call passes.
    s.erp.queue_fault(Fault::Refuse("no_stock".into()), 1, Matcher::parse("POST /purchases").unwrap());
    let o = dispatch::Options { concurrency: 1, batch: 1, ..s.options() };
    let report = dispatch::run(&o).await.unwrap();
    assert_eq!((report.count("REJECTED"), report.count("SUCCEEDED")), (1, 1), "{report:?}");
    // Done by the ERP: no longer reserved here (the account's own figures are the DBA's to keep).
    assert_eq!(outcome(&s.call("o4", "reserved-key-4").await), ("PENDING", "-"));
    assert_eq!(outcome(&s.call("o5", "reserved-key-5").await), ("PENDING", "-"));
    assert_eq!(outcome(&s.call("o6", "reserved-key-6").await), ("BLOCKED", "budget_exceeded"));
}

/// Retries back off: an intent the ERP never answers is tried again after `--retry-delay` (1 s
/// here), then twice that, then four times (each give or take a fifth), up to
/// `--max-retry-delay`, so a stuck intent is tried, and audited, a bounded number of times a day.
#[tokio::test]
async fn retries_back_off_with_jitter() {
    let s = setup("dispatch_backoff").await;
    s.erp.queue_fault(Fault::InternalError, 10, Matcher::parse("POST /purchases").unwrap());
    s.erp.queue_fault(Fault::Unavailable, 10, Matcher::parse("GET /requests").unwrap());
    assert_eq!(outcome(&s.call("o1", "backoff-key-1").await), ("PENDING", "-"));
    let o = dispatch::Options {
        retry_delay: Duration::from_secs(1),
        max_retry_delay: Duration::from_secs(3),
        ..s.options()
    };
    let next = "SELECT extract(epoch FROM next_attempt_at - clock_timestamp())::float8 FROM toolgate.outbox";
    for (attempt, doubled) in [(1, 1.0), (2, 2.0), (3, 3.0), (4, 3.0)] {
        s.root.batch_execute("UPDATE toolgate.outbox SET next_attempt_at = now()").await.unwrap();
        assert_eq!(dispatch::run(&o).await.unwrap().count("UNCERTAIN"), 1, "attempt {attempt}");
        let wait: f64 = s.root.query_one(next, &[]).await.unwrap().get(0);
        assert!(
            (doubled * 0.8 - 0.2..=doubled * 1.2).contains(&wait),
            "attempt {attempt}: tried again in {wait:.2} s, not about {doubled} s"
        );
    }
    // Each attempt is audited at its start and at its end.
    let (starts, ends): (i64, i64) = {
        let row = s
            .root
            .query_one(
                "SELECT count(*) FILTER (WHERE detail->>'phase' = 'start'), \
                        count(*) FILTER (WHERE detail->>'phase' IS NULL) \
                   FROM toolgate.audit WHERE kind = 'dispatch'",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((starts, ends), (4, 4));
}

/// `toolgate dispatch` polling as a process of its own with `more` options, its standard output
/// piped; SIGTERM once all of `n` intents are claimed (every write takes `late_ms` at the ERP);
/// what it printed when it exited, within 10 s.
async fn terminated_mid_delivery(s: &Setup, n: u32, late_ms: u64, more: &[&str]) -> Value {
    s.erp.queue_fault(Fault::Late(Duration::from_millis(late_ms)), n, Matcher::parse("POST /purchases").unwrap());
    let mut child = std::process::Command::new(toolgate())
        .args(["dispatch", "--concurrency", "8", "--poll", "0.2", "--timeout", "2", "--lease", "10"])
        .arg("--database")
        .arg(s.options().database)
        .arg("--refresh-token-file")
        .arg(format!("fake_erp={}", s.token_file.display()))
        .args(s.origins().iter().flat_map(|o| ["--allow-origin".to_string(), o.clone()]))
        .arg("--allow-private-addresses")
        .args(more)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("toolgate dispatch starts");
    for _ in 0..200 {
        if count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE claim IS NOT NULL").await == i64::from(n) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "still running 10 s after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    let mut printed = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut printed).unwrap();
    serde_json::from_str(&printed).unwrap_or_else(|e| panic!("{e}: {printed:?}"))
}

/// SIGTERM: nothing more is claimed, and the deliveries in flight end and are settled before the
/// dispatcher exits.
#[tokio::test]
async fn sigterm_lets_the_deliveries_in_flight_end() {
    let s = setup("dispatch_sigterm").await;
    for i in 1..=4 {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("term-key-{i}")).await), ("PENDING", "-"));
    }
    let printed = terminated_mid_delivery(&s, 4, 600, &[]).await;
    assert_eq!(
        (printed["settled"]["SUCCEEDED"].as_i64(), printed["handed_back"].as_i64()),
        (Some(4), Some(0)),
        "{printed}"
    );
    assert_eq!(count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE state = 'SUCCEEDED'").await, 4);
    // Queued after the signal: left for the next dispatcher, not claimed.
    assert_eq!(s.erp("writes_received"), 4);
}

/// SIGTERM with a grace shorter than the deliveries: those still running are cut short and handed
/// back at once (not after their 10 s lease); the next dispatcher asks the ERP for their keys (it
/// had them) and settles them without sending them again.
#[tokio::test]
async fn sigterm_hands_back_what_outlasts_the_grace() {
    let s = setup("dispatch_sigterm_grace").await;
    for i in 1..=4 {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("grace-key-{i}")).await), ("PENDING", "-"));
    }
    let printed = terminated_mid_delivery(&s, 4, 1200, &["--shutdown-grace", "0.2"]).await;
    assert_eq!(printed["handed_back"].as_i64(), Some(4), "{printed}");
    assert_eq!(
        count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE next_attempt_at < now() + interval '2 seconds'")
            .await,
        4,
        "due again within a second, not when the lease would have ended"
    );
    s.erp_reaches_effects(4).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(s.dispatch().await.count("SUCCEEDED"), 4);
    assert_eq!((s.erp("writes_received"), s.erp("effects")), (4, 4), "asked for by key, never sent again");
}

impl Setup {
    /// Wait (bounded) until the ERP has done `n` effects.
    async fn erp_reaches_effects(&self, n: i64) {
        for _ in 0..200 {
            if self.erp("effects") >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the ERP never did {n} effects: {}", self.erp.effects());
    }
}

/// GET `path` on the dispatcher's listener: (status, body).
async fn scrape(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    match toolgate_erp_client::call(addr, "GET", path, &[], None, Duration::from_secs(2)).await {
        Ok(reply) => (reply.status, String::from_utf8_lossy(&reply.body).into_owned()),
        Err(_) => (0, String::new()),
    }
}

/// A metric's value in Prometheus text, the first sample whose line starts with `sample`.
fn sample(text: &str, sample: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(sample)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
}

/// `--listen`: /healthz answers while the dispatcher holds its connection, /metrics counts the
/// deliveries by endpoint and outcome and shows the queue's lag (the oldest due intent's wait);
/// a non-loopback address is refused (plain HTTP).
#[tokio::test]
async fn metrics_and_health_on_a_loopback_listener() {
    let s = setup("dispatch_metrics").await;
    for i in 1..=3 {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("metrics-key-{i}")).await), ("PENDING", "-"));
    }
    // Held by the kill switch, due for 5 s already: the lag the queue shows.
    s.root
        .batch_execute(&format!(
            "SELECT toolgate.set_writes_enabled(false, '{TOOL}');
             UPDATE toolgate.outbox SET next_attempt_at = now() - interval '5 seconds'"
        ))
        .await
        .unwrap();
    let refused = std::process::Command::new(toolgate())
        .args(["dispatch", "--once", "--listen", "0.0.0.0:9464", "--allow-origin", "http://127.0.0.1:1", "--database"])
        .arg(s.options().database)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("loopback"), "{refused:?}");

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // A login of its own: the test cuts it off below, and the other tests' dispatchers share theirs.
    const LOGIN: &str = "toolgate_it_metrics_dispatcher";
    s.root
        .batch_execute(&format!(
            "DO $$ BEGIN CREATE ROLE {LOGIN} LOGIN IN ROLE toolgate_dispatcher; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
        ))
        .await
        .unwrap();
    let database = s.options().database.replace(&format!("user={DISPATCHER}"), &format!("user={LOGIN}"));
    let _dispatcher = Killed(
        std::process::Command::new(toolgate())
            .args(["dispatch", "--poll", "0.2", "--lease", "2", "--timeout", "1", "--listen", &addr.to_string()])
            .args(["--database", &database])
            .arg("--refresh-token-file")
            .arg(format!("fake_erp={}", s.token_file.display()))
            .args(s.origins().iter().flat_map(|o| ["--allow-origin".to_string(), o.clone()]))
            .arg("--allow-private-addresses")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("toolgate dispatch starts"),
    );
    let mut health = (0, String::new());
    for _ in 0..100 {
        health = scrape(addr, "/healthz").await;
        if health.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(health, (200, "ok\n".to_string()));
    let (status, text) = scrape(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        (sample(&text, "toolgate_dispatch_due "), sample(&text, "toolgate_dispatch_up ")),
        (Some(3.0), Some(1.0)),
        "{text}"
    );
    assert!(sample(&text, "toolgate_dispatch_oldest_due_seconds ").is_some_and(|lag| lag >= 5.0), "{text}");

    s.erp.queue_fault(Fault::Refuse("no_stock".into()), 1, Matcher::parse("POST /purchases").unwrap());
    s.root.batch_execute(&format!("SELECT toolgate.set_writes_enabled(true, '{TOOL}')")).await.unwrap();
    assert_eq!(wait_final(&s.root, 100).await, 0);
    let (_, text) = scrape(addr, "/metrics").await;
    let delivered = |outcome: &str| {
        sample(&text, &format!("toolgate_dispatch_deliveries_total{{endpoint=\"fake_erp\",outcome=\"{outcome}\"}}"))
    };
    assert_eq!((delivered("SUCCEEDED"), delivered("REJECTED")), (Some(2.0), Some(1.0)), "{text}");
    assert_eq!(
        (sample(&text, "toolgate_dispatch_due "), sample(&text, "toolgate_dispatch_oldest_due_seconds ")),
        (Some(0.0), Some(0.0))
    );
    assert!(sample(&text, "toolgate_dispatch_delivery_seconds_count{endpoint=\"fake_erp\"}") == Some(3.0), "{text}");

    // Its connections cut, and its login refused: unhealthy until it connects again.
    s.root
        .batch_execute(&format!(
            "ALTER ROLE {LOGIN} NOLOGIN;
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{LOGIN}'"
        ))
        .await
        .unwrap();
    let mut status = 0;
    for _ in 0..100 {
        status = scrape(addr, "/healthz").await.0;
        if status == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 503);
    assert_eq!(sample(&scrape(addr, "/metrics").await.1, "toolgate_dispatch_up "), Some(0.0));
    s.root.batch_execute(&format!("ALTER ROLE {LOGIN} LOGIN")).await.unwrap();
    for _ in 0..100 {
        status = scrape(addr, "/healthz").await.0;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 200, "connected again by itself");
}

/// An ERP that cannot be reached does not take every slot from the others: after
/// `breaker_failures` attempts in a row without reaching it, its intents are left alone for a
/// while (its circuit open), and the healthy endpoint's are delivered meanwhile.
#[tokio::test]
async fn a_failing_erp_opens_its_circuit_and_starves_no_other() {
    let s = setup("dispatch_breaker").await;
    s.root
        .batch_execute(&format!(
            "SET ROLE toolgate_admin;
             SELECT toolgate.add_erp_endpoint('down_erp', 'http://127.0.0.1:1', 'none');
             RESET ROLE;
             SET client_min_messages = warning;
             SELECT toolgate.define_outbox_tool('erp_order_down', t.description, s.schema, false,
                        'remote.target(jsonb, jsonb)', 'remote.request(jsonb, jsonb)', 'down_erp')
               FROM toolgate.tools t JOIN toolgate.tool_schemas s ON s.tool = t.tool
              WHERE t.tool = '{TOOL}' ORDER BY s.version DESC LIMIT 1;
             SELECT toolgate.set_policy('shopping-a', 'erp_order_down', allowed => true, roles => ARRAY['supervisor'], tier => 0);"
        ))
        .await
        .unwrap();
    for i in 1..=6 {
        let args = json!({"order_id": format!("o{i}"), "part": "filter", "quantity": 1, "idempotency_key": format!("down-key-{i}")});
        let reply = toolgate_cli::db::json(
            &s.app,
            "SELECT toolgate.call($1, 'conv-down', 'erp_order_down', $2)",
            &[&s.lab.supervisor_a(), &args],
        )
        .await
        .unwrap();
        assert_eq!(outcome(&reply), ("PENDING", "-"), "{reply}");
    }
    for i in 1..=4 {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("up-key-{i}")).await), ("PENDING", "-"));
    }
    let mut o = s.options();
    o.allowed_origins.push("http://127.0.0.1:1".into());
    (o.concurrency, o.breaker_failures) = (1, 2);
    let report = dispatch::run(&o).await.unwrap();
    assert_eq!(report.count("SUCCEEDED"), 4, "{report:?}");
    // Two failures open the circuit; one more may have been claimed while the second was in flight.
    let untouched =
        count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE endpoint = 'down_erp' AND attempts = 0").await;
    assert!(untouched >= 3, "the circuit left {untouched} of 6 alone");
}

/// Where the outbox is distributed by tenant (Citus, `toolgate.outbox_distributed()` true), rows
/// are locked only within one shard: `claim_outbox` refuses, and dispatchers claim tenant by
/// tenant (`outbox_due_tenants`, then `tenant_claim_outbox`, a call Citus delegates to the
/// tenant's node). Here, on one node, that function is made to say so, and two dispatchers drain
/// two tenants' intents that way: each sent once. (`scripts/citus.sh` runs it on a cluster.)
#[tokio::test]
async fn where_the_outbox_is_distributed_claims_go_tenant_by_tenant() {
    let s = setup("dispatch_per_tenant").await;
    s.root
        .batch_execute(&format!(
            "INSERT INTO remote.orders SELECT 'shopping-b', 'o' || i FROM generate_series(1, 40) i;
             SELECT toolgate.set_policy('shopping-b', '{TOOL}', allowed => true, roles => ARRAY['supervisor'], tier => 0);"
        ))
        .await
        .unwrap();
    let b = s.lab.supervisor_b();
    for i in 1..=6 {
        assert_eq!(outcome(&s.call(&format!("o{i}"), &format!("tenant-key-{i}")).await), ("PENDING", "-"));
        let args = json!({"order_id": format!("o{i}"), "part": "filter", "quantity": 2,
                          "idempotency_key": format!("tenant-key-{i}")});
        let reply =
            toolgate_cli::db::json(&s.app, "SELECT toolgate.call($1, 'conv-erp-b', $2, $3)", &[&b, &TOOL, &args])
                .await
                .unwrap();
        assert_eq!(outcome(&reply), ("PENDING", "-"));
    }
    s.root
        .batch_execute(
            "CREATE OR REPLACE FUNCTION toolgate.outbox_distributed() RETURNS boolean
             LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS 'SELECT true'",
        )
        .await
        .unwrap();
    let dispatcher = s.lab.connect(DISPATCHER).await.unwrap();
    let refused = dispatcher.query("SELECT * FROM toolgate.claim_outbox(8)", &[]).await.unwrap_err();
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED), "{refused}");
    let due: Vec<(String, i64)> = dispatcher
        .query("SELECT tenant_id, due FROM toolgate.outbox_due_tenants()", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut tenants = due.clone();
    tenants.sort();
    assert_eq!(tenants, [("shopping-a".to_string(), 6), ("shopping-b".to_string(), 6)]);
    // One tenant's claim holds that tenant's intents and no other's (rolled back: the dispatchers
    // below claim them).
    dispatcher.batch_execute("BEGIN").await.unwrap();
    let claimed: Value = dispatcher
        .query_one("SELECT toolgate.tenant_claim_outbox('shopping-b', 100, interval '1 minute')", &[])
        .await
        .unwrap()
        .get(0);
    let claimed = claimed.as_array().unwrap();
    assert_eq!(claimed.len(), 6, "{claimed:?}");
    assert!(claimed.iter().all(|c| c["tenant_id"] == "shopping-b" && c["claim"].is_string()), "{claimed:?}");
    dispatcher.batch_execute("ROLLBACK").await.unwrap();

    let mut one = s.options();
    one.batch = 3;
    one.concurrency = 2;
    let two = one.clone();
    let (r1, r2) = tokio::join!(dispatch::run(&one), dispatch::run(&two));
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    assert_eq!(r1.count("SUCCEEDED") + r2.count("SUCCEEDED"), 12, "{r1:?} {r2:?}");
    assert_eq!((s.erp("effects"), s.erp("writes_received"), s.erp("in_progress_refused")), (12, 12, 0));
    assert_eq!(
        count(&s.root, "SELECT count(*) FROM toolgate.outbox WHERE state = 'SUCCEEDED' AND attempts = 1").await,
        12
    );
}

/// A dispatcher that polls rarely is woken by the outbox call's commit (`NOTIFY toolgate_outbox`,
/// `toolgate.outbox_notify` on by default): the intent is delivered long before the next poll.
#[tokio::test]
async fn a_queued_call_wakes_the_dispatcher() {
    let s = setup("dispatch_woken").await;
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let opts = dispatch::Options { once: false, poll: Duration::from_secs(600), stop: Some(stopping), ..s.options() };
    let dispatcher = tokio::spawn(dispatch::run_owned(opts));
    // Listening (its last statement is the LISTEN) before the call commits.
    // This database's only: other tests' dispatchers listen in theirs.
    let listening = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                     AND query = 'LISTEN \"toolgate_outbox\"'";
    for _ in 0..200 {
        if count(&s.root, listening).await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(count(&s.root, listening).await, 1, "the dispatcher listens");
    assert_eq!(outcome(&s.call("o1", "woken-key-1").await), ("PENDING", "-"));
    let mut waited = 0;
    let delivered =
        "SELECT count(*) FROM toolgate.outbox WHERE idempotency_key = 'woken-key-1' AND state = 'SUCCEEDED'";
    while count(&s.root, delivered).await == 0 {
        assert!(waited < 400, "not delivered within 20 s while the poll is 600 s: never woken");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    stop.send(true).unwrap();
    let report = dispatcher.await.unwrap().unwrap();
    assert_eq!(report.count("SUCCEEDED"), 1, "{report:?}");
}
