//! dm-integrity in journal mode (Linux `drivers/md/dm-integrity.c`), the integrity half of the
//! `enc-int` storage stack: its on-disk format, its journal and its metadata buffer cache
//! (dm-bufio). This module decides which sectors are read and written where; `io/mod.rs` times
//! them as NVMe commands.
//!
//! **Format** (interleaved metadata, one 512 B sector per integrity block, as `integritysetup
//! format` lays it out by default): an 8-sector superblock, then the journal, then areas of
//! `interleave_sectors` data sectors each preceded by their tags (`tag_bytes` per sector,
//! padded to 128 KiB). The journal is `journal_sections` sections; a section is 8 sectors of
//! journal entries (logical sector, the data sector's last 8 bytes, the tag; rounded up to 8
//! bytes; 504 usable bytes a sector) followed by one data sector per entry.
//!
//! **Journal mode**: a write's sectors and tags are copied into the in-memory journal and the
//! write completes. When free journal entries fall to `journal_watermark`% or below, each write
//! queues a commit: the partly filled section is padded and every uncommitted section is
//! written to the journal area. After a commit that leaves the journal at or below the
//! watermark, the writer copies the committed sections to their data sectors (a run of
//! consecutive sectors is one write), updates their tags in the metadata buffers (a buffer not
//! cached is read first), writes the dirty buffers back, and frees the sections. A write that
//! finds no free entry waits for the writer. A read of a sector still in the journal is served
//! from memory; otherwise the data is read, then its tags (from the buffer cache, or a buffer
//! read), then verified.

use std::collections::{BTreeMap, HashMap};

pub const SECTOR_BYTES: u64 = 512;
const SB_SECTORS: u64 = 8;
const JOURNAL_BLOCK_SECTORS: u64 = 8;
/// A journal sector's bytes for entries: its last 8 hold the commit id.
const JOURNAL_SECTOR_DATA: u64 = SECTOR_BYTES - 8;
const DEFAULT_MAX_JOURNAL_SECTORS: u64 = 131_072;
/// The default journal is the device's size >> this, at most 64 MiB.
const JOURNAL_SIZE_FACTOR: u32 = 7;
/// Each area's tags are padded to this many bytes.
const METADATA_PADDING_BYTES: u64 = SECTOR_BYTES << 8;
/// `integritysetup`'s defaults: 16 MiB of data an area, 64 KiB metadata buffers.
pub const DEFAULT_INTERLEAVE_SECTORS: u64 = 32_768;
pub const DEFAULT_BUFFER_SECTORS: u64 = 128;
/// dm-bufio writes a dirty buffer's dirty range rounded out to this alignment.
pub const BUFIO_WRITE_ALIGN: u32 = 4096;

/// Where dm-integrity keeps everything on the device, in 512 B sectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub tag_bytes: u32,
    pub journal_entry_bytes: u32,
    pub section_entries: u32,
    pub section_sectors: u32,
    pub journal_sections: u32,
    /// Superblock and journal: the first data area starts after them.
    pub initial_sectors: u64,
    pub interleave_sectors: u64,
    /// Tag sectors before each area's data.
    pub metadata_run_sectors: u64,
    /// Sectors of one metadata buffer (dm-bufio block).
    pub buffer_sectors: u64,
    /// The logical sectors the device offers above it.
    pub provided_data_sectors: u64,
}

impl Layout {
    /// Formats a device of `device_sectors` as `integritysetup format` does with the given tag
    /// size, interleave and buffer size (kernel defaults: 32,768 and 128 sectors).
    pub fn format(device_sectors: u64, tag_bytes: u32, interleave_sectors: u64, buffer_sectors: u64) -> Result<Layout, String> {
        let entry = (16 + u64::from(tag_bytes)).div_ceil(8) * 8; // sector number + last bytes + tag
        if entry > JOURNAL_SECTOR_DATA - 8 {
            return Err(format!("a {tag_bytes}-byte tag does not fit a journal entry (at most {} bytes)", JOURNAL_SECTOR_DATA - 24));
        }
        if !interleave_sectors.is_power_of_two() || !buffer_sectors.is_power_of_two() || buffer_sectors < 8 {
            return Err("the interleave and the buffer size must be powers of two, the buffer at least 8 sectors".into());
        }
        let section_entries = (JOURNAL_SECTOR_DATA / entry) * JOURNAL_BLOCK_SECTORS;
        let section_sectors = section_entries + JOURNAL_BLOCK_SECTORS;
        let journal_sectors = DEFAULT_MAX_JOURNAL_SECTORS.min(device_sectors >> JOURNAL_SIZE_FACTOR);
        let journal_sections = (journal_sectors / section_sectors).max(1);
        let initial_sectors = SB_SECTORS + journal_sections * section_sectors;
        let metadata_run_sectors = (u64::from(tag_bytes) * interleave_sectors).div_ceil(METADATA_PADDING_BYTES) * METADATA_PADDING_BYTES / SECTOR_BYTES;
        if !metadata_run_sectors.is_multiple_of(buffer_sectors) {
            return Err("an area's tags must fill whole metadata buffers".into());
        }
        // Whole areas, then what is left of a last one after its tags.
        let avail = device_sectors.saturating_sub(initial_sectors);
        let area = interleave_sectors + metadata_run_sectors;
        let provided_data_sectors = avail / area * interleave_sectors + (avail % area).saturating_sub(metadata_run_sectors);
        if provided_data_sectors == 0 {
            return Err(format!("a device of {device_sectors} sectors has no room for data after the journal and tags"));
        }
        Ok(Layout {
            tag_bytes,
            journal_entry_bytes: entry as u32,
            section_entries: section_entries as u32,
            section_sectors: section_sectors as u32,
            journal_sections: journal_sections as u32,
            initial_sectors,
            interleave_sectors,
            metadata_run_sectors,
            buffer_sectors,
            provided_data_sectors,
        })
    }

    /// The device sector holding logical sector `logical`.
    pub fn data_sector(&self, logical: u64) -> u64 {
        let (area, off) = (logical / self.interleave_sectors, logical % self.interleave_sectors);
        self.initial_sectors + area * self.interleave_sectors + (area + 1) * self.metadata_run_sectors + off
    }

    /// Logical sectors `logical` and `logical + 1` are in the same area (one device write).
    pub fn same_area(&self, a: u64, b: u64) -> bool { a / self.interleave_sectors == b / self.interleave_sectors }

    fn buffer_bytes(&self) -> u64 { self.buffer_sectors * SECTOR_BYTES }

    /// The metadata buffer holding the tag of `logical`, and the tag's byte offset in it.
    pub fn tag_position(&self, logical: u64) -> (u64, u32) {
        let (area, off) = (logical / self.interleave_sectors, logical % self.interleave_sectors);
        let byte = area * (self.interleave_sectors + self.metadata_run_sectors) * SECTOR_BYTES + off * u64::from(self.tag_bytes);
        (byte / self.buffer_bytes(), (byte % self.buffer_bytes()) as u32)
    }

    /// The metadata buffers, with the byte range in each, holding the tags of `n` sectors from
    /// `logical`.
    pub fn tag_ranges(&self, logical: u64, n: u64) -> Vec<(u64, (u32, u32))> {
        let mut out: Vec<(u64, (u32, u32))> = Vec::new();
        for s in logical..logical + n {
            let (b, at) = self.tag_position(s);
            let end = at + self.tag_bytes;
            match out.last_mut() {
                Some((lb, r)) if *lb == b => r.1 = end,
                _ => out.push((b, (at, end))),
            }
        }
        out
    }

    /// The device sector where metadata buffer `buffer` starts.
    pub fn buffer_sector(&self, buffer: u64) -> u64 { self.initial_sectors + buffer * self.buffer_sectors }

    /// The device sector where journal section `section` starts.
    pub fn journal_sector(&self, section: u32) -> u64 { SB_SECTORS + u64::from(section) * u64::from(self.section_sectors) }

    /// The device's extent used by logical sectors below `logical_end`: what a preconditioning
    /// pass writes so that every tag and data sector of the I/O space exists.
    pub fn extent_sectors(&self, logical_end: u64) -> u64 {
        if logical_end == 0 {
            return self.initial_sectors;
        }
        self.data_sector(logical_end - 1) + 1
    }
}

const UNUSED: u64 = u64::MAX;

/// The journal's sections and entries, as dm-integrity tracks them.
pub struct Journal {
    section_entries: u32,
    sections: u32,
    free_entries: u64,
    threshold: u64,
    free_section: u32,
    free_section_entry: u32,
    uncommitted_section: u32,
    n_uncommitted: u32,
    committing: u32,
    committed_section: u32,
    n_committed: u32,
    /// The logical sector of each entry (UNUSED when free or padding).
    entries: Vec<u64>,
    /// The newest entry of each logical sector in the journal.
    newest: HashMap<u64, u32>,
}

impl Journal {
    pub fn new(layout: &Layout, watermark_percent: u32) -> Journal {
        let total = u64::from(layout.journal_sections) * u64::from(layout.section_entries);
        Journal {
            section_entries: layout.section_entries,
            sections: layout.journal_sections,
            free_entries: total,
            threshold: total * u64::from(watermark_percent) / 100,
            free_section: 0,
            free_section_entry: 0,
            uncommitted_section: 0,
            n_uncommitted: 0,
            committing: 0,
            committed_section: 0,
            n_committed: 0,
            entries: vec![UNUSED; total as usize],
            newest: HashMap::new(),
        }
    }

    pub fn free_entries(&self) -> u64 { self.free_entries }

    /// At or below the watermark: each write queues a commit, and a commit the writer.
    pub fn below_watermark(&self) -> bool { self.free_entries <= self.threshold }

    /// Takes journal entries for `n` sectors from `logical`; false when the journal has too few
    /// free (the write waits for the writer).
    pub fn reserve(&mut self, logical: u64, n: u64) -> bool {
        if n > self.free_entries {
            return false;
        }
        self.free_entries -= n;
        let mut pos = self.free_section * self.section_entries + self.free_section_entry;
        for i in 0..n {
            self.entries[pos as usize] = logical + i;
            self.newest.insert(logical + i, pos);
            pos = (pos + 1) % (self.sections * self.section_entries);
        }
        let next = u64::from(self.free_section_entry) + n;
        self.free_section_entry = (next % u64::from(self.section_entries)) as u32;
        let filled = (next / u64::from(self.section_entries)) as u32;
        self.free_section = (self.free_section + filled) % self.sections;
        self.n_uncommitted += filled;
        true
    }

    /// Starts a commit: pads the partly filled section and returns the uncommitted sections
    /// (first, count) to write, or None when there are none.
    pub fn begin_commit(&mut self) -> Option<(u32, u32)> {
        if self.free_section_entry > 0 {
            self.free_entries -= u64::from(self.section_entries - self.free_section_entry);
            self.free_section_entry = 0;
            self.free_section = (self.free_section + 1) % self.sections;
            self.n_uncommitted += 1;
        }
        if self.n_uncommitted == 0 {
            return None;
        }
        let range = (self.uncommitted_section, self.n_uncommitted);
        self.uncommitted_section = (self.uncommitted_section + self.n_uncommitted) % self.sections;
        self.committing = self.n_uncommitted;
        self.n_uncommitted = 0;
        Some(range)
    }

    /// Whether some written entries are not committed yet, or a commit is under way.
    pub fn commit_pending(&self) -> bool { self.free_section_entry > 0 || self.n_uncommitted > 0 || self.committing > 0 }

    /// The commit's journal writes are done: its sections are committed.
    pub fn end_commit(&mut self) {
        self.n_committed += self.committing;
        self.committing = 0;
    }

    /// The committed sections (first, count) the writer copies next.
    pub fn committed(&self) -> (u32, u32) { (self.committed_section, self.n_committed) }

    fn is_committed(&self, pos: u32) -> bool {
        let s = pos / self.section_entries;
        (s + self.sections - self.committed_section) % self.sections < self.n_committed
    }

    /// The runs of consecutive logical sectors the writer copies from `count` committed
    /// sections starting at `first`, each as (logical sector, sectors, first journal entry);
    /// an entry with a newer committed entry for its sector is skipped.
    pub fn writeback_runs(&self, first: u32, count: u32, layout: &Layout) -> Vec<(u64, u64, u32)> {
        let mut runs: Vec<(u64, u64, u32)> = Vec::new();
        for k in 0..count {
            let section = (first + k) % self.sections;
            let mut open = false;
            for j in 0..self.section_entries {
                let pos = section * self.section_entries + j;
                let logical = self.entries[pos as usize];
                let newer = logical != UNUSED && self.newest.get(&logical).is_some_and(|&p| p != pos && self.is_committed(p));
                if logical == UNUSED || newer {
                    open = false;
                    continue;
                }
                match runs.last_mut() {
                    Some((start, n, _)) if open && *start + *n == logical && layout.same_area(*start, logical) => *n += 1,
                    _ => runs.push((logical, 1, pos)),
                }
                open = true;
            }
        }
        runs
    }

    /// The writer is done with `count` committed sections: they are free again.
    pub fn release(&mut self, count: u32) {
        for k in 0..count {
            let section = (self.committed_section + k) % self.sections;
            for j in 0..self.section_entries {
                let pos = section * self.section_entries + j;
                let logical = std::mem::replace(&mut self.entries[pos as usize], UNUSED);
                if logical != UNUSED && self.newest.get(&logical) == Some(&pos) {
                    self.newest.remove(&logical);
                }
            }
        }
        self.committed_section = (self.committed_section + count) % self.sections;
        self.n_committed -= count;
        self.free_entries += u64::from(count) * u64::from(self.section_entries);
    }

    /// Every one of `n` sectors from `logical` is in the journal (a read is served from memory).
    pub fn holds_all(&self, logical: u64, n: u64) -> bool { (logical..logical + n).all(|s| self.newest.contains_key(&s)) }

    /// Entries in use or padding (for the invariant check in tests).
    #[cfg(test)]
    fn accounted(&self) -> u64 {
        u64::from(self.n_uncommitted + self.committing + self.n_committed) * u64::from(self.section_entries)
            + u64::from(self.free_section_entry)
            + self.free_entries
    }
}

/// One access to the metadata buffer cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferAccess {
    pub hit: bool,
    /// The cache slot (its place in host memory).
    pub slot: u32,
    /// A dirty buffer evicted to make room: (buffer, slot, bytes to write from, to).
    pub evicted_dirty: Option<(u64, u32, (u32, u32))>,
}

/// A cached buffer: its slot, its last use, and its dirty byte range.
type Cached = (u32, u64, Option<(u32, u32)>);

/// dm-bufio's cache of metadata buffers: fully associative, least recently used out, a dirty
/// buffer written back (its dirty range, 4 KiB aligned) when evicted or flushed.
pub struct BufferCache {
    capacity: usize,
    map: HashMap<u64, Cached>,
    lru: BTreeMap<u64, u64>,                            // last use -> buffer
    clock: u64,
    free_slots: Vec<u32>,
    buffer_bytes: u32,
}

impl BufferCache {
    pub fn new(capacity_buffers: usize, buffer_bytes: u32) -> BufferCache {
        let capacity = capacity_buffers.max(1);
        BufferCache { capacity, map: HashMap::new(), lru: BTreeMap::new(), clock: 0, free_slots: (0..capacity as u32).rev().collect(), buffer_bytes }
    }

    /// Looks up `buffer`, bringing it in on a miss; `dirty` marks the byte range a tag write
    /// changes.
    pub fn access(&mut self, buffer: u64, dirty: Option<(u32, u32)>) -> BufferAccess {
        self.clock += 1;
        let merge = |old: Option<(u32, u32)>| match (old, dirty) {
            (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
            (o, d) => o.or(d),
        };
        if let Some((slot, used, range)) = self.map.get_mut(&buffer) {
            self.lru.remove(used);
            *used = self.clock;
            *range = merge(*range);
            self.lru.insert(self.clock, buffer);
            return BufferAccess { hit: true, slot: *slot, evicted_dirty: None };
        }
        let mut evicted_dirty = None;
        if self.map.len() == self.capacity {
            let (_, victim) = self.lru.pop_first().expect("a full cache has a least recently used buffer");
            let (slot, _, range) = self.map.remove(&victim).expect("in the LRU order, so cached");
            evicted_dirty = range.map(|r| (victim, slot, self.aligned(r)));
            self.free_slots.push(slot);
        }
        let slot = self.free_slots.pop().expect("a slot was freed above");
        self.map.insert(buffer, (slot, self.clock, merge(None)));
        self.lru.insert(self.clock, buffer);
        BufferAccess { hit: false, slot, evicted_dirty }
    }

    fn aligned(&self, (a, b): (u32, u32)) -> (u32, u32) {
        (a / BUFIO_WRITE_ALIGN * BUFIO_WRITE_ALIGN, b.div_ceil(BUFIO_WRITE_ALIGN).saturating_mul(BUFIO_WRITE_ALIGN).min(self.buffer_bytes))
    }

    /// Every dirty buffer, as (buffer, slot, bytes to write from, to), in buffer order; all are
    /// clean afterwards.
    pub fn take_dirty(&mut self) -> Vec<(u64, u32, (u32, u32))> {
        let mut out: Vec<(u64, u32, (u32, u32))> = Vec::new();
        for (b, (slot, _, range)) in self.map.iter_mut() {
            if let Some(r) = range.take() {
                out.push((*b, *slot, r));
            }
        }
        out.sort_unstable();
        out.into_iter().map(|(b, s, r)| (b, s, self.aligned(r))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout { Layout::format(16 << 21, 32, 32768, 128).unwrap() } // 16 GiB

    #[test]
    fn the_format_matches_dm_integrity_for_hmac_sha256_tags() {
        let l = layout();
        // Entry: 8 (sector) + 8 (last bytes) + 32 (tag) = 48 bytes; 504 / 48 = 10 a sector.
        assert_eq!((l.journal_entry_bytes, l.section_entries, l.section_sectors), (48, 80, 88));
        // Journal: 16 GiB >> 7 = 128 MiB, capped at 64 MiB = 131,072 sectors: 1,489 sections.
        assert_eq!(l.journal_sections, 131_072 / 88);
        assert_eq!(l.initial_sectors, 8 + 1489 * 88);
        // 32 B of tag for each of 32,768 sectors: 1 MiB = 2,048 sectors of tags an area.
        assert_eq!(l.metadata_run_sectors, 2048);
        assert_eq!(l.data_sector(0), l.initial_sectors + 2048);
        assert_eq!(l.data_sector(32768), l.initial_sectors + 32768 + 2 * 2048);
        // Tags of sectors 0..2047 fill buffer 0 (64 KiB); area 1's tags start at buffer 272.
        assert_eq!(l.tag_position(2047), (0, 65504));
        assert_eq!(l.tag_position(2048), (1, 0));
        assert_eq!(l.tag_position(32768), ((32768 + 2048) / 128, 0));
        assert_eq!(l.buffer_sector(1), l.initial_sectors + 128);
        // Tags cost 1/16 of the data space.
        let overhead = 1.0 - l.provided_data_sectors as f64 / (16u64 << 21) as f64;
        assert!((0.058..0.064).contains(&overhead), "{overhead}");
        // CRC32C's 4-byte tags: 24-byte entries, 21 a sector.
        assert_eq!(Layout::format(16 << 21, 4, 32768, 128).unwrap().section_entries, 168);
        assert!(Layout::format(16 << 21, 600, 32768, 128).is_err());
    }

    #[test]
    fn a_commit_pads_the_open_section_and_the_writer_frees_it() {
        let l = layout();
        let mut j = Journal::new(&l, 50);
        let total = j.free_entries();
        assert!(j.reserve(100, 8));
        assert_eq!(j.begin_commit(), Some((0, 1)));
        assert_eq!(j.free_entries(), total - 80, "the rest of the section is padding");
        assert_eq!(j.accounted(), total);
        j.end_commit();
        assert_eq!(j.writeback_runs(0, 1, &l), vec![(100, 8, 0)]);
        assert!(j.holds_all(100, 8) && !j.holds_all(100, 9));
        j.release(1);
        assert_eq!(j.free_entries(), total);
        assert!(!j.holds_all(100, 1));
        assert_eq!(j.begin_commit(), None);
    }

    #[test]
    fn the_writer_skips_sectors_rewritten_later_and_splits_runs_at_areas() {
        let l = layout();
        let mut j = Journal::new(&l, 50);
        assert!(j.reserve(32766, 4)); // crosses into area 1
        assert!(j.reserve(500, 2));
        assert!(j.reserve(500, 1)); // rewrites 500
        assert_eq!(j.begin_commit(), Some((0, 1)));
        j.end_commit();
        assert_eq!(j.writeback_runs(0, 1, &l), vec![(32766, 2, 0), (32768, 2, 2), (501, 1, 5), (500, 1, 6)]);
    }

    #[test]
    fn a_full_journal_refuses_a_write_until_sections_are_freed() {
        let l = Layout::format(1 << 20, 32, 32768, 128).unwrap(); // 512 MiB: a 4 MiB journal
        let mut j = Journal::new(&l, 50);
        let total = j.free_entries();
        assert!(j.reserve(0, total));
        assert!(!j.reserve(0, 1));
        assert!(j.below_watermark());
        let (first, n) = j.begin_commit().unwrap();
        assert_eq!((first, n), (0, l.journal_sections));
        j.end_commit();
        j.release(n);
        assert!(j.reserve(0, 1));
    }

    #[test]
    fn the_buffer_cache_evicts_the_least_recently_used_and_writes_dirty_ranges_aligned() {
        let mut c = BufferCache::new(2, 65536);
        assert!(!c.access(1, Some((100, 132))).hit);
        assert!(!c.access(2, None).hit);
        assert!(c.access(1, None).hit);
        let a = c.access(3, None); // evicts 2 (clean)
        assert_eq!((a.hit, a.evicted_dirty), (false, None));
        let b = c.access(4, None); // evicts 1 (dirty bytes 100..132 -> 0..4096)
        assert_eq!(b.evicted_dirty.map(|(buf, _, r)| (buf, r)), Some((1, (0, 4096))));
        c.access(3, Some((8000, 9000)));
        assert_eq!(c.take_dirty().into_iter().map(|(b, _, r)| (b, r)).collect::<Vec<_>>(), vec![(3, (4096, 12288))]);
        assert!(c.take_dirty().is_empty());
    }
}
