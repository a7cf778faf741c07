//! Conversion on the request path: the client's request decoded once, encoded once per target
//! format and model, and the answers converted back. The codecs themselves live in `convert`.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{HeaderMap, HeaderValue, header};
use bytes::Bytes;

use crate::convert::{self, ir};
use crate::observe::record::Tokens;
use crate::observe::usage::{self, AnswerRead};
use crate::protocol::Format;
use crate::protocol::json_skip::ShownObject;
use crate::protocol::lenient;
use crate::proxy::request::PeekedBody;

/// The kinds of conversion loss logged so far: (client format, target format, lost fields
/// with their indexes left out), hashed. Bounded: when it is full it starts again, and a kind
/// is logged once more.
struct LossKinds {
    seen: std::sync::Mutex<std::collections::HashSet<u64>>,
}

/// More kinds than a gateway's clients produce between restarts, in 32 KiB.
const MAX_LOSS_KINDS: usize = 4096;

static LOGGED_LOSSES: std::sync::LazyLock<LossKinds> =
    std::sync::LazyLock::new(|| LossKinds { seen: std::sync::Mutex::new(std::collections::HashSet::new()) });

impl LossKinds {
    /// Whether this kind of loss is new: a turn's thinking block is `messages[2]` in one request
    /// and `messages[40]` later, so the digits of a field do not count.
    fn first_time<'a>(&self, from: Format, to: Format, fields: impl Iterator<Item = &'a str>) -> bool {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (from.as_str(), to.as_str()).hash(&mut hasher);
        for field in fields {
            field.bytes().filter(|b| !b.is_ascii_digit()).for_each(|b| b.hash(&mut hasher));
            0xffu8.hash(&mut hasher);
        }
        let kind = hasher.finish();
        let Ok(mut seen) = self.seen.lock() else { return true };
        if seen.len() >= MAX_LOSS_KINDS {
            seen.clear();
        }
        seen.insert(kind)
    }
}

/// `body` as a decoder gets it: shown to be one JSON object when the request's peek read it.
fn request_body<'a>(body: &'a [u8], peeked: Option<&PeekedBody>) -> ir::RequestBody<'a> {
    match (lenient::utf8(body), peeked) {
        (Some(text), Some(peeked)) => {
            let tools = peeked.tools_span.clone().map(|span| ("tools", span));
            ir::RequestBody::shown(ShownObject::accepted_by_peek(text, tools))
        }
        _ => ir::RequestBody::from(body),
    }
}

/// A body encoded for an endpoint format and the model it names.
struct EncodedBody {
    format: Format,
    model: String,
    body: Result<Bytes, ir::ConvertError>,
    losses: Vec<String>,
}

/// Per-request conversion state.
pub struct RequestConversion {
    /// The client's format (the native format of its inbound protocol).
    pub client: Format,
    /// Boxed, as `ctx` is: a request passed through carries neither, and this state moves with
    /// the request's attempt loop (copied whole on every move) for every request.
    decoded: Option<Box<Result<ir::Request, ir::ConvertError>>>,
    /// Encoded bodies by (format, model sent), each with what did not survive its conversion
    /// (`field: note`).
    bodies: Vec<EncodedBody>,
    ctx: Option<Box<ir::EncodeContext>>,
    /// `count_tokens`: the request goes to the endpoint's token-count method.
    count_tokens: bool,
    /// Whether the client asked for a stream, for a client whose body does not say (Gemini:
    /// the method in the path does).
    stream: bool,
    /// The client's session id: a `responses` endpoint gets it as `prompt_cache_key` when the
    /// client sent none (the Responses API keys its prompt cache by it).
    pub session_id: Option<String>,
    /// Set when the request's peek read the body, and so showed it to be one JSON object: the
    /// decoder need not validate again what it only steps over.
    body_peeked: Option<PeekedBody>,
}

impl RequestConversion {
    pub fn new(client: Format, count_tokens: bool) -> Self {
        Self {
            client,
            decoded: None,
            bodies: Vec::new(),
            ctx: None,
            count_tokens,
            stream: false,
            session_id: None,
            body_peeked: None,
        }
    }

    /// The stream flag read from the request's path (a Gemini client's method).
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// What the upstream is asked for.
    pub fn call(&self, stream: bool) -> convert::Call {
        if self.count_tokens { convert::Call::CountTokens } else { convert::Call::Generate { stream } }
    }

    pub fn needed(&self, endpoint: Format) -> bool {
        endpoint != self.client
    }

    /// The body the request's peek read (see `body_peeked`).
    pub fn with_body_peeked(mut self, peeked: Option<PeekedBody>) -> Self {
        self.body_peeked = peeked;
        self
    }

    fn decoded(&mut self, body: &[u8]) -> Result<&mut ir::Request, ir::ConvertError> {
        let (client, count_tokens, stream, peeked) =
            (self.client, self.count_tokens, self.stream, self.body_peeked.as_ref());
        self.decoded
            .get_or_insert_with(|| {
                Box::new(match client {
                    // The model and the method are in a Gemini client's path: the model is set per
                    // target (`body`), the stream flag here.
                    Format::Gemini if count_tokens => convert::gemini::decode_count_tokens_request(body),
                    Format::Gemini => convert::decode_request(client, body).map(|mut r| {
                        r.stream = stream;
                        r
                    }),
                    _ => convert::decode_request(client, request_body(body, peeked)),
                })
            })
            .as_mut()
            .as_mut()
            .map_err(|e| e.clone())
    }

    /// The body to send to an endpoint of `format` with `model`.
    pub fn body(&mut self, client_body: &[u8], format: Format, model: &str) -> Result<Bytes, ir::ConvertError> {
        if let Some(encoded) = self.bodies.iter().find(|b| b.format == format && b.model == model) {
            return encoded.body.clone();
        }
        let (client, count_tokens) = (self.client, self.count_tokens);
        let session = self.session_id.clone();
        let mut noted = Vec::new();
        let mut sent_model = None;
        let result = self.decoded(client_body).and_then(|request| {
            // One decoded request serves every target: the target's model (and a Responses
            // endpoint's cache key) go in for the encoding and come out after it, instead of a
            // copy of the whole request, tool schemas and history included, per target.
            let client_model = std::mem::replace(&mut request.model, model.to_string());
            let lend_session = format == Format::Responses && request.prompt_cache_key.is_none();
            if lend_session {
                request.prompt_cache_key = session;
            }
            let encoded = if count_tokens {
                convert::encode_count_tokens_request(format, request)
            } else {
                convert::encode_request(format, request)
            };
            sent_model = Some(std::mem::replace(&mut request.model, client_model));
            if lend_session {
                request.prompt_cache_key = None;
            }
            let encoded = encoded?;
            let losses = || request.losses.iter().chain(&encoded.losses);
            for loss in losses() {
                noted.push(format!("{}: {}", loss.field, loss.note));
            }
            // A coding agent loses the same few features on every turn: the log says so the
            // first time, and every request's record keeps its own losses.
            if !noted.is_empty() {
                let first = LOGGED_LOSSES.first_time(client, format, losses().map(|l| l.field.as_str()));
                let (from, to, count, losses) = (client.as_str(), format.as_str(), noted.len(), noted.join("; "));
                let message = "request features did not survive conversion";
                if first {
                    tracing::info!(event = "conversion_loss", from, to, count, losses, "{message}");
                } else {
                    tracing::debug!(event = "conversion_loss", from, to, count, losses, "{message}");
                }
            }
            Ok(Bytes::from(encoded.body))
        });
        let model = sent_model.unwrap_or_else(|| model.to_string());
        self.bodies.push(EncodedBody { format, model, body: result.clone(), losses: noted });
        result
    }

    /// What did not survive the first conversion to `format`, for the request record.
    pub fn losses(&self, format: Format) -> Vec<String> {
        self.bodies.iter().find(|b| b.format == format).map(|b| b.losses.clone()).unwrap_or_default()
    }

    /// What the client-side encoders need, built once from the decoded request.
    pub fn context(&mut self, client_body: &[u8], requested_model: &str, now_unix: u64) -> &ir::EncodeContext {
        let ctx = match self.ctx.take() {
            Some(ctx) => ctx,
            None => Box::new(self.new_context(client_body, requested_model, now_unix)),
        };
        self.ctx.insert(ctx)
    }

    fn new_context(&mut self, client_body: &[u8], requested_model: &str, now_unix: u64) -> ir::EncodeContext {
        let (include_usage, include_encrypted_reasoning, namespaced_tools) = match self.decoded(client_body) {
            Ok(r) => (
                r.include_usage,
                r.include_encrypted_reasoning,
                r.tools
                    .iter()
                    .filter_map(|t| t.namespace.as_ref().map(|(ns, name)| (t.name.clone(), ns.clone(), name.clone())))
                    .collect(),
            ),
            Err(_) => (false, false, Vec::new()),
        };
        ir::EncodeContext {
            request_model: requested_model.to_string(),
            include_usage,
            namespaced_tools,
            created: now_unix,
            id_seed: id_seed(now_unix),
            include_encrypted_reasoning,
            kept_ids: ir::KeptIds::default(),
        }
    }

    /// The decoded client request (for local token counting).
    pub fn request(&mut self, client_body: &[u8]) -> Result<ir::Request, ir::ConvertError> {
        self.decoded(client_body).map(|r| r.clone())
    }
}

/// A unique id suffix: time plus a process-wide count. Only its numbers, taken here: written
/// out for every request, it cost ~250 instructions, for ids that most answers never need.
fn id_seed(now_unix: u64) -> ir::IdSeed {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    ir::IdSeed::Unique { now_unix, count: COUNTER.fetch_add(1, Ordering::Relaxed) }
}

impl RequestConversion {
    /// A 2xx answer decoded once for both its conversion and its record, when the body is
    /// plainly an answer and decodes: matched by the format's plain reading (`convert::plain_answer`,
    /// which promises an object with no `error` or `status`), or else holding nothing a
    /// 2xx-that-is-no-answer check looks for (`outcome::plainly_an_answer`, three searches of the
    /// body that a matched answer does without). `None`: the answer is read the usual way
    /// (`usage::read_answer`, then `success_body` decodes it).
    pub fn decode_answer(&self, upstream: Format, body: &[u8]) -> Option<(ir::Response, AnswerRead)> {
        if self.count_tokens {
            return None;
        }
        let response = match convert::plain_answer(upstream, body) {
            Some(response) => response,
            None if super::outcome::plainly_an_answer(body) => convert::decode_parsed_response(upstream, body).ok()?,
            None => return None,
        };
        let read = answer_read(&response);
        Some((response, read))
    }

    /// Convert a successful non-streaming answer (a token count for `count_tokens`), decoded
    /// already when `decoded` holds it. `Err` means the upstream's 2xx body could not be read
    /// as its format — a failure of that endpoint.
    pub fn success_body(
        &mut self,
        upstream: Format,
        body: &[u8],
        decoded: Option<ir::Response>,
        for_context: ContextSource<'_>,
    ) -> Result<Bytes, ir::ConvertError> {
        if self.count_tokens {
            let count = convert::decode_count_tokens_response(upstream, body)
                .ok_or_else(|| ir::ConvertError::new("body", "the answer carries no token count"))?;
            return Ok(Bytes::from(convert::encode_count_tokens_response(self.client, count)));
        }
        let response = match decoded {
            Some(response) => response,
            None => convert::decode_response(upstream, body)?,
        };
        let client = self.client;
        // Read in place: only a stream's encoder keeps a context of its own.
        let ctx = self.context(for_context.client_body, for_context.requested_model, for_context.now_unix);
        Ok(Bytes::from(convert::encode_response(client, &response, ctx)))
    }
}

/// What [`RequestConversion::context`] is built from, the first time it is asked for.
pub struct ContextSource<'a> {
    pub client_body: &'a [u8],
    pub requested_model: &'a str,
    pub now_unix: u64,
}

/// What the record takes from a decoded answer: the tokens and the answering model as
/// `usage::read_answer` reads them from the same body (property-tested in `convert.rs`), and an
/// envelope with no error (the caller checked the body is plainly an answer).
pub fn answer_read(response: &ir::Response) -> AnswerRead {
    let u = &response.usage;
    AnswerRead {
        tokens: Tokens { input: u.input, output: u.output, cache_read: u.cache_read, cache_write: u.cache_write },
        model: usage::answered_model(&response.model),
        envelope: Some(usage::Envelope::default()),
    }
}

/// Convert an upstream error body into the client's protocol; the status is kept by the caller.
pub fn error_body(upstream: Format, client: Format, status: u16, body: &[u8]) -> Bytes {
    let error = convert::decode_error(upstream, status, body);
    Bytes::from(convert::encode_error(client, &error))
}

/// Response headers for a converted body: the upstream's minus what described its own body.
pub fn converted_headers(mut headers: HeaderMap, content_type: &'static str) -> HeaderMap {
    super::upstream::remove_present(&mut headers, &[header::CONTENT_LENGTH, header::CONTENT_ENCODING]);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers
}

/// Request headers that only make sense to an upstream of the client's own format
/// (`anthropic-beta` to an OpenAI endpoint, `openai-organization` to Anthropic, a Google
/// SDK's `x-goog-api-client` or the Gemini CLI's `x-gemini-api-privileged-user-id` to either).
pub fn foreign_header(name: &str, target: Format) -> bool {
    let google = || name.starts_with("x-goog-") || name.starts_with("x-gemini-");
    match target {
        Format::Anthropic => name.starts_with("openai-") || google(),
        Format::Openai | Format::Responses => name.starts_with("anthropic-") || google(),
        Format::Gemini => name.starts_with("anthropic-") || name.starts_with("openai-"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: &str = r#"{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#;
    const GEMINI: &str = r#"{"candidates":[{"content":{"parts":[{"text":"hi"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2,"totalTokenCount":5},"modelVersion":"m","responseId":"r1"}"#;

    /// An answer is decoded for its record and conversion only when it is plainly one: matched by
    /// its format's plain reading, or holding nothing a 2xx-that-is-no-answer check looks for.
    /// Whatever it decodes, `outcome::not_an_answer` would have passed; what it leaves, the
    /// usual reading takes.
    #[test]
    fn an_answer_is_decoded_at_once_only_when_it_is_plainly_one() {
        let conversion = RequestConversion::new(Format::Anthropic, false);
        let tool_call = r#"{"id":"c1","model":"m","choices":[{"index":0,"message":{"content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
        let decoded = [
            (Format::Openai, CHAT.to_owned()),
            (Format::Gemini, GEMINI.to_owned()),
            (Format::Openai, tool_call.to_owned()),
        ];
        for (format, body) in &decoded {
            let (response, read) = conversion.decode_answer(*format, body.as_bytes()).expect(body);
            assert_eq!(response, convert::decode_response(*format, body.as_bytes()).unwrap(), "{body}");
            let usage = usage::read_answer(*format, body.as_bytes());
            assert_eq!((read.tokens, read.model), (usage.tokens, usage.model), "{body}");
        }
        let left = [
            (Format::Openai, CHAT.replacen('{', r#"{"status":"failed","#, 1)),
            (Format::Openai, CHAT.replacen('{', r#"{"error":{"message":"quota"},"#, 1)),
            (Format::Openai, CHAT.replacen('{', r#"{"\u0065rror":{"message":"quota"},"#, 1)),
            (Format::Openai, CHAT.replacen('{', r#"{"st\u0061tus":"failed","#, 1)),
            (Format::Gemini, GEMINI.replacen('{', r#"{"status":"failed","#, 1)),
            (Format::Gemini, GEMINI.replacen('{', r#"{"error":{"code":500,"message":"x"},"#, 1)),
            (Format::Openai, "not json".to_owned()),
        ];
        for (format, body) in &left {
            assert!(conversion.decode_answer(*format, body.as_bytes()).is_none(), "{body}");
            assert!(crate::proxy::outcome::not_an_answer(body.as_bytes(), None).is_some(), "{body}");
        }
        let count = RequestConversion::new(Format::Anthropic, true);
        assert!(
            count.decode_answer(Format::Openai, CHAT.as_bytes()).is_none(),
            "a token count is never decoded as an answer"
        );
    }

    /// The answers that skip the searches are the ones the plain readings match.
    #[test]
    fn the_usual_chat_and_gemini_answers_are_matched() {
        assert!(convert::plain_answer(Format::Openai, CHAT.as_bytes()).is_some());
        assert!(convert::plain_answer(Format::Gemini, GEMINI.as_bytes()).is_some());
        assert!(convert::plain_answer(Format::Anthropic, CHAT.as_bytes()).is_none());
    }

    /// A kind of loss is logged at info once: the same fields at other indexes are the same
    /// kind; another field, or another pair of formats, is another.
    #[test]
    fn a_kind_of_loss_is_new_once() {
        let kinds = LossKinds { seen: std::sync::Mutex::new(std::collections::HashSet::new()) };
        let turn = |i: usize| [String::from("system[0]"), format!("messages[{i}].content[0] (thinking)")];
        let (a, c) = (Format::Anthropic, Format::Openai);
        assert!(kinds.first_time(a, c, turn(2).iter().map(String::as_str)));
        assert!(!kinds.first_time(a, c, turn(2).iter().map(String::as_str)));
        assert!(!kinds.first_time(a, c, turn(40).iter().map(String::as_str)), "indexes do not count");
        assert!(kinds.first_time(a, Format::Responses, turn(2).iter().map(String::as_str)));
        assert!(kinds.first_time(a, c, ["system[0]"].into_iter()), "fewer fields is another kind");
        assert!(kinds.first_time(a, c, ["system"].into_iter()));
        assert!(kinds.first_time(a, c, ["sys", "tem"].into_iter()), "fields do not run together");
        for i in 0..MAX_LOSS_KINDS {
            kinds.first_time(c, a, [format!("x{}", "y".repeat(i % 50)), "z".repeat(i / 50)].iter().map(String::as_str));
        }
        assert!(kinds.seen.lock().unwrap().len() <= MAX_LOSS_KINDS, "bounded");
    }

    #[test]
    fn a_converted_answer_loses_its_length_and_encoding_and_takes_the_new_type() {
        let mut upstream = HeaderMap::new();
        for (name, value) in [
            ("content-type", "text/event-stream"),
            ("content-length", "120"),
            ("content-encoding", "identity"),
            ("x-request-id", "r1"),
            ("x-request-id", "r2"),
        ] {
            upstream.append(header::HeaderName::from_static(name), HeaderValue::from_static(value));
        }
        let out = converted_headers(upstream, "application/json");
        assert_eq!(out.get(header::CONTENT_TYPE).unwrap(), "application/json");
        assert!(!out.contains_key(header::CONTENT_LENGTH) && !out.contains_key(header::CONTENT_ENCODING));
        assert_eq!(out.get_all("x-request-id").iter().count(), 2);
        assert_eq!(out.len(), 3);
        // Nothing to remove: the map is only given its type.
        let mut plain = HeaderMap::new();
        plain.insert(header::HeaderName::from_static("x-request-id"), HeaderValue::from_static("r"));
        assert_eq!(converted_headers(plain, "text/event-stream").len(), 2);
    }

    fn json(b: &Bytes) -> serde_json::Value {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn a_responses_endpoint_gets_the_session_as_prompt_cache_key_unless_the_client_set_one() {
        let claude = br#"{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;
        let mut c = RequestConversion::new(Format::Anthropic, false);
        c.session_id = Some("c5afce96-fad0-4a19-a6d7-756800b47b50".into());
        let to_responses = json(&c.body(claude, Format::Responses, "gpt-5").unwrap());
        assert_eq!(to_responses["prompt_cache_key"], "c5afce96-fad0-4a19-a6d7-756800b47b50");
        // Only a responses endpoint: the others have no such field.
        assert!(json(&c.body(claude, Format::Openai, "gpt-5").unwrap()).get("prompt_cache_key").is_none());
        // No session: nothing is made up.
        let mut c = RequestConversion::new(Format::Anthropic, false);
        assert!(json(&c.body(claude, Format::Responses, "gpt-5").unwrap()).get("prompt_cache_key").is_none());
        // The client's own key wins.
        let chat = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":"mine"}"#;
        let mut c = RequestConversion::new(Format::Openai, false);
        c.session_id = Some("the-session".into());
        assert_eq!(json(&c.body(chat, Format::Responses, "gpt-5").unwrap())["prompt_cache_key"], "mine");
    }

    /// The record's losses for a format are those of the first body encoded for it, however many
    /// models it is encoded for after, and none for a format nothing was encoded for.
    #[test]
    fn a_formats_losses_are_those_of_its_first_encoding() {
        let claude = br#"{"model":"m","max_tokens":8,"top_k":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let mut c = RequestConversion::new(Format::Anthropic, false);
        c.body(claude, Format::Openai, "gpt-a").unwrap();
        c.body(claude, Format::Openai, "gpt-b").unwrap();
        let losses = c.losses(Format::Openai);
        assert_eq!(losses.len(), 1, "{losses:?}");
        assert!(losses[0].starts_with("top_k: "), "{losses:?}");
        assert!(c.losses(Format::Gemini).is_empty());
    }

    /// A made-up id's suffix is the time and a count in hex, as `format!` writes them, and no two
    /// requests share one.
    #[test]
    fn id_seeds_are_written_as_hex_and_never_repeat() {
        let seed = ir::IdSeed::Unique { now_unix: 0x6935_1a2b, count: 0x2a };
        assert_eq!(seed.to_string(), "69351a2b0000002a");
        assert_eq!(ir::IdSeed::Unique { now_unix: 0, count: 0x1_0000_0000 }.to_string(), "0100000000");
        let seeds: std::collections::HashSet<String> = (0..1000).map(|_| id_seed(1_765_000_000).to_string()).collect();
        assert_eq!(seeds.len(), 1000);
        assert_eq!(ir::IdSeed::from("t").to_string(), "t");
    }
}
