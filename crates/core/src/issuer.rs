//! Identity tokens from an identity provider a company already runs (Keycloak, Auth0, Okta…):
//! RS256/PS256, ES256 or EdDSA, verified against the keys of the JWKS document the DBA registered
//! for the provider's `iss`, for one of the audiences the registration accepts.
//!
//! Each key verifies only the algorithms of its own type (RSA: RS256 and PS256; P-256: ES256;
//! Ed25519: EdDSA), so neither `none`, nor HMAC keyed with a public key, nor one key type read as
//! another can pass. Parsing and signatures are jsonwebtoken's (its RustCrypto provider, Ed25519
//! through the strict verifier of `token`). A header that carries or points at key material
//! (`jwk`, `jku`, `x5c`, `x5u`) or names critical extensions (`crit`) is refused: keys come only
//! from the registration. A payload naming a claim twice is refused: parsers disagree on which
//! copy counts.

use crate::token::{
    bounded, header_of, judge_times, parse_public_key, strict_provider, Clock, Identity, TokenError, MAX_TOKEN_BYTES,
};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::crypto::rust_crypto;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The smallest RSA modulus accepted, in bits.
pub const MIN_RSA_BITS: usize = 2048;
/// The largest RSA modulus accepted, in bits (a larger one only costs time).
pub const MAX_RSA_BITS: usize = 8192;
/// Keys one JWKS document may hold.
pub const MAX_KEYS: usize = 32;

/// The key types an issuer's JWKS may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    Rsa,
    P256,
    Ed25519,
}

impl KeyType {
    /// The type as the documents name it.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::Rsa => "RSA",
            KeyType::P256 => "P-256",
            KeyType::Ed25519 => "Ed25519",
        }
    }

    /// The only algorithms a key of this type verifies.
    pub fn algorithms(self) -> &'static [Algorithm] {
        match self {
            KeyType::Rsa => &[Algorithm::RS256, Algorithm::PS256],
            KeyType::P256 => &[Algorithm::ES256],
            KeyType::Ed25519 => &[Algorithm::EdDSA],
        }
    }
}

/// One signing key of a registered JWKS.
#[derive(Clone, Debug)]
pub struct IssuerKey {
    pub kid: String,
    pub key_type: KeyType,
    /// What this key verifies: the JWK's own `alg` if it names one, else its type's algorithms.
    pub algorithms: Vec<Algorithm>,
    key: DecodingKey,
}

/// A trusted issuer as the DBA registered it: its `iss`, the audiences accepted, its keys, and
/// where its tokens carry the tenant, the actor and the roles.
#[derive(Clone, Debug)]
pub struct Issuer {
    pub iss: String,
    pub audiences: Vec<String>,
    pub keys: Vec<IssuerKey>,
    pub tenant_claim: String,
    pub actor_claim: String,
    pub roles_claim: String,
}

/// What a verified issuer token says: the tenant claim's value (mapped to a tenant id by the
/// registration) and the identity with its actor and roles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedIdentity {
    pub tenant_value: String,
    pub identity: Identity,
}

/// Parse a JWKS document as a provider publishes it. Keys marked `"use": "enc"` are skipped
/// (they encrypt, they never sign); every other key must be an RSA key of 2048 to 8192 bits, a
/// P-256 point or a strong Ed25519 key, with a `kid` unique in the document and, if it names an
/// `alg`, one its type verifies. Anything else refuses the whole document.
pub fn parse_jwks(text: &str) -> Result<Vec<IssuerKey>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|_| "a JWKS document is a JSON object".to_string())?;
    let keys =
        doc.get("keys").and_then(Value::as_array).ok_or_else(|| "a JWKS document has a \"keys\" array".to_string())?;
    if keys.len() > MAX_KEYS {
        return Err(format!("a JWKS document of more than {MAX_KEYS} keys"));
    }
    let mut out: Vec<IssuerKey> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let at = |why: &str| format!("key {i}: {why}");
        if key.get("use").and_then(Value::as_str) == Some("enc") {
            continue;
        }
        if key.get("kty").and_then(Value::as_str) == Some("oct") {
            return Err(at("symmetric (HMAC) keys are never accepted"));
        }
        let jwk: Jwk = serde_json::from_value(key.clone()).map_err(|_| at("not a JWK of type RSA, EC or OKP"))?;
        let kid = jwk.common.key_id.clone().filter(|k| bounded(k)).ok_or_else(|| at("no kid"))?;
        if out.iter().any(|k| k.kid == kid) {
            return Err(at("kid named twice in the document"));
        }
        if !matches!(jwk.common.public_key_use, None | Some(PublicKeyUse::Signature)) {
            return Err(at("\"use\" other than \"sig\""));
        }
        let key_type = match &jwk.algorithm {
            AlgorithmParameters::RSA(p) => {
                let n = URL_SAFE_NO_PAD.decode(&p.n).map_err(|_| at("RSA n is not base64url"))?;
                let e = URL_SAFE_NO_PAD.decode(&p.e).map_err(|_| at("RSA e is not base64url"))?;
                let bits = bit_length(&n);
                if bits < MIN_RSA_BITS {
                    return Err(at(&format!("an RSA key of {bits} bits (at least {MIN_RSA_BITS})")));
                }
                if bits > MAX_RSA_BITS {
                    return Err(at(&format!("an RSA key of {bits} bits (at most {MAX_RSA_BITS})")));
                }
                let e_bits = bit_length(&e);
                if !(2..=32).contains(&e_bits) || e.last().is_none_or(|b| b & 1 == 0) {
                    return Err(at("RSA exponent e must be odd, at least 3 and at most 32 bits"));
                }
                KeyType::Rsa
            }
            AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => KeyType::P256,
            AlgorithmParameters::EllipticCurve(_) => return Err(at("an EC key on a curve other than P-256")),
            AlgorithmParameters::OctetKeyPair(p) => {
                parse_public_key(&p.x).map_err(|e| at(&e))?;
                KeyType::Ed25519
            }
            _ => return Err(at("symmetric (HMAC) keys are never accepted")),
        };
        let algorithms = match jwk.common.key_algorithm {
            None => key_type.algorithms().to_vec(),
            Some(alg) => {
                let named = alg.to_string();
                match key_type.algorithms().iter().find(|a| format!("{a:?}") == named) {
                    Some(a) => vec![*a],
                    None => return Err(at(&format!("alg {named} is not one {} keys verify", key_type.name()))),
                }
            }
        };
        let decoding = DecodingKey::from_jwk(&jwk).map_err(|_| at("the key does not decode"))?;
        // The library's own verifier is built now, so a point off the curve is refused here.
        (rust_crypto::DEFAULT_PROVIDER.verifier_factory)(&key_type.algorithms()[0], &decoding)
            .map_err(|_| at("the key is not a valid public key"))?;
        out.push(IssuerKey { kid, key_type, algorithms, key: decoding });
    }
    if out.is_empty() {
        return Err("a JWKS document with no signing key".to_string());
    }
    Ok(out)
}

fn bit_length(be: &[u8]) -> usize {
    let be: &[u8] = &be[be.iter().take_while(|b| **b == 0).count()..];
    be.first().map_or(0, |b| be.len() * 8 - b.leading_zeros() as usize)
}

/// A JSON object that refuses a key named twice (serde_json keeps the last silently).
struct Claims(Map<String, Value>);

impl<'de> Deserialize<'de> for Claims {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Claims, D::Error> {
        struct Once;
        impl<'de> Visitor<'de> for Once {
            type Value = Claims;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object with each claim once")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Claims, A::Error> {
                let mut out = Map::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    if out.contains_key(&k) {
                        return Err(serde::de::Error::custom("a claim named twice"));
                    }
                    out.insert(k, v);
                }
                Ok(Claims(out))
            }
        }
        d.deserialize_map(Once)
    }
}

/// The `iss` an unverified token names, if its payload is a JSON object with each claim once and
/// an `iss` string: which registration to verify it against. Nothing is trusted yet.
pub fn claimed_issuer(token: Option<&str>) -> Result<Option<String>, TokenError> {
    let token = token.filter(|t| !t.is_empty()).ok_or(TokenError::Missing)?;
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(TokenError::Malformed);
    };
    let bytes = URL_SAFE_NO_PAD.decode(payload).map_err(|_| TokenError::Malformed)?;
    let claims: Claims = serde_json::from_slice(&bytes).map_err(|_| TokenError::Claims)?;
    match claims.0.get("iss") {
        None => Ok(None),
        Some(Value::String(iss)) if bounded_long(iss) => Ok(Some(iss.clone())),
        Some(_) => Err(TokenError::Issuer),
    }
}

/// An issuer or audience: URLs run longer than other claims.
fn bounded_long(s: &str) -> bool {
    !s.is_empty() && s.len() <= 512 && !s.chars().any(char::is_control)
}

/// Verify a token against a registered issuer: header, key, algorithm of that key's type,
/// signature, `iss`, `aud`, times, then the mapped claims.
pub fn verify_issued(token: &str, issuer: &Issuer, clock: Clock) -> Result<IssuedIdentity, TokenError> {
    let header = header_of(token)?;
    if header.jwk.is_some() || header.jku.is_some() || header.x5c.is_some() || header.x5u.is_some() {
        return Err(TokenError::EmbeddedKey);
    }
    if header.crit.is_some() {
        return Err(TokenError::Malformed);
    }
    let kid = header.kid.filter(|k| bounded(k)).ok_or(TokenError::NoKeyId)?;
    let key = issuer.keys.iter().find(|k| k.kid == kid).ok_or(TokenError::UnknownKey)?;
    if !key.algorithms.contains(&header.alg) || !key.key_type.algorithms().contains(&header.alg) {
        return Err(TokenError::Algorithm);
    }
    strict_provider()?;
    let mut validation = Validation::new(header.alg);
    // Issuer, audience and times are judged below, against the registration and the database's clock.
    validation.validate_exp = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let claims = decode::<Claims>(token, &key.key, &validation)
        .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature
            | jsonwebtoken::errors::ErrorKind::InvalidEddsaKey
            | jsonwebtoken::errors::ErrorKind::InvalidEcdsaKey
            | jsonwebtoken::errors::ErrorKind::InvalidRsaKey(_) => TokenError::Signature,
            jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => TokenError::Algorithm,
            jsonwebtoken::errors::ErrorKind::Json(_) => TokenError::Claims,
            _ => TokenError::Malformed,
        })?
        .claims
        .0;
    if claims.get("iss").and_then(Value::as_str) != Some(issuer.iss.as_str()) {
        return Err(TokenError::Issuer);
    }
    let accepted = |a: &Value| a.as_str().is_some_and(|a| issuer.audiences.iter().any(|ok| ok == a));
    let audience_ok = match claims.get("aud") {
        Some(Value::String(_)) => claims.get("aud").is_some_and(accepted),
        Some(Value::Array(list)) => list.iter().all(Value::is_string) && list.iter().any(accepted),
        _ => false,
    };
    if !audience_ok {
        return Err(TokenError::Audience);
    }
    let aud = match claims.get("aud") {
        Some(Value::String(a)) => vec![a.clone()],
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => Vec::new(),
    };
    let time = |name: &str| -> Result<Option<i64>, TokenError> {
        match claims.get(name) {
            None => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or(TokenError::Claims),
        }
    };
    let exp = time("exp")?.ok_or(TokenError::Claims)?;
    let (iat, nbf) = (time("iat")?, time("nbf")?);
    judge_times(exp, iat, nbf, clock)?;
    let string = |name: &str| claims.get(name).and_then(Value::as_str).filter(|s| bounded(s)).map(str::to_string);
    let tenant_value = string(&issuer.tenant_claim).ok_or(TokenError::Claims)?;
    let sub = string(&issuer.actor_claim).ok_or(TokenError::Claims)?;
    let roles = roles(claims.get(&issuer.roles_claim)).ok_or(TokenError::Claims)?;
    Ok(IssuedIdentity {
        tenant_value: tenant_value.clone(),
        identity: Identity {
            sub,
            tenant: tenant_value,
            role: roles.join(","),
            exp,
            iat,
            nbf,
            roles,
            aud,
            iss: Some(issuer.iss.clone()),
        },
    })
}

/// The roles claim: one role as a string, or an array of them (at least one; each a bounded
/// string without a comma). Sorted and without repeats.
fn roles(claim: Option<&Value>) -> Option<Vec<String>> {
    let ok = |r: &Value| r.as_str().filter(|r| bounded(r) && !r.contains(',')).map(str::to_string);
    let mut roles: Vec<String> = match claim? {
        Value::String(_) => vec![ok(claim?)?],
        Value::Array(list) if !list.is_empty() && list.len() <= 64 => list.iter().map(ok).collect::<Option<_>>()?,
        _ => return None,
    };
    roles.sort();
    roles.dedup();
    Some(roles)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::Signer;
    use ed25519_dalek::Signer as _;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;
    const ISS: &str = "https://idp.example/realms/acme";

    fn jwks(signers: &[&Signer]) -> String {
        let keys: Vec<Value> = signers
            .iter()
            .map(|s| json!({"kty": "OKP", "crv": "Ed25519", "kid": s.kid(), "x": s.public_key()}))
            .collect();
        json!({ "keys": keys }).to_string()
    }

    fn issuer(signers: &[&Signer]) -> Issuer {
        Issuer {
            iss: ISS.into(),
            audiences: vec!["toolgate".into()],
            keys: parse_jwks(&jwks(signers)).unwrap(),
            tenant_claim: "org_id".into(),
            actor_claim: "sub".into(),
            roles_claim: "roles".into(),
        }
    }

    fn claims() -> Value {
        json!({"iss": ISS, "aud": "toolgate", "sub": "u-1", "org_id": "org_7", "roles": ["technician", "supervisor"],
               "exp": NOW + 300, "iat": NOW})
    }

    /// A compact JWS of exactly these header and payload texts, signed with `s`'s key.
    fn raw(s: &Signer, seed: u8, header: &str, payload: &str) -> String {
        let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
        assert_eq!(URL_SAFE_NO_PAD.encode(key.verifying_key().to_bytes()), s.public_key());
        let msg = format!("{}.{}", URL_SAFE_NO_PAD.encode(header), URL_SAFE_NO_PAD.encode(payload));
        format!("{msg}.{}", URL_SAFE_NO_PAD.encode(key.sign(msg.as_bytes()).to_bytes()))
    }

    #[test]
    fn a_good_token_gives_the_mapped_claims_and_every_role() {
        let s = Signer::from_seed("k1", [1; 32]);
        let got = verify_issued(&s.sign(&claims()), &issuer(&[&s]), NOW.into()).unwrap();
        assert_eq!(got.tenant_value, "org_7");
        assert_eq!(got.identity.sub, "u-1");
        assert_eq!(got.identity.roles, ["supervisor", "technician"]);
        assert_eq!(got.identity.role, "supervisor,technician");
        assert!(got.identity.has_any_role(&["technician".into()]));
        assert!(!got.identity.has_any_role(&["buyer".into()]));
        assert_eq!(claimed_issuer(Some(&s.sign(&claims()))).unwrap().as_deref(), Some(ISS));
    }

    #[test]
    fn issuer_and_audience_are_judged() {
        let s = Signer::from_seed("k1", [1; 32]);
        let i = issuer(&[&s]);
        let with = |k: &str, v: Value| {
            let mut c = claims();
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v;
            }
            verify_issued(&s.sign(&c), &i, NOW.into())
        };
        assert_eq!(with("iss", json!("https://idp.example/realms/other")), Err(TokenError::Issuer));
        assert_eq!(with("iss", Value::Null), Err(TokenError::Issuer));
        assert_eq!(with("aud", json!("another-app")), Err(TokenError::Audience));
        assert_eq!(with("aud", Value::Null), Err(TokenError::Audience));
        assert_eq!(with("aud", json!([])), Err(TokenError::Audience));
        assert!(with("aud", json!(["another-app", "toolgate"])).is_ok());
        assert_eq!(with("org_id", Value::Null), Err(TokenError::Claims));
        assert_eq!(with("roles", json!([])), Err(TokenError::Claims));
        assert_eq!(with("roles", json!([1])), Err(TokenError::Claims));
        assert!(with("roles", json!("technician")).is_ok());
        assert_eq!(with("exp", Value::Null), Err(TokenError::Claims));
        assert_eq!(with("exp", json!(NOW)), Err(TokenError::Expired));
        assert_eq!(with("nbf", json!(NOW + 61)), Err(TokenError::NotYetValid));
    }

    #[test]
    fn the_configured_skew_is_the_one_judged() {
        let s = Signer::from_seed("k1", [1; 32]);
        let mut c = claims();
        c["iat"] = json!(NOW + 100);
        let tok = s.sign(&c);
        assert_eq!(verify_issued(&tok, &issuer(&[&s]), NOW.into()), Err(TokenError::IssuedInFuture));
        let lax = Clock { skew: 120, ..Clock::from(NOW) };
        assert!(verify_issued(&tok, &issuer(&[&s]), lax).is_ok());
    }

    #[test]
    fn headers_with_key_material_and_foreign_algorithms_are_refused() {
        let s = Signer::from_seed("k1", [1; 32]);
        let i = issuer(&[&s]);
        let body = claims().to_string();
        let jwk = format!(
            r#"{{"alg":"EdDSA","kid":"k1","jwk":{}}}"#,
            jwks(&[&s]).trim_start_matches(r#"{"keys":["#).trim_end_matches("]}")
        );
        assert_eq!(verify_issued(&raw(&s, 1, &jwk, &body), &i, NOW.into()), Err(TokenError::EmbeddedKey));
        let jku = r#"{"alg":"EdDSA","kid":"k1","jku":"https://evil.example/jwks"}"#;
        assert_eq!(verify_issued(&raw(&s, 1, jku, &body), &i, NOW.into()), Err(TokenError::EmbeddedKey));
        let x5c = r#"{"alg":"EdDSA","kid":"k1","x5c":["MIIB"]}"#;
        assert_eq!(verify_issued(&raw(&s, 1, x5c, &body), &i, NOW.into()), Err(TokenError::EmbeddedKey));
        assert!(verify_issued(&raw(&s, 1, r#"{"alg":"EdDSA","kid":"k1"}"#, &body), &i, NOW.into()).is_ok());
        // An Ed25519 key verifies EdDSA only: the same signature under another alg name fails.
        let es = raw(&s, 1, r#"{"alg":"ES256","kid":"k1"}"#, &body);
        assert_eq!(verify_issued(&es, &i, NOW.into()), Err(TokenError::Algorithm));
        let hs = raw(&s, 1, r#"{"alg":"HS256","kid":"k1"}"#, &body);
        assert_eq!(verify_issued(&hs, &i, NOW.into()), Err(TokenError::Algorithm));
        let none =
            format!("{}.{}.", URL_SAFE_NO_PAD.encode(r#"{"alg":"none","kid":"k1"}"#), URL_SAFE_NO_PAD.encode(&body));
        assert_eq!(verify_issued(&none, &i, NOW.into()), Err(TokenError::Algorithm));
        let no_kid = raw(&s, 1, r#"{"alg":"EdDSA"}"#, &body);
        assert_eq!(verify_issued(&no_kid, &i, NOW.into()), Err(TokenError::NoKeyId));
    }

    #[test]
    fn a_claim_named_twice_is_refused() {
        let s = Signer::from_seed("k1", [1; 32]);
        let body = format!(
            r#"{{"iss":"{ISS}","aud":"toolgate","sub":"u-1","org_id":"org_evil","org_id":"org_7","roles":"r","exp":{}}}"#,
            NOW + 60
        );
        let tok = raw(&s, 1, r#"{"alg":"EdDSA","kid":"k1"}"#, &body);
        assert_eq!(verify_issued(&tok, &issuer(&[&s]), NOW.into()), Err(TokenError::Claims));
        assert_eq!(claimed_issuer(Some(&tok)), Err(TokenError::Claims));
        let twice_iss = format!(r#"{{"iss":"x","iss":"{ISS}"}}"#);
        assert_eq!(
            claimed_issuer(Some(&raw(&s, 1, r#"{"alg":"EdDSA","kid":"k1"}"#, &twice_iss))),
            Err(TokenError::Claims)
        );
    }

    #[test]
    fn a_kid_of_another_issuer_verifies_nothing_here() {
        let ours = Signer::from_seed("shared", [1; 32]);
        let theirs = Signer::from_seed("shared", [2; 32]);
        let tok = theirs.sign(&claims());
        assert_eq!(verify_issued(&tok, &issuer(&[&ours]), NOW.into()), Err(TokenError::Signature));
        let unknown = Signer::from_seed("k9", [1; 32]).sign(&claims());
        assert_eq!(verify_issued(&unknown, &issuer(&[&ours]), NOW.into()), Err(TokenError::UnknownKey));
    }

    #[test]
    fn weak_symmetric_and_foreign_keys_refuse_the_document() {
        let n = |bits: usize| URL_SAFE_NO_PAD.encode([vec![0x80u8], vec![0xff; bits / 8 - 1]].concat());
        let rsa =
            |bits: usize, e: &str| json!({"keys": [{"kty": "RSA", "kid": "r", "n": n(bits), "e": e}]}).to_string();
        assert!(parse_jwks(&rsa(1024, "AQAB")).unwrap_err().contains("1024 bits"));
        assert!(parse_jwks(&rsa(2048, "AQAB")).is_ok());
        assert!(parse_jwks(&rsa(2048, "AQ")).is_err());
        assert!(parse_jwks(&rsa(2048, "AQAC")).is_err());
        assert!(parse_jwks(&rsa(16384, "AQAB")).is_err());
        let oct = json!({"keys": [{"kty": "oct", "kid": "h", "k": "c2VjcmV0"}]}).to_string();
        assert!(parse_jwks(&oct).unwrap_err().contains("HMAC"));
        let weak = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "w", "x": "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}]});
        assert!(parse_jwks(&weak.to_string()).unwrap_err().contains("weak"));
        let off_curve = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "e", "x": URL_SAFE_NO_PAD.encode([1u8; 32]), "y": URL_SAFE_NO_PAD.encode([2u8; 32])}]});
        assert!(parse_jwks(&off_curve.to_string()).is_err());
        let p384 = json!({"keys": [{"kty": "EC", "crv": "P-384", "kid": "e", "x": URL_SAFE_NO_PAD.encode([1u8; 48]), "y": URL_SAFE_NO_PAD.encode([2u8; 48])}]});
        assert!(parse_jwks(&p384.to_string()).is_err());
        let s = Signer::from_seed("k1", [1; 32]);
        let twice: Value = serde_json::from_str(&jwks(&[&s, &s])).unwrap();
        assert!(parse_jwks(&twice.to_string()).unwrap_err().contains("twice"));
        let mut hs_alg: Value = serde_json::from_str(&jwks(&[&s])).unwrap();
        hs_alg["keys"][0]["alg"] = json!("HS256");
        assert!(parse_jwks(&hs_alg.to_string()).is_err());
        let mut no_kid: Value = serde_json::from_str(&jwks(&[&s])).unwrap();
        no_kid["keys"][0].as_object_mut().unwrap().remove("kid");
        assert!(parse_jwks(&no_kid.to_string()).is_err());
        assert!(parse_jwks(r#"{"keys": []}"#).is_err());
        assert!(parse_jwks("[]").is_err());
        // An encryption key in the document (Keycloak publishes one) is skipped, not refused.
        let mut with_enc: Value = serde_json::from_str(&rsa(2048, "AQAB")).unwrap();
        with_enc["keys"][0]["use"] = json!("enc");
        with_enc["keys"]
            .as_array_mut()
            .unwrap()
            .push(json!({"kty": "OKP", "crv": "Ed25519", "kid": "k1", "x": s.public_key()}));
        assert_eq!(parse_jwks(&with_enc.to_string()).unwrap().len(), 1);
    }
}
