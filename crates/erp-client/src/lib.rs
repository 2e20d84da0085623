//! An ERP's answer as the dispatcher reads it (`Reply`) and why there was none (`CallError`), and a
//! small HTTP/1.1 client over a TCP stream, one request per connection, enough for tests to talk
//! to an ERP (and to tell a timeout from a connection closed without an answer, which a general
//! client reports alike). The dispatcher (`toolgate dispatch`) sends with its own kept
//! connections and answers in these types; the fake ERP's tests use the client.

use serde_json::Value;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// An answer.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    /// Names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// The first header of that name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Value::Null` if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Why there is no answer.
#[derive(Debug)]
pub enum CallError {
    /// No connection.
    Connect(std::io::Error),
    /// No complete answer within the timeout (the request may have been received, and applied).
    Timeout,
    /// The server closed the connection without a byte of an answer.
    Closed,
    /// Another I/O error, or an answer that is not HTTP.
    Broken(String),
    /// An answer longer than the reader's limit: its status, if its head was read (the body was
    /// not kept).
    TooLarge(Option<u16>),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Connect(e) => write!(f, "no connection: {e}"),
            CallError::Timeout => f.write_str("no answer within the timeout"),
            CallError::Closed => f.write_str("connection closed without an answer"),
            CallError::Broken(e) => write!(f, "broken answer: {e}"),
            CallError::TooLarge(_) => f.write_str("an answer larger than the limit"),
        }
    }
}

impl std::error::Error for CallError {}

/// One request: `path` with its query, extra headers, a body (sent with `Content-Length`; give a
/// `Content-Type` header with it), everything within `timeout`.
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Reply, CallError> {
    let head = head(method, path, &addr.to_string(), headers, body);
    let exchange = async {
        let stream = TcpStream::connect(addr).await.map_err(CallError::Connect)?;
        over(stream, &head, body).await
    };
    tokio::time::timeout(timeout, exchange).await.unwrap_or(Err(CallError::Timeout))
}

/// A request's head, for `host` (the `Host` header: the name, and the port if not the scheme's).
pub fn head(method: &str, path: &str, host: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> String {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if body.is_some() || method != "GET" {
        head.push_str(&format!("Content-Length: {}\r\n", body.map_or(0, <[u8]>::len)));
    }
    head.push_str("\r\n");
    head
}

/// One exchange over a connection already made (plain TCP, or TLS over it): `head` and `body`
/// sent, the answer read to the end of the connection. No timeout of its own.
pub async fn over<S>(stream: S, head: &str, body: Option<&[u8]>) -> Result<Reply, CallError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    over_capped(stream, head, body, usize::MAX).await
}

/// The head of an answer may take this much beside the body's limit.
const HEAD_ALLOWANCE: usize = 64 * 1024;

/// [`over`], reading at most `limit` bytes of body (and the head's allowance): a longer answer is
/// `TooLarge`, with its status if its head came whole, and nothing more of it is read.
pub async fn over_capped<S>(mut stream: S, head: &str, body: Option<&[u8]>, limit: usize) -> Result<Reply, CallError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let broken = |e: std::io::Error| CallError::Broken(e.to_string());
    // The head and the body in one write: one segment for a small request, not two.
    let mut request = Vec::with_capacity(head.len() + body.map_or(0, <[u8]>::len));
    request.extend_from_slice(head.as_bytes());
    request.extend_from_slice(body.unwrap_or_default());
    stream.write_all(&request).await.map_err(broken)?;
    stream.flush().await.map_err(broken)?;
    let mut received = Vec::new();
    let most = limit.saturating_add(HEAD_ALLOWANCE);
    let read = async {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(false);
            }
            received.extend_from_slice(&chunk[..n]);
            if received.len() > most {
                return Ok(true);
            }
        }
    };
    let outcome: std::io::Result<bool> = read.await;
    match outcome {
        Ok(true) => {
            // The status line, if it came whole.
            let status = received
                .windows(2)
                .position(|w| w == b"\r\n")
                .and_then(|end| std::str::from_utf8(&received[..end]).ok())
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|s| s.parse::<u16>().ok());
            return Err(CallError::TooLarge(status));
        }
        Ok(false) => {}
        // A reset with nothing read is a connection dropped without an answer too.
        Err(e) if received.is_empty() && e.kind() == std::io::ErrorKind::ConnectionReset => {}
        // A TLS connection closed without its close_notify: what came is judged as it is (a
        // body shorter than its Content-Length is still refused).
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => return Err(broken(e)),
    }
    if received.is_empty() {
        return Err(CallError::Closed);
    }
    let reply = parse(&received)?;
    if reply.body.len() > limit {
        return Err(CallError::TooLarge(Some(reply.status)));
    }
    Ok(reply)
}

/// [`call`] with a JSON body (or none) and a timeout of ten seconds.
pub async fn json(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Result<Reply, CallError> {
    let bytes = body.map(|b| b.to_string().into_bytes());
    let mut all: Vec<(&str, &str)> = headers.to_vec();
    if bytes.is_some() {
        all.push(("Content-Type", "application/json"));
    }
    call(addr, method, path, &all, bytes.as_deref(), Duration::from_secs(10)).await
}

fn parse(received: &[u8]) -> Result<Reply, CallError> {
    let broken = |what: &str| CallError::Broken(what.to_string());
    let end = received.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| broken("no end of the head"))?;
    let head = std::str::from_utf8(&received[..end]).map_err(|_| broken("the head is not text"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status =
        status_line.split_whitespace().nth(1).and_then(|s| s.parse::<u16>().ok()).ok_or_else(|| broken("no status"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &received[end + 4..];
    let reply = Reply { status, headers, body: Vec::new() };
    let body = if reply.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest).ok_or_else(|| broken("bad chunked body"))?
    } else if let Some(length) = reply.header("content-length") {
        let length: usize = length.parse().map_err(|_| broken("bad content-length"))?;
        rest.get(..length).ok_or_else(|| broken("body shorter than its content-length"))?.to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Reply { body, ..reply })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&rest[..line_end]).ok()?.split(';').next()?.trim().to_string();
        let size = usize::from_str_radix(&size, 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_with_a_length_or_in_chunks() {
        let plain = parse(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!((plain.status, plain.header("retry-after"), plain.body.as_slice()), (429, Some("1"), &b"{}"[..]));
        let chunked =
            parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n")
                .unwrap();
        assert_eq!(chunked.json()["a"], 1);
        assert!(parse(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{}").is_err());
        assert!(parse(b"nonsense").is_err());
    }
}
