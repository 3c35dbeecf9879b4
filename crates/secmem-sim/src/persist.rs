//! Persist barriers for traces that have none.
//!
//! A persistency study needs the points at which a program makes its stores durable: a
//! cache-line write-back (`clwb`, a Flush record) of each line stored, then a persist
//! barrier (`sfence`, a Fence record). Traces of persistent-memory programs carry them; a
//! trace of an ordinary program (a lackey capture) has none. `[persist]` inserts them by a
//! rule, at run time, before the records reach the engine:
//!
//! * `trace` (the default): the trace's own flushes and fences, nothing added;
//! * `every-store`: after every store, a flush of the lines it wrote and a fence (strict
//!   persistency: each store is durable before the next one);
//! * `every-n-stores`: after every `persist.every_n_stores` stores, a flush of each distinct
//!   line written since the last barrier, in first-written order, then one fence (epoch
//!   persistency with epochs of N stores).
//!
//! Inserted records are records like any other: `run.max_requests`, `run.warmup_requests`
//! and the report's record counts include them, as they include the ones
//! `workload.persist_writes` adds to the synthetic workload. Stores left after the last
//! barrier get none (a program's tail is not made durable by the rule). Transaction markers
//! would be the natural third rule; no trace format secmem reads has them yet.

use secmem_core::error::{ensure, ConfigError};
use secmem_core::{config_enum, config_section};
use secmem_trace::{Op, Record, TraceError};
use std::collections::VecDeque;

config_enum! {
    /// Where persist barriers come from.
    pub enum PersistRule {
        Trace => "trace": "the trace's own flushes and fences, nothing added",
        EveryStore => "every-store": "after every store, a flush of its lines and a fence (strict persistency)",
        EveryNStores => "every-n-stores": "after every persist.every_n_stores stores, a flush of each distinct line written since the last barrier and one fence (epochs of N stores)"
    }
}

config_section! {
    /// Persist barriers inserted into traces that have none (see `persist.rs`).
    pub struct PersistConfig {
        barriers: PersistRule = PersistRule::Trace => "trace (as the trace has them), every-store or every-n-stores";
        every_n_stores: u64 = 64 => "Stores per barrier under every-n-stores (an epoch's length), at least 1";
    }
}

impl PersistConfig {
    /// Field checks; `prefix` is the section's path.
    pub fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        ensure(self.every_n_stores >= 1, &format!("{prefix}.every_n_stores"), || "must be at least 1 store per barrier".into())
    }
}

/// `records` with persist barriers inserted by `cfg`'s rule.
pub struct Barriers<I> {
    inner: I,
    rule: PersistRule,
    every: u64,
    stores: u64,
    /// Lines stored since the last barrier, in first-written order (every-n-stores).
    lines: Vec<u64>,
    pending: VecDeque<Record>,
}

impl<I: Iterator<Item = Result<Record, TraceError>>> Barriers<I> {
    pub fn new(inner: I, cfg: &PersistConfig) -> Barriers<I> {
        Barriers { inner, rule: cfg.barriers, every: cfg.every_n_stores, stores: 0, lines: Vec::new(), pending: VecDeque::new() }
    }

    /// Queues the barrier after a store of `rec` (its lines flushed per the rule).
    fn after_store(&mut self, rec: &Record) {
        let first = rec.addr >> 6;
        let last = (rec.addr + u64::from(rec.size_bytes).max(1) - 1) >> 6;
        match self.rule {
            PersistRule::Trace => {}
            PersistRule::EveryStore => {
                for line in first..=last {
                    self.pending.push_back(Record::flush(line << 6, 0));
                }
                self.pending.push_back(Record::fence(0));
            }
            PersistRule::EveryNStores => {
                for line in first..=last {
                    if !self.lines.contains(&line) {
                        self.lines.push(line);
                    }
                }
                self.stores += 1;
                if self.stores == self.every {
                    self.stores = 0;
                    for line in self.lines.drain(..) {
                        self.pending.push_back(Record::flush(line << 6, 0));
                    }
                    self.pending.push_back(Record::fence(0));
                }
            }
        }
    }
}

impl<I: Iterator<Item = Result<Record, TraceError>>> Iterator for Barriers<I> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(r) = self.pending.pop_front() {
            return Some(Ok(r));
        }
        let rec = self.inner.next()?;
        if let Ok(r) = &rec {
            if r.op == Op::Write && r.size_bytes > 0 {
                self.after_store(r);
            }
        }
        Some(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rule: PersistRule, every: u64, recs: Vec<Record>) -> Vec<(Op, u64)> {
        let cfg = PersistConfig { barriers: rule, every_n_stores: every };
        Barriers::new(recs.into_iter().map(Ok), &cfg).map(|r| r.unwrap()).map(|r| (r.op, r.addr)).collect()
    }

    fn trace() -> Vec<Record> {
        vec![Record::write(0x1000, 3), Record::read(0x40, 1), Record { size_bytes: 16, ..Record::write(0x2038, 0) }, Record { size_bytes: 8, ..Record::write(0x1008, 2) }]
    }

    #[test]
    fn every_store_flushes_the_lines_it_wrote_then_fences() {
        use Op::*;
        let got = run(PersistRule::EveryStore, 1, trace());
        let want = vec![
            (Write, 0x1000), (Flush, 0x1000), (Fence, 0),
            (Read, 0x40),
            (Write, 0x2038), (Flush, 0x2000), (Flush, 0x2040), (Fence, 0),
            (Write, 0x1008), (Flush, 0x1000), (Fence, 0),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn every_n_stores_flushes_each_distinct_line_of_the_epoch_once_then_fences() {
        use Op::*;
        let got = run(PersistRule::EveryNStores, 3, trace());
        // Stores 1-3 end the first epoch (lines 0x1000, 0x2000, 0x2040; 0x1008 is 0x1000's
        // line again); nothing follows the last barrier.
        let want = vec![
            (Write, 0x1000), (Read, 0x40), (Write, 0x2038),
            (Write, 0x1008), (Flush, 0x1000), (Flush, 0x2000), (Flush, 0x2040), (Fence, 0),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn the_trace_rule_adds_nothing_and_a_zero_epoch_is_refused() {
        assert_eq!(run(PersistRule::Trace, 1, trace()).len(), 4);
        let cfg = PersistConfig { barriers: PersistRule::EveryNStores, every_n_stores: 0 };
        assert_eq!(cfg.validate("persist").unwrap_err().field, "persist.every_n_stores");
    }
}
