//! A Gemini client's request (Gemini CLI, the Google GenAI SDKs) to the IR; also the
//! `countTokens` request.

use serde_json::Value;

use super::super::response::{Calls, Decoded, decode_part};
use super::super::{Obj, field, field_str, openapi_to_json_schema};
use crate::convert::ir::*;
use crate::protocol::lenient::{count, get, get_str};

/// Top-level fields this decoder reads or deliberately drops; anything else is dropped with a
/// `Loss` saying it is unknown.
const KNOWN_REQUEST_FIELDS: &[&str] = &[
    "model",
    "contents",
    "systemInstruction",
    "system_instruction",
    "tools",
    "toolConfig",
    "tool_config",
    "generationConfig",
    "generation_config",
    "safetySettings",
    "safety_settings",
    "cachedContent",
    "cached_content",
    "labels",
];

/// Client request body → IR. `model` is empty unless the body names one (the model is in the
/// URL path) and `stream` is false (the method says it): the caller sets both.
pub fn decode_request(body: &[u8]) -> Result<Request, ConvertError> {
    decode_object(&parse_object(body)?)
}

/// A `countTokens` body → IR: `{"contents": …}` or `{"generateContentRequest": {…}}` (which
/// also counts the system instruction and tools).
pub fn decode_count_tokens_request(body: &[u8]) -> Result<Request, ConvertError> {
    let obj = parse_object(body)?;
    match field(&obj, "generateContentRequest", "generate_content_request") {
        Some(Value::Object(inner)) => decode_object(inner),
        Some(_) => Err(ConvertError::new("generateContentRequest", "`generateContentRequest` must be an object")),
        None => decode_object(&obj),
    }
}

fn decode_object(o: &Obj) -> Result<Request, ConvertError> {
    let mut req = Request::default();
    let mut losses = Vec::new();
    if let Some(m) = get_str(o, "model") {
        req.model = m.strip_prefix("models/").unwrap_or(m).to_owned();
    }
    if field(o, "cachedContent", "cached_content").is_some() {
        return Err(ConvertError::new(
            "cachedContent",
            "`cachedContent` refers to a context cache stored at Google; only a Gemini endpoint can read it",
        ));
    }
    let generation = match field(o, "generationConfig", "generation_config") {
        None => None,
        Some(Value::Object(g)) => Some(g),
        Some(_) => return Err(ConvertError::new("generationConfig", "`generationConfig` must be an object")),
    };
    if let Some(g) = generation {
        refuse_generation(g)?;
    }

    if let Some(si) = field(o, "systemInstruction", "system_instruction") {
        req.system = system_parts(si)?;
    }
    let contents = match get(o, "contents") {
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ConvertError::new("contents", "`contents` must be an array of contents")),
        None => return Err(ConvertError::new("contents", "`contents` is required")),
    };
    let mut calls = Calls::default();
    for (i, c) in contents.iter().enumerate() {
        if let Some(m) = content(i, c, &mut calls, &mut losses)? {
            req.messages.push(m);
        }
    }

    if let Some(t) = get(o, "tools") {
        let Some(list) = t.as_array() else { return Err(ConvertError::new("tools", "`tools` must be an array")) };
        for (k, tool) in list.iter().enumerate() {
            tools(k, tool, &mut req.tools, &mut losses)?;
        }
    }
    if let Some(tc) = field(o, "toolConfig", "tool_config").and_then(Value::as_object) {
        req.tool_choice = tool_choice(tc, &mut losses)?;
    }
    if let Some(g) = generation {
        generation_config(g, &mut req, &mut losses)?;
    }
    if field(o, "safetySettings", "safety_settings").is_some() {
        losses.push(Loss::new("safetySettings", "dropped: the other formats have no safety thresholds"));
    }
    for key in o.keys().filter(|k| !KNOWN_REQUEST_FIELDS.contains(&k.as_str())) {
        losses.push(Loss::new(key.clone(), "dropped: unknown request field"));
    }
    req.losses = losses;
    Ok(req)
}

/// `systemInstruction`: a `Content` (its role is ignored), or a plain string from a hand-made
/// request.
fn system_parts(si: &Value) -> Result<Vec<TextPart>, ConvertError> {
    let parts = match si {
        Value::String(s) => return Ok(vec![TextPart { text: s.clone(), cache_control: None }]),
        Value::Object(c) => get(c, "parts").and_then(Value::as_array),
        _ => None,
    };
    let Some(parts) = parts else {
        return Err(ConvertError::new("systemInstruction", "`systemInstruction` must be a content with `parts`"));
    };
    parts
        .iter()
        .enumerate()
        .map(|(j, p)| match p.get("text").and_then(Value::as_str) {
            Some(t) => Ok(TextPart { text: t.to_owned(), cache_control: None }),
            None => Err(ConvertError::new(
                format!("systemInstruction.parts[{j}]"),
                "system instruction parts must be text parts",
            )),
        })
        .collect()
}

/// One `Content` → an IR message (`None` when nothing in it survives).
fn content(i: usize, c: &Value, calls: &mut Calls, losses: &mut Vec<Loss>) -> Result<Option<Message>, ConvertError> {
    let Some(c) = c.as_object() else {
        return Err(ConvertError::new(format!("contents[{i}]"), "each content must be an object"));
    };
    let role = match get_str(c, "role") {
        None | Some("user" | "function" | "tool") => Role::User,
        Some("model") => Role::Assistant,
        Some(other) => return Err(ConvertError::new(format!("contents[{i}].role"), format!("unknown role '{other}'"))),
    };
    let parts = match get(c, "parts") {
        Some(Value::Array(p)) => p.as_slice(),
        None => &[],
        Some(_) => return Err(ConvertError::new(format!("contents[{i}].parts"), "`parts` must be an array")),
    };
    if role == Role::Assistant {
        calls.new_turn();
    }
    let mut out = Vec::with_capacity(parts.len());
    for (j, p) in parts.iter().enumerate() {
        let at = || format!("contents[{i}].parts[{j}]");
        let Some(p) = p.as_object() else {
            return Err(ConvertError::new(at(), "each part must be an object"));
        };
        if let Some(uri) =
            field(p, "fileData", "file_data").and_then(|d| field_str(d.as_object()?, "fileUri", "file_uri"))
            && is_gemini_file(uri)
        {
            return Err(ConvertError::new(
                at(),
                format!("'{uri}' is a file uploaded to the Gemini Files API; only a Gemini endpoint can read it"),
            ));
        }
        match decode_part(p, calls) {
            Decoded::Part(part) => out.push(part),
            Decoded::Skip => {}
            Decoded::ServerTool => {
                losses.push(Loss::new(at(), "dropped: code execution history exists only at Gemini"))
            }
            Decoded::Media(mime) => {
                return Err(ConvertError::new(
                    at(),
                    format!("{mime} input cannot be converted: the other formats take images, PDF and text only"),
                ));
            }
            Decoded::Unknown => losses.push(Loss::new(at(), "dropped: unknown part")),
        }
    }
    Ok((!out.is_empty()).then_some(Message { role, content: out }))
}

/// A URI of the Gemini Files API (`files/…`, or its full URL): unreadable for other vendors.
fn is_gemini_file(uri: &str) -> bool {
    uri.starts_with("files/") || uri.contains("generativelanguage.googleapis.com/")
}

/// One entry of `tools`: its function declarations; Google's built-in tools are dropped.
fn tools(k: usize, tool: &Value, out: &mut Vec<Tool>, losses: &mut Vec<Loss>) -> Result<(), ConvertError> {
    let Some(t) = tool.as_object() else {
        return Err(ConvertError::new(format!("tools[{k}]"), "each tool must be an object"));
    };
    for key in t.keys() {
        if key != "functionDeclarations" && key != "function_declarations" {
            losses.push(Loss::new(
                format!("tools[{k}].{key}"),
                "dropped: a Google built-in tool (search, code execution, URL context, …) has no equivalent elsewhere",
            ));
        }
    }
    let Some(decls) = field(t, "functionDeclarations", "function_declarations") else { return Ok(()) };
    let Some(decls) = decls.as_array() else {
        return Err(ConvertError::new(
            format!("tools[{k}].functionDeclarations"),
            "`functionDeclarations` must be an array",
        ));
    };
    for (d, decl) in decls.iter().enumerate() {
        let at = format!("tools[{k}].functionDeclarations[{d}]");
        let Some(decl) = decl.as_object() else {
            return Err(ConvertError::new(at, "each function declaration must be an object"));
        };
        let Some(name) = get_str(decl, "name").filter(|n| !n.is_empty()) else {
            return Err(ConvertError::new(format!("{at}.name"), "`name` is required"));
        };
        let input_schema = if let Some(s) = field(decl, "parametersJsonSchema", "parameters_json_schema") {
            s.clone().into()
        } else if let Some(s) = get(decl, "parameters") {
            openapi_to_json_schema(s).into()
        } else {
            NO_PARAMETERS.clone()
        };
        if field(decl, "response", "response").is_some()
            || field(decl, "responseJsonSchema", "response_json_schema").is_some()
        {
            losses
                .push(Loss::new(format!("{at}.response"), "dropped: the other formats do not declare a result schema"));
        }
        out.push(Tool {
            name: name.to_owned(),
            description: get_str(decl, "description").map(str::to_owned),
            input_schema,
            strict: None,
            namespace: None,
        });
    }
    Ok(())
}

fn tool_choice(tc: &Obj, losses: &mut Vec<Loss>) -> Result<Option<ToolChoice>, ConvertError> {
    let Some(fcc) = field(tc, "functionCallingConfig", "function_calling_config").and_then(Value::as_object) else {
        return Ok(None);
    };
    let allowed: Vec<&str> = field(fcc, "allowedFunctionNames", "allowed_function_names")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let choice = match get_str(fcc, "mode") {
        None | Some("MODE_UNSPECIFIED") => None,
        Some("AUTO") => Some(ToolChoice::Auto),
        Some("NONE") => Some(ToolChoice::None),
        Some("ANY") => match allowed.as_slice() {
            [one] => Some(ToolChoice::Tool((*one).to_owned())),
            _ => Some(ToolChoice::Any),
        },
        Some("VALIDATED") => {
            losses.push(Loss::new(
                "toolConfig.functionCallingConfig.mode",
                "VALIDATED sent as auto: the other formats have no schema-validated mode",
            ));
            Some(ToolChoice::Auto)
        }
        Some(other) => {
            return Err(ConvertError::new(
                "toolConfig.functionCallingConfig.mode",
                format!("unknown function calling mode '{other}'"),
            ));
        }
    };
    if allowed.len() > 1 || (allowed.len() == 1 && choice != Some(ToolChoice::Tool(allowed[0].to_owned()))) {
        losses.push(Loss::new(
            "toolConfig.functionCallingConfig.allowedFunctionNames",
            "dropped: the other formats restrict the choice to one tool or none",
        ));
    }
    Ok(choice)
}

/// Generation settings whose loss would change the answer.
fn refuse_generation(g: &Obj) -> Result<(), ConvertError> {
    if let Some(n) = field(g, "candidateCount", "candidate_count") {
        match count(n) {
            Some(0 | 1) => {}
            Some(n) => {
                return Err(ConvertError::new(
                    "generationConfig.candidateCount",
                    format!("`candidateCount` = {n} asks for {n} candidates; a converted request yields exactly one"),
                ));
            }
            None => {
                return Err(ConvertError::new(
                    "generationConfig.candidateCount",
                    "`candidateCount` must be a positive integer",
                ));
            }
        }
    }
    if let Some(m) = field(g, "responseModalities", "response_modalities").and_then(Value::as_array)
        && m.iter().filter_map(Value::as_str).any(|m| !m.eq_ignore_ascii_case("TEXT"))
    {
        return Err(ConvertError::new(
            "generationConfig.responseModalities",
            "image or audio output cannot be converted: the other formats answer with text",
        ));
    }
    if field(g, "speechConfig", "speech_config").is_some() {
        return Err(ConvertError::new("generationConfig.speechConfig", "speech output cannot be converted"));
    }
    Ok(())
}

fn number(g: &Obj, camel: &str, snake: &str) -> Result<Option<f64>, ConvertError> {
    match field(g, camel, snake) {
        None => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| {
            ConvertError::new(format!("generationConfig.{camel}"), format!("`{camel}` must be a number"))
        }),
    }
}

fn integer(g: &Obj, camel: &str, snake: &str) -> Result<Option<u64>, ConvertError> {
    match field(g, camel, snake) {
        None => Ok(None),
        Some(v) => count(v).map(Some).ok_or_else(|| {
            ConvertError::new(format!("generationConfig.{camel}"), format!("`{camel}` must be a non-negative integer"))
        }),
    }
}

/// Generation settings that Gemini shares with the other formats, and the harmless rest.
fn generation_config(g: &Obj, req: &mut Request, losses: &mut Vec<Loss>) -> Result<(), ConvertError> {
    req.temperature = number(g, "temperature", "temperature")?;
    req.top_p = number(g, "topP", "top_p")?;
    req.top_k = integer(g, "topK", "top_k")?;
    req.max_tokens = integer(g, "maxOutputTokens", "max_output_tokens")?;
    if let Some(s) = field(g, "stopSequences", "stop_sequences") {
        let list = s.as_array().ok_or_else(|| {
            ConvertError::new("generationConfig.stopSequences", "`stopSequences` must be an array of strings")
        })?;
        req.stop = list.iter().filter_map(Value::as_str).map(str::to_owned).collect();
    }

    // Structured output: a JSON Schema as it is, or the OpenAPI-subset schema converted.
    let mime = field_str(g, "responseMimeType", "response_mime_type");
    let schema = field(g, "responseJsonSchema", "response_json_schema")
        .or_else(|| get(g, "_responseJsonSchema"))
        .cloned()
        .or_else(|| field(g, "responseSchema", "response_schema").map(openapi_to_json_schema));
    req.output_format = match (mime, schema) {
        (_, Some(schema)) => {
            Some(OutputFormat::JsonSchema { name: "response".into(), schema, strict: None, description: None })
        }
        (Some("application/json"), None) => Some(OutputFormat::JsonObject),
        (Some("text/plain") | None, None) => None,
        (Some(other), None) => {
            losses
                .push(Loss::new("generationConfig.responseMimeType", format!("dropped: '{other}' has no equivalent")));
            None
        }
    };

    if let Some(t) = field(g, "thinkingConfig", "thinking_config").and_then(Value::as_object) {
        req.reasoning = thinking(t)?;
    }
    for (camel, snake) in [
        ("seed", "seed"),
        ("presencePenalty", "presence_penalty"),
        ("frequencyPenalty", "frequency_penalty"),
        ("responseLogprobs", "response_logprobs"),
        ("logprobs", "logprobs"),
        ("mediaResolution", "media_resolution"),
        ("enableEnhancedCivicAnswers", "enable_enhanced_civic_answers"),
    ] {
        if field(g, camel, snake).is_some() {
            losses.push(Loss::new(format!("generationConfig.{camel}"), "dropped: not carried to the other formats"));
        }
    }
    Ok(())
}

/// `thinkingConfig` → IR reasoning: a budget (`-1` = dynamic, the model decides, like
/// Anthropic's adaptive thinking; `0` = off), or Gemini 3's level as an effort;
/// `includeThoughts` asks for the thoughts to be shown (a reasoning summary, for Responses).
fn thinking(t: &Obj) -> Result<Option<Reasoning>, ConvertError> {
    let include = field(t, "includeThoughts", "include_thoughts").and_then(Value::as_bool) == Some(true);
    let mut r =
        Reasoning { budget_tokens: None, effort: None, adaptive: false, summary: include.then(|| "auto".to_owned()) };
    match field(t, "thinkingBudget", "thinking_budget") {
        None => {}
        Some(b) if b.as_i64() == Some(-1) => r.adaptive = true,
        Some(b) if b.as_i64() == Some(0) => r.effort = Some("none".into()),
        Some(b) => {
            r.budget_tokens = Some(count(b).ok_or_else(|| {
                ConvertError::new(
                    "generationConfig.thinkingConfig.thinkingBudget",
                    "`thinkingBudget` must be an integer",
                )
            })?);
        }
    }
    if let Some(level) = field_str(t, "thinkingLevel", "thinking_level") {
        let effort = match level.to_ascii_uppercase().as_str() {
            "MINIMAL" => "minimal",
            "LOW" => "low",
            "MEDIUM" => "medium",
            "HIGH" => "high",
            "THINKING_LEVEL_UNSPECIFIED" => return Ok(Some(r)),
            _ => {
                return Err(ConvertError::new(
                    "generationConfig.thinkingConfig.thinkingLevel",
                    format!("unknown thinking level '{level}'"),
                ));
            }
        };
        r.effort = Some(effort.into());
    }
    let any = r.budget_tokens.is_some() || r.effort.is_some() || r.adaptive || r.summary.is_some();
    Ok(any.then_some(r))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::super::super::tests::*;
    use super::*;
    use insta::assert_json_snapshot;
    use serde_json::json;

    #[test]
    fn decode_cli_routing_call() {
        let r =
            decode_request(&fixture_body(fixture!("cli_plain_01_v1beta_generateContent_gemini-3.5-flash-lite.json")))
                .unwrap();
        assert_json_snapshot!(request_json(&r, false));
    }

    #[test]
    fn decode_cli_stream_turn() {
        let r =
            decode_request(&fixture_body(fixture!("cli_plain_02_v1beta_streamGenerateContent_gemini-3.8-flash.json")))
                .unwrap();
        assert_json_snapshot!(request_json(&r, false));
    }

    #[test]
    fn decode_cli_tool_round_trip() {
        // The CLI made the call id up; the response finds its call by it.
        let r =
            decode_request(&fixture_body(fixture!("cli_tool_03_v1beta_streamGenerateContent_gemini-3.8-flash.json")))
                .unwrap();
        let view = request_json(&r, false);
        assert_json_snapshot!(view["messages"]);
        let Part::ToolUse { id, .. } = &r.messages[1].content[0] else { panic!("a call") };
        let Part::ToolResult { tool_use_id, .. } = &r.messages[2].content[0] else { panic!("a result") };
        assert_eq!(id, tool_use_id);
        assert!(id.starts_with("list_directory_1796110798950_0__thought__"));
    }

    #[test]
    fn decode_python_sdk_function_turn() {
        let r = decode_request(&fixture_body(fixture!(
            "pysdk_function_manual_06_v1_generateContent_gemini-2.5-flash.json"
        )))
        .unwrap();
        assert_json_snapshot!(request_json(&r, false));
    }

    #[test]
    fn decode_node_sdk_function_turn() {
        let r = decode_request(&fixture_body(fixture!(
            "nodesdk_function_manual_04_v1_generateContent_gemini-2.5-flash.json"
        )))
        .unwrap();
        assert_json_snapshot!(request_json(&r, false));
    }

    #[test]
    fn decode_count_tokens_bodies() {
        let r = decode_count_tokens_request(&fixture_body(fixture!(
            "pysdk_count_tokens_11_v1_countTokens_gemini-2.5-flash.json"
        )))
        .unwrap();
        assert_json_snapshot!(request_json(&r, false)["messages"]);
        let wrapped = json!({"generateContentRequest": {"model": "models/gemini-2.5-pro", "contents": [{"parts": [{"text": "hi"}]}], "systemInstruction": {"parts": [{"text": "be brief"}]}}});
        let r = decode_count_tokens_request(&serde_json::to_vec(&wrapped).unwrap()).unwrap();
        assert_eq!(r.model, "gemini-2.5-pro");
        assert_eq!(r.system[0].text, "be brief");
    }

    #[test]
    fn decode_features_and_spellings() {
        let r = dec(&json!({
            "contents": [
                {"role": "user", "parts": [
                    {"text": "Describe"},
                    {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"fileData": {"mimeType": "application/pdf", "fileUri": "https://example.com/a.pdf"}},
                    {"executableCode": {"language": "PYTHON", "code": "print(1)"}}
                ]},
                {"role": "model", "parts": [{"function_call": {"name": "get_weather", "args": {"city": "Paris"}}}, {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"error": "no such city"}}},
                    {"functionResponse": {"name": "get_weather", "response": {"temp": 18}}}
                ]}
            ],
            "system_instruction": {"parts": [{"text": "Be brief."}, {"text": "Use tools."}]},
            "tools": [
                {"function_declarations": [
                    {"name": "get_weather", "description": "Weather", "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING", "nullable": true}, "days": {"type": "ARRAY", "items": {"type": "INTEGER"}, "min_items": 1}}, "required": ["city"], "property_ordering": ["city", "days"]}},
                    {"name": "noop"},
                    {"name": "raw", "parameters_json_schema": {"type": "object", "additionalProperties": false}}
                ]},
                {"googleSearch": {}}
            ],
            "tool_config": {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["get_weather"]}},
            "generation_config": {
                "temperature": 0, "top_p": 0.9, "top_k": 40, "max_output_tokens": 1000, "stop_sequences": ["END"],
                "response_mime_type": "application/json",
                "response_schema": {"type": "OBJECT", "properties": {"answer": {"type": "STRING"}}},
                "thinking_config": {"include_thoughts": true, "thinking_budget": 2048},
                "seed": 7
            },
            "safetySettings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}]
        }));
        let mut view = request_json(&r, false);
        view["schemas"] =
            json!(r.tools.iter().map(|t| t.input_schema.value().unwrap().into_owned()).collect::<Vec<_>>());
        assert_json_snapshot!(view);
    }

    #[test]
    fn decode_thinking_configs() {
        let cases = [
            json!({"thinkingBudget": -1}),
            json!({"thinkingBudget": 0}),
            json!({"thinkingBudget": 24576, "includeThoughts": false}),
            json!({"thinkingLevel": "HIGH", "includeThoughts": true}),
            json!({"thinking_level": "low"}),
            json!({"includeThoughts": true}),
            json!({}),
        ];
        let got: Vec<String> = cases
            .iter()
            .map(|t| {
                format!(
                    "{t} → {:?}",
                    dec(&json!({"contents": [], "generationConfig": {"thinkingConfig": t}})).reasoning
                )
            })
            .collect();
        assert_json_snapshot!(got);
    }

    #[test]
    fn decode_refusals() {
        let cases = [
            json!({}),
            json!({"contents": {}}),
            json!({"contents": [{"role": "system", "parts": []}]}),
            json!({"contents": [], "generationConfig": {"candidateCount": 2}}),
            json!({"contents": [], "generationConfig": {"responseModalities": ["TEXT", "IMAGE"]}}),
            json!({"contents": [], "cachedContent": "cachedContents/abc"}),
            json!({"contents": [{"parts": [{"inlineData": {"mimeType": "audio/wav", "data": "UklG"}}]}]}),
            json!({"contents": [{"parts": [{"fileData": {"mimeType": "video/mp4", "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc"}}]}]}),
            json!({"contents": [], "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}}),
            json!({"contents": [], "generationConfig": {"thinkingConfig": {"thinkingLevel": "EXTREME"}}}),
            json!({"contents": [], "tools": [{"functionDeclarations": [{"description": "no name"}]}]}),
        ];
        let got: Vec<String> = cases
            .iter()
            .map(|c| {
                let e = dec_err(c);
                format!("{}: {}", e.field, e.message)
            })
            .collect();
        assert_json_snapshot!(got);
    }
}
