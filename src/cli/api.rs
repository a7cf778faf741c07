//! The management commands' client of the admin API, and what it tells the user when a call
//! fails: where the gateway is (`--server` with or without a scheme), why it cannot be reached
//! (in the gateway's words, not the upstream's), and an API error with its fix spelled as a
//! command to type.
//!
//! The admin API's own messages name the API (`GET /api/endpoints`): its callers are scripts
//! and the dashboard. The CLI rewrites those hints into commands (`ccmesh endpoint list`) with
//! the table of [`cli_hint`], so the API keeps one wording and the CLI user still gets a fix
//! they can type.

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

use crate::proxy::outcome::{NetworkErrorKind, classify_network_error};
use clap::Args;

/// How a management command reaches the gateway's admin API, and how it prints.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Base URL of the running gateway.
    #[arg(long, env = "CCMESH_SERVER", default_value = "http://127.0.0.1:3999", global = true)]
    pub server: String,
    /// Admin token (Authorization: Bearer).
    #[arg(long = "admin-token", env = "CCMESH_ADMIN_TOKEN", hide_env_values = true, global = true)]
    pub admin_token: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// How long one admin call may take.
const CALL_TIMEOUT_SECS: u64 = 60;

pub(crate) struct Client {
    pub(crate) http: reqwest::Client,
    pub(crate) server: String,
    pub(crate) token: Option<String>,
}

/// `--server` as a base URL: `localhost:3999` means `http://localhost:3999` (the gateway
/// speaks plain HTTP unless a proxy in front adds TLS, and then the user types `https://`).
pub fn server_url(raw: &str) -> String {
    let raw = raw.trim().trim_end_matches('/');
    if raw.contains("://") { raw.to_string() } else { format!("http://{raw}") }
}

impl Client {
    pub(crate) fn new(common: &Common) -> anyhow::Result<Client> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(CALL_TIMEOUT_SECS))
            .no_proxy()
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Client { http, server: server_url(&common.server), token: common.admin_token.clone() })
    }

    /// A call whose error answer is an error: the API's message, its hints rewritten as
    /// commands.
    pub(crate) async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let (status, value) = self.call_status(method, path, body).await?;
        if !status.is_success() {
            bail!("the gateway answered {status}: {}", cli_hint(&api_message(&value)));
        }
        Ok(value)
    }

    /// The status and JSON of any answer, for callers that treat some errors as information.
    pub(crate) async fn call_status(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(reqwest::StatusCode, Value)> {
        let url = format!("{}{path}", self.server);
        let mut req = self.http.request(method, &url);
        if let Some(t) = self.token.as_deref().filter(|t| !t.is_empty()) {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
        let status = resp.status();
        let text = resp.text().await.context("the gateway's answer was cut off")?;
        let value: Value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        Ok((status, value))
    }

    /// "cannot reach the gateway at URL: why; what to do".
    pub(crate) fn unreachable(&self, e: &reqwest::Error) -> anyhow::Error {
        anyhow!(
            "cannot reach the gateway at {}: {}; is `ccmesh serve` running? Use --server or CCMESH_SERVER to point elsewhere",
            self.server,
            why_unreachable(e, &self.server)
        )
    }
}

/// Why a call to the gateway got no answer, said about the gateway (the proxy's own texts talk
/// about "the upstream", which here would be wrong).
pub(crate) fn why_unreachable(e: &reqwest::Error, server: &str) -> String {
    if crate::proxy::dns::is_dns_failure(e) {
        return crate::proxy::dns::could_not_resolve(server);
    }
    if e.is_builder() {
        return format!("'{server}' is not a URL; give one like http://127.0.0.1:3999");
    }
    match classify_network_error(e) {
        NetworkErrorKind::Connect => "nothing accepts connections there (connection refused)".into(),
        NetworkErrorKind::Dns => crate::proxy::dns::could_not_resolve(server),
        NetworkErrorKind::Timeout => format!("no answer within {CALL_TIMEOUT_SECS} s"),
        NetworkErrorKind::Tls => "TLS failed (the gateway itself speaks plain http://)".into(),
        NetworkErrorKind::Reset | NetworkErrorKind::UnexpectedEof => {
            "the connection was closed before an answer (is that port a ccmesh gateway?)".into()
        }
        NetworkErrorKind::BadAnswer | NetworkErrorKind::Other => super::error_chain(e),
    }
}

/// The message of an admin API error body, or the body itself when it has none.
pub(crate) fn api_message(value: &Value) -> String {
    value.pointer("/error/message").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| value.to_string())
}

/// Rewrite the admin API's hints (which name REST calls) as the commands that do the same.
pub fn cli_hint(message: &str) -> String {
    let mut out = message.to_string();
    for (api, cli) in HINTS {
        out = out.replace(api, cli);
    }
    // "… (PATCH /api/endpoints/NAME {"field": …})": the command that sets that field.
    const PATCH: &str = "PATCH /api/endpoints/";
    if let Some(start) = out.find(PATCH) {
        let rest = &out[start + PATCH.len()..];
        let name_len =
            rest.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))).unwrap_or(rest.len());
        let name = if name_len == 0 { "NAME" } else { &rest[..name_len] };
        let end = rest.find([')', ';']).map_or(out.len(), |i| start + PATCH.len() + i);
        let body = &out[start + PATCH.len() + name_len..end];
        let command = if body.contains("\"enabled\": true") {
            format!("`ccmesh endpoint enable {name}`")
        } else if body.contains("\"test_model\"") {
            format!("`ccmesh endpoint edit {name} --test-model MODEL`")
        } else {
            format!("`ccmesh endpoint edit {name} …`")
        };
        out.replace_range(start..end, &command);
    }
    const POST: &str = "POST /api/endpoints/";
    if let Some(start) = out.find(POST) {
        let rest = &out[start + POST.len()..];
        let name_len = rest.find('/').unwrap_or(rest.len());
        let name = if rest[..name_len].starts_with('{') { "NAME" } else { &rest[..name_len] };
        let command = [("/reset", "reset"), ("/test", "endpoint test")]
            .into_iter()
            .find(|(suffix, _)| rest[name_len..].starts_with(suffix));
        if let Some((suffix, command)) = command {
            let replacement = format!("`ccmesh {command} {name}`");
            out.replace_range(start..start + POST.len() + name_len + suffix.len(), &replacement);
        }
    }
    out
}

/// Fixed API phrases and the CLI's words for them.
const HINTS: &[(&str, &str)] = &[
    ("list them with GET /api/endpoints", "list them with `ccmesh endpoint list`"),
    ("list them with GET /api/keys", "list them with `ccmesh key list`"),
    ("(POST /api/keys, POST /api/keys/{name}/rotate)", "(`ccmesh key add NAME`, `ccmesh key rotate NAME`)"),
    ("list endpoints with GET /api/endpoints or `ccmesh endpoint list`", "list them with `ccmesh endpoint list`"),
    ("or PATCH the existing one", "or change the existing one with `ccmesh endpoint edit NAME …`"),
    ("see GET /api/settings for the valid keys", "see docs/configuration.md for the valid keys"),
    ("send Authorization: Bearer <CCMESH_ADMIN_TOKEN>", "set CCMESH_ADMIN_TOKEN (or pass --admin-token)"),
    ("add it with PUT /api/fast-queue or `ccmesh fast set`", "add it with `ccmesh fast set`"),
    ("add one with POST /api/endpoints, the dashboard, or `ccmesh endpoint add`", "add one with `ccmesh endpoint add`"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_without_a_scheme_is_http() {
        assert_eq!(server_url("localhost:3999"), "http://localhost:3999");
        assert_eq!(server_url("127.0.0.1:3999/"), "http://127.0.0.1:3999");
        assert_eq!(server_url("https://gw.example/"), "https://gw.example");
        assert_eq!(server_url(" http://127.0.0.1:3999 "), "http://127.0.0.1:3999");
    }

    #[test]
    fn api_hints_become_commands() {
        let cases = [
            (
                "no endpoint named 'x'; list them with GET /api/endpoints",
                "no endpoint named 'x'; list them with `ccmesh endpoint list`",
            ),
            (
                "name: an endpoint named 'a' already exists; choose another name or PATCH the existing one",
                "name: an endpoint named 'a' already exists; choose another name or change the existing one with `ccmesh endpoint edit NAME …`",
            ),
            (
                "endpoint 'glm' is disabled; enable it (PATCH /api/endpoints/glm {\"enabled\": true}) or name another",
                "endpoint 'glm' is disabled; enable it (`ccmesh endpoint enable glm`) or name another",
            ),
            (
                "all candidate endpoints are circuit-open; retry later, or reset a breaker with POST /api/endpoints/{name}/reset",
                "all candidate endpoints are circuit-open; retry later, or reset a breaker with `ccmesh reset NAME`",
            ),
            ("run the test again (POST /api/endpoints/kimi/test)", "run the test again (`ccmesh endpoint test kimi`)"),
            (
                "set one with test_model (PATCH /api/endpoints/glm {\"test_model\": \"MODEL\"})",
                "set one with test_model (`ccmesh endpoint edit glm --test-model MODEL`)",
            ),
            (
                "this gateway requires an admin token; send Authorization: Bearer <CCMESH_ADMIN_TOKEN>",
                "this gateway requires an admin token; set CCMESH_ADMIN_TOKEN (or pass --admin-token)",
            ),
            ("nothing to translate", "nothing to translate"),
        ];
        for (api, cli) in cases {
            assert_eq!(cli_hint(api), cli, "{api}");
        }
    }

    /// Every hint the admin API gives is one the table knows: a new API message with a REST verb
    /// and no CLI wording fails here.
    #[test]
    fn no_rest_verb_survives_the_translation() {
        let api_messages = [
            crate::admin::ApiError::not_found("x").message,
            "name: an endpoint named 'a' already exists; choose another name or PATCH the existing one".into(),
            "unknown settings key 'x'; see GET /api/settings for the valid keys".into(),
            "this gateway requires an admin token; send Authorization: Bearer <CCMESH_ADMIN_TOKEN>".into(),
            "no client key named 'x'; list them with GET /api/keys".into(),
            crate::keys::KeyDraft::create(&serde_json::json!({"name": "a", "secret": "x"})).unwrap_err().message,
            "endpoints: no endpoint named 'x'; list them with GET /api/endpoints".into(),
        ];
        for m in api_messages {
            let cli = cli_hint(&m);
            for verb in ["GET /api", "POST /api", "PATCH /api", "PUT /api", "DELETE /api"] {
                assert!(!cli.contains(verb), "{m} → {cli}");
            }
        }
    }
}
