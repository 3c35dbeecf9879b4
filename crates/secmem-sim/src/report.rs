//! The report: resolved config + metadata + stats, as one JSON object. Stats are nested plain
//! objects of numbers (no units in values, units in names), flattened by the Python side to one
//! DataFrame row per run.

use crate::config::Config;
use crate::engine::Snapshot;
use secmem_core::cache::CacheStats;
use secmem_core::Cycle;
use secmem_media::TrafficClass;
use serde::Serialize;
use serde_json::{json, Map, Value};

/// Facts about the run itself.
#[derive(Clone, Debug, Serialize)]
pub struct Meta {
    pub version: &'static str,
    pub git_commit: &'static str,
    pub seed: u64,
    /// Trace file path, or `generated:<pattern>` for the built-in workload.
    pub trace: String,
    pub design: String,
    pub functional: bool,
    pub records: u64,
    pub warmup_records: u64,
    pub wall_time_s: f64,
    /// Trace records simulated per wall-clock second.
    pub requests_per_s: f64,
    /// The device's regions under this design (`DeviceLayout::to_json`): data, counters,
    /// MACs, tree and the design's own, each `{base, size_bytes}`, and `device_bytes`.
    pub layout: Value,
}

pub fn meta(cfg: &Config, trace: String, functional: bool, records: u64, wall_time_s: f64) -> Meta {
    Meta {
        version: env!("CARGO_PKG_VERSION"),
        git_commit: env!("SECMEM_GIT_COMMIT"),
        seed: cfg.run.seed,
        trace,
        design: cfg.run.design.clone(),
        functional,
        records,
        warmup_records: cfg.run.warmup_requests.min(records),
        wall_time_s,
        requests_per_s: if wall_time_s > 0.0 { records as f64 / wall_time_s } else { 0.0 },
        layout: crate::engine::device_layout(cfg).map_or(Value::Null, |l| l.to_json()),
    }
}

fn cache(c: &CacheStats) -> Value {
    json!({
        "hits": c.hits, "misses": c.misses, "hit_rate": c.hit_rate(),
        "evictions": c.evictions, "dirty_evictions": c.dirty_evictions,
    })
}

fn by_class(counts: &[u64; 6]) -> Value {
    let mut m = Map::new();
    m.insert("total".into(), json!(counts.iter().sum::<u64>()));
    for c in TrafficClass::ALL {
        m.insert(c.as_str().into(), json!(counts[c as usize]));
    }
    Value::Object(m)
}

/// The `stats.memory` block: requests by traffic class, then the device's own counters (PCM:
/// its write queue, read queue, bank conflicts and array operations).
fn memory(m: &secmem_media::MediaStats) -> Value {
    let mut out = Map::new();
    out.insert("reads".into(), by_class(&m.reads_by_class));
    out.insert("writes".into(), by_class(&m.writes_by_class));
    for &(name, v) in &m.device {
        out.insert(name.into(), json!(v));
    }
    Value::Object(out)
}

/// The `stats` block for a region of interest.
pub fn stats(cfg: &Config, roi: &Snapshot, design_extra: &[(&'static str, f64)]) -> Value {
    let freq = cfg.core.freq_mhz;
    let cycles = roi.cycle.0;
    let mut mac = serde_json::to_value(roi.mc.mac_ops).unwrap();
    mac["total"] = json!(roi.mc.mac_ops.total());
    let mut aes = serde_json::to_value(roi.mc.aes_ops).unwrap();
    aes["total"] = json!(roi.mc.aes_ops.total());
    let lat = |h: &secmem_core::stats::Histogram| {
        let s = h.summary();
        json!({"count": s.count, "mean": s.mean, "p50": s.p50, "p99": s.p99, "p999": s.p999, "max": s.max})
    };
    let design: Map<String, Value> = design_extra.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let mut out = json!({
        "cycles": cycles,
        "time_ns": Cycle(cycles).to_ns(freq),
        "instructions": roi.core.instructions,
        "ipc": if cycles > 0 { roi.core.instructions as f64 / cycles as f64 } else { 0.0 },
        "core": roi.core,
        "caches": {
            "l1": cache(&roi.caches[0]), "l2": cache(&roi.caches[1]), "llc": cache(&roi.caches[2]),
            "counter": cache(&roi.mc.counter_cache), "mac": cache(&roi.mc.mac_cache), "tree": cache(&roi.mc.tree_cache),
        },
        "memory": memory(&roi.media),
        "security": {
            "data_reads": roi.mc.data_reads,
            "data_writes": roi.mc.data_writes,
            "mac_ops": mac,
            "aes_ops": aes,
            "counter_overflows": roi.mc.counter_overflows,
            "reencrypted_lines": roi.mc.reencrypted_lines,
            "root_updates": roi.mc.root_updates,
        },
        "latency_cycles": { "read": lat(&roi.mc.read_latency), "write": lat(&roi.mc.write_latency) },
        "energy": { "nvm_joules": roi.media.energy_nj * 1e-9 },
        "design": design,
    });
    if !roi.ports.is_empty() {
        // Further ports (a storage device beside the memory): each with its own statistics.
        let ports: Map<String, Value> = roi
            .ports
            .iter()
            .map(|(name, m)| {
                let mut v = memory(m);
                v["bytes_read"] = json!(m.bytes_read);
                v["bytes_written"] = json!(m.bytes_written);
                v["energy_joules"] = json!(m.energy_nj * 1e-9);
                (name.clone(), v)
            })
            .collect();
        out["ports"] = Value::Object(ports);
    }
    out
}

pub fn report(cfg: &Config, meta: &Meta, stats: Value) -> Value {
    json!({ "config": cfg.to_json(), "meta": meta, "stats": stats })
}
