//! The upstream connection pool: HTTP/1.1 connections kept open per origin and reused, with
//! nothing between a request and hyper's connection but a map lookup.
//!
//! hyper-util's pooled client did the same job with a SipHash of the origin on every checkout
//! and again on every return, a mutex-guarded waiter list, and a task spawned per request to
//! return the connection once it was ready again: about 6 % of a proxied request's
//! instructions (BENCHMARKS.md). Here a connection goes back to its origin's idle list the
//! moment its answer's body ends (`UpstreamBody`), and a checkout takes the most recently used
//! one that is still open and ready.
//!
//! What stays as hyper-util had it: a request that finds its pooled connection closed by the
//! upstream before any of it was written is sent again on another connection (the race of a
//! server closing an idle keep-alive connection just as it is reused), the idle list of an
//! origin is capped at `MAX_IDLE_PER_HOST`, and a connection idle for `POOL_IDLE_TIMEOUT` is
//! not used again.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::uri::{Parts, Scheme};
use axum::http::{HeaderValue, Request, Response, Uri, header};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tower_service::Service;

use crate::fasthash::FastMap;

/// Idle connections kept per upstream origin after a burst. Active connections are not
/// limited; this only bounds what a burst leaves behind: 1024 idle connections held ~40 MB for
/// the pool's 90 s (BENCHMARKS.md), while opening a connection again costs one round trip (two
/// with TLS). nginx's usual `keepalive` setting is of the same order.
pub const MAX_IDLE_PER_HOST: usize = 64;

/// How long an upstream connection may sit unused in a pool before it is closed.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

pub type Connector = HttpsConnector<HttpConnector>;
type Sender = http1::SendRequest<Full<Bytes>>;

/// Why a request never got an answer.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("the endpoint's URL {0:?} is not a valid request URL")]
    BadUrl(String),
    /// No connection could be opened (refused, unresolvable, TLS, connect timeout).
    #[error("could not connect: {0}")]
    Connect(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The connection failed while the request was written or its answer's head read.
    #[error("{0}")]
    Http(#[from] hyper::Error),
}

impl SendError {
    pub fn is_connect(&self) -> bool {
        matches!(self, SendError::Connect(_))
    }
}

/// One origin's idle connections, the oldest first. Pure bookkeeping with the time passed in,
/// so expiry and the cap are tested without waiting 90 s.
struct IdleList<C> {
    conns: VecDeque<(C, Instant)>,
}

impl<C> Default for IdleList<C> {
    fn default() -> Self {
        Self { conns: VecDeque::new() }
    }
}

impl<C> IdleList<C> {
    /// The most recently returned connection that `usable` accepts and that has not been idle
    /// for `POOL_IDLE_TIMEOUT`; the expired and the unusable ones met on the way are dropped.
    fn take(&mut self, now: Instant, usable: impl Fn(&C) -> bool) -> Option<C> {
        self.drop_expired(now);
        while let Some((conn, _)) = self.conns.pop_back() {
            if usable(&conn) {
                return Some(conn);
            }
        }
        None
    }

    /// Keep `conn` for reuse; past the cap the oldest goes.
    fn put(&mut self, conn: C, now: Instant) {
        if self.conns.len() >= MAX_IDLE_PER_HOST {
            self.conns.pop_front();
        }
        self.conns.push_back((conn, now));
    }

    fn drop_expired(&mut self, now: Instant) {
        while self.conns.front().is_some_and(|(_, since)| now.saturating_duration_since(*since) >= POOL_IDLE_TIMEOUT) {
            self.conns.pop_front();
        }
    }

    fn len(&self) -> usize {
        self.conns.len()
    }
}

/// An origin (scheme and authority) and what every request to it carries.
struct Origin {
    /// The map's key, shared with the answers in flight that will give a connection back.
    key: Arc<str>,
    /// The `Host` header, without a default port (as hyper-util wrote it).
    host: HeaderValue,
    idle: IdleList<Sender>,
}

#[derive(Default)]
struct Origins {
    http: FastMap<Arc<str>, Origin>,
    https: FastMap<Arc<str>, Origin>,
    /// When every origin's expired connections were last dropped (origins never asked again
    /// would otherwise keep theirs).
    last_sweep: Option<Instant>,
}

impl Origins {
    fn of(&mut self, https: bool) -> &mut FastMap<Arc<str>, Origin> {
        if https { &mut self.https } else { &mut self.http }
    }

    fn sweep(&mut self, now: Instant) {
        if self.last_sweep.is_some_and(|at| now.saturating_duration_since(at) < POOL_IDLE_TIMEOUT) {
            return;
        }
        self.last_sweep = Some(now);
        // An origin left with no idle connection is forgotten (a connection returned to it
        // later brings it back), so the maps hold only origins in use, whatever URLs were tried.
        for map in [&mut self.http, &mut self.https] {
            map.retain(|_, origin| {
                origin.idle.drop_expired(now);
                origin.idle.len() > 0
            });
        }
    }
}

/// A pool of upstream connections. Shared by `Arc` with the bodies of the answers in flight,
/// which give their connection back when they end. The lock is held only for a list operation,
/// never across an `.await`.
pub struct Pool {
    connector: Connector,
    origins: Mutex<Origins>,
}

/// Which origin a connection belongs to, held by the answer's body until it gives it back.
struct Key {
    https: bool,
    authority: Arc<str>,
    host: HeaderValue,
}

impl Pool {
    pub fn new(connector: Connector) -> Arc<Self> {
        Arc::new(Self { connector, origins: Mutex::new(Origins::default()) })
    }

    fn origins(&self) -> std::sync::MutexGuard<'_, Origins> {
        // The pool's lists stay consistent whatever panicked while holding them.
        self.origins.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Close every idle connection now.
    pub fn close_idle(&self) {
        let origins = &mut *self.origins();
        origins.http.clear();
        origins.https.clear();
    }

    /// Idle connections kept for `uri`'s origin (for tests).
    #[cfg(test)]
    pub(super) fn idle_count(&self, uri: &Uri) -> usize {
        self.count_idle(uri, |_| true)
    }

    /// Idle connections kept for `uri`'s origin that could carry a request now (for tests).
    #[cfg(test)]
    pub(super) fn usable_idle_count(&self, uri: &Uri) -> usize {
        self.count_idle(uri, usable)
    }

    #[cfg(test)]
    fn count_idle(&self, uri: &Uri, counted: impl Fn(&Sender) -> bool) -> usize {
        let https = uri.scheme() == Some(&Scheme::HTTPS);
        let authority = uri.authority().map_or("", |a| a.as_str());
        self.origins().of(https).get(authority).map_or(0, |o| o.idle.conns.iter().filter(|(c, _)| counted(c)).count())
    }

    /// The origin's key (with its `Host` header), and an idle connection ready for a request if
    /// one is kept.
    fn checkout(&self, https: bool, authority: &str, uri: &Uri) -> Result<(Key, Option<Sender>), SendError> {
        let now = Instant::now();
        let mut origins = self.origins();
        origins.sweep(now);
        let map = origins.of(https);
        if let Some(origin) = map.get_mut(authority) {
            let sender = origin.idle.take(now, usable);
            return Ok((Key { https, authority: origin.key.clone(), host: origin.host.clone() }, sender));
        }
        let host = host_header(uri).ok_or_else(|| SendError::BadUrl(uri.to_string()))?;
        let key: Arc<str> = Arc::from(authority);
        map.insert(key.clone(), Origin { key: key.clone(), host: host.clone(), idle: IdleList::default() });
        Ok((Key { https, authority: key, host }, None))
    }

    /// Another idle connection for a request whose pooled connection closed under it.
    fn take_again(&self, key: &Key) -> Option<Sender> {
        let now = Instant::now();
        let mut origins = self.origins();
        let origin = origins.of(key.https).get_mut(&*key.authority)?;
        origin.idle.take(now, usable)
    }

    fn give_back(&self, key: &Key, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut origins = self.origins();
        let origin = origins.of(key.https).entry(key.authority.clone()).or_insert_with(|| Origin {
            key: key.authority.clone(),
            host: key.host.clone(),
            idle: IdleList::default(),
        });
        origin.idle.put(sender, now);
    }

    /// Send `request` (its URI absolute) on a pooled connection to its origin, or a new one.
    pub async fn send(self: Arc<Self>, mut request: Request<Full<Bytes>>) -> Result<Response<UpstreamBody>, SendError> {
        let uri = std::mem::take(request.uri_mut());
        let bad_url = || SendError::BadUrl(uri.to_string());
        let https = match uri.scheme() {
            Some(s) if *s == Scheme::HTTPS => true,
            Some(s) if *s == Scheme::HTTP => false,
            _ => return Err(bad_url()),
        };
        let authority = uri.authority().ok_or_else(bad_url)?.as_str();
        let (key, mut pooled) = self.checkout(https, authority, &uri)?;
        request.headers_mut().entry(header::HOST).or_insert_with(|| key.host.clone());
        *request.uri_mut() = origin_form(&uri);
        loop {
            let (mut sender, reused) = match pooled.take() {
                Some(sender) => (sender, true),
                // Boxed: inline, the connecting state (~2.4 KB: resolver, TCP, TLS, handshake)
                // would size every future that awaits a send — the exchange, the attempt loop —
                // and be copied with each of them, on every request, for the rare one that
                // opens a connection.
                None => (Box::pin(self.connect(&uri)).await?, false),
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, inner) = response.into_parts();
                    let mut body = UpstreamBody { inner, back: Some(GiveBack { pool: self, key, sender }) };
                    // An answer without a body (204, 304) is already over.
                    if body.inner.is_end_stream() {
                        body.give_back();
                    }
                    return Ok(Response::from_parts(parts, body));
                }
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) if reused => {
                        request = unsent;
                        pooled = self.take_again(&key);
                    }
                    _ => return Err(SendError::Http(failed.into_error())),
                },
            }
        }
    }

    async fn connect(&self, uri: &Uri) -> Result<Sender, SendError> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx)).await.map_err(SendError::Connect)?;
        let io = connector.call(uri.clone()).await.map_err(SendError::Connect)?;
        let (sender, connection) = http1::handshake(io).await?;
        tokio::spawn(async move {
            // The connection's end (closed by either side, or failed) is seen by the request
            // it was serving; nothing is left to do with it here.
            let _ = connection.await;
        });
        Ok(sender)
    }
}

/// Whether an idle connection can carry a request now: open, and its last answer done with.
fn usable(sender: &Sender) -> bool {
    sender.is_ready() && !sender.is_closed()
}

/// The request target hyper writes: the path and query only (the origin is in `Host`).
fn origin_form(uri: &Uri) -> Uri {
    match uri.path_and_query() {
        Some(path) if path.as_str() != "/" => {
            let mut parts = Parts::default();
            parts.path_and_query = Some(path.clone());
            Uri::from_parts(parts).unwrap_or_default()
        }
        _ => Uri::default(),
    }
}

/// `Host` for `uri`: its host, with the port only when it is not the scheme's default.
fn host_header(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let default_port = if uri.scheme() == Some(&Scheme::HTTPS) { 443 } else { 80 };
    match uri.port_u16() {
        Some(port) if port != default_port => HeaderValue::from_str(&format!("{host}:{port}")).ok(),
        _ => HeaderValue::from_str(host).ok(),
    }
}

/// The connection an answer's body came on, returned to its pool when the body ends.
struct GiveBack {
    pool: Arc<Pool>,
    key: Key,
    sender: Sender,
}

/// An upstream answer's body, read as it arrives. Once its last frame has been read, its
/// connection goes back to the pool; dropped before that, the connection closes with it (an
/// HTTP/1.1 connection with an unread answer cannot carry another request). The body, which a
/// stream's every event reads, first (`repr(C)`; see `relay::Relay`).
#[repr(C)]
pub struct UpstreamBody {
    inner: Incoming,
    back: Option<GiveBack>,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody").field("pooled", &self.back.is_some()).finish_non_exhaustive()
    }
}

impl UpstreamBody {
    fn give_back(&mut self) {
        if let Some(back) = self.back.take() {
            back.pool.give_back(&back.key, back.sender);
        }
    }

    /// After a poll of the answer: its connection goes back once the last frame is read, and is
    /// closed when the answer broke.
    fn settle(&mut self, polled: &Poll<Option<Result<Frame<Bytes>, hyper::Error>>>) {
        match polled {
            Poll::Ready(None) => self.give_back(),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.give_back(),
            Poll::Ready(Some(Err(_))) => self.back = None,
            _ => {}
        }
    }

    /// The next piece of data, trailers passed over (no client of these protocols reads them).
    /// For a stream's relay: the piece is taken out of its frame here, where the frame is made,
    /// instead of the whole frame being moved on to the relay for each event.
    #[inline]
    pub fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, hyper::Error>>> {
        loop {
            let polled = Pin::new(&mut self.inner).poll_frame(cx);
            self.settle(&polled);
            match polled {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        this.settle(&polled);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
