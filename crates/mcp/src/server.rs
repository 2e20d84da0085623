//! The MCP handler: `tools/list` is the gate's `toolgate.tools`, `tools/call` is `toolgate.call`
//! or `toolgate.read`, and a proposal is put to the person with `elicitation/create` within the
//! same call. The server judges nothing: what the person answered goes to `toolgate.confirm`,
//! signed with the channel key, and the gate's outcome comes back whole.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams, ElicitationAction,
    ElicitationSchema, Implementation, InitializeResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{ElicitationMode, NotificationContext, Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolgate_core::token::{Confirmation, Decision, Signer, Via};

use crate::config::{Config, Identity};
use crate::gate::{Gate, GateError};

/// Deliberately broken behaviours for the evals to catch (`--features broken` only).
#[cfg(feature = "broken")]
#[path = "broken.rs"]
pub mod broken;

/// The server's own tool: apply what the person answered through the gateway's channel.
pub const CONFIRM_PROPOSAL: &str = "confirm_proposal";
/// How long a confirmation token the server signs lives.
const CONFIRMATION_TTL: i64 = 300;
/// How often the tools are read again for `notifications/tools/list_changed`.
const TOOLS_WATCH_EVERY: Duration = Duration::from_secs(2);

/// The handler `toolgate mcp` serves: cheap to clone, its state shared with the task that watches
/// the tools for changes.
#[derive(Clone)]
pub struct ToolgateServer(Arc<Shared>);

/// The state of a [`ToolgateServer`].
pub struct Shared {
    gate: Gate,
    identity: Identity,
    channel: Option<Signer>,
    conversation: String,
    confirm_wait: Duration,
    message_file: Option<PathBuf>,
    /// The tools as the client was last given them or the watch last read them, by name.
    seen: std::sync::Mutex<Option<Vec<Tool>>>,
    /// The deliberately broken behaviour `TOOLGATE_MCP_BROKEN` names (`--features broken` only).
    #[cfg(feature = "broken")]
    broken: Option<broken::Broken>,
}

impl Deref for ToolgateServer {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl ToolgateServer {
    pub fn new(config: Config) -> ToolgateServer {
        ToolgateServer(Arc::new(Shared {
            gate: Gate::new(config.database),
            identity: config.identity,
            channel: config.channel,
            conversation: config.conversation,
            confirm_wait: config.confirm_wait,
            message_file: config.message_file,
            seen: std::sync::Mutex::new(None),
            #[cfg(feature = "broken")]
            broken: broken::Broken::from_env(),
        }))
    }

    /// Read the tools every [`TOOLS_WATCH_EVERY`] and send `notifications/tools/list_changed`
    /// whenever what a client is shown of them (names, schemas, descriptions, annotations) differs
    /// from what it was last given or the last reading, until the client is gone. A reading that
    /// fails is skipped.
    async fn watch_tools(self, peer: Peer<RoleServer>) {
        let mut every = tokio::time::interval(TOOLS_WATCH_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if peer.is_transport_closed() {
                return;
            }
            let Ok(tools) = self.tools().await else { continue };
            if self.remember(&tools) && peer.notify_tool_list_changed().await.is_err() {
                return;
            }
        }
    }

    /// Keep `tools` as the listing the client has, or will be told of; true if it differs from
    /// the one kept before.
    fn remember(&self, tools: &[(Tool, bool)]) -> bool {
        let mut now: Vec<Tool> = tools.iter().map(|(t, _)| t.clone()).collect();
        now.sort_by(|a, b| a.name.cmp(&b.name));
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let changed = seen.as_ref().is_some_and(|before| *before != now);
        *seen = Some(now);
        changed
    }

    /// The gate's tools for the caller, and the server's own.
    async fn tools(&self) -> Result<Vec<(Tool, bool)>, String> {
        let identity = self.identity.token()?;
        let listing = self.gate.tools(&identity).await.map_err(|e| e.to_string())?;
        if listing["outcome"] != "SUCCEEDED" {
            // A refused identity: the gate's own short text, no tool.
            return Err(outcome_text(&listing));
        }
        let rows = listing["result"]["tools"].as_array().cloned().unwrap_or_default();
        let mut tools = Vec::with_capacity(rows.len() + 1);
        for row in rows {
            let (Some(name), Some(schema)) = (row["name"].as_str(), row["inputSchema"].as_object()) else {
                eprintln!("toolgate mcp: a tool row without a name or an object schema was left out");
                continue;
            };
            let read = row["kind"] == "read";
            let annotations = if read {
                ToolAnnotations::new().read_only(true)
            } else {
                ToolAnnotations::new().read_only(false).destructive(true).idempotent(true)
            };
            let description = row["description"].as_str().map(|d| Cow::Owned(d.to_string()));
            let tool = Tool::new_with_raw(name.to_string(), description, Arc::new(schema.clone()))
                .with_annotations(annotations);
            tools.push((tool, read));
        }
        if self.message_file.is_some() {
            tools.push((confirm_proposal_tool(), false));
        }
        Ok(tools)
    }

    async fn call(&self, name: &str, args: Value, context: &RequestContext<RoleServer>) -> CallToolResult {
        let identity = match self.identity.token() {
            Ok(t) => t,
            Err(e) => return message(&e, true),
        };
        #[cfg(feature = "broken")]
        let (args, said) = self.broken_take_answer(args);
        if name == CONFIRM_PROPOSAL && self.message_file.is_some() {
            #[cfg(feature = "broken")]
            if let (Some((decision, text)), Some(id)) = (&said, args["proposal_id"].as_str()) {
                return self.sign_and_confirm(&identity, id, *decision, text.clone()).await;
            }
            return self.confirm_proposal(&identity, &args).await;
        }
        // A read goes to toolgate.read; anything else, a tool the listing lacks too, to toolgate.call.
        let read = match self.tools().await {
            Ok(tools) => tools.iter().any(|(t, read)| *read && t.name == name),
            Err(_) => false,
        };
        let outcome = if read {
            self.gate.read(&identity, name, &args).await
        } else {
            self.gate.call(&identity, &self.conversation, name, &args).await
        };
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => return gate_error(&e),
        };
        if outcome["outcome"] == "NEEDS_CONFIRMATION" {
            #[cfg(feature = "broken")]
            if let (Some((decision, text)), Some(id)) = (said, outcome["proposal"]["id"].as_str()) {
                return self.sign_and_confirm(&identity, id, decision, text).await;
            }
            return self.ask(&identity, outcome, context).await;
        }
        result(outcome)
    }

    /// Put a proposal to the person within the call; return what the gate made of the answer, or
    /// the proposal itself when there is no answer to give.
    async fn ask(&self, identity: &str, outcome: Value, context: &RequestContext<RoleServer>) -> CallToolResult {
        let proposal = &outcome["proposal"];
        let (Some(id), Some(text)) = (proposal["id"].as_str(), proposal["text"].as_str()) else {
            return pending(outcome, "the proposal came without an id or a text");
        };
        let tier = proposal["tier"].as_i64().unwrap_or(1);
        if self.channel.is_none() {
            return pending(outcome, "this server has no channel key to carry the answer");
        }
        if !context.peer.supported_elicitation_modes().contains(&ElicitationMode::Form) {
            return self.unanswered(identity, outcome, "this client cannot ask the person").await;
        }
        let now = now_millis();
        let left = proposal["expires_at"].as_str().and_then(epoch_millis).map_or(0, |exp| exp.saturating_sub(now));
        let wait = self.confirm_wait.min(Duration::from_millis(left.max(0) as u64));
        if wait.is_zero() {
            return pending(outcome, "the proposal expires before the person could answer");
        }
        let request = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: question(text, tier),
            requested_schema: answer_schema(tier),
        };
        let answer = tokio::select! {
            answer = context.peer.create_elicitation_with_timeout(request, Some(wait)) => answer,
            _ = context.ct.cancelled() => return pending(outcome, "the call was cancelled"),
        };
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                eprintln!("toolgate mcp: no answer from the person: {e}");
                return self.unanswered(identity, outcome, "no answer came from the person").await;
            }
        };
        let field = |name: &str| answer.content.as_ref().map(|c| c[name].clone()).unwrap_or(Value::Null);
        let (decision, said) = match answer.action {
            ElicitationAction::Accept if tier >= 3 => {
                (Decision::Approve, field("word").as_str().unwrap_or("").to_string())
            }
            ElicitationAction::Accept => match field("confirm") {
                Value::Bool(true) => (Decision::Approve, "sim".to_string()),
                Value::Bool(false) => (Decision::Decline, String::new()),
                _ => return pending(outcome, "the person's answer carried no decision"),
            },
            ElicitationAction::Decline | ElicitationAction::Cancel => (Decision::Decline, String::new()),
            _ => return pending(outcome, "the person's answer was not understood"),
        };
        self.sign_and_confirm(identity, id, decision, said).await
    }

    /// Sign what the person answered to proposal `id` with the channel key and hand it to
    /// `toolgate.confirm`.
    async fn sign_and_confirm(&self, identity: &str, id: &str, decision: Decision, said: String) -> CallToolResult {
        let Some(channel) = &self.channel else {
            return message("this server has no channel key to carry the answer; nothing was applied", true);
        };
        let now = now_millis() / 1000;
        let signed = channel.sign(&Confirmation {
            proposal: id.to_string(),
            decision,
            text: said,
            at: now,
            exp: now + CONFIRMATION_TTL,
            via: Via::Typed,
        });
        match self.gate.confirm(identity, &signed).await {
            Ok(o) => result(o),
            Err(e) => gate_error(&e),
        }
    }

    /// A proposal the person could not be asked about, or did not answer: it stays pending.
    async fn unanswered(&self, identity: &str, outcome: Value, why: &str) -> CallToolResult {
        #[cfg(feature = "broken")]
        if let Some(r) = self.broken_consent(identity, &outcome).await {
            return r;
        }
        #[cfg(not(feature = "broken"))]
        let _ = identity; // only a broken server reads it
        pending(outcome, why)
    }

    /// `confirm_proposal`: the newest answer the gateway wrote, if it is for this proposal.
    async fn confirm_proposal(&self, identity: &str, args: &Value) -> CallToolResult {
        let Some(wanted) = args["proposal_id"].as_str() else {
            return message("confirm_proposal takes one argument, proposal_id, a string", true);
        };
        let newest = self
            .message_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|text| text.lines().map(str::trim).rfind(|l| !l.is_empty()).map(String::from));
        #[cfg(feature = "broken")]
        if let Some(r) = self.broken_any_message(identity, wanted, newest.as_deref()).await {
            return r;
        }
        match newest {
            Some(token) if claimed_proposal(&token).as_deref() == Some(wanted) => {
                match self.gate.confirm(identity, &token).await {
                    Ok(o) => result(o),
                    Err(e) => gate_error(&e),
                }
            }
            _ => message(
                &format!("No message from the person for proposal {wanted}: nothing was applied. The person must answer it in their channel first."),
                true,
            ),
        }
    }
}

impl ServerHandler for ToolgateServer {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools gated by pg_toolgate. A write may need the person's confirmation: this server asks them. \
                 Never put a person's answer (such as \"sim\") in a tool argument.",
            )
    }

    /// Only versions with the initialize handshake: the person is asked with a request from
    /// server to client within the call, which protocol 2026-07-28 forbids.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    /// From now on the client hears when its tools change.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        tokio::spawn(self.clone().watch_tools(context.peer));
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        match self.tools().await {
            Ok(tools) => {
                self.remember(&tools);
                Ok(ListToolsResult::with_all_items(tools.into_iter().map(|(t, _)| t).collect()))
            }
            Err(e) => Err(McpError::internal_error(e, None)),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        Ok(self.call(&request.name, args, &context).await.into())
    }
}

fn confirm_proposal_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {"proposal_id": {
            "type": "string",
            "description": "proposal.id of the NEEDS_CONFIRMATION outcome the person answered in their channel"
        }},
        "required": ["proposal_id"],
        "additionalProperties": false
    });
    let Value::Object(schema) = schema else { unreachable!("an object literal") };
    Tool::new(
        CONFIRM_PROPOSAL,
        "Apply a proposal the person answered through their own channel: the gate checks the channel's \
         signed answer. Without an answer from the person nothing is applied.",
        Arc::new(schema),
    )
    .with_annotations(ToolAnnotations::new().read_only(false).destructive(true).idempotent(true))
}

/// What the person is asked: the proposal's text, and how to answer.
fn question(text: &str, tier: i64) -> String {
    if tier >= 3 {
        format!("{text}\n\nTo approve, type the challenge word shown above, exactly, in the field \"word\". To refuse, decline.")
    } else {
        format!("{text}\n\nTo approve, tick \"confirm\" and accept. To refuse, decline.")
    }
}

/// The form of the answer: a boolean at tiers 1 and 2, the challenge word at tier 3.
fn answer_schema(tier: i64) -> ElicitationSchema {
    let schema = if tier >= 3 {
        json!({"type": "object", "properties": {"word": {
            "type": "string", "title": "Challenge word", "description": "Type the challenge word shown in the message"
        }}, "required": ["word"]})
    } else {
        json!({"type": "object", "properties": {"confirm": {
            "type": "boolean", "title": "Confirm", "description": "Apply what the message describes"
        }}, "required": ["confirm"]})
    };
    serde_json::from_value(schema).expect("a valid elicitation schema")
}

/// The `proposal` claim of a compact JWS, read without verifying it (the gate verifies).
fn claimed_proposal(token: &str) -> Option<String> {
    unverified_claims(token)?["proposal"].as_str().map(String::from)
}

/// The claims of a compact JWS, unverified.
fn unverified_claims(token: &str) -> Option<Value> {
    let payload = token.split('.').nth(1)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?).ok()
}

/// The outcome's short text (`content[0].text`).
fn outcome_text(outcome: &Value) -> String {
    match outcome["content"][0]["text"].as_str() {
        Some(t) => t.to_string(),
        None => format!(
            "{} {}",
            outcome["outcome"].as_str().unwrap_or("NO_OUTCOME"),
            outcome["rule"].as_str().unwrap_or_default()
        )
        .trim_end()
        .to_string(),
    }
}

/// A tool result carrying the gate's whole outcome.
fn result(outcome: Value) -> CallToolResult {
    let text = outcome_text(&outcome);
    with_outcome(outcome, text)
}

fn with_outcome(outcome: Value, text: String) -> CallToolResult {
    let is_error = outcome["isError"].as_bool().unwrap_or(true);
    let mut r = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    r.structured_content = Some(outcome);
    r
}

/// A proposal nobody answered: nothing was applied; the person must answer in their channel.
fn pending(outcome: Value, why: &str) -> CallToolResult {
    let text = format!(
        "{} The person must answer this proposal before anything is applied ({why}); nothing was applied.",
        outcome_text(&outcome)
    );
    with_outcome(outcome, text)
}

/// A result of the server's own, without a gate outcome.
fn message(text: &str, is_error: bool) -> CallToolResult {
    if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    }
}

fn gate_error(e: &GateError) -> CallToolResult {
    message(&e.to_string(), true)
}

fn now_millis() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Milliseconds since the epoch of the gate's `expires_at` (`toolgate.iso_utc`, RFC 3339).
fn epoch_millis(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_times_parse() {
        assert_eq!(epoch_millis("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(epoch_millis("2026-12-02T09:30:15.250Z"), Some(1_796_203_815_250));
        assert_eq!(epoch_millis("2000-02-29T00:00:01Z"), Some(951_782_401_000));
        assert_eq!(epoch_millis("2026-12-02T09:30:15"), None);
        assert_eq!(epoch_millis("garbage"), None);
    }

    #[test]
    fn the_proposal_claim_is_read_unverified() {
        let signer = Signer::from_seed("chan-a", [3; 32]);
        let token = signer.sign(&json!({"proposal": "p-1", "decision": "approve"}));
        assert_eq!(claimed_proposal(&token).as_deref(), Some("p-1"));
        assert_eq!(claimed_proposal("a.b.c"), None);
        assert_eq!(claimed_proposal(""), None);
    }

    #[test]
    fn results_carry_the_outcome_and_its_text() {
        let o = json!({"outcome": "REJECTED", "isError": true, "content": [{"type": "text", "text": "no"}]});
        let r = result(o.clone());
        assert_eq!(r.is_error, Some(true));
        assert_eq!(r.structured_content, Some(o));
        let o = json!({"outcome": "NEEDS_CONFIRMATION", "isError": false, "proposal": {"id": "p"}});
        let r = pending(o, "why");
        assert_eq!(r.is_error, Some(false));
        let text = serde_json::to_value(&r.content).unwrap()[0]["text"].as_str().unwrap().to_string();
        assert!(text.starts_with("NEEDS_CONFIRMATION") && text.contains("must answer"), "{text}");
    }

    #[test]
    fn a_changed_listing_is_told_once() {
        let server = ToolgateServer::new(Config {
            database: tokio_postgres::Config::new(),
            identity: Identity::Token("t".into()),
            channel: None,
            conversation: "c".into(),
            confirm_wait: Duration::from_secs(1),
            message_file: None,
        });
        let tool = |name: &str, read: bool| (Tool::new(name.to_string(), "d", Arc::new(Default::default())), read);
        let (a, b) = (tool("a", true), tool("b", false));
        assert!(!server.remember(&[a.clone(), b.clone()]), "the first listing is no change");
        assert!(!server.remember(&[b.clone(), a.clone()]), "the order is no change");
        assert!(server.remember(std::slice::from_ref(&a)));
        assert!(!server.remember(std::slice::from_ref(&a)));
        let annotated = (a.0.clone().with_annotations(ToolAnnotations::new().read_only(true)), true);
        assert!(server.remember(&[annotated]), "new annotations are a change");
    }

    #[test]
    fn answer_forms_are_valid() {
        let s = serde_json::to_value(answer_schema(1)).unwrap();
        assert_eq!(s["properties"]["confirm"]["type"], "boolean");
        let s = serde_json::to_value(answer_schema(3)).unwrap();
        assert_eq!(s["required"], json!(["word"]));
    }
}
