//! Requests: a Gemini client's request to the IR (`decode`), and the IR to a request for a
//! Gemini upstream (`encode`); both for `generateContent` and for `countTokens`.

mod decode;
mod encode;

pub use decode::{decode_count_tokens_request, decode_request};
pub use encode::{encode_count_tokens_request, encode_request};
