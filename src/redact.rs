//! Redaction of secrets by their literal value (SPEC §15.6).
//!
//! Guessing what a key looks like (`sk-…`) misses every key of another shape, so the gateway
//! redacts exactly the secrets it knows: every endpoint key, the admin token, and — per request —
//! the credential the client presented. Each is replaced by its mask (`sk-…c3f9`) wherever text
//! is stored or logged (request records, connectivity results, breaker notes, logs, live events)
//! and in every non-2xx upstream body relayed to a client. Successful bodies and streams are not
//! scanned: they are the model's answer, and scanning them would cost every request.
//!
//! Secrets shorter than [`MIN_SCANNED_LEN`] are not searched for (they would match ordinary
//! words); they are masked in full wherever they are shown.
//!
//! The set of secrets is process-wide (`install`): logs are process-wide, and several gateways
//! may share one process in tests. Each owner (a gateway) registers its own secrets; the
//! matcher is rebuilt from the union, on the admin path only.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use aho_corasick::{AhoCorasick, MatchKind};
use arc_swap::ArcSwap;

use crate::secrets::mask_secret;

/// Secrets shorter than this are never searched for in text.
pub const MIN_SCANNED_LEN: usize = 8;

/// One set of secrets, ready to search for.
#[derive(Default)]
pub struct Redactor {
    matcher: Option<AhoCorasick>,
    masks: Vec<String>,
}

impl Redactor {
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Redactor {
        let mut unique: Vec<&str> = secrets.into_iter().filter(|s| s.len() >= MIN_SCANNED_LEN).collect();
        unique.sort_unstable();
        unique.dedup();
        if unique.is_empty() {
            return Redactor::default();
        }
        // Leftmost-longest: a key that contains another key is replaced whole.
        let matcher = AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(&unique).ok();
        let masks = unique.iter().map(|s| mask_secret(s)).collect();
        Redactor { matcher, masks }
    }

    /// `text` with every known secret (and `extra`, when long enough) replaced by its mask.
    pub fn scrub<'t>(&self, text: &'t str, extra: Option<&str>) -> Cow<'t, str> {
        let mut out = Cow::Borrowed(text);
        if let Some(matcher) = &self.matcher
            && matcher.is_match(text)
        {
            out = Cow::Owned(matcher.replace_all(text, &self.masks));
        }
        if let Some(extra) = extra.filter(|e| e.len() >= MIN_SCANNED_LEN)
            && out.contains(extra)
        {
            out = Cow::Owned(out.replace(extra, &mask_secret(extra)));
        }
        out
    }

    /// Bytes (a relayed error body) with every secret replaced; `None` when there was none.
    pub fn scrub_bytes(&self, bytes: &[u8], extra: Option<&str>) -> Option<Vec<u8>> {
        let mut out: Option<Vec<u8>> = None;
        if let Some(matcher) = &self.matcher
            && matcher.is_match(bytes)
        {
            out = Some(matcher.replace_all_bytes(bytes, &self.masks));
        }
        if let Some(extra) = extra.filter(|e| e.len() >= MIN_SCANNED_LEN) {
            let current = out.as_deref().unwrap_or(bytes);
            if memchr_find(current, extra.as_bytes()) {
                let text = String::from_utf8_lossy(current).replace(extra, &mask_secret(extra));
                out = Some(text.into_bytes());
            }
        }
        out
    }

    /// Redact in place (for the strings of a record).
    pub fn scrub_in_place(&self, text: &mut String, extra: Option<&str>) {
        if let Cow::Owned(clean) = self.scrub(text, extra) {
            *text = clean;
        }
    }
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

struct Registry {
    owners: Mutex<HashMap<u64, Vec<String>>>,
    current: ArcSwap<Redactor>,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry {
        owners: Mutex::new(HashMap::new()),
        current: ArcSwap::from_pointee(Redactor::default()),
    })
}

/// Set the secrets of `owner` (replacing its earlier ones) and rebuild the process-wide matcher.
pub fn install(owner: u64, secrets: Vec<String>) {
    let registry = registry();
    let mut owners = registry.owners.lock().unwrap_or_else(|p| p.into_inner());
    owners.insert(owner, secrets);
    let all = owners.values().flatten().map(String::as_str);
    registry.current.store(Arc::new(Redactor::new(all)));
}

/// Forget the secrets of `owner` (a gateway that stopped).
pub fn uninstall(owner: u64) {
    let registry = registry();
    let mut owners = registry.owners.lock().unwrap_or_else(|p| p.into_inner());
    owners.remove(&owner);
    let all = owners.values().flatten().map(String::as_str);
    registry.current.store(Arc::new(Redactor::new(all)));
}

/// The process-wide redactor as it is now.
pub fn current() -> Arc<Redactor> {
    registry().current.load_full()
}

/// Shorthand: `text` with every known secret masked.
pub fn scrub(text: &str) -> Cow<'_, str> {
    registry().current.load().scrub(text, None)
}

/// A `tracing` writer that redacts every log line before it reaches its destination, so no code
/// path can log a key by accident.
pub struct RedactingWriter<W>(pub W);

impl<W: std::io::Write> std::io::Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match current().scrub_bytes(buf, None) {
            Some(clean) => self.0.write_all(&clean).map(|()| buf.len()),
            None => self.0.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configured_secret_is_replaced_whatever_its_shape() {
        let keys = ["sk-ant-api03-abcdefghijklmnop", "dGhpcyBpcyBhIGJhc2U2NCBrZXk=", "short123", "tiny"];
        let r = Redactor::new(keys);
        let text = "key sk-ant-api03-abcdefghijklmnop then dGhpcyBpcyBhIGJhc2U2NCBrZXk= and short123, tiny";
        let clean = r.scrub(text, None);
        for k in &keys[..3] {
            assert!(!clean.contains(k), "{k} survived: {clean}");
        }
        assert!(clean.contains("sk-…mnop"), "{clean}");
        assert!(clean.contains("tiny"), "a secret under 8 characters is not searched for");
        assert_eq!(r.scrub("nothing here", None), "nothing here");
        assert!(matches!(r.scrub("nothing here", None), Cow::Borrowed(_)));
    }

    #[test]
    fn a_key_containing_another_is_replaced_whole() {
        let r = Redactor::new(["abcdefgh", "abcdefgh-longer-key-1234"]);
        let clean = r.scrub("x abcdefgh-longer-key-1234 y abcdefgh z", None);
        assert!(!clean.contains("longer-key"), "{clean}");
        assert!(!clean.contains("abcdefgh"), "{clean}");
    }

    #[test]
    fn the_extra_credential_and_bytes_are_redacted_too() {
        let r = Redactor::new(["endpoint-key-0001"]);
        let clean = r.scrub("client ccm-clientsecret99 and endpoint-key-0001", Some("ccm-clientsecret99"));
        assert!(!clean.contains("clientsecret99") && !clean.contains("endpoint-key-0001"), "{clean}");
        let body = br#"{"error":{"message":"bad key endpoint-key-0001"}}"#;
        let out = r.scrub_bytes(body, None).unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("endpoint-key-0001"));
        assert_eq!(r.scrub_bytes(b"clean", None), None);
        assert_eq!(Redactor::default().scrub_bytes(b"clean", Some("nothing-like-it")), None);
    }

    #[test]
    fn the_registry_is_the_union_of_its_owners() {
        install(u64::MAX - 1, vec!["owner-one-secret".into()]);
        install(u64::MAX - 2, vec!["owner-two-secret".into()]);
        let clean = scrub("owner-one-secret owner-two-secret").into_owned();
        assert!(!clean.contains("owner-one") && !clean.contains("owner-two"), "{clean}");
        uninstall(u64::MAX - 1);
        assert!(scrub("owner-one-secret").contains("owner-one-secret"));
        uninstall(u64::MAX - 2);
    }
}
