//! Does functional mode really protect the data? Attack injection, crash injection with an
//! oracle, MAC strength, pad reuse, and planted-bug canaries that the suite must catch.

use secmem_schemes::Canaries;
use secmem_sim::harness::{attack_campaign, crash_campaign};
use secmem_sim::{Config, TraceInput};

mod common;
use common::{cfg, TmpDir};

const STRICT: &[&str] = &["tree.update=eager", "security.metadata_persistence=strict"];

#[test]
fn every_attack_class_is_detected_with_its_class_and_address_lazy() {
    let out = attack_campaign(&cfg("horus", &[]), &TraceInput::Workload, None, 60, 20_000, 7).unwrap();
    for (name, c) in &out.classes {
        assert!(c.injected >= 30, "{name}: only {} injections", c.injected);
    }
    assert!(out.all_detected(), "{:#?}", out);
    assert!(out.classes.keys().any(|k| k.starts_with("tamper-tree-level-")));
}

#[test]
fn every_attack_class_is_detected_under_strict_eager() {
    let out = attack_campaign(&cfg("bmf", STRICT), &TraceInput::Workload, None, 40, 5_000, 9).unwrap();
    assert!(out.all_detected(), "{:#?}", out);
}

#[test]
fn strict_baseline_recovers_to_the_oracle_at_every_crash_point() {
    let out = crash_campaign(&cfg("horus", STRICT), &TraceInput::Workload, 150, 3).unwrap();
    assert_eq!(out.points, 150);
    assert_eq!((out.recovered, out.mismatches), (150, 0), "{:#?}", out.examples);
    assert!(out.lines_checked > 1000 && out.mean_recovery_hashes > 0.0);
}

#[test]
fn strict_baseline_recovers_to_the_oracle_across_minor_overflows() {
    // Four hot pages written through over and over: minors overflow and pages re-encrypt, and
    // every re-encrypted line's new MAC must be persisted with its new ciphertext.
    for init in ["security.counter_init=zero", "security.counter_init=random"] {
        let mut o = vec!["workload.footprint_bytes=16384", "workload.requests=60000", "workload.read_ratio=0.2", "hierarchy.write_through=true", init];
        o.extend_from_slice(STRICT);
        let out = crash_campaign(&cfg("esd", &o), &TraceInput::Workload, 60, 5).unwrap();
        assert_eq!((out.recovered, out.mismatches), (60, 0), "{init}: {:#?}", out.examples);
    }
}

#[test]
fn more_crash_points_than_the_trace_has_is_an_error_not_a_smaller_campaign() {
    // 300 requests persist at most a few hundred times; 100,000 points used to run silently
    // as however many there were.
    let c = cfg("horus", &["workload.requests=300", "tree.update=eager", "security.metadata_persistence=strict"]);
    let e = crash_campaign(&c, &TraceInput::Workload, 100_000, 1).unwrap_err().to_string();
    assert!(e.contains("--points") && e.contains("persist points"), "{e}");
}

#[test]
fn crash_points_are_drawn_from_the_region_of_interest_after_the_warm_up() {
    let whole = cfg("horus", &["workload.requests=600", "tree.update=eager", "security.metadata_persistence=strict"]);
    let all = crash_campaign(&whole, &TraceInput::Workload, 1, 1).unwrap().persist_points;
    let mut warm = whole.clone();
    warm.run.warmup_requests = 400;
    let out = crash_campaign(&warm, &TraceInput::Workload, 30, 1).unwrap();
    // The warm-up's persist points are not candidates, and every point taken recovers.
    assert!(out.persist_points > 0 && out.persist_points < all, "{} of {all}", out.persist_points);
    assert_eq!((out.points, out.recovered), (30, 30), "{:#?}", out.examples);
    warm.run.warmup_requests = 600;
    let e = crash_campaign(&warm, &TraceInput::Workload, 1, 1).unwrap_err().to_string();
    assert!(e.contains("run.warmup_requests"), "{e}");
}

#[test]
fn lazy_baseline_without_a_drain_fails_closed_after_a_crash() {
    let out = crash_campaign(&cfg("horus", &[]), &TraceInput::Workload, 40, 3).unwrap();
    assert!(out.recovery_failures > 0, "a lazily updated root must not match persisted counters");
    assert_eq!(out.recovered + out.mismatches, out.points);
}

#[test]
fn eight_bit_macs_miss_about_one_tampering_in_256() {
    // With an 8-bit MAC a random forgery passes with probability 2^-8: the detection rate
    // over n tamperings must fall in the 99.9% binomial interval around 1 - 1/256.
    let n = 6000u64;
    let classes = vec!["tamper-data".to_string()];
    let out = attack_campaign(&cfg("horus", &["security.mac_bits=8"]), &TraceInput::Workload, Some(&classes), n, 0, 11).unwrap();
    let c = &out.classes["tamper-data"];
    let missed = c.injected - c.detected;
    let mean = c.injected as f64 / 256.0;
    let sd = (c.injected as f64 * (1.0 / 256.0) * (255.0 / 256.0)).sqrt();
    // 3.29 sigma = two-sided 99.9%.
    assert!((missed as f64 - mean).abs() <= 3.29 * sd + 1.0, "missed {missed} of {}, expected about {mean:.1}", c.injected);
    assert!(missed > 0, "an 8-bit MAC that never misses is not an 8-bit MAC");
}

// ---------------------------------------------------------------- planted-bug canaries

/// A campaign of no injections or no crashes would report success without testing anything.
#[test]
fn campaigns_of_zero_injections_or_crash_points_are_errors_not_passes() {
    let e = attack_campaign(&cfg("horus", &[]), &TraceInput::Workload, None, 0, 10, 1).unwrap_err().to_string();
    assert!(e.contains("--per-class must be at least 1"), "{e}");
    let e = secmem_sim::harness::vault_attack_campaign(&vault_cfg(), &TraceInput::Workload, false, 0, 1).unwrap_err().to_string();
    assert!(e.contains("--per-class must be at least 1"), "{e}");
    let e = crash_campaign(&cfg("strict", &[]), &TraceInput::Workload, 0, 1).unwrap_err().to_string();
    assert!(e.contains("--points must be at least 1"), "{e}");
    // And 2^40 injections per class (days of work) is a typo, refused before any run.
    let e = attack_campaign(&cfg("horus", &[]), &TraceInput::Workload, None, 1 << 40, 10, 1).unwrap_err().to_string();
    assert!(e.contains("--per-class must be at most 10000000"), "{e}");
    // So are 10^12 clean reads (found by fuzzing: days of reads, where the injection counts
    // were bounded); 0 clean reads is allowed (the injections are the campaign).
    let e = attack_campaign(&cfg("horus", &[]), &TraceInput::Workload, None, 1, 1_000_000_000_000, 1).unwrap_err().to_string();
    assert!(e.contains("--clean-reads must be at most 10000000000"), "{e}");
}

fn with_canary(cfg: &Config, set: impl Fn(&mut Canaries)) -> Config {
    // Canaries are set through an environment-free hook: a thread-local read by the engine.
    let mut c = Canaries::default();
    set(&mut c);
    secmem_sim::engine::set_test_canaries(c);
    cfg.clone()
}

/// Whether `class` misses injections under the canaries `set`; the same campaign without
/// them, run first as a control, must miss none. The campaign itself must run: an error (a
/// bad config, a false alarm that stops the run) is not the property the canary breaks, and
/// counting it as "caught" would let such a test pass for the wrong reason.
fn attack_fails(c: &Config, class: &str, set: impl Fn(&mut Canaries)) -> bool {
    let classes = vec![class.to_string()];
    let missed = |c: &Config| {
        let out = attack_campaign(c, &TraceInput::Workload, Some(&classes), 60, 2_000, 5).unwrap();
        let k = &out.classes[class];
        assert!(k.injected >= 30, "{class}: only {} injections", k.injected);
        k.injected - k.detected
    };
    assert_eq!(missed(&with_canary(c, |_| {})), 0, "{class}: the control run without the canary missed injections");
    missed(&with_canary(c, set)) > 0
}

#[test]
fn canary_mac_without_address_is_caught_by_splicing() {
    assert!(attack_fails(&cfg("horus", &[]), "splice-data-mac", |k| k.mac_without_address = true));
}

#[test]
fn canary_mac_without_counter_is_caught_by_replay() {
    assert!(attack_fails(&cfg("horus", &[]), "replay-data-mac", |k| k.mac_without_counter = true));
}

#[test]
fn canary_skip_tree_update_is_caught_as_a_false_alarm_during_the_run() {
    // Parents never learn their children's new hashes, so the first counter block fetched
    // back from NVM fails verification on a clean run: the suite sees an integrity error
    // where there was no attack.
    let c = with_canary(&cfg("horus", &[]), |k| k.skip_tree_update = true);
    let classes = vec!["replay-data-mac-counter".to_string()];
    let err = attack_campaign(&c, &TraceInput::Workload, Some(&classes), 10, 100, 5).unwrap_err().to_string();
    assert!(err.contains("integrity failure: counter block"), "{err}");
    // Without the canary the same campaign runs clean.
    let c = with_canary(&cfg("horus", &[]), |_| {});
    assert!(attack_campaign(&c, &TraceInput::Workload, Some(&classes), 10, 100, 5).unwrap().all_detected());
}

#[test]
fn canary_skip_counter_verification_is_caught_by_counter_replay() {
    assert!(attack_fails(&cfg("horus", &[]), "replay-data-mac-counter", |k| k.skip_counter_verification = true));
}

#[test]
fn canary_skip_data_mac_check_is_caught_by_tampering() {
    assert!(attack_fails(&cfg("horus", &[]), "tamper-data", |k| k.skip_data_mac_check = true));
}

#[test]
fn canary_skip_root_check_is_caught_by_crash_injection() {
    // Lazy update without a drain leaves NVM behind the root: a recovery that does not
    // compare roots "recovers" and then serves stale or unverifiable lines.
    let c = with_canary(&cfg("horus", &[]), |k| k.skip_root_check = true);
    let out = crash_campaign(&c, &TraceInput::Workload, 40, 3).unwrap();
    assert!(out.mismatches > 0 && out.recovery_failures == 0, "{out:?}");
}

#[test]
fn canary_persist_data_before_counter_is_caught_by_crash_injection() {
    let c = with_canary(&cfg("horus", STRICT), |k| k.persist_data_before_counter = true);
    let out = crash_campaign(&c, &TraceInput::Workload, 60, 3).unwrap();
    // The counter block stays only in the volatile cache while the (eagerly updated) root
    // already covers it: recovery rebuilds the tree from the stale persisted counter, finds
    // it does not match the root, and fails closed.
    assert!(out.recovery_failures > 0, "{out:?}");
    assert!(out.examples.iter().any(|e| e.contains("does not match the on-chip root")), "{:#?}", out.examples);
}

#[test]
fn canary_minor_wrap_without_reencryption_is_caught_by_the_pad_reuse_detector() {
    let base = cfg("esd", &[
        "workload.footprint_bytes=8192", "workload.requests=30000", "workload.read_ratio=0.2",
        "hierarchy.write_through=true", "run.functional=true", "run.check_pad_reuse=true",
    ]);
    let c = with_canary(&base, |k| k.minor_wrap_without_reencryption = true);
    let err = secmem_sim::run(&c, &TraceInput::Workload).unwrap_err().to_string();
    assert!(err.contains("pad reuse"), "{err}");
    // And without the canary the same run is clean.
    with_canary(&base, |_| {});
    secmem_sim::run(&base, &TraceInput::Workload).unwrap();
}

// ---------------------------------------------------------------- Horus vault canaries

fn vault_cfg() -> Config {
    cfg(
        "horus",
        &["l2.size_kib=128", "llc.size_kib=512", "workload.requests=40000", "workload.footprint_bytes=67108864", "memory.capacity_gib=4"],
    )
}

fn vault_class_missed(c: &Config, class: &str) -> bool {
    let out = secmem_sim::harness::vault_attack_campaign(c, &TraceInput::Workload, false, 20, 3).unwrap();
    out.classes[class].right_class < out.classes[class].injected
}

#[test]
fn canary_vault_mac_without_drain_counter_is_caught_by_splicing_whole_entries() {
    // Without the drain counter a vault MAC no longer binds an entry to its position.
    assert!(!vault_class_missed(&with_canary(&vault_cfg(), |_| {}), "splice"));
    assert!(vault_class_missed(&with_canary(&vault_cfg(), |k| k.vault_mac_without_drain_counter = true), "splice"));
}

#[test]
fn canary_skip_vault_metadata_check_is_caught_by_metadata_tampering() {
    assert!(!vault_class_missed(&with_canary(&vault_cfg(), |_| {}), "tamper-metadata"));
    assert!(vault_class_missed(&with_canary(&vault_cfg(), |k| k.skip_vault_metadata_check = true), "tamper-metadata"));
}

// ---------------------------------------------------------------- random initial counters

/// `security.counter_init = "random"`: never-written blocks boot at the seeded initial
/// counters instead of zeros, so every boot-content convention changes; the protection must not.
const RANDOM: &str = "security.counter_init=random";

#[test]
fn a_misspelt_counter_init_is_an_error_naming_the_field_and_the_choices() {
    let e = Config::load(Some("lelantus"), None, &["security.counter_init=rand".to_string()]).unwrap_err();
    assert_eq!(e.field, "security.counter_init", "{e}");
    let msg = e.to_string();
    assert!(msg.contains("zero") && msg.contains("random"), "{msg}");
}

#[test]
fn under_random_counter_init_every_attack_class_is_detected_lazy_and_strict() {
    let out = attack_campaign(&cfg("horus", &[RANDOM]), &TraceInput::Workload, None, 40, 10_000, 7).unwrap();
    for (name, c) in &out.classes {
        assert!(c.injected >= 20, "{name}: only {} injections", c.injected);
    }
    assert!(out.all_detected(), "{:#?}", out);
    let strict: Vec<&str> = STRICT.iter().copied().chain([RANDOM]).collect();
    let out = attack_campaign(&cfg("bmf", &strict), &TraceInput::Workload, None, 30, 5_000, 9).unwrap();
    assert!(out.all_detected(), "{:#?}", out);
}

#[test]
fn under_random_counter_init_the_strict_baseline_recovers_to_the_oracle_at_every_crash_point() {
    let strict: Vec<&str> = STRICT.iter().copied().chain([RANDOM]).collect();
    let out = crash_campaign(&cfg("horus", &strict), &TraceInput::Workload, 100, 3).unwrap();
    assert_eq!((out.recovered, out.mismatches), (100, 0), "{:#?}", out.examples);
    // And the lazy baseline still fails closed rather than recovering stale counters.
    let out = crash_campaign(&cfg("horus", &[RANDOM]), &TraceInput::Workload, 30, 3).unwrap();
    assert!(out.recovery_failures > 0);
}

#[test]
fn under_random_counter_init_the_planted_bugs_are_still_caught() {
    assert!(attack_fails(&cfg("horus", &[RANDOM]), "replay-data-mac", |k| k.mac_without_counter = true), "MAC without counter");
    assert!(attack_fails(&cfg("horus", &[RANDOM]), "replay-data-mac-counter", |k| k.skip_counter_verification = true), "counter verification skipped");
    let strict: Vec<&str> = STRICT.iter().copied().chain([RANDOM]).collect();
    let c = with_canary(&cfg("horus", &strict), |k| k.persist_data_before_counter = true);
    assert!(crash_campaign(&c, &TraceInput::Workload, 60, 3).unwrap().mismatches > 0, "data persisted before its counter");
    // A minor that wraps without bumping the major reuses a pad: with random initial minors
    // the first wrap lands on (major, 0), which the line may never have used, but it counts
    // up again through pads it did use — and through its boot pad.
    let hot = cfg("esd", &[RANDOM, "workload.footprint_bytes=8192", "workload.requests=30000", "workload.read_ratio=0.2",
        "hierarchy.write_through=true", "run.functional=true", "run.check_pad_reuse=true"]);
    let c = with_canary(&hot, |k| k.minor_wrap_without_reencryption = true);
    let err = secmem_sim::run(&c, &TraceInput::Workload).unwrap_err().to_string();
    assert!(err.contains("pad reuse"), "{err}");
    with_canary(&hot, |_| {});
    let r = secmem_sim::run(&hot, &TraceInput::Workload).unwrap();
    assert!(r["stats"]["security"]["counter_overflows"].as_u64().unwrap() > 0, "the clean run overflows and reuses no pad");
}

#[test]
fn a_class_with_no_candidate_ends_and_tests_nothing_so_it_does_not_pass() {
    // Two pages written alike (zero counter init) hold identical counter blocks: swapping them
    // is no attack, so splice-counter has no candidate. The search for one used to spin
    // forever; it must end, inject nothing, and not report the class as passed.
    let path = std::env::temp_dir().join(format!("secmem-splice-{}.txt", std::process::id()));
    std::fs::write(&path, "# secmem-trace v1\nW 0x0 64 0\nW 0x1000 64 0\n").unwrap();
    let classes = ["splice-counter".to_string()];
    let out = attack_campaign(&cfg("horus", &[]), &TraceInput::File(path.clone()), Some(&classes), 3, 10, 1);
    let _ = std::fs::remove_file(&path);
    let out = out.unwrap();
    assert_eq!(out.classes["splice-counter"].injected, 0);
    assert_eq!(out.untested_classes, ["splice-counter"]);
    assert!(!out.all_detected(), "a class that injected nothing passed: {out:#?}");
}

#[test]
fn functional_runs_and_campaigns_work_with_direct_mapped_tree_caches_and_binary_trees() {
    // A tree walk fills the fetched block and its uncached ancestors; filled bottom-up, an
    // ancestor sharing a set with its child could evict it, and the lazy parent update that
    // asked for the child then found it gone (a panic at the end-of-run metadata flush with
    // 1-, 2- or 4-way tree caches, or with arity 2). Every associativity and arity must work.
    for extra in [
        ["metadata_cache.tree.ways=1", "tree.arity=8"],
        ["metadata_cache.tree.ways=2", "tree.arity=8"],
        ["metadata_cache.tree.ways=4", "tree.arity=8"],
        ["metadata_cache.tree.ways=8", "tree.arity=2"],
        ["metadata_cache.tree.ways=1", "tree.arity=2"],
    ] {
        let mut o = vec!["run.functional=true", "workload.requests=1500"];
        o.extend_from_slice(&extra);
        let r = secmem_sim::run(&cfg("horus", &o), &TraceInput::Workload).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
        assert!(r["stats"]["security"]["mac_ops"]["tree_update"].as_u64().unwrap() > 0, "{extra:?}");
        let out = attack_campaign(&cfg("horus", &extra), &TraceInput::Workload, None, 5, 500, 3).unwrap();
        assert!(out.all_detected(), "{extra:?}: {out:#?}");
        let mut strict = extra.to_vec();
        strict.extend_from_slice(STRICT);
        let out = crash_campaign(&cfg("horus", &strict), &TraceInput::Workload, 10, 3).unwrap();
        assert_eq!((out.recovered, out.mismatches), (10, 0), "{extra:?}: {:#?}", out.examples);
    }
}

#[test]
fn functional_mode_rejects_minors_wider_than_a_64_byte_counter_block_holds() {
    // 64 minors of 8 bits plus the 64-bit major are 72 B: no 64 B block to encrypt and hash.
    let e = Config::load(Some("default"), None, &["run.functional=true".into(), "security.minor_counter_bits=8".into()])
        .unwrap_err();
    assert!(e.to_string().contains("security.minor_counter_bits"), "{e}");
    assert!(Config::load(Some("default"), None, &["run.functional=true".into(), "security.minor_counter_bits=7".into()]).is_ok());
    // The campaigns switch functional mode on themselves, so they check again.
    let counting = cfg("horus", &["security.minor_counter_bits=8"]);
    let e = attack_campaign(&counting, &TraceInput::Workload, None, 5, 100, 1).unwrap_err();
    assert!(e.to_string().contains("security.minor_counter_bits"), "{e}");
    let e = crash_campaign(&counting, &TraceInput::Workload, 5, 1).unwrap_err();
    assert!(e.to_string().contains("security.minor_counter_bits"), "{e}");
}

#[test]
fn silent_shredder_counts_8_bit_minor_overflows_in_counting_mode() {
    // Counting mode allows 8-bit minors; Silent Shredder used to encode every stored block
    // (64 B, 7-bit minors at most) and panicked on its first write. 600 write-backs of one
    // line overflow its 8-bit minor twice (after 255 and 510 bumps).
    let overrides: Vec<String> = [
        "run.progress=false",
        "run.design=\"silent-shredder\"",
        "run.trace_level=\"memory\"",
        "security.minor_counter_bits=8",
        "workload.requests=600",
        "workload.footprint_bytes=64",
        "workload.read_ratio=0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let cfg = Config::load(Some("default"), None, &overrides).unwrap();
    let report = secmem_sim::run(&cfg, &TraceInput::Workload).unwrap();
    assert_eq!(report["stats"]["security"]["counter_overflows"], 2, "{:#}", report["stats"]["security"]);
}

#[test]
fn a_saved_image_with_a_written_line_cut_out_fails_verification() {
    // Verification used to read only the data lines the image holds: an image with written
    // lines deleted (checksum redone) verified "ok". The counter blocks say which lines were
    // written; a deleted one reads as boot content under its advanced counter and must fail.
    use secmem_schemes::controller::{functional::NvmImage, image_file};
    use secmem_sim::harness::verify_image;
    let tmp = TmpDir::new("cut");
    let dir = &tmp.0;
    std::fs::create_dir_all(dir).unwrap();
    for init in ["security.counter_init=zero", "security.counter_init=random"] {
        let c = cfg("horus", &["workload.requests=2000", "run.functional=true", init]);
        let (full, cut) = (dir.join("full.img"), dir.join("cut.img"));
        secmem_sim::run::run_saving(&c, &TraceInput::Workload, Some(&full)).unwrap();
        let check = verify_image(&c, &full).unwrap();
        assert!(check.ok() && check.data_lines_verified > 0, "{init}: {check:?}");
        let (meta, root, image) = image_file::load(&full).unwrap();
        let victim = image.lines_in(0, c.data_bytes() >> 6)[0];
        let mut kept = NvmImage::default();
        for (l, b) in image.iter().filter(|&(l, _)| l != victim) {
            kept.put(l, b);
        }
        image_file::save(&cut, &meta, &root, &kept).unwrap();
        let check = verify_image(&c, &cut).unwrap();
        assert!(!check.ok() && check.integrity_failures >= 1, "{init}: line {victim:#x} cut out, yet {check:?}");
    }
}

#[test]
fn a_saved_image_with_a_line_no_read_covers_changed_fails_verification() {
    // Verification read only data lines and the pages of stored counter blocks, and recovery
    // compares only the root: a tree node or MAC block of a part of memory no read visits,
    // or a line past the tree, could be added or changed (checksum redone) and still verify
    // "ok". Every stored line must now be covered by a secure read.
    use secmem_core::tree::SecureLayout;
    use secmem_schemes::controller::{functional::NvmImage, image_file};
    use secmem_sim::harness::verify_image;
    let tmp = TmpDir::new("uncovered");
    let dir = &tmp.0;
    std::fs::create_dir_all(dir).unwrap();
    let c = cfg("horus", &["workload.requests=2000", "run.functional=true", "memory.capacity_gib=1"]);
    let (full, bad) = (dir.join("full.img"), dir.join("bad.img"));
    secmem_sim::run::run_saving(&c, &TraceInput::Workload, Some(&full)).unwrap();
    let check = verify_image(&c, &full).unwrap();
    assert!(check.ok(), "{check:?}");
    let (meta, root, image) = image_file::load(&full).unwrap();
    let l = SecureLayout::new(c.data_bytes(), c.tree.arity, c.security.mac_bits).unwrap();
    // The last block of each region: nothing the short run wrote is near it.
    let last_mac = (l.mac_base >> 6) + l.mac_blocks - 1;
    let last_node = l.tree.node_addr(1, l.tree.nodes[1] - 1) >> 6;
    let past_tree = l.end >> 6;
    for (what, line) in [("MAC block", last_mac), ("tree node", last_node), ("line past the tree", past_tree)] {
        assert!(image.lines_in(line, line + 1).is_empty(), "{what} {line:#x} is already in the image");
        let mut changed = NvmImage::default();
        for (l, b) in image.iter() {
            changed.put(l, b);
        }
        changed.put(line, [0xab; 64]);
        image_file::save(&bad, &meta, &root, &changed).unwrap();
        let check = verify_image(&c, &bad).unwrap();
        assert!(!check.ok() && check.integrity_failures >= 1, "{what} {line:#x} added, yet {check:?}");
    }
}

#[test]
fn saving_an_image_without_security_is_an_error_and_a_failed_run_leaves_no_stale_report() {
    // A non-secure image verified as all tampered; a failing run kept the previous report.
    let tmp = TmpDir::new("stale");
    let dir = &tmp.0;
    let img = dir.join("x.img");
    let plain = cfg("horus", &["security.enabled=false", "workload.requests=200"]);
    let e = secmem_sim::run::run_saving(&plain, &TraceInput::Workload, Some(&img)).unwrap_err().to_string();
    assert!(e.contains("security.enabled"), "{e}");
    secmem_sim::run_to_dir(&plain, &TraceInput::Workload, dir).unwrap();
    assert!(dir.join("report.json").exists());
    let missing = TraceInput::File(dir.join("no-such-trace.txt"));
    assert!(secmem_sim::run_to_dir(&plain, &missing, dir).is_err());
    assert!(!dir.join("report.json").exists(), "the earlier run's report is still there");
}
