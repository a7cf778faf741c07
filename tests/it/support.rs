pub mod gateway;
pub mod mock;
pub mod python;
