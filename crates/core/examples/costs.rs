//! What the gate's pure steps cost per call, measured in a loop (release build):
//!
//!     cargo run --release -p toolgate-core --example costs
//!
//! Token verification, argument parsing and schema validation, the canonical digest and the
//! HMAC: the CPU the gate spends outside SQL. scripts/bench.sh reports these beside the SQL
//! statements' times.

use serde_json::{json, Value};
use std::hint::black_box;
use std::time::Instant;
use toolgate_core::contract::{parse_args, Contract};
use toolgate_core::digest::{args_digest, args_hmac};
use toolgate_core::token::{key_id, parse_public_key, verify_identity, KeyPurpose, RegisteredKey, Signer};

fn per_call(name: &str, iterations: u32, mut f: impl FnMut()) {
    for _ in 0..iterations / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(iterations);
    println!("{name:<44} {us:>8.2} µs");
}

fn main() {
    let signer = Signer::from_seed("idp-bench", [7; 32]);
    let now = 1_900_000_000;
    let token = signer
        .sign(&json!({"sub": "bench-user", "tenant": "bench", "role": "supervisor", "iat": now, "exp": now + 3600}));
    let key = RegisteredKey {
        tenant: "bench".into(),
        purpose: KeyPurpose::Identity,
        public_key: parse_public_key(&signer.public_key()).unwrap(),
        active: true,
    };
    let schema: Value = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "additionalProperties": false,
        "required": ["order_id", "reason", "idempotency_key"],
        "properties": {"order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"},
                       "reason": {"type": "string", "minLength": 8, "maxLength": 120},
                       "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}}});
    let contract = Contract::compile(&schema).unwrap();
    let text = r#"{"order_id": "742", "reason": "benchmark close", "idempotency_key": "close-742"}"#;
    let args: Value = serde_json::from_str(text).unwrap();
    let hmac_key = [3u8; 32];

    per_call("token: key_id + verify_identity (Ed25519)", 20_000, || {
        black_box(key_id(Some(&token)).unwrap());
        black_box(verify_identity(&token, Some(&key), now).unwrap());
    });
    per_call("contract: parse_args (bounds)", 200_000, || {
        black_box(parse_args(Some(text)).unwrap());
    });
    per_call("contract: schema validation (compiled)", 200_000, || {
        black_box(contract.check(&args));
    });
    per_call("contract: schema compilation (once per backend)", 2_000, || {
        black_box(Contract::compile(&schema).unwrap());
    });
    per_call("digest: RFC 8785 + SHA-256", 200_000, || {
        black_box(args_digest(&args));
    });
    per_call("audit: RFC 8785 + HMAC-SHA256", 200_000, || {
        black_box(args_hmac(&hmac_key, &args));
    });
}
