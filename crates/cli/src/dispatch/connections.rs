//! The dispatcher's HTTP/1.1 connections to the ERPs, kept open between exchanges (keep-alive)
//! for `--keep-alive` seconds: no TCP (and TLS) handshake per request. hyper speaks the protocol;
//! this module decides where a connection goes and when one may be used again.
//!
//! A connection is kept per resolved address and origin, so it only ever serves the address the
//! dispatcher's checks passed and the origin the endpoint's credentials are bound to. What a
//! reused connection may cost is judged as on a new one: a request hyper hands back unwritten (the
//! connection closed while idle) goes out on a new connection; one that may have been written and
//! got no answer is `Closed` or `Broken`, and the delivery asks the ERP for the key's state, never
//! sends it again.

use super::Link;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::TlsConnector;
use toolgate_erp_client::{CallError, Reply};

/// Why a request was not sent at all: it cannot be written as HTTP (a header value with a line
/// break, a path that is not a URI path).
pub(super) const UNSENDABLE: &str = "unsendable";

type Sender = SendRequest<Full<Bytes>>;

/// Where a connection goes: the address it was made to, and the endpoint's origin.
type Key = (SocketAddr, String);

/// The idle connections, by address and origin.
pub(super) struct Connections {
    idle: Mutex<HashMap<Key, Vec<(Sender, Instant)>>>,
    /// How long an idle connection is used again; zero: a connection per exchange.
    keep: Duration,
    /// Idle connections kept per address and origin.
    most: usize,
    tls: Arc<ClientConfig>,
}

impl Connections {
    pub(super) fn new(keep: Duration, most: usize, tls: Arc<ClientConfig>) -> Self {
        Connections { idle: Mutex::new(HashMap::new()), keep, most: most.max(1), tls }
    }

    /// One exchange with `link`: `path` (under its prefix), the headers, a body (with its
    /// `Content-Length`, which a request other than GET always has), at most `limit` bytes of
    /// answer body read. No timeout of its own.
    pub(super) async fn exchange(
        &self,
        link: &Link,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
        limit: usize,
    ) -> Result<Reply, CallError> {
        let mut request = build(link, method, path, headers, body)?;
        let key = (link.addr, link.origin.clone());
        loop {
            let (mut sender, reused) = match self.take(&key) {
                Some(sender) => (sender, true),
                None => (self.open(link).await?, false),
            };
            // Closed while it was idle: nothing was written to it.
            if sender.ready().await.is_err() {
                if reused {
                    continue;
                }
                return Err(CallError::Connect(std::io::Error::other("the connection closed at once")));
            }
            let response = match sender.try_send_request(request).await {
                Ok(response) => response,
                Err(mut e) => match e.take_message() {
                    // Handed back unwritten: the ERP has seen nothing of it.
                    Some(unsent) if reused => {
                        request = unsent;
                        continue;
                    }
                    Some(_) => return Err(CallError::Connect(std::io::Error::other(e.into_error()))),
                    None => return Err(lost(&e.into_error())),
                },
            };
            let (head, body) = response.into_parts();
            let status = head.status.as_u16();
            let body = match Limited::new(body, limit).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
                    return Err(CallError::TooLarge(Some(status)))
                }
                Err(e) => return Err(CallError::Broken(e.to_string())),
            };
            let headers = head
                .headers
                .iter()
                .map(|(name, value)| {
                    (name.as_str().to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned())
                })
                .collect();
            self.keep_idle(key, sender);
            return Ok(Reply { status, headers, body: body.to_vec() });
        }
    }

    /// A connection to `link`'s address, TLS if it is `https`. A handshake that fails is `Connect`:
    /// nothing of a request was sent.
    async fn open(&self, link: &Link) -> Result<Sender, CallError> {
        let tcp = tokio::net::TcpStream::connect(link.addr).await.map_err(CallError::Connect)?;
        // A request is written whole; an answer is not waited for behind Nagle's delay.
        let _ = tcp.set_nodelay(true);
        if !link.tls {
            return handshake(tcp).await;
        }
        let name = ServerName::try_from(link.host.clone())
            .map_err(|e| CallError::Connect(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
        let tls = TlsConnector::from(self.tls.clone()).connect(name, tcp).await.map_err(CallError::Connect)?;
        handshake(tls).await
    }

    /// The most recently used idle connection to `key` still within its time, if any.
    fn take(&self, key: &Key) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let kept = idle.get_mut(key)?;
        while let Some((sender, since)) = kept.pop() {
            if since.elapsed() < self.keep && !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    /// Keep `sender` for the next exchange, unless keep-alive is off or enough are kept already
    /// (dropping it closes the connection).
    fn keep_idle(&self, key: Key, sender: Sender) {
        if self.keep.is_zero() || sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let kept = idle.entry(key).or_default();
        kept.retain(|(s, since)| since.elapsed() < self.keep && !s.is_closed());
        if kept.len() < self.most {
            kept.push((sender, Instant::now()));
        }
    }
}

/// The HTTP/1.1 handshake over a connection made, its driver spawned on the runtime.
async fn handshake<S>(io: S) -> Result<Sender, CallError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        http1::handshake(TokioIo::new(io)).await.map_err(|e| CallError::Connect(std::io::Error::other(e)))?;
    tokio::spawn(async move {
        // Ends when the connection closes or is no longer used; its errors reach the exchange.
        let _ = connection.await;
    });
    Ok(sender)
}

/// The request, or why it cannot be written.
fn build(
    link: &Link,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<hyper::Request<Full<Bytes>>, CallError> {
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(format!("{}{path}", link.prefix))
        .header(hyper::header::HOST, &link.authority);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if body.is_some() || method != "GET" {
        request = request.header(hyper::header::CONTENT_LENGTH, body.map_or(0, <[u8]>::len));
    }
    request
        .body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default())))
        .map_err(|e| CallError::Broken(format!("{UNSENDABLE}: {e}")))
}

/// A request that may have been written, and no whole answer.
fn lost(e: &hyper::Error) -> CallError {
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        CallError::Closed
    } else {
        CallError::Broken(e.to_string())
    }
}
