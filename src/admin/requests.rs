//! Request records over HTTP: `GET /api/requests` (filtered, cursor-paginated summaries),
//! `GET /api/requests/{id}` (the full record with its decision trail), `GET /api/stats`
//! (grouped, bucketed statistics) and `GET /api/records/status` (the writer's counters).
//!
//! Every query parameter is validated; an unknown, repeated or malformed one is a 400 that
//! names it. Queries run on a read connection of their own on a blocking thread.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{ApiError, ApiResult};
use crate::gateway::Gateway;
use crate::protocol::Protocol;
use crate::store::records::{Bucket, Cursor, Filter, GroupBy, StatsQuery};

/// Page size when `limit` is not given, and its maximum.
pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 500;
/// Statistics cover the last day unless told otherwise.
const DEFAULT_STATS_RANGE_MS: i64 = 86_400_000;
/// More buckets than this is a mistake (an hourly series over years), not a chart.
pub const MAX_BUCKETS: i64 = 10_000;
/// Longest accepted `q`.
const MAX_SEARCH_LEN: usize = 200;

fn bad(param: &str, what: impl std::fmt::Display) -> ApiError {
    ApiError { status: StatusCode::BAD_REQUEST, message: format!("{param}: {what}"), field: Some(param.to_string()) }
}

/// The query string as (name, value) pairs; repeated or unknown names are rejected.
fn params(raw: Option<&str>, allowed: &[&str]) -> ApiResult<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        if !allowed.contains(&k.as_ref()) {
            return Err(bad(&k, format!("unknown query parameter; the known ones are {}", allowed.join(", "))));
        }
        if out.iter().any(|(seen, _)| *seen == k) {
            return Err(bad(&k, "given more than once"));
        }
        out.push((k.into_owned(), v.into_owned()));
    }
    Ok(out)
}

fn now_ms(gw: &Gateway) -> i64 {
    gw.clock.wall().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A time: unix milliseconds (`1764403200000`), RFC 3339 (`2026-11-29T10:00:00Z`,
/// `2026-11-29T10:00:00.250+01:00`), a UTC date (`2026-11-29`), or an age before `now`
/// (`90s`, `15m`, `24h`, `7d`).
pub fn parse_time(s: &str, now_ms: i64) -> Result<i64, String> {
    const HELP: &str = "expected unix milliseconds, an RFC 3339 time (2026-11-29T10:00:00Z), a date (2026-11-29) \
                        or an age such as 15m, 24h, 7d";
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<i64>().map_err(|_| format!("{s} is out of range"));
    }
    if let Some(unit) = s.chars().last().filter(|c| matches!(c, 's' | 'm' | 'h' | 'd')) {
        let digits = &s[..s.len() - 1];
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            let n: i64 = digits.parse().map_err(|_| format!("{s} is out of range"))?;
            let unit_ms = match unit {
                's' => 1_000,
                'm' => 60_000,
                'h' => 3_600_000,
                _ => 86_400_000,
            };
            return n.checked_mul(unit_ms).map(|age| now_ms - age).ok_or_else(|| format!("{s} is out of range"));
        }
    }
    crate::timefmt::parse_rfc3339(s).ok_or_else(|| format!("'{s}' is not a time; {HELP}"))
}

fn parse_bool(param: &str, v: &str) -> ApiResult<bool> {
    match v {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(bad(param, "must be true or false")),
    }
}

fn non_empty(param: &str, v: &str) -> ApiResult<String> {
    if v.is_empty() { Err(bad(param, "must not be empty")) } else { Ok(v.to_string()) }
}

/// A validated `GET /api/requests` query.
#[derive(Clone, Debug, PartialEq)]
pub struct ListQuery {
    pub filter: Filter,
    pub cursor: Option<Cursor>,
    pub limit: usize,
}

pub fn parse_list_query(raw: Option<&str>, now_ms: i64) -> ApiResult<ListQuery> {
    const ALLOWED: &[&str] = &[
        "since",
        "until",
        "endpoint",
        "model",
        "protocol",
        "status_class",
        "status",
        "failed_over",
        "key",
        "q",
        "limit",
        "cursor",
    ];
    let mut q = ListQuery { filter: Filter::default(), cursor: None, limit: DEFAULT_LIMIT };
    for (k, v) in params(raw, ALLOWED)? {
        let f = &mut q.filter;
        match k.as_str() {
            "since" => f.since_ms = Some(parse_time(&v, now_ms).map_err(|e| bad("since", e))?),
            "until" => f.until_ms = Some(parse_time(&v, now_ms).map_err(|e| bad("until", e))?),
            "endpoint" => f.endpoint = Some(non_empty("endpoint", &v)?),
            "model" => f.model = Some(non_empty("model", &v)?),
            "protocol" => {
                let p = Protocol::parse(&v)
                    .ok_or_else(|| bad("protocol", "must be \"claude\", \"openai\", \"responses\" or \"gemini\""))?;
                f.protocol = Some(p.as_str().to_string());
            }
            "status_class" => {
                f.status_class = Some(match v.as_str() {
                    "2xx" => 2,
                    "3xx" => 3,
                    "4xx" => 4,
                    "5xx" => 5,
                    _ => return Err(bad("status_class", "must be 2xx, 3xx, 4xx or 5xx")),
                })
            }
            "status" => {
                let s: u16 = v
                    .parse()
                    .ok()
                    .filter(|s| (100..=599).contains(s))
                    .ok_or_else(|| bad("status", "must be an HTTP status between 100 and 599"))?;
                f.status = Some(s);
            }
            "failed_over" => f.failed_over = Some(parse_bool("failed_over", &v)?),
            "key" => f.client_key = Some(non_empty("key", &v)?),
            "q" => {
                if v.trim().is_empty() {
                    return Err(bad("q", "must not be empty"));
                }
                if v.chars().count() > MAX_SEARCH_LEN {
                    return Err(bad("q", format!("must be at most {MAX_SEARCH_LEN} characters")));
                }
                f.text = Some(v);
            }
            "limit" => {
                q.limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| bad("limit", format!("must be a whole number between 1 and {MAX_LIMIT}")))?;
            }
            "cursor" => {
                q.cursor = Some(Cursor::decode(&v).ok_or_else(|| {
                    bad("cursor", "is not a cursor from this API; pass next_cursor from the previous page unchanged")
                })?);
            }
            _ => {}
        }
    }
    let f = &q.filter;
    if let (Some(s), Some(c)) = (f.status, f.status_class)
        && s / 100 != c
    {
        return Err(bad("status", format!("{s} is not in status_class {c}xx")));
    }
    if let (Some(since), Some(until)) = (f.since_ms, f.until_ms)
        && since >= until
    {
        return Err(bad("since", "must be before until"));
    }
    Ok(q)
}

pub fn parse_stats_query(raw: Option<&str>, now_ms: i64) -> ApiResult<StatsQuery> {
    let mut since = None;
    let mut until = None;
    let mut group_by = None;
    let mut bucket = None;
    for (k, v) in params(raw, &["since", "until", "group_by", "bucket"])? {
        match k.as_str() {
            "since" => since = Some(parse_time(&v, now_ms).map_err(|e| bad("since", e))?),
            "until" => until = Some(parse_time(&v, now_ms).map_err(|e| bad("until", e))?),
            "group_by" => {
                group_by = Some(
                    GroupBy::parse(&v).ok_or_else(|| bad("group_by", "must be endpoint, model, protocol or key"))?,
                )
            }
            "bucket" => bucket = Some(Bucket::parse(&v).ok_or_else(|| bad("bucket", "must be hour or day"))?),
            _ => {}
        }
    }
    let until_ms = until.unwrap_or(now_ms);
    let since_ms = since.unwrap_or(until_ms - DEFAULT_STATS_RANGE_MS);
    if since_ms >= until_ms {
        return Err(bad("since", "must be before until"));
    }
    let q = StatsQuery { since_ms, until_ms, group_by, bucket };
    if q.bucket_count() > MAX_BUCKETS {
        return Err(bad(
            "bucket",
            format!("the range spans more than {MAX_BUCKETS} buckets; use bucket=day or a shorter range"),
        ));
    }
    Ok(q)
}

/// Run a record query on a blocking thread, on its own read connection.
async fn query<T: Send + 'static>(
    gw: &Arc<Gateway>,
    op: impl FnOnce(&crate::store::Store) -> Result<T, crate::store::StoreError> + Send + 'static,
) -> ApiResult<T> {
    let store = gw.store.clone();
    Ok(tokio::task::spawn_blocking(move || op(&store))
        .await
        .map_err(|e| ApiError::internal(format!("query task failed: {e}")))??)
}

/// `GET /api/requests`.
pub async fn list_requests(State(gw): State<Arc<Gateway>>, RawQuery(raw): RawQuery) -> ApiResult<Json<Value>> {
    let q = parse_list_query(raw.as_deref(), now_ms(&gw))?;
    let page = query(&gw, move |s| s.list_records(&q.filter, q.cursor, q.limit)).await?;
    Ok(Json(json!(page)))
}

/// `GET /api/requests/{id}`.
pub async fn get_request(State(gw): State<Arc<Gateway>>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let key = id.clone();
    match query(&gw, move |s| s.get_record(&key)).await? {
        Some(record) => Ok(Json(record)),
        None => Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "no request record with id '{id}'; it may be older than retention_days, not written yet, or dropped"
            ),
            field: None,
        }),
    }
}

/// `GET /api/stats`.
pub async fn get_stats(State(gw): State<Arc<Gateway>>, RawQuery(raw): RawQuery) -> ApiResult<Json<Value>> {
    let q = parse_stats_query(raw.as_deref(), now_ms(&gw))?;
    let report = query(&gw, move |s| s.record_stats(&q)).await?;
    Ok(Json(json!(report)))
}

/// `GET /api/records/status`: the writer's counters (dropped records show here; `GET
/// /api/health` stays the per-endpoint array of SPEC §7).
pub async fn get_records_status(State(gw): State<Arc<Gateway>>) -> Json<Value> {
    Json(json!(gw.events.records().stats()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_946_400_000; // 2026-11-29T10:00:00Z

    fn err(r: ApiResult<impl std::fmt::Debug>) -> (String, String) {
        let e = r.unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        (e.field.unwrap(), e.message)
    }

    #[test]
    fn times_in_every_accepted_form() {
        let t = |s: &str| parse_time(s, NOW).unwrap();
        assert_eq!(t("1795946400000"), NOW);
        assert_eq!(t("0"), 0);
        assert_eq!(t("2026-11-29T10:00:00Z"), NOW);
        assert_eq!(t("2026-11-29t10:00:00z"), NOW);
        assert_eq!(t("2026-11-29 10:00:00Z"), NOW);
        assert_eq!(t("2026-11-29T10:00:00.25Z"), NOW + 250);
        assert_eq!(t("2026-11-29T10:00:00.123456Z"), NOW + 123);
        assert_eq!(t("2026-11-29T11:30:00+01:30"), NOW);
        assert_eq!(t("2026-11-29T08:00:00-02:00"), NOW);
        assert_eq!(t("2026-11-29"), NOW - 10 * 3_600_000);
        assert_eq!(t("1970-01-01T00:00:00Z"), 0);
        assert_eq!(t("2000-02-29T00:00:00Z"), 951_782_400_000);
        assert_eq!(t("90s"), NOW - 90_000);
        assert_eq!(t("15m"), NOW - 900_000);
        assert_eq!(t("24h"), NOW - 86_400_000);
        assert_eq!(t("7d"), NOW - 7 * 86_400_000);
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-02-30",
            "2025-02-29",
            "2026-11-29T25:00:00Z",
            "2026-11-29T10:00:00",
            "2026-11-29T10:00:00+0100",
            "2026-11-29T10:00:00.Z",
            "2026-11-29T10:00Z",
            "-5",
            "5w",
            "h",
            "99999999999999999999",
            "99999999999999999d",
        ] {
            assert!(parse_time(bad, NOW).is_err(), "{bad:?} parsed");
        }
        // Agrees with the formatter over many days.
        for day in (0..40_000i64).step_by(97) {
            let ms = day * 86_400_000 + 45_296_789;
            assert_eq!(t(&crate::store::records::rfc3339_ms(ms)), ms);
        }
    }

    #[test]
    fn list_query_parses_every_parameter() {
        let q = parse_list_query(
            Some("since=24h&until=2026-11-29T10:00:00Z&endpoint=glm&model=claude-sonnet-4-5&protocol=claude&status_class=5xx&status=503&failed_over=true&key=alice&q=over%20loaded&limit=500&cursor=0000019ace5f0c000000000000000007"),
            NOW,
        )
        .unwrap();
        assert_eq!(
            q.filter,
            Filter {
                since_ms: Some(NOW - 86_400_000),
                until_ms: Some(NOW),
                endpoint: Some("glm".into()),
                model: Some("claude-sonnet-4-5".into()),
                protocol: Some("claude".into()),
                status_class: Some(5),
                status: Some(503),
                failed_over: Some(true),
                client_key: Some("alice".into()),
                text: Some("over loaded".into()),
            }
        );
        assert_eq!(q.limit, 500);
        assert_eq!(q.cursor, Some(Cursor { started_at: 0x19ace5f0c00, seq: 7 }));
        let d = parse_list_query(None, NOW).unwrap();
        assert_eq!((d.filter, d.cursor, d.limit), (Filter::default(), None, DEFAULT_LIMIT));
        assert_eq!(parse_list_query(Some("failed_over=0"), NOW).unwrap().filter.failed_over, Some(false));
    }

    #[test]
    fn bad_list_parameters_are_named() {
        let cases = [
            ("bogus=1", "bogus"),
            ("limit=1&limit=2", "limit"),
            ("since=yesterday", "since"),
            ("until=2026-13-01", "until"),
            ("since=2h&until=3h", "since"),
            ("endpoint=", "endpoint"),
            ("model=", "model"),
            ("protocol=grpc", "protocol"),
            ("status_class=6xx", "status_class"),
            ("status=99", "status"),
            ("status=abc", "status"),
            ("status=404&status_class=5xx", "status"),
            ("failed_over=yes", "failed_over"),
            ("q=", "q"),
            ("limit=0", "limit"),
            ("limit=501", "limit"),
            ("limit=ten", "limit"),
            ("cursor=abc", "cursor"),
        ];
        for (raw, field) in cases {
            let (f, message) = err(parse_list_query(Some(raw), NOW));
            assert_eq!(f, field, "{raw}: {message}");
            assert!(message.starts_with(&format!("{field}: ")), "{raw}: {message}");
        }
        let (_, message) = err(parse_list_query(Some(&format!("q={}", "x".repeat(201))), NOW));
        assert!(message.contains("200"), "{message}");
    }

    #[test]
    fn stats_query_defaults_and_errors() {
        let q = parse_stats_query(None, NOW).unwrap();
        assert_eq!(q, StatsQuery { since_ms: NOW - 86_400_000, until_ms: NOW, group_by: None, bucket: None });
        let q = parse_stats_query(Some("since=7d&group_by=endpoint&bucket=hour"), NOW).unwrap();
        assert_eq!(
            (q.since_ms, q.until_ms, q.group_by, q.bucket),
            (NOW - 7 * 86_400_000, NOW, Some(GroupBy::Endpoint), Some(Bucket::Hour))
        );
        let q = parse_stats_query(Some("until=2026-11-01&group_by=model&bucket=day"), NOW).unwrap();
        assert_eq!(q.until_ms - q.since_ms, 86_400_000);
        assert_eq!(parse_stats_query(Some("group_by=protocol"), NOW).unwrap().group_by, Some(GroupBy::Protocol));
        let cases = [
            ("group_by=status", "group_by"),
            ("bucket=week", "bucket"),
            ("since=1h&until=2h", "since"),
            ("since=3000d&bucket=hour", "bucket"),
            ("limit=5", "limit"),
            ("bucket=day&bucket=day", "bucket"),
            ("since=x", "since"),
        ];
        for (raw, field) in cases {
            assert_eq!(err(parse_stats_query(Some(raw), NOW)).0, field, "{raw}");
        }
        // A long daily series is fine.
        assert!(parse_stats_query(Some("since=3000d&bucket=day"), NOW).is_ok());
    }
}
