//! The one integration-test binary: real sockets on 127.0.0.1, a real SQLite file, a scripted
//! mock upstream as the outside world.
// Test support fails loudly: unwrap and panic are the point outside #[test] functions too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

mod admin_api;
mod authoritative;
mod bench_report;
mod binary;
mod breaker_flow;
mod build_profile;
mod cli;
mod client_keys;
mod clients;
mod cluster;
mod cluster_scripts;
mod connectivity;
mod conversion;
mod dashboard;
mod deploy;
mod explicit_and_routing;
mod failover;
mod faults;
mod gemini_inbound;
mod gemini_upstream;
mod hardening;
mod hardening_binary;
mod import;
mod keys_binary;
mod metrics_events;
mod models;
mod passthrough;
mod postgres;
mod prices;
mod real_clients;
mod records;
mod redis_cluster;
mod request_state;
mod resume;
mod sdk_clients;
mod sdk_matrix;
mod serving_threads;
mod soak;
mod streaming;
