//! Streams: a Gemini upstream's SSE chunks (`alt=sse`) to IR events (`decode`), and IR events
//! to chunks for a Gemini client (`encode`, SSE or the JSON-array stream), and a Gemini
//! upstream's SSE reframed as the JSON-array stream (`reframe`).

mod decode;
mod encode;
mod reframe;

pub use decode::StreamDecoder;
pub use encode::StreamEncoder;
pub use reframe::JsonArrayReframe;
