//! The request-record writer: a bounded channel into one SQLite writer thread that inserts in
//! batches inside transactions. A full channel never blocks a request: the record is dropped
//! and counted (shown in health and metrics).
//!
//! SKELETON: the API is fixed; the implementation lands with issue 4's writer work.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::record::RequestRecord;

/// The request path's handle: cheap to clone, `submit` never blocks.
#[derive(Clone)]
pub struct RecordSink {
    tx: Option<std::sync::mpsc::SyncSender<RequestRecord>>,
    dropped: Arc<AtomicU64>,
}

impl RecordSink {
    /// A sink that keeps nothing (records are counted as dropped).
    pub fn disabled() -> Self {
        Self { tx: None, dropped: Arc::new(AtomicU64::new(0)) }
    }

    /// Hand a record to the writer; if the channel is full (or there is no writer) the record is
    /// dropped and counted — the request never waits for the disk.
    pub fn submit(&self, record: RequestRecord) {
        let sent = match &self.tx {
            Some(tx) => tx.try_send(record).is_ok(),
            None => false,
        };
        if !sent {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records dropped since start because the writer could not keep up.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
