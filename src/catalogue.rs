//! The upstreams' own model lists, for `GET /v1/models` (SPEC §8) and the connectivity test.
//!
//! An endpoint that lists concrete models says what it serves; one that lists only globs
//! (`claude-*`) or nothing at all does not, and `GET /v1/models` would otherwise answer an empty
//! list for the very configuration the README suggests. So the gateway asks such an endpoint's
//! upstream for its list (`GET {base}/v1/models` with the endpoint's key, as an SDK would) and
//! keeps the answer here.
//!
//! Never on the request path: a [`refresh_loop`] owned by the server (`server::background`,
//! stopped with it) fetches at start, soon after any endpoint change, and every
//! [`REFRESH_EVERY`]; the handler only reads what is cached. A list is tied to what it was
//! fetched with (base URL, format, key): changing any of them makes it stale at once, and a
//! failed refresh keeps the previous list of the same source (a flaky upstream does not empty
//! `/v1/models`). Background fetches record no request, take no breaker permit and move no
//! breaker: they are not traffic.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use bytes::Bytes;
use serde_json::Value;

use crate::endpoint::{Endpoint, EndpointId};
use crate::protocol::Format;
use crate::proxy::upstream::{join_url, read_body, request_headers};
use crate::snapshot::{LiveEndpoint, Snapshot};

/// How often a list is fetched again.
pub const REFRESH_EVERY: Duration = Duration::from_secs(5 * 60);
/// How soon a failed fetch is tried again.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(60);
/// One fetch (every page of it) may take this long.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(20);
/// A model list larger than this is refused (real ones are tens of kilobytes).
const MAX_LIST_BYTES: u64 = 4 * 1024 * 1024;
/// Anthropic's list is paginated (at most 1000 a page); more pages than this are not followed.
const MAX_PAGES: usize = 10;

/// What a list was fetched with. Any difference from the endpoint's configuration now makes it
/// stale.
#[derive(Clone, PartialEq, Eq)]
struct Source {
    base_url: String,
    format: Format,
    api_key: String,
}

impl Source {
    fn of(e: &Endpoint) -> Source {
        Source { base_url: e.base_url.clone(), format: e.format, api_key: e.api_key.clone() }
    }
}

struct Entry {
    source: Source,
    /// The last list fetched from `source` (kept through failed refreshes).
    models: Option<Arc<[String]>>,
    /// When the next fetch is due (tokio's clock).
    due: tokio::time::Instant,
    /// The last failure, said once in the logs until it changes.
    last_error: Option<String>,
}

/// The cache. Read by `GET /v1/models` (a short read lock, no I/O), written by the refresher.
pub struct Catalogue {
    entries: RwLock<HashMap<EndpointId, Entry>>,
    changed: tokio::sync::Notify,
    /// Fetch results stored so far (successes and failures), for whoever waits for a refresh.
    stored: tokio::sync::watch::Sender<u64>,
}

impl Default for Catalogue {
    fn default() -> Self {
        Catalogue {
            entries: RwLock::default(),
            changed: tokio::sync::Notify::new(),
            stored: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Catalogue {
    /// Counts every fetch result stored (tests wait on it instead of sleeping).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.stored.subscribe()
    }

    /// The upstream's list for this endpoint, if one was fetched from its current source.
    pub fn models_of(&self, e: &Endpoint) -> Option<Arc<[String]>> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.get(&e.id).filter(|entry| entry.source == Source::of(e)).and_then(|entry| entry.models.clone())
    }

    /// The configuration changed: the refresher looks at once for lists to fetch.
    pub fn endpoints_changed(&self) {
        self.changed.notify_one();
    }

    /// Endpoints whose list is missing, stale or due, at `now`; forgets endpoints that are gone
    /// or no longer need a list.
    fn due(&self, endpoints: &[Arc<LiveEndpoint>], now: tokio::time::Instant) -> Vec<Arc<LiveEndpoint>> {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        entries.retain(|id, _| endpoints.iter().any(|e| e.config.id == *id && needs_upstream_list(&e.config)));
        endpoints
            .iter()
            .filter(|e| needs_upstream_list(&e.config))
            .filter(|e| match entries.get(&e.config.id) {
                Some(entry) => entry.source != Source::of(&e.config) || entry.due <= now,
                None => true,
            })
            .cloned()
            .collect()
    }

    /// When the next fetch is due, if any list is kept.
    fn next_due(&self) -> Option<tokio::time::Instant> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.values().map(|e| e.due).min()
    }

    fn store(&self, e: &Endpoint, result: Result<Vec<String>, String>, now: tokio::time::Instant) {
        let source = Source::of(e);
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let previous = entries.remove(&e.id).filter(|old| old.source == source);
        let entry = match result {
            Ok(models) => {
                tracing::debug!(event = "model_list_refreshed", endpoint = %e.name, models = models.len(), "model list refreshed");
                Entry { source, models: Some(models.into()), due: now + REFRESH_EVERY, last_error: None }
            }
            Err(error) => {
                let models = previous.as_ref().and_then(|p| p.models.clone());
                let said = previous.as_ref().and_then(|p| p.last_error.as_deref()) == Some(error.as_str());
                if !said {
                    tracing::info!(
                        event = "model_list_failed",
                        endpoint = %e.name,
                        error = %error,
                        kept = models.as_ref().map_or(0, |m| m.len()),
                        "cannot read the endpoint's model list; GET /v1/models shows only the models it names"
                    );
                }
                Entry { source, models, due: now + RETRY_AFTER_FAILURE, last_error: Some(error) }
            }
        };
        entries.insert(e.id, entry);
        drop(entries);
        self.stored.send_modify(|n| *n += 1);
    }
}

/// Whether `/v1/models` needs the upstream's list to say what this endpoint serves: it lists
/// no model, or a glob.
pub fn needs_upstream_list(e: &Endpoint) -> bool {
    e.enabled && (e.models.is_empty() || e.models.iter().any(|m| m.is_glob()))
}

/// Fetch every due list of the endpoints `snapshot` gives, then sleep until the next is due or
/// the configuration changes. Runs until the server stops it (it is aborted between or during
/// fetches; both are safe).
pub async fn refresh_loop(catalogue: &Catalogue, up: Upstream<'_>, snapshot: impl Fn() -> Arc<Snapshot>) {
    loop {
        let endpoints = snapshot();
        let due = catalogue.due(&endpoints.endpoints, tokio::time::Instant::now());
        let fetches = due.iter().map(|e| async {
            let result = fetch_list(up, e).await;
            catalogue.store(&e.config, result, tokio::time::Instant::now());
        });
        futures_util::future::join_all(fetches).await;
        let next = catalogue.next_due().unwrap_or_else(|| tokio::time::Instant::now() + REFRESH_EVERY);
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = catalogue.changed.notified() => {}
        }
    }
}

/// The URL of an endpoint's model list: Anthropic `{base}/v1/models` (1000 a page, the API's
/// most), OpenAI-family `{base}/models` joined as SPEC §8 joins every path.
pub fn list_url(e: &Endpoint, after_id: Option<&str>) -> String {
    match e.format {
        Format::Anthropic => {
            let query = match after_id {
                Some(id) => format!(
                    "limit=1000&after_id={}",
                    url::form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
                ),
                None => "limit=1000".to_string(),
            };
            join_url(&e.base_url, e.format, "/models", Some(&query))
        }
        Format::Openai | Format::Responses => join_url(&e.base_url, e.format, "/models", None),
        // `{base}/v1beta/models?pageSize=1000`, the next page by `pageToken`.
        Format::Gemini => {
            let query = match after_id {
                Some(token) => format!(
                    "pageSize=1000&pageToken={}",
                    url::form_urlencoded::byte_serialize(token.as_bytes()).collect::<String>()
                ),
                None => "pageSize=1000".to_string(),
            };
            join_url(&e.base_url, e.format, "/models", Some(&query))
        }
    }
}

/// Why a model list could not be read.
#[derive(Debug)]
pub enum ListError {
    /// The upstream answered, with an error status (and the start of its body, keys masked).
    Status { status: StatusCode, body: String },
    /// No answer: the text says why (DNS, refused, timeout, …).
    Network(String),
    /// An answer that is not a model list.
    Malformed(String),
}

impl std::fmt::Display for ListError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListError::Status { status, body } if body.is_empty() => write!(f, "HTTP {}", status.as_u16()),
            ListError::Status { status, body } => write!(f, "HTTP {}: {body}", status.as_u16()),
            ListError::Network(why) => f.write_str(why),
            ListError::Malformed(why) => write!(f, "the model list is not readable ({why})"),
        }
    }
}

/// What reading a model list needs of the gateway: its upstream client and its hop header.
#[derive(Clone, Copy)]
pub struct Upstream<'a> {
    pub client: &'a crate::proxy::upstream::UpstreamClient,
    pub hop: &'a HeaderValue,
}

/// One `GET` of a model list page with the endpoint's credentials: the status and body.
pub async fn get_page(up: Upstream<'_>, e: &LiveEndpoint, url: &str) -> Result<(StatusCode, Bytes), ListError> {
    let mut headers = request_headers(&HeaderMap::new(), e, up.hop, false);
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    let answer = up
        .client
        .send(Method::GET, url.to_string(), e.origin.as_ref(), headers, Bytes::new())
        .await
        .map_err(|err| ListError::Network(network_text(&err, url)))?;
    let status = answer.status();
    let body = read_body(answer.into_body(), MAX_LIST_BYTES).await.map_err(|err| match err {
        crate::proxy::upstream::UpstreamBodyError::TooLarge { limit } => {
            ListError::Malformed(format!("larger than {limit} bytes"))
        }
        crate::proxy::upstream::UpstreamBodyError::Network(err) => ListError::Network(network_text(&err, url)),
    })?;
    Ok((status, body))
}

/// A network failure in words: "could not resolve host …" for DNS, else the kind's description.
pub fn network_text(err: &(dyn std::error::Error + 'static), url: &str) -> String {
    if crate::proxy::dns::is_dns_failure(err) {
        return crate::proxy::dns::could_not_resolve(url);
    }
    crate::proxy::outcome::classify_network_error(err).describe().to_string()
}

/// An error body cut to what a log line or a test result can hold, keys masked first.
pub fn snippet(e: &Endpoint, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    crate::redact::current().scrub(&text, Some(&e.api_key)).chars().take(300).collect()
}

/// Every page of the endpoint's model list, as ids.
async fn fetch_list(up: Upstream<'_>, e: &LiveEndpoint) -> Result<Vec<String>, String> {
    let fetch = async {
        let mut ids: Vec<String> = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let url = list_url(&e.config, after.as_deref());
            let (status, body) = get_page(up, e, &url).await?;
            if !status.is_success() {
                return Err(ListError::Status { status, body: snippet(&e.config, &body) });
            }
            let page = parse_page(&body).map_err(ListError::Malformed)?;
            ids.extend(page.ids);
            match page.next_after {
                Some(last) if matches!(e.config.format, Format::Anthropic | Format::Gemini) => after = Some(last),
                _ => break,
            }
        }
        Ok(ids)
    };
    match tokio::time::timeout(FETCH_TIMEOUT, fetch).await {
        Ok(result) => result.map_err(|err| err.to_string()),
        Err(_) => Err(format!("no complete answer within {} s", FETCH_TIMEOUT.as_secs())),
    }
}

/// One page of a model list.
#[derive(Debug, PartialEq)]
pub struct Page {
    pub ids: Vec<String>,
    /// Anthropic: `has_more` with `last_id`, the cursor of the next page.
    pub next_after: Option<String>,
}

/// OpenAI (`{"object": "list", "data": [{"id"}]}`) and Anthropic (`{"data": [{"id"}],
/// "has_more", "last_id"}`) lists share `data[].id`; Gemini's is `{"models": [{"name":
/// "models/ID"}], "nextPageToken"}`.
pub fn parse_page(body: &[u8]) -> Result<Page, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    if let Some(models) = v.get("models").and_then(Value::as_array) {
        let mut ids: Vec<String> = Vec::with_capacity(models.len());
        for item in models {
            let name = item.get("name").and_then(Value::as_str).map(str::trim).unwrap_or_default();
            let id = name.strip_prefix("models/").unwrap_or(name);
            if !id.is_empty() && !ids.iter().any(|seen| seen == id) {
                ids.push(id.to_string());
            }
        }
        let next_after = v.get("nextPageToken").and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_string);
        return Ok(Page { ids, next_after });
    }
    let data = v.get("data").and_then(Value::as_array).ok_or("no \"data\" array")?;
    let mut ids = Vec::with_capacity(data.len());
    for item in data {
        if let Some(id) = item.get("id").and_then(Value::as_str).map(str::trim).filter(|id| !id.is_empty())
            && !ids.iter().any(|seen: &String| seen == id)
        {
            ids.push(id.to_string());
        }
    }
    let next_after = match (v.get("has_more").and_then(Value::as_bool), v.get("last_id").and_then(Value::as_str)) {
        (Some(true), Some(last)) if !ids.is_empty() => Some(last.to_string()),
        _ => None,
    };
    Ok(Page { ids, next_after })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::{ModelPattern, TestResult};
    use std::collections::BTreeMap;

    fn endpoint(format: Format, base: &str, models: &[&str]) -> Endpoint {
        Endpoint {
            id: EndpointId(1),
            name: "e".into(),
            base_url: base.into(),
            api_key: "sk-test-key-0000".into(),
            format,
            models: models.iter().map(|m| ModelPattern::new(*m)).collect(),
            model_map: Vec::new(),
            enabled: true,
            fast: false,
            fast_sort_order: 0,
            sort_order: 0,
            headers: BTreeMap::new(),
            test_model: None,
            test: TestResult::default(),
            price_multiplier: 1.0,
        }
    }

    #[test]
    fn list_urls_follow_the_path_joining_of_each_format() {
        let cases = [
            (Format::Anthropic, "https://api.anthropic.com", "https://api.anthropic.com/v1/models?limit=1000"),
            (
                Format::Anthropic,
                "https://open.bigmodel.cn/api/anthropic",
                "https://open.bigmodel.cn/api/anthropic/v1/models?limit=1000",
            ),
            (Format::Openai, "https://api.openai.com", "https://api.openai.com/v1/models"),
            (Format::Openai, "https://api.deepseek.com/v1", "https://api.deepseek.com/v1/models"),
            (Format::Responses, "https://open.bigmodel.cn/api/paas/v4", "https://open.bigmodel.cn/api/paas/v4/models"),
        ];
        for (format, base, want) in cases {
            assert_eq!(list_url(&endpoint(format, base, &[]), None), want, "{format} {base}");
        }
        assert_eq!(
            list_url(&endpoint(Format::Anthropic, "https://api.anthropic.com", &[]), Some("claude x")),
            "https://api.anthropic.com/v1/models?limit=1000&after_id=claude+x"
        );
    }

    #[test]
    fn gemini_pages_parse_and_continue_by_token() {
        let page = parse_page(
            br#"{"models":[{"name":"models/gemini-2.5-flash"},{"name":"models/gemini-2.5-pro"},{"name":""}],"nextPageToken":"abc"}"#,
        )
        .unwrap();
        assert_eq!(
            page,
            Page { ids: vec!["gemini-2.5-flash".into(), "gemini-2.5-pro".into()], next_after: Some("abc".into()) }
        );
        assert_eq!(parse_page(br#"{"models":[]}"#).unwrap().next_after, None);
        let e = endpoint(Format::Gemini, "https://generativelanguage.googleapis.com", &[]);
        assert_eq!(list_url(&e, None), "https://generativelanguage.googleapis.com/v1beta/models?pageSize=1000");
        assert_eq!(
            list_url(&e, Some("t/1")),
            "https://generativelanguage.googleapis.com/v1beta/models?pageSize=1000&pageToken=t%2F1"
        );
    }

    #[test]
    fn pages_of_either_shape_parse() {
        let openai =
            br#"{"object":"list","data":[{"id":"gpt-4o","object":"model"},{"id":"o3"},{"id":"gpt-4o"},{"x":1}]}"#;
        assert_eq!(parse_page(openai).unwrap(), Page { ids: vec!["gpt-4o".into(), "o3".into()], next_after: None });
        let anthropic = br#"{"data":[{"type":"model","id":"claude-sonnet-4-5"}],"has_more":true,"first_id":"claude-sonnet-4-5","last_id":"claude-sonnet-4-5"}"#;
        assert_eq!(parse_page(anthropic).unwrap().next_after.as_deref(), Some("claude-sonnet-4-5"));
        assert!(parse_page(b"<html>").unwrap_err().starts_with("not JSON"));
        assert_eq!(parse_page(br#"{"items":[]}"#).unwrap_err(), "no \"data\" array");
    }

    #[test]
    fn only_endpoints_without_a_concrete_list_need_the_upstreams() {
        assert!(needs_upstream_list(&endpoint(Format::Anthropic, "http://x", &[])));
        assert!(needs_upstream_list(&endpoint(Format::Anthropic, "http://x", &["claude-*"])));
        assert!(needs_upstream_list(&endpoint(Format::Anthropic, "http://x", &["glm-4.6", "glm-*"])));
        assert!(!needs_upstream_list(&endpoint(Format::Anthropic, "http://x", &["glm-4.6", "glm-4.5"])));
        let mut off = endpoint(Format::Anthropic, "http://x", &[]);
        off.enabled = false;
        assert!(!needs_upstream_list(&off));
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_belongs_to_its_source_and_survives_failures() {
        let cat = Catalogue::default();
        let mut e = endpoint(Format::Openai, "http://one", &[]);
        let now = tokio::time::Instant::now();
        cat.store(&e, Ok(vec!["a".into()]), now);
        assert_eq!(cat.models_of(&e).as_deref(), Some(&["a".to_string()][..]));
        // A failed refresh of the same source keeps the list, and retries sooner.
        cat.store(&e, Err("HTTP 500".into()), now);
        assert_eq!(cat.models_of(&e).as_deref(), Some(&["a".to_string()][..]));
        assert_eq!(cat.next_due(), Some(now + RETRY_AFTER_FAILURE));
        // A new key or URL: the old list no longer speaks for the endpoint.
        e.api_key = "sk-other-key-1111".into();
        assert_eq!(cat.models_of(&e), None);
        cat.store(&e, Err("HTTP 401".into()), now);
        assert_eq!(cat.models_of(&e), None, "a failure does not resurrect another source's list");
    }
}
