//! Requests: an Anthropic client's request to the IR (`decode`), and the IR to a request for an
//! Anthropic upstream (`encode`).

mod decode;
mod encode;
mod plain;

pub use decode::decode_request;
pub use encode::encode_request;

/// `max_tokens` sent when the IR has none (Anthropic requires it). 8192 is accepted by every
/// current Claude model and by the common Anthropic-compatible relays.
pub const DEFAULT_MAX_TOKENS: u64 = 8192;

/// Upper bound for a `max_tokens` the encoder has to invent for thinking (Claude Opus 4 / 4.1
/// accept at most 32000 output tokens; newer models more).
pub const MAX_DEFAULT_MAX_TOKENS: u64 = 32000;

/// Anthropic's minimum `thinking.budget_tokens`.
pub const MIN_THINKING_BUDGET: u64 = 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::anthropic::tests::*;
    use serde_json::json;

    #[test]
    fn claude_code_turn2_reencodes_for_anthropic() {
        // Anthropic → IR → Anthropic (what a test upstream would receive if the gateway ever
        // converted it): the thinking signature, tool_use and tool_result survive; the
        // mid-conversation system message moves into `system`.
        let req = decode_request(&fixture_body(CC_TURN2)).expect("decodes");
        let (body, losses) = enc(&req);
        let mut body = body;
        body["tools"] = json!(format!("<{} tools>", body["tools"].as_array().map_or(0, Vec::len)));
        insta::assert_json_snapshot!(json!({"body": body, "losses": losses}));
    }
}
