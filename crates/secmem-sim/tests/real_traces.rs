//! Real programs as workloads: do the captured fixtures in `python/secmem/traces` (sqlite,
//! gzip, CPython, sort, awk; see its PROGRAMS.md for the commands) run translated through the
//! secure and non-secure presets, and does functional mode write the bytes they carry?

use secmem_sim::engine::Engine;
use secmem_sim::TraceInput;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashSet;
use std::path::PathBuf;
use std::rc::Rc;

mod common;
use common::TmpDir;

const FIXTURES: [&str; 6] = ["sqlite-bank", "gzip-numbers", "python-dict", "sort-numbers", "python-list", "awk-count"];
const WITH_DATA: [&str; 5] = ["sqlite-bank", "gzip-numbers", "python-dict", "python-list", "awk-count"];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../python/secmem/traces/{name}.trace.xz"))
}

fn run(name: &str, extra: &[&str]) -> Value {
    // Small caches (common::cfg), so that a program's few thousand lines are evicted and
    // written back, and the metadata caches miss.
    let cfg = common::cfg("horus", extra);
    secmem_sim::run(&cfg, &TraceInput::File(fixture(name))).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_fixture_is_a_compressed_virtual_trace_of_a_million_records() {
    for name in FIXTURES {
        let p = fixture(name);
        assert_eq!(secmem_trace::compression(&p).unwrap(), secmem_trace::Compression::Xz, "{name}");
        assert!(secmem_trace::trace_kind(&p).unwrap().virtual_addresses, "{name}");
        let info = secmem_trace::info(secmem_trace::open(&p).unwrap()).unwrap();
        assert_eq!(info.records, 1_000_000, "{name}");
        let carries = WITH_DATA.contains(&name);
        assert_eq!(info.records_with_data == info.writes, carries, "{name}: every write carries its line, or none does");
        if carries {
            // Real programs repeat their lines: far fewer distinct contents than payloads.
            assert!(info.distinct_data_contents > 10 && info.distinct_data_contents * 10 < info.records_with_data, "{name}: {info:?}");
        }
    }
}

#[test]
fn every_fixture_runs_translated_through_the_secure_and_non_secure_presets() {
    let mut totals = (0f64, 0f64);
    for name in FIXTURES {
        let secure = run(name, &[]);
        let plain = run(name, &["security.enabled=false"]);
        let info = secmem_trace::info(secmem_trace::open(&fixture(name)).unwrap()).unwrap();
        for r in [&secure, &plain] {
            assert_eq!(r["config"]["translation"]["addresses"], "virtual", "{name}");
            let core = &r["stats"]["core"];
            assert_eq!((core["reads"].as_u64(), core["writes"].as_u64()), (Some(info.reads), Some(info.writes)), "{name}");
            assert!(r["stats"]["memory"]["writes"]["data"].as_u64().unwrap() > 0, "{name}: the small LLC writes lines back");
        }
        // The same frames, the same data traffic; security adds counter, MAC and tree traffic.
        assert_eq!(secure["meta"]["translation"], plain["meta"]["translation"], "{name}");
        assert_eq!(secure["stats"]["memory"]["reads"]["data"], plain["stats"]["memory"]["reads"]["data"], "{name}");
        let meta = |r: &Value| ["counter", "mac", "tree"].iter().map(|k| r["stats"]["memory"]["reads"][k].as_u64().unwrap()).sum::<u64>();
        assert!(meta(&secure) > 0 && meta(&plain) == 0, "{name}");
        // Security costs time overall; on one memory-light window the PCM's queues may even
        // out (python-list: its extra metadata traffic moves write drains, 1% faster).
        let (s, p) = (secure["stats"]["cycles"].as_f64().unwrap(), plain["stats"]["cycles"].as_f64().unwrap());
        assert!(s > 0.97 * p, "{name}: {s} against {p}");
        totals.0 += s;
        totals.1 += p;
    }
    assert!(totals.0 > totals.1, "{totals:?}");
}

#[test]
fn functional_mode_writes_the_lines_a_real_program_left() {
    for name in ["gzip-numbers", "python-dict"] {
        let recs: Vec<secmem_trace::Record> = secmem_trace::open(&fixture(name)).unwrap().take(300_000).map(Result::unwrap).collect();
        let payloads: HashSet<[u8; 64]> = recs.iter().filter_map(|r| r.data).collect();
        let cfg = common::cfg("horus", &["run.functional=true", "translation.addresses=virtual"]);
        let mut e = Engine::new(&cfg).unwrap();
        // Every plaintext the controller encrypts to memory: (from the trace, in all).
        let seen = Rc::new(RefCell::new((0u64, 0u64)));
        let s = seen.clone();
        e.on_persist = Some(Box::new(move |_line, data| {
            let mut s = s.borrow_mut();
            s.0 += payloads.contains(data) as u64;
            s.1 += 1;
        }));
        for (i, r) in recs.iter().enumerate() {
            e.step(r, i as u64).unwrap_or_else(|err| panic!("{name}: record {i}: {err:?}"));
        }
        let (from_trace, all) = *seen.borrow();
        assert!(all > 1000, "{name}: {all} write-backs");
        assert_eq!(from_trace, all, "{name}: a write-back whose plaintext is not one of the trace's lines");
    }
}

#[test]
fn functional_and_counting_modes_count_alike_on_a_real_trace() {
    let counting = run("gzip-numbers", &["run.max_requests=200000"]);
    let functional = run("gzip-numbers", &["run.max_requests=200000", "run.functional=true"]);
    for key in ["core", "memory", "caches"] {
        assert_eq!(counting["stats"][key], functional["stats"][key], "stats.{key}");
    }
    assert_eq!(counting["stats"]["cycles"], functional["stats"]["cycles"]);
}

#[test]
fn a_champsim_trace_runs_translated_with_its_instruction_counts() {
    use secmem_trace::champsim::encode_instr;
    let dir = TmpDir::new("champsim-run");
    let mut raw = Vec::new();
    for i in 0..20_000u64 {
        let (mut src, mut dst) = ([0u64; 4], [0u64; 2]);
        match i % 4 {
            0 => src[0] = 0x7ffd_0000_0000 + (i * 8) % 65536,
            1 => dst[0] = 0x5555_0000_0000 + (i * 64) % (1 << 20),
            _ => {}
        }
        raw.extend_from_slice(&encode_instr(0x40_0000 + 4 * i, i % 4 == 3, false, dst, src));
    }
    let p = dir.0.join("prog.champsimtrace.xz");
    let file = std::fs::File::create(&p).unwrap();
    let mut w = secmem_trace::compress::Compressor::new(file, secmem_trace::Compression::Xz, 6);
    std::io::Write::write_all(&mut w, &raw).unwrap();
    w.finish().unwrap();
    let r = secmem_sim::run(&common::cfg("horus", &[]), &TraceInput::File(p)).unwrap();
    assert_eq!(r["config"]["translation"]["addresses"], "virtual");
    let core = &r["stats"]["core"];
    assert_eq!((core["reads"].as_u64(), core["writes"].as_u64()), (Some(5000), Some(5000)));
    // Every instruction up to the last record: 10,000 records and the 9,998 without operands
    // between them.
    assert_eq!(r["stats"]["instructions"].as_u64(), Some(19_998));
    // 1 MB of heap stores and 64 KB of stack loads: 256 + 16 pages.
    assert_eq!(r["meta"]["translation"]["pages_mapped"].as_u64(), Some(272));
}
