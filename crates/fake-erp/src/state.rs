//! What the fake ERP remembers: its tokens, its rate-limit windows, its purchases and the answer
//! given to each idempotency key, and the faults queued by tests. Every method takes `now`, so the
//! rules read without a clock; the HTTP layer holds the lock and passes `Instant::now()`.

use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::fault::{Fault, Matcher};

/// What can be changed while it runs (`PUT /_fake/config`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Requests admitted in any one second; 0: no limit.
    pub per_second: u32,
    /// Requests admitted in any sixty seconds; 0: no limit.
    pub per_minute: u32,
    /// How long an access token is good for.
    pub token_ttl: Duration,
    /// How long an accepted write stays `PENDING` before it is `DONE`.
    pub async_delay: Duration,
    /// Refuse a write without an `Idempotency-Key` (400); otherwise each such write is a new effect.
    pub require_idempotency_key: bool,
    /// Do a write at once and answer `200 {"status": "DONE", "result": …}` (an ERP without the
    /// async protocol), instead of `200 PENDING` with a protocol to poll.
    pub synchronous: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            per_second: 10,
            per_minute: 600,
            token_ttl: Duration::from_secs(3600),
            async_delay: Duration::from_millis(200),
            require_idempotency_key: false,
            synchronous: false,
        }
    }
}

impl Settings {
    pub fn to_json(&self) -> Value {
        json!({
            "per_second": self.per_second,
            "per_minute": self.per_minute,
            "token_ttl_ms": millis(self.token_ttl),
            "async_delay_ms": millis(self.async_delay),
            "require_idempotency_key": self.require_idempotency_key,
            "synchronous": self.synchronous,
        })
    }

    /// Apply the fields `change` names (the keys of [`Settings::to_json`]); unknown keys are refused.
    pub fn update(&mut self, change: &Value) -> Result<(), String> {
        let Some(change) = change.as_object() else { return Err("the body is a JSON object".into()) };
        let mut next = self.clone();
        for (name, value) in change {
            let number = || value.as_u64().ok_or_else(|| format!("{name}: a whole number ≥ 0"));
            let small = || number().and_then(|n| u32::try_from(n).map_err(|_| format!("{name}: too large")));
            match name.as_str() {
                "per_second" => next.per_second = small()?,
                "per_minute" => next.per_minute = small()?,
                "token_ttl_ms" => next.token_ttl = Duration::from_millis(number()?),
                "async_delay_ms" => next.async_delay = Duration::from_millis(number()?),
                "require_idempotency_key" => {
                    next.require_idempotency_key = value.as_bool().ok_or_else(|| format!("{name}: true or false"))?
                }
                "synchronous" => next.synchronous = value.as_bool().ok_or_else(|| format!("{name}: true or false"))?,
                _ => return Err(format!("unknown setting {name:?}")),
            }
        }
        *self = next;
        Ok(())
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A request the rate limiter turned away.
#[derive(Debug, PartialEq, Eq)]
pub struct Limited {
    /// `"second"` or `"minute"`: the window that is full (the one that frees last, if both are).
    pub window: &'static str,
    /// How long until a request would be admitted.
    pub retry_after: Duration,
}

impl Limited {
    /// The `Retry-After` header's whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> u64 {
        let ms = millis(self.retry_after);
        ms.div_ceil(1000).max(1)
    }
}

/// A token endpoint answer.
pub enum Refreshed {
    Issued {
        access_token: String,
        refresh_token: String,
        expires_in: u64,
    },
    /// The refresh token is not the current one (an older one, rotated away, or never issued).
    InvalidGrant,
}

/// The answer to a write, kept per key so a replay gets the same one.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub replayed: bool,
}

#[derive(Clone, Debug)]
struct Order {
    tenant: String,
    order_id: String,
    part: String,
    quantity: u64,
    value: Value,
}

#[derive(Clone, Debug)]
struct Purchase {
    id: String,
    protocol: String,
    key: Option<String>,
    order: Order,
    ready_at: Instant,
    /// `None`: it becomes `DONE`; `Some(code)`: it becomes `REJECTED` with that code.
    rejected_with: Option<String>,
}

enum Outcome {
    Accepted(usize),
    Refused(String),
}

struct KeyEntry {
    body: Value,
    reply: Reply,
    outcome: Outcome,
}

struct Queued {
    fault: Fault,
    left: u32,
    on: Matcher,
}

pub struct State {
    pub settings: Settings,
    refresh_token: String,
    access: HashMap<String, Instant>,
    admitted: VecDeque<Instant>,
    purchases: Vec<Purchase>,
    keys: HashMap<String, KeyEntry>,
    protocols: HashMap<String, usize>,
    faults: VecDeque<Queued>,
    /// The keys of the writes being handled now (a write that waits, `late:MS`, is in flight for
    /// that long): another write with one of them is answered `409 request_in_progress`.
    in_flight: HashSet<String>,
    /// How many writes arrived with each key (a refused one, `409 request_in_progress`, aside).
    writes_by_key: BTreeMap<String, u64>,
    counts: Counts,
}

#[derive(Default)]
struct Counts {
    refreshes: u64,
    refused_refreshes: u64,
    unauthorized: u64,
    rate_limited: u64,
    writes_received: u64,
    in_progress_refused: u64,
    state_queries: u64,
    faults_fired: u64,
}

impl State {
    pub fn new(settings: Settings, refresh_token: String) -> State {
        State {
            settings,
            refresh_token,
            access: HashMap::new(),
            admitted: VecDeque::new(),
            purchases: Vec::new(),
            keys: HashMap::new(),
            protocols: HashMap::new(),
            faults: VecDeque::new(),
            in_flight: HashSet::new(),
            writes_by_key: BTreeMap::new(),
            counts: Counts::default(),
        }
    }

    /// The refresh token that works now.
    pub fn refresh_token(&self) -> &str {
        &self.refresh_token
    }

    /// Replace the refresh token (as a person re-authorising the application would); the old one
    /// stops working. Access tokens already issued keep working until they expire.
    pub fn set_refresh_token(&mut self, token: String) {
        self.refresh_token = token;
    }

    // --- tokens ---

    /// `grant_type=refresh_token`: a good refresh token gets an access token and a new refresh
    /// token, and stops working itself.
    pub fn refresh(&mut self, presented: &str, fresh: impl Fn(&str) -> String, now: Instant) -> Refreshed {
        if presented.is_empty() || presented != self.refresh_token {
            self.counts.refused_refreshes += 1;
            return Refreshed::InvalidGrant;
        }
        self.counts.refreshes += 1;
        self.refresh_token = fresh("rt");
        let access_token = fresh("at");
        self.access.retain(|_, expires| *expires > now);
        self.access.insert(access_token.clone(), now + self.settings.token_ttl);
        let expires_in = self.settings.token_ttl.as_secs_f64().ceil() as u64;
        Refreshed::Issued { access_token, refresh_token: self.refresh_token.clone(), expires_in }
    }

    /// Whether `token` is an access token that has not expired; a refusal is counted.
    pub fn authorized(&mut self, token: Option<&str>, now: Instant) -> bool {
        let good = token.and_then(|t| self.access.get(t)).is_some_and(|expires| *expires > now);
        if !good {
            self.counts.unauthorized += 1;
        }
        good
    }

    /// A request refused for its token (a fault that expired it), counted as `unauthorized`.
    pub fn refused_token(&mut self) {
        self.counts.unauthorized += 1;
    }

    /// Every access token expires now.
    pub fn expire_access_tokens(&mut self) -> usize {
        let n = self.access.len();
        self.access.clear();
        n
    }

    // --- rate limits ---

    /// Admit one request, or say which window is full and for how long. A refused request does
    /// not count against either window.
    pub fn admit(&mut self, now: Instant) -> Result<(), Limited> {
        let (per_second, per_minute) = (self.settings.per_second as usize, self.settings.per_minute as usize);
        let keep = if per_minute > 0 { Duration::from_secs(60) } else { Duration::from_secs(1) };
        while self.admitted.front().is_some_and(|t| now.duration_since(*t) >= keep) {
            self.admitted.pop_front();
        }
        if per_second == 0 && per_minute == 0 {
            return Ok(());
        }
        let n = self.admitted.len();
        let mut refusal: Option<Limited> = None;
        let in_last_second =
            self.admitted.iter().rev().take_while(|t| now.duration_since(**t) < Duration::from_secs(1)).count();
        if per_second > 0 && in_last_second >= per_second {
            // The window has room again once the (n - per_second)-th admission is a second old.
            let frees = self.admitted[n - per_second] + Duration::from_secs(1);
            refusal = Some(Limited { window: "second", retry_after: frees.saturating_duration_since(now) });
        }
        if per_minute > 0 && n >= per_minute {
            let frees = self.admitted[n - per_minute] + Duration::from_secs(60);
            let wait = frees.saturating_duration_since(now);
            if refusal.as_ref().is_none_or(|r| wait > r.retry_after) {
                refusal = Some(Limited { window: "minute", retry_after: wait });
            }
        }
        if let Some(refusal) = refusal {
            self.counts.rate_limited += 1;
            return Err(refusal);
        }
        self.admitted.push_back(now);
        Ok(())
    }

    // --- faults ---

    pub fn queue_fault(&mut self, fault: Fault, times: u32, on: Matcher) {
        if times > 0 {
            self.faults.push_back(Queued { fault, left: times, on });
        }
    }

    /// The first queued fault that matches this request, used up by one.
    pub fn take_fault(&mut self, method: &str, path: &str) -> Option<Fault> {
        let i = self.faults.iter().position(|q| q.on.matches(method, path))?;
        let queued = &mut self.faults[i];
        queued.left -= 1;
        let fault = queued.fault.clone();
        if queued.left == 0 {
            self.faults.remove(i);
        }
        Some(fault)
    }

    /// A fault is about to be applied (from the header or the queue).
    pub fn fault_fired(&mut self) {
        self.counts.faults_fired += 1;
    }

    pub fn queued_faults(&self) -> Value {
        Value::Array(
            self.faults
                .iter()
                .map(|q| json!({"fault": q.fault.to_string(), "times": q.left, "on": q.on.to_string()}))
                .collect(),
        )
    }

    pub fn clear_faults(&mut self) -> usize {
        let n = self.faults.len();
        self.faults.clear();
        n
    }

    // --- writes ---

    /// A write with `key` arrives: `true` if no other write with it is being handled (it is now,
    /// until `end_write`); `false` (counted) if one is, as an ERP that refuses concurrent uses of
    /// a key answers (`409 request_in_progress`, Stripe's way).
    pub fn begin_write(&mut self, key: &str) -> bool {
        if self.in_flight.insert(key.to_string()) {
            return true;
        }
        self.counts.in_progress_refused += 1;
        false
    }

    /// The write with `key` is answered (or its client has gone and it is done).
    pub fn end_write(&mut self, key: &str) {
        self.in_flight.remove(key);
    }

    /// `POST /purchases`. `protocol` and `purchase_id` name a new purchase (called only when one
    /// is made). The same key with the same body gets the first answer again and changes nothing;
    /// with another body, 409.
    pub fn write(
        &mut self,
        key: Option<&str>,
        body: Value,
        fault: Option<&Fault>,
        mut names: impl FnMut() -> (String, String),
        now: Instant,
    ) -> Reply {
        self.counts.writes_received += 1;
        if let Some(key) = key {
            *self.writes_by_key.entry(key.to_string()).or_default() += 1;
        }
        if let Some(key) = key {
            if let Some(entry) = self.keys.get(key) {
                if entry.body != body {
                    return reply(409, json!({"error": "idempotency_key_reused", "idempotency_key": key}));
                }
                return Reply { replayed: true, ..entry.reply.clone() };
            }
        } else if self.settings.require_idempotency_key {
            return reply(400, json!({"error": "idempotency_key_required"}));
        }
        let order = match order_of(&body) {
            Ok(order) => order,
            Err(detail) => return reply(400, json!({"error": "invalid_body", "detail": detail})),
        };
        let (outcome, answer) = match fault {
            Some(Fault::Refuse(code)) => (Outcome::Refused(code.clone()), reply(422, json!({"error": code}))),
            Some(Fault::Failed(code)) => {
                (Outcome::Refused(code.clone()), reply(200, json!({"status": "FAILED", "error": code})))
            }
            _ => {
                let (protocol, id) = names();
                let rejected_with = match fault {
                    Some(Fault::RejectLater(code) | Fault::PendingBare(Some(code))) => Some(code.clone()),
                    _ => None,
                };
                let at_once = (self.settings.synchronous && fault.is_none()) || matches!(fault, Some(Fault::Answer(_)));
                let ready_at = if at_once { now } else { now + self.settings.async_delay };
                let purchase = Purchase {
                    id,
                    protocol: protocol.clone(),
                    key: key.map(str::to_string),
                    order,
                    ready_at,
                    rejected_with,
                };
                self.purchases.push(purchase);
                self.protocols.insert(protocol.clone(), self.purchases.len() - 1);
                let answer = match fault {
                    Some(Fault::PendingBare(_)) => json!({"status": "PENDING"}),
                    Some(Fault::Worded(word)) => json!({"status": word}),
                    Some(Fault::Answer(json)) => serde_json::from_str(json).unwrap_or(Value::Null),
                    _ if at_once => self.purchase_state(&self.purchases[self.purchases.len() - 1], now),
                    _ => json!({"protocol": protocol, "status": "PENDING"}),
                };
                (Outcome::Accepted(self.purchases.len() - 1), reply(200, answer))
            }
        };
        if let Some(key) = key {
            self.keys.insert(key.to_string(), KeyEntry { body, reply: answer.clone(), outcome });
        }
        answer
    }

    // --- reads ---

    /// `GET /protocols/{protocol}`; `None` if there is no such protocol.
    pub fn protocol(&self, protocol: &str, now: Instant) -> Option<Value> {
        self.protocols.get(protocol).map(|i| self.purchase_state(&self.purchases[*i], now))
    }

    /// The state query by key, answered to a client (counted as `state_queries`).
    pub fn query_key(&mut self, key: &str, now: Instant) -> Value {
        self.counts.state_queries += 1;
        self.by_key(key, now)
    }

    /// The state query by key: `NOT_FOUND`, `PENDING`, `DONE` with the result, or `REJECTED`
    /// with the error.
    pub fn by_key(&self, key: &str, now: Instant) -> Value {
        match self.keys.get(key).map(|e| &e.outcome) {
            None => json!({"idempotency_key": key, "status": "NOT_FOUND"}),
            Some(Outcome::Refused(code)) => json!({"idempotency_key": key, "status": "REJECTED", "error": code}),
            Some(Outcome::Accepted(i)) => self.purchase_state(&self.purchases[*i], now),
        }
    }

    /// Every purchase made, in order, with its state.
    pub fn purchases(&self, now: Instant) -> Value {
        Value::Array(self.purchases.iter().map(|p| self.purchase_state(p, now)).collect())
    }

    fn purchase_state(&self, p: &Purchase, now: Instant) -> Value {
        let mut state = Map::new();
        state.insert("protocol".into(), json!(p.protocol));
        state.insert("idempotency_key".into(), json!(p.key));
        match status_of(p, now) {
            Status::Pending => {
                state.insert("status".into(), json!("PENDING"));
            }
            Status::Done => {
                state.insert("status".into(), json!("DONE"));
                let o = &p.order;
                let result = json!({
                    "purchase_id": p.id, "tenant": o.tenant, "order_id": o.order_id,
                    "part": o.part, "quantity": o.quantity, "value": o.value,
                });
                state.insert("result".into(), result);
            }
            Status::Rejected(code) => {
                state.insert("status".into(), json!("REJECTED"));
                state.insert("error".into(), json!(code));
            }
        }
        Value::Object(state)
    }

    /// `GET /_fake/effects`: what the ERP did. An effect is a purchase accepted and not rejected,
    /// `PENDING` or `DONE` (an accepted purchase is done by the ERP whatever the client does next).
    pub fn effects(&self, now: Instant) -> Value {
        let (mut done, mut pending, mut rejected) = (0u64, 0u64, 0u64);
        let mut by_key = BTreeMap::new();
        let mut by_order: BTreeMap<String, u64> = BTreeMap::new();
        for p in &self.purchases {
            let status = status_of(p, now);
            let effect = match status {
                Status::Pending => {
                    pending += 1;
                    1
                }
                Status::Done => {
                    done += 1;
                    1
                }
                Status::Rejected(_) => {
                    rejected += 1;
                    0
                }
            };
            *by_order.entry(format!("{}/{}", p.order.tenant, p.order.order_id)).or_default() += effect;
            if let Some(key) = &p.key {
                by_key.insert(key.clone(), json!({"status": status.word(), "effects": effect}));
            }
        }
        for (key, entry) in &self.keys {
            if let Outcome::Refused(code) = &entry.outcome {
                rejected += 1;
                by_key.insert(key.clone(), json!({"status": "REJECTED", "effects": 0, "error": code}));
            }
        }
        let c = &self.counts;
        json!({
            "effects": done + pending,
            "done": done,
            "pending": pending,
            "rejected": rejected,
            "by_key": by_key,
            "by_order": by_order,
            "writes_received": c.writes_received,
            "writes_by_key": self.writes_by_key,
            "in_progress_refused": c.in_progress_refused,
            "state_queries": c.state_queries,
            "refreshes": c.refreshes,
            "refused_refreshes": c.refused_refreshes,
            "unauthorized": c.unauthorized,
            "rate_limited": c.rate_limited,
            "faults_fired": c.faults_fired,
        })
    }
}

enum Status<'a> {
    Pending,
    Done,
    Rejected(&'a str),
}

impl Status<'_> {
    fn word(&self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Done => "DONE",
            Status::Rejected(_) => "REJECTED",
        }
    }
}

fn status_of(p: &Purchase, now: Instant) -> Status<'_> {
    match (&p.rejected_with, now >= p.ready_at) {
        (_, false) => Status::Pending,
        (None, true) => Status::Done,
        (Some(code), true) => Status::Rejected(code),
    }
}

fn reply(status: u16, body: Value) -> Reply {
    Reply { status, body, replayed: false }
}

/// A purchase order's fields: `tenant`, `order_id` (text or a whole number), `part`, `quantity`
/// (a whole number ≥ 1) and `value` (a number, or a decimal in a string); other fields are kept in
/// the body (they count for the key's comparison) and not read.
fn order_of(body: &Value) -> Result<Order, String> {
    let Some(fields) = body.as_object() else { return Err("the body is a JSON object".into()) };
    let text = |name: &str| match fields.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        _ => Err(format!("{name}: a non-empty string")),
    };
    let order_id = match fields.get("order_id") {
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => n.to_string(),
        _ => text("order_id").map_err(|_| "order_id: a non-empty string or a whole number".to_string())?,
    };
    let quantity = fields.get("quantity").and_then(Value::as_u64).filter(|q| *q >= 1);
    let quantity = quantity.ok_or("quantity: a whole number ≥ 1")?;
    let value = match fields.get("value") {
        Some(v @ Value::Number(_)) => v.clone(),
        Some(Value::String(s)) if s.trim().parse::<f64>().is_ok_and(f64::is_finite) => Value::String(s.clone()),
        _ => return Err("value: a number, or a decimal in a string".into()),
    };
    Ok(Order { tenant: text("tenant")?, order_id, part: text("part")?, quantity, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(per_second: u32, per_minute: u32) -> State {
        State::new(Settings { per_second, per_minute, ..Settings::default() }, "rt-0".into())
    }

    #[test]
    fn the_second_window_frees_a_second_after_the_oldest_admission_in_it() {
        let mut s = state(2, 0);
        let t0 = Instant::now();
        assert!(s.admit(t0).is_ok());
        assert!(s.admit(t0 + Duration::from_millis(300)).is_ok());
        let refused = s.admit(t0 + Duration::from_millis(400)).unwrap_err();
        assert_eq!(refused, Limited { window: "second", retry_after: Duration::from_millis(600) });
        assert_eq!(refused.retry_after_secs(), 1);
        assert!(s.admit(t0 + Duration::from_millis(1000)).is_ok());
    }

    #[test]
    fn the_minute_window_counts_sixty_seconds() {
        let mut s = state(0, 3);
        let t0 = Instant::now();
        for i in 0..3 {
            assert!(s.admit(t0 + Duration::from_secs(i * 5)).is_ok());
        }
        let refused = s.admit(t0 + Duration::from_secs(20)).unwrap_err();
        assert_eq!(refused, Limited { window: "minute", retry_after: Duration::from_secs(40) });
        assert_eq!(refused.retry_after_secs(), 40);
        assert!(s.admit(t0 + Duration::from_secs(60)).is_ok());
        assert!(s.admit(t0 + Duration::from_secs(61)).is_err());
    }

    #[test]
    fn orders_need_their_fields() {
        let good = json!({"tenant": "t", "order_id": 7, "part": "p", "quantity": 2, "value": "10.50"});
        let order = order_of(&good).unwrap();
        assert_eq!((order.order_id.as_str(), order.quantity), ("7", 2));
        for (field, bad) in
            [("quantity", json!(0)), ("quantity", json!(1.5)), ("value", json!("ten")), ("tenant", json!(""))]
        {
            let mut body = good.clone();
            body[field] = bad;
            assert!(order_of(&body).unwrap_err().starts_with(field), "{field}");
        }
    }

    #[test]
    fn settings_change_only_what_is_named() {
        let mut s = Settings::default();
        s.update(&json!({"per_second": 3, "async_delay_ms": 0})).unwrap();
        assert_eq!((s.per_second, s.per_minute, s.async_delay), (3, 600, Duration::ZERO));
        assert!(s.update(&json!({"per_hour": 1})).is_err());
        assert!(s.update(&json!({"per_second": -1})).is_err());
        assert_eq!(s.per_second, 3);
    }
}
