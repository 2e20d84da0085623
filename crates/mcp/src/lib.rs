//! `toolgate mcp`: an MCP server in front of pg_toolgate, on the official Rust SDK (rmcp), over
//! stdio (one person per process) or Streamable HTTP (`--http ADDR`, a bearer token per request).
//! It lists exactly the tools `toolgate.tools` gives the caller, sends every call to
//! `toolgate.call` or `toolgate.read`, and when the gate answers NEEDS_CONFIRMATION asks the person
//! within the same call (`elicitation/create`, or an `input_required` result from protocol
//! 2026-07-28), signs their answer with the tenant's channel key and hands it to
//! `toolgate.confirm`. Every decision stays in SQL; the model never sees a confirmation token, and
//! the conversation never comes from a tool argument.
//!
//! Configuration is the environment's: see [`config::Config`].

pub mod config;
pub mod gate;
pub mod http;
pub mod listings;
pub mod metrics;
pub mod request;
pub mod server;
pub mod session;
pub mod tls;

use rmcp::ServiceExt;

pub use config::Config;
pub use server::ToolgateServer;

/// Deliberately broken servers for the evals (the `toolgate-mcp-broken` binary only).
#[cfg(feature = "broken")]
pub use server::broken;

/// Serve MCP as `config` says: on standard input and output until the client goes away, or over
/// HTTP until SIGINT or SIGTERM.
pub async fn serve(config: Config) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let server = ToolgateServer::new(config)?;
    if matches!(server.transport, config::Transport::Http(_)) {
        return http::serve(server).await;
    }
    let service = server.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}

/// One JSON line per event on standard error: `target`'s (a module path) from INFO, any other's
/// from WARN. Every process around the gate logs this way (`toolgate mcp`, `toolgate console`).
pub fn json_logs(target: &'static str) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr).with_current_span(false))
        .with(
            tracing_subscriber::filter::Targets::new()
                .with_target(target, tracing::Level::INFO)
                .with_default(tracing::Level::WARN),
        )
        .try_init();
}

/// `toolgate mcp [--http ADDR [--listen ADDR] [--tls-cert FILE --tls-key FILE]]`: read the environment, then serve on a runtime of its own: over
/// HTTP one thread per core, so different sessions' requests run in parallel; on stdio one thread
/// (one person).
pub fn run(options: &config::Options) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let config = Config::from_options(options)?;
    // A request's line: its method, tool, outcome, status, duration and trace id; never a token or
    // an argument's value.
    json_logs("toolgate_mcp");
    let runtime = match &options.http {
        Some(_) => tokio::runtime::Builder::new_multi_thread().enable_all().build()?,
        None => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
    };
    runtime.block_on(serve(config))
}
