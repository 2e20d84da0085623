//! The vocabulary every step of the gate shares, at the bottom of `gate/`: a step's refusal
//! (`Deny`), its result (`Step`), the steps by name (`StepName`) and the clock tokens are judged
//! by. It imports nothing of the gate; the steps, the audit and the orchestrator (`mod.rs`) import
//! it, so the calls go one way: `mod.rs` calls the steps, never the reverse.

use serde_json::Value;
use toolgate_core::contract::Violation;
use toolgate_core::outcome::{Reply, Rule};

/// A step's refusal: the rule, what the audit may keep of why, and the contract's paths.
pub struct Deny {
    pub rule: Rule,
    pub detail: Value,
    pub errors: Vec<Violation>,
    /// The refusal of a bound function's answer (`scope::invoke`): the scope it was called in
    /// keeps nothing when this refusal ends it, whenever it is given (see `scope::scope`).
    pub undo: bool,
}

impl Deny {
    pub fn new(rule: Rule) -> Deny {
        Deny { rule, detail: Value::Null, errors: Vec::new(), undo: false }
    }
    pub fn because(rule: Rule, detail: Value) -> Deny {
        Deny { rule, detail, errors: Vec::new(), undo: false }
    }
    pub fn schema(errors: Vec<Violation>) -> Deny {
        Deny { rule: Rule::SchemaInvalid, detail: Value::Null, errors, undo: false }
    }
    pub fn reply(self) -> Reply {
        if self.rule == Rule::SchemaInvalid {
            Reply::schema_invalid(self.errors)
        } else if self.rule == Rule::LimitExceeded {
            Reply::limit_exceeded(self.detail)
        } else {
            Reply::denied(self.rule)
        }
    }
}

pub type Step<T> = Result<T, Deny>;

/// The gate's steps by name (docs/architecture.md §5), as `Audit::step` records their verdicts
/// and `explain_call` shows them. `as_str` is the name the audit and `explain_call` keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepName {
    /// 1: who calls.
    Identity,
    /// 2: the conversation id, the tool and its arguments.
    Contract,
    /// 3: the ledger key.
    Idempotency,
    /// 4: the kill switch, the policy row, the role, the target (and a reader's answer).
    Authorization,
    /// 5: the target's state and the value.
    Domain,
    /// 6: the conversation's calls of the tool, and the tenant's limits over time.
    Quota,
    /// 7: a proposal, and a person's answer to it.
    Confirmation,
    /// 8: the change.
    Effect,
}

impl StepName {
    pub fn as_str(self) -> &'static str {
        match self {
            StepName::Identity => "identity",
            StepName::Contract => "contract",
            StepName::Idempotency => "idempotency",
            StepName::Authorization => "authorization",
            StepName::Domain => "domain",
            StepName::Quota => "quota",
            StepName::Confirmation => "confirmation",
            StepName::Effect => "effect",
        }
    }
}

pub mod clock {
    /// The wall clock at the moment of the check, in whole seconds since the epoch: the clock
    /// tokens are judged by. Not the transaction's or the statement's start: a procedure that
    /// sleeps and commits between calls, or one long statement, must not carry an expired token.
    pub fn now() -> i64 {
        // TimestampTz counts microseconds since 2000-01-01.
        let ts = unsafe { pgrx::pg_sys::GetCurrentTimestamp() };
        ts.div_euclid(1_000_000) + 946_684_800
    }

    /// The clock tokens are judged by, with the configured longest lifetime and clock skew.
    pub fn tokens() -> toolgate_core::token::Clock {
        toolgate_core::token::Clock {
            now: now(),
            max_lifetime: i64::from(crate::MAX_TOKEN_LIFETIME.get()),
            skew: i64::from(crate::CLOCK_SKEW.get()),
        }
    }
}
