//! The memory controller's cryptographic engine, and who waits for it.
//!
//! Every pad, MAC and tree hash the controller computes goes through one [`CryptoEngine`];
//! so does the work an I/O-path unit delegates to the controller (D-Shield's DMA
//! Interception Engine: "we model a shared cryptographic engine used by the memory controller
//! and DIE. Requests to this engine are queued in the ingestion queue of the cryptographic
//! engine and served when the engine is ready", section VIII). How much it can take at once is
//! [`EngineIssue`]:
//!
//! * `unlimited` — latency only: an operation starts when its inputs are ready and never waits
//!   for another. This is what the memory papers model (Horus and Lelantus give latencies, no
//!   throughput), so memory-only presets keep it.
//! * `pipelined` — each 64 B of input holds the engine's input for
//!   `security.crypto_engine_cycles_per_64b` cycles (its initiation interval), and the result
//!   comes the operation's latency after it entered. A fully pipelined AES-128 unit takes one
//!   16 B block a cycle: 4 cycles per 64 B.
//! * `serial` — one operation at a time, each holding the engine for its whole latency.
//!
//! Requests reach the engine in simulation order, which is not always time order (a line whose
//! counter missed asks for its pad later in time than one asked after it). A single "free at"
//! time would make the earlier-in-time request wait behind the later one, so the engine keeps
//! its busy intervals and gives each operation the first gap at or after its ready time that
//! is long enough (earliest fit). Intervals ending [`HORIZON_CYCLES`] before the latest ready
//! time seen are forgotten, which bounds the engine's memory; an operation older than the
//! forgotten ones starts after them, so the engine is never booked twice.

use std::collections::VecDeque;

use secmem_core::time::Cycle;

pub use crate::config::EngineIssue;

/// How far behind the newest request the engine remembers its busy intervals, cycles.
pub const HORIZON_CYCLES: u64 = 1 << 16;

/// The engine: its issue model and, when it queues, its busy intervals.
#[derive(Clone, Debug)]
pub struct CryptoEngine {
    issue: EngineIssue,
    cycles_per_64b: u64,
    /// Busy intervals `[start, end)` in time order, disjoint and not touching.
    busy: VecDeque<(u64, u64)>,
    newest_ready: u64,
    /// The end of the latest interval forgotten.
    forgotten_until: u64,
    pub stats: EngineStats,
}

/// What the engine did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    /// Operations run (a pad, a MAC, a hash of any size).
    pub ops: u64,
    /// Cycles the engine's input was held (0 when unlimited).
    pub busy_cycles: u64,
    /// Cycles operations waited for the engine beyond their ready time.
    pub queue_wait_cycles: u64,
    /// When the last busy interval ends: past a run's end when work nobody waits for (a
    /// posted write's MAC) queued behind the rest.
    pub busy_until: u64,
}

impl CryptoEngine {
    pub fn new(issue: EngineIssue, cycles_per_64b: u64) -> CryptoEngine {
        CryptoEngine { issue, cycles_per_64b, busy: VecDeque::new(), newest_ready: 0, forgotten_until: 0, stats: EngineStats::default() }
    }

    pub fn issue(&self) -> EngineIssue { self.issue }

    /// One operation over `chunks_64b` 64 B pieces of input, of latency `latency`, whose inputs
    /// are ready at `ready`. Returns when its result is.
    #[inline]
    pub fn run(&mut self, ready: Cycle, chunks_64b: u64, latency: Cycle) -> Cycle { self.run_many(ready, 1, chunks_64b, latency) }

    /// `count` independent operations of the same kind, all ready at `ready`, issued back to
    /// back. Returns when the last result is.
    #[inline]
    pub fn run_many(&mut self, ready: Cycle, count: u64, chunks_64b: u64, latency: Cycle) -> Cycle {
        if count == 0 {
            return ready;
        }
        self.stats.ops += count;
        if self.issue == EngineIssue::Unlimited {
            return ready + latency;
        }
        self.queue(ready, count, chunks_64b, latency)
    }

    /// [`run_many`](Self::run_many) on an engine that queues.
    #[inline(never)]
    fn queue(&mut self, ready: Cycle, count: u64, chunks_64b: u64, latency: Cycle) -> Cycle {
        let hold = match self.issue {
            EngineIssue::Unlimited => unreachable!("run_many answers for an unlimited engine"),
            EngineIssue::Pipelined => chunks_64b.max(1) * self.cycles_per_64b,
            EngineIssue::Serial => latency.0,
        };
        if hold == 0 {
            return ready + latency;
        }
        let total = hold * count;
        let start = self.reserve(ready.0, total);
        self.stats.busy_cycles += total;
        self.stats.queue_wait_cycles += start - ready.0;
        // The last operation enters at `start + total - hold` and finishes its latency later
        // (a serial operation's hold is its latency).
        Cycle(start + total - hold + latency.0.max(hold))
    }

    /// The first start at or after `ready` with `len` free cycles; marks them busy.
    fn reserve(&mut self, ready: u64, len: u64) -> u64 {
        if ready > self.newest_ready {
            self.newest_ready = ready;
            let old = ready.saturating_sub(HORIZON_CYCLES);
            while let Some(&(_, e)) = self.busy.front().filter(|&&(_, e)| e <= old) {
                self.forgotten_until = self.forgotten_until.max(e);
                self.busy.pop_front();
            }
        }
        // Before `forgotten_until` the engine no longer knows its gaps: a request that old
        // starts no earlier, so it can never be booked over forgotten work.
        let ready = ready.max(self.forgotten_until);
        // Requests come nearly in time order, so the search starts near the end.
        let mut j = self.busy.partition_point(|&(_, e)| e <= ready);
        let mut start = ready;
        while let Some(&(s, e)) = self.busy.get(j) {
            if s >= start + len {
                break;
            }
            start = start.max(e);
            j += 1;
        }
        self.insert(j, start, start + len, len);
        self.stats.busy_until = self.stats.busy_until.max(start + len);
        start
    }

    /// Marks `[s, e)` busy at position `j`, merged with a neighbour less than `gap` away: a
    /// gap shorter than the operation that left it is counted busy. Such gaps are rarely
    /// usable (most operations are as long), and keeping them would leave a saturated
    /// engine's timeline in thousands of pieces that every later request walks.
    fn insert(&mut self, mut j: usize, mut s: u64, mut e: u64, gap: u64) {
        if j > 0 && self.busy[j - 1].1 + gap > s {
            j -= 1;
            s = self.busy[j].0;
            e = e.max(self.busy[j].1);
            self.busy.remove(j);
        }
        if let Some(&(ns, ne)) = self.busy.get(j) {
            if ns < e + gap {
                e = e.max(ne);
                self.busy.remove(j);
            }
        }
        self.busy.insert(j, (s, e));
    }

    /// Busy intervals remembered (for tests of the memory bound).
    pub fn intervals(&self) -> usize { self.busy.len() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlimited_engine_never_delays_an_operation() {
        let mut e = CryptoEngine::new(EngineIssue::Unlimited, 4);
        for _ in 0..1000 {
            assert_eq!(e.run(Cycle(100), 1, Cycle(40)), Cycle(140));
        }
        assert_eq!(e.stats.queue_wait_cycles, 0);
    }

    #[test]
    fn a_pipelined_engine_takes_one_operation_per_initiation_interval() {
        let mut e = CryptoEngine::new(EngineIssue::Pipelined, 4);
        assert_eq!(e.run(Cycle(0), 1, Cycle(40)), Cycle(40));
        assert_eq!(e.run(Cycle(0), 1, Cycle(40)), Cycle(44), "the second waits one interval");
        // Eight 512 B hashes hold 8 x 32 cycles; the last finishes its latency after entering.
        assert_eq!(e.run_many(Cycle(0), 8, 8, Cycle(320)), Cycle(8 + 7 * 32 + 320));
        assert_eq!(e.stats.busy_cycles, 8 + 256);
    }

    #[test]
    fn a_serial_engine_holds_each_operation_for_its_latency() {
        let mut e = CryptoEngine::new(EngineIssue::Serial, 4);
        assert_eq!(e.run_many(Cycle(10), 3, 1, Cycle(40)), Cycle(130));
        assert_eq!(e.run(Cycle(0), 1, Cycle(160)), Cycle(290));
        assert_eq!(e.stats.queue_wait_cycles, 130, "it waited from 0 to 130: the gap before 10 is too short");
    }

    #[test]
    fn an_operation_asked_for_later_but_ready_earlier_takes_an_earlier_gap() {
        let mut e = CryptoEngine::new(EngineIssue::Serial, 4);
        assert_eq!(e.run(Cycle(1000), 1, Cycle(40)), Cycle(1040));
        // Ready at 0, asked after: it fits before the busy interval instead of after it.
        assert_eq!(e.run(Cycle(0), 1, Cycle(40)), Cycle(40));
        // Ready at 980: the gap [980, 1000) is too short, so it goes after 1040.
        assert_eq!(e.run(Cycle(980), 1, Cycle(40)), Cycle(1080));
        // Between 40 and 1000 there is room.
        assert_eq!(e.run(Cycle(500), 1, Cycle(40)), Cycle(540));
    }

    #[test]
    fn a_request_older_than_the_forgotten_intervals_is_never_booked_over_them() {
        let mut e = CryptoEngine::new(EngineIssue::Serial, 4);
        assert_eq!(e.run(Cycle(0), 1, Cycle(40)), Cycle(40));
        // A request far ahead forgets [0, 40); a late one ready at 0 starts after it.
        e.run(Cycle(10 * HORIZON_CYCLES), 1, Cycle(40));
        assert_eq!(e.run(Cycle(0), 1, Cycle(40)), Cycle(80));
        assert_eq!(e.stats.busy_cycles, 120);
    }

    #[test]
    fn touching_intervals_merge_and_old_ones_are_forgotten() {
        let mut e = CryptoEngine::new(EngineIssue::Pipelined, 4);
        for k in 0..10_000u64 {
            e.run(Cycle(k * 4), 1, Cycle(40));
        }
        assert_eq!(e.intervals(), 1, "back-to-back operations are one busy interval");
        for k in 0..1000u64 {
            e.run(Cycle(k * HORIZON_CYCLES / 8), 1, Cycle(40));
        }
        assert!(e.intervals() <= 10, "{} intervals kept", e.intervals());
    }
}
