//! Model price overrides in SQLite (on top of the built-in table in `observe::cost`), and the
//! per-endpoint price multiplier column.

use rusqlite::params;

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

impl PriceTable {
    /// The built-in table with the overrides stored in the database.
    pub fn load(store: &Store) -> Result<Self, StoreError> {
        Ok(Self::with_overrides(store.list_prices()?))
    }
}

impl Store {
    /// Every stored override, by name.
    pub fn list_prices(&self) -> Result<Vec<(String, Price)>, StoreError> {
        self.with(|c| {
            let mut stmt =
                c.prepare("SELECT model, input, output, cache_read, cache_write FROM prices ORDER BY model")?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    Price { input: r.get(1)?, output: r.get(2)?, cache_read: r.get(3)?, cache_write: r.get(4)? },
                ))
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Create or replace the override for `model` (a name differing only in case replaces it,
    /// taking the new spelling).
    pub fn upsert_price(&self, model: &str, price: &Price) -> Result<(), StoreError> {
        self.with(|c| {
            let tx = c.transaction()?;
            tx.execute("DELETE FROM prices WHERE model = ?1", [model])?;
            tx.execute(
                "INSERT INTO prices (model, input, output, cache_read, cache_write) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![model, price.input, price.output, price.cache_read, price.cache_write],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Remove the override for `model` (case-insensitive); `false` when there was none.
    pub fn delete_price(&self, model: &str) -> Result<bool, StoreError> {
        self.with(|c| Ok(c.execute("DELETE FROM prices WHERE model = ?1", [model])? > 0))
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
