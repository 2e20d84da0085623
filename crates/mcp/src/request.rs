//! What an HTTP request carries to the server: the person's bearer token and the trace id. Both
//! the HTTP layer (`http`, which checks the token before anything runs) and the server (`server`,
//! which reads them from the request's parts) use it, so neither imports the other's inside:
//! `http` is built on `server`, never the reverse.

/// The token of an `Authorization: Bearer <token>` header value.
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    Some(token.trim()).filter(|t| scheme.eq_ignore_ascii_case("bearer") && !t.is_empty())
}

/// A request's trace id: its `traceparent`'s (W3C Trace Context), or a fresh one.
#[derive(Clone, Debug)]
pub struct Trace(pub String);

impl Trace {
    pub(crate) fn of(traceparent: Option<&str>) -> Trace {
        let given = traceparent.and_then(|t| {
            let mut parts = t.trim().split('-');
            let (version, id) = (parts.next()?, parts.next()?);
            let hex = |s: &str| s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            (version.len() == 2
                && hex(version)
                && version != "ff"
                && id.len() == 32
                && hex(id)
                && id.bytes().any(|b| b != b'0'))
            .then(|| id.to_string())
        });
        Trace(given.unwrap_or_else(|| {
            let mut bytes = [0u8; 16];
            let _ = getrandom::fill(&mut bytes);
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read() {
        assert_eq!(bearer("Bearer abc.def.ghi"), Some("abc.def.ghi"));
        assert_eq!(bearer("bearer  t "), Some("t"));
        assert_eq!(bearer("Basic dXNlcg=="), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("Bearer"), None);
    }
}
