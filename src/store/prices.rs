//! Model prices in SQLite (overrides of the built-in table) and the per-endpoint multiplier.
//! SKELETON: the schema below is a placeholder owned by issue 4's cost work.

/// Migration 3.
pub const SCHEMA: &str = r#"
CREATE TABLE prices (
    model        TEXT PRIMARY KEY,
    input        REAL NOT NULL,
    output       REAL NOT NULL,
    cache_read   REAL NOT NULL,
    cache_write  REAL NOT NULL
);
ALTER TABLE endpoints ADD COLUMN price_multiplier REAL NOT NULL DEFAULT 1.0;
"#;
