//! `toolgate`: key pairs, tokens and the demo of pg_toolgate.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use toolgate_cli::db::Server;
use toolgate_cli::{demo, keys};

#[derive(Parser)]
#[command(name = "toolgate", about = "Keys, tokens and the demo of pg_toolgate")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate an Ed25519 key pair; the private seed goes to DIR/KID.key (0600), the public key
    /// (JWK x, what toolgate.add_key takes) to standard output.
    Keygen {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        kid: String,
    },
    /// Print the public key of DIR/KID.key.
    Pubkey {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        kid: String,
    },
    /// Mint an identity token, as a tenant's identity provider would.
    Identity {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        kid: String,
        #[arg(long)]
        sub: String,
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        role: String,
        /// Seconds until it expires (negative: already expired).
        #[arg(long, default_value_t = 3600, allow_hyphen_values = true)]
        ttl: i64,
    },
    /// Mint a confirmation token, as a tenant's channel would sign what the person answered.
    Confirmation {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        kid: String,
        #[arg(long)]
        proposal: String,
        #[arg(long, value_parser = ["approve", "decline"])]
        decision: String,
        /// What the person typed (or said).
        #[arg(long)]
        text: String,
        /// When the channel received it, seconds from now (negative: in the past).
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        at_offset: i64,
        #[arg(long, default_value = "typed", value_parser = ["typed", "voice"])]
        via: String,
    },
    /// Replay seed 000's lab against a server with pg_toolgate installed.
    Demo {
        /// Socket directory or host of the server.
        #[arg(long)]
        host: String,
        #[arg(long)]
        port: u16,
        /// Database to (re)create for the demo.
        #[arg(long, default_value = "toolgate_demo")]
        dbname: String,
        /// Where the demo's private keys are generated.
        #[arg(long)]
        keys: PathBuf,
        /// The server log, searched for secrets.
        #[arg(long)]
        server_log: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(code) => code,
        Err(e) => {
            let mut message = e.to_string();
            let mut source = e.source();
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("toolgate: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(command: Command) -> toolgate_cli::Result<ExitCode> {
    match command {
        Command::Keygen { dir, kid } => println!("{}", keys::generate(&dir, &kid)?.public_key()),
        Command::Pubkey { dir, kid } => println!("{}", keys::load(&dir, &kid)?.public_key()),
        Command::Identity { dir, kid, sub, tenant, role, ttl } => {
            println!("{}", keys::identity(&keys::load(&dir, &kid)?, &sub, &tenant, &role, ttl))
        }
        Command::Confirmation { dir, kid, proposal, decision, text, at_offset, via } => {
            let signer = keys::load(&dir, &kid)?;
            println!("{}", keys::confirmation(&signer, &proposal, &decision, &text, keys::now() + at_offset, &via))
        }
        Command::Demo { host, port, dbname, keys, server_log } => {
            let opts = demo::Options { server: Server { host, port }, dbname, keys_dir: keys, server_log };
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let checks = runtime.block_on(demo::run(&opts))?;
            if let Some(first) = checks.broken.first() {
                println!("demo: {} invariant(s) BROKEN; first: {first}", checks.broken.len());
                return Ok(ExitCode::from(1));
            }
            println!("demo: all {} invariants held", checks.held);
        }
    }
    Ok(ExitCode::SUCCESS)
}
