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
//! The same room holds Table II's deduplicating baselines, which differ in how a duplicate is
//! found ([`Scheme`]):
//!
//! * `dedup_sha1`: a SHA-1 of every line (321 ns), looked up in the full fingerprint store
//!   ([`fpstore`]: every unique line's fingerprint in NVM, a cache in front), a match taken as
//!   a duplicate without a compare read;
//! * `dewrite`: a CRC-32 of every line, the full store, a compare read on a match, and a
//!   prediction: a write predicted unique is encrypted while its CRC and lookup run (hidden
//!   when it is unique, wasted when it is not), one predicted duplicate waits for them.
//!
//! Config is `[design.esd]` ([`EsdConfig`]); the `esd` preset is Table I's machine.

pub mod amt;
pub mod efit;
pub mod fpstore;

use self::amt::{Amt, MAX_REFS};
use self::efit::{Efit, Hit, ENTRY_BYTES};
use self::fpstore::{Fp, FpStore};
use super::{implies_nothing, no_regions, Design, DesignContext, DesignEntry, DesignEnv, DesignsConfig, Region};
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
        decay_interval_writes: u64 = 0 => "EFIT refresh period, writes: every this many writes each entry's referH drops by design.esd.decay (section III-D's regular refresh; the paper gives no value; 0: the EFIT's entry count, the writes that could replace the whole table)";
        decay: u32 = 1 => "What each EFIT refresh subtracts from every referH (0: no refresh)";
        max_compare_reads: u32 = 2 => "ESD: the most EFIT candidates of one ECC a write reads to compare, the most referenced first (contents sharing an ECC each have an entry; the paper describes one compare read)";
        lrcu: bool = true => "EFIT replacement: LRCU (lowest referH first, section III-D); false: plain LRU (Fig. 18's without-LRCU curve)";
        amt_cache_bytes: u64 = 512 << 10 => "AMT cache capacity, B, 64 B lines of 8 entries (Table I: 512 KB)";
        amt_cache_ways: u32 = 8 => "AMT cache associativity, ways (the paper gives the capacity only)";
        amt_latency_cycles: u64 = 2 => "AMT cache hit latency, CPU cycles (as the controller's metadata caches)";
        sha1_latency_ns: f64 = 321.0 => "dedup_sha1: SHA-1 of a 64 B line, ns (section III-C: 321 ns)";
        crc32_latency_ns: f64 = 10.0 => "dewrite: CRC-32 of a 64 B line, ns (the paper gives none: 20 cycles at 2 GHz)";
        sha1_energy_nj: f64 = 2.56 => "dedup_sha1: energy of one SHA-1, nJ (the paper cites [56] without a value: 5 pJ per input bit)";
        crc32_energy_nj: f64 = 0.128 => "dewrite: energy of one CRC-32, nJ (the paper cites [56] without a value: 0.25 pJ per input bit)";
        fingerprint_cache_bytes: u64 = 512 << 10 => "dedup_sha1, dewrite: the fingerprint store's controller cache, B, 64 B buckets (as ESD's EFIT: Table I's 512 KB)";
        fingerprint_cache_ways: u32 = 8 => "dedup_sha1, dewrite: fingerprint cache associativity, ways";
    }
}

/// How a scheme finds duplicates (ESD Table II).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// ECC fingerprints in the EFIT alone, a compare read on a hit.
    Esd,
    /// SHA-1 fingerprints in the full store, a match taken as equal.
    Sha1,
    /// CRC-32 fingerprints in the full store, a compare read on a match, prediction.
    DeWrite,
}

impl Scheme {
    /// Bytes of a fingerprint-store entry (fingerprint + 5 B line address, to a power of two).
    fn store_entry_bytes(self) -> u64 {
        match self {
            Scheme::Esd => 0,
            Scheme::Sha1 => 32,
            Scheme::DeWrite => 16,
        }
    }
}

/// The fingerprint store region of a baseline: one entry per data line.
fn store_region(scheme: Scheme, ctx: &DesignContext) -> Vec<Region> {
    vec![Region { name: "fingerprints", size_bytes: ctx.data_bytes / 64 * scheme.store_entry_bytes() }]
}

/// Base device address of the fingerprint region (the first region above the tree).
fn store_base(ctx: &DesignContext) -> u64 {
    let layout = secmem_core::tree::SecureLayout::new(ctx.data_bytes, ctx.tree_arity, 64).expect("a valid layout");
    crate::controller::eadr::region_base(&layout)
}

/// A scheme's entry: the three differ in name, summary, regions and constructor only.
const fn entry(
    name: &'static str,
    summary: &'static str,
    regions: fn(&DesignContext) -> Vec<Region>,
    build: fn(&DesignContext, &DesignsConfig) -> Box<dyn Design>,
) -> DesignEntry {
    DesignEntry {
        name,
        summary,
        needs_security: true,
        baseline_data_path: false,
        needs_line_contents: true,
        check,
        implies: implies_nothing,
        regions,
        // The AMT's lines are given to no logical line, but a logical line may still be placed
        // in frames there: these designs map every line, so they keep no frame from the OS model.
        data_lines_reserved: super::no_data_lines,
        drain_schemes: &[],
        tree_update: None,
        build,
        stats: STATS,
    }
}

pub static ENTRY: DesignEntry = entry(
    "esd",
    "ESD (HPCA'23): ECC-fingerprinted selective deduplication of line writes, before encryption",
    no_regions,
    |ctx, cfg| Box::new(Dedup::new(Scheme::Esd, ctx, cfg)),
);

pub static SHA1_ENTRY: DesignEntry = entry(
    "dedup_sha1",
    "ESD's baseline Dedup_SHA1: SHA-1 fingerprints of every line, the full fingerprint store in NVM",
    |ctx| store_region(Scheme::Sha1, ctx),
    |ctx, cfg| Box::new(Dedup::new(Scheme::Sha1, ctx, cfg)),
);

pub static DEWRITE_ENTRY: DesignEntry = entry(
    "dewrite",
    "ESD's baseline DeWrite: CRC-32 duplicate prediction, encryption in parallel with the lookup, the full fingerprint store",
    |ctx| store_region(Scheme::DeWrite, ctx),
    |ctx, cfg| Box::new(Dedup::new(Scheme::DeWrite, ctx, cfg)),
);

const STATS: &[StatDoc] = &[
    StatDoc::new("writes", "writes", "data writes the design received (LLC write-backs, flushes, write-throughs)"),
    StatDoc::new("unique_writes", "writes", "writes encrypted and written to NVM"),
    StatDoc::new("dedup_writes", "writes", "writes eliminated by mapping the line to an equal line already in NVM"),
    StatDoc::new("silent_writes", "writes", "writes eliminated because the line's own physical line already held the content"),
    StatDoc::new("write_reduction_pct", "%", "writes eliminated (dedup_writes + silent_writes) per write received"),
    StatDoc::new("efit_hits", "lookups", "EFIT lookups that found the line's ECC"),
    StatDoc::new("efit_misses", "lookups", "EFIT lookups that did not (the line is written as unique)"),
    StatDoc::new("efit_hit_rate", "ratio", "efit_hits per lookup"),
    StatDoc::new("ecc_collisions", "writes", "writes whose compare reads found only other bytes with the same fingerprint (an ECC or CRC collision; a candidate rewritten since is not one)"),
    StatDoc::new("efit_stale_removals", "entries", "EFIT entries dropped because the compare read found their line rewritten or freed"),
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
    StatDoc::new("fingerprint_cache_hits", "lookups", "dedup_sha1, dewrite: fingerprint lookups whose bucket was cached"),
    StatDoc::new("fingerprint_nvm_lookups", "reads", "dedup_sha1, dewrite: fingerprint buckets read from NVM (lookups that missed the cache)"),
    StatDoc::new("fingerprint_nvm_writes", "writes", "dedup_sha1, dewrite: fingerprint buckets written back to NVM"),
    StatDoc::new("fingerprints_stored", "entries", "dedup_sha1, dewrite: fingerprints in the full store at the end"),
    StatDoc::new("fingerprint_ops", "hashes", "fingerprints computed (SHA-1 or CRC-32; ESD's ECC is the controller's own)"),
    StatDoc::new("fingerprint_energy_nj", "nJ", "energy of the fingerprints computed"),
    StatDoc::new("nvm_metadata_pct", "%", "NVM the deduplication metadata takes, per byte of data: the AMT (8 B per line) and the baselines' fingerprint store"),
    StatDoc::new("predicted_unique", "writes", "dewrite: writes predicted unique (encrypted in parallel with the lookup)"),
    StatDoc::new("mispredicted_duplicates", "writes", "dewrite: writes predicted unique that were duplicates (Fig. 4's F4: the encryption wasted)"),
    StatDoc::new("mispredicted_uniques", "writes", "dewrite: writes predicted duplicate that were unique (Fig. 4's F2: encrypted after the lookup)"),
    StatDoc::new("write_fingerprint_cycles", "cycles", "write latency spent computing fingerprints, summed over writes"),
    StatDoc::new("write_lookup_cycles", "cycles", "write latency spent on the AMT and fingerprint lookups, summed over writes"),
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
    ensure((1..=64).contains(&c.max_compare_reads), "design.esd.max_compare_reads", || format!("must be 1..=64, got {}", c.max_compare_reads))?;
    for (field, bytes, ways) in [
        ("amt_cache", c.amt_cache_bytes, c.amt_cache_ways),
        ("fingerprint_cache", c.fingerprint_cache_bytes, c.fingerprint_cache_ways),
    ] {
        ensure(ways >= 1, &format!("design.esd.{field}_ways"), || "must be at least 1".into())?;
        ensure(bytes >= 64 * u64::from(ways), &format!("design.esd.{field}_bytes"), || format!("a cache of {bytes} B holds fewer than one set of {ways} 64 B lines"))?;
        ensure(bytes <= 1 << 30, &format!("design.esd.{field}_bytes"), || format!("must be at most 1 GiB, got {bytes} B"))?;
    }
    for (field, v) in [("design.esd.efit_latency_cycles", c.efit_latency_cycles), ("design.esd.amt_latency_cycles", c.amt_latency_cycles)] {
        ensure(v <= 1 << 20, field, || format!("must be at most 2^20 cycles, got {v}"))?;
    }
    for (field, v) in [
        ("design.esd.sha1_latency_ns", c.sha1_latency_ns),
        ("design.esd.crc32_latency_ns", c.crc32_latency_ns),
        ("design.esd.sha1_energy_nj", c.sha1_energy_nj),
        ("design.esd.crc32_energy_nj", c.crc32_energy_nj),
    ] {
        ensure(v.is_finite() && (0.0..=1e6).contains(&v), field, || format!("must be in 0..=1e6, got {v}"))?;
    }
    Ok(())
}

/// The design's counters (see [`STATS`]).
#[derive(Clone, Copy, Debug, Default)]
struct DedupStats {
    writes: u64,
    unique_writes: u64,
    dedup_writes: u64,
    silent_writes: u64,
    ecc_collisions: u64,
    compare_reads: u64,
    referh_saturations: u64,
    unwritten_reads: u64,
    fingerprint_ops: u64,
    predicted_unique: u64,
    mispredicted_duplicates: u64,
    mispredicted_uniques: u64,
    write_fingerprint_cycles: u64,
    write_lookup_cycles: u64,
    write_compare_cycles: u64,
    write_nvm_cycles: u64,
}

/// What a write's lookup (and compare read) found.
enum Found {
    /// No candidate, or candidates with other content: the line is unique.
    Unique,
    /// The candidate holds the same content; `refer` is its referH (ESD; the maximum
    /// otherwise, so that it never saturates).
    Duplicate { line: u64, refer: u8 },
}

/// Where a scheme looks fingerprints up.
#[derive(Clone)]
enum Finder {
    Efit(Efit),
    Store(Box<FpStore>),
}

/// A fingerprint of each scheme: ESD's 64 ECC bits, SHA-1, CRC-32.
fn fingerprint(scheme: Scheme, data: &[u8; 64]) -> Fp {
    let mut fp = [0u8; 20];
    match scheme {
        Scheme::Esd => fp[..8].copy_from_slice(&secmem_core::ecc::line_ecc(data).to_le_bytes()),
        Scheme::Sha1 => fp = secmem_crypto::fingerprint::sha1_line(data),
        Scheme::DeWrite => fp[..4].copy_from_slice(&secmem_crypto::fingerprint::crc32_line(data).to_le_bytes()),
    }
    fp
}

fn ecc_of(fp: &Fp) -> u64 { u64::from_le_bytes(fp[..8].try_into().expect("8 bytes")) }

/// ESD or one of its baselines (see the module documentation).
#[derive(Clone)]
pub struct Dedup {
    scheme: Scheme,
    finder: Finder,
    amt: Amt,
    efit_latency: Cycle,
    fingerprint_latency: Cycle,
    fingerprint_energy_nj: f64,
    /// ESD: the most candidates of one ECC a write compares against.
    max_compare_reads: usize,
    /// DeWrite: the last write was unique, so the next is predicted unique.
    predict_unique: bool,
    /// Counting mode: the plaintext of every physical line holding data, for the compare read
    /// (functional mode compares the bytes the read decrypts and verifies).
    contents: FxHashMap<u64, [u8; 64]>,
    stats: DedupStats,
}

impl Dedup {
    pub fn new(scheme: Scheme, ctx: &DesignContext, cfg: &DesignsConfig) -> Dedup {
        let c = &cfg.esd;
        let data_lines = ctx.data_bytes / 64;
        let finder = match scheme {
            Scheme::Esd => Finder::Efit(Efit::with_replacement(c.efit_bytes / ENTRY_BYTES, c.efit_ways as usize, c.referh_bits, c.decay as u8, c.decay_interval_writes, c.lrcu)),
            _ => {
                let per_bucket = 64 / scheme.store_entry_bytes();
                Finder::Store(Box::new(FpStore::new(store_base(ctx), data_lines / per_bucket, c.fingerprint_cache_bytes / 64, c.fingerprint_cache_ways as usize, Cycle(c.efit_latency_cycles))))
            }
        };
        let (latency_ns, energy) = match scheme {
            Scheme::Esd => (0.0, 0.0),
            Scheme::Sha1 => (c.sha1_latency_ns, c.sha1_energy_nj),
            Scheme::DeWrite => (c.crc32_latency_ns, c.crc32_energy_nj),
        };
        Dedup {
            scheme,
            finder,
            amt: Amt::new(data_lines, c.amt_cache_bytes / 64, c.amt_cache_ways as usize, Cycle(c.amt_latency_cycles), ctx.strict_persistence),
            efit_latency: Cycle(c.efit_latency_cycles),
            fingerprint_latency: Cycle::from_ns(latency_ns, ctx.freq_mhz.max(1)),
            fingerprint_energy_nj: energy,
            max_compare_reads: c.max_compare_reads as usize,
            predict_unique: true,
            contents: FxHashMap::default(),
            stats: DedupStats::default(),
        }
    }

    fn refer_max(&self) -> u8 {
        match &self.finder {
            Finder::Efit(e) => e.refer_max(),
            Finder::Store(_) => u8::MAX,
        }
    }

    /// The lookup of `fp` and the compare reads of its candidates against `data` (ESD and
    /// DeWrite; Dedup_SHA1 takes a SHA-1 match as equal). ESD compares at most
    /// `max_compare_reads` candidates, the most referenced first and saturated ones last; a
    /// candidate whose line no longer holds content of that fingerprint leaves the EFIT.
    /// Returns what it found, when the lookup was done and when the compare reads were.
    fn find_duplicate(&mut self, mc: &mut McOps, fp: &Fp, data: &[u8; 64], at: Cycle) -> Result<(Found, Cycle, Cycle), IntegrityError> {
        let refer_max = self.refer_max();
        let (mut candidates, looked_up) = match &mut self.finder {
            Finder::Efit(e) => (e.lookup(ecc_of(fp)), at + self.efit_latency),
            Finder::Store(s) => {
                let (line, t) = s.lookup(mc, fp, at);
                (line.map(|line| Hit { line, refer: 0 }).into_iter().collect(), t)
            }
        };
        if self.scheme == Scheme::Sha1 {
            let found = candidates.first().map_or(Found::Unique, |h| Found::Duplicate { line: h.line, refer: h.refer });
            return Ok((found, looked_up, looked_up));
        }
        candidates.sort_by_key(|h| h.refer >= refer_max);
        candidates.truncate(self.max_compare_reads);
        let mut t = looked_up;
        let mut collided = false;
        for Hit { line, refer } in candidates {
            self.stats.compare_reads += 1;
            let (done, plain) = mc.read_line(line, t)?;
            t = done;
            let held = match plain {
                Some(p) => Some(p),
                None => self.contents.get(&line).copied(),
            };
            if held.as_ref() == Some(data) {
                return Ok((Found::Duplicate { line, refer }, looked_up, t));
            }
            // Other bytes with the same fingerprint (a collision), or a line rewritten or
            // freed since it entered the table (stale): the bytes read tell them apart.
            if held.is_some_and(|h| fingerprint(self.scheme, &h) == *fp) {
                collided = true;
            } else if let Finder::Efit(e) = &mut self.finder {
                e.remove(ecc_of(fp), line);
            }
        }
        if collided {
            self.stats.ecc_collisions += 1;
        }
        Ok((Found::Unique, looked_up, t))
    }

    /// Maps logical `line` (now at `current`) to physical `target`: three AMT entries change,
    /// the line's mapping and the two reference counts. Returns when the entries are in the
    /// AMT cache (each marked dirty before it changes, so an eviction in between writes back
    /// the newer bytes). A copy left without a reference leaves the fingerprint store.
    fn remap(&mut self, mc: &mut McOps, line: u64, current: Option<u64>, target: u64, at: Cycle) -> Result<Cycle, IntegrityError> {
        let mut t = self.amt.access(mc, target, true, at)?;
        self.amt.add_ref(target);
        if let Some(c) = current {
            t = t.max(self.amt.access(mc, c, true, at)?);
            self.amt.drop_ref(c);
            if self.amt.refs(c) == 0 {
                if let Finder::Store(s) = &mut self.finder {
                    t = t.max(s.release(mc, c, at));
                }
            }
        }
        // The line's own entry was looked up when the write arrived.
        t = t.max(self.amt.change_looked_up(mc, line, at)?);
        self.amt.set_mapping(line, Some(target));
        Ok(t)
    }

    /// Writes `data` of logical `line` as a unique line: in place when its current physical
    /// line is its alone, else on its home or a free line. The encryption may start at
    /// `encrypt_from`, before the lookup is done at `at` (DeWrite's parallel encryption).
    /// Returns when it is persistent.
    #[allow(clippy::too_many_arguments)]
    fn write_unique(&mut self, mc: &mut McOps, line: u64, fp: Fp, data: &[u8; 64], encrypt_from: Cycle, at: Cycle) -> Result<Cycle, IntegrityError> {
        self.stats.unique_writes += 1;
        let current = self.amt.mapping(line);
        let target = match current {
            Some(c) if self.amt.refs(c) == 1 => c,
            _ => self.amt.allocate(line).ok_or(IntegrityError::NoFreeLine { line })?,
        };
        let mut t = at;
        if current != Some(target) {
            t = t.max(self.remap(mc, line, current, target, at)?);
        }
        // The data write issues once the decision is made; its encryption and MAC may have
        // run before, from `encrypt_from`.
        let (aes, mac) = mc.crypto_latencies();
        let issue = encrypt_from.max(Cycle(t.0.saturating_sub((aes + mac).0)));
        let done = mc.write_line(target, mc.is_functional().then_some(data), issue)?.max(t);
        if !mc.is_functional() {
            self.contents.insert(target, *data);
        }
        match &mut self.finder {
            Finder::Efit(e) => e.insert(ecc_of(&fp), target),
            Finder::Store(s) => t = t.max(s.record(mc, target, fp, at)),
        }
        Ok(done.max(t))
    }
}

impl Design for Dedup {
    fn name(&self) -> &'static str {
        match self.scheme {
            Scheme::Esd => ENTRY.name,
            Scheme::Sha1 => SHA1_ENTRY.name,
            Scheme::DeWrite => DEWRITE_ENTRY.name,
        }
    }

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
        let data = data.expect("the engine hands a design with needs_line_contents every write's bytes");
        self.stats.writes += 1;
        if let Finder::Efit(e) = &mut self.finder {
            e.count_write();
        }
        // ESD's ECC is the controller's own (computed for the DIMM's check bits): no time.
        let fp = fingerprint(self.scheme, data);
        if self.scheme != Scheme::Esd {
            self.stats.fingerprint_ops += 1;
        }
        let hashed = now + self.fingerprint_latency;
        self.stats.write_fingerprint_cycles += (hashed - now).0;
        // DeWrite: a write predicted unique starts its encryption now, beside the hash and
        // lookup; one predicted duplicate waits for them.
        let speculate = self.scheme == Scheme::DeWrite && self.predict_unique;
        if speculate {
            self.stats.predicted_unique += 1;
        }
        let amt_at = self.amt.access(mc, line, false, now)?;
        let (found, looked_up, compared) = self.find_duplicate(mc, &fp, data, hashed)?;
        let looked_up = looked_up.max(amt_at);
        let compared = compared.max(looked_up);
        self.stats.write_lookup_cycles += (looked_up - hashed).0;
        self.stats.write_compare_cycles += (compared - looked_up).0;
        let current = self.amt.mapping(line);
        let duplicate = matches!(found, Found::Duplicate { .. });
        if self.scheme == Scheme::DeWrite {
            match (speculate, duplicate) {
                (true, true) => {
                    // Fig. 4's F4: the line was encrypted and MACed for nothing.
                    self.stats.mispredicted_duplicates += 1;
                    mc.design_crypto(1, 1, now);
                }
                (false, false) => self.stats.mispredicted_uniques += 1,
                _ => {}
            }
            self.predict_unique = !duplicate;
        }
        let encrypt_from = if speculate { now } else { compared };
        let done = match found {
            Found::Duplicate { line: p, .. } if current == Some(p) => {
                self.stats.silent_writes += 1;
                if let Finder::Efit(e) = &mut self.finder {
                    e.add_reference(ecc_of(&fp), p);
                }
                compared
            }
            Found::Duplicate { refer, .. } if refer >= self.refer_max() && self.scheme == Scheme::Esd => {
                self.stats.referh_saturations += 1;
                self.write_unique(mc, line, fp, data, encrypt_from, compared)?
            }
            Found::Duplicate { line: p, .. } if self.amt.refs(p) >= MAX_REFS => self.write_unique(mc, line, fp, data, encrypt_from, compared)?,
            Found::Duplicate { line: p, .. } => {
                self.stats.dedup_writes += 1;
                if let Finder::Efit(e) = &mut self.finder {
                    e.add_reference(ecc_of(&fp), p);
                }
                self.remap(mc, line, current, p, compared)?
            }
            Found::Unique => self.write_unique(mc, line, fp, data, encrypt_from, compared)?,
        };
        let done = done.max(self.amt.commit(mc, compared)?);
        self.stats.write_nvm_cycles += (done - compared).0;
        Ok(done)
    }

    fn finish(&mut self, mc: &mut McOps, now: Cycle) -> Result<Cycle, IntegrityError> {
        let mut t = self.amt.flush(mc, now)?;
        if let Finder::Store(s) = &mut self.finder {
            t = t.max(s.flush(mc, now));
        }
        mc.flush_metadata(t)
    }

    fn crash(&mut self, mc: &mut McOps, keep_metadata_caches: bool) {
        mc.crash(keep_metadata_caches);
        if !keep_metadata_caches {
            // The EFIT and the fingerprint store only find duplicates: losing them loses
            // none of the data. The AMT is read back from NVM by `recover`.
            match &mut self.finder {
                Finder::Efit(e) => e.clear(),
                Finder::Store(s) => s.crash(),
            }
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
        if let Finder::Store(s) = &mut self.finder {
            s.drop_cache();
        }
    }

    fn extra_stats(&self) -> Vec<(&'static str, f64)> {
        let s = &self.stats;
        let a = &self.amt.stats;
        let amt_cache = self.amt.cache_stats();
        let pct = |n: u64| if s.writes == 0 { 0.0 } else { 100.0 * n as f64 / s.writes as f64 };
        let ratio = |h: u64, m: u64| if h + m == 0 { 0.0 } else { h as f64 / (h + m) as f64 };
        let (efit_hits, efit_misses, efit_evictions, efit_entries, efit_stale) = match &self.finder {
            Finder::Efit(e) => (e.stats.hits, e.stats.misses, e.stats.evictions, e.occupancy(), e.stats.stale_removals),
            Finder::Store(_) => (0, 0, 0, 0, 0),
        };
        let (fp_hits, fp_reads, fp_writes, fp_stored) = match &self.finder {
            Finder::Store(f) => (f.cache_stats().hits, f.cache_stats().misses, f.stats.nvm_writes, f.len()),
            Finder::Efit(_) => (0, 0, 0, 0),
        };
        vec![
            ("writes", s.writes as f64),
            ("unique_writes", s.unique_writes as f64),
            ("dedup_writes", s.dedup_writes as f64),
            ("silent_writes", s.silent_writes as f64),
            ("write_reduction_pct", pct(s.dedup_writes + s.silent_writes)),
            ("efit_hits", efit_hits as f64),
            ("efit_misses", efit_misses as f64),
            ("efit_hit_rate", ratio(efit_hits, efit_misses)),
            ("ecc_collisions", s.ecc_collisions as f64),
            ("compare_reads", s.compare_reads as f64),
            ("referh_saturations", s.referh_saturations as f64),
            ("efit_evictions", efit_evictions as f64),
            ("efit_entries", efit_entries as f64),
            ("efit_stale_removals", efit_stale as f64),
            ("amt_cache_hits", amt_cache.hits as f64),
            ("amt_cache_misses", amt_cache.misses as f64),
            ("amt_hit_rate", amt_cache.hit_rate()),
            ("amt_line_writes", a.line_writes as f64),
            ("relocations", a.relocations as f64),
            ("unwritten_reads", s.unwritten_reads as f64),
            ("lines_mapped", self.amt.mapped_lines() as f64),
            ("lines_stored", self.amt.used_lines() as f64),
            ("fingerprint_cache_hits", fp_hits as f64),
            ("fingerprint_nvm_lookups", fp_reads as f64),
            ("fingerprint_nvm_writes", fp_writes as f64),
            ("fingerprints_stored", fp_stored as f64),
            ("fingerprint_ops", s.fingerprint_ops as f64),
            ("fingerprint_energy_nj", s.fingerprint_ops as f64 * self.fingerprint_energy_nj),
            ("nvm_metadata_pct", 100.0 * (amt::ENTRY_BYTES + self.scheme.store_entry_bytes()) as f64 / 64.0),
            ("predicted_unique", s.predicted_unique as f64),
            ("mispredicted_duplicates", s.mispredicted_duplicates as f64),
            ("mispredicted_uniques", s.mispredicted_uniques as f64),
            ("write_fingerprint_cycles", s.write_fingerprint_cycles as f64),
            ("write_lookup_cycles", s.write_lookup_cycles as f64),
            ("write_compare_cycles", s.write_compare_cycles as f64),
            ("write_nvm_cycles", s.write_nvm_cycles as f64),
        ]
    }
}
