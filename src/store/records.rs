//! Request records in SQLite: schema, batch insert, queries, retention.
//! SKELETON: the schema below is a placeholder owned by issue 4's records work.

/// Migration 2.
pub const SCHEMA: &str = r#"
CREATE TABLE requests (
    id          TEXT PRIMARY KEY,
    started_at  INTEGER NOT NULL,
    record      TEXT NOT NULL
);
"#;
