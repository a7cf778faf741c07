//! Codex CLI: `$CODEX_HOME/config.toml`, else `~/.codex/config.toml`. `connect` adds a provider
//! table `[model_providers.ccmesh]` (the gateway's `/v1`, the Responses wire API) and selects it
//! with the top-level `model_provider = "ccmesh"`, through `toml_edit` so comments, key order and
//! the user's other tables stay as they are.
//!
//! The key: Codex 0.171 accepts `experimental_bearer_token` in a provider table (sent as
//! `Authorization: Bearer`), so no environment variable is needed. (`env_key` would name one;
//! older versions that lack the field need `env_key = "CCMESH_API_KEY"` and that variable set.)

use std::path::PathBuf;

use super::{ClientError, Environment, FileFormat, FilePlan, KeyEdit, Target};

pub const PROVIDER: &str = "ccmesh";

pub fn config_dir(env: &Environment) -> PathBuf {
    match env.var("CODEX_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => env.home.join(".codex"),
    }
}

pub fn config_path(env: &Environment) -> PathBuf {
    config_dir(env).join("config.toml")
}

fn toml_string(s: &str) -> String {
    toml_edit::Value::from(s).to_string().trim().to_string()
}

pub fn plan(env: &Environment, target: &Target) -> Vec<FilePlan> {
    let table = format!(
        "{{ name = {}, base_url = {}, wire_api = \"responses\", experimental_bearer_token = {} }}",
        toml_string("ccmesh"),
        toml_string(&format!("{}/v1", target.server.trim_end_matches('/'))),
        toml_string(&target.key),
    );
    vec![FilePlan {
        path: config_path(env),
        format: FileFormat::Toml,
        edits: vec![
            KeyEdit::set(&["model_provider"], toml_string(PROVIDER), false),
            KeyEdit::set(&["model_providers", PROVIDER], table, true).shown_as(format!(
                "base_url = {}/v1, wire_api = responses, experimental_bearer_token = (a key)",
                target.server.trim_end_matches('/')
            )),
        ],
    }]
}

/// The base URL of the provider `model_provider` selects (`None` for the built-in OpenAI one).
pub fn configured_url(env: &Environment) -> Result<Option<String>, ClientError> {
    let path = config_path(env);
    let Some(text) = super::read_text(env, &path)? else { return Ok(None) };
    let doc: toml::Table = toml::from_str(&text)
        .map_err(|e| ClientError::Refused(format!("{} is not valid TOML ({})", env.display(&path), e.message())))?;
    let Some(provider) = doc.get("model_provider").and_then(|v| v.as_str()) else { return Ok(None) };
    Ok(doc
        .get("model_providers")
        .and_then(|p| p.get(provider))
        .and_then(|p| p.get("base_url"))
        .and_then(|u| u.as_str())
        .map(str::to_string))
}

pub fn notes(_target: &Target) -> Vec<String> {
    vec!["a `--profile` or `-c model_provider=…` on Codex's command line still chooses another provider".into()]
}
