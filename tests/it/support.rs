pub mod gateway;
pub mod mock;
