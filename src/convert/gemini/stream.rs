//! Streams: a Gemini upstream's SSE chunks (`alt=sse`) to IR events (`decode`), and IR events
//! to chunks for a Gemini client (`encode`, SSE or the JSON-array stream).

mod decode;
mod encode;

pub use decode::StreamDecoder;
pub use encode::StreamEncoder;
