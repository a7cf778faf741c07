//! What nodes tell each other on the cluster's channel, and how a verdict is stored: one line of
//! `|`-separated fields each (endpoint names are `[A-Za-z0-9._-]`, so no field can hold a `|`).
//!
//! | message | sent by | means |
//! | --- | --- | --- |
//! | `open\|NAME\|REASON:UNTIL` | `scripts::OPEN` | opened until `UNTIL` (Redis server ms) |
//! | `closed\|NAME` | `scripts::CLOSE`, `scripts::PROBE_SUCCEEDED` | its probes closed it |
//! | `reset\|NAME` | `scripts::CLOSE` | an operator reset it |
//! | `current\|PROTOCOL\|NAME` | `scripts::MOVE_CURRENT`, `scripts::SET_CURRENT` | the current endpoint moved |
//! | `bindings\|PROTOCOL\|GEN` | `scripts::NEXT_BINDING_GENERATION` | the protocol's bindings were dropped |
//! | `config\|VERSION\|NODE` | `scripts::BUMP_CONFIG` | `NODE` changed the configuration |
//!
//! Pure. Anything that does not parse is ignored: a newer node may say more than this one knows.

use crate::breaker::OpenReason;
use crate::protocol::Protocol;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Open { endpoint: String, reason: OpenReason, until_ms: i64 },
    Closed { endpoint: String },
    Reset { endpoint: String },
    Current { protocol: Protocol, endpoint: String },
    Bindings { protocol: Protocol, generation: i64 },
    Config { version: String, node: String },
}

pub fn parse(payload: &str) -> Option<Message> {
    let mut fields = payload.split('|');
    let kind = fields.next()?;
    let a = fields.next()?;
    let b = fields.next();
    let message = match (kind, b) {
        ("open", Some(verdict)) => {
            let (reason, until_ms) = parse_verdict(verdict)?;
            Message::Open { endpoint: a.to_string(), reason, until_ms }
        }
        ("closed", None) => Message::Closed { endpoint: a.to_string() },
        ("reset", None) => Message::Reset { endpoint: a.to_string() },
        ("current", Some(name)) => Message::Current { protocol: Protocol::parse(a)?, endpoint: name.to_string() },
        ("bindings", Some(generation)) => {
            Message::Bindings { protocol: Protocol::parse(a)?, generation: generation.parse().ok()? }
        }
        ("config", Some(node)) => Message::Config { version: a.to_string(), node: node.to_string() },
        _ => return None,
    };
    fields.next().is_none().then_some(message)
}

/// A stored verdict, `REASON:UNTIL`.
pub fn parse_verdict(value: &str) -> Option<(OpenReason, i64)> {
    let (reason, until) = value.split_once(':')?;
    Some((reason_from(reason)?, until.parse().ok()?))
}

pub fn reason_from(s: &str) -> Option<OpenReason> {
    match s {
        "broken" => Some(OpenReason::Broken),
        "rate_limited" => Some(OpenReason::RateLimited),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back() {
        assert_eq!(
            parse("open|kimi.2|rate_limited:1800000000123"),
            Some(Message::Open {
                endpoint: "kimi.2".into(),
                reason: OpenReason::RateLimited,
                until_ms: 1_800_000_000_123
            })
        );
        assert_eq!(parse("closed|a"), Some(Message::Closed { endpoint: "a".into() }));
        assert_eq!(parse("reset|a"), Some(Message::Reset { endpoint: "a".into() }));
        assert_eq!(
            parse("current|responses|b"),
            Some(Message::Current { protocol: Protocol::Responses, endpoint: "b".into() })
        );
        assert_eq!(parse("bindings|claude|7"), Some(Message::Bindings { protocol: Protocol::Claude, generation: 7 }));
        assert_eq!(parse("config|12|n1"), Some(Message::Config { version: "12".into(), node: "n1".into() }));
    }

    #[test]
    fn what_does_not_parse_is_ignored() {
        for bad in [
            "",
            "open|a",
            "open|a|weird:1",
            "open|a|broken:x",
            "closed|a|b",
            "current|smtp|a",
            "bindings|claude|x",
            "hello|a",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(parse_verdict("broken:42"), Some((OpenReason::Broken, 42)));
        assert_eq!(parse_verdict("broken"), None);
    }
}
