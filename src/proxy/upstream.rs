//! Talking to an endpoint: the HTTP client, URL joining and header rewriting (SPEC §8).

use std::sync::Arc;
use std::time::Duration;

use axum::http::uri::{Authority, Parts, PathAndQuery, Scheme};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, Uri, header};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use rustls_platform_verifier::ConfigVerifierExt;

use crate::protocol::Format;
use crate::snapshot::LiveEndpoint;

use super::pool::{Connector, Pool};
pub use super::pool::{MAX_IDLE_PER_HOST, POOL_IDLE_TIMEOUT, SendError, UpstreamBody};

/// The upstream client: HTTP/1.1 connections over rustls, pooled per origin (`pool.rs`), and
/// nothing on top.
///
/// HTTP/1.1 only, with a large idle pool per host. hyper keeps a single HTTP/2 connection per
/// host and queues requests beyond the server's concurrent-stream limit (hyperium/hyper#2197),
/// which would stall the 101st concurrent stream to one endpoint. Separate HTTP/1.1 connections
/// cost a few more sockets and no head-of-line blocking. TCP_NODELAY avoids the ~40 ms
/// Nagle/delayed-ACK stall on small SSE writes. Redirects are not followed: a 3xx from an API
/// is an endpoint misconfiguration and counts as a failure.
///
/// Not reqwest: its redirect and retry layers re-parse the URL of every request and copy its
/// headers, about a third of the gateway's own CPU per request in a profile (BENCHMARKS.md);
/// the gateway needs none of them.
///
/// Each serving thread (`server::serve`) installs its own pool with [`UpstreamClient::install_on_this_thread`]:
/// an upstream connection is then read and written by the thread that serves the request, and
/// a request never waits for another thread to wake up. Elsewhere the shared pool is used.
#[derive(Clone)]
pub struct UpstreamClient {
    tls: rustls::ClientConfig,
    shared: Arc<Pool>,
}

thread_local! {
    /// This serving thread's pool (see `install_on_this_thread`).
    static THREAD_POOL: std::cell::RefCell<Option<Arc<Pool>>> = const { std::cell::RefCell::new(None) };
}

/// The answer's head and its body, read as it arrives.
pub type UpstreamResponse = Response<UpstreamBody>;

impl UpstreamClient {
    pub fn new() -> Result<Self, rustls::Error> {
        // Installing twice is harmless (the second call reports the first provider).
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Reading the system's roots is the slow part (milliseconds): done once, shared by
        // every thread's pool.
        let tls = rustls::ClientConfig::with_platform_verifier()?;
        let shared = Pool::new(connector(tls.clone()));
        Ok(Self { tls, shared })
    }

    /// Give the calling thread its own connection pool; requests sent from this thread use it
    /// from now on. Only for threads that live as long as their runtime (the pool's connection
    /// tasks run on it).
    pub fn install_on_this_thread(&self) {
        let own = Pool::new(connector(self.tls.clone()));
        THREAD_POOL.with(|p| *p.borrow_mut() = Some(own));
    }

    /// Close every idle connection of this thread's pool now. For a serving thread that has
    /// served nothing for `POOL_IDLE_TIMEOUT`: its connections have all expired, and would
    /// otherwise stay open (and their buffers resident) until the next request to their origin.
    pub fn close_idle_connections_on_this_thread(&self) {
        THREAD_POOL.with(|p| {
            if let Some(own) = p.borrow().as_ref() {
                own.close_idle();
            }
        });
    }

    /// This thread's pool, or the shared one.
    fn pool(&self) -> Arc<Pool> {
        THREAD_POOL.with(|p| p.borrow().as_ref().unwrap_or(&self.shared).clone())
    }

    /// Send one request. `url` is absolute (`join_url`); `origin`, when given, is that of the
    /// endpoint whose base URL `url` starts with; `headers` are the final upstream headers
    /// (`request_headers`); the Host header and the body's length are added here.
    pub async fn send(
        &self,
        method: Method,
        url: String,
        origin: Option<&UpstreamOrigin>,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<UpstreamResponse, SendError> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.headers_mut() = headers;
        *request.uri_mut() = match origin {
            Some(origin) => origin.uri(url),
            None => Uri::try_from(url.as_str()).map_err(|_| SendError::BadUrl(url)),
        }?;
        self.pool().send(request).await
    }
}

/// The scheme and authority of an endpoint's base URL, parsed once with the configuration: the
/// URL of each request to it (which starts with its base URL, `join_url`) is put together from
/// them and its own path and query, instead of being parsed whole every time.
#[derive(Clone, Debug)]
pub struct UpstreamOrigin {
    /// The base URL up to its path (`scheme://authority`), as written.
    text: String,
    scheme: Scheme,
    authority: Authority,
}

impl UpstreamOrigin {
    /// `None` when `base_url` is not an absolute URL.
    pub fn of(base_url: &str) -> Option<UpstreamOrigin> {
        let uri: Uri = base_url.parse().ok()?;
        let scheme = uri.scheme()?.clone();
        let authority = uri.authority()?.clone();
        // The authority is kept as written, so the origin's text ends where it does.
        let end = base_url.find("://")? + "://".len() + authority.as_str().len();
        let text = base_url.get(..end)?.to_string();
        Some(UpstreamOrigin { text, scheme, authority })
    }

    /// `url` as a URI: only what follows the origin is parsed. A URL that does not start with
    /// the origin and a path is parsed whole, as it would be without one.
    pub fn uri(&self, url: String) -> Result<Uri, SendError> {
        let Some(rest) = url.strip_prefix(&self.text).filter(|rest| rest.starts_with('/')) else {
            return Uri::try_from(url.as_str()).map_err(|_| SendError::BadUrl(url));
        };
        if let Some(uri) = usual_path(rest).and_then(|path| self.with_path(path)) {
            return Ok(uri);
        }
        let whole = Bytes::from(url);
        let built =
            PathAndQuery::from_maybe_shared(whole.slice(self.text.len()..)).ok().and_then(|path| self.with_path(path));
        built.ok_or_else(|| SendError::BadUrl(String::from_utf8_lossy(&whole).into_owned()))
    }

    fn with_path(&self, path: PathAndQuery) -> Option<Uri> {
        let mut parts = Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(path);
        Uri::from_parts(parts).ok()
    }
}

/// The paths nearly every upstream request goes to (Claude Code asks for `?beta=true`). Parsing a
/// path checks it byte by byte, a few hundred instructions on every request; these are parsed
/// once, and a clone of a static path copies a few words and writes no reference count.
static USUAL_PATHS: [&str; 7] = [
    "/v1/messages",
    "/v1/messages?beta=true",
    "/v1/chat/completions",
    "/v1/responses",
    "/v1/messages/count_tokens",
    "/chat/completions",
    "/responses",
];

/// `path` parsed, when it is one of `USUAL_PATHS`.
fn usual_path(path: &str) -> Option<PathAndQuery> {
    static PARSED: std::sync::LazyLock<[PathAndQuery; USUAL_PATHS.len()]> =
        std::sync::LazyLock::new(|| USUAL_PATHS.map(PathAndQuery::from_static));
    PARSED.iter().find(|usual| usual.as_str() == path).cloned()
}

fn connector(tls: rustls::ClientConfig) -> Connector {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(Duration::from_secs(10)));
    hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().wrap_connector(tcp)
}

/// Read a whole answer body.
/// Why an upstream body could not be read in full.
#[derive(Debug)]
pub enum UpstreamBodyError {
    Network(hyper::Error),
    /// Longer than the limit: reading stopped there (the rest is never read, and the connection
    /// is dropped with the body).
    TooLarge {
        limit: u64,
    },
}

/// Read an upstream body in full, up to `limit` bytes. A `Content-Length` over the limit is
/// refused before any of the body is read.
pub async fn read_body(body: UpstreamBody, limit: u64) -> Result<Bytes, UpstreamBodyError> {
    use hyper::body::Body as _;
    if body.size_hint().lower() > limit {
        return Err(UpstreamBodyError::TooLarge { limit });
    }
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut rest = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(UpstreamBodyError::Network)?.into_data() else { continue };
        let held = first.as_ref().map_or(0, Bytes::len) + rest.len();
        if held + data.len() > limit_usize {
            return Err(UpstreamBodyError::TooLarge { limit });
        }
        match &first {
            None if rest.is_empty() => first = Some(data),
            _ => {
                if let Some(f) = first.take() {
                    rest.extend_from_slice(&f);
                }
                rest.extend_from_slice(&data);
            }
        }
    }
    Ok(match first {
        Some(only) => only,
        None => rest.freeze(),
    })
}

/// SPEC §8 URL joining. `rest` is the inbound path after `/v1` (`/messages`, `/chat/completions`,
/// `/embeddings`, ...). Anthropic: `{base}/v1{rest}`, or `{base}{rest}` when the base already
/// ends in `/v1`. OpenAI-family: `{base}{rest}`, with `/v1` added when the base has no path.
/// Gemini (SPEC §11; `rest` after the version, `/models/{model}:generateContent`):
/// `{base}/v1beta{rest}`, or `{base}{rest}` when the base already ends in `/v1beta` or `/v1`.
pub fn join_url(base_url: &str, format: Format, rest: &str, query: Option<&str>) -> String {
    let base = base_url.trim_end_matches('/');
    let mut url = String::with_capacity(base.len() + rest.len() + 8 + query.map_or(0, |q| q.len() + 1));
    url.push_str(base);
    let version = match format {
        Format::Anthropic => (!base.ends_with("/v1")).then_some("/v1"),
        Format::Openai | Format::Responses => (!has_path(base)).then_some("/v1"),
        Format::Gemini => (!base.ends_with("/v1beta") && !base.ends_with("/v1")).then_some("/v1beta"),
    };
    if let Some(version) = version {
        url.push_str(version);
    }
    url.push_str(rest);
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        // A Gemini path may carry its own query (`?alt=sse`).
        url.push(if rest.contains('?') { '&' } else { '?' });
        url.push_str(q);
    }
    url
}

fn has_path(base: &str) -> bool {
    crate::hosts::after_scheme(base).split_once('/').is_some_and(|(_, path)| !path.is_empty())
}

/// The client's query string without ccmesh's own `endpoint=` selector and without a Google
/// API key (`key=`, how Gemini clients may send their credential: the endpoint's key replaces it).
pub fn forwarded_query(query: Option<&str>) -> Option<String> {
    let q = query?;
    let kept: Vec<&str> = q
        .split('&')
        .filter(|pair| !pair.is_empty() && !matches!(pair.split('=').next(), Some("endpoint" | "key")))
        .collect();
    (!kept.is_empty()).then(|| kept.join("&"))
}

/// Headers that belong to one connection, never to the forwarded request (RFC 9110 §7.6.1),
/// plus what the gateway owns: the client's credentials (replaced by the endpoint's key), its
/// own selection header, cookies (the dashboard session must never leave the gateway) and
/// `accept-encoding` (the gateway reads the stream, so it asks for identity).
fn dropped_request_header(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
            | "authorization"
            | "x-api-key"
            | "x-goog-api-key"
            | "cookie"
            | "accept-encoding"
    ) || name.as_str().starts_with("x-ccmesh-")
}

/// Build the upstream request headers from the client's. A request `converting` to the
/// endpoint's format leaves behind the client's headers that only its own format's upstreams
/// read (`conversion::foreign_header`); the endpoint's configured headers go whatever the client.
pub fn request_headers(client: &HeaderMap, endpoint: &LiveEndpoint, hop: &HeaderValue, converting: bool) -> HeaderMap {
    // Room for every header added below, so the map never grows (a grow rehashes every entry).
    let mut out = HeaderMap::with_capacity(client.len() + endpoint.extra_headers.len() + 5);
    let format = endpoint.config.format;
    for (name, value) in client {
        if dropped_request_header(name) || (converting && super::conversion::foreign_header(name.as_str(), format)) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    // The headers the client's `Connection` names belong to this hop (RFC 9110 §7.6.1). Each
    // name is looked up once, by hash and without an allocation (`&str` keys are lowercased in
    // a scratch buffer), so a header of thousands of names costs thousands of lookups, not
    // thousands for every other header.
    for listed in client.get_all(header::CONNECTION).iter().filter_map(|v| v.to_str().ok()) {
        for name in listed.split(',') {
            out.remove(name.trim());
        }
    }
    if endpoint.config.format == Format::Anthropic && !out.contains_key(&super::request::ANTHROPIC_VERSION) {
        out.insert(super::request::ANTHROPIC_VERSION, HeaderValue::from_static("2023-06-01"));
    }
    out.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    for (name, value) in &endpoint.extra_headers {
        out.insert(name.clone(), value.clone());
    }
    let (name, value) = &endpoint.auth;
    out.insert(name.clone(), value.clone());
    out.insert(super::request::X_CCMESH_HOP, hop.clone());
    // The client's `Host` was dropped above and endpoints cannot set one (`reserved_header`).
    if let Some(host) = &endpoint.host {
        out.insert(header::HOST, host.clone());
    }
    out
}

/// The headers the gateway adds to an answer (`x-ccmesh-attempts`, `x-ccmesh-endpoint`,
/// `x-ccmesh-request-id`, `Server-Timing`, and a conversion's content type), reserved up front.
const ADDED_RESPONSE_HEADERS: usize = 5;

/// Response headers from the upstream that the client must not see: length and framing are the
/// server's business (a streamed body is re-framed), and cookies stay with the gateway.
const DROPPED_RESPONSE_HEADERS: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::CONTENT_LENGTH,
    header::SET_COOKIE,
];

/// The upstream's response headers, less those the client must not see, with room for the
/// ones the gateway adds. Filtered in place: copying the rest into a new map cost more than
/// looking up the few that go.
pub fn response_headers(mut upstream: HeaderMap) -> HeaderMap {
    remove_present(&mut upstream, &DROPPED_RESPONSE_HEADERS);
    upstream.reserve(ADDED_RESPONSE_HEADERS);
    upstream
}

/// Remove `names` from `headers`, looking up only those present: a map of a handful of headers
/// is compared with the names faster than each name is hashed for a lookup.
pub fn remove_present<const N: usize>(headers: &mut HeaderMap, names: &[HeaderName; N]) {
    let mut present = [false; N];
    for name in headers.keys() {
        if let Some(i) = names.iter().position(|n| n == name) {
            present[i] = true;
        }
    }
    for (name, _) in names.iter().zip(present).filter(|(_, present)| *present) {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A keep-alive HTTP/1.1 server on loopback answering every request with `answer`; it
    /// counts the connections it accepts and reports each one that closes.
    async fn server_answering(
        answer: &'static [u8],
    ) -> (String, Arc<AtomicUsize>, tokio::sync::mpsc::UnboundedReceiver<()>) {
        server(answer, Then::KeepOpen).await
    }

    /// What the test server does with a connection after an answer.
    #[derive(Clone)]
    enum Then {
        KeepOpen,
        /// Close it when told, without having said so in the answer (as a server does whose
        /// keep-alive timeout is shorter than the pool's).
        CloseWhenTold(Arc<tokio::sync::Notify>),
    }

    async fn server(
        answer: &'static [u8],
        then: Then,
    ) -> (String, Arc<AtomicUsize>, tokio::sync::mpsc::UnboundedReceiver<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let (closed_tx, closed) = tokio::sync::mpsc::unbounded_channel();
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let closed_tx = closed_tx.clone();
                let then = then.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    'conn: loop {
                        match tcp.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            if tcp.write_all(answer).await.is_err() {
                                break 'conn;
                            }
                            if let Then::CloseWhenTold(told) = &then {
                                told.notified().await;
                                break 'conn;
                            }
                        }
                    }
                    // Closed before it is reported, so a test that waits for the report finds it closed.
                    drop(tcp);
                    let _ = closed_tx.send(());
                });
            }
        });
        (url, accepted, closed)
    }

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    async fn keepalive_server() -> (String, Arc<AtomicUsize>, tokio::sync::mpsc::UnboundedReceiver<()>) {
        server_answering(OK).await
    }

    async fn get_ok(client: &UpstreamClient, url: &str) {
        let answer = client.send(Method::GET, url.to_string(), None, HeaderMap::new(), Bytes::new()).await.unwrap();
        assert_eq!(read_body(answer.into_body(), 1024).await.unwrap(), "ok");
    }

    fn idle(client: &UpstreamClient, url: &str) -> usize {
        client.pool().idle_count(&url.parse().unwrap())
    }

    /// A server that reads each request whole (its head and a `content-length` body) and
    /// answers it with `answer(the body's length)`, keeping the connection open.
    async fn server_reading_bodies(answer: fn(usize) -> Vec<u8>) -> String {
        use tokio::io::AsyncBufReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut tcp = tokio::io::BufReader::new(tcp);
                    loop {
                        let mut length = 0;
                        loop {
                            let mut line = String::new();
                            if tcp.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            if let Some((name, value)) = line.split_once(':')
                                && name.eq_ignore_ascii_case("content-length")
                            {
                                length = value.trim().parse().unwrap();
                            }
                        }
                        let mut body = vec![0; length];
                        if tcp.read_exact(&mut body).await.is_err()
                            || tcp.get_mut().write_all(&answer(length)).await.is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        url
    }

    const BURST_CHUNKS: usize = 2000;

    /// A chunked answer of `BURST_CHUNKS` small chunks (`data: NNNNN\n\n`, 13 bytes each),
    /// written in one go: many reach the connection in each read, and the body hands them on
    /// one frame at a time, each taken frame making room for the next.
    fn chunked_burst(_: usize) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for i in 0..BURST_CHUNKS {
            out.extend_from_slice(format!("d\r\ndata: {i:05}\n\n\r\n").as_bytes());
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    async fn get_burst(client: &UpstreamClient, url: &str) {
        let answer = client.send(Method::GET, url.to_string(), None, HeaderMap::new(), Bytes::new()).await.unwrap();
        let body = read_body(answer.into_body(), 1 << 20).await.unwrap();
        assert_eq!(body.len(), BURST_CHUNKS * 13);
        assert!(body.starts_with(b"data: 00000\n\n"));
        assert!(body.ends_with(format!("data: {:05}\n\n", BURST_CHUNKS - 1).as_bytes()));
    }

    #[tokio::test]
    async fn an_answer_of_many_chunks_arriving_together_is_read_whole() {
        let url = server_reading_bodies(chunked_burst).await;
        let client = UpstreamClient::new().unwrap();
        client.install_on_this_thread();
        let three = async {
            for _ in 0..3 {
                get_burst(&client, &url).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), three).await.expect("the body stalled");
        assert_eq!(idle(&client, &url), 1, "one connection carried all three");
    }

    #[tokio::test]
    async fn a_request_body_larger_than_the_socket_buffers_is_written_whole() {
        fn says_length(length: usize) -> Vec<u8> {
            let text = length.to_string();
            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{text}", text.len()).into_bytes()
        }
        let url = server_reading_bodies(says_length).await;
        let client = UpstreamClient::new().unwrap();
        client.install_on_this_thread();
        let body = Bytes::from(vec![b'x'; 16 << 20]);
        let sent = async {
            let answer = client.send(Method::POST, url.clone(), None, HeaderMap::new(), body).await.unwrap();
            read_body(answer.into_body(), 1024).await.unwrap()
        };
        let said = tokio::time::timeout(Duration::from_secs(30), sent).await.expect("the request stalled");
        assert_eq!(said, (16usize << 20).to_string());
    }

    /// Tasks on two threads take each other's connections from the shared pool, so an answer's
    /// frames are read on one thread and handed to a task that may be running on the other.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_on_several_threads_share_connections_without_a_lost_wake_up() {
        let url = server_reading_bodies(chunked_burst).await;
        let client = Arc::new(UpstreamClient::new().unwrap());
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (client, url) = (client.clone(), url.clone());
                tokio::spawn(async move {
                    for _ in 0..20 {
                        get_burst(&client, &url).await;
                    }
                })
            })
            .collect();
        let all = async {
            for task in tasks {
                task.await.unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(60), all).await.expect("a request stalled");
    }

    #[tokio::test]
    async fn an_answer_read_to_its_end_gives_its_connection_back_for_the_next_request() {
        let (url, accepted, _closed) = keepalive_server().await;
        let client = UpstreamClient::new().unwrap();
        client.install_on_this_thread();
        for _ in 0..5 {
            get_ok(&client, &url).await;
            assert_eq!(idle(&client, &url), 1);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection served all five");
    }

    #[tokio::test]
    async fn a_streamed_answer_is_read_as_its_data_with_its_trailers_passed_over() {
        const WITH_TRAILERS: &[u8] =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n3\r\none\r\n3\r\ntwo\r\n0\r\nx-sum: 6\r\n\r\n";
        let (url, accepted, _closed) = server_answering(WITH_TRAILERS).await;
        let client = UpstreamClient::new().unwrap();
        client.install_on_this_thread();
        // The trailers do reach the body as a frame of their own.
        let answer = client.send(Method::GET, url.clone(), None, HeaderMap::new(), Bytes::new()).await.unwrap();
        let frames = http_body_util::BodyExt::collect(answer.into_body()).await.unwrap();
        assert_eq!(frames.trailers().and_then(|t| t.get("x-sum")).map(|v| v.as_bytes()), Some(&b"6"[..]));
        for _ in 0..2 {
            let answer = client.send(Method::GET, url.clone(), None, HeaderMap::new(), Bytes::new()).await.unwrap();
            let mut body = answer.into_body();
            let mut pieces = Vec::new();
            while let Some(piece) = std::future::poll_fn(|cx| body.poll_data(cx)).await {
                pieces.push(piece.unwrap());
            }
            assert_eq!(pieces, [&b"one"[..], &b"two"[..]]);
            assert_eq!(idle(&client, &url), 1, "read to its end, the connection went back");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection carried all three");
    }

    #[tokio::test]
    async fn an_idle_connection_the_upstream_closed_is_not_offered_again() {
        let close = Arc::new(tokio::sync::Notify::new());
        let (url, accepted, mut closed) = server(OK, Then::CloseWhenTold(close.clone())).await;
        let client = UpstreamClient::new().unwrap();
        client.install_on_this_thread();
        get_ok(&client, &url).await;
        assert_eq!(idle(&client, &url), 1);
        // The server closes its end while the connection sits in the pool.
        close.notify_one();
        tokio::time::timeout(Duration::from_secs(10), closed.recv()).await.unwrap().unwrap();
        // The connection's task reads the close and the pool stops offering it (a request that
        // got it anyway would be resent on another, which would hide the difference below).
        let uri = url.parse().unwrap();
        let pool = client.pool();
        let unusable = async {
            while pool.usable_idle_count(&uri) != 0 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), unusable).await.expect("the closed connection is still offered");
        get_ok(&client, &url).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "the second request went on a new connection");
    }

    #[tokio::test]
    async fn an_answer_given_up_unread_closes_its_connection() {
        // The head promises more than the server ever sends.
        let (url, accepted, mut closed) =
            server_answering(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\npartial").await;
        let client = UpstreamClient::new().unwrap();
        client.install_on_this_thread();
        let answer = client.send(Method::GET, url.clone(), None, HeaderMap::new(), Bytes::new()).await.unwrap();
        drop(answer);
        tokio::time::timeout(Duration::from_secs(10), closed.recv()).await.unwrap().unwrap();
        assert_eq!(idle(&client, &url), 0);
        let _second = client.send(Method::GET, url.clone(), None, HeaderMap::new(), Bytes::new()).await.unwrap();
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "the next request needed a new connection");
    }

    #[tokio::test]
    async fn an_answer_read_after_its_origin_was_forgotten_brings_it_back() {
        let (url, accepted, _closed) = keepalive_server().await;
        let client = UpstreamClient::new().unwrap();
        client.install_on_this_thread();
        let answer = client.send(Method::GET, url.clone(), None, HeaderMap::new(), Bytes::new()).await.unwrap();
        // The pool forgets every origin while the answer is still unread (as its idle sweep
        // forgets origins without idle connections).
        client.close_idle_connections_on_this_thread();
        assert_eq!(read_body(answer.into_body(), 1024).await.unwrap(), "ok");
        assert_eq!(idle(&client, &url), 1, "the connection went back, under its origin again");
        get_ok(&client, &url).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_answer_that_closes_its_connection_is_not_reused() {
        let (url, accepted, _closed) =
            server_answering(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok").await;
        let client = UpstreamClient::new().unwrap();
        client.install_on_this_thread();
        get_ok(&client, &url).await;
        get_ok(&client, &url).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_answer_without_a_body_gives_its_connection_back_at_once() {
        let (url, accepted, _closed) = server_answering(b"HTTP/1.1 204 No Content\r\n\r\n").await;
        let client = UpstreamClient::new().unwrap();
        client.install_on_this_thread();
        for _ in 0..3 {
            let answer = client.send(Method::GET, url.clone(), None, HeaderMap::new(), Bytes::new()).await.unwrap();
            assert_eq!(answer.status(), 204);
            // The body is never polled.
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        drop(listener);
        let client = UpstreamClient::new().unwrap();
        let err = client.send(Method::GET, url.clone(), None, HeaderMap::new(), Bytes::new()).await.unwrap_err();
        assert!(err.is_connect(), "{err}");
        assert_eq!(
            super::super::outcome::classify_network_error(&err),
            super::super::outcome::NetworkErrorKind::Connect
        );
    }

    #[tokio::test]
    async fn closing_a_threads_idle_connections_closes_them_and_the_next_request_connects_anew() {
        let (url, accepted, mut closed) = keepalive_server().await;
        let client = UpstreamClient::new().unwrap();
        client.install_on_this_thread();
        for _ in 0..3 {
            get_ok(&client, &url).await;
        }
        let before = accepted.load(Ordering::SeqCst);
        assert!(before < 3, "the pool reuses its connection ({before} for 3 requests)");

        client.close_idle_connections_on_this_thread();
        for _ in 0..before {
            tokio::time::timeout(Duration::from_secs(10), closed.recv()).await.unwrap().unwrap();
        }
        get_ok(&client, &url).await;
        assert_eq!(accepted.load(Ordering::SeqCst), before + 1, "a fresh connection");
        assert!(closed.try_recv().is_err(), "and it stays open, pooled");
    }

    #[test]
    fn url_joining_per_format() {
        let cases = [
            ("https://api.anthropic.com", Format::Anthropic, "/messages", "https://api.anthropic.com/v1/messages"),
            ("https://relay.example/api/v1", Format::Anthropic, "/messages", "https://relay.example/api/v1/messages"),
            (
                "https://api.moonshot.cn/anthropic",
                Format::Anthropic,
                "/messages/count_tokens",
                "https://api.moonshot.cn/anthropic/v1/messages/count_tokens",
            ),
            (
                "https://api.openai.com",
                Format::Openai,
                "/chat/completions",
                "https://api.openai.com/v1/chat/completions",
            ),
            (
                "https://api.openai.com/",
                Format::Openai,
                "/chat/completions",
                "https://api.openai.com/v1/chat/completions",
            ),
            (
                "https://api.openai.com/v1",
                Format::Openai,
                "/chat/completions",
                "https://api.openai.com/v1/chat/completions",
            ),
            (
                "https://open.bigmodel.cn/api/paas/v4",
                Format::Openai,
                "/chat/completions",
                "https://open.bigmodel.cn/api/paas/v4/chat/completions",
            ),
            ("http://127.0.0.1:8080", Format::Responses, "/responses", "http://127.0.0.1:8080/v1/responses"),
            (
                "http://127.0.0.1:8080/openai/v1",
                Format::Responses,
                "/responses",
                "http://127.0.0.1:8080/openai/v1/responses",
            ),
            ("https://api.openai.com", Format::Openai, "/embeddings", "https://api.openai.com/v1/embeddings"),
            (
                "https://generativelanguage.googleapis.com",
                Format::Gemini,
                "/models/gemini-2.5-flash:generateContent",
                "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent",
            ),
            (
                "https://relay.example/gemini/v1",
                Format::Gemini,
                "/models/m:countTokens",
                "https://relay.example/gemini/v1/models/m:countTokens",
            ),
            (
                "https://relay.example/v1beta/",
                Format::Gemini,
                "/models/m:streamGenerateContent?alt=sse",
                "https://relay.example/v1beta/models/m:streamGenerateContent?alt=sse",
            ),
            (
                "https://relay.example/google",
                Format::Gemini,
                "/models/m:generateContent",
                "https://relay.example/google/v1beta/models/m:generateContent",
            ),
        ];
        for (base, format, rest, want) in cases {
            assert_eq!(join_url(base, format, rest, None), want, "{base} {format}");
        }
        assert_eq!(
            join_url("https://api.anthropic.com", Format::Anthropic, "/messages", Some("beta=true")),
            "https://api.anthropic.com/v1/messages?beta=true"
        );
    }

    #[test]
    fn endpoint_selector_is_removed_from_the_query() {
        assert_eq!(forwarded_query(Some("beta=true&endpoint=kimi")), Some("beta=true".into()));
        assert_eq!(forwarded_query(Some("endpoint=kimi")), None);
        assert_eq!(forwarded_query(Some("a=1&b=2")), Some("a=1&b=2".into()));
        assert_eq!(forwarded_query(None), None);
        // A Gemini client's credential never goes upstream; its `alt=sse` does.
        assert_eq!(forwarded_query(Some("alt=sse&key=AIzaSyXXXX")), Some("alt=sse".into()));
        assert_eq!(
            join_url("http://h", Format::Gemini, "/models/m:streamGenerateContent?alt=sse", Some("x=1")),
            "http://h/v1beta/models/m:streamGenerateContent?alt=sse&x=1"
        );
    }

    /// Framing, hop-by-hop headers and cookies stay behind (every value of each); everything
    /// else reaches the client with its values in order, and the headers the gateway adds fit
    /// without the map growing.
    #[test]
    fn a_url_put_together_from_its_endpoints_origin_is_the_url_parsed_whole() {
        let bases = [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "HTTP://127.0.0.1:80/openai/v1",
            "https://api.anthropic.com",
            "https://user:secret@relay.example.com:8443/api/",
            "http://[::1]:9000/v1",
            "https://generativelanguage.googleapis.com/v1beta",
        ];
        let rests = ["/messages", "/chat/completions", "/models/m:streamGenerateContent?alt=sse", "/a%20b"];
        for base in bases {
            let origin = UpstreamOrigin::of(base).unwrap();
            for format in [Format::Anthropic, Format::Openai, Format::Responses, Format::Gemini] {
                for rest in rests {
                    for query in [None, Some("x=1&y=2")] {
                        let url = join_url(base, format, rest, query);
                        let whole = Uri::try_from(url.as_str()).unwrap();
                        let built = origin.uri(url.clone()).unwrap();
                        assert_eq!(built, whole, "{url}");
                        assert_eq!(built.to_string(), whole.to_string(), "{url}");
                        assert_eq!(built.authority(), whole.authority(), "{url}");
                    }
                }
            }
        }
        // Not starting with the origin, or with no path after it: parsed whole, as without one.
        let origin = UpstreamOrigin::of("http://127.0.0.1:8080").unwrap();
        for url in ["http://127.0.0.2:8080/v1/messages", "http://127.0.0.1:8080", "http://127.0.0.1:80801/x"] {
            assert_eq!(origin.uri(url.to_string()).unwrap(), Uri::try_from(url).unwrap(), "{url}");
        }
        // What the whole parse refuses is refused, the URL named.
        for url in ["http://127.0.0.1:8080/a b", "http://127.0.0.1:8080/\u{7f}", "not a url"] {
            assert!(Uri::try_from(url).is_err(), "{url}");
            match origin.uri(url.to_string()) {
                Err(SendError::BadUrl(named)) => assert_eq!(named, url),
                other => panic!("{url}: {other:?}"),
            }
        }
        assert!(UpstreamOrigin::of("relay.example.com/v1").is_none());
    }

    #[test]
    fn the_usual_paths_are_not_parsed_again_and_any_other_is() {
        let origin = UpstreamOrigin::of("https://api.anthropic.com").unwrap();
        for usual in USUAL_PATHS {
            let url = format!("https://api.anthropic.com{usual}");
            let uri = origin.uri(url.clone()).unwrap();
            assert_eq!(uri, Uri::try_from(url.as_str()).unwrap());
            // The path is the static text itself, so nothing was parsed for it.
            let path = uri.path_and_query().unwrap().as_str();
            assert!(std::ptr::eq(path.as_ptr(), usual.as_ptr()), "{usual} was parsed again");
        }
        for other in ["/v1/messages?beta=false", "/v1/message", "/api/v1/messages"] {
            let url = format!("https://api.anthropic.com{other}");
            let uri = origin.uri(url.clone()).unwrap();
            assert_eq!(uri.path_and_query().unwrap().as_str(), other);
            assert_eq!(uri, Uri::try_from(url.as_str()).unwrap());
        }
    }

    fn live_endpoint(format: Format, extra: &[(&str, &str)]) -> LiveEndpoint {
        use crate::endpoint::{Endpoint, EndpointId, TestResult};
        let config = Endpoint {
            id: EndpointId(1),
            name: "e".into(),
            base_url: "http://127.0.0.1:9/api".into(),
            api_key: "sk-endpoint-key-0000".into(),
            format,
            models: Vec::new(),
            model_map: Vec::new(),
            enabled: true,
            fast: false,
            fast_sort_order: 0,
            sort_order: 0,
            headers: extra.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            test_model: None,
            test: TestResult::default(),
            price_multiplier: 1.0,
        };
        let breakers =
            crate::breaker::Breakers::new(Arc::new(crate::clock::SystemClock), Arc::new(crate::breaker::NoSink));
        LiveEndpoint::new(config, breakers.cell(EndpointId(1)))
    }

    fn values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
        headers.get_all(name).iter().map(|v| v.to_str().unwrap()).collect()
    }

    #[test]
    fn request_headers_forward_the_clients_and_let_the_endpoints_own_win() {
        let hop = HeaderValue::from_static("gw-1");
        let mut client = HeaderMap::new();
        for (name, value) in [
            ("host", "gateway.local"),
            ("content-length", "12"),
            ("content-type", "application/json"),
            ("x-api-key", "client-key"),
            ("authorization", "Bearer client-token"),
            ("cookie", "ccmesh_session=s"),
            ("accept-encoding", "gzip"),
            ("connection", "keep-alive, X-Private"),
            ("x-private", "hop-by-hop"),
            ("x-ccmesh-endpoint", "other"),
            ("x-ccmesh-hop", "forged"),
            ("anthropic-beta", "a"),
            ("anthropic-beta", "b"),
            ("x-team", "client-team"),
            ("api-key", "client-azure-key"),
        ] {
            client.append(HeaderName::from_static(name), HeaderValue::from_static(value));
        }
        let endpoint = live_endpoint(Format::Anthropic, &[("x-team", "endpoint-team"), ("accept-encoding", "br")]);
        let out = request_headers(&client, &endpoint, &hop, false);
        let mut names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "accept-encoding",
                "anthropic-beta",
                "anthropic-version",
                "api-key",
                "content-type",
                "host",
                "x-api-key",
                "x-ccmesh-hop",
                "x-team",
            ]
        );
        assert_eq!(values(&out, "anthropic-beta"), ["a", "b"], "a repeated header keeps every value");
        assert_eq!(values(&out, "x-team"), ["endpoint-team"], "the endpoint's extra header replaces the client's");
        assert_eq!(values(&out, "accept-encoding"), ["br"], "an extra header replaces even the gateway's default");
        assert_eq!(values(&out, "x-api-key"), ["sk-endpoint-key-0000"]);
        assert!(out.get("x-api-key").unwrap().is_sensitive());
        assert_eq!(values(&out, "host"), ["127.0.0.1:9"]);
        assert_eq!(values(&out, "x-ccmesh-hop"), ["gw-1"]);
        assert_eq!(values(&out, "anthropic-version"), ["2023-06-01"], "the default when no one set one");
        assert_eq!(values(&out, "api-key"), ["client-azure-key"]);

        // The client's anthropic-version is kept; an endpoint's extra one replaces it.
        client.insert("anthropic-version", HeaderValue::from_static("2026-10-21"));
        assert_eq!(values(&request_headers(&client, &endpoint, &hop, false), "anthropic-version"), ["2026-10-21"]);
        let pinned = live_endpoint(Format::Anthropic, &[("anthropic-version", "2024-01-01")]);
        assert_eq!(values(&request_headers(&client, &pinned, &hop, false), "anthropic-version"), ["2024-01-01"]);

        // Another format: its own credential, no anthropic-version added, the client's kept.
        let chat = live_endpoint(Format::Openai, &[]);
        client.remove("anthropic-version");
        let out = request_headers(&client, &chat, &hop, false);
        assert_eq!(values(&out, "authorization"), ["Bearer sk-endpoint-key-0000"]);
        assert_eq!(values(&out, "x-api-key"), Vec::<&str>::new());
        assert_eq!(values(&out, "anthropic-version"), Vec::<&str>::new());
        assert_eq!(values(&out, "accept-encoding"), ["identity"]);
        assert_eq!(values(&out, "x-team"), ["client-team"]);

        // Converting: the client's headers for its own format's upstreams stay behind, the
        // endpoint's configured ones go, whatever they are called.
        client.append(HeaderName::from_static("x-goog-api-client"), HeaderValue::from_static("genai-js"));
        client.append(HeaderName::from_static("openai-organization"), HeaderValue::from_static("org-1"));
        let chat_beta = live_endpoint(Format::Openai, &[("anthropic-beta", "endpoint-beta")]);
        let out = request_headers(&client, &chat_beta, &hop, true);
        assert_eq!(values(&out, "anthropic-beta"), ["endpoint-beta"]);
        assert_eq!(values(&out, "x-goog-api-client"), Vec::<&str>::new());
        assert_eq!(values(&out, "openai-organization"), ["org-1"]);
        assert_eq!(values(&out, "x-team"), ["client-team"]);
        let out = request_headers(&client, &chat, &hop, false);
        assert_eq!(values(&out, "anthropic-beta"), ["a", "b"], "passed through, nothing is foreign");
        assert_eq!(values(&out, "x-goog-api-client"), ["genai-js"]);
        let out = request_headers(&client, &endpoint, &hop, true);
        assert_eq!(values(&out, "openai-organization"), Vec::<&str>::new());
        assert_eq!(values(&out, "anthropic-beta"), ["a", "b"]);
        assert_eq!(values(&out, "anthropic-version"), ["2023-06-01"]);
    }

    #[test]
    fn every_header_the_connection_header_names_stays_behind_however_many_it_names() {
        let hop = HeaderValue::from_static("gw-1");
        let mut client = HeaderMap::new();
        for (name, value) in [("x-one", "1"), ("x-two", "2"), ("x-two", "2b"), ("x-kept", "k"), ("anthropic-beta", "b")]
        {
            client.append(HeaderName::from_static(name), HeaderValue::from_static(value));
        }
        // Thousands of names, in any case, spaced or not, some not header names at all, over two
        // Connection headers: each named header goes with all its values, the rest stay.
        let junk: Vec<String> = (0..5000).map(|i| format!("x-absent-{i}")).collect();
        let first = format!("keep-alive, {} ,X-One,, not a name", junk.join(","));
        client.append(header::CONNECTION, HeaderValue::from_str(&first).unwrap());
        client.append(header::CONNECTION, HeaderValue::from_static("x-TWO"));
        let endpoint = live_endpoint(Format::Anthropic, &[]);
        let out = request_headers(&client, &endpoint, &hop, false);
        assert_eq!(values(&out, "x-one"), Vec::<&str>::new());
        assert_eq!(values(&out, "x-two"), Vec::<&str>::new(), "every value of a named header");
        assert_eq!(values(&out, "x-kept"), ["k"]);
        assert_eq!(values(&out, "anthropic-beta"), ["b"]);
        assert_eq!(values(&out, "connection"), Vec::<&str>::new());
        // What the gateway sets is set after: a client cannot name it away.
        let named = HeaderValue::from_static("x-api-key, anthropic-version, accept-encoding, host, x-ccmesh-hop");
        client.insert(header::CONNECTION, named);
        let out = request_headers(&client, &endpoint, &hop, false);
        assert_eq!(values(&out, "x-api-key"), ["sk-endpoint-key-0000"]);
        assert_eq!(values(&out, "anthropic-version"), ["2023-06-01"]);
        assert_eq!(values(&out, "accept-encoding"), ["identity"]);
        assert_eq!(values(&out, "x-ccmesh-hop"), ["gw-1"]);
        assert_eq!(values(&out, "host"), ["127.0.0.1:9"]);
    }

    #[test]
    fn response_headers_drop_framing_hop_by_hop_and_cookies_and_keep_the_rest() {
        let mut upstream = HeaderMap::new();
        for (name, value) in [
            ("content-type", "application/json"),
            ("connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "close"),
            ("te", "trailers"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("content-length", "42"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("x-request-id", "abc"),
            ("anthropic-ratelimit-requests-remaining", "99"),
            ("vary", "origin"),
            ("vary", "accept-encoding"),
        ] {
            upstream.append(HeaderName::from_static(name), HeaderValue::from_static(value));
        }
        let out = response_headers(upstream);
        let kept: Vec<(String, String)> =
            out.iter().map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string())).collect();
        let expected = [
            ("content-type", "application/json"),
            ("x-request-id", "abc"),
            ("anthropic-ratelimit-requests-remaining", "99"),
            ("vary", "origin"),
            ("vary", "accept-encoding"),
        ];
        let mut expected: Vec<(String, String)> =
            expected.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        let mut sorted = kept.clone();
        sorted.sort();
        expected.sort();
        assert_eq!(sorted, expected);
        let vary: Vec<_> = out.get_all("vary").iter().collect();
        assert_eq!(vary, ["origin", "accept-encoding"], "a header's values keep their order");
        assert!(out.capacity() >= out.len() + ADDED_RESPONSE_HEADERS);
    }
}
