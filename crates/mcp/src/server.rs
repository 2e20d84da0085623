//! The MCP handler: `tools/list` is the gate's `toolgate.tools`, `tools/call` is `toolgate.call`
//! or `toolgate.read`, and a proposal is put to the person within the same call: with
//! `elicitation/create` (protocol 2025-06-18 and 2025-11-25, over stdio or in an HTTP session) or,
//! from 2026-07-28, an
//! `input_required` result whose `requestState` is sealed with the server's key and bound to the
//! caller, the conversation and the call. The server judges nothing: what the person answered goes
//! to `toolgate.confirm`, signed with the tenant's channel key, and the gate's outcome comes back
//! whole.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock, ElicitRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, Implementation, InitializeResult,
    InputRequest, InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion, RequestStateCodec,
    SealOptions, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{ElicitationMode, NotificationContext, Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolgate_core::token::{Confirmation, Decision, Signer, Via};

use crate::config::{Config, Transport};
use crate::gate::{Gate, GateError, RequestRecord, Route};

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
/// The JSON-RPC error of a `tools/list` whose identity token the gate refused (the
/// implementation-defined range: the request was well formed, the credential was not).
const IDENTITY_REFUSED: rmcp::model::ErrorCode = rmcp::model::ErrorCode(-32001);
/// The key of the person's question in an `input_required` result's `inputRequests`.
const CONFIRM_INPUT: &str = "confirm";

/// The handler `toolgate mcp` serves: cheap to clone, its state shared with the task that watches
/// the tools for changes (stdio) and with every request (HTTP).
#[derive(Clone)]
pub struct ToolgateServer(Arc<Shared>);

/// The state of a [`ToolgateServer`].
pub struct Shared {
    pub(crate) gate: Gate,
    pub(crate) transport: Transport,
    confirm_wait: Duration,
    /// Seals and opens the `requestState` of protocol 2026-07-28.
    states: RequestStateCodec,
    /// The tools as the client was last given them or the watch last read them, by name (stdio).
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

/// The gate's tools for one caller, and the tenant the gate found in their identity.
#[derive(Clone, Debug)]
pub struct Listing {
    pub tenant: String,
    /// Each tool, and whether it is a read.
    pub tools: Vec<(Tool, bool)>,
}

/// What the HTTP layer learned when it checked a request's bearer token with the gate.
#[derive(Clone, Debug)]
pub struct Verified(pub Arc<Listing>);

/// Who calls, in which conversation: from the process's configuration (stdio) or from the
/// request's headers (HTTP). Never from a tool argument.
pub(crate) struct Caller {
    identity: String,
    conversation: Option<String>,
    /// The gate's listing for this caller, once read (HTTP: when the bearer token was checked).
    listing: Option<Arc<Listing>>,
    /// HTTP: the `Toolgate-Channel-Message` header.
    header_message: Option<String>,
    /// In an MCP session: over stdio always; over HTTP with an `Mcp-Session-Id`.
    session: bool,
    /// HTTP: the request's trace id (its `traceparent`'s, or one of the server's own).
    trace: Option<String>,
    /// HTTP: where the request's log line learns the tool and the outcome.
    record: Option<Arc<RequestRecord>>,
}

impl Caller {
    fn tenant(&self) -> Option<&str> {
        self.listing.as_ref().map(|l| l.tenant.as_str())
    }

    /// Where the caller's calls go: their tenant's entry points when the gate listed the token.
    pub(crate) fn route(&self) -> Route<'_> {
        Route { tenant: self.tenant(), trace: self.trace.as_deref(), record: self.record.as_deref() }
    }
}

impl ToolgateServer {
    pub fn new(config: Config) -> Result<ToolgateServer, String> {
        let settings = config.session_settings();
        let states = RequestStateCodec::try_new(config.state_key).map_err(|e| format!("the state key: {e}"))?;
        Ok(ToolgateServer(Arc::new(Shared {
            gate: Gate::new(&config.database, settings, config.pool)?,
            transport: config.transport,
            confirm_wait: config.confirm_wait,
            states,
            seen: std::sync::Mutex::new(None),
            #[cfg(feature = "broken")]
            broken: broken::Broken::from_env(),
        })))
    }

    /// The codec `requestState` and `Mcp-Session-Id` are sealed with.
    pub(crate) fn states(&self) -> &RequestStateCodec {
        &self.states
    }

    fn is_http(&self) -> bool {
        matches!(self.transport, Transport::Http(_))
    }

    /// The caller of a request.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, String> {
        match &self.transport {
            Transport::Stdio(s) => Ok(Caller {
                identity: s.identity.token()?,
                conversation: Some(s.conversation.clone()),
                listing: None,
                header_message: None,
                session: true,
                trace: None,
                record: None,
            }),
            Transport::Http(_) => {
                let parts = context
                    .extensions
                    .get::<axum::http::request::Parts>()
                    .ok_or("a request without its HTTP headers")?;
                let header = |name: &str| {
                    parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
                };
                let identity = header("authorization")
                    .and_then(crate::request::bearer)
                    .ok_or("a request without a bearer token")?
                    .to_string();
                // The gate keys a conversation by tenant and person too: two people naming the
                // same one never share it.
                let session = header("mcp-session-id");
                let conversation = header("toolgate-conversation")
                    .map(String::from)
                    .or_else(|| session.map(crate::session::conversation_of));
                Ok(Caller {
                    identity,
                    conversation,
                    listing: parts.extensions.get::<Verified>().map(|v| v.0.clone()),
                    header_message: header("toolgate-channel-message").map(String::from),
                    session: session.is_some(),
                    trace: parts.extensions.get::<crate::request::Trace>().map(|t| t.0.clone()),
                    record: parts.extensions.get::<Arc<RequestRecord>>().cloned(),
                })
            }
        }
    }

    /// The caller's listing: the one the HTTP layer read, or the gate's now.
    async fn listing(&self, caller: &mut Caller) -> Result<Arc<Listing>, String> {
        if let Some(l) = &caller.listing {
            return Ok(l.clone());
        }
        let l = Arc::new(self.gate_listing(&caller.identity).await?);
        caller.listing = Some(l.clone());
        Ok(l)
    }

    /// The tenant's channel key: the process's (stdio) or the tenant's entry (HTTP).
    fn channel(&self, tenant: Option<&str>) -> Option<&Signer> {
        match &self.transport {
            Transport::Stdio(s) => s.channel.as_ref(),
            Transport::Http(h) => tenant.and_then(|t| h.channels.get(t)),
        }
    }

    /// What the host must do when the gate refuses the person's identity token.
    fn token_hint(&self) -> &'static str {
        match &self.transport {
            Transport::Stdio(_) => {
                "The person's identity token was refused (expired, revoked, or not for this server): put a fresh one \
                 in the file TOOLGATE_IDENTITY_TOKEN_FILE names (the server reads it again before the next request): \
                 `toolgate login --refresh` renews one toolgate login wrote, `toolgate login` signs the person in \
                 again. Then try again."
            }
            Transport::Http(_) => {
                "The person's identity token was refused (expired, revoked, or not for this server): the host must \
                 get a fresh one (sign in again) and send it as Authorization: Bearer, then try again."
            }
        }
    }

    /// Whether `confirm_proposal` is offered: a channel message can reach this server.
    fn offers_confirm_proposal(&self) -> bool {
        match &self.transport {
            Transport::Stdio(s) => s.message_file.is_some(),
            Transport::Http(_) => true,
        }
    }

    /// Read the tools every [`TOOLS_WATCH_EVERY`] and send `notifications/tools/list_changed`
    /// whenever what a client is shown of them (names, schemas, descriptions, annotations) differs
    /// from what it was last given or the last reading, until the client is gone. A reading that
    /// fails is skipped.
    async fn watch_tools(self, peer: Peer<RoleServer>) {
        let Transport::Stdio(stdio) = &self.transport else { return };
        let mut every = tokio::time::interval(TOOLS_WATCH_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if peer.is_transport_closed() {
                return;
            }
            let Ok(identity) = stdio.identity.token() else { continue };
            let Ok(listing) = self.gate_listing(&identity).await else { continue };
            if self.remember(&self.offered(&listing)) && peer.notify_tool_list_changed().await.is_err() {
                return;
            }
        }
    }

    /// Keep `tools` as the listing the client has, or will be told of; true if it differs from
    /// the one kept before.
    fn remember(&self, tools: &[Tool]) -> bool {
        let mut now = tools.to_vec();
        now.sort_by(|a, b| a.name.cmp(&b.name));
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let changed = seen.as_ref().is_some_and(|before| *before != now);
        *seen = Some(now);
        changed
    }

    /// The gate's tools for `identity`: `Err` with the gate's short text if it refuses the identity.
    pub(crate) async fn gate_listing(&self, identity: &str) -> Result<Listing, String> {
        let outcome = self.gate.tools(identity).await.map_err(|e| e.to_string())?;
        listing_of(&outcome)
    }

    /// What `tools/list` shows: the gate's tools, and the server's own.
    fn offered(&self, listing: &Listing) -> Vec<Tool> {
        let mut tools: Vec<Tool> = listing.tools.iter().map(|(t, _)| t.clone()).collect();
        if self.offers_confirm_proposal() {
            tools.push(confirm_proposal_tool());
        }
        tools
    }

    async fn call(
        &self,
        mut caller: Caller,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        #[cfg(feature = "broken")]
        if let Some(r) = self.broken_resume(&mut caller, &request, &args).await {
            return Ok(r.into());
        }
        if let Some(state) = &request.request_state {
            return self.resume(&mut caller, &name, &args, state, request.input_responses.as_ref()).await;
        }
        #[cfg(feature = "broken")]
        let (args, said) = self.broken_take_answer(args);
        // The tenant, and whether the tool is a read, from the listing; a refused identity goes to
        // toolgate.call, which says why and audits it.
        let listing = self.listing(&mut caller).await.ok();
        if name == CONFIRM_PROPOSAL && self.offers_confirm_proposal() {
            #[cfg(feature = "broken")]
            if let (Some((decision, text)), Some(id)) = (&said, args["proposal_id"].as_str()) {
                return Ok(self.sign_and_confirm(&caller, id, *decision, text.clone()).await.into());
            }
            return Ok(self.confirm_proposal(&caller, &args).await.into());
        }
        let read = listing.is_some_and(|l| l.tools.iter().any(|(t, read)| *read && t.name == name));
        let outcome = if read {
            self.gate.read(&caller.route(), &caller.identity, &name, &args).await
        } else {
            let Some(conversation) = caller.conversation.as_deref() else {
                return Ok(message(
                    "No conversation: a write needs an MCP session (initialize, then Mcp-Session-Id) or the \
                     Toolgate-Conversation header; nothing was applied.",
                    true,
                )
                .into());
            };
            self.gate.call(&caller.route(), &caller.identity, conversation, &name, &args).await
        };
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => return Ok(gate_error(&e).into()),
        };
        if outcome["rule"] == "identity_invalid" {
            let text = format!("{} {}", outcome_text(&outcome), self.token_hint());
            return Ok(with_outcome(outcome, text).into());
        }
        if outcome["outcome"] == "NEEDS_CONFIRMATION" {
            #[cfg(feature = "broken")]
            if let (Some((decision, text)), Some(id)) = (said, outcome["proposal"]["id"].as_str()) {
                return Ok(self.sign_and_confirm(&caller, id, decision, text).await.into());
            }
            return Ok(self.ask(&caller, &name, &args, outcome, context).await);
        }
        Ok(result(outcome).into())
    }

    /// Put a proposal to the person within the call; return what the gate made of the answer, the
    /// question (an `input_required` result, protocol 2026-07-28), or the proposal itself when
    /// there is no answer to give.
    async fn ask(
        &self,
        caller: &Caller,
        name: &str,
        args: &Value,
        outcome: Value,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let proposal = &outcome["proposal"];
        let (Some(id), Some(text)) = (proposal["id"].as_str(), proposal["text"].as_str()) else {
            return pending(outcome, "the proposal came without an id or a text").into();
        };
        let tier = proposal["tier"].as_i64().unwrap_or(1);
        match outcome["result"]["decided_in"].as_str() {
            Some("console") => return pending(outcome, "the person decides it in the approvals console").into(),
            Some(_) => return pending(outcome, "approvers decide it, not the person who asked").into(),
            None => {}
        }
        if self.channel(caller.tenant()).is_none() {
            return pending(outcome, "this server has no channel key for this tenant to carry the answer").into();
        }
        let now = now_millis();
        let left = proposal["expires_at"].as_str().and_then(epoch_millis).map_or(0, |exp| exp.saturating_sub(now));
        let wait = self.confirm_wait.min(Duration::from_millis(left.max(0) as u64));
        let modern = context.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        if modern {
            if !form_elicitation(context.client_capabilities().as_ref()) {
                return self.unanswered(caller, outcome, "this client cannot ask the person").await.into();
            }
            if wait.is_zero() {
                return pending(outcome, "the proposal expires before the person could answer").into();
            }
            let bound = binding(caller, name, args);
            let state = self.states.seal_json_with(
                &json!({"proposal": id, "tier": tier}),
                &SealOptions::new().associated_data(bound.as_bytes()).ttl(wait),
            );
            let Ok(state) = state else {
                return pending(outcome, "the question could not be sealed").into();
            };
            let (message, requested_schema) = question(text, tier);
            let question = ElicitRequest::new(ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema,
            });
            let requests = BTreeMap::from([(CONFIRM_INPUT.to_string(), InputRequest::Elicitation(question))]);
            return InputRequiredResult::new(Some(requests), Some(state)).into();
        }
        if !caller.session {
            return pending(
                outcome,
                "over HTTP without an MCP session before protocol 2026-07-28 the person answers in their channel, \
                 then confirm_proposal",
            )
            .into();
        }
        if !context.peer.supported_elicitation_modes().contains(&ElicitationMode::Form) {
            return self.unanswered(caller, outcome, "this client cannot ask the person").await.into();
        }
        if wait.is_zero() {
            return pending(outcome, "the proposal expires before the person could answer").into();
        }
        let (message, requested_schema) = question(text, tier);
        let request = ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema };
        let answer = tokio::select! {
            answer = context.peer.create_elicitation_with_timeout(request, Some(wait)) => answer,
            _ = context.ct.cancelled() => return pending(outcome, "the call was cancelled").into(),
        };
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("no answer from the person: {e}");
                return self.unanswered(caller, outcome, "no answer came from the person").await.into();
            }
        };
        match decision(&answer, tier) {
            Some((decision, said)) => self.sign_and_confirm(caller, id, decision, said).await.into(),
            None => pending(outcome, "the person's answer was not understood").into(),
        }
    }

    /// The retry of a call answered `input_required`: the person's answer to the proposal the
    /// `requestState` names. A state that does not open for this caller, conversation and call
    /// (tampered, expired, another's, another server key's) is an invalid-params error, and
    /// nothing is applied; a state used again gets the gate's answer for a decided proposal.
    async fn resume(
        &self,
        caller: &mut Caller,
        name: &str,
        args: &Value,
        state: &str,
        responses: Option<&BTreeMap<String, Value>>,
    ) -> Result<CallToolResponse, McpError> {
        let refused = |why: String| McpError::invalid_params(format!("{why}; nothing was applied"), None);
        // The tenant is part of what the state is bound to.
        self.listing(caller).await.map_err(|e| refused(format!("the caller was not recognised: {e}")))?;
        let bound = binding(caller, name, args);
        let sealed: Value = self.states.open_json_with(state, bound.as_bytes()).map_err(|e| {
            // One answer for every reason, as a sealed state asks; the reason goes to the log.
            tracing::warn!("a requestState was refused: {e}");
            refused("requestState refused: it is tampered, expired, or another call's or caller's".into())
        })?;
        let (Some(id), tier) = (sealed["proposal"].as_str(), sealed["tier"].as_i64().unwrap_or(1)) else {
            return Err(refused("requestState names no proposal".into()));
        };
        let answer = responses
            .and_then(|r| r.get(CONFIRM_INPUT))
            .ok_or_else(|| refused(format!("inputResponses has no answer \"{CONFIRM_INPUT}\"")))?;
        let answer: ElicitResult = serde_json::from_value(answer.clone())
            .map_err(|e| refused(format!("the answer is not an elicitation result: {e}")))?;
        let (decision, said) =
            decision(&answer, tier).ok_or_else(|| refused("the answer does not have the form asked for".into()))?;
        Ok(self.sign_and_confirm(caller, id, decision, said).await.into())
    }

    /// Sign what the person answered to proposal `id` with the tenant's channel key and hand it
    /// to `toolgate.confirm`.
    async fn sign_and_confirm(&self, caller: &Caller, id: &str, decision: Decision, said: String) -> CallToolResult {
        let Some(channel) = self.channel(caller.tenant()) else {
            return message(
                "this server has no channel key for this tenant to carry the answer; nothing was applied",
                true,
            );
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
        match self.gate.confirm(&caller.route(), &caller.identity, &signed).await {
            Ok(o) => result(o),
            Err(e) => gate_error(&e),
        }
    }

    /// A proposal the person could not be asked about, or did not answer: it stays pending.
    async fn unanswered(&self, caller: &Caller, outcome: Value, why: &str) -> CallToolResult {
        #[cfg(feature = "broken")]
        if let Some(r) = self.broken_consent(caller, &outcome).await {
            return r;
        }
        #[cfg(not(feature = "broken"))]
        let _ = caller; // only a broken server reads it
        pending(outcome, why)
    }

    /// The newest message of the person's channel: the `Toolgate-Channel-Message` header (HTTP) or
    /// the last line of the message file (stdio).
    fn channel_message(&self, caller: &Caller) -> Option<String> {
        match &self.transport {
            Transport::Http(_) => caller.header_message.clone(),
            Transport::Stdio(s) => s
                .message_file
                .as_ref()
                .and_then(|f| std::fs::read_to_string(f).ok())
                .and_then(|text| text.lines().map(str::trim).rfind(|l| !l.is_empty()).map(String::from)),
        }
    }

    /// `confirm_proposal`: the newest answer the gateway gave, if it is for this proposal.
    async fn confirm_proposal(&self, caller: &Caller, args: &Value) -> CallToolResult {
        let Some(wanted) = args["proposal_id"].as_str() else {
            return message("confirm_proposal takes one argument, proposal_id, a string", true);
        };
        let newest = self.channel_message(caller);
        #[cfg(feature = "broken")]
        if let Some(r) = self.broken_any_message(caller, wanted, newest.as_deref()).await {
            return r;
        }
        match newest {
            Some(token) if claimed_proposal(&token).as_deref() == Some(wanted) => {
                match self.gate.confirm(&caller.route(), &caller.identity, &token).await {
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
        // Only a stdio client hears when its tools change (watch_tools); over HTTP each request
        // lists them afresh.
        let capabilities = match self.is_http() {
            true => ServerCapabilities::builder().enable_tools().build(),
            false => ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build(),
        };
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools gated by pg_toolgate. A write may need the person's confirmation: this server asks them. \
                 Never put a person's answer (such as \"sim\") in a tool argument.",
            )
    }

    /// 2025-06-18 and 2025-11-25 ask the person with `elicitation/create` within the call;
    /// 2026-07-28 with an `input_required` result.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    /// From now on a stdio client hears when its tools change.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if !self.is_http() {
            tokio::spawn(self.clone().watch_tools(context.peer));
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let caller = self.caller(&context).map_err(|e| McpError::invalid_request(e, None))?;
        let listing = match &caller.listing {
            Some(listing) => listing.clone(),
            None => {
                let outcome = self
                    .gate
                    .tools(&caller.identity)
                    .await
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                // A token the gate refuses is the host's to fix, not an internal error: say so, and how.
                Arc::new(listing_of(&outcome).map_err(|why| {
                    McpError::new(
                        IDENTITY_REFUSED,
                        format!("{why} {}", self.token_hint()),
                        Some(json!({"rule": outcome["rule"]})),
                    )
                })?)
            }
        };
        let tools = self.offered(&listing);
        if !self.is_http() {
            self.remember(&tools);
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = match self.caller(&context) {
            Ok(c) => c,
            Err(e) => return Ok(message(&e, true).into()),
        };
        self.call(caller, request, &context).await
    }
}

/// The listing a `toolgate.tools` outcome holds; `Err` with the gate's short text if it refused.
pub(crate) fn listing_of(outcome: &Value) -> Result<Listing, String> {
    if outcome["outcome"] != "SUCCEEDED" {
        return Err(outcome_text(outcome));
    }
    let rows = outcome["result"]["tools"].as_array().cloned().unwrap_or_default();
    let mut tools = Vec::with_capacity(rows.len());
    for row in rows {
        let (Some(name), Some(schema)) = (row["name"].as_str(), row["inputSchema"].as_object()) else {
            tracing::warn!("a tool row without a name or an object schema was left out");
            continue;
        };
        let read = row["kind"] == "read";
        let annotations = if read {
            ToolAnnotations::new().read_only(true)
        } else {
            ToolAnnotations::new().read_only(false).destructive(true).idempotent(true)
        };
        let description = row["description"].as_str().map(|d| Cow::Owned(d.to_string()));
        let tool =
            Tool::new_with_raw(name.to_string(), description, Arc::new(schema.clone())).with_annotations(annotations);
        tools.push((tool, read));
    }
    let tenant = outcome["result"]["tenant"].as_str().unwrap_or_default().to_string();
    Ok(Listing { tenant, tools })
}

/// Whether a 2026-07-28 client declared form elicitation in this request's capabilities.
fn form_elicitation(capabilities: Option<&ClientCapabilities>) -> bool {
    capabilities.and_then(|c| c.elicitation.as_ref()).is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// What a `requestState` is bound to: the caller (the identity token's `iss` and `sub`, and the
/// tenant the gate found), the conversation, and the call (tool and arguments). The gate verifies
/// the identity again when the answer reaches it.
fn binding(caller: &Caller, name: &str, args: &Value) -> String {
    let claims = unverified_claims(&caller.identity).unwrap_or(Value::Null);
    json!([claims["iss"], claims["sub"], caller.tenant(), caller.conversation, name, args]).to_string()
}

/// The person's decision and what they said: an "ok" at tiers 1 and 2 when they ticked confirm
/// (the one yes every language the gate writes accepts: the tick is not words the person typed
/// in their tenant's language), the word they typed at tier 3; `None` for an answer without the
/// form asked for.
fn decision(answer: &ElicitResult, tier: i64) -> Option<(Decision, String)> {
    let field = |name: &str| answer.content.as_ref().map(|c| c[name].clone()).unwrap_or(Value::Null);
    match answer.action {
        ElicitationAction::Accept if tier >= 3 => field("word").as_str().map(|w| (Decision::Approve, w.to_string())),
        ElicitationAction::Accept => match field("confirm") {
            Value::Bool(true) => Some((Decision::Approve, "ok".to_string())),
            Value::Bool(false) => Some((Decision::Decline, String::new())),
            _ => None,
        },
        ElicitationAction::Decline | ElicitationAction::Cancel => Some((Decision::Decline, String::new())),
        #[allow(unreachable_patterns)]
        _ => None,
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

/// What the person is asked, and the form of their answer: the proposal's text with its own
/// language's instruction for a form (a box to tick at tiers 1 and 2, the field for the challenge
/// word at tier 3: `Language::for_a_form`), and a boolean `confirm` or a string `word` titled
/// in that language.
fn question(text: &str, tier: i64) -> (String, ElicitationSchema) {
    let (asked, label) = toolgate_core::locale::Language::for_a_form(text, tier);
    let schema = if tier >= 3 {
        json!({"type": "object", "properties": {"word": {"type": "string", "title": label}}, "required": ["word"]})
    } else {
        json!({"type": "object", "properties": {"confirm": {"type": "boolean", "title": label}}, "required": ["confirm"]})
    };
    (asked, serde_json::from_value(schema).expect("a valid elicitation schema"))
}

/// The `proposal` claim of a compact JWS, read without verifying it (the gate verifies).
fn claimed_proposal(token: &str) -> Option<String> {
    unverified_claims(token)?["proposal"].as_str().map(String::from)
}

/// The claims of a compact JWS, unverified.
pub(crate) fn unverified_claims(token: &str) -> Option<Value> {
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
    fn a_limit_refusal_tells_when_to_try_again() {
        let limit = json!({"limit": "spend-per-day", "window": "day", "max": 30, "used": 30, "retry_after": 5400});
        let o = toolgate_core::outcome::Reply::limit_exceeded(limit).to_json();
        let r = result(o);
        assert_eq!(r.is_error, Some(true));
        assert_eq!(r.structured_content.as_ref().unwrap()["result"]["retry_after"], 5400);
        let text = serde_json::to_value(&r.content).unwrap()[0]["text"].as_str().unwrap().to_string();
        assert!(text.contains("limit_exceeded") && text.contains("frees up in 5400 s"), "{text}");
    }

    #[test]
    fn a_changed_listing_is_told_once() {
        let server = ToolgateServer::new(Config {
            database: toolgate_pgconn::Database::parse("host=/nonexistent dbname=x", "t").unwrap(),
            pool: crate::config::PoolSize { size: 1, queue: 0, wait: Duration::from_secs(1) },
            transport: Transport::Stdio(crate::config::Stdio {
                identity: crate::config::Identity::Token("t".into()),
                channel: None,
                conversation: "c".into(),
                message_file: None,
            }),
            confirm_wait: Duration::from_secs(1),
            lock_timeout: Duration::from_secs(1),
            statement_timeout: Duration::from_secs(1),
            state_key: vec![7; 32],
        })
        .unwrap();
        let tool = |name: &str| Tool::new(name.to_string(), "d", Arc::new(Default::default()));
        let (a, b) = (tool("a"), tool("b"));
        assert!(!server.remember(&[a.clone(), b.clone()]), "the first listing is no change");
        assert!(!server.remember(&[b.clone(), a.clone()]), "the order is no change");
        assert!(server.remember(std::slice::from_ref(&a)));
        assert!(!server.remember(std::slice::from_ref(&a)));
        let annotated = a.clone().with_annotations(ToolAnnotations::new().read_only(true));
        assert!(server.remember(&[annotated]), "new annotations are a change");
    }

    #[test]
    fn a_sealed_state_opens_only_for_its_caller_conversation_and_call() {
        let codec = RequestStateCodec::try_new(vec![7u8; 32]).unwrap();
        let identity = Signer::from_seed("idp", [1; 32]).sign(&json!({"iss": "https://idp", "sub": "u-1"}));
        let caller = |identity: &str, conversation: &str| Caller {
            identity: identity.to_string(),
            conversation: Some(conversation.to_string()),
            listing: Some(Arc::new(Listing { tenant: "t-a".into(), tools: vec![] })),
            header_message: None,
            session: false,
            trace: None,
            record: None,
        };
        let args = json!({"order_id": "1", "idempotency_key": "k"});
        let bound = binding(&caller(&identity, "c-1"), "request_close", &args);
        let sealed = codec
            .seal_json_with(&json!({"proposal": "p-1"}), &SealOptions::new().associated_data(bound.as_bytes()))
            .unwrap();
        let opens = |b: String| codec.open_json_with::<Value>(&sealed, b.as_bytes()).is_ok();
        assert!(opens(bound.clone()));
        let other = Signer::from_seed("idp", [1; 32]).sign(&json!({"iss": "https://idp", "sub": "u-2"}));
        assert!(!opens(binding(&caller(&other, "c-1"), "request_close", &args)), "another person");
        assert!(!opens(binding(&caller(&identity, "c-2"), "request_close", &args)), "another conversation");
        assert!(!opens(binding(&caller(&identity, "c-1"), "request_purchase_part", &args)), "another tool");
        let more = json!({"order_id": "1", "idempotency_key": "k2"});
        assert!(!opens(binding(&caller(&identity, "c-1"), "request_close", &more)), "other arguments");
        let other_key = RequestStateCodec::try_new(vec![8u8; 32]).unwrap();
        assert!(other_key.open_json_with::<Value>(&sealed, bound.as_bytes()).is_err(), "another server key");
    }

    #[test]
    fn answers_decide_by_tier() {
        let answer = |v: Value| serde_json::from_value::<ElicitResult>(v).unwrap();
        let yes = answer(json!({"action": "accept", "content": {"confirm": true}}));
        assert_eq!(decision(&yes, 1), Some((Decision::Approve, "ok".to_string())));
        assert_eq!(decision(&yes, 3), None, "tier 3 needs the word");
        let word = answer(json!({"action": "accept", "content": {"word": "CONFIRMAR-AB12"}}));
        assert_eq!(decision(&word, 3), Some((Decision::Approve, "CONFIRMAR-AB12".to_string())));
        let no = answer(json!({"action": "accept", "content": {"confirm": false}}));
        assert_eq!(decision(&no, 2).map(|d| d.0), Some(Decision::Decline));
        assert_eq!(decision(&answer(json!({"action": "decline"})), 1).map(|d| d.0), Some(Decision::Decline));
        assert_eq!(decision(&answer(json!({"action": "accept", "content": {"x": 1}})), 1), None);
    }

    #[test]
    fn answer_forms_are_valid_and_in_the_proposals_language() {
        let (asked, form) = question("Fechar «742». Para confirmar, responda sim.", 1);
        assert_eq!(asked, "Fechar «742». Para confirmar, marque «Confirmar» e aceite; para recusar, recuse.");
        let s = serde_json::to_value(form).unwrap();
        assert_eq!(
            (&s["properties"]["confirm"]["type"], &s["properties"]["confirm"]["title"]),
            (&json!("boolean"), &json!("Confirmar"))
        );
        let (asked, form) = question("Buy. To confirm, type exactly: CONFIRM-7Q", 3);
        assert!(asked.ends_with("CONFIRM-7Q Type it in the field «Word»; to refuse, decline."), "{asked}");
        let s = serde_json::to_value(form).unwrap();
        assert_eq!(s["required"], json!(["word"]));
    }
}
