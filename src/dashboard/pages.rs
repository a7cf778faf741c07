//! The HTML of each page: the layout around it, and what the server knows when it renders
//! (navigation, forms, field lists, the settings form). Data that changes while the page is open
//! is fetched by the page's module.

use super::html::escape;

pub struct Page {
    /// `data-page` on `<body>` and the navigation entry to mark.
    pub id: &'static str,
    pub title: String,
    /// The ES module that runs the page.
    pub script: &'static str,
    pub body: String,
}

const NAV: &[(&str, &str, &str)] = &[
    ("overview", "/", "Overview"),
    ("endpoints", "/endpoints", "Endpoints"),
    ("requests", "/requests", "Requests"),
    ("stats", "/stats", "Statistics"),
    ("keys", "/keys", "Keys"),
    ("settings", "/settings", "Settings"),
    ("clients", "/clients", "Clients"),
];

fn head(title: &str, csrf: &str, script: Option<&str>) -> String {
    let script = script.map(|s| format!("<script type=\"module\" src=\"/assets/{s}\"></script>")).unwrap_or_default();
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"color-scheme\" content=\"light dark\">\
         <meta name=\"ccmesh-csrf\" content=\"{csrf}\">\
         <title>{title} · ccmesh</title>\
         <link rel=\"icon\" href=\"/assets/logo.svg\" type=\"image/svg+xml\">\
         <link rel=\"stylesheet\" href=\"/assets/style.css\">{script}</head>",
        csrf = escape(csrf),
        title = escape(title),
    )
}

pub fn layout(p: &Page, csrf: &str, logged_in: bool) -> String {
    let nav: String = NAV
        .iter()
        .map(|(id, href, label)| {
            let current = if *id == p.id { " aria-current=\"page\"" } else { "" };
            format!("<a href=\"{href}\"{current}>{label}</a>")
        })
        .collect();
    let logout = if logged_in {
        format!(
            "<form method=\"post\" action=\"/logout\" class=\"logout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\" id=\"logout\">Log out</button></form>",
            escape(csrf)
        )
    } else {
        String::new()
    };
    format!(
        "{head}<body data-page=\"{id}\"><a class=\"skip\" href=\"#main\">Skip to content</a>\
         <header class=\"top\"><a class=\"brand\" href=\"/\"><img src=\"/assets/logo.svg\" alt=\"\" width=\"22\" height=\"22\">ccmesh</a>\
         <nav aria-label=\"Pages\">{nav}</nav><span class=\"spacer\"></span>\
         <span id=\"live-status\" class=\"live-status\" role=\"status\" hidden></span>{logout}</header>\
         <main id=\"main\">{body}</main><div id=\"toasts\" class=\"toasts\" aria-live=\"polite\"></div></body></html>",
        head = head(&p.title, csrf, Some(p.script)),
        id = p.id,
        body = p.body,
    )
}

pub fn login(next: &str, error: Option<&str>) -> String {
    let error = error
        .map(|e| format!("<p class=\"form-error\" role=\"alert\" id=\"login-error\">{}</p>", escape(e)))
        .unwrap_or_default();
    format!(
        "{head}<body data-page=\"login\" class=\"login-page\"><main id=\"main\" class=\"login\">\
         <form method=\"post\" action=\"/login\" class=\"panel login-form\">\
         <h1><img src=\"/assets/logo.svg\" alt=\"\" width=\"28\" height=\"28\"> ccmesh</h1>\
         <p class=\"muted\">This gateway has an admin token. Enter it to open the dashboard; \
         the browser keeps a signed session for 12 hours, never the token.</p>{error}\
         <label for=\"token\">Admin token</label>\
         <input type=\"password\" id=\"token\" name=\"token\" autocomplete=\"current-password\" required autofocus>\
         <input type=\"hidden\" name=\"next\" value=\"{next}\">\
         <button type=\"submit\" class=\"primary\" id=\"login\">Log in</button></form></main></body></html>",
        head = head("Log in", "", None),
        next = escape(next),
    )
}

pub fn overview() -> Page {
    Page {
        id: "overview",
        title: "Overview".into(),
        script: "overview.js",
        body: r#"<h1>Overview</h1>
<section class="cards" aria-label="Today">
  <div class="card"><div class="label">Gateway</div><div class="value" id="c-up">…</div><div class="sub" id="c-up-sub">checking</div></div>
  <div class="card"><div class="label">Requests / min</div><div class="value" id="c-rpm">–</div><div class="sub">last 60 s</div></div>
  <div class="card"><div class="label">Error rate</div><div class="value" id="c-err">–</div><div class="sub" id="c-err-sub">today</div></div>
  <div class="card"><div class="label">Failovers</div><div class="value" id="c-fo">–</div><div class="sub">today</div></div>
  <div class="card"><div class="label">Tokens</div><div class="value" id="c-tok">–</div><div class="sub" id="c-tok-sub">today</div></div>
  <div class="card"><div class="label">Cost</div><div class="value" id="c-cost">–</div><div class="sub" id="c-cost-sub">today</div></div>
</section>
<div class="two">
<section class="panel"><h2>Current endpoint</h2>
  <p class="muted">Where the next request of each inbound protocol starts.</p>
  <dl class="current" id="current"><dt>claude</dt><dd>–</dd><dt>openai</dt><dd>–</dd><dt>responses</dt><dd>–</dd><dt>gemini</dt><dd>–</dd></dl>
</section>
<section class="panel"><h2>Endpoint health <a class="more" href="/endpoints">manage</a></h2>
  <ul class="health-grid" id="health-grid" aria-label="Endpoint health"></ul>
  <p class="muted" id="health-empty" hidden>No endpoints yet. <a href="/endpoints">Add one</a>.</p>
</section>
</div>
<section class="panel"><h2>Recent requests <label class="inline"><input type="checkbox" id="feed-pause"> pause</label></h2>
  <div class="table-wrap"><table class="feed">
    <thead><tr><th scope="col">time</th><th scope="col" class="hide-narrow">protocol</th><th scope="col">model</th><th scope="col">endpoint</th><th scope="col">status</th><th scope="col" class="num">ms</th><th scope="col" class="num hide-narrow">attempts</th><th scope="col" class="num hide-narrow">tokens</th><th scope="col" class="num hide-narrow">cost</th></tr></thead>
    <tbody id="feed"></tbody>
  </table></div>
  <p class="muted" id="feed-empty">No requests recorded yet… each one appears here as it completes; click a row for its decision trail.</p>
</section>"#
            .into(),
    }
}

fn field(name: &str, label: &str, input: &str, help: &str) -> String {
    format!(
        "<div class=\"field\"><label for=\"ep-{name}\">{label}</label>{input}\
         <small class=\"field-error\" id=\"ep-err-{name}\" data-error-for=\"{name}\" role=\"alert\"></small>\
         <small class=\"help\">{help}</small></div>"
    )
}

/// The add form's preset list: each option carries the fields it fills (escaped JSON).
fn preset_field() -> String {
    let options: String = crate::presets::all()
        .iter()
        .filter(|p| p.supported())
        .map(|p| {
            format!(
                "<option value=\"{id}\" data-fields=\"{fields}\">{name}</option>",
                id = escape(&p.id),
                fields = escape(&serde_json::Value::Object(p.fields()).to_string()),
                name = escape(&p.name),
            )
        })
        .collect();
    format!(
        "<div class=\"field\" id=\"ep-preset-field\"><label for=\"ep-preset\">Preset</label>\
         <select id=\"ep-preset\" name=\"preset\"><option value=\"\">none: fill in the fields</option>{options}</select>\
         <small class=\"help\">fills format, base URL, models and model map for a vendor; you add the key \
         (<code>ccmesh presets</code> lists the sources)</small></div>"
    )
}

pub fn endpoints() -> Page {
    let form = [
        preset_field(),
        field(
            "name",
            "Name",
            "<input id=\"ep-name\" name=\"name\" autocomplete=\"off\" spellcheck=\"false\">",
            "letters, digits, <code>.</code> <code>_</code> <code>-</code>; up to 64",
        ),
        field(
            "format",
            "Format",
            "<select id=\"ep-format\" name=\"format\"><option value=\"anthropic\">anthropic (Messages)</option>\
             <option value=\"openai\">openai (Chat Completions)</option><option value=\"responses\">responses (Responses API)</option>\
             <option value=\"gemini\">gemini (generateContent)</option></select>",
            "the API the upstream speaks; clients of every protocol can use it",
        ),
        field(
            "base_url",
            "Base URL",
            "<input id=\"ep-base_url\" name=\"base_url\" inputmode=\"url\" autocomplete=\"off\" spellcheck=\"false\" placeholder=\"https://api.anthropic.com\">",
            "http or https, no query",
        ),
        field(
            "api_key",
            "API key",
            "<input id=\"ep-api_key\" name=\"api_key\" type=\"password\" autocomplete=\"new-password\" spellcheck=\"false\">",
            "<span id=\"ep-key-help\">write-only: the gateway never sends a key back to the page</span>",
        ),
        field(
            "models",
            "Models",
            "<textarea id=\"ep-models\" name=\"models\" rows=\"2\" spellcheck=\"false\" placeholder=\"claude-*\"></textarea>",
            "one per line, <code>*</code> globs; empty = every model",
        ),
        field(
            "model_map",
            "Model map",
            "<textarea id=\"ep-model_map\" name=\"model_map\" rows=\"2\" spellcheck=\"false\" placeholder=\"claude-sonnet-4-5 = glm-4.6\"></textarea>",
            "one <code>from = to</code> per line; <code>*</code> = every model",
        ),
        field(
            "headers",
            "Extra headers",
            "<textarea id=\"ep-headers\" name=\"headers\" rows=\"2\" spellcheck=\"false\" placeholder=\"x-team: infra\"></textarea>",
            "one <code>name: value</code> per line",
        ),
        field(
            "test_model",
            "Test model",
            "<input id=\"ep-test_model\" name=\"test_model\" autocomplete=\"off\" spellcheck=\"false\">",
            "the model the connectivity test asks for (default: the first non-glob model)",
        ),
        field(
            "price_multiplier",
            "Price multiplier",
            "<input id=\"ep-price_multiplier\" name=\"price_multiplier\" type=\"number\" step=\"any\" min=\"0\" max=\"100\" inputmode=\"decimal\">",
            "multiplies the list price of this endpoint's traffic; 0 &lt; m ≤ 100",
        ),
    ]
    .concat();
    let body = format!(
        r#"<h1>Endpoints</h1>
<div class="toolbar"><button type="button" class="primary" id="add-endpoint">Add endpoint</button><span class="muted" id="ep-summary"></span></div>
<section class="panel" id="fast-panel"><h2>Fast queue</h2>
  <p class="muted">When a protocol has fast endpoints, its requests try only those, in this order. Drag endpoints here from the table and drag to reorder; or focus a <span aria-hidden="true">⠿</span> handle and press <kbd>↑</kbd>/<kbd>↓</kbd> to move, <kbd>Delete</kbd> to remove; in the table, <kbd>F</kbd> on a handle adds to the queue.</p>
  <ol id="fast-queue" class="fast-queue dropzone" aria-label="Fast queue" data-list="fast"></ol>
  <p id="fast-empty" class="dropzone-hint">The fast queue is empty: every enabled endpoint is a candidate, in the global order. Drop an endpoint here.</p>
</section>
<section class="panel"><h2>All endpoints, in global order</h2>
  <div class="table-wrap"><table class="endpoints" id="ep-table">
    <thead><tr><th scope="col"><span class="sr-only">move</span></th><th scope="col">name</th><th scope="col">format</th><th scope="col">base URL</th><th scope="col">models</th><th scope="col">enabled</th><th scope="col">fast</th><th scope="col">health</th><th scope="col">actions</th></tr></thead>
    <tbody id="ep-body" data-list="order"></tbody>
  </table></div>
  <p class="muted" id="ep-empty" hidden>No endpoints yet: add the first one.</p>
</section>
<p id="reorder-status" class="sr-only" aria-live="assertive"></p>
<dialog id="ep-dialog" aria-labelledby="ep-dialog-title">
  <form id="ep-form" novalidate>
    <h2 id="ep-dialog-title">Add endpoint</h2>
    <p class="form-error" id="ep-form-error" role="alert" hidden></p>
    <div class="fields">{form}
      <div class="field check"><label><input type="checkbox" id="ep-enabled" name="enabled" checked> Enabled</label>
        <small class="field-error" data-error-for="enabled" role="alert"></small></div>
      <div class="field check"><label><input type="checkbox" id="ep-fast" name="fast"> In the fast queue</label>
        <small class="field-error" data-error-for="fast" role="alert"></small></div>
    </div>
    <div class="form-actions"><button type="submit" class="primary" id="ep-save">Save</button><button type="button" id="ep-cancel">Cancel</button></div>
  </form>
</dialog>
<dialog id="confirm-dialog" aria-labelledby="confirm-text">
  <form method="dialog"><p id="confirm-text"></p>
  <div class="form-actions"><button value="yes" class="danger" id="confirm-yes">Delete</button><button value="no" id="confirm-no">Cancel</button></div></form>
</dialog>"#
    );
    Page { id: "endpoints", title: "Endpoints".into(), script: "endpoints.js", body }
}

pub fn requests(endpoints: &[String]) -> Page {
    let endpoint_options: String =
        endpoints.iter().map(|e| format!("<option value=\"{0}\">{0}</option>", escape(e))).collect();
    let body = format!(
        r#"<h1>Requests</h1>
<form id="filters" class="panel filters" aria-label="Filters" novalidate>
  <label>since <select name="since" id="f-since"><option value="15m">15 min</option><option value="1h">1 hour</option><option value="24h" selected>24 hours</option><option value="7d">7 days</option><option value="30d">30 days</option><option value="">all</option></select></label>
  <label>endpoint <select name="endpoint" id="f-endpoint"><option value="">any</option>{endpoint_options}</select></label>
  <label>model <input name="model" id="f-model" size="16" spellcheck="false" placeholder="as requested"></label>
  <label>protocol <select name="protocol" id="f-protocol"><option value="">any</option><option>claude</option><option>openai</option><option>responses</option><option>gemini</option></select></label>
  <label>status <select name="status_class" id="f-status_class"><option value="">any</option><option>2xx</option><option>4xx</option><option>5xx</option></select></label>
  <label>code <input name="status" id="f-status" type="number" min="100" max="599" inputmode="numeric" class="short"></label>
  <label>failed over <select name="failed_over" id="f-failed_over"><option value="">any</option><option value="true">yes</option><option value="false">no</option></select></label>
  <label class="grow">error text <input name="q" id="f-q" type="search" spellcheck="false" placeholder="e.g. 503, timeout"></label>
  <span class="buttons"><button type="submit" class="primary">Apply</button><button type="reset" id="f-reset">Reset</button></span>
  <small class="field-error wide" id="filters-error" role="alert"></small>
</form>
<section class="panel">
  <div class="table-wrap"><table class="requests">
    <thead><tr><th scope="col">time</th><th scope="col" class="hide-narrow">protocol</th><th scope="col">model</th><th scope="col">endpoint</th><th scope="col">status</th><th scope="col" class="num">ms</th><th scope="col" class="num hide-narrow">attempts</th><th scope="col" class="num hide-narrow">tokens</th><th scope="col" class="num hide-narrow">cost</th><th scope="col" class="hide-narrow">error</th></tr></thead>
    <tbody id="req-body"></tbody>
  </table></div>
  <p class="muted" id="req-empty" hidden>No request matches.</p>
  <div class="form-actions"><button type="button" id="req-more" hidden>Load more</button><span class="muted" id="req-count"></span></div>
</section>"#
    );
    Page { id: "requests", title: "Requests".into(), script: "requests.js", body }
}

pub fn request_detail(id: &str) -> Page {
    let id = escape(id);
    Page {
        id: "requests",
        title: format!("Request {id}"),
        script: "request.js",
        body: format!(
            r#"<p class="crumbs"><a href="/requests">← Requests</a></p>
<h1>Request <code id="req-id">{id}</code></h1>
<div id="detail" data-id="{id}"><p class="muted">Loading…</p></div>"#
        ),
    }
}

pub fn stats() -> Page {
    Page {
        id: "stats",
        title: "Statistics".into(),
        script: "stats.js",
        body: r#"<h1>Statistics</h1>
<form class="toolbar" id="range-form" aria-label="Range">
  <label>range <select id="range" name="range">
    <option value="6h">6 hours</option><option value="24h" selected>24 hours</option><option value="7d">7 days</option><option value="30d">30 days</option><option value="90d">90 days</option>
  </select></label>
  <span class="muted" id="range-note"></span>
</form>
<section class="cards" id="stat-cards" aria-label="Totals"></section>
<div class="charts">
  <section class="panel chart"><h2>Requests and errors</h2><div id="ch-requests" class="chart-box"></div></section>
  <section class="panel chart"><h2>Latency p50 / p95 (ms)</h2><div id="ch-latency" class="chart-box"></div></section>
  <section class="panel chart"><h2>Failovers</h2><div id="ch-failovers" class="chart-box"></div></section>
  <section class="panel chart"><h2>Tokens by endpoint</h2><div id="ch-tokens-endpoint" class="chart-box"></div></section>
  <section class="panel chart"><h2>Cost by endpoint (USD)</h2><div id="ch-cost-endpoint" class="chart-box"></div></section>
  <section class="panel chart"><h2>Tokens by model</h2><div id="ch-tokens-model" class="chart-box"></div></section>
  <section class="panel chart"><h2>Cost by model (USD)</h2><div id="ch-cost-model" class="chart-box"></div></section>
</div>"#
            .into(),
    }
}

pub fn settings(form: &str) -> Page {
    Page {
        id: "settings",
        title: "Settings".into(),
        script: "settings.js",
        body: format!(
            r#"<h1>Settings</h1>
{form}
<section class="panel" id="prices"><h2>Prices <small class="muted">USD per million tokens</small></h2>
  <p class="muted">The built-in table with your overrides on top; an override may be a <code>*</code> glob. Costs in records and statistics come from here.</p>
  <form id="price-form" class="filters" novalidate aria-label="Set a price">
    <label>model <input name="model" id="p-model" spellcheck="false" required placeholder="glm-4.6 or glm-*"></label>
    <label>input <input name="input" id="p-input" type="number" step="any" min="0" class="short" inputmode="decimal"></label>
    <label>output <input name="output" id="p-output" type="number" step="any" min="0" class="short" inputmode="decimal"></label>
    <label>cache read <input name="cache_read" id="p-cache_read" type="number" step="any" min="0" class="short" inputmode="decimal" placeholder="= input"></label>
    <label>cache write <input name="cache_write" id="p-cache_write" type="number" step="any" min="0" class="short" inputmode="decimal" placeholder="= input"></label>
    <span class="buttons"><button type="submit" class="primary">Set price</button></span>
    <small class="field-error wide" id="price-error" role="alert"></small>
  </form>
  <label class="inline">filter <input type="search" id="price-filter" spellcheck="false"></label>
  <div class="table-wrap"><table class="prices"><thead><tr><th scope="col">model</th><th scope="col" class="num">input</th><th scope="col" class="num">output</th><th scope="col" class="num">cache read</th><th scope="col" class="num">cache write</th><th scope="col">source</th><th scope="col"><span class="sr-only">actions</span></th></tr></thead><tbody id="price-body"></tbody></table></div>
</section>"#
        ),
    }
}

fn key_field(name: &str, label: &str, input: &str, help: &str) -> String {
    format!(
        "<div class=\"field\"><label for=\"key-{id}\">{label}</label>{input}\
         <small class=\"field-error\" data-error-for=\"{name}\" role=\"alert\"></small>\
         <small class=\"help\">{help}</small></div>",
        id = name.replace('.', "-"),
    )
}

/// A limit's input: a number, empty = no limit.
fn limit_input(name: &str, label: &str, step: &str, help: &str) -> String {
    let id = name.replace('.', "-");
    key_field(
        name,
        label,
        &format!(
            "<input id=\"key-{id}\" name=\"{name}\" type=\"number\" min=\"0\" step=\"{step}\" inputmode=\"decimal\" placeholder=\"no limit\">"
        ),
        help,
    )
}

pub fn keys() -> Page {
    let form = [
        key_field(
            "name",
            "Name",
            "<input id=\"key-name\" name=\"name\" autocomplete=\"off\" spellcheck=\"false\">",
            "who holds it; letters, digits, <code>.</code> <code>_</code> <code>-</code>; cannot change later",
        ),
        key_field(
            "description",
            "Description",
            "<input id=\"key-description\" name=\"description\" autocomplete=\"off\">",
            "optional",
        ),
        key_field(
            "expires_at",
            "Expires",
            "<input id=\"key-expires_at\" name=\"expires_at\" autocomplete=\"off\" spellcheck=\"false\" placeholder=\"2026-12-31T23:59:59Z\">",
            "RFC 3339 time or date; empty = never",
        ),
        key_field(
            "models",
            "Models",
            "<textarea id=\"key-models\" name=\"models\" rows=\"2\" spellcheck=\"false\" placeholder=\"claude-*\"></textarea>",
            "one per line, <code>*</code> globs; empty = every model",
        ),
        key_field(
            "endpoints",
            "Endpoints",
            "<textarea id=\"key-endpoints\" name=\"endpoints\" rows=\"2\" spellcheck=\"false\"></textarea>",
            "endpoint names, one per line; empty = every endpoint",
        ),
        limit_input("limits.rpm", "Requests per minute", "1", "a sliding 60 s window"),
        limit_input("limits.tpm", "Tokens per minute", "1", "input + output, as the answers report them"),
        limit_input("limits.concurrency", "Requests at once", "1", "in flight at the same time"),
        limit_input("limits.usd_per_day", "USD per day", "any", "UTC day, charged what the records cost"),
        limit_input("limits.usd_per_5h", "USD per 5 hours", "any", "a rolling window"),
        limit_input("limits.usd_per_month", "USD per month", "any", "UTC calendar month"),
    ]
    .concat();
    let body = format!(
        r#"<h1>Client keys</h1>
<p class="muted">Once a key exists, every proxy request needs one (as <code>x-api-key</code>, <code>Authorization: Bearer</code>,
<code>x-goog-api-key</code> or <code>?key=</code>). A key's secret is shown once, when it is made or rotated; the gateway keeps only its hash.
The same from a terminal: <code>ccmesh key add NAME</code>; a key's holder sees its own use with <code>ccmesh key usage --key ccm-…</code>.</p>
<div class="toolbar"><button type="button" class="primary" id="add-key">Add key</button><span class="muted" id="keys-summary"></span></div>
<section class="panel secret-panel" id="secret-panel" hidden aria-live="polite"><h2>Secret of <code id="secret-name"></code></h2>
  <p>Shown this once: copy it now and give it to the key's holder. Rotate the key to make a new one.</p>
  <p><code id="secret-value" class="secret"></code></p>
  <div class="form-actions"><button type="button" id="secret-copy">Copy</button><button type="button" id="secret-done" class="primary">Done</button></div>
</section>
<section class="panel"><div class="table-wrap"><table class="keys" id="keys-table">
  <thead><tr><th scope="col">name</th><th scope="col">secret</th><th scope="col">state</th><th scope="col">models</th><th scope="col">endpoints</th><th scope="col" class="num">rpm</th><th scope="col" class="num">today</th><th scope="col" class="num">5 h</th><th scope="col" class="num">month</th><th scope="col">actions</th></tr></thead>
  <tbody id="keys-body"></tbody>
</table></div>
<p class="muted" id="keys-empty" hidden>No client keys: the proxy is open to whoever can reach this gateway.</p></section>
<dialog id="key-dialog" aria-labelledby="key-dialog-title">
  <form id="key-form" novalidate>
    <h2 id="key-dialog-title">Add key</h2>
    <p class="form-error" id="key-form-error" role="alert" hidden></p>
    <div class="fields">{form}
      <div class="field check"><label><input type="checkbox" id="key-enabled" name="enabled" checked> Enabled</label>
        <small class="field-error" data-error-for="enabled" role="alert"></small></div>
    </div>
    <div class="form-actions"><button type="submit" class="primary" id="key-save">Save</button><button type="button" id="key-cancel">Cancel</button></div>
  </form>
</dialog>
<dialog id="key-confirm" aria-labelledby="key-confirm-text">
  <form method="dialog"><p id="key-confirm-text"></p>
  <div class="form-actions"><button value="yes" class="danger" id="key-confirm-yes">Yes</button><button value="no" id="key-confirm-no">Cancel</button></div></form>
</dialog>"#
    );
    Page { id: "keys", title: "Keys".into(), script: "keys.js", body }
}

pub fn clients() -> Page {
    let body = r#"<h1>Clients</h1>
<p class="muted">Point a coding agent on this machine at the gateway. Connecting changes only the settings that do that
(a backup of each file goes to the gateway's data directory); disconnecting puts back exactly the values that were there.
The same from a terminal: <code>ccmesh connect claude-code</code>, <code>ccmesh disconnect claude-code</code>.</p>
<p class="form-error" id="clients-refused" role="alert" hidden></p>
<p class="muted" id="clients-service" hidden></p>
<section class="panel"><div class="table-wrap"><table class="clients" id="clients-table">
  <thead><tr><th scope="col">client</th><th scope="col">state</th><th scope="col">base URL</th><th scope="col">settings</th><th scope="col">actions</th></tr></thead>
  <tbody id="clients-body"></tbody>
</table></div></section>
<section class="panel" id="clients-report-panel" hidden><h2 id="clients-report-title">What changed</h2>
  <ul id="clients-report"></ul></section>"#
        .to_string();
    Page { id: "clients", title: "Clients".into(), script: "clients.js", body }
}
