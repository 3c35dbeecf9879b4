//! Golden tests: small fixed runs whose every count is pinned in `tests/golden/*.json`.
//! A change that alters any simulated figure fails here and must be explained (and the files
//! re-blessed with `SECMEM_BLESS=1 cargo test -p secmem-sim --test golden`).
//! Speed-ups must leave these files unchanged.

use secmem_sim::{Config, TraceInput};
use serde_json::Value;
use std::path::PathBuf;

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.json"))
}

fn check(name: &str, preset: &str, overrides: &[&str]) {
    let mut o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    o.push("run.progress=false".into());
    let cfg = Config::load(Some(preset), None, &o).unwrap();
    let report = secmem_sim::run(&cfg, &TraceInput::Workload).unwrap();
    let stats = report["stats"].clone();
    let path = golden_path(name);
    if std::env::var_os("SECMEM_BLESS").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&stats).unwrap() + "\n").unwrap();
        return;
    }
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e} (bless with SECMEM_BLESS=1)", path.display())
    }))
    .unwrap();
    let diffs = diff("stats", &expected, &stats);
    assert!(diffs.is_empty(), "{name}: simulated figures changed:\n{}", diffs.join("\n"));
}

fn diff(path: &str, a: &Value, b: &Value) -> Vec<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .flat_map(|k| diff(&format!("{path}.{k}"), x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null)))
                .collect()
        }
        (Value::Number(x), Value::Number(y)) if x.as_f64().zip(y.as_f64()).is_some_and(|(p, q)| (p - q).abs() <= 1e-9 * p.abs().max(1.0)) => vec![],
        _ if a == b => vec![],
        _ => vec![format!("  {path}: golden {a}, now {b}")],
    }
}

// Small caches so that 30 000 requests exercise evictions at every level.
const SMALL: &[&str] = &[
    "workload.requests=30000",
    "workload.footprint_bytes=67108864",
    "l2.size_kib=256",
    "llc.size_kib=1024",
    "metadata_cache.counter.size_kib=16",
    "metadata_cache.mac.size_kib=16",
    "metadata_cache.tree.size_kib=16",
];

fn with(extra: &[&'static str]) -> Vec<&'static str> { SMALL.iter().chain(extra).copied().collect() }

#[test]
fn golden_secure_lazy_random() { check("secure_lazy_random", "horus", &with(&["workload.pattern=random"])); }

#[test]
fn golden_secure_eager_zipf() { check("secure_eager_zipf", "horus", &with(&["workload.pattern=zipf", "tree.update=eager"])); }

#[test]
fn golden_secure_strict_sequential() {
    check("secure_strict_sequential", "bmf", &with(&["workload.pattern=sequential", "tree.update=eager", "security.metadata_persistence=strict"]));
}

#[test]
fn golden_nonsecure_stride() { check("nonsecure_stride", "lelantus", &with(&["workload.pattern=stride", "security.enabled=false"])); }

#[test]
fn golden_write_through_random() {
    check("write_through_random", "bmf", &with(&["workload.pattern=random", "hierarchy.write_through=true", "workload.requests=5000"]));
}

#[test]
fn golden_overflow_hot_lines() {
    // A tiny footprint written over and over: minor counters overflow and pages re-encrypt.
    check("overflow_hot_lines", "esd", &[
        "workload.requests=200000", "workload.footprint_bytes=8192", "workload.read_ratio=0.0",
        "l1.size_kib=1", "l1.ways=1", "l2.size_kib=1", "l2.ways=1", "llc.size_kib=1", "llc.ways=1",
        "hierarchy.write_through=true",
    ]);
}

#[test]
fn same_config_same_stats() {
    let cfg = Config::load(Some("horus"), None, &with(&["run.progress=false"]).iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    let a = secmem_sim::run(&cfg, &TraceInput::Workload).unwrap();
    let b = secmem_sim::run(&cfg, &TraceInput::Workload).unwrap();
    assert_eq!(a["stats"], b["stats"]);
}

/// Functional mode (real crypto over real bytes) must decide every count exactly as counting
/// mode does: only `meta` may differ.
#[test]
fn functional_mode_gives_the_same_counts_as_counting_mode() {
    for extra in [
        &["workload.pattern=random"][..],
        &["workload.pattern=zipf", "tree.update=eager"][..],
        &["workload.pattern=sequential", "tree.update=eager", "security.metadata_persistence=strict"][..],
        &["workload.pattern=random", "security.enabled=false"][..],
    ] {
        let base: Vec<String> = with(extra).iter().map(|s| s.to_string()).chain(["run.progress=false".to_string(), "workload.requests=8000".to_string()]).collect();
        let counting = Config::load(Some("horus"), None, &base).unwrap();
        let mut f = base.clone();
        f.push("run.functional=true".into());
        f.push("run.check_pad_reuse=true".into());
        let functional = Config::load(Some("horus"), None, &f).unwrap();
        let a = secmem_sim::run(&counting, &TraceInput::Workload).unwrap();
        let b = secmem_sim::run(&functional, &TraceInput::Workload).unwrap();
        assert_eq!(a["stats"], b["stats"], "{extra:?}");
        assert!(b["meta"]["event_log_hash"].is_string());
    }
}

/// The hot-line run overflows minors and re-encrypts pages: in functional mode every pad is
/// recorded, and none may repeat.
#[test]
fn overflows_in_functional_mode_never_reuse_a_pad() {
    let o: Vec<String> = [
        "workload.requests=40000", "workload.footprint_bytes=8192", "workload.read_ratio=0.3",
        "l1.size_kib=1", "l1.ways=1", "l2.size_kib=1", "l2.ways=1", "llc.size_kib=1", "llc.ways=1",
        "hierarchy.write_through=true", "run.functional=true", "run.check_pad_reuse=true", "run.progress=false",
    ].iter().map(|s| s.to_string()).collect();
    let cfg = Config::load(Some("esd"), None, &o).unwrap();
    let r = secmem_sim::run(&cfg, &TraceInput::Workload).unwrap();
    assert!(r["stats"]["security"]["counter_overflows"].as_u64().unwrap() > 0);
}

/// Under `security.counter_init = "random"` the counters start at seeded values: counting and
/// functional mode must still agree on every count (both derive the same initial counters from
/// `run.seed`), including the overflows that random minors bring early.
#[test]
fn functional_mode_gives_the_same_counts_as_counting_mode_under_random_counter_init() {
    let hot = [
        "workload.requests=20000", "workload.footprint_bytes=8192", "workload.read_ratio=0.3",
        "l1.size_kib=1", "l1.ways=1", "l2.size_kib=1", "l2.ways=1", "llc.size_kib=1", "llc.ways=1",
        "hierarchy.write_through=true",
    ];
    let cases: [(&str, Vec<&str>); 3] = [
        ("horus", with(&["workload.pattern=random", "workload.requests=8000"])),
        ("bmf", with(&["workload.pattern=sequential", "tree.update=eager", "security.metadata_persistence=strict", "workload.requests=8000"])),
        ("esd", hot.to_vec()),
    ];
    for (preset, extra) in cases {
        let base: Vec<String> = extra.iter().map(|s| s.to_string()).chain(["run.progress=false".into(), "security.counter_init=random".into()]).collect();
        let counting = Config::load(Some(preset), None, &base).unwrap();
        let mut f = base.clone();
        f.push("run.functional=true".into());
        f.push("run.check_pad_reuse=true".into());
        let functional = Config::load(Some(preset), None, &f).unwrap();
        let a = secmem_sim::run(&counting, &TraceInput::Workload).unwrap();
        let b = secmem_sim::run(&functional, &TraceInput::Workload).unwrap();
        assert_eq!(a["stats"], b["stats"], "{preset} {extra:?}");
        if preset == "esd" {
            // Random minors overflow sooner than zero ones on the same trace.
            let zero: Vec<String> = base.iter().filter(|s| !s.starts_with("security.counter_init")).cloned().collect();
            let z = secmem_sim::run(&Config::load(Some(preset), None, &zero).unwrap(), &TraceInput::Workload).unwrap();
            let ovf = |r: &Value| r["stats"]["security"]["counter_overflows"].as_u64().unwrap();
            assert!(ovf(&a) > ovf(&z), "random {} vs zero {}", ovf(&a), ovf(&z));
        }
    }
}

/// The same seed gives the same initial counters, so the same figures; another seed other
/// initial counters, so (on a run that overflows) other figures.
#[test]
fn under_random_counter_init_the_same_seed_gives_the_same_stats_and_another_seed_others() {
    let o = |seed: u64| -> Vec<String> {
        ["workload.requests=20000", "workload.footprint_bytes=8192", "workload.read_ratio=0.3", "l1.size_kib=1", "l1.ways=1",
         "l2.size_kib=1", "l2.ways=1", "llc.size_kib=1", "llc.ways=1", "hierarchy.write_through=true", "run.progress=false",
         "security.counter_init=random"]
            .iter().map(|s| s.to_string()).chain([format!("run.seed={seed}")]).collect()
    };
    let run = |seed| secmem_sim::run(&Config::load(Some("esd"), None, &o(seed)).unwrap(), &TraceInput::Workload).unwrap()["stats"].clone();
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn a_region_after_a_warm_up_never_runs_faster_than_its_instructions_allow() {
    // The region's clock used to start after the warm-up's misses still in flight, hiding
    // region work that overlapped them: 2,234 cycles for 4,000 instructions at IPC 1 here, and
    // more stall cycles than cycles elsewhere.
    for (pattern, warm) in [("stride", 1000), ("random", 1000), ("sequential", 500), ("zipf", 1500)] {
        let o: Vec<String> = [
            "run.progress=false".to_string(),
            "workload.requests=2000".into(),
            format!("workload.pattern=\"{pattern}\""),
            "workload.footprint_bytes=1048576".into(),
            "workload.seed=3".into(),
            "workload.inst_gap=3".into(),
            format!("run.warmup_requests={warm}"),
        ]
        .to_vec();
        let cfg = Config::load(Some("horus"), None, &o).unwrap();
        let s = secmem_sim::run(&cfg, &TraceInput::Workload).unwrap()["stats"].clone();
        let (cycles, instructions) = (s["cycles"].as_f64().unwrap(), s["instructions"].as_f64().unwrap());
        assert!(cycles >= (instructions / cfg.core.ipc).floor(), "{pattern}: {cycles} cycles for {instructions} instructions");
        assert!(s["core"]["mlp_stall_cycles"].as_f64().unwrap() <= cycles, "{pattern}: {s}");
    }
}
