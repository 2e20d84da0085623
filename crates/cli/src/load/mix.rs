//! The mix: which call a worker makes next, which replies it may get, and what the clients have
//! learned so far (settled keys, live proposals, decisions) to make those expectations exact
//! where they can be: a settled key must replay, a decided proposal must replay its decision.

use fastrand::Rng;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Mutex;

use super::journal::{Call, Fate, Key, Request, Who};

/// Calls per conversation and tool for shopping-b (tier 0).
pub const B_QUOTA: i32 = 4;
/// First order id of each pool: shopping-a closes (proposals), shopping-a purchases, shopping-b
/// closes (at once), shopping-b purchases. Purchase orders are never closed.
pub const A_CLOSE_ORDERS: usize = 1_000_000;
pub const A_BUY_ORDERS: usize = 3_000_000;
pub const B_CLOSE_ORDERS: usize = 5_000_000;
pub const B_BUY_ORDERS: usize = 7_000_000;
pub const BUY_ORDERS: usize = 20;

#[derive(Clone, Copy, Debug)]
enum Op {
    NewClose,
    NewPurchase,
    Repeat,
    Reuse,
    Deny,
    Read,
    Propose,
    Confirm,
    Decline,
}

/// How often each call comes up, out of 100.
const WEIGHTS: [(Op, u32); 9] = [
    (Op::NewClose, 10),
    (Op::NewPurchase, 12),
    (Op::Repeat, 12),
    (Op::Reuse, 5),
    (Op::Deny, 10),
    (Op::Read, 10),
    (Op::Propose, 16),
    (Op::Confirm, 20),
    (Op::Decline, 5),
];

/// Any reply a call under a key whose fate the client does not know may get.
const BROAD: &[(&str, &str)] = &[
    ("SUCCEEDED", ""),
    ("NEEDS_CONFIRMATION", ""),
    ("CANCELLED", "human_declined"),
    ("BLOCKED", "state_not_allowed"),
    ("BLOCKED", "rate_over_limit"),
    ("BLOCKED", "budget_exceeded"),
    ("BLOCKED", "value_over_limit"),
    ("BLOCKED", "limit_exceeded"),
    ("REJECTED", "idempotency_key_reused"),
];

/// What a reply may be.
#[derive(Clone, Debug)]
pub enum Expect {
    /// This outcome and rule, not replayed.
    Exactly(&'static str, &'static str),
    /// One of these (outcome, rule), replayed or not.
    OneOf(&'static [(&'static str, &'static str)]),
    /// The settled reply again, marked replayed.
    Replay(Value),
}

impl Expect {
    pub fn allows(&self, call: &Call) -> bool {
        let Some(reply) = call.reply() else { return true };
        let (outcome, rule) = (call.outcome(), call.rule());
        match self {
            Expect::Exactly(o, r) => outcome == *o && rule == *r && !call.replayed(),
            Expect::OneOf(list) => list.iter().any(|(o, r)| outcome == *o && rule == *r),
            Expect::Replay(prev) => {
                call.replayed()
                    && reply["outcome"] == prev["outcome"]
                    && reply["rule"] == prev["rule"]
                    && reply["result"] == prev["result"]
            }
        }
    }
}

/// A write request a later call may repeat or reuse.
#[derive(Clone)]
struct Issued {
    who: Who,
    tool: &'static str,
    conversation: String,
    args: Value,
    key: Key,
}

/// A proposal waiting for an answer.
#[derive(Clone)]
struct Pending {
    proposal: String,
    key: Key,
    args: Value,
    tier: i64,
    challenge: Option<String>,
}

/// A call about to be made.
pub struct Planned {
    seq: u64,
    op: &'static str,
    pub request: Request,
    key: Option<Key>,
    expect: Expect,
    /// The proposal a confirmation or decline answers (given back if the call is never sent).
    answers: Option<Pending>,
}

#[derive(Default)]
struct State {
    claimed: usize,
    next_seq: u64,
    next_key: u64,
    calls: Vec<Call>,
    issued: Vec<Issued>,
    /// Keys the clients saw settled: the arguments and the reply every retry must get back.
    settled: HashMap<Key, (Value, Value)>,
    pending: Vec<Pending>,
    /// Proposals the clients saw applied or declined, and that reply.
    decided: HashMap<String, Value>,
    /// Proposals applied, and by which call: a second one is a double effect.
    applied: HashMap<String, u64>,
    violations: Vec<String>,
}

pub struct Mix {
    pub seed: u64,
    limit: usize,
    orders: usize,
    a_conversations: usize,
    b_conversations: usize,
    state: Mutex<State>,
}

fn key(tenant: &str, tool: &str, key: &str) -> Key {
    Key { tenant: tenant.into(), tool: tool.into(), key: key.into() }
}

fn close_args(order: usize, key: &str) -> Value {
    json!({"order_id": order.to_string(), "reason": "Inspeção validada pelo supervisor", "idempotency_key": key})
}

fn purchase_args(order: usize, part: &str, quantity: i64, cost_center: &str, key: &str) -> Value {
    json!({"order_id": order.to_string(), "part_id": part, "quantity": quantity, "cost_center": cost_center,
           "idempotency_key": key})
}

/// The tier-3 challenge word the person is asked to type, from the proposal's text.
fn challenge(text: &str) -> Option<String> {
    let at = text.find("CONFIRMAR-")?;
    Some(text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect())
}

impl Mix {
    /// At most `limit` calls, pools sized for `sizing` of them.
    pub fn new(seed: u64, limit: usize, sizing: usize, orders: usize) -> Mix {
        Mix {
            seed,
            limit,
            orders,
            // Enough conversations that quotas do not all run out early, few enough that calls
            // race for the same quota row and supersede each other's proposals.
            a_conversations: (sizing / 60).max(8),
            b_conversations: (sizing / 60).max(8),
            state: Mutex::new(State::default()),
        }
    }

    /// A mix that only keeps violations (the failover's retries judge their own replies).
    pub fn resume(calls: &[Call]) -> Mix {
        let mix = Mix::new(0, 0, 0, 1);
        mix.state.lock().expect("fresh").next_seq = calls.iter().map(|c| c.seq + 1).max().unwrap_or(0);
        mix
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("no panics while held")
    }

    pub fn violation(&self, v: String) {
        self.lock().violations.push(v);
    }

    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    pub fn take_calls(&self) -> Vec<Call> {
        let mut calls = std::mem::take(&mut self.lock().calls);
        calls.sort_by_key(|c| c.seq);
        calls
    }

    /// The next call, or None once the mix's bound is reached.
    pub fn plan(&self, rng: &mut Rng) -> Option<Planned> {
        let mut s = self.lock();
        if s.claimed >= self.limit {
            return None;
        }
        s.claimed += 1;
        let mut roll = rng.u32(0..100);
        let mut op = Op::Read;
        for (candidate, weight) in WEIGHTS {
            if roll < weight {
                op = candidate;
                break;
            }
            roll -= weight;
        }
        let planned = self.plan_op(&mut s, op, rng);
        Some(planned)
    }

    /// A call that was never sent: its slot and its proposal go back.
    pub fn unplan(&self, planned: Planned) {
        let mut s = self.lock();
        s.claimed -= 1;
        if let Some(p) = planned.answers {
            s.pending.push(p);
        }
    }

    fn fresh_key(&self, s: &mut State) -> String {
        s.next_key += 1;
        format!("load-{:08}", s.next_key)
    }

    fn planned(s: &mut State, op: &'static str, request: Request, key: Option<Key>, expect: Expect) -> Planned {
        s.next_seq += 1;
        Planned { seq: s.next_seq, op, request, key, expect, answers: None }
    }

    fn write(
        s: &mut State,
        op: &'static str,
        who: Who,
        tool: &'static str,
        conversation: String,
        args: Value,
        expect: Expect,
    ) -> Planned {
        let k = key(who.tenant(), tool, args["idempotency_key"].as_str().unwrap_or_default());
        Mix::planned(s, op, Request::Write { who, tool: tool.into(), conversation, args }, Some(k), expect)
    }

    fn plan_op(&self, s: &mut State, op: Op, rng: &mut Rng) -> Planned {
        let a_conv = format!("a-{}", rng.usize(..self.a_conversations));
        let b_conv = format!("b-{}", rng.usize(..self.b_conversations));
        match op {
            Op::NewClose => {
                let k = self.fresh_key(s);
                let args = close_args(B_CLOSE_ORDERS + rng.usize(..self.orders), &k);
                const ALLOWED: &[(&str, &str)] = &[
                    ("SUCCEEDED", ""),
                    ("BLOCKED", "state_not_allowed"),
                    ("BLOCKED", "rate_over_limit"),
                    ("BLOCKED", "limit_exceeded"),
                ];
                Mix::write(s, "new_close", Who::SupB, "request_close", b_conv, args, Expect::OneOf(ALLOWED))
            }
            Op::NewPurchase => {
                let k = self.fresh_key(s);
                let (part, quantity) = if rng.bool() { ("F-200", rng.i64(1..=20)) } else { ("V-10", rng.i64(1..=5)) };
                let cc = ["CC-B-1", "CC-B-2", "CC-B-BIG", "CC-OBRAS"][rng.usize(..4)];
                let args = purchase_args(B_BUY_ORDERS + rng.usize(..BUY_ORDERS), part, quantity, cc, &k);
                const ALLOWED: &[(&str, &str)] = &[
                    ("SUCCEEDED", ""),
                    ("BLOCKED", "budget_exceeded"),
                    ("BLOCKED", "rate_over_limit"),
                    ("BLOCKED", "limit_exceeded"),
                ];
                Mix::write(s, "new_purchase", Who::SupB, "request_purchase_part", b_conv, args, Expect::OneOf(ALLOWED))
            }
            Op::Propose => {
                let k = self.fresh_key(s);
                if rng.bool() {
                    let args = close_args(A_CLOSE_ORDERS + rng.usize(..self.orders), &k);
                    const ALLOWED: &[(&str, &str)] = &[("NEEDS_CONFIRMATION", ""), ("BLOCKED", "state_not_allowed")];
                    Mix::write(s, "propose_close", Who::SupA, "request_close", a_conv, args, Expect::OneOf(ALLOWED))
                } else {
                    // Up to R$ 100 is tier 1, up to R$ 250 tier 2, the motor (R$ 480) tier 3.
                    let (part, quantity) =
                        if rng.u32(0..5) == 0 { ("B42-MOTOR", 1) } else { ("F-200", rng.i64(1..=20)) };
                    let cc = if rng.bool() { "CC-MANUT" } else { "CC-A-SMALL" };
                    let args = purchase_args(A_BUY_ORDERS + rng.usize(..BUY_ORDERS), part, quantity, cc, &k);
                    const ALLOWED: &[(&str, &str)] = &[
                        ("NEEDS_CONFIRMATION", ""),
                        ("BLOCKED", "budget_exceeded"),
                        ("BLOCKED", "rate_over_limit"),
                        ("BLOCKED", "limit_exceeded"),
                    ];
                    Mix::write(
                        s,
                        "propose_purchase",
                        Who::SupA,
                        "request_purchase_part",
                        a_conv,
                        args,
                        Expect::OneOf(ALLOWED),
                    )
                }
            }
            Op::Repeat | Op::Reuse if s.issued.is_empty() => self.plan_op(s, Op::NewClose, rng),
            Op::Repeat => {
                let i = s.issued[rng.usize(..s.issued.len())].clone();
                let expect = match s.settled.get(&i.key) {
                    Some((args, reply)) if *args == i.args => Expect::Replay(reply.clone()),
                    Some(_) => Expect::Exactly("REJECTED", "idempotency_key_reused"),
                    None => Expect::OneOf(BROAD),
                };
                let request =
                    Request::Write { who: i.who, tool: i.tool.into(), conversation: i.conversation, args: i.args };
                Mix::planned(s, "repeat", request, Some(i.key), expect)
            }
            Op::Reuse => {
                let i = s.issued[rng.usize(..s.issued.len())].clone();
                let mut args = i.args.clone();
                if i.tool == "request_close" {
                    args["reason"] = json!("Outro motivo, com a mesma chave");
                } else {
                    let max = if args["part_id"] == "B42-MOTOR" {
                        2
                    } else if args["part_id"] == "V-10" {
                        5
                    } else {
                        20
                    };
                    args["quantity"] = json!(args["quantity"].as_i64().unwrap_or(1) % max + 1);
                }
                let expect = match s.settled.get(&i.key) {
                    Some((settled, reply)) if *settled == args => Expect::Replay(reply.clone()),
                    Some(_) => Expect::Exactly("REJECTED", "idempotency_key_reused"),
                    None => Expect::OneOf(BROAD),
                };
                let request = Request::Write { who: i.who, tool: i.tool.into(), conversation: i.conversation, args };
                Mix::planned(s, "reuse_key", request, Some(i.key), expect)
            }
            Op::Deny => {
                let k = self.fresh_key(s);
                match rng.u32(0..5) {
                    0 => Mix::write(
                        s,
                        "deny_cross_tenant",
                        Who::SupA,
                        "request_close",
                        a_conv,
                        close_args(B_CLOSE_ORDERS, &k),
                        Expect::Exactly("BLOCKED", "target_not_found"),
                    ),
                    1 => Mix::write(
                        s,
                        "deny_value",
                        Who::SupA,
                        "request_purchase_part",
                        a_conv,
                        purchase_args(A_BUY_ORDERS, "B42-MOTOR", 2, "CC-MANUT", &k),
                        Expect::Exactly("BLOCKED", "value_over_limit"),
                    ),
                    2 => {
                        let mut args = close_args(B_CLOSE_ORDERS, &k);
                        args["tenant"] = json!("shopping-a");
                        Mix::write(
                            s,
                            "deny_schema",
                            Who::SupB,
                            "request_close",
                            b_conv,
                            args,
                            Expect::Exactly("REJECTED", "schema_invalid"),
                        )
                    }
                    3 => Mix::write(
                        s,
                        "deny_role",
                        Who::TechA,
                        "request_close",
                        a_conv,
                        close_args(A_CLOSE_ORDERS, &k),
                        Expect::Exactly("BLOCKED", "role_not_allowed"),
                    ),
                    _ => Mix::write(
                        s,
                        "deny_identity",
                        Who::ExpiredA,
                        "request_close",
                        a_conv,
                        close_args(A_CLOSE_ORDERS, &k),
                        Expect::Exactly("BLOCKED", "identity_invalid"),
                    ),
                }
            }
            Op::Read => {
                let (who, order, expect) = match rng.u32(0..5) {
                    0 => (Who::SupB, "742".to_string(), Expect::Exactly("BLOCKED", "target_not_found")),
                    1 | 2 => (
                        Who::SupA,
                        (A_CLOSE_ORDERS + rng.usize(..self.orders)).to_string(),
                        Expect::Exactly("SUCCEEDED", ""),
                    ),
                    _ => (
                        Who::SupB,
                        (B_CLOSE_ORDERS + rng.usize(..self.orders)).to_string(),
                        Expect::Exactly("SUCCEEDED", ""),
                    ),
                };
                Mix::planned(s, "read", Request::Read { who, order_id: order }, None, expect)
            }
            Op::Confirm | Op::Decline if s.pending.is_empty() => self.plan_op(s, Op::Propose, rng),
            Op::Confirm | Op::Decline => {
                let p = s.pending.swap_remove(rng.usize(..s.pending.len()));
                let decline = matches!(op, Op::Decline);
                // A plain "sim" where the challenge word is required: refused, the proposal stays live.
                let plain_yes_at_tier3 = !decline && p.tier >= 3 && rng.u32(0..10) == 0;
                if plain_yes_at_tier3 || rng.u32(0..4) == 0 {
                    // Someone may answer it again, maybe at the same time.
                    s.pending.push(p.clone());
                }
                let (decision, text) = match (decline, &p.challenge) {
                    (true, _) => ("decline", "não".to_string()),
                    (false, Some(word)) if !plain_yes_at_tier3 => ("approve", word.clone()),
                    _ => ("approve", "sim".to_string()),
                };
                let expect = match s.decided.get(&p.proposal) {
                    Some(reply) => Expect::Replay(reply.clone()),
                    None if plain_yes_at_tier3 => Expect::OneOf(&[
                        ("BLOCKED", "confirmation_invalid"),
                        ("BLOCKED", "proposal_not_live"),
                        ("SUCCEEDED", ""),
                        ("CANCELLED", "human_declined"),
                        ("BLOCKED", "limit_exceeded"),
                    ]),
                    None => Expect::OneOf(&[
                        ("SUCCEEDED", ""),
                        ("CANCELLED", "human_declined"),
                        ("BLOCKED", "proposal_not_live"),
                        ("BLOCKED", "budget_exceeded"),
                        ("BLOCKED", "state_not_allowed"),
                        ("BLOCKED", "limit_exceeded"),
                    ]),
                };
                let request =
                    Request::Confirm { who: Who::SupA, proposal: p.proposal.clone(), decision: decision.into(), text };
                let mut planned =
                    Mix::planned(s, if decline { "decline" } else { "confirm" }, request, Some(p.key.clone()), expect);
                planned.answers = Some(p);
                planned
            }
        }
    }

    /// Keep a call and learn from its reply.
    pub fn record(&self, planned: Planned, xid: Option<i64>, fate: Fate, retry_of: Option<u64>) {
        let committed = match &fate {
            Fate::Replied(_) => Some(true),
            // A statement that raised left its transaction aborted: COMMIT rolled it back.
            Fate::Raised(_) => Some(false),
            Fate::Lost => None,
        };
        let call = Call {
            seq: planned.seq,
            op: planned.op.to_string(),
            request: planned.request,
            key: planned.key,
            xid,
            fate,
            committed,
            retry_of,
        };
        let mut s = self.lock();
        if call.reply().is_some() && !planned.expect.allows(&call) {
            let v = format!(
                "call {} ({}): expected {:?}, got {} {} replayed={}",
                call.seq,
                call.op,
                planned.expect,
                call.outcome(),
                call.rule(),
                call.replayed()
            );
            s.violations.push(v);
        }
        if let Some(reply) = call.reply().cloned() {
            learn(&mut s, &call, &reply, planned.answers.as_ref());
        }
        s.calls.push(call);
    }
}

fn learn(s: &mut State, call: &Call, reply: &Value, answers: Option<&Pending>) {
    let (outcome, replayed) = (call.outcome(), call.replayed());
    match (&call.request, &call.key) {
        (Request::Write { who, tool, conversation, args }, Some(k)) if !call.op.starts_with("deny") => {
            if matches!(outcome, "SUCCEEDED" | "CANCELLED") {
                s.settled.entry(k.clone()).or_insert_with(|| (args.clone(), reply.clone()));
            }
            if outcome == "NEEDS_CONFIRMATION" && !replayed {
                let view = &reply["proposal"];
                s.pending.push(Pending {
                    proposal: view["id"].as_str().unwrap_or_default().to_string(),
                    key: k.clone(),
                    args: args.clone(),
                    tier: view["tier"].as_i64().unwrap_or(1),
                    challenge: challenge(view["text"].as_str().unwrap_or_default()),
                });
            }
            let tool = if tool == "request_close" { "request_close" } else { "request_purchase_part" };
            s.issued.push(Issued {
                who: *who,
                tool,
                conversation: conversation.clone(),
                args: args.clone(),
                key: k.clone(),
            });
        }
        (Request::Confirm { proposal, .. }, Some(k)) if matches!(outcome, "SUCCEEDED" | "CANCELLED") => {
            if outcome == "SUCCEEDED" && !replayed {
                if let Some(first) = s.applied.insert(proposal.clone(), call.seq) {
                    s.violations.push(format!("proposal {proposal} applied twice: by calls {first} and {}", call.seq));
                }
            }
            s.decided.entry(proposal.clone()).or_insert_with(|| reply.clone());
            if let Some(p) = answers {
                s.settled.entry(k.clone()).or_insert_with(|| (p.args.clone(), reply.clone()));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replied(reply: Value) -> Call {
        Call {
            seq: 1,
            op: "repeat".into(),
            request: Request::Read { who: Who::SupA, order_id: "1".into() },
            key: None,
            xid: Some(1),
            fate: Fate::Replied(reply),
            committed: Some(true),
            retry_of: None,
        }
    }

    #[test]
    fn a_replay_must_be_marked_and_carry_the_settled_result() {
        let settled = json!({"outcome": "SUCCEEDED", "replayed": false, "result": {"request_id": 4}});
        let expect = Expect::Replay(settled);
        assert!(expect.allows(&replied(json!({"outcome": "SUCCEEDED", "replayed": true, "result": {"request_id": 4}}))));
        assert!(
            !expect.allows(&replied(json!({"outcome": "SUCCEEDED", "replayed": false, "result": {"request_id": 4}})))
        );
        assert!(
            !expect.allows(&replied(json!({"outcome": "SUCCEEDED", "replayed": true, "result": {"request_id": 5}})))
        );
        assert!(!expect
            .allows(&replied(json!({"outcome": "REJECTED", "rule": "idempotency_key_reused", "replayed": false}))));
    }

    #[test]
    fn exactly_refuses_another_rule_and_a_replay() {
        let expect = Expect::Exactly("BLOCKED", "target_not_found");
        assert!(expect.allows(&replied(json!({"outcome": "BLOCKED", "rule": "target_not_found", "replayed": false}))));
        assert!(!expect.allows(&replied(json!({"outcome": "BLOCKED", "rule": "role_not_allowed", "replayed": false}))));
        assert!(!expect.allows(&replied(json!({"outcome": "BLOCKED", "rule": "target_not_found", "replayed": true}))));
        assert!(!Expect::OneOf(BROAD).allows(&replied(json!({"outcome": "BLOCKED", "rule": "identity_invalid"}))));
    }

    #[test]
    fn the_challenge_word_is_read_from_the_proposal_text() {
        let text = "Comprar 1 × B42-MOTOR … Para confirmar, digite exatamente: CONFIRMAR-3FA9C1";
        assert_eq!(challenge(text).as_deref(), Some("CONFIRMAR-3FA9C1"));
        assert_eq!(challenge("Para confirmar, responda sim."), None);
    }

    #[test]
    fn the_mix_is_bounded_and_seeded() {
        let plan = |seed| {
            let mix = Mix::new(seed, 50, 50, 100);
            let mut rng = Rng::with_seed(seed);
            let ops: Vec<&str> = std::iter::from_fn(|| mix.plan(&mut rng)).map(|p| p.op).collect();
            ops
        };
        assert_eq!(plan(3).len(), 50);
        assert_eq!(plan(3), plan(3));
    }
}
