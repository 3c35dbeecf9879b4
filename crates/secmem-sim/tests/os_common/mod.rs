//! Helpers shared by the tests that run OS-level traces through the campaigns
//! (`os_campaigns.rs`, `conformance.rs`): a small recoverable functional system, and the
//! `churn` workload written as a trace file.

use secmem_sim::cow_workloads::{self, CowSpec, CowWorkload};
use secmem_sim::Config;
use secmem_trace::{Event, Format, TraceKind};
use std::path::PathBuf;

/// A small functional system on the Lelantus Table III machine (caches of a few KiB, so data
/// and metadata are evicted all the time), recoverable (eager tree update, strict metadata
/// persistence), with every pad recorded; the 64 KiB counter cache leaves room for
/// Lelantus-CoW's carve-out.
pub fn cfg(design: &str, extra: &[&str]) -> Config {
    let mut o: Vec<String> = [
        "run.progress=false",
        "memory.capacity_gib=1",
        "l1.size_kib=4", "l1.ways=2", "l2.size_kib=8", "l2.ways=2", "llc.size_kib=16", "llc.ways=4",
        "metadata_cache.counter.size_kib=64", "metadata_cache.mac.size_kib=4", "metadata_cache.tree.size_kib=4",
        "tree.update=eager", "security.metadata_persistence=strict", "run.functional=true", "run.check_pad_reuse=true",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    o.push(format!("run.design=\"{design}\""));
    o.extend(extra.iter().map(|s| s.to_string()));
    Config::load(Some("lelantus"), None, &o).unwrap_or_else(|e| panic!("{design}: {e}"))
}

/// A trace file removed when dropped (also when the test fails).
pub struct TmpTrace(pub PathBuf);
impl Drop for TmpTrace {
    fn drop(&mut self) { let _ = std::fs::remove_file(&self.0); }
}

pub fn write_trace(name: &str, events: &[Event]) -> TmpTrace {
    let path = std::env::temp_dir().join(format!("secmem-os-campaign-{}-{name}.trace", std::process::id()));
    let f = std::fs::File::create(&path).unwrap();
    let mut w = secmem_trace::EventWriter::new(f, path.display().to_string(), Format::Binary, TraceKind::V2_OS).unwrap();
    for e in events {
        w.write(e).unwrap();
    }
    w.finish().unwrap();
    TmpTrace(path)
}

/// The `churn` workload (allocations of up to 12 pages, forks, stores with data, loads,
/// frees, exits) as events.
pub fn churn(seed: u64, ops: u64) -> Vec<Event> {
    let spec = CowSpec { workload: CowWorkload::Churn, page_size: secmem_sim::os::PageSize::Small, footprint_bytes: 12 * 4096, lines_per_page: 1, ops, seed };
    let mut events = Vec::new();
    cow_workloads::emit(&spec, true, &mut |e| {
        events.push(e);
        Ok(())
    })
    .unwrap();
    events
}

