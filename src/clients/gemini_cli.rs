//! Gemini CLI: the base URL and key go into `~/.gemini/.env` (`GOOGLE_GEMINI_BASE_URL`,
//! `GEMINI_API_KEY`), which the CLI loads at start, and `~/.gemini/settings.json` gets
//! `security.auth.selectedType = "gemini-api-key"`: without it, a custom base URL makes the CLI
//! pick another auth type and exit ("Invalid auth method selected", seen with 0.61).
//!
//! Folder trust: the CLI reads `~/.gemini/.env` only when the folder it runs in is trusted (it
//! asks on first start in a folder; `GEMINI_CLI_TRUST_WORKSPACE=true` trusts it for one run). In
//! an untrusted folder it starts without these two values: `connect` says so.

use std::path::PathBuf;

use super::{ClientError, Environment, FileFormat, FilePlan, KeyEdit, Target, dotenv, json_edit};

pub fn config_dir(env: &Environment) -> PathBuf {
    env.home.join(".gemini")
}

pub fn env_path(env: &Environment) -> PathBuf {
    config_dir(env).join(".env")
}

pub fn settings_path(env: &Environment) -> PathBuf {
    config_dir(env).join("settings.json")
}

pub fn plan(env: &Environment, target: &Target) -> Vec<FilePlan> {
    vec![
        FilePlan {
            path: env_path(env),
            format: FileFormat::Dotenv,
            edits: vec![
                KeyEdit::set(
                    &["GOOGLE_GEMINI_BASE_URL"],
                    dotenv::line("GOOGLE_GEMINI_BASE_URL", &target.server),
                    false,
                ),
                KeyEdit::set(&["GEMINI_API_KEY"], dotenv::line("GEMINI_API_KEY", &target.key), true),
            ],
        },
        FilePlan {
            path: settings_path(env),
            format: FileFormat::Json,
            edits: vec![KeyEdit::set(
                &["security", "auth", "selectedType"],
                json_edit::string("gemini-api-key"),
                false,
            )],
        },
    ]
}

pub fn configured_url(env: &Environment) -> Result<Option<String>, ClientError> {
    let Some(text) = super::read_text(env, &env_path(env))? else { return Ok(None) };
    Ok(dotenv::get_value(&text, "GOOGLE_GEMINI_BASE_URL"))
}

pub fn notes(_target: &Target) -> Vec<String> {
    vec![
        "Gemini CLI reads ~/.gemini/.env only in folders you trust: answer its trust question in each project folder (or run it with GEMINI_CLI_TRUST_WORKSPACE=true); in an untrusted folder it starts without the gateway".into(),
        "a shell that exports GEMINI_API_KEY or GOOGLE_GEMINI_BASE_URL overrides ~/.gemini/.env".into(),
    ]
}
