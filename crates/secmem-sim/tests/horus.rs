//! Horus and the eADR drain baselines: hand-worked vault cases, drain properties, crash and
//! recovery against an oracle with real crypto, and attacks on the vault.

use secmem_sim::config::Config;
use secmem_sim::harness::drain::{drain_run, worst_case_lines, DrainContent, DrainScheme};
use secmem_sim::run::TraceInput;

/// A small system: 1 GiB, 4 KiB L1, 16 KiB L2, 64 KiB LLC, 4 KiB metadata caches.
fn small(extra: &[&str]) -> Config {
    let mut p: Vec<String> = [
        "memory.capacity_gib=1",
        "l1.size_kib=4",
        "l1.ways=2",
        "l2.size_kib=16",
        "l2.ways=4",
        "llc.size_kib=64",
        "llc.ways=8",
        "metadata_cache.counter.size_kib=4",
        "metadata_cache.mac.size_kib=4",
        "metadata_cache.tree.size_kib=4",
        "workload.requests=4000",
        "workload.footprint_bytes=4194304",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    p.extend(extra.iter().map(|s| s.to_string()));
    Config::load(Some("horus"), None, &p).unwrap()
}

#[test]
fn every_scheme_recovers_the_worst_case_content_exactly() {
    let cfg = small(&["run.functional=true"]);
    for scheme in DrainScheme::all() {
        let out = drain_run(&cfg, scheme, &DrainContent::WorstCase, true).unwrap();
        let o = out.oracle.as_ref().unwrap();
        assert_eq!(o.mismatches, 0, "{scheme:?}: {:?}", o.examples);
        assert_eq!(o.lines_checked, 2 * (64 + 256 + 1024));
        assert_eq!(out.stats.flushed_lines, 64 + 256 + 1024);
    }
}

#[test]
fn every_scheme_recovers_a_trace_crashed_midway() {
    let cfg = small(&["run.functional=true"]);
    for scheme in DrainScheme::all() {
        for after in [1000u64, 2500, 4000] {
            let content = DrainContent::Trace { input: TraceInput::Workload, after_records: Some(after) };
            let out = drain_run(&cfg, scheme, &content, true).unwrap();
            let o = out.oracle.as_ref().unwrap();
            assert_eq!(o.mismatches, 0, "{scheme:?} after {after}: {:?}", o.examples);
            assert!(out.stats.flushed_lines > 0);
        }
    }
}

#[test]
fn worst_case_lines_are_distinct_and_spaced() {
    let cfg = small(&[]);
    let lines = worst_case_lines(&cfg, false).unwrap();
    assert_eq!(lines.len(), 64 + 256 + 1024);
    let mut v: Vec<u64> = lines.iter().map(|l| l.line).collect();
    v.sort_unstable();
    for w in v.windows(2) {
        assert!((w[1] - w[0]) * 64 >= 16384, "{:#x} and {:#x} closer than 16 KB", w[0], w[1]);
    }
}

#[test]
fn every_vault_attack_is_detected_with_its_class() {
    use secmem_sim::harness::vault_attack::{vault_attack_campaign, VAULT_ATTACK_CLASSES};
    let cfg = small(&["workload.requests=6000", "workload.read_ratio=0.3"]);
    for dlm in [false, true] {
        let out = vault_attack_campaign(&cfg, &TraceInput::Workload, dlm, 60, 7).unwrap();
        assert!(out.drained_metadata_blocks > 0, "the trace must leave dirty metadata to attack");
        assert_eq!(out.classes.len(), VAULT_ATTACK_CLASSES.len());
        assert!(out.all_detected(), "{}: {:?} {:?}", out.scheme, out.classes, out.examples);
    }
}

#[test]
fn horus_recovery_writes_lines_home_when_the_llc_is_not_inclusive() {
    let cfg = small(&["run.functional=true", "hierarchy.inclusive_llc=false"]);
    for scheme in [scheme("horus-slm"), scheme("horus-dlm")] {
        for content in [DrainContent::WorstCase, DrainContent::Trace { input: TraceInput::Workload, after_records: Some(3000) }] {
            let out = drain_run(&cfg, scheme, &content, true).unwrap();
            let o = out.oracle.as_ref().unwrap();
            assert_eq!(o.mismatches, 0, "{scheme:?}: {:?}", o.examples);
            assert_eq!(out.recovery.as_ref().unwrap().lines_restored, out.stats.flushed_lines);
        }
    }
}

#[test]
fn same_seed_same_drain() {
    let cfg = small(&[]);
    let a = drain_run(&cfg, scheme("base-lu"), &DrainContent::WorstCase, false).unwrap().to_json();
    let b = drain_run(&cfg, scheme("base-lu"), &DrainContent::WorstCase, false).unwrap().to_json();
    assert_eq!(a, b);
    let c = drain_run(&small(&["run.seed=2"]), scheme("base-lu"), &DrainContent::WorstCase, false).unwrap().to_json();
    assert_ne!(a["memory_reads"], c["memory_reads"], "a different seed places the lines elsewhere");
}

#[test]
fn a_config_contradicting_the_drain_scheme_or_the_vault_attack_is_an_error_not_overridden() {
    // Each used to be overwritten silently: Base-LU with security off still reported 4.7 M MAC
    // operations, and a vault attack on a non-secure lelantus config "passed".
    for (scheme, set, field) in [
        (scheme("base-lu"), "security.enabled=false", "security.enabled"),
        (scheme("base-lu"), "tree.update=\"eager\"", "tree.update"),
        (scheme("horus-dlm"), "security.enabled=false", "security.enabled"),
        (scheme("base-eu"), "run.design=\"horus-slm\"", "run.design"),
    ] {
        let e = drain_run(&small(&[set]), scheme, &DrainContent::WorstCase, false).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains("but the config asks for"), "{scheme:?} {set}: {e}");
    }
    // The scheme's own values, and the defaults it replaces, are fine.
    assert!(drain_run(&small(&["tree.update=\"eager\""]), scheme("base-eu"), &DrainContent::WorstCase, false).is_ok());
    assert!(drain_run(&small(&[]), scheme("nonsecure"), &DrainContent::WorstCase, false).is_ok());
    use secmem_sim::harness::vault_attack::vault_attack_campaign;
    for (set, field) in [("security.enabled=false", "security.enabled"), ("run.design=\"lelantus\"", "run.design")] {
        let e = vault_attack_campaign(&small(&[set]), &TraceInput::Workload, true, 1, 1).unwrap_err().to_string();
        assert!(e.contains(field), "{set}: {e}");
    }
}

#[test]
fn a_recovery_check_with_nothing_written_is_an_error_not_a_pass() {
    // An empty trace drained and "recovered" with 0 lines checked used to exit 0.
    let content = DrainContent::Trace { input: TraceInput::Workload, after_records: Some(0) };
    let e = drain_run(&small(&["run.functional=true"]), scheme("base-eu"), &content, true).unwrap_err().to_string();
    assert!(e.contains("no line to check"), "{e}");
}

#[test]
fn base_eu_recovery_reports_the_same_work_in_counting_and_functional_mode() {
    // Counting mode used to report no recovery work at all (the crash had reset the counter
    // store it counted from): 0 blocks, 0 hashes, 0 s.
    for content in [DrainContent::WorstCase, DrainContent::Trace { input: TraceInput::Workload, after_records: Some(3000) }] {
        let counting = drain_run(&small(&[]), scheme("base-eu"), &content, true).unwrap();
        let functional = drain_run(&small(&["run.functional=true"]), scheme("base-eu"), &content, true).unwrap();
        let (c, f) = (counting.recovery.unwrap(), functional.recovery.unwrap());
        assert!(f.blocks_read > 0 && f.hashes > f.blocks_read, "{f:?}");
        assert_eq!((c.blocks_read, c.hashes, c.cycles, c.serial_cycles), (f.blocks_read, f.hashes, f.cycles, f.serial_cycles), "{content:?}");
    }
}

/// The registered drain scheme called `name`.
fn scheme(name: &str) -> DrainScheme { name.parse().unwrap() }

#[test]
fn a_parent_fetched_unverified_on_a_lazy_eviction_saves_base_lu_hashes_and_reads_and_is_counting_mode_only() {
    let run = |extra: &[&str]| drain_run(&small(extra), scheme("base-lu"), &DrainContent::WorstCase, false).unwrap();
    let (verified, unverified) = (run(&[]), run(&["tree.verify_parent_on_write_back=false"]));
    assert_eq!(verified.stats.flushed_lines, unverified.stats.flushed_lines);
    let (m, r) = (|o: &secmem_sim::harness::drain::DrainOutcome| o.stats.mac_ops.total(), |o: &secmem_sim::harness::drain::DrainOutcome| o.stats.reads.total());
    assert!(m(&unverified) < m(&verified), "{} vs {}", m(&unverified), m(&verified));
    assert!(r(&unverified) < r(&verified), "{} vs {}", r(&unverified), r(&verified));
    // Base-EU updates eagerly: no write-back absorbs a hash, so nothing changes.
    let eu = |extra: &[&str]| drain_run(&small(extra), scheme("base-eu"), &DrainContent::WorstCase, false).unwrap().to_json();
    assert_eq!(eu(&[]), eu(&["tree.verify_parent_on_write_back=false"]));
    let e = drain_run(&small(&["run.functional=true", "tree.verify_parent_on_write_back=false"]), scheme("base-lu"), &DrainContent::WorstCase, true).unwrap_err().to_string();
    assert!(e.contains("tree.verify_parent_on_write_back") && e.contains("functional"), "{e}");
}

#[test]
fn warm_metadata_caches_at_power_loss_save_the_drain_reads_and_still_recover() {
    // Dense worst-case lines (64 B apart) share counter blocks, so a warm cache holds many.
    let dense = ["drain.worst_case_spacing_bytes=64"];
    let run = |extra: &[&str]| drain_run(&small(&[&dense[..], extra].concat()), scheme("base-lu"), &DrainContent::WorstCase, false).unwrap();
    let (empty, warm) = (run(&[]), run(&["drain.metadata_caches=warm"]));
    assert!(warm.stats.reads.total() < empty.stats.reads.total(), "{} vs {}", warm.stats.reads.total(), empty.stats.reads.total());
    let out = drain_run(&small(&[&dense[..], &["drain.metadata_caches=warm", "run.functional=true"]].concat()), scheme("base-lu"), &DrainContent::WorstCase, true).unwrap();
    assert_eq!(out.oracle.unwrap().mismatches, 0);
    // A trace's drain finds what its run left: asking for warm caches there is an error.
    let content = DrainContent::Trace { input: TraceInput::Workload, after_records: None };
    let e = drain_run(&small(&["drain.metadata_caches=warm"]), scheme("base-lu"), &content, false).unwrap_err().to_string();
    assert!(e.contains("drain.metadata_caches") && e.contains("worst-case"), "{e}");
}

#[test]
fn a_per_level_tree_cache_changes_base_lu_tree_traffic_and_needs_a_way_per_level() {
    let run = |extra: &[&str]| drain_run(&small(extra), scheme("base-lu"), &DrainContent::WorstCase, true).unwrap();
    let wide = ["metadata_cache.tree.ways=16"];
    let (shared, split) = (run(&wide), run(&[&wide[..], &["metadata_cache.tree_organisation=per-level"]].concat()));
    assert_eq!(shared.stats.flushed_lines, split.stats.flushed_lines);
    assert_ne!(shared.stats.reads.tree, split.stats.reads.tree, "the partition decides which nodes stay");
    // Recovery still verifies under the partition, with real hashes.
    let f = drain_run(&small(&[&wide[..], &["metadata_cache.tree_organisation=per-level", "run.functional=true"]].concat()), scheme("base-lu"), &DrainContent::WorstCase, true).unwrap();
    assert_eq!(f.oracle.unwrap().mismatches, 0);
    let e = drain_run(&small(&["metadata_cache.tree.ways=2", "metadata_cache.tree_organisation=per-level"]), scheme("base-lu"), &DrainContent::WorstCase, false).unwrap_err().to_string();
    assert!(e.contains("metadata_cache.tree_organisation") && e.contains("node levels"), "{e}");
}
