//! The request-record writer: a bounded channel into one writer thread (its own connection to
//! SQLite's file, or to PostgreSQL: `store::records::RecordDb`) that inserts in batches inside
//! transactions. A full channel never blocks a request: the record is dropped
//! and counted (shown in `GET /api/records/status` and the metrics).
//!
//! Why this shape:
//! - One OS thread with its own connection: SQLite allows one writer at a time anyway, and a
//!   dedicated thread keeps blocking disk I/O off the async runtime. Readers (the admin API)
//!   use their own connections; under WAL they never wait for it.
//! - Batches: the thread takes the first record, then keeps collecting until the batch is full
//!   or `linger` (100 ms) has passed since that first record, and writes them in one
//!   transaction. Under load a commit carries hundreds of records; when idle a record is on
//!   disk within ~100 ms.
//! - Wake-ups: while a batch is open the thread sleeps until the batch is due, not in short
//!   naps; records do not wake it, except the one that leaves a full batch's worth waiting, and
//!   a flush, prune or shutdown request does. Every wake-up of this thread takes a CPU the
//!   requests' own threads may need at that moment (BENCHMARKS.md measures what naps of 20 ms
//!   cost requests 20 ms apart).
//! - Durability: WAL with `synchronous=NORMAL` — a committed batch survives a crash or
//!   `kill -9` of the process (it is in the WAL, which the next open replays), and a batch cut
//!   short by the crash is rolled back as a whole. So a crash loses at most the batch being
//!   collected or written, and never corrupts the database. (A power cut may also lose the last
//!   commits before the WAL is synced; that trade buys cheap commits.)
//! - Retention: every `prune_every` (and right at start) the thread deletes records older than
//!   the `retention_days` setting, read from the settings table at that moment (the database is
//!   the source of truth, so no wiring to the gateway is needed), in chunks of `prune_chunk`
//!   rows with the channel served between chunks, so a large backlog never stalls writing.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde::Serialize;

use super::record::RequestRecord;
use crate::clock::Clock;
use crate::config::Settings;
use crate::store::records::RecordDb;
use crate::store::{Store, StoreError};

/// The request path's handle: cheap to clone, `submit` never blocks.
#[derive(Clone)]
pub struct RecordSink {
    tx: Option<SyncSender<Msg>>,
    counters: Arc<Counters>,
    /// Rung when records enough for a full batch are waiting and after a flush request is
    /// queued.
    writer: Option<Doorbell>,
    /// Waiting records that wake the writer: a full batch (or the whole channel, if smaller).
    wake_at: u64,
}

/// Wakes the writer from its sleep on an open batch. Ring it after queueing what it is for.
/// The flag keeps a ring that comes while the thread is not in that sleep (or is parked inside
/// the channel, whose blocking receive uses the same per-thread wake-up token) for its next one.
#[derive(Clone)]
struct Doorbell {
    rung: Arc<AtomicBool>,
    thread: Thread,
}

impl Doorbell {
    fn ring(&self) {
        self.rung.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

enum Msg {
    /// Boxed so a channel slot stays one pointer wide (the channel's buffer is preallocated).
    Record(Box<RequestRecord>),
    /// Write what is pending, then answer.
    Flush(SyncSender<()>),
    /// Run a complete retention pass now, then answer with the number of records deleted.
    Prune(SyncSender<u64>),
    Shutdown,
}

#[derive(Default)]
struct Counters {
    /// Why storage is failing now (the last batch failed, or the data dir is not writable);
    /// cleared by the next batch that is written.
    problem: std::sync::Mutex<Option<String>>,
    capacity: AtomicU64,
    /// Records announced (`RecordSink::promise`) and not yet submitted.
    promised: AtomicU64,
    queued: AtomicU64,
    written: AtomicU64,
    dropped: AtomicU64,
    batches: AtomicU64,
    write_errors: AtomicU64,
    pruned: AtomicU64,
}

/// A record announced to the sink ([`RecordSink::promise`]), to be handed back with the record.
#[must_use = "a promise is kept by `RecordSink::submit_promised`, or a flush waits for it in vain"]
pub struct Promise(());

/// The writer's counters since start (`GET /api/records/status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WriterStats {
    /// Whether a writer is running (false: records are not kept).
    pub enabled: bool,
    /// Size of the channel.
    pub capacity: u64,
    /// Records waiting in the channel.
    pub queued: u64,
    /// Records written to the database.
    pub written: u64,
    /// Records lost: the channel was full (or there is no writer), or their batch failed to write.
    pub dropped: u64,
    /// Transactions committed.
    pub batches: u64,
    /// Batches that failed to write (their records count as dropped).
    pub write_errors: u64,
    /// Records deleted by retention.
    pub pruned: u64,
}

impl RecordSink {
    /// A sink that keeps nothing (records are counted as dropped).
    pub fn disabled() -> Self {
        Self { tx: None, counters: Arc::new(Counters::default()), writer: None, wake_at: 0 }
    }

    /// Hand a record to the writer; if the channel is full (or there is no writer) the record is
    /// dropped and counted — the request never waits for the disk.
    pub fn submit(&self, record: impl Into<Box<RequestRecord>>) {
        let Some(tx) = &self.tx else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        // Counted before sending, so the writer's decrement can never run first and wrap.
        let waiting = self.counters.queued.fetch_add(1, Ordering::Relaxed) + 1;
        if tx.try_send(Msg::Record(record.into())).is_err() {
            self.counters.queued.fetch_sub(1, Ordering::Relaxed);
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Each count is returned to one sender only, so one of them wakes the writer each
        // time the waiting records reach a full batch.
        if waiting == self.wake_at
            && let Some(writer) = &self.writer
        {
            writer.ring();
        }
    }

    /// Announce a record that `submit_promised` brings shortly (`Events::request_answered` hands
    /// a request's record over just after its answer is written): until then a flush waits for
    /// it, so a flush begun after a client read its answer still finds that answer's record.
    pub fn promise(&self) -> Promise {
        self.counters.promised.fetch_add(1, Ordering::Relaxed);
        Promise(())
    }

    /// Records promised and not yet submitted.
    pub fn promised(&self) -> u64 {
        self.counters.promised.load(Ordering::Acquire)
    }

    /// Submit a record announced with `promise`.
    pub fn submit_promised(&self, promise: Promise, record: Box<RequestRecord>) {
        let Promise(()) = promise;
        self.submit(record);
        // Release: a flush that sees the count fall sees this record queued ahead of its message.
        self.counters.promised.fetch_sub(1, Ordering::Release);
    }

    /// Why records cannot be stored right now, if they cannot (`/health`, `/api/status`).
    pub fn problem(&self) -> Option<String> {
        self.counters.problem.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Report a storage problem found outside the writer (a read-only data dir at start).
    pub fn report_problem(&self, problem: String) {
        *self.counters.problem.lock().unwrap_or_else(|p| p.into_inner()) = Some(problem);
    }

    /// Records dropped since start because the writer could not keep up (or could not write).
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> WriterStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WriterStats {
            enabled: self.tx.is_some(),
            capacity: get(&c.capacity),
            queued: get(&c.queued),
            written: get(&c.written),
            dropped: get(&c.dropped),
            batches: get(&c.batches),
            write_errors: get(&c.write_errors),
            pruned: get(&c.pruned),
        }
    }

    /// Wait, at most `timeout`, until no promised record is still to come. A record finished
    /// after its answer was written (`Trail::finish_answered`) is counted in the metrics when it
    /// comes, microseconds after the answer: a scrape waits for it, as a flush does.
    pub async fn promises_kept(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.promised() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Wait until every record submitted or promised before this call is in the database; false
    /// on timeout or when there is no writer. Blocks the calling thread: for tests and tools, never the
    /// request path.
    pub fn flush(&self, timeout: Duration) -> bool {
        let Some(tx) = &self.tx else { return false };
        let deadline = Instant::now() + timeout;
        // A promised record is a task hop from its submit (microseconds); only tests and tools
        // flush, so looking again each millisecond is enough.
        while self.promised() > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        // A blocking send: a flush must queue behind the records it waits for, even when full.
        if tx.send(Msg::Flush(ack_tx)).is_err() {
            return false;
        }
        if let Some(writer) = &self.writer {
            writer.ring();
        }
        ack_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok()
    }
}

/// Tuning and test hooks of the writer thread.
pub struct WriterConfig {
    /// Channel size: records beyond it are dropped.
    pub capacity: usize,
    /// Most records per transaction.
    pub batch_max: usize,
    /// Longest a record waits for its batch to fill.
    pub linger: Duration,
    /// Retention pass interval; `None` disables background pruning (tests prune explicitly).
    pub prune_every: Option<Duration>,
    /// Records deleted per pruning transaction.
    pub prune_chunk: usize,
    /// Overrides the `retention_days` setting (tests).
    pub retention: Option<Duration>,
    /// The wall clock that decides what is old (a `ManualClock` in tests).
    pub clock: Arc<dyn Clock>,
    /// Test hook: the thread receives nothing until this yields (or its sender is dropped),
    /// standing in for a writer stuck on a slow disk.
    pub gate: Option<Receiver<()>>,
    /// How long after its last write the thread counts as idle and gives memory back: SQLite's
    /// page cache (`PRAGMA shrink_memory`), the batch buffer, and what the allocator holds for
    /// the thread (`on_idle`).
    pub idle_after: Duration,
    /// Called on the writer thread once it is idle (`idle_memory::release`; a counter in tests).
    pub on_idle: fn(),
}

impl WriterConfig {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            capacity: 10_000,
            batch_max: 1_000,
            linger: Duration::from_millis(100),
            prune_every: Some(Duration::from_secs(300)),
            prune_chunk: 2_000,
            retention: None,
            clock,
            gate: None,
            idle_after: Duration::from_secs(1),
            on_idle: crate::idle_memory::release,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("cannot start the record writer thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Owns the writer thread: `shutdown` writes what is queued and joins it. Dropping the handle
/// does the same.
pub struct WriterHandle {
    tx: SyncSender<Msg>,
    thread: Option<JoinHandle<()>>,
    doorbell: Doorbell,
}

impl WriterHandle {
    /// Write everything submitted so far, stop the thread and wait for it. Records submitted
    /// afterwards are counted as dropped.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
            // Queued behind every record already submitted, which are therefore written first.
            let _ = self.tx.send(Msg::Shutdown);
            self.doorbell.ring();
            if thread.join().is_err() {
                tracing::error!(event = "record_writer_panicked", "the record writer thread panicked");
            }
        }
    }

    /// Run a complete retention pass now; returns the number of records deleted (`None` if the
    /// writer has stopped).
    pub fn prune_now(&self) -> Option<u64> {
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        self.tx.send(Msg::Prune(ack_tx)).ok()?;
        self.doorbell.ring();
        ack_rx.recv().ok()
    }
}

impl Drop for WriterHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Open the SQLite database at `db_path` (applying migrations if needed) and start the writer
/// thread.
pub fn start(db_path: &Path, config: WriterConfig) -> Result<(RecordSink, WriterHandle), WriterError> {
    // Migrations run through the store so the writer never sees a database without its tables.
    let store = Store::open(db_path)?;
    start_on(&store, config)
}

/// Start the writer thread on a connection of its own to `store`'s database (SQLite's file,
/// or PostgreSQL).
pub fn start_on(store: &Store, config: WriterConfig) -> Result<(RecordSink, WriterHandle), WriterError> {
    let conn = store.record_writer()?;
    let capacity = config.capacity.max(1);
    let (tx, rx) = mpsc::sync_channel::<Msg>(capacity);
    let counters = Arc::new(Counters::default());
    counters.capacity.store(capacity as u64, Ordering::Relaxed);
    let batch_max = config.batch_max.max(1);
    let rung = Arc::new(AtomicBool::new(false));
    let worker = Worker {
        conn,
        rung: rung.clone(),
        counters: counters.clone(),
        batch_max,
        linger: config.linger,
        prune_every: config.prune_every,
        prune_chunk: config.prune_chunk.max(1),
        retention: config.retention,
        clock: config.clock,
        idle_after: config.idle_after,
        on_idle: config.on_idle,
        idle_at: None,
    };
    let gate = config.gate;
    let thread = std::thread::Builder::new().name("ccmesh-records".into()).spawn(move || {
        if let Some(gate) = gate {
            let _ = gate.recv();
        }
        worker.run(rx);
    })?;
    let doorbell = Doorbell { rung, thread: thread.thread().clone() };
    let wake_at = batch_max.min(capacity) as u64;
    let sink = RecordSink { tx: Some(tx.clone()), counters, writer: Some(doorbell.clone()), wake_at };
    Ok((sink, WriterHandle { tx, thread: Some(thread), doorbell }))
}

struct Worker {
    conn: Box<dyn RecordDb>,
    /// The flag of the `Doorbell` that wakes this thread.
    rung: Arc<AtomicBool>,
    counters: Arc<Counters>,
    batch_max: usize,
    linger: Duration,
    prune_every: Option<Duration>,
    prune_chunk: usize,
    retention: Option<Duration>,
    clock: Arc<dyn Clock>,
    idle_after: Duration,
    on_idle: fn(),
    /// When the thread, having written, counts as idle (see `WriterConfig::idle_after`).
    idle_at: Option<Instant>,
}

/// A retention pass in progress: its cutoff is fixed when it starts.
struct PrunePass {
    cutoff_ms: i64,
    deleted: u64,
}

/// How long the writer may sleep: until its open batch is due, the next retention pass, or the
/// moment it counts as idle. That last only while no batch is open, since memory is given back
/// only then: passed while a batch is open, it would make every sleep zero, a busy loop until
/// the batch is due.
fn sleep_for(
    now: Instant,
    batch_deadline: Option<Instant>,
    next_prune: Option<Instant>,
    idle_at: Option<Instant>,
) -> Duration {
    let idle_at = idle_at.filter(|_| batch_deadline.is_none());
    [batch_deadline, next_prune, idle_at]
        .into_iter()
        .flatten()
        .min()
        .map_or(Duration::from_secs(3600), |d| d.saturating_duration_since(now))
}

impl Worker {
    /// Handle one message; `false` means shut down.
    fn take(&mut self, msg: Msg, batch: &mut Vec<RequestRecord>, batch_deadline: &mut Option<Instant>) -> bool {
        match msg {
            Msg::Record(r) => {
                self.counters.queued.fetch_sub(1, Ordering::Relaxed);
                batch.push(*r);
                // From this record's arrival.
                batch_deadline.get_or_insert_with(|| Instant::now() + self.linger);
            }
            Msg::Flush(ack) => {
                self.write(batch);
                *batch_deadline = None;
                let _ = ack.send(());
            }
            Msg::Prune(ack) => {
                self.write(batch);
                *batch_deadline = None;
                let mut full = self.begin_pass();
                while self.prune_step(&mut full) {}
                let _ = ack.send(full.deleted);
            }
            Msg::Shutdown => return false,
        }
        true
    }

    fn run(mut self, rx: Receiver<Msg>) {
        let mut batch: Vec<RequestRecord> = Vec::with_capacity(self.batch_max);
        let mut batch_deadline: Option<Instant> = None;
        // The first pass runs at start: a gateway restarted after a long pause prunes promptly.
        let mut pass: Option<PrunePass> = self.prune_every.map(|_| self.begin_pass());
        let mut next_prune: Option<Instant> = None;
        'run: loop {
            // Housekeeping first, then wait for the next message or deadline.
            let now = Instant::now();
            if batch.len() >= self.batch_max || batch_deadline.is_some_and(|d| now >= d) {
                self.write(&mut batch);
                batch_deadline = None;
            }
            if batch.is_empty() && pass.is_none() && self.idle_at.is_some_and(|d| now >= d) {
                self.idle_at = None;
                batch.shrink_to(0);
                self.release_idle_memory();
            }
            if pass.is_none() && next_prune.is_some_and(|d| now >= d) {
                pass = Some(self.begin_pass());
            }
            if let Some(p) = &mut pass
                && !self.prune_step(p)
            {
                if p.deleted > 0 {
                    tracing::info!(event = "records_pruned", deleted = p.deleted, "old request records deleted");
                }
                pass = None;
                next_prune = self.prune_every.map(|every| Instant::now() + every);
            }
            let wait = if pass.is_some() {
                Duration::ZERO
            } else {
                sleep_for(Instant::now(), batch_deadline, next_prune, self.idle_at)
            };
            // While a batch is open, let records pile up without a wake-up per record (each
            // wake-up of a parked receiver costs the sender a futex call and both a context
            // switch), then take everything that arrived in one go. Asleep until the batch is
            // due, unless woken by a full batch waiting or a request (`RecordSink::submit`,
            // `flush`, `WriterHandle`); a wake-up for no reason just drains and sleeps again.
            if batch_deadline.is_some() && pass.is_none() {
                if !self.rung.load(Ordering::Acquire) {
                    std::thread::park_timeout(wait);
                }
                // Whatever it was rung for was queued before the ring: the drain below takes it.
                self.rung.store(false, Ordering::Relaxed);
                loop {
                    match rx.try_recv() {
                        Ok(msg) => {
                            if !self.take(msg, &mut batch, &mut batch_deadline) {
                                break 'run;
                            }
                            if batch.len() >= self.batch_max {
                                self.write(&mut batch);
                                batch_deadline = None;
                            }
                        }
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => break 'run,
                    }
                }
                continue;
            }
            match rx.recv_timeout(wait) {
                Ok(msg) => {
                    if !self.take(msg, &mut batch, &mut batch_deadline) {
                        break;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
        // Whatever is still queued was submitted before the shutdown: keep it.
        loop {
            match rx.try_recv() {
                Ok(Msg::Record(r)) => {
                    self.counters.queued.fetch_sub(1, Ordering::Relaxed);
                    batch.push(*r);
                    if batch.len() >= self.batch_max {
                        self.write(&mut batch);
                    }
                }
                Ok(Msg::Flush(ack)) => {
                    self.write(&mut batch);
                    let _ = ack.send(());
                }
                Ok(Msg::Prune(ack)) => {
                    let _ = ack.send(0);
                }
                Ok(Msg::Shutdown) => {}
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        self.write(&mut batch);
    }

    /// Write the batch in one transaction (retrying once: a lock held past the busy timeout is
    /// the likely cause), then clear it. A batch that cannot be written is counted as dropped.
    fn write(&mut self, batch: &mut Vec<RequestRecord>) {
        if batch.is_empty() {
            return;
        }
        // The retry looks for each record among the stored ones: the first try is not assumed to
        // have left nothing behind.
        let result = self.conn.insert_fresh_batch(batch).or_else(|e| {
            tracing::warn!(event = "record_write_retry", error = %e, records = batch.len(), "retrying a record batch");
            self.conn.insert_batch(batch)
        });
        match result {
            Ok(_) => {
                // Duplicates (same id) were already stored: they count as written, not lost.
                self.counters.written.fetch_add(batch.len() as u64, Ordering::Relaxed);
                self.counters.batches.fetch_add(1, Ordering::Relaxed);
                self.idle_at = Some(Instant::now() + self.idle_after);
                let mut problem = self.counters.problem.lock().unwrap_or_else(|p| p.into_inner());
                if problem.is_some() {
                    tracing::info!(event = "storage_recovered", "request records are being written again");
                    *problem = None;
                }
            }
            Err(e) => {
                tracing::error!(event = "record_write_failed", error = %e, records = batch.len(), "request records lost");
                self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                self.counters.dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
                *self.counters.problem.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(format!("request records cannot be written ({e})"));
            }
        }
        batch.clear();
    }

    /// SQLite's page cache (2 MB by default, full after a few thousand records) is rebuilt from
    /// the OS's file cache on the next write; the allocator's share goes back with `on_idle`.
    fn release_idle_memory(&mut self) {
        self.conn.release_memory();
        (self.on_idle)();
    }

    fn begin_pass(&mut self) -> PrunePass {
        let retention = self.retention.unwrap_or_else(|| self.retention_setting());
        let now_ms = self.clock.wall().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        PrunePass { cutoff_ms: now_ms.saturating_sub(retention.as_millis() as i64), deleted: 0 }
    }

    /// The `retention_days` setting as stored now (the default when unset or unreadable).
    fn retention_setting(&mut self) -> Duration {
        let parsed = match self.conn.settings() {
            Ok(Some(doc)) => Settings::default().patched(&doc).map_err(|e| e.0),
            Ok(None) => Ok(Settings::default()),
            Err(e) => Err(e.to_string()),
        };
        match parsed {
            Ok(s) => s.retention,
            Err(e) => {
                tracing::warn!(event = "retention_unreadable", error = %e, "cannot read retention_days; using the default");
                Settings::default().retention
            }
        }
    }

    /// Delete one chunk; true while there may be more.
    fn prune_step(&mut self, pass: &mut PrunePass) -> bool {
        match self.conn.prune_chunk(pass.cutoff_ms, self.prune_chunk) {
            Ok(n) => {
                pass.deleted += n as u64;
                self.counters.pruned.fetch_add(n as u64, Ordering::Relaxed);
                n == self.prune_chunk
            }
            Err(e) => {
                tracing::warn!(event = "record_prune_failed", error = %e, "pruning old request records failed; will retry");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::records::sample_record;
    use rusqlite::Connection;

    fn config(clock: Arc<dyn Clock>) -> WriterConfig {
        WriterConfig { prune_every: None, ..WriterConfig::new(clock) }
    }

    fn system() -> Arc<dyn Clock> {
        Arc::new(crate::clock::SystemClock)
    }

    fn stored(path: &Path) -> u64 {
        let conn = Connection::open(path).unwrap();
        crate::store::records::count(&conn).unwrap()
    }

    static IDLE_RELEASES: AtomicU64 = AtomicU64::new(0);
    fn count_idle_release() {
        IDLE_RELEASES.fetch_add(1, Ordering::SeqCst);
    }

    fn until_idle_releases(n: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while IDLE_RELEASES.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "no idle release #{n}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Once per quiet spell after writing, not before anything was written, not again while it
    /// stays quiet (an idle gateway's writer sleeps).
    #[test]
    fn the_writer_gives_memory_back_once_it_falls_idle_after_writing() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ccmesh.db");
        let quiet = Duration::from_millis(20);
        let cfg = WriterConfig { idle_after: quiet, on_idle: count_idle_release, ..config(system()) };
        let (sink, handle) = start(&db, cfg).unwrap();
        assert!(sink.flush(Duration::from_secs(5)), "an empty flush writes nothing");
        std::thread::sleep(quiet * 5);
        assert_eq!(IDLE_RELEASES.load(Ordering::SeqCst), 0, "nothing written, nothing to give back");

        sink.submit(sample_record("idle-1", 1_000));
        assert!(sink.flush(Duration::from_secs(5)));
        until_idle_releases(1);
        std::thread::sleep(quiet * 5);
        assert_eq!(IDLE_RELEASES.load(Ordering::SeqCst), 1, "once per quiet spell");

        sink.submit(sample_record("idle-2", 2_000));
        assert!(sink.flush(Duration::from_secs(5)));
        until_idle_releases(2);
        // The cache it gave back is rebuilt on demand: later writes and reads still work.
        sink.submit(sample_record("idle-3", 3_000));
        handle.shutdown();
        assert_eq!(stored(&db), 3);
    }

    #[test]
    fn a_scrape_waits_for_a_promised_record_but_no_longer_than_its_timeout() {
        let sink = RecordSink::disabled();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let promise = sink.promise();
        let keeper = sink.clone();
        let kept = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            keeper.submit_promised(promise, Box::new(sample_record("promised", 1_000)));
        });
        runtime.block_on(sink.promises_kept(Duration::from_secs(30)));
        assert_eq!(sink.promised(), 0, "returned once the record came");
        kept.join().unwrap();
        // A promise never kept: the wait ends at its timeout.
        let _never = sink.promise();
        let waited = std::time::Instant::now();
        runtime.block_on(sink.promises_kept(Duration::from_millis(50)));
        assert!(waited.elapsed() >= Duration::from_millis(50));
        assert_eq!(sink.promised(), 1);
    }

    #[test]
    fn a_flush_waits_for_every_promised_record_whichever_thread_promised_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ccmesh.db");
        let (sink, handle) = start(&db, config(system())).unwrap();
        // Promised on threads of their own, kept on this one, as a task that moved to another
        // thread keeps its promise there.
        let promises: Vec<Promise> = (0..4)
            .map(|_| {
                let promiser = sink.clone();
                std::thread::spawn(move || promiser.promise()).join().unwrap()
            })
            .collect();
        let last = promises.len() - 1;
        for (i, promise) in promises.into_iter().enumerate() {
            assert!(!sink.flush(Duration::from_millis(20)), "a flush passed {} promised records", last + 1 - i);
            sink.submit_promised(promise, Box::new(sample_record(&format!("promised-{i}"), 1_000 + i as u64)));
        }
        assert!(sink.flush(Duration::from_secs(10)));
        assert_eq!(stored(&db), 4, "the flush found every record");
        handle.shutdown();
    }

    #[test]
    fn records_are_written_in_few_batches_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ccmesh.db");
        let (gate_tx, gate) = mpsc::channel();
        // A long linger, so only a full batch (or the flush) commits: the count is exact.
        let linger = Duration::from_secs(3600);
        let (sink, handle) =
            start(&db, WriterConfig { gate: Some(gate), batch_max: 100, linger, ..config(system()) }).unwrap();
        // Queue 250 records while the writer is held, then let it go: it drains them in full
        // batches rather than one transaction per record.
        for i in 0..250 {
            sink.submit(sample_record(&format!("b{i}"), 1_000 + i));
        }
        assert_eq!(sink.stats().queued, 250);
        gate_tx.send(()).unwrap();
        assert!(sink.flush(Duration::from_secs(10)));
        let s = sink.stats();
        assert_eq!((s.written, s.queued, s.dropped), (250, 0, 0));
        assert_eq!(s.batches, 3, "{s:?}");
        assert_eq!(stored(&db), 250);
        handle.shutdown();
        // Reopen: the records are there.
        let (sink, handle) = start(&db, config(system())).unwrap();
        sink.submit(sample_record("after", 5_000));
        handle.shutdown();
        assert_eq!(stored(&db), 251);
        // Submitting after shutdown drops and counts.
        sink.submit(sample_record("late", 6_000));
        assert_eq!(sink.dropped(), 1);
    }

    #[test]
    fn a_full_channel_drops_and_counts_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ccmesh.db");
        let (gate_tx, gate) = mpsc::channel();
        let (sink, handle) = start(&db, WriterConfig { capacity: 1, gate: Some(gate), ..config(system()) }).unwrap();
        // The writer takes nothing until the gate opens: the first record fills the channel and
        // the next ones are dropped at once (this test would hang if submit blocked).
        for i in 0..5 {
            sink.submit(sample_record(&format!("f{i}"), 1_000 + i));
        }
        let s = sink.stats();
        assert_eq!((s.queued, s.dropped, s.capacity), (1, 4, 1));
        assert_eq!(sink.dropped(), 4);
        drop(gate_tx);
        assert!(sink.flush(Duration::from_secs(10)));
        assert_eq!(sink.stats().written, 1);
        handle.shutdown();
        assert_eq!(stored(&db), 1);
    }

    #[test]
    fn shutdown_writes_what_is_queued() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ccmesh.db");
        let (gate_tx, gate) = mpsc::channel();
        // A long linger: only the shutdown can be what writes these.
        let (sink, handle) =
            start(&db, WriterConfig { gate: Some(gate), linger: Duration::from_secs(3600), ..config(system()) })
                .unwrap();
        for i in 0..30 {
            sink.submit(sample_record(&format!("s{i}"), 1_000 + i));
        }
        drop(gate_tx);
        handle.shutdown();
        assert_eq!(stored(&db), 30);
        assert_eq!(sink.stats().written, 30);
    }

    /// While a batch lingers the writer sleeps until it is due; a flush, prune or shutdown
    /// request wakes it at once (with a linger of an hour, waiting for the batch would time out
    /// here).
    #[test]
    fn requests_wake_a_writer_asleep_on_an_open_batch() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ccmesh.db");
        let linger = Duration::from_secs(3600);
        // Nor does it wake to give memory back before the test is over.
        let (sink, handle) = start(&db, WriterConfig { linger, idle_after: linger, ..config(system()) }).unwrap();
        // Recent, so the prune keeps them.
        let now_ms = std::time::SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        for i in 0..3 {
            sink.submit(sample_record(&format!("w{i}"), now_ms + i));
        }
        assert!(sink.flush(Duration::from_secs(5)), "the flush waited for the batch");
        assert_eq!(stored(&db), 3);

        sink.submit(sample_record("w3", now_ms + 3));
        // Asked from another thread, so a prune that waits for the batch fails here, not hangs.
        let handle = Arc::new(handle);
        let (done_tx, done) = mpsc::channel();
        let asking = std::thread::spawn({
            let handle = handle.clone();
            move || done_tx.send(handle.prune_now()).unwrap()
        });
        assert_eq!(done.recv_timeout(Duration::from_secs(5)), Ok(Some(0)), "the prune waited for the batch");
        asking.join().unwrap();
        assert_eq!(stored(&db), 4, "a prune writes the open batch first");

        sink.submit(sample_record("w4", now_ms + 4));
        let handle = Arc::into_inner(handle).unwrap();
        let (done_tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            handle.shutdown();
            done_tx.send(()).unwrap();
        });
        assert_eq!(done.recv_timeout(Duration::from_secs(5)), Ok(()), "the shutdown waited for the batch");
        assert_eq!(stored(&db), 5, "a shutdown writes the open batch first");
    }

    /// Records do not wake a writer asleep on an open batch, except the one that leaves a full
    /// batch waiting: under load the channel is drained as fast as batches fill.
    #[test]
    fn a_full_batch_waiting_wakes_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ccmesh.db");
        let linger = Duration::from_secs(3600);
        let (sink, handle) = start(&db, WriterConfig { linger, batch_max: 10, ..config(system()) }).unwrap();
        for i in 0..25 {
            sink.submit(sample_record(&format!("full{i}"), 1_000 + i));
        }
        // Two full batches; the five records left are no full batch and wait for the linger.
        // `written` and `batches` are read together: the writer counts one, then the other.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut s = sink.stats();
        while s.written < 20 || s.batches < 2 {
            assert!(Instant::now() < deadline, "full batches waited for the linger: {s:?}");
            std::thread::sleep(Duration::from_millis(1));
            s = sink.stats();
        }
        assert_eq!((s.written, s.batches), (20, 2), "{s:?}");
        handle.shutdown();
        assert_eq!(stored(&db), 25);
    }

    /// An open batch is slept on until it is due, also once the moment to give memory back has
    /// passed (it comes only with no batch open); the first of the deadlines wins otherwise.
    #[test]
    fn the_writer_sleeps_until_its_first_deadline() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let (due, prune, idle_passed) = (now + ms(80), now + ms(10), now.checked_sub(ms(5)));
        assert_eq!(sleep_for(now, Some(due), None, idle_passed), ms(80), "no busy loop on an open batch");
        assert_eq!(sleep_for(now, Some(due), Some(prune), idle_passed), ms(10));
        assert_eq!(sleep_for(now, None, Some(prune), Some(now + ms(3))), ms(3));
        assert_eq!(sleep_for(now, None, None, idle_passed), Duration::ZERO, "idle now: give memory back");
        assert_eq!(sleep_for(now, None, None, None), Duration::from_secs(3600));
    }

    #[test]
    fn the_disabled_sink_counts_everything_as_dropped() {
        let sink = RecordSink::disabled();
        sink.submit(sample_record("d", 1));
        assert_eq!(sink.dropped(), 1);
        assert!(!sink.stats().enabled);
        assert!(!sink.flush(Duration::from_millis(1)));
    }

    #[test]
    fn retention_prunes_by_the_injected_clock_and_the_setting() {
        const DAY: u64 = 86_400_000;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ccmesh.db");
        let clock = Arc::new(ManualClock::new());
        let now = clock.wall().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        let (sink, handle) = start(&db, WriterConfig { prune_chunk: 7, ..config(Arc::new(clock.clone())) }).unwrap();
        // 40 records 31 days old, 10 that are 29 days old, 5 fresh.
        for i in 0..40 {
            sink.submit(sample_record(&format!("old{i}"), now - 31 * DAY + i));
        }
        for i in 0..10 {
            sink.submit(sample_record(&format!("mid{i}"), now - 29 * DAY + i));
        }
        for i in 0..5 {
            sink.submit(sample_record(&format!("new{i}"), now + i));
        }
        assert!(sink.flush(Duration::from_secs(10)));
        // Default retention (30 days), in chunks of 7.
        assert_eq!(handle.prune_now(), Some(40));
        assert_eq!(stored(&db), 15);
        // The setting is read at prune time.
        let store = Store::open(&db).unwrap();
        store.save_settings(&serde_json::json!({"retention_days": 28})).unwrap();
        assert_eq!(handle.prune_now(), Some(10));
        // Time passes (injected): two days later the "new" ones are still within 28 days…
        clock.advance(Duration::from_millis(2 * DAY));
        assert_eq!(handle.prune_now(), Some(0));
        // …and with retention 1 day they go.
        store.save_settings(&serde_json::json!({"retention_days": 1})).unwrap();
        assert_eq!(handle.prune_now(), Some(5));
        assert_eq!(sink.stats().pruned, 55);
        handle.shutdown();
        assert_eq!(stored(&db), 0);
    }

    #[test]
    fn background_pruning_runs_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ccmesh.db");
        {
            let (sink, handle) = start(&db, config(system())).unwrap();
            sink.submit(sample_record("ancient", 1_000));
            sink.submit(sample_record("fresh", u64::MAX / 4));
            handle.shutdown();
        }
        assert_eq!(stored(&db), 2);
        let (sink, handle) =
            start(&db, WriterConfig { prune_every: Some(Duration::from_secs(3600)), ..config(system()) }).unwrap();
        // The pass at start runs before the thread receives anything, so once this flush is
        // answered it is done.
        assert!(sink.flush(Duration::from_secs(10)));
        assert_eq!(sink.stats().pruned, 1);
        handle.shutdown();
        assert_eq!(stored(&db), 1);
    }

    #[test]
    fn a_batch_that_cannot_be_written_is_counted_as_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ccmesh.db");
        let (sink, handle) = start(&db, config(system())).unwrap();
        // Break the table under the writer.
        Connection::open(&db).unwrap().execute_batch("DROP TABLE request_records").unwrap();
        sink.submit(sample_record("x", 1));
        sink.submit(sample_record("y", 2));
        assert!(sink.flush(Duration::from_secs(10)));
        let s = sink.stats();
        assert_eq!((s.written, s.dropped, s.write_errors), (0, 2, 1));
        handle.shutdown();
    }
}
