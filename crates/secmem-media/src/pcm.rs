//! PCM DIMM timing: banks, channel data buses, a bounded read queue and a write pending queue
//! (WPQ) with watermark draining.
//!
//! # Why this shape
//!
//! Secure-memory schemes differ mostly in how much *extra* traffic (counters, MACs, tree nodes,
//! re-encryption) they send to memory, and that traffic hurts because it competes with data for
//! the same banks. A fixed-latency device would make every metadata write free under ADR and
//! every read cost the same, hiding exactly the effect the schemes are compared on. This model
//! therefore keeps the few pieces of state that create contention, and nothing else:
//!
//! * **Banks.** Each bank has a `busy_until` cycle. A PCM array access (150 ns read, 500 ns
//!   write) keeps its bank busy; a request to a busy bank waits (`bank_conflict_cycles`).
//!   Writes are slow, so a drained write burst delays reads to the same bank: that is how
//!   metadata writes slow down data reads.
//! * **Channel data bus.** A 64 B burst occupies the channel for `bus_transfer_ns`. The bus is a
//!   calendar (a bitmap of booked cycles over a sliding window), not a single `free_at` cycle:
//!   requests are handled in issue order but their bursts happen when their banks are ready,
//!   so a read to an idle bank must be able to use the bus *before* a burst booked earlier for
//!   a read stuck behind a busy bank. A single `free_at` would serialise every request behind
//!   the slowest bank and collapse bank parallelism.
//! * **Read queue.** At most `read_queue_entries` reads are in flight; a read arriving at a full
//!   queue waits for the earliest in-flight read to return. This bounds memory-level
//!   parallelism the way the controller's queue does.
//! * **Write pending queue.** With ADR the WPQ is in the persistence domain, so a write is
//!   persistent when it is accepted into it — that is why the trait returns the acceptance cycle
//!   for writes. The WPQ still has to be emptied into the banks, and when writes arrive faster
//!   than the banks absorb them it fills and *then* writes stall: this back-pressure is the only
//!   way write bandwidth shows up in ADR persistence latency, so it is modelled exactly.
//!
//! # Key decisions
//!
//! * Reads have priority over *queued* writes: a write waiting in the WPQ reserves nothing, so
//!   it cannot delay a read. Only writes already issued to a bank (reflected in its
//!   `busy_until`) delay reads.
//! * A write is *issued* (scheduled) at a decision cycle `t`: its inbound burst is booked on the
//!   bus at the first free slot at or after `max(t, bank.busy_until)`; the array write follows
//!   the burst and keeps the bank busy for `write_latency`. The write keeps its WPQ slot until
//!   its burst starts (the data leaves the controller then), so issued-but-not-started writes
//!   still occupy the WPQ and can still serve reads and absorb coalescing writes.
//! * Watermark policy: writes wait in the WPQ until its occupancy reaches the high watermark,
//!   then the oldest queued writes are issued until at most `low` remain queued (or all, on
//!   `drain()`). No opportunistic drain when reads are idle — kept simple and deterministic;
//!   the total bank work is the same, only its placement differs.
//! * Eager policy: every write is issued the moment it is accepted.
//! * `adr = false`: the WPQ is not persistent, so a write is persistent only when its array
//!   write completes; such writes cannot be held back, so `adr = false` issues every write
//!   eagerly regardless of `drain_policy`.
//! * Forwarding: a read to a line with a write still in the WPQ is served from the WPQ in one
//!   bus-transfer time, without touching the bank (`wpq_read_hits`).
//! * Coalescing: a write to a line that still has a write in the WPQ merges into it
//!   (`wpq_coalesced`); the WPQ therefore holds at most one entry per line. `writes_by_class`
//!   counts every write the controller sent (what the papers call memory writes); energy and
//!   `array_writes` count only array writes, charged when a write is issued to its bank.
//! * Full WPQ: a write that finds every slot taken waits until the earliest issued write starts
//!   its burst (`wpq_full_stalls`), and is accepted then; that later cycle is returned.
//! * The queues are shared by all channels of the DIMM (one controller).
//! * `bank_conflict_cycles` counts the bank waits of requests whose completion someone waits
//!   for: reads, and writes when `adr = false`. Background drains under ADR are not counted.
//!
//! * Requests are expected in non-decreasing `issue` order. A write that stalls on a full WPQ
//!   advances the device's view of time to its acceptance cycle; a caller that then issues
//!   another request at an earlier cycle gets a consistent but slightly pessimistic answer.
//!
//! # Cost
//!
//! A read costs O(1) expected work (one hash probe, a few read-queue probes, one bank and one
//! bus-bitmap update); a write adds one hash insert/remove and one push/pop on a heap bounded
//! by the WPQ size (each write is queued, issued and retired exactly once). Nothing scans the
//! WPQ. `examples/pcm_speed.rs` measures > 20 M random accesses/s on one core.

use crate::{AccessKind, MediaStats, MemRequest, MemoryPort};
use rustc_hash::FxHashMap;
use secmem_core::addr::{LINE_SHIFT, PAGE_SHIFT};
use secmem_core::error::{ensure, ConfigError};
use secmem_core::{config_enum, config_section, Cycle};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

config_enum! {
    /// When writes leave the write pending queue for the banks.
    pub enum DrainPolicy {
        Watermark => "watermark": "writes wait in the WPQ until its occupancy reaches write_drain_high_pct (or drain() is called), then the oldest are issued until write_drain_low_pct remain queued",
        Eager => "eager": "every write is issued to its bank as soon as it is accepted (it keeps its WPQ slot until its burst starts)",
    }
}

config_enum! {
    /// How a device address selects a channel and a bank.
    pub enum AddressMapping {
        LineInterleave => "line-interleave": "consecutive 64 B lines rotate over channels, then banks",
        PageInterleave => "page-interleave": "consecutive 4 KB pages rotate over channels, then banks",
    }
}

config_section! {
    /// PCM DIMM timing and energy. Defaults follow Horus (MICRO 2022) Tables I/II and BMF
    /// Table 1 where those give a value.
    pub struct PcmConfig {
        capacity_gib: u64 = 32 => "Device capacity in GiB (Horus Table I: 32 GB PCM)";
        channels: u32 = 2 => "Number of channels, each with its own data bus (power of two)";
        banks_per_channel: u32 = 8 => "Banks per channel (power of two)";
        read_latency_ns: f64 = 150.0 => "Array read latency in ns (Horus Table I: 150 ns)";
        write_latency_ns: f64 = 500.0 => "Array write latency in ns (Horus Table I: 500 ns)";
        bus_transfer_ns: f64 = 5.0 => "Time in ns one 64 B burst occupies the channel data bus (BMF Table 1: tBURST 5 ns)";
        read_queue_entries: u32 = 64 => "Reads in flight at most, in entries (BMF Table 1: read queue 64 entries)";
        write_queue_entries: u32 = 128 => "Write pending queue size in entries (BMF Table 1: write queue 128 entries)";
        write_drain_high_pct: u32 = 80 => "WPQ occupancy, in percent of write_queue_entries, at which the watermark policy starts issuing writes";
        write_drain_low_pct: u32 = 50 => "Queued writes, in percent of write_queue_entries, left when a watermark drain stops";
        drain_policy: DrainPolicy = DrainPolicy::Watermark => "When queued writes are issued to the banks: watermark | eager";
        adr: bool = true => "Whether the WPQ is in the persistence domain (ADR): a write is then persistent when accepted, else when written to the array";
        read_energy_nj: f64 = 5.5 => "Dynamic energy of one 64 B array read in nJ (Horus Table II)";
        write_energy_nj: f64 = 531.8 => "Dynamic energy of one 64 B array write in nJ (Horus Table II)";
        address_mapping: AddressMapping = AddressMapping::LineInterleave => "Address to channel/bank mapping: line-interleave | page-interleave";
    }
}

fn field(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}.{name}") }
}

impl PcmConfig {
    /// Rejects values no device can have; errors name the field as `path.field`.
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let f = |n: &str| field(path, n);
        ensure(self.capacity_gib > 0, &f("capacity_gib"), || "must be at least 1 GiB".into())?;
        ensure(self.channels.is_power_of_two(), &f("channels"), || {
            format!("must be a power of two >= 1, got {}", self.channels)
        })?;
        ensure(self.banks_per_channel.is_power_of_two(), &f("banks_per_channel"), || {
            format!("must be a power of two >= 1, got {}", self.banks_per_channel)
        })?;
        for (name, v) in [
            ("read_latency_ns", self.read_latency_ns),
            ("write_latency_ns", self.write_latency_ns),
            ("bus_transfer_ns", self.bus_transfer_ns),
        ] {
            ensure(v.is_finite() && v > 0.0, &f(name), || format!("must be a positive number of ns, got {v}"))?;
        }
        ensure(self.read_queue_entries > 0, &f("read_queue_entries"), || "must be at least 1".into())?;
        ensure(self.write_queue_entries > 0, &f("write_queue_entries"), || "must be at least 1".into())?;
        ensure(self.write_drain_high_pct >= 1 && self.write_drain_high_pct <= 100, &f("write_drain_high_pct"), || {
            format!("must be in 1..=100, got {}", self.write_drain_high_pct)
        })?;
        ensure(self.write_drain_low_pct < self.write_drain_high_pct, &f("write_drain_low_pct"), || {
            format!(
                "must be below write_drain_high_pct ({}), got {}",
                self.write_drain_high_pct, self.write_drain_low_pct
            )
        })?;
        for (name, v) in [("read_energy_nj", self.read_energy_nj), ("write_energy_nj", self.write_energy_nj)] {
            ensure(v.is_finite() && v >= 0.0, &f(name), || format!("must be a non-negative number of nJ, got {v}"))?;
        }
        Ok(())
    }
}

/// One channel's data bus as a bitmap of booked cycles over a sliding window that starts at
/// the last pruning point (the latest request's issue cycle, rounded down to 64). Booking is
/// O(1) in the common case: check the `len` bits at `ready`, else jump past the last booked
/// cycle found and check again. Being a calendar rather than a single `free_at`, it lets a
/// burst fill a gap before a burst booked earlier for a later cycle.
///
/// Bookings further ahead than the window (2^20 cycles, 262 µs at 4 GHz) are not recorded:
/// the WPQ and read-queue bounds keep closed-loop callers far inside it, so only open-loop
/// callers that ignore returned cycles can get there, and then banks, not the bus, are the
/// bottleneck anyway.
#[derive(Clone, Debug)]
struct BusCalendar {
    /// Ring of `words.len()` (a power of two) words; bit `c & 63` of word `(c >> 6) % len`
    /// is cycle `c`, for `base <= c < base + 64 * len`.
    words: Vec<u64>,
    base: u64,
}

const BUS_WINDOW_WORDS: usize = 1 << 14;

/// Bits `lo..hi` of a word, `lo < hi <= 64`.
#[inline]
fn bit_range(lo: u64, hi: u64) -> u64 {
    let upper = if hi >= 64 { u64::MAX } else { (1u64 << hi) - 1 };
    upper & !((1u64 << lo) - 1)
}

impl BusCalendar {
    fn new(window_words: usize) -> BusCalendar {
        debug_assert!(window_words.is_power_of_two());
        BusCalendar { words: vec![0; window_words], base: 0 }
    }

    #[inline]
    fn window_end(&self) -> u64 { self.base + 64 * self.words.len() as u64 }

    /// Forgets cycles before `now`: no later request can be ready before `now`.
    #[inline]
    fn prune(&mut self, now: u64) {
        let new_base = now & !63;
        if new_base <= self.base {
            return;
        }
        let mask = self.words.len() - 1;
        let k = (new_base - self.base) >> 6;
        if k >= self.words.len() as u64 {
            self.words.fill(0);
        } else {
            let first = (self.base >> 6) as usize;
            for w in first..first + k as usize {
                self.words[w & mask] = 0;
            }
        }
        self.base = new_base;
    }

    /// Books the earliest free `len`-cycle window starting at or after `ready`; returns its
    /// start. A window outside the calendar's range is returned without being recorded.
    #[inline]
    fn book(&mut self, ready: u64, len: u64) -> u64 {
        let mask = self.words.len() - 1;
        let mut s = ready;
        if s < self.base {
            return s;
        }
        'search: loop {
            let e = s + len;
            if e > self.window_end() {
                return s;
            }
            let mut c = s;
            while c < e {
                let word_start = c & !63;
                let hit = self.words[(c >> 6) as usize & mask] & bit_range(c & 63, (e - word_start).min(64));
                if hit != 0 {
                    // The last booked cycle in range: any window starting at or before it overlaps it.
                    s = word_start + 63 - hit.leading_zeros() as u64 + 1;
                    continue 'search;
                }
                c = word_start + 64;
            }
            break;
        }
        let e = s + len;
        let mut c = s;
        while c < e {
            let word_start = c & !63;
            self.words[(c >> 6) as usize & mask] |= bit_range(c & 63, (e - word_start).min(64));
            c = word_start + 64;
        }
        s
    }
}

/// The read queue: per entry, the cycle its last read returns; an entry is free from then.
/// Entries are grouped by [`RQ_GROUP`] with each group's earliest return kept, so that both
/// "some free entry" (light load: the first probes succeed) and "the entry that frees first"
/// (full queue) cost O(1) expected / O(entries / RQ_GROUP + RQ_GROUP), never a heap update.
#[derive(Clone, Debug)]
struct ReadQueue {
    /// Padded to whole groups with `u64::MAX` (never free, never earliest).
    done: Vec<u64>,
    group_min: Vec<u64>,
    entries: usize,
    cursor: usize,
}

const RQ_GROUP: usize = 8;
const RQ_PROBES: usize = 4;

#[derive(Copy, Clone, Debug)]
struct RqSlot {
    index: usize,
    stalled: bool,
}

impl ReadQueue {
    fn new(entries: usize) -> ReadQueue {
        let groups = entries.div_ceil(RQ_GROUP);
        let mut done = vec![u64::MAX; groups * RQ_GROUP];
        done[..entries].fill(0);
        ReadQueue { done, group_min: vec![0; groups], entries, cursor: 0 }
    }

    #[inline]
    fn next(&self, i: usize) -> usize { if i + 1 == self.entries { 0 } else { i + 1 } }

    /// An entry for a read arriving at `t`: a free one, or the one that frees first and the
    /// cycle it does (`stalled`). Returns the entry and the cycle the read enters the queue.
    #[inline]
    fn enter(&mut self, t: u64) -> (RqSlot, u64) {
        let mut i = self.cursor;
        for _ in 0..RQ_PROBES.min(self.entries) {
            if self.done[i] <= t {
                self.cursor = self.next(i);
                return (RqSlot { index: i, stalled: false }, t);
            }
            i = self.next(i);
        }
        let g = argmin(&self.group_min);
        let index = g * RQ_GROUP + argmin(&self.done[g * RQ_GROUP..(g + 1) * RQ_GROUP]);
        let first = self.done[index];
        self.cursor = self.next(index);
        (RqSlot { index, stalled: first > t }, first.max(t))
    }

    /// Records that the read in entry `index` returns at `done`.
    #[inline]
    fn set(&mut self, index: usize, done: u64) {
        let old = self.done[index];
        self.done[index] = done;
        let g = index / RQ_GROUP;
        if done < self.group_min[g] {
            self.group_min[g] = done;
        } else if old == self.group_min[g] {
            self.group_min[g] = self.done[g * RQ_GROUP..(g + 1) * RQ_GROUP].iter().copied().min().expect("group");
        }
    }
}

/// Index of the first minimum of a non-empty slice.
#[inline]
fn argmin(xs: &[u64]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate().skip(1) {
        if x < xs[best] {
            best = i;
        }
    }
    best
}

/// Map value of a line whose write is queued (not yet issued to a bank).
const QUEUED: u64 = u64::MAX;

/// A PCM DIMM behind [`MemoryPort`]. See the module docs for the model.
#[derive(Clone, Debug)]
pub struct PcmMedia {
    cfg: PcmConfig,
    capacity_bytes: u64,
    // Timing in cycles, converted once.
    read_lat: u64,
    write_lat: u64,
    bus_xfer: u64,
    // Mapping.
    ch_bits: u32,
    ch_mask: u64,
    bank_mask: u64,
    banks_per_channel: usize,
    page_interleave: bool,
    // Queue limits.
    wpq_cap: usize,
    wpq_high: usize,
    wpq_low: usize,
    eager: bool,
    adr: bool,
    read_energy: f64,
    write_energy: f64,
    // State.
    /// Per bank (channel-major): cycle the bank finishes its last issued access.
    bank_busy: Vec<u64>,
    /// Per channel data bus.
    bus: Vec<BusCalendar>,
    read_queue: ReadQueue,
    /// Lines of the writes accepted but not issued, oldest first.
    wpq_queued: VecDeque<u64>,
    /// Issued writes still holding a WPQ slot: (burst start, line), min-heap.
    wpq_issued: BinaryHeap<Reverse<(u64, u64)>>,
    /// Every line with a write in the WPQ → its array completion cycle, or `QUEUED`.
    wpq_lines: FxHashMap<u64, u64>,
    /// Latest array completion of any issued write.
    last_write_done: u64,
    stats: MediaStats,
}

impl PcmMedia {
    /// Builds the device; `cfg` should have passed [`PcmConfig::validate`]. Nanosecond
    /// parameters are converted to cycles of `cpu_freq_mhz` here, once.
    pub fn new(cfg: &PcmConfig, cpu_freq_mhz: u64) -> PcmMedia {
        debug_assert!(cfg.validate("pcm").is_ok(), "invalid PcmConfig: {:?}", cfg.validate("pcm"));
        // Stay well-defined even on an unvalidated config in release builds.
        let pow2_floor = |x: u32| if x == 0 { 1 } else { 1u32 << (31 - x.leading_zeros()) };
        let channels = pow2_floor(cfg.channels);
        let banks = pow2_floor(cfg.banks_per_channel);
        let wpq_cap = (cfg.write_queue_entries as usize).max(1);
        let wpq_high = (wpq_cap * cfg.write_drain_high_pct.min(100) as usize / 100).clamp(1, wpq_cap);
        let wpq_low = (wpq_cap * cfg.write_drain_low_pct as usize / 100).min(wpq_high - 1);
        let cyc = |ns: f64| Cycle::from_ns(ns.max(0.0), cpu_freq_mhz).0.max(1);
        let rq_cap = (cfg.read_queue_entries as usize).max(1);
        let mut wpq_lines = FxHashMap::default();
        wpq_lines.reserve(2 * wpq_cap);
        PcmMedia {
            cfg: cfg.clone(),
            capacity_bytes: cfg.capacity_gib << 30,
            read_lat: cyc(cfg.read_latency_ns),
            write_lat: cyc(cfg.write_latency_ns),
            bus_xfer: cyc(cfg.bus_transfer_ns),
            ch_bits: channels.trailing_zeros(),
            ch_mask: channels as u64 - 1,
            bank_mask: banks as u64 - 1,
            banks_per_channel: banks as usize,
            page_interleave: cfg.address_mapping == AddressMapping::PageInterleave,
            wpq_cap,
            wpq_high,
            wpq_low,
            eager: cfg.drain_policy == DrainPolicy::Eager || !cfg.adr,
            adr: cfg.adr,
            read_energy: cfg.read_energy_nj,
            write_energy: cfg.write_energy_nj,
            bank_busy: vec![0; channels as usize * banks as usize],
            bus: vec![BusCalendar::new(BUS_WINDOW_WORDS); channels as usize],
            read_queue: ReadQueue::new(rq_cap),
            wpq_queued: VecDeque::with_capacity(wpq_cap + 1),
            wpq_issued: BinaryHeap::with_capacity(wpq_cap + 1),
            wpq_lines,
            last_write_done: 0,
            stats: MediaStats::default(),
        }
    }

    pub fn config(&self) -> &PcmConfig { &self.cfg }

    /// `(channel, bank within channel)` of a device byte address.
    #[inline]
    pub fn map(&self, addr: u64) -> (u32, u32) {
        let unit = if self.page_interleave { addr >> PAGE_SHIFT } else { addr >> LINE_SHIFT };
        ((unit & self.ch_mask) as u32, ((unit >> self.ch_bits) & self.bank_mask) as u32)
    }

    #[inline]
    fn bank_index(&self, line: u64) -> (usize, usize) {
        let (ch, bank) = self.map(line << LINE_SHIFT);
        (ch as usize, ch as usize * self.banks_per_channel + bank as usize)
    }

    /// Writes accepted into the WPQ and not yet issued to a bank.
    pub fn pending_writes(&self) -> usize { self.wpq_queued.len() }

    /// WPQ slots in use as of the last request: queued writes plus issued writes whose burst
    /// had not started yet.
    pub fn wpq_occupancy(&self) -> usize { self.wpq_queued.len() + self.wpq_issued.len() }

    /// Number of entries at which the watermark policy starts issuing writes.
    pub fn wpq_high_watermark(&self) -> usize { self.wpq_high }

    /// Number of queued writes a watermark drain leaves behind.
    pub fn wpq_low_watermark(&self) -> usize { self.wpq_low }

    /// Array read latency in cycles.
    pub fn read_latency(&self) -> Cycle { Cycle(self.read_lat) }
    /// Array write latency in cycles.
    pub fn write_latency(&self) -> Cycle { Cycle(self.write_lat) }
    /// One 64 B burst on the data bus, in cycles.
    pub fn bus_transfer(&self) -> Cycle { Cycle(self.bus_xfer) }

    /// Retires issued writes whose burst started by `t`: they leave the WPQ.
    #[inline]
    fn retire_issued(&mut self, t: u64) {
        while let Some(&Reverse((start, line))) = self.wpq_issued.peek() {
            if start > t {
                break;
            }
            self.wpq_issued.pop();
            self.wpq_lines.remove(&line);
        }
    }

    /// Issues the write to `line` at decision cycle `t`; returns its array completion cycle.
    #[inline]
    fn issue_write(&mut self, line: u64, t: u64) -> u64 {
        let (ch, b) = self.bank_index(line);
        let ready = t.max(self.bank_busy[b]);
        let start = self.bus[ch].book(ready, self.bus_xfer);
        let done = start + self.bus_xfer + self.write_lat;
        self.bank_busy[b] = done;
        if !self.adr {
            self.stats.bank_conflict_cycles += start - t;
        }
        self.wpq_issued.push(Reverse((start, line)));
        if !self.adr {
            // Only a non-persistent WPQ needs the completion, for writes that coalesce into this one.
            if let Some(v) = self.wpq_lines.get_mut(&line) {
                *v = done;
            }
        }
        self.last_write_done = self.last_write_done.max(done);
        self.stats.array_writes += 1;
        self.stats.energy_nj += self.write_energy;
        done
    }

    /// Issues queued writes oldest-first at cycle `t` until at most `keep` remain queued.
    fn issue_queued(&mut self, keep: usize, t: u64) {
        while self.wpq_queued.len() > keep {
            let line = self.wpq_queued.pop_front().expect("non-empty");
            self.issue_write(line, t);
        }
    }

    fn read(&mut self, line: u64, t: u64) -> u64 {
        self.retire_issued(t);
        if self.wpq_lines.contains_key(&line) {
            self.stats.wpq_read_hits += 1;
            return t + self.bus_xfer;
        }
        let (slot, t) = self.read_queue.enter(t);
        if slot.stalled {
            self.stats.read_queue_full_stalls += 1;
        }
        let (ch, b) = self.bank_index(line);
        let start = t.max(self.bank_busy[b]);
        self.stats.bank_conflict_cycles += start - t;
        let array_done = start + self.read_lat;
        self.bank_busy[b] = array_done;
        let data_at = self.bus[ch].book(array_done, self.bus_xfer) + self.bus_xfer;
        self.read_queue.set(slot.index, data_at);
        self.stats.array_reads += 1;
        self.stats.energy_nj += self.read_energy;
        data_at
    }

    fn write(&mut self, line: u64, t: u64) -> u64 {
        self.retire_issued(t);
        if let Some(&done) = self.wpq_lines.get(&line) {
            self.stats.wpq_coalesced += 1;
            // With ADR the merge is persistent at once; without, when the merged write lands
            // (adr = false issues eagerly, so `done` is never QUEUED then).
            return if self.adr || done == QUEUED { t } else { done.max(t) };
        }
        let mut t = t;
        if self.wpq_occupancy() >= self.wpq_cap {
            if self.wpq_issued.is_empty() {
                // Only reachable if the watermark never fired; issue the oldest to make room.
                self.issue_queued(self.wpq_queued.len() - 1, t);
            }
            let &Reverse((first_start, _)) = self.wpq_issued.peek().expect("an issued write");
            t = t.max(first_start);
            self.retire_issued(t);
            self.stats.wpq_full_stalls += 1;
        }
        self.wpq_lines.insert(line, QUEUED);
        if self.eager {
            let done = self.issue_write(line, t);
            return if self.adr { t } else { done };
        }
        self.wpq_queued.push_back(line);
        if self.wpq_occupancy() >= self.wpq_high {
            self.issue_queued(self.wpq_low, t);
        }
        t
    }
}

impl MemoryPort for PcmMedia {
    #[inline]
    fn access(&mut self, req: MemRequest) -> Cycle {
        debug_assert!(req.addr < self.capacity_bytes, "address {:#x} beyond device capacity", req.addr);
        let line = req.addr >> LINE_SHIFT;
        let class = req.class as usize;
        for bus in &mut self.bus {
            bus.prune(req.issue.0);
        }
        Cycle(match req.kind {
            AccessKind::Read => {
                self.stats.reads_by_class[class] += 1;
                self.read(line, req.issue.0)
            }
            AccessKind::Write => {
                self.stats.writes_by_class[class] += 1;
                self.write(line, req.issue.0)
            }
        })
    }

    fn drain(&mut self, now: Cycle) -> Cycle {
        self.retire_issued(now.0);
        self.issue_queued(0, now.0);
        Cycle(self.last_write_done.max(now.0))
    }

    fn capacity_bytes(&self) -> u64 { self.capacity_bytes }

    fn stats(&self) -> &MediaStats { &self.stats }
}

#[cfg(test)]
mod reference;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TrafficClass;
    use proptest::prelude::*;

    const MHZ: u64 = 4000;
    // At 4000 MHz: 150 ns = 600 cycles, 500 ns = 2000 cycles, 5 ns = 20 cycles.
    const RD: u64 = 600;
    const WR: u64 = 2000;
    const BUS: u64 = 20;

    fn rd(addr: u64, issue: u64) -> MemRequest {
        MemRequest { addr, kind: AccessKind::Read, class: TrafficClass::Data, issue: Cycle(issue) }
    }
    fn wr(addr: u64, issue: u64) -> MemRequest {
        MemRequest { addr, kind: AccessKind::Write, class: TrafficClass::Data, issue: Cycle(issue) }
    }
    fn dev(cfg: PcmConfig) -> PcmMedia { PcmMedia::new(&cfg, MHZ) }
    fn default_dev() -> PcmMedia { dev(PcmConfig::default()) }
    /// Line-interleave, 2 channels x 8 banks: line k maps to channel k%2, bank (k/2)%8, so
    /// lines 16 apart share a bank.
    fn line(k: u64) -> u64 { k * 64 }

    #[test]
    fn ns_parameters_become_the_expected_cycles_at_4ghz() {
        let d = default_dev();
        assert_eq!((d.read_latency(), d.write_latency(), d.bus_transfer()), (Cycle(RD), Cycle(WR), Cycle(BUS)));
        assert_eq!(d.capacity_bytes(), 32 << 30);
    }

    #[test]
    fn read_to_an_idle_bank_takes_read_latency_plus_one_burst() {
        let mut d = default_dev();
        assert_eq!(d.access(rd(line(5), 1000)), Cycle(1000 + 600 + 20));
        assert_eq!(d.stats().bank_conflict_cycles, 0);
    }

    #[test]
    fn two_reads_to_the_same_bank_serialize_on_the_bank() {
        let mut d = default_dev();
        assert_eq!(d.access(rd(line(0), 0)), Cycle(RD + BUS));
        // Second read starts when the bank frees at 600, then its own burst.
        assert_eq!(d.access(rd(line(16), 0)), Cycle(2 * RD + BUS));
        assert_eq!(d.stats().bank_conflict_cycles, RD);
    }

    #[test]
    fn reads_to_different_banks_overlap_and_only_share_the_bus() {
        let mut d = default_dev();
        // Lines 0 and 2: channel 0, banks 0 and 1. Both array reads end at 600; bursts queue.
        assert_eq!(d.access(rd(line(0), 0)), Cycle(RD + BUS));
        assert_eq!(d.access(rd(line(2), 0)), Cycle(RD + 2 * BUS));
        // Line 1: channel 1, its own bus: no wait at all.
        assert_eq!(d.access(rd(line(1), 0)), Cycle(RD + BUS));
        assert_eq!(d.stats().bank_conflict_cycles, 0);
    }

    #[test]
    fn a_read_to_an_idle_bank_is_not_delayed_by_a_later_burst_booked_for_a_busy_bank() {
        let mut d = default_dev();
        d.access(rd(line(0), 0)); // bank (0,0) busy until 600
        // Same bank: its burst is booked at 1200..1220.
        assert_eq!(d.access(rd(line(16), 0)), Cycle(2 * RD + BUS));
        // Idle bank on the same channel, issued later: its burst at 700..720 fits before.
        assert_eq!(d.access(rd(line(2), 100)), Cycle(100 + RD + BUS));
    }

    #[test]
    fn line_interleave_rotates_lines_over_channels_then_banks() {
        let d = default_dev();
        let got: Vec<_> = (0..5).map(|k| d.map(line(k))).collect();
        assert_eq!(got, vec![(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]);
        assert_eq!(d.map(line(15)), (1, 7));
        assert_eq!(d.map(line(16)), (0, 0));
    }

    #[test]
    fn page_interleave_keeps_a_page_on_one_bank_and_rotates_pages() {
        let d = dev(PcmConfig { address_mapping: AddressMapping::PageInterleave, ..PcmConfig::default() });
        assert_eq!(d.map(0), (0, 0));
        assert_eq!(d.map(line(63)), (0, 0));
        let got: Vec<_> = (0..5).map(|p| d.map(p * 4096)).collect();
        assert_eq!(got, vec![(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]);
        assert_eq!(d.map(16 * 4096), (0, 0));
    }

    #[test]
    fn write_with_adr_is_persistent_when_accepted() {
        let mut d = default_dev();
        assert_eq!(d.access(wr(line(3), 77)), Cycle(77));
        let mut e = dev(PcmConfig { drain_policy: DrainPolicy::Eager, ..PcmConfig::default() });
        assert_eq!(e.access(wr(line(3), 77)), Cycle(77));
    }

    #[test]
    fn write_without_adr_is_persistent_only_after_the_array_write() {
        let mut d = dev(PcmConfig { adr: false, ..PcmConfig::default() });
        assert_eq!(d.access(wr(line(3), 77)), Cycle(77 + BUS + WR));
        assert_eq!(d.pending_writes(), 0);
        // A second write to the same bank waits for the first.
        assert_eq!(d.access(wr(line(19), 77)), Cycle(77 + 2 * (BUS + WR)));
    }

    #[test]
    fn read_after_write_to_the_same_line_is_forwarded_from_the_wpq() {
        let mut d = default_dev();
        d.access(wr(line(9), 0));
        assert_eq!(d.access(rd(line(9), 10)), Cycle(10 + BUS));
        assert_eq!(d.stats().wpq_read_hits, 1);
        assert_eq!(d.stats().array_reads, 0);
        assert_eq!(d.stats().reads(), 1);
        // Another line is not forwarded.
        assert_eq!(d.access(rd(line(10), 10)), Cycle(10 + RD + BUS));
    }

    #[test]
    fn a_second_write_to_a_pending_line_coalesces_and_never_reaches_the_array() {
        let mut d = default_dev();
        d.access(wr(line(9), 0));
        d.access(wr(line(9), 5));
        assert_eq!(d.pending_writes(), 1);
        d.drain(Cycle(10));
        let s = d.stats();
        assert_eq!((s.writes(), s.wpq_coalesced, s.array_writes), (2, 1, 1));
    }

    #[test]
    fn wpq_drains_at_the_high_watermark_down_to_the_low_watermark() {
        let mut d = default_dev();
        assert_eq!((d.wpq_high_watermark(), d.wpq_low_watermark()), (102, 64));
        for k in 0..101 {
            d.access(wr(line(k), 0));
        }
        assert_eq!(d.pending_writes(), 101);
        assert_eq!(d.stats().array_writes, 0);
        d.access(wr(line(101), 0));
        assert_eq!(d.pending_writes(), 64);
        assert_eq!(d.stats().array_writes, 38);
        assert!(d.drain(Cycle(0)) > Cycle(0));
        assert_eq!(d.pending_writes(), 0);
        assert_eq!(d.stats().array_writes, 102);
    }

    #[test]
    fn a_write_arriving_at_a_full_wpq_stalls_until_the_oldest_issued_write_starts() {
        let mut d = default_dev();
        // Every write to bank (0,0): issued writes chain on the bank, bursts at 0, 2020, 4040...
        let mut accepted_at_zero = 0;
        let mut stalled_until = None;
        for k in 0..200 {
            let t = d.access(wr(line(16 * k), 0));
            if t == Cycle(0) {
                accepted_at_zero += 1;
            } else {
                stalled_until = Some(t);
                break;
            }
        }
        // 128 slots, plus one freed by the first issued write whose burst starts at cycle 0.
        assert_eq!(accepted_at_zero, 129);
        assert_eq!(stalled_until, Some(Cycle(BUS + WR)));
        assert_eq!(d.stats().wpq_full_stalls, 1);
    }

    #[test]
    fn eager_policy_issues_every_write_at_once() {
        let mut d = dev(PcmConfig { drain_policy: DrainPolicy::Eager, ..PcmConfig::default() });
        d.access(wr(line(0), 0));
        assert_eq!(d.pending_writes(), 0);
        assert_eq!(d.stats().array_writes, 1);
        assert_eq!(d.drain(Cycle(0)), Cycle(BUS + WR));
    }

    #[test]
    fn a_drained_write_makes_a_later_read_to_its_bank_wait() {
        let mut d = default_dev();
        d.access(wr(line(0), 0));
        // While merely queued, the write does not delay a read to its bank.
        assert_eq!(d.access(rd(line(16), 0)), Cycle(RD + BUS));
        assert_eq!(d.drain(Cycle(1000)), Cycle(1000 + BUS + WR));
        // Bank busy until 3020: the read waits 2920 cycles.
        assert_eq!(d.access(rd(line(32), 1100)), Cycle(1000 + BUS + WR + RD + BUS));
        assert_eq!(d.stats().bank_conflict_cycles, 1000 + BUS + WR - 1100);
    }

    #[test]
    fn a_full_read_queue_makes_a_read_wait_for_the_earliest_in_flight_read() {
        let mut d = dev(PcmConfig { read_queue_entries: 2, ..PcmConfig::default() });
        assert_eq!(d.access(rd(line(0), 0)), Cycle(RD + BUS)); // ch0 bank0
        assert_eq!(d.access(rd(line(1), 0)), Cycle(RD + BUS)); // ch1 bank0
        // Queue full: waits until 620, then a full read on an idle bank.
        assert_eq!(d.access(rd(line(3), 0)), Cycle(RD + BUS + RD + BUS));
        assert_eq!(d.stats().read_queue_full_stalls, 1);
    }

    #[test]
    fn energy_is_array_reads_and_array_writes_times_their_energies() {
        let mut d = default_dev();
        for k in 0..10 {
            d.access(wr(line(k), k));
            d.access(rd(line(k + 100), k));
        }
        d.access(wr(line(0), 20)); // coalesced
        d.access(rd(line(1), 20)); // forwarded
        d.drain(Cycle(30));
        let s = d.stats().clone();
        assert_eq!((s.array_reads, s.array_writes, s.reads(), s.writes()), (10, 10, 11, 11));
        assert!((s.energy_nj - (10.0 * 5.5 + 10.0 * 531.8)).abs() < 1e-6, "{}", s.energy_nj);
    }

    #[test]
    fn traffic_is_counted_per_class() {
        let mut d = default_dev();
        d.access(MemRequest { class: TrafficClass::Mac, ..rd(0, 0) });
        d.access(MemRequest { class: TrafficClass::Tree, ..wr(64, 0) });
        assert_eq!(d.stats().reads_by_class[TrafficClass::Mac as usize], 1);
        assert_eq!(d.stats().writes_by_class[TrafficClass::Tree as usize], 1);
    }

    #[test]
    fn validate_accepts_defaults_and_names_each_impossible_field() {
        assert_eq!(PcmConfig::default().validate("pcm"), Ok(()));
        type Breaker = fn(&mut PcmConfig);
        let cases: Vec<(&str, Breaker)> = vec![
            ("capacity_gib", |c| c.capacity_gib = 0),
            ("channels", |c| c.channels = 0),
            ("channels", |c| c.channels = 3),
            ("banks_per_channel", |c| c.banks_per_channel = 0),
            ("banks_per_channel", |c| c.banks_per_channel = 12),
            ("read_latency_ns", |c| c.read_latency_ns = 0.0),
            ("write_latency_ns", |c| c.write_latency_ns = -1.0),
            ("bus_transfer_ns", |c| c.bus_transfer_ns = f64::NAN),
            ("read_queue_entries", |c| c.read_queue_entries = 0),
            ("write_queue_entries", |c| c.write_queue_entries = 0),
            ("write_drain_high_pct", |c| c.write_drain_high_pct = 101),
            ("write_drain_low_pct", |c| c.write_drain_low_pct = 80),
            ("read_energy_nj", |c| c.read_energy_nj = -0.1),
            ("write_energy_nj", |c| c.write_energy_nj = -2.0),
        ];
        for (name, break_it) in cases {
            let mut c = PcmConfig::default();
            break_it(&mut c);
            let e = c.validate("pcm").expect_err(name);
            assert_eq!(e.field, format!("pcm.{name}"));
            assert_eq!(c.validate("").unwrap_err().field, name);
        }
    }

    #[test]
    fn config_spellings_round_trip_through_toml() {
        let text = "drain_policy = \"eager\"\naddress_mapping = \"page-interleave\"\nadr = false\n";
        let mut tree = secmem_core::schema::default_tree::<PcmConfig>();
        let layer = secmem_core::schema::parse_layer(text, "test").unwrap();
        secmem_core::schema::merge_layer(&mut tree, &layer, "").unwrap();
        let c: PcmConfig = secmem_core::schema::finish(tree).unwrap();
        assert_eq!((c.drain_policy, c.address_mapping, c.adr), (DrainPolicy::Eager, AddressMapping::PageInterleave, false));
        assert_eq!(c.write_queue_entries, 128);
    }

    #[test]
    fn stats_since_subtracts_every_counter() {
        let mut d = default_dev();
        d.access(rd(0, 0));
        d.access(wr(64, 0));
        d.access(wr(64, 1));
        let start = d.stats().clone();
        d.access(rd(64, 2)); // forwarded
        d.access(rd(128 * 64, 3));
        d.drain(Cycle(10));
        let delta = d.stats().since(&start);
        assert_eq!((delta.reads(), delta.writes(), delta.wpq_read_hits), (2, 0, 1));
        assert_eq!((delta.array_reads, delta.array_writes, delta.wpq_coalesced), (1, 1, 0));
        assert!((delta.energy_nj - (5.5 + 531.8)).abs() < 1e-9);
        assert_eq!(d.stats().since(d.stats()), MediaStats::default());
    }

    proptest! {
        #[test]
        fn bus_bookings_never_overlap_and_take_the_earliest_free_window(
            small_window in any::<bool>(),
            len in 1u64..80,
            reqs in prop::collection::vec((0u64..60, 0u64..200), 1..200),
        ) {
            // A 4-word (256-cycle) window exercises wrap-around and the horizon.
            let mut cal = BusCalendar::new(if small_window { 4 } else { BUS_WINDOW_WORDS });
            let mut booked: Vec<(u64, u64)> = Vec::new();
            let mut now = 0;
            for (dt, ahead) in reqs {
                now += dt;
                cal.prune(now);
                let ready = now + ahead;
                let s = cal.book(ready, len);
                prop_assert!(s >= ready);
                let free_at = |x: u64| booked.iter().all(|&(a, b)| x + len <= a || x >= b);
                // Earliest: no free window in [ready, s) (bookings before `now` are history).
                prop_assert!((ready..s).all(|x| !free_at(x)));
                if s + len <= cal.window_end() {
                    prop_assert!(free_at(s), "[{}, {}) overlaps a booking", s, s + len);
                    booked.push((s, s + len));
                } else {
                    prop_assert!(small_window);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn read_queue_admits_a_read_when_an_entry_is_free_else_when_the_first_returns(
            entries in 1usize..40,
            ops in prop::collection::vec((0u64..50, 1u64..2000), 1..400),
        ) {
            let mut q = ReadQueue::new(entries);
            // Reference: completion cycles of the reads in flight.
            let mut in_flight: Vec<u64> = Vec::new();
            let mut t = 0;
            for (dt, latency) in ops {
                t += dt;
                in_flight.retain(|&d| d > t);
                let expected = if in_flight.len() < entries {
                    t
                } else {
                    let (i, _) = in_flight.iter().enumerate().min_by_key(|&(_, &d)| d).unwrap();
                    in_flight.swap_remove(i)
                };
                let (slot, entered) = q.enter(t);
                prop_assert_eq!(entered, expected);
                prop_assert_eq!(slot.stalled, expected > t);
                prop_assert!(slot.index < entries);
                q.set(slot.index, entered + latency);
                in_flight.push(entered + latency);
            }
        }
    }

    #[test]
    fn bus_calendar_fills_a_gap_before_a_later_booking() {
        let mut cal = BusCalendar::new(BUS_WINDOW_WORDS);
        assert_eq!(cal.book(100, 20), 100);
        assert_eq!(cal.book(130, 20), 130);
        assert_eq!(cal.book(105, 20), 150); // [120,130) is too short
        assert_eq!(cal.book(0, 20), 0);
        assert_eq!(cal.book(60, 10), 60); // spans the word boundary at 64
        assert_eq!(cal.book(62, 10), 70);
        cal.prune(1 << 30);
        assert_eq!(cal.book((1 << 30) + 5, 20), (1 << 30) + 5);
    }

    fn arb_config() -> impl Strategy<Value = PcmConfig> {
        (any::<bool>(), any::<bool>(), any::<bool>(), 1u32..6, 1u32..10).prop_map(|(eager, adr, page, rq, wq)| {
            PcmConfig {
                drain_policy: if eager { DrainPolicy::Eager } else { DrainPolicy::Watermark },
                adr,
                address_mapping: if page { AddressMapping::PageInterleave } else { AddressMapping::LineInterleave },
                read_queue_entries: rq,
                write_queue_entries: wq,
                ..PcmConfig::default()
            }
        })
    }

    proptest! {
        #[test]
        fn completions_respect_issue_and_latency_and_drain_empties_the_wpq(
            cfg in arb_config(),
            ops in prop::collection::vec((0u64..300, any::<bool>(), 0u64..48), 1..300),
        ) {
            let mut d = dev(cfg.clone());
            let mut t = 0;
            for (dt, is_write, l) in ops {
                t += dt;
                // Spread lines over pages too, so page-interleave sees several banks.
                let addr = (l % 6) * 4096 + (l / 6) * 64;
                let hits = d.stats().wpq_read_hits;
                if is_write {
                    let done = d.access(wr(addr, t)).0;
                    prop_assert!(done >= t);
                    if !cfg.adr && d.stats().wpq_coalesced == 0 {
                        prop_assert!(done >= t + BUS + WR);
                    }
                } else {
                    let done = d.access(rd(addr, t)).0;
                    if d.stats().wpq_read_hits > hits {
                        prop_assert_eq!(done, t + BUS);
                    } else {
                        prop_assert!(done >= t + RD + BUS);
                    }
                }
                prop_assert!(d.wpq_occupancy() <= cfg.write_queue_entries as usize);
            }
            let end = d.drain(Cycle(t)).0;
            prop_assert!(end >= t);
            prop_assert_eq!(d.pending_writes(), 0);
            let s = d.stats();
            prop_assert_eq!(s.array_writes + s.wpq_coalesced, s.writes());
            prop_assert_eq!(s.array_reads + s.wpq_read_hits, s.reads());
        }
    }

    // ---- Differential tests: the model against `reference`, the implementation before the
    // per-access cost work. Every returned cycle, every stat and the queue contents must match.

    /// One step of a request stream: a signed issue-time step, an operation selector and an
    /// address.
    type Step = (i64, u8, u64);
    /// Selector values below this are reads, below `DIFF_DRAIN` writes, the rest `drain()`.
    const DIFF_WRITE: u8 = 55;
    const DIFF_DRAIN: u8 = 99;

    fn diff_config() -> impl Strategy<Value = PcmConfig> {
        let policy = (any::<bool>(), any::<bool>(), any::<bool>());
        let queues = (prop_oneof![1u32..6, Just(64u32)], prop_oneof![1u32..10, Just(128u32)], 1u32..=100, 0u32..100);
        let geometry = (0u32..3, 0u32..4);
        // Latencies in ns at 4 GHz: a 1-cycle burst, bursts within a word, exactly one word,
        // and more than one word; long and tiny array latencies.
        let timing = (
            prop::sample::select(vec![5.0, 0.25, 3.0, 16.0, 20.0, 40.0]),
            prop::sample::select(vec![150.0, 0.25, 30.0]),
            prop::sample::select(vec![500.0, 0.5, 100.0]),
        );
        (policy, queues, geometry, timing).prop_map(|((eager, adr, page), (rq, wq, high, low), (ch, banks), (bus, rd, wr))| {
            PcmConfig {
                drain_policy: if eager { DrainPolicy::Eager } else { DrainPolicy::Watermark },
                adr,
                address_mapping: if page { AddressMapping::PageInterleave } else { AddressMapping::LineInterleave },
                read_queue_entries: rq,
                write_queue_entries: wq,
                write_drain_high_pct: high,
                write_drain_low_pct: low % high,
                channels: 1 << ch,
                banks_per_channel: 1 << banks,
                bus_transfer_ns: bus,
                read_latency_ns: rd,
                write_latency_ns: wr,
                ..PcmConfig::default()
            }
        })
    }

    fn diff_steps(max_len: usize) -> impl Strategy<Value = Vec<Step>> {
        let dt = prop_oneof![
            6 => 0i64..64,
            4 => 0i64..600,
            2 => -4000i64..0, // the controller issues slightly out of order
            1 => 0i64..5000,
            1 => 1_000_000i64..3_000_000, // past the whole bus window
        ];
        let lines = 32u64 << 24; // 32 GiB of 64 B lines
        let addr = prop_oneof![
            // A few lines over a few pages: WPQ hits, coalescing, bank and bus conflicts.
            3 => (0u64..48).prop_map(|l| (l % 6) * 4096 + (l / 6) * 64),
            1 => (0u64..4).prop_map(|l| l * 64 * 16),
            2 => (0..lines).prop_map(|l| l * 64),
        ];
        prop::collection::vec((dt, 0u8..100, addr), 1..max_len)
    }

    /// Drives the model and the reference with the same steps; compares every result.
    fn check_against_reference(cfg: &PcmConfig, steps: &[Step]) -> Result<(), TestCaseError> {
        let mut new = PcmMedia::new(cfg, MHZ);
        let mut old = reference::PcmMedia::new(cfg, MHZ);
        let mut t = 0u64;
        for (i, &(dt, op, addr)) in steps.iter().enumerate() {
            t = t.saturating_add_signed(dt);
            if op >= DIFF_DRAIN {
                prop_assert_eq!(new.drain(Cycle(t)), old.drain(Cycle(t)), "drain at step {}", i);
                continue;
            }
            let req = if op < DIFF_WRITE { rd(addr, t) } else { wr(addr, t) };
            prop_assert_eq!(new.access(req), old.access(req), "step {}: {:?}", i, req);
        }
        prop_assert_eq!(new.stats(), old.stats());
        prop_assert_eq!(new.pending_writes(), old.pending_writes());
        prop_assert_eq!(new.wpq_occupancy(), old.wpq_occupancy());
        prop_assert_eq!(new.drain(Cycle(t)), old.drain(Cycle(t)), "final drain");
        prop_assert_eq!(new.stats(), old.stats());
        prop_assert_eq!(new.pending_writes(), old.pending_writes());
        prop_assert_eq!(new.wpq_occupancy(), old.wpq_occupancy());
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn every_cycle_and_stat_matches_the_reference_model(cfg in diff_config(), steps in diff_steps(400)) {
            check_against_reference(&cfg, &steps)?;
        }

        #[test]
        fn default_device_matches_the_reference_model(eager in any::<bool>(), adr in any::<bool>(), steps in diff_steps(600)) {
            let cfg = PcmConfig {
                drain_policy: if eager { DrainPolicy::Eager } else { DrainPolicy::Watermark },
                adr,
                ..PcmConfig::default()
            };
            check_against_reference(&cfg, &steps)?;
        }

        #[test]
        fn bus_calendar_matches_the_reference_calendar(
            small_window in any::<bool>(),
            len in prop_oneof![1u64..80, 60u64..300],
            reqs in prop::collection::vec((0u64..100, 0u64..600, any::<bool>()), 1..300),
        ) {
            let words = if small_window { 4 } else { BUS_WINDOW_WORDS };
            let mut cal = BusCalendar::new(words);
            let mut old = reference::BusCalendar::new(words);
            let mut now = 0u64;
            for (dt, ahead, behind) in reqs {
                now += dt;
                cal.prune(now);
                old.prune(now);
                // Sometimes ask for a cycle before the window start (a read issued out of order).
                let ready = if behind { now.saturating_sub(ahead) } else { now + ahead };
                prop_assert_eq!(cal.book(ready, len), old.book(ready, len), "ready {} len {}", ready, len);
                prop_assert_eq!(cal.window_end(), old.window_end());
            }
        }

        #[test]
        fn read_queue_matches_the_reference_queue(
            entries in 1usize..40,
            ops in prop::collection::vec((-300i64..60, 1u64..2000), 1..400),
        ) {
            let mut q = ReadQueue::new(entries);
            let mut old = reference::ReadQueue::new(entries);
            let mut t = 0u64;
            for (dt, latency) in ops {
                t = t.saturating_add_signed(dt);
                let (slot, entered) = q.enter(t);
                let (old_slot, old_entered) = old.enter(t);
                prop_assert_eq!((slot.index, slot.stalled, entered), (old_slot.index, old_slot.stalled, old_entered));
                q.set(slot.index, entered + latency);
                old.set(old_slot.index, old_entered + latency);
            }
        }
    }

    /// Long streams shaped like `examples/pcm_speed.rs` (random lines, 70 % reads), light and
    /// saturated, with out-of-order jitter: they run the WPQ and the read queue full for long
    /// stretches and push bank and bus bookings far past the bus window, which short
    /// proptest cases rarely reach.
    #[test]
    fn long_random_streams_match_the_reference_model() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        for eager in [false, true] {
            for adr in [true, false] {
                for page in [false, true] {
                    for gap in [128u64, 8] {
                        let cfg = PcmConfig {
                            drain_policy: if eager { DrainPolicy::Eager } else { DrainPolicy::Watermark },
                            adr,
                            address_mapping: if page { AddressMapping::PageInterleave } else { AddressMapping::LineInterleave },
                            ..PcmConfig::default()
                        };
                        let lines = 32u64 << 24;
                        let steps: Vec<Step> = (0..40_000)
                            .map(|_| {
                                let r = next();
                                let dt = if (r >> 4) % 16 == 0 { -((r >> 40) as i64 % 3000) } else { (r & (2 * gap - 1)) as i64 };
                                let op = if (r >> 8) % 10 < 7 { 0 } else { DIFF_WRITE };
                                // One access in 8 goes to a small hot set, so the WPQ forwards and coalesces.
                                let line = if (r >> 12) % 8 == 0 { (r >> 20) % 64 } else { (r >> 20) & (lines - 1) };
                                (dt, op, line * 64)
                            })
                            .collect();
                        if let Err(e) = check_against_reference(&cfg, &steps) {
                            panic!("eager {eager} adr {adr} page {page} gap {gap}: {e}");
                        }
                    }
                }
            }
        }
    }
}
