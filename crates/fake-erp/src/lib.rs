//! A fake ERP behind an HTTP API, for testing a client that delivers effects to one (the gate's
//! dispatcher). It behaves like the ERP seed 004's client talks to: OAuth refresh tokens that
//! rotate on every use, two rate-limit windows (per second and per minute) answering 429 with
//! `Retry-After`, writes that take an `Idempotency-Key` and answer `200 {protocol, PENDING}` before
//! they are done, a protocol to poll and a state query by key. A test chooses faults per request
//! (an answer after the client's timeout, the effect applied and the connection dropped, 500, 503,
//! a business refusal), and asks the fake what it did (`GET /_fake/effects`) to compare with what
//! the client reported. See the crate's README for the endpoints.
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! let erp = toolgate_fake_erp::start("127.0.0.1:0".parse().unwrap(), Default::default()).await?;
//! println!("{} {}", erp.base_url(), erp.refresh_token());
//! # Ok(()) }
//! ```

pub mod fault;
mod http;
mod state;

use axum::serve::{IncomingStream, Listener};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

pub use fault::{Fault, Matcher};
pub use state::Settings;

/// How the fake starts.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub settings: Settings,
    /// The first refresh token (and the one `POST /_fake/reset` issues again); random if `None`.
    pub refresh_token: Option<String>,
}

/// The state every request shares.
pub(crate) struct Shared {
    state: Mutex<state::State>,
    initial_refresh_token: Option<String>,
    /// Numbers protocols and purchases; not reset, so a protocol name is never reused.
    serial: AtomicU64,
    /// The connections accepted since it started (not reset): how a client's keep-alive shows.
    connections: Arc<AtomicU64>,
}

impl Shared {
    /// What the ERP did, and the connections it accepted (`connections`).
    pub(crate) fn effects(&self) -> serde_json::Value {
        let mut effects = self.lock().effects(Instant::now());
        effects["connections"] = self.connections.load(Ordering::Relaxed).into();
        effects
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, state::State> {
        // A panic while the lock was held leaves the state as it was at that point; keep serving.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new protocol name and purchase id.
    pub(crate) fn names(&self) -> (String, String) {
        let n = self.serial.fetch_add(1, Ordering::Relaxed) + 1;
        (format!("PRT-{n:06}"), format!("PO-{n:06}"))
    }

    /// Back to a fresh start with the current settings: no tokens, purchases, keys, faults or
    /// counts; the refresh token is the configured first one again, or a new random one.
    pub(crate) fn reset(&self) -> String {
        let mut state = self.lock();
        let token = self.initial_refresh_token.clone().unwrap_or_else(|| fresh_token("rt"));
        *state = state::State::new(state.settings.clone(), token.clone());
        token
    }
}

/// `PREFIX-` and 32 random hex digits.
pub(crate) fn fresh_token(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the system's random number generator");
    format!("{prefix}-{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// A running fake ERP; dropping it stops the server.
pub struct FakeErp {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeErp {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The refresh token that works now.
    pub fn refresh_token(&self) -> String {
        self.shared.lock().refresh_token().to_string()
    }

    /// What `GET /_fake/effects` answers.
    pub fn effects(&self) -> serde_json::Value {
        self.shared.effects()
    }

    /// What `POST /_fake/faults` does: `fault` for the next `times` requests `on` matches.
    pub fn queue_fault(&self, fault: Fault, times: u32, on: Matcher) {
        self.shared.lock().queue_fault(fault, times, on);
    }

    /// What `POST /_fake/expire-tokens` does: every access token expires now; how many there were.
    pub fn expire_access_tokens(&self) -> usize {
        self.shared.lock().expire_access_tokens()
    }

    /// What `PUT /_fake/config` does: change the settings `change` names; the settings now, or
    /// what is wrong (nothing is changed then).
    pub fn configure(&self, change: &serde_json::Value) -> Result<serde_json::Value, String> {
        let mut state = self.shared.lock();
        state.settings.update(change)?;
        Ok(state.settings.to_json())
    }

    /// What `POST /_fake/reset` does; returns the refresh token that works now.
    pub fn reset(&self) -> String {
        self.shared.reset()
    }
}

impl Drop for FakeErp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Listen on `addr` (`127.0.0.1:0` for a free port) and serve on the current runtime until the
/// returned handle is dropped.
pub async fn start(addr: SocketAddr, config: Config) -> io::Result<FakeErp> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let first = config.refresh_token.clone().unwrap_or_else(|| fresh_token("rt"));
    let shared = Arc::new(Shared {
        state: Mutex::new(state::State::new(config.settings, first)),
        initial_refresh_token: config.refresh_token,
        serial: AtomicU64::new(0),
        connections: Arc::new(AtomicU64::new(0)),
    });
    let app = http::router(shared.clone()).into_make_service_with_connect_info::<Connection>();
    let counted = shared.connections.clone();
    let task = tokio::spawn(async move {
        // serve only returns on an I/O error of the listener, which it already retries.
        let _ = axum::serve(DroppingListener(listener, counted), app).await;
    });
    Ok(FakeErp { addr, shared, task })
}

/// A TCP listener whose connections a handler can drop: see [`Connection::drop_without_answer`].
struct DroppingListener(TcpListener, Arc<AtomicU64>);

impl Listener for DroppingListener {
    type Io = DroppableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (DroppableStream, SocketAddr) {
        loop {
            match self.0.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    self.1.fetch_add(1, Ordering::Relaxed);
                    return (DroppableStream { stream, dropped: Arc::new(AtomicBool::new(false)) }, addr);
                }
                // Out of file descriptors and the like: wait a little, as axum's own listener does.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// A connection, as a handler sees it (`ConnectInfo<Connection>`).
#[derive(Clone)]
pub(crate) struct Connection {
    dropped: Arc<AtomicBool>,
}

impl Connection {
    /// From now on the connection writes nothing: the server's attempt to answer fails and it
    /// closes the socket, so the client reads the end of the stream and not a byte of an answer.
    pub(crate) fn drop_without_answer(&self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl axum::extract::connect_info::Connected<IncomingStream<'_, DroppingListener>> for Connection {
    fn connect_info(stream: IncomingStream<'_, DroppingListener>) -> Self {
        Connection { dropped: stream.io().dropped.clone() }
    }
}

struct DroppableStream {
    stream: TcpStream,
    dropped: Arc<AtomicBool>,
}

impl DroppableStream {
    fn dropped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }
}

fn aborted() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "dropped by a fault")
}

impl AsyncRead for DroppableStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.dropped() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for DroppableStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.dropped() {
            return Poll::Ready(Err(aborted()));
        }
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.dropped() {
            return Poll::Ready(Err(aborted()));
        }
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.dropped() {
            return Poll::Ready(Err(aborted()));
        }
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
