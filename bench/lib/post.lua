-- wrk script for bench/run: POST a JSON body to the URL and print a one-line JSON summary.
-- Environment: BODY_FILE (the request body), HEADERS (optional: "name: value" pairs separated by '|').
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
local extra = os.getenv("HEADERS") or ""
for pair in string.gmatch(extra, "[^|]+") do
  local name, value = string.match(pair, "^%s*([^:]+):%s*(.-)%s*$")
  if name then wrk.headers[name] = value end
end

-- No response() callback: it would make wrk hand every answer to Lua. wrk counts answers with
-- a status >= 400 itself (errors.status).
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"bytes":%d,"rps":%.1f,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"mean":%.1f,"max":%d}}\n',
    summary.requests, summary.duration, summary.bytes, summary.requests / (summary.duration / 1e6),
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max))
end
