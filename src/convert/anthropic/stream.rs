//! Streams: an Anthropic upstream's SSE events to IR events (`decode`), and IR events to SSE
//! for an Anthropic client (`encode`).

mod decode;
mod encode;

pub use decode::StreamDecoder;
pub use encode::StreamEncoder;
