//! Requests: a Chat client's request to the IR (`decode`), and the IR to a request for a Chat
//! upstream (`encode`).

mod body;
mod decode;
mod encode;

pub use decode::decode_request;
pub use encode::encode_request;
