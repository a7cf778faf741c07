//! Claude Code: `$CLAUDE_CONFIG_DIR/settings.json`, else `~/.claude/settings.json`. Claude Code
//! applies the `env` object of its settings to its own process, so two keys point it at the
//! gateway with no shell variable: `env.ANTHROPIC_BASE_URL` and `env.ANTHROPIC_AUTH_TOKEN` (sent
//! as `Authorization: Bearer`). An `env.ANTHROPIC_API_KEY` would be sent too and makes Claude Code
//! warn about two credentials, so it is removed, and kept in the record for `disconnect`.

use std::path::PathBuf;

use super::{ClientError, Environment, FileFormat, FilePlan, KeyEdit, Target, json_edit};

pub fn config_dir(env: &Environment) -> PathBuf {
    match env.var("CLAUDE_CONFIG_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => env.home.join(".claude"),
    }
}

pub fn settings_path(env: &Environment) -> PathBuf {
    config_dir(env).join("settings.json")
}

pub fn plan(env: &Environment, target: &Target) -> Vec<FilePlan> {
    vec![FilePlan {
        path: settings_path(env),
        format: FileFormat::Json,
        edits: vec![
            KeyEdit::set(&["env", "ANTHROPIC_BASE_URL"], json_edit::string(&target.server), false),
            KeyEdit::set(&["env", "ANTHROPIC_AUTH_TOKEN"], json_edit::string(&target.key), true),
            KeyEdit::remove(&["env", "ANTHROPIC_API_KEY"], true),
        ],
    }]
}

pub fn configured_url(env: &Environment) -> Result<Option<String>, ClientError> {
    let path = settings_path(env);
    let Some(text) = super::read_text(env, &path)? else { return Ok(None) };
    json_edit::get_string(&text, &["env", "ANTHROPIC_BASE_URL"])
        .map_err(|e| ClientError::Refused(format!("{} is not valid JSON ({e})", env.display(&path))))
}

pub fn notes(_target: &Target) -> Vec<String> {
    vec![
        "a shell that exports ANTHROPIC_BASE_URL or ANTHROPIC_API_KEY still overrides these settings; unset them to use the gateway".into(),
    ]
}
