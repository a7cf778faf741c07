//! Observability, so an operator can see what each request did and cost: one record per client
//! request with its decision trail, usage and cost (`record`), written off the request path
//! (`writer`), plus metrics and live events.

pub mod cost;
pub mod events;
pub mod kept_text;
pub mod live;
pub mod metrics;
pub mod record;
pub mod record_id;
pub mod usage;
pub mod writer;
