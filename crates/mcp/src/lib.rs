//! `toolgate mcp`: an MCP server over stdio in front of pg_toolgate, on the official Rust SDK
//! (rmcp). It lists exactly the tools `toolgate.tools` gives the caller, sends every call to
//! `toolgate.call` or `toolgate.read`, and when the gate answers NEEDS_CONFIRMATION asks the person
//! within the same call (`elicitation/create`), signs their answer with the tenant's channel key
//! and hands it to `toolgate.confirm`. Every decision stays in SQL; the model never sees a
//! confirmation token, and the conversation never comes from a tool argument.
//!
//! Configuration is the environment's: see [`config::Config`].

pub mod config;
pub mod gate;
pub mod server;

use rmcp::ServiceExt;

pub use config::Config;
pub use server::ToolgateServer;

/// Deliberately broken servers for the evals (the `toolgate-mcp-broken` binary only).
#[cfg(feature = "broken")]
pub use server::broken;

/// Serve MCP on standard input and output until the client goes away.
pub async fn serve(config: Config) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let service = ToolgateServer::new(config).serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}

/// `toolgate mcp`: read the environment, then serve on a runtime of its own.
pub fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let config = Config::from_env()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(serve(config))
}
