//! Parsing of an upstream's `Retry-After` header (SPEC §5 "Open(RateLimited)").
//!
//! Pure: the current wall-clock time is passed in. The result is *not* capped here;
//! the breaker applies `max_rate_limit_timeout` when it trips, so that the cap follows
//! the settings of the request being recorded (hot update, SPEC §5).

use std::time::{Duration, SystemTime};

/// Parses a `Retry-After` value into the delay it asks for.
///
/// Accepted forms (RFC 9110 §10.2.3, plus one common deviation):
/// - delta-seconds: `120`;
/// - fractional seconds: `1.5` (not in the RFC, but some providers send it, and
///   rejecting it would fall back to the 5 s default, which is further from their intent);
/// - an HTTP-date in IMF-fixdate, obsolete RFC 850 or asctime form, turned into the
///   delay from `now`; a date already past means "retry now" ([`Duration::ZERO`]).
///
/// Surrounding whitespace is ignored. Anything else — signs, exponents, `NaN`, `inf`,
/// empty, or a number too large for a [`Duration`] — yields `None`, so the caller falls
/// back to `rate_limit_timeout` instead of trusting a value it cannot read.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    // No HTTP-date form starts with a digit (they start with a day name), so the first
    // character decides the form and a malformed number is never retried as a date.
    if value.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_seconds(value);
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `DIGITS` or `DIGITS.DIGITS`, parsed exactly (no float rounding; fraction digits
/// beyond nanoseconds are truncated).
fn parse_seconds(value: &str) -> Option<Duration> {
    let (whole, fraction) = match value.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (value, None),
    };
    if !all_digits(whole) {
        return None;
    }
    // All digits, so the only possible error is overflow of u64: "absurdly large" -> None.
    let secs: u64 = whole.parse().ok()?;
    let nanos = match fraction {
        None => 0,
        Some(fraction) => {
            if !all_digits(fraction) {
                return None;
            }
            let mut nanos: u32 = 0;
            for (i, digit) in fraction.bytes().chain(std::iter::repeat(b'0')).enumerate() {
                if i == 9 {
                    break;
                }
                nanos = nanos * 10 + u32::from(digit - b'0');
            }
            nanos
        }
    };
    // nanos < 1_000_000_000, so Duration::new cannot carry into (and overflow) secs.
    Some(Duration::new(secs, nanos))
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// Sun, 06 Nov 1994 08:49:07 GMT — 30 s before the RFC's example date.
    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_747)
    }

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    fn millis(ms: u64) -> Option<Duration> {
        Some(Duration::from_millis(ms))
    }

    #[test]
    fn delta_seconds() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("0", secs(0)),
            ("1", secs(1)),
            ("120", secs(120)),
            ("007", secs(7)),
            ("3600", secs(3600)),
            (" 5 ", secs(5)),
            ("\t7\r\n", secs(7)),
            // Large but representable: accepted here, capped by the breaker.
            ("86400000", secs(86_400_000)),
            ("18446744073709551615", secs(u64::MAX)),
            // Overflows u64 seconds.
            ("18446744073709551616", None),
            ("99999999999999999999999", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_retry_after(input, now()), *want, "input {input:?}");
        }
    }

    #[test]
    fn fractional_seconds() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("1.5", millis(1500)),
            ("0.25", millis(250)),
            ("0.0", secs(0)),
            ("2.000", secs(2)),
            (" 1.5 ", millis(1500)),
            ("0.000000001", Some(Duration::from_nanos(1))),
            // Digits beyond nanosecond precision are truncated, not rounded.
            ("2.0000000019", Some(Duration::new(2, 1))),
            ("18446744073709551615.5", Some(Duration::new(u64::MAX, 500_000_000))),
            ("18446744073709551616.5", None),
            ("1.", None),
            (".5", None),
            ("1.2.3", None),
            ("1,5", None),
            ("1.-5", None),
            ("1. 5", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_retry_after(input, now()), *want, "input {input:?}");
        }
    }

    #[test]
    fn garbage_is_rejected() {
        let cases = [
            "",
            "   ",
            "-1",
            "-0",
            "+1",
            "1e3",
            "1E3",
            "0x10",
            "NaN",
            "nan",
            "inf",
            "-inf",
            "infinity",
            "abc",
            "5 s",
            "5s",
            "5 6",
            "soon",
            "١٢",                            // Arabic-Indic digits
            "Sun, 06 Nov 1994 08:49:37",     // no GMT
            "Sun, 06 Nov 1994 08:49:37 PST", // not GMT
            "Sun, 32 Nov 1994 08:49:37 GMT", // no such day
            "2026-11-29T10:00:00Z",          // ISO 8601 is not an HTTP-date
        ];
        for input in cases {
            assert_eq!(parse_retry_after(input, now()), None, "input {input:?}");
        }
    }

    #[test]
    fn http_dates() {
        let cases: &[(&str, Option<Duration>)] = &[
            // The three forms of RFC 9110 §5.6.7, all 30 s after `now`.
            ("Sun, 06 Nov 1994 08:49:37 GMT", secs(30)),
            ("Sunday, 06-Nov-94 08:49:37 GMT", secs(30)),
            ("Sun Nov  6 08:49:37 1994", secs(30)),
            ("  Sun, 06 Nov 1994 08:49:37 GMT  ", secs(30)),
            ("Sun, 06 Nov 1994 09:49:07 GMT", secs(3600)),
            // Now or in the past: retry at once.
            ("Sun, 06 Nov 1994 08:49:07 GMT", secs(0)),
            ("Sun, 06 Nov 1994 08:00:00 GMT", secs(0)),
            ("Thu, 01 Jan 1970 00:00:00 GMT", secs(0)),
            // Far future: representable, left for the breaker to cap.
            ("Fri, 31 Dec 9999 23:59:59 GMT", secs(253_402_300_799 - 784_111_747)),
        ];
        for (input, want) in cases {
            assert_eq!(parse_retry_after(input, now()), *want, "input {input:?}");
        }
    }

    #[test]
    fn http_date_against_sub_second_now() {
        // HTTP-dates have whole seconds; the delay keeps `now`'s fraction, so the
        // cooldown ends at the instant the upstream named, not up to a second later.
        let now = now() + Duration::from_millis(250);
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), millis(29_750));
    }
}
