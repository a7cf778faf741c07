//! Protocol conversion (issue 3): every inbound protocol to every endpoint format and back.
//!
//! Conversion goes through one intermediate representation (`ir`), rich enough to carry what
//! the three APIs have in common and to remember what one of them cannot express (`Loss`):
//! each protocol has one codec (`anthropic`, `openai_chat`, `responses`) that decodes its
//! requests/responses/stream events into the IR and encodes the IR back into its wire format.
//! Pass-through pairs never come here: their bytes are forwarded unchanged.
//!
//! All of it is pure: bytes in, bytes out, no I/O, no clock (ids and timestamps are given).
//! This file only dispatches on the format.

pub mod anthropic;
pub mod count_tokens;
pub mod ir;
pub mod openai_chat;
pub mod responses;

use crate::endpoint::Format;
use crate::protocol::sse::SseEvent;
use ir::{ConvertError, EncodeContext, Encoded, ErrorBody, Request, Response, StreamEvent};

pub fn decode_request(format: Format, body: &[u8]) -> Result<Request, ConvertError> {
    match format {
        Format::Anthropic => anthropic::decode_request(body),
        Format::Openai => openai_chat::decode_request(body),
        Format::Responses => responses::decode_request(body),
    }
}

pub fn encode_request(format: Format, request: &Request) -> Result<Encoded, ConvertError> {
    match format {
        Format::Anthropic => anthropic::encode_request(request),
        Format::Openai => openai_chat::encode_request(request),
        Format::Responses => responses::encode_request(request),
    }
}

pub fn decode_response(format: Format, body: &[u8]) -> Result<Response, ConvertError> {
    match format {
        Format::Anthropic => anthropic::decode_response(body),
        Format::Openai => openai_chat::decode_response(body),
        Format::Responses => responses::decode_response(body),
    }
}

pub fn encode_response(format: Format, response: &Response, ctx: &EncodeContext) -> Vec<u8> {
    match format {
        Format::Anthropic => anthropic::encode_response(response, ctx),
        Format::Openai => openai_chat::encode_response(response, ctx),
        Format::Responses => responses::encode_response(response, ctx),
    }
}

pub fn decode_error(format: Format, status: u16, body: &[u8]) -> ErrorBody {
    match format {
        Format::Anthropic => anthropic::decode_error(status, body),
        Format::Openai => openai_chat::decode_error(status, body),
        Format::Responses => responses::decode_error(status, body),
    }
}

pub fn encode_error(format: Format, error: &ErrorBody) -> Vec<u8> {
    match format {
        Format::Anthropic => anthropic::encode_error(error),
        Format::Openai => openai_chat::encode_error(error),
        Format::Responses => responses::encode_error(error),
    }
}

/// Upstream SSE events → IR events, for any format.
pub enum StreamDecoder {
    Anthropic(anthropic::StreamDecoder),
    Openai(openai_chat::StreamDecoder),
    Responses(responses::StreamDecoder),
}

impl StreamDecoder {
    pub fn new(format: Format) -> Self {
        match format {
            Format::Anthropic => StreamDecoder::Anthropic(anthropic::StreamDecoder::new()),
            Format::Openai => StreamDecoder::Openai(openai_chat::StreamDecoder::new()),
            Format::Responses => StreamDecoder::Responses(responses::StreamDecoder::new()),
        }
    }

    pub fn decode(&mut self, event: &SseEvent<'_>, out: &mut Vec<StreamEvent>) {
        match self {
            StreamDecoder::Anthropic(d) => d.decode(event, out),
            StreamDecoder::Openai(d) => d.decode(event, out),
            StreamDecoder::Responses(d) => d.decode(event, out),
        }
    }

    pub fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        match self {
            StreamDecoder::Anthropic(d) => d.finish(out),
            StreamDecoder::Openai(d) => d.finish(out),
            StreamDecoder::Responses(d) => d.finish(out),
        }
    }
}

/// IR events → client SSE bytes, for any format.
pub enum StreamEncoder {
    Anthropic(anthropic::StreamEncoder),
    Openai(openai_chat::StreamEncoder),
    Responses(responses::StreamEncoder),
}

impl StreamEncoder {
    pub fn new(format: Format, ctx: EncodeContext) -> Self {
        match format {
            Format::Anthropic => StreamEncoder::Anthropic(anthropic::StreamEncoder::new(ctx)),
            Format::Openai => StreamEncoder::Openai(openai_chat::StreamEncoder::new(ctx)),
            Format::Responses => StreamEncoder::Responses(responses::StreamEncoder::new(ctx)),
        }
    }

    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        match self {
            StreamEncoder::Anthropic(e) => e.encode(event, out),
            StreamEncoder::Openai(e) => e.encode(event, out),
            StreamEncoder::Responses(e) => e.encode(event, out),
        }
    }
}

/// A running stream conversion: feed upstream events, get client bytes.
pub struct StreamConversion {
    decoder: StreamDecoder,
    encoder: StreamEncoder,
    scratch: Vec<StreamEvent>,
}

impl StreamConversion {
    pub fn new(upstream: Format, client: Format, ctx: EncodeContext) -> Self {
        Self { decoder: StreamDecoder::new(upstream), encoder: StreamEncoder::new(client, ctx), scratch: Vec::new() }
    }

    /// Convert one upstream event, appending the client's bytes to `out`.
    pub fn event(&mut self, event: &SseEvent<'_>, out: &mut Vec<u8>) {
        self.decoder.decode(event, &mut self.scratch);
        self.flush(out);
    }

    /// The upstream stream ended cleanly.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.decoder.finish(&mut self.scratch);
        self.flush(out);
    }

    /// End the client's stream with its protocol's error event.
    pub fn fail(&mut self, kind: ir::ErrorKind, message: &str, out: &mut Vec<u8>) {
        self.encoder.encode(&StreamEvent::Error { kind, message: message.to_string() }, out);
    }

    fn flush(&mut self, out: &mut Vec<u8>) {
        for e in self.scratch.drain(..) {
            self.encoder.encode(&e, out);
        }
    }
}

/// The upstream path (after `/v1`) for a request of this format.
pub fn upstream_path(format: Format) -> &'static str {
    match format {
        Format::Anthropic => "/messages",
        Format::Openai => "/chat/completions",
        Format::Responses => "/responses",
    }
}
