//! Host names and addresses: which `Host` headers may reach the admin API and the dashboard
//! (SPEC §15.7), and whether a base URL points back at this gateway (SPEC §15.9).
//!
//! Why the `Host` check: a page on a DNS-rebinding domain (`evil.example` resolving to
//! 127.0.0.1) is same-origin with itself, so the browser lets its scripts call the gateway and
//! sends `Host: evil.example` and a matching `Origin`. Only the `Host` header tells such a request
//! from one the user made; the Jupyter and Vite dev servers refuse foreign hosts for this reason.

use std::net::{IpAddr, SocketAddr};

/// `localhost`, any `*.localhost` name (RFC 6761 reserves them for loopback), or a loopback
/// address. `host` has no port; brackets around an IPv6 address are allowed.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(&host);
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// What follows a URL's scheme and its `://` (all of `url` without one). Looked for from each
/// `:`: a substring search first builds a searcher that costs more than this walk, and a proxied
/// request's upstream URL is looked at this way.
pub fn after_scheme(url: &str) -> &str {
    let bytes = url.as_bytes();
    let mut from = 0;
    while let Some(colon) = bytes[from..].iter().position(|&b| b == b':') {
        let at = from + colon;
        if bytes[at..].starts_with(b"://") {
            return &url[at + 3..];
        }
        from = at + 1;
    }
    url
}

/// The host part of a `Host` header value (`name`, `name:port`, `[v6]`, `[v6]:port`).
pub fn host_without_port(value: &str) -> &str {
    let value = value.trim();
    if let Some(rest) = value.strip_prefix('[') {
        return match rest.find(']') {
            Some(end) => &value[..end + 2],
            None => value,
        };
    }
    match value.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => value,
    }
}

/// Whether a request with this `Host` may use the admin API or the dashboard without an admin
/// token: a loopback name or address, or one of `allowed` (`name` allows every port,
/// `name:port` only that port).
pub fn host_allowed(host_header: Option<&str>, allowed: &[String]) -> bool {
    // Browsers always send Host; a request without one did not come from a web page.
    let Some(value) = host_header else { return true };
    let value = value.trim().to_ascii_lowercase();
    let host = host_without_port(&value);
    if is_loopback_host(host) {
        return true;
    }
    allowed.iter().any(|a| *a == value || *a == host)
}

/// Whether `base_url` would send a request to the gateway listening on `listen`: its port, and
/// a loopback name or address — or, when listening on every address, any local address.
pub fn points_at(base_url: &str, listen: SocketAddr) -> bool {
    let Ok(url) = url::Url::parse(base_url) else { return false };
    if url.port_or_known_default() != Some(listen.port()) {
        return false;
    }
    let ip = match url.host() {
        Some(url::Host::Domain(name)) => return is_loopback_host(name) && reaches_loopback(listen.ip()),
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
        None => return false,
    };
    if listen.ip().is_unspecified() {
        return ip.is_loopback() || ip.is_unspecified() || is_local_address(ip);
    }
    ip == listen.ip()
        || (ip.is_loopback() && listen.ip().is_loopback())
        || (ip.is_unspecified() && listen.ip().is_loopback())
}

fn reaches_loopback(listen: IpAddr) -> bool {
    listen.is_loopback() || listen.is_unspecified()
}

/// An address of this machine: one a socket can be bound to.
fn is_local_address(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind((ip, 0)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_follows_the_scheme() {
        for (url, after) in [
            ("https://api.example.com/v1", "api.example.com/v1"),
            ("http://user:pw@h:8080/x", "user:pw@h:8080/x"),
            ("http:/h", "http:/h"),
            ("h:8080/x", "h:8080/x"),
            ("h:8080/x://y", "y"),
            ("://h", "h"),
            ("no scheme", "no scheme"),
            ("", ""),
            ("a:", "a:"),
            ("a:/", "a:/"),
        ] {
            assert_eq!(after_scheme(url), after, "{url}");
            assert_eq!(after_scheme(url), url.split_once("://").map_or(url, |(_, rest)| rest), "{url}");
        }
    }

    #[test]
    fn loopback_hosts() {
        for host in ["localhost", "LOCALHOST", "app.localhost", "127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost."]
        {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in ["evil.example", "localhost.evil.example", "10.0.0.1", "0.0.0.0", "[::2]", ""] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn host_headers_with_and_without_ports() {
        assert_eq!(host_without_port("127.0.0.1:3999"), "127.0.0.1");
        assert_eq!(host_without_port("[::1]:3999"), "[::1]");
        assert_eq!(host_without_port("[::1]"), "[::1]");
        assert_eq!(host_without_port("example.com"), "example.com");
        let allowed = vec!["gw.internal".to_string(), "box.lan:3999".to_string()];
        assert!(host_allowed(Some("127.0.0.1:3999"), &[]));
        assert!(host_allowed(Some("localhost"), &[]));
        assert!(host_allowed(Some("[::1]:3999"), &[]));
        assert!(host_allowed(None, &[]));
        assert!(!host_allowed(Some("evil.example"), &[]));
        assert!(!host_allowed(Some("evil.example:3999"), &allowed));
        assert!(host_allowed(Some("GW.internal:8080"), &allowed), "a bare name allows every port");
        assert!(host_allowed(Some("box.lan:3999"), &allowed));
        assert!(!host_allowed(Some("box.lan:4000"), &allowed), "name:port allows that port only");
    }

    #[test]
    fn base_urls_that_point_back_at_the_gateway() {
        let lo: SocketAddr = "127.0.0.1:3999".parse().unwrap();
        for url in [
            "http://127.0.0.1:3999",
            "http://localhost:3999/v1",
            "http://[::1]:3999",
            "http://127.0.0.1:3999/api/x",
            "http://0.0.0.0:3999",
        ] {
            assert!(points_at(url, lo), "{url}");
        }
        for url in ["http://127.0.0.1:4000", "https://api.anthropic.com", "http://example.com:3999", "not a url"] {
            assert!(!points_at(url, lo), "{url}");
        }
        let default_port: SocketAddr = "127.0.0.1:80".parse().unwrap();
        assert!(points_at("http://localhost", default_port));
        assert!(!points_at("https://localhost", default_port));
        let any: SocketAddr = "0.0.0.0:3999".parse().unwrap();
        assert!(points_at("http://127.0.0.1:3999", any));
        assert!(points_at("http://0.0.0.0:3999", any));
        assert!(!points_at("http://192.0.2.1:3999", any), "a documentation address is no local address");
    }
}
