//! A chat tool's incoming webhook per tenant, told when a proposal waits for its approvers
//! (`toolgate console --webhooks FILE`). The console listens on the gate's `toolgate_pending`
//! channel and, for a tenant the file names, posts `{"text": …}` (the body Slack's, Mattermost's,
//! Rocket.Chat's and Google Chat's incoming webhooks accept) saying which tool waits, the
//! proposal's id and the console's address, in the language the file gives. Never the proposal's
//! text: it may quote what a third party wrote in the ERP, and a chat message is no place to mark
//! it; the person reads it in the console, where it is marked.

use openidconnect::reqwest;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use toolgate_pgconn::Database;

use super::{words, Console};
use crate::login::private_in_transit;

/// One tenant's webhook, as the file gives it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    url: String,
    /// `pt`, `en` or `es` (default `en`).
    #[serde(default)]
    language: Option<String>,
}

/// The webhooks by tenant.
pub struct Webhooks(HashMap<String, (reqwest::Url, &'static str)>);

/// Notifications waiting to be posted at most; a burst beyond it is dropped (the console's
/// pending page stays right).
const BACKLOG: usize = 1024;
/// How long the console waits before listening again after the connection ended.
const AGAIN: Duration = Duration::from_secs(5);

impl Webhooks {
    /// `{"tenant": {"url": "https://…", "language": "pt"}, …}`. A URL is https (http only to this
    /// machine's loopback): it carries the tenant's business, and a chat tool's webhook URL is
    /// itself a secret, never logged.
    pub fn read(path: &Path) -> Result<Webhooks, String> {
        let at = |e: &dyn std::fmt::Display| format!("--webhooks {}: {e}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| at(&e))?;
        let entries: HashMap<String, Entry> = serde_json::from_str(&text).map_err(|e| at(&e))?;
        let mut hooks = HashMap::new();
        for (tenant, entry) in entries {
            let url = reqwest::Url::parse(&entry.url).map_err(|e| at(&format!("tenant {tenant}: {e}")))?;
            if !private_in_transit(&url) {
                return Err(at(&format!("tenant {tenant}: a webhook is https (http only on this machine's loopback)")));
            }
            let language = match entry.language.as_deref() {
                None => "en",
                Some(l) if ["pt", "en", "es"].contains(&l) => words(Some(l)).lang,
                Some(l) => return Err(at(&format!("tenant {tenant}: language {l} is not pt, en or es"))),
            };
            hooks.insert(tenant, (url, language));
        }
        Ok(Webhooks(hooks))
    }

    /// How many tenants have one.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The message a chat tool shows: which tool waits in which tenant, the proposal's id, where
    /// to decide it. `None` for a tenant without a webhook, or a payload that is not the gate's.
    fn message(&self, payload: &str, console_url: &str) -> Option<(&reqwest::Url, Value)> {
        let notice: Value = serde_json::from_str(payload).ok()?;
        let (tenant, tool, proposal) =
            (notice["tenant"].as_str()?, notice["tool"].as_str()?, notice["proposal"].as_str()?);
        let (url, language) = self.0.get(tenant)?;
        let text = words(Some(language))
            .waits
            .replace("{tenant}", tenant)
            .replace("{tool}", tool)
            .replace("{proposal}", proposal)
            .replace("{url}", console_url);
        Some((url, json!({"text": text})))
    }
}

/// Listen on `toolgate_pending` for as long as the console runs (again after the connection
/// ends), posting each notice to its tenant's webhook in turn.
pub async fn run(console: Arc<Console>, database: Database, hooks: Webhooks, console_url: String) {
    loop {
        match database.notifications("toolgate_pending", BACKLOG).await {
            Ok((_client, mut notices)) => {
                tracing::info!(tenants = hooks.len(), "webhooks: listening on toolgate_pending");
                while let Some(payload) = notices.recv().await {
                    if let Some((url, body)) = hooks.message(&payload, &console_url) {
                        post(&console, url, &body).await;
                    }
                }
                tracing::warn!("webhooks: the listening connection ended");
            }
            Err(e) => tracing::warn!(error = %toolgate_pgconn::describe(&e), "webhooks: cannot listen"),
        }
        tokio::time::sleep(AGAIN).await;
    }
}

/// One post, counted by its result; a failure is logged without the URL (a secret) and not
/// retried: the proposal still waits in the console.
async fn post(console: &Console, url: &reqwest::Url, body: &Value) {
    let sent = console
        .http
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    let result = match sent {
        Ok(response) if response.status().is_success() => "sent",
        Ok(response) => {
            tracing::warn!(status = response.status().as_u16(), "webhooks: the chat tool refused a post");
            "refused"
        }
        Err(e) => {
            tracing::warn!(error = %crate::login::chain(&e.without_url()), "webhooks: a post failed");
            "failed"
        }
    };
    console.metrics.posted(result);
}
