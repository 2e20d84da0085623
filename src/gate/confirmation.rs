//! Step 7 (a write of tier ≥ 1 becomes a proposal a person must read) and the first half of
//! step 8 (`confirm`: a channel-signed answer bound to that exact proposal).

use serde_json::{json, Value};
use toolgate_core::consent::{self, Consent};
use toolgate_core::locale::Language;
use toolgate_core::outcome::{ProposalView, Reply, Rule};
use toolgate_core::token::{self, Confirmation, Identity};

use super::authorization::Policy;
use super::contract::Checked;
use super::domain::{self, Intent};
use super::identity::{refused, registered_key};
use super::step::{clock, Deny, Step};
use crate::{context, spi};

/// Store a proposal, superseding the live one of this person's conversation, and return what the
/// person sees.
#[cfg_attr(feature = "steps", inline(never))]
pub fn propose(
    who: &Identity,
    conversation: &str,
    tool: &str,
    args: &Checked,
    intent: &Intent,
    policy: &Policy,
    tier: i32,
) -> ProposalView {
    // The person reads the proposal, and answers it, in the tenant's language.
    let language = intent.locale.language;
    let challenge: Option<String> = (tier >= 3).then(|| {
        spi::one(
            "SELECT $1 || '-' || pg_catalog.upper(pg_catalog.substr(pg_catalog.md5(pg_catalog.gen_random_uuid()::text), 1, 6))",
            &[language.challenge_stem().into()],
            |r| spi::col::<String>(r, 1),
        )
        .expect("one row")
    });
    // Who says yes: the person who asked (in the console at a console-only tier), or (a row
    // naming approvers) the approvers.
    let hint = match policy.approvals_at(tier) {
        Some(rules) if rules.requester_only() => language.console_hint(tier, challenge.as_deref()),
        Some(_) => language.approval_hint(tier, challenge.as_deref()),
        None => language.consent_hint(tier, challenge.as_deref()),
    };
    let text = intent.text(&who.tenant, tier) + &hint;
    // One live proposal per conversation of each person (the conversation id is the caller's:
    // another person naming it supersedes nothing of this one's). The conversation's own row is
    // the lock: a concurrent proposal waits here for this one's transaction, then supersedes it
    // (no advisory lock, which any client could take and hold). The unique index on live
    // proposals backs it up.
    spi::run(
        "INSERT INTO toolgate.conversations AS c (tenant_id, actor, conversation_id, last_proposal_at) \
         VALUES ($1, $3, $2, pg_catalog.clock_timestamp()) ON CONFLICT (tenant_id, actor, conversation_id) \
         DO UPDATE SET last_proposal_at = excluded.last_proposal_at",
        &[who.tenant.as_str().into(), conversation.into(), who.sub.as_str().into()],
    );
    spi::run(
        "UPDATE toolgate.proposals SET status = 'superseded', decided_at = $3 \
         WHERE tenant_id = $1 AND actor = $4 AND conversation_id = $2 AND status = 'live'",
        &[
            who.tenant.as_str().into(),
            conversation.into(),
            pgrx::datum::clock_timestamp().into(),
            who.sub.as_str().into(),
        ],
    );
    spi::one(
        "INSERT INTO toolgate.proposals (tenant_id, conversation_id, actor, tool, target, args, \
         args_digest, idempotency_key, text, tier, challenge, schema_version, policy_version, status, \
         expires_at, amount, account, definition, language, currency, actor_iss, actor_roles) VALUES ($1, $2, $3, $4, \
         $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, 'live', \
         pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => $14), $15::numeric, $16, $17, $18, $19, $20, \
         $21) \
         RETURNING proposal_id::text, expires_at",
        &[
            who.tenant.as_str().into(),
            conversation.into(),
            who.sub.as_str().into(),
            tool.into(),
            intent.target().into(),
            crate::jsonb::arg(&args.value),
            args.digest.as_str().into(),
            args.str("idempotency_key").into(),
            text.as_str().into(),
            tier.into(),
            challenge.into(),
            args.schema_version.into(),
            policy.version.into(),
            policy.confirm_ttl_seconds.into(),
            intent.value().map(|a| a.to_string()).into(),
            intent.valued.as_ref().and_then(|v| v.account.clone()).into(),
            intent.binding.definition.as_str().into(),
            language.tag().into(),
            intent.valued.as_ref().map(|_| intent.locale.currency.code.clone()).into(),
            who.iss.as_deref().unwrap_or_default().into(),
            roles_of(who).into(),
        ],
        |r| Ok(ProposalView { id: spi::col(r, 1)?, text: text.clone(), tier, expires_at: spi::iso_utc(r, 2)? }),
    )
    .expect("INSERT … RETURNING returns the row")
}

/// Every role a verified identity carries.
pub fn roles_of(who: &Identity) -> Vec<String> {
    if who.roles.is_empty() {
        vec![who.role.clone()]
    } else {
        who.roles.clone()
    }
}

/// A proposal as `confirm` finds it.
pub struct Stored {
    pub id: String,
    pub tenant: String,
    pub conversation: String,
    pub actor: String,
    pub tool: String,
    pub target: String,
    pub args: Value,
    pub digest: String,
    pub key: String,
    pub tier: i32,
    pub challenge: Option<String>,
    /// Its status and whether it is unexpired, as `relock` reads them under the proposal's lock,
    /// or the status `claim` gave it (`load` leaves them unknown: `answer` claims a live
    /// proposal without reading them).
    pub status: String,
    pub unexpired: bool,
    pub created_epoch: f64,
    pub schema_version: i32,
    /// What the person read the decision on: the amount and the account (for a tool with a value
    /// function) and the digest of the tool's definition (`binding::Binding::definition`).
    pub amount: Option<String>,
    pub account: Option<String>,
    /// `None` for a proposal made before they were kept (an update from 0.1.0).
    pub definition: Option<String>,
    /// The language the proposal was written in (its answer is judged in it), and the currency
    /// of its amount.
    pub language: Language,
    pub currency: Option<String>,
    /// The reply of a decided (applied or declined) proposal, read by `relock`; `None` for any
    /// other.
    pub settled_reply: Option<String>,
    /// What the tool's target function found when `load` locked the proposal's target.
    pub locked_target: Option<domain::Locked>,
    /// The requester's verified issuer ('' for a key's token) and roles; `None` for a proposal
    /// made before 0.3.0.
    pub actor_iss: Option<String>,
    pub actor_roles: Option<Vec<String>>,
}

/// The confirmation token, verified against a channel key of the caller's tenant.
#[cfg_attr(feature = "steps", inline(never))]
pub fn verify_token(token: Option<&str>, who: &Identity) -> Step<Confirmation> {
    let deny = |e| refused(Rule::ConfirmationInvalid, e);
    let kid = token::key_id(token).map_err(deny)?;
    let key = registered_key(&kid);
    token::verify_confirmation(token.unwrap_or_default(), key.as_ref(), &who.tenant, clock::tokens()).map_err(deny)
}

fn not_live() -> Deny {
    Deny::because(Rule::ProposalNotLive, json!({"reason": "unknown"}))
}

/// The proposal a confirmation names, in the caller's tenant only, then its target locked
/// (`domain::lock_proposal_target`), the proposal not yet: `answer` locks it. Everything read
/// here is written once, when the proposal is made; its status is not read here.
#[cfg_attr(feature = "steps", inline(never))]
pub fn load(who: &Identity, id: &str) -> Step<Stored> {
    let id = uuid::Uuid::parse_str(id).map_err(|_| not_live())?.to_string();
    let mut stored = spi::one(
        "SELECT p.proposal_id::text, p.conversation_id, p.actor, p.tool, p.target, p.args, \
         p.args_digest, p.idempotency_key, p.tier, p.challenge, pg_catalog.date_part('epoch', p.created_at), \
         p.schema_version, p.amount::text, p.account, p.definition, p.language, p.currency, p.actor_iss, \
         p.actor_roles \
         FROM toolgate.proposals p WHERE p.proposal_id = $1::uuid AND p.tenant_id = $2",
        &[id.into(), who.tenant.as_str().into()],
        |r| {
            Ok(Stored {
                id: spi::col(r, 1)?,
                tenant: who.tenant.clone(),
                conversation: spi::col(r, 2)?,
                actor: spi::col(r, 3)?,
                tool: spi::col(r, 4)?,
                target: spi::col(r, 5)?,
                args: spi::col::<crate::jsonb::Read>(r, 6)?.0,
                digest: spi::col(r, 7)?,
                key: spi::col(r, 8)?,
                tier: spi::col(r, 9)?,
                challenge: r.get(10)?,
                status: String::new(),
                unexpired: false,
                created_epoch: spi::col(r, 11)?,
                schema_version: spi::col(r, 12)?,
                amount: r.get(13)?,
                account: r.get(14)?,
                definition: r.get(15)?,
                language: super::locale::language(r.get::<String>(16)?.as_deref()),
                currency: r.get(17)?,
                settled_reply: None,
                locked_target: None,
                actor_iss: r.get(18)?,
                actor_roles: r.get(19)?,
            })
        },
    )
    .ok_or_else(not_live)?;
    // The confirmation runs in the proposal's conversation, from its target function on.
    context::converse(&stored.conversation);
    context::proposal(&stored.id);
    stored.locked_target = domain::lock_proposal_target(who, &stored.tool, &stored.args);
    Ok(stored)
}

/// The proposal's status and expiry as they are now, under the proposal's lock, and the reply
/// of a decided one.
fn relock(p: &mut Stored) -> Step<()> {
    let (status, unexpired) = spi::one(
        "SELECT p.status, p.expires_at > pg_catalog.clock_timestamp() FROM toolgate.proposals p \
         WHERE p.proposal_id = $1::uuid AND p.tenant_id = $2 FOR UPDATE",
        &[p.id.as_str().into(), p.tenant.as_str().into()],
        |r| Ok((spi::col::<String>(r, 1)?, spi::col::<bool>(r, 2)?)),
    )
    .ok_or_else(not_live)?;
    p.status = status;
    p.unexpired = unexpired;
    // Only a decided proposal replays its reply. A statement of its own, after the lock: joined
    // into the locking one, the ledger would be read as it was before a concurrent confirmation of
    // this proposal committed.
    if decided(&p.status) {
        p.settled_reply = spi::one(
            "SELECT reply::text FROM toolgate.ledger WHERE tenant_id = $1 AND tool = $2 \
             AND idempotency_key = $3 AND proposal_id = $4::uuid AND state = 'settled'",
            &[p.tenant.as_str().into(), p.tool.as_str().into(), p.key.as_str().into(), p.id.as_str().into()],
            |r| spi::col::<String>(r, 1),
        );
    }
    Ok(())
}

/// The proposal `load` read, locked, and still live and unexpired (an expired one is marked so):
/// what an approver's decision needs before anything is written.
pub fn lock_live(p: &mut Stored) -> Step<()> {
    relock(p)?;
    if p.status != "live" || !p.unexpired {
        expire(p);
        let reason = if p.status == "live" { "expired" } else { p.status.as_str() };
        return Err(Deny::because(Rule::ProposalNotLive, json!({"reason": reason})));
    }
    Ok(())
}

/// A person already answered this proposal: its key holds the reply they got.
fn decided(status: &str) -> bool {
    matches!(status, "applied" | "declined")
}

/// What a person's answer means for this proposal.
pub enum Answer {
    /// Decided before: the reply it got then.
    Replay(Reply),
    Declined,
    Approved,
}

impl Answer {
    /// The status a proposal takes when this answer decides it.
    fn status(&self) -> Option<&'static str> {
        match self {
            Answer::Replay(_) => None,
            Answer::Declined => Some("declined"),
            Answer::Approved => Some("applied"),
        }
    }
}

/// The person's answer to the proposal `load` read and whose target it locked, and the proposal
/// locked and marked with it. An answer that decides it (the proposer's, newer than the
/// proposal, a yes or a no in the words its tier requires) marks it applied or declined in one
/// statement, which also locks it, if it is still live and unexpired; an approval that is then
/// refused puts it back (`reopen`). Any other answer, or a proposal no longer live, is judged on
/// the proposal as it is now, under its lock: a replay of its reply, or the refusal.
#[cfg_attr(feature = "steps", inline(never))]
pub fn answer(p: &mut Stored, who: &Identity, c: &Confirmation) -> Step<Answer> {
    if let Ok(answer) = judge_answer(p, who, c) {
        if claim(p, &answer) {
            return Ok(answer);
        }
    }
    relock(p)?;
    let judged = judge(p, who, c);
    if judged.is_err() {
        expire(p);
    }
    let answer = judged?;
    // Locked and judged live: only the clock can have moved since.
    if answer.status().is_some() && !claim(p, &answer) {
        decide(p, "expired");
        return Err(Deny::because(Rule::ProposalNotLive, json!({"reason": "expired"})));
    }
    Ok(answer)
}

/// Mark a live, unexpired proposal with what the answer decided, locking it; false if it is no
/// longer live or has expired (and nothing is written). The wall clock is a parameter, not
/// clock_timestamp() in the statement: Citus refuses a volatile function in an UPDATE of a
/// distributed table. The same moment is the decision's time and the one the expiry is judged
/// at.
#[cfg_attr(feature = "steps", inline(never))]
pub fn claim(p: &mut Stored, answer: &Answer) -> bool {
    let status = answer.status().expect("an answer that decides");
    let claimed = spi::run(
        "UPDATE toolgate.proposals SET status = $2, decided_at = $4 \
         WHERE tenant_id = $3 AND proposal_id = $1::uuid AND status = 'live' AND expires_at > $4 RETURNING 1",
        &[p.id.as_str().into(), status.into(), p.tenant.as_str().into(), pgrx::datum::clock_timestamp().into()],
    ) == 1;
    if claimed {
        status.clone_into(&mut p.status);
        p.unexpired = true;
    }
    claimed
}

/// An approval refused after `answer` marked the proposal applied (authorization, the domain
/// rules, the tier, the effect): the proposal is live again, as if it had not been answered. One
/// invalidated meanwhile (`same_definition`, `same_value`) stays so.
pub fn reopen(p: &Stored) {
    spi::run(
        "UPDATE toolgate.proposals SET status = 'live', decided_at = NULL \
         WHERE tenant_id = $2 AND proposal_id = $1::uuid AND status = 'applied'",
        &[p.id.as_str().into(), p.tenant.as_str().into()],
    );
}

/// Judge the answer: the proposal is live, the answer is the proposer's, newer than the proposal,
/// and says yes in the words the tier requires.
#[cfg_attr(feature = "steps", inline(never))]
pub fn judge(p: &Stored, who: &Identity, c: &Confirmation) -> Step<Answer> {
    // Only a decided proposal has one (see `relock`), and only the person who proposed it gets
    // it again: another person of the tenant holding the same answer learns nothing from it.
    if let Some(reply) = &p.settled_reply {
        if p.actor != who.sub {
            return Err(Deny::because(Rule::ConfirmationInvalid, json!({"reason": "other_actor"})));
        }
        let reply: Reply = serde_json::from_str(reply).expect("the ledger stores replies");
        return Ok(Answer::Replay(reply));
    }
    if p.status != "live" || !p.unexpired {
        let reason = if p.status == "live" { "expired" } else { p.status.as_str() };
        return Err(Deny::because(Rule::ProposalNotLive, json!({"reason": reason})));
    }
    judge_answer(p, who, c)
}

/// The answer itself, whatever the proposal's status: the proposer's, newer than the proposal,
/// and a yes or a no in the words the tier requires.
fn judge_answer(p: &Stored, who: &Identity, c: &Confirmation) -> Step<Answer> {
    if p.actor != who.sub {
        return Err(Deny::because(Rule::ConfirmationInvalid, json!({"reason": "other_actor"})));
    }
    // `at` has whole seconds: an answer in the proposal's own second counts as after it.
    if (c.at as f64) < p.created_epoch.floor() {
        return Err(Deny::because(Rule::ConfirmationInvalid, json!({"reason": "older_than_proposal"})));
    }
    match consent::judge(c, p.tier, p.language, p.challenge.as_deref()) {
        Consent::Declined => Ok(Answer::Declined),
        Consent::Approved => Ok(Answer::Approved),
        Consent::Insufficient => {
            Err(Deny::because(Rule::ConfirmationInvalid, json!({"reason": "consent_insufficient", "tier": p.tier})))
        }
    }
}

/// What the person consented to is still what would be applied: the tool's definition (its
/// schema version and `definition` digest) and, once the value is read again, the amount and the
/// account. Anything else is `confirmation_invalid` (`definition_changed`, `value_changed`): the
/// proposal is invalidated, nothing is applied, and the agent may propose again with the same key.
pub fn same_definition(p: &Stored, definition: Option<&str>, schema_version: Option<i32>) -> Step<()> {
    let Some(consented) = p.definition.as_deref() else { return Ok(()) };
    if definition == Some(consented) && schema_version == Some(p.schema_version) {
        return Ok(());
    }
    decide(p, "invalidated");
    Err(Deny::because(Rule::ConfirmationInvalid, json!({"reason": "definition_changed"})))
}

/// See `same_definition`: the value read now against the one the person read.
pub fn same_value(p: &Stored, intent: &Intent) -> Step<()> {
    if p.definition.is_none() {
        return Ok(());
    }
    let now = intent.valued.as_ref();
    // The same digits in another currency are another amount.
    let currency_now = now.map(|_| intent.locale.currency.code.as_str());
    if p.currency.is_some() && currency_now != p.currency.as_deref() {
        decide(p, "invalidated");
        return Err(Deny::because(
            Rule::ConfirmationInvalid,
            json!({"reason": "value_changed", "currency": p.currency, "currency_now": currency_now}),
        ));
    }
    let amount_now = now.map(|v| v.amount);
    let amount_then = p.amount.as_deref().and_then(|a| a.parse::<rust_decimal::Decimal>().ok());
    let account_now = now.and_then(|v| v.account.as_deref());
    if amount_now == amount_then && account_now == p.account.as_deref() {
        return Ok(());
    }
    decide(p, "invalidated");
    Err(Deny::because(
        Rule::ConfirmationInvalid,
        json!({"reason": "value_changed", "amount": p.amount, "amount_now": amount_now.map(|a| a.to_string()),
               "account": p.account, "account_now": account_now}),
    ))
}

/// Mark a proposal `answer` read or locked with what became of it without a person's decision:
/// invalidated or expired. The wall clock is a parameter, as in `claim`.
pub fn decide(p: &Stored, status: &'static str) {
    spi::run(
        "UPDATE toolgate.proposals SET status = $2, decided_at = $4 \
         WHERE tenant_id = $3 AND proposal_id = $1::uuid",
        &[p.id.as_str().into(), status.into(), p.tenant.as_str().into(), pgrx::datum::clock_timestamp().into()],
    );
}

/// Mark an expired proposal as such, so the panel and the ledger stop treating it as live.
fn expire(p: &Stored) {
    if p.status == "live" && !p.unexpired {
        decide(p, "expired");
    }
}
