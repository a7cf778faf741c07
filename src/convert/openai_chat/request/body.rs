//! A Chat Completions request body as the encoder builds it, borrowing the IR, and how it is
//! written: by hand (`protocol::json_write`), in the order OpenAI documents its members. A Claude
//! Code turn is tens of kilobytes of text with a newline every few dozen bytes; copying it in
//! runs instead of byte by byte is most of what converting it costs.

use std::borrow::Cow;

use serde_json::Value;

use crate::convert::ir::Schema;
use crate::protocol::json_write::{JsonObject, push_json_string};

pub(super) struct ChatRequestOut<'a> {
    pub model: &'a str,
    pub messages: Vec<MessageOut<'a>>,
    /// Left out when empty.
    pub tools: Vec<ToolOut<'a>>,
    pub tool_choice: Option<ToolChoiceOut<'a>>,
    pub parallel_tool_calls: Option<bool>,
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Left out when empty.
    pub stop: Vec<&'a str>,
    pub reasoning_effort: Option<String>,
    pub response_format: Option<Value>,
    pub user: Option<&'a str>,
    /// Left out when false.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub stream_options: Option<bool>,
}

impl ChatRequestOut<'_> {
    /// `capacity`: the room the body is likely to need (`ir::request_capacity`).
    pub fn to_json(&self, capacity: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(capacity);
        let mut json = JsonObject::open(&mut out);
        json.text("model", self.model);
        let mut messages = json.list("messages");
        for message in &self.messages {
            message.write(messages.element());
        }
        messages.close();
        if !self.tools.is_empty() {
            let mut tools = json.list("tools");
            for tool in &self.tools {
                tool.write(tools.element());
            }
            tools.close();
        }
        if let Some(choice) = &self.tool_choice {
            choice.write(json.key("tool_choice"));
        }
        if let Some(parallel) = self.parallel_tool_calls {
            json.flag("parallel_tool_calls", parallel);
        }
        if let Some(n) = self.max_tokens {
            json.count("max_tokens", n);
        }
        if let Some(n) = self.max_completion_tokens {
            json.count("max_completion_tokens", n);
        }
        if let Some(t) = self.temperature {
            json.value("temperature", &t);
        }
        if let Some(p) = self.top_p {
            json.value("top_p", &p);
        }
        if !self.stop.is_empty() {
            let mut stop = json.list("stop");
            for s in &self.stop {
                push_json_string(stop.element(), s);
            }
            stop.close();
        }
        json.text_if("reasoning_effort", self.reasoning_effort.as_deref());
        if let Some(format) = &self.response_format {
            json.value("response_format", format);
        }
        json.text_if("user", self.user);
        if self.stream {
            json.flag("stream", true);
        }
        if let Some(include_usage) = self.stream_options {
            let mut options = json.object("stream_options");
            options.flag("include_usage", include_usage);
            options.close();
        }
        json.close();
        out
    }
}

pub(super) struct MessageOut<'a> {
    pub role: &'static str,
    pub content: ContentOut<'a>,
    pub tool_calls: Option<Vec<ToolCallOut<'a>>>,
    pub tool_call_id: Option<&'a str>,
}

impl<'a> MessageOut<'a> {
    pub fn text(role: &'static str, text: Cow<'a, str>) -> Self {
        MessageOut { role, content: ContentOut::Text(text), tool_calls: None, tool_call_id: None }
    }

    fn write(&self, out: &mut Vec<u8>) {
        let mut json = JsonObject::open(out);
        json.text("role", self.role);
        match &self.content {
            ContentOut::None => json.raw("content", "null"),
            ContentOut::Text(text) => json.text("content", text),
            ContentOut::Parts(parts) => {
                let mut list = json.list("content");
                for part in parts {
                    part.write(list.element());
                }
                list.close();
            }
        }
        if let Some(calls) = &self.tool_calls {
            let mut list = json.list("tool_calls");
            for call in calls {
                call.write(list.element());
            }
            list.close();
        }
        json.text_if("tool_call_id", self.tool_call_id);
        json.close();
    }
}

pub(super) enum ContentOut<'a> {
    /// An assistant message that only calls tools: `null`.
    None,
    Text(Cow<'a, str>),
    Parts(Vec<PartOut<'a>>),
}

pub(super) enum PartOut<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { url: Cow<'a, str> },
    File { filename: &'a str, file_data: String },
}

impl PartOut<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        let mut json = JsonObject::open(out);
        match self {
            PartOut::Text { text } => {
                json.text("type", "text");
                json.text("text", text);
            }
            PartOut::ImageUrl { url } => {
                json.text("type", "image_url");
                let mut image_url = json.object("image_url");
                image_url.text("url", url);
                image_url.close();
            }
            PartOut::File { filename, file_data } => {
                json.text("type", "file");
                let mut file = json.object("file");
                file.text("filename", filename);
                file.text("file_data", file_data);
                file.close();
            }
        }
        json.close();
    }
}

/// A call in an assistant message: `{"id", "type": "function", "function": {"name", "arguments"}}`.
pub(super) struct ToolCallOut<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub arguments: String,
}

impl ToolCallOut<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        let mut json = JsonObject::open(out);
        json.text("id", self.id);
        json.text("type", "function");
        let mut function = json.object("function");
        function.text("name", self.name);
        function.text("arguments", &self.arguments);
        function.close();
        json.close();
    }
}

/// A tool: `{"type": "function", "function": {"name", "description", "parameters", "strict"}}`.
pub(super) struct ToolOut<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub parameters: &'a Schema,
    pub strict: Option<bool>,
}

impl ToolOut<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        let mut json = JsonObject::open(out);
        json.text("type", "function");
        let mut function = json.object("function");
        function.text("name", self.name);
        function.text_if("description", self.description);
        // A schema kept as the client's text is written as it is.
        self.parameters.write_json(function.key("parameters"));
        if let Some(strict) = self.strict {
            function.flag("strict", strict);
        }
        function.close();
        json.close();
    }
}

pub(super) enum ToolChoiceOut<'a> {
    /// `"auto"`, `"required"`, `"none"`.
    Mode(&'static str),
    /// `{"type": "function", "function": {"name"}}`.
    Function(&'a str),
}

impl ToolChoiceOut<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            ToolChoiceOut::Mode(mode) => push_json_string(out, mode),
            ToolChoiceOut::Function(name) => {
                let mut json = JsonObject::open(out);
                json.text("type", "function");
                let mut function = json.object("function");
                function.text("name", name);
                function.close();
                json.close();
            }
        }
    }
}
