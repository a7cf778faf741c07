//! Model price overrides in the database (on top of the built-in table in `observe::cost`), and
//! the per-endpoint price multiplier column.

use super::sql::Sql;
use super::{Store, StoreError};
use crate::observe::cost::{Price, PriceTable};

/// Migration 3: the overrides table, and `endpoints.price_multiplier` (relays often bill a
/// multiple of the list price). Names are unique case-insensitively, as they are matched.
pub const SCHEMA: &str = r#"
CREATE TABLE prices (
    model        TEXT PRIMARY KEY COLLATE NOCASE,
    input        REAL NOT NULL CHECK (input >= 0),
    output       REAL NOT NULL CHECK (output >= 0),
    cache_read   REAL NOT NULL CHECK (cache_read >= 0),
    cache_write  REAL NOT NULL CHECK (cache_write >= 0)
);
ALTER TABLE endpoints ADD COLUMN price_multiplier REAL NOT NULL DEFAULT 1.0;
"#;

/// PostgreSQL's migration 3: the same.
pub const PG_SCHEMA: &str = r#"
CREATE TABLE prices (
    model        TEXT NOT NULL,
    input        DOUBLE PRECISION NOT NULL CHECK (input >= 0),
    output       DOUBLE PRECISION NOT NULL CHECK (output >= 0),
    cache_read   DOUBLE PRECISION NOT NULL CHECK (cache_read >= 0),
    cache_write  DOUBLE PRECISION NOT NULL CHECK (cache_write >= 0)
);
CREATE UNIQUE INDEX prices_model ON prices (lower(model));
ALTER TABLE endpoints ADD COLUMN price_multiplier DOUBLE PRECISION NOT NULL DEFAULT 1.0;
"#;

impl PriceTable {
    /// The built-in table with the overrides stored in the database.
    pub fn load(store: &Store) -> Result<Self, StoreError> {
        Ok(Self::with_overrides(store.list_prices()?))
    }
}

pub(super) fn list(db: &dyn Sql) -> Result<Vec<(String, Price)>, StoreError> {
    let rows =
        db.rows("SELECT model, input, output, cache_read, cache_write FROM prices ORDER BY lower(model), model", &[])?;
    rows.iter()
        .map(|r| {
            Ok((
                r.text(0)?,
                Price { input: r.real(1)?, output: r.real(2)?, cache_read: r.real(3)?, cache_write: r.real(4)? },
            ))
        })
        .collect()
}

impl Store {
    /// Every stored override, by name.
    pub fn list_prices(&self) -> Result<Vec<(String, Price)>, StoreError> {
        self.read(list)
    }

    /// Create or replace the override for `model` (a name differing only in case replaces it,
    /// taking the new spelling).
    pub fn upsert_price(&self, model: &str, price: &Price) -> Result<(), StoreError> {
        self.write(|db| {
            db.exec("DELETE FROM prices WHERE lower(model) = lower(?)", &[model.into()])?;
            db.exec(
                "INSERT INTO prices (model, input, output, cache_read, cache_write) VALUES (?, ?, ?, ?, ?)",
                &[
                    model.into(),
                    price.input.into(),
                    price.output.into(),
                    price.cache_read.into(),
                    price.cache_write.into(),
                ],
            )?;
            Ok(())
        })
    }

    /// Remove the override for `model` (case-insensitive); `false` when there was none.
    pub fn delete_price(&self, model: &str) -> Result<bool, StoreError> {
        self.write(|db| Ok(db.exec("DELETE FROM prices WHERE lower(model) = lower(?)", &[model.into()])? > 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::cost::PriceSource;

    #[test]
    fn overrides_round_trip_case_insensitively() {
        let s = Store::open_in_memory().unwrap();
        assert!(s.list_prices().unwrap().is_empty());
        let a = Price { input: 1.0, output: 2.0, cache_read: 0.1, cache_write: 1.25 };
        let b = Price { input: 0.5, output: 1.0, cache_read: 0.05, cache_write: 0.5 };
        s.upsert_price("my-model", &a).unwrap();
        s.upsert_price("glm-*", &b).unwrap();
        s.upsert_price("My-Model", &b).unwrap();
        // Sorted case-insensitively, as names match.
        assert_eq!(s.list_prices().unwrap(), vec![("glm-*".to_string(), b), ("My-Model".to_string(), b)]);
        let table = PriceTable::load(&s).unwrap();
        assert_eq!(table.price("my-model"), Some(b));
        assert_eq!(table.price("glm-4.5-air"), Some(b));
        assert_eq!(table.lookup("my-model").unwrap().source, PriceSource::Custom);
        assert!(s.delete_price("MY-MODEL").unwrap());
        assert!(!s.delete_price("my-model").unwrap());
        assert_eq!(PriceTable::load(&s).unwrap().price("my-model"), None);
    }

    #[test]
    fn the_database_refuses_negative_prices() {
        let s = Store::open_in_memory().unwrap();
        let bad = Price { input: -1.0, output: 2.0, cache_read: 0.1, cache_write: 1.25 };
        assert!(s.upsert_price("x", &bad).is_err());
        assert!(s.list_prices().unwrap().is_empty());
    }
}
