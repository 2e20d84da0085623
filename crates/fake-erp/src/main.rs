//! `toolgate-fake-erp`: the fake ERP as a process. It prints one JSON line on standard output once
//! it listens, `{"listen": "127.0.0.1:PORT", "base_url": "http://…", "refresh_token": "…"}`, and
//! serves until SIGINT or SIGTERM.

use clap::Parser;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use toolgate_fake_erp::{Config, Settings};

#[derive(Parser)]
#[command(name = "toolgate-fake-erp", about = "A fake ERP behind an HTTP API, for tests")]
struct Args {
    /// Where to listen; port 0 takes a free one (printed on standard output).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Requests admitted in any one second (0: no limit).
    #[arg(long, default_value_t = Settings::default().per_second)]
    per_second: u32,
    /// Requests admitted in any sixty seconds (0: no limit).
    #[arg(long, default_value_t = Settings::default().per_minute)]
    per_minute: u32,
    /// How long an access token is good for, in milliseconds.
    #[arg(long, default_value_t = Settings::default().token_ttl.as_millis() as u64)]
    token_ttl_ms: u64,
    /// How long an accepted write stays PENDING, in milliseconds.
    #[arg(long, default_value_t = Settings::default().async_delay.as_millis() as u64)]
    async_delay_ms: u64,
    /// The first refresh token (random if not given).
    #[arg(long)]
    refresh_token: Option<String>,
    /// Refuse a write without an Idempotency-Key (400).
    #[arg(long)]
    require_idempotency_key: bool,
    /// Do each write at once and answer DONE with its result (no protocol to poll).
    #[arg(long)]
    synchronous: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = Config {
        settings: Settings {
            per_second: args.per_second,
            per_minute: args.per_minute,
            token_ttl: Duration::from_millis(args.token_ttl_ms),
            async_delay: Duration::from_millis(args.async_delay_ms),
            require_idempotency_key: args.require_idempotency_key,
            synchronous: args.synchronous,
        },
        refresh_token: args.refresh_token,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("toolgate-fake-erp: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let erp = match toolgate_fake_erp::start(args.listen, config).await {
            Ok(erp) => erp,
            Err(e) => {
                eprintln!("toolgate-fake-erp: cannot listen on {}: {e}", args.listen);
                return ExitCode::FAILURE;
            }
        };
        let line = serde_json::json!({
            "listen": erp.addr().to_string(),
            "base_url": erp.base_url(),
            "refresh_token": erp.refresh_token(),
        });
        println!("{line}");
        stopped().await;
        ExitCode::SUCCESS
    })
}

async fn stopped() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}
