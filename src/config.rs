//! Configuration: run-time settings (per-protocol breaker and timeouts, SPEC §5–6, §10) and the
//! `--config` TOML file. Everything is parsed, then validated into typed values with units.

pub mod authoritative;
pub mod file;
pub mod reload;
pub mod retry_rules;
pub mod settings;
pub mod watch;

pub use settings::{BreakerSettings, Limits, RoutingStrategy, Settings, Timeouts};
