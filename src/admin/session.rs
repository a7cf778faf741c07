//! Dashboard sessions (SPEC §10): when an admin token is set, a person logs in once by posting
//! the token to `/login` and gets a **signed, expiring session cookie** — never the token itself —
//! that the admin API accepts in place of `Authorization: Bearer` (the page's `EventSource` on
//! `/api/events` cannot send headers). State-changing calls authenticated by the cookie must also
//! carry a CSRF token header.
//!
//! Cookie: `ccmesh_session=v1.<expires unix secs>.<nonce: 32 hex>.<HMAC-SHA256: 64 hex>`,
//! `HttpOnly; SameSite=Strict; Path=/` (+ `Secure` behind a TLS proxy that says
//! `X-Forwarded-Proto: https`), valid for [`SESSION_TTL`].
//!
//! Keys, and why:
//! - The MAC key is `HMAC(process secret, token)`: the process secret is 32 random bytes drawn
//!   once per process, so a cookie dies with the process (log in again after a restart) and a
//!   cookie from one gateway is worthless at another with the same token; mixing in the token
//!   means changing the token (a restart) invalidates every session, and two gateways with
//!   different tokens in one process (the tests) never accept each other's cookies.
//! - The cookie carries no secret: forging one needs the key, which never leaves the process.
//! - The CSRF token is `HMAC(key, "csrf" + nonce)`: bound to the session, so a token planted by
//!   an attacker (a cookie set from a sibling subdomain, say) does not match a victim's session.
//!   The page gets it embedded in its HTML (`<meta name="ccmesh-csrf">`) and sends it as
//!   `x-ccmesh-csrf`; `SameSite=Strict` already keeps cross-site requests from carrying the
//!   cookie, the header is the second wall. Comparisons take constant time.
//! - Logout revokes the session's nonce in memory until its expiry (bounded set), so a copy of
//!   the cookie stops working too, not only the browser's.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderValue, header};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use crate::gateway::Gateway;
use crate::secrets::constant_time_eq;

pub const SESSION_COOKIE: &str = "ccmesh_session";
/// The header that carries the CSRF token on state-changing calls.
pub const CSRF_HEADER: &str = "x-ccmesh-csrf";
/// How long a login lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Revoked sessions remembered at most (each is forgotten when it would have expired anyway).
const MAX_REVOKED: usize = 10_000;

/// A valid session: its nonce identifies it (for revocation and the CSRF token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub nonce: String,
    pub expires_unix: u64,
}

/// Why a presented cookie was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not of our format, or its signature does not match (tampered, or from another process).
    Invalid,
    Expired,
    /// Logged out.
    Revoked,
}

impl Refused {
    pub fn message(self) -> &'static str {
        match self {
            Refused::Invalid => {
                "the dashboard session cookie is not valid (the gateway restarted, or it was altered); log in again at /login"
            }
            Refused::Expired => "the dashboard session expired; log in again at /login",
            Refused::Revoked => "this dashboard session was logged out; log in again at /login",
        }
    }
}

fn process_secret() -> &'static [u8; 32] {
    static SECRET: OnceLock<[u8; 32]> = OnceLock::new();
    SECRET.get_or_init(|| {
        let mut bytes = [0u8; 32];
        if SystemRandom::new().fill(&mut bytes).is_err() {
            // The OS random source failing is not something to run without: no session could
            // be trusted. Refuse every session instead of signing with a guessable key.
            tracing::error!(
                event = "session_random_failed",
                "cannot read the OS random source; dashboard logins will fail"
            );
            return [0u8; 32];
        }
        bytes
    })
}

fn secret_usable() -> bool {
    process_secret().iter().any(|b| *b != 0)
}

/// The MAC key of this process and admin token.
fn key(token: &str) -> hmac::Key {
    let outer = hmac::Key::new(hmac::HMAC_SHA256, process_secret());
    let mut input = b"ccmesh-dashboard-session\0".to_vec();
    input.extend_from_slice(token.as_bytes());
    let derived = hmac::sign(&outer, &input);
    hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref())
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

fn signed_part(expires_unix: u64, nonce: &str) -> String {
    format!("v1.{expires_unix}.{nonce}")
}

fn unix_now(gw: &Gateway) -> u64 {
    gw.clock.wall().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Issue a new session for `token`; `None` only if the OS random source failed.
pub fn issue(token: &str, now_unix: u64) -> Option<(Session, String)> {
    if !secret_usable() {
        return None;
    }
    let mut nonce = [0u8; 16];
    SystemRandom::new().fill(&mut nonce).ok()?;
    let session = Session { nonce: hex(&nonce), expires_unix: now_unix + SESSION_TTL.as_secs() };
    let body = signed_part(session.expires_unix, &session.nonce);
    let mac = hmac::sign(&key(token), body.as_bytes());
    let value = format!("{body}.{}", hex(mac.as_ref()));
    Some((session, value))
}

/// Check a cookie value: format, signature (constant time), expiry, revocation.
pub fn verify(token: &str, value: &str, now_unix: u64) -> Result<Session, Refused> {
    if !secret_usable() {
        return Err(Refused::Invalid);
    }
    let mut parts = value.split('.');
    let (Some("v1"), Some(expires), Some(nonce), Some(mac), None) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refused::Invalid);
    };
    let expires_unix: u64 = expires.parse().map_err(|_| Refused::Invalid)?;
    if nonce.len() != 32 || unhex(nonce).is_none() {
        return Err(Refused::Invalid);
    }
    let mac = unhex(mac).ok_or(Refused::Invalid)?;
    hmac::verify(&key(token), signed_part(expires_unix, nonce).as_bytes(), &mac).map_err(|_| Refused::Invalid)?;
    if now_unix >= expires_unix {
        return Err(Refused::Expired);
    }
    if is_revoked(nonce) {
        return Err(Refused::Revoked);
    }
    Ok(Session { nonce: nonce.to_string(), expires_unix })
}

/// The CSRF token of a session.
pub fn csrf_token(token: &str, session: &Session) -> String {
    let mac = hmac::sign(&key(token), format!("csrf.{}", session.nonce).as_bytes());
    hex(mac.as_ref())
}

/// Whether `presented` is the session's CSRF token (constant time).
pub fn csrf_ok(token: &str, session: &Session, presented: &str) -> bool {
    constant_time_eq(presented.trim().as_bytes(), csrf_token(token, session).as_bytes())
}

fn revoked() -> &'static Mutex<HashMap<String, u64>> {
    static REVOKED: OnceLock<Mutex<HashMap<String, u64>>> = OnceLock::new();
    REVOKED.get_or_init(|| Mutex::new(HashMap::new()))
}

fn is_revoked(nonce: &str) -> bool {
    revoked().lock().map(|set| set.contains_key(nonce)).unwrap_or(false)
}

/// Forget the session until it would have expired anyway.
pub fn revoke(session: &Session, now_unix: u64) {
    if let Ok(mut set) = revoked().lock() {
        set.retain(|_, expires| *expires > now_unix);
        if set.len() >= MAX_REVOKED {
            // Full of live revocations: drop the one closest to expiring on its own.
            if let Some(oldest) = set.iter().min_by_key(|(_, e)| **e).map(|(n, _)| n.clone()) {
                set.remove(&oldest);
            }
        }
        set.insert(session.nonce.clone(), session.expires_unix);
    }
}

/// A cookie's value from the `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// The session a request presents, if the gateway has a token. `Ok(None)`: no cookie at all.
pub fn from_request(gw: &Gateway, headers: &HeaderMap) -> Result<Option<Session>, Refused> {
    let Some(token) = gw.admin_token.as_deref() else { return Ok(None) };
    match cookie(headers, SESSION_COOKIE) {
        None => Ok(None),
        Some(v) => verify(token, v, unix_now(gw)).map(Some),
    }
}

/// A new session for this gateway (which must have a token): the session and its cookie value.
pub fn login(gw: &Gateway) -> Option<(Session, String)> {
    issue(gw.admin_token.as_deref()?, unix_now(gw))
}

pub fn logout(gw: &Gateway, session: &Session) {
    revoke(session, unix_now(gw));
}

/// `Secure` only when a TLS-terminating proxy says the browser speaks HTTPS: on plain HTTP
/// (loopback) a browser would drop a `Secure` cookie.
fn secure(headers: &HeaderMap) -> &'static str {
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    if https { "; Secure" } else { "" }
}

pub fn set_cookie(request_headers: &HeaderMap, value: &str) -> HeaderValue {
    let cookie = format!(
        "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        SESSION_TTL.as_secs(),
        secure(request_headers)
    );
    HeaderValue::from_str(&cookie).unwrap_or_else(|_| HeaderValue::from_static("ccmesh_session=; Path=/; Max-Age=0"))
}

pub fn clear_cookie(request_headers: &HeaderMap) -> HeaderValue {
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}", secure(request_headers));
    HeaderValue::from_str(&cookie).unwrap_or_else(|_| HeaderValue::from_static("ccmesh_session=; Path=/; Max-Age=0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_795_946_400;

    #[test]
    fn a_session_verifies_until_it_expires() {
        let (session, cookie) = issue("tok", NOW).unwrap();
        assert!(!cookie.contains("tok"));
        assert_eq!(verify("tok", &cookie, NOW), Ok(session.clone()));
        assert_eq!(verify("tok", &cookie, NOW + SESSION_TTL.as_secs() - 1), Ok(session));
        assert_eq!(verify("tok", &cookie, NOW + SESSION_TTL.as_secs()), Err(Refused::Expired));
    }

    #[test]
    fn tampering_or_another_token_is_refused() {
        let (_, cookie) = issue("tok", NOW).unwrap();
        assert_eq!(verify("other", &cookie, NOW), Err(Refused::Invalid));
        // A later expiry with the old signature.
        let parts: Vec<&str> = cookie.split('.').collect();
        let longer = format!("v1.{}.{}.{}", NOW + 999_999, parts[2], parts[3]);
        assert_eq!(verify("tok", &longer, NOW), Err(Refused::Invalid));
        // One flipped MAC digit.
        let mut flipped = cookie.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(verify("tok", std::str::from_utf8(&flipped).unwrap(), NOW), Err(Refused::Invalid));
        for junk in ["", "v1", "v1.1.2.3", "v2.1.00.00", "tok", &format!("{cookie}.x")] {
            assert_eq!(verify("tok", junk, NOW), Err(Refused::Invalid), "{junk}");
        }
    }

    #[test]
    fn csrf_tokens_are_per_session_and_revocation_sticks() {
        let (a, _) = issue("tok", NOW).unwrap();
        let (b, b_cookie) = issue("tok", NOW).unwrap();
        assert!(csrf_ok("tok", &a, &csrf_token("tok", &a)));
        assert!(!csrf_ok("tok", &a, &csrf_token("tok", &b)));
        assert!(!csrf_ok("tok", &a, ""));
        assert!(!csrf_ok("other", &a, &csrf_token("tok", &a)));
        revoke(&b, NOW);
        assert_eq!(verify("tok", &b_cookie, NOW), Err(Refused::Revoked));
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1; ccmesh_session=v1.x; b=2"));
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("v1.x"));
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, "c"), None);
        let set = set_cookie(&HeaderMap::new(), "v1.1.2.3").to_str().unwrap().to_string();
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && !set.contains("Secure"), "{set}");
        let mut tls = HeaderMap::new();
        tls.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(set_cookie(&tls, "v").to_str().unwrap().ends_with("; Secure"));
    }
}
