//! A Responses request body as the encoder builds it, borrowing the IR, and how it is written: by
//! hand (`protocol::json_write`), members in the order the derived serializer once gave them. A
//! coding agent's turn is tens of kilobytes of text; copying it in runs instead of byte by byte
//! is most of what writing it costs.

use std::borrow::Cow;

use serde_json::Value;

use crate::convert::ir::Schema;
use crate::protocol::json_write::{JsonObject, push_json_string, push_json_value};

pub(super) struct ResponsesRequestOut<'a> {
    pub model: &'a str,
    pub instructions: Option<String>,
    pub input: Vec<ItemOut<'a>>,
    /// Left out when empty.
    pub tools: Vec<ToolOut<'a>>,
    pub tool_choice: Option<ToolChoiceOut<'a>>,
    pub parallel_tool_calls: Option<bool>,
    pub max_output_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub reasoning: Option<ReasoningOut<'a>>,
    /// `text.format`.
    pub text_format: Option<Value>,
    pub user: Option<Cow<'a, str>>,
    pub prompt_cache_key: Option<&'a str>,
    pub stream: bool,
    pub store: bool,
    pub include: Option<&'static str>,
}

impl ResponsesRequestOut<'_> {
    /// `capacity`: the room the body is likely to need (`ir::request_capacity`).
    pub fn to_json(&self, capacity: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(capacity);
        let mut json = JsonObject::open(&mut out);
        json.text("model", self.model);
        json.text_if("instructions", self.instructions.as_deref());
        let mut input = json.list("input");
        for item in &self.input {
            item.write(input.object());
        }
        input.close();
        if !self.tools.is_empty() {
            let mut tools = json.list("tools");
            for tool in &self.tools {
                tool.write(tools.object());
            }
            tools.close();
        }
        if let Some(choice) = &self.tool_choice {
            choice.write(json.key("tool_choice"));
        }
        if let Some(parallel) = self.parallel_tool_calls {
            json.flag("parallel_tool_calls", parallel);
        }
        if let Some(n) = self.max_output_tokens {
            json.count("max_output_tokens", n);
        }
        if let Some(t) = self.temperature {
            json.value("temperature", &t);
        }
        if let Some(p) = self.top_p {
            json.value("top_p", &p);
        }
        if let Some(reasoning) = &self.reasoning {
            let mut object = json.object("reasoning");
            object.text_if("effort", reasoning.effort);
            object.text_if("summary", reasoning.summary);
            object.close();
        }
        if let Some(format) = &self.text_format {
            let mut text = json.object("text");
            push_json_value(text.key("format"), format);
            text.close();
        }
        json.text_if("user", self.user.as_deref());
        json.text_if("prompt_cache_key", self.prompt_cache_key);
        json.flag("stream", self.stream);
        json.flag("store", self.store);
        if let Some(include) = self.include {
            let mut list = json.list("include");
            push_json_string(list.element(), include);
            list.close();
        }
        json.close();
        out
    }
}

pub(super) enum ItemOut<'a> {
    Message { role: &'static str, content: Vec<PartOut<'a>> },
    FunctionCallOutput { call_id: &'a str, output: Value },
    FunctionCall { call_id: &'a str, name: &'a str, arguments: String },
    Reasoning { id: Option<&'a str>, summary: Vec<&'a str>, encrypted_content: &'a str },
}

impl ItemOut<'_> {
    fn write(&self, mut json: JsonObject<'_>) {
        match self {
            ItemOut::Message { role, content } => {
                json.text("type", "message");
                json.text("role", role);
                let mut list = json.list("content");
                for part in content {
                    part.write(list.object());
                }
                list.close();
            }
            ItemOut::FunctionCallOutput { call_id, output } => {
                json.text("type", "function_call_output");
                json.text("call_id", call_id);
                push_json_value(json.key("output"), output);
            }
            ItemOut::FunctionCall { call_id, name, arguments } => {
                json.text("type", "function_call");
                json.text("call_id", call_id);
                json.text("name", name);
                json.text("arguments", arguments);
            }
            ItemOut::Reasoning { id, summary, encrypted_content } => {
                json.text("type", "reasoning");
                json.text_if("id", *id);
                let mut list = json.list("summary");
                for text in summary {
                    let mut part = list.object();
                    part.text("type", "summary_text");
                    part.text("text", text);
                    part.close();
                }
                list.close();
                json.text("encrypted_content", encrypted_content);
            }
        }
        json.close();
    }
}

pub(super) enum PartOut<'a> {
    InputText { text: Cow<'a, str> },
    OutputText { text: &'a str },
    InputImage { image_url: String, detail: &'static str },
    InputFile { filename: Option<&'a str>, file_data: Option<String>, file_url: Option<&'a str> },
}

impl PartOut<'_> {
    fn write(&self, mut json: JsonObject<'_>) {
        match self {
            PartOut::InputText { text } => {
                json.text("type", "input_text");
                json.text("text", text);
            }
            PartOut::OutputText { text } => {
                json.text("type", "output_text");
                json.text("text", text);
            }
            PartOut::InputImage { image_url, detail } => {
                json.text("type", "input_image");
                json.text("image_url", image_url);
                json.text("detail", detail);
            }
            PartOut::InputFile { filename, file_data, file_url } => {
                json.text("type", "input_file");
                json.text_if("filename", *filename);
                json.text_if("file_data", file_data.as_deref());
                json.text_if("file_url", *file_url);
            }
        }
        json.close();
    }
}

/// A function tool: `{"type": "function", "name", "description", "parameters", "strict"}`.
pub(super) struct ToolOut<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub parameters: &'a Schema,
    pub strict: bool,
}

impl ToolOut<'_> {
    fn write(&self, mut json: JsonObject<'_>) {
        json.text("type", "function");
        json.text("name", self.name);
        json.text_if("description", self.description);
        // A schema kept as the client's text is written as it is.
        self.parameters.write_json(json.key("parameters"));
        json.flag("strict", self.strict);
        json.close();
    }
}

pub(super) enum ToolChoiceOut<'a> {
    /// `"auto"`, `"required"`, `"none"`.
    Mode(&'static str),
    /// `{"type": "function", "name"}`.
    Function(&'a str),
}

impl ToolChoiceOut<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            ToolChoiceOut::Mode(mode) => push_json_string(out, mode),
            ToolChoiceOut::Function(name) => {
                let mut json = JsonObject::open(out);
                json.text("type", "function");
                json.text("name", name);
                json.close();
            }
        }
    }
}

pub(super) struct ReasoningOut<'a> {
    pub effort: Option<&'a str>,
    pub summary: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every member, item and part, written in its place with its escapes.
    #[test]
    fn a_body_with_every_member_is_written_exactly() {
        let schema = Schema::from(json!({"type": "object"}));
        let body = ResponsesRequestOut {
            model: "m",
            instructions: Some("be \"brief\"\n".into()),
            input: vec![
                ItemOut::Message {
                    role: "user",
                    content: vec![
                        PartOut::InputText { text: Cow::Borrowed("hi\t") },
                        PartOut::InputImage { image_url: "https://x/y.png".into(), detail: "auto" },
                        PartOut::InputFile {
                            filename: Some("a.pdf"),
                            file_data: Some("data:x".into()),
                            file_url: None,
                        },
                        PartOut::InputFile { filename: None, file_data: None, file_url: Some("https://x/d.pdf") },
                    ],
                },
                ItemOut::Message { role: "assistant", content: vec![PartOut::OutputText { text: "ok\u{1}" }] },
                ItemOut::Reasoning { id: Some("rs_1"), summary: vec!["plan", "two"], encrypted_content: "enc" },
                ItemOut::Reasoning { id: None, summary: vec![], encrypted_content: "enc2" },
                ItemOut::FunctionCall { call_id: "c1", name: "f", arguments: "{\"a\":1}".into() },
                ItemOut::FunctionCallOutput { call_id: "c1", output: json!([{"type": "input_text", "text": "r"}]) },
            ],
            tools: vec![
                ToolOut { name: "f", description: Some("does f"), parameters: &schema, strict: false },
                ToolOut { name: "g", description: None, parameters: &schema, strict: true },
            ],
            tool_choice: Some(ToolChoiceOut::Function("f")),
            parallel_tool_calls: Some(false),
            max_output_tokens: Some(16),
            temperature: Some(0.5),
            top_p: Some(1.0),
            reasoning: Some(ReasoningOut { effort: Some("high"), summary: Some("auto") }),
            text_format: Some(json!({"type": "json_object"})),
            user: Some(Cow::Borrowed("u")),
            prompt_cache_key: Some("k"),
            stream: true,
            store: false,
            include: Some("reasoning.encrypted_content"),
        };
        let want = concat!(
            r#"{"model":"m","instructions":"be \"brief\"\n","input":["#,
            r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"hi\t"},"#,
            r#"{"type":"input_image","image_url":"https://x/y.png","detail":"auto"},"#,
            r#"{"type":"input_file","filename":"a.pdf","file_data":"data:x"},"#,
            r#"{"type":"input_file","file_url":"https://x/d.pdf"}]},"#,
            r#"{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok\u0001"}]},"#,
            r#"{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"plan"},{"type":"summary_text","text":"two"}],"encrypted_content":"enc"},"#,
            r#"{"type":"reasoning","summary":[],"encrypted_content":"enc2"},"#,
            r#"{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},"#,
            r#"{"type":"function_call_output","call_id":"c1","output":[{"text":"r","type":"input_text"}]}],"#,
            r#""tools":[{"type":"function","name":"f","description":"does f","parameters":{"type":"object"},"strict":false},"#,
            r#"{"type":"function","name":"g","parameters":{"type":"object"},"strict":true}],"#,
            r#""tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false,"max_output_tokens":16,"#,
            r#""temperature":0.5,"top_p":1.0,"reasoning":{"effort":"high","summary":"auto"},"#,
            r#""text":{"format":{"type":"json_object"}},"user":"u","prompt_cache_key":"k","stream":true,"store":false,"#,
            r#""include":["reasoning.encrypted_content"]}"#,
        );
        assert_eq!(String::from_utf8(body.to_json(0)).unwrap(), want);
        let bare = ResponsesRequestOut { tools: vec![], tool_choice: Some(ToolChoiceOut::Mode("auto")), ..body };
        let bare = String::from_utf8(bare.to_json(0)).unwrap();
        assert!(bare.contains(r#""function_call_output","call_id":"c1","output":[{"text":"r","type":"input_text"}]}],"tool_choice":"auto","#), "{bare}");
    }
}
