//! Prices and cost. SKELETON: the API is fixed; the built-in table and arithmetic land with
//! issue 4's cost work.

use super::record::Tokens;

/// USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

#[derive(Clone, Debug, Default)]
pub struct PriceTable {}

impl PriceTable {
    pub fn builtin() -> Self {
        Self {}
    }

    /// The built-in table with the overrides stored in the database.
    pub fn load(_store: &crate::store::Store) -> Result<Self, crate::store::StoreError> {
        Ok(Self::builtin())
    }

    /// The price of a model, if known.
    pub fn price(&self, _model: &str) -> Option<Price> {
        None
    }
}

/// Cost of `tokens` at `price` times the endpoint's `multiplier`; `None` when the usage is unknown.
pub fn cost(_tokens: &Tokens, _price: &Price, _multiplier: f64) -> Option<f64> {
    None
}
