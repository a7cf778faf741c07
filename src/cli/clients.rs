//! `ccmesh connect|disconnect CLIENT`, `ccmesh clients`, `ccmesh service install`: the clients'
//! files on this machine (`crate::clients` does the editing), checked against the gateway at
//! `--server` before anything is written.

use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::api::{Client, Common};
use super::output::{pretty, table};
use crate::clients::{self, ClientKind, Environment, Target, service};

#[derive(Args, Debug)]
pub struct ConnectArgs {
    /// claude-code, codex or gemini-cli.
    pub client: String,
    /// The token the client sends (a client key). Without it: a key minted for the client when
    /// the gateway uses client keys, else a placeholder.
    #[arg(long, env = "CCMESH_CLIENT_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// Where the record and backups go (default: the gateway's data directory).
    #[arg(long, env = "CCMESH_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct DisconnectArgs {
    /// claude-code, codex or gemini-cli.
    pub client: String,
    #[arg(long, env = "CCMESH_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct ClientsArgs {
    #[arg(long, env = "CCMESH_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Subcommand, Debug)]
pub enum ServiceCommand {
    /// Write a systemd user unit (Linux) or a launchd agent (macOS) that runs `ccmesh serve` at
    /// login, and print the command that starts it.
    Install {
        /// Address the service listens on.
        #[arg(long, env = "CCMESH_LISTEN", default_value = "127.0.0.1:3999")]
        listen: String,
        #[arg(long, env = "CCMESH_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Print the file instead of writing it.
        #[arg(long)]
        print: bool,
        /// Replace a service file that exists already.
        #[arg(long)]
        force: bool,
    },
}

fn kind(name: &str) -> anyhow::Result<ClientKind> {
    ClientKind::parse(name).ok_or_else(|| anyhow!("unknown client '{name}'; choose claude-code, codex or gemini-cli"))
}

fn data_dir(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match given {
        Some(d) => Ok(d),
        None => super::serve::default_data_dir(),
    }
}

fn environment() -> anyhow::Result<Environment> {
    Environment::from_process().context("cannot find your home directory (HOME is not set)")
}

/// SPEC §15.10: a key named after the client (`claude-code`, `codex`, `gemini-cli`) when the
/// gateway uses client keys (any exists, or `require_client_key` is on), else `None` (the
/// placeholder is written). A key of that name from an earlier connect gets a new secret
/// (`POST /api/keys/{name}/rotate`): the old one cannot be read back. An older gateway without
/// `/api/keys` answers 404 and gets the placeholder.
pub(crate) async fn mint_client_key(api: &Client, client: ClientKind) -> anyhow::Result<Option<String>> {
    use reqwest::{Method, StatusCode};
    let (status, keys) = api.call_status(Method::GET, "/api/keys", None).await?;
    if status == StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if status == StatusCode::UNAUTHORIZED {
        bail!(
            "the gateway wants its admin token before it makes a client key: set CCMESH_ADMIN_TOKEN (or --admin-token), or pass the key with --key"
        );
    }
    if !status.is_success() {
        bail!("cannot list the gateway's client keys ({status}); pass one with --key");
    }
    let any_key = keys.as_array().is_some_and(|a| !a.is_empty());
    let settings = api.call(Method::GET, "/api/settings", None).await?;
    let required = settings.get("require_client_key").and_then(Value::as_bool).unwrap_or(false);
    if !any_key && !required {
        return Ok(None);
    }
    let name = client.id();
    let body =
        json!({"name": name, "description": format!("{} on this machine (ccmesh connect)", client.display_name())});
    let exists = keys.as_array().is_some_and(|a| a.iter().any(|k| k["name"].as_str() == Some(name)));
    let created = if exists {
        // The client was connected before: its old secret is not retrievable, so rotate it.
        api.call(Method::POST, &format!("/api/keys/{}/rotate", super::output::path(name)), None).await?
    } else {
        api.call(Method::POST, "/api/keys", Some(body)).await?
    };
    created
        .get("secret")
        .and_then(Value::as_str)
        .map(|s| Some(s.to_string()))
        .ok_or_else(|| anyhow!("the gateway made a key for {name} but did not return its secret; pass one with --key"))
}

/// The gateway must answer `/health`: a client pointed at a dead port is dead too.
async fn check_reachable(api: &Client) -> anyhow::Result<()> {
    const UNCHANGED: &str = "Nothing was changed: a client pointed at a gateway that is not running cannot work \
         (to start the gateway at every login: `ccmesh service install`)";
    match api.call_status(reqwest::Method::GET, "/health", None).await {
        Ok((s, v)) if s.is_success() && v.get("status").and_then(Value::as_str) == Some("ok") => Ok(()),
        Ok((s, _)) => bail!(
            "{} answered {s} to GET /health, not ccmesh's {{\"status\":\"ok\"}}: is that a ccmesh gateway? Name the right one with --server. {UNCHANGED}",
            api.server
        ),
        Err(e) => bail!("{}. {UNCHANGED}", super::error_text(&e)),
    }
}

pub async fn connect(args: ConnectArgs) -> anyhow::Result<String> {
    let client = kind(&args.client)?;
    let api = Client::new(&args.common)?;
    check_reachable(&api).await?;
    let (key, key_source) = match args.key.filter(|k| !k.is_empty()) {
        Some(k) => (k, "the key given with --key"),
        None => match mint_client_key(&api, client).await? {
            Some(k) => (k, "a client key made for it"),
            None => (clients::PLACEHOLDER_KEY.to_string(), "a placeholder token (the gateway uses no client keys)"),
        },
    };
    let env = environment()?;
    let data = data_dir(args.data_dir)?;
    let target = Target { server: api.server.clone(), key };
    let now = crate::clock::Clock::wall(&crate::clock::SystemClock);
    let report = clients::connect(client, &env, &data, &target, now)?;
    let mut warnings = Vec::new();
    // What the gateway says about itself: endpoints to route to, a service manager.
    if let Ok((status, info)) = api.call_status(reqwest::Method::GET, "/api/clients", None).await
        && status.is_success()
    {
        if info.pointer("/service/managed") == Some(&Value::Bool(false)) && service::installed(&env.home).is_none() {
            warnings.push(format!(
                "the gateway does not run as a service: while it is stopped, {} reaches no model. Start it at login with \
                 `ccmesh service install` (undo this connect with `ccmesh disconnect {client}`)",
                client.display_name()
            ));
        }
        if info.get("endpoints").and_then(Value::as_u64) == Some(0) {
            warnings.push(
                "the gateway has no enabled endpoint yet: add one with `ccmesh endpoint add NAME --preset deepseek --api-key KEY` \
                 (see `ccmesh presets`) or `ccmesh import cc-switch`"
                    .into(),
            );
        }
    }
    if args.common.json {
        return Ok(pretty(&json!({"report": report, "warnings": warnings})));
    }
    let mut out = vec![format!("connected {} to {} with {key_source}", client.display_name(), target.server)];
    out.extend(change_lines(&report));
    out.extend(report.backups.iter().map(|b| format!("backup: {b}")));
    out.extend(report.notes.iter().map(|n| format!("note: {n}")));
    out.extend(warnings.iter().map(|w| format!("warning: {w}")));
    out.push(format!("undo with `ccmesh disconnect {client}`"));
    Ok(out.join("\n"))
}

fn change_lines(report: &clients::Report) -> Vec<String> {
    report
        .changes
        .iter()
        .map(|c| {
            let what = match c.action {
                "kept" => "left as is (changed since connect)",
                other => other,
            };
            match &c.value {
                Some(v) => format!("  {} {}: {what} {v}", c.file, c.key),
                None => format!("  {} {}: {what}", c.file, c.key),
            }
        })
        .collect()
}

pub async fn disconnect(args: DisconnectArgs) -> anyhow::Result<String> {
    let client = kind(&args.client)?;
    let env = environment()?;
    let data = data_dir(args.data_dir)?;
    let report = match clients::disconnect(client, &env, &data) {
        Err(clients::ClientError::NotConnected(..)) => {
            let state = clients::state(client, &env, Some(&data), &super::api::server_url(&args.common.server));
            let hint = match state.status {
                clients::Status::Connected => format!(
                    "; its files point at the gateway without a record of ccmesh doing it: remove the keys listed in docs/clients.md from {}",
                    state.config
                ),
                _ => String::new(),
            };
            bail!(
                "{} was not connected by `ccmesh connect` (no record in {}){hint}",
                client.display_name(),
                data.join("clients").display()
            );
        }
        other => other?,
    };
    if args.common.json {
        return Ok(pretty(&json!({"report": report})));
    }
    let mut out = vec![format!("disconnected {}", client.display_name())];
    out.extend(report.restored_exactly.iter().map(|f| format!("  {f}: restored exactly as it was before connect")));
    out.extend(report.removed_files.iter().map(|f| format!("  {f}: removed (connect had created it)")));
    out.extend(change_lines(&report));
    out.extend(report.notes.iter().map(|n| format!("note: {n}")));
    Ok(out.join("\n"))
}

pub async fn list(args: ClientsArgs) -> anyhow::Result<String> {
    let env = environment()?;
    let data = data_dir(args.data_dir).ok();
    let server = super::api::server_url(&args.common.server);
    let states: Vec<clients::ClientState> =
        ClientKind::ALL.iter().map(|c| clients::state(*c, &env, data.as_deref(), &server)).collect();
    if args.common.json {
        return Ok(pretty(&json!({"server": server, "clients": states})));
    }
    let rows: Vec<Vec<String>> = states
        .iter()
        .map(|s| {
            vec![
                s.client.id().to_string(),
                match &s.error {
                    Some(e) => format!("{} ({e})", s.status.describe()),
                    None => s.status.describe().to_string(),
                },
                s.url.clone().unwrap_or_else(|| "-".into()),
                s.config.clone(),
            ]
        })
        .collect();
    Ok(format!(
        "clients relative to the gateway at {server}\n{}",
        table(&["CLIENT", "STATE", "BASE URL", "CONFIG"], &rows)
    ))
}

pub fn service_install(cmd: ServiceCommand) -> anyhow::Result<String> {
    let ServiceCommand::Install { listen, data_dir: dir, print, force } = cmd;
    let env = environment()?;
    let binary = std::env::current_exe().context("cannot find the path of this ccmesh binary")?;
    let spec = service::ServiceSpec { binary, listen, data_dir: data_dir(dir)? };
    let manager = service::Manager::for_this_os();
    let text = manager.render(&spec);
    if print {
        return Ok(text);
    }
    let path = manager.path(&env.home);
    if path.exists() && !force {
        bail!("{} exists already; add --force to replace it", path.display());
    }
    clients::files::atomic_write(&path, text.as_bytes(), 0o644)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(format!("wrote {}\nstart it now and at every login with:\n  {}", path.display(), manager.activate_hint(&path)))
}
