//! ESD (HPCA'23) on the `esd` preset's machine: does deduplication never lose data (forced
//! ECC collisions, referH saturation, AMT cache evictions, rewrites of shared lines), are
//! attacks on shared lines caught for every line that maps there, do crashes recover, and
//! are bad settings refused naming their field?

use secmem_core::Cycle;
use secmem_sim::engine::Engine;
use secmem_sim::harness::{attack_campaign, crash_campaign};
use secmem_sim::{Config, TraceInput};
use secmem_trace::{Op, Record};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

fn cfg(extra: &[&str]) -> Result<Config, String> {
    let mut o: Vec<String> = ["run.progress=false", "run.design=esd", "memory.capacity_gib=1"].iter().map(|s| s.to_string()).collect();
    o.extend(extra.iter().map(|s| s.to_string()));
    Config::load(Some("esd"), None, &o).map_err(|e| e.to_string())
}

/// A functional engine taking memory-level records (each write reaches the design).
fn engine(extra: &[&str]) -> Engine {
    let mut o = vec!["run.functional=true", "run.trace_level=\"memory\""];
    o.extend_from_slice(extra);
    Engine::new(&cfg(&o).unwrap()).unwrap()
}

fn design(s: &Value, key: &str) -> f64 { s["design"][key].as_f64().unwrap_or_else(|| panic!("no stats.design.{key}: {}", s["design"])) }

fn line_of(seed: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    for (i, c) in b.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64).to_le_bytes());
    }
    b
}

/// Writes `(line, content)` in order, then reads every line written through the design and
/// checks it holds its last content. Returns the design's counters.
fn write_then_read_back(e: &mut Engine, writes: &[(u64, [u8; 64])]) -> HashMap<&'static str, f64> {
    let mut want = HashMap::new();
    for (i, &(line, data)) in writes.iter().enumerate() {
        e.step(&Record { op: Op::Write, addr: line * 64, size_bytes: 64, inst_gap: 0, data: Some(data) }, i as u64).unwrap();
        want.insert(line, data);
    }
    for (&line, data) in &want {
        let (_, got) = e.design.read(&mut e.mc, line, Cycle(0)).unwrap_or_else(|err| panic!("read {line}: {err}"));
        assert_eq!(got.as_ref(), Some(data), "line {line} lost its last write");
    }
    e.design.extra_stats().into_iter().collect()
}

/// Data bits whose SEC-DED check bits are all zero: XORed into a word, they leave its ECC
/// unchanged (the code is linear).
fn ecc_kernel_word() -> u64 {
    (1u64..).find(|&d| secmem_core::ecc::encode(d) == 0).unwrap()
}

#[test]
fn a_duplicate_is_written_once_and_every_line_reads_its_own_last_write() {
    let mut e = engine(&[]);
    let a = line_of(1);
    let b = line_of(2);
    // Lines 0..8 take content a, 8..12 content b, then line 3 (sharing a's copy) is rewritten
    // with a new content, and line 9 with a's.
    let mut w: Vec<(u64, [u8; 64])> = (0..8).map(|l| (l * 64, a)).collect();
    w.extend((8..12).map(|l| (l * 64, b)));
    w.push((3 * 64, line_of(3)));
    w.push((9 * 64, a));
    let s = write_then_read_back(&mut e, &w);
    // 14 writes: a and b once each, line 3's new content once; the other 11 are AMT updates.
    assert_eq!((s["unique_writes"], s["dedup_writes"]), (3.0, 11.0), "{s:?}");
    assert_eq!(e.mc.stats.data_writes, 3 + s["amt_line_writes"] as u64);
    // Line 0 (a's first writer) kept its line; line 3 left a's shared copy for a free line.
    assert_eq!(e.design.data_line_of(0), 0);
    assert_eq!(e.design.data_line_of(64), 0);
    assert_ne!(e.design.data_line_of(3 * 64), 0);
    assert_eq!(e.design.data_line_of(9 * 64), 0);
}

#[test]
fn lines_with_the_same_ecc_but_other_bytes_are_both_kept() {
    let mut e = engine(&[]);
    let a = line_of(7);
    let mut b = a;
    let k = ecc_kernel_word();
    b[..8].copy_from_slice(&(u64::from_le_bytes(a[..8].try_into().unwrap()) ^ k).to_le_bytes());
    assert_eq!(secmem_core::ecc::line_ecc(&a), secmem_core::ecc::line_ecc(&b));
    assert_ne!(a, b);
    // a's entry becomes popular (count 2); b hits it, the compare read tells them apart, and
    // b enters the EFIT beside a: both are found again, the more referenced compared first.
    let s = write_then_read_back(&mut e, &[(0, a), (64, a), (128, b), (192, a), (256, b)]);
    assert_eq!((s["ecc_collisions"], s["dedup_writes"], s["compare_reads"]), (1.0, 3.0, 5.0), "{s:?}");
    assert_eq!(e.design.data_line_of(256), e.design.data_line_of(128));
    // With one compare read allowed, b is missed while a is the more referenced.
    let mut e = engine(&["design.esd.max_compare_reads=1"]);
    let s = write_then_read_back(&mut e, &[(0, a), (64, a), (128, b), (192, b)]);
    assert_eq!((s["ecc_collisions"], s["dedup_writes"]), (2.0, 1.0), "{s:?}");
}

#[test]
fn a_content_referenced_referh_max_times_is_written_anew() {
    // 2-bit referH: a content takes 3 references, the next write of it is a new copy.
    let mut e = engine(&["design.esd.referh_bits=2"]);
    let a = line_of(5);
    let w: Vec<(u64, [u8; 64])> = (0..10).map(|l| (l * 64, a)).collect();
    let s = write_then_read_back(&mut e, &w);
    assert!(s["referh_saturations"] >= 2.0, "{s:?}");
    assert_eq!(s["unique_writes"], 1.0 + s["referh_saturations"], "{s:?}");
    let homes: std::collections::HashSet<u64> = (0..10).map(|l| e.design.data_line_of(l * 64)).collect();
    assert_eq!(homes.len() as f64, s["unique_writes"]);
}

#[test]
fn amt_cache_evictions_write_entries_back_and_fetch_them_verified() {
    // A one-line AMT cache: every entry of another AMT line evicts the last.
    let mut e = engine(&["design.esd.amt_cache_bytes=64", "design.esd.amt_cache_ways=1"]);
    let mut w = Vec::new();
    for round in 0..3u64 {
        for l in (0..2000u64).step_by(37) {
            w.push((l * 64, line_of(l % 5 + round)));
        }
    }
    let s = write_then_read_back(&mut e, &w);
    assert!(s["amt_cache_misses"] > 100.0 && s["amt_line_writes"] > 100.0, "{s:?}");
    assert!(s["dedup_writes"] > 0.0);
}

#[test]
fn counting_and_functional_mode_give_the_same_counts_on_a_captured_program() {
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/secmem/traces/gzip-numbers.trace.xz");
    let run = |functional: bool| {
        let c = cfg(&["run.max_requests=150000", "llc.size_kib=64", "l2.size_kib=32", &format!("run.functional={functional}")]).unwrap();
        let c = secmem_sim::run::resolve_for_input(&c, &TraceInput::File(trace.clone())).unwrap();
        secmem_sim::run(&c, &TraceInput::File(trace.clone())).unwrap()["stats"].clone()
    };
    let (a, b) = (run(false), run(true));
    assert!(design(&a, "dedup_writes") > 0.0, "{}", a["design"]);
    assert_eq!(a, b);
}

/// A small churn of stores with repeated contents, as an OS-level trace.
fn churn(name: &str) -> (tempdir::Dir, PathBuf) {
    let d = tempdir::Dir::new(&format!("esd-{name}"));
    let p = d.0.join("churn.trace");
    let spec = secmem_sim::cow_workloads::CowSpec {
        workload: secmem_sim::cow_workloads::CowWorkload::Churn,
        page_size: secmem_sim::os::PageSize::Small,
        footprint_bytes: 12 * 4096,
        lines_per_page: 1,
        ops: 1500,
        seed: 4,
    };
    secmem_sim::cow_workloads::write_trace(&spec, &p, secmem_trace::Format::Binary, true).unwrap();
    (d, p)
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new(name: &str) -> Dir {
            let p = std::env::temp_dir().join(format!("secmem-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) { let _ = std::fs::remove_dir_all(&self.0); }
    }
}

fn small(extra: &[&str]) -> Config {
    let mut o = vec!["l1.size_kib=4", "l1.ways=2", "l2.size_kib=8", "l2.ways=2", "llc.size_kib=16", "llc.ways=4", "design.esd.amt_cache_bytes=1024"];
    o.extend_from_slice(extra);
    cfg(&o).unwrap()
}

#[test]
fn tampering_with_a_shared_line_or_the_amt_is_detected_for_every_line_that_maps_there() {
    let (_d, p) = churn("attack");
    let out = attack_campaign(&small(&[]), &TraceInput::File(p), None, 10, 3000, 2).unwrap();
    assert!(out.all_detected(), "{out:#?}");
    for class in ["tamper-amt", "replay-amt", "splice-amt"] {
        assert!(out.classes[class].injected > 0, "{class}: {out:#?}");
    }
    // Every line mapped to a shared physical line fails when that line is tampered with.
    let mut e = engine(&[]);
    let a = line_of(9);
    for l in 0..4u64 {
        e.step(&Record { op: Op::Write, addr: l * 64 * 64, size_bytes: 64, inst_gap: 0, data: Some(a) }, l).unwrap();
    }
    e.finish_design().unwrap();
    let shared = e.design.data_line_of(0);
    {
        let f = e.mc.func.as_mut().unwrap();
        let mut bytes = f.image.get(shared);
        bytes[5] ^= 0x10;
        f.image.put(shared, bytes);
    }
    for l in 0..4u64 {
        e.design.drop_metadata_caches(&mut e.mc);
        let err = e.design.read(&mut e.mc, l * 64, Cycle(0)).unwrap_err();
        assert_eq!((err.class(), err.addr()), ("data-mac".to_string(), shared << 6), "line {l}");
    }
}

#[test]
fn a_crash_recovers_every_mapping_under_strict_and_battery_backed_metadata() {
    let (_d, p) = churn("crash");
    for persistence in ["strict", "battery-backed"] {
        let c = small(&[&format!("security.metadata_persistence=\"{persistence}\""), "tree.update=eager"]);
        let out = crash_campaign(&c, &TraceInput::File(p.clone()), 40, 3).unwrap();
        assert_eq!((out.recovered, out.silent_corruptions), (out.points, 0), "{persistence}: {out:#?}");
    }
}

#[test]
fn bad_settings_and_stores_without_contents_are_refused_naming_the_field_or_the_trace() {
    for (p, field) in [
        ("design.esd.efit_bytes=0", "design.esd.efit_bytes"),
        ("design.esd.referh_bits=0", "design.esd.referh_bits"),
        ("design.esd.amt_cache_bytes=0", "design.esd.amt_cache_bytes"),
        ("design.esd.efit_ways=0", "design.esd.efit_ways"),
        ("workload.duplicate_pct=101", "workload.duplicate_pct"),
    ] {
        let e = cfg(&[p]).unwrap_err();
        assert!(e.contains(&format!("'{field}'")), "{p}: {e}");
    }
    let c = cfg(&["workload.requests=1000"]).unwrap();
    let e = secmem_sim::run(&c, &TraceInput::Workload).unwrap_err().to_string();
    assert!(e.contains("carries none") && e.contains("--data") && e.contains("generated"), "{e}");
    // With synthetic contents the same workload runs, and its duplicates are found.
    let c = cfg(&["workload.requests=20000", "workload.read_ratio=0.3", "workload.contents=synthetic", "run.trace_level=\"memory\""]).unwrap();
    let s = secmem_sim::run(&c, &TraceInput::Workload).unwrap()["stats"].clone();
    assert!(design(&s, "write_reduction_pct") > 0.0, "{}", s["design"]);
}

#[test]
fn full_deduplication_finds_every_duplicate_and_selective_only_those_its_efit_holds() {
    let run = |design: &str, extra: &[&str]| {
        let mut o = vec!["workload.requests=30000", "workload.read_ratio=0.3", "workload.contents=synthetic", "workload.duplicate_contents=4096", "run.trace_level=\"memory\""];
        let d = format!("run.design=\"{design}\"");
        o.push(&d);
        o.extend_from_slice(extra);
        secmem_sim::run(&cfg(&o).unwrap(), &TraceInput::Workload).unwrap()["stats"].clone()
    };
    let sha1 = run("dedup_sha1", &[]);
    let dewrite = run("dewrite", &[]);
    let esd = run("esd", &[]);
    let small = run("esd", &["design.esd.efit_bytes=1792", "design.esd.efit_ways=4"]);
    let eliminated = |s: &Value| design(s, "dedup_writes") + design(s, "silent_writes");
    // SHA-1 and CRC-32 (confirmed by the compare read) both find every duplicate in the store.
    assert_eq!(eliminated(&sha1), eliminated(&dewrite));
    assert!(eliminated(&esd) <= eliminated(&sha1) && eliminated(&small) < eliminated(&esd), "{} {} {}", eliminated(&sha1), eliminated(&esd), eliminated(&small));
    assert!(eliminated(&small) > 0.0);
    // Every write is hashed by the baselines, none by ESD; only DeWrite and ESD read to compare.
    assert_eq!(design(&sha1, "fingerprint_ops"), design(&sha1, "writes"));
    assert_eq!((design(&esd, "fingerprint_ops"), design(&sha1, "compare_reads")), (0.0, 0.0));
    assert!(design(&dewrite, "compare_reads") >= design(&dewrite, "dedup_writes"));
    // The full store is looked up in NVM; ESD never is.
    assert!(design(&sha1, "fingerprint_nvm_lookups") > 0.0 && design(&esd, "fingerprint_nvm_lookups") == 0.0);
    // DeWrite's mispredicted duplicates were encrypted for nothing (design crypto).
    let wasted = design(&dewrite, "mispredicted_duplicates");
    assert!(wasted > 0.0 && design(&dewrite, "mispredicted_uniques") > 0.0);
    assert_eq!(dewrite["security"]["aes_ops"]["design"].as_f64(), Some(wasted));
    // SHA-1's 321 ns is on every write's path.
    let mean = |s: &Value| design(s, "write_fingerprint_cycles") / design(s, "writes");
    assert_eq!(mean(&sha1), 642.0, "321 ns at 2 GHz");
}
