//! A real gateway on 127.0.0.1:0 with a real SQLite file in a temp dir, driven over HTTP.

use std::sync::Arc;
use std::time::Duration;

use ccmesh::clock::{Clock, ManualClock, SystemClock};
use ccmesh::gateway::Gateway;
use ccmesh::store::Store;
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub struct TestGateway {
    pub url: String,
    pub gw: Arc<Gateway>,
    pub clock: Option<Arc<ManualClock>>,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The request-record writer; shut down (queued records written) when the gateway drops.
    pub writer: Option<ccmesh::observe::writer::WriterHandle>,
    /// The authoritative config file, when started with one.
    pub config_path: Option<std::path::PathBuf>,
    pub _dir: tempfile::TempDir,
}

#[derive(Default)]
pub struct Options {
    pub manual_clock: bool,
    pub admin_token: Option<String>,
    /// An authoritative config file's text (`config::authoritative`), written to the data dir
    /// and applied before the gateway starts, watched every 50 ms.
    pub authoritative_config: Option<String>,
}

impl TestGateway {
    /// A gateway with the real clock and, for speed, no pause before same-endpoint retries.
    pub async fn start() -> TestGateway {
        let g = Self::start_with(Options::default()).await;
        g.settings(json!({"transient_retry_delay_ms": 0})).await;
        g
    }

    /// A gateway whose time moves only when the test says so.
    pub async fn start_manual() -> TestGateway {
        Self::start_with(Options { manual_clock: true, ..Options::default() }).await
    }

    pub async fn start_with(options: Options) -> TestGateway {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("ccmesh.db")).unwrap();
        let manual = options.manual_clock.then(|| Arc::new(ManualClock::new()));
        let clock: Arc<dyn Clock> = match &manual {
            Some(m) => Arc::new(m.clone()),
            None => Arc::new(SystemClock),
        };
        let client = ccmesh::proxy::upstream::UpstreamClient::new().unwrap();
        let writer_config = ccmesh::observe::writer::WriterConfig::new(clock.clone());
        let (records, writer) = ccmesh::observe::writer::start(&dir.path().join("ccmesh.db"), writer_config).unwrap();
        let mut source = None;
        let config_path = options.authoritative_config.as_ref().map(|text| {
            let path = dir.path().join("ccmesh.toml");
            std::fs::write(&path, text).unwrap();
            let env = |name: &str| std::env::var(name).ok();
            let poll = Duration::from_millis(50);
            let (_, loaded) = ccmesh::config::authoritative::load_and_apply(&path, &store, &env, poll, false).unwrap();
            source = Some(Arc::new(loaded));
            path
        });
        let gw = Gateway::new(store, clock, client, options.admin_token.clone(), records).unwrap();
        if let Some(source) = source {
            let _ = gw.config_source.set(source);
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(ccmesh_serve(listener, gw.clone(), stopped));
        let mut default_headers = reqwest::header::HeaderMap::new();
        if let Some(t) = &options.admin_token {
            default_headers.insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        let http = reqwest::Client::builder().no_proxy().default_headers(default_headers).build().unwrap();
        TestGateway {
            url,
            gw,
            clock: manual,
            http,
            stop: Some(stop),
            task: Some(task),
            writer: Some(writer),
            config_path,
            _dir: dir,
        }
    }

    /// Wait until the model-list refresher has stored `n` fetch results in all (successes and
    /// failures), counted since the gateway started.
    pub async fn model_lists_stored(&self, n: u64) {
        let mut rx = self.gw.catalogue.subscribe();
        let done = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|stored| *stored >= n)).await.is_ok();
        assert!(done, "the model-list refresher stored {} results, not {n}", *rx.borrow());
    }

    /// Replace the authoritative config file (atomically, as editors do) and wait until the
    /// watcher has read it — applied, or refused as invalid.
    pub async fn rewrite_config(&self, text: &str) {
        let path = self.config_path.as_ref().expect("started with an authoritative config");
        let source = self.gw.config_source.get().unwrap();
        let mut reloads = source.subscribe_reloads();
        let before = *reloads.borrow_and_update();
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
        let done = tokio::time::timeout(Duration::from_secs(10), reloads.wait_for(|n| *n > before)).await.is_ok();
        assert!(done, "the config watcher did not read the new file");
    }

    pub fn clock(&self) -> &Arc<ManualClock> {
        self.clock.as_ref().expect("started with start_manual()")
    }

    /// Add an endpoint through the admin API; `extra` overrides the defaults.
    pub async fn add(&self, name: &str, format: &str, base_url: &str, extra: Value) -> Value {
        let mut body = json!({"name": name, "format": format, "base_url": base_url, "api_key": format!("sk-{name}-secret-key-0000")});
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            body[k] = v;
        }
        let r = self.http.post(format!("{}/api/endpoints", self.url)).json(&body).send().await.unwrap();
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        assert_eq!(status, 201, "adding {name}: {v}");
        v
    }

    pub async fn settings(&self, patch: Value) -> Value {
        let r = self.http.patch(format!("{}/api/settings", self.url)).json(&patch).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }

    pub async fn health(&self, name: &str) -> Value {
        let v: Value = self.http.get(format!("{}/api/health", self.url)).send().await.unwrap().json().await.unwrap();
        v.as_array().unwrap().iter().find(|h| h["name"] == name).cloned().unwrap_or(Value::Null)
    }

    pub async fn api(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Wait until every record of the answers read so far is stored. The flush blocks, so it
    /// runs off this runtime's thread: the hand-over of an answer's record is a task on it.
    pub async fn flush_records(&self) {
        let sink = self.gw.events.records().clone();
        let flushed = tokio::task::spawn_blocking(move || sink.flush(Duration::from_secs(10))).await.unwrap();
        assert!(flushed, "the record writer did not flush");
    }

    /// The record `id`, once queryable. The proxy submits a record when the response ends, which
    /// may be just after the client has read it, so: flush the writer, look, repeat (bounded).
    pub async fn record(&self, id: &str) -> Value {
        const DEADLINE: Duration = Duration::from_secs(20);
        let start = std::time::Instant::now();
        loop {
            let sink = self.gw.events.records().clone();
            let flushed = tokio::task::spawn_blocking(move || sink.flush(DEADLINE)).await.unwrap();
            assert!(flushed, "the record writer did not flush");
            let (status, v) = self.api(reqwest::Method::GET, &format!("/api/requests/{id}"), None).await;
            if status == 200 {
                return v;
            }
            assert!(start.elapsed() < DEADLINE, "no record {id}: {v}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// POST a JSON body to a proxy path.
    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http.post(format!("{}{path}", self.url)).json(body).send().await.unwrap()
    }

    pub async fn post_with(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut req = self.http.post(format!("{}{path}", self.url)).json(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }
}

async fn ccmesh_serve(listener: tokio::net::TcpListener, gw: Arc<Gateway>, stopped: oneshot::Receiver<()>) {
    let shutdown = async move {
        let _ = stopped.await;
    };
    let _ = ccmesh::server::serve(listener, gw, shutdown, Duration::from_secs(5)).await;
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Some(writer) = self.writer.take() {
            writer.shutdown();
        }
    }
}

/// Minimal request bodies per protocol.
pub fn claude_body(model: &str, stream: bool) -> Value {
    json!({"model": model, "max_tokens": 64, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

pub fn chat_body(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

pub fn responses_body(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "input": "hi"})
}

/// A plain HTTP client for tests that run no in-process gateway (installs the TLS provider the
/// `rustls-no-provider` build needs before any client is built).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}
