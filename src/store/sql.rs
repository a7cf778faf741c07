//! The little SQL both backends share: values, rows, and the `Sql` trait the configuration
//! tables (endpoints, settings, prices, client keys) are written against once, for SQLite and
//! PostgreSQL alike.
//!
//! Statements are written with `?` placeholders in the dialect both engines accept (`TRUE` /
//! `FALSE` literals, `IS DISTINCT FROM`, `lower(name)` for the case-insensitive names);
//! PostgreSQL numbers the placeholders (`numbered`). Request records do not go through here:
//! their writes are batched and their statistics scan a million rows, so each backend has its
//! own code for them (`records`, `postgres::records`) around the shared pure parts.

use super::StoreError;

/// A value bound to, or read from, a statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Int(i64::from(v))
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Real(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Value::Text(v.clone())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// One result row.
#[derive(Clone, Debug, PartialEq)]
pub struct Row(pub Vec<Value>);

impl Row {
    fn at(&self, i: usize) -> Result<&Value, StoreError> {
        self.0.get(i).ok_or_else(|| StoreError::Corrupt(format!("column {i} missing")))
    }

    fn wrong(i: usize, want: &str, got: &Value) -> StoreError {
        StoreError::Corrupt(format!("column {i}: expected {want}, found {got:?}"))
    }

    pub fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            // SQLite returns a REAL column's whole values as REAL; PostgreSQL never mixes.
            Value::Real(v) if v.fract() == 0.0 => Ok(Some(*v as i64)),
            other => Err(Self::wrong(i, "an integer", other)),
        }
    }

    pub fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.opt_int(i)?.ok_or_else(|| Self::wrong(i, "an integer", &Value::Null))
    }

    pub fn bool(&self, i: usize) -> Result<bool, StoreError> {
        Ok(self.int(i)? != 0)
    }

    pub fn opt_real(&self, i: usize) -> Result<Option<f64>, StoreError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Real(v) => Ok(Some(*v)),
            Value::Int(v) => Ok(Some(*v as f64)),
            other => Err(Self::wrong(i, "a number", other)),
        }
    }

    pub fn real(&self, i: usize) -> Result<f64, StoreError> {
        self.opt_real(i)?.ok_or_else(|| Self::wrong(i, "a number", &Value::Null))
    }

    pub fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Text(v) => Ok(Some(v.clone())),
            other => Err(Self::wrong(i, "text", other)),
        }
    }

    pub fn text(&self, i: usize) -> Result<String, StoreError> {
        self.opt_text(i)?.ok_or_else(|| Self::wrong(i, "text", &Value::Null))
    }
}

/// Which engine runs the statements, for the few places where the shared dialect ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// A connection or a transaction of either backend.
pub trait Sql {
    fn dialect(&self) -> Dialect;

    /// Run a statement; the number of rows it changed.
    fn exec(&self, sql: &str, args: &[Value]) -> Result<u64, StoreError>;
    /// Run a query; every row.
    fn rows(&self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError>;

    /// The first row, if any.
    fn row(&self, sql: &str, args: &[Value]) -> Result<Option<Row>, StoreError> {
        Ok(self.rows(sql, args)?.into_iter().next())
    }
}

/// `?` placeholders as PostgreSQL's `$1, $2, …`, leaving quoted text and identifiers alone.
pub fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '?' => {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            }
            None => out.push(c),
        }
    }
    out
}

/// `(?, ?), (?, ?), …`: the VALUES of a multi-row insert of `rows` rows, `width` columns each.
pub fn values_list(rows: usize, width: usize) -> String {
    let row = format!("({})", vec!["?"; width].join(", "));
    vec![row; rows].join(", ")
}

// ------------------------------------------------------------------------------------ SQLite

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(match self {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Int(v) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
            Value::Real(v) => ToSqlOutput::Borrowed(ValueRef::Real(*v)),
            Value::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
        })
    }
}

fn sqlite_value(v: rusqlite::types::ValueRef<'_>) -> Value {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) | ValueRef::Blob(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
    }
}

/// A uniqueness violation names what it violated, so a caller can tell "name taken" from
/// "secret taken"; every other error stays SQLite's.
pub(super) fn sqlite_error(e: rusqlite::Error) -> StoreError {
    match &e {
        rusqlite::Error::SqliteFailure(f, Some(msg))
            if f.code == rusqlite::ErrorCode::ConstraintViolation && msg.contains("UNIQUE") =>
        {
            StoreError::Unique(msg.clone())
        }
        _ => StoreError::Sqlite(e),
    }
}

impl Sql for rusqlite::Connection {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn exec(&self, sql: &str, args: &[Value]) -> Result<u64, StoreError> {
        let mut stmt = self.prepare_cached(sql).map_err(sqlite_error)?;
        let n = stmt.execute(rusqlite::params_from_iter(args)).map_err(sqlite_error)?;
        Ok(n as u64)
    }

    fn rows(&self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError> {
        let mut stmt = self.prepare_cached(sql).map_err(sqlite_error)?;
        let width = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(args)).map_err(sqlite_error)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(sqlite_error)? {
            let mut values = Vec::with_capacity(width);
            for i in 0..width {
                values.push(sqlite_value(r.get_ref(i).map_err(sqlite_error)?));
            }
            out.push(Row(values));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_outside_quotes() {
        assert_eq!(numbered("SELECT a FROM t WHERE b = ? AND c = ?"), "SELECT a FROM t WHERE b = $1 AND c = $2");
        assert_eq!(numbered("SELECT '?' , \"we?ird\" FROM t WHERE x LIKE ? ESCAPE '\\'"), {
            "SELECT '?' , \"we?ird\" FROM t WHERE x LIKE $1 ESCAPE '\\'"
        });
        assert_eq!(numbered("VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)").matches('$').count(), 11);
        assert!(numbered("VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)").ends_with("$10, $11)"));
        assert_eq!(numbered("no placeholders"), "no placeholders");
    }

    #[test]
    fn a_multi_row_values_list_has_one_group_per_row() {
        assert_eq!(values_list(2, 3), "(?, ?, ?), (?, ?, ?)");
        assert_eq!(values_list(1, 1), "(?)");
        assert_eq!(numbered(&values_list(2, 2)), "($1, $2), ($3, $4)");
    }

    #[test]
    fn rows_read_what_both_engines_return() {
        let r = Row(vec![Value::Int(3), Value::Real(2.0), Value::Null, Value::Text("x".into()), Value::Real(0.5)]);
        assert_eq!(r.int(0).unwrap(), 3);
        assert_eq!(r.int(1).unwrap(), 2);
        assert!(r.bool(0).unwrap());
        assert_eq!(r.opt_text(2).unwrap(), None);
        assert_eq!(r.text(3).unwrap(), "x");
        assert_eq!(r.real(0).unwrap(), 3.0);
        assert!(r.int(4).is_err(), "a fraction is not an integer");
        assert!(r.text(2).is_err());
        assert!(r.int(9).is_err());
    }

    #[test]
    fn sqlite_runs_the_shared_dialect() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE COLLATE NOCASE, on_ INTEGER)")
            .unwrap();
        assert_eq!(c.exec("INSERT INTO t (name, on_) VALUES (?, ?)", &["A".into(), true.into()]).unwrap(), 1);
        let dup = c.exec("INSERT INTO t (name, on_) VALUES (?, ?)", &["a".into(), false.into()]);
        assert!(matches!(dup, Err(StoreError::Unique(_))), "{dup:?}");
        let row = c.row("SELECT id, name FROM t WHERE on_ = TRUE AND id IS DISTINCT FROM ?", &[Value::Null]).unwrap();
        assert_eq!(row.unwrap().text(1).unwrap(), "A");
    }
}
