//! The floor of this HTTP stack: the smallest reverse proxy that can be written with the same
//! crates as ccmesh (hyper server, reqwest or hyper-util's client, tokio), and nothing else — no
//! routing, no breaker, no records, no JSON. `bench/run` measures it next to ccmesh so the
//! gateway's own cost can be told apart from what the stack costs on this machine.
//!
//! ```text
//! cargo run --release --example bare_proxy -- --listen 127.0.0.1:9200 --upstream http://127.0.0.1:9100 [--client hyper|reqwest]
//! ```
// A benchmark tool: it reports on stdout and fails loudly on bad arguments.
#![allow(clippy::print_stdout, clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::net::SocketAddr;

use bytes::Bytes;
use clap::Parser;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

#[derive(Parser, Debug, Clone)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:9200")]
    listen: SocketAddr,
    /// Base URL of the upstream, e.g. http://127.0.0.1:9100
    #[arg(long)]
    upstream: String,
    /// hyper (hyper-util's pooled client) or reqwest.
    #[arg(long, default_value = "reqwest")]
    client: String,
    /// One current-thread runtime per thread, each accepting on its own SO_REUSEPORT listener
    /// (0 = one multi-threaded runtime).
    #[arg(long, default_value_t = 0)]
    per_thread: usize,
    /// Keep idle upstream connections without limit, as hyper-util does by default, instead of
    /// ccmesh's pool policy (at most `MAX_IDLE_PER_HOST` per host, closed after
    /// `POOL_IDLE_TIMEOUT`). With the default, the floor pays what ccmesh pays to reconnect after a
    /// burst larger than the pool.
    #[arg(long)]
    unbounded_pool: bool,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = http_body_util::combinators::BoxBody<Bytes, BoxError>;

fn boxed(e: impl std::error::Error + Send + Sync + 'static) -> BoxError {
    Box::new(e)
}

fn main() {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    if args.per_thread == 0 {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        runtime.block_on(serve(args));
        return;
    }
    for _ in 0..args.per_thread {
        let args = args.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(serve(args));
        });
    }
    // The serving threads never return; the process ends on SIGTERM or Ctrl-C with a normal exit,
    // so that a build instrumented for profile-guided optimisation (`bench/pgo`) writes its profile.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    });
    std::process::exit(0);
}

fn bind(addr: SocketAddr, reuse_port: bool) -> TcpListener {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.set_reuseport(reuse_port).unwrap();
    socket.bind(addr).unwrap();
    socket.listen(1024).unwrap()
}

async fn serve(args: Args) {
    let listener = bind(args.listen, args.per_thread > 0);
    println!("bare_proxy listening on {}", listener.local_addr().unwrap());
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let mut builder = Client::builder(TokioExecutor::new());
    if !args.unbounded_pool {
        builder
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .pool_idle_timeout(ccmesh::proxy::upstream::POOL_IDLE_TIMEOUT)
            .pool_max_idle_per_host(ccmesh::proxy::upstream::MAX_IDLE_PER_HOST);
    }
    let hyper_client: Client<HttpConnector, Full<Bytes>> = builder.build(connector);
    let reqwest_client = reqwest::Client::builder().tcp_nodelay(true).no_proxy().build().unwrap();
    let use_hyper = args.client == "hyper";
    let upstream: &'static str = Box::leak(args.upstream.into_boxed_str());
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        stream.set_nodelay(true).unwrap();
        let hyper_client = hyper_client.clone();
        let reqwest_client = reqwest_client.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                handle(req, hyper_client.clone(), reqwest_client.clone(), upstream, use_hyper)
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn handle(
    req: Request<Incoming>,
    hyper_client: Client<HttpConnector, Full<Bytes>>,
    reqwest_client: reqwest::Client,
    upstream: &'static str,
    use_hyper: bool,
) -> Result<Response<Body>, BoxError> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(boxed)?.to_bytes();
    let uri = format!("{upstream}{}", parts.uri.path());
    if use_hyper {
        let mut forward = Request::builder().method(parts.method).uri(uri);
        for (name, value) in &parts.headers {
            if name != hyper::header::HOST {
                forward = forward.header(name, value);
            }
        }
        let answer = hyper_client.request(forward.body(Full::new(body))?).await.map_err(boxed)?;
        return Ok(answer.map(|b| BodyExt::boxed(b.map_err(boxed))));
    }
    let mut headers = parts.headers;
    headers.remove(hyper::header::HOST);
    let answer = reqwest_client.post(uri).headers(headers).body(body).send().await.map_err(boxed)?;
    let mut out = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        out = out.header(name, value);
    }
    let frames = answer.bytes_stream().map(|chunk| chunk.map(hyper::body::Frame::data).map_err(boxed));
    Ok(out.body(BodyExt::boxed(http_body_util::StreamBody::new(frames)))?)
}
