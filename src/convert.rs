//! Protocol conversion (issue 3): every inbound protocol to every endpoint format and back.
//!
//! Conversion goes through one intermediate representation (`ir`), rich enough to carry what
//! the three APIs have in common and to remember what one of them cannot express (`Loss`):
//! each protocol has one codec (`anthropic`, `openai_chat`, `responses`) that decodes its
//! requests/responses/stream events into the IR and encodes the IR back into its wire format.
//! Pass-through pairs never come here: their bytes are forwarded unchanged.
//!
//! All of it is pure: bytes in, bytes out, no I/O, no clock (ids and timestamps are given).

pub mod ir;
