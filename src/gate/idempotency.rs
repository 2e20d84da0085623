//! Step 3: the idempotency ledger. The key is (tenant, tool, idempotency_key) and carries the
//! canonical digest of the arguments and the actor who first sent it. A call holds its key with a
//! lock no client can take (`xactlock`) until its transaction ends: a second call with the same
//! key waits for the first to commit or roll back, then reads what it left. The ledger's row is
//! written once, when the call is decided: settled with its reply, or pending with its proposal;
//! a denial writes none. A key answers only its own actor: another actor of the tenant who sends
//! it gets `idempotency_key_reused`, never the first actor's reply or proposal.

use pgrx::spi::SpiResult;
use serde_json::json;
use toolgate_core::outcome::{ProposalView, Reply, Rule};
use toolgate_core::token::Identity;

use super::contract::Checked;
use super::step::{Deny, Step};
use crate::jsonb::Jsonb;
use crate::{spi, xactlock};

/// A ledger key.
#[derive(Clone)]
pub struct Key {
    pub tenant: String,
    pub actor: String,
    pub tool: String,
    pub key: String,
    pub digest: String,
}

impl Key {
    pub fn of(who: &Identity, tool: &str, args: &Checked) -> Key {
        Key {
            tenant: who.tenant.clone(),
            actor: who.sub.clone(),
            tool: tool.to_string(),
            key: args.str("idempotency_key").to_string(),
            digest: args.digest.clone(),
        }
    }
}

/// What the ledger says about a key.
pub enum Reservation {
    /// This call holds the key until its transaction ends: go on through the gate.
    Owned(Held),
    /// The key was settled with these very arguments: this is the reply.
    Settled(Reply),
    /// A proposal is waiting for a person under this key: that same proposal.
    Pending(ProposalView),
}

struct Existing {
    actor: String,
    digest: String,
    state: String,
    reply: Option<String>,
    proposal: Option<ProposalView>,
}

/// What the ledger holds under `k`, the key held by this call until its transaction ends. A key
/// another call holds is first read without waiting: settled, it never changes again, and is
/// answered at once (a replay waits for nobody and writes nothing but its audit row); otherwise
/// this call waits for that one's transaction. A row not settled is read again under its row lock
/// (a confirmation settling it holds that one), with its proposal, because the caller may take
/// the key.
fn existing(k: &Key) -> Option<Existing> {
    let id = toolgate_core::digest::key_lock_id(&[&k.tenant, &k.tool, &k.key]);
    if !xactlock::try_hold(xactlock::LEDGER_KEY, id) {
        match read_existing(k, false) {
            Some(row) if row.state == "settled" => return Some(row),
            _ => xactlock::hold(xactlock::LEDGER_KEY, id),
        }
    }
    match read_existing(k, false) {
        Some(row) if row.state != "settled" => read_existing(k, true),
        found => found,
    }
}

/// Unlocked, only a settled row is used, and a settled row's proposal is never looked at: the
/// ledger alone is read. Locked, the key's proposal comes with it.
fn read_existing(k: &Key, lock: bool) -> Option<Existing> {
    spi::one(
        if lock {
            "SELECT l.args_digest, l.state, l.reply::text, l.actor, p.proposal_id::text, p.text, p.tier, \
             p.expires_at, (p.status = 'live' AND p.expires_at > pg_catalog.clock_timestamp()) \
             FROM toolgate.ledger l LEFT JOIN toolgate.proposals p ON p.tenant_id = l.tenant_id AND p.proposal_id = l.proposal_id \
             WHERE l.tenant_id = $1 AND l.tool = $2 AND l.idempotency_key = $3 FOR UPDATE OF l"
        } else {
            "SELECT args_digest, state, reply::text, actor FROM toolgate.ledger \
             WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3"
        },
        &[k.tenant.as_str().into(), k.tool.as_str().into(), k.key.as_str().into()],
        |r| {
            let proposal = if lock { live_proposal(r)? } else { None };
            Ok(Existing {
                digest: spi::col(r, 1)?,
                state: spi::col(r, 2)?,
                reply: r.get(3)?,
                actor: spi::col(r, 4)?,
                proposal,
            })
        },
    )
}

/// Columns 5 to 9 of the locked read: the key's proposal, if it is still live.
fn live_proposal(r: spi::Row) -> SpiResult<Option<ProposalView>> {
    let live: Option<bool> = r.get(9)?;
    Ok(match (live, r.get::<String>(5)?) {
        (Some(true), Some(id)) => {
            Some(ProposalView { id, text: spi::col(r, 6)?, tier: spi::col(r, 7)?, expires_at: spi::iso_utc(r, 8)? })
        }
        _ => None,
    })
}

/// Hold `k`, or learn what an earlier call with the same key left.
#[cfg_attr(feature = "steps", inline(never))]
pub fn reserve(k: Key) -> Step<Reservation> {
    let Some(row) = existing(&k) else { return Ok(Reservation::Owned(Held { key: k, row: false })) };
    // Another actor's key: neither its reply, nor its proposal, nor whether the arguments match.
    if row.actor != k.actor {
        return Err(Deny::because(Rule::IdempotencyKeyReused, json!({"reason": "other_actor"})));
    }
    if row.digest != k.digest {
        return Err(Deny::because(Rule::IdempotencyKeyReused, json!({"reason": "other_arguments"})));
    }
    match (row.state.as_str(), row.reply, row.proposal) {
        ("settled", Some(reply), _) => {
            let reply: Reply = serde_json::from_str(&reply).expect("the ledger stores replies");
            Ok(Reservation::Settled(reply))
        }
        ("pending", _, Some(view)) => Ok(Reservation::Pending(view)),
        // A proposal that expired or was superseded settled nothing: the key is this call's, and
        // its row is written over when the call is decided.
        _ => Ok(Reservation::Owned(Held { key: k, row: true })),
    }
}

/// A key this call holds until its transaction ends. Nothing is written for it until the call
/// is decided (a denial writes nothing): then its one row, or the row a dead proposal left
/// (`row`), written over.
pub struct Held {
    key: Key,
    row: bool,
}

impl Held {
    /// The key waits for a person's answer to `proposal_id`.
    #[cfg_attr(feature = "steps", inline(never))]
    pub fn pend(&self, proposal_id: &str) {
        let k = &self.key;
        if self.row {
            spi::run(
                "UPDATE toolgate.ledger SET state = 'pending', proposal_id = $4::uuid \
                 WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3",
                &[k.tenant.as_str().into(), k.tool.as_str().into(), k.key.as_str().into(), proposal_id.into()],
            );
        } else {
            insert(
                "INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state, proposal_id) \
                 VALUES ($1, $2, $3, $4, $5, 'pending', $6::uuid)",
                "INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state, proposal_id) \
                 VALUES ($1, $2, $3, $4, $5, 'pending', $6::uuid) ON CONFLICT DO NOTHING RETURNING 1",
                &[
                    k.tenant.as_str().into(),
                    k.tool.as_str().into(),
                    k.key.as_str().into(),
                    k.digest.as_str().into(),
                    k.actor.as_str().into(),
                    proposal_id.into(),
                ],
            );
        }
    }

    /// The key is done: every retry gets `reply` back. Returns the jsonb it was stored as.
    #[cfg_attr(feature = "steps", inline(never))]
    pub fn settle(&self, reply: &Reply) -> Jsonb {
        let k = &self.key;
        let stored = Jsonb::of(&reply.to_json());
        if self.row {
            spi::run(
                "UPDATE toolgate.ledger SET state = 'settled', proposal_id = NULL, reply = $4::jsonb, \
                 settled_at = pg_catalog.now() WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3",
                &[k.tenant.as_str().into(), k.tool.as_str().into(), k.key.as_str().into(), stored.arg()],
            );
        } else {
            insert(
                "INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state, reply, settled_at) \
                 VALUES ($1, $2, $3, $4, $5, 'settled', $6::jsonb, pg_catalog.now())",
                "INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state, reply, settled_at) \
                 VALUES ($1, $2, $3, $4, $5, 'settled', $6::jsonb, pg_catalog.now()) ON CONFLICT DO NOTHING RETURNING 1",
                &[
                    k.tenant.as_str().into(),
                    k.tool.as_str().into(),
                    k.key.as_str().into(),
                    k.digest.as_str().into(),
                    k.actor.as_str().into(),
                    stored.arg(),
                ],
            );
        }
        stored
    }
}

/// Insert the key's one row. It cannot be there already when the key was held and read empty,
/// but for a snapshot older than the call that wrote it (REPEATABLE READ or SERIALIZABLE): there the
/// insert is `ON CONFLICT DO NOTHING`, which raises 40001 on a row its snapshot cannot see, and a
/// row it could see (written around the key's lock) rolls the transaction back with 40001 here;
/// a retry replays. Under READ COMMITTED the key's lock keeps every other writer out, and the
/// insert is a plain one (a row written around the lock would fail it, 23505).
fn insert(plain: &'static str, on_conflict: &'static str, args: &[pgrx::datum::DatumWithOid]) {
    if !xactlock::one_snapshot() {
        spi::run(plain, args);
    } else if spi::run(on_conflict, args) != 1 {
        crate::error::GateError::ConcurrentKey.raise();
    }
}

/// A confirmation's key is done: every retry gets `reply` back (its row waited, pending).
/// Returns the jsonb it was stored as.
#[cfg_attr(feature = "steps", inline(never))]
pub fn settle(tenant: &str, tool: &str, key: &str, reply: &Reply) -> Jsonb {
    let stored = Jsonb::of(&reply.to_json());
    spi::run(
        "UPDATE toolgate.ledger SET state = 'settled', reply = $4::jsonb, settled_at = pg_catalog.now() \
         WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3",
        &[tenant.into(), tool.into(), key.into(), stored.arg()],
    );
    stored
}
