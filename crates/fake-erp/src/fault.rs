//! The faults a test can ask for: one on a single request with the `X-Fake-Fault` header, or queued
//! with `POST /_fake/faults` for the next requests that match (what a test uses when the client is
//! the code under test and sends no such header).

use std::fmt;
use std::time::Duration;

/// One fault, written as the header's value (`late:1500`, `drop`, `500`, `refuse:part_discontinued`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `late:MS`: wait MS milliseconds, then handle the request as usual (a write is applied) and
    /// answer; a client whose timeout is shorter has given up by then. The request's body is read
    /// before the wait, and the rest runs even if the client has gone.
    Late(Duration),
    /// `drop`: handle the request (a write is applied, a refresh rotates the token), then close
    /// the connection without a byte of the answer.
    Drop,
    /// `drop-before`: close the connection without an answer and without handling the request.
    DropBefore,
    /// `500`: `500 {"error": "internal_error"}`, nothing applied.
    InternalError,
    /// `503`: `503 {"error": "unavailable"}` with `Retry-After: 1`, nothing applied.
    Unavailable,
    /// `429`: `429 {"error": "rate_limited"}` with `Retry-After: 0`, nothing handled (queued
    /// for every request, a rate limit that never clears).
    RateLimited,
    /// `refuse:CODE`: a business refusal, `422 {"error": CODE}`. On a write the refusal is the
    /// key's final result: a replay of the key answers it again, the state query says `REJECTED`.
    Refuse(String),
    /// `reject-later:CODE`: a write is accepted (`200 PENDING`) and its protocol ends `REJECTED`
    /// with CODE instead of `DONE`; nothing is applied. Other requests are handled as usual.
    RejectLater(String),
    /// `failed:CODE`: a write is refused but answered `200 {"status": "FAILED", "error": CODE}`
    /// (an ERP that says its refusals in the body); nothing is applied, and the refusal is the
    /// key's final result, as with `refuse:CODE`. Other requests: `refuse:CODE`'s 422.
    Failed(String),
    /// `pending-bare` or `pending-bare:CODE`: a write is accepted and answered
    /// `200 {"status": "PENDING"}`, without the protocol to poll (the state query by key still
    /// answers); it becomes `DONE`, or `REJECTED` with CODE. Other requests are handled as usual.
    PendingBare(Option<String>),
    /// `status:WORD`: a write is accepted (it becomes `DONE`) and answered `200 {"status": WORD}`,
    /// a word of the ERP's own (the state query by key answers as usual). Other requests are
    /// handled as usual.
    Worded(String),
    /// `expire-tokens`: every access token issued so far expires now (revoked, or the ERP's
    /// clock ran ahead). On `/oauth/token` after the refresh is handled: the refresh token rotates
    /// and the access token answered is already expired. On any other request before it is
    /// handled: `401 {"error": "invalid_token"}`, nothing applied.
    ExpireTokens,
    /// `answer:JSON`: a write is accepted and done at once, and answered `200` with JSON (a
    /// JSON value, the rest of the fault's text) instead of the ERP's own words: an ERP that
    /// answers in words and fields of its own, or with order lines. The state query by key
    /// answers as usual. Other requests are handled as usual.
    Answer(String),
    /// `huge:BYTES`: handle the request as usual (a write is applied), then answer with the same
    /// status and the answer padded with BYTES bytes (`"padding": "xxx…"`): an ERP whose answers
    /// run to megabytes.
    Huge(usize),
}

impl Fault {
    /// Parse the header's form; `Err` names what is wrong.
    pub fn parse(text: &str) -> Result<Fault, String> {
        let text = text.trim();
        let (name, arg) = match text.split_once(':') {
            Some((name, arg)) => (name.trim(), Some(arg.trim())),
            None => (text, None),
        };
        let code = |arg: Option<&str>| match arg {
            Some(code) if !code.is_empty() => Ok(code.to_string()),
            _ => Err(format!("fault {name:?} needs a code: {name}:CODE")),
        };
        match (name, arg) {
            ("late", Some(ms)) => ms
                .parse::<u64>()
                .map(|ms| Fault::Late(Duration::from_millis(ms)))
                .map_err(|_| format!("late:{ms}: not milliseconds")),
            ("late", None) => Err("fault \"late\" needs milliseconds: late:MS".into()),
            ("drop", None) => Ok(Fault::Drop),
            ("drop-before", None) => Ok(Fault::DropBefore),
            ("500", None) => Ok(Fault::InternalError),
            ("503", None) => Ok(Fault::Unavailable),
            ("429", None) => Ok(Fault::RateLimited),
            ("expire-tokens", None) => Ok(Fault::ExpireTokens),
            ("huge", Some(bytes)) => {
                bytes.parse::<usize>().map(Fault::Huge).map_err(|_| format!("huge:{bytes}: not a number of bytes"))
            }
            ("answer", Some(json)) => serde_json::from_str::<serde_json::Value>(json)
                .map(|_| Fault::Answer(json.to_string()))
                .map_err(|e| format!("answer:{json}: not JSON: {e}")),
            ("refuse", arg) => code(arg).map(Fault::Refuse),
            ("failed", arg) => code(arg).map(Fault::Failed),
            ("pending-bare", None) => Ok(Fault::PendingBare(None)),
            ("status", arg) => code(arg).map(Fault::Worded),
            ("pending-bare", arg) => code(arg).map(|c| Fault::PendingBare(Some(c))),
            ("reject-later", arg) => code(arg).map(Fault::RejectLater),
            _ => Err(format!(
                "unknown fault {text:?}: late:MS, drop, drop-before, 500, 503, 429, refuse:CODE, reject-later:CODE, \
                 failed:CODE, pending-bare[:CODE], status:WORD, answer:JSON, expire-tokens or huge:BYTES"
            )),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Late(wait) => write!(f, "late:{}", wait.as_millis()),
            Fault::Drop => f.write_str("drop"),
            Fault::DropBefore => f.write_str("drop-before"),
            Fault::InternalError => f.write_str("500"),
            Fault::Unavailable => f.write_str("503"),
            Fault::RateLimited => f.write_str("429"),
            Fault::Refuse(code) => write!(f, "refuse:{code}"),
            Fault::RejectLater(code) => write!(f, "reject-later:{code}"),
            Fault::Failed(code) => write!(f, "failed:{code}"),
            Fault::PendingBare(None) => f.write_str("pending-bare"),
            Fault::Worded(word) => write!(f, "status:{word}"),
            Fault::PendingBare(Some(code)) => write!(f, "pending-bare:{code}"),
            Fault::ExpireTokens => f.write_str("expire-tokens"),
            Fault::Huge(bytes) => write!(f, "huge:{bytes}"),
            Fault::Answer(json) => write!(f, "answer:{json}"),
        }
    }
}

/// Which requests a queued fault waits for: `"POST /purchases"` (a method and a path prefix) or
/// `"/oauth/token"` (a path prefix, any method).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matcher {
    method: Option<String>,
    prefix: String,
}

impl Matcher {
    pub fn parse(text: &str) -> Result<Matcher, String> {
        let mut words = text.split_whitespace();
        let (method, prefix) = match (words.next(), words.next(), words.next()) {
            (Some(prefix), None, None) => (None, prefix),
            (Some(method), Some(prefix), None) => (Some(method.to_ascii_uppercase()), prefix),
            _ => return Err(format!("on {text:?}: \"METHOD /path\" or \"/path\"")),
        };
        if !prefix.starts_with('/') {
            return Err(format!("on {text:?}: the path starts with /"));
        }
        Ok(Matcher { method, prefix: prefix.to_string() })
    }

    pub fn matches(&self, method: &str, path: &str) -> bool {
        self.method.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method)) && path.starts_with(&self.prefix)
    }
}

impl Default for Matcher {
    /// The write endpoint: `POST /purchases`.
    fn default() -> Self {
        Matcher { method: Some("POST".into()), prefix: "/purchases".into() }
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.method {
            Some(method) => write!(f, "{method} {}", self.prefix),
            None => f.write_str(&self.prefix),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_read_back_as_written() {
        for text in [
            "late:1500",
            "drop",
            "drop-before",
            "500",
            "503",
            "refuse:part_discontinued",
            "reject-later:no_stock",
            "expire-tokens",
            "huge:2000000",
        ] {
            assert_eq!(Fault::parse(text).unwrap().to_string(), text);
        }
        for bad in ["late", "late:soon", "refuse", "refuse:", "404", "drop:1", "expire-tokens:1", "huge", "huge:x", ""]
        {
            assert!(Fault::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn matchers_take_a_method_and_a_prefix() {
        let m = Matcher::parse("post /purchases").unwrap();
        assert!(m.matches("POST", "/purchases"));
        assert!(!m.matches("GET", "/purchases"));
        let any = Matcher::parse("/oauth/token").unwrap();
        assert!(any.matches("POST", "/oauth/token") && !any.matches("POST", "/purchases"));
        assert!(Matcher::parse("purchases").is_err() && Matcher::parse("POST /a /b").is_err());
        assert_eq!(Matcher::default().to_string(), "POST /purchases");
    }
}
