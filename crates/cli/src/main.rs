//! `toolgate`: key pairs, tokens and the demo of pg_toolgate.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use toolgate_cli::db::Server;
use toolgate_cli::{agent_bench, audit, bench, confirm, console, demo, dispatch, fixture, keys, load, login};

#[derive(Parser)]
#[command(name = "toolgate", version, about = "Keys, tokens and the demo of pg_toolgate")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate an Ed25519 key pair; the private key goes to DIR/KID.key (PKCS#8 PEM, 0600), the public key
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
        /// An audience the token is issued for (`aud`; repeat for several): an MCP server over
        /// HTTP accepts only a token issued for its resource URL.
        #[arg(long)]
        aud: Vec<String>,
    },
    /// Sign CLAIMS (a JSON object) with iat and exp added, as an OpenID provider registered with
    /// toolgate.add_issuer would issue a token (EdDSA, the key DIR/KID.key).
    Token {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        kid: String,
        #[arg(long)]
        claims: String,
        /// Seconds until it expires (negative: already expired).
        #[arg(long, default_value_t = 3600, allow_hyphen_values = true)]
        ttl: i64,
    },
    /// Mint a confirmation token, as a tenant's channel would sign what the person answered.
    Confirmation {
        #[command(flatten)]
        answer: Answer,
    },
    /// Sign the person's answer to a proposal as `confirmation` does and submit it to the gate.
    ///
    /// Signs the answer with the tenant's channel key DIR/KID.key, exactly as `toolgate
    /// confirmation` does, runs `SELECT toolgate.confirm($1, $2)` with the person's identity token
    /// and that confirmation as bind parameters (never in the statement's text), and prints the
    /// gate's outcome, one JSON object on one line, on standard output. Neither token is ever printed.
    #[command(after_help = "Exit status:\n  \
        0  the outcome is SUCCEEDED (also a replay of a confirmation already applied)\n  \
        1  any other outcome: REJECTED, BLOCKED, CANCELLED (a decline), NEEDS_CONFIRMATION\n  \
        2  a usage error, an unreadable key or identity token, no connection or an SQL error \
        (nothing on standard output)")]
    Confirm {
        #[command(flatten)]
        answer: Answer,
        /// A file holding the person's identity token [default: the environment variable
        /// TOOLGATE_IDENTITY_TOKEN].
        #[arg(long, value_name = "FILE")]
        identity_file: Option<PathBuf>,
        /// The application login's libpq conninfo (host=/var/run/postgresql dbname=erp
        /// user=erp_app) or URL (postgresql://erp_app@db:5432/erp?sslmode=verify-full), TLS as its
        /// sslmode says [default: the environment variable TOOLGATE_DATABASE_URL].
        #[arg(long, value_name = "CONNINFO_OR_URL")]
        database: Option<String>,
    },
    /// The approvals console: a web page where the person who approves signs in with the
    /// company's OpenID provider and decides the proposals that wait for them (docs/console.md).
    ///
    /// It logs in to the database as a member of toolgate_approver; every decision is the
    /// approver's own ID token, verified by the gate, whose audience is --client-id.
    Console {
        /// Serve the console on this address (such as 127.0.0.1:8809).
        #[arg(long, value_name = "ADDR")]
        http: std::net::SocketAddr,
        /// The console's address as browsers reach it (the provider redirects to its /callback)
        /// [default: http(s)://ADDR].
        #[arg(long, value_name = "URL")]
        public_url: Option<String>,
        /// The provider's issuer URL, as its discovery document names it.
        #[arg(long)]
        issuer: String,
        /// The client registered at the provider for the console; the ID tokens' audience.
        #[arg(long)]
        client_id: String,
        /// A confidential client's secret, in a file [default: a public client, PKCE alone].
        #[arg(long, value_name = "FILE")]
        client_secret_file: Option<PathBuf>,
        /// More certificate authorities (PEM) for the provider's HTTPS, beside the Mozilla roots.
        #[arg(long, value_name = "FILE")]
        ca_file: Option<PathBuf>,
        /// The approvers' login's libpq conninfo or URL [default: the environment variable
        /// TOOLGATE_DATABASE_URL].
        #[arg(long, value_name = "CONNINFO_OR_URL")]
        database: Option<String>,
        /// Serve HTTPS with this certificate chain (PEM), read again on SIGHUP or when it changes.
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key of --tls-cert (PEM).
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// With no certificate: serve plain HTTP on an address other than loopback (only behind a
        /// TLS proxy that is the only way in).
        #[arg(long)]
        insecure_http: bool,
        /// Serve /metrics, /healthz and /readyz on this loopback address (such as 127.0.0.1:9809).
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// Tell each tenant's chat tool when a proposal waits: a JSON file
        /// {"TENANT": {"url": "https://…", "language": "pt|en|es"}} (docs/console.md).
        #[arg(long, value_name = "FILE")]
        webhooks: Option<PathBuf>,
    },
    /// Sign in at the tenant's OpenID provider and write the token the gate reads to a file only
    /// you can read (TOOLGATE_IDENTITY_TOKEN_FILE), refreshing it before it expires.
    ///
    /// By default the browser signs in (authorization code with PKCE, the provider redirecting
    /// to 127.0.0.1; BROWSER names the program that opens the address, else it is printed);
    /// --device prints an address and a code to type on any device instead. Beside the token,
    /// FILE.login (also 0600) keeps the refresh token: --refresh uses it once, --keep goes on
    /// refreshing until stopped (docs/identity.md).
    #[command(after_help = "Exit status:\n  \
        0  signed in, or refreshed (or not yet due)\n  \
        1  refused: the person denied, the code expired, the provider no longer takes the refresh \
        token; sign in again\n  \
        2  a usage error, the provider unreachable or its answer unusable, a file unwritable")]
    Login {
        /// The provider's issuer URL, as its discovery document names it (https; http only on loopback).
        #[arg(long, required_unless_present = "refresh", conflicts_with = "refresh")]
        issuer: Option<String>,
        /// The client registered at the provider for toolgate login (a public client: no secret).
        #[arg(long, required_unless_present = "refresh", conflicts_with = "refresh")]
        client_id: Option<String>,
        /// Where the token goes [default: the environment variable TOOLGATE_IDENTITY_TOKEN_FILE].
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Sign in with a code typed on another device (RFC 8628) instead of this machine's browser.
        #[arg(long, conflicts_with = "refresh")]
        device: bool,
        /// A scope to ask for beside openid (repeat); offline_access for a refresh token.
        #[arg(long, default_values_t = ["offline_access".to_string()], conflicts_with = "refresh")]
        scope: Vec<String>,
        /// The API the access token is for (Auth0's audience parameter).
        #[arg(long, conflicts_with = "refresh")]
        audience: Option<String>,
        /// Give the gate the ID token (audience: the client id) instead of the access token.
        #[arg(long, conflicts_with = "refresh")]
        id_token: bool,
        /// More certificate authorities (PEM) for the provider's HTTPS, beside the Mozilla roots.
        #[arg(long, value_name = "FILE", conflicts_with = "refresh")]
        ca_file: Option<PathBuf>,
        /// The loopback port the browser is sent back to (http://127.0.0.1:PORT/callback)
        /// [default: any free port].
        #[arg(long, default_value_t = 0, conflicts_with_all = ["refresh", "device"])]
        port: u16,
        /// Seconds to wait for the person to sign in.
        #[arg(long, default_value_t = 300, conflicts_with = "refresh")]
        wait: u64,
        /// Refresh the token of --token-file if it is due, with the refresh token kept beside it.
        #[arg(long)]
        refresh: bool,
        /// Refresh this many seconds before the token expires [default: a third of its lifetime,
        /// at least 60].
        #[arg(long, value_name = "SECONDS")]
        before: Option<i64>,
        /// Go on refreshing before each expiry until stopped (after signing in, or with --refresh).
        #[arg(long)]
        keep: bool,
    },
    /// Create database DBNAME afresh with seed 000's lab (the maintenance example, its tenants,
    /// logins and keys); the private keys go to KEYS/DBNAME/, only public halves to the database.
    Lab {
        /// Socket directory or host of the server.
        #[arg(long)]
        host: String,
        #[arg(long)]
        port: u16,
        #[arg(long, default_value = "toolgate_lab")]
        dbname: String,
        #[arg(long)]
        keys: PathBuf,
    },
    /// Serve MCP in front of the gate, over standard input and output (one person) or Streamable
    /// HTTP (--http). Configured by the environment: TOOLGATE_DATABASE_URL, TOOLGATE_CONFIRM_WAIT,
    /// TOOLGATE_STATE_KEY_FILE; stdio: TOOLGATE_IDENTITY_TOKEN_FILE (or TOOLGATE_IDENTITY_TOKEN),
    /// TOOLGATE_CHANNEL_KEY_FILE and TOOLGATE_CHANNEL_KID, TOOLGATE_CONVERSATION,
    /// TOOLGATE_CHANNEL_MESSAGE_FILE; HTTP: TOOLGATE_CHANNEL_KEYS, TOOLGATE_RESOURCE_URL,
    /// TOOLGATE_ALLOWED_HOSTS, TOOLGATE_POOL_SIZE, TOOLGATE_POOL_QUEUE, TOOLGATE_POOL_WAIT.
    Mcp {
        /// Serve Streamable HTTP at /mcp on this address (such as 127.0.0.1:8808) instead of stdio.
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// With --http: serve /metrics, /healthz and /readyz on this loopback address (such as
        /// 127.0.0.1:9808).
        #[arg(long, value_name = "ADDR", requires = "http")]
        listen: Option<String>,
        /// With --http: serve HTTPS with this certificate chain (PEM), read again on SIGHUP or
        /// when the file changes.
        #[arg(long, value_name = "FILE", requires_all = ["http", "tls_key"])]
        tls_cert: Option<PathBuf>,
        /// The private key of --tls-cert (PEM).
        #[arg(long, value_name = "FILE", requires_all = ["http", "tls_cert"])]
        tls_key: Option<PathBuf>,
        /// With --http and no certificate: serve plain HTTP on an address other than loopback
        /// (only behind a TLS proxy that is the only way in).
        #[arg(long, requires = "http")]
        insecure_http: bool,
    },
    /// The audit's seal and its copy outside the database (docs/audit.md).
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Deliver the intents of outbox tools to their ERPs: claim what is due (toolgate.claim_outbox;
    /// on Citus tenant by tenant, toolgate.tenant_claim_outbox),
    /// send each with its idempotency key, settle what the ERP answered (toolgate.settle_outbox).
    /// Logs in as a member of toolgate_dispatcher.
    #[command(after_help = "Exit status:\n  \
        0  every intent claimed was settled (--once: nothing due is left)\n  \
        2  a usage error, no connection or an SQL error (--once; polling, the dispatcher says so\n     \
           on standard error, connects again and goes on)")]
    Dispatch {
        /// The dispatcher login's libpq conninfo or URL, TLS as its sslmode says (docs/deploy.md)
        /// [default: the environment variable TOOLGATE_DATABASE_URL].
        #[arg(long, value_name = "CONNINFO_OR_URL")]
        database: Option<String>,
        /// Drain what is due and exit; otherwise run until stopped, woken by each outbox call's
        /// commit (NOTIFY toolgate_outbox; not on Citus) and polling every --poll seconds.
        #[arg(long)]
        once: bool,
        #[arg(long, default_value_t = 2.0)]
        poll: f64,
        /// Intents claimed at a time at most (it holds at most twice --concurrency: those beyond
        /// the slots wait for one, their claims renewed meanwhile).
        #[arg(long, default_value_t = 32)]
        batch: i32,
        /// Intents in flight at once; a slot freed is filled at once.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// NAME=FILE: the file holding endpoint NAME's refresh token (auth_kind bearer or
        /// refresh_token), seeding that endpoint's credentials and no other's; rewritten with the
        /// new one at every rotation. Only the dispatcher's account should read it. Repeat for
        /// each endpoint.
        #[arg(long, value_name = "NAME=FILE")]
        refresh_token_file: Vec<String>,
        /// An origin (scheme://host[:port]) the dispatcher may deliver to; repeat for each ERP.
        /// At least one: an endpoint whose base URL is at another origin gets nothing, whatever
        /// the database says (an administrator can write the database).
        #[arg(long, value_name = "ORIGIN", required = true)]
        allow_origin: Vec<String>,
        /// Also connect to loopback, private, link-local and unique-local addresses (refused by
        /// default: where a cloud's metadata service and internal services answer).
        #[arg(long)]
        allow_private_addresses: bool,
        /// The longest ERP answer body read, in bytes; a longer one is not kept.
        #[arg(long, default_value_t = dispatch::DEFAULT_MAX_ANSWER_BYTES)]
        max_answer_bytes: usize,
        /// More certificate authorities (PEM) to trust for https endpoints, beside the Mozilla
        /// roots the dispatcher carries: for an ERP whose certificate a private authority signed.
        #[arg(long, value_name = "FILE")]
        ca_file: Option<PathBuf>,
        /// Seconds one HTTP exchange may take.
        #[arg(long, default_value_t = 10.0)]
        timeout: f64,
        /// Seconds a connection to an ERP is kept open for the next exchange (HTTP keep-alive);
        /// under the ERP's own idle timeout. 0: a new connection for every exchange.
        #[arg(long, default_value_t = 4.0)]
        keep_alive: f64,
        /// Seconds the ERP's async protocol is polled before the intent is left UNCERTAIN.
        #[arg(long, default_value_t = 10.0)]
        settle_within: f64,
        /// Attempts before an intent is dead-lettered (DEAD; the ledger answers UNCERTAIN).
        #[arg(long, default_value_t = 8)]
        max_attempts: i32,
        /// Seconds before an intent left PENDING, UNCERTAIN or PARTIAL is tried again after its
        /// first attempt; doubled at each attempt after that (give or take a fifth, at random),
        /// up to --max-retry-delay.
        #[arg(long, default_value_t = 30.0)]
        retry_delay: f64,
        /// The longest wait, in seconds, between two attempts of an intent.
        #[arg(long, default_value_t = 3600.0)]
        max_retry_delay: f64,
        /// Seconds the deliveries in flight are given to end on SIGTERM or SIGINT; those still
        /// running then are cut short and handed back to the other dispatchers (asked for by key
        /// first). Nothing new is claimed once the signal came.
        #[arg(long, default_value_t = 30.0)]
        shutdown_grace: f64,
        /// Serve GET /metrics (Prometheus text) and GET /healthz on this loopback address
        /// (such as 127.0.0.1:9464).
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Attempts in a row that cannot reach an endpoint (no connection, no answer, a 5xx and
        /// no state) before its intents are left alone for --breaker-cooldown (doubled while it
        /// keeps failing, ten minutes at most); 0: never.
        #[arg(long, default_value_t = 5)]
        breaker_failures: u32,
        /// Seconds an endpoint's intents are left alone once its circuit opens.
        #[arg(long, default_value_t = 30.0)]
        breaker_cooldown: f64,
        /// Seconds a claim holds an intent: a dispatcher that dies before it settles leaves it to
        /// be claimed again (and reconciled first) after that, by any dispatcher. Renewed every
        /// third of it while the intent is being delivered; a request goes out only while a
        /// --timeout's time of it is left, so it is at least twice --timeout.
        #[arg(long, default_value_t = 300.0)]
        lease: f64,
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
    /// Drive concurrent connections through a bounded, seeded mix of calls, then check the
    /// invariants from the tables; exits 1 on any violation (scripts/load.sh, crash.sh, failover.sh).
    Load {
        /// Socket directory or host of the server.
        #[arg(long)]
        host: String,
        #[arg(long)]
        port: u16,
        /// Database to (re)create for the run (with --retry-journal: the one the journal's run made).
        #[arg(long, default_value = "toolgate_load")]
        dbname: String,
        /// Where the run's private keys are generated.
        #[arg(long)]
        keys: PathBuf,
        #[arg(long, default_value_t = 32)]
        connections: usize,
        /// At most this many calls.
        #[arg(long, default_value_t = 2000)]
        calls: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Stop driving after this many seconds even if calls remain.
        #[arg(long)]
        duration: Option<u64>,
        /// Lost replies are expected (backends killed, server stopped): reconnect, then retry
        /// every call whose reply was lost with its key.
        #[arg(long)]
        crash: bool,
        /// Write every call to this file and stop before checking (a failover's first half).
        #[arg(long, conflicts_with = "retry_journal")]
        journal: Option<PathBuf>,
        /// Retry every write and confirmation of this journal, then check (a failover's second half).
        #[arg(long)]
        retry_journal: Option<PathBuf>,
    },
    /// For scripts/bench.sh: make COUNT proposals of tenant bench1 and sign a "sim" for each
    /// with DIR/chan-bench1.key into bench.confirmations.
    BenchConfirmations {
        #[command(flatten)]
        bench: BenchDb,
        #[arg(long)]
        count: i64,
    },
    /// For scripts/bench-agent.sh: SESSIONS MCP sessions (or SQL connections) closing orders of
    /// tenant bench for SECONDS through the MCP server at --mcp (or `toolgate.tenant_call`), and
    /// print "mode sessions calls seconds calls/s p50_ms p99_ms" (TSV). Fails unless every call
    /// answered SUCCEEDED with one effect.
    BenchAgent {
        #[command(flatten)]
        bench: BenchDb,
        /// agent (tools/call through the server), sql (the same call, direct), or blocked (agent,
        /// while a session of tenant bench2 waits on a row lock).
        #[arg(long)]
        mode: agent_bench::Mode,
        #[arg(long)]
        sessions: usize,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// The MCP server's address (its resource URL is http://ADDR/mcp).
        #[arg(long)]
        mcp: std::net::SocketAddr,
        /// The application's login the direct calls use (the server's own).
        #[arg(long, default_value = "bench_agent")]
        login: String,
    },
    /// For scripts/bench.sh: enqueue INTENTS intents of the outbox tool erp_purchase_part in
    /// DBNAME (bench/setup.sql's), start the fake ERP on 127.0.0.1, drain them with the dispatcher
    /// (--batch, --concurrency) and print "concurrency batch intents seconds intents/s" (TSV).
    /// Exits 2 unless the ERP made one effect per intent, each sent once, and every outbox row is
    /// SUCCEEDED.
    BenchDispatch {
        #[command(flatten)]
        bench: BenchDb,
        #[arg(long)]
        intents: i64,
        #[arg(long, default_value_t = 32)]
        batch: i32,
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// The fake ERP does each write at once and answers DONE (no protocol to poll).
        #[arg(long)]
        synchronous: bool,
        /// Seconds --clients clients enqueue back to back while the dispatcher delivers
        /// (--intents ignored); prints the queue's longest and last lag too.
        #[arg(long)]
        steady: Option<f64>,
        #[arg(long, default_value_t = 1)]
        clients: usize,
        /// The enqueuing sessions do not notify (toolgate.outbox_notify off): the dispatcher
        /// finds their intents by polling.
        #[arg(long)]
        no_notify: bool,
        /// The dispatcher's --poll in a steady run, in seconds.
        #[arg(long, default_value_t = 2.0)]
        poll: f64,
    },
}

/// The benchmark's database and its key directory (`bench-confirmations`, `bench-dispatch`).
#[derive(Args)]
struct BenchDb {
    #[arg(long)]
    host: String,
    #[arg(long)]
    port: u16,
    #[arg(long)]
    dbname: String,
    /// The directory of bench1's keys (scripts/bench.sh's).
    #[arg(long)]
    keys: PathBuf,
}

/// What the person answered to a proposal, and the channel key that signs it (`confirmation`,
/// `confirm`).
#[derive(Args)]
struct Answer {
    /// The directory of the channel's private key, DIR/KID.key.
    #[arg(long)]
    dir: PathBuf,
    /// The kid the channel's public key was registered under (toolgate.add_key(…, 'channel', …)).
    #[arg(long)]
    kid: String,
    /// The proposal's id (proposal.id of the NEEDS_CONFIRMATION outcome).
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
}

impl Answer {
    /// The confirmation token the tenant's channel would send for this answer.
    fn sign(&self) -> toolgate_cli::Result<String> {
        let signer = keys::load(&self.dir, &self.kid)?;
        let at = keys::now() + self.at_offset;
        Ok(keys::confirmation(&signer, &self.proposal, &self.decision, &self.text, at, &self.via))
    }
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Seal the audit once: first the audit's monthly partitions made ahead
    /// (toolgate.audit_partitions; each printed as "partition", its name, month and rows moved
    /// into it), then every tenant's rows written since its last checkpoint, or one tenant's,
    /// into signed checkpoints, tenant by tenant (toolgate.tenant_seal, each a statement of its
    /// own: on a Citus cluster each runs on its tenant's worker); prints each checkpoint written
    /// (tenant, checkpoint, rows, end of its period, tab-separated) and exits. With
    /// --purge, then removes what is past each tenant's retention (toolgate.purge) and prints
    /// each purge (tenant, "purged", last checkpoint, rows). For a timer
    /// (packaging/systemd/toolgate-audit.timer); the login needs toolgate_operator.
    #[command(after_help = "Exit status:\n  0  sealed (perhaps nothing new), and purged if asked\n  \
        2  a usage error, no connection, no privilege or an unknown tenant (nothing sealed), or \
        the purge refused (what was sealed stays sealed)")]
    Seal {
        /// The login's libpq conninfo or URL, TLS as its sslmode says [default: the environment
        /// variable TOOLGATE_DATABASE_URL].
        #[arg(long, value_name = "CONNINFO_OR_URL")]
        database: Option<String>,
        /// Only this tenant's audit.
        #[arg(long)]
        tenant: Option<String>,
        /// Rows per checkpoint at most.
        #[arg(long, default_value_t = 10000)]
        batch: i32,
        /// After sealing, remove whole sealed periods past each tenant's retention
        /// (toolgate.set_retention), leaving a signed record of each purge.
        #[arg(long)]
        purge: bool,
    },
    /// Write the sealed audit to standard output (toolgate.export_audit), checkpoint by
    /// checkpoint, each after its rows: every column of a row, the text its leaf hashes and the
    /// leaf; a checkpoint's period, ids, root, chain, signature, the message signed and its key's
    /// public half. Rows not sealed yet are not written. With --state, each run goes on from
    /// where the last stopped: the file keeps each tenant's last checkpoint written, rewritten
    /// after each one. The login needs toolgate_auditor.
    #[command(after_help = "Exit status:\n  0  written (perhaps nothing new)\n  \
        2  a usage error, no connection, no privilege, an unreadable state file (what was \
        written before is whole: the state names its last checkpoint)")]
    Export {
        /// The login's libpq conninfo or URL, TLS as its sslmode says [default: the environment
        /// variable TOOLGATE_DATABASE_URL].
        #[arg(long, value_name = "CONNINFO_OR_URL")]
        database: Option<String>,
        /// jsonl: one JSON object a line, its `type` row or checkpoint; csv: a header (when
        /// starting from the beginning), then one record a line, the columns a row or a
        /// checkpoint does not have left empty.
        #[arg(long, value_enum, default_value = "jsonl")]
        format: audit::Format,
        /// A JSON file of each tenant's last checkpoint written ({"acme": 12}): read first,
        /// rewritten after each checkpoint (a new file renamed over it).
        #[arg(long, value_name = "FILE")]
        state: Option<PathBuf>,
        /// Only this tenant's audit.
        #[arg(long)]
        tenant: Option<String>,
        /// With --tenant: start after this checkpoint number (instead of the state's).
        #[arg(long, requires = "tenant")]
        after: Option<i64>,
    },
}

fn audit_command(command: AuditCommand) -> toolgate_cli::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let env = std::env::var(confirm::DATABASE_ENV).ok();
    match command {
        AuditCommand::Seal { database, tenant, batch, purge } => {
            let database = confirm::database(database, env)?;
            for made in runtime.block_on(audit::partitions(&database))? {
                println!("partition\t{}\t{}\t{}", made.name, made.month, made.moved);
            }
            for sealed in runtime.block_on(audit::seal(&database, tenant.as_deref(), batch))? {
                println!("{}\t{}\t{}\t{}", sealed.tenant, sealed.checkpoint, sealed.rows, sealed.sealed_to);
            }
            if purge {
                for purged in runtime.block_on(audit::purge(&database, tenant.as_deref()))? {
                    println!("{}\tpurged\t{}\t{}", purged.tenant, purged.through_checkpoint, purged.rows);
                }
            }
        }
        AuditCommand::Export { database, format, state, tenant, after } => {
            let database = confirm::database(database, env)?;
            let mut positions = match &state {
                Some(file) => audit::read_positions(file)?,
                None => audit::Positions::new(),
            };
            if let (Some(t), Some(n)) = (&tenant, after) {
                positions.insert(t.clone(), n);
            }
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            let (checkpoints, rows) = runtime.block_on(async {
                let client = toolgate_cli::db::connect_to(&database).await?;
                audit::export(&client, tenant.as_deref(), &mut positions, format, &mut out, |p| match &state {
                    Some(file) => audit::write_positions(file, p),
                    None => Ok(()),
                })
                .await
            })?;
            eprintln!("toolgate audit export: {checkpoints} checkpoints, {rows} rows");
        }
    }
    Ok(ExitCode::SUCCESS)
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
        Command::Identity { dir, kid, sub, tenant, role, ttl, aud } => {
            println!("{}", keys::identity_for(&keys::load(&dir, &kid)?, &sub, &tenant, &role, ttl, &aud))
        }
        Command::Token { dir, kid, claims, ttl } => {
            let claims: serde_json::Value = serde_json::from_str(&claims)?;
            println!("{}", keys::token(&keys::load(&dir, &kid)?, claims, ttl)?)
        }
        Command::Confirmation { answer } => println!("{}", answer.sign()?),
        Command::Confirm { answer, identity_file, database } => {
            let env = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
            let identity = confirm::identity_token(identity_file.as_deref(), env(confirm::IDENTITY_ENV))?;
            let database = confirm::database(database, env(confirm::DATABASE_ENV))?;
            let confirmation = answer.sign()?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let reply = runtime.block_on(confirm::submit(&database, &identity, &confirmation))?;
            println!("{reply}");
            return Ok(ExitCode::from(confirm::exit_status(&reply)));
        }
        Command::Login {
            issuer,
            client_id,
            token_file,
            device,
            scope,
            audience,
            id_token,
            ca_file,
            port,
            wait,
            refresh,
            before,
            keep,
        } => {
            let token_file = token_file
                .or_else(|| {
                    std::env::var_os("TOOLGATE_IDENTITY_TOKEN_FILE").filter(|v| !v.is_empty()).map(PathBuf::from)
                })
                .ok_or("give --token-file or set TOOLGATE_IDENTITY_TOKEN_FILE")?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let outcome = runtime.block_on(async {
                if refresh {
                    match login::refresh(&token_file, before).await? {
                        login::Refreshed::Written(expires) => {
                            eprintln!("toolgate login: refreshed; the token expires at {}", login::when(expires))
                        }
                        login::Refreshed::NotDue(expires) => {
                            eprintln!("toolgate login: not due; the token expires at {}", login::when(expires))
                        }
                    }
                } else {
                    let request = login::Request {
                        issuer: issuer.expect("clap requires it"),
                        client_id: client_id.expect("clap requires it"),
                        scopes: scope,
                        audience,
                        kind: if id_token { login::Kind::Id } else { login::Kind::Access },
                        ca_file,
                    };
                    let wait = std::time::Duration::from_secs(wait);
                    let flow = if device {
                        login::Flow::Device { wait }
                    } else {
                        login::Flow::Browser { browser: std::env::var("BROWSER").ok(), port, wait }
                    };
                    let (subject, expires) = login::sign_in(&request, flow, &token_file).await?;
                    eprintln!(
                        "toolgate login: signed in as {subject}; the token is in {} until {}",
                        token_file.display(),
                        login::when(expires)
                    );
                }
                if keep {
                    return Err(login::keep(&token_file, before).await);
                }
                Ok(())
            });
            return Ok(match outcome {
                Ok(()) => ExitCode::SUCCESS,
                Err(login::Failure::Refused(m)) => {
                    eprintln!("toolgate login: {m}; sign in again with toolgate login --issuer … --client-id …");
                    ExitCode::from(1)
                }
                Err(login::Failure::Error(m)) => {
                    eprintln!("toolgate login: {m}");
                    ExitCode::from(2)
                }
            });
        }
        Command::Lab { host, port, dbname, keys } => {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let lab = runtime.block_on(fixture::Lab::create(&Server { host, port }, &dbname, &keys))?;
            println!("lab: database {} loaded; keys in {}", lab.dbname, lab.keys_dir.display());
        }
        Command::Audit { command } => return audit_command(command),
        Command::Dispatch {
            database,
            once,
            poll,
            batch,
            concurrency,
            refresh_token_file,
            allow_origin,
            allow_private_addresses,
            max_answer_bytes,
            ca_file,
            timeout,
            keep_alive,
            settle_within,
            max_attempts,
            retry_delay,
            max_retry_delay,
            shutdown_grace,
            listen,
            breaker_failures,
            breaker_cooldown,
            lease,
        } => {
            let mut refresh_token_files = std::collections::HashMap::new();
            for named in refresh_token_file {
                let Some((name, file)) = named.split_once('=').filter(|(n, f)| !n.is_empty() && !f.is_empty()) else {
                    return Err(format!(
                        "--refresh-token-file {named:?}: NAME=FILE, the endpoint's name and its refresh token file"
                    )
                    .into());
                };
                if refresh_token_files.insert(name.to_string(), PathBuf::from(file)).is_some() {
                    return Err(format!("--refresh-token-file: endpoint {name} named twice").into());
                }
            }
            let allowed_origins =
                allow_origin.iter().map(|o| dispatch::allowed_origin(o)).collect::<Result<Vec<_>, _>>()?;
            let env = std::env::var(confirm::DATABASE_ENV).ok();
            let secs = |s: f64| std::time::Duration::try_from_secs_f64(s).map_err(|e| format!("a duration: {e}"));
            let opts = dispatch::Options {
                database: confirm::database(database, env)?,
                once,
                poll: secs(poll)?,
                batch,
                concurrency,
                refresh_token_files,
                allowed_origins,
                allow_private_addresses,
                max_answer_bytes,
                ca_file,
                timeout: secs(timeout)?,
                keep_alive: secs(keep_alive)?,
                settle_within: secs(settle_within)?,
                max_attempts,
                retry_delay: secs(retry_delay)?,
                max_retry_delay: secs(max_retry_delay)?,
                lease: secs(lease)?,
                stop: None,
                shutdown_grace: secs(shutdown_grace)?,
                metrics: None,
                breaker_failures,
                breaker_cooldown: secs(breaker_cooldown)?,
            };
            let listen = listen.as_deref().map(toolgate_cli::observe::loopback).transpose()?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let report = runtime.block_on(async {
                let (stop, stopped) = tokio::sync::watch::channel(false);
                let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
                tokio::spawn(async move {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                    eprintln!("toolgate dispatch: stopping: nothing more claimed; deliveries in flight end or are handed back");
                    let _ = stop.send(true);
                });
                let metrics = match listen {
                    Some(addr) => {
                        let metrics = std::sync::Arc::new(toolgate_cli::observe::Metrics::default());
                        toolgate_cli::observe::serve(addr, metrics.clone()).await?;
                        Some(metrics)
                    }
                    None => None,
                };
                dispatch::run(&dispatch::Options { stop: Some(stopped), metrics, ..opts }).await
            })?;
            let mut settled: Vec<_> = report.settled.iter().collect();
            settled.sort();
            println!(
                "{}",
                serde_json::json!({"claimed": report.claimed, "lost": report.lost, "handed_back": report.handed_back, "settled": settled.into_iter().collect::<std::collections::BTreeMap<_, _>>()})
            );
        }
        Command::Console {
            http,
            public_url,
            issuer,
            client_id,
            client_secret_file,
            ca_file,
            database,
            tls_cert,
            tls_key,
            insecure_http,
            listen,
            webhooks,
        } => {
            let database = database
                .or_else(|| std::env::var("TOOLGATE_DATABASE_URL").ok().filter(|v| !v.is_empty()))
                .ok_or("give --database or set TOOLGATE_DATABASE_URL")?;
            let tls = tls_cert.zip(tls_key).map(|(cert, key)| toolgate_mcp::config::ListenerTls { cert, key });
            let opts = console::Options {
                http,
                public_url,
                database,
                issuer,
                client_id,
                client_secret_file,
                ca_file,
                tls,
                insecure_http,
                listen,
                webhooks,
            };
            toolgate_mcp::json_logs("toolgate_cli::console");
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            if let Err(e) = runtime.block_on(console::run(opts)) {
                eprintln!("toolgate console: {e}");
                return Ok(ExitCode::from(2));
            }
        }
        Command::Mcp { http, listen, tls_cert, tls_key, insecure_http } => {
            toolgate_mcp::run(&toolgate_mcp::config::Options { http, listen, tls_cert, tls_key, insecure_http })?
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
        Command::Load {
            host,
            port,
            dbname,
            keys,
            connections,
            calls,
            seed,
            duration,
            crash,
            journal,
            retry_journal,
        } => {
            let server = Server { host, port };
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let report = match retry_journal {
                Some(journal) => {
                    let opts = load::RetryOptions { server, dbname, keys_dir: keys, journal, connections };
                    runtime.block_on(load::retry_journal(&opts))?
                }
                None => {
                    let duration = duration.map(std::time::Duration::from_secs);
                    let opts = load::Options {
                        server,
                        dbname,
                        keys_dir: keys,
                        connections,
                        calls,
                        seed,
                        duration,
                        crash,
                        journal,
                    };
                    runtime.block_on(load::run(&opts))?
                }
            };
            if report.violations > 0 {
                return Ok(ExitCode::from(1));
            }
        }
        Command::BenchConfirmations { bench: BenchDb { host, port, dbname, keys: dir }, count } => {
            let identity =
                keys::identity(&keys::load(&dir, "idp-bench1")?, "bench-user", "bench1", "supervisor", 6 * 3600);
            let channel = keys::load(&dir, "chan-bench1")?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let db = Server { host, port }.connect("postgres", &dbname).await?;
                bench::confirmations(&db, &identity, &channel, count).await
            })?;
        }
        Command::BenchAgent {
            bench: BenchDb { host, port, dbname, keys: keys_dir },
            mode,
            sessions,
            seconds,
            mcp,
            login,
        } => {
            let run = agent_bench::Run {
                server: Server { host, port },
                dbname,
                login,
                keys_dir,
                resource: format!("http://{mcp}/mcp"),
                mcp,
                mode,
                sessions,
                seconds,
            };
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let f = runtime.block_on(agent_bench::run(&run))?;
            let name = format!("{mode:?}").to_lowercase();
            println!(
                "{name}\t{sessions}\t{}\t{:.3}\t{:.1}\t{:.2}\t{:.2}",
                f.calls,
                f.seconds,
                f.calls as f64 / f.seconds,
                f.p50_ms,
                f.p99_ms
            );
        }
        Command::BenchDispatch {
            bench: BenchDb { host, port, dbname, keys: keys_dir },
            intents,
            batch,
            concurrency,
            synchronous,
            steady,
            clients,
            no_notify,
            poll,
        } => {
            let steady = steady.map(std::time::Duration::try_from_secs_f64).transpose()?;
            let poll = std::time::Duration::try_from_secs_f64(poll)?;
            let run = bench::DispatchRun {
                server: Server { host, port },
                dbname,
                keys_dir,
                intents,
                batch,
                concurrency,
                synchronous,
                steady,
                clients,
                notify: !no_notify,
                poll,
            };
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let figures = runtime.block_on(bench::dispatch(&run))?;
            let lag = |l: Option<f64>| l.map_or("-".to_string(), |l| format!("{l:.3}"));
            println!(
                "{concurrency}\t{batch}\t{}\t{:.3}\t{:.1}\t{:.0}\t{}\t{}",
                figures.intents,
                figures.seconds,
                figures.per_second(),
                figures.cpu_us_per_intent,
                lag(figures.max_lag),
                lag(figures.last_lag)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
