//! The Rust functions behind the SQL surface. None is granted to a client role: the entry points
//! in `sql/api.sql` are SECURITY DEFINER wrappers that pass `jsonb` arguments as text (so that a
//! number Rust cannot hold becomes `schema_invalid`, not an exception) and pin `search_path`.

use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::{json, Value};
use toolgate_core::contract::Contract;
use toolgate_core::token;

use crate::error::AdminError;
use crate::gate::{self, Call};
use crate::{audit, subxact};

#[pg_extern(volatile, parallel_unsafe)]
fn gate_request(tool: &str, identity: Option<&str>, conversation_id: Option<&str>, args: Option<&str>) -> JsonB {
    let (reply, _) = gate::request(&Call { tool, identity, conversation_id, args });
    JsonB(reply.to_json())
}

#[pg_extern(volatile, parallel_unsafe)]
fn gate_confirm(identity: Option<&str>, confirmation: Option<&str>) -> JsonB {
    JsonB(gate::confirm(identity, confirmation).to_json())
}

#[pg_extern(volatile, parallel_unsafe)]
fn gate_read_order(identity: Option<&str>, order_id: Option<&str>) -> JsonB {
    JsonB(gate::read_order(identity, order_id).to_json())
}

/// A dry run of a write call: the real gate in a subtransaction that is rolled back, so the
/// verdict is exactly what the call would get now, and nothing (audit, quota, ledger, proposal,
/// ERP) is kept.
#[pg_extern(volatile, parallel_unsafe)]
fn gate_explain(tool: &str, identity: Option<&str>, conversation_id: Option<&str>, args: Option<&str>) -> JsonB {
    let (reply, audit) =
        subxact::rolled_back(|| audit::dry_run(|| gate::request(&Call { tool, identity, conversation_id, args })));
    let steps: Vec<Value> = audit
        .steps
        .iter()
        .map(|v| {
            let mut step = json!({"step": v.step, "verdict": if v.rule.is_some() { "deny" } else { "pass" }});
            if let Some(rule) = v.rule {
                step["rule"] = json!(rule);
            }
            if !v.detail.is_null() {
                step["detail"] = v.detail.clone();
            }
            step
        })
        .collect();
    let decided_by = audit.steps.iter().find(|v| v.rule.is_some()).map(|v| v.step);
    JsonB(json!({
        "dry_run": true,
        "outcome": reply.outcome,
        "rule": reply.rule,
        "decided_by": decided_by,
        "steps": steps,
        "reply": reply.to_json(),
    }))
}

/// The 32 raw bytes of an Ed25519 public key given as JWK `x` or PEM.
#[pg_extern(immutable, strict, parallel_safe)]
fn parse_public_key(key: &str) -> Vec<u8> {
    token::parse_public_key(key).unwrap_or_else(|e| AdminError::PublicKey(e).raise()).to_vec()
}

/// Refuse a tool schema that does not compile as draft 2020-12 or reaches outside the database.
#[pg_extern(immutable, strict, parallel_safe)]
fn check_tool_schema(schema: JsonB) -> bool {
    Contract::compile(&schema.0).map(|_| true).unwrap_or_else(|e| AdminError::Schema(e).raise())
}

/// The role that called, as SET ROLE left it: inside a SECURITY DEFINER function `current_user`
/// is the owner, so privilege checks and "changed by" use this instead.
#[pg_extern(stable, parallel_safe)]
fn caller() -> String {
    unsafe {
        let name = pg_sys::GetUserNameFromId(pg_sys::GetOuterUserId(), false);
        std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned()
    }
}

/// Tell every backend that configuration table `relid` changed (called by its statement
/// trigger): their cached copies of keys, tools, policy rows and switches are dropped.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn signal_config_change(relid: pg_sys::Oid) {
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid(relid) }
}
