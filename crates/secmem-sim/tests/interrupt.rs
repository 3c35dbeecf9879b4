//! Does a stop asked for from outside (Ctrl-C: `secmem_sim::interrupt`) end each kind of long
//! command early, and does what it leaves say so? The flag is process-wide, so this binary
//! holds one test, which runs the cases in turn.

use secmem_sim::{interrupt, Config, SimError, TraceInput};

fn load(preset: &str, o: &[&str]) -> Config {
    let mut o: Vec<String> = o.iter().map(|s| s.to_string()).collect();
    o.push("run.progress=false".into());
    Config::load(Some(preset), None, &o).unwrap()
}

#[test]
fn an_interrupt_stops_runs_campaigns_and_io_at_their_next_check() {
    interrupt::request();

    // A plain run reports the records done before its first check, marked partial.
    let cfg = load("default", &["workload.requests=1000000"]);
    let rep = secmem_sim::run(&cfg, &TraceInput::Workload).unwrap();
    assert_eq!(rep["meta"]["interrupted"], true);
    assert_eq!(rep["meta"]["records"], interrupt::CHECK_EVERY);

    // The same on two host threads (a functional baseline run).
    let cfg = load("default", &["workload.requests=1000000", "run.functional=true", "run.host_threads=2"]);
    let rep = secmem_sim::run(&cfg, &TraceInput::Workload).unwrap();
    assert_eq!(rep["meta"]["interrupted"], true);
    assert_eq!(rep["meta"]["records"], interrupt::CHECK_EVERY);

    // Stopped inside the warm-up there is nothing to report: an error, not an empty report.
    let cfg = load("default", &["workload.requests=1000000", "run.warmup_requests=100000"]);
    assert!(matches!(secmem_sim::run(&cfg, &TraceInput::Workload), Err(SimError::Interrupted)));

    // An I/O run and a crash campaign stop with an error.
    let cfg = load("dshield", &["io.ios=1000000"]);
    assert!(matches!(secmem_sim::io::run_io(&cfg), Err(SimError::Interrupted)));
    let cfg = load("default", &["workload.requests=20000", "run.functional=true"]);
    assert!(matches!(secmem_sim::harness::crash_campaign(&cfg, &TraceInput::Workload, 4, 1), Err(SimError::Interrupted)));

    // Withdrawn, a run ends whole and unmarked.
    interrupt::clear();
    let cfg = load("default", &["workload.requests=10000"]);
    let rep = secmem_sim::run(&cfg, &TraceInput::Workload).unwrap();
    assert!(rep["meta"].get("interrupted").is_none());
    assert_eq!(rep["meta"]["records"], 10000);
}
