//! The one way out: every answer a client gets — an upstream's, a gateway-made error, the local
//! token estimate, a committed stream — leaves through here, which tags it (`x-ccmesh-attempts`,
//! `x-ccmesh-endpoint`, `x-ccmesh-request-id`, `Server-Timing`), masks keys in error bodies,
//! and finishes the request's record (for a stream: hands the record to the relay, whose end
//! closes it with `stream_ended`).

use std::borrow::Cow;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::X_CCMESH_ENDPOINT;
use super::relay;
use super::run::{Buffered, Run, Stream};
use super::trail::Trail;
use super::upstream::response_headers;
use crate::convert::count_tokens;
use crate::observe::record::Tokens;
use crate::protocol::Protocol;
use crate::protocol::errors::{ErrorKind, GatewayError};
use crate::snapshot::Snapshot;

const X_CCMESH_ATTEMPTS: HeaderName = HeaderName::from_static("x-ccmesh-attempts");

/// `x-ccmesh-attempts` and, when an endpoint was tried, `x-ccmesh-endpoint` (SPEC §3).
fn tag(headers: &mut HeaderMap, attempts: usize, endpoint: Option<&Cow<'static, str>>) {
    // The usual counts without formatting them into a new allocation.
    const FEW: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    let count = FEW.get(attempts).map_or_else(|| HeaderValue::from(attempts), |n| HeaderValue::from_static(n));
    headers.insert(X_CCMESH_ATTEMPTS, count);
    if let Some(v) = endpoint.and_then(text_header) {
        headers.insert(X_CCMESH_ENDPOINT, v);
    }
}

/// A kept name as a header value: a borrowed one is not copied (names are kept for the
/// gateway's life, `snapshot::record_name`). `None` for a name no header value can hold.
#[allow(clippy::ptr_arg, reason = "whether the text is borrowed for good is what this reads")]
fn text_header(text: &Cow<'static, str>) -> Option<HeaderValue> {
    match text {
        Cow::Borrowed(kept) => HeaderValue::from_maybe_shared(Bytes::from_static(kept.as_bytes())).ok(),
        Cow::Owned(owned) => HeaderValue::from_str(owned).ok(),
    }
}

/// A stream's body as axum's: boxed the way axum boxes a body whose error is already its own,
/// so `Body::new` keeps it as it is. A body with another error type gets a layer that maps its
/// errors, and that layer is polled for every event of every stream.
fn stream_body(body: impl hyper::body::Body<Data = Bytes, Error = axum::Error> + Send + 'static) -> Body {
    Body::new(http_body_util::BodyExt::boxed_unsync(body))
}

/// A request refused before any attempt (bad request, nothing configured, a loop): the
/// gateway's error in the client's protocol, and the record closed.
pub fn refuse(error: GatewayError, protocol: Protocol, mut trail: Box<Trail>, snapshot: &Snapshot) -> Response {
    let status = error.kind.status().as_u16();
    trail.set_error("gateway", Some(error.code), &error.message, None);
    let mut response = error.into_response(protocol);
    trail.tag_response(response.headers_mut());
    trail.finish(status, Tokens::default(), None, snapshot);
    response
}

impl Run {
    /// An upstream's answer (a success, a neutral answer, or the last failure) to the client.
    /// `usage`: tokens and model of a successful answer.
    #[allow(clippy::ptr_arg, reason = "the name goes on to `tag`, which reads whether it is kept")]
    pub(super) fn answer(
        &mut self,
        answer: Buffered,
        attempts: usize,
        endpoint: &Cow<'static, str>,
        usage: Option<(Tokens, Option<String>)>,
    ) -> Response {
        let status = answer.status.as_u16();
        let mut body = answer.body;
        if status >= 400 {
            // An upstream that rejects a key often quotes it: the client must not receive the
            // endpoint's key (SPEC §15.6). Only error bodies are scanned.
            let query = self.inbound.query.as_deref();
            let credential = super::request::presented_credential(&self.inbound.headers, query);
            if let Some(clean) = crate::redact::current().scrub_bytes(&body, credential.as_deref()) {
                body = Bytes::from(clean);
            }
            if let Some(t) = self.trail.as_mut() {
                t.set_error("upstream", None, &format!("upstream answered HTTP {status}"), Some(&body));
            }
        }
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = answer.status;
        *response.headers_mut() = response_headers(answer.headers);
        tag(response.headers_mut(), attempts, Some(endpoint));
        let (tokens, model) = usage.unwrap_or_default();
        self.close_trail(response.headers_mut(), status, tokens, model);
        response
    }

    /// The most recent upstream answer of a request that got no better one.
    pub(super) fn last_answer(
        &mut self,
        answer: Option<Buffered>,
        attempts: usize,
        endpoint: Option<&Cow<'static, str>>,
    ) -> Response {
        match answer {
            Some(a) => self.answer(a, attempts, endpoint.unwrap_or(&Cow::Borrowed("")), None),
            None => self.error(
                GatewayError::new(ErrorKind::BadGateway, "upstream_unreachable", "no upstream answered"),
                attempts,
                endpoint,
            ),
        }
    }

    /// A gateway-made error in the client's protocol.
    pub(super) fn error(
        &mut self,
        error: GatewayError,
        attempts: usize,
        endpoint: Option<&Cow<'static, str>>,
    ) -> Response {
        let status = error.kind.status().as_u16();
        if let Some(t) = self.trail.as_mut() {
            t.set_error("gateway", Some(error.code), &error.message, None);
        }
        let mut response = error.into_response(self.protocol());
        tag(response.headers_mut(), attempts, endpoint);
        self.close_trail(response.headers_mut(), status, Tokens::default(), None);
        response
    }

    /// The total deadline passed: the most recent upstream answer, else 504 (SPEC §15.1).
    pub(super) fn deadline_over(
        &mut self,
        answer: Option<Buffered>,
        attempts: usize,
        endpoint: Option<&Cow<'static, str>>,
    ) -> Response {
        if answer.is_some() {
            return self.last_answer(answer, attempts, endpoint);
        }
        let protocol = self.protocol();
        let total = self.snapshot.settings.timeouts(protocol).total.as_secs_f64();
        let e = GatewayError::new(
            ErrorKind::GatewayTimeout,
            "timeout",
            format!(
                "the request's total deadline (timeouts.{}.total_timeout_secs = {total} s) passed before an endpoint answered; check the endpoints' health, or raise the deadline",
                protocol.as_str()
            ),
        );
        self.error(e, attempts, endpoint)
    }

    /// A token count (`/v1/messages/count_tokens`, Gemini `:countTokens`) answered by the
    /// gateway's own estimate, in the client's shape.
    pub(super) async fn token_estimate(&mut self, endpoint: Option<&Cow<'static, str>>, attempts: usize) -> Response {
        let request = match self.conversion.request(&self.inbound.body) {
            Ok(r) => r,
            Err(e) => {
                let e = GatewayError::new(ErrorKind::InvalidRequest, "invalid_request", e.message);
                return self.error(e, attempts, endpoint);
            }
        };
        let count = tokio::task::spawn_blocking(move || count_tokens::estimate(&request)).await.unwrap_or(0);
        let body = crate::convert::encode_count_tokens_response(self.conversion.client, count);
        let mut response =
            ([(axum::http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response();
        response
            .headers_mut()
            .insert(HeaderName::from_static("x-ccmesh-token-count"), HeaderValue::from_static("estimated"));
        tag(response.headers_mut(), attempts, endpoint);
        self.close_trail(response.headers_mut(), 200, Tokens::default(), None);
        response
    }

    /// A stream that reached its first content: the response head now, the body the relay;
    /// the record goes with the relay and is closed when the stream ends. A `resumable` stream
    /// takes the request's attempt loop along, to continue the answer elsewhere if it is cut.
    pub(super) fn commit(mut self, stream: Stream, resumable: bool) -> Response {
        let Stream { status, headers, endpoint, endpoint_id, attempt, mut committed, permit, upstream } = stream;
        let mut response = Response::new(Body::empty());
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        tag(response.headers_mut(), attempt, Some(&endpoint));
        let mut trail = self.trail.take();
        if let Some(t) = trail.as_mut() {
            t.stream_committed(status.as_u16());
            t.tag_response(response.headers_mut());
        }
        committed.trail = trail;
        // A Gemini SSE client's error line goes out alone, after a pause (`gemini::ErrorPacing`).
        let paced = self.inbound.gemini.as_ref().is_some_and(|c| c.sse);
        let resume = resumable.then(|| {
            let attempts = self.snapshot.settings.stream_resume_attempts;
            relay::ResumePlan::new(Box::new(self), endpoint_id, attempts)
        });
        let relay = relay::relay(committed, permit, upstream, resume);
        *response.body_mut() =
            if paced { stream_body(super::gemini::ErrorPacing::new(relay)) } else { stream_body(relay) };
        response
    }

    /// Tags the answer with the record's headers and closes the record (`finish_answered`: on a
    /// thread serving it alone, once the answer is written), unless a resume is running: then
    /// the relay that started it closes it.
    fn close_trail(&mut self, headers: &mut HeaderMap, status: u16, tokens: Tokens, model: Option<String>) {
        if self.resuming.is_some() {
            return;
        }
        if let Some(mut trail) = self.trail.take() {
            trail.tag_response(headers);
            trail.finish_answered(status, tokens, model, &self.snapshot);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_attempt_count_is_written_in_decimal_whatever_its_size() {
        for n in [0, 1, 2, 9, 10, 11, 99, 12345] {
            let mut headers = axum::http::HeaderMap::new();
            super::tag(&mut headers, n, Some(&"relay-a".into()));
            assert_eq!(headers["x-ccmesh-attempts"], n.to_string().as_str());
            assert_eq!(headers["x-ccmesh-endpoint"], "relay-a");
        }
    }

    #[test]
    fn a_kept_endpoint_name_is_tagged_without_a_copy() {
        use std::borrow::Cow;
        let kept: Cow<'static, str> = Cow::Borrowed("relay-a");
        let mut headers = axum::http::HeaderMap::new();
        super::tag(&mut headers, 1, Some(&kept));
        let tagged = headers["x-ccmesh-endpoint"].as_bytes();
        assert!(std::ptr::eq(tagged.as_ptr(), kept.as_ptr()), "the kept name was copied");
        // A name past the table's cap is its own copy; one no header can hold is left out.
        let owned: Cow<'static, str> = Cow::Owned("relay-b".to_string());
        super::tag(&mut headers, 1, Some(&owned));
        assert_eq!(headers["x-ccmesh-endpoint"], "relay-b");
        for unfit in [Cow::Borrowed("a\nb"), Cow::Owned("a\u{7f}b".to_string())] {
            let mut headers = axum::http::HeaderMap::new();
            super::tag(&mut headers, 1, Some(&unfit));
            assert!(!headers.contains_key("x-ccmesh-endpoint"), "{unfit:?}");
        }
    }
}
