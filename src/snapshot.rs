//! The configuration snapshot the request path reads: endpoints with everything a request needs
//! prebuilt (auth header, extra headers, `Host`), the settings, the price table and the client
//! keys (so a request finds its key in memory, never in the database). Immutable;
//! the gateway swaps in a new one on every change, so a request never reads the database.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::breaker::BreakerCell;
use crate::config::Settings;
use crate::endpoint::Endpoint;
use crate::observe::cost::PriceTable;
use crate::observe::kept_text::KeptTexts;
use crate::protocol::Format;
use crate::proxy::upstream::UpstreamOrigin;

/// An endpoint as the request path sees it: its configuration plus everything precomputed
/// so that a request does no parsing, formatting or lookups for it.
pub struct LiveEndpoint {
    pub config: Endpoint,
    pub breaker: Arc<BreakerCell>,
    /// `x-api-key` or `authorization: Bearer`, marked sensitive so it never prints.
    pub auth: (HeaderName, HeaderValue),
    /// The endpoint's extra headers, validated at write time.
    pub extra_headers: HeaderMap,
    /// The `Host` header its requests carry (host, and port unless the scheme's default), built
    /// once here rather than by the HTTP client from the URL on every request.
    pub host: Option<HeaderValue>,
    /// Its base URL's scheme and authority, parsed once for the URLs of all its requests.
    pub origin: Option<UpstreamOrigin>,
    /// Its name as a request's record holds it (`record_name`).
    pub record_name: Cow<'static, str>,
}

impl AsRef<Endpoint> for LiveEndpoint {
    fn as_ref(&self) -> &Endpoint {
        &self.config
    }
}

impl AsRef<Endpoint> for Arc<LiveEndpoint> {
    fn as_ref(&self) -> &Endpoint {
        &self.config
    }
}

/// Immutable configuration, replaced as a whole.
pub struct Snapshot {
    /// Ordered by `sort_order`, then name.
    pub endpoints: Vec<Arc<LiveEndpoint>>,
    pub settings: Arc<Settings>,
    /// Model prices (built-in table with the stored overrides).
    pub prices: Arc<PriceTable>,
    /// Client keys, and whether they are required.
    pub keys: Arc<crate::keys::KeySet>,
}

impl Snapshot {
    pub fn find(&self, name: &str) -> Option<&Arc<LiveEndpoint>> {
        self.endpoints.iter().find(|e| e.config.name == name)
    }

    /// Whether `model` has a price: in the table, or the `default_price` setting.
    pub fn priced(&self, model: &str) -> bool {
        self.settings.default_price.is_some() || self.prices.price(model).is_some()
    }
}

impl LiveEndpoint {
    /// The endpoint with its request headers prebuilt.
    pub fn new(config: Endpoint, breaker: Arc<BreakerCell>) -> LiveEndpoint {
        LiveEndpoint {
            auth: auth_header(&config),
            extra_headers: extra_headers(&config),
            host: host_header(&config.base_url),
            origin: UpstreamOrigin::of(&config.base_url),
            record_name: record_name(&config.name),
            breaker,
            config,
        }
    }
}

/// How many distinct endpoint names `record_name` keeps: names are at most 64 bytes
/// (`endpoint::valid_name`), so at most 256 KiB.
const MAX_RECORD_NAMES: usize = 4096;

/// An endpoint's name as request records hold it (`observe::kept_text`), kept when a snapshot
/// is built, so that no request looks it up.
pub fn record_name(name: &str) -> Cow<'static, str> {
    static NAMES: LazyLock<Mutex<KeptTexts>> = LazyLock::new(|| Mutex::new(KeptTexts::new(MAX_RECORD_NAMES)));
    NAMES.lock().unwrap_or_else(PoisonError::into_inner).keep(name)
}

/// The credential header an endpoint gets: `x-api-key` (Anthropic), `authorization: Bearer`
/// (OpenAI, Responses), `x-goog-api-key` (Gemini); marked sensitive.
pub fn auth_header(e: &Endpoint) -> (HeaderName, HeaderValue) {
    let (name, value) = match e.format {
        Format::Anthropic => (HeaderName::from_static("x-api-key"), HeaderValue::from_str(&e.api_key)),
        Format::Openai | Format::Responses => {
            (axum::http::header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {}", e.api_key)))
        }
        Format::Gemini => (HeaderName::from_static("x-goog-api-key"), HeaderValue::from_str(&e.api_key)),
    };
    // Keys are validated to hold no control characters; an unusable one sends no credential
    // rather than failing every request.
    let mut value = value.unwrap_or_else(|_| HeaderValue::from_static(""));
    value.set_sensitive(true);
    (name, value)
}

/// What hyper-util's client would put in `Host` for a request to `base_url`: the host, with the
/// port only when it is not the scheme's default. `None` when the URL has no host (the client
/// then reports the bad URL as before).
pub fn host_header(base_url: &str) -> Option<HeaderValue> {
    let uri: axum::http::Uri = base_url.parse().ok()?;
    let host = uri.host()?;
    let secure = matches!(uri.scheme_str(), Some("https" | "wss"));
    let value = match uri.port_u16() {
        Some(443) if secure => host.to_string(),
        Some(80) if !secure => host.to_string(),
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    HeaderValue::from_str(&value).ok()
}

fn extra_headers(e: &Endpoint) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in &e.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
            map.insert(name, value);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::{Cow, host_header, record_name};

    #[test]
    fn an_endpoint_name_is_kept_for_every_record() {
        let (a, again) = (record_name("anthropic-main"), record_name(&String::from("anthropic-main")));
        match (&a, &again) {
            (Cow::Borrowed(a), Cow::Borrowed(again)) => assert!(std::ptr::eq(*a, *again), "one copy"),
            other => panic!("not borrowed: {other:?}"),
        }
    }

    #[test]
    fn the_host_header_carries_the_port_only_when_it_is_not_the_schemes_default() {
        let host = |url: &str| host_header(url).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(host("http://127.0.0.1:8080").as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(host("https://api.anthropic.com").as_deref(), Some("api.anthropic.com"));
        assert_eq!(host("https://relay.example.com/api/v1").as_deref(), Some("relay.example.com"));
        assert_eq!(host("http://relay.example.com:80/x").as_deref(), Some("relay.example.com"));
        assert_eq!(host("https://relay.example.com:443").as_deref(), Some("relay.example.com"));
        assert_eq!(host("https://relay.example.com:8443").as_deref(), Some("relay.example.com:8443"));
        assert_eq!(host("http://relay.example.com:443").as_deref(), Some("relay.example.com:443"));
        assert_eq!(host("http://[::1]:9000").as_deref(), Some("[::1]:9000"));
        assert_eq!(host("not a url"), None);
    }
}
