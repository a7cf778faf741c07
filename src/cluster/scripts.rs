//! The Lua scripts that make each shared step atomic, and the arguments they take.
//!
//! Redis runs a script as one step: nothing else happens between its reads and its writes. That
//! is what every check-and-change here needs — a later breaker deadline replacing an earlier one
//! and never the reverse, the current endpoint's compare-and-set, one client key's whole
//! admission (every limit checked, then counted), a half-open success that may close the breaker
//! for everyone. Scripts that publish do it from inside, so a change and its message are one step
//! too. Every script reads the time from the Redis server (`TIME`), so nodes with skewed clocks
//! still agree on windows and deadlines; the limiter's scripts take an explicit time instead when
//! one is given (tests of calendar edges), `0` meaning "the server's".
//!
//! Lua numbers are doubles: replies carry fractions and large numbers as strings (Redis would
//! truncate a Lua number to an integer), formatted with `%.0f` where an integer is meant.

use std::sync::OnceLock;

use crate::keys::KeyLimits;

/// A script and its SHA-1, for `EVALSHA` (sent as `EVAL` once when the server does not know it).
pub struct Script {
    pub text: &'static str,
    sha: OnceLock<String>,
}

impl Script {
    pub(crate) const fn new(text: &'static str) -> Script {
        Script { text, sha: OnceLock::new() }
    }

    pub fn sha(&self) -> &str {
        self.sha.get_or_init(|| {
            let d = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, self.text.as_bytes());
            d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
        })
    }
}

/// `now` in milliseconds of the server's clock.
macro_rules! server_now {
    () => {
        "local t = redis.call('TIME')\n\
         local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    };
}

/// Publish a breaker verdict, keeping the later deadline. KEYS: verdicts, half_open, probe.
/// ARGV: endpoint, reason, remaining ms (from the publisher's view of now), channel.
/// → `{1, stored}` when stored, `{0, kept}` when a later deadline was already there, `{0}` when
/// the verdict had already expired (it is never re-published).
pub static OPEN: Script = Script::new(concat!(
    server_now!(),
    r#"
local remaining = tonumber(ARGV[3])
if remaining <= 0 then return {0} end
local open_until = now + remaining
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current then
  local u = tonumber(string.match(current, ':(%d+)$'))
  if u and u >= open_until then return {0, current} end
end
local value = ARGV[2] .. ':' .. string.format('%.0f', open_until)
redis.call('HSET', KEYS[1], ARGV[1], value)
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
redis.call('PUBLISH', ARGV[4], 'open|' .. ARGV[1] .. '|' .. value)
return {1, value}
"#
));

/// Close (or reset) a breaker for everyone. KEYS: verdicts, half_open, probe. ARGV: endpoint,
/// channel, `closed` | `reset`.
pub static CLOSE: Script = Script::new(
    r#"
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
redis.call('PUBLISH', ARGV[2], ARGV[3] .. '|' .. ARGV[1])
return 1
"#,
);

/// Claim the one half-open probe of the cluster. KEYS: probe. ARGV: node, expiry ms.
/// → 0 when this node holds it now, else how many ms the other holder's claim has left.
pub static CLAIM_PROBE: Script = Script::new(
    r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 0
end
local left = redis.call('PTTL', KEYS[1])
if left < 1 then return 1 end
return left
"#,
);

/// Extend this node's probe claim while its probe runs. KEYS: probe. ARGV: node, expiry ms.
pub static REFRESH_PROBE: Script = Script::new(
    r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"#,
);

/// Give this node's probe claim back. KEYS: probe. ARGV: node.
pub static RELEASE_PROBE: Script = Script::new(
    r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#,
);

/// Count a successful half-open probe; `threshold` of them close the breaker for everyone.
/// KEYS: half_open, probe, verdicts. ARGV: endpoint, node, threshold, channel.
/// → `{1, n}` closed, `{0, n}` not yet (the claim is given back for the next probe).
pub static PROBE_SUCCEEDED: Script = Script::new(
    r#"
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
if n >= tonumber(ARGV[3]) then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('PUBLISH', ARGV[4], 'closed|' .. ARGV[1])
  return {1, n}
end
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
return {0, n}
"#,
);

/// SPEC §3's compare-and-set of the current endpoint. KEYS: current. ARGV: protocol, seen (`''`:
/// none yet), to, channel. → the current endpoint after the call (`to` when it moved).
pub static MOVE_CURRENT: Script = Script::new(
    r#"
local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if current ~= ARGV[2] then return current end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('PUBLISH', ARGV[4], 'current|' .. ARGV[1] .. '|' .. ARGV[3])
return ARGV[3]
"#,
);

/// A manual switch (`PUT /api/current`). KEYS: current. ARGV: protocol, to, channel, `1` to set
/// only when nothing is set (re-publishing after an outage must not undo a newer switch).
pub static SET_CURRENT: Script = Script::new(
    r#"
if ARGV[4] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], 'current|' .. ARGV[1] .. '|' .. ARGV[2])
return 1
"#,
);

/// Drop every session binding of a protocol by moving to its next generation.
/// KEYS: binding_generation. ARGV: protocol, channel. → the new generation.
pub static NEXT_BINDING_GENERATION: Script = Script::new(
    r#"
local g = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PUBLISH', ARGV[2], 'bindings|' .. ARGV[1] .. '|' .. g)
return g
"#,
);

/// Unbind a session only if it still points at this endpoint. KEYS: binding. ARGV: endpoint.
pub static UNBIND: Script = Script::new(
    r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#,
);

/// A configuration change: the next version, announced with the node that made it.
/// KEYS: config_version. ARGV: channel, node.
pub static BUMP_CONFIG: Script = Script::new(
    r#"
local v = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[1], 'config|' .. v .. '|' .. ARGV[2])
return v
"#,
);

/// Everything a node mirrors, in one round trip. KEYS: verdicts, current, binding_generation,
/// config_version. → `{seconds, microseconds, verdicts, current, generations, version}`.
pub static POLL: Script = Script::new(
    r#"
local t = redis.call('TIME')
return {t[1], t[2], redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2]),
        redis.call('HGETALL', KEYS[3]), redis.call('GET', KEYS[4])}
"#,
);

/// The limiter's clock (`ARGV[1]`, 0 = the server's) and the UTC month of a time, as
/// `timefmt::utc_month_bounds` computes it (days from and to the civil calendar).
macro_rules! limiter_clock {
    () => {
        r#"
local now = tonumber(ARGV[1])
if not now or now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local DAY = 86400000
local function first_of_month(y, m)
  local yy = y
  if m <= 2 then yy = y - 1 end
  local era = math.floor(yy / 400)
  local yoe = yy - era * 400
  local mp = m + 9
  if m > 2 then mp = m - 3 end
  local doy = math.floor((153 * mp + 2) / 5)
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return (era * 146097 + doe - 719468) * DAY
end
local function month_bounds(ms)
  local z = math.floor(ms / DAY) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp - 9
  if mp < 10 then m = mp + 3 end
  if m <= 2 then y = y + 1 end
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  return first_of_month(y, m), first_of_month(ny, nm)
end
local function int(n) return string.format('%.0f', n) end
"#
    };
}

/// Prune a key's windows and sum them. KEYS: requests (ZSET member → admitted at), leases (ZSET
/// member → expires at), tokens (HASH second → tokens), spend (HASH `m<minute>` / `d<day>` /
/// `M<month start>` → USD).
macro_rules! limiter_sums {
    () => {
        r#"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local tokens, seconds = 0, {}
local tk = redis.call('HGETALL', KEYS[3])
for i = 1, #tk, 2 do
  local s, n = tonumber(tk[i]), tonumber(tk[i + 1])
  if (s + 1) * 1000 + 60000 <= now then redis.call('HDEL', KEYS[3], tk[i])
  else tokens = tokens + n; table.insert(seconds, {s, n}) end
end
table.sort(seconds, function(a, b) return a[1] < b[1] end)
local day = math.floor(now / DAY)
local month_start, next_month = month_bounds(now)
local usd_day, usd_month, usd_5h, minutes = 0, 0, 0, {}
local sp = redis.call('HGETALL', KEYS[4])
for i = 1, #sp, 2 do
  local f, v = sp[i], tonumber(sp[i + 1])
  local kind, n = string.sub(f, 1, 1), tonumber(string.sub(f, 2))
  if kind == 'd' then
    if n == day then usd_day = usd_day + v else redis.call('HDEL', KEYS[4], f) end
  elseif kind == 'M' then
    if n == month_start then usd_month = usd_month + v else redis.call('HDEL', KEYS[4], f) end
  elseif kind == 'm' then
    if (n + 1) * 60000 + 18000000 <= now then redis.call('HDEL', KEYS[4], f)
    else usd_5h = usd_5h + v; table.insert(minutes, {n, v}) end
  end
end
table.sort(minutes, function(a, b) return a[1] < b[1] end)
local requests = redis.call('ZCARD', KEYS[1])
local in_flight = redis.call('ZCARD', KEYS[2])
"#
    };
}

/// One client key's whole admission (the limits of `keys::limiter`, in the same order, with the
/// same windows). ARGV: now, member, lease ms, rpm, tpm, concurrency, usd_per_day, usd_per_5h,
/// usd_per_month (`''`: no limit).
/// → `{1, now}` admitted, or `{0, kind, limit, used, retry_after_ms, resets_at_ms | '', now}`.
pub static ADMIT: Script = Script::new(concat!(
    limiter_clock!(),
    limiter_sums!(),
    r#"
local function limit(i) if ARGV[i] == '' then return nil end return tonumber(ARGV[i]) end
local function refuse(kind, lim, used, retry, resets)
  local r = ''
  if resets then r = int(resets) end
  return {0, kind, tostring(lim), tostring(used), int(math.max(retry, 0)), r, int(now)}
end
local m = limit(9)
if m and usd_month >= m then return refuse('usd_per_month', m, usd_month, next_month - now, next_month) end
local d = limit(7)
if d and usd_day >= d then
  local next_day = (day + 1) * DAY
  return refuse('usd_per_day', d, usd_day, next_day - now, next_day)
end
local f = limit(8)
if f and usd_5h >= f then
  local left, at = usd_5h, now + 60000
  for _, mv in ipairs(minutes) do
    left = left - mv[2]
    if left < f then at = (mv[1] + 1) * 60000 + 18000000; break end
  end
  return refuse('usd_per_5h', f, usd_5h, at - now, at)
end
local c = limit(6)
if c and in_flight >= c then return refuse('concurrency', c, in_flight, 1000, nil) end
local r = limit(4)
if r and requests >= r then
  local oldest = redis.call('ZRANGE', KEYS[1], requests - r, requests - r, 'WITHSCORES')
  return refuse('rpm', r, requests, math.max(tonumber(oldest[2]) + 60000 - now, 1), nil)
end
local tp = limit(5)
if tp and tokens >= tp then
  local left, free = tokens, now + 60000
  for _, sn in ipairs(seconds) do
    left = left - sn[2]
    if left < tp then free = (sn[1] + 1) * 1000 + 60000; break end
  end
  return refuse('tpm', tp, tokens, math.max(free - now, 1), nil)
end
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -((r or 10000) + 1))
redis.call('PEXPIRE', KEYS[1], 61000)
local lease = tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], now + lease, ARGV[2])
if redis.call('PTTL', KEYS[2]) < lease + 1000 then redis.call('PEXPIRE', KEYS[2], int(lease + 1000)) end
return {1, int(now)}
"#
));

/// A finished request's charge. KEYS as `ADMIT`. ARGV: now, tokens, USD.
pub static CHARGE: Script = Script::new(concat!(
    limiter_clock!(),
    r#"
local tokens, usd = tonumber(ARGV[2]), tonumber(ARGV[3])
if tokens > 0 then
  redis.call('HINCRBY', KEYS[3], int(math.floor(now / 1000)), tokens)
  redis.call('PEXPIRE', KEYS[3], 62000)
end
if usd > 0 then
  local month_start = month_bounds(now)
  redis.call('HINCRBYFLOAT', KEYS[4], 'm' .. int(math.floor(now / 60000)), ARGV[3])
  redis.call('HINCRBYFLOAT', KEYS[4], 'd' .. int(math.floor(now / DAY)), ARGV[3])
  redis.call('HINCRBYFLOAT', KEYS[4], 'M' .. int(month_start), ARGV[3])
  redis.call('PEXPIRE', KEYS[4], 32 * DAY)
end
return 1
"#
));

/// A key's use of each window. KEYS as `ADMIT`. ARGV: now.
/// → `{requests, tokens, in_flight, usd_day, usd_5h, usd_month, next_day, next_month,
/// 5h frees at | '', now}`.
pub static USAGE: Script = Script::new(concat!(
    limiter_clock!(),
    limiter_sums!(),
    r#"
local frees = ''
if minutes[1] then frees = int((minutes[1][1] + 1) * 60000 + 18000000) end
return {requests, int(tokens), in_flight, tostring(usd_day), tostring(usd_5h), tostring(usd_month),
        int((day + 1) * DAY), int(next_month), frees, int(now)}
"#
));

/// The arguments of `ADMIT`.
pub fn admit_args(now_ms: Option<i64>, member: &str, lease_ttl_ms: u64, limits: &KeyLimits) -> Vec<String> {
    let opt_u = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_default();
    let opt_f = |v: Option<f64>| v.map(|n| n.to_string()).unwrap_or_default();
    vec![
        now_ms.unwrap_or(0).to_string(),
        member.to_string(),
        lease_ttl_ms.to_string(),
        opt_u(limits.rpm),
        opt_u(limits.tpm),
        opt_u(limits.concurrency),
        opt_f(limits.usd_per_day),
        opt_f(limits.usd_per_5h),
        opt_f(limits.usd_per_month),
    ]
}

/// The arguments of `CHARGE`.
pub fn charge_args(now_ms: Option<i64>, tokens: u64, usd: f64) -> Vec<String> {
    let usd = if usd.is_finite() && usd > 0.0 { usd } else { 0.0 };
    vec![now_ms.unwrap_or(0).to_string(), tokens.to_string(), usd.to_string()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_arguments_say_no_limit_with_an_empty_string() {
        let limits = KeyLimits { rpm: Some(60), usd_per_day: Some(5.0), ..KeyLimits::default() };
        assert_eq!(admit_args(None, "node:7", 1_000, &limits), ["0", "node:7", "1000", "60", "", "", "5", "", ""]);
        let limits = KeyLimits {
            tpm: Some(9),
            concurrency: Some(2),
            usd_per_5h: Some(0.25),
            usd_per_month: Some(100.5),
            ..KeyLimits::default()
        };
        assert_eq!(admit_args(Some(42), "m", 1, &limits), ["42", "m", "1", "", "9", "2", "", "0.25", "100.5"]);
    }

    #[test]
    fn a_charge_never_sends_a_negative_or_odd_cost() {
        assert_eq!(charge_args(None, 12, 0.000123), ["0", "12", "0.000123"]);
        assert_eq!(charge_args(Some(5), 0, f64::NAN), ["5", "0", "0"]);
        assert_eq!(charge_args(None, 0, -1.0)[2], "0");
    }

    #[test]
    fn scripts_have_stable_distinct_digests() {
        let all = [&OPEN, &CLOSE, &CLAIM_PROBE, &REFRESH_PROBE, &RELEASE_PROBE, &PROBE_SUCCEEDED, &MOVE_CURRENT];
        let shas: std::collections::HashSet<&str> = all.iter().map(|s| s.sha()).collect();
        assert_eq!(shas.len(), all.len());
        assert!(all.iter().all(|s| s.sha().len() == 40));
        assert!(ADMIT.text.contains("month_bounds") && ADMIT.text.contains("ZADD"));
        // The SHA-1 of a known text, so EVALSHA names the script Redis computes for EVAL.
        assert_eq!(Script::new("return 1").sha(), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    }
}
