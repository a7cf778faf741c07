//! RFC 3339 timestamps (`2026-11-29T10:00:00Z`) without a date-time dependency.

use std::time::{SystemTime, UNIX_EPOCH};

/// UTC, second precision, `Z` suffix.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Unix milliseconds as RFC 3339, UTC, second precision (the millisecond part dropped).
pub fn rfc3339_ms(ms: i64) -> String {
    let t = if ms >= 0 {
        UNIX_EPOCH + std::time::Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - std::time::Duration::from_millis(ms.unsigned_abs())
    };
    rfc3339(t)
}

/// The first instant (unix ms) of the UTC month holding `ms`, and of the month after it.
pub fn utc_month_bounds(ms: i64) -> (i64, i64) {
    let days = ms.div_euclid(86_400_000);
    let (y, m, _) = civil_from_days(days);
    let start = days_from_civil(y, m, 1) * 86_400_000;
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    (start, days_from_civil(ny, nm, 1) * 86_400_000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let (m, d) = (i64::from(m), i64::from(d));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Unix milliseconds of an RFC 3339 time (`2026-12-01`, `2026-12-01T10:00:00Z`, with a
/// fraction or an offset); `None` for anything else.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(range)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&mo) || d < 1 || d > month_days[(mo - 1) as usize] {
        return None;
    }
    let day_ms = days_from_civil(y, mo as u32, d as u32) * 86_400_000;
    if b.len() == 10 {
        return Some(day_ms);
    }
    if !matches!(b[10], b'T' | b't' | b' ') || b.len() < 19 || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_ms = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        // Milliseconds: the first three digits, padded.
        let digits = format!("{:0<3}", &s[start..i.min(start + 3)]);
        frac_ms = digits.parse::<i64>().ok()?;
    }
    let offset_min = match s.get(i..)? {
        "Z" | "z" => 0,
        tz if tz.len() == 6 && (tz.starts_with('+') || tz.starts_with('-')) && tz.as_bytes()[3] == b':' => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            if oh > 23 || om > 59 {
                return None;
            }
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            sign * (oh * 60 + om)
        }
        _ => return None,
    };
    Some(day_ms + ((h * 60 + mi - offset_min) * 60 + sec) * 1000 + frac_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn known_instants() {
        let at = |s: u64| rfc3339(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_795_946_400), "2026-11-29T10:00:00Z");
        assert_eq!(at(4_102_444_799), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn month_bounds_and_days_round_trip() {
        let ms = |s: &str| {
            let (y, rest) = s.split_at(4);
            let m: u32 = rest[1..3].parse().unwrap();
            let d: u32 = rest[4..6].parse().unwrap();
            days_from_civil(y.parse().unwrap(), m, d) * 86_400_000
        };
        assert_eq!(rfc3339_ms(ms("2026-11-29")), "2026-11-29T00:00:00Z");
        let inside = ms("2026-12-31") + 86_399_999;
        assert_eq!(utc_month_bounds(inside), (ms("2026-12-01"), ms("2027-01-01")));
        assert_eq!(utc_month_bounds(ms("2028-02-29")), (ms("2028-02-01"), ms("2028-03-01")));
        for day in (-1000..30_000).step_by(17) {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
    }

    #[test]
    fn agrees_with_httpdate_over_many_days() {
        for day in (0..60_000u64).step_by(37) {
            let t = UNIX_EPOCH + Duration::from_secs(day * 86_400 + 3_723);
            let http = httpdate::fmt_http_date(t);
            let ours = rfc3339(t);
            let back = httpdate::parse_http_date(&http).unwrap();
            assert_eq!(back, t);
            // Both must name the same calendar day: compare via the day-of-month and year parts.
            let (y, rest) = ours.split_at(4);
            assert!(http.contains(y), "{http} vs {ours}");
            assert!(http.contains(&rest[7..9]), "{http} vs {ours}");
        }
    }
}
