//! The call in progress: the verified tenant, actor, role and conversation, held in the backend by
//! the gate from the moment the identity is verified until the entry point returns or fails. The
//! DBA's bound functions and their ERP's row-level security read it with `toolgate.current_tenant()`,
//! `current_actor()` and `current_conversation()`; outside a call they are NULL. Nothing in SQL
//! can set it: it is not a GUC, which any session may `SET`.

use pgrx::prelude::*;
use std::cell::RefCell;
use toolgate_core::token::Identity;

/// What the gate verified for the call in progress.
#[derive(Clone, Default)]
pub struct Context {
    pub tenant: Option<String>,
    pub actor: Option<String>,
    pub role: Option<String>,
    /// Every role the token carries (one, for a token with a single `role`).
    pub roles: Vec<String>,
    pub conversation: Option<String>,
    /// The proposal a confirmation applies.
    pub proposal: Option<String>,
}

thread_local! {
    static CURRENT: RefCell<Context> = RefCell::new(Context::default());
}

/// Held for one entry point's run: the context is empty again when it is dropped, on success,
/// on an error and on a panic alike.
pub struct Held;

impl Held {
    pub fn start() -> Held {
        CURRENT.set(Context::default());
        Held
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        CURRENT.set(Context::default());
    }
}

/// The identity step verified `who`.
pub fn identify(who: &Identity) {
    CURRENT.with_borrow_mut(|c| {
        c.tenant = Some(who.tenant.clone());
        c.actor = Some(who.sub.clone());
        c.role = Some(who.role.clone());
        c.roles = if who.roles.is_empty() { vec![who.role.clone()] } else { who.roles.clone() };
    });
}

/// A settlement resumes the call that made an outbox intent: what the gate verified then, as
/// the outbox kept it.
pub fn resume(call: Context) {
    CURRENT.set(call);
}

/// The call's conversation (a confirmation learns it from the proposal).
pub fn converse(conversation: &str) {
    CURRENT.with_borrow_mut(|c| c.conversation = Some(conversation.to_string()));
}

/// The proposal a confirmation applies.
pub fn proposal(id: &str) {
    CURRENT.with_borrow_mut(|c| c.proposal = Some(id.to_string()));
}

/// `f` of the context, borrowed.
pub fn with<T>(f: impl FnOnce(&Context) -> T) -> T {
    CURRENT.with_borrow(f)
}

/// The tenant of the call in progress, as its identity token proves it; NULL outside a call.
#[pg_extern(stable, parallel_restricted)]
fn current_tenant() -> Option<String> {
    CURRENT.with_borrow(|c| c.tenant.clone())
}

/// The actor (the token's subject) of the call in progress; NULL outside a call.
#[pg_extern(stable, parallel_restricted)]
fn current_actor() -> Option<String> {
    CURRENT.with_borrow(|c| c.actor.clone())
}

/// The conversation of the call in progress; NULL outside a call.
#[pg_extern(stable, parallel_restricted)]
fn current_conversation() -> Option<String> {
    CURRENT.with_borrow(|c| c.conversation.clone())
}
