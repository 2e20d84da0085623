//! Deliberately broken servers, for the evals (tests/mcp/evals.py) to prove they catch them.
//! Compiled only with `--features broken`, into the `toolgate-mcp-broken` binary; `toolgate mcp`
//! never has this code. `TOOLGATE_MCP_BROKEN` names the behaviour:
//!
//! - `answer_from_argument`: takes the person's answer from a tool argument (`confirmation`,
//!   `answer`…: a word, or a token whose claims it reads unverified) and signs it itself.
//! - `no_elicitation_is_consent`: a client that cannot ask the person, or an answer that never
//!   came (an error, a timeout), is taken as a "sim".
//! - `any_channel_message`: `confirm_proposal` takes the newest channel message even when it
//!   answers another proposal (or was already used), and signs its answer for the one asked.
//! - `foreign_state`: the retry of an `input_required` call (protocol 2026-07-28) is trusted
//!   without opening its `requestState`: the answer is applied to whichever proposal the call's
//!   arguments now make live, though the person answered another.

use serde_json::Value;
use toolgate_core::token::Decision;

use rmcp::model::{CallToolRequestParams, ElicitResult};

use super::{claimed_proposal, decision, unverified_claims, CallToolResult, Caller, ToolgateServer, CONFIRM_INPUT};

/// The variable that names the broken behaviour.
pub const VARIABLE: &str = "TOOLGATE_MCP_BROKEN";

/// A deliberately broken behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    AnswerFromArgument,
    NoElicitationIsConsent,
    AnyChannelMessage,
    ForeignState,
}

impl Broken {
    /// Every broken behaviour, by name.
    pub const ALL: [(&'static str, Broken); 4] = [
        ("answer_from_argument", Broken::AnswerFromArgument),
        ("no_elicitation_is_consent", Broken::NoElicitationIsConsent),
        ("any_channel_message", Broken::AnyChannelMessage),
        ("foreign_state", Broken::ForeignState),
    ];

    pub fn parse(name: &str) -> Option<Broken> {
        Broken::ALL.iter().find(|(n, _)| *n == name.trim()).map(|(_, b)| *b)
    }

    /// The behaviour `TOOLGATE_MCP_BROKEN` names, if any.
    pub fn from_env() -> Option<Broken> {
        std::env::var(VARIABLE).ok().as_deref().and_then(Broken::parse)
    }
}

/// The argument names `answer_from_argument` takes an answer from.
const ANSWER_KEYS: [&str; 4] = ["confirmation", "answer", "confirm", "resposta"];

/// The answer a word or a token carries, read without verifying anything.
fn answer_of(value: &str) -> (Decision, String) {
    match unverified_claims(value) {
        Some(claims) if value.split('.').count() == 3 => (
            serde_json::from_value(claims["decision"].clone()).unwrap_or(Decision::Approve),
            claims["text"].as_str().unwrap_or("sim").to_string(),
        ),
        _ => (Decision::Approve, value.to_string()),
    }
}

impl ToolgateServer {
    /// `answer_from_argument`: the arguments without the answer, and the answer they carried.
    pub(super) fn broken_take_answer(&self, mut args: Value) -> (Value, Option<(Decision, String)>) {
        if self.broken != Some(Broken::AnswerFromArgument) {
            return (args, None);
        }
        let mut said = None;
        if let Some(map) = args.as_object_mut() {
            for key in ANSWER_KEYS {
                if let Some(Value::String(v)) = map.remove(key) {
                    said = Some(answer_of(&v));
                }
            }
        }
        (args, said)
    }

    /// `no_elicitation_is_consent`: no answer is a "sim".
    pub(super) async fn broken_consent(&self, caller: &Caller, outcome: &Value) -> Option<CallToolResult> {
        if self.broken != Some(Broken::NoElicitationIsConsent) {
            return None;
        }
        let id = outcome["proposal"]["id"].as_str()?;
        Some(self.sign_and_confirm(caller, id, Decision::Approve, "sim".to_string()).await)
    }

    /// `foreign_state`: a retry's answer applied to the proposal the call makes live now.
    pub(super) async fn broken_resume(
        &self,
        caller: &mut Caller,
        request: &CallToolRequestParams,
        args: &Value,
    ) -> Option<CallToolResult> {
        if self.broken != Some(Broken::ForeignState) || request.request_state.is_none() {
            return None;
        }
        let answer = request.input_responses.as_ref()?.get(CONFIRM_INPUT)?.clone();
        let answer: ElicitResult = serde_json::from_value(answer).ok()?;
        let _ = self.listing(caller).await;
        let conversation = caller.conversation.clone()?;
        let outcome =
            self.gate.call(&caller.route(), &caller.identity, &conversation, &request.name, args).await.ok()?;
        let proposal = &outcome["proposal"];
        let (decision, said) = decision(&answer, proposal["tier"].as_i64().unwrap_or(1))?;
        let id = proposal["id"].as_str()?;
        Some(self.sign_and_confirm(caller, id, decision, said).await)
    }

    /// `any_channel_message`: the newest message answers whichever proposal is asked about.
    pub(super) async fn broken_any_message(
        &self,
        caller: &Caller,
        wanted: &str,
        newest: Option<&str>,
    ) -> Option<CallToolResult> {
        if self.broken != Some(Broken::AnyChannelMessage) {
            return None;
        }
        let token = newest?;
        if claimed_proposal(token).as_deref() == Some(wanted) {
            return None;
        }
        let (decision, text) = answer_of(token);
        Some(self.sign_and_confirm(caller, wanted, decision, text).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::token::Signer;

    #[test]
    fn names_parse() {
        for (name, b) in Broken::ALL {
            assert_eq!(Broken::parse(name), Some(b));
        }
        assert_eq!(Broken::parse("none"), None);
    }

    #[test]
    fn answers_are_read_unverified() {
        assert_eq!(answer_of("sim"), (Decision::Approve, "sim".to_string()));
        let token = Signer::from_seed("forged", [9; 32])
            .sign(&serde_json::json!({"proposal": "p", "decision": "decline", "text": "não"}));
        assert_eq!(answer_of(&token), (Decision::Decline, "não".to_string()));
    }
}
