//! Traces of real programs carry virtual addresses: does a lackey trace (or one marked
//! virtual) run, translated page by page on first touch, with the report saying how?

use secmem_sim::TraceInput;
use serde_json::Value;
use std::path::Path;

mod common;
use common::TmpDir;

/// A lackey trace of a program's shape: a stack near 2^37 and a heap and library far apart,
/// 16 distinct 4 KB pages in all, with unaligned and line-crossing accesses as valgrind
/// reports them (a 16-byte vector store across two lines, an 8-byte load across two pages).
fn lackey_trace(dir: &Path) -> std::path::PathBuf {
    let mut text = String::from("==123== Lackey, an example Valgrind tool\n");
    for rep in 0..4u64 {
        for page in 0..4u64 {
            text += &format!("I  04016{page:02x}0,3\n");
            text += &format!(" L 1fff00{page:01x}608,8\n"); // stack
            text += &format!(" S 0555500{page:01x}{:03x},8\n", rep * 64); // heap
            text += &format!(" M 7f1234{page:01x}0038,4\n"); // library data
            text += &format!(" L 0422{page:01x}000,4\n"); // globals
        }
    }
    text += " S 05555000038,16\n"; // crosses a line
    text += " L 1fff003ffc,8\n"; // crosses from page 0x1fff003 into 0x1fff004, untouched so far
    let p = dir.join("prog.lackey");
    std::fs::write(&p, text).unwrap();
    p
}

fn run(extra: &[&str], trace: &Path) -> Result<Value, secmem_sim::SimError> {
    let cfg = common::cfg("horus", extra);
    secmem_sim::run(&cfg, &TraceInput::File(trace.to_path_buf()))
}

#[test]
fn a_lackey_trace_at_virtual_addresses_runs_translated_on_first_touch() {
    let dir = TmpDir::new("translate-lackey");
    let trace = lackey_trace(&dir.0);
    let r = run(&[], &trace).unwrap();
    assert_eq!(r["config"]["translation"]["addresses"], "virtual", "auto resolves to virtual for lackey");
    let t = &r["meta"]["translation"];
    // 4 stack + 4 heap + 4 library + 4 global pages, and the stack's next page.
    assert_eq!(t["pages_mapped"], 17);
    assert_eq!((t["page_bytes"].as_u64(), t["bytes_mapped"].as_u64()), (Some(4096), Some(17 * 4096)));
    assert_eq!(t["placement"], "random");
    // A real program's unaligned accesses are split, not refused (`run.require_aligned`
    // governs physical traces): the 16-byte store across two lines and the 8-byte load across
    // two pages.
    assert_eq!(t["unaligned_accesses_split"], 2);
    assert!(r["stats"]["core"]["reads"].as_u64().unwrap() > 0);
    // Told the addresses are physical, the same trace stops at its first record, naming it.
    let e = run(&["translation.addresses=physical"], &trace).unwrap_err().to_string();
    assert!(e.contains("beyond the") && e.contains("prog.lackey"), "{e}");
}

#[test]
fn the_seed_places_pages_and_the_same_seed_places_them_alike() {
    let dir = TmpDir::new("translate-seed");
    let trace = lackey_trace(&dir.0);
    let stats = |seed: &str, placement: &str| run(&[seed, placement], &trace).unwrap()["stats"].clone();
    let a = stats("run.seed=1", "translation.placement=random");
    assert_eq!(a, stats("run.seed=1", "translation.placement=random"));
    // Other frames, other banks and metadata blocks: the timing moves.
    assert_ne!(a["cycles"], stats("run.seed=2", "translation.placement=random")["cycles"]);
    assert_ne!(a["cycles"], stats("run.seed=1", "translation.placement=sequential")["cycles"]);
}

#[test]
fn a_binary_trace_marked_virtual_keeps_the_mark_through_convert() {
    let dir = TmpDir::new("translate-convert");
    let trace = lackey_trace(&dir.0);
    let bin = dir.0.join("prog.bin");
    secmem_trace::convert(&trace, None, &bin, secmem_trace::Format::Binary).unwrap();
    assert!(secmem_trace::trace_kind(&bin).unwrap().virtual_addresses);
    let from_lackey = run(&[], &trace).unwrap();
    let from_binary = run(&[], &bin).unwrap();
    assert_eq!(from_lackey["stats"], from_binary["stats"]);
    assert_eq!(from_lackey["meta"]["translation"], from_binary["meta"]["translation"]);
}

#[test]
fn a_program_larger_than_memory_is_an_error_naming_the_trace_and_both_sizes() {
    let dir = TmpDir::new("translate-oom");
    // 1 GiB of memory in 2 MB pages: 511 frames (the top one is kept for design records).
    let text: String = (0..512u64).map(|p| format!(" S {:x},8\n", 0x7f00_0000_0000u64 + (p << 21))).collect();
    let trace = dir.0.join("big.lackey");
    std::fs::write(&trace, text).unwrap();
    let e = run(&["memory.capacity_gib=1", "translation.page_size=2m"], &trace).unwrap_err().to_string();
    assert!(e.contains("big.lackey") && e.contains("record 511"), "{e}");
    assert!(e.contains(&format!("{} bytes", 511u64 << 21)) && e.contains("511 pages of 2097152 bytes"), "{e}");
}

#[test]
fn the_synthetic_workload_can_run_as_a_virtual_trace_with_the_same_counts_of_requests() {
    let physical = secmem_sim::run(&common::cfg("horus", &[]), &TraceInput::Workload).unwrap();
    let virt = secmem_sim::run(&common::cfg("horus", &["translation.addresses=virtual"]), &TraceInput::Workload).unwrap();
    assert_eq!(physical["config"]["translation"]["addresses"], "physical");
    assert_eq!(virt["meta"]["translation"]["pages_mapped"], 64, "256 KiB of footprint in 4 KB pages");
    for key in ["records", "reads", "writes", "instructions"] {
        assert_eq!(physical["stats"]["core"][key], virt["stats"]["core"][key], "{key}");
    }
}

#[test]
fn a_virtual_trace_gives_the_same_functional_run_on_one_host_thread_and_two() {
    let dir = TmpDir::new("translate-threads");
    let trace = lackey_trace(&dir.0);
    let one = run(&["run.functional=true", "run.host_threads=1"], &trace).unwrap();
    let two = run(&["run.functional=true", "run.host_threads=2"], &trace).unwrap();
    assert_eq!(one["stats"], two["stats"]);
    assert_eq!(one["meta"]["event_log_hash"], two["meta"]["event_log_hash"]);
    assert_eq!(one["meta"]["translation"], two["meta"]["translation"]);
}
