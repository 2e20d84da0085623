#![no_main]
//! Gate step 1 and `confirm`'s channel token: `key_id`, `verify_identity` and
//! `verify_confirmation` against fixed registered keys. Tokens are assembled from structured
//! parts (headers and claims the verifier looks at, or any text), signed for real by a
//! registered key, by a rogue key, or not at all. Nothing may panic, and a token verifies only
//! when it is an EdDSA JWS really signed by the registered key of the right purpose and tenant,
//! and unexpired at the clock it is judged by.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signer as _, SigningKey};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use toolgate_core::token::{self, KeyPurpose, RegisteredKey, SKEW_SECONDS};

const NOW: i64 = 1_800_000_000;
const IDP: [u8; 32] = [7; 32];
const CHAN: [u8; 32] = [8; 32];
const ROGUE: [u8; 32] = [9; 32];

#[derive(Arbitrary, Debug)]
enum Known {
    EdDsa,
    Hs256,
    None,
    Rs256,
    IdpKid,
    ChanKid,
    TenantA,
    TenantB,
    Supervisor,
    Approve,
    Decline,
    Typed,
    Voice,
    Sim,
    Empty,
}

impl Known {
    fn text(&self) -> &'static str {
        match self {
            Known::EdDsa => "EdDSA",
            Known::Hs256 => "HS256",
            Known::None => "none",
            Known::Rs256 => "RS256",
            Known::IdpKid => "idp-shopping-a",
            Known::ChanKid => "chan-shopping-a",
            Known::TenantA => "shopping-a",
            Known::TenantB => "shopping-b",
            Known::Supervisor => "supervisor",
            Known::Approve => "approve",
            Known::Decline => "decline",
            Known::Typed => "typed",
            Known::Voice => "voice",
            Known::Sim => "sim",
            Known::Empty => "",
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Name {
    Alg,
    Kid,
    Typ,
    Sub,
    Tenant,
    Role,
    Exp,
    Iat,
    Proposal,
    Decision,
    Text,
    At,
    Via,
    Other(String),
}

impl Name {
    fn text(&self) -> &str {
        match self {
            Name::Alg => "alg",
            Name::Kid => "kid",
            Name::Typ => "typ",
            Name::Sub => "sub",
            Name::Tenant => "tenant",
            Name::Role => "role",
            Name::Exp => "exp",
            Name::Iat => "iat",
            Name::Proposal => "proposal",
            Name::Decision => "decision",
            Name::Text => "text",
            Name::At => "at",
            Name::Via => "via",
            Name::Other(s) => s,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Val {
    Known(Known),
    Str(String),
    /// Seconds from the clock the token is judged by.
    FromNow(i32),
    Int(i64),
    Float(f64),
    Bool(bool),
    Null,
    Array(Vec<i8>),
}

impl Val {
    fn json(&self) -> Value {
        match self {
            Val::Known(k) => Value::from(k.text()),
            Val::Str(s) => Value::from(s.as_str()),
            Val::FromNow(d) => Value::from(NOW + i64::from(*d)),
            Val::Int(i) => Value::from(*i),
            Val::Float(f) => serde_json::Number::from_f64(*f).map(Value::Number).unwrap_or(Value::Null),
            Val::Bool(b) => Value::from(*b),
            Val::Null => Value::Null,
            Val::Array(a) => Value::from(a.clone()),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Part {
    /// A JSON object of fields the verifier looks at, base64url-encoded.
    Fields(Vec<(Name, Val)>),
    /// Any text, base64url-encoded.
    Encoded(String),
    /// Any text, used verbatim as the part.
    Verbatim(String),
}

impl Part {
    fn render(&self) -> String {
        match self {
            Part::Fields(fields) => {
                let map: Map<String, Value> = fields.iter().map(|(n, v)| (n.text().to_string(), v.json())).collect();
                URL_SAFE_NO_PAD.encode(Value::Object(map).to_string())
            }
            Part::Encoded(s) => URL_SAFE_NO_PAD.encode(s),
            Part::Verbatim(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Signature {
    Idp,
    Channel,
    Rogue,
    Bytes(Vec<u8>),
    Verbatim(String),
}

#[derive(Arbitrary, Debug)]
struct Input {
    header: Part,
    claims: Part,
    signature: Signature,
    /// A fourth part, or more text after the signature.
    trailer: Option<String>,
    clock: i16,
}

fn registered(seed: [u8; 32], tenant: &str, purpose: KeyPurpose) -> RegisteredKey {
    RegisteredKey {
        tenant: tenant.to_string(),
        purpose,
        public_key: SigningKey::from_bytes(&seed).verifying_key().to_bytes(),
        active: true,
    }
}

/// The `alg` the header really names, read the way a reviewer would.
fn header_alg(header: &str) -> Option<String> {
    let bytes = URL_SAFE_NO_PAD.decode(header).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v.get("alg")?.as_str().map(str::to_string)
}

fuzz_target!(|input: Input| {
    let header = input.header.render();
    let claims = input.claims.render();
    let signing_input = format!("{header}.{claims}");
    let (signature, signed_by) = match &input.signature {
        Signature::Idp => (Some(SigningKey::from_bytes(&IDP).sign(signing_input.as_bytes())), Some(IDP)),
        Signature::Channel => (Some(SigningKey::from_bytes(&CHAN).sign(signing_input.as_bytes())), Some(CHAN)),
        Signature::Rogue => (Some(SigningKey::from_bytes(&ROGUE).sign(signing_input.as_bytes())), Some(ROGUE)),
        _ => (None, None),
    };
    let signature = match (&input.signature, signature) {
        (_, Some(s)) => URL_SAFE_NO_PAD.encode(s.to_bytes()),
        (Signature::Bytes(b), None) => URL_SAFE_NO_PAD.encode(b),
        (Signature::Verbatim(s), None) => s.clone(),
        _ => unreachable!(),
    };
    let mut tok = format!("{signing_input}.{signature}");
    if let Some(t) = &input.trailer {
        tok.push_str(t);
    }
    let now = NOW + i64::from(input.clock);
    let alg_is_eddsa = header_alg(&header).as_deref() == Some("EdDSA");

    let idp = registered(IDP, "shopping-a", KeyPurpose::Identity);
    let chan = registered(CHAN, "shopping-a", KeyPurpose::Channel);
    let mut inactive = idp.clone();
    inactive.active = false;

    // As the gate does it: the kid from the header, then the key it names.
    if let Ok(kid) = token::key_id(Some(&tok)) {
        assert!(alg_is_eddsa, "key_id accepted a header whose alg is not EdDSA");
        assert!(!kid.is_empty());
        let key = match kid.as_str() {
            "idp-shopping-a" => Some(&idp),
            "chan-shopping-a" => Some(&chan),
            _ => None,
        };
        let _ = token::verify_identity(&tok, key, now);
        let _ = token::verify_confirmation(&tok, key, "shopping-a", now);
    }

    // Every key against every token, whatever its kid says.
    if let Ok(who) = token::verify_identity(&tok, Some(&idp), now) {
        assert_eq!(signed_by, Some(IDP), "an identity verified without the identity provider's signature: {tok}");
        assert!(alg_is_eddsa, "an identity verified under another alg: {tok}");
        assert!(who.exp > now, "an expired identity verified");
        assert!(who.iat.is_none_or(|iat| iat <= now + SKEW_SECONDS), "an identity issued in the future verified");
        assert_eq!(who.tenant, "shopping-a", "an identity claims another tenant than its key's");
        assert!(!who.sub.is_empty() && !who.role.is_empty());
    }
    if let Ok(c) = token::verify_confirmation(&tok, Some(&chan), "shopping-a", now) {
        assert_eq!(signed_by, Some(CHAN), "a confirmation verified without the channel's signature: {tok}");
        assert!(alg_is_eddsa, "a confirmation verified under another alg: {tok}");
        assert!(c.exp > now, "an expired confirmation verified");
        assert!(c.at <= now + SKEW_SECONDS, "a confirmation received in the future verified");
    }
    assert!(token::verify_identity(&tok, Some(&chan), now).is_err(), "a channel key proved an identity");
    assert!(token::verify_identity(&tok, Some(&inactive), now).is_err(), "an inactive key verified");
    assert!(token::verify_identity(&tok, None, now).is_err(), "no key verified");
    assert!(
        token::verify_confirmation(&tok, Some(&idp), "shopping-a", now).is_err(),
        "an identity key signed a confirmation"
    );
    assert!(token::verify_confirmation(&tok, Some(&chan), "shopping-b", now).is_err(), "another tenant's channel");
    // And the raw text, as any caller may send it.
    let _ = token::key_id(Some(&input.header.render()));
    if let Part::Verbatim(s) = &input.claims {
        let _ = token::key_id(Some(s));
        let _ = token::verify_identity(s, Some(&idp), now);
    }
});
