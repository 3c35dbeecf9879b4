//! eADR power-loss drains (Horus, MICRO'22): what the cache hierarchy holds when power fails,
//! the drain of one scheme over it, the energy and battery that drain needs, and — in
//! functional mode — crash, recovery and a check of every line against an oracle.
//!
//! Content at power loss is either
//! * the paper's worst case (section V-A): every line of every level dirty, each line at
//!   least `drain.worst_case_spacing_bytes` (16 KB) from every other, in a seeded random
//!   order, so the metadata caches see no locality; or
//! * the real state a trace leaves in the hierarchy, crashed after any record.
//!
//! The worst-case lines are handed to the drain directly rather than replayed through the
//! caches: with modulo set indexing, lines 16 KB apart would all fall into 1/256 of the LLC's
//! sets and could never fill it, so the generator produces the *content* the paper assumes
//! (L1's, L2's and the LLC's lines, all distinct — 295,936 for Table I) without placing it.

use crate::config::Config;
use crate::engine::{build_media, Engine};
use crate::harness::replay::{collect, record_error};
use crate::hierarchy::{Hierarchy, Level};
use crate::run::{SimError, TraceInput};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rustc_hash::FxHashMap;
use secmem_core::error::{number, ConfigError};
use secmem_core::{config_enum, config_section, Cycle};
use secmem_media::MemoryPort;
use secmem_schemes::designs::{self, DesignEntry};
use secmem_schemes::controller::eadr::{DrainClock, DrainLine, DrainRecovery, DrainStats};
use serde::Serialize;
use std::cell::RefCell;
use std::rc::Rc;

config_enum! {
    /// What the memory controller's metadata caches hold when the power fails under the
    /// worst-case content (a trace's drain finds whatever its run left).
    pub enum MetadataAtPowerLoss {
        Empty => "empty": "nothing: every counter, MAC and tree node the drain needs is fetched",
        Warm => "warm": "what reading the drained lines into the hierarchy left (LLC's lines first, L1's last), clean"
    }
}

config_section! {
    /// eADR power-loss drains (Horus) and the energy they need.
    pub struct DrainConfig {
        max_inflight: u32 = 16 => "Flushes the memory controller holds at once while draining (its write-back buffer entries); the cache controller stalls when all are busy";
        processor_power_w: f64 = 25.0 => "Processor power while draining, W. Horus takes it from McPAT and does not print it; 25 W is an assumed McPAT-class figure for one 4 GHz out-of-order core with its caches active — put your own McPAT result here";
        supercap_wh_per_cm3: f64 = 1e-4 => "Energy density of a super-capacitor, Wh/cm^3 (Horus section V-G: 1e-4)";
        lithin_wh_per_cm3: f64 = 1e-2 => "Energy density of a lithium thin-film battery, Wh/cm^3 (Horus section V-G: 1e-2)";
        worst_case_spacing_bytes: u64 = 16384 => "Minimum distance between two lines of the worst-case content, bytes (Horus section V-A: 16 KB)";
        metadata_caches: MetadataAtPowerLoss = MetadataAtPowerLoss::Empty => "The metadata caches' content at power loss under the worst-case content: empty (Horus does not say; its worst case gives the metadata caches no locality, section V-A) or warm (left by reading the drained lines in, the memory device then idle)";
    }
}

impl DrainConfig {
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let f = |n: &str| format!("{path}.{n}");
        secmem_core::error::ensure(self.max_inflight > 0, &f("max_inflight"), || "must be > 0".into())?;
        // Ranges far wider than any machine's, narrow enough that the energy and volume
        // figures stay finite numbers (a subnormal density gave an infinite, null, volume).
        for (n, v, lo, hi) in [
            ("processor_power_w", self.processor_power_w, 1e-6, 1e6),
            ("supercap_wh_per_cm3", self.supercap_wh_per_cm3, 1e-9, 1e3),
            ("lithin_wh_per_cm3", self.lithin_wh_per_cm3, 1e-9, 1e3),
        ] {
            secmem_core::error::ensure(v.is_finite() && (lo..=hi).contains(&v), &f(n), || format!("must be in {}..={}, got {}", number(lo), number(hi), number(v)))?;
        }
        secmem_core::error::ensure(
            self.worst_case_spacing_bytes >= 64 && self.worst_case_spacing_bytes.is_multiple_of(64) && self.worst_case_spacing_bytes <= 1 << 40,
            &f("worst_case_spacing_bytes"),
            || format!("must be a positive multiple of 64 up to 2^40 (1 TiB), got {}", self.worst_case_spacing_bytes),
        )
    }
}

/// How the hierarchy is drained on power loss (Horus sections III-IV): one of the drain
/// schemes a registered design offers (`DesignEntry::drain_schemes`: the baseline's
/// `nonsecure`, `base-lu` and `base-eu`, Horus' `horus-slm` and `horus-dlm`), with its design.
#[derive(Clone, Copy, Debug)]
pub struct DrainScheme {
    pub design: &'static DesignEntry,
    pub scheme: &'static designs::DrainScheme,
}

impl PartialEq for DrainScheme {
    fn eq(&self, other: &Self) -> bool { self.scheme.name == other.scheme.name }
}
impl Eq for DrainScheme {}

impl DrainScheme {
    /// Every registered design's drain schemes, in registry order.
    pub fn all() -> Vec<DrainScheme> { designs::drain_schemes().map(|(design, scheme)| DrainScheme { design, scheme }).collect() }

    pub fn as_str(self) -> &'static str { self.scheme.name }

    /// The run-time configuration this scheme implies.
    pub fn apply(self, cfg: &Config) -> Config {
        let mut c = cfg.clone();
        c.security.enabled = self.scheme.secure;
        if let Some(update) = self.scheme.tree_update {
            c.tree.update = update;
        }
        c.run.design = self.design.name.into();
        c
    }
}

impl std::fmt::Display for DrainScheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(self.as_str()) }
}

impl std::str::FromStr for DrainScheme {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let all = Self::all();
        all.iter().copied().find(|d| d.as_str() == s).ok_or_else(|| {
            format!("unknown value '{s}'; known: {}", all.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", "))
        })
    }
}

/// What the hierarchy holds when power fails.
#[derive(Clone, Debug)]
pub enum DrainContent {
    /// The paper's worst case (see the module docs).
    WorstCase,
    /// The state `input` leaves after `after_records` records (all when None).
    Trace { input: TraceInput, after_records: Option<u64> },
}

/// Energy of one drain (Horus Table II) and the battery it needs (Table III).
#[derive(Clone, Debug, Default, Serialize)]
pub struct DrainEnergy {
    pub processor_joules: f64,
    pub nvm_write_joules: f64,
    pub nvm_read_joules: f64,
    pub total_joules: f64,
    pub supercap_cm3: f64,
    pub lithin_cm3: f64,
}

/// The oracle check after recovery (functional mode).
#[derive(Clone, Debug, Default, Serialize)]
pub struct OracleCheck {
    pub lines_checked: u64,
    /// Lines whose recovered content differs from the pre-crash content, or fails to read.
    pub mismatches: u64,
    pub examples: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DrainOutcome {
    pub scheme: String,
    pub stats: DrainStats,
    pub drain_seconds: f64,
    pub energy: DrainEnergy,
    /// Recovery after the crash (when asked for).
    pub recovery: Option<DrainRecovery>,
    pub recovery_seconds: Option<f64>,
    pub oracle: Option<OracleCheck>,
}

impl DrainOutcome {
    /// The flat object `secmem drain` prints.
    pub fn to_json(&self) -> serde_json::Value {
        let s = &self.stats;
        let mut v = serde_json::json!({
            "scheme": self.scheme,
            "drain_cycles": s.drain_cycles,
            "drain_seconds": self.drain_seconds,
            "flushed_lines": s.flushed_lines,
            "metadata_blocks": s.metadata_blocks,
            "memory_reads": s.reads.total(),
            "memory_writes": s.writes.total(),
            "memory_accesses": s.reads.total() + s.writes.total(),
            "mac_ops": s.mac_ops.total(),
            "aes_ops": s.aes_ops,
            "energy_joules": self.energy.total_joules,
            "reads": s.reads,
            "writes": s.writes,
            "macs": s.mac_ops,
            "energy": self.energy,
        });
        if let Some(r) = &self.recovery {
            v["recovery"] = serde_json::to_value(r).unwrap();
            v["recovery_seconds"] = self.recovery_seconds.into();
        }
        if let Some(o) = &self.oracle {
            v["oracle"] = serde_json::to_value(o).unwrap();
        }
        v
    }
}

/// Deterministic content of a worst-case line.
fn pattern(line: u64, seed: u64) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (i, c) in out.chunks_exact_mut(8).enumerate() {
        let v = line.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.rotate_left(29) ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93);
        c.copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// The worst-case content: every line of L1, L2 and the LLC, all distinct, at least
/// `worst_case_spacing_bytes` apart, in a seeded random order, L1's first.
///
/// Memory is cut into slots of twice the spacing; each line takes a random slot (no slot
/// twice) and a random line within the slot's first half, so any two lines are at least the
/// spacing apart. The random offset matters: lines exactly 16 KB apart would all map to the
/// same bank (and their MAC blocks to one bank) under line interleaving, so the drain would
/// measure one bank, not the secure-memory work the paper counts.
pub fn worst_case_lines(cfg: &Config, functional: bool) -> Result<Vec<DrainLine>, ConfigError> {
    let spacing = cfg.drain.worst_case_spacing_bytes;
    let slot_bytes = 2 * spacing;
    let slots = cfg.data_bytes() / slot_bytes;
    let levels = [&cfg.l1, &cfg.l2, &cfg.llc];
    let n: u64 = levels.iter().map(|c| c.lines()).sum();
    if n > slots {
        return Err(ConfigError::new(
            "drain.worst_case_spacing_bytes",
            format!("{n} lines at least {spacing} bytes apart (one per {slot_bytes}-byte slot) need {} bytes, more than the {} bytes of memory", u128::from(n) * u128::from(slot_bytes), cfg.data_bytes()),
        ));
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.run.seed);
    let chosen: Vec<u64> = if slots <= 1 << 25 {
        // Partial Fisher-Yates: the first n slots of a seeded shuffle.
        let mut all: Vec<u32> = (0..slots as u32).collect();
        let (head, _) = all.partial_shuffle(&mut rng, n as usize);
        head.iter().map(|&x| x as u64).collect()
    } else {
        // Too many slots to list: draw with rejection (n is far below slots here, or the
        // memory is huge and sparse draws rarely collide).
        let mut seen = rustc_hash::FxHashSet::default();
        let mut v = Vec::with_capacity(n as usize);
        while (v.len() as u64) < n {
            let x = rand::Rng::gen_range(&mut rng, 0..slots);
            if seen.insert(x) {
                v.push(x);
            }
        }
        v
    };
    let lines_per_slot = slot_bytes / 64;
    let mut out = Vec::with_capacity(n as usize);
    let mut it = chosen.iter();
    for c in levels {
        for _ in 0..c.lines() {
            let slot = *it.next().expect("n slots chosen");
            let line = slot * lines_per_slot + rand::Rng::gen_range(&mut rng, 0..lines_per_slot / 2);
            out.push(DrainLine { line, data: functional.then(|| pattern(line, cfg.run.seed)), read_cycles: c.latency_cycles });
        }
    }
    Ok(out)
}

/// What an eADR flush reads out of `engine`'s hierarchy at power loss: every dirty line once,
/// with its freshest content, costing the hit latency of the level it is read from.
pub fn hierarchy_drain_lines(engine: &Engine) -> Vec<DrainLine> {
    let cfg = &engine.cfg;
    let lat = |l: Level| match l {
        Level::L1 => cfg.l1.latency_cycles,
        Level::L2 => cfg.l2.latency_cycles,
        _ => cfg.llc.latency_cycles,
    };
    engine.hier.dirty_lines_with_level().into_iter().map(|(wb, level)| DrainLine { line: wb.line, data: wb.data, read_cycles: lat(level) }).collect()
}

/// Runs one drain of `scheme` over `content`; with `recover`, then crashes, recovers and (in
/// functional mode) checks every line against the oracle.
pub fn drain_run(cfg: &Config, scheme: DrainScheme, content: &DrainContent, recover: bool) -> Result<DrainOutcome, SimError> {
    // The scheme decides the design, whether memory is secure and (Base-LU/EU) the tree
    // update; a config that asks for another value than the default is a conflict, not
    // something to override silently.
    let forced = scheme.apply(cfg);
    let default = Config::default();
    for (field, asked, unset, runs) in [
        ("run.design", cfg.run.design.clone(), default.run.design.clone(), forced.run.design.clone()),
        ("security.enabled", cfg.security.enabled.to_string(), default.security.enabled.to_string(), forced.security.enabled.to_string()),
        ("tree.update", cfg.tree.update.as_str().to_string(), default.tree.update.as_str().to_string(), forced.tree.update.as_str().to_string()),
    ] {
        if asked != unset && asked != runs {
            return Err(SimError::Config(ConfigError::new(
                field,
                format!("the drain scheme {} runs {field} = {runs}, but the config asks for {asked}", scheme.as_str()),
            )));
        }
    }
    let cfg = forced;
    cfg.validate()?;
    if !matches!(content, DrainContent::WorstCase) && cfg.drain.metadata_caches == MetadataAtPowerLoss::Warm {
        return Err(SimError::Config(ConfigError::new(
            "drain.metadata_caches",
            "warm sets what the worst-case content finds in the metadata caches; a trace's drain finds what its run left there, so leave it at empty",
        )));
    }
    let functional = cfg.run.functional;
    let mut engine = Engine::new(&cfg)?;
    // The oracle: every line's content as the program last wrote it.
    let oracle: Rc<RefCell<FxHashMap<u64, [u8; 64]>>> = Rc::default();
    if functional {
        let o2 = oracle.clone();
        engine.on_persist = Some(Box::new(move |line, data| {
            o2.borrow_mut().insert(line, *data);
        }));
    }
    let lines: Vec<DrainLine> = match content {
        DrainContent::WorstCase => worst_case_lines(&cfg, functional)?,
        DrainContent::Trace { input, after_records } => {
            let mut records = collect(&cfg, input)?;
            if let Some(n) = *after_records {
                // Past the end would silently drain the end state: say so instead.
                if n > records.len() as u64 {
                    return Err(SimError::Config(ConfigError::new(
                        "",
                        format!("after_records (--after) = {n} is past the end of the trace, which has {} records", records.len()),
                    )));
                }
                records.truncate(n as usize);
            }
            for (i, r) in records.iter().enumerate() {
                engine.step(r, i as u64).map_err(|x| record_error(input, &cfg, x))?;
            }
            engine.settle();
            hierarchy_drain_lines(&engine)
        }
    };
    if functional {
        let mut o = oracle.borrow_mut();
        for l in &lines {
            o.insert(l.line, l.data.expect("functional drains carry data"));
        }
    }
    engine.on_persist = None;
    if cfg.drain.metadata_caches == MetadataAtPowerLoss::Warm {
        // Worst-case content (a trace's was refused above): the lines came in by reads (the LLC's longest ago); their metadata stays cached,
        // clean. The device has long been idle when the power fails.
        let mut t = Cycle::ZERO;
        for l in lines.iter().rev() {
            t = engine.design.serve_read(&mut engine.mc, l.line, t).map_err(|e| SimError::Config(ConfigError::new("drain.metadata_caches", format!("warming read failed: {e}"))))?.0;
        }
        engine.mc.media = build_media(&cfg)?;
    }

    // Power fails now.
    let start = engine.now();
    let before = engine.mc.snapshot();
    let mut clock = DrainClock::new(cfg.drain.max_inflight, start);
    let mut stats = DrainStats { flushed_lines: lines.len() as u64, ..Default::default() };
    engine.design.drain(&mut engine.mc, &lines, &mut clock, &mut stats).map_err(|e| SimError::Config(ConfigError::new("drain", format!("integrity failure while draining: {e}"))))?;
    let end = clock.last_done.max(engine.mc.media.drain(clock.now()));
    let after = engine.mc.snapshot();
    stats.absorb_controller(&before, &after);
    stats.drain_cycles = (end - start).0;
    let hz = cfg.core.freq_mhz as f64 * 1e6;
    let drain_seconds = stats.drain_cycles as f64 / hz;
    let e_proc = cfg.drain.processor_power_w * drain_seconds;
    let e_w = stats.writes.total() as f64 * cfg.pcm.write_energy_nj * 1e-9;
    let e_r = stats.reads.total() as f64 * cfg.pcm.read_energy_nj * 1e-9;
    let total = e_proc + e_w + e_r;
    let wh = total / 3600.0;
    let energy = DrainEnergy {
        processor_joules: e_proc,
        nvm_write_joules: e_w,
        nvm_read_joules: e_r,
        total_joules: total,
        supercap_cm3: wh / cfg.drain.supercap_wh_per_cm3,
        lithin_cm3: wh / cfg.drain.lithin_wh_per_cm3,
    };
    let mut out = DrainOutcome { scheme: scheme.as_str().to_string(), stats, drain_seconds, energy, recovery: None, recovery_seconds: None, oracle: None };
    if !recover {
        return Ok(out);
    }

    // Crash: every volatile structure is lost; the vault/NVM image and on-chip persistent
    // registers survive. Recovery starts on an idle device at cycle 0.
    engine.design.crash(&mut engine.mc, false);
    engine.hier = Hierarchy::new(&cfg.l1, &cfg.l2, &cfg.llc, cfg.hierarchy.inclusive_llc, functional);
    engine.mc.media = build_media(&cfg)?;
    let rec = engine.design.recover_drained(&mut engine.mc, Cycle::ZERO).map_err(|e| SimError::Config(ConfigError::new("drain", e.to_string())));
    let rec = match rec {
        Ok(r) => r,
        Err(e) if functional => {
            out.oracle = Some(OracleCheck { lines_checked: 0, mismatches: oracle.borrow().len() as u64, examples: vec![e.to_string()] });
            return Ok(out);
        }
        Err(e) => return Err(e),
    };
    out.recovery_seconds = Some(rec.cycles as f64 / hz);
    if functional {
        if oracle.borrow().is_empty() {
            // A check of no line would pass whatever recovery did.
            return Err(SimError::Config(ConfigError::new(
                "workload",
                "nothing was written before the power loss, so recovery has no line to check against the oracle",
            )));
        }
        out.oracle = Some(check_oracle(&mut engine, &rec, &oracle.borrow()));
    }
    out.recovery = Some(rec);
    Ok(out)
}

/// Puts the recovered lines back (the LLC, dirty, with an inclusive LLC; else home through the
/// secure write path), reads every oracle line, then writes the hierarchy home and reads every
/// line again from memory, so both the restored cache content and the memory it later reaches
/// are checked.
fn check_oracle(engine: &mut Engine, rec: &DrainRecovery, oracle: &FxHashMap<u64, [u8; 64]>) -> OracleCheck {
    let mut chk = OracleCheck::default();
    let inclusive = engine.cfg.hierarchy.inclusive_llc;
    for &(line, data) in &rec.lines {
        let r = if inclusive { engine.restore_dirty_line(line, data) } else { engine.design.write(&mut engine.mc, line, data.as_ref(), Cycle::ZERO).map(|_| ()) };
        if let Err(e) = r {
            chk.mismatches += 1;
            chk.examples.push(format!("writing recovered line {line:#x} home: {e}"));
        }
    }
    let mut lines: Vec<(&u64, &[u8; 64])> = oracle.iter().collect();
    lines.sort_unstable_by_key(|x| *x.0);
    for pass in ["after recovery", "after writing the hierarchy home"] {
        for &(&line, want) in &lines {
            chk.lines_checked += 1;
            let got = match engine.hier.cached_data(line) {
                Some(d) => Ok(Some(d)),
                None => engine.design.read(&mut engine.mc, line, Cycle::ZERO).map(|x| x.1),
            };
            match got {
                Ok(Some(d)) if &d == want => {}
                Ok(d) => {
                    chk.mismatches += 1;
                    if chk.examples.len() < 5 {
                        chk.examples.push(format!("{pass}: line {line:#x} reads {:02x?}.. expected {:02x?}..", d.map(|x| x[0]), want[0]));
                    }
                }
                Err(e) => {
                    chk.mismatches += 1;
                    if chk.examples.len() < 5 {
                        chk.examples.push(format!("{pass}: {e}"));
                    }
                }
            }
        }
        if pass == "after recovery" {
            if let Err(e) = engine.flush_hierarchy() {
                chk.mismatches += 1;
                chk.examples.push(format!("writing the hierarchy home: {e}"));
            }
            engine.hier = Hierarchy::new(&engine.cfg.l1, &engine.cfg.l2, &engine.cfg.llc, inclusive, true);
        }
    }
    chk
}
