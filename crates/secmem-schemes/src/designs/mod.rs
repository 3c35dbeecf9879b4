//! The designs, one room each, and the seam they plug into.
//!
//! * [`Design`] — the hooks a design may override; every hook defaults to the baseline's
//!   behaviour, so a design overrides only what its paper changes (Lelantus the write path
//!   and page commands, Horus the eADR drain and its recovery, Silent Shredder zero pages).
//!   A design sees the controller only through [`McOps`], the documented operations of the
//!   shared controller (`controller/ops.rs`), which sees the device only through `MemoryPort`.
//!   Latency is recorded once, around the hook, by `serve_read`
//!   and `serve_write` (inherent methods of `dyn Design`).
//! * [`DesignEntry`] — what generic code may ask of a design before it is built: its name,
//!   whether it needs security metadata, its own checks of the config, the NVM regions it
//!   needs above the baseline's layout, and how to build it.
//! * [`REGISTRY`] — the closed list of entries, the one place that names every design. Generic
//!   code (config checks, the engine, the OS model, the harnesses, the conformance suite) finds
//!   a design here and never compares design names.
//!
//! One file per design: [`baseline`], [`horus`], [`lelantus`] (both encodings),
//! [`silent_shredder`], [`bmf`] (a folder: the design and its forest), [`esd`] (a folder: the
//! design, its EFIT and its AMT). `docs/architecture.md`, "Adding a design", walks through adding one.

pub mod baseline;
pub mod bmf;
pub mod esd;
pub mod horus;
pub mod lelantus;
pub mod silent_shredder;
#[cfg(feature = "example-design")]
pub mod write_verify;

use crate::config::{MetadataCachesConfig, SecurityConfig, TreeConfig, TreeUpdate};
use crate::controller::eadr::{self, DrainClock, DrainLine, DrainRecovery, DrainRecoveryError, DrainStats};
use crate::controller::functional::IntegrityError;
use crate::controller::ops::McOps;
use crate::controller::tree_update::TreeUpdateStrategy;
use crate::controller::SecureMc;
use secmem_core::error::ConfigError;
use secmem_core::Cycle;

pub use baseline::Baseline;

/// Page-level memory-controller commands issued by an OS model (Lelantus' page_copy /
/// page_phyc / page_free; zero-fill for Silent Shredder).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PageCommand {
    /// Copy 4 KB page `src` to page `dst` (page indices).
    Copy { src: u64, dst: u64 },
    /// Physically materialise every not-yet-copied line of a lazily copied page.
    Materialize { page: u64 },
    /// The OS freed `page`.
    Free { page: u64 },
    /// Zero-fill `page`.
    Zero { page: u64 },
}

/// A design refused an operation it does not model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    pub design: &'static str,
    pub operation: String,
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "design '{}' does not support {}", self.design, self.operation)
    }
}
impl std::error::Error for Unsupported {}

/// Why a page command did not complete: the design does not model it (the OS then falls back
/// to doing the work itself), or it failed an integrity check on the way (tampered metadata:
/// the run stops there, as a read or write would).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageCommandError {
    Unsupported(Unsupported),
    Integrity(IntegrityError),
}

impl std::fmt::Display for PageCommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PageCommandError::Unsupported(u) => u.fmt(f),
            PageCommandError::Integrity(e) => e.fmt(f),
        }
    }
}
impl std::error::Error for PageCommandError {}
impl From<Unsupported> for PageCommandError {
    fn from(u: Unsupported) -> Self { PageCommandError::Unsupported(u) }
}
impl From<IntegrityError> for PageCommandError {
    fn from(e: IntegrityError) -> Self { PageCommandError::Integrity(e) }
}

pub trait Design {
    /// Short public name, as spelled in configs.
    fn name(&self) -> &'static str;

    /// An LLC miss for data `line` arriving at the controller at `now`; returns when the
    /// plaintext is usable by the core and, in functional mode, the verified plaintext.
    fn read(&mut self, mc: &mut McOps, line: u64, now: Cycle) -> Result<(Cycle, Option<[u8; 64]>), IntegrityError> {
        mc.read_line(line, now)
    }

    /// A data write (LLC write-back, flush or write-through) of `line`; `data` is the new
    /// plaintext (always present in functional mode). Returns when the write is persistent.
    fn write(&mut self, mc: &mut McOps, line: u64, data: Option<&[u8; 64]>, now: Cycle) -> Result<Cycle, IntegrityError> {
        mc.write_line(line, data, now)
    }

    /// A persist barrier reached the controller at `now`.
    fn fence(&mut self, mc: &mut McOps, now: Cycle) -> Cycle {
        let _ = mc;
        now
    }

    /// A page-level command from the OS model.
    fn page_command(&mut self, mc: &mut McOps, cmd: PageCommand, now: Cycle) -> Result<Cycle, PageCommandError> {
        let _ = (mc, now);
        Err(Unsupported { design: self.name(), operation: format!("{cmd:?}") }.into())
    }

    /// Make the design's state durable (baseline: flush dirty metadata, so the tree in NVM
    /// matches the root register).
    fn finish(&mut self, mc: &mut McOps, now: Cycle) -> Result<Cycle, IntegrityError> { mc.flush_metadata(now) }

    /// Power loss: the design loses its volatile state (the crash harness calls this on a
    /// controller holding a copy of what survived: the NVM image and the root register).
    fn crash(&mut self, mc: &mut McOps, keep_metadata_caches: bool) { mc.crash(keep_metadata_caches) }

    /// Recovery after a crash: rebuild and verify what the design needs to read memory again.
    fn recover(&mut self, mc: &mut McOps, now: Cycle) -> Result<crate::controller::recovery::RecoveryReport, crate::controller::recovery::RecoveryError> {
        mc.rebuild_and_verify(now)
    }

    /// A copy of the design, on-chip state included: what survives power loss when that state
    /// is battery-backed (`security.metadata_persistence = "battery-backed"`); the crash
    /// harness recovers on the copy while the live run goes on.
    fn clone_box(&self) -> Box<dyn Design>;

    /// Design-specific counters for the report (flat name -> value).
    fn extra_stats(&self) -> Vec<(&'static str, f64)> { Vec::new() }

    /// The device line that holds logical data line `line`'s bytes: `line` itself, unless the
    /// design remaps lines (deduplication). Attack harnesses tamper with this line to attack
    /// `line`'s data.
    fn data_line_of(&self, line: u64) -> u64 { line }

    /// The name of design metadata this design keeps in data lines of its own (read and
    /// written through the controller's secure data path), for the attack harness's classes
    /// `tamper-NAME`, `replay-NAME` and `splice-NAME`; None if it keeps none. Metadata kept
    /// in counter blocks needs no class of its own: the counter classes cover it.
    fn attack_surface_name(&self) -> Option<&'static str> { None }

    /// The metadata lines of [`attack_surface_name`](Self::attack_surface_name) now in use,
    /// each with a data line whose read fetches and verifies it (after
    /// [`drop_metadata_caches`](Self::drop_metadata_caches)): `(metadata line, data line)`,
    /// device line numbers.
    fn attack_surface(&self, mc: &McOps) -> Vec<(u64, u64)> {
        let _ = mc;
        Vec::new()
    }

    /// Forgets every clean on-chip copy of metadata, the controller's and the design's own, so
    /// that the next accesses fetch and verify it from NVM (attack harnesses, after `finish`:
    /// nothing dirty may be on chip).
    fn drop_metadata_caches(&mut self, mc: &mut McOps) { mc.drop_metadata_caches() }

    /// eADR power loss: make `lines` (every dirty line of the cache hierarchy) and the
    /// metadata caches durable and recoverable, paced by `clock`; the design adds the counts
    /// only it knows (vault writes, its MACs) to `stats`. Default: every line through this
    /// design's write path, then the metadata caches written home with full propagation to the
    /// root (correct under either tree update; Base-EU's drain).
    fn drain(&mut self, mc: &mut McOps, lines: &[DrainLine], clock: &mut DrainClock, stats: &mut DrainStats) -> Result<(), IntegrityError> {
        let _ = stats;
        eadr::drain_in_place(mc, lines, clock, &mut |mc, line, data, t| self.write(mc, line, data, t))?;
        let done = mc.flush_metadata(clock.now())?;
        clock.complete(done);
        Ok(())
    }

    /// Recovery after a drain and a crash: rebuild and verify what the design needs, and hand
    /// back lines to put into the cache hierarchy again. Default: rebuild the tree from NVM and
    /// check it against the root register (what a drain that wrote everything home needs).
    fn recover_drained(&mut self, mc: &mut McOps, now: Cycle) -> Result<DrainRecovery, DrainRecoveryError> {
        Ok(self.recover(mc, now)?.into())
    }
}

impl dyn Design {
    /// A core-level read (an LLC miss of data `line` at `now`) served by the design, with its
    /// latency recorded in the controller's read-latency histogram. The one place read latency
    /// is accounted: a design's hook returns when the plaintext is usable, whatever it did
    /// inside (reads of its own metadata are part of that latency, not requests of their own).
    #[inline]
    pub fn serve_read(&mut self, mc: &mut SecureMc, line: u64, now: Cycle) -> Result<(Cycle, Option<[u8; 64]>), IntegrityError> {
        let r = self.read(mc, line, now)?;
        mc.stats.read_latency.record((r.0 - now).0);
        Ok(r)
    }

    /// A core-level write (an LLC write-back, flush or write-through of `line` at `now`)
    /// served by the design, with its latency (until persistent) recorded once, as
    /// `serve_read` does for reads.
    #[inline]
    pub fn serve_write(&mut self, mc: &mut SecureMc, line: u64, data: Option<&[u8; 64]>, now: Cycle) -> Result<Cycle, IntegrityError> {
        let done = self.write(mc, line, data, now)?;
        mc.stats.write_latency.record((done - now).0);
        Ok(done)
    }
}

/// What a design may need to know about the system it is built into.
#[derive(Clone, Copy, Debug, Default)]
pub struct DesignContext {
    /// Lines in L1 + L2 + LLC (the most an eADR drain can flush).
    pub hierarchy_lines: u64,
    /// Blocks in the counter, MAC and tree caches.
    pub metadata_lines: u64,
    /// Bytes of protected data memory (the tree's leaves are its counter blocks).
    pub data_bytes: u64,
    /// The integrity tree's arity.
    pub tree_arity: u64,
    /// `security.metadata_persistence = "strict"`: each write persists its metadata.
    pub strict_persistence: bool,
    /// The core clock, MHz (for a design's latencies given in ns).
    pub freq_mhz: u64,
}

/// The parts of a config a design may check its own requirements against, before the first
/// simulated cycle (the second phase of a two-phase start).
#[derive(Clone, Copy, Debug)]
pub struct DesignEnv<'a> {
    pub security: &'a SecurityConfig,
    pub tree: &'a TreeConfig,
    pub metadata_cache: &'a MetadataCachesConfig,
    /// The designs' own sections (`[design.NAME]`).
    pub designs: &'a DesignsConfig,
    pub ctx: DesignContext,
    /// Whether the run is functional (real bytes and cryptography).
    pub functional: bool,
}

secmem_core::config_section! {
    /// Each design's own parameters: one section per design family that has any
    /// (`[design.NAME]`), declared in the design's file. A design checks its section, with the
    /// rest of the config, in its `DesignEntry::check`.
    pub struct DesignsConfig {
        lelantus: lelantus::LelantusConfig = lelantus::LelantusConfig::default() => "Lelantus and Lelantus-CoW (HPCA'20): the CoW-metadata cache";
        bmf: bmf::BmfConfig = bmf::BmfConfig::default() => "Bonsai Merkle Forests (MICRO'21): persistency model, forest and nvMC";
        esd: esd::EsdConfig = esd::EsdConfig::default() => "ESD (HPCA'23) and its baselines dedup_sha1 and dewrite: the EFIT, the AMT cache, the fingerprints";
    }
}

/// An NVM region a design needs beyond the baseline's layout (data | counters | MACs | tree),
/// e.g. Horus' Cache Hierarchy Vault. A design's regions are placed above the tree, from
/// [`eadr::reserved_base`] (4 KiB aligned) on, in the order declared, and the device is sized
/// to hold them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// Short name, as printed in the report's layout.
    pub name: &'static str,
    pub size_bytes: u64,
}

/// Builds a design's own tree update strategy (see [`DesignEntry::tree_update`]).
pub type TreeUpdateFactory = fn(&DesignContext, &DesignsConfig) -> Box<dyn TreeUpdateStrategy>;

/// Everything generic code may ask of a design without building it. Each design's file
/// defines its entry (or entries, for variants); [`REGISTRY`] lists them.
pub struct DesignEntry {
    /// Public name, as spelled in `run.design`.
    pub name: &'static str,
    /// One line for `--help`, `config show` and errors.
    pub summary: &'static str,
    /// The design acts on security metadata (counters, MACs, tree), so it has nothing to act
    /// on under `security.enabled = false`. Only the baseline runs non-secure.
    pub needs_security: bool,
    /// Reads, writes, fences and `finish` are the controller's baseline paths, unchanged: a
    /// functional run may then replay its controller requests on a second host thread
    /// (`run.host_threads`), where no design is present.
    pub baseline_data_path: bool,
    /// The design's decisions depend on the contents of the lines written (deduplication,
    /// compression): counting mode then carries line contents through the cache hierarchy to
    /// the design's `write`, as functional mode does, so both modes give the same counts.
    pub needs_line_contents: bool,
    /// The design's own checks of the config (field errors name the field).
    pub check: fn(&DesignEnv) -> Result<(), ConfigError>,
    /// Shared config fields the design's own settings decide (a persistency model's store
    /// order, barriers and metadata persistence), applied when the config is loaded, over the
    /// preset's values ([`Implied`]).
    pub implies: fn(&DesignsConfig) -> Vec<Implied>,
    /// NVM regions the design needs above the baseline's layout.
    pub regions: fn(&DesignContext) -> Vec<Region>,
    /// Data lines at the top of data memory in which the design keeps records of its own
    /// (read and written through the secure data path, like data), out of `data_lines`.
    pub data_lines_reserved: fn(u64) -> u64,
    /// The eADR drain schemes the design offers (`secmem drain --scheme NAME`).
    pub drain_schemes: &'static [DrainScheme],
    /// The design's own tree update strategy, installed in every controller built for it in
    /// place of `tree.update`'s (None: `tree.update` decides, lazy or eager).
    pub tree_update: Option<TreeUpdateFactory>,
    /// Builds the design, with the designs' own config sections.
    pub build: fn(&DesignContext, &DesignsConfig) -> Box<dyn Design>,
    /// What each of [`Design::extra_stats`]'s names counts (reported as `stats.design.NAME`);
    /// the conformance suite checks that every name a run reports is here.
    pub stats: &'static [secmem_core::stats::StatDoc],
}

/// An eADR power-loss drain scheme a design offers (Horus sections III-IV): a name for
/// `secmem drain --scheme` and the run-time settings the scheme implies for its design.
#[derive(Debug, PartialEq, Eq)]
pub struct DrainScheme {
    pub name: &'static str,
    /// One line for `--help` and the drain report.
    pub summary: &'static str,
    /// Runs with security metadata (false: the non-secure reference).
    pub secure: bool,
    /// The tree update the scheme runs with (None: the config's).
    pub tree_update: Option<TreeUpdate>,
}

impl std::fmt::Debug for DesignEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.debug_struct("DesignEntry").field("name", &self.name).finish_non_exhaustive() }
}

/// A shared config field a design's settings decide: `field` (dotted) is set to `value` (a TOML
/// value, as after `-p field=`). A `fixed` one the run's own layers (a config file, `-p`) may
/// not contradict: that is a config error naming the field. A default one (not `fixed`) gives
/// way to them and overrides only the preset's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Implied {
    pub field: &'static str,
    pub value: &'static str,
    pub fixed: bool,
    /// What decides it, for messages (`design.bmf.persistency = "sp"`).
    pub because: String,
}

/// For a design whose settings decide no shared field.
pub fn implies_nothing(_: &DesignsConfig) -> Vec<Implied> { Vec::new() }

/// A check for a design that has none of its own.
pub fn no_check(_: &DesignEnv) -> Result<(), ConfigError> { Ok(()) }
/// For a design that needs no region of its own.
pub fn no_regions(_: &DesignContext) -> Vec<Region> { Vec::new() }
/// For a design that keeps no records in data memory.
pub fn no_data_lines(_: u64) -> u64 { 0 }

/// Every drain scheme of every registered design, in registry order, with its design.
pub fn drain_schemes() -> impl Iterator<Item = (&'static DesignEntry, &'static DrainScheme)> {
    REGISTRY.iter().flat_map(|e| e.drain_schemes.iter().map(move |s| (*e, s)))
}

/// Every design, in the order `--help` lists them. The one list: a design added here is
/// accepted by `run.design`, sized, checked, and covered by the conformance suite
/// (`crates/secmem-sim/tests/conformance.rs`).
///
/// Test builds (feature `example-design`) also register the example design of
/// `docs/architecture.md`, so the conformance suite shows it covers a design it was never
/// told about.
pub static REGISTRY: &[&DesignEntry] = &[
    &baseline::ENTRY,
    &horus::SLM_ENTRY,
    &horus::DLM_ENTRY,
    &lelantus::RESIZED_ENTRY,
    &lelantus::COW_ENTRY,
    &silent_shredder::ENTRY,
    &bmf::ENTRY,
    &esd::ENTRY,
    &esd::SHA1_ENTRY,
    &esd::DEWRITE_ENTRY,
    #[cfg(feature = "example-design")]
    &write_verify::ENTRY,
];

/// The registered design called `name`, or an error listing the known names.
pub fn entry(name: &str) -> Result<&'static DesignEntry, String> {
    REGISTRY.iter().copied().find(|e| e.name == name).ok_or_else(|| format!("unknown design '{name}'; known: {}", names().join(", ")))
}

/// Every registered design's name.
pub fn names() -> Vec<&'static str> { REGISTRY.iter().map(|e| e.name).collect() }

/// Builds a design by its public name.
pub fn build(name: &str, ctx: &DesignContext, cfg: &DesignsConfig) -> Result<Box<dyn Design>, String> { Ok((entry(name)?.build)(ctx, cfg)) }

/// The most data lines any registered design reserves for its records (`data_lines_reserved`).
/// The OS model gives out no frame there under any design, so that one OS-level trace places
/// its pages in the same frames whichever design runs it, and runs compare like with like.
pub fn data_lines_reserved_by_any(data_lines: u64) -> u64 { REGISTRY.iter().map(|e| (e.data_lines_reserved)(data_lines)).max().unwrap_or(0) }

/// One region of the composed device layout.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlacedRegion {
    pub name: &'static str,
    pub base: u64,
    pub size_bytes: u64,
}

/// The device's address space for one design: the baseline's regions (data | counters |
/// MACs | tree) and, above them from [`eadr::reserved_base`], the design's own. It sizes the
/// device and is printed in the report (`meta.layout`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceLayout {
    pub regions: Vec<PlacedRegion>,
    /// First byte past the last region: the device capacity the design needs.
    pub end: u64,
}

impl DeviceLayout {
    /// `baseline` (the shared controller's layout) with `design`'s regions above it.
    pub fn compose(baseline: &secmem_core::tree::SecureLayout, design: &DesignEntry, ctx: &DesignContext) -> DeviceLayout {
        let tree_base = baseline.mac_base + baseline.mac_blocks * 64;
        let mut regions = vec![
            PlacedRegion { name: "data", base: 0, size_bytes: baseline.data_bytes },
            PlacedRegion { name: "counters", base: baseline.counter_base, size_bytes: baseline.counter_blocks * 64 },
            PlacedRegion { name: "macs", base: baseline.mac_base, size_bytes: baseline.mac_blocks * 64 },
            PlacedRegion { name: "tree", base: tree_base, size_bytes: baseline.end - tree_base },
        ];
        let mut next = eadr::region_base(baseline);
        for r in (design.regions)(ctx) {
            regions.push(PlacedRegion { name: r.name, base: next, size_bytes: r.size_bytes });
            next = (next + r.size_bytes).div_ceil(4096) * 4096;
        }
        let end = regions.iter().map(|r| r.base + r.size_bytes).max().unwrap_or(0);
        DeviceLayout { regions, end }
    }

    /// The layout as the report prints it: `{name: {base, size_bytes}}` and `device_bytes`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for r in &self.regions {
            m.insert(r.name.to_string(), serde_json::json!({"base": r.base, "size_bytes": r.size_bytes}));
        }
        m.insert("device_bytes".into(), serde_json::json!(self.end));
        serde_json::Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_design_built_by_its_config_name_reports_that_name() {
        // Reports and error messages name the design through `name()`.
        let ctx = DesignContext { hierarchy_lines: 1024, metadata_lines: 256, data_bytes: 1 << 30, tree_arity: 8, strict_persistence: false, freq_mhz: 4000 };
        for e in REGISTRY {
            assert_eq!((e.build)(&ctx, &DesignsConfig::default()).name(), e.name);
        }
    }

    #[test]
    fn a_designs_regions_sit_above_the_tree_without_overlap_and_size_the_device() {
        let base = secmem_core::tree::SecureLayout::new(1 << 30, 8, 64).unwrap();
        let ctx = DesignContext { hierarchy_lines: 1024, metadata_lines: 256, data_bytes: 1 << 30, tree_arity: 8, strict_persistence: false, freq_mhz: 4000 };
        for e in REGISTRY {
            let l = DeviceLayout::compose(&base, e, &ctx);
            assert_eq!(l.regions.len(), 4 + (e.regions)(&ctx).len(), "{}", e.name);
            for w in l.regions.windows(2) {
                assert!(w[0].base + w[0].size_bytes <= w[1].base, "{}: {} overlaps {}", e.name, w[0].name, w[1].name);
            }
            assert!(l.end >= base.end, "{}", e.name);
            assert_eq!(l.end, l.regions.last().map(|r| r.base + r.size_bytes).unwrap(), "{}", e.name);
        }
    }

    #[test]
    fn no_two_drain_schemes_share_a_name() {
        let mut names: Vec<_> = drain_schemes().map(|(_, s)| s.name).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn no_two_designs_share_a_name() {
        let mut names = names();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REGISTRY.len());
    }

    #[test]
    fn an_unknown_design_is_refused_with_the_known_names() {
        let e = entry("nope").unwrap_err();
        assert!(e.contains("unknown design 'nope'") && e.contains("baseline") && e.contains("silent-shredder"), "{e}");
    }
}
