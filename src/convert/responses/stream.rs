//! Streams: a Responses upstream's SSE events to IR events (`decode`), and IR events to SSE for
//! a Responses client (`encode`).

mod decode;
mod encode;

pub use decode::StreamDecoder;
pub use encode::StreamEncoder;
