//! Requests: a Responses client's request to the IR (`decode`), and the IR to a request for a
//! Responses upstream (`encode`).

mod body;
mod decode;
mod encode;

pub use decode::decode_request;
pub use encode::encode_request;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::convert::responses::tests::*;
    use serde_json::json;

    #[test]
    fn codex_turns_reencode_for_a_responses_upstream() {
        // Responses → IR → Responses is never used by the gateway (pass-through), but it shows
        // that the encoder accepts everything the decoder produces.
        let req = decode_request(&fixture_body(CODEX_TURN2)).unwrap();
        let (body, losses) = enc(&req);
        assert_eq!(body["store"], false);
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(body["input"][1]["type"], "reasoning");
        assert!(losses.is_empty(), "{losses:?}");
        insta::assert_json_snapshot!("codex_turn2_reencoded", body);
    }
}
