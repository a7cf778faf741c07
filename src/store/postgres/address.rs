//! The database URL: parsed once, printed only with its password masked.

use std::time::Duration;

use tokio_postgres::config::SslMode;

/// A `postgres://` URL that passed the checks below.
#[derive(Clone)]
pub struct PgUrl {
    config: tokio_postgres::Config,
    redacted: String,
    password: Option<String>,
}

/// Never the password, even in a `{:?}` of something that holds the URL.
impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl PgUrl {
    /// `postgres://user:password@host:port/database?options` (or `postgresql://`).
    pub fn parse(text: &str) -> Result<PgUrl, String> {
        let text = text.trim();
        let redacted = redact(text);
        if !(text.starts_with("postgres://") || text.starts_with("postgresql://")) {
            return Err(format!(
                "the database URL {redacted} is not a PostgreSQL URL; give postgres://user:password@host:port/database"
            ));
        }
        let config: tokio_postgres::Config =
            text.parse().map_err(|e| format!("the database URL {redacted} cannot be used: {e}"))?;
        if config.get_ssl_mode() == SslMode::Require {
            return Err(format!(
                "the database URL {redacted} asks for sslmode=require, but this ccmesh connects to PostgreSQL without TLS; \
                 reach it over a private network or a Unix socket (host=/run/postgresql), with sslmode=disable or prefer"
            ));
        }
        let password = config.get_password().map(|p| String::from_utf8_lossy(p).into_owned());
        Ok(PgUrl { config, redacted, password })
    }

    /// The URL with its password as `***`: for logs, errors and `/api/status`.
    pub fn redacted(&self) -> String {
        self.redacted.clone()
    }

    /// The password, for the redaction of logs (`crate::redact`).
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref().filter(|p| !p.is_empty())
    }

    /// The connection settings, with the gateway's defaults where the URL says nothing: a
    /// connect timeout, keepalives and a TCP user timeout (a cut network fails a call within
    /// seconds instead of hanging it), and the application name PostgreSQL shows.
    pub fn config(&self, connect_timeout: Duration) -> tokio_postgres::Config {
        let mut config = self.config.clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("ccmesh");
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(Duration::from_secs(10));
        }
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        config
    }
}

/// `text` with every password in it masked: the userinfo's, and `password=` options.
pub fn redact(text: &str) -> String {
    let mut out = text.to_string();
    // The userinfo: between "://" and the last '@' before the path.
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..].find(['/', '?']).map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                let start = rest_start + colon + 1;
                out.replace_range(start..rest_start + at, "***");
            }
        }
    }
    // `password=` in the query string (or in a key=value connection string).
    let mut masked = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(i) = find_password_key(rest) {
        let value_start = i + "password=".len();
        masked.push_str(&rest[..value_start]);
        masked.push_str("***");
        let value_end = rest[value_start..].find(['&', ' ']).map_or(rest.len(), |j| value_start + j);
        rest = &rest[value_end..];
    }
    masked.push_str(rest);
    masked
}

/// Where a `password=` key starts (at the start, or after `?`, `&` or a space).
fn find_password_key(s: &str) -> Option<usize> {
    let lower = s.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("password=") {
        let at = from + i;
        if at == 0 || matches!(lower.as_bytes()[at - 1], b'?' | b'&' | b' ') {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_wherever_they_are() {
        assert_eq!(redact("postgres://ccmesh:s3cret-pw@db:5432/ccmesh"), "postgres://ccmesh:***@db:5432/ccmesh");
        assert_eq!(redact("postgres://u:p%40ss@db/x?sslmode=disable"), "postgres://u:***@db/x?sslmode=disable");
        assert_eq!(
            redact("postgres://u@db/x?password=abc&sslmode=disable"),
            "postgres://u@db/x?password=***&sslmode=disable"
        );
        assert_eq!(redact("postgresql://db/x?user=u&Password=abc"), "postgresql://db/x?user=u&Password=***");
        assert_eq!(redact("host=db password=abc user=u"), "host=db password=*** user=u");
        assert_eq!(redact("postgres://u@db/x"), "postgres://u@db/x");
        assert_eq!(redact("postgres://db/x?old_password=1"), "postgres://db/x?old_password=1");
    }

    #[test]
    fn a_url_is_parsed_and_never_shows_its_password() {
        let url = PgUrl::parse("postgres://ccmesh:p%40ss-word-1@127.0.0.1:5433/ccmesh").unwrap();
        assert_eq!(url.redacted(), "postgres://ccmesh:***@127.0.0.1:5433/ccmesh");
        assert_eq!(url.password(), Some("p@ss-word-1"));
        assert_eq!(format!("{url:?}"), url.redacted());
        let config = url.config(Duration::from_secs(3));
        assert_eq!(config.get_ports(), [5433]);
        assert_eq!(config.get_dbname(), Some("ccmesh"));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(config.get_application_name(), Some("ccmesh"));
        // The URL's own choice wins.
        let url = PgUrl::parse("postgres://u@h/d?connect_timeout=9&application_name=mine").unwrap();
        let config = url.config(Duration::from_secs(3));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(9)));
        assert_eq!(config.get_application_name(), Some("mine"));
        assert_eq!(url.password(), None);
    }

    #[test]
    fn what_cannot_work_is_refused_with_the_password_masked() {
        let err = PgUrl::parse("mysql://u:topsecret@h/d").unwrap_err();
        assert!(err.contains("postgres://") && !err.contains("topsecret"), "{err}");
        let err = PgUrl::parse("postgres://u:topsecret@h/d?sslmode=require").unwrap_err();
        assert!(err.contains("sslmode=require") && !err.contains("topsecret"), "{err}");
        let err = PgUrl::parse("postgres://u:topsecret@h/d?connect_timeout=soon").unwrap_err();
        assert!(!err.contains("topsecret"), "{err}");
    }
}
