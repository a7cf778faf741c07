//! The intermediate representation every codec decodes into and encodes from.
//!
//! It follows the Anthropic Messages model (content blocks, tool use / tool result blocks,
//! signed thinking), the richest of the three, with the additions the OpenAI APIs need
//! (image URLs, encrypted reasoning items, namespaced tools, structured output). Each field
//! says which wire fields map to it; `docs/protocols.md` has the full tables.

use serde_json::Value;

use crate::protocol::errors::ErrorKind;
use crate::protocol::json_write::push_json_members;

mod path;
mod schema;
pub use path::Path;
pub use schema::{
    ObjectWithSchemas, Place, RequestBody, Schema, SchemaPlaces, SchemaText, Schemas, parse_object_keeping_schemas,
};

/// The `signature` of a thinking block that carries a Responses reasoning item (its id and
/// `encrypted_content`) to an Anthropic client: the Anthropic SDKs keep a thinking block's
/// signature and send it back next turn, so the encrypted reasoning survives the round trip
/// (the mirror of the Responses codec's `ccmesh.anthropic-thinking.v1:` carrier, which takes
/// Anthropic signatures to Codex). Only the Responses API can use what it carries: no other
/// upstream ever receives it as a signature.
pub const REASONING_SIGNATURE: &str = "ccmesh.openai-reasoning.v1:";

/// `ccmesh.openai-reasoning.v1:{id}:{encrypted_content}` (the id may be empty; neither an
/// OpenAI item id nor base64 holds a `:`).
pub fn reasoning_signature(id: Option<&str>, encrypted_content: &str) -> String {
    format!("{REASONING_SIGNATURE}{}:{encrypted_content}", id.unwrap_or_default())
}

/// The reasoning item a [`reasoning_signature`] carries: its id, if any, and its encrypted
/// content. `None` for any other signature (Anthropic's own).
pub fn parse_reasoning_signature(signature: &str) -> Option<(Option<String>, String)> {
    let (id, encrypted) = signature.strip_prefix(REASONING_SIGNATURE)?.split_once(':')?;
    (!encrypted.is_empty()).then(|| ((!id.is_empty()).then(|| id.to_owned()), encrypted.to_owned()))
}

/// A request to generate, decoded from any inbound protocol.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    /// The model to send (already mapped / `@name/`-stripped by the gateway before encoding).
    pub model: String,
    /// System / developer instructions, in order. Anthropic `system` (string or text blocks);
    /// Chat `system` and `developer` messages (wherever they appear: a later one is kept in
    /// place via `Message.role == Role::System`); Responses `instructions` and
    /// `developer`/`system` input messages.
    pub system: Vec<TextPart>,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    /// `false` = at most one tool call per turn. Anthropic `tool_choice.disable_parallel_tool_use`
    /// (inverted); Chat / Responses `parallel_tool_calls`.
    pub parallel_tool_calls: Option<bool>,
    /// Anthropic `max_tokens` (required there); Chat `max_completion_tokens` (or legacy
    /// `max_tokens`); Responses `max_output_tokens`.
    pub max_tokens: Option<u64>,
    /// `0.0` is a value: never dropped.
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Anthropic only; lost elsewhere.
    pub top_k: Option<u64>,
    /// Anthropic `stop_sequences`; Chat `stop` (string or array). Responses has none (lossy).
    pub stop: Vec<String>,
    pub stream: bool,
    /// Chat only: the client asked for a usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    pub reasoning: Option<Reasoning>,
    /// End-user id: Anthropic `metadata.user_id`; Chat `user` / `safety_identifier`;
    /// Responses `user` / `safety_identifier`.
    pub user: Option<String>,
    /// Structured output: Chat `response_format`; Anthropic `output_config.format`;
    /// Responses `text.format`.
    pub output_format: Option<OutputFormat>,
    /// Responses `include: ["reasoning.encrypted_content"]`: the client wants encrypted
    /// reasoning back so it can replay it.
    pub include_encrypted_reasoning: bool,
    /// Responses and Chat `prompt_cache_key`: what OpenAI keys its prompt cache by. Encoded
    /// for a `responses` endpoint only (the gateway fills it from the client's session id when
    /// the client sent none); other targets have no such field.
    pub prompt_cache_key: Option<String>,
    /// Things of the source request the target cannot carry, recorded for the request record.
    pub losses: Vec<Loss>,
}

/// A remark about something a conversion could not carry over unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// The source field or item, e.g. `tools[3] (web_search)`, `top_k`, `stop`.
    pub field: String,
    /// What happened to it, e.g. "dropped: the openai format has no built-in web search".
    pub note: String,
}

impl Loss {
    pub fn new(field: impl Into<String>, note: impl Into<String>) -> Self {
        Self { field: field.into(), note: note.into() }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct TextPart {
    pub text: String,
    /// Anthropic `cache_control` (kept only Anthropic → Anthropic, which never converts; other
    /// targets drop it silently because it only affects billing and caching).
    pub cache_control: Option<Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
    /// A system/developer message in the middle of the conversation (Claude Code sends
    /// `{"role": "system"}` inside `messages`). Targets without the concept fold it into
    /// the system prompt or a user turn, with a loss note.
    System,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Text(TextPart),
    Image(Image),
    /// A tool call made by the assistant. `input` is the parsed JSON arguments when they
    /// parse; `arguments` keeps the raw argument string exactly as the model produced it
    /// (Chat / Responses carry strings, Anthropic carries objects).
    ToolUse {
        id: String,
        name: String,
        input: Value,
        arguments: Option<String>,
    },
    /// The result of a tool call, sent back by the client.
    ToolResult {
        tool_use_id: String,
        content: Vec<ToolResultContent>,
        is_error: bool,
    },
    /// Visible reasoning. `signature` is Anthropic's (only Anthropic accepts it back), or, for
    /// reasoning a Responses upstream produced, a [`reasoning_signature`] carrying that
    /// reasoning item (which the Anthropic request decoder turns back into a `ReasoningItem`).
    Thinking {
        text: String,
        signature: Option<String>,
    },
    /// Anthropic `redacted_thinking` (opaque `data`); only Anthropic accepts it back.
    RedactedThinking {
        data: String,
    },
    /// A Responses reasoning item: `id`, summary texts and `encrypted_content`; only the
    /// Responses API accepts it back (the summary text may be shown elsewhere as thinking).
    ReasoningItem {
        id: Option<String>,
        summary: Vec<String>,
        encrypted_content: Option<String>,
    },
    /// A document (PDF, plain text): Anthropic `document` blocks; Chat `file` parts
    /// (`file_data` data URL); Responses `input_file`.
    Document {
        source: DocumentSource,
        title: Option<String>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum DocumentSource {
    Base64 { media_type: String, data: String },
    Url { url: String },
    Text { text: String },
}

#[derive(Clone, Debug, PartialEq)]
pub enum ToolResultContent {
    Text(String),
    Image(Image),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Image {
    /// Anthropic `{"type":"base64","media_type":...,"data":...}`; OpenAI data URLs.
    Base64 { media_type: String, data: String },
    /// Anthropic `{"type":"url","url":...}`; OpenAI `image_url` http(s) URLs.
    Url { url: String },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// The name the target sees. Codex namespace tools are flattened to `namespace__tool`
    /// (reversibly: see `namespace`).
    pub name: String,
    pub description: Option<String>,
    /// The JSON Schema of the arguments, kept intact (as the client's text when it can be).
    pub input_schema: Schema,
    /// Chat / Responses `strict`.
    pub strict: Option<bool>,
    /// Set when this tool came from a Responses `namespace` tool: (namespace, original name),
    /// so a call to `name` can be turned back into the namespaced call.
    pub namespace: Option<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    /// Must call some tool: Anthropic `any`; Chat / Responses `required`.
    Any,
    None,
    /// Must call this tool.
    Tool(String),
}

/// Extended thinking / reasoning effort.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reasoning {
    /// Anthropic `thinking.budget_tokens`.
    pub budget_tokens: Option<u64>,
    /// `minimal` | `low` | `medium` | `high` (Chat `reasoning_effort`, Responses
    /// `reasoning.effort`, Anthropic `output_config.effort`).
    pub effort: Option<String>,
    /// Anthropic `thinking.type` `adaptive` (the model decides); `enabled` otherwise.
    pub adaptive: bool,
    /// Responses `reasoning.summary` (`auto` | `concise` | `detailed`).
    pub summary: Option<String>,
}

/// Reasoning effort (Chat `reasoning_effort`, Responses `reasoning.effort`) → Anthropic
/// `thinking.budget_tokens`. `none` turns thinking off.
pub fn effort_budget(effort: &str) -> Option<u64> {
    match effort {
        "minimal" => Some(1024),
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" => Some(16384),
        "xhigh" | "max" => Some(24576),
        _ => None,
    }
}

/// Anthropic `thinking.budget_tokens` → the effort of the OpenAI APIs (both use one table): the
/// effort whose budget ([`effort_budget`]) is the largest not above it, so an effort that went
/// through an Anthropic budget comes back as itself. Claude Code's budgets (4 000 "think",
/// 10 000 "think hard", 31 999 "ultrathink") land on low, medium and high.
pub fn effort_for_budget(budget: u64) -> &'static str {
    match budget {
        0..8192 => "low",
        8192..16384 => "medium",
        _ => "high",
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum OutputFormat {
    Text,
    JsonObject,
    JsonSchema { name: String, schema: Value, strict: Option<bool>, description: Option<String> },
}

/// A complete (non-streaming) answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Response {
    pub id: String,
    /// The model the upstream says answered.
    pub model: String,
    /// Assistant content in order: text, tool calls, thinking, reasoning items.
    pub content: Vec<Part>,
    pub stop_reason: Option<StopReason>,
    /// The stop sequence that ended the turn, when known.
    pub stop_sequence: Option<String>,
    pub usage: Usage,
    /// Unix seconds, when the upstream said (Chat `created`, Responses `created_at`).
    pub created: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Anthropic `end_turn`; Chat `stop`; Responses `completed`.
    EndTurn,
    /// Anthropic `max_tokens`; Chat `length`; Responses `incomplete` (`max_output_tokens`).
    MaxTokens,
    /// Anthropic `stop_sequence`; Chat `stop`.
    StopSequence,
    /// Anthropic `tool_use`; Chat `tool_calls`; Responses `completed` with function calls.
    ToolUse,
    /// Anthropic `refusal`; Chat `content_filter`; Responses `incomplete` (`content_filter`).
    Refusal,
    /// Anthropic `pause_turn`.
    PauseTurn,
}

/// Token usage, normalised: `input` excludes cached input in every protocol.
/// Anthropic reports it that way; OpenAI's `prompt_tokens` / `input_tokens` include cached
/// tokens (`cached_tokens`), so decoders subtract and encoders add back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub cache_read: Option<u64>,
    pub cache_write: Option<u64>,
    /// Reasoning tokens included in `output` (OpenAI reports them; Anthropic does not split).
    pub reasoning: Option<u64>,
}

impl Usage {
    /// Take the newer numbers field by field: a later usage report wins where it says something.
    pub fn merge(&mut self, newer: &Usage) {
        self.input = newer.input.or(self.input);
        self.output = newer.output.or(self.output);
        self.cache_read = newer.cache_read.or(self.cache_read);
        self.cache_write = newer.cache_write.or(self.cache_write);
        self.reasoning = newer.reasoning.or(self.reasoning);
    }
}

/// One step of a streamed answer. Blocks are numbered in output order (`index`), whatever the
/// upstream's own numbering; a decoder opens a block before its first delta and closes it
/// before the next block of another kind or at the end.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// The answer begins. `usage` may already carry the input side (Anthropic `message_start`).
    Start {
        id: String,
        model: String,
        usage: Usage,
        created: Option<u64>,
    },
    BlockStart {
        index: usize,
        block: BlockStart,
    },
    TextDelta {
        index: usize,
        text: String,
    },
    ThinkingDelta {
        index: usize,
        text: String,
    },
    /// Anthropic `signature_delta` for a thinking block.
    SignatureDelta {
        index: usize,
        signature: String,
    },
    /// A piece of a tool call's JSON arguments.
    ToolArgsDelta {
        index: usize,
        partial_json: String,
    },
    BlockStop {
        index: usize,
    },
    /// How the turn ended and the final usage (the latest numbers win field by field).
    Finish {
        stop_reason: Option<StopReason>,
        stop_sequence: Option<String>,
        usage: Usage,
    },
    /// The stream is complete (the source's terminal event arrived).
    End,
    /// The upstream reported an error inside the stream.
    Error {
        kind: ErrorKind,
        message: String,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum BlockStart {
    Text,
    Thinking,
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    /// A Responses reasoning item (with its id and, once known, encrypted content).
    ReasoningItem {
        id: Option<String>,
        encrypted_content: Option<String>,
    },
}

/// An error body from an upstream, decoded so it can be re-encoded in the client's protocol.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorBody {
    pub kind: ErrorKind,
    pub message: String,
    /// The upstream's own code / type string, kept for OpenAI `code`.
    pub code: Option<String>,
    pub param: Option<String>,
}

/// A unique, URL-safe suffix for the ids an encoder has to make up. Written out only when one is
/// made up, which an answer that carries its own id never needs; tests give a fixed one, so that
/// their output is deterministic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum IdSeed {
    /// Unix seconds and a process-wide count, in hex: `{now_unix:x}{count:08x}`.
    Unique {
        now_unix: u64,
        count: u64,
    },
    Fixed(&'static str),
}

impl Default for IdSeed {
    fn default() -> Self {
        IdSeed::Fixed("")
    }
}

impl From<&'static str> for IdSeed {
    fn from(seed: &'static str) -> Self {
        IdSeed::Fixed(seed)
    }
}

impl std::fmt::Display for IdSeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdSeed::Unique { now_unix, count } => write!(f, "{now_unix:x}{count:08x}"),
            IdSeed::Fixed(seed) => f.write_str(seed),
        }
    }
}

/// What an encoder needs to know about the client's original request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EncodeContext {
    /// The model the client asked for (used only when the upstream names none).
    pub request_model: String,
    /// Chat: the client asked for a usage chunk (`stream_options.include_usage`). The gateway
    /// always asks a Chat upstream for usage, and shows the client the chunk only if it asked.
    pub include_usage: bool,
    /// Tools flattened from Responses `namespace` tools: (flat name, namespace, name), so a
    /// call to the flat name can be turned back into the namespaced call.
    pub namespaced_tools: Vec<(String, String, String)>,
    /// Unix seconds "now", for `created` fields the target requires and the source lacks.
    pub created: u64,
    /// A unique, URL-safe suffix for ids the target requires and the source lacks
    /// (`msg_{seed}`, `resp_{seed}`, `call_{seed}_{n}` ...).
    pub id_seed: IdSeed,
    /// Responses: the client asked for `reasoning.encrypted_content`.
    pub include_encrypted_reasoning: bool,
    /// Ids the client already holds for this response: a resumed stream goes on under them.
    pub kept_ids: KeptIds,
}

/// Ids a client has already been sent (Responses: the response id, and each output item's id by
/// output index), which a continuation of its stream must keep.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeptIds {
    pub response: Option<String>,
    pub items: Vec<(usize, String)>,
}

/// An encoded request body plus what did not survive the conversion.
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    pub body: Vec<u8>,
    pub losses: Vec<Loss>,
}

/// Why a request cannot be converted at all (a feature whose loss would change its meaning).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConvertError {
    /// The source field, e.g. `messages[2].content[0]`.
    pub field: String,
    pub message: String,
}

impl ConvertError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

/// The parameters schema of a tool that declared none: an object with no properties.
pub static NO_PARAMETERS: std::sync::LazyLock<Schema> = std::sync::LazyLock::new(|| NO_PARAMETERS_VALUE.clone().into());

/// [`NO_PARAMETERS`] as a `Value`.
pub static NO_PARAMETERS_VALUE: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| serde_json::json!({"type": "object", "properties": {}}));

/// A request body an encoder builds as a `Value` map, with its tools written beside it from the
/// IR (a tool's schema is serialized from where it is, not copied into the map).
#[derive(serde::Serialize)]
pub struct BodyWithTools<T> {
    #[serde(flatten)]
    pub fields: serde_json::Map<String, Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<T>,
}

impl<T: serde::Serialize> BodyWithTools<T> {
    /// The body as its derived serializer writes it, the map's text copied in runs
    /// (`json_write::push_json_value`) instead of escaped byte by byte: a conversation's history
    /// is most of it.
    /// `capacity`: the room the body is likely to need ([`request_capacity`]).
    pub fn to_json(&self, capacity: usize) -> Result<Vec<u8>, serde_json::Error> {
        let mut out = Vec::with_capacity(capacity);
        let mut tools = Ok(());
        push_json_members(&mut out, self.fields.iter(), |json| {
            if !self.tools.is_empty() {
                tools = serde_json::to_writer(json.key("tools"), &self.tools);
            }
        });
        tools.map(|()| out)
    }
}

/// A JSON object of values already built. `json!` serializes every value it is given again, a
/// deep copy of a turn's blocks, a call's input or an image's data: encoders that build a `Value`
/// body put the big parts in with this instead.
pub fn object<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Object(entries.into_iter().map(|(key, value)| (key.to_owned(), value)).collect())
}

/// An answer's body written as JSON. `serde_json::to_vec` starts from an empty buffer and grows
/// it over and over for an answer of a few hundred bytes; this one starts at
/// [`answer_capacity`].
pub fn answer_json(body: &impl serde::Serialize, answer: &Response) -> Vec<u8> {
    let mut out = Vec::with_capacity(answer_capacity(answer));
    if serde_json::to_writer(&mut out, body).is_err() {
        out.clear();
    }
    out
}

/// The most a body's buffer is given before anything is written: an estimate counts room for
/// every part, and a hostile body of millions of empty parts must not reserve several times its
/// own size. A larger body grows its buffer as it is written.
pub const MAX_PRESIZE: usize = 4 << 20;

/// The room a request's body is likely to need, from the size of its text (a sixteenth more for
/// escapes) and its tools (a schema kept as text by its length): a buffer grown from nothing
/// doubles a dozen times on the way to a coding agent's turn, and copies what it holds each
/// time. At most [`MAX_PRESIZE`].
pub fn request_capacity(request: &Request) -> usize {
    /// Room for the members around the text, and for each part's and tool's own.
    const ENVELOPE: usize = 512;
    const PER_PART: usize = 64;
    const PER_TOOL: usize = 128;
    /// A parsed schema's room, unmeasured.
    const PER_SCHEMA: usize = 512;
    let part_len = |part: &Part| match part {
        Part::Text(t) => t.text.len(),
        Part::Thinking { text, .. } => text.len(),
        Part::ToolUse { arguments, .. } => arguments.as_ref().map_or(0, String::len),
        Part::ToolResult { content, .. } => content
            .iter()
            .map(|c| match c {
                ToolResultContent::Text(t) => t.len(),
                ToolResultContent::Image(_) => 0,
            })
            .sum(),
        _ => 0,
    };
    let system: usize = request.system.iter().map(|p| p.text.len()).sum();
    let messages: usize = request.messages.iter().flat_map(|m| &m.content).map(|p| part_len(p) + PER_PART).sum();
    let schema_len = |schema: &Schema| match schema {
        Schema::Text(text) => text.get().len(),
        Schema::Value(_) => PER_SCHEMA,
    };
    let tools: usize = request
        .tools
        .iter()
        .map(|t| t.description.as_ref().map_or(0, String::len) + schema_len(&t.input_schema) + PER_TOOL)
        .sum();
    let text = system + messages + tools;
    (ENVELOPE + text + text / 16).min(MAX_PRESIZE)
}

/// The room an answer's body is likely to need, from the size of its text. At most
/// [`MAX_PRESIZE`].
pub fn answer_capacity(answer: &Response) -> usize {
    /// Room for the members around the text: ids, model, stop reason, usage.
    const ENVELOPE: usize = 512;
    let text: usize = answer
        .content
        .iter()
        .map(|part| match part {
            Part::Text(t) => t.text.len(),
            Part::Thinking { text, .. } => text.len(),
            Part::ToolUse { arguments, .. } => arguments.as_ref().map_or(64, String::len),
            _ => 64,
        })
        .sum();
    (ENVELOPE + text).min(MAX_PRESIZE)
}

/// A body that must be one JSON object (a request, an answer), or the refusal that says why not.
pub fn parse_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, ConvertError> {
    match crate::protocol::lenient::from_json::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ConvertError::new("body", "the body must be a JSON object")),
        Err(e) => Err(ConvertError::new("body", format!("the body is not valid JSON: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of a million empty parts reserves no more than the cap; a turn reserves its text.
    #[test]
    fn a_body_reserves_room_for_its_text_up_to_the_cap() {
        let part = || Part::Text(TextPart { text: String::new(), cache_control: None });
        let many = Request {
            messages: vec![Message { role: Role::User, content: (0..1_000_000).map(|_| part()).collect() }],
            ..Request::default()
        };
        assert_eq!(request_capacity(&many), MAX_PRESIZE);
        let turn = Request {
            system: vec![TextPart { text: "s".repeat(10_000), cache_control: None }],
            messages: vec![Message {
                role: Role::User,
                content: vec![Part::Text(TextPart { text: "t".repeat(5_000), cache_control: None })],
            }],
            ..Request::default()
        };
        assert!(request_capacity(&turn) > 16_000 && request_capacity(&turn) < 16_600, "{}", request_capacity(&turn));
        let schema = "{\"type\":\"object\"}".repeat(1_000);
        let tool = Tool {
            name: "t".into(),
            description: None,
            input_schema: Schema::Text(SchemaText::parse(&format!("[{}]", schema.replace("}{", "},{"))).unwrap()),
            strict: None,
            namespace: None,
        };
        let with_tools = Request { tools: vec![tool.clone(), tool], ..Request::default() };
        assert!(request_capacity(&with_tools) > 2 * schema.len(), "a kept schema's text is counted");
        let answer = Response {
            content: (0..1_000_000).map(|_| Part::Image(Image::Url { url: String::new() })).collect(),
            ..Response::default()
        };
        assert_eq!(answer_capacity(&answer), MAX_PRESIZE);
    }

    /// A body's JSON is what its derived serializer writes, byte for byte: with and without
    /// tools, with and without other members, text that needs escapes in keys and values.
    #[test]
    fn a_body_with_tools_is_written_as_its_serializer_writes_it() {
        let fields = serde_json::json!({
            "model": "claude", "max_tokens": 1024, "temperature": 0.5, "stream": true, "stop": null,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a \"quote\"\n\u{1} é 😀"}]}],
            "metadata": {"user\"id": "x\\y"}
        });
        let serde_json::Value::Object(fields) = fields else { unreachable!() };
        let tools = vec![serde_json::json!({"name": "t", "input_schema": {"type": "object"}})];
        for (fields, tools) in [
            (fields.clone(), tools.clone()),
            (fields.clone(), Vec::new()),
            (serde_json::Map::new(), tools.clone()),
            (serde_json::Map::new(), Vec::new()),
        ] {
            let body = BodyWithTools { fields, tools };
            assert_eq!(body.to_json(0).unwrap(), serde_json::to_vec(&body).unwrap());
        }
    }

    #[test]
    fn efforts_survive_an_anthropic_budget() {
        // The Chat and Responses codecs each had a table from budget to effort, and neither
        // gave `high` back for high's own budget (16 384 read as `medium` in both).
        for effort in ["low", "medium", "high"] {
            let budget = effort_budget(effort).unwrap();
            assert_eq!(effort_for_budget(budget), effort, "{effort} via {budget}");
        }
        assert_eq!(effort_for_budget(effort_budget("minimal").unwrap()), "low");
        assert_eq!(effort_for_budget(effort_budget("xhigh").unwrap()), "high");
        // Claude Code's budgets, and the edges.
        assert_eq!(effort_for_budget(4000), "low");
        assert_eq!(effort_for_budget(10_000), "medium");
        assert_eq!(effort_for_budget(31_999), "high");
        assert_eq!(effort_for_budget(0), "low");
        assert_eq!(effort_for_budget(8191), "low");
        assert_eq!(effort_for_budget(16_383), "medium");
        assert_eq!(effort_for_budget(u64::MAX), "high");
    }
}
