//! Token usage from the upstream's own fields, for all three protocols, streaming and not.
//! SKELETON: the API is fixed; extraction lands with issue 4's usage work.

use super::record::Tokens;
use crate::endpoint::Format;
use crate::protocol::sse::SseEvent;

/// Usage and the answering model from a complete (non-streaming) answer body.
pub fn from_body(_format: Format, _body: &[u8]) -> (Tokens, Option<String>) {
    (Tokens::default(), None)
}

/// Usage and model collected from a stream's events as they pass.
#[derive(Clone, Debug, Default)]
pub struct StreamUsage {
    tokens: Tokens,
    model: Option<String>,
}

impl StreamUsage {
    pub fn observe(&mut self, _format: Format, _event: &SseEvent<'_>) {}

    pub fn tokens(&self) -> Tokens {
        self.tokens
    }

    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}
