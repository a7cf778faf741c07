//! User retry rules (SPEC §4, §15.5): an ordered list, evaluated against an upstream's HTTP
//! answer before the built-in classification; the first rule that matches decides where the
//! request goes and what the endpoint's breaker records. For the users whose upstream's odd
//! statuses the built-in table cannot know (a relay that answers 500 for "model busy", one that
//! answers 400 for an expired key).
//!
//! `{"status": 500 | "500-599", "body": "substring" | {"regex": "…"}, "action": "next" | "same"
//! | "return", "breaker": "failure" | "neutral"}` — `body` is optional; a `PATCH` replaces the
//! whole list.

use serde_json::{Value, json};

/// At most this many rules, each body pattern at most this long: rules run on every failed
/// answer, and a regex is compiled with a size limit too.
pub const MAX_RULES: usize = 32;
pub const MAX_PATTERN: usize = 512;
const REGEX_SIZE_LIMIT: usize = 256 * 1024;

#[derive(Clone, Debug)]
pub struct RetryRule {
    /// Inclusive.
    pub statuses: (u16, u16),
    pub body: Option<BodyMatch>,
    pub action: Action,
    /// The breaker records a failure (else nothing).
    pub failure: bool,
}

#[derive(Clone, Debug)]
pub enum BodyMatch {
    Substring(String),
    Regex(regex::Regex),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The next candidate.
    Next,
    /// The same endpoint again after `transient_retry_delay_ms`, bounded by the attempt cap.
    Same,
    /// This answer goes to the client.
    Return,
}

impl PartialEq for RetryRule {
    fn eq(&self, other: &Self) -> bool {
        self.to_json() == other.to_json()
    }
}

impl RetryRule {
    /// Whether the rule applies to an answer with this status and body.
    pub fn matches(&self, status: u16, body: &[u8]) -> bool {
        if status < self.statuses.0 || status > self.statuses.1 {
            return false;
        }
        match &self.body {
            None => true,
            Some(BodyMatch::Substring(s)) => String::from_utf8_lossy(body).contains(s.as_str()),
            Some(BodyMatch::Regex(r)) => r.is_match(&String::from_utf8_lossy(body)),
        }
    }

    pub fn to_json(&self) -> Value {
        let status = if self.statuses.0 == self.statuses.1 {
            json!(self.statuses.0)
        } else {
            json!(format!("{}-{}", self.statuses.0, self.statuses.1))
        };
        let mut rule = json!({
            "status": status,
            "action": match self.action { Action::Next => "next", Action::Same => "same", Action::Return => "return" },
            "breaker": if self.failure { "failure" } else { "neutral" },
        });
        match &self.body {
            Some(BodyMatch::Substring(s)) => rule["body"] = json!(s),
            Some(BodyMatch::Regex(r)) => rule["body"] = json!({"regex": r.as_str()}),
            None => {}
        }
        rule
    }
}

/// The first rule that matches, if any.
pub fn first_match<'a>(rules: &'a [RetryRule], status: u16, body: &[u8]) -> Option<&'a RetryRule> {
    rules.iter().find(|r| r.matches(status, body))
}

/// Validate `retry_rules` from the settings document; errors name the rule and the field.
pub fn parse(value: &Value) -> Result<Vec<RetryRule>, String> {
    let items = value.as_array().ok_or("retry_rules must be an array of rules")?;
    if items.len() > MAX_RULES {
        return Err(format!("retry_rules may hold at most {MAX_RULES} rules (got {})", items.len()));
    }
    items.iter().enumerate().map(|(i, item)| parse_rule(item).map_err(|e| format!("retry_rules[{i}].{e}"))).collect()
}

fn parse_rule(item: &Value) -> Result<RetryRule, String> {
    let obj = item.as_object().ok_or("rule must be an object with status, action and breaker")?;
    if let Some(unknown) = obj.keys().find(|k| !matches!(k.as_str(), "status" | "body" | "action" | "breaker")) {
        return Err(format!("{unknown}: unknown field; a rule has status, body, action and breaker"));
    }
    let statuses = match obj.get("status") {
        Some(Value::Number(n)) => {
            let s = n.as_u64().and_then(|s| u16::try_from(s).ok()).filter(|s| (100..=599).contains(s));
            let s = s.ok_or("status: must be an HTTP status from 100 to 599")?;
            (s, s)
        }
        Some(Value::String(range)) => {
            let (a, b) = range.split_once('-').ok_or("status: a range is written \"500-599\"")?;
            let parse = |t: &str| t.trim().parse::<u16>().ok().filter(|s| (100..=599).contains(s));
            match (parse(a), parse(b)) {
                (Some(a), Some(b)) if a <= b => (a, b),
                _ => return Err(format!("status: \"{range}\" is not a range of HTTP statuses like \"500-599\"")),
            }
        }
        _ => return Err("status: required, a status (500) or a range (\"500-599\")".into()),
    };
    let body = match obj.get("body") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => return Err("body: must not be empty".into()),
        Some(Value::String(s)) if s.chars().count() > MAX_PATTERN => {
            return Err(format!("body: at most {MAX_PATTERN} characters"));
        }
        Some(Value::String(s)) => Some(BodyMatch::Substring(s.clone())),
        Some(Value::Object(o)) => {
            let pattern = o.get("regex").and_then(Value::as_str).ok_or("body: an object must be {\"regex\": \"…\"}")?;
            if pattern.chars().count() > MAX_PATTERN {
                return Err(format!("body.regex: at most {MAX_PATTERN} characters"));
            }
            let regex = regex::RegexBuilder::new(pattern)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| format!("body.regex: not a valid regular expression ({e})"))?;
            Some(BodyMatch::Regex(regex))
        }
        Some(_) => return Err("body: a substring, or {\"regex\": \"…\"}".into()),
    };
    let action = match obj.get("action").and_then(Value::as_str) {
        Some("next") => Action::Next,
        Some("same") => Action::Same,
        Some("return") => Action::Return,
        _ => return Err("action: must be \"next\", \"same\" or \"return\"".into()),
    };
    let failure = match obj.get("breaker").and_then(Value::as_str) {
        Some("failure") => true,
        Some("neutral") => false,
        _ => return Err("breaker: must be \"failure\" or \"neutral\"".into()),
    };
    Ok(RetryRule { statuses, body, action, failure })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_round_trip_and_match_in_order() {
        let doc = json!([
            {"status": 500, "body": "model busy", "action": "same", "breaker": "neutral"},
            {"status": "500-599", "body": {"regex": "quota.*exceeded"}, "action": "return", "breaker": "failure"},
            {"status": "400-499", "action": "next", "breaker": "neutral"},
        ]);
        let rules = parse(&doc).unwrap();
        assert_eq!(Value::Array(rules.iter().map(RetryRule::to_json).collect()), doc);
        assert_eq!(first_match(&rules, 500, b"{\"error\":\"model busy\"}").map(|r| r.action), Some(Action::Same));
        assert_eq!(first_match(&rules, 503, b"daily quota was exceeded").map(|r| r.action), Some(Action::Return));
        assert_eq!(first_match(&rules, 500, b"other").map(|r| r.action), None);
        assert_eq!(first_match(&rules, 404, b"").map(|r| r.action), Some(Action::Next));
        assert!(first_match(&rules, 200, b"model busy").is_none());
    }

    #[test]
    fn invalid_rules_are_named() {
        let cases = [
            (json!({}), "retry_rules must be an array"),
            (json!([1]), "retry_rules[0].rule must be an object"),
            (
                json!([{"status": 99, "action": "next", "breaker": "neutral"}]),
                "retry_rules[0].status: must be an HTTP status",
            ),
            (
                json!([{"status": "599-500", "action": "next", "breaker": "neutral"}]),
                "retry_rules[0].status: \"599-500\"",
            ),
            (json!([{"status": 500, "action": "again", "breaker": "neutral"}]), "retry_rules[0].action"),
            (json!([{"status": 500, "action": "next", "breaker": "maybe"}]), "retry_rules[0].breaker"),
            (
                json!([{"status": 500, "action": "next", "breaker": "neutral", "body": {"regex": "("}}]),
                "retry_rules[0].body.regex: not a valid",
            ),
            (
                json!([{"status": 500, "action": "next", "breaker": "neutral", "body": ""}]),
                "retry_rules[0].body: must not be empty",
            ),
            (
                json!([{"status": 500, "action": "next", "breaker": "neutral", "bdy": "x"}]),
                "retry_rules[0].bdy: unknown field",
            ),
        ];
        for (doc, want) in cases {
            let err = parse(&doc).unwrap_err();
            assert!(err.starts_with(want), "{doc}: {err}");
        }
        let many = Value::Array(vec![json!({"status": 500, "action": "next", "breaker": "neutral"}); MAX_RULES + 1]);
        assert!(parse(&many).unwrap_err().contains("at most 32"));
    }
}
