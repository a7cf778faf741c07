pub mod binary;
pub mod gateway;
pub mod mock;
pub mod node;
pub mod postgres;
pub mod python;
pub mod redis;
