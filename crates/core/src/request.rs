//! The path of an outbox tool's HTTP request, which the DBA's request function builds, often from
//! the model's arguments (`'/orders/' || args->>'ref'`). The path goes under the endpoint's base
//! path; a `.` or `..` segment would climb out of it (`/api/tenant-a/orders/../../admin`), and
//! servers and proxies decode percent-encoding (once, or more) before they resolve dot segments,
//! so encoded dots count as dots. The gate refuses such a path when the call is made, the
//! dispatcher again before it sends, and `path_segment` lets a DBA put an argument into a path as
//! one segment, whatever it holds.

/// Bytes a path segment keeps as they are (RFC 3986's unreserved characters); every other byte is
/// percent-encoded.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

/// `value` as one path segment: every byte but the unreserved ones percent-encoded (so `/`, `?`,
/// `#` and `%` stay inside the segment). Refused: an empty value, and one that would climb once a
/// server decoded it (`.`, `..`, `../x`, `%2e%2e`…): what `climbs` refuses, this never returns.
pub fn path_segment(value: &str) -> Result<String, &'static str> {
    if value.is_empty() {
        return Err("a path segment is not empty");
    }
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if unreserved(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if climbs(&format!("/{out}")) {
        return Err("a path segment is not ., .. or a value holding them (raw or percent-encoded)");
    }
    Ok(out)
}

/// `text` with its percent-escapes decoded once (a `%` not followed by two hex digits is kept).
fn decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `path` (its query, if any, aside) holds a `.` or `..` segment, raw or percent-encoded
/// (decoded up to three times, and with `\` read as `/`, as some servers do): a path that could
/// leave the endpoint's base path.
pub fn climbs(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or_default();
    let mut text = path.to_string();
    for _ in 0..4 {
        if text.split(['/', '\\']).any(|s| s == "." || s == "..") {
            return true;
        }
        let next = decoded(&text);
        if next == text {
            return false;
        }
        text = next;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_encoded_whole() {
        assert_eq!(path_segment("A-17_x.~").unwrap(), "A-17_x.~");
        assert!(path_segment("../../admin").is_err());
        assert!(path_segment("%2e%2e").is_err());
        assert!(path_segment("a\\..").is_err());
        assert_eq!(path_segment("A/B").unwrap(), "A%2FB");
        assert_eq!(path_segment("a b/c?d#e%f").unwrap(), "a%20b%2Fc%3Fd%23e%25f");
        assert_eq!(path_segment("ação").unwrap(), "a%C3%A7%C3%A3o");
        assert!(path_segment("").is_err());
        assert!(path_segment(".").is_err());
        assert!(path_segment("..").is_err());
        assert_eq!(path_segment("...").unwrap(), "...");
    }

    #[test]
    fn dot_segments_are_found_however_encoded() {
        for bad in [
            "/orders/../../admin",
            "/orders/..",
            "/./orders",
            "/orders/%2e%2e/admin",
            "/orders/%2E%2E%2Fadmin",
            "/orders/.%2e/admin",
            "/orders/%252e%252e/admin",
            "/orders/..%5cadmin",
            "/orders/..\\admin",
            "/orders/%25252e%25252e/x",
            "/orders/..%2F..%2Fadmin",
        ] {
            assert!(climbs(bad), "{bad}");
        }
        for good in
            ["/orders/742", "/orders/a.b", "/orders/...", "/orders/x?next=../admin", "/purchases", "/orders/%2Fetc"]
        {
            assert!(!climbs(good), "{good}");
        }
    }

    #[test]
    fn an_encoded_segment_never_climbs() {
        for value in ["..", ".", "../x", "%2e%2e", "a/../b", "..\\x", "%252e%252e"] {
            if let Ok(segment) = path_segment(value) {
                assert!(!climbs(&format!("/orders/{segment}")), "{value} → {segment}");
            }
        }
    }
}
