//! The command line. `ccmesh serve` runs the gateway; every other command is a small client of
//! a running gateway's admin API (`--server`, default http://127.0.0.1:3999).

pub mod manage;
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
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        other => manage::run(other),
    }
}
