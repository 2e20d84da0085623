//! `toolgate-mcp-broken`: `toolgate mcp` with one deliberately broken behaviour, named by
//! `TOOLGATE_MCP_BROKEN`, for tests/mcp/evals.py to prove it catches it. Built only with
//! `--features broken`; it refuses to start without a known behaviour.

use std::process::ExitCode;
use toolgate_mcp::broken::{Broken, VARIABLE};

fn main() -> ExitCode {
    if Broken::from_env().is_none() {
        let names: Vec<&str> = Broken::ALL.iter().map(|(n, _)| *n).collect();
        eprintln!("toolgate-mcp-broken: set {VARIABLE} to one of {}", names.join(", "));
        return ExitCode::from(2);
    }
    // `--http ADDR`, as `toolgate mcp` takes it.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let http = match args.as_slice() {
        [] => None,
        [flag, addr] if flag == "--http" => Some(addr.as_str()),
        _ => {
            eprintln!("toolgate-mcp-broken: usage: toolgate-mcp-broken [--http ADDR]");
            return ExitCode::from(2);
        }
    };
    let options = toolgate_mcp::config::Options { http: http.map(String::from), ..Default::default() };
    match toolgate_mcp::run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolgate-mcp-broken: {e}");
            ExitCode::from(2)
        }
    }
}
