//! The memory device is chosen in config (`memory.device`), apart from the data capacity
//! (`memory.capacity_gib`), and reports statistics of its own.

use secmem_sim::{Config, TraceInput};
use serde_json::Value;

fn stats(device: &str) -> Value {
    let o: Vec<String> = [
        "workload.requests=20000",
        "workload.footprint_bytes=67108864",
        "l2.size_kib=256",
        "llc.size_kib=1024",
        "metadata_cache.counter.size_kib=16",
        "run.progress=false",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("memory.device={device}")])
    .collect();
    let cfg = Config::load(Some("horus"), None, &o).unwrap();
    secmem_sim::run(&cfg, &TraceInput::Workload).unwrap()["stats"].clone()
}

#[test]
fn the_simple_device_changes_the_timing_and_its_own_counters_not_the_controllers_counts() {
    let (pcm, simple) = (stats("pcm"), stats("simple"));
    // What the controller and the caches decided does not depend on device timing.
    assert_eq!(pcm["security"], simple["security"]);
    assert_eq!(pcm["caches"], simple["caches"]);
    assert_eq!(pcm["memory"]["reads"], simple["memory"]["reads"]);
    assert_eq!(pcm["memory"]["writes"], simple["memory"]["writes"]);
    assert_ne!(pcm["cycles"], simple["cycles"]);
    // Each device's own counters: PCM's queues and banks, the simple device's port.
    assert!(pcm["memory"]["wpq_read_hits"].is_u64() && pcm["memory"].get("port_wait_cycles").is_none());
    assert!(simple["memory"]["port_wait_cycles"].is_u64() && simple["memory"].get("wpq_read_hits").is_none());
    // No further port was attached: the report has no `ports` block.
    assert!(pcm.get("ports").is_none());
}

#[test]
fn an_unknown_device_or_an_empty_memory_is_refused_naming_the_field() {
    let e = Config::load(Some("horus"), None, &["memory.device=dram".into()]).unwrap_err();
    assert_eq!(e.field, "memory.device");
    assert!(e.message.contains("pcm") && e.message.contains("simple"), "{}", e.message);
    let e = Config::load(None, None, &["memory.capacity_gib=0".into()]).unwrap_err();
    assert_eq!(e.field, "memory.capacity_gib");
    let e = Config::load(None, None, &["simple.bandwidth_gb_per_s=-2".into()]).unwrap_err();
    assert_eq!(e.field, "simple.bandwidth_gb_per_s");
    // The capacity is no longer the PCM section's.
    let e = Config::load(None, None, &["pcm.capacity_gib=8".into()]).unwrap_err();
    assert_eq!(e.field, "pcm.capacity_gib");
}
