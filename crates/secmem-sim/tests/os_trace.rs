//! OS-level traces (format v2) drive the OS model: a CoW workload written as a trace and
//! replayed with `run` gives the counts of the workload run directly; bad records are named.

use secmem_sim::config::Config;
use secmem_sim::cow_workloads::{self, CowSpec, CowWorkload};
use secmem_sim::os::PageSize;
use secmem_sim::run::{run, TraceInput};
use secmem_trace::{Format, TraceKind};
use serde_json::Value;
use std::path::PathBuf;

/// A small system: 1 GiB, small caches so lines and metadata get evicted.
fn cfg(design: &str, functional: bool, extra: &[&str]) -> Config {
    let mut o: Vec<String> = vec![
        format!("run.design=\"{design}\""),
        format!("run.functional={functional}"),
        "memory.capacity_gib=1".into(),
        "l1.size_kib=4".into(),
        "l1.ways=2".into(),
        "l2.size_kib=8".into(),
        "l2.ways=2".into(),
        "llc.size_kib=16".into(),
        "llc.ways=4".into(),
        "run.progress=false".into(),
    ];
    o.extend(extra.iter().map(|s| s.to_string()));
    Config::load(Some("lelantus"), None, &o).unwrap()
}

struct TempPath(PathBuf);
impl TempPath {
    fn new(ext: &str) -> TempPath {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        TempPath(std::env::temp_dir().join(format!("secmem-os-trace-{}-{n}.{ext}", std::process::id())))
    }
    fn with(ext: &str, text: &str) -> TempPath {
        let p = TempPath::new(ext);
        std::fs::write(&p.0, text).unwrap();
        p
    }
}
impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn spec(workload: CowWorkload, page_size: PageSize, footprint_bytes: u64, lines_per_page: u64) -> CowSpec {
    CowSpec { workload, page_size, footprint_bytes, lines_per_page, ops: 3000, seed: 7 }
}

fn sum(v: &Value) -> u64 { v["total"].as_u64().unwrap() }

/// Writes `s` as a trace, runs it, and checks the report against the direct run.
fn assert_trace_matches_direct(c: &Config, s: &CowSpec, format: Format, with_data: bool) {
    let direct = cow_workloads::run(c, s).unwrap();
    let p = TempPath::new(if format == Format::Binary { "bin" } else { "txt" });
    let n = cow_workloads::write_trace(s, &p.0, format, with_data).unwrap();
    assert_eq!(secmem_trace::trace_kind(&p.0).unwrap(), TraceKind::V2_OS);
    let rep = run(c, &TraceInput::File(p.0.clone())).unwrap();
    let what = format!("{} {:?} {:?} {format}", c.run.design, s.workload, s.page_size);
    assert_eq!(rep["meta"]["records"].as_u64().unwrap(), n, "{what}");
    assert_eq!(rep["stats"], direct["stats"], "{what}: the whole stats block of the measured phase");
    assert_eq!(rep["stats"]["cycles"], direct["cycles"], "{what}");
    assert_eq!(sum(&rep["stats"]["memory"]["writes"]), direct["memory_writes"].as_u64().unwrap(), "{what}");
    assert_eq!(sum(&rep["stats"]["memory"]["reads"]), direct["memory_reads"].as_u64().unwrap(), "{what}");
    for k in ["cow_faults", "zero_faults", "page_commands", "kernel_lines", "materialize_commands", "reuse_faults"] {
        assert_eq!(rep["os"][k], direct["os"][k], "{what}: os.{k}");
    }
    assert_eq!(rep["os"]["write_amplification"], direct["write_amplification"], "{what}");
    assert_eq!(rep["os"]["logical_line_writes"], direct["logical_line_writes"], "{what}");
}

#[test]
fn every_cow_workload_written_as_a_trace_replays_with_the_direct_runs_counts_on_every_scheme() {
    let cases = [
        spec(CowWorkload::Forkbench, PageSize::Small, 256 << 10, 8),
        spec(CowWorkload::Redis, PageSize::Small, 256 << 10, 1),
        spec(CowWorkload::NonCopy, PageSize::Small, 128 << 10, 8),
        spec(CowWorkload::WriteAmp, PageSize::Huge, 2 << 20, 1),
        spec(CowWorkload::Churn, PageSize::Small, 48 << 10, 1),
    ];
    for (i, design) in ["baseline", "lelantus", "lelantus-cow", "silent-shredder"].into_iter().enumerate() {
        let c = cfg(design, false, &[]);
        for (j, s) in cases.iter().enumerate() {
            let format = if (i + j) % 2 == 0 { Format::Binary } else { Format::Text };
            assert_trace_matches_direct(&c, s, format, false);
        }
    }
}

#[test]
fn a_functional_trace_with_data_replays_like_the_direct_run() {
    let s = spec(CowWorkload::Forkbench, PageSize::Small, 64 << 10, 16);
    for design in ["lelantus", "baseline"] {
        assert_trace_matches_direct(&cfg(design, true, &[]), &s, Format::Binary, true);
    }
}

fn run_text(design: &str, body: &str) -> Result<Value, String> {
    let p = TempPath::with("txt", &format!("# secmem-trace v2 os\n{body}"));
    run(&cfg(design, false, &[]), &TraceInput::File(p.0.clone())).map_err(|e| e.to_string().replace(&p.0.display().to_string(), "T"))
}

#[test]
fn bad_os_records_are_errors_naming_the_record_index() {
    let a = "ALLOC 0 0x10000000 8192 4k\n";
    let cases = [
        (format!("{a}LD 0 0x20000000 64 0\n"), "T: record 1: LD 0 0x20000000 64 0: pid 0: virtual address 0x20000000 is not mapped (no ALLOC covers it)"),
        (format!("{a}ST 3 0x10000000 64 0\n"), "T: record 1: ST 3 0x10000000 64 0: unknown pid 3 (live: 0; a process exists from the FORK that names it, pid 0 from the start)"),
        (format!("{a}FORK 0 5\nEXIT 5\nLD 5 0x10000000 64 0\n"), "T: record 3: LD 5 0x10000000 64 0: unknown pid 5 (live: 0;"),
        (format!("{a}FORK 0 0\n"), "T: record 1: FORK 0 0: child pid 0 is already live"),
        (format!("{a}ALLOC 0 0x10001000 4096 4k\n"), "T: record 1: ALLOC 0 0x10001000 4096 4k: pid 0: 0x10001000 is already mapped"),
        (format!("{a}ALLOC 0 0x10000000 4096 2m\n"), "T: record 1: ALLOC 0 0x10000000 4096 2m: address 0x10000000 and length 4096 must be non-zero multiples of the 2m page"),
        ("ALLOC 0 0x10000000 2097152 2m\nFREE 0 0x10000000 4096\n".to_string(), "T: record 1: FREE 0 0x10000000 4096: pid 0: the range would split the 2 MB page at 0x10000000"),
        (format!("{a}FREE 0 0x10000000 12288\n"), "T: record 1: FREE 0 0x10000000 12288: pid 0: virtual address 0x10002000 is not mapped"),
        (format!("{a}ROI\nROI\n"), "T: record 2: ROI: a second ROI record (the region of interest began at record 1)"),
        (format!("{a}ST 0 0x10000030 32 0\n"), "T: record 1: ST 0 0x10000030 32 0: access of 32 bytes at 0x10000030 crosses a 64-byte line"),
        (format!("{a}ST 0 0x10000000 0 0\n"), "T: record 1: ST 0 0x10000000 0 0: a store of 0 bytes touches nothing"),
        (format!("{a}LD 0 0x10000040 0 0\n"), "T: record 1: LD 0 0x10000040 0 0: a load of 0 bytes touches nothing"),
        (format!("{a}EXIT 0\nEXIT 0\n"), "T: record 2: EXIT 0: unknown pid 0 (live: none;"),
        (format!("{a}R 0x100000000000 64 0\n"), "T: record 1: R 0x100000000000 64 0: address 0x100000000000 + 64 bytes is beyond"),
        (format!("{a}FORK 0 1\nBOGUS\n"), "T:4: unknown operation 'BOGUS'"),
        ("ALLOC 0 0x200000 4194304 2m\nFREE 0 0x200000 2101248\n".to_string(), "T: record 1: FREE 0 0x200000 2101248: pid 0: the range would split the 2 MB page at 0x400000"),
        ("ALLOC 0 0x200000 2097152 2m\nFREE 0 0x200000 2101248\n".to_string(), "T: record 1: FREE 0 0x200000 2101248: pid 0: virtual address 0x400000 is not mapped"),
        ("ALLOC 0 0x200000 4194304 2m\nALLOC 0 0x100000 2097152 4k\n".to_string(), "T: record 1: ALLOC 0 0x100000 2097152 4k: pid 0: 0x200000 is already mapped (a 2m page at 0x200000)"),
        (format!("{a}FREE 0 0x10001000 4096\nFREE 0 0x10000000 8192\n"), "T: record 2: FREE 0 0x10000000 8192: pid 0: virtual address 0x10001000 is not mapped"),
        ("ALLOC 0 0xffffffffffff0000 131072 4k\n".to_string(), "T: record 0: ALLOC 0 0xffffffffffff0000 131072 4k: range 0xffffffffffff0000 + 131072 wraps around the address space"),
    ];
    for (body, want) in cases {
        let e = run_text("lelantus", &body).map(|_| ()).expect_err(&body);
        assert!(e.starts_with(want), "{body}\n got: {e}\nwant: {want}");
    }
}

/// Page tables fill lazily, as Linux': a mapping far larger than memory, forked, costs only
/// the pages written. (They were built eagerly once, and then a 6.8e18-byte ALLOC ran for ages
/// and a 16 GiB one took 300 MB of host memory per process.)
#[test]
fn a_mapping_larger_than_memory_costs_only_the_pages_written() {
    let body = "\
ALLOC 0 0x10000000000 6842938158812823552 4k
ST 0 0x10000000040 64 0
ST 0 0x5f0000000000 64 0
FORK 0 1
FORK 0 2
ST 1 0x5f0000000000 64 0
LD 2 0x6000000000000 64 0
FREE 2 0x10000000000 6842938158812823552
EXIT 1
";
    let r = run_text("lelantus", body).unwrap();
    let os = &r["os"];
    assert_eq!((os["zero_faults"].as_u64(), os["cow_faults"].as_u64()), (Some(2), Some(1)), "{os}");
    // Pid 2's FREE drops its share of pid 0's two pages (both still mapped by pid 0); pid 1's
    // EXIT frees its private copy of the far page and drops its share of the near one.
    assert_eq!(r["stats"]["design"]["page_frees"].as_f64(), Some(1.0), "{}", r["stats"]["design"]);
}

#[test]
fn freeing_the_middle_of_a_mapping_leaves_both_ends_mapped() {
    let body = "\
ALLOC 0 0x10000000 16384 4k
ST 0 0x10001000 64 0
FREE 0 0x10001000 8192
LD 0 0x10000000 64 0
LD 0 0x10003000 64 0
ALLOC 0 0x10001000 4096 4k
ST 0 0x10001000 64 0
";
    let r = run_text("lelantus", body).unwrap();
    assert_eq!(r["os"]["zero_faults"].as_u64(), Some(2), "{}", r["os"]);
    assert_eq!(r["stats"]["design"]["page_frees"].as_f64(), Some(1.0), "{}", r["stats"]["design"]);
    let e = run_text("lelantus", "ALLOC 0 0x10000000 16384 4k\nFREE 0 0x10001000 8192\nLD 0 0x10002000 64 0\n").unwrap_err();
    assert!(e.contains("record 2") && e.contains("virtual address 0x10002000 is not mapped"), "{e}");
}

#[test]
fn a_hand_written_trace_with_fork_cow_free_and_exit_runs_and_counts_faults() {
    let body = "\
ALLOC 0 0x10000000 8192 4k
ST 0 0x10000000 64 0
ST 0 0x10001000 64 0
WBNOINVD
FORK 0 42
ROI
LD 42 0x10000000 64 5
ST 42 0x10000040 8 5
ST 0 0x10001000 64 5
F 0x0 0 0
FREE 42 0x10000000 8192
EXIT 42
ST 0 0x10000000 64 0
";
    for design in ["baseline", "lelantus", "lelantus-cow", "silent-shredder"] {
        let rep = run_text(design, body).unwrap();
        let os = &rep["os"];
        assert_eq!(os["roi_record"], 5, "{design}");
        // The child's store copies page 0 (CoW fault); the parent's store to page 1 copies too
        // (map count 2 at that time); the parent's last store reuses page 0 in place.
        assert_eq!(os["cow_faults"], 2, "{design}: {os}");
        assert_eq!(os["zero_faults"], 0, "{design}: before the ROI");
        assert_eq!(os["reuse_faults"], 1, "{design}: {os}");
        assert_eq!(os["logical_line_writes"], 3, "{design}");
        assert_eq!(rep["meta"]["records"], 13);
        assert_eq!(rep["stats"]["core"]["fences"], 1);
    }
}

#[test]
fn warmup_requests_and_an_roi_record_conflict_and_memory_level_is_refused() {
    let p = TempPath::with("txt", "# secmem-trace v2 os\nALLOC 0 0x10000000 4096 4k\nROI\n");
    let e = run(&cfg("lelantus", false, &["run.warmup_requests=1", "run.max_requests=5"]), &TraceInput::File(p.0.clone())).unwrap_err().to_string();
    assert!(e.contains("record 1: ROI: the trace marks its region of interest and run.warmup_requests = 1"), "{e}");
    let e = run(&cfg("lelantus", false, &["run.trace_level=\"memory\""]), &TraceInput::File(p.0.clone())).unwrap_err().to_string();
    assert!(e.contains("run.trace_level"), "{e}");
}

#[test]
fn a_warmup_or_roi_that_leaves_nothing_to_measure_is_an_error_as_for_physical_traces() {
    // Both used to exit 0: a warm-up past the end reported the whole trace, one exactly as
    // long (or an ROI record at the very end) all-zero statistics.
    let body = "ALLOC 0 0x10000 8192 4k\nST 0 0x10000 64 0\nLD 0 0x10000 64 0\n";
    let p = TempPath::with("txt", &format!("# secmem-trace v2 os\n{body}"));
    for warm in [3, 50] {
        let c = cfg("lelantus", false, &[&format!("run.warmup_requests={warm}")]);
        let e = run(&c, &TraceInput::File(p.0.clone())).unwrap_err().to_string();
        assert!(e.contains("run.warmup_requests") && e.contains("covers the whole trace (3 records)"), "{warm}: {e}");
    }
    assert!(run(&cfg("lelantus", false, &["run.warmup_requests=2"]), &TraceInput::File(p.0.clone())).is_ok());
    let e = run_text("lelantus", &format!("{body}ROI\n")).unwrap_err();
    assert!(e.contains("record 3: the ROI record ends the trace"), "{e}");
}

#[test]
fn physical_v2_traces_still_run_on_the_engine() {
    let p = TempPath::with("txt", "# secmem-trace v2\nR 0x1000 64 0\nW 0x1040 64 0\n");
    let rep = run(&cfg("baseline", false, &[]), &TraceInput::File(p.0.clone())).unwrap();
    assert_eq!(rep["meta"]["records"], 2);
    assert!(rep.get("os").is_none());
}
