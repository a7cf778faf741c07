//! Telling a name that does not resolve apart from a port that refuses: both reach the gateway
//! as a connect error of its connection pool, but the fixes differ (a misspelt host in
//! `base_url`, or DNS trouble, against an upstream that is down), so messages must say which.
//!
//! Pure: it only walks an error's source chain. There is no error *type* to downcast to:
//! hyper-util's `ConnectError` lives in a private module, and the resolver's own error is the
//! `io::Error` std builds from `getaddrinfo`'s answer (kind `Uncategorized`, which stable code
//! cannot name, and no OS error number). So the phase is recognised by the fixed texts these
//! layers give it — hyper-util's connector names the resolving phase `"dns error"`, reqwest's
//! resolver `"error resolving DNS"`, and std prefixes every `getaddrinfo` failure with
//! `"failed to lookup address information"` — and a TCP-level cause further down (refused,
//! unreachable: an `io::Error` with an OS error number) always wins, so a wording change in a
//! library can only turn "could not resolve host" back into "could not connect", never the
//! reverse. What a `.invalid` host gives on Linux with glibc, as the chain of
//! `UpstreamClient::send`:
//!
//! ```text
//! could not connect: dns error                   proxy::pool::SendError::Connect
//! dns error                                      hyper_util's ConnectError (its HttpConnector)
//! failed to lookup address information: Name or service not known   io::Error (Uncategorized)
//! ```

use std::error::Error as StdError;
use std::io;

/// What the gateway says about a DNS failure (followed by the host when it is known).
pub const COULD_NOT_RESOLVE: &str = "could not resolve host";

/// hyper-util's connector: the resolving phase of a connect.
const HYPER_UTIL_DNS: &str = "dns error";
/// reqwest's own resolver wrapper (the CLI's client).
const REQWEST_DNS: &str = "error resolving DNS";
/// std's text for every `getaddrinfo` failure (`EAI_NONAME`, `EAI_AGAIN`, …).
const GETADDRINFO: &str = "failed to lookup address information";

/// Whether `err`, or anything in its source chain, says the host name could not be resolved.
pub fn is_dns_failure(err: &(dyn StdError + 'static)) -> bool {
    let mut dns = false;
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            // A socket-level failure (refused, unreachable, reset) happened after resolving.
            if io.raw_os_error().is_some() {
                return false;
            }
            if io.get_ref().is_some_and(|inner| inner.to_string().starts_with(GETADDRINFO)) {
                dns = true;
            }
        }
        let text = e.to_string();
        if text == HYPER_UTIL_DNS || text == REQWEST_DNS || text.starts_with(GETADDRINFO) {
            dns = true;
        }
        cur = e.source();
    }
    dns
}

/// "could not resolve host api.example.invalid" (or without the host when the URL has none).
pub fn could_not_resolve(url: &str) -> String {
    match host_of(url) {
        Some(host) => format!("{COULD_NOT_RESOLVE} {host}"),
        None => COULD_NOT_RESOLVE.to_string(),
    }
}

/// The host of an absolute URL, without port or brackets' contents changed.
pub fn host_of(url: &str) -> Option<&str> {
    let rest = crate::hosts::after_scheme(url);
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host_port.starts_with('[') {
        host_port.split_inclusive(']').next()?
    } else {
        host_port.split(':').next()?
    };
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    /// An error with a fixed text and an optional cause, like the layers of a client's chain.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<dyn StdError + Send + Sync>>);
    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl StdError for Layer {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            self.1.as_ref().map(|e| &**e as _)
        }
    }

    fn chain(texts: &[&'static str], root: Option<io::Error>) -> Layer {
        let mut cause: Option<Box<dyn StdError + Send + Sync>> = root.map(|e| Box::new(e) as _);
        for text in texts.iter().rev() {
            cause = Some(Box::new(Layer(text, cause)));
        }
        match cause {
            Some(top) => Layer("request failed", Some(top)),
            None => Layer("request failed", None),
        }
    }

    fn getaddrinfo(detail: &str) -> io::Error {
        io::Error::other(format!("{GETADDRINFO}: {detail}"))
    }

    #[test]
    fn a_name_that_does_not_resolve_is_a_dns_failure() {
        // hyper-util, as the gateway's upstream client reports a `.invalid` host.
        let e = chain(&["client error (Connect)", "dns error"], Some(getaddrinfo("Name or service not known")));
        assert!(is_dns_failure(&e));
        // A resolver that is down, not a missing name: still the resolving phase.
        let e =
            chain(&["client error (Connect)", "dns error"], Some(getaddrinfo("Temporary failure in name resolution")));
        assert!(is_dns_failure(&e));
        // reqwest (the CLI's client) adds its own layer.
        let e = chain(
            &["error sending request", "client error (Connect)", "dns error", "error resolving DNS"],
            Some(getaddrinfo("Name or service not known")),
        );
        assert!(is_dns_failure(&e));
        // Either signal alone is enough: the phase name, or std's text.
        assert!(is_dns_failure(&chain(&["client error (Connect)", "dns error"], None)));
        assert!(is_dns_failure(&chain(&["client error (Connect)"], Some(getaddrinfo("x")))));
    }

    #[test]
    fn a_refused_or_unreachable_port_is_not() {
        let refused = io::Error::from_raw_os_error(111);
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
        assert!(!is_dns_failure(&chain(&["client error (Connect)", "tcp connect error"], Some(refused))));
        let unreachable = io::Error::from_raw_os_error(113);
        assert!(!is_dns_failure(&chain(&["client error (Connect)", "tcp connect error"], Some(unreachable))));
        // An OS error under a layer that happens to mention DNS: the socket's answer wins.
        let e = chain(&["client error (Connect)", "dns error"], Some(io::Error::from_raw_os_error(111)));
        assert!(!is_dns_failure(&e));
        assert!(!is_dns_failure(&io::Error::from(io::ErrorKind::ConnectionReset)));
        assert!(!is_dns_failure(&chain(&["client error (Connect)"], Some(io::Error::other("tls handshake eof")))));
        // Texts that merely contain the words do not count.
        assert!(!is_dns_failure(&chain(&["the dns error page said hello"], None)));
    }

    #[test]
    fn the_message_names_the_host() {
        assert_eq!(
            could_not_resolve("https://api.openai.invalid/v1/models"),
            "could not resolve host api.openai.invalid"
        );
        assert_eq!(could_not_resolve("http://relay.example:8080"), "could not resolve host relay.example");
        assert_eq!(host_of("http://[::1]:9000/x"), Some("[::1]"));
        assert_eq!(host_of("http://user@host.example/x"), Some("host.example"));
        assert_eq!(could_not_resolve(""), "could not resolve host");
    }
}
