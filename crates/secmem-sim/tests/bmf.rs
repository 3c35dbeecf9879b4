//! Bonsai Merkle Forests on the `bmf` preset's machine: the persistency models and what they
//! fix of the run, the forests' update heights, and the config errors of a forest the design
//! cannot build.

use secmem_sim::harness::{attack_campaign, crash_campaign};
use secmem_sim::{Config, TraceInput};
use serde_json::Value;

fn cfg(extra: &[&str]) -> Result<Config, String> {
    let mut o: Vec<String> = ["run.progress=false", "run.design=bmf", "workload.requests=40000"].iter().map(|s| s.to_string()).collect();
    o.extend(extra.iter().map(|s| s.to_string()));
    Config::load(Some("bmf"), None, &o).map_err(|e| e.to_string())
}

fn stats(extra: &[&str]) -> Value {
    let c = cfg(extra).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
    secmem_sim::run(&c, &TraceInput::Workload).unwrap_or_else(|e| panic!("{extra:?}: {e}"))["stats"].clone()
}

fn design(s: &Value, key: &str) -> f64 { s["design"][key].as_f64().unwrap_or_else(|| panic!("no stats.design.{key}: {}", s["design"])) }

/// A hot spot: zipf over 64 MiB of the 8 GiB.
const HOT: [&str; 2] = ["workload.pattern=zipf", "workload.footprint_bytes=67108864"];

const O3: [&str; 1] = ["design.bmf.persistency=o3"];
const SECURE_WB: [&str; 2] = ["design.bmf.persistency=secure_wb", "design.bmf.forest=off"];

#[test]
fn each_persistency_model_fixes_the_store_order_barriers_and_metadata_persistence_it_needs() {
    use secmem_schemes::config::{MetadataPersistence, TreeUpdate};
    use secmem_sim::persist::PersistRule;
    let sp = cfg(&[]).unwrap();
    assert!(sp.hierarchy.write_through && sp.persist.barriers == PersistRule::EveryStore);
    assert_eq!((sp.security.metadata_persistence, sp.tree.update), (MetadataPersistence::Strict, TreeUpdate::Eager));
    let o3 = cfg(&O3).unwrap();
    assert!(!o3.hierarchy.write_through && o3.persist.barriers == PersistRule::EveryNStores);
    // o3's epochs may come from a trace's own barriers instead: the rule gives way.
    assert_eq!(cfg(&[&O3[..], &["persist.barriers=trace"]].concat()).unwrap().persist.barriers, PersistRule::Trace);
    let wb = cfg(&SECURE_WB).unwrap();
    assert_eq!((wb.security.metadata_persistence, wb.tree.update, wb.hierarchy.write_through), (MetadataPersistence::WriteBack, TreeUpdate::Lazy, false));
    // A run that contradicts its model is refused, naming the field and the model.
    let e = cfg(&["hierarchy.write_through=false"]).unwrap_err();
    assert!(e.contains("'hierarchy.write_through'") && e.contains("design.bmf.persistency = \"sp\""), "{e}");
    // The baseline design on the same preset is left as the preset has it.
    let base = Config::load(Some("bmf"), None, &[]).unwrap();
    assert!(!base.hierarchy.write_through && base.persist.barriers == PersistRule::Trace);
}

#[test]
fn an_update_climbs_the_full_8_level_tree_without_a_forest_and_6_levels_with_a_static_4kb_one() {
    // 8 GiB at arity 8: 2^21 counter blocks ... 1 root = 8 levels (BMF Table 1); a 4 KB nvMC
    // holds the 64 nodes of level 5, so updates stop there: 6 levels (Fig. 9's sbmf).
    let off = stats(&["design.bmf.forest=off"]);
    let sbmf = stats(&["design.bmf.forest=static"]);
    assert_eq!((design(&off, "avg_update_height"), design(&off, "height_8")), (8.0, design(&off, "updates")));
    assert_eq!((design(&sbmf, "avg_update_height"), design(&sbmf, "nvmc_roots")), (6.0, 64.0));
    assert!(off["security"]["mac_ops"]["tree_update"].as_f64().unwrap() > sbmf["security"]["mac_ops"]["tree_update"].as_f64().unwrap());
}

#[test]
fn a_dynamic_forest_lowers_hot_updates_below_the_static_forest_within_its_nvmc() {
    let dbmf = stats(&[&HOT[..], &["design.bmf.forest=dynamic"]].concat());
    let sbmf = stats(&[&HOT[..], &["design.bmf.forest=static"]].concat());
    assert!(design(&dbmf, "prunes") > 0.0 && design(&dbmf, "nvmc_entries_used") <= 64.0, "{}", dbmf["design"]);
    assert!(design(&dbmf, "avg_update_height") < design(&sbmf, "avg_update_height") - 0.5, "{} vs {}", dbmf["design"], sbmf["design"]);
    assert!(dbmf["cycles"].as_f64().unwrap() < sbmf["cycles"].as_f64().unwrap());
}

#[test]
fn strict_persistency_costs_more_than_epochs_which_cost_more_than_no_persistency() {
    let sp = stats(&["design.bmf.forest=off"]);
    let o3 = stats(&[&O3[..], &["design.bmf.forest=off"]].concat());
    let wb = stats(&SECURE_WB);
    let c = |s: &Value| s["cycles"].as_f64().unwrap();
    assert!(c(&sp) > c(&o3) && c(&o3) > c(&wb), "sp {} o3 {} secure_wb {}", c(&sp), c(&o3), c(&wb));
    assert!(design(&o3, "epochs") > 0.0);
    // Under sp every write's update reaches the root register; secure_wb updates lazily.
    assert!(sp["security"]["root_updates"].as_f64().unwrap() >= design(&sp, "updates"));
    assert_eq!(wb["design"]["updates"].as_f64(), Some(0.0));
}

#[test]
fn each_forest_lowers_the_cost_of_strict_and_epoch_persistency() {
    for model in [&[][..], &O3[..]] {
        let c = |forest: &str| stats(&[&HOT[..], model, &[forest]].concat())["cycles"].as_f64().unwrap();
        let (off, dynamic) = (c("design.bmf.forest=off"), c("design.bmf.forest=dynamic"));
        assert!(dynamic < off, "{model:?}: dbmf {dynamic} vs bmt {off}");
    }
}

#[test]
fn a_forest_the_design_cannot_build_is_a_config_error_naming_its_field() {
    for (set, field) in [
        (&["design.bmf.nvmc_bytes=32"][..], "design.bmf.nvmc_bytes"),
        (&["design.bmf.rei_writes=0"][..], "design.bmf.rei_writes"),
        (&["design.bmf.forest=static", "design.bmf.static_level=1"][..], "design.bmf.static_level"),
        (&["design.bmf.forest=static", "design.bmf.static_level=9"][..], "design.bmf.static_level"),
        (&["design.bmf.counter_bits=0"][..], "design.bmf.counter_bits"),
        (&["design.bmf.prune_threshold_pct=101"][..], "design.bmf.prune_threshold_pct"),
        (&["design.bmf.persistency=secure_wb", "security.metadata_persistence=write-back", "tree.update=lazy"][..], "design.bmf.forest"),
        (&["design.bmf.persistency=sp", "security.metadata_persistence=write-back"][..], "security.metadata_persistence"),
        (&["design.bmf.persistency=o3", "tree.update=lazy"][..], "tree.update"),
        (&["run.functional=true", "design.bmf.persistency=o3"][..], "design.bmf.persistency"),
    ] {
        let e = cfg(set).expect_err(&format!("{set:?} was accepted"));
        assert!(e.contains(&format!("'{field}'")), "{set:?}: {e}");
    }
    // The static level that fits 4 KB (level 5, 64 nodes) is accepted when named.
    assert!(cfg(&["design.bmf.forest=static", "design.bmf.static_level=5"]).is_ok());
}

#[test]
fn the_same_seed_gives_the_same_forest() {
    let a = stats(&[&HOT[..], &["design.bmf.forest=dynamic"]].concat());
    let b = stats(&[&HOT[..], &["design.bmf.forest=dynamic"]].concat());
    assert_eq!(a["design"], b["design"]);
    assert_eq!(a["cycles"], b["cycles"]);
}

/// A 1 GiB memory (7 tree levels) and a 1 KB nvMC (16 nodes: a static forest pins level 5, a
/// dynamic one must merge to make room), with caches small
/// enough that counter blocks and tree nodes leave the chip and are fetched and verified
/// again, in functional mode.
fn small(forest: &str, extra: &[&str]) -> Config {
    let mut o = vec![
        "run.progress=false", "run.design=bmf", "run.functional=true", "memory.capacity_gib=1",
        "l1.size_kib=4", "l1.ways=2", "l2.size_kib=8", "l2.ways=2", "llc.size_kib=16", "llc.ways=4",
        "metadata_cache.counter.size_kib=4", "metadata_cache.mac.size_kib=4", "metadata_cache.tree.size_kib=4",
        "workload.pattern=zipf", "workload.footprint_bytes=8388608", "workload.requests=6000", "design.bmf.rei_writes=8", "design.bmf.nvmc_bytes=1024",
    ];
    let f = format!("design.bmf.forest={forest}");
    o.push(&f);
    o.extend_from_slice(extra);
    let o: Vec<String> = o.iter().map(|s| s.to_string()).collect();
    Config::load(Some("bmf"), None, &o).unwrap_or_else(|e| panic!("{forest}: {e}"))
}

#[test]
fn a_functional_forest_verifies_every_fetch_against_its_nvmc_roots_and_counts_as_counting_mode_does() {
    for forest in ["static", "dynamic"] {
        let functional = small(forest, &[]);
        let mut counting = functional.clone();
        counting.run.functional = false;
        let a = secmem_sim::run(&functional, &TraceInput::Workload).unwrap_or_else(|e| panic!("{forest}: {e}"))["stats"].clone();
        let b = secmem_sim::run(&counting, &TraceInput::Workload).unwrap()["stats"].clone();
        for key in ["cycles", "memory", "design", "security"] {
            assert_eq!(a[key], b[key], "{forest}: {key}");
        }
        // Fetches were verified below the roots (the tree cache is far smaller than the tree).
        assert!(a["security"]["mac_ops"]["tree_verify"].as_f64().unwrap() > 1000.0, "{forest}: {}", a["security"]);
        if forest == "dynamic" {
            assert!(design(&a, "prunes") > 0.0 && design(&a, "merges") > 0.0, "{}", a["design"]);
        }
    }
}

#[test]
fn a_crash_at_any_persist_point_recovers_from_the_nvmc_roots_to_the_oracle() {
    for forest in ["static", "dynamic"] {
        let out = crash_campaign(&small(forest, &[]), &TraceInput::Workload, 40, 7).unwrap_or_else(|e| panic!("{forest}: {e}"));
        assert_eq!((out.recovered, out.mismatches, out.silent_corruptions), (40, 0, 0), "{forest}: {:#?}", out.examples);
        assert!(out.lines_checked > 0);
    }
}

#[test]
fn tampering_replay_and_splicing_are_detected_against_the_nvmc_roots() {
    for forest in ["static", "dynamic"] {
        let out = attack_campaign(&small(forest, &[]), &TraceInput::Workload, None, 10, 3_000, 3).unwrap_or_else(|e| panic!("{forest}: {e}"));
        assert!(out.all_detected(), "{forest}: {out:#?}");
        assert!(out.classes.values().all(|c| c.tampered_plaintext_returned == 0), "{forest}: {out:#?}");
    }
}

/// A captured program (gzip under valgrind: its stack at valgrind's amd64 client stack).
fn gzip() -> std::path::PathBuf { std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/secmem/traces/gzip-numbers.trace.xz") }

fn program_stats(extra: &[&str]) -> Value {
    // Small caches, so that stack lines are written back and read again.
    let mut o = vec!["run.max_requests=60000", "l1.size_kib=4", "l1.ways=2", "l2.size_kib=8", "l2.ways=4", "llc.size_kib=16", "llc.ways=4"];
    o.extend_from_slice(extra);
    let c = cfg(&o).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
    let c = secmem_sim::run::resolve_for_input(&c, &TraceInput::File(gzip())).unwrap();
    secmem_sim::run(&c, &TraceInput::File(gzip())).unwrap_or_else(|e| panic!("{extra:?}: {e}"))["stats"].clone()
}

#[test]
fn non_stack_coverage_leaves_stack_stores_without_barriers_or_protection_and_costs_less() {
    // The stores of the run's 60,000 records that fall in the stack.
    let stack = 0x1f_ff00_1000u64 - (16 << 20)..0x1f_ff00_1000u64;
    let recs: Vec<secmem_trace::Record> = secmem_trace::open(&gzip()).unwrap().take(60_000).map(Result::unwrap).collect();
    let stores = recs.iter().filter(|r| r.op == secmem_trace::Op::Write).count() as u64;
    let stack_stores = recs.iter().filter(|r| r.op == secmem_trace::Op::Write && stack.contains(&r.addr)).count() as u64;
    assert!(stack_stores > 0 && stack_stores < stores, "{stack_stores} of {stores}");
    let core = |s: &Value, k: &str| s["core"][k].as_u64().unwrap();
    let full = program_stats(&[]);
    let non_stack = program_stats(&["persist.coverage=non-stack"]);
    // The same program records (run.max_requests cuts the trace before barriers are added);
    // a barrier after every store but the stack's.
    assert_eq!((core(&full, "writes"), core(&non_stack, "writes")), (stores, stores));
    assert_eq!((core(&full, "fences"), core(&non_stack, "fences")), (stores, stores - stack_stores));
    // Stack lines reach memory as plain lines, with no counter or MAC of their own.
    assert_eq!(core(&full, "unprotected_writes") + core(&full, "unprotected_reads"), 0);
    assert!(core(&non_stack, "unprotected_writes") > 0 && core(&non_stack, "unprotected_reads") > 0, "{}", non_stack["core"]);
    let mac_ops = |s: &Value| s["security"]["mac_ops"]["data_write"].as_u64().unwrap();
    assert!(mac_ops(&non_stack) < mac_ops(&full));
    assert!(design(&non_stack, "updates") < design(&full, "updates"));
    assert!(non_stack["cycles"].as_u64() < full["cycles"].as_u64());
}

#[test]
fn non_stack_coverage_without_a_program_s_addresses_or_in_functional_mode_is_a_config_error() {
    let e = cfg(&["persist.coverage=non-stack", "run.functional=true"]).unwrap_err();
    assert!(e.contains("'persist.coverage'"), "{e}");
    let c = cfg(&["persist.coverage=non-stack"]).unwrap();
    let e = secmem_sim::run(&c, &TraceInput::Workload).unwrap_err().to_string();
    assert!(e.contains("persist.coverage") && e.contains("virtual"), "{e}");
}
