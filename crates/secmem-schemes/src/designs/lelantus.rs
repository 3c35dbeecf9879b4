//! Lelantus (HPCA'20): copy-on-write at cache-line granularity inside the secure memory
//! controller, in the paper's two encodings.
//!
//! * **Lelantus** (`Encoding::Resized`, Fig. 4): a CoW page's 64 B counter block holds a CoW
//!   flag (top bit of the major), a 63-bit major, 64 six-bit minors and the 64-bit source page.
//!   A regular page keeps the usual 7-bit layout with the flag clear, so regular pages are
//!   unchanged (the non-copy control).
//! * **Lelantus-CoW** (`Encoding::Supplementary`, Fig. 5): counter blocks keep 7-bit minors but
//!   minor 0 is reserved for "not copied yet"; the source page lives in an 8 B record per page,
//!   stored at the top of data memory and encrypted, MACed and tree-protected like data. A CoW
//!   cache carved from the counter cache (32 KB of it) holds record lines, 8 records each.
//!
//! Mechanism (both): `page_copy` (`PageCommand::Copy`) only rewrites the destination's
//! metadata: a fresh major (so no pad is ever reused), every minor 0, and the source page. A
//! read of a line whose minor is 0 is redirected to the source page's line and decrypted with
//! the *source's* counters, following a chain if the source is itself an uncopied CoW line.
//! The first write-back of a line gives it a non-zero minor: it is private from then on (the
//! LLC writes whole lines, so nothing needs copying). `page_phyc` (`Materialize`) copies the
//! remaining lines for real; `page_free` (`Free`) first materialises every lazy copy still
//! pointing at the freed page (early reclamation, section III-D), then drops the page's own
//! CoW metadata. A copy of an unmodified lazy copy records the original source (recursive
//! chains, section III-E).
//!
//! A minor overflow on a CoW page materialises the page's uncopied lines while re-encrypting
//! it under the next major and turns it back into a regular page; 6-bit minors overflow after
//! 63 writes instead of 127, which is Lelantus' cost that Lelantus-CoW avoids.
//!
//! Under `security.counter_init = "random"` (the `lelantus` preset, as in the paper's
//! section V-A) regular pages start with random 7-bit minors and overflow after `127 - init`
//! writes to a line (63 on average, section VI); `page_copy` still resets a CoW page's minors
//! to 0 ("not copied yet"), so a CoW line overflows after exactly 63 (Lelantus) or 127
//! (Lelantus-CoW) writes. Fig. 10a's rate counts both (`overflows`; `cow_overflows` alone).
//!
//! Page commands cannot return an `IntegrityError` through the `Design` trait; one raised
//! while executing a command is kept and returned by the next read or write, so it is never
//! lost.

use secmem_core::stats::StatDoc;
use crate::controller::ops::McOps;
use crate::designs::{implies_nothing, no_data_lines, no_regions, Design, DesignEntry, DesignEnv, PageCommand, PageCommandError, Unsupported};
use secmem_core::error::{ensure, ConfigError};
use crate::controller::functional::IntegrityError;
use rustc_hash::FxHashMap;
use secmem_core::addr::{line_in_page, page_of_line, LINES_PER_PAGE};
use secmem_core::cache::{Replacement, SetAssocCache};
use secmem_core::counters::CounterBlock;
use secmem_core::Cycle;
use secmem_media::TrafficClass;

pub static RESIZED_ENTRY: DesignEntry = DesignEntry {
    name: "lelantus",
    summary: "Lelantus: copy-on-write in the controller, the source page in a resized counter block (6-bit minors on CoW pages)",
    needs_security: true,
    baseline_data_path: false,
    needs_line_contents: false,
    check: check_minor_bits,
    implies: implies_nothing,
    regions: no_regions,
    data_lines_reserved: no_data_lines,
    drain_schemes: &[],
    tree_update: None,
    build: |_, cfg| Box::new(Lelantus::with_config(Encoding::Resized, &cfg.lelantus)),
    stats: STATS,
};

pub static COW_ENTRY: DesignEntry = DesignEntry {
    name: "lelantus-cow",
    summary: "Lelantus-CoW: copy-on-write in the controller, the source page in an 8 B record per page, with a CoW cache carved from the counter cache",
    needs_security: true,
    baseline_data_path: false,
    needs_line_contents: false,
    implies: implies_nothing,
    check: |env| {
        check_minor_bits(env)?;
        let l = &env.designs.lelantus;
        let (cow_lines, cow_ways) = (l.cow_cache_lines(), l.cow_cache_ways as u64);
        ensure((1..=4096).contains(&cow_ways), "design.lelantus.cow_cache_ways", || format!("must be in 1..=4096, got {cow_ways}"))?;
        ensure(cow_lines >= cow_ways && cow_lines.is_multiple_of(cow_ways), "design.lelantus.cow_cache_kib", || {
            format!("{} KiB is {cow_lines} lines, not a whole number of sets of {cow_ways} ways (at least one)", l.cow_cache_kib)
        })?;
        // Its CoW cache is carved out of the counter cache (section V-A): what is left must
        // still be a counter cache of whole sets (it was silently made one set).
        let c = &env.metadata_cache.counter;
        let left = counter_lines_left(c.lines(), cow_lines);
        ensure(left >= c.ways as u64 && left.is_multiple_of(c.ways as u64), "metadata_cache.counter.size_kib", || {
            format!(
                "lelantus-cow carves its {} KiB CoW cache (design.lelantus.cow_cache_kib) out of the counter cache: {} KiB leaves {left} lines, not a whole number of sets of {} ways (at least one)",
                l.cow_cache_kib,
                c.size_kib,
                c.ways
            )
        })
    },
    regions: no_regions,
    data_lines_reserved: |data_lines| data_lines - record_region_first_line(data_lines),
    drain_schemes: &[],
    tree_update: None,
    build: |_, cfg| Box::new(Lelantus::with_config(Encoding::Supplementary, &cfg.lelantus)),
    stats: STATS,
};

/// Lelantus lays its counter blocks out itself (Fig. 4: 7-bit minors, 6-bit on a CoW page
/// under the resized encoding), whatever the controller's width says.
fn check_minor_bits(env: &DesignEnv) -> Result<(), ConfigError> {
    let bits = REGULAR_MINOR_BITS;
    ensure(env.security.minor_counter_bits == bits, "security.minor_counter_bits", || {
        format!("Lelantus uses {bits}-bit minors (its counter block format), got {}", env.security.minor_counter_bits)
    })
}

/// Where a CoW page's source address is kept.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// In the counter block itself, at the price of 6-bit minors on CoW pages (Lelantus).
    Resized,
    /// In a supplementary 8 B record per page, with minor 0 reserved (Lelantus-CoW).
    Supplementary,
}

/// Minor width of a CoW page's counter block under `Encoding::Resized` (Fig. 4b).
pub const RESIZED_COW_MINOR_BITS: u32 = 6;
/// Minor width of every other counter block (the default split counter).
pub const REGULAR_MINOR_BITS: u32 = 7;
secmem_core::config_section! {
    /// Lelantus' own parameters (`[design.lelantus]`).
    pub struct LelantusConfig {
        cow_cache_kib: u64 = 32 => "Lelantus-CoW's CoW-metadata cache, carved out of the counter cache, KiB (section V-A: 32 KB); used by lelantus-cow only";
        cow_cache_ways: u32 = 16 => "Associativity of the CoW-metadata cache (that of the Table III counter cache); used by lelantus-cow only";
    }
}

impl LelantusConfig {
    /// 64 B record lines the CoW-metadata cache holds.
    pub fn cow_cache_lines(&self) -> u64 { self.cow_cache_kib * 1024 / 64 }
}

/// Lines a counter cache of `counter_lines` keeps once Lelantus-CoW carves `cow_lines` out of
/// it (0 if the CoW cache takes them all). The config refuses a leftover that is not a whole,
/// non-zero number of sets.
pub fn counter_lines_left(counter_lines: u64, cow_lines: u64) -> u64 { counter_lines.saturating_sub(cow_lines) }
/// Source-address records per 64 B record line (8 B each).
pub const RECORDS_PER_LINE: u64 = 8;
/// Marks a valid record (a record of 0 means "not a CoW page").
const RECORD_VALID: u64 = 1 << 63;
/// The CoW flag: the top bit of the counter block's first 8 bytes (Fig. 4).
const COW_FLAG: u64 = 1 << 63;

/// First data line of the supplementary record region: the top 1/512 of data memory (8 B per
/// 4 KB page). The OS model never allocates frames there.
pub fn record_region_first_line(data_lines: u64) -> u64 { data_lines - data_lines.div_ceil(LINES_PER_PAGE * RECORDS_PER_LINE) }

/// What [`Lelantus`]'s `extra_stats` report (`stats.design.*`).
const STATS: &[StatDoc] = &[
    StatDoc::new("page_copies", "pages", "page_copy commands: lazy copies made by encoding the source in the destination's counter block"),
    StatDoc::new("page_phyc", "pages", "page_phyc commands: lazy copies made real (every uncopied line copied)"),
    StatDoc::new("page_frees", "pages", "page_free commands"),
    StatDoc::new("redirected_reads", "lines", "reads of uncopied lines of a lazy copy, served from a source page"),
    StatDoc::new("redirect_hops", "pages", "source pages visited by redirected reads (more than redirected_reads when copies of copies chain)"),
    StatDoc::new("lines_materialized", "lines", "lines copied for real: by page_phyc, early reclamation or a minor overflow on a CoW page"),
    StatDoc::new("cow_page_writes", "lines", "data write-backs to lazy-copy (CoW) pages"),
    StatDoc::new("cow_overflows", "overflows", "minor-counter overflows on CoW pages"),
    StatDoc::new("overflows", "overflows", "minor-counter overflows caused by data write-backs, on any page (Fig. 10a's numerator)"),
    StatDoc::new("overflows_per_million_writes", "per 10^6 writes", "overflows per million data write-backs the design saw"),
    StatDoc::new("cow_overflows_per_million_writes", "per 10^6 writes", "cow_overflows per million data write-backs the design saw"),
    StatDoc::new("cow_cache_hits", "lookups", "lookups of the on-chip CoW record cache that hit"),
    StatDoc::new("cow_cache_misses", "lookups", "lookups of the on-chip CoW record cache that missed"),
    StatDoc::new("cow_cache_miss_rate", "ratio", "cow_cache_misses / (cow_cache_hits + cow_cache_misses), 0 without lookups"),
    StatDoc::new("record_reads", "lines", "CoW record lines read from NVM (Lelantus-CoW's extra traffic)"),
    StatDoc::new("record_writes", "lines", "CoW record lines written to NVM (Lelantus-CoW's extra traffic)"),
];

/// Lelantus' own counters, reported under `design.*`.
#[derive(Clone, Debug, Default)]
pub struct LelantusStats {
    pub page_copies: u64,
    pub page_phyc: u64,
    pub page_frees: u64,
    /// Reads of uncopied lines served from a source page.
    pub redirected_reads: u64,
    /// Source pages visited by redirected reads (> redirected_reads with recursive chains).
    pub redirect_hops: u64,
    /// Lines copied for real by page_phyc, early reclamation or overflow.
    pub lines_materialized: u64,
    /// Data write-backs to CoW pages (the denominator of the overflow rate).
    pub cow_page_writes: u64,
    /// Minor overflows on CoW pages.
    pub cow_overflows: u64,
    /// Minor overflows caused by data write-backs, on any page (regular pages overflow too,
    /// early under `security.counter_init = "random"`): Fig. 10a's numerator.
    pub overflows: u64,
    /// All data write-backs seen by the design.
    pub writes: u64,
    pub cow_cache_hits: u64,
    pub cow_cache_misses: u64,
    /// Record lines read from / written to NVM (Lelantus-CoW's extra traffic).
    pub record_reads: u64,
    pub record_writes: u64,
}

#[derive(Clone)]
pub struct Lelantus {
    enc: Encoding,
    /// Architectural CoW state: destination page -> recorded source page (the counter block's
    /// flag and source field, or the supplementary record). Functional mode routes reads by
    /// the verified bytes instead.
    src_of: FxHashMap<u64, u64>,
    /// Source page -> lazy copies recording it (what page_phyc / early reclamation copy).
    children: FxHashMap<u64, Vec<u64>>,
    /// Lelantus-CoW: record lines cached on chip.
    cow_cache: Option<SetAssocCache>,
    record_base: u64,
    /// The CoW-metadata cache's size in lines and its associativity (`[design.lelantus]`).
    cow_cache_lines: u64,
    cow_cache_ways: usize,
    ready: bool,
    secure: bool,
    pub stats: LelantusStats,
}

impl Lelantus {
    /// Lelantus with the paper's parameters (`LelantusConfig::default()`).
    pub fn new(enc: Encoding) -> Lelantus { Self::with_config(enc, &LelantusConfig::default()) }

    pub fn with_config(enc: Encoding, cfg: &LelantusConfig) -> Lelantus {
        Lelantus {
            enc,
            cow_cache_lines: cfg.cow_cache_lines(),
            cow_cache_ways: cfg.cow_cache_ways as usize,
            src_of: FxHashMap::default(),
            children: FxHashMap::default(),
            cow_cache: None,
            record_base: 0,
            ready: false,
            secure: true,
            stats: LelantusStats::default(),
        }
    }

    /// The recorded source of `page`, if it is a lazy copy.
    pub fn source_of(&self, page: u64) -> Option<u64> { self.src_of.get(&page).copied() }

    /// Lines of the CoW-metadata cache (Lelantus-CoW, once set up on the first request; 0
    /// otherwise).
    pub fn cow_cache_lines(&self) -> usize { self.cow_cache.as_ref().map_or(0, |c| c.capacity_lines()) }

    /// Pages recorded as lazy copies of `page`.
    pub fn copies_of(&self, page: u64) -> &[u64] { self.children.get(&page).map_or(&[], |v| v.as_slice()) }

    /// Forgets every cached record line (the next lookups fetch and verify from NVM). Call
    /// after `finish`, so nothing dirty is lost.
    fn drop_cow_cache(&mut self) {
        if let Some(c) = self.cow_cache.as_mut() {
            c.clear();
        }
    }

    /// One-time setup on the first request: Lelantus-CoW carves its CoW cache out of the
    /// counter cache (the counter cache shrinks by the same number of lines).
    fn setup(&mut self, mc: &mut McOps) {
        if self.ready {
            return;
        }
        self.ready = true;
        self.secure = mc.params().secure;
        self.record_base = record_region_first_line(mc.layout().data_bytes >> 6);
        if self.enc == Encoding::Supplementary {
            let (lines, ways) = mc.counter_cache_shape();
            // (A controller built without a config check keeps at least one set.)
            let counter_sets = (counter_lines_left(lines as u64, self.cow_cache_lines) / ways as u64).max(1);
            mc.carve_counter_cache(counter_sets);
            let cow_sets = (self.cow_cache_lines / self.cow_cache_ways as u64).max(1);
            self.cow_cache = Some(SetAssocCache::with_geometry(cow_sets, self.cow_cache_ways, Replacement::Lru));
        }
    }

    fn cow_minor_bits(&self) -> u32 {
        match self.enc {
            Encoding::Resized => RESIZED_COW_MINOR_BITS,
            Encoding::Supplementary => REGULAR_MINOR_BITS,
        }
    }

    /// The counter block bytes of `page` in this design's format.
    fn encode(&self, block: &CounterBlock, src: Option<u64>) -> [u8; 64] {
        match (self.enc, src) {
            (Encoding::Resized, Some(s)) => {
                let mut b = block.encode(RESIZED_COW_MINOR_BITS);
                let flagged = block.major | COW_FLAG;
                b[..8].copy_from_slice(&flagged.to_le_bytes());
                b[56..64].copy_from_slice(&s.to_le_bytes());
                b
            }
            _ => block.encode(REGULAR_MINOR_BITS),
        }
    }

    /// The counters in a counter block's bytes, in this design's format, and the source page
    /// the block records (the inverse of [`encode`](Self::encode)): a Resized copy's block has
    /// the CoW flag in its major, 6-bit minors and its source in the last 8 bytes; every other
    /// block is a baseline block with no source.
    fn decode(enc: Encoding, bytes: &[u8; 64]) -> (CounterBlock, Option<u64>) {
        let first = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        if enc == Encoding::Resized && first & COW_FLAG != 0 {
            let mut b = CounterBlock::decode(bytes, RESIZED_COW_MINOR_BITS);
            b.major = first & !COW_FLAG;
            return (b, Some(u64::from_le_bytes(bytes[56..64].try_into().unwrap())));
        }
        (CounterBlock::decode(bytes, REGULAR_MINOR_BITS), None)
    }

    /// The source a Lelantus-CoW record holds (None: the slot marks no copy).
    fn record_source(record: u64) -> Option<u64> { (record & RECORD_VALID != 0).then_some(record & !RECORD_VALID) }

    /// Stores `page`'s counters (and CoW fields) in the controller's view and cached payload.
    /// The block is (re)made available first: fetching a source's counters on the way may
    /// have evicted it. Returns when it is on chip.
    fn store_block(&self, mc: &mut McOps, page: u64, block: CounterBlock, now: Cycle) -> Result<Cycle, IntegrityError> {
        let t = mc.fetch_counter_block(page, true, now)?;
        mc.set_counter_block(page, block);
        if mc.is_functional() {
            let src = if self.enc == Encoding::Resized { self.src_of.get(&page).copied() } else { None };
            mc.set_counter_payload(page, self.encode(&block, src));
        }
        Ok(t)
    }

    /// (major, minor of line `idx`, recorded source if the counter block says CoW) of a
    /// cached counter block: from the verified bytes in functional mode.
    fn counter_view(&self, mc: &McOps, page: u64, idx: usize) -> (u64, u8, Option<u64>) {
        if let Some(b) = mc.counter_payload(page) {
            let first = u64::from_le_bytes(b[..8].try_into().unwrap());
            if self.enc == Encoding::Resized && first & COW_FLAG != 0 {
                let (_, minor) = CounterBlock::decode_one(&b, idx, RESIZED_COW_MINOR_BITS);
                return (first & !COW_FLAG, minor, Some(u64::from_le_bytes(b[56..64].try_into().unwrap())));
            }
            let (major, minor) = CounterBlock::decode_one(&b, idx, REGULAR_MINOR_BITS);
            let src = if self.enc == Encoding::Supplementary { self.src_of.get(&page).copied() } else { None };
            return (major, minor, src);
        }
        let (major, minor) = mc.counter_block(page).counter_of(idx);
        (major, minor, self.src_of.get(&page).copied())
    }

    // ------------------------------------------------------------ Lelantus-CoW records

    fn record_line(&self, page: u64) -> u64 { self.record_base + page / RECORDS_PER_LINE }

    /// The plaintext of a record line, from the architectural records.
    fn record_plain(&self, line: u64) -> [u8; 64] {
        let mut out = [0u8; 64];
        let first = (line - self.record_base) * RECORDS_PER_LINE;
        for i in 0..RECORDS_PER_LINE {
            let v = self.src_of.get(&(first + i)).map_or(0, |s| s | RECORD_VALID);
            out[i as usize * 8..i as usize * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Looks up `page`'s record in the CoW cache, fetching (and verifying) its line on a miss
    /// and writing back a dirty victim. Returns when the record is known and the source it
    /// holds (functional mode: as decrypted from NVM on a miss).
    fn record(&mut self, mc: &mut McOps, page: u64, dirty: bool, now: Cycle) -> Result<(Cycle, Option<u64>), IntegrityError> {
        let line = self.record_line(page);
        let cache = self.cow_cache.as_mut().expect("Lelantus-CoW has a CoW cache");
        if cache.lookup(line, dirty).is_some() {
            self.stats.cow_cache_hits += 1;
            return Ok((now + mc.params().counter_hit, self.src_of.get(&page).copied()));
        }
        self.stats.cow_cache_misses += 1;
        self.stats.record_reads += 1;
        let (t, plain) = mc.read_line(line, now)?;
        let src = match plain {
            Some(p) => {
                let slot = (page % RECORDS_PER_LINE) as usize * 8;
                let v = u64::from_le_bytes(p[slot..slot + 8].try_into().unwrap());
                Lelantus::record_source(v)
            }
            None => self.src_of.get(&page).copied(),
        };
        let (_, victim) = self.cow_cache.as_mut().unwrap().fill(line, dirty);
        if let Some(v) = victim.filter(|v| v.dirty) {
            self.write_record_line(mc, v.line, now)?;
        }
        Ok((t, src))
    }

    /// Looks `page`'s record up to change it (its source was just set or dropped in
    /// `src_of`). With strict persistence the record line is written through at once, as the
    /// counter block beside it is: a copy whose counter block persisted but whose record did
    /// not would read its uncopied lines as the destination's own after a crash.
    fn update_record(&mut self, mc: &mut McOps, page: u64, now: Cycle) -> Result<Cycle, IntegrityError> {
        let (t, _) = self.record(mc, page, true, now)?;
        if !mc.params().strict {
            return Ok(t);
        }
        let line = self.record_line(page);
        let cache = self.cow_cache.as_mut().expect("Lelantus-CoW has a CoW cache");
        if let Some(slot) = cache.probe(line) {
            cache.set_dirty(slot, false);
        }
        self.write_record_line(mc, line, t)
    }

    fn write_record_line(&mut self, mc: &mut McOps, line: u64, now: Cycle) -> Result<Cycle, IntegrityError> {
        self.stats.record_writes += 1;
        let plain = mc.is_functional().then(|| self.record_plain(line));
        mc.write_line(line, plain.as_ref(), now)
    }

    // ------------------------------------------------------------ reads

    /// Plaintext and ready cycle of line `idx` of `page` as this design resolves it: the
    /// page's own line, or the source's when the line is uncopied (following chains).
    /// `class`: `Data`, or `Reencrypt` for the reads of a minor-overflow re-encryption.
    fn resolve_read(&mut self, mc: &mut McOps, page: u64, idx: usize, class: TrafficClass, now: Cycle) -> Result<(Cycle, Option<[u8; 64]>), IntegrityError> {
        let mut cur = page;
        let mut t = now;
        let mut hops = 0u64;
        loop {
            let ctr_at = mc.fetch_counter_block(cur, false, t)?;
            let (major, minor, mut src) = self.counter_view(mc, cur, idx);
            let mut at = ctr_at;
            if minor == 0 && self.enc == Encoding::Supplementary {
                // Minor 0 is reserved: the controller must look the record up to know whether
                // the line is an uncopied CoW line or a regular never-written one.
                let (rt, rsrc) = self.record(mc, cur, false, ctr_at)?;
                src = rsrc;
                at = rt;
            }
            match src {
                Some(s) if minor == 0 => {
                    hops += 1;
                    cur = s;
                    t = at;
                }
                _ => {
                    if hops > 0 {
                        self.stats.redirected_reads += 1;
                        self.stats.redirect_hops += hops;
                    }
                    // The data address is known once the (last) counter block is read.
                    let line = cur * LINES_PER_PAGE + idx as u64;
                    let issue = if hops > 0 { t } else { now };
                    return mc.read_line_under(line, major, minor, class, at, issue);
                }
            }
        }
    }

    // ------------------------------------------------------------ writes

    /// A write-back to `line` of a page this design must handle itself.
    fn write_own(&mut self, mc: &mut McOps, line: u64, data: Option<&[u8; 64]>, class: TrafficClass, now: Cycle) -> Result<Cycle, IntegrityError> {
        let page = page_of_line(line);
        let idx = line_in_page(line);
        let cow = self.src_of.contains_key(&page);
        if cow {
            self.stats.cow_page_writes += 1;
        }
        // A write needs no source: the LLC writes the whole line, which becomes private.
        let ctr_at = mc.fetch_counter_block(page, true, now)?;
        let old = mc.counter_block(page);
        let bits = if cow { self.cow_minor_bits() } else { REGULAR_MINOR_BITS };
        let max = ((1u32 << bits) - 1) as u8;
        let mut reenc_done = now;
        let mut block = old;
        if old.minors[idx] >= max {
            if cow {
                self.stats.cow_overflows += 1;
            }
            reenc_done = self.reencrypt(mc, page, idx, &old, ctr_at)?;
            block = mc.counter_block(page);
        } else {
            block.minors[idx] += 1;
            self.store_block(mc, page, block, now)?;
        }
        let (major, minor) = block.counter_of(idx);
        let done = mc.write_line_under(line, data, major, minor, class, ctr_at, now)?;
        Ok(done.max(reenc_done))
    }

    /// Minor overflow on `page` (written line `idx`): every other line is read as the design
    /// resolves it (uncopied lines from their source) and rewritten under the next major; the
    /// page becomes a regular page. Returns when the rewrites are persistent.
    fn reencrypt(&mut self, mc: &mut McOps, page: u64, idx: usize, old: &CounterBlock, at: Cycle) -> Result<Cycle, IntegrityError> {
        mc.count_counter_overflow();
        let mut plains = Vec::with_capacity(64);
        let mut ready = at;
        for i in 0..LINES_PER_PAGE as usize {
            if i == idx {
                plains.push(None);
                continue;
            }
            if old.minors[i] == 0 && self.src_of.contains_key(&page) {
                self.stats.lines_materialized += 1;
            }
            let (t, p) = self.resolve_read(mc, page, i, TrafficClass::Reencrypt, at)?;
            ready = ready.max(t);
            plains.push(Some(p));
        }
        self.drop_cow(mc, page, at)?;
        // Lelantus-CoW keeps 0 reserved: a regular page restarts at minor 1.
        let restart = if self.enc == Encoding::Supplementary { 1 } else { 0 };
        let block = CounterBlock { major: old.major + 1, minors: [restart; 64] };
        self.store_block(mc, page, block, at)?;
        let mut done = ready;
        for (i, p) in plains.into_iter().enumerate() {
            let Some(p) = p else { continue };
            mc.count_reencrypted_line();
            let line = page * LINES_PER_PAGE + i as u64;
            done = done.max(mc.write_line_under(line, p.as_ref(), block.major, restart, TrafficClass::Reencrypt, ready, at)?);
        }
        Ok(done)
    }

    /// Clears `page`'s CoW metadata (flag/source or record) and its place in the copy lists.
    fn drop_cow(&mut self, mc: &mut McOps, page: u64, now: Cycle) -> Result<Cycle, IntegrityError> {
        let Some(src) = self.src_of.remove(&page) else { return Ok(now) };
        if let Some(v) = self.children.get_mut(&src) {
            v.retain(|&d| d != page);
            if v.is_empty() {
                self.children.remove(&src);
            }
        }
        let t = match self.enc {
            Encoding::Resized => {
                let block = mc.counter_block(page);
                self.store_block(mc, page, block, now)?
            }
            Encoding::Supplementary => self.update_record(mc, page, now)?,
        };
        Ok(t)
    }

    /// page_phyc: copies every uncopied line of lazy copy `page` for real, then makes it a
    /// regular page.
    fn materialize(&mut self, mc: &mut McOps, page: u64, now: Cycle) -> Result<Cycle, IntegrityError> {
        if !self.src_of.contains_key(&page) {
            return Ok(now); // already private: the controller's check of page_phyc
        }
        self.stats.page_phyc += 1;
        let ctr_at = mc.fetch_counter_block(page, true, now)?;
        let old = mc.counter_block(page);
        let mut reads = Vec::new();
        let mut ready = ctr_at;
        for i in 0..LINES_PER_PAGE as usize {
            if old.minors[i] == 0 {
                let (t, p) = self.resolve_read(mc, page, i, TrafficClass::Data, ctr_at)?;
                ready = ready.max(t);
                reads.push((i, p));
            }
        }
        self.drop_cow(mc, page, now)?;
        let mut block = old;
        for &(i, _) in &reads {
            block.minors[i] = 1;
        }
        let ctr_at = self.store_block(mc, page, block, now)?;
        let mut done = ready;
        if reads.is_empty() {
            // Every line was written since the copy: only the CoW fields changed, and no write
            // follows to rehash and persist the block (see `page_free`).
            done = done.max(mc.counter_block_updated(page, ctr_at)?);
        }
        for (i, p) in reads {
            self.stats.lines_materialized += 1;
            let line = page * LINES_PER_PAGE + i as u64;
            done = done.max(mc.write_line_under(line, p.as_ref(), block.major, 1, TrafficClass::Design, ctr_at.max(ready), ready)?);
        }
        Ok(done)
    }

    /// page_copy: records `src` (or, if `src` is an unmodified lazy copy, its own source) as
    /// the source of `dst`, under a fresh major with every minor 0.
    fn page_copy(&mut self, mc: &mut McOps, src: u64, dst: u64, now: Cycle) -> Result<Cycle, IntegrityError> {
        self.stats.page_copies += 1;
        let src_at = mc.fetch_counter_block(src, false, now)?;
        let recorded = match self.src_of.get(&src) {
            Some(&s) if mc.counter_block(src).minors.iter().all(|&m| m == 0) => s,
            _ => src,
        };
        // A page still recorded as someone's source must not be overwritten without its copies
        // being materialised first (the OS's job; checked here as the controller would).
        let orphans: Vec<u64> = self.copies_of(dst).to_vec();
        for d in orphans {
            self.materialize(mc, d, now)?;
        }
        self.drop_cow(mc, dst, now)?;
        let old = mc.counter_block(dst);
        self.src_of.insert(dst, recorded);
        self.children.entry(recorded).or_default().push(dst);
        // Lelantus-CoW's record first: its lookup may fetch (and, strict, write) the record
        // line, and that fetches the record page's counter block, which can evict `dst`'s.
        // Nothing may come between storing `dst`'s new block and hashing it into the tree.
        let mut t = src_at;
        if self.enc == Encoding::Supplementary {
            t = t.max(self.update_record(mc, dst, now)?);
        }
        let ctr_at = self.store_block(mc, dst, CounterBlock { major: old.major + 1, minors: [0; 64] }, now)?;
        mc.counter_block_updated(dst, t.max(ctr_at))
    }

    /// page_free: early reclamation of every lazy copy still reading from `page`, then the
    /// page's own CoW metadata is dropped.
    fn page_free(&mut self, mc: &mut McOps, page: u64, now: Cycle) -> Result<Cycle, IntegrityError> {
        self.stats.page_frees += 1;
        let mut done = now;
        let copies: Vec<u64> = self.copies_of(page).to_vec();
        for d in copies {
            done = done.max(self.materialize(mc, d, now)?);
        }
        let was_copy = self.src_of.contains_key(&page);
        let ctr_at = self.drop_cow(mc, page, now)?;
        done = done.max(ctr_at);
        if was_copy && self.enc == Encoding::Resized {
            // The counter block lost its CoW fields and nothing writes the page after this (a
            // materialisation or re-encryption rewrites the page, and its writes update the
            // tree): with eager update its tree path, with strict persistence its NVM copy,
            // are brought up to date here, as page_copy does. Without it the changed block
            // went to NVM unhashed when evicted, and the next fetch or a recovery after a
            // crash failed its tree check on a run with no attack.
            done = done.max(mc.counter_block_updated(page, ctr_at)?);
        }
        Ok(done)
    }
}

impl Design for Lelantus {
    fn name(&self) -> &'static str {
        match self.enc {
            Encoding::Resized => "lelantus",
            Encoding::Supplementary => "lelantus-cow",
        }
    }

    fn clone_box(&self) -> Box<dyn Design> { Box::new(self.clone()) }

    fn read(&mut self, mc: &mut McOps, line: u64, now: Cycle) -> Result<(Cycle, Option<[u8; 64]>), IntegrityError> {
        self.setup(mc);
        let page = page_of_line(line);
        let plain_page = self.enc == Encoding::Resized && !self.src_of.contains_key(&page);
        if !self.secure || plain_page {
            return mc.read_line(line, now);
        }
        self.resolve_read(mc, page, line_in_page(line), TrafficClass::Data, now)
    }

    fn write(&mut self, mc: &mut McOps, line: u64, data: Option<&[u8; 64]>, now: Cycle) -> Result<Cycle, IntegrityError> {
        self.setup(mc);
        self.stats.writes += 1;
        let page = page_of_line(line);
        let plain_page = self.enc == Encoding::Resized && !self.src_of.contains_key(&page);
        let overflows_before = mc.stats().counter_overflows;
        let r = if !self.secure || plain_page {
            mc.write_line(line, data, now)
        } else {
            self.write_own(mc, line, data, TrafficClass::Data, now)
        };
        self.stats.overflows += mc.stats().counter_overflows - overflows_before;
        r
    }

    fn page_command(&mut self, mc: &mut McOps, cmd: PageCommand, now: Cycle) -> Result<Cycle, PageCommandError> {
        self.setup(mc);
        let pages = mc.layout().data_bytes / 4096;
        let (supp, record_base, name) = (self.enc == Encoding::Supplementary, self.record_base, self.name());
        let bad = |p: u64| p >= pages || (supp && p * LINES_PER_PAGE >= record_base);
        let unsupported = |op: String| Unsupported { design: name, operation: op };
        if !self.secure {
            return Err(unsupported(format!("{cmd:?} without security metadata (security.enabled = false)")).into());
        }
        // An integrity failure inside a command (a tampered counter block or CoW record met
        // on the way) is returned as such: the run stops at this command.
        Ok(match cmd {
            PageCommand::Copy { src, dst } => {
                if bad(src) || bad(dst) || src == dst {
                    return Err(unsupported(format!("{cmd:?}: pages must be distinct and inside the {pages} data pages (outside the CoW record region)")).into());
                }
                self.page_copy(mc, src, dst, now)?
            }
            PageCommand::Materialize { page } if !bad(page) => self.materialize(mc, page, now)?,
            PageCommand::Free { page } if !bad(page) => self.page_free(mc, page, now)?,
            PageCommand::Zero { .. } => return Err(unsupported("Zero (Lelantus initialises a page by page_copy from the zero page)".into()).into()),
            other => return Err(unsupported(format!("{other:?}: page outside the {pages} data pages")).into()),
        })
    }

    fn finish(&mut self, mc: &mut McOps, now: Cycle) -> Result<Cycle, IntegrityError> {
        let mut done = now;
        if let Some(cache) = self.cow_cache.as_mut() {
            let dirty: Vec<u64> = cache.valid_lines().filter(|x| x.1).map(|x| x.0).collect();
            for l in &dirty {
                if let Some(s) = cache.probe(*l) {
                    cache.set_dirty(s, false);
                }
            }
            for l in dirty {
                done = done.max(self.write_record_line(mc, l, now)?);
            }
        }
        Ok(done.max(mc.flush_metadata(now)?))
    }

    /// The baseline's rebuild and root check, then what only this design's format holds:
    ///
    /// * the counter view decoded in this design's layout (the baseline decodes every block as
    ///   a baseline block: a Resized copy's counters came back with the CoW flag as part of the
    ///   major and its 6-bit minors read as 7-bit ones, so the next write of the page was
    ///   encrypted under a counter its read, which decodes the verified bytes, did not use);
    /// * the copy records (which page reads uncopied lines from which): from the verified
    ///   counter blocks under Resized, from the record lines (read through the verified read
    ///   path) under Supplementary. Without them every uncopied line read as the destination's
    ///   own never-written line after a crash.
    ///
    /// Functional mode only rebuilds the records: in counting mode there are no bytes, and the
    /// records kept by `crash` stand for those the persisted blocks hold (as the controller's
    /// `crashed_counters` stand for the persisted counters).
    fn recover(&mut self, mc: &mut McOps, now: Cycle) -> Result<crate::controller::recovery::RecoveryReport, crate::controller::recovery::RecoveryError> {
        self.setup(mc);
        let mut report = mc.rebuild_and_verify(now)?;
        if !mc.is_functional() {
            return Ok(report);
        }
        let enc = self.enc;
        let mut copies: Vec<(u64, u64)> = Vec::new();
        mc.load_counter_view_with(|page, bytes| {
            let (block, src) = Lelantus::decode(enc, bytes);
            copies.extend(src.map(|s| (page, s)));
            block
        });
        if enc == Encoding::Supplementary {
            let end = mc.layout().data_bytes >> 6;
            let written = mc.functional().expect("functional").image.lines_in(self.record_base, end);
            let mut t = now;
            for line in written {
                let (at, plain) = mc.read_line(line, now).map_err(|e| crate::controller::recovery::RecoveryError {
                    first_bad: format!("CoW record line {line:#x}"),
                    message: format!("a Lelantus-CoW record line failed verification: {e}"),
                })?;
                t = t.max(at);
                let plain = plain.expect("functional reads return plaintext");
                let first = (line - self.record_base) * RECORDS_PER_LINE;
                for (i, rec) in plain.chunks_exact(8).enumerate() {
                    let v = u64::from_le_bytes(rec.try_into().expect("8 bytes"));
                    copies.extend(Lelantus::record_source(v).map(|s| (first + i as u64, s)));
                }
            }
            report.cycles = report.cycles.max((t - now).0);
        }
        copies.sort_unstable();
        for (page, src) in copies {
            self.src_of.insert(page, src);
            self.children.entry(src).or_default().push(page);
        }
        Ok(report)
    }

    fn crash(&mut self, mc: &mut McOps, keep_metadata_caches: bool) {
        // The CoW cache is part of the (battery-backed) counter cache: it survives exactly when
        // the counter cache does. The copy records are the counter blocks' (or record lines')
        // content: with the caches lost, functional mode rebuilds them from NVM in `recover`.
        mc.crash(keep_metadata_caches);
        if !keep_metadata_caches {
            if let Some(c) = self.cow_cache.as_mut() {
                c.clear();
            }
            if mc.is_functional() {
                self.src_of.clear();
                self.children.clear();
            }
        }
    }

    /// Lelantus-CoW's copy records live in data lines of their own; Lelantus (Resized) keeps
    /// a copy's source in its counter block, which the counter classes already attack.
    fn attack_surface_name(&self) -> Option<&'static str> { (self.enc == Encoding::Supplementary).then_some("cow-record") }

    /// Each recorded copy's record line, with a line of the copy still uncopied (minor 0):
    /// its read must look the record up.
    fn attack_surface(&self, mc: &McOps) -> Vec<(u64, u64)> {
        if self.enc != Encoding::Supplementary {
            return Vec::new();
        }
        let mut pages: Vec<u64> = self.src_of.keys().copied().collect();
        pages.sort_unstable();
        pages
            .into_iter()
            .filter_map(|page| {
                let block = mc.counter_block(page);
                let idx = (0..LINES_PER_PAGE as usize).find(|&i| block.counter_of(i).1 == 0)?;
                Some((self.record_line(page), page * LINES_PER_PAGE + idx as u64))
            })
            .collect()
    }

    fn drop_metadata_caches(&mut self, mc: &mut McOps) {
        mc.drop_metadata_caches();
        self.drop_cow_cache();
    }

    fn extra_stats(&self) -> Vec<(&'static str, f64)> {
        let s = &self.stats;
        let lookups = s.cow_cache_hits + s.cow_cache_misses;
        vec![
            ("page_copies", s.page_copies as f64),
            ("page_phyc", s.page_phyc as f64),
            ("page_frees", s.page_frees as f64),
            ("redirected_reads", s.redirected_reads as f64),
            ("redirect_hops", s.redirect_hops as f64),
            ("lines_materialized", s.lines_materialized as f64),
            ("cow_page_writes", s.cow_page_writes as f64),
            ("cow_overflows", s.cow_overflows as f64),
            ("overflows", s.overflows as f64),
            ("overflows_per_million_writes", if s.writes == 0 { 0.0 } else { s.overflows as f64 * 1e6 / s.writes as f64 }),
            ("cow_overflows_per_million_writes", if s.writes == 0 { 0.0 } else { s.cow_overflows as f64 * 1e6 / s.writes as f64 }),
            ("cow_cache_hits", s.cow_cache_hits as f64),
            ("cow_cache_misses", s.cow_cache_misses as f64),
            ("cow_cache_miss_rate", if lookups == 0 { 0.0 } else { s.cow_cache_misses as f64 / lookups as f64 }),
            ("record_reads", s.record_reads as f64),
            ("record_writes", s.record_writes as f64),
        ]
    }
}
