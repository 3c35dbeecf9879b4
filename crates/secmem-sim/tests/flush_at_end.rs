//! The state a run leaves: are the dirty lines left in each cache reported, and does
//! `run.flush_at_end` write them back in a section of its own without changing the region of
//! interest's statistics, the same on one host thread and two?

use secmem_sim::{Config, TraceInput};
use serde_json::Value;

fn run(extra: &[&str]) -> Value {
    // 2,000 records over 64 KiB: every store stays in the caches.
    let mut o: Vec<String> = ["run.progress=false", "workload.requests=2000", "workload.footprint_bytes=65536", "workload.read_ratio=0.5"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    o.extend(extra.iter().map(|s| s.to_string()));
    secmem_sim::run(&Config::load(Some("horus"), None, &o).unwrap(), &TraceInput::Workload).unwrap()
}

#[test]
fn a_short_run_reports_its_dirty_lines_and_flush_at_end_writes_them_back_apart() {
    let plain = run(&[]);
    let s = &plain["stats"];
    assert_eq!(s["memory"]["writes"]["total"], 0, "the stores should not have left the caches");
    let l1_dirty = s["caches"]["l1"]["dirty_lines_at_end"].as_u64().unwrap();
    assert!(l1_dirty > 0 && l1_dirty <= 1024, "64 KiB holds 1,024 lines; {l1_dirty} dirty in L1");
    assert!(plain["stats"].get("flush_at_end").is_none());

    let flushed = run(&["run.flush_at_end=true"]);
    let f = &flushed["stats"]["flush_at_end"];
    // Every distinct dirty line is written once, as a data write with its metadata behind it.
    let lines = f["lines_written_back"].as_u64().unwrap();
    assert!(lines >= l1_dirty);
    assert_eq!(f["memory"]["writes"]["data"].as_u64().unwrap(), lines);
    assert_eq!(f["security"]["data_writes"].as_u64().unwrap(), lines);
    assert!(f["security"]["mac_ops"]["data_write"].as_u64().unwrap() == lines && f["cycles"].as_u64().unwrap() > 0);
    // The region of interest is the run's without the flush.
    let mut a = flushed["stats"].clone();
    a.as_object_mut().unwrap().remove("flush_at_end");
    assert_eq!(a, plain["stats"]);

    // Two host threads (functional) count the same as counting mode on one.
    let two = run(&["run.flush_at_end=true", "run.functional=true", "run.host_threads=2"]);
    assert_eq!(two["stats"]["flush_at_end"]["memory"], f["memory"]);
    assert_eq!(two["stats"]["caches"], flushed["stats"]["caches"]);
    let one = run(&["run.flush_at_end=true", "run.functional=true", "run.host_threads=1"]);
    assert_eq!(one["stats"]["flush_at_end"]["memory"], f["memory"]);
}
