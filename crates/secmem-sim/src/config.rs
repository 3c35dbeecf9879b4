//! The whole-run config: every section, layered as defaults < preset < file < `-p` overrides,
//! then checked as a combination before the first simulated cycle (two-phase start).

use crate::presets;
use secmem_core::cache::CacheConfig;
use secmem_core::error::{ensure, number, ConfigError};
use secmem_core::schema::{default_tree, finish, leaf_paths, merge_layer, parse_layer, parse_override, render_commented};
use std::collections::HashMap;
use secmem_core::{config_enum, config_section};

config_enum! {
    /// Where trace records enter the simulated system.
    pub enum TraceLevel {
        Core => "core": "records are the core's loads and stores; they go through L1, L2 and the LLC",
        Memory => "memory": "records are requests arriving at the memory controller (LLC misses and write-backs), as in Ramulator and DRAMSim3 memory traces; the cache hierarchy is bypassed"
    }
}
use secmem_media::pcm::PcmConfig;
use secmem_media::simple::SimpleConfig;

config_enum! {
    /// The memory device behind the secure controller.
    pub enum MemoryDevice {
        Pcm => "pcm": "phase-change memory: channels, banks, read queue, ADR write pending queue ([pcm])",
        Simple => "simple": "fixed latency behind one bandwidth-limited port, as gem5's SimpleMemory ([simple]): the controller's effects apart from a memory technology's"
    }
}

config_enum! {
    /// The contents generated writes carry.
    pub enum WorkloadContents {
        None => "none": "no data: the line's contents are not modelled (functional mode derives them from the line and the store)",
        Synthetic => "synthetic": "each write a line: a popular content repeated (workload.duplicate_pct) or a new one"
    }
}

config_section! {
    /// The main memory: which device, and how much data it holds.
    pub struct MemoryConfig {
        device: MemoryDevice = MemoryDevice::Pcm => "Memory device: pcm ([pcm] section) or simple ([simple] section)";
        capacity_gib: u64 = 32 => "Protected data capacity in GiB (Horus Table I: 32 GB PCM); the security metadata and any design regions are placed above it on the same device";
    }
}
use secmem_schemes::config::{MetadataCachesConfig, SecurityConfig, TreeConfig};
use std::path::Path;

config_section! {
    /// The core model.
    pub struct CoreConfig {
        freq_mhz: u64 = 4000 => "Core clock in MHz (Horus Table I: 4 GHz); every latency in cycles is of this clock";
        ipc: f64 = 1.0 => "Instructions per cycle at which the non-memory instructions between trace records retire";
        max_outstanding_misses: u32 = 8 => "Memory-level parallelism: L1 misses in flight before the core stalls (MSHRs)";
    }
}

config_section! {
    /// How the three cache levels work together.
    pub struct HierarchyConfig {
        inclusive_llc: bool = true => "The LLC holds every line of L1 and L2; an LLC eviction back-invalidates them (Horus Table I: inclusive)";
        write_through: bool = false => "Every store is also sent to the memory controller at once, in program order, and lines stay clean (strict persistency, BMF section 6)";
    }
}

config_section! {
    /// What to run and how.
    pub struct RunConfig {
        trace_level: TraceLevel = TraceLevel::Core => "core (records go through the cache hierarchy) or memory (records are memory-controller requests: use for Ramulator/DRAMSim3 memory traces)";
        design: String = "baseline".to_string() => "Design plugged into the secure controller, by its registered name (secmem designs lists them): baseline (use security.enabled=false for non-secure), horus-slm, horus-dlm, lelantus, lelantus-cow, silent-shredder, bmf";
        seed: u64 = 1 => "Seed for every random choice of the run (and, in functional mode, of the keys)";
        functional: bool = false => "Functional mode: real AES-128-CTR encryption, MACs and tree hashes over real bytes in a sparse NVM image (slower); false = counting/timing mode (same counts)";
        host_threads: u32 = 2 => "Host threads a functional run may use, 1 or 2. With 2, a run of a design whose data path is the baseline's (baseline, horus-slm, horus-dlm) simulates timing on one thread (as counting mode does) and on the other replays its memory-controller requests, with their bytes, through a functional controller (image, crypto, checks, event log); the statistics and event-log hash are those of 1. Counting mode, other designs and the crash and attack harnesses use one, and so does each point of a sweep on several jobs unless the sweep sets this key";
        check_pad_reuse: bool = false => "Functional mode: record every pad used for encryption and fail on a repeat (tests and campaigns)";
        warmup_requests: u64 = 0 => "Trace records simulated before statistics start (stats are end minus warm-up snapshot)";
        max_requests: u64 = 0 => "Stop after this many trace records (0 = the whole trace); the trace's own, before persist.barriers adds any";
        require_aligned: bool = true => "Reject accesses of physical traces that are not naturally aligned (address a multiple of a power-of-two size); false splits any access across the lines it touches. A virtual trace's (a real program's: lackey, captured) unaligned accesses are always split, and counted in meta.translation";
        progress: bool = true => "Show progress on stderr: a line with the rate and ETA on a terminal, else a heartbeat line every 10 s";
        flush_at_end: bool = false => "After the last record, write every dirty line of L1, L2 and the LLC back to memory and wait until it is persistent, counted in stats.flush_at_end, apart from the region of interest: shows the write path of a short trace whose stores never leave the caches (the metadata caches keep their dirty blocks: their write-back is the design's persistence policy)";
        trace_format: String = "auto".to_string() => "Format of the trace file: auto (detected from its first bytes and, for ChampSim, its name) or binary, text, ramulator, dramsim3, lackey, champsim (secmem run --trace-format)";
    }
}

config_section! {
    /// The built-in synthetic workload, used when no trace file is given.
    pub struct WorkloadConfig {
        pattern: String = "random".to_string() => "Access pattern: sequential, random, stride or zipf";
        requests: u64 = 1_000_000 => "Number of trace records to generate";
        footprint_bytes: u64 = 1 << 30 => "Bytes of memory the workload touches (multiple of 64)";
        read_ratio: f64 = 0.5 => "Fraction of records that are reads (0..1)";
        stride_bytes: u64 = 4096 => "Distance between consecutive accesses for the stride pattern, bytes";
        zipf_theta: f64 = 0.99 => "Skew of the zipf (hot/cold) pattern";
        inst_gap: u32 = 10 => "Non-memory instructions between consecutive records";
        persist_writes: bool = false => "Follow every generated write with a clwb of its line and a fence, as a persistent-memory program persists its stores (adds 2 records per write)";
        seed: u64 = 1 => "Seed of the generator";
        contents: WorkloadContents = WorkloadContents::None => "What generated writes carry: none, or synthetic lines with duplicates (for designs that decide on contents, such as deduplication)";
        duplicate_pct: u32 = 60 => "contents = synthetic: share of writes that repeat a popular content, percent (ESD Fig. 1: 62.9% of LLC write-backs duplicate on average)";
        duplicate_contents: u64 = 1024 => "contents = synthetic: how many popular contents the repeated writes draw from";
        duplicate_theta: f64 = 0.99 => "contents = synthetic: Zipf exponent of a repeated write's content, rank 0 the most written (content locality, ESD Fig. 3)";
    }
}

config_section! {
    /// A complete secmem configuration.
    pub struct Config {
        preset: String = "default".to_string() => "Preset this config was built from (informational)";
        core: CoreConfig = CoreConfig::default() => "Core model";
        l1: CacheConfig = CacheConfig::new(64, 2, 2) => "L1 data cache (Horus Table I: 64 KB, 2-way, 2 cycles)";
        l2: CacheConfig = CacheConfig::new(2048, 8, 20) => "L2 cache (Horus Table I: 2 MB, 8-way, 20 cycles)";
        llc: CacheConfig = CacheConfig::new(16384, 16, 32) => "Last-level cache (Horus Table I: 16 MB, 16-way, 32 cycles)";
        hierarchy: HierarchyConfig = HierarchyConfig::default() => "Cache hierarchy policies";
        memory: MemoryConfig = MemoryConfig::default() => "The main memory: device and capacity";
        pcm: PcmConfig = PcmConfig::default() => "The PCM device (memory.device = \"pcm\")";
        simple: SimpleConfig = SimpleConfig::default() => "The simple fixed-latency device (memory.device = \"simple\")";
        security: SecurityConfig = SecurityConfig::default() => "Secure memory";
        tree: TreeConfig = TreeConfig::default() => "Integrity tree";
        metadata_cache: MetadataCachesConfig = MetadataCachesConfig::default() => "Metadata caches in the memory controller";
        run: RunConfig = RunConfig::default() => "Run control";
        design: secmem_schemes::designs::DesignsConfig = secmem_schemes::designs::DesignsConfig::default() => "Each design's own parameters, one section per design ([design.NAME]); run.design picks the design";
        workload: WorkloadConfig = WorkloadConfig::default() => "Built-in synthetic workload (used when no trace is given)";
        translation: crate::translate::TranslationConfig = crate::translate::TranslationConfig::default() => "Virtual-to-physical translation of traces of real programs (first-touch page placement)";
        persist: crate::persist::PersistConfig = crate::persist::PersistConfig::default() => "Persist barriers (flush + fence) inserted into traces that have none, by a rule";
        os: crate::os::OsConfig = crate::os::OsConfig::default() => "The OS memory model (copy-on-write workloads, OS-level traces)";
        drain: crate::harness::drain::DrainConfig = crate::harness::drain::DrainConfig::default() => "eADR power-loss drains (Horus): pacing, energy and battery model, worst-case content";
        ssd: secmem_media::ssd::SsdConfig = secmem_media::ssd::SsdConfig::default() => "The NVMe SSD beside the memory (secmem io): flash geometry and timing, FTL, write buffer";
        io: crate::io::IoConfig = crate::io::IoConfig::default() => "The I/O workload (fio patterns) and the host's I/O path (secmem io)";
    }
}

/// Largest config file read: far past any real one, and a bound on what reading an endless
/// file (`/dev/zero`) takes before the error.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let fail = |m: String| ConfigError::new("", format!("{}: {m}", path.display()));
    let f = std::fs::File::open(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let mut bytes = Vec::new();
    f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes).map_err(|e| fail(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(fail(format!("larger than the {} MiB a config file may be", MAX_CONFIG_BYTES >> 20)));
    }
    String::from_utf8(bytes).map_err(|e| fail(format!("not UTF-8 text (byte offset {})", e.utf8_error().valid_up_to())))
}

/// Sets the shared fields the chosen design's own settings decide
/// ([`secmem_schemes::designs::Implied`]) in the merged layers: over the preset's values; a
/// fixed one that a config file or `-p` contradicts is an error naming the field, a default
/// one gives way to them. A design that cannot be resolved yet is left to validation.
fn apply_design_implications(tree: &mut toml::Value, origin: &mut HashMap<String, String>) -> Result<(), ConfigError> {
    let Ok(cfg) = finish::<Config>(tree.clone()) else { return Ok(()) };
    let Ok(entry) = secmem_schemes::designs::entry(&cfg.run.design) else { return Ok(()) };
    for imp in (entry.implies)(&cfg.design) {
        let layer = parse_override(&format!("{}={}", imp.field, imp.value))?;
        let wanted = value_at(&layer, imp.field).cloned();
        let current = value_at(tree, imp.field).cloned();
        let explicit = origin.get(imp.field).filter(|from| !from.starts_with("preset ")).cloned();
        if let Some(from) = explicit {
            if current != wanted && imp.fixed {
                let shown = current.map_or_else(|| "nothing".to_string(), |v| v.to_string());
                return Err(ConfigError::new(imp.field, format!("{} needs {} = {}, got {shown} (in {from})", imp.because, imp.field, imp.value)));
            }
            continue;
        }
        merge_layer(tree, &layer, "").map_err(|e| ConfigError::new(e.field, format!("{} (implied by {})", e.message, imp.because)))?;
        origin.insert(imp.field.to_string(), imp.because.clone());
    }
    Ok(())
}

/// The value at dotted `path` in a TOML tree.
fn value_at<'a>(tree: &'a toml::Value, path: &str) -> Option<&'a toml::Value> { path.split('.').try_fold(tree, |v, key| v.get(key)) }

impl Config {
    /// Builds a config from a preset name (or none for the defaults), an optional TOML file
    /// and dotted overrides, then validates the combination.
    pub fn load(preset: Option<&str>, file: Option<&Path>, overrides: &[String]) -> Result<Config, ConfigError> {
        let mut tree = default_tree::<Config>();
        // Which layer set each field last: errors found only after the merge (an enum
        // spelling, a range, a combination) name it, as the merge's own errors do.
        let mut origin: HashMap<String, String> = HashMap::new();
        let mut add = |tree: &mut toml::Value, layer: &toml::Value, from: String| -> Result<(), ConfigError> {
            merge_layer(tree, layer, "").map_err(|e| ConfigError::new(e.field, format!("{} (in {from})", e.message)))?;
            let mut paths = Vec::new();
            leaf_paths(layer, "", &mut paths);
            for p in paths {
                origin.insert(p, from.clone());
            }
            Ok(())
        };
        if let Some(name) = preset {
            let p = presets::get(name)?;
            let from = format!("preset '{name}'");
            add(&mut tree, &parse_layer(p.toml, &from)?, from)?;
        }
        if let Some(path) = file {
            let text = read_config_file(path)?;
            let layer = parse_layer(&text, &path.display().to_string())?;
            add(&mut tree, &layer, path.display().to_string())?;
        }
        for o in overrides {
            let layer = parse_override(o)?;
            // `preset` records which preset the layers below came from; setting it loads
            // nothing. `-p preset=bmf` (or `sweep --vary preset=horus,bmf`) ran the machine
            // below under the other preset's name, identical runs labelled differently.
            // A config file may carry it (a resolved config.toml spells out every field).
            if let (Some(want), Some(have)) = (layer.get("preset"), tree.get("preset")) {
                // An unknown name or a wrong type keeps its own error, from validation.
                if want != have && want.as_str().is_some_and(|n| presets::get(n).is_ok()) {
                    let name = |v: &toml::Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
                    return Err(ConfigError::new(
                        "preset",
                        format!(
                            "names the preset the config was built from and loads nothing: this one is built from '{}'; choose a preset with --preset {} (in -p {o})",
                            name(have),
                            name(want)
                        ),
                    ));
                }
            }
            add(&mut tree, &layer, format!("-p {o}"))?;
        }
        apply_design_implications(&mut tree, &mut origin)?;
        let named = |e: ConfigError| match origin.get(&e.field) {
            Some(from) => ConfigError::new(e.field.clone(), format!("{} (in {from})", e.message)),
            None => e,
        };
        let cfg: Config = finish(tree).map_err(named)?;
        cfg.validate().map_err(named)?;
        Ok(cfg)
    }

    /// Checks every section, then the combination.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // Informational, but it must name a preset: a resolved config read back should not
        // claim a source that does not exist.
        presets::get(&self.preset)?;
        ensure(self.core.freq_mhz > 0, "core.freq_mhz", || "must be > 0".into())?;
        ensure(self.core.freq_mhz <= 100_000, "core.freq_mhz", || format!("must be at most 100000 (100 GHz), got {}", self.core.freq_mhz))?;
        ensure(self.core.ipc > 0.0 && self.core.ipc.is_finite(), "core.ipc", || format!("must be > 0, got {}", number(self.core.ipc)))?;
        // Below 1/1000 an instruction gap of 2^32 would overflow the cycle count within a run.
        ensure((1e-3..=1e3).contains(&self.core.ipc), "core.ipc", || format!("must be in 0.001..=1000, got {}", number(self.core.ipc)))?;
        ensure(self.core.max_outstanding_misses > 0, "core.max_outstanding_misses", || "must be > 0".into())?;
        ensure(self.core.max_outstanding_misses <= 4096, "core.max_outstanding_misses", || {
            format!("must be at most 4096, got {}", self.core.max_outstanding_misses)
        })?;
        secmem_core::error::ensure_latency_cycles(self.os.page_fault_cycles, "os.page_fault_cycles")?;
        self.l1.validate("l1")?;
        self.l2.validate("l2")?;
        self.llc.validate("llc")?;
        self.pcm.validate("pcm")?;
        self.simple.validate("simple")?;
        self.persist.validate("persist")?;
        ensure(!self.workload.persist_writes || self.persist.barriers == crate::persist::PersistRule::Trace, "persist.barriers", || {
            "workload.persist_writes already follows every generated write with a flush and a fence: use one or the other".into()
        })?;
        ensure(self.persist.coverage == crate::persist::Coverage::Full || !self.run.functional, "persist.coverage", || {
            "non-stack leaves stack lines unencrypted and outside the persistent memory, so functional mode's checks (every read returns the last data written, crash recovery, attacks) do not hold for them: run it in counting mode (run.functional = false)".into()
        })?;
        self.drain.validate("drain")?;
        ensure(self.memory.capacity_gib > 0, "memory.capacity_gib", || "must be at least 1 GiB".into())?;
        ensure(self.memory.capacity_gib <= 1024, "memory.capacity_gib", || {
            format!("{} GiB is more than the 1024 GiB secmem can address sparsely on one host", self.memory.capacity_gib)
        })?;
        self.security.validate("security")?;
        self.tree.validate("tree")?;
        self.metadata_cache.validate("metadata_cache")?;
        if self.run.trace_format != "auto" {
            self.run.trace_format.parse::<secmem_trace::Format>().map_err(|m| ConfigError::new("run.trace_format", format!("{m}, or auto")))?;
        }
        let design = secmem_schemes::designs::entry(&self.run.design).map_err(|m| ConfigError::new("run.design", m))?;
        // A design other than the baseline is a secure-memory mechanism (Horus' vault,
        // Lelantus' copies encoded in counter blocks, Silent Shredder's zero minors): without
        // security metadata it has nothing to act on, and the run was the non-secure baseline
        // under its name (the OS model quietly fell back to kernel copies).
        ensure(self.security.enabled || !design.needs_security, "security.enabled", || {
            format!(
                "run.design = \"{}\" works on security metadata, so it needs security.enabled = true; a non-secure run is run.design = \"baseline\" with security.enabled = false",
                self.run.design
            )
        })?;
        (design.check)(&self.design_env())?;
        ensure(
            self.run.max_requests == 0 || self.run.warmup_requests < self.run.max_requests,
            "run.warmup_requests",
            || format!("warm-up ({}) must be shorter than run.max_requests ({})", self.run.warmup_requests, self.run.max_requests),
        )?;
        if self.hierarchy.inclusive_llc {
            ensure(self.llc.size_kib >= self.l2.size_kib, "llc.size_kib", || {
                format!("an inclusive LLC ({} KiB) cannot be smaller than L2 ({} KiB)", self.llc.size_kib, self.l2.size_kib)
            })?;
            // The LLC holds every line of L1 too (an L1 larger than the LLC, with a small L2,
            // was accepted).
            ensure(self.llc.size_kib >= self.l1.size_kib, "llc.size_kib", || {
                format!("an inclusive LLC ({} KiB) cannot be smaller than L1 ({} KiB)", self.llc.size_kib, self.l1.size_kib)
            })?;
        }
        let w = &self.workload;
        ensure(["sequential", "random", "stride", "zipf"].contains(&w.pattern.as_str()), "workload.pattern", || {
            format!("unknown pattern '{}'; known: sequential, random, stride, zipf", w.pattern)
        })?;
        ensure((0.0..=1.0).contains(&w.read_ratio), "workload.read_ratio", || format!("must be in [0, 1], got {}", number(w.read_ratio)))?;
        ensure(w.footprint_bytes >= 64 && w.footprint_bytes.is_multiple_of(64), "workload.footprint_bytes", || {
            format!("must be a positive multiple of 64, got {}", w.footprint_bytes)
        })?;
        ensure(w.footprint_bytes <= self.data_bytes(), "workload.footprint_bytes", || {
            format!("{} bytes exceed the memory's {} bytes (memory.capacity_gib)", w.footprint_bytes, self.data_bytes())
        })?;
        ensure(w.requests > 0, "workload.requests", || "must be > 0".into())?;
        crate::run::workload_spec(self)?;
        crate::run::workload_contents(self)?;
        ensure(
            self.security.metadata_persistence != secmem_schemes::config::MetadataPersistence::Strict
                || self.tree.update == secmem_schemes::config::TreeUpdate::Eager,
            "security.metadata_persistence",
            || "strict persistence needs tree.update = \"eager\" (a lazily updated root is stale after a crash)".into(),
        )?;
        if self.run.functional {
            secmem_schemes::SecureMc::check_functional_geometry(&self.security, &self.tree)?;
        }
        ensure(matches!(self.run.host_threads, 1 | 2), "run.host_threads", || format!("must be 1 or 2, got {}", self.run.host_threads))?;
        ensure(!self.run.check_pad_reuse || self.run.functional, "run.check_pad_reuse", || {
            "pads exist only in functional mode: set run.functional = true".into()
        })?;
        Ok(())
    }

    /// Bytes of protected data memory.
    pub fn data_bytes(&self) -> u64 { self.memory.capacity_gib << 30 }

    /// What the design may check its requirements against (`DesignEntry::check`).
    pub fn design_env(&self) -> secmem_schemes::designs::DesignEnv<'_> {
        secmem_schemes::designs::DesignEnv {
            security: &self.security,
            tree: &self.tree,
            metadata_cache: &self.metadata_cache,
            designs: &self.design,
            ctx: crate::engine::design_context(self),
            functional: self.run.functional,
        }
    }

    /// The config as commented TOML (each field preceded by its description).
    pub fn to_commented_toml(&self) -> String { render_commented(self) }

    pub fn to_json(&self) -> serde_json::Value { serde_json::to_value(self).expect("config serializes") }
}

#[cfg(test)]
mod tests {
    use super::Config;

    #[test]
    fn values_past_any_machine_are_rejected_naming_the_field() {
        // Each was accepted once and then overflowed cycle counts (wrong results, exit 0),
        // aborted on a huge allocation, or panicked.
        for (set, field) in [
            ("core.ipc=1e-15", "core.ipc"),
            ("core.ipc=1e6", "core.ipc"),
            ("core.freq_mhz=1000000", "core.freq_mhz"),
            ("core.max_outstanding_misses=4294967295", "core.max_outstanding_misses"),
            ("os.page_fault_cycles=4611686018427387904", "os.page_fault_cycles"),
            ("l1.latency_cycles=1099511627776", "l1.latency_cycles"),
            ("security.hash_latency_cycles=1099511627776", "security.hash_latency_cycles"),
            ("pcm.bus_transfer_ns=1e18", "pcm.bus_transfer_ns"),
            ("pcm.read_latency_ns=1e19", "pcm.read_latency_ns"),
            ("pcm.read_queue_entries=4294967295", "pcm.read_queue_entries"),
            ("drain.supercap_wh_per_cm3=1e-320", "drain.supercap_wh_per_cm3"),
            ("drain.worst_case_spacing_bytes=9223372036854775744", "drain.worst_case_spacing_bytes"),
            ("preset=\"nope\"", "preset"),
        ] {
            let e = Config::load(Some("default"), None, &[set.to_string()]).expect_err(set);
            assert_eq!(e.field, field, "{set}: {e}");
        }
        // An endless file is refused after the size bound, not read until memory runs out.
        let e = Config::load(None, Some(std::path::Path::new("/dev/zero")), &[]).unwrap_err();
        assert!(e.message.contains("larger than the 16 MiB"), "{e}");
        // Naming another preset with -p loads nothing, so it is refused; naming the preset the
        // config is built from is harmless (found by fuzzing: `sweep --vary preset=horus,bmf`
        // ran the default machine twice under two names).
        let e = Config::load(Some("horus"), None, &["preset=bmf".to_string()]).unwrap_err();
        assert!(e.field == "preset" && e.message.contains("--preset bmf") && e.message.contains("'horus'"), "{e}");
        let e = Config::load(None, None, &["preset=\"strict\"".to_string()]).unwrap_err();
        assert!(e.field == "preset" && e.message.contains("'default'"), "{e}");
        assert_eq!(Config::load(Some("bmf"), None, &["preset=bmf".to_string()]).unwrap().preset, "bmf");
        // An inclusive LLC holds every line of L1 as well as of L2 (found by fuzzing: a 4 MiB L1
        // over a 64 KiB L2 and a 1 MiB inclusive LLC ran).
        let big_l1 = ["l1.size_kib=4096", "l2.size_kib=64", "llc.size_kib=1024"].map(String::from);
        let e = Config::load(None, None, &big_l1).unwrap_err();
        assert!(e.field == "llc.size_kib" && e.message.contains("smaller than L1 (4096 KiB)"), "{e}");
        let mut exclusive = big_l1.to_vec();
        exclusive.push("hierarchy.inclusive_llc=false".into());
        assert!(Config::load(None, None, &exclusive).is_ok());
        // A design that acts on security metadata needs it (found by fuzzing: a non-secure
        // lelantus run was the kernel-copy baseline labelled lelantus).
        for d in secmem_schemes::designs::REGISTRY.iter().filter(|d| d.needs_security).map(|d| d.name) {
            let e = Config::load(Some("lelantus"), None, &[format!("run.design=\"{d}\""), "security.enabled=false".into()]).unwrap_err();
            assert!(e.field == "security.enabled" && e.message.contains(d), "{d}: {e}");
        }
        assert!(secmem_schemes::designs::REGISTRY.iter().filter(|d| !d.needs_security).all(|d| d.name == "baseline"), "only the baseline runs non-secure");
        assert!(Config::load(Some("lelantus"), None, &["security.enabled=false".to_string()]).is_ok());
        // The largest accepted values still load.
        let edge = ["core.ipc=0.001", "core.max_outstanding_misses=4096", "os.page_fault_cycles=4294967296", "pcm.bus_transfer_ns=1000"];
        assert!(Config::load(Some("default"), None, &edge.map(String::from)).is_ok());
    }

    #[test]
    fn errors_found_after_the_merge_name_the_layer_that_set_the_value() {
        // A bad spelling or range is only seen once the layers are merged; the message must
        // still say which file or override to fix, as a wrong type or unknown key does.
        let dir = std::env::temp_dir().join(format!("secmem-config-origin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("bad.toml");
        std::fs::write(&file, "[tree]\nupdate = \"lazyy\"\n").unwrap();
        let e = Config::load(Some("horus"), Some(&file), &[]).unwrap_err();
        assert_eq!(e.field, "tree.update");
        assert!(e.message.contains(&format!("(in {})", file.display())), "{e}");
        std::fs::write(&file, "[tree]\narity = 1\n").unwrap();
        let e = Config::load(None, Some(&file), &[]).unwrap_err();
        assert!(e.field == "tree.arity" && e.message.contains(&format!("(in {})", file.display())), "{e}");
        // The last layer to set a field is the one named.
        let e = Config::load(None, Some(&file), &["tree.arity=0".into()]).unwrap_err();
        assert!(e.message.ends_with("(in -p tree.arity=0)"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        // An enum spelling given with -p names the override.
        let e = Config::load(None, None, &["tree.update=lazyy".into()]).unwrap_err();
        assert!(e.message.ends_with("(in -p tree.update=lazyy)"), "{e}");
    }

    #[test]
    fn a_designs_own_section_is_checked_by_the_design_naming_its_field() {
        let cow = |extra: &[&str]| {
            let mut o = vec!["run.design=\"lelantus-cow\"".to_string()];
            o.extend(extra.iter().map(|s| s.to_string()));
            Config::load(Some("lelantus"), None, &o)
        };
        let c = cow(&["design.lelantus.cow_cache_kib=16"]).unwrap();
        assert_eq!(c.design.lelantus.cow_cache_lines(), 256);
        for (set, field) in [
            ("design.lelantus.cow_cache_ways=0", "design.lelantus.cow_cache_ways"),
            ("design.lelantus.cow_cache_kib=0", "design.lelantus.cow_cache_kib"),
            ("design.lelantus.cow_cache_kib=1024", "metadata_cache.counter.size_kib"),
        ] {
            let e = cow(&[set]).unwrap_err();
            assert_eq!(e.field, field, "{set}: {e}");
        }
        let e = cow(&["design.lelantus.cow_cache_size=1"]).unwrap_err();
        assert!(e.to_string().contains("cow_cache_size"), "an unknown key is refused: {e}");
    }
}
