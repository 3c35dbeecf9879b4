//! The `enc-int` stack's own work in time: dm-integrity's commit and writer workers and its
//! metadata buffer reads, issued as NVMe commands through [`Host`] on the cores in turn (the
//! kernel's workqueues), over the state of `dm_integrity`.

use super::dm_integrity::{BufferCache, Journal, Layout, SECTOR_BYTES};
use super::host::{Host, Owner};
use crate::run::SimError;
use std::collections::{HashMap, VecDeque};

/// Who waits for a metadata buffer being read.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Waiter { App(usize), Writer }

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Phase { Runs, WaitMeta, Drain, Flush }

struct Writer {
    sections: u32,
    runs: Vec<(u64, u64, u32)>,
    next_run: usize,
    tags: VecDeque<(u64, (u32, u32))>,
    outstanding: u32,
    phase: Phase,
}

/// Counters of the stack's work, for the report.
#[derive(Default, Clone, Debug)]
pub struct IntegrityStats {
    pub commits: u64,
    pub journal_sectors_written: u64,
    pub writeback_sectors: u64,
    pub writer_rounds: u64,
    pub buffer_hits: u64,
    pub buffer_misses: u64,
    pub buffer_bytes_written: u64,
    pub reads_from_journal: u64,
    pub writes_waited_for_journal: u64,
}

pub struct EncInt {
    pub layout: Layout,
    pub journal: Journal,
    cache: BufferCache,
    commit_outstanding: u32,
    commit_running: bool,
    commit_queued: bool,
    writer: Option<Writer>,
    writer_queued: bool,
    pub autocommit_pending: bool,
    /// Writes waiting for free journal entries, in arrival order: (slot, first sector, sectors).
    pub journal_waiters: VecDeque<(usize, u64, u64)>,
    /// Buffers being read, and who waits for each.
    meta_waiters: HashMap<u64, (u32, Vec<Waiter>)>,
    journal_base_line: u64,
    bufio_base_line: u64,
    next_core: u32,
    cores: u32,
    pub stats: IntegrityStats,
}

impl EncInt {
    /// The stack over `layout`, with `cache_buffers` metadata buffers; the journal's memory
    /// and the buffers start at host line `base_line` (the host bytes they take: see
    /// [`EncInt::host_bytes`]).
    pub fn new(layout: Layout, watermark_percent: u32, cache_buffers: usize, base_line: u64, cores: u32) -> EncInt {
        let journal = Journal::new(&layout, watermark_percent);
        let buffer_bytes = (layout.buffer_sectors * SECTOR_BYTES) as u32;
        let journal_lines = layout.initial_sectors * SECTOR_BYTES / 64;
        EncInt {
            journal,
            cache: BufferCache::new(cache_buffers, buffer_bytes),
            commit_outstanding: 0,
            commit_running: false,
            commit_queued: false,
            writer: None,
            writer_queued: false,
            autocommit_pending: false,
            journal_waiters: VecDeque::new(),
            meta_waiters: HashMap::new(),
            journal_base_line: base_line,
            bufio_base_line: base_line + journal_lines,
            next_core: 0,
            cores,
            stats: IntegrityStats::default(),
            layout,
        }
    }

    /// Host memory for the journal and `cache_buffers` metadata buffers, bytes.
    pub fn host_bytes(layout: &Layout, cache_buffers: u64) -> u64 { (layout.initial_sectors + cache_buffers * layout.buffer_sectors) * SECTOR_BYTES }

    /// The host line holding device sector `sector` of the journal area.
    fn journal_line(&self, sector: u64) -> u64 { self.journal_base_line + sector * SECTOR_BYTES / 64 }

    fn buffer_line(&self, slot: u32) -> u64 { self.bufio_base_line + u64::from(slot) * self.layout.buffer_sectors * SECTOR_BYTES / 64 }

    /// The core the next piece of the kernel's work runs on (the workqueues' workers, in turn).
    fn worker(&mut self) -> u32 {
        self.next_core = (self.next_core + 1) % self.cores;
        self.next_core
    }

    /// Looks up the metadata buffers of `n` sectors from `logical` for a read by `slot`;
    /// how many it must wait for (each read or being read).
    pub fn read_tags(&mut self, host: &mut Host, slot: usize, logical: u64, n: u64, core: u32, at: u64) -> Result<u32, SimError> {
        let mut waits = 0;
        for (b, _) in self.layout.tag_ranges(logical, n) {
            if self.lookup(host, b, None, Waiter::App(slot), core, at)? {
                waits += 1;
            }
        }
        Ok(waits)
    }

    /// One buffer access; true when `who` must wait for the buffer's read.
    fn lookup(&mut self, host: &mut Host, b: u64, dirty: Option<(u32, u32)>, who: Waiter, core: u32, at: u64) -> Result<bool, SimError> {
        let a = self.cache.access(b, dirty);
        if let Some((victim, slot, (from, to))) = a.evicted_dirty {
            let off = self.layout.buffer_sector(victim) * SECTOR_BYTES + u64::from(from);
            host.issue_split(Owner::EvictWrite, true, off, u64::from(to - from), self.buffer_line(slot) + u64::from(from) / 64, core, at)?;
            self.stats.buffer_bytes_written += u64::from(to - from);
        }
        if a.hit {
            self.stats.buffer_hits += 1;
            if let Some((_, w)) = self.meta_waiters.get_mut(&b) {
                w.push(who);
                return Ok(true);
            }
            return Ok(false);
        }
        self.stats.buffer_misses += 1;
        let bytes = self.layout.buffer_sectors * SECTOR_BYTES;
        let k = host.issue_split(Owner::MetaRead(b), false, self.layout.buffer_sector(b) * SECTOR_BYTES, bytes, self.buffer_line(a.slot), core, at)?;
        self.meta_waiters.insert(b, (k, vec![who]));
        Ok(true)
    }

    /// One command of buffer `b`'s read is done: who waited for the buffer, once its last is.
    pub fn buffer_read(&mut self, b: u64) -> Vec<Waiter> {
        let Some((left, _)) = self.meta_waiters.get_mut(&b) else { return Vec::new() };
        *left -= 1;
        if *left > 0 {
            return Vec::new();
        }
        self.meta_waiters.remove(&b).map(|(_, w)| w).unwrap_or_default()
    }

    /// A write's sectors are in the journal: queue a commit when the journal is at or below
    /// its watermark, or arm the commit timer.
    pub fn written(&mut self, host: &mut Host, at: u64, commit_cycles: u64) -> Result<(), SimError> {
        if self.journal.below_watermark() {
            self.start_commit(host, at)
        } else {
            if !self.autocommit_pending {
                self.autocommit_pending = true;
                host.push(at + commit_cycles, super::host::Ev::Autocommit);
            }
            Ok(())
        }
    }

    /// The commit worker: writes every uncommitted section (padding the open one) to the
    /// journal area; one commit at a time, a request while one runs is kept for after it.
    pub fn start_commit(&mut self, host: &mut Host, at: u64) -> Result<(), SimError> {
        if self.commit_running {
            self.commit_queued = true;
            return Ok(());
        }
        let Some((first, n)) = self.journal.begin_commit() else { return Ok(()) };
        let core = self.worker();
        let sections = self.layout.journal_sections;
        let mut segments = vec![(first, n.min(sections - first))];
        if first + n > sections {
            segments.push((0, first + n - sections));
        }
        self.commit_outstanding = 0;
        for (s, k) in segments {
            let sector = self.layout.journal_sector(s);
            let sectors = u64::from(k) * u64::from(self.layout.section_sectors);
            self.commit_outstanding += host.issue_split(Owner::Commit, true, sector * SECTOR_BYTES, sectors * SECTOR_BYTES, self.journal_line(sector), core, at)?;
            self.stats.journal_sectors_written += sectors;
        }
        self.stats.commits += 1;
        self.commit_running = true;
        Ok(())
    }

    /// A flush (an application's fsync): every write so far must be in a committed journal
    /// section, as dm-integrity commits on REQ_PREFLUSH. Starts a commit if one is needed and
    /// none runs; true while the flush must still wait.
    pub fn flush(&mut self, host: &mut Host, at: u64) -> Result<bool, SimError> {
        if !self.journal.commit_pending() {
            return Ok(false);
        }
        if !self.commit_running {
            self.start_commit(host, at)?;
        }
        Ok(true)
    }

    /// One of the commit's journal writes is done.
    pub fn commit_write_done(&mut self, host: &mut Host, at: u64) -> Result<(), SimError> {
        self.commit_outstanding -= 1;
        if self.commit_outstanding > 0 {
            return Ok(());
        }
        self.journal.end_commit();
        self.commit_running = false;
        if self.journal.below_watermark() {
            self.kick_writer(host, at)?;
        }
        if std::mem::take(&mut self.commit_queued) {
            self.start_commit(host, at)?;
        }
        Ok(())
    }

    /// The writer worker: copies the committed sections to their places; one round at a time.
    fn kick_writer(&mut self, host: &mut Host, at: u64) -> Result<(), SimError> {
        if self.writer.is_some() {
            self.writer_queued = true;
            return Ok(());
        }
        let (first, n) = self.journal.committed();
        if n == 0 {
            return Ok(());
        }
        let runs = self.journal.writeback_runs(first, n, &self.layout);
        self.stats.writer_rounds += 1;
        self.writer = Some(Writer { sections: n, runs, next_run: 0, tags: VecDeque::new(), outstanding: 0, phase: Phase::Runs });
        self.advance_writer(host, at)
    }

    /// Moves the writer on as far as it can go without waiting.
    pub fn advance_writer(&mut self, host: &mut Host, at: u64) -> Result<(), SimError> {
        loop {
            let Some(w) = self.writer.as_mut() else { return Ok(()) };
            match w.phase {
                Phase::WaitMeta => return Ok(()),
                Phase::Runs => {
                    if let Some((b, range)) = w.tags.pop_front() {
                        // A tag update reads its buffer first when it is not cached.
                        let core = self.worker();
                        if self.lookup(host, b, Some(range), Waiter::Writer, core, at)? {
                            self.writer.as_mut().expect("running").phase = Phase::WaitMeta;
                            return Ok(());
                        }
                        continue;
                    }
                    if w.next_run < w.runs.len() {
                        let (logical, n, pos) = w.runs[w.next_run];
                        w.next_run += 1;
                        // The entry's data sector: after its section's 8 sectors of entries.
                        let se = self.layout.section_entries;
                        let src = self.layout.journal_sector(pos / se) + 8 + u64::from(pos % se);
                        let tags = self.layout.tag_ranges(logical, n);
                        let dst = self.layout.data_sector(logical) * SECTOR_BYTES;
                        let core = self.worker();
                        let line = self.journal_line(src);
                        let k = host.issue_split(Owner::WriterData, true, dst, n * SECTOR_BYTES, line, core, at)?;
                        self.stats.writeback_sectors += n;
                        let w = self.writer.as_mut().expect("running");
                        w.outstanding += k;
                        w.tags.extend(tags);
                        continue;
                    }
                    w.phase = Phase::Drain;
                }
                Phase::Drain => {
                    if w.outstanding > 0 {
                        return Ok(());
                    }
                    // Write back every dirty buffer, then the sections are free.
                    let dirty = self.cache.take_dirty();
                    let core = self.worker();
                    let mut k = 0;
                    for (b, slot, (from, to)) in dirty {
                        let off = self.layout.buffer_sector(b) * SECTOR_BYTES + u64::from(from);
                        k += host.issue_split(Owner::MetaWrite, true, off, u64::from(to - from), self.buffer_line(slot) + u64::from(from) / 64, core, at)?;
                        self.stats.buffer_bytes_written += u64::from(to - from);
                    }
                    let w = self.writer.as_mut().expect("running");
                    w.outstanding = k;
                    w.phase = Phase::Flush;
                }
                Phase::Flush => {
                    if w.outstanding > 0 {
                        return Ok(());
                    }
                    let sections = w.sections;
                    self.writer = None;
                    self.journal.release(sections);
                    return self.after_release(host, at);
                }
            }
        }
    }

    /// Sections were freed: waiting writes take entries, and the writer runs again if the
    /// journal still asks for it.
    fn after_release(&mut self, host: &mut Host, at: u64) -> Result<(), SimError> {
        if std::mem::take(&mut self.writer_queued) || (self.journal.committed().1 > 0 && self.journal.below_watermark()) {
            self.kick_writer(host, at)?;
        }
        Ok(())
    }

    /// A writer's command (data copy or buffer write) is done.
    pub fn writer_command_done(&mut self, host: &mut Host, at: u64) -> Result<(), SimError> {
        if let Some(w) = self.writer.as_mut() {
            w.outstanding -= 1;
        }
        self.advance_writer(host, at)
    }

    /// The writer's wait for a buffer is over.
    pub fn writer_buffer_ready(&mut self, host: &mut Host, at: u64) -> Result<(), SimError> {
        if let Some(w) = self.writer.as_mut() {
            w.phase = Phase::Runs;
        }
        self.advance_writer(host, at)
    }
}
