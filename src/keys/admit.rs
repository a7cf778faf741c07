//! The decision at the one enforcement point (SPEC §12, §15.10), pure: who is asking
//! (`authenticate`: missing, unknown, disabled, expired → 401), and may they ask this
//! (`authorize`: a model outside the key's list → 403; a budgeted key and a model without a
//! price → 403). `admit` is both. What a refusal tells the client, in each protocol's native
//! shape, is here too (`Refusal::to_error`). The rate limits and budgets — state — are the
//! limiter's (`limiter.rs`); the endpoint list filters candidates in routing (`proxy.rs`), whose
//! refusals (`Refusal::Endpoint`, `Refusal::NoEndpoint`) are worded here.

use std::sync::Arc;

use super::key::ClientKey;
use super::limiter::{Limit, LimitKind};
use super::secret::{MAX_LEN, SecretHash};
use crate::protocol::errors::{ErrorKind, GatewayError};
use crate::secrets::constant_time_eq;

/// The keys as the request path holds them (in the configuration snapshot), and whether keys
/// are required even while none exists (`require_client_key`).
#[derive(Debug, Default)]
pub struct KeySet {
    keys: Vec<Arc<ClientKey>>,
    required: bool,
}

impl KeySet {
    pub fn new(keys: Vec<ClientKey>, required: bool) -> KeySet {
        KeySet { keys: keys.into_iter().map(Arc::new).collect(), required }
    }

    /// Enforcement is on once any key exists or keys are required.
    pub fn enforced(&self) -> bool {
        self.required || !self.keys.is_empty()
    }

    pub fn all(&self) -> &[Arc<ClientKey>] {
        &self.keys
    }

    pub fn find(&self, name: &str) -> Option<&Arc<ClientKey>> {
        self.keys.iter().find(|k| k.name.eq_ignore_ascii_case(name))
    }

    /// The key whose secret is `credential`. Every stored hash is compared, in constant time,
    /// and the loop does not stop at a match: the time taken says nothing about which key, or
    /// how much of one, matched.
    fn by_secret(&self, credential: &str) -> Option<&Arc<ClientKey>> {
        let hash = SecretHash::of(credential);
        let mut found = None;
        for key in &self.keys {
            if constant_time_eq(&key.secret_hash.0, &hash.0) && found.is_none() {
                found = Some(key);
            }
        }
        found
    }
}

/// What the gateway let through: the key (when keys are enforced).
#[derive(Clone, Debug, Default)]
pub struct Admission {
    pub key: Option<Arc<ClientKey>>,
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// No credential at all.
    Missing,
    /// A credential that is no key's.
    Unknown,
    Disabled {
        key: String,
    },
    Expired {
        key: String,
        at: String,
    },
    /// The model is not in the key's list (or the request names none, and the key has a list).
    Model {
        key: String,
        model: Option<String>,
        allowed: Vec<String>,
    },
    /// An explicit endpoint outside the key's list.
    Endpoint {
        key: String,
        endpoint: String,
        allowed: Vec<String>,
    },
    /// The key's endpoint list alone leaves no candidate.
    NoEndpoint {
        key: String,
        allowed: Vec<String>,
    },
    /// A budgeted key and a model without a price (its cost could not be charged).
    Unpriced {
        key: String,
        model: String,
    },
    /// A rate limit, the concurrency limit or a budget (the limiter's verdict).
    Limit {
        key: String,
        limit: Limit,
    },
}

/// Who is asking. `Ok(None)`: keys are not enforced, anyone may.
pub fn authenticate(keys: &KeySet, credential: Option<&str>, now_ms: i64) -> Result<Option<Arc<ClientKey>>, Refusal> {
    if !keys.enforced() {
        return Ok(None);
    }
    let credential = credential.map(str::trim).filter(|c| !c.is_empty()).ok_or(Refusal::Missing)?;
    if credential.len() > MAX_LEN {
        return Err(Refusal::Unknown);
    }
    let key = keys.by_secret(credential).ok_or(Refusal::Unknown)?;
    if !key.enabled {
        return Err(Refusal::Disabled { key: key.name.clone() });
    }
    if let Some((at, _)) = key.expires_at.as_ref().filter(|_| key.expired(now_ms)) {
        return Err(Refusal::Expired { key: key.name.clone(), at: at.clone() });
    }
    Ok(Some(key.clone()))
}

/// May `key` ask for `model`? `priced` says whether a model has a price (the table, or the
/// `default_price` setting).
pub fn authorize(key: &ClientKey, model: Option<&str>, priced: impl Fn(&str) -> bool) -> Result<(), Refusal> {
    let allowed = || key.models.iter().map(|m| m.as_str().to_string()).collect::<Vec<_>>();
    match model {
        Some(m) if !key.allows_model(m) => {
            return Err(Refusal::Model { key: key.name.clone(), model: Some(m.to_string()), allowed: allowed() });
        }
        // A request that names no model (a pass-through path) cannot be checked against the
        // list: a key limited to some models may not use it.
        None if !key.models.is_empty() => {
            return Err(Refusal::Model { key: key.name.clone(), model: None, allowed: allowed() });
        }
        _ => {}
    }
    if let Some(m) = model
        && key.limits.has_budget()
        && !priced(m)
    {
        return Err(Refusal::Unpriced { key: key.name.clone(), model: m.to_string() });
    }
    Ok(())
}

/// Both steps: the whole decision before routing (the limiter's check follows in the shell).
pub fn admit(
    keys: &KeySet,
    credential: Option<&str>,
    model: Option<&str>,
    priced: impl Fn(&str) -> bool,
    now_ms: i64,
) -> Result<Admission, Refusal> {
    let key = authenticate(keys, credential, now_ms)?;
    if let Some(k) = &key {
        authorize(k, model, priced)?;
    }
    Ok(Admission { key })
}

/// Seconds as a person reads them: `45 s`, `12 min`, `3 h 12 min`, `2 d 4 h`.
pub fn human_secs(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs.div_ceil(60)),
        3600..86_400 => format!("{} h {} min", secs / 3600, (secs % 3600) / 60),
        _ => format!("{} d {} h", secs / 86_400, (secs % 86_400) / 3600),
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() { "every one".to_string() } else { items.join(", ") }
}

impl Refusal {
    /// The key a refusal is about, when one was presented and found.
    pub fn key(&self) -> Option<&str> {
        match self {
            Refusal::Missing | Refusal::Unknown => None,
            Refusal::Disabled { key }
            | Refusal::Expired { key, .. }
            | Refusal::Model { key, .. }
            | Refusal::Endpoint { key, .. }
            | Refusal::NoEndpoint { key, .. }
            | Refusal::Unpriced { key, .. }
            | Refusal::Limit { key, .. } => Some(key),
        }
    }

    /// A bounded label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Unknown => "unknown",
            Refusal::Disabled { .. } => "disabled",
            Refusal::Expired { .. } => "expired",
            Refusal::Model { .. } => "model",
            Refusal::Endpoint { .. } | Refusal::NoEndpoint { .. } => "endpoint",
            Refusal::Unpriced { .. } => "unpriced",
            Refusal::Limit { limit, .. } => limit.kind.as_str(),
        }
    }

    /// The gateway's answer (SPEC §9: 401 `authentication_error` / `invalid_api_key`, 403
    /// `permission_error` / `permission_denied`, 429 `rate_limit_error` / `rate_limit_exceeded`,
    /// a spent budget 429 `insufficient_quota` with `x-should-retry: false`).
    pub fn to_error(&self) -> GatewayError {
        const HOW: &str = "send it as x-api-key, Authorization: Bearer, x-goog-api-key or ?key=";
        let auth = |message: String| GatewayError::new(ErrorKind::Authentication, "invalid_api_key", message);
        let denied = |message: String| GatewayError::new(ErrorKind::Permission, "permission_denied", message);
        match self {
            Refusal::Missing => auth(format!(
                "this gateway requires a client key and the request has none; {HOW} (the gateway's operator makes one with `ccmesh key add NAME`)"
            )),
            Refusal::Unknown => auth(format!(
                "the client key presented is not one this gateway knows (mistyped, rotated or deleted); {HOW}, with a current key from the gateway's operator"
            )),
            Refusal::Disabled { key } => auth(format!(
                "client key '{key}' is disabled; the gateway's operator can enable it with `ccmesh key edit {key} --enable`"
            )),
            Refusal::Expired { key, at } => auth(format!(
                "client key '{key}' expired at {at}; the gateway's operator can extend it with `ccmesh key edit {key} --expires-at TIME`"
            )),
            Refusal::Model { key, model: Some(model), allowed } => denied(format!(
                "client key '{key}' may not use model '{model}'; it may use: {}",
                list(allowed)
            ))
            .with_param("model"),
            Refusal::Model { key, model: None, allowed } => denied(format!(
                "client key '{key}' may use only some models ({}), and this request names none",
                list(allowed)
            )),
            Refusal::Endpoint { key, endpoint, allowed } => denied(format!(
                "client key '{key}' may not use endpoint '{endpoint}'; it may use: {}",
                list(allowed)
            )),
            Refusal::NoEndpoint { key, allowed } => denied(format!(
                "client key '{key}' may use only the endpoints {}, and none of them can serve this request",
                list(allowed)
            )),
            Refusal::Unpriced { key, model } => denied(format!(
                "client key '{key}' has a dollar budget, and model '{model}' has no price, so what it costs could not be charged; ask for a priced model, or the gateway's operator sets a price for it (`PUT /api/prices/{model}`) or a default_price"
            ))
            .with_param("model"),
            Refusal::Limit { key, limit } => limit_error(key, limit),
        }
    }
}

fn limit_error(key: &str, limit: &Limit) -> GatewayError {
    let retry = limit.retry_after_ms.div_ceil(1000).max(1);
    let name = limit.kind.as_str();
    let dollars = |v: f64| format!("${v:.4}");
    match limit.kind {
        LimitKind::Rpm => GatewayError::new(
            ErrorKind::RateLimited,
            "rate_limit_exceeded",
            format!(
                "client key '{key}' reached its rpm limit ({} requests per minute); retry after {}",
                limit.limit,
                human_secs(retry)
            ),
        )
        .with_retry_after(retry),
        LimitKind::Tpm => GatewayError::new(
            ErrorKind::RateLimited,
            "rate_limit_exceeded",
            format!(
                "client key '{key}' reached its tpm limit ({} tokens per minute; {} charged in the last 60 s); retry after {}",
                limit.limit,
                limit.used,
                human_secs(retry)
            ),
        )
        .with_retry_after(retry),
        LimitKind::Concurrency => GatewayError::new(
            ErrorKind::RateLimited,
            "rate_limit_exceeded",
            format!(
                "client key '{key}' has {} requests in flight, its concurrency limit; retry when one of them has finished",
                limit.limit
            ),
        )
        .with_retry_after(retry),
        LimitKind::UsdPerDay | LimitKind::UsdPer5h | LimitKind::UsdPerMonth => {
            let window = match limit.kind {
                LimitKind::UsdPerDay => "daily (UTC day)",
                LimitKind::UsdPer5h => "rolling 5-hour",
                _ => "monthly (UTC month)",
            };
            let when = match limit.resets_at_ms {
                Some(at) if limit.kind == LimitKind::UsdPer5h => format!(
                    "enough of it frees up at {} (in {}) as earlier spend leaves the window",
                    crate::timefmt::rfc3339_ms(at),
                    human_secs(retry)
                ),
                Some(at) => {
                    format!("the window resets at {} (in {})", crate::timefmt::rfc3339_ms(at), human_secs(retry))
                }
                None => format!("retry after {}", human_secs(retry)),
            };
            GatewayError::new(
                ErrorKind::RateLimited,
                "insufficient_quota",
                format!(
                    "client key '{key}' has spent its {window} budget ({name}: {} of {}); {when}",
                    dollars(limit.used),
                    dollars(limit.limit)
                ),
            )
            .with_retry_after(retry)
            .quota()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::ModelPattern;
    use crate::protocol::Protocol;

    use crate::keys::key::test_key as key;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn nothing_is_enforced_without_keys_unless_required() {
        let none = KeySet::new(vec![], false);
        assert!(admit(&none, None, Some("m"), |_| false, NOW).unwrap().key.is_none());
        let required = KeySet::new(vec![], true);
        assert_eq!(admit(&required, None, None, |_| true, NOW).unwrap_err(), Refusal::Missing);
        assert_eq!(admit(&required, Some("ccm-x"), None, |_| true, NOW).unwrap_err(), Refusal::Unknown);
    }

    #[test]
    fn authentication_tells_missing_unknown_disabled_and_expired_apart() {
        let mut off = key("off", "ccm-off-secret");
        off.enabled = false;
        let mut old = key("old", "ccm-old-secret");
        old.expires_at = Some(("2027-01-15T08:00:00Z".into(), NOW));
        let keys = KeySet::new(vec![key("alice", "ccm-alice-secret"), off, old], false);
        let got = |c: Option<&str>, now: i64| authenticate(&keys, c, now).map(|k| k.map(|k| k.name.clone()));
        assert_eq!(got(Some("ccm-alice-secret"), NOW).unwrap().as_deref(), Some("alice"));
        assert_eq!(got(Some("  ccm-alice-secret "), NOW).unwrap().as_deref(), Some("alice"), "trimmed");
        assert_eq!(got(None, NOW).unwrap_err(), Refusal::Missing);
        assert_eq!(got(Some(""), NOW).unwrap_err(), Refusal::Missing);
        assert_eq!(got(Some("ccm-alice-secreT"), NOW).unwrap_err(), Refusal::Unknown);
        assert_eq!(got(Some(&"x".repeat(10_000)), NOW).unwrap_err(), Refusal::Unknown);
        assert_eq!(got(Some("ccm-off-secret"), NOW).unwrap_err(), Refusal::Disabled { key: "off".into() });
        assert_eq!(got(Some("ccm-old-secret"), NOW - 1).unwrap().as_deref(), Some("old"));
        assert_eq!(
            got(Some("ccm-old-secret"), NOW).unwrap_err(),
            Refusal::Expired { key: "old".into(), at: "2027-01-15T08:00:00Z".into() }
        );
    }

    #[test]
    fn authorization_checks_the_model_list_and_prices_under_a_budget() {
        let mut k = key("alice", "s");
        k.models = vec![ModelPattern::new("claude-*"), ModelPattern::new("gpt-4o")];
        assert!(authorize(&k, Some("claude-sonnet-4-5"), |_| false).is_ok());
        let e = authorize(&k, Some("gemini-2.5-pro"), |_| true).unwrap_err();
        assert_eq!(
            e,
            Refusal::Model {
                key: "alice".into(),
                model: Some("gemini-2.5-pro".into()),
                allowed: vec!["claude-*".into(), "gpt-4o".into()]
            }
        );
        assert!(matches!(authorize(&k, None, |_| true), Err(Refusal::Model { model: None, .. })));
        k.models.clear();
        assert!(authorize(&k, None, |_| false).is_ok(), "no list: a model-less request is fine");
        k.limits.usd_per_month = Some(10.0);
        assert_eq!(
            authorize(&k, Some("my-model"), |_| false).unwrap_err(),
            Refusal::Unpriced { key: "alice".into(), model: "my-model".into() }
        );
        assert!(authorize(&k, Some("my-model"), |m| m == "my-model").is_ok());
        assert!(authorize(&k, None, |_| false).is_ok(), "nothing to price");
    }

    #[test]
    fn refusals_speak_each_protocols_error_shape() {
        let cases: Vec<(Refusal, u16, &str, &str, &str)> = vec![
            (Refusal::Missing, 401, "authentication_error", "invalid_request_error", "invalid_api_key"),
            (Refusal::Unknown, 401, "authentication_error", "invalid_request_error", "invalid_api_key"),
            (
                Refusal::Disabled { key: "k".into() },
                401,
                "authentication_error",
                "invalid_request_error",
                "invalid_api_key",
            ),
            (
                Refusal::Model { key: "k".into(), model: Some("m".into()), allowed: vec!["a".into()] },
                403,
                "permission_error",
                "invalid_request_error",
                "permission_denied",
            ),
            (
                Refusal::Limit {
                    key: "k".into(),
                    limit: Limit {
                        kind: LimitKind::Rpm,
                        limit: 60.0,
                        used: 60.0,
                        retry_after_ms: 1500,
                        resets_at_ms: None,
                    },
                },
                429,
                "rate_limit_error",
                "rate_limit_error",
                "rate_limit_exceeded",
            ),
            (
                Refusal::Limit {
                    key: "k".into(),
                    limit: Limit {
                        kind: LimitKind::UsdPerDay,
                        limit: 5.0,
                        used: 5.01,
                        retry_after_ms: 3_600_000,
                        resets_at_ms: Some(NOW),
                    },
                },
                429,
                "rate_limit_error",
                "insufficient_quota",
                "insufficient_quota",
            ),
        ];
        for (refusal, status, anthropic, openai_type, code) in cases {
            let e = refusal.to_error();
            assert_eq!(e.kind.status().as_u16(), status, "{refusal:?}");
            assert_eq!(e.body(Protocol::Claude)["error"]["type"], anthropic, "{refusal:?}");
            let o = e.body(Protocol::Openai);
            assert_eq!((o["error"]["type"].as_str(), o["error"]["code"].as_str()), (Some(openai_type), Some(code)));
        }
        let budget = Refusal::Limit {
            key: "alice".into(),
            limit: Limit {
                kind: LimitKind::UsdPerDay,
                limit: 5.0,
                used: 5.0123,
                retry_after_ms: 11_520_000,
                resets_at_ms: Some(NOW),
            },
        }
        .to_error();
        assert_eq!(budget.retry_after_secs, Some(11_520));
        assert!(budget.message.contains("usd_per_day: $5.0123 of $5.0000"), "{}", budget.message);
        assert!(budget.message.contains("resets at 2027-01-15T08:00:00Z (in 3 h 12 min)"), "{}", budget.message);
        let r = budget.into_response(Protocol::Openai);
        assert_eq!(r.headers()["x-should-retry"], "false");
        assert_eq!(r.headers()["retry-after"], "11520");
        let rpm = Refusal::Limit {
            key: "alice".into(),
            limit: Limit { kind: LimitKind::Rpm, limit: 60.0, used: 60.0, retry_after_ms: 11_200, resets_at_ms: None },
        }
        .to_error();
        assert_eq!(rpm.retry_after_secs, Some(12));
        assert!(rpm.message.contains("rpm limit (60 requests per minute); retry after 12 s"), "{}", rpm.message);
        assert!(rpm.into_response(Protocol::Claude).headers().get("x-should-retry").is_none());
    }

    #[test]
    fn durations_read_like_a_person_says_them() {
        assert_eq!(human_secs(45), "45 s");
        assert_eq!(human_secs(61), "2 min");
        assert_eq!(human_secs(11_520), "3 h 12 min");
        assert_eq!(human_secs(2 * 86_400 + 4 * 3600), "2 d 4 h");
    }
}
