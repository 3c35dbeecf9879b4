//! ESD (Zhang et al., HPCA'23): ECC-assisted selective deduplication for encrypted NVM.
//!
//! A line written back from the LLC is deduplicated in the memory controller before it is
//! encrypted. Its fingerprint is the 64 ECC bits the controller computes for it anyway (a
//! SEC-DED (72,64) code per 8 B word, [`secmem_core::ecc`]), so there is no hash on the write
//! path. The fingerprint is looked up in the EFIT ([`efit`]), a cache of the fingerprints of
//! recently written contents, never in NVM (selective deduplication: a duplicate whose
//! fingerprint is not cached is written like a unique line). On a hit the candidate line is
//! read and compared byte by byte (an ECC match is only a hint); if it is equal, the write
//! becomes an AMT update ([`amt`]): the written line now maps to the candidate's physical
//! line, and nothing is encrypted, MACed or written.
//!
//! Security follows from where each thing lives:
//!
//! * Data is encrypted and MACed per *physical* line, under that line's counter, as the
//!   baseline controller does: only unique contents are encrypted. A physical line shared by
//!   several logical lines is never written in place (a logical line whose current line is
//!   shared is written to a free line instead), so its counter, ciphertext and MAC stay those
//!   every sharer reads.
//! * The AMT is data to the controller: its lines are encrypted, MACed and tree-covered, so a
//!   mapping read back is one the controller wrote. The EFIT and the AMT cache are on chip.
//!
//! Config is `[design.esd]` ([`EsdConfig`]); the `esd` preset is Table I's machine.

pub mod amt;
pub mod efit;

use self::amt::{Amt, MAX_REFS};
use self::efit::{Efit, ENTRY_BYTES};
use super::{implies_nothing, no_regions, Design, DesignEntry, DesignEnv};
use crate::controller::functional::IntegrityError;
use crate::controller::ops::McOps;
use crate::controller::recovery::{RecoveryError, RecoveryReport};
use rustc_hash::FxHashMap;
use secmem_core::error::{ensure, ConfigError};
use secmem_core::stats::StatDoc;
use secmem_core::{config_section, Cycle};

config_section! {
    /// ESD's own parameters (`[design.esd]`).
    pub struct EsdConfig {
        efit_bytes: u64 = 512 << 10 => "EFIT capacity, B, 14 B per entry <ECC, Addr_base, Addr_offsets, referH> (Table I: 512 KB)";
        efit_ways: u32 = 16 => "EFIT associativity, ways (the paper gives the capacity only)";
        efit_latency_cycles: u64 = 2 => "EFIT lookup latency, CPU cycles (as the controller's metadata caches)";
        referh_bits: u32 = 8 => "Width of an EFIT entry's reference count referH, bits (section III-B: 1 byte); a content referenced this many times is written anew";
        decay_interval_writes: u64 = 65536 => "EFIT refresh period, writes: every this many writes each entry's referH drops by design.esd.decay (section III-D's regular refresh; the paper gives no value; 0 = never)";
        decay: u32 = 1 => "What each EFIT refresh subtracts from every referH";
        amt_cache_bytes: u64 = 512 << 10 => "AMT cache capacity, B, 64 B lines of 8 entries (Table I: 512 KB)";
        amt_cache_ways: u32 = 8 => "AMT cache associativity, ways (the paper gives the capacity only)";
        amt_latency_cycles: u64 = 2 => "AMT cache hit latency, CPU cycles (as the controller's metadata caches)";
    }
}

pub static ENTRY: DesignEntry = DesignEntry {
    name: "esd",
    summary: "ESD (HPCA'23): ECC-fingerprinted selective deduplication of line writes, before encryption",
    needs_security: true,
    baseline_data_path: false,
    needs_line_contents: true,
    check,
    implies: implies_nothing,
    regions: no_regions,
    // The AMT's lines are given to no logical line, but a logical line may still be placed
    // in frames there: ESD maps every line, so it keeps no frame from the OS model.
    data_lines_reserved: super::no_data_lines,
    drain_schemes: &[],
    tree_update: None,
    build: |ctx, cfg| Box::new(Esd::new(ctx, &cfg.esd)),
    stats: STATS,
};

const STATS: &[StatDoc] = &[
    StatDoc::new("writes", "writes", "data writes the design received (LLC write-backs, flushes, write-throughs)"),
    StatDoc::new("unique_writes", "writes", "writes encrypted and written to NVM"),
    StatDoc::new("dedup_writes", "writes", "writes eliminated by mapping the line to an equal line already in NVM"),
    StatDoc::new("silent_writes", "writes", "writes eliminated because the line's own physical line already held the content"),
    StatDoc::new("write_reduction_pct", "%", "writes eliminated (dedup_writes + silent_writes) per write received"),
    StatDoc::new("efit_hits", "lookups", "EFIT lookups that found the line's ECC"),
    StatDoc::new("efit_misses", "lookups", "EFIT lookups that did not (the line is written as unique)"),
    StatDoc::new("efit_hit_rate", "ratio", "efit_hits per lookup"),
    StatDoc::new("ecc_collisions", "lookups", "EFIT hits whose compare read found different content (same ECC)"),
    StatDoc::new("compare_reads", "reads", "candidate lines read for a byte-by-byte compare"),
    StatDoc::new("referh_saturations", "writes", "duplicates written anew because the candidate's referH was at its maximum"),
    StatDoc::new("efit_evictions", "entries", "EFIT entries replaced by LRCU"),
    StatDoc::new("efit_entries", "entries", "valid EFIT entries at the end"),
    StatDoc::new("amt_cache_hits", "lookups", "AMT cache lookups that hit"),
    StatDoc::new("amt_cache_misses", "lookups", "AMT cache lookups that missed (the AMT line read from NVM)"),
    StatDoc::new("amt_hit_rate", "ratio", "AMT cache hits per lookup"),
    StatDoc::new("amt_line_writes", "writes", "AMT lines written to NVM (dirty evictions, write-through, flush)"),
    StatDoc::new("relocations", "writes", "unique writes placed on a free line because the line's own was shared"),
    StatDoc::new("unwritten_reads", "reads", "reads of lines the run never wrote (their own line read, as the baseline does; zeros)"),
    StatDoc::new("lines_mapped", "lines", "logical lines written, at the end"),
    StatDoc::new("lines_stored", "lines", "physical lines holding data, at the end"),
    StatDoc::new("write_lookup_cycles", "cycles", "write latency spent on the AMT and EFIT lookups, summed over writes"),
    StatDoc::new("write_compare_cycles", "cycles", "write latency spent on compare reads, summed over writes"),
    StatDoc::new("write_nvm_cycles", "cycles", "write latency spent encrypting and writing unique lines and their metadata, summed over writes"),
];

fn check(env: &DesignEnv) -> Result<(), ConfigError> {
    let c = &env.designs.esd;
    ensure(c.efit_ways >= 1, "design.esd.efit_ways", || "must be at least 1".into())?;
    let entries = c.efit_bytes / ENTRY_BYTES;
    ensure(entries >= u64::from(c.efit_ways), "design.esd.efit_bytes", || {
        format!("an EFIT of {} B holds {entries} entries of {ENTRY_BYTES} B, fewer than one set of design.esd.efit_ways = {}", c.efit_bytes, c.efit_ways)
    })?;
    ensure(c.efit_bytes <= 1 << 30, "design.esd.efit_bytes", || format!("must be at most 1 GiB, got {} B", c.efit_bytes))?;
    ensure((1..=8).contains(&c.referh_bits), "design.esd.referh_bits", || format!("must be 1..=8 bits, got {}", c.referh_bits))?;
    ensure(c.decay <= 255, "design.esd.decay", || format!("must be at most 255, got {}", c.decay))?;
    ensure(c.amt_cache_ways >= 1, "design.esd.amt_cache_ways", || "must be at least 1".into())?;
    ensure(c.amt_cache_bytes >= 64 * u64::from(c.amt_cache_ways), "design.esd.amt_cache_bytes", || {
        format!("an AMT cache of {} B holds fewer than one set of {} 64 B lines", c.amt_cache_bytes, c.amt_cache_ways)
    })?;
    ensure(c.amt_cache_bytes <= 1 << 30, "design.esd.amt_cache_bytes", || format!("must be at most 1 GiB, got {} B", c.amt_cache_bytes))?;
    for (field, v) in [("design.esd.efit_latency_cycles", c.efit_latency_cycles), ("design.esd.amt_latency_cycles", c.amt_latency_cycles)] {
        ensure(v <= 1 << 20, field, || format!("must be at most 2^20 cycles, got {v}"))?;
    }
    Ok(())
}

/// The design's counters (see [`STATS`]).
#[derive(Clone, Copy, Debug, Default)]
struct EsdStats {
    writes: u64,
    unique_writes: u64,
    dedup_writes: u64,
    silent_writes: u64,
    ecc_collisions: u64,
    compare_reads: u64,
    referh_saturations: u64,
    unwritten_reads: u64,
    write_lookup_cycles: u64,
    write_compare_cycles: u64,
    write_nvm_cycles: u64,
}

/// What a write's EFIT lookup and compare read found.
enum Found {
    /// No candidate, or a candidate with other content: the line is unique.
    Unique,
    /// The candidate holds the same content; `refer` is its referH.
    Duplicate { line: u64, refer: u8 },
}

#[derive(Clone)]
pub struct Esd {
    efit: Efit,
    amt: Amt,
    efit_latency: Cycle,
    /// Counting mode: the plaintext of every physical line holding data, for the compare read
    /// (functional mode compares the bytes the read decrypts and verifies).
    contents: FxHashMap<u64, [u8; 64]>,
    stats: EsdStats,
}

impl Esd {
    pub fn new(ctx: &super::DesignContext, cfg: &EsdConfig) -> Esd {
        let data_lines = ctx.data_bytes / 64;
        Esd {
            efit: Efit::new(cfg.efit_bytes / ENTRY_BYTES, cfg.efit_ways as usize, cfg.referh_bits, cfg.decay as u8, cfg.decay_interval_writes),
            amt: Amt::new(data_lines, cfg.amt_cache_bytes / 64, cfg.amt_cache_ways as usize, Cycle(cfg.amt_latency_cycles), ctx.strict_persistence),
            efit_latency: Cycle(cfg.efit_latency_cycles),
            contents: FxHashMap::default(),
            stats: EsdStats::default(),
        }
    }

    /// The EFIT lookup of `ecc` and, on a hit, the compare read of the candidate against
    /// `data`. Returns what it found and when the compare finished.
    fn find_duplicate(&mut self, mc: &mut McOps, ecc: u64, data: &[u8; 64], at: Cycle) -> Result<(Found, Cycle), IntegrityError> {
        let Some(hit) = self.efit.lookup(ecc) else { return Ok((Found::Unique, at)) };
        self.stats.compare_reads += 1;
        let (done, plain) = mc.read_line(hit.line, at)?;
        let held = match plain {
            Some(p) => Some(p),
            None => self.contents.get(&hit.line).copied(),
        };
        if held.as_ref() == Some(data) {
            return Ok((Found::Duplicate { line: hit.line, refer: hit.refer }, done));
        }
        // Another content with the same ECC, or a line rewritten or freed since it entered
        // the table: the compare read tells.
        self.stats.ecc_collisions += 1;
        Ok((Found::Unique, done))
    }

    /// Maps logical `line` (now at `current`) to physical `target`: three AMT entries change,
    /// the line's mapping and the two reference counts. Returns when the entries are in the
    /// AMT cache (each marked dirty before it changes, so an eviction in between writes back
    /// the newer bytes).
    fn remap(&mut self, mc: &mut McOps, line: u64, current: Option<u64>, target: u64, at: Cycle) -> Result<Cycle, IntegrityError> {
        let mut t = self.amt.access(mc, target, true, at)?;
        self.amt.add_ref(target);
        if let Some(c) = current {
            t = t.max(self.amt.access(mc, c, true, at)?);
            self.amt.drop_ref(c);
        }
        t = t.max(self.amt.access(mc, line, true, at)?);
        self.amt.set_mapping(line, Some(target));
        Ok(t)
    }

    /// Writes `data` of logical `line` as a unique line: in place when its current physical
    /// line is its alone, else on its home or a free line. Returns when it is persistent.
    fn write_unique(&mut self, mc: &mut McOps, line: u64, ecc: u64, data: &[u8; 64], repoint: bool, at: Cycle) -> Result<Cycle, IntegrityError> {
        self.stats.unique_writes += 1;
        let current = self.amt.mapping(line);
        let target = match current {
            Some(c) if self.amt.refs(c) == 1 => c,
            _ => {
                self.amt.allocate(line).ok_or(IntegrityError::NoFreeLine { line })?
            }
        };
        let mut t = at;
        if current != Some(target) {
            t = t.max(self.remap(mc, line, current, target, at)?);
        }
        let done = mc.write_line(target, mc.is_functional().then_some(data), t)?;
        if !mc.is_functional() {
            self.contents.insert(target, *data);
        }
        self.efit.insert(ecc, target, repoint);
        Ok(done)
    }
}

impl Design for Esd {
    fn name(&self) -> &'static str { ENTRY.name }

    fn clone_box(&self) -> Box<dyn Design> { Box::new(self.clone()) }

    fn read(&mut self, mc: &mut McOps, line: u64, now: Cycle) -> Result<(Cycle, Option<[u8; 64]>), IntegrityError> {
        let t = self.amt.access(mc, line, false, now)?;
        match self.amt.mapping(line) {
            Some(p) => mc.read_line(p, t),
            None => {
                // A line the run never wrote was written before it (the paper warms memory
                // up with a billion requests): it costs the read of its own line, as in the
                // baseline, and reads as secmem's boot content, zeros.
                self.stats.unwritten_reads += 1;
                let (done, _) = mc.read_line(line, t)?;
                Ok((done, mc.is_functional().then_some([0u8; 64])))
            }
        }
    }

    fn write(&mut self, mc: &mut McOps, line: u64, data: Option<&[u8; 64]>, now: Cycle) -> Result<Cycle, IntegrityError> {
        // The engine hands a design that needs line contents every write's bytes.
        let data = data.expect("the engine hands a design with needs_line_contents every write's bytes");
        self.stats.writes += 1;
        self.efit.count_write();
        // The ECC is the controller's own (computed for the DIMM's check bits): no time.
        let ecc = secmem_core::ecc::line_ecc(data);
        let looked_up = self.amt.access(mc, line, false, now)?.max(now + self.efit_latency);
        self.stats.write_lookup_cycles += (looked_up - now).0;
        let (found, compared) = self.find_duplicate(mc, ecc, data, looked_up)?;
        self.stats.write_compare_cycles += (compared - looked_up).0;
        let current = self.amt.mapping(line);
        let done = match found {
            Found::Duplicate { line: p, .. } if current == Some(p) => {
                self.stats.silent_writes += 1;
                self.efit.add_reference(ecc);
                compared
            }
            Found::Duplicate { refer, .. } if refer >= self.efit.refer_max() => {
                self.stats.referh_saturations += 1;
                self.write_unique(mc, line, ecc, data, true, compared)?
            }
            Found::Duplicate { line: p, .. } if self.amt.refs(p) >= MAX_REFS => self.write_unique(mc, line, ecc, data, true, compared)?,
            Found::Duplicate { line: p, .. } => {
                self.stats.dedup_writes += 1;
                self.efit.add_reference(ecc);
                self.remap(mc, line, current, p, compared)?
            }
            Found::Unique => self.write_unique(mc, line, ecc, data, false, compared)?,
        };
        let done = done.max(self.amt.commit(mc, compared)?);
        self.stats.write_nvm_cycles += (done - compared).0;
        Ok(done)
    }

    fn finish(&mut self, mc: &mut McOps, now: Cycle) -> Result<Cycle, IntegrityError> {
        let t = self.amt.flush(mc, now)?;
        mc.flush_metadata(t)
    }

    fn crash(&mut self, mc: &mut McOps, keep_metadata_caches: bool) {
        mc.crash(keep_metadata_caches);
        if !keep_metadata_caches {
            // The EFIT is volatile and only finds duplicates: losing it loses none of the
            // data. The AMT is read back from NVM by `recover`.
            self.efit.clear();
            self.amt.crash();
        }
    }

    fn recover(&mut self, mc: &mut McOps, now: Cycle) -> Result<RecoveryReport, RecoveryError> {
        let mut report = mc.rebuild_and_verify(now)?;
        let (done, lines) = self.amt.rebuild(mc, now).map_err(|e| RecoveryError { first_bad: e.to_string(), message: "reading the AMT back from NVM".into() })?;
        report.cycles = report.cycles.max(done.0);
        report.counter_blocks_read += lines;
        Ok(report)
    }

    fn data_line_of(&self, line: u64) -> u64 { self.amt.mapping(line).unwrap_or(line) }

    fn attack_surface_name(&self) -> Option<&'static str> { Some("amt") }

    fn attack_surface(&self, mc: &McOps) -> Vec<(u64, u64)> {
        // Each AMT line in NVM with a written line whose read fetches it.
        let Some(f) = mc.functional() else { return Vec::new() };
        f.image.lines_in(self.amt.base(), mc.layout().data_bytes / 64).into_iter().filter_map(|l| self.amt.mapped_index_in(l).map(|i| (l, i))).collect()
    }

    fn drop_metadata_caches(&mut self, mc: &mut McOps) {
        mc.drop_metadata_caches();
        self.amt.drop_cache();
    }

    fn extra_stats(&self) -> Vec<(&'static str, f64)> {
        let s = &self.stats;
        let e = &self.efit.stats;
        let a = &self.amt.stats;
        let pct = |n: u64| if s.writes == 0 { 0.0 } else { 100.0 * n as f64 / s.writes as f64 };
        let lookups = e.hits + e.misses;
        vec![
            ("writes", s.writes as f64),
            ("unique_writes", s.unique_writes as f64),
            ("dedup_writes", s.dedup_writes as f64),
            ("silent_writes", s.silent_writes as f64),
            ("write_reduction_pct", pct(s.dedup_writes + s.silent_writes)),
            ("efit_hits", e.hits as f64),
            ("efit_misses", e.misses as f64),
            ("efit_hit_rate", if lookups == 0 { 0.0 } else { e.hits as f64 / lookups as f64 }),
            ("ecc_collisions", s.ecc_collisions as f64),
            ("compare_reads", s.compare_reads as f64),
            ("referh_saturations", s.referh_saturations as f64),
            ("efit_evictions", e.evictions as f64),
            ("efit_entries", self.efit.occupancy() as f64),
            ("amt_cache_hits", a.cache_hits as f64),
            ("amt_cache_misses", a.cache_misses as f64),
            ("amt_hit_rate", self.amt.hit_rate()),
            ("amt_line_writes", a.line_writes as f64),
            ("relocations", a.relocations as f64),
            ("unwritten_reads", s.unwritten_reads as f64),
            ("lines_mapped", self.amt.mapped_lines() as f64),
            ("lines_stored", self.amt.used_lines() as f64),
            ("write_lookup_cycles", s.write_lookup_cycles as f64),
            ("write_compare_cycles", s.write_compare_cycles as f64),
            ("write_nvm_cycles", s.write_nvm_cycles as f64),
        ]
    }
}
