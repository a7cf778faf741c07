//! The protocols on both sides of the gateway — `Protocol` (what a client speaks), `Format`
//! (what an endpoint speaks), `Route` (what kind of traffic a request is) — and their wire
//! details: native error bodies (SPEC §9), the SSE scanner, what each streamed event means, the
//! tolerant JSON reading they all share, and the fast validating scan of request bodies.

pub mod errors;
pub mod finder;
pub mod gemini_usage;
pub mod json_scan;
pub mod json_skip;
pub mod json_write;
pub mod lenient;
pub mod plain_json;
pub mod sse;
pub mod stream_events;

use std::fmt;

use serde::{Deserialize, Serialize};

/// The API a client speaks, decided by the request path (SPEC §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// `POST /v1/messages`, Anthropic Messages.
    Claude,
    /// `POST /v1/chat/completions`, OpenAI Chat Completions.
    Openai,
    /// `POST /v1/responses`, OpenAI Responses.
    Responses,
    /// `POST /v1beta/models/{model}:generateContent` (and `:streamGenerateContent`,
    /// `:countTokens`, also under `/v1/`), Google Gemini (SPEC §11).
    Gemini,
}

impl Protocol {
    /// How many there are: the length of every per-protocol array (settings, rotation).
    pub const COUNT: usize = 4;
    pub const ALL: [Protocol; Protocol::COUNT] =
        [Protocol::Claude, Protocol::Openai, Protocol::Responses, Protocol::Gemini];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Claude => "claude",
            Protocol::Openai => "openai",
            Protocol::Responses => "responses",
            Protocol::Gemini => "gemini",
        }
    }

    pub fn parse(s: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// The path its generation requests are sent to; none for Gemini, whose path names the model.
    pub fn usual_path(self) -> Option<&'static str> {
        match self {
            Protocol::Claude => Some("/v1/messages"),
            Protocol::Openai => Some("/v1/chat/completions"),
            Protocol::Responses => Some("/v1/responses"),
            Protocol::Gemini => None,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The protocol an upstream speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Anthropic,
    Openai,
    Responses,
    /// Google Gemini `generateContent` (SPEC §11): the model and streaming are in the URL path.
    Gemini,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Anthropic, Format::Openai, Format::Responses, Format::Gemini];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Anthropic => "anthropic",
            Format::Openai => "openai",
            Format::Responses => "responses",
            Format::Gemini => "gemini",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.as_str() == s)
    }

    /// The name with its article, for messages: "an anthropic", "an openai", "a responses".
    pub fn with_article(self) -> &'static str {
        match self {
            Format::Anthropic => "an anthropic",
            Format::Openai => "an openai",
            Format::Responses => "a responses",
            Format::Gemini => "a gemini",
        }
    }

    /// The format an inbound protocol is forwarded to without conversion.
    pub fn native_to(protocol: Protocol) -> Format {
        match protocol {
            Protocol::Claude => Format::Anthropic,
            Protocol::Openai => Format::Openai,
            Protocol::Responses => Format::Responses,
            Protocol::Gemini => Format::Gemini,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of traffic a request is, which decides compatible endpoints and URL joining.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// One of the inbound protocols' inference calls.
    Protocol(Protocol),
    /// A token count: `/v1/messages/count_tokens` (`claude`) or `…:countTokens` (`gemini`). A
    /// 404/405/501 is neutral (many relays lack it), and endpoints that cannot count are
    /// estimated for.
    CountTokens(Protocol),
    /// Any other `/v1/*` path, passed through to the Anthropic family (client sent
    /// `anthropic-version` or `x-api-key`) or the OpenAI family.
    PassThrough { anthropic: bool },
}

impl Route {
    /// The protocol whose settings, rotation state and error shape apply.
    pub fn protocol(self) -> Protocol {
        match self {
            Route::Protocol(p) | Route::CountTokens(p) => p,
            Route::PassThrough { anthropic: true } => Protocol::Claude,
            Route::PassThrough { anthropic: false } => Protocol::Openai,
        }
    }

    pub fn is_count_tokens(self) -> bool {
        matches!(self, Route::CountTokens(_))
    }

    pub fn compatible_with(self, format: Format) -> bool {
        match self {
            // SPEC §1, §11: pass-through to the native format, or conversion to any other, so
            // every format can serve every inbound protocol.
            Route::Protocol(_) => true,
            // Anthropic and Gemini endpoints count; for the others the gateway estimates locally.
            Route::CountTokens(_) => true,
            Route::PassThrough { anthropic: true } => format == Format::Anthropic,
            // Both OpenAI-family formats share base URLs and paths (`/v1/embeddings`, ...).
            Route::PassThrough { anthropic: false } => {
                matches!(format, Format::Openai | Format::Responses)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_take_their_article() {
        let said: Vec<String> = Format::ALL.iter().map(|f| format!("{}-format endpoint", f.with_article())).collect();
        assert_eq!(
            said,
            [
                "an anthropic-format endpoint",
                "an openai-format endpoint",
                "a responses-format endpoint",
                "a gemini-format endpoint"
            ]
        );
    }
}
