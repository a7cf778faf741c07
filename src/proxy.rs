//! The request path: ingress (parse, limits, protocol), candidate choice (SPEC §2), the attempt
//! loop (SPEC §3–4), and the streaming relay (SPEC §6). See docs/request-lifecycle.md.

pub mod attempt;
pub mod backoff;
pub mod conversion;
pub mod dns;
mod exchange;
pub mod gate;
pub mod gemini;
pub mod models;
pub mod observer;
pub mod outcome;
mod pool;
pub mod relay;
pub mod request;
mod respond;
pub mod resume;
mod run;
pub mod trail;
pub mod upstream;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::Response;

use crate::affinity;
use crate::gateway::Gateway;
use crate::protocol::errors::{ErrorKind, GatewayError};
use crate::protocol::{Protocol, Route};
use crate::routing;
use crate::server::conn::{ReadBodyError, read_limited};
use crate::snapshot::{LiveEndpoint, Snapshot};
pub use request::{
    ANTHROPIC_VERSION, Inbound, X_CCMESH_ENDPOINT, X_CCMESH_HOP, X_CCMESH_LOOP, bearer_token, is_anthropic_client,
    presented_credential,
};
use trail::Trail;

/// Gateways a request may pass through before it is refused as a loop.
const MAX_HOPS: usize = 5;

/// Whether `path` has a `.` or `..` segment, raw or percent-encoded (also behind an encoded
/// slash): an upstream that normalises the path could otherwise be sent outside the base URL's
/// prefix, with the endpoint's key.
pub fn has_dot_segment(path: &str) -> bool {
    if !path.contains('.') && !path.contains('%') {
        return false;
    }
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    decoded.split(['/', '\\']).any(|segment| segment == "." || segment == "..")
}

/// SPEC §8: the request came back to this gateway, or has passed through too many. Returns the
/// refusal, or the hop header the upstream requests carry (this instance first).
fn check_hops(gw: &Gateway, headers: &HeaderMap) -> Result<HeaderValue, GatewayError> {
    let Some(value) = headers.get(X_CCMESH_HOP) else { return Ok(gw.hop_header.clone()) };
    let earlier = value.to_str().unwrap_or("");
    let hops: Vec<&str> = earlier.split(',').map(str::trim).filter(|h| !h.is_empty()).collect();
    if hops.iter().any(|h| *h == gw.instance_id) {
        return Err(GatewayError::new(
            ErrorKind::LoopDetected,
            "loop_detected",
            "loop detected: this request came back to the gateway that sent it; an endpoint's base_url points back at this gateway — change it with `ccmesh endpoint edit NAME --base-url URL`",
        ));
    }
    if hops.len() >= MAX_HOPS {
        return Err(GatewayError::new(
            ErrorKind::LoopDetected,
            "loop_detected",
            format!(
                "loop detected: this request has passed through {} gateways; their endpoints point at each other",
                hops.len()
            ),
        ));
    }
    HeaderValue::from_str(&format!("{}, {earlier}", gw.instance_id))
        .map_err(|_| GatewayError::new(ErrorKind::InvalidRequest, "invalid_header", "x-ccmesh-hop must be ASCII"))
}

/// Decide the route of a path that is not a Gemini call (`gemini::parse_call` decides those).
/// `None` = not a proxied path.
pub fn route_for(method: &Method, path: &str, headers: &HeaderMap) -> Option<Route> {
    let rest = path.strip_prefix("/v1/")?;
    Some(match (method, rest.trim_end_matches('/')) {
        (&Method::POST, "messages") => Route::Protocol(Protocol::Claude),
        (&Method::POST, "chat/completions") => Route::Protocol(Protocol::Openai),
        (&Method::POST, "responses") => Route::Protocol(Protocol::Responses),
        (&Method::POST, "messages/count_tokens") => Route::CountTokens(Protocol::Claude),
        _ => Route::PassThrough { anthropic: is_anthropic_client(headers) },
    })
}

/// What a request on a proxy path asks for.
enum Asked {
    /// A Gemini model's description, answered from the catalogue (no attempt, no record).
    GeminiModel(String),
    /// A call the attempt loop serves.
    Route(Route, Option<gemini::GeminiCall>),
    /// A path the gateway does not serve.
    Unknown { is_v1beta: bool },
}

fn asked(method: &Method, path: &str, query: Option<&str>, headers: &HeaderMap) -> Asked {
    let gemini_call = gemini::parse_call(method, path, query);
    let is_v1beta = path.starts_with("/v1beta/");
    if gemini_call.is_none()
        && let Some(model) = gemini::model_get(method, path)
        && (is_v1beta || gemini::is_gemini_client(headers, query))
    {
        return Asked::GeminiModel(model);
    }
    let route = match &gemini_call {
        Some(call) => Some(gemini::route(call)),
        None if is_v1beta => None,
        None => route_for(method, path, headers),
    };
    match route {
        Some(route) => Asked::Route(route, gemini_call),
        None => Asked::Unknown { is_v1beta },
    }
}

/// A proxy request whose handler has not run yet. hyper drops it unpolled when it sees the
/// client's close before it first polls the handler (a client that sends and closes at once):
/// dropped so, it still leaves the record of a client that went away, as every request does.
pub struct Unstarted(Option<(Arc<Gateway>, Request)>);

impl Unstarted {
    pub fn new(gw: Arc<Gateway>, request: Request) -> Self {
        Unstarted(Some((gw, request)))
    }

    /// The handler runs: its trail records the request from here on.
    pub fn start(mut self) -> (Arc<Gateway>, Request) {
        self.0.take().unwrap_or_else(|| unreachable!("an unstarted request holds its request until it starts"))
    }
}

impl Drop for Unstarted {
    fn drop(&mut self) {
        let Some((gw, request)) = self.0.take() else { return };
        let (parts, _) = request.into_parts();
        let Asked::Route(route, _) = asked(&parts.method, parts.uri.path(), parts.uri.query(), &parts.headers) else {
            return;
        };
        let sessions = affinity::SessionHeaders::read(&parts.headers);
        // Dropped unfinished, the trail records the client as gone.
        drop(begin_trail(&gw, route.protocol(), &parts, &sessions));
    }
}

/// The trail of a request the attempt loop serves, begun from its head: by the handler, or by an
/// [`Unstarted`] request dropped before it ran.
fn begin_trail(
    gw: &Gateway,
    protocol: Protocol,
    parts: &axum::http::request::Parts,
    sessions: &affinity::SessionHeaders,
) -> Box<Trail> {
    Trail::start(
        gw.events.clone(),
        gw.clock.wall(),
        protocol.as_str(),
        &parts.method,
        parts.uri.path(),
        &parts.headers,
        sessions,
    )
}

/// axum handler for every `/v1/*` and `/v1beta/*` request other than `GET /v1/models`.
pub async fn handle(State(gw): State<Arc<Gateway>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let (path, query) = (parts.uri.path(), parts.uri.query());
    let (route, gemini_call) = match asked(&parts.method, path, query, &parts.headers) {
        Asked::GeminiModel(model) => return models::get_gemini_model(&gw, &model, &parts.headers, query),
        Asked::Route(route, gemini_call) => (route, gemini_call),
        Asked::Unknown { is_v1beta } => {
            let protocol = if is_v1beta { Protocol::Gemini } else { Protocol::Openai };
            let message = if is_v1beta {
                format!(
                    "ccmesh serves {} {path} only for models/{{model}}:generateContent, :streamGenerateContent and :countTokens, and GET models",
                    parts.method
                )
            } else {
                format!("unknown path {path}")
            };
            return GatewayError::new(ErrorKind::NotFound, "not_found", message).into_response(protocol);
        }
    };
    let protocol = route.protocol();
    let snapshot = gw.snapshot_full();
    let sessions = affinity::SessionHeaders::read(&parts.headers);
    let mut trail = begin_trail(&gw, protocol, &parts, &sessions);
    if has_dot_segment(parts.uri.path()) {
        let e = GatewayError::new(
            ErrorKind::InvalidRequest,
            "invalid_path",
            "the request path has a '.' or '..' segment, which the gateway does not forward; send the path without it",
        );
        return respond::refuse(e, protocol, trail, &snapshot);
    }
    let hop = match check_hops(&gw, &parts.headers) {
        Ok(hop) => hop,
        Err(e) => {
            let mut response = respond::refuse(e, protocol, trail, &snapshot);
            // Tells the gateway that sent the request which instance found the loop: when it is
            // that gateway itself, it names its endpoint that points here (attempt loop).
            response.headers_mut().insert(X_CCMESH_LOOP, gw.hop_header.clone());
            return response;
        }
    };
    // Client keys (SPEC §12): who is asking, before the body is read. `prepare` cannot route
    // without the gate, which it passes through `Gate::admit` before any routing.
    let gate = match gate::Gate::open(&gw, &snapshot, &parts.headers, parts.uri.query(), Some(&mut trail)) {
        Ok(gate) => gate,
        Err(refusal) => return respond::refuse(refusal.to_error(), protocol, trail, &snapshot),
    };
    match prepare(&gw, &snapshot, route, gemini_call, parts, body, hop, gate, sessions, &mut trail).await {
        Ok((inbound, candidates, is_explicit)) => {
            // The attempt loop's state (~10 KB) is written straight into its heap slot, allocated
            // first: held inline, it would be copied whole when the server boxes this handler's
            // future, and boxed the usual way, when moved into the box.
            let slot = Box::new_uninit();
            Box::into_pin(Box::write(slot, attempt::run(gw, snapshot, inbound, candidates, is_explicit, trail))).await
        }
        // The client went away while sending: nobody to answer; the dropped trail records it.
        // (Should a client still be there after all, it learns what happened.)
        Err(error) if error.is_client_gone() => error.into_response(protocol),
        // Refused before any attempt: the client's request is wrong, or nothing can serve it.
        Err(error) => respond::refuse(error, protocol, trail, &snapshot),
    }
}

/// Read and check the request, pass the client-key gate, and choose its candidates (SPEC §2
/// steps 0–3).
#[allow(clippy::too_many_arguments)]
async fn prepare(
    gw: &Gateway,
    snapshot: &Snapshot,
    route: Route,
    gemini: Option<gemini::GeminiCall>,
    parts: axum::http::request::Parts,
    body: axum::body::Body,
    hop: HeaderValue,
    gate: gate::Gate,
    sessions: affinity::SessionHeaders,
    trail: &mut Trail,
) -> Result<(Box<Inbound>, Vec<Arc<LiveEndpoint>>, bool), GatewayError> {
    let limit = snapshot.settings.max_body_bytes;
    let too_large = || {
        GatewayError::new(
            ErrorKind::RequestTooLarge,
            "request_too_large",
            format!(
                "the request body is larger than max_body_bytes ({limit} bytes); shorten it or raise max_body_bytes in the settings"
            ),
        )
    };
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let body = match read_limited(body, usize::try_from(limit).unwrap_or(usize::MAX)).await {
        Ok(body) => body,
        Err(ReadBodyError::TooLarge) => return Err(too_large()),
        Err(ReadBodyError::Stalled(message)) => {
            return Err(GatewayError::new(
                ErrorKind::RequestTimeout,
                "body_timeout",
                format!("{message}; send the body without pauses, or raise limits.body_read_timeout_secs"),
            ));
        }
        Err(ReadBodyError::Malformed(detail)) => {
            return Err(GatewayError::new(
                ErrorKind::InvalidRequest,
                "malformed_body",
                format!(
                    "the request body is not valid HTTP/1.1 framing ({detail}); fix the client or proxy that sent it"
                ),
            ));
        }
        Err(ReadBodyError::ClientGone) => return Err(GatewayError::client_gone()),
    };

    let query = parts.uri.query();
    let endpoint_query = endpoint_selector(query)?;
    let endpoint_header = match parts.headers.get(X_CCMESH_ENDPOINT).map(|v| v.to_str()) {
        None => None,
        Some(Ok(v)) => Some(v.to_string()),
        Some(Err(_)) => {
            return Err(GatewayError::new(
                ErrorKind::InvalidRequest,
                "invalid_header",
                "x-ccmesh-endpoint must be ASCII",
            ));
        }
    };

    // The inference protocols and token counts carry JSON; other paths only when they say so.
    let is_json = match route {
        Route::Protocol(_) | Route::CountTokens(_) => true,
        // A pass-through body that is not an object has no model to read: forwarded as it is.
        Route::PassThrough { .. } => {
            crate::protocol::lenient::is_object(&body)
                && parts
                    .headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.contains("json"))
        }
    };
    let peek = if is_json { Some(request::peek(&body)?) } else { None };
    // A Gemini client names the model and the method in the path (SPEC §11), not the body.
    let (requested_model, stream) = match &gemini {
        Some(call) => (Some(call.model.as_str()), call.stream()),
        None => (peek.as_ref().and_then(|p| p.model.as_deref()), peek.as_ref().is_some_and(|p| p.stream)),
    };
    trail.set_request(requested_model, stream);

    let explicit = routing::resolve_explicit(
        &snapshot.endpoints,
        route,
        endpoint_header.as_deref(),
        endpoint_query.as_deref(),
        requested_model,
    )?;
    let model = explicit.model.as_deref().map(str::to_string);
    let model_prefixed = model.as_deref() != requested_model;

    // Client keys (SPEC §12, §15.10): the model, the explicit endpoint, the price under a budget,
    // then the key's limits — all before any routing.
    let explicit_endpoint = explicit.endpoint.map(|e| e.as_ref());
    let admitted = gate
        .admit(gw, snapshot, route.protocol(), model.as_deref(), explicit_endpoint, trail)
        .await
        .map_err(|r| r.to_error())?;

    let (candidates, is_explicit): (Vec<Arc<LiveEndpoint>>, bool) = match explicit.endpoint {
        Some(e) => (vec![e.clone()], true),
        None => {
            // SPEC §15.10: the key's endpoint list filters the candidates at §2 step 1; when
            // that filter alone leaves none, the client learns which endpoints it may use.
            let allowed = gate::allowed_endpoints(&admitted, &snapshot.endpoints);
            let pool: &[Arc<LiveEndpoint>] = allowed.as_deref().unwrap_or(&snapshot.endpoints);
            let only_the_filter = || {
                let all = routing::list_routable(&snapshot.endpoints, route);
                match &model {
                    Some(m) => routing::filter_by_model(all, &snapshot.endpoints, route, m).is_ok(),
                    None => !all.is_empty(),
                }
            };
            let no_allowed = |otherwise: GatewayError| match gate::no_allowed_endpoint(gw, &admitted) {
                Some(refusal) if allowed.is_some() && only_the_filter() => refusal.to_error(),
                _ => otherwise,
            };
            let routable = routing::list_routable(pool, route);
            if routable.is_empty() {
                return Err(no_allowed(routing::nothing_configured(route)));
            }
            let serving = match &model {
                Some(m) => routing::filter_by_model(routable, pool, route, m).map_err(no_allowed)?,
                None => routable,
            };
            (serving.into_iter().cloned().collect(), false)
        }
    };
    let model_span = if gemini.is_some() { None } else { peek.as_ref().and_then(|p| p.model_span.clone()) };
    let session_id = affinity::session_id(&sessions, peek.as_ref().map(|p| p.session()).unwrap_or_default());
    trail.set_session(session_id.as_deref());
    let body_peeked = peek.as_ref().map(|p| request::PeekedBody { tools_span: p.tools_span.clone() });
    drop(peek);

    let path = parts.uri.path();
    let rest = match &gemini {
        // A Gemini endpoint's base URL decides its version (`join_url`): the client's `/v1beta`
        // and `/v1` paths go to the same place.
        Some(_) => path.strip_prefix("/v1beta").or_else(|| path.strip_prefix("/v1")).unwrap_or(path),
        None => without_version_prefixes(path),
    };
    // Boxed where it is built: the request's state moves from this future to the attempt loop's
    // and into its `Run`, and a box moves as one pointer where the state itself is 400 bytes.
    let inbound = Box::new(Inbound {
        route,
        method: parts.method,
        rest: rest.to_string(),
        query: upstream::forwarded_query(query),
        headers: parts.headers,
        body,
        body_peeked,
        model,
        model_prefixed,
        model_span,
        stream,
        gemini,
        hop,
        session_id,
        client_key: admitted.key.as_ref().map(|k| k.name.clone()),
    });
    Ok((inbound, candidates, is_explicit))
}

/// The path after its `/v1` prefix (every one, as a client that doubled it means the same):
/// `str::trim_start_matches` would build a substring searcher for this on every request.
fn without_version_prefixes(mut path: &str) -> &str {
    while let Some(rest) = path.strip_prefix("/v1") {
        path = rest;
    }
    path
}

/// The `endpoint=` query selector; given twice with different names it is refused (SPEC §2.2:
/// the selectors must agree).
pub(crate) fn endpoint_selector(query: Option<&str>) -> Result<Option<String>, GatewayError> {
    let mut found: Option<String> = None;
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if key != "endpoint" {
            continue;
        }
        match &found {
            Some(earlier) if *earlier != value => {
                return Err(GatewayError::new(
                    ErrorKind::InvalidRequest,
                    "conflicting_endpoints",
                    format!("the query names two endpoints ('{earlier}' and '{value}'); name one"),
                )
                .with_param("endpoint"));
            }
            _ => found = Some(value.into_owned()),
        }
    }
    Ok(found)
}

/// Paths the gateway does not serve.
pub async fn not_found(request: Request) -> Response {
    let message = format!(
        "ccmesh has no route {} {}; the proxy serves /v1/*, the admin API /api/*, the dashboard /",
        request.method(),
        request.uri().path()
    );
    GatewayError::new(ErrorKind::NotFound, "not_found", message).into_response(Protocol::Openai)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_rest_of_a_path_is_what_follows_its_v1_prefixes() {
        for (path, rest) in [
            ("/v1/messages", "/messages"),
            ("/v1/v1/chat/completions", "/chat/completions"),
            ("/v1", ""),
            ("/v1/", "/"),
            ("/messages", "/messages"),
            ("/v2/messages", "/v2/messages"),
        ] {
            assert_eq!(super::without_version_prefixes(path), rest, "{path}");
            assert_eq!(super::without_version_prefixes(path), path.trim_start_matches("/v1"), "{path}");
        }
    }
}
