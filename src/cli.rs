//! The command line. `ccmesh serve` runs the gateway; every other command is a small client of
//! a running gateway's admin API (`--server`, default http://127.0.0.1:3999).

pub mod clients;
pub mod import;
pub mod manage;
pub mod presets;
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
        /// `claude`, `openai` or `responses`.
        #[arg(value_parser = ["claude", "openai", "responses"])]
        protocol: String,
        #[command(flatten)]
        common: manage::Common,
    },
    /// Recent request records (newest first); `-f` follows new requests live.
    Logs(manage::LogsArgs),
    /// A summary of requests, errors, latency, tokens and cost for a period.
    Stats(manage::StatsArgs),
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
    /// Run the gateway as a login service.
    #[command(subcommand)]
    Service(clients::ServiceCommand),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        other => manage::run(other),
    }
}
