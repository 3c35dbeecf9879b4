//! Crash and attack campaigns over OS-level traces: processes allocate, fork, store, free and
//! exit, so the designs' page commands (Lelantus' page_copy / page_phyc / page_free, Silent
//! Shredder's zero fill) and the kernel's own copies happen between crash points and before
//! the attacks. After every crash the design recovers from what survives (the NVM image and
//! the root register, or also the metadata caches when they are battery-backed) and every line
//! the oracle knows must read back as the kernel last left it; every attack must be detected,
//! and clean reads, redirected ones included, must raise no alarm.

use secmem_sim::cow_workloads::{self, CowSpec, CowWorkload};
use secmem_sim::harness::{attack_campaign, crash_campaign, CrashOutcome};
use secmem_sim::TraceInput;
use secmem_trace::{Event, Format};
use std::path::Path;

mod os_common;
use os_common::{cfg, churn, write_trace, TmpTrace};

/// A counter cache of 32 blocks (2 KiB; Lelantus-CoW carves its 32 KiB CoW cache out of it).
fn tiny_counter_cache(design: &str) -> &'static str {
    if design == "lelantus-cow" { "metadata_cache.counter.size_kib=34" } else { "metadata_cache.counter.size_kib=2" }
}

fn campaign(design: &str, trace: &Path, points: u64, extra: &[&str]) -> CrashOutcome {
    crash_campaign(&cfg(design, extra), &TraceInput::File(trace.to_path_buf()), points, 7).unwrap()
}

#[test]
fn the_churn_trace_issues_every_page_command_lelantus_has() {
    // What the campaigns below crash around: copies, reclamations and frees, not only stores.
    let t = write_trace("commands", &churn(1, 3000));
    let c = cfg("lelantus", &[]);
    let rep = secmem_sim::run::run(&c, &TraceInput::File(t.0.clone())).unwrap();
    let d = &rep["stats"]["design"];
    for k in ["page_copies", "page_phyc", "page_frees", "redirected_reads"] {
        assert!(d[k].as_f64().unwrap() > 0.0, "{k}: {d}");
    }
}

#[test]
fn lelantus_recovers_copies_reclamations_and_frees_from_nvm_at_every_crash_point() {
    let t = write_trace("lelantus", &churn(1, 3000));
    // Blocks a page command changed are evicted before the page is written again (a free's
    // block before the frame is reused).
    let out = campaign("lelantus", &t.0, 150, &[tiny_counter_cache("lelantus")]);
    assert_eq!((out.recovered, out.mismatches), (150, 0), "{:#?}", out.examples);
    assert!(out.lines_checked > 10_000, "{}", out.lines_checked);
    assert!(out.page_command_points > 30, "crashes right after page commands: {}", out.page_command_points);
}

#[test]
fn lelantus_cow_recovers_its_copy_records_from_nvm_at_every_crash_point() {
    let t = write_trace("lelantus-cow", &churn(2, 3000));
    let out = campaign("lelantus-cow", &t.0, 150, &[tiny_counter_cache("lelantus-cow")]);
    assert_eq!((out.recovered, out.mismatches), (150, 0), "{:#?}", out.examples);
}

#[test]
fn kernel_copies_and_silent_shredder_zero_fills_recover_at_every_crash_point() {
    let t = write_trace("kernel", &churn(3, 2000));
    for d in ["baseline", "silent-shredder"] {
        let out = campaign(d, &t.0, 100, &[]);
        assert_eq!((out.recovered, out.mismatches), (100, 0), "{d}: {:#?}", out.examples);
    }
}


#[test]
fn crash_points_of_an_os_trace_come_after_its_roi_record() {
    // The forkbench marks its region of interest after the parent's initialisation and the
    // fork: its crash points are the child's CoW faults, as `run` measures them.
    use secmem_sim::cow_workloads::write_trace as write_cow;
    let path = std::env::temp_dir().join(format!("secmem-os-campaign-{}-forkbench.trace", std::process::id()));
    let t = TmpTrace(path);
    let spec = CowSpec { workload: CowWorkload::Forkbench, page_size: secmem_sim::os::PageSize::Small, footprint_bytes: 64 * 4096, lines_per_page: 4, ops: 0, seed: 1 };
    write_cow(&spec, &t.0, Format::Binary, true).unwrap();
    let out = campaign("lelantus", &t.0, 40, &[tiny_counter_cache("lelantus")]);
    assert_eq!((out.recovered, out.mismatches), (40, 0), "{:#?}", out.examples);
    // 64 pages x 4 child stores after the ROI record; the initialisation before it has more
    // than 64 x 64 records, none of them a candidate.
    assert!(out.persist_points > 0 && out.persist_points <= 64 * 4, "{} of {} records", out.persist_points, out.records);
    let mut c = cfg("lelantus", &[]);
    c.run.warmup_requests = 10;
    let e = crash_campaign(&c, &TraceInput::File(t.0.clone()), 1, 1).unwrap_err().to_string();
    assert!(e.contains("region of interest") && e.contains("run.warmup_requests"), "{e}");
}

#[test]
fn an_os_trace_is_refused_at_memory_level_naming_the_field() {
    let t = write_trace("memory-level", &churn(1, 50));
    let e = crash_campaign(&cfg("lelantus", &["run.trace_level=\"memory\""]), &TraceInput::File(t.0.clone()), 1, 1).unwrap_err().to_string();
    assert!(e.contains("run.trace_level"), "{e}");
}

#[test]
fn a_bad_os_record_is_an_error_naming_the_record() {
    let mut ev = churn(1, 50);
    ev.push(Event::Store { pid: 9, vaddr: 1 << 40, size_bytes: 64, inst_gap: 1, data: Some([1; 64]) });
    let t = write_trace("bad-record", &ev);
    let e = crash_campaign(&cfg("lelantus", &[]), &TraceInput::File(t.0.clone()), 1, 1).unwrap_err().to_string();
    assert!(e.contains(&format!("record {}", ev.len() - 1)) && e.contains("unknown pid 9"), "{e}");
}

#[test]
fn with_battery_backed_metadata_every_design_recovers_under_lazy_update() {
    // The paper's own assumption (Lelantus V-A: "the battery-backed write-back scheme"): the counter cache survives power loss, so
    // the write-back metadata and lazy tree of the preset need no rebuild from NVM.
    let t = write_trace("battery", &churn(4, 2000));
    for d in ["lelantus", "lelantus-cow", "baseline", "silent-shredder"] {
        let battery = ["tree.update=lazy", "security.metadata_persistence=\"battery-backed\"", tiny_counter_cache(d)];
        let out = campaign(d, &t.0, 100, &battery);
        assert_eq!((out.recovered, out.mismatches), (100, 0), "{d}: {:#?}", out.examples);
        assert_eq!(out.mean_recovery_counter_blocks, 0.0, "{d}: nothing is rebuilt");
    }
    // The same metadata without the battery: copies whose counter blocks were still on chip are
    // undone by the crash, and the destination reads as its old, authentic content.
    let out = campaign("lelantus", &t.0, 100, &["tree.update=lazy", "security.metadata_persistence=\"write-back\"", "metadata_cache.counter.size_kib=2"]);
    assert!(out.mismatches > 0, "{out:#?}");
}

#[test]
fn every_attack_class_is_detected_after_page_commands_and_redirected_reads_raise_no_alarm() {
    // The image after a churn holds copies (uncopied lines read from their source), zero
    // fills, frees and Lelantus' CoW metadata: tampering, replay and splicing must still be
    // caught with the right class and address, and clean reads, redirected ones included,
    // must verify and match the oracle.
    let t = write_trace("attack", &churn(5, 3000));
    for d in ["lelantus", "lelantus-cow", "silent-shredder", "baseline"] {
        let out = attack_campaign(&cfg(d, &[]), &TraceInput::File(t.0.clone()), None, 30, 20_000, 3).unwrap();
        assert!(out.all_detected(), "{d}: {out:#?}");
        // Lelantus-CoW's copy records are attacked too, by default.
        assert_eq!(out.classes.contains_key("splice-cow-record"), d == "lelantus-cow", "{d}: {out:#?}");
        assert!(out.classes.values().all(|c| c.tampered_plaintext_returned == 0), "{d}: {out:#?}");
    }
}

#[test]
fn tampering_replaying_or_splicing_a_lelantus_cow_copy_record_is_caught_at_the_record_line() {
    // Lelantus-CoW keeps which page an uncopied line reads from in record lines of its own.
    // An uncopied line's read must fetch its record through the verified data path: a changed
    // record would silently redirect the read to another page's data.
    let t = write_trace("attack-records", &churn(5, 3000));
    let classes: Vec<String> = ["tamper-cow-record", "replay-cow-record", "splice-cow-record"].map(String::from).to_vec();
    let out = attack_campaign(&cfg("lelantus-cow", &[]), &TraceInput::File(t.0.clone()), Some(&classes), 40, 1_000, 9).unwrap();
    for c in &classes {
        let o = &out.classes[c];
        assert!(o.injected == 40 && o.detected == 40 && o.misattributed == 0, "{c}: {out:#?}");
    }
    assert!(out.all_detected(), "{out:#?}");
}

#[test]
fn copy_record_classes_exist_only_for_a_design_that_keeps_copy_records() {
    let t = write_trace("attack-no-records", &churn(5, 300));
    let classes = ["tamper-cow-record".to_string()];
    // Lelantus keeps a copy's source in its counter block: the counter classes cover it.
    let err = attack_campaign(&cfg("lelantus", &[]), &TraceInput::File(t.0.clone()), Some(&classes), 5, 10, 1).unwrap_err();
    assert!(err.to_string().contains("unknown attack class 'tamper-cow-record'"), "{err}");
    // Without a fork nothing is copied: asked for, the class tested nothing, so it fails;
    // by default it is left out.
    let spec = CowSpec { workload: CowWorkload::NonCopy, page_size: secmem_sim::os::PageSize::Small, footprint_bytes: 8 * 4096, lines_per_page: 4, ops: 0, seed: 1 };
    let mut no_fork = Vec::new();
    cow_workloads::emit(&spec, true, &mut |e| {
        no_fork.push(e);
        Ok(())
    })
    .unwrap();
    assert!(!no_fork.iter().any(|e| matches!(e, Event::Fork { .. })));
    let t = write_trace("attack-no-fork", &no_fork);
    let asked = attack_campaign(&cfg("lelantus-cow", &[]), &TraceInput::File(t.0.clone()), Some(&classes), 5, 10, 1).unwrap();
    assert_eq!(asked.untested_classes, classes);
    assert!(!asked.all_detected());
    let default = attack_campaign(&cfg("lelantus-cow", &[]), &TraceInput::File(t.0.clone()), None, 5, 10, 1).unwrap();
    assert!(!default.classes.contains_key("tamper-cow-record"), "{default:#?}");
}

#[test]
fn a_physical_write_to_a_copy_source_leaves_its_lazy_copies_as_they_were_copied() {
    // Found by fuzzing: the child's CoW fault makes a lazy copy of the parent's frame (the
    // first free frame, physical 0x400000); a physical W (a device, bypassing translation)
    // then changed that frame, and under Lelantus the child's uncopied line read the new
    // bytes (0x33) where the kernel's copy keeps the copied ones (0x11): a silent corruption
    // at every crash point after it, false alarms in the attack campaign's clean reads. The
    // kernel now makes the frame's lazy copies real first, as before a last sharer writes.
    use secmem_trace::{PageSize, Record};
    let base = 1u64 << 40;
    let ev = vec![
        Event::Alloc { pid: 0, vaddr: base, length: 4096, page: PageSize::Small },
        Event::Store { pid: 0, vaddr: base, size_bytes: 64, inst_gap: 0, data: Some([0x11; 64]) },
        Event::Fork { parent: 0, child: 1 },
        Event::Store { pid: 1, vaddr: base + 64, size_bytes: 64, inst_gap: 0, data: Some([0x22; 64]) },
        Event::Phys(Record::write_data(0x40_0000, 0, [0x33; 64])),
        Event::WbNoInvd,
    ];
    let t = write_trace("phys-into-source", &ev);
    for d in ["lelantus", "lelantus-cow", "baseline", "silent-shredder"] {
        for extra in [&[][..], &["tree.update=lazy", "security.metadata_persistence=\"battery-backed\""][..]] {
            let input = TraceInput::File(t.0.clone());
            let persist = crash_campaign(&cfg(d, extra), &input, 1_000, 1).unwrap_err().to_string();
            let points: u64 = persist.split("only ").nth(1).and_then(|s| s.split(' ').next()).and_then(|n| n.parse().ok()).expect(&persist);
            let out = crash_campaign(&cfg(d, extra), &input, points, 1).unwrap();
            assert_eq!((out.recovered, out.silent_corruptions), (points, 0), "{d} {extra:?}: {:#?}", out.examples);
            let out = attack_campaign(&cfg(d, extra), &input, None, 5, 2_000, 1).unwrap();
            assert_eq!(out.false_alarms, 0, "{d} {extra:?}: {:#?}", out.examples);
        }
    }
}

#[test]
fn a_physical_write_to_a_lazy_copy_is_kept_when_that_copy_is_copied_again() {
    // A 2 MB zero fill under Lelantus is 512 lazy copies of the huge zero page, one written by
    // the store. A physical W into another (frame H + 1 of the first huge frames, H = 261120
    // at 1 GiB) must count as a write to that copy: the child's CoW copy of the huge page must
    // be recorded as a copy of H + 1, not of the zero page (the recursive-chain rule), so that
    // the parent's store into H + 1 (a reuse fault) first makes it real; else the child's
    // line read the parent's 0x44 instead of 0x33.
    use secmem_trace::{PageSize, Record};
    let base = 1u64 << 40;
    let ev = vec![
        Event::Alloc { pid: 0, vaddr: base, length: 2 << 20, page: PageSize::Huge },
        Event::Store { pid: 0, vaddr: base, size_bytes: 64, inst_gap: 0, data: Some([0x11; 64]) },
        Event::Phys(Record::write_data((261_120 + 1) << 12, 0, [0x33; 64])),
        Event::Fork { parent: 0, child: 1 },
        Event::Store { pid: 1, vaddr: base + 128, size_bytes: 64, inst_gap: 0, data: Some([0x22; 64]) },
        Event::Store { pid: 0, vaddr: base + 4096, size_bytes: 64, inst_gap: 0, data: Some([0x44; 64]) },
        Event::WbNoInvd,
    ];
    let t = write_trace("phys-into-lazy-copy", &ev);
    for d in ["lelantus", "lelantus-cow", "baseline", "silent-shredder"] {
        let extra = ["tree.update=lazy", "security.metadata_persistence=\"battery-backed\""];
        let input = TraceInput::File(t.0.clone());
        let persist = crash_campaign(&cfg(d, &extra), &input, 1_000_000, 1).unwrap_err().to_string();
        let points: u64 = persist.split("only ").nth(1).and_then(|s| s.split(' ').next()).and_then(|n| n.parse().ok()).expect(&persist);
        let out = crash_campaign(&cfg(d, &extra), &input, points, 1).unwrap();
        assert_eq!((out.recovered, out.silent_corruptions), (points, 0), "{d}: {:#?}", out.examples);
    }
}

#[test]
fn a_physical_write_into_a_zero_page_is_an_error_naming_the_record() {
    // Every untouched mapping reads the zero pages (frame 0, and frames 512..1024 for 2 MB
    // pages), and Lelantus' zero fills are lazy copies of them: a device write there changed
    // memory no process had written (found by fuzzing: a lazily zeroed 2 MB page read it).
    use secmem_trace::{PageSize, Record};
    for (addr, page) in [(0x40u64, "4 KB"), (0x32_7380, "2 MB"), (0x3f_ffc0, "2 MB")] {
        let ev = vec![
            Event::Alloc { pid: 0, vaddr: 1 << 40, length: 2 << 20, page: PageSize::Huge },
            Event::Store { pid: 0, vaddr: 1 << 40, size_bytes: 64, inst_gap: 0, data: Some([1; 64]) },
            Event::Phys(Record::write(addr, 0)),
        ];
        let t = write_trace("phys-into-zero", &ev);
        let e = crash_campaign(&cfg("lelantus", &[]), &TraceInput::File(t.0.clone()), 1, 1).unwrap_err().to_string();
        assert!(e.contains("record 2") && e.contains(&format!("{page} zero page")), "{addr:#x}: {e}");
    }
    // The first frame past them is ordinary memory.
    let ev = vec![Event::Phys(Record::write(0x40_0000, 0)), Event::WbNoInvd];
    let t = write_trace("phys-past-zero", &ev);
    assert!(crash_campaign(&cfg("lelantus", &[]), &TraceInput::File(t.0.clone()), 1, 1).is_ok());
}
