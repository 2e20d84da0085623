//! The verified listings of recent bearer tokens, so a `tools/call` does not pay the gate twice:
//! the bearer check (`toolgate.tools`: verify the token, list the caller's tools) and then the call,
//! which verifies the token again in the gate (signature, expiry, revocation, the kill switch,
//! policy). A listing reused for a few seconds decides only which entry point and tenant the call
//! takes (the gate refuses a tenant the token does not name); whether it runs is always the
//! gate's. `tools/list` and every other method always ask the gate. An entry lives
//! `TOOLGATE_LISTING_TTL` seconds (default 10; 0: none), never past the token's own `exp`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::server::Listing;

/// Entries at most: past it, the expired go, and if that is not enough, all.
const MAX_ENTRIES: usize = 10_000;

/// Listings by token.
pub struct Listings {
    ttl: Duration,
    entries: Mutex<HashMap<String, (Arc<Listing>, Instant)>>,
}

impl Listings {
    pub fn new(ttl: Duration) -> Listings {
        Listings { ttl, entries: Mutex::new(HashMap::new()) }
    }

    /// The listing the gate gave for `token` less than its time ago.
    pub fn get(&self, token: &str) -> Option<Arc<Listing>> {
        if self.ttl.is_zero() {
            return None;
        }
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(token).filter(|(_, until)| Instant::now() < *until).map(|(l, _)| l.clone())
    }

    /// Keep what the gate just gave for `token`.
    pub fn put(&self, token: &str, listing: Arc<Listing>) {
        let Some(ttl) = unverified_expiry(token).map_or(Some(self.ttl), |left| Some(left.min(self.ttl))) else {
            return;
        };
        if ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES {
            let now = Instant::now();
            entries.retain(|_, (_, until)| now < *until);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(token.to_string(), (listing, Instant::now() + ttl));
    }

    /// Forget `token` (the gate refused it).
    pub fn forget(&self, token: &str) {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).remove(token);
    }
}

/// How long until the `exp` a JWT's payload names, read without verifying it (it only shortens how
/// long a listing the gate verified is kept); zero if past, `None` if it names none.
fn unverified_expiry(token: &str) -> Option<Duration> {
    let payload = token.split('.').nth(1)?;
    let claims: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    let exp = claims["exp"].as_u64()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(exp.saturating_sub(now)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(exp: u64) -> String {
        let payload = URL_SAFE_NO_PAD.encode(format!("{{\"exp\": {exp}}}"));
        format!("e30.{payload}.sig")
    }

    fn listing() -> Arc<Listing> {
        Arc::new(Listing { tenant: "t".into(), tools: vec![] })
    }

    #[test]
    fn a_listing_lives_its_time_never_past_the_token() {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let cache = Listings::new(Duration::from_secs(10));
        let fresh = token(now + 3600);
        cache.put(&fresh, listing());
        assert!(cache.get(&fresh).is_some());
        cache.forget(&fresh);
        assert!(cache.get(&fresh).is_none());
        let expired = token(now - 1);
        cache.put(&expired, listing());
        assert!(cache.get(&expired).is_none(), "a token past its exp is not kept");
        let off = Listings::new(Duration::ZERO);
        off.put(&fresh, listing());
        assert!(off.get(&fresh).is_none(), "TOOLGATE_LISTING_TTL=0 keeps nothing");
        let short = Listings::new(Duration::from_millis(30));
        short.put(&fresh, listing());
        std::thread::sleep(Duration::from_millis(60));
        assert!(short.get(&fresh).is_none(), "an entry past its time is not used");
    }
}
