//! PostgreSQL as the store of several gateways (`--database postgres://…`).
//!
//! Why it looks like this:
//! - The client is `tokio-postgres` (the async one; `postgres`, its blocking wrapper, starts a
//!   Tokio runtime per connection and panics when called from inside one, which is where the
//!   gateway's start-up and its tests call the store). Each `Pg` owns one small runtime on a
//!   thread of its own (`ccmesh-pg`) that drives the connections' sockets; the store's blocking
//!   API waits on the client's futures with `block_on`, which runs on any thread, async or not,
//!   because the client side of tokio-postgres is only channels to those connection tasks.
//! - Every wait has a deadline (`OP_TIMEOUT`) and a connection that failed is dropped, so a
//!   PostgreSQL that went away fails an admin call within seconds (`StoreError::Unavailable`,
//!   which the admin API answers with 503) and never hangs it; the next call reconnects.
//! - A few connections are kept for reuse (`MAX_IDLE`); the record writer thread has its own
//!   (`records::PgRecords`), and the change follower its own (`changes`).
//! - Every configuration write ends by bumping `config_version` and `NOTIFY`ing in the same
//!   transaction, so a gateway that sees the version (or the notification) sees the change.
//! - Migrations are numbered like SQLite's and recorded in `schema_version`; gateways starting
//!   together take an advisory lock, so each migration runs once.

pub mod address;
pub mod changes;
pub mod records;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, NoTls};

use super::StoreError;
use super::sql::{Dialect, Row, Sql, Value, numbered};
pub use address::PgUrl;

/// Longest wait for any one database call.
pub const OP_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest wait for a connection, unless the URL says `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Connections kept open for the next call.
const MAX_IDLE: usize = 4;
/// The channel configuration changes are announced on.
pub const CHANNEL: &str = "ccmesh_config";
/// The advisory lock migrations hold (any constant the gateways agree on).
const MIGRATION_LOCK: i64 = 0x6363_6d65_7368;

/// The tables only a shared database needs: the change counter the gateways poll, the config
/// file every gateway must load alike (`config::authoritative`), the node numbers of record ids.
const CLUSTER_SCHEMA: &str = r#"
CREATE TABLE config_version (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    version  BIGINT NOT NULL
);
INSERT INTO config_version (id, version) VALUES (1, 0);
CREATE TABLE config_file (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    digest      TEXT NOT NULL,
    path        TEXT NOT NULL,
    node        TEXT NOT NULL,
    applied_at  BIGINT NOT NULL
);
CREATE SEQUENCE gateway_nodes;
"#;

/// PostgreSQL's migrations, numbered as SQLite's (`store::MIGRATIONS`) for what both have.
pub const MIGRATIONS: &[&str] = &[
    super::endpoints::PG_SCHEMA,
    super::records::PG_SCHEMA,
    super::prices::PG_SCHEMA,
    super::keys::PG_SCHEMA,
    CLUSTER_SCHEMA,
    super::records::PG_PARTIAL_INDEXES,
    super::records::PG_VALUE_PERIODS,
];

/// The config file applied last on a shared database (`config_file`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedFile {
    pub digest: String,
    pub path: String,
    pub node: String,
    pub applied_at_ms: i64,
}

/// A PostgreSQL database: its URL, a runtime for the sockets, a few idle connections, and
/// whether it answers.
pub struct Pg {
    url: PgUrl,
    runtime: Runtime,
    idle: Mutex<Vec<Client>>,
    problem: Mutex<Option<String>>,
    node: u64,
}

impl Pg {
    pub fn open(url: &str) -> Result<Pg, StoreError> {
        let url = PgUrl::parse(url).map_err(StoreError::Invalid)?;
        let mut pg =
            Pg { url, runtime: Runtime::start()?, idle: Mutex::new(Vec::new()), problem: Mutex::new(None), node: 0 };
        pg.migrate()?;
        let node = pg.read(|db| {
            db.row("SELECT nextval('gateway_nodes')", &[])?
                .ok_or_else(|| StoreError::Corrupt("no node number".into()))?
                .int(0)
        })?;
        crate::observe::record_id::set_node(node as u64);
        pg.node = node as u64;
        Ok(pg)
    }

    pub fn url(&self) -> &PgUrl {
        &self.url
    }

    /// This gateway's node number (record ids carry it).
    pub fn node(&self) -> u64 {
        self.node
    }

    /// Why the database cannot be used now, if it cannot.
    pub fn problem(&self) -> Option<String> {
        self.problem.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Remember how the last call went: an unreachable database is a problem until a call
    /// succeeds again.
    pub(crate) fn note<T>(&self, result: &Result<T, StoreError>) {
        let mut problem = self.problem.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(_) => {
                if problem.take().is_some() {
                    tracing::info!(event = "storage_recovered", database = %self.url.redacted(), "PostgreSQL answers again");
                }
            }
            Err(StoreError::Unavailable(e)) => {
                if problem.is_none() {
                    tracing::warn!(event = "storage_degraded", database = %self.url.redacted(), error = %e, "PostgreSQL is unreachable; serving from the last configuration");
                }
                *problem = Some(format!("PostgreSQL at {} is unreachable ({e})", self.url.redacted()));
            }
            // The server answered (with an error about the statement): it is reachable.
            Err(_) => {
                if problem.take().is_some() {
                    tracing::info!(event = "storage_recovered", database = %self.url.redacted(), "PostgreSQL answers again");
                }
            }
        }
    }

    /// A new connection, its socket driven by this store's runtime.
    pub(crate) fn connect(&self) -> Result<Client, StoreError> {
        let config = self.url.config(CONNECT_TIMEOUT);
        let task = self.runtime.handle.spawn(async move {
            let (client, connection) = config.connect(NoTls).await?;
            // Ends when the client is dropped or the connection breaks.
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok::<Client, tokio_postgres::Error>(client)
        });
        match block_on(task, OP_TIMEOUT) {
            Some(Ok(Ok(client))) => Ok(client),
            Some(Ok(Err(e))) => Err(pg_error(e)),
            Some(Err(e)) => Err(StoreError::Unavailable(format!("the connection task failed: {e}"))),
            None => Err(StoreError::Unavailable(format!("no connection within {}s", OP_TIMEOUT.as_secs()))),
        }
    }

    fn take(&self) -> Result<Client, StoreError> {
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            std::iter::from_fn(|| idle.pop()).find(|c| !c.is_closed())
        };
        match reused {
            Some(c) => Ok(c),
            None => self.connect(),
        }
    }

    fn give_back(&self, client: Client) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE && !client.is_closed() {
            idle.push(client);
        }
    }

    /// Run `f` on a connection; one that failed is not reused.
    fn with_client<T>(&self, f: impl FnOnce(&mut Client) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let result = self.take().and_then(|mut client| {
            let result = f(&mut client);
            if !matches!(result, Err(StoreError::Unavailable(_))) {
                self.give_back(client);
            }
            result
        });
        self.note(&result);
        result
    }

    pub(crate) fn read<T>(&self, f: impl FnOnce(&dyn Sql) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.with_client(|client| f(&PgSql::Client(client)))
    }

    /// `f` in a transaction that also bumps `config_version` and notifies every gateway.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&dyn Sql) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.with_client(|client| {
            let tx = wait(client.transaction())?;
            let value = f(&PgSql::Tx(&tx))?;
            let sql = PgSql::Tx(&tx);
            let version = sql
                .row("UPDATE config_version SET version = version + 1 RETURNING version", &[])?
                .ok_or_else(|| StoreError::Corrupt("config_version has no row".into()))?
                .int(0)?;
            sql.rows("SELECT pg_notify(?, ?)", &[CHANNEL.into(), version.to_string().into()])?;
            wait(tx.commit())?;
            Ok(value)
        })
    }

    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.read(|db| db.row("SELECT version FROM schema_version", &[])?.map(|r| r.int(0)).transpose())
            .map(|v| v.unwrap_or(0))
    }

    pub fn config_version(&self) -> Result<i64, StoreError> {
        self.read(config_version)
    }

    /// The config file applied last, if any gateway on this database applies one.
    pub fn applied_file(&self) -> Result<Option<AppliedFile>, StoreError> {
        self.read(|db| {
            let row = db.row("SELECT digest, path, node, applied_at FROM config_file", &[])?;
            row.map(|r| {
                Ok(AppliedFile { digest: r.text(0)?, path: r.text(1)?, node: r.text(2)?, applied_at_ms: r.int(3)? })
            })
            .transpose()
        })
    }

    /// Record `file` as the applied config file: the first gateway's claim when `replace` is
    /// false (an existing claim stays and is returned), a reload's when true.
    pub fn claim_file(&self, file: &AppliedFile, replace: bool) -> Result<AppliedFile, StoreError> {
        let conflict = if replace {
            "DO UPDATE SET digest = excluded.digest, path = excluded.path, node = excluded.node, applied_at = excluded.applied_at"
        } else {
            "DO NOTHING"
        };
        self.read(|db| {
            db.exec(
                &format!(
                    "INSERT INTO config_file (id, digest, path, node, applied_at) VALUES (1, ?, ?, ?, ?)
                     ON CONFLICT (id) {conflict}"
                ),
                &[
                    file.digest.as_str().into(),
                    file.path.as_str().into(),
                    file.node.as_str().into(),
                    file.applied_at_ms.into(),
                ],
            )
        })?;
        self.applied_file()?.ok_or_else(|| StoreError::Corrupt("config_file has no row".into()))
    }

    fn migrate(&self) -> Result<(), StoreError> {
        self.with_client(|client| {
            wait(client.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)"))
                .or_else(|e| match e {
                    // Two gateways creating it at once: the other one did.
                    StoreError::Unique(_) => Ok(()),
                    e => Err(e),
                })?;
            loop {
                let tx = wait(client.transaction())?;
                let sql = PgSql::Tx(&tx);
                sql.rows("SELECT pg_advisory_xact_lock(?)", &[MIGRATION_LOCK.into()])?;
                let version = match sql.row("SELECT version FROM schema_version", &[])? {
                    Some(r) => r.int(0)?,
                    None => {
                        sql.exec("INSERT INTO schema_version (version) VALUES (0)", &[])?;
                        0
                    }
                };
                let known = MIGRATIONS.len() as i64;
                if version > known {
                    return Err(StoreError::Corrupt(format!(
                        "the database has schema version {version}, this ccmesh knows {known}; run the newer ccmesh that migrated it"
                    )));
                }
                let Some(migration) = MIGRATIONS.get(version as usize) else { return Ok(()) };
                wait(tx.batch_execute(migration))?;
                sql.exec("UPDATE schema_version SET version = ?", &[(version + 1).into()])?;
                wait(tx.commit())?;
            }
        })
    }
}

pub(crate) fn config_version(db: &dyn Sql) -> Result<i64, StoreError> {
    db.row("SELECT version FROM config_version", &[])?
        .ok_or_else(|| StoreError::Corrupt("config_version has no row".into()))?
        .int(0)
}

// ------------------------------------------------------------------------------ statements

/// A connection or a transaction, as `Sql`.
pub(crate) enum PgSql<'a> {
    Client(&'a Client),
    Tx(&'a tokio_postgres::Transaction<'a>),
}

fn params(args: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    args.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

impl Sql for PgSql<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn exec(&self, sql: &str, args: &[Value]) -> Result<u64, StoreError> {
        let sql = numbered(sql);
        let params = params(args);
        match self {
            PgSql::Client(c) => wait(c.execute(&sql, &params)),
            PgSql::Tx(t) => wait(t.execute(&sql, &params)),
        }
    }

    fn rows(&self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError> {
        let sql = numbered(sql);
        let params = params(args);
        let rows = match self {
            PgSql::Client(c) => wait(c.query(&sql, &params))?,
            PgSql::Tx(t) => wait(t.query(&sql, &params))?,
        };
        rows.iter().map(row).collect()
    }
}

/// A result row in the shared value types.
pub(crate) fn row(r: &tokio_postgres::Row) -> Result<Row, StoreError> {
    let mut values = Vec::with_capacity(r.len());
    for (i, column) in r.columns().iter().enumerate() {
        let get_err = |e: tokio_postgres::Error| StoreError::Corrupt(format!("column {}: {e}", column.name()));
        let ty = column.type_();
        let v = match *ty {
            Type::INT8 => r.try_get::<_, Option<i64>>(i).map_err(get_err)?.map(Value::Int),
            Type::INT4 => r.try_get::<_, Option<i32>>(i).map_err(get_err)?.map(|v| Value::Int(v.into())),
            Type::INT2 => r.try_get::<_, Option<i16>>(i).map_err(get_err)?.map(|v| Value::Int(v.into())),
            Type::BOOL => r.try_get::<_, Option<bool>>(i).map_err(get_err)?.map(Value::from),
            Type::FLOAT8 => r.try_get::<_, Option<f64>>(i).map_err(get_err)?.map(Value::Real),
            Type::FLOAT4 => r.try_get::<_, Option<f32>>(i).map_err(get_err)?.map(|v| Value::Real(v.into())),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                r.try_get::<_, Option<String>>(i).map_err(get_err)?.map(Value::Text)
            }
            // `pg_notify` and friends return `void`: nothing to read.
            Type::VOID => None,
            _ => return Err(StoreError::Corrupt(format!("column {} has the unexpected type {ty}", column.name()))),
        };
        values.push(v.unwrap_or(Value::Null));
    }
    Ok(Row(values))
}

/// Values convert to whatever the statement's parameter is (PostgreSQL infers each one's type
/// from where it stands), so one `Value` serves a BIGINT, a BOOLEAN or a TEXT column alike.
impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(v) => match *ty {
                Type::INT8 => v.to_sql(ty, out),
                Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
                Type::BOOL => (*v != 0).to_sql(ty, out),
                Type::FLOAT8 => (*v as f64).to_sql(ty, out),
                Type::FLOAT4 => (*v as f32).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => v.to_string().to_sql(ty, out),
                _ => Err(format!("an integer cannot be a {ty}").into()),
            },
            Value::Real(v) => match *ty {
                Type::FLOAT8 => v.to_sql(ty, out),
                Type::FLOAT4 => (*v as f32).to_sql(ty, out),
                _ => Err(format!("a number cannot be a {ty}").into()),
            },
            Value::Text(v) => v.as_str().to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// SQLSTATE classes that mean "the server cannot serve us now", not "this statement is wrong":
/// 08 connection exception, 57 operator intervention (a shutdown), 53 insufficient resources.
fn unavailable_state(code: &str) -> bool {
    code.starts_with("08") || code.starts_with("57") || code.starts_with("53")
}

pub(crate) fn pg_error(e: tokio_postgres::Error) -> StoreError {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        if code == "23505" {
            return StoreError::Unique(db.constraint().unwrap_or(db.message()).to_string());
        }
        let text = match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_string(),
        };
        return if unavailable_state(code) { StoreError::Unavailable(text) } else { StoreError::Postgres(text) };
    }
    // No server answer: the connection is closed, refused, timed out or cut — unless the error
    // is ours (a value that would not convert), which says so.
    let text = crate::cli::error_chain(&e);
    if text.starts_with("error serializing") || text.starts_with("error deserializing") {
        StoreError::Postgres(text)
    } else {
        StoreError::Unavailable(text)
    }
}

/// Wait for a client future within `OP_TIMEOUT`.
pub(crate) fn wait<T>(f: impl Future<Output = Result<T, tokio_postgres::Error>>) -> Result<T, StoreError> {
    match block_on(f, OP_TIMEOUT) {
        Some(result) => result.map_err(pg_error),
        None => Err(StoreError::Unavailable(format!("no answer within {}s", OP_TIMEOUT.as_secs()))),
    }
}

// ------------------------------------------------------------------------- the runtime

/// The runtime that drives this store's sockets, on a thread of its own; it stops when the
/// store is dropped.
struct Runtime {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Runtime {
    fn start() -> Result<Runtime, StoreError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable(format!("cannot start the database runtime: {e}")))?;
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("ccmesh-pg".into())
            .spawn(move || {
                rt.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(|e| StoreError::Unavailable(format!("cannot start the database thread: {e}")))?;
        Ok(Runtime { handle, stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Poll `f` on this thread until it is ready, parking in between; `None` past `timeout` (the
/// future is then dropped, which abandons what it was doing).
pub(crate) fn block_on<F: Future>(f: F, timeout: Duration) -> Option<F::Output> {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let deadline = Instant::now() + timeout;
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        std::thread::park_timeout(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_on_waits_for_another_thread_and_gives_up_at_the_deadline() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            let _ = tx.send(7);
        });
        assert_eq!(block_on(rx, Duration::from_secs(10)).map(Result::ok), Some(Some(7)));
        sender.join().unwrap();
        let never = std::future::pending::<()>();
        let start = Instant::now();
        assert_eq!(block_on(never, Duration::from_millis(30)), None);
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn connection_troubles_are_unavailable_and_statement_errors_are_not() {
        for code in ["08006", "57P01", "53300"] {
            assert!(unavailable_state(code), "{code}");
        }
        for code in ["23505", "42P01", "22P02"] {
            assert!(!unavailable_state(code), "{code}");
        }
    }

    #[test]
    fn migrations_are_numbered_like_sqlites() {
        // Version n means the same tables on both; SQLite keeps the number of the cluster's
        // tables it has no use for.
        assert_eq!(MIGRATIONS.len(), super::super::MIGRATIONS.len());
        assert!(MIGRATIONS[4].contains("CREATE SEQUENCE gateway_nodes"));
        assert!(MIGRATIONS[5].contains("WHERE status_class <> 2"));
        assert!(super::super::MIGRATIONS[5].contains("WHERE status_class <> 2"));
        assert!(MIGRATIONS[0].contains("CREATE TABLE endpoints"));
        assert!(MIGRATIONS[1].contains("CREATE TABLE requests"));
        assert!(MIGRATIONS[2].contains("CREATE TABLE prices"));
        assert!(MIGRATIONS[3].contains("CREATE TABLE client_keys"));
    }
}
