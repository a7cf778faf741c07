//! `ccmesh migrate --from sqlite:PATH --to postgres://…`: an installation's SQLite database
//! moved into PostgreSQL — endpoints, settings, prices, client keys and request records, with
//! their ids, so record ids, cursors and the endpoints' breaker identities stay what they were.
//!
//! The target must be empty (a database a gateway has only migrated, or a fresh one): merging
//! two installations has no right answer for two endpoints of one name, so it is refused with
//! what the target holds. Everything is copied in one PostgreSQL transaction, so a migration
//! that fails half-way (the network, a full disk) leaves the target as empty as it was, and
//! running it again is safe. The source is only read; `ccmesh migrate` holds its data dir's
//! lock, so a gateway still serving it (whose new records the copy would miss) is named and
//! refused.

use super::sql::{Sql, Value, values_list};
use super::{Store, StoreError};

/// One table to copy: its name, the columns both schemas have (the SQLite one's order), and
/// the integer key the copy pages by.
struct Table {
    name: &'static str,
    columns: String,
    key: &'static str,
    /// PostgreSQL generates this key itself unless told otherwise.
    generated_always: bool,
}

fn tables() -> Vec<Table> {
    vec![
        Table { name: "endpoints", columns: squash(super::endpoints::COLUMNS), key: "id", generated_always: false },
        Table { name: "settings", columns: "rowid AS k, key, value".into(), key: "rowid", generated_always: false },
        Table {
            name: "prices",
            columns: "rowid AS k, model, input, output, cache_read, cache_write".into(),
            key: "rowid",
            generated_always: false,
        },
        Table { name: "client_keys", columns: squash(super::keys::COLUMNS), key: "id", generated_always: false },
        Table {
            name: "requests",
            columns: squash(&format!("seq, {}", super::records::insert_columns!())),
            key: "seq",
            generated_always: true,
        },
        Table { name: "request_records", columns: "seq, record".into(), key: "seq", generated_always: false },
    ]
}

/// Rows read and written per statement (23 columns × 1000 stays under PostgreSQL's 65 535
/// parameters).
const CHUNK: usize = 1000;
const _: () = assert!(CHUNK * 23 < 65_535);

/// A column list on one line, its names separated by ", ".
fn squash(columns: &str) -> String {
    columns.split(',').map(str::trim).collect::<Vec<_>>().join(", ")
}

/// The columns written to PostgreSQL: the read list without SQLite's `rowid AS k` paging key.
fn written_columns(t: &Table) -> Vec<&str> {
    t.columns.split(", ").filter(|c| !c.starts_with("rowid")).collect()
}

/// The page of the source table after `after` (by its key), at most `CHUNK` rows.
pub(crate) fn select_page_sql(t_name: &str, columns: &str, key: &str) -> String {
    format!("SELECT {columns} FROM {t_name} WHERE {key} > ? ORDER BY {key} LIMIT {CHUNK}")
}

/// The insert of `rows` rows into the target.
pub(crate) fn insert_sql(t_name: &str, columns: &[&str], rows: usize, generated_always: bool) -> String {
    let overriding = if generated_always { " OVERRIDING SYSTEM VALUE" } else { "" };
    format!("INSERT INTO {t_name} ({}){overriding} VALUES {}", columns.join(", "), values_list(rows, columns.len()))
}

/// How many rows each table held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Moved(pub Vec<(&'static str, u64)>);

impl std::fmt::Display for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(t, n)| format!("{n} {}", t.replace('_', " "))).collect();
        f.write_str(&parts.join(", "))
    }
}

/// Copy everything from the SQLite `from` into the PostgreSQL `to`.
pub fn sqlite_to_postgres(from: &Store, to: &Store) -> Result<Moved, StoreError> {
    if from.is_shared() || !to.is_shared() {
        return Err(StoreError::Invalid("migrate copies from an SQLite database into PostgreSQL".into()));
    }
    let tables = tables();
    to.write(|dst| {
        refuse_non_empty(dst, &tables, to)?;
        let mut moved = Moved::default();
        for t in &tables {
            let n = copy_table(from, dst, t)?;
            moved.0.push((t.name, n));
        }
        // Which hours hold which endpoint, model and protocol, for the copied records.
        dst.exec(super::records::FILL_PERIODS, &[])?;
        // The next row a gateway creates gets an id after the copied ones.
        for (table, key) in [("endpoints", "id"), ("client_keys", "id"), ("requests", "seq")] {
            dst.rows(
                &format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', '{key}'), COALESCE((SELECT MAX({key}) FROM {table}), 0) + 1, false)"
                ),
                &[],
            )?;
        }
        Ok(moved)
    })
}

fn refuse_non_empty(dst: &dyn Sql, tables: &[Table], to: &Store) -> Result<(), StoreError> {
    let mut held = Vec::new();
    for t in tables.iter().filter(|t| t.name != "request_records") {
        let n = dst.row(&format!("SELECT COUNT(*) FROM {}", t.name), &[])?.map(|r| r.int(0)).transpose()?.unwrap_or(0);
        if n > 0 {
            held.push(format!("{n} {}", t.name.replace('_', " ")));
        }
    }
    if held.is_empty() {
        return Ok(());
    }
    Err(StoreError::Invalid(format!(
        "the target database {} is not empty (it holds {}); migrate only into an empty database — \
         nothing was copied. Create a new database (or drop this one's tables) and run it again",
        to.describe(),
        held.join(", ")
    )))
}

fn copy_table(from: &Store, dst: &dyn Sql, t: &Table) -> Result<u64, StoreError> {
    let select = select_page_sql(t.name, &t.columns, t.key);
    let columns = written_columns(t);
    let reads_rowid = t.columns.starts_with("rowid");
    let mut after = i64::MIN;
    let mut copied = 0u64;
    loop {
        let rows = from.read_records(|c| c.rows(&select, &[after.into()]))?;
        let Some(last) = rows.last() else { break };
        after = last.int(0)?;
        let values: Vec<Value> = rows.iter().flat_map(|r| r.0.iter().skip(usize::from(reads_rowid)).cloned()).collect();
        dst.exec(&insert_sql(t.name, &columns, rows.len(), t.generated_always), &values)?;
        copied += rows.len() as u64;
        if rows.len() < CHUNK {
            break;
        }
    }
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_pages_by_its_key_and_writes_its_columns() {
        let t = tables();
        let requests = t.iter().find(|t| t.name == "requests").unwrap();
        assert!(requests.columns.starts_with("seq, id, started_at"), "{}", requests.columns);
        assert_eq!(written_columns(requests).len(), 23);
        let settings = t.iter().find(|t| t.name == "settings").unwrap();
        assert_eq!(written_columns(settings), ["key", "value"]);
        assert_eq!(
            select_page_sql("settings", &settings.columns, settings.key),
            "SELECT rowid AS k, key, value FROM settings WHERE rowid > ? ORDER BY rowid LIMIT 1000"
        );
    }

    #[test]
    fn generated_keys_are_overridden_and_placeholders_cover_every_row() {
        assert_eq!(
            insert_sql("settings", &["key", "value"], 2, false),
            "INSERT INTO settings (key, value) VALUES (?, ?), (?, ?)"
        );
        assert_eq!(
            insert_sql("requests", &["seq", "id"], 1, true),
            "INSERT INTO requests (seq, id) OVERRIDING SYSTEM VALUE VALUES (?, ?)"
        );
    }

    #[test]
    fn only_sqlite_into_postgres_is_a_migration() {
        let a = Store::open_in_memory().unwrap();
        let b = Store::open_in_memory().unwrap();
        assert!(matches!(sqlite_to_postgres(&a, &b), Err(StoreError::Invalid(_))));
    }
}
