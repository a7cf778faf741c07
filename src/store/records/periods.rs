//! `request_periods`: which periods hold a record with a given endpoint, model or protocol (the
//! migration `VALUE_PERIODS` says why). The writer adds a batch's rows in the batch's
//! transaction and remembers the current period's, so a batch whose values it has seen this period
//! writes none.

use std::collections::HashSet;

use crate::observe::record::RequestRecord;

/// The length of a `request_periods` period.
pub const PERIOD_MS: i64 = 600_000;

/// Values remembered for one period before the memory starts over: a client sending a new model
/// name on every request makes the writer insert (and SQLite ignore) rows, never grow without
/// bound.
const MAX_REMEMBERED: usize = 4096;

/// The period `request_periods` files a record under.
pub fn period_of(started_at_ms: i64) -> i64 {
    started_at_ms.div_euclid(PERIOD_MS)
}

/// One `request_periods` row: dimension, value, period.
pub type PeriodRow<'a> = (&'static str, &'a str, i64);

/// The dimensions, as `request_periods` names them.
const DIMENSIONS: [&str; 3] = ["endpoint", "model", "protocol"];

/// The `request_periods` rows of the newest period this writer has committed: per dimension (in
/// `DIMENSIONS` order), the values.
#[derive(Debug, Default)]
pub struct PeriodsWritten {
    period: i64,
    values: [HashSet<Box<str>>; 3],
}

impl PeriodsWritten {
    /// The rows a batch needs that are not known to be stored, each once.
    pub fn missing<'a>(&self, records: &'a [RequestRecord]) -> Vec<PeriodRow<'a>> {
        let mut out: Vec<PeriodRow<'a>> = Vec::new();
        // Empty (and unallocated) unless a batch brings values not seen this period.
        let mut seen: HashSet<PeriodRow<'a>> = HashSet::new();
        // Consecutive records mostly share their values: one comparison instead of a lookup.
        let mut previous: Option<(i64, [Option<&str>; 3])> = None;
        for r in records {
            let period = period_of(i64::try_from(r.started_at_ms).unwrap_or(i64::MAX));
            let values = [r.endpoint.as_deref(), r.model_requested.as_deref(), Some(r.protocol.as_ref())];
            let before = previous.replace((period, values));
            for (i, value) in values.into_iter().enumerate() {
                let Some(value) = value else { continue };
                if before.is_some_and(|(p, v)| p == period && v[i] == Some(value)) {
                    continue;
                }
                let row = (DIMENSIONS[i], value, period);
                let known = period == self.period && self.values[i].contains(value);
                if !known && seen.insert(row) {
                    out.push(row);
                }
            }
        }
        out
    }

    /// `rows` are committed.
    pub fn note(&mut self, rows: &[PeriodRow<'_>]) {
        for &(dimension, value, period) in rows {
            if period > self.period {
                self.period = period;
                self.forget();
            } else if self.values.iter().map(HashSet::len).sum::<usize>() >= MAX_REMEMBERED {
                self.forget();
            }
            let Some(i) = DIMENSIONS.iter().position(|d| *d == dimension) else { continue };
            if period == self.period {
                self.values[i].insert(value.into());
            }
        }
    }

    /// Rows may have been deleted (retention): know nothing.
    pub fn forget(&mut self) {
        self.values.iter_mut().for_each(HashSet::clear);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::sample_record;

    fn at(period: i64, endpoint: &str, model: Option<&str>) -> RequestRecord {
        let mut r = sample_record("r", (period * PERIOD_MS + 5) as u64);
        r.endpoint = Some(endpoint.to_owned().into());
        r.model_requested = model.map(|m| m.to_owned().into());
        r
    }

    #[test]
    fn a_batch_asks_only_for_rows_not_committed_this_period() {
        let mut w = PeriodsWritten::default();
        let batch = [at(10, "a", Some("m")), at(10, "a", None), at(10, "b", Some("m"))];
        let rows = w.missing(&batch);
        assert_eq!(
            rows,
            [("endpoint", "a", 10), ("model", "m", 10), ("protocol", "claude", 10), ("endpoint", "b", 10)]
        );
        // Not committed yet: asked for again.
        assert_eq!(w.missing(&batch).len(), 4);
        w.note(&rows);
        assert!(w.missing(&batch).is_empty());
        assert_eq!(w.missing(&[at(10, "c", Some("m"))]), [("endpoint", "c", 10)]);
        // A new period starts over; an older one is never taken as known.
        assert_eq!(w.missing(&[at(11, "a", None)]).len(), 2);
        w.note(&w.missing(&[at(11, "a", None)]));
        assert!(w.missing(&[at(11, "a", None)]).is_empty());
        assert_eq!(w.missing(&[at(10, "a", None)]).len(), 2);
        w.note(&[("endpoint", "z", 10)]);
        assert_eq!(w.missing(&[at(11, "a", None)]), [], "an older period's rows leave the current one alone");
        w.forget();
        assert_eq!(w.missing(&[at(11, "a", None)]).len(), 2);
    }

    #[test]
    fn memory_stays_bounded_by_distinct_values() {
        let mut w = PeriodsWritten::default();
        let names: Vec<String> = (0..3 * MAX_REMEMBERED).map(|i| format!("model-{i}")).collect();
        for name in &names {
            w.note(&[("model", name, 1)]);
            assert!(w.values.iter().map(HashSet::len).sum::<usize>() <= MAX_REMEMBERED);
        }
    }
}
