//! The inbound `gemini` protocol (SPEC §11): what a Gemini client's path says. The model and the
//! method are in the path, not the body — `/v1beta/models/{model}:generateContent`,
//! `:streamGenerateContent` (`?alt=sse`, or the JSON-array stream without it), `:countTokens`,
//! the same under `/v1/` — so routing, `model_map` and `@NAME/model` read the path, and a
//! Gemini endpoint reached without conversion gets the path rewritten rather than the body.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::http::{HeaderMap, Method};
use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::time::{Instant, Sleep};

use crate::convert::gemini::{self, Method as GeminiMethod};
use crate::protocol::finder::finder;
use crate::protocol::{Protocol, Route};

/// Google's API-key header (the Gemini SDKs and CLI send it).
pub(crate) const X_GOOG_API_KEY: axum::http::HeaderName = axum::http::HeaderName::from_static("x-goog-api-key");

/// A Gemini client's call, read from its path and query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeminiCall {
    /// The model as the client named it, percent-decoded (`gemini-2.5-flash`, `@NAME/model`,
    /// `tunedModels/x`); without the `models/` of the resource name.
    pub model: String,
    pub method: GeminiMethod,
    /// `?alt=sse`: the stream as SSE (what the Gemini CLI and the SDKs ask for); without it
    /// `streamGenerateContent` answers one JSON array, written as the chunks come.
    pub sse: bool,
}

impl GeminiCall {
    pub fn stream(&self) -> bool {
        self.method == GeminiMethod::Stream
    }

    /// A stream the client wants as the JSON array.
    pub fn json_array(&self) -> bool {
        self.stream() && !self.sse
    }

    /// The path after the version for a Gemini endpoint asked for `model` (mapped, `@NAME/`
    /// removed) with the client's own method; the query is the client's (`alt=sse` included).
    pub fn path_for(&self, model: &str) -> String {
        let mut path = gemini::model_resource(model);
        path.push(':');
        path.push_str(self.method.name());
        path
    }
}

/// `/v1beta/…` or `/v1/…`: the path after the version, when it is one of the Gemini API's.
fn after_version(path: &str) -> Option<&str> {
    path.strip_prefix("/v1beta/").or_else(|| path.strip_prefix("/v1/"))
}

/// The model resource of a path after the version: `models/{id}` gives the id, `tunedModels/{id}`
/// the whole name (a Gemini endpoint takes it as it is); percent-decoded, so `@NAME%2Fmodel` is
/// `@NAME/model`.
fn model_of(resource: &str) -> Option<String> {
    let model = if let Some(id) = resource.strip_prefix("models/") {
        percent_encoding::percent_decode_str(id).decode_utf8_lossy().into_owned()
    } else if resource.starts_with("tunedModels/") {
        percent_encoding::percent_decode_str(resource).decode_utf8_lossy().into_owned()
    } else {
        return None;
    };
    (!model.trim().is_empty()).then_some(model)
}

/// `POST {version}/models/{model}:{method}`: the Gemini call it is, if any. The method follows
/// the last `:` (model ids such as `qwen3:8b` have their own).
pub fn parse_call(method: &Method, path: &str, query: Option<&str>) -> Option<GeminiCall> {
    if method != Method::POST {
        return None;
    }
    let (resource, name) = after_version(path)?.rsplit_once(':')?;
    let method = GeminiMethod::parse(name)?;
    let model = model_of(resource)?;
    let sse = query.is_some_and(|q| url::form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "alt" && v == "sse"));
    Some(GeminiCall { model, method, sse })
}

/// The route of a Gemini call.
pub fn route(call: &GeminiCall) -> Route {
    match call.method {
        GeminiMethod::CountTokens => Route::CountTokens(Protocol::Gemini),
        GeminiMethod::Generate | GeminiMethod::Stream => Route::Protocol(Protocol::Gemini),
    }
}

/// `GET {version}/models/{model}`: the model a client asks about (`models.get`), decoded.
pub fn model_get(method: &Method, path: &str) -> Option<String> {
    if method != Method::GET {
        return None;
    }
    let resource = after_version(path)?;
    if resource.contains(':') {
        return None;
    }
    model_of(resource.trim_end_matches('/'))
}

/// SPEC §8, §11: the client presented a Google credential (`x-goog-api-key`, `?key=`), so
/// `/v1/models…` is answered in Gemini's shape.
pub fn is_gemini_client(headers: &HeaderMap, query: Option<&str>) -> bool {
    headers.contains_key(X_GOOG_API_KEY)
        || query.is_some_and(|q| url::form_urlencoded::parse(q.as_bytes()).any(|(k, _)| k == "key"))
}

/// The path after the version to forward to a Gemini endpoint without conversion: the client's
/// own bytes unless the model changed (a `model_map` entry, an `@NAME/` prefix removed).
pub fn native_rest<'a>(call: &GeminiCall, rest: &'a str, model: &str, target: &str, prefixed: bool) -> Cow<'a, str> {
    if target == model && !prefixed { Cow::Borrowed(rest) } else { Cow::Owned(call.path_for(target)) }
}

/// The query for a Gemini endpoint reached without conversion: the client's (already without
/// `key=` and `endpoint=`), plus `alt=sse` for a JSON-array stream — the gateway reads streams
/// as SSE and frames the chunks as the array itself.
pub fn native_query<'a>(call: &GeminiCall, query: Option<&'a str>) -> Option<Cow<'a, str>> {
    if !call.json_array() {
        return query.map(Cow::Borrowed);
    }
    Some(match query.filter(|q| !q.is_empty()) {
        // An `alt` of another value (`alt=json`) would be the upstream's choice of framing.
        Some(q) => {
            let kept: Vec<&str> = q.split('&').filter(|p| p.split('=').next() != Some("alt")).collect();
            let mut out = String::from("alt=sse");
            for p in kept.into_iter().filter(|p| !p.is_empty()) {
                out.push('&');
                out.push_str(p);
            }
            Cow::Owned(out)
        }
        None => Cow::Borrowed("alt=sse"),
    })
}

/// How long a bare error line waits after the data before it, so that it reaches the client in
/// a read of its own.
pub const ERROR_PAUSE: Duration = Duration::from_millis(200);

/// Where a bare `{"error": …}` line starts in a stream chunk: at its start or after a newline
/// (inside a `data:` line the same bytes are an SSE event, not the bare form).
fn bare_error_at(chunk: &[u8]) -> Option<usize> {
    // Searched in every chunk of every Gemini stream to a Gemini client: with SIMD, not byte by
    // byte (a visible share of a Gemini stream's cost per event, BENCHMARKS.md).
    finder!(b"{\"error\"").find_iter(chunk).find(|&at| at == 0 || chunk.get(at - 1) == Some(&b'\n'))
}

/// A Gemini SSE stream's body with its bare error line paced: the line goes out alone, at least
/// [`ERROR_PAUSE`] after the data before it. The Google GenAI SDK for Node (and the one the Gemini
/// CLI bundles) raises its `ApiError` only for a network read that parses as JSON with an `error`
/// key; a read holding the last text and the error together ends in a generic "Incomplete JSON
/// segment" instead, and Node's HTTP client hands over everything that arrived since its last read
/// as one, so two writes close together reach the SDK as one read.
pub struct ErrorPacing<B> {
    inner: B,
    /// The error line, and when it may go.
    held: Option<(Bytes, Pin<Box<Sleep>>)>,
    last_data: Option<Instant>,
}

impl<B> ErrorPacing<B> {
    pub fn new(inner: B) -> Self {
        Self { inner, held: None, last_data: None }
    }
}

impl<B> Body for ErrorPacing<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some((_, sleep)) = &mut this.held {
            ready!(sleep.as_mut().poll(cx));
            let line = this.held.take().map(|(line, _)| line).unwrap_or_default();
            this.last_data = Some(Instant::now());
            return Poll::Ready(Some(Ok(Frame::data(line))));
        }
        let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            other => return Poll::Ready(other),
        };
        let mut data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => return Poll::Ready(Some(Ok(frame))),
        };
        let now = Instant::now();
        if let Some(at) = bare_error_at(&data) {
            // The data before the line goes now; the line waits out its pause after that data.
            let before = if at > 0 { Some(now) } else { this.last_data };
            if let Some(until) = before.map(|t| t + ERROR_PAUSE).filter(|t| *t > now) {
                let line = data.split_off(at);
                let mut sleep = Box::pin(tokio::time::sleep_until(until));
                if data.is_empty() && sleep.as_mut().poll(cx).is_pending() {
                    this.held = Some((line, sleep));
                    return Poll::Pending;
                }
                if data.is_empty() {
                    data = line;
                } else {
                    this.held = Some((line, sleep));
                }
            }
        }
        this.last_data = Some(now);
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none() && self.inner.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(path: &str, query: Option<&str>) -> Option<GeminiCall> {
        parse_call(&Method::POST, path, query)
    }

    #[test]
    fn the_model_and_the_method_come_from_the_path() {
        let c = call("/v1beta/models/gemini-2.5-flash:streamGenerateContent", Some("alt=sse")).unwrap();
        assert_eq!((c.model.as_str(), c.method, c.sse), ("gemini-2.5-flash", GeminiMethod::Stream, true));
        assert!(!c.json_array());
        let c = call("/v1/models/gemini-2.5-flash:streamGenerateContent", None).unwrap();
        assert!(c.json_array());
        assert_eq!(call("/v1/models/m:countTokens", None).unwrap().method, GeminiMethod::CountTokens);
        assert_eq!(route(&call("/v1/models/m:countTokens", None).unwrap()), Route::CountTokens(Protocol::Gemini));
        assert_eq!(route(&call("/v1beta/models/m:generateContent", None).unwrap()), Route::Protocol(Protocol::Gemini));
        // `@NAME/` raw or encoded; a model id with its own colon; a tuned model.
        assert_eq!(call("/v1beta/models/@kimi/k2:generateContent", None).unwrap().model, "@kimi/k2");
        assert_eq!(call("/v1beta/models/@kimi%2Fk2:generateContent", None).unwrap().model, "@kimi/k2");
        assert_eq!(call("/v1beta/models/qwen3:8b:generateContent", None).unwrap().model, "qwen3:8b");
        assert_eq!(call("/v1beta/tunedModels/mine:generateContent", None).unwrap().model, "tunedModels/mine");
        // Not Gemini calls.
        for path in [
            "/v1/messages",
            "/v1beta/models/m:embedContent",
            "/v1beta/models/:generateContent",
            "/v1beta/files/x:generateContent",
            "/v2/models/m:generateContent",
        ] {
            assert_eq!(call(path, None), None, "{path}");
        }
        assert_eq!(parse_call(&Method::GET, "/v1beta/models/m:generateContent", None), None);
    }

    #[test]
    fn models_get_paths() {
        assert_eq!(model_get(&Method::GET, "/v1beta/models/gemini-2.5-flash").as_deref(), Some("gemini-2.5-flash"));
        assert_eq!(model_get(&Method::GET, "/v1/models/gemini-2.5-flash").as_deref(), Some("gemini-2.5-flash"));
        assert_eq!(model_get(&Method::GET, "/v1/models"), None);
        assert_eq!(model_get(&Method::POST, "/v1/models/m"), None);
    }

    #[test]
    fn a_changed_model_rewrites_the_path_and_a_json_array_stream_asks_for_sse() {
        let c = call("/v1beta/models/@gem/gemini-x:streamGenerateContent", Some("alt=sse")).unwrap();
        let rest = "/models/@gem/gemini-x:streamGenerateContent";
        assert_eq!(native_rest(&c, rest, "gemini-x", "gemini-x", true), "/models/gemini-x:streamGenerateContent");
        assert_eq!(
            native_rest(&c, rest, "gemini-x", "gemini-2.5-pro", false),
            "/models/gemini-2.5-pro:streamGenerateContent"
        );
        let plain = "/models/gemini-x:generateContent";
        let c = call(&format!("/v1{plain}"), None).unwrap();
        assert!(matches!(native_rest(&c, plain, "gemini-x", "gemini-x", false), Cow::Borrowed(p) if p == plain));
        assert_eq!(native_query(&c, None), None);

        let c = call("/v1beta/models/m:streamGenerateContent", None).unwrap();
        assert_eq!(native_query(&c, None).as_deref(), Some("alt=sse"));
        assert_eq!(native_query(&c, Some("alt=json&x=1")).as_deref(), Some("alt=sse&x=1"));
        let c = call("/v1beta/models/m:streamGenerateContent", Some("alt=sse")).unwrap();
        assert_eq!(native_query(&c, Some("alt=sse")).as_deref(), Some("alt=sse"));
    }

    #[test]
    fn a_bare_error_line_is_found_only_outside_data_lines() {
        assert_eq!(bare_error_at(br#"{"error":{"code":502}}"#), Some(0));
        assert_eq!(bare_error_at(b"data: {\"a\":1}\r\n\r\n{\"error\":{}}\n"), Some(17));
        assert_eq!(bare_error_at(b"data: {\"error\":{}}\n\n"), None);
        assert_eq!(bare_error_at(b"data: {\"text\":\"{\\\"error\\\"\"}\n\n"), None);
        // The first bare one, past one inside a data line.
        assert_eq!(bare_error_at(b"data: {\"error\":1}\n\n{\"error\":{}}\n"), Some(19));
    }

    /// A body of the given frames, all ready at once.
    struct Frames(std::collections::VecDeque<Bytes>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_error_line_goes_alone_after_a_pause() {
        use http_body_util::BodyExt;
        let text = Bytes::from_static(b"data: {\"candidates\":[]}\r\n\r\n");
        let error = Bytes::from_static(b"{\"error\":{\"code\":502}}\n");
        for frames in [vec![text.clone(), error.clone()], vec![[text.clone(), error.clone()].concat().into()]] {
            let mut body = ErrorPacing::new(Frames(frames.into()));
            let started = Instant::now();
            let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
            assert_eq!(first, text);
            let second = body.frame().await.unwrap().unwrap().into_data().unwrap();
            assert_eq!(second, error);
            assert!(started.elapsed() >= ERROR_PAUSE, "{:?}", started.elapsed());
            assert!(body.frame().await.is_none());
        }
        // Long after the last data, nothing waits.
        let mut body = ErrorPacing::new(Frames(vec![error.clone()].into()));
        let started = Instant::now();
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), error);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[test]
    fn a_google_credential_marks_a_gemini_client() {
        let mut h = HeaderMap::new();
        assert!(!is_gemini_client(&h, Some("pageSize=4")));
        assert!(is_gemini_client(&h, Some("pageSize=4&key=AIza")));
        h.insert("x-goog-api-key", "AIza".parse().unwrap());
        assert!(is_gemini_client(&h, None));
    }
}
