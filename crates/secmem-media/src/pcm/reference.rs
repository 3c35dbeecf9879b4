//! The PCM model exactly as it was before the per-access cost work, copied verbatim from
//! `pcm.rs` (only the imports and the visibility of the items the tests use were adjusted).
//! It is the oracle of the differential tests in `pcm.rs`: the optimised model must return the
//! same cycle for every access and end with the same stats and queue contents, for every
//! request sequence. Do not optimise or "fix" this file; change it only together with a
//! deliberate change of the model's behaviour.

#![allow(dead_code)]

use super::{AddressMapping, DrainPolicy, PcmConfig, PcmStats};
use crate::{AccessKind, MediaStats, MemRequest, MemoryPort};
use rustc_hash::FxHashMap;
use secmem_core::addr::{LINE_SHIFT, PAGE_SHIFT};
use secmem_core::Cycle;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// One channel's data bus as a bitmap of booked cycles over a sliding window that starts at
/// the last pruning point (half a window before the latest request's issue cycle, rounded
/// down to 64). Booking is
/// O(1) in the common case: check the `len` bits at `ready`, else jump past the last booked
/// cycle found and check again. Being a calendar rather than a single `free_at`, it lets a
/// burst fill a gap before a burst booked earlier for a later cycle.
///
/// Bookings further ahead than the window (2^20 cycles, 262 µs at 4 GHz) are not recorded:
/// the WPQ and read-queue bounds keep closed-loop callers far inside it, so only open-loop
/// callers that ignore returned cycles can get there, and then banks, not the bus, are the
/// bottleneck anyway.
#[derive(Clone, Debug)]
pub(super) struct BusCalendar {
    /// Ring of `words.len()` (a power of two) words; bit `c & 63` of word `(c >> 6) % len`
    /// is cycle `c`, for `base <= c < base + 64 * len`.
    words: Vec<u64>,
    base: u64,
}

pub(super) const BUS_WINDOW_WORDS: usize = 1 << 14;

/// Bits `lo..hi` of a word, `lo < hi <= 64`.
#[inline]
fn bit_range(lo: u64, hi: u64) -> u64 {
    let upper = if hi >= 64 { u64::MAX } else { (1u64 << hi) - 1 };
    upper & !((1u64 << lo) - 1)
}

impl BusCalendar {
    pub(super) fn new(window_words: usize) -> BusCalendar {
        debug_assert!(window_words.is_power_of_two());
        BusCalendar { words: vec![0; window_words], base: 0 }
    }

    #[inline]
    pub(super) fn window_end(&self) -> u64 { self.base + 64 * self.words.len() as u64 }

    /// Forgets cycles before `now`: no later request can be ready before `now`.
    #[inline]
    pub(super) fn prune(&mut self, now: u64) {
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
    pub(super) fn book(&mut self, ready: u64, len: u64) -> u64 {
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
pub(super) struct ReadQueue {
    /// Padded to whole groups with `u64::MAX` (never free, never earliest).
    done: Vec<u64>,
    group_min: Vec<u64>,
    entries: usize,
    cursor: usize,
}

const RQ_GROUP: usize = 8;
const RQ_PROBES: usize = 4;

#[derive(Copy, Clone, Debug)]
pub(super) struct RqSlot {
    pub(super) index: usize,
    pub(super) stalled: bool,
}

impl ReadQueue {
    pub(super) fn new(entries: usize) -> ReadQueue {
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
    pub(super) fn enter(&mut self, t: u64) -> (RqSlot, u64) {
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
    pub(super) fn set(&mut self, index: usize, done: u64) {
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
    /// Row interleave: lines of a row in one channel, between the channel and bank bits.
    column_bits: u32,
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
    stats: PcmStats,
}

impl PcmMedia {
    /// Builds the device; `cfg` should have passed [`PcmConfig::validate`]. Nanosecond
    /// parameters are converted to cycles of `cpu_freq_mhz` here, once.
    pub fn new(cfg: &PcmConfig, cpu_freq_mhz: u64, capacity_bytes: u64) -> PcmMedia {
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
            capacity_bytes,
            read_lat: cyc(cfg.read_latency_ns),
            write_lat: cyc(cfg.write_latency_ns),
            bus_xfer: cyc(cfg.bus_transfer_ns),
            ch_bits: channels.trailing_zeros(),
            ch_mask: channels as u64 - 1,
            bank_mask: banks as u64 - 1,
            banks_per_channel: banks as usize,
            page_interleave: cfg.address_mapping == AddressMapping::PageInterleave,
            column_bits: if cfg.address_mapping == AddressMapping::RowInterleave { cfg.row_lines_log2() } else { 0 },
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
            stats: PcmStats::default(),
        }
    }

    pub fn config(&self) -> &PcmConfig { &self.cfg }

    /// `(channel, bank within channel)` of a device byte address.
    #[inline]
    pub fn map(&self, addr: u64) -> (u32, u32) {
        let unit = if self.page_interleave { addr >> PAGE_SHIFT } else { addr >> LINE_SHIFT };
        ((unit & self.ch_mask) as u32, ((unit >> (self.ch_bits + self.column_bits)) & self.bank_mask) as u32)
    }

    #[inline]
    fn bank_index(&self, line: u64) -> (usize, usize) {
        let (ch, bank) = self.map(line << LINE_SHIFT);
        (ch as usize, ch as usize * self.banks_per_channel + bank as usize)
    }

    /// Writes accepted into the WPQ and not yet issued to a bank.
    pub fn pending_writes(&self) -> usize { self.wpq_queued.len() }
    pub fn pcm_stats(&self) -> &PcmStats { &self.stats }

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
        // Deliberate model change (2026-11-22): keep half the window behind the latest issue,
        // so that requests arriving out of issue order still book the bus.
        for bus in &mut self.bus {
            bus.prune(req.issue.0.saturating_sub(64 * BUS_WINDOW_WORDS as u64 / 2));
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

    fn stats(&self) -> MediaStats { self.stats.to_media() }
}

