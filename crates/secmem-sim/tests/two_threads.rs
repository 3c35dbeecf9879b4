//! Does a functional run on two host threads (`run.host_threads = 2`: the timing half and the
//! functional half) give exactly what the same run on one thread gives — the statistics, the
//! event-log hash, the saved image and the errors?

use secmem_schemes::Canaries;
use secmem_sim::run::splits_functional_run;
use secmem_sim::{Config, TraceInput};
use serde_json::Value;

mod common;
use common::TmpDir;

/// A small functional config (see `common::cfg`).
fn cfg(extra: &[&str]) -> Config {
    let mut all = vec!["run.functional=true"];
    all.extend_from_slice(extra);
    common::cfg("horus", &all)
}

fn with_threads(c: &Config, n: u32) -> Config {
    let mut c = c.clone();
    c.run.host_threads = n;
    c
}

/// Runs `c` on one thread and on two; both must succeed with the same statistics, record
/// count and event-log hash.
fn assert_same_on_one_and_two_threads(c: &Config, what: &str) {
    assert_same_on_one_and_two_threads_over(c, &TraceInput::Workload, what);
}

/// [`assert_same_on_one_and_two_threads`] over the records of `input`; returns the one-thread
/// report.
fn assert_same_on_one_and_two_threads_over(c: &Config, input: &TraceInput, what: &str) -> Value {
    assert!(splits_functional_run(&with_threads(c, 2)), "{what}: the two-thread run would not split");
    let one = secmem_sim::run(&with_threads(c, 1), input).unwrap_or_else(|e| panic!("{what}, one thread: {e}"));
    let two = secmem_sim::run(&with_threads(c, 2), input).unwrap_or_else(|e| panic!("{what}, two threads: {e}"));
    assert_eq!(one["stats"], two["stats"], "{what}: the statistics differ");
    assert_eq!(one["meta"]["records"], two["meta"]["records"], "{what}: the record counts differ");
    let hash = |r: &Value| r["meta"]["event_log_hash"].as_str().map(str::to_string);
    assert!(hash(&one).is_some(), "{what}: no event-log hash");
    assert_eq!(hash(&one), hash(&two), "{what}: the event logs differ");
    one
}

#[test]
fn two_halves_report_what_one_thread_reports_under_every_update_and_persistence_scheme() {
    for (what, extra) in [
        ("lazy update", &[][..]),
        ("eager update", &["tree.update=eager"][..]),
        ("strict persistence", &["tree.update=eager", "security.metadata_persistence=strict"][..]),
        ("strict persistency (write-through)", &["hierarchy.write_through=true"][..]),
        ("random initial counters", &["security.counter_init=random"][..]),
        ("non-secure memory", &["security.enabled=false"][..]),
    ] {
        assert_same_on_one_and_two_threads(&cfg(extra), what);
    }
}

#[test]
fn two_halves_report_what_one_thread_reports_across_minor_counter_overflows() {
    // 3-bit minors over 16 KiB: most writes overflow and re-encrypt a page.
    let c = cfg(&["security.minor_counter_bits=3", "workload.footprint_bytes=16384", "workload.read_ratio=0.2", "hierarchy.write_through=true"]);
    let one = secmem_sim::run(&with_threads(&c, 1), &TraceInput::Workload).unwrap();
    assert!(one["stats"]["security"]["counter_overflows"].as_u64().unwrap() > 10, "{}", one["stats"]["security"]);
    assert_same_on_one_and_two_threads(&c, "overflowing minors");
}

#[test]
fn two_halves_report_what_one_thread_reports_at_memory_level_with_warm_up_and_a_record_limit() {
    assert_same_on_one_and_two_threads(&cfg(&["run.trace_level=memory"]), "memory level");
    assert_same_on_one_and_two_threads(&cfg(&["run.warmup_requests=2500"]), "warm-up");
    assert_same_on_one_and_two_threads(&cfg(&["run.max_requests=2500"]), "record limit");
    assert_same_on_one_and_two_threads(&cfg(&["workload.pattern=sequential", "workload.persist_writes=true"]), "persisted writes");
}

#[test]
fn two_halves_report_what_one_thread_reports_when_the_timing_half_runs_far_ahead() {
    // Many more records than the hand-over queue holds (64 batches of 1024 requests; each
    // record here makes about 1.4), and a count that is not a whole number of batches: the
    // timing half waits for the functional half many times, and the last, partial batch is
    // simulated too.
    assert_same_on_one_and_two_threads(&cfg(&["workload.requests=200001"]), "200,001 records");
}

#[test]
fn two_halves_report_what_one_thread_reports_on_a_trace_whose_stores_start_carrying_data() {
    // The timing half's hierarchy carries synthetic stores' bytes, then the records' own;
    // flushes and fences in between; with an inclusive LLC (a write-back takes a dirty upper
    // copy's bytes) and without (an older dirty copy may leave the LLC before the newer one).
    let dir = TmpDir::new("two-threads-data-later");
    let mut text = String::new();
    for i in 0..8000u64 {
        let addr = (i * 4160 + i * i * 64) % 262144 / 64 * 64;
        text += &match i % 11 {
            0..=3 => format!("R {addr:#x} 64 1\n"),
            4 => format!("FL {addr:#x} 64 0\n"),
            5 => "F 0x0 0 3\n".to_string(),
            _ if i < 4000 => format!("W {addr:#x} 64 2\n"),
            _ => format!("W {addr:#x} 64 2 {}\n", format!("{:02x}", i as u8).repeat(64)),
        };
    }
    let input = text_trace_in(&dir, &text);
    for extra in [&[][..], &["hierarchy.inclusive_llc=false"][..]] {
        let one = assert_same_on_one_and_two_threads_over(&cfg(extra), &input, &format!("stores that start carrying data, {extra:?}"));
        assert!(one["stats"]["memory"]["writes"]["data"].as_u64().unwrap() > 1000, "{}", one["stats"]["memory"]);
    }
}

#[test]
fn a_saved_image_is_the_same_byte_for_byte_on_two_threads() {
    let dir = TmpDir::new("two-threads-image");
    let c = cfg(&[]);
    let (a, b) = (dir.0.join("one.img"), dir.0.join("two.img"));
    let one = secmem_sim::run::run_saving(&with_threads(&c, 1), &TraceInput::Workload, Some(&a)).unwrap();
    let two = secmem_sim::run::run_saving(&with_threads(&c, 2), &TraceInput::Workload, Some(&b)).unwrap();
    assert_eq!(one["stats"], two["stats"]);
    let (a, b) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(a.len() > 4096, "the image holds the run's lines ({} bytes)", a.len());
    assert!(a == b, "the two images differ");
}

#[test]
fn a_planted_bug_fails_the_two_thread_run_with_the_one_thread_runs_error() {
    // Parents never learn their children's new hashes: the first block fetched back fails
    // its check. The canary is set on this thread; the functional half must inherit it.
    secmem_sim::engine::set_test_canaries(Canaries { skip_tree_update: true, ..Default::default() });
    let c = cfg(&[]);
    let one = secmem_sim::run(&with_threads(&c, 1), &TraceInput::Workload).unwrap_err().to_string();
    let two = secmem_sim::run(&with_threads(&c, 2), &TraceInput::Workload).unwrap_err().to_string();
    secmem_sim::engine::set_test_canaries(Canaries::default());
    assert!(one.contains("integrity failure"), "{one}");
    assert_eq!(one, two);
}

/// A text trace file in `dir` holding the records `body` (text form, one a line).
fn text_trace_in(dir: &TmpDir, body: &str) -> TraceInput {
    let path = dir.0.join("t.txt");
    std::fs::write(&path, format!("# secmem-trace v1\n{body}")).unwrap();
    TraceInput::File(path)
}

/// A text trace in `dir`: 3,000 good writes over the footprint, then `tail`.
fn trace_of_3000_writes_then(dir: &TmpDir, tail: &str) -> TraceInput {
    let mut text = String::new();
    for i in 0..3000u64 {
        text += &format!("W {:#x} 64 2\n", (i * 4160) % 262144 / 64 * 64);
    }
    text += tail;
    text_trace_in(dir, &text)
}

#[test]
fn a_bad_record_stops_both_halves_with_the_one_thread_runs_error() {
    let dir = TmpDir::new("two-threads-bad-record");
    // Misaligned, then a good record that is never reached.
    let input = trace_of_3000_writes_then(&dir, "R 0x1001 64 0\nR 0x0 64 0\n");
    let c = cfg(&[]);
    let one = secmem_sim::run(&with_threads(&c, 1), &input).unwrap_err().to_string();
    let two = secmem_sim::run(&with_threads(&c, 2), &input).unwrap_err().to_string();
    assert!(one.contains("record 3000"), "{one}");
    assert_eq!(one, two);
}

#[test]
fn only_functional_runs_of_designs_with_the_baselines_data_path_split() {
    let c = cfg(&[]);
    assert!(splits_functional_run(&c), "host_threads defaults to 2");
    assert!(!splits_functional_run(&with_threads(&c, 1)));
    let mut counting = c.clone();
    counting.run.functional = false;
    assert!(!splits_functional_run(&counting));
    for d in secmem_schemes::designs::REGISTRY {
        let mut design = c.clone();
        design.run.design = d.name.into();
        assert_eq!(splits_functional_run(&design), d.baseline_data_path, "{}", d.name);
    }
}

#[test]
fn two_halves_report_what_one_thread_reports_for_every_design_with_the_baselines_data_path() {
    for d in secmem_schemes::designs::REGISTRY.iter().filter(|d| d.baseline_data_path) {
        let set = format!("run.design=\"{}\"", d.name);
        assert_same_on_one_and_two_threads(&cfg(&[set.as_str()]), d.name);
    }
}

#[test]
fn host_threads_other_than_one_or_two_are_rejected_naming_the_field() {
    for n in ["0", "3"] {
        let e = Config::load(Some("horus"), None, &[format!("run.host_threads={n}")]).unwrap_err();
        assert_eq!(e.field, "run.host_threads", "{e}");
        assert!(e.to_string().contains("must be 1 or 2"), "{e}");
    }
}

#[test]
fn a_malformed_trace_line_stops_both_halves_with_the_one_thread_runs_error() {
    let dir = TmpDir::new("two-threads-bad-line");
    let input = trace_of_3000_writes_then(&dir, "Q 0x40 64 0\n"); // no such operation
    let c = cfg(&[]);
    let one = secmem_sim::run(&with_threads(&c, 1), &input).unwrap_err().to_string();
    let two = secmem_sim::run(&with_threads(&c, 2), &input).unwrap_err().to_string();
    assert!(one.contains(":3002: unknown operation"), "{one}");
    assert_eq!(one, two);
}
