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
//! `run.max_requests` counts the trace's own records: the trace is cut to it before barriers
//! are inserted, so that schemes that add different barriers run the same program records.
//! Past that, inserted records are records like any other: `run.warmup_requests` and the
//! report's record counts include them, as they include the ones `workload.persist_writes`
//! adds to the synthetic workload. Stores left after the last
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

config_enum! {
    /// Which stores the protected, persistent memory holds.
    pub enum Coverage {
        Full => "full": "every store: all of memory is protected and persistent",
        NonStack => "non-stack": "every store but the stack's (persist.stack_top_va - persist.stack_bytes .. persist.stack_top_va, virtual): a stack store gets no barrier and no write-through, and its line is stored unencrypted and unauthenticated (BMF Table 3's default)"
    }
}

config_section! {
    /// Persist barriers inserted into traces that have none, and which stores are persisted
    /// (see `persist.rs`).
    pub struct PersistConfig {
        barriers: PersistRule = PersistRule::Trace => "trace (as the trace has them), every-store or every-n-stores";
        every_n_stores: u64 = 64 => "Stores per barrier under every-n-stores (an epoch's length), at least 1";
        coverage: Coverage = Coverage::Full => "full or non-stack: whether stores to the stack are protected and persisted (non-stack needs a virtual trace, counting mode)";
        stack_top_va: u64 = 0x1f_ff00_1000 => "Virtual address (bytes) just above the main thread's stack, for coverage = non-stack. Default: the top of the main stack valgrind 3.x on amd64 Linux gives its client (its address space manager puts it just below 16 MiB under the client space's 128 GiB top), where every trace secmem trace capture writes has its stack";
        stack_bytes: u64 = 16 << 20 => "Bytes below persist.stack_top_va taken as the stack (valgrind reserves at most 16 MiB for the main stack)";
    }
}

impl PersistConfig {
    /// Field checks; `prefix` is the section's path.
    pub fn validate(&self, prefix: &str) -> Result<(), ConfigError> {
        ensure(self.every_n_stores >= 1, &format!("{prefix}.every_n_stores"), || "must be at least 1 store per barrier".into())?;
        ensure(self.coverage == Coverage::Full || self.stack_bytes > 0, &format!("{prefix}.stack_bytes"), || "coverage = \"non-stack\" needs a stack of at least 1 byte".into())?;
        ensure(self.stack_bytes <= self.stack_top_va, &format!("{prefix}.stack_bytes"), || {
            format!("{} bytes reach below virtual address 0 from persist.stack_top_va = {:#x}", self.stack_bytes, self.stack_top_va)
        })
    }

    /// The stack's virtual addresses when stores to it are left unprotected (`coverage =
    /// "non-stack"`).
    pub fn unprotected_stack(&self) -> Option<std::ops::Range<u64>> {
        (self.coverage == Coverage::NonStack).then(|| self.stack_top_va - self.stack_bytes..self.stack_top_va)
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
    /// Stores here get no barrier (`coverage = "non-stack"`).
    unprotected: std::ops::Range<u64>,
    pending: VecDeque<Record>,
}

impl<I: Iterator<Item = Result<Record, TraceError>>> Barriers<I> {
    pub fn new(inner: I, cfg: &PersistConfig) -> Barriers<I> {
        let unprotected = cfg.unprotected_stack().unwrap_or(0..0);
        Barriers { inner, rule: cfg.barriers, every: cfg.every_n_stores, stores: 0, lines: Vec::new(), unprotected, pending: VecDeque::new() }
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
            if r.op == Op::Write && r.size_bytes > 0 && !self.unprotected.contains(&r.addr) {
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
        let cfg = PersistConfig { barriers: rule, every_n_stores: every, ..PersistConfig::default() };
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
        let cfg = PersistConfig { barriers: PersistRule::EveryNStores, every_n_stores: 0, ..PersistConfig::default() };
        assert_eq!(cfg.validate("persist").unwrap_err().field, "persist.every_n_stores");
    }

    #[test]
    fn under_non_stack_coverage_a_stack_store_gets_no_barrier_nor_a_place_in_the_epoch() {
        use Op::*;
        let cfg = PersistConfig { barriers: PersistRule::EveryNStores, every_n_stores: 2, coverage: Coverage::NonStack, stack_top_va: 0x10_0000, stack_bytes: 0x1000 };
        let recs = vec![Record::write(0x1000, 0), Record::write(0xf_f040, 0), Record::write(0x2000, 0), Record::write(0xf_f000, 0)];
        let got: Vec<(Op, u64)> = Barriers::new(recs.into_iter().map(Ok), &cfg).map(|r| r.unwrap()).map(|r| (r.op, r.addr)).collect();
        let want = vec![(Write, 0x1000), (Write, 0xf_f040), (Write, 0x2000), (Flush, 0x1000), (Flush, 0x2000), (Fence, 0), (Write, 0xf_f000)];
        assert_eq!(got, want);
        let every = PersistConfig { barriers: PersistRule::EveryStore, ..cfg };
        let n = Barriers::new(vec![Record::write(0xf_f000, 0)].into_iter().map(Ok), &every).count();
        assert_eq!(n, 1, "a stack store alone: nothing added");
        let empty = PersistConfig { stack_bytes: 0, ..cfg };
        assert_eq!(empty.validate("persist").unwrap_err().field, "persist.stack_bytes");
    }
}
