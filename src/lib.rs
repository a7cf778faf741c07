//! ccmesh: a self-hosted LLM API gateway. Module map, in the order a request meets them:

#![forbid(unsafe_code)]

/// Admin REST API under `/api`.
pub mod admin;
/// Session affinity: session ids from the clients' requests, and their endpoint bindings.
pub mod affinity;
/// The circuit breaker: pure state machine and its thin shell.
pub mod breaker;
/// The upstreams' model lists, fetched in the background for `GET /v1/models`.
pub mod catalogue;
/// Command line: `serve` and the management commands that talk to the admin API.
pub mod cli;
/// Pointing coding agents (Claude Code, Codex CLI, Gemini CLI) at the gateway, and back.
pub mod clients;
/// Time source (injectable for exact tests).
pub mod clock;
/// Several gateways sharing breakers, rotation, limits and bindings through Redis (`--redis`).
pub mod cluster;
/// Settings (per-protocol breaker and timeouts) and the `--config` file.
pub mod config;
/// Protocol conversion through one intermediate representation.
pub mod convert;
/// The web dashboard: server-rendered pages and embedded ES modules.
pub mod dashboard;
/// Endpoint domain types and write validation.
pub mod endpoint;
/// A fast hasher for the request path's small bounded maps.
pub mod fasthash;
/// Shared state: configuration snapshot, breakers, rotation.
pub mod gateway;
/// Host names: the admin API's `Host` allow-list, base URLs that point back at the gateway.
pub mod hosts;
/// Giving memory back to the system when a thread falls idle.
pub mod idle_memory;
/// Reading cc-switch's and the ccMesh desktop app's databases into endpoints and settings.
pub mod import;
/// Client keys: who may use the gateway, for what, how fast, for how much.
pub mod keys;
/// Request records, usage, cost, metrics and live events.
pub mod observe;
/// Endpoint presets for the vendors coding agents use most (`presets/vendors.toml`).
pub mod presets;
/// Inbound protocols, native errors, SSE scanning.
pub mod protocol;
/// The request path: ingress, attempt loop, classification, upstream, relay.
pub mod proxy;
/// Redaction of secrets by their literal value, wherever text is stored or logged.
pub mod redact;
/// Choosing candidates and where a request starts (pure).
pub mod routing;
/// Comparing and masking secrets.
pub mod secrets;
/// HTTP server wiring and graceful shutdown.
pub mod server;
/// The configuration snapshot the request path reads: endpoints with prebuilt headers, settings,
/// prices.
pub mod snapshot;
/// SQLite storage of endpoints and settings.
pub mod store;
/// How many requests the calling thread is serving.
pub mod thread_load;
/// RFC 3339 timestamps.
pub mod timefmt;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod link_order;
#[cfg(test)]
mod test_waker;
