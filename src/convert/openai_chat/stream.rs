//! Streams: a Chat upstream's `chat.completion.chunk` events to IR events (`decode`), and IR
//! events to chunks for a Chat client (`encode`).

mod decode;
mod encode;

pub use decode::StreamDecoder;
pub use encode::StreamEncoder;
