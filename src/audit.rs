//! The audit row every call, confirmation and read leaves behind, and the LOG line every denial
//! writes. Neither ever holds a token or a raw argument: arguments appear only as `args_hmac`,
//! and the actor only as their pseudonym.

use pgrx::prelude::*;
use serde_json::{json, Map, Value};
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CString};
use std::time::Instant;
use toolgate_core::contract::audit_path;
use toolgate_core::digest::ArgsKey;
use toolgate_core::outcome::{Outcome, Reply};
use toolgate_core::token::Identity;

use crate::gate::step::{Deny, StepName};
use crate::spi;

thread_local! {
    /// Set while `explain_call` runs a call it will roll back: no LOG line for a dry run.
    static DRY_RUN: Cell<bool> = const { Cell::new(false) };
}

thread_local! {
    /// This node's Citus group once it is known not to be 0: a node keeps its group while it is
    /// in the cluster (a coordinator's, and a lone server's, is 0).
    static GROUP: Cell<i64> = const { Cell::new(0) };
}

/// The bits of an audit id the audit's sequence gives; the node's group is above them.
const AUDIT_SEQUENCE_BITS: u32 = 48;

/// The audit id of the sequence's next value `n` (the column's default): this node's Citus group
/// above bit 48, `n`'s low 48 bits below. Ids drawn on two nodes never collide, whatever the
/// order a DBA added nodes, moved shards or ran `toolgate.distribute()` in: no node's sequence
/// needs a range of its own. On one server, and on a coordinator, the id is `n`.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn node_audit_id(n: i64) -> i64 {
    (node_group() << AUDIT_SEQUENCE_BITS) | (n & ((1 << AUDIT_SEQUENCE_BITS) - 1))
}

/// This node's Citus group (`toolgate.node_group()`); 0 without Citus, which costs no statement.
/// A group of 0 is asked again next time: a server Citus makes a worker later gets another.
fn node_group() -> i64 {
    let known = GROUP.get();
    if known != 0 || !crate::citus_preloaded() {
        return known;
    }
    let group = spi::one("SELECT toolgate.node_group()", &[], |r| spi::col::<i32>(r, 1)).map_or(0, i64::from);
    GROUP.set(group);
    group
}

/// Run `f` as a dry run (its audit row is rolled back by the caller; no LOG line is written).
/// The flag is cleared however `f` ends, an ERROR included: a backend left in dry-run mode would
/// write no denial LOG lines from then on.
pub fn dry_run<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DRY_RUN.set(false);
        }
    }
    DRY_RUN.set(true);
    let _reset = Reset;
    f()
}

/// One step's verdict, kept for `explain_call`.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub step: StepName,
    pub rule: Option<&'static str>,
    pub detail: Value,
}

/// The audit's tenant for a call whose identity was not verified: never a tenant id (those match
/// `^[a-z0-9][a-z0-9._-]{0,62}$`), and never NULL, so the audit can be distributed by tenant.
pub const UNVERIFIED_TENANT: &str = "(unverified)";

/// What the audit row will say, filled in as the gate learns it.
pub struct Audit {
    kind: &'static str,
    tool: String,
    tenant: Option<String>,
    actor: Option<String>,
    role: Option<String>,
    conversation: Option<String>,
    target: Option<String>,
    proposal_id: Option<String>,
    args_hmac: Option<String>,
    schema_version: Option<i32>,
    policy_version: Option<i32>,
    /// The arguments' personal values (`"x-personal"`): the target is named by its pseudonym
    /// when it is one of them.
    personal: Vec<String>,
    detail: Map<String, Value>,
    pub steps: Vec<Verdict>,
    started: Instant,
}

impl Audit {
    pub fn start(kind: &'static str, tool: &str) -> Audit {
        Audit {
            kind,
            tool: tool.to_string(),
            tenant: None,
            actor: None,
            role: None,
            conversation: None,
            target: None,
            proposal_id: None,
            args_hmac: None,
            schema_version: None,
            policy_version: None,
            personal: Vec::new(),
            detail: Map::new(),
            // One verdict a step (`StepName`): room for all of them at once.
            steps: Vec::with_capacity(8),
            started: Instant::now(),
        }
    }

    /// Record a step's verdict and pass its result on.
    pub fn step<T>(&mut self, step: StepName, result: Result<T, Deny>) -> Result<T, Deny> {
        let (rule, detail) = match &result {
            Ok(_) => (None, Value::Null),
            Err(d) => (Some(d.rule.as_str()), d.detail.clone()),
        };
        // A step checked in parts (the contract's conversation id and arguments, the policy row
        // and the target) shows once: its last verdict.
        if self.steps.last().is_some_and(|v| v.step == step && v.rule.is_none()) {
            self.steps.pop();
        }
        self.steps.push(Verdict { step, rule, detail });
        result
    }

    /// Add what a passing step learned (quota left, tier…) to the last verdict and the detail.
    pub fn note(&mut self, key: &str, value: Value) {
        if let Some(last) = self.steps.last_mut() {
            if !last.detail.is_object() {
                last.detail = json!({});
            }
            last.detail[key] = value.clone();
        }
        self.detail.insert(key.to_string(), value);
    }

    pub fn identity(&mut self, who: &Identity) {
        self.tenant = Some(who.tenant.clone());
        self.actor = Some(who.sub.clone());
        self.role = Some(who.role.clone());
    }
    pub fn conversation(&mut self, id: &str) {
        self.conversation = Some(id.to_string());
    }
    pub fn tool(&mut self, tool: &str) {
        self.tool = tool.to_string();
    }
    pub fn target(&mut self, target: &str) {
        self.target = Some(target.to_string());
    }
    pub fn proposal(&mut self, id: &str) {
        self.proposal_id = Some(id.to_string());
    }
    pub fn args(&mut self, hmac: Option<String>, schema_version: Option<i32>) {
        self.args_hmac = hmac;
        self.schema_version = schema_version;
    }
    pub fn policy_version(&mut self, v: i32) {
        self.policy_version = Some(v);
    }
    /// The pseudonym of a personal value in the caller's tenant (a mark before the tenant is
    /// known: no key is made for a call whose identity failed).
    pub fn pseudonym(&self, value: &str) -> String {
        match &self.tenant {
            Some(tenant) => crate::erasure::pseudonym_of(tenant, value),
            None => "(personal)".to_string(),
        }
    }
    /// The arguments' personal values, which the audit names by pseudonym wherever it would
    /// name them (the target).
    pub fn personal(&mut self, values: Vec<String>) {
        self.personal = values;
    }

    /// The reply a denial gets; its detail joins the audit row.
    pub fn denied(&mut self, deny: Deny) -> Reply {
        if let Value::Object(map) = &deny.detail {
            self.detail.extend(map.clone());
        }
        if !deny.errors.is_empty() {
            // Where (bounded: a path's names may be the model's, or a secret it pasted) and which
            // keyword, never the message (it may quote the caller's input).
            let paths: Vec<Value> = deny
                .errors
                .iter()
                .map(|e| json!({"instancePath": audit_path(&e.instance_path), "keyword": e.keyword}))
                .collect();
            self.detail.insert("errors".into(), Value::Array(paths));
        }
        deny.reply()
    }

    /// Write the row, and for a denial the LOG line, in the caller's transaction.
    #[cfg_attr(feature = "steps", inline(never))]
    pub fn record(&self, reply: &Reply) {
        let rule = reply.rule.map(|r| r.as_str());
        let traced;
        let detail = match crate::trace_id() {
            Some(id) => {
                let mut with = self.detail.clone();
                with.insert("trace_id".into(), Value::String(id));
                traced = with;
                crate::jsonb::map_arg(&traced)
            }
            None => crate::jsonb::map_arg(&self.detail),
        };
        let duration_us = i64::try_from(self.started.elapsed().as_micros()).unwrap_or(i64::MAX);
        // The audit, and the LOG line, name the actor by their pseudonym
        // (docs/audit.md#erasure-of-a-person).
        let actor = match (&self.tenant, &self.actor) {
            (Some(tenant), Some(actor)) => Some(crate::erasure::pseudonym_of(tenant, actor)),
            _ => None,
        };
        let personal_target;
        let target = match &self.target {
            Some(t) if self.personal.contains(t) => {
                personal_target = self.pseudonym(t);
                Some(personal_target.as_str())
            }
            t => t.as_deref(),
        };
        spi::run(
            "INSERT INTO toolgate.audit (kind, tenant_id, conversation_id, actor, role, tool, target, \
             proposal_id, outcome, rule, replayed, detail, args_hmac, schema_version, policy_version, \
             duration_us) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::uuid, $9, $10, $11, $12::jsonb, $13, \
             $14, $15, $16)",
            &[
                self.kind.into(),
                self.tenant.as_deref().unwrap_or(UNVERIFIED_TENANT).into(),
                self.conversation.as_deref().into(),
                actor.as_deref().into(),
                self.role.as_deref().into(),
                self.tool.as_str().into(),
                target.into(),
                self.proposal_id.as_deref().into(),
                reply.outcome.as_str().into(),
                rule.into(),
                reply.replayed.into(),
                detail,
                self.args_hmac.as_deref().into(),
                self.schema_version.into(),
                self.policy_version.into(),
                duration_us.into(),
            ],
        );
        let denial = matches!(reply.outcome, Outcome::Rejected | Outcome::Blocked | Outcome::Cancelled);
        if (denial || crate::LOG_CALLS.get()) && !DRY_RUN.get() {
            let line = json!({
                "event": if denial { "toolgate_denial" } else { "toolgate_call" },
                "kind": self.kind,
                "tenant": self.tenant,
                "conversation": self.conversation,
                "actor": actor,
                "tool": self.tool,
                "target": target,
                "outcome": reply.outcome.as_str(),
                "rule": rule,
                "args_hmac": self.args_hmac,
            });
            log_server_only(&line.to_string());
        }
    }
}

/// The LOG line of a call refused before it could be judged (a read-only transaction, an internal
/// error): which entry point and why, nothing the caller sent.
pub fn log_refusal(entry: &str, reason: &str) {
    log_server_only(&json!({"event": "toolgate_refusal", "entry": entry, "reason": reason}).to_string());
}

/// One line in the server log, never sent to a client, without the statement or its context
/// (a caller may have put a token in the statement's text).
fn log_server_only(line: &str) {
    unsafe extern "C-unwind" {
        fn errstart(elevel: c_int, domain: *const c_char) -> bool;
        fn errfinish(filename: *const c_char, lineno: c_int, funcname: *const c_char);
    }
    let message = CString::new(line.replace('\0', "")).expect("NULs removed");
    unsafe {
        if errstart(pg_sys::LOG_SERVER_ONLY as c_int, std::ptr::null()) {
            pg_sys::errmsg_internal(c"%s".as_ptr(), message.as_ptr());
            pg_sys::errhidestmt(true);
            pg_sys::errhidecontext(true);
            errfinish(c"audit.rs".as_ptr(), 0, c"toolgate_denial".as_ptr());
        }
    }
}

thread_local! {
    static HMAC_KEY: RefCell<Option<(pg_sys::Oid, ArgsKey)>> = const { RefCell::new(None) };
}

/// The key of `args_hmac`, its HMAC schedule done, made by CREATE EXTENSION and kept for the
/// backend's life (it never changes while the extension exists). Only the extension owner can
/// read it.
pub fn hmac_key() -> ArgsKey {
    let schema = spi::schema_oid();
    if let Some(key) =
        HMAC_KEY.with_borrow(|k| k.as_ref().filter(|(oid, _)| *oid == schema).map(|(_, key)| key.clone()))
    {
        return key;
    }
    let secret = spi::one("SELECT secret FROM toolgate.audit_key WHERE key_id = 1", &[], |r| spi::col::<Vec<u8>>(r, 1))
        .expect("CREATE EXTENSION made the audit key");
    let key = ArgsKey::new(&secret);
    HMAC_KEY.set(Some((schema, key.clone())));
    key
}
