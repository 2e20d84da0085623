//! The audit's seal (docs/audit.md): Ed25519 signatures over the checkpoints `toolgate.seal()`
//! writes. What a checkpoint says is assembled in SQL (sql/seal.sql); here only the key and the
//! signature, strict as RFC 8032 asks (`verify_strict`: no small-order key, no malleable `s`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// A seal key's public half, from its 32-byte seed; None for a seed of another length.
pub fn public_key(seed: &[u8]) -> Option<[u8; 32]> {
    let seed: [u8; 32] = seed.try_into().ok()?;
    Some(SigningKey::from_bytes(&seed).verifying_key().to_bytes())
}

/// The signature of `message` by the key of `seed`; None for a seed of another length.
pub fn sign(seed: &[u8], message: &[u8]) -> Option<[u8; 64]> {
    let seed: [u8; 32] = seed.try_into().ok()?;
    Some(SigningKey::from_bytes(&seed).sign(message).to_bytes())
}

/// Whether `signature` is the signature of `message` by `public`: false for anything malformed.
pub fn verify(public: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let Ok(public) = <[u8; 32]>::try_from(public) else { return false };
    let Ok(signature) = Signature::from_slice(signature) else { return false };
    VerifyingKey::from_bytes(&public).is_ok_and(|key| key.verify_strict(message, &signature).is_ok())
}

/// The pseudonym the audit names `person` of `tenant` by (docs/audit.md#erasure-of-a-person): `p:`
/// and the first 128 bits of HMAC-SHA256 under the person's own random key, base64url. Without the key,
/// which `toolgate.erase_actor` destroys, nobody can tell whose it is, even by trying names.
pub fn pseudonym(key: &[u8], tenant: &str, person: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(b"toolgate.person/1\0");
    mac.update(tenant.as_bytes());
    mac.update(b"\0");
    mac.update(person.as_bytes());
    let tag = mac.finalize().into_bytes();
    format!("p:{}", URL_SAFE_NO_PAD.encode(&tag[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pseudonym_is_the_keys_and_the_persons() {
        let p = pseudonym(&[1u8; 32], "acme", "alice");
        assert_eq!(p.len(), 2 + 22);
        assert!(p.starts_with("p:"));
        assert_eq!(p, pseudonym(&[1u8; 32], "acme", "alice"));
        assert_ne!(p, pseudonym(&[2u8; 32], "acme", "alice"));
        assert_ne!(p, pseudonym(&[1u8; 32], "acme", "bob"));
        assert_ne!(p, pseudonym(&[1u8; 32], "globex", "alice"));
        // The separator keeps the tenant and the person apart.
        assert_ne!(pseudonym(&[1u8; 32], "ac", "me"), pseudonym(&[1u8; 32], "acm", "e"));
    }

    #[test]
    fn a_signature_verifies_with_its_key_only() {
        let seed = [7u8; 32];
        let public = public_key(&seed).unwrap();
        let signature = sign(&seed, b"checkpoint 1").unwrap();
        assert!(verify(&public, b"checkpoint 1", &signature));
        assert!(!verify(&public, b"checkpoint 2", &signature));
        let other = public_key(&[8u8; 32]).unwrap();
        assert!(!verify(&other, b"checkpoint 1", &signature));
    }

    #[test]
    fn rfc8032_test_vector_1() {
        // RFC 8032 §7.1, TEST 1: the empty message.
        let hex = |s: &str| {
            (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect::<Vec<_>>()
        };
        let seed = hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
        assert_eq!(
            public_key(&seed).unwrap().to_vec(),
            hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        );
        let signature = sign(&seed, b"").unwrap();
        assert_eq!(
            signature.to_vec(),
            hex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
        );
    }

    #[test]
    fn malformed_input_is_refused_not_panicked() {
        assert!(public_key(&[1u8; 31]).is_none());
        assert!(sign(&[1u8; 33], b"m").is_none());
        let public = public_key(&[1u8; 32]).unwrap();
        let signature = sign(&[1u8; 32], b"m").unwrap();
        assert!(!verify(&public[..31], b"m", &signature));
        assert!(!verify(&public, b"m", &signature[..63]));
        let mut flipped = signature;
        flipped[10] ^= 1;
        assert!(!verify(&public, b"m", &flipped));
    }
}
