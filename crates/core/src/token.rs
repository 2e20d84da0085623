//! Step 1 of the gate, and step 8's confirmation: compact JWS tokens signed with Ed25519.
//!
//! Tenant, actor and role come only from a token verified here against a public key the DBA
//! registered; the private keys stay with the identity provider and the channel. Only
//! `alg: EdDSA` is accepted, the `kid` must be registered for the token's purpose and tenant, and
//! `exp` is required. A token is never echoed: errors carry a fixed reason code.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::ed25519::pkcs8::KeypairBytes;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey};
use ed25519_dalek::{SigningKey, VerifyingKey};
use jsonwebtoken::crypto::{rust_crypto, CryptoProvider, JwtVerifier};
use jsonwebtoken::{decode, decode_header, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Tokens longer than this are refused unread.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// Clock skew tolerated for `iat`, `nbf` and a confirmation's `at` unless configured otherwise (the
/// `toolgate.clock_skew` setting).
pub const SKEW_SECONDS: i64 = 60;
/// Longest claim string kept (actor, tenant, role); longer is refused.
pub const MAX_CLAIM_CHARS: usize = 128;
/// Longest a token may live unless configured otherwise (the `toolgate.max_token_lifetime`
/// setting): a day.
pub const DEFAULT_MAX_LIFETIME_SECONDS: i64 = 24 * 3600;

/// The moment a token is judged at (wall clock, seconds since the epoch), and the longest life a
/// token may have then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    pub now: i64,
    pub max_lifetime: i64,
    /// How far `iat`, `nbf` (and a confirmation's `at`) may lead `now` (the `toolgate.clock_skew`
    /// setting).
    pub skew: i64,
}

impl From<i64> for Clock {
    fn from(now: i64) -> Clock {
        Clock { now, max_lifetime: DEFAULT_MAX_LIFETIME_SECONDS, skew: SKEW_SECONDS }
    }
}

/// What a registered key may sign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyPurpose {
    Identity,
    Channel,
}

impl KeyPurpose {
    pub fn parse(s: &str) -> Option<KeyPurpose> {
        match s {
            "identity" => Some(KeyPurpose::Identity),
            "channel" => Some(KeyPurpose::Channel),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            KeyPurpose::Identity => "identity",
            KeyPurpose::Channel => "channel",
        }
    }
}

/// A public key as the DBA registered it.
#[derive(Clone, Debug)]
pub struct RegisteredKey {
    pub tenant: String,
    pub purpose: KeyPurpose,
    pub public_key: [u8; 32],
    pub active: bool,
}

/// Why a token was refused. The codes go to the audit row; the token never does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("no token")]
    Missing,
    #[error("token is not a compact JWS")]
    Malformed,
    #[error("algorithm other than EdDSA")]
    Algorithm,
    #[error("token has no kid")]
    NoKeyId,
    #[error("kid unknown")]
    UnknownKey,
    #[error("kid revoked")]
    RevokedKey,
    #[error("kid registered for another purpose")]
    WrongPurpose,
    #[error("kid registered for another tenant")]
    WrongTenant,
    #[error("signature does not verify")]
    Signature,
    #[error("a required claim is missing or invalid")]
    Claims,
    #[error("token expired")]
    Expired,
    #[error("token issued in the future")]
    IssuedInFuture,
    #[error("token not valid yet")]
    NotYetValid,
    #[error("token lives longer than allowed")]
    Lifetime,
    #[error("iss names no registered issuer")]
    UnknownIssuer,
    #[error("iss missing or not the registered one")]
    Issuer,
    #[error("aud missing or not one this database accepts")]
    Audience,
    #[error("header carries or points at key material")]
    EmbeddedKey,
    #[error("tenant claim maps to no tenant of this issuer")]
    UnmappedTenant,
}

impl TokenError {
    pub fn code(self) -> &'static str {
        match self {
            TokenError::Missing => "missing",
            TokenError::Malformed => "malformed",
            TokenError::Algorithm => "algorithm",
            TokenError::NoKeyId => "no_kid",
            TokenError::UnknownKey => "unknown_kid",
            TokenError::RevokedKey => "revoked_kid",
            TokenError::WrongPurpose => "wrong_purpose",
            TokenError::WrongTenant => "wrong_tenant",
            TokenError::Signature => "signature",
            TokenError::Claims => "claims",
            TokenError::Expired => "expired",
            TokenError::IssuedInFuture => "issued_in_future",
            TokenError::NotYetValid => "not_yet_valid",
            TokenError::Lifetime => "lifetime",
            TokenError::UnknownIssuer => "unknown_issuer",
            TokenError::Issuer => "issuer",
            TokenError::Audience => "audience",
            TokenError::EmbeddedKey => "embedded_key",
            TokenError::UnmappedTenant => "unmapped_tenant",
        }
    }
}

/// Who is calling: the claims of a verified identity token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub sub: String,
    pub tenant: String,
    pub role: String,
    pub exp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    /// Every role the token carries, sorted (an issuer's roles claim may hold several; `role` is
    /// then their comma-joined list, as the audit shows it). Empty: `role` alone.
    #[serde(skip)]
    pub roles: Vec<String>,
    /// The audiences the token was issued for (`aud`: one string or an array of them); empty when
    /// it names none. A caller that expects an audience (an MCP server: its resource URL) refuses
    /// a token that does not name it (`Identity::for_audience`).
    #[serde(default, deserialize_with = "audiences", skip_serializing_if = "Vec::is_empty")]
    pub aud: Vec<String>,
    /// The registered issuer that verified the token (its `iss`); `None` for a token of a key of
    /// `toolgate.keys`. With `sub`, it names the person (an approver is compared by both).
    #[serde(skip)]
    pub iss: Option<String>,
}

/// An `aud` claim: one string or an array of strings (null: none). Anything else fails the
/// token's claims.
fn audiences<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<Aud>::deserialize(d)? {
        None => Vec::new(),
        Some(Aud::One(a)) => vec![a],
        Some(Aud::Many(list)) => list,
    })
}

/// At most this many audiences in one token.
const MAX_AUDIENCES: usize = 16;

impl Identity {
    /// The identity, if the token names `expected` among its audiences (`None`: nothing expected).
    /// A token without `aud` names none, so it is refused wherever an audience is expected.
    pub fn for_audience(self, expected: Option<&str>) -> Result<Identity, TokenError> {
        match expected {
            Some(expected) if !self.aud.iter().any(|a| a == expected) => Err(TokenError::Audience),
            _ => Ok(self),
        }
    }

    /// Whether a policy listing `allowed` roles lets this caller through: the union of what each
    /// of the caller's roles allows, so one allowed role is enough.
    pub fn has_any_role(&self, allowed: &[String]) -> bool {
        if self.roles.is_empty() {
            return allowed.contains(&self.role);
        }
        self.roles.iter().any(|r| allowed.contains(r))
    }
}

/// What the person answered, as the channel delivered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Approve,
    Decline,
}

/// How the answer reached the channel; a tier-3 challenge must be typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Typed,
    Voice,
}

/// The claims of a verified confirmation token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirmation {
    pub proposal: String,
    pub decision: Decision,
    pub text: String,
    /// When the channel received the person's message (seconds since the epoch).
    pub at: i64,
    pub exp: i64,
    #[serde(default = "typed")]
    pub via: Via,
}

fn typed() -> Via {
    Via::Typed
}

trait Expiring {
    fn exp(&self) -> i64;
    fn iat(&self) -> Option<i64>;
    fn nbf(&self) -> Option<i64> {
        None
    }
    fn claims_ok(&self) -> bool;
}

pub(crate) fn bounded(s: &str) -> bool {
    !s.is_empty() && s.chars().count() <= MAX_CLAIM_CHARS && !s.chars().any(char::is_control)
}

impl Expiring for Identity {
    fn exp(&self) -> i64 {
        self.exp
    }
    fn iat(&self) -> Option<i64> {
        self.iat
    }
    fn nbf(&self) -> Option<i64> {
        self.nbf
    }
    fn claims_ok(&self) -> bool {
        let audience = |a: &String| !a.is_empty() && a.len() <= 512 && !a.chars().any(char::is_control);
        bounded(&self.sub)
            && bounded(&self.tenant)
            && bounded(&self.role)
            && self.aud.len() <= MAX_AUDIENCES
            && self.aud.iter().all(audience)
    }
}

impl Expiring for Confirmation {
    fn exp(&self) -> i64 {
        self.exp
    }
    fn iat(&self) -> Option<i64> {
        Some(self.at)
    }
    fn claims_ok(&self) -> bool {
        bounded(&self.proposal) && self.text.chars().count() <= 1024
    }
}

/// Ed25519 as the gate verifies it: `verify_strict` (RFC 8032's checks plus no small-order
/// components), so neither a weak public key nor a crafted signature can pass. Installed as
/// jsonwebtoken's crypto provider, which otherwise verifies EdDSA leniently; every other
/// algorithm is the crate's own RustCrypto code.
struct StrictEd25519(VerifyingKey);

impl signature::Verifier<Vec<u8>> for StrictEd25519 {
    fn verify(&self, msg: &[u8], signature: &Vec<u8>) -> Result<(), signature::Error> {
        let signature = ed25519_dalek::Signature::from_slice(signature)?;
        self.0.verify_strict(msg, &signature)
    }
}

impl JwtVerifier for StrictEd25519 {
    fn algorithm(&self) -> Algorithm {
        Algorithm::EdDSA
    }
}

fn strict_verifier(alg: &Algorithm, key: &DecodingKey) -> jsonwebtoken::errors::Result<Box<dyn JwtVerifier>> {
    if *alg != Algorithm::EdDSA {
        return (rust_crypto::DEFAULT_PROVIDER.verifier_factory)(alg, key);
    }
    let invalid = || jsonwebtoken::errors::Error::from(jsonwebtoken::errors::ErrorKind::InvalidEddsaKey);
    let bytes: [u8; 32] = key.try_get_as_bytes()?.try_into().map_err(|_| invalid())?;
    Ok(Box::new(StrictEd25519(decompressed(&bytes).ok_or_else(invalid)?)))
}

/// A public key's curve point, refused if invalid or weak. Decompressing it costs about a tenth of
/// a verification, and the same few keys verify every token, so each thread keeps the points it
/// made, by their exact 32 bytes (a bounded map: emptied when full). Which keys are registered and
/// active is not decided here, and nothing here is kept across that decision.
fn decompressed(bytes: &[u8; 32]) -> Option<VerifyingKey> {
    const KEPT: usize = 64;
    thread_local! {
        static POINTS: RefCell<HashMap<[u8; 32], VerifyingKey>> = RefCell::new(HashMap::new());
    }
    if let Some(key) = POINTS.with_borrow(|points| points.get(bytes).copied()) {
        return Some(key);
    }
    let key = VerifyingKey::from_bytes(bytes).ok().filter(|k| !k.is_weak())?;
    POINTS.with_borrow_mut(|points| {
        if points.len() >= KEPT {
            points.clear();
        }
        points.insert(*bytes, key);
    });
    Some(key)
}

/// Make the strict provider jsonwebtoken's, before its first use in this process: every function
/// here that signs or verifies calls this first (so must anything else in the process that uses
/// jsonwebtoken). Fails closed: if another provider was installed first, no token verifies.
pub fn strict_provider() -> Result<(), TokenError> {
    static STRICT: OnceLock<CryptoProvider> = OnceLock::new();
    let strict = STRICT
        .get_or_init(|| CryptoProvider { verifier_factory: strict_verifier, ..rust_crypto::DEFAULT_PROVIDER.clone() });
    let _ = strict.install_default();
    match CryptoProvider::try_get_default() {
        Some(p) if std::ptr::eq(p, strict) => Ok(()),
        _ => Err(TokenError::Signature),
    }
}

/// A token's header, read before anything is trusted: an oversized token is malformed, and an
/// `alg` the library does not even know (such as `none`) is the wrong algorithm.
pub fn header_of(token: &str) -> Result<jsonwebtoken::Header, TokenError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::Malformed);
    }
    decode_header(token).map_err(|e| match e.kind() {
        jsonwebtoken::errors::ErrorKind::Json(_) if header_names_another_alg(token) => TokenError::Algorithm,
        _ => TokenError::Malformed,
    })
}

/// The `kid` of a token whose header names EdDSA. Nothing is trusted yet.
pub fn key_id(token: Option<&str>) -> Result<String, TokenError> {
    let token = token.filter(|t| !t.is_empty()).ok_or(TokenError::Missing)?;
    let header = header_of(token)?;
    if header.alg != Algorithm::EdDSA {
        return Err(TokenError::Algorithm);
    }
    header.kid.filter(|k| bounded(k)).ok_or(TokenError::NoKeyId)
}

/// A header that is JSON with an `alg` the library does not even know (such as `none`).
fn header_names_another_alg(token: &str) -> bool {
    token
        .split('.')
        .next()
        .and_then(|h| URL_SAFE_NO_PAD.decode(h).ok())
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .is_some_and(|h| h.get("alg").is_some_and(|a| a != "EdDSA"))
}

fn verify<T: DeserializeOwned + Expiring>(
    token: &str,
    key: Option<&RegisteredKey>,
    purpose: KeyPurpose,
    clock: Clock,
) -> Result<T, TokenError> {
    let key = key.ok_or(TokenError::UnknownKey)?;
    // A revoked key is named as such: an operator must tell it from a key that never was.
    if !key.active {
        return Err(TokenError::RevokedKey);
    }
    if key.purpose != purpose {
        return Err(TokenError::WrongPurpose);
    }
    strict_provider()?;
    let mut validation = Validation::new(Algorithm::EdDSA);
    // Time is judged below against the database's clock, not the library's.
    validation.validate_exp = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let data =
        decode::<T>(token, &DecodingKey::from_ed_der(&key.public_key), &validation).map_err(|e| match e.kind() {
            // A weak key refused by the strict verifier verifies nothing: a bad signature.
            jsonwebtoken::errors::ErrorKind::InvalidSignature | jsonwebtoken::errors::ErrorKind::InvalidEddsaKey => {
                TokenError::Signature
            }
            jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => TokenError::Algorithm,
            jsonwebtoken::errors::ErrorKind::Json(_) => TokenError::Claims,
            _ => TokenError::Malformed,
        })?;
    let claims = data.claims;
    if !claims.claims_ok() {
        return Err(TokenError::Claims);
    }
    judge_times(claims.exp(), claims.iat(), claims.nbf(), clock)?;
    Ok(claims)
}

/// A token's times against the clock: not expired, not issued or valid only in the future
/// (beyond the skew), and not living longer than allowed, counted from now and from `iat`.
pub fn judge_times(exp: i64, iat: Option<i64>, nbf: Option<i64>, clock: Clock) -> Result<(), TokenError> {
    let Clock { now, max_lifetime, skew } = clock;
    if exp <= now {
        return Err(TokenError::Expired);
    }
    if iat.is_some_and(|iat| iat > now.saturating_add(skew)) {
        return Err(TokenError::IssuedInFuture);
    }
    if nbf.is_some_and(|nbf| nbf > now.saturating_add(skew)) {
        return Err(TokenError::NotYetValid);
    }
    let longest = max_lifetime.saturating_add(skew);
    if exp.saturating_sub(now) > longest || iat.is_some_and(|iat| exp.saturating_sub(iat) > longest) {
        return Err(TokenError::Lifetime);
    }
    Ok(())
}

/// Verify an identity token against the key its `kid` names (`None`: no such key).
pub fn verify_identity(
    token: &str,
    key: Option<&RegisteredKey>,
    clock: impl Into<Clock>,
) -> Result<Identity, TokenError> {
    let identity: Identity = verify(token, key, KeyPurpose::Identity, clock.into())?;
    if key.map(|k| k.tenant.as_str()) != Some(identity.tenant.as_str()) {
        return Err(TokenError::WrongTenant);
    }
    Ok(identity)
}

/// Verify a confirmation token: signed by a channel key of the caller's `tenant`.
pub fn verify_confirmation(
    token: &str,
    key: Option<&RegisteredKey>,
    tenant: &str,
    clock: impl Into<Clock>,
) -> Result<Confirmation, TokenError> {
    let confirmation: Confirmation = verify(token, key, KeyPurpose::Channel, clock.into())?;
    if key.map(|k| k.tenant.as_str()) != Some(tenant) {
        return Err(TokenError::WrongTenant);
    }
    Ok(confirmation)
}

/// Parse a public key as a DBA may paste it: the JWK `x` (base64url of the 32 raw bytes) or a
/// PEM `PUBLIC KEY` block. The bytes must be a valid Ed25519 point of full order.
pub fn parse_public_key(text: &str) -> Result<[u8; 32], String> {
    let text = text.trim();
    let key = if text.starts_with("-----BEGIN PUBLIC KEY-----") {
        VerifyingKey::from_public_key_pem(text).map_err(|_| "not an Ed25519 PEM public key".to_string())?
    } else {
        let raw =
            URL_SAFE_NO_PAD.decode(text).map_err(|_| "public key must be base64url (JWK x) or PEM".to_string())?;
        let bytes: [u8; 32] = raw.try_into().map_err(|_| "an Ed25519 public key has 32 bytes".to_string())?;
        VerifyingKey::from_bytes(&bytes).map_err(|_| "not a valid Ed25519 point".to_string())?
    };
    // A small-order point (the identity, say) verifies forged signatures under lenient checks.
    if key.is_weak() {
        return Err("a weak (small-order) Ed25519 key".to_string());
    }
    Ok(key.to_bytes())
}

/// A signing key held by an identity provider or a channel: never by the database.
pub struct Signer {
    kid: String,
    key: SigningKey,
}

impl Signer {
    /// A signer from its 32-byte seed.
    pub fn from_seed(kid: &str, seed: [u8; 32]) -> Signer {
        Signer { kid: kid.to_string(), key: SigningKey::from_bytes(&seed) }
    }

    /// A signer from the text of a key file: PKCS#8 PEM (what `openssl genpkey -algorithm
    /// ed25519` writes, and `toolgate keygen` since 0.2.0), or the older format, the base64url
    /// of the 32-byte seed. The error names the kid, never the key.
    pub fn from_key_text(kid: &str, text: &str) -> Result<Signer, String> {
        let text = text.trim();
        if text.starts_with("-----BEGIN") {
            let key = SigningKey::from_pkcs8_pem(text)
                .map_err(|_| format!("{kid}: not an Ed25519 private key in PKCS#8 PEM"))?;
            return Ok(Signer { kid: kid.to_string(), key });
        }
        let seed: [u8; 32] = URL_SAFE_NO_PAD
            .decode(text)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("{kid}: neither PKCS#8 PEM nor the base64url of a 32-byte seed"))?;
        Ok(Signer::from_seed(kid, seed))
    }

    /// The private key as PKCS#8 PEM, the format of key files: version 1, the seed alone, as
    /// `openssl genpkey -algorithm ed25519` writes it (OpenSSL 3.0 cannot read the version 2 that
    /// `SigningKey` would write, with the public key inside).
    pub fn to_pkcs8_pem(&self) -> String {
        let bytes = KeypairBytes { secret_key: self.key.to_bytes(), public_key: None };
        bytes.to_pkcs8_pem(LineEnding::LF).expect("an Ed25519 key always encodes").to_string()
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as the JWK `x`: what `toolgate.add_key` takes.
    pub fn public_key(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.key.verifying_key().to_bytes())
    }

    /// A compact JWS with `alg: EdDSA` and this signer's `kid`.
    pub fn sign<T: Serialize>(&self, claims: &T) -> String {
        strict_provider().expect("the strict crypto provider is installed before any other");
        let der = self.key.to_pkcs8_der().expect("an Ed25519 key always encodes");
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.kid.clone());
        encode(&header, claims, &EncodingKey::from_ed_der(der.as_bytes()))
            .expect("signing with a valid key cannot fail")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;

    fn signer(kid: &str, n: u8) -> Signer {
        Signer::from_seed(kid, [n; 32])
    }

    fn registered(s: &Signer, tenant: &str, purpose: KeyPurpose) -> RegisteredKey {
        RegisteredKey {
            tenant: tenant.into(),
            purpose,
            public_key: parse_public_key(&s.public_key()).unwrap(),
            active: true,
        }
    }

    fn identity(tenant: &str) -> Identity {
        Identity {
            sub: "user-17".into(),
            tenant: tenant.into(),
            role: "supervisor".into(),
            exp: NOW + 600,
            iat: Some(NOW),
            nbf: None,
            roles: Vec::new(),
            aud: Vec::new(),
            iss: None,
        }
    }

    #[test]
    fn an_expected_audience_must_be_named() {
        let expected = "https://mcp.example.com/mcp";
        let with = |aud: &[&str]| Identity { aud: aud.iter().map(|a| a.to_string()).collect(), ..identity("t") };
        assert_eq!(with(&[]).for_audience(Some(expected)), Err(TokenError::Audience));
        assert_eq!(with(&["toolgate"]).for_audience(Some(expected)), Err(TokenError::Audience));
        assert!(with(&["toolgate", expected]).for_audience(Some(expected)).is_ok());
        assert!(with(&[]).for_audience(None).is_ok());
        // The claim as a string or an array; another shape fails the claims.
        let s = signer("idp-a", 1);
        let key = registered(&s, "t", KeyPurpose::Identity);
        let token = |aud: serde_json::Value| {
            s.sign(&json!({"sub": "u", "tenant": "t", "role": "r", "exp": NOW + 60, "aud": aud}))
        };
        let verified = |aud: serde_json::Value| verify_identity(&token(aud), Some(&key), NOW);
        assert_eq!(verified(json!(expected)).unwrap().aud, vec![expected.to_string()]);
        assert_eq!(verified(json!([expected, "x"])).unwrap().aud, vec![expected.to_string(), "x".to_string()]);
        assert_eq!(verified(json!(7)), Err(TokenError::Claims));
    }

    #[test]
    fn key_text_reads_pem_and_the_older_seed() {
        let s = signer("chan-a", 7);
        // What `openssl genpkey -algorithm ed25519` writes for the seed 0x07 × 32.
        let pem = s.to_pkcs8_pem();
        let openssl = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcH\n-----END PRIVATE KEY-----\n";
        assert_eq!(pem, openssl);
        assert_eq!(Signer::from_key_text("chan-a", &pem).unwrap().public_key(), s.public_key());
        let seed = URL_SAFE_NO_PAD.encode([7u8; 32]);
        assert_eq!(Signer::from_key_text("chan-a", &format!("{seed}\n")).unwrap().public_key(), s.public_key());
        // PKCS#8 version 2, with the public key inside, reads too.
        let v2 = s.key.to_pkcs8_pem(LineEnding::LF).unwrap();
        assert_eq!(Signer::from_key_text("chan-a", &v2).unwrap().public_key(), s.public_key());
        for bad in ["", "c2hvcnQ", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"] {
            let e = Signer::from_key_text("chan-a", bad).err().unwrap();
            assert!(e.starts_with("chan-a: "), "{e}");
        }
    }

    #[test]
    fn a_good_identity_verifies() {
        let s = signer("idp-a", 1);
        let tok = s.sign(&identity("shopping-a"));
        assert_eq!(key_id(Some(&tok)).unwrap(), "idp-a");
        let key = registered(&s, "shopping-a", KeyPurpose::Identity);
        assert_eq!(verify_identity(&tok, Some(&key), NOW).unwrap(), identity("shopping-a"));
    }

    #[test]
    fn alg_none_is_refused() {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","kid":"idp-a"}"#);
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&identity("shopping-a")).unwrap());
        let tok = format!("{header}.{body}.");
        assert_eq!(key_id(Some(&tok)), Err(TokenError::Algorithm));
    }

    #[test]
    fn hs256_keyed_with_the_public_key_is_refused() {
        let s = signer("idp-a", 1);
        let key = registered(&s, "shopping-a", KeyPurpose::Identity);
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("idp-a".into());
        strict_provider().unwrap();
        let tok =
            encode(&header, &identity("shopping-a"), &EncodingKey::from_secret(&key.public_key).unwrap()).unwrap();
        assert_eq!(key_id(Some(&tok)), Err(TokenError::Algorithm));
        assert_eq!(verify_identity(&tok, Some(&key), NOW), Err(TokenError::Algorithm));
    }

    #[test]
    fn unknown_inactive_and_foreign_keys_are_refused() {
        let s = signer("idp-a", 1);
        let tok = s.sign(&identity("shopping-a"));
        assert_eq!(verify_identity(&tok, None, NOW), Err(TokenError::UnknownKey));
        let mut inactive = registered(&s, "shopping-a", KeyPurpose::Identity);
        inactive.active = false;
        assert_eq!(verify_identity(&tok, Some(&inactive), NOW), Err(TokenError::RevokedKey));
        let other_tenant = registered(&s, "shopping-b", KeyPurpose::Identity);
        assert_eq!(verify_identity(&tok, Some(&other_tenant), NOW), Err(TokenError::WrongTenant));
        let channel = registered(&s, "shopping-a", KeyPurpose::Channel);
        assert_eq!(verify_identity(&tok, Some(&channel), NOW), Err(TokenError::WrongPurpose));
    }

    #[test]
    fn another_keys_signature_is_refused() {
        let tok = signer("idp-a", 1).sign(&identity("shopping-a"));
        let key = registered(&signer("idp-a", 2), "shopping-a", KeyPurpose::Identity);
        assert_eq!(verify_identity(&tok, Some(&key), NOW), Err(TokenError::Signature));
    }

    #[test]
    fn expired_and_future_tokens_are_refused() {
        let s = signer("idp-a", 1);
        let key = registered(&s, "shopping-a", KeyPurpose::Identity);
        let mut old = identity("shopping-a");
        old.exp = NOW;
        assert_eq!(verify_identity(&s.sign(&old), Some(&key), NOW), Err(TokenError::Expired));
        let mut future = identity("shopping-a");
        future.iat = Some(NOW + 3600);
        assert_eq!(verify_identity(&s.sign(&future), Some(&key), NOW), Err(TokenError::IssuedInFuture));
    }

    #[test]
    fn missing_claims_are_refused() {
        let s = signer("idp-a", 1);
        let key = registered(&s, "shopping-a", KeyPurpose::Identity);
        let no_exp = s.sign(&json!({"sub": "u", "tenant": "shopping-a", "role": "supervisor"}));
        assert_eq!(verify_identity(&no_exp, Some(&key), NOW), Err(TokenError::Claims));
        let no_role = s.sign(&json!({"sub": "u", "tenant": "shopping-a", "exp": NOW + 60}));
        assert_eq!(verify_identity(&no_role, Some(&key), NOW), Err(TokenError::Claims));
        let empty_sub = s.sign(&json!({"sub": "", "tenant": "shopping-a", "role": "r", "exp": NOW + 60}));
        assert_eq!(verify_identity(&empty_sub, Some(&key), NOW), Err(TokenError::Claims));
    }

    #[test]
    fn tenant_swapped_after_signing_breaks_the_signature() {
        let s = signer("idp-a", 1);
        let key = registered(&s, "shopping-a", KeyPurpose::Identity);
        let tok = s.sign(&identity("shopping-a"));
        let parts: Vec<&str> = tok.split('.').collect();
        let forged_body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&identity("shopping-b")).unwrap());
        let forged = format!("{}.{}.{}", parts[0], forged_body, parts[2]);
        assert_eq!(verify_identity(&forged, Some(&key), NOW), Err(TokenError::Signature));
    }

    #[test]
    fn garbage_is_malformed_and_never_panics() {
        for t in ["", "a", "a.b", "a.b.c", "....", "eyJhbGciOiJFZERTQSJ9.x.y"] {
            assert!(key_id(Some(t)).is_err());
        }
        assert_eq!(key_id(None), Err(TokenError::Missing));
        assert_eq!(key_id(Some(&"a".repeat(MAX_TOKEN_BYTES + 1))), Err(TokenError::Malformed));
    }

    #[test]
    fn confirmations_need_a_channel_key_of_the_callers_tenant() {
        let ch = signer("chan-a", 3);
        let c = Confirmation {
            proposal: "p1".into(),
            decision: Decision::Approve,
            text: "sim".into(),
            at: NOW,
            exp: NOW + 300,
            via: Via::Typed,
        };
        let tok = ch.sign(&c);
        let key = registered(&ch, "shopping-a", KeyPurpose::Channel);
        assert_eq!(verify_confirmation(&tok, Some(&key), "shopping-a", NOW).unwrap(), c);
        assert_eq!(verify_confirmation(&tok, Some(&key), "shopping-b", NOW), Err(TokenError::WrongTenant));
        let as_identity = registered(&ch, "shopping-a", KeyPurpose::Identity);
        assert_eq!(verify_confirmation(&tok, Some(&as_identity), "shopping-a", NOW), Err(TokenError::WrongPurpose));
    }

    #[test]
    fn public_keys_parse_from_jwk_x_only_when_valid() {
        let s = signer("k", 9);
        assert!(parse_public_key(&s.public_key()).is_ok());
        assert!(parse_public_key("not base64!").is_err());
        assert!(parse_public_key(&URL_SAFE_NO_PAD.encode([1u8; 31])).is_err());
    }

    #[test]
    fn tokens_up_to_eight_kib_are_read_and_longer_ones_are_not() {
        let s = signer("idp-a", 1);
        let key = registered(&s, "shopping-a", KeyPurpose::Identity);
        // The size is judged before anything else is read: a good header, then filler.
        let header = s.sign(&identity("shopping-a")).split('.').next().unwrap().to_string();
        let of_len = |n: usize| format!("{header}.{}.x", "x".repeat(n - header.len() - 3));
        assert_eq!(key_id(Some(&of_len(8 * 1024))).unwrap(), "idp-a");
        assert_eq!(key_id(Some(&of_len(8 * 1024 + 1))), Err(TokenError::Malformed));
        // A real token of several KiB (a claim nobody reads) verifies.
        let big =
            s.sign(&json!({"sub": "u", "tenant": "shopping-a", "role": "r", "exp": NOW + 60, "pad": "x".repeat(4000)}));
        assert!(big.len() > 5000);
        assert!(verify_identity(&big, Some(&key), NOW).is_ok());
    }

    #[test]
    fn a_header_without_alg_is_malformed_not_another_alg() {
        let header = URL_SAFE_NO_PAD.encode(br#"{"kid":"idp-a"}"#);
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&identity("shopping-a")).unwrap());
        assert_eq!(key_id(Some(&format!("{header}.{body}.sig"))), Err(TokenError::Malformed));
        let not_json = URL_SAFE_NO_PAD.encode(b"{alg: EdDSA");
        assert_eq!(key_id(Some(&format!("{not_json}.{body}.sig"))), Err(TokenError::Malformed));
    }

    #[test]
    fn issued_at_may_lead_the_clock_by_the_skew_and_no_more() {
        let s = signer("idp-a", 1);
        let key = registered(&s, "shopping-a", KeyPurpose::Identity);
        let mut at_skew = identity("shopping-a");
        at_skew.iat = Some(NOW + SKEW_SECONDS);
        assert!(verify_identity(&s.sign(&at_skew), Some(&key), NOW).is_ok());
        at_skew.iat = Some(NOW + SKEW_SECONDS + 1);
        assert_eq!(verify_identity(&s.sign(&at_skew), Some(&key), NOW), Err(TokenError::IssuedInFuture));
    }

    #[test]
    fn confirmations_from_the_future_or_with_bad_claims_are_refused() {
        let ch = signer("chan-a", 3);
        let key = registered(&ch, "shopping-a", KeyPurpose::Channel);
        let good = Confirmation {
            proposal: "p1".into(),
            decision: Decision::Approve,
            text: "sim".into(),
            at: NOW,
            exp: NOW + 300,
            via: Via::Typed,
        };
        let verify = |c: &Confirmation| verify_confirmation(&ch.sign(c), Some(&key), "shopping-a", NOW);
        assert!(verify(&good).is_ok());
        let future = Confirmation { at: NOW + 3600, ..good.clone() };
        assert_eq!(verify(&future), Err(TokenError::IssuedInFuture));
        let no_proposal = Confirmation { proposal: String::new(), ..good.clone() };
        assert_eq!(verify(&no_proposal), Err(TokenError::Claims));
        let essay = Confirmation { text: "s".repeat(1025), ..good.clone() };
        assert_eq!(verify(&essay), Err(TokenError::Claims));
        let expired = Confirmation { exp: NOW, ..good };
        assert_eq!(verify(&expired), Err(TokenError::Expired));
    }

    #[test]
    fn names_and_codes_are_the_ones_stored() {
        for p in [KeyPurpose::Identity, KeyPurpose::Channel] {
            assert_eq!(KeyPurpose::parse(p.as_str()), Some(p));
        }
        assert_eq!(KeyPurpose::Channel.as_str(), "channel");
        assert_eq!(KeyPurpose::parse("admin"), None);
        let codes = [
            TokenError::Missing,
            TokenError::Malformed,
            TokenError::Algorithm,
            TokenError::NoKeyId,
            TokenError::UnknownKey,
            TokenError::RevokedKey,
            TokenError::WrongPurpose,
            TokenError::WrongTenant,
            TokenError::Signature,
            TokenError::Claims,
            TokenError::Expired,
            TokenError::IssuedInFuture,
            TokenError::NotYetValid,
            TokenError::Lifetime,
            TokenError::UnknownIssuer,
            TokenError::Issuer,
            TokenError::Audience,
            TokenError::EmbeddedKey,
            TokenError::UnmappedTenant,
        ]
        .map(TokenError::code);
        assert_eq!((codes[5], codes[10]), ("revoked_kid", "expired"));
        assert!(codes.iter().all(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
        assert_eq!(codes.iter().collect::<std::collections::BTreeSet<_>>().len(), codes.len());
        assert_eq!(signer("idp-a", 1).kid(), "idp-a");
    }

    /// The security review's F8: the identity point registered as a key, then a token whose
    /// signature is made of zeros and the identity point. Refused when the key is registered, and refused at verification even
    /// if such a key row got into the table some other way.
    #[test]
    fn weak_keys_are_refused_and_verification_is_strict() {
        let identity_point = "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        assert_eq!(parse_public_key(identity_point), Err("a weak (small-order) Ed25519 key".to_string()));
        let weak = RegisteredKey {
            tenant: "shopping-a".into(),
            purpose: KeyPurpose::Identity,
            public_key: URL_SAFE_NO_PAD.decode(identity_point).unwrap().try_into().unwrap(),
            active: true,
        };
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"EdDSA","kid":"idp-a"}"#);
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&identity("shopping-a")).unwrap());
        // R = the identity point, S = 0: [S]B - [k]A is the identity whatever the message.
        let mut signature = [0u8; 64];
        signature[0] = 1;
        let forged = format!("{header}.{body}.{}", URL_SAFE_NO_PAD.encode(signature));
        assert!(verify_identity(&forged, Some(&weak), NOW).is_err());
        // The lenient check this replaces accepts the forgery: the test above can fail.
        let lenient = VerifyingKey::from_bytes(&weak.public_key).unwrap();
        let message = format!("{header}.{body}");
        use ed25519_dalek::Verifier;
        assert!(lenient.verify(message.as_bytes(), &ed25519_dalek::Signature::from_bytes(&signature)).is_ok());
    }

    /// The curve points kept per thread are found by their exact bytes: a key verified before
    /// never stands in for another, in either order, and a full map starts again.
    #[test]
    fn kept_points_are_the_keys_own() {
        let (a, b) = (signer("idp-a", 1), signer("idp-a", 2));
        let (key_a, key_b) =
            (registered(&a, "shopping-a", KeyPurpose::Identity), registered(&b, "shopping-a", KeyPurpose::Identity));
        let token_a = a.sign(&identity("shopping-a"));
        let token_b = b.sign(&identity("shopping-a"));
        for _ in 0..2 {
            assert!(verify_identity(&token_a, Some(&key_a), NOW).is_ok());
            assert_eq!(verify_identity(&token_a, Some(&key_b), NOW), Err(TokenError::Signature));
            assert!(verify_identity(&token_b, Some(&key_b), NOW).is_ok());
            assert_eq!(verify_identity(&token_b, Some(&key_a), NOW), Err(TokenError::Signature));
        }
        for n in 3..80 {
            let s = signer("idp-a", n);
            assert!(verify_identity(
                &s.sign(&identity("shopping-a")),
                Some(&registered(&s, "shopping-a", KeyPurpose::Identity)),
                NOW
            )
            .is_ok());
        }
        assert_eq!(verify_identity(&token_a, Some(&key_b), NOW), Err(TokenError::Signature));
        assert!(verify_identity(&token_a, Some(&key_a), NOW).is_ok());
    }

    /// The security review: `nbf` was ignored, and a token with `exp` = i64::MAX was accepted.
    #[test]
    fn not_before_and_lifetime_are_judged() {
        let s = signer("idp-a", 1);
        let key = registered(&s, "shopping-a", KeyPurpose::Identity);
        let verify = |i: &Identity| verify_identity(&s.sign(i), Some(&key), NOW);
        let later = Identity { nbf: Some(NOW + SKEW_SECONDS + 1), ..identity("shopping-a") };
        assert_eq!(verify(&later), Err(TokenError::NotYetValid));
        assert!(verify(&Identity { nbf: Some(NOW + SKEW_SECONDS), ..identity("shopping-a") }).is_ok());
        let forever = Identity { exp: i64::MAX, iat: None, ..identity("shopping-a") };
        assert_eq!(verify(&forever), Err(TokenError::Lifetime));
        // Counted from iat too: a token minted long ago for a long life.
        let old =
            Identity { iat: Some(NOW - 2 * DEFAULT_MAX_LIFETIME_SECONDS), exp: NOW + 60, ..identity("shopping-a") };
        assert_eq!(verify(&old), Err(TokenError::Lifetime));
        let a_day = Identity { iat: None, exp: NOW + DEFAULT_MAX_LIFETIME_SECONDS, ..identity("shopping-a") };
        assert!(verify(&a_day).is_ok());
        // The configured bound is the one judged.
        let hour = Clock { now: NOW, max_lifetime: 3600, skew: SKEW_SECONDS };
        assert_eq!(verify_identity(&s.sign(&a_day), Some(&key), hour), Err(TokenError::Lifetime));
    }
}
