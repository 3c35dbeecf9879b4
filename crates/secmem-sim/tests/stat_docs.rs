//! Is every figure a run can report described (`secmem_sim::stat_docs`), for every registered
//! design, an OS-level trace, storage I/O records and the end-of-run flush? A new counter
//! without a description fails here, naming it.

use secmem_sim::{stat_docs, Config, TraceInput};
use serde_json::Value;

mod common;
use common::TmpDir;

fn undocumented(report: &Value) -> Vec<String> {
    let design = report["config"]["run"]["design"].as_str().unwrap().to_string();
    stat_docs::leaves(report).into_iter().map(|(n, _)| n).filter(|n| stat_docs::describe(n, &design).is_none()).collect()
}

fn load(preset: &str, extra: &[&str]) -> Config {
    let mut o: Vec<String> = ["run.progress=false", "workload.requests=5000", "run.flush_at_end=true"].iter().map(|s| s.to_string()).collect();
    o.extend(extra.iter().map(|s| s.to_string()));
    Config::load(Some(preset), None, &o).unwrap()
}

#[test]
fn every_design_s_figures_are_described() {
    for entry in secmem_sim::designs::REGISTRY {
        let preset = if entry.name.starts_with("horus") || entry.name == "baseline" { "horus" } else { "lelantus" };
        let design = format!("run.design={}", entry.name);
        let contents = if entry.needs_line_contents { "workload.contents=synthetic" } else { "workload.contents=none" };
        let rep = secmem_sim::run(&load(preset, &[&design, contents]), &TraceInput::Workload).unwrap();
        assert!(rep["stats"]["flush_at_end"].is_object());
        assert_eq!(undocumented(&rep), Vec::<String>::new(), "{}", entry.name);
    }
}

#[test]
fn os_level_and_storage_figures_are_described() {
    let dir = TmpDir::new("stat-docs");
    let os = dir.0.join("os.txt");
    std::fs::write(
        &os,
        "# secmem-trace v2 os\nALLOC 0 0x10000000000 16384 4k\nST 0 0x10000000040 64 10\nFORK 0 1\nST 1 0x10000000040 64 10\n\
         LD 0 0x10000000040 64 10\nIOR 0 0 4096 0\nIOW 0 8192 4096 0\nFREE 1 0x10000000000 4096\nEXIT 1\n",
    )
    .unwrap();
    for (preset, design) in [("lelantus", "run.design=lelantus"), ("dshield", "run.design=baseline")] {
        let mut cfg = load(preset, &[design]);
        cfg.run.flush_at_end = false; // OS-level traces refuse it
        let rep = secmem_sim::run(&cfg, &TraceInput::File(os.clone())).unwrap();
        assert!(rep["os"].is_object());
        assert!(rep["io"].is_object(), "{preset}: the IOR and IOW records run on the [ssd] drive");
        assert_eq!(undocumented(&rep), Vec::<String>::new(), "{preset}");
    }
}

#[test]
fn a_run_folder_holds_its_figures_as_text_and_csv() {
    let dir = TmpDir::new("stat-docs-out");
    let rep = secmem_sim::run_to_dir(&load("horus", &[]), &TraceInput::Workload, &dir.0).unwrap();
    let txt = std::fs::read_to_string(dir.0.join("stats.txt")).unwrap();
    let line = txt.lines().find(|l| l.starts_with("stats.cycles ")).unwrap();
    assert!(line.contains(&rep["stats"]["cycles"].to_string()) && line.contains("# core cycles"), "{line}");
    assert!(!txt.contains("undocumented"));
    let csv = std::fs::read_to_string(dir.0.join("stats.csv")).unwrap();
    assert_eq!(csv.lines().count(), stat_docs::leaves(&rep).len() + 1);
    assert!(csv.contains("stats.memory.bank_conflict_cycles_sum,"));
}
