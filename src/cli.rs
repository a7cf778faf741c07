//! The command line. `ccmesh serve` runs the gateway; every other command is a small client of
//! a running gateway's admin API (`--server`, default http://127.0.0.1:3999).

pub mod api;
pub mod clients;
pub mod import;
pub mod keys;
pub mod manage;
pub mod migrate;
pub mod output;
pub mod presets;
pub mod records;
pub mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "ccmesh", version, about = "Self-hosted LLM API gateway: rotation, circuit breakers, failover")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the gateway.
    Serve(serve::ServeArgs),
    /// Manage endpoints.
    #[command(subcommand)]
    Endpoint(manage::EndpointCommand),
    /// Manage the fast queue.
    #[command(subcommand)]
    Fast(manage::FastCommand),
    /// Manage client keys (who may use the proxy, for what, how much); `key usage` for a key's holder.
    #[command(subcommand)]
    Key(keys::KeyCommand),
    /// Show endpoint health.
    Health(manage::Common),
    /// Reset an endpoint's circuit breaker.
    Reset {
        name: String,
        #[command(flatten)]
        common: manage::Common,
    },
    /// Turn failover on or off for one inbound protocol (seed 001's switch): off, a request goes
    /// only to the endpoint the routing strategy starts at.
    Failover {
        /// `on` or `off`.
        #[arg(value_parser = ["on", "off"])]
        state: String,
        /// `claude`, `openai`, `responses` or `gemini`.
        #[arg(value_parser = ["claude", "openai", "responses", "gemini"])]
        protocol: String,
        #[command(flatten)]
        common: manage::Common,
    },
    /// Recent request records, oldest first (the newest last, nearest the prompt); `-f` keeps
    /// printing new ones as they complete.
    Logs(records::LogsArgs),
    /// A summary of requests, errors, latency, tokens and cost for a period, with a total row.
    Stats(records::StatsArgs),
    /// Point a coding agent (claude-code, codex, gemini-cli) at the gateway: only the keys that
    /// do that change in its settings; a backup and a record go to the data directory.
    Connect(clients::ConnectArgs),
    /// Undo `ccmesh connect` for a client: the values from before come back.
    Disconnect(clients::DisconnectArgs),
    /// Show each client's state: not installed, connected to this gateway, pointing elsewhere,
    /// or not configured.
    Clients(clients::ClientsArgs),
    /// List the vendor presets for `ccmesh endpoint add NAME --preset ID`.
    Presets(manage::Common),
    /// Import endpoints and settings from cc-switch or the ccMesh desktop app (read-only on the
    /// source; a second import updates by name).
    #[command(subcommand)]
    Import(import::ImportCommand),
    /// Move an installation from its SQLite data dir into PostgreSQL (an empty database), for
    /// gateways that share one: `--from sqlite:PATH --to postgres://…`.
    Migrate(migrate::MigrateArgs),
    /// Run the gateway as a login service.
    #[command(subcommand)]
    Service(clients::ServiceCommand),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Migrate(args) => migrate::run(args),
        other => manage::run(other),
    }
}

/// An error and its causes, each said once: `cannot read x: No such file or directory (os error
/// 2)`, not the cause twice when a message already quotes its source (as thiserror messages
/// with `{source}` do, and anyhow's `{:#}` then repeats it).
pub fn error_text(e: &anyhow::Error) -> String {
    join_causes(e.chain().map(|c| c.to_string()))
}

/// The same for any error with a source chain.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut texts = Vec::new();
    let mut cur = Some(e);
    while let Some(c) = cur {
        texts.push(c.to_string());
        cur = c.source();
    }
    join_causes(texts.into_iter())
}

fn join_causes(texts: impl Iterator<Item = String>) -> String {
    let mut out = String::new();
    for text in texts {
        let text = text.trim();
        // A cause the message so far already says (or that says nothing) adds nothing.
        if text.is_empty() || out.contains(text) {
            continue;
        }
        // A cause that repeats the whole message so far with more detail replaces it.
        if !out.is_empty() && text.contains(out.as_str()) {
            out = text.to_string();
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let said = io.to_string();
        let e = anyhow::Error::new(crate::config::file::ConfigFileError::Read { path: "x.toml".into(), source: io });
        assert_eq!(error_text(&e), format!("cannot read x.toml: {said}"));
        let e = anyhow::anyhow!("outer").context("top");
        assert_eq!(error_text(&e), "top: outer");
        let e = anyhow::anyhow!("could not connect").context("could not connect to the upstream");
        assert_eq!(error_text(&e), "could not connect to the upstream");
    }
}
