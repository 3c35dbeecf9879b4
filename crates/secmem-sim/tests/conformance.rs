//! The conformance suite: what every registered design must do. Each test iterates
//! `secmem_schemes::designs::REGISTRY`, so a design added there is covered without editing a
//! list here. A design's own behaviour (its counts, its paper's figures) is tested beside it;
//! this file asks only what every secure memory must answer:
//!
//! * does a read after a write return the data written?
//! * are tampering, replay and splicing of data and metadata detected, with no false alarm?
//! * does recovery after a crash give back what the oracle says survived, under the
//!   persistence the config declares (strict, or battery-backed metadata)?
//! * is a pad never used twice?
//! * do counting and functional mode give the same counts?
//!
//! The workload is an OS-level trace (processes allocate, fork, store, free and exit), so a
//! design's page commands run where it has them and the kernel's copies where it does not.

use secmem_schemes::designs::{DesignEntry, REGISTRY};
use secmem_sim::harness::{attack_campaign, crash_campaign};
use secmem_sim::{Config, TraceInput};
use secmem_trace::{Op, Record};

mod os_common;
use os_common::{churn, write_trace, TmpTrace};

/// `os_common::cfg` for a registered design; a design that decides on line contents gets a
/// generated workload whose writes carry them.
fn cfg(design: &DesignEntry, extra: &[&str]) -> Config {
    let mut o: Vec<&str> = if design.needs_line_contents { vec!["workload.contents=\"synthetic\""] } else { Vec::new() };
    o.extend_from_slice(extra);
    os_common::cfg(design.name, &o)
}

/// The `churn` workload (allocations of up to 12 pages, forks, stores with data, loads, frees,
/// exits) of `ops` operations, as an OS-level trace file.
fn churn_trace(name: &str, seed: u64, ops: u64) -> TmpTrace { write_trace(&format!("conformance-{name}"), &churn(seed, ops)) }

#[test]
fn every_design_reads_back_the_last_data_written_to_each_line() {
    // Memory-level writes with distinct contents, some lines written twice, then every line
    // read through the design: the plaintext must be the last written.
    for d in REGISTRY {
        let c = cfg(d, &["run.trace_level=\"memory\""]);
        let mut e = secmem_sim::engine::Engine::new(&c).unwrap();
        let lines: Vec<u64> = (0..300u64).map(|i| (i * 7919) % 4096).collect();
        let content = |line: u64, round: u64| {
            let mut b = [0u8; 64];
            b[..8].copy_from_slice(&line.to_le_bytes());
            b[8..16].copy_from_slice(&round.to_le_bytes());
            b[16] = 0xa5;
            b
        };
        let mut want = std::collections::HashMap::new();
        for round in 0..2u64 {
            for (i, &line) in lines.iter().enumerate() {
                if round == 1 && i % 3 != 0 {
                    continue;
                }
                let data = content(line, round);
                let rec = Record { op: Op::Write, addr: line * 64, size_bytes: 64, inst_gap: 0, data: Some(data) };
                e.step(&rec, i as u64).unwrap_or_else(|err| panic!("{}: write {line}: {err:?}", d.name));
                want.insert(line, data);
            }
        }
        let now = e.now();
        for (&line, data) in &want {
            let (_, got) = e.design.read(&mut e.mc, line, now).unwrap_or_else(|err| panic!("{}: read {line}: {err}", d.name));
            assert_eq!(got.as_ref(), Some(data), "{}: line {line}", d.name);
        }
    }
}

#[test]
fn every_design_detects_every_attack_class_and_raises_no_false_alarm() {
    let t = churn_trace("attack", 5, 2000);
    for d in REGISTRY {
        let out = attack_campaign(&cfg(d, &[]), &TraceInput::File(t.0.clone()), None, 12, 5_000, 3).unwrap_or_else(|e| panic!("{}: {e}", d.name));
        assert!(out.all_detected(), "{}: {out:#?}", d.name);
        for kind in ["tamper", "replay", "splice"] {
            assert!(out.classes.keys().any(|k| k.starts_with(kind)), "{}: no {kind} class ran: {out:#?}", d.name);
        }
        assert!(out.classes.values().all(|c| c.tampered_plaintext_returned == 0), "{}: {out:#?}", d.name);
    }
}

#[test]
fn every_design_recovers_to_the_oracle_at_every_crash_point_under_strict_persistence() {
    let t = churn_trace("crash-strict", 1, 1500);
    for d in REGISTRY {
        let out = crash_campaign(&cfg(d, &[]), &TraceInput::File(t.0.clone()), 60, 7).unwrap_or_else(|e| panic!("{}: {e}", d.name));
        assert_eq!((out.recovered, out.mismatches), (60, 0), "{}: {:#?}", d.name, out.examples);
        assert!(out.lines_checked > 0, "{}", d.name);
    }
}

#[test]
fn every_design_recovers_with_battery_backed_metadata_under_lazy_update() {
    let t = churn_trace("crash-battery", 4, 1500);
    let battery = ["tree.update=lazy", "security.metadata_persistence=\"battery-backed\""];
    for d in REGISTRY {
        let out = crash_campaign(&cfg(d, &battery), &TraceInput::File(t.0.clone()), 60, 7).unwrap_or_else(|e| panic!("{}: {e}", d.name));
        assert_eq!((out.recovered, out.mismatches), (60, 0), "{}: {:#?}", d.name, out.examples);
    }
}

#[test]
fn no_design_uses_a_pad_twice_even_across_minor_overflows() {
    // A few hot lines written through over and over: minors overflow and pages re-encrypt.
    // Every pad is recorded (`run.check_pad_reuse`) and a repeat fails the run.
    for d in REGISTRY {
        let c = cfg(d, &[
            "workload.requests=12000", "workload.footprint_bytes=8192", "workload.read_ratio=0.2", "workload.pattern=random",
            "hierarchy.write_through=true", "run.trace_level=\"core\"",
        ]);
        let r = secmem_sim::run(&c, &TraceInput::Workload).unwrap_or_else(|e| panic!("{}: {e}", d.name));
        assert!(r["stats"]["security"]["counter_overflows"].as_u64().unwrap() > 0, "{}: no overflow, so nothing was tested", d.name);
    }
}

#[test]
fn every_design_gives_the_same_counts_in_counting_and_functional_mode() {
    let t = churn_trace("modes", 2, 1500);
    for d in REGISTRY {
        for input in [TraceInput::File(t.0.clone()), TraceInput::Workload] {
            let extra = ["workload.requests=4000", "workload.footprint_bytes=1048576", "tree.update=lazy", "security.metadata_persistence=\"write-back\""];
            let functional = cfg(d, &extra);
            let mut counting = functional.clone();
            counting.run.functional = false;
            counting.run.check_pad_reuse = false;
            let a = secmem_sim::run(&counting, &input).unwrap_or_else(|e| panic!("{}: {e}", d.name));
            let b = secmem_sim::run(&functional, &input).unwrap_or_else(|e| panic!("{}: {e}", d.name));
            assert_eq!(a["stats"], b["stats"], "{} on {input:?}", d.name);
        }
    }
}

#[test]
fn test_builds_register_the_example_design_so_the_suite_is_seen_to_cover_a_design_it_does_not_name() {
    // `docs/architecture.md` walks through adding `write-verify`; its registration through the
    // `example-design` feature is what this suite's coverage of a new design rests on.
    let d = REGISTRY.iter().find(|d| d.name == "write-verify").expect("the example-design feature is on in test builds");
    let r = secmem_sim::run(&cfg(d, &["workload.requests=2000", "run.trace_level=\"core\""]), &TraceInput::Workload).unwrap();
    let writes = r["stats"]["memory"]["writes"]["data"].as_u64().unwrap();
    assert!(writes > 0);
    let verified = r["stats"]["design"]["verify_reads"].as_f64().unwrap() as u64;
    let zeros = r["stats"]["design"]["zero_writes_not_verified"].as_f64().unwrap() as u64;
    assert_eq!(verified + zeros, writes, "one verify read per data write but the all-zero ones");
    assert!(verified > 0);
}

#[test]
fn a_design_whose_decisions_depend_on_line_contents_decides_alike_in_both_modes() {
    // Counting mode must hand such a design the same contents functional mode does
    // (`DesignEntry::needs_line_contents`), or its counts would differ. `write-verify` skips
    // the read-back of all-zero lines, which the OS trace's kernel zero-fills write: its
    // counters show the decision was exercised.
    let t = churn_trace("contents", 3, 1500);
    let designs: Vec<_> = REGISTRY.iter().filter(|d| d.needs_line_contents).collect();
    assert!(designs.iter().any(|d| d.name == "write-verify"), "the example design depends on line contents");
    for d in designs {
        let functional = cfg(d, &["tree.update=lazy", "security.metadata_persistence=\"write-back\""]);
        let mut counting = functional.clone();
        counting.run.functional = false;
        counting.run.check_pad_reuse = false;
        let a = secmem_sim::run(&counting, &TraceInput::File(t.0.clone())).unwrap_or_else(|e| panic!("{}: {e}", d.name));
        let b = secmem_sim::run(&functional, &TraceInput::File(t.0.clone())).unwrap_or_else(|e| panic!("{}: {e}", d.name));
        if d.name == "write-verify" {
            assert!(a["stats"]["design"]["zero_writes_not_verified"].as_f64().unwrap() > 0.0, "no decision was exercised: {}", a["stats"]["design"]);
            assert!(a["stats"]["design"]["verify_reads"].as_f64().unwrap() > 0.0);
        }
        assert_eq!(a["stats"], b["stats"], "{}", d.name);
    }
}
