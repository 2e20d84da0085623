//! MCP sessions over Streamable HTTP (protocol revisions before 2026-07-28), kept by no process.
//!
//! `initialize` is answered with an `Mcp-Session-Id` sealed with the state key
//! (`TOOLGATE_STATE_KEY_FILE`, the key of `requestState`): it holds a digest of who opened it
//! (the identity token's issuer and subject, and the tenant the gate found), the client's
//! `initialize` parameters, and an expiry. Any process behind the URL with the same key serves
//! it: a process that does not hold the session opens the id and replays the handshake (rmcp's
//! session restore). Every request with the id is checked against its bearer token by the HTTP
//! layer: another person's token, an id past its expiry or one sealed with another key is a 404,
//! as for a session that never was. The session is the conversation when the client sends no
//! `Toolgate-Conversation` ([`conversation_of`]).
//!
//! What a process does hold is the session's live requests: a question put to the person with
//! `elicitation/create` travels on the call's own response stream, and the person's answer must
//! come back to the same process (session affinity on `Mcp-Session-Id` at a load balancer);
//! answered elsewhere, the call ends when its wait does, the proposal pending.

use futures::Stream;
use rmcp::model::{
    ClientJsonRpcMessage, InitializeRequestParams, RequestStateCodec, SealOptions, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionWorker, SessionConfig};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager, SessionState, SessionStore, SessionStoreError,
};
use rmcp::transport::WorkerTransport;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// What an `Mcp-Session-Id` is sealed with as associated data: never mistaken for a `requestState`.
const PURPOSE: &[u8] = b"toolgate mcp session v1";

tokio::task_local! {
    /// While an `initialize` request is served: who opens the session, and their parameters.
    pub static OPENING: Opening;
}

/// Who opens a session, and the client's `initialize` parameters.
#[derive(Clone, Debug)]
pub struct Opening {
    pub who: String,
    pub init: Value,
}

/// A digest of a caller: the identity's issuer and subject, and their tenant.
pub fn who(iss: &str, sub: &str, tenant: &str) -> String {
    hex128(json!([iss, sub, tenant]).to_string().as_bytes())
}

/// The conversation of a session: `mcp-` and 32 hex digits of the id's digest (an id is longer
/// than a conversation id may be).
pub fn conversation_of(session: &str) -> String {
    format!("mcp-{}", hex128(session.as_bytes()))
}

/// The first 128 bits of the SHA-256 of `bytes`, as 32 hex digits.
fn hex128(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// Seals and opens session ids.
#[derive(Clone)]
pub struct Sealer {
    codec: RequestStateCodec,
    ttl: Duration,
}

impl Sealer {
    pub fn new(codec: RequestStateCodec, ttl: Duration) -> Sealer {
        Sealer { codec, ttl }
    }

    fn seal(&self, opening: &Opening) -> Result<String, String> {
        self.codec
            .seal_json_with(
                &json!({"who": opening.who, "init": opening.init}),
                &SealOptions::new().associated_data(PURPOSE).ttl(self.ttl),
            )
            .map_err(|e| format!("a session id could not be sealed: {e}"))
    }

    /// Who opened session `id`, and their parameters: `None` for an id this key did not seal, or
    /// one past its expiry.
    pub fn open(&self, id: &str) -> Option<Opening> {
        let sealed: Value = self.codec.open_json_with(id, PURPOSE).ok()?;
        Some(Opening { who: sealed["who"].as_str()?.to_string(), init: sealed["init"].clone() })
    }
}

/// Why a session could not be served.
#[derive(Debug)]
pub struct SessionError(String);

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SessionError {}

fn local<E: std::fmt::Display>(e: E) -> SessionError {
    SessionError(e.to_string())
}

/// rmcp's in-memory sessions, whose ids are sealed ([`Sealer`]) instead of random.
pub struct SealedSessions {
    local: LocalSessionManager,
    sealer: Sealer,
}

impl SealedSessions {
    pub fn new(sealer: Sealer, config: SessionConfig) -> SealedSessions {
        let mut local = LocalSessionManager::default();
        local.session_config = config;
        SealedSessions { local, sealer }
    }
}

impl SessionManager for SealedSessions {
    type Error = SessionError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let opening = OPENING
            .try_with(Clone::clone)
            .map_err(|_| SessionError("a session is opened only by an initialize the HTTP layer checked".into()))?;
        let id: SessionId = self.sealer.seal(&opening).map_err(SessionError)?.into();
        match self.local.restore_session(id.clone()).await.map_err(local)? {
            RestoreOutcome::Restored(transport) => Ok((id, transport)),
            _ => Err(SessionError("a new session id was already in use".into())),
        }
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.local.initialize_session(id, message).await.map_err(local)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.local.has_session(id).await.map_err(local)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.local.close_session(id).await.map_err(local)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_stream(id, message).await.map_err(local)
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        self.local.accept_message(id, message).await.map_err(local)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_standalone_stream(id).await.map_err(local)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.resume(id, last_event_id).await.map_err(local)
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.local.restore_session(id).await.map_err(local)
    }
}

/// The "store" rmcp restores a session from when its process does not hold it: the id itself.
pub struct SealedStore(pub Sealer);

#[async_trait::async_trait]
impl SessionStore for SealedStore {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(opening) = self.0.open(id) else { return Ok(None) };
        let params: InitializeRequestParams = serde_json::from_value(opening.init)?;
        Ok(Some(SessionState::new(params)))
    }

    /// Nothing to keep: the id holds it.
    async fn store(&self, _: &str, _: &SessionState) -> Result<(), SessionStoreError> {
        Ok(())
    }

    /// Nothing to forget: a closed session's id opens until its expiry, for the same caller only.
    async fn delete(&self, _: &str) -> Result<(), SessionStoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer(key: &[u8], ttl: Duration) -> Sealer {
        Sealer::new(RequestStateCodec::try_new(key.to_vec()).unwrap(), ttl)
    }

    #[test]
    fn a_session_id_opens_with_its_key_only_and_until_its_expiry() {
        let a = sealer(&[7u8; 32], Duration::from_secs(60));
        let opening = Opening { who: who("iss", "sub", "t"), init: json!({"protocolVersion": "2025-11-25"}) };
        let id = a.seal(&opening).unwrap();
        let opened = a.open(&id).unwrap();
        assert_eq!((opened.who, opened.init), (opening.who.clone(), opening.init.clone()));
        assert!(sealer(&[8u8; 32], Duration::from_secs(60)).open(&id).is_none(), "another key");
        let mut tampered = id.clone();
        tampered.insert(5, 'x');
        assert!(a.open(&tampered).is_none());
        let short = sealer(&[7u8; 32], Duration::from_millis(1));
        let id = short.seal(&opening).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(short.open(&id).is_none(), "past its expiry");
        // A requestState sealed with the same key is not a session id.
        let state = a.codec.seal_json(&json!({"who": opening.who, "init": {}})).unwrap();
        assert!(a.open(&state).is_none());
    }

    #[test]
    fn callers_and_conversations_are_digests() {
        assert_ne!(who("iss", "a", "t"), who("iss", "b", "t"));
        assert_ne!(who("iss", "a", "t"), who("iss", "a", "u"));
        let c = conversation_of("some-session");
        assert!(c.starts_with("mcp-") && c.len() == 36, "{c}");
        assert_eq!(c, conversation_of("some-session"));
    }
}
