//! What every reported statistic is: one table, read by the report's text and CSV forms
//! (`stats.txt`, `stats.csv` beside `report.json`), by `secmem stats describe` and by
//! `docs/stats.md`. A `*` in a name stands for one segment of a family (`stats.caches.*.hits`).
//! Designs describe their own `stats.design.*` counters in their registry entries
//! ([`secmem_schemes::designs::DesignEntry::stats`]).
//!
//! Quantities summed over requests or units that overlap in time say so in their names
//! (`bank_conflict_cycles_sum`): they can exceed the run's cycles.

use secmem_core::stats::StatDoc;
use serde_json::Value;

#[allow(non_snake_case)]
const fn S(name: &'static str, unit: &'static str, description: &'static str) -> StatDoc { StatDoc::new(name, unit, description) }

/// The statistics every run reports (besides the design's own).
pub static GENERIC: &[StatDoc] = &[
    S("stats.cycles", "cycles", "core cycles of the region of interest, until the last request completed"),
    S("stats.time_ns", "ns", "stats.cycles at core.freq_mhz"),
    S("stats.instructions", "instructions", "instructions retired: the records plus their inst_gap"),
    S("stats.ipc", "instructions/cycle", "stats.instructions / stats.cycles (0 without cycles)"),
    S("stats.core.records", "records", "trace records simulated"),
    S("stats.core.reads", "records", "read records (a read spanning two lines counts once)"),
    S("stats.core.writes", "records", "write records"),
    S("stats.core.fences", "records", "persist barriers"),
    S("stats.core.flushes", "records", "cache-line write-back records (clwb)"),
    S("stats.core.instructions", "instructions", "as stats.instructions"),
    S("stats.core.llc_misses", "lines", "line reads sent to the memory controller: misses in every level"),
    S("stats.core.memory_writes_issued", "lines", "lines written to the controller: LLC dirty evictions, flush write-backs, write-throughs"),
    S("stats.core.mlp_stall_cycles", "cycles", "cycles the core waited for a free miss slot (core.max_outstanding_misses)"),
    S("stats.core.fence_stall_cycles", "cycles", "cycles fences waited for earlier stores to persist"),
    S("stats.core.unprotected_reads", "reads", "memory reads of lines outside the protected memory (persist.coverage = non-stack: the stack's), plain device reads"),
    S("stats.core.unprotected_writes", "writes", "memory writes of lines outside the protected memory, plain device writes no fence waits for"),
    S("stats.caches.*.hits", "lookups", "lookups that hit (L2 is looked up on an L1 miss, the LLC on an L2 miss: local rates)"),
    S("stats.caches.*.misses", "lookups", "lookups that missed"),
    S("stats.caches.*.hit_rate", "ratio", "hits / (hits + misses), 0 without lookups"),
    S("stats.caches.*.evictions", "lines", "valid lines displaced by a fill"),
    S("stats.caches.*.dirty_evictions", "lines", "evictions of dirty lines (written back below)"),
    S("stats.caches.*.dirty_lines_at_end", "lines", "dirty lines the cache holds when the run ends (the state left, not a difference); run.flush_at_end writes the data caches' back"),
    S("stats.memory.reads.*", "lines", "64 B reads the controller sent the memory device, of this traffic class (data, counter, mac, tree, reencrypt, design)"),
    S("stats.memory.reads.total", "lines", "64 B reads the controller sent the memory device, all classes"),
    S("stats.memory.writes.*", "lines", "64 B writes the controller sent the memory device, of this traffic class (WPQ-coalesced writes included)"),
    S("stats.memory.writes.total", "lines", "64 B writes the controller sent the memory device, all classes: the papers' memory writes"),
    S("stats.memory.wpq_read_hits", "reads", "PCM: reads served from the write pending queue"),
    S("stats.memory.wpq_coalesced", "writes", "PCM: writes merged into one already queued for the same line"),
    S("stats.memory.wpq_full_stalls", "writes", "PCM: writes that found the WPQ full (a count, not cycles)"),
    S("stats.memory.read_queue_full_stalls", "reads", "PCM: reads that found the read queue full"),
    S("stats.memory.bank_conflict_cycles_sum", "cycles, summed over requests", "PCM: cycles requests waited for a busy bank, summed over requests (reads, and writes when pcm.adr = false); overlapping waits each count, so it can exceed stats.cycles"),
    S("stats.memory.array_reads", "lines", "PCM: reads that reached the arrays"),
    S("stats.memory.array_writes", "lines", "PCM: writes that reached the arrays (after a warm-up, may exceed writes.total: writes accepted in the warm-up are charged here)"),
    S("stats.memory.row_hits", "accesses", "PCM with pcm.row_buffer = open: array accesses to their bank's open row (0 with closed rows)"),
    S("stats.memory.row_misses", "accesses", "PCM with pcm.row_buffer = open: array accesses that opened another row"),
    S("stats.memory.row_writebacks", "rows", "PCM with pcm.row_buffer = open: dirty rows written back to their cells when they closed (or at a drain)"),
    S("stats.security.data_reads", "lines", "data lines the controller read"),
    S("stats.security.data_writes", "lines", "data lines the controller wrote"),
    S("stats.security.mac_ops.data_write", "MACs", "MACs computed over written data"),
    S("stats.security.mac_ops.data_verify", "MACs", "MACs recomputed to verify data read"),
    S("stats.security.mac_ops.tree_verify", "hashes", "hashes verifying fetched counter blocks and tree nodes"),
    S("stats.security.mac_ops.tree_update", "hashes", "hashes updating a parent node (lazily on eviction, eagerly per level per write)"),
    S("stats.security.mac_ops.reencrypt", "MACs", "MACs of lines re-encrypted after a minor-counter overflow"),
    S("stats.security.mac_ops.design", "MACs", "MACs the design computes itself"),
    S("stats.security.mac_ops.total", "MACs", "all MACs and hashes above"),
    S("stats.security.aes_ops.data_encrypt", "pads", "AES pads generated to encrypt written data"),
    S("stats.security.aes_ops.data_decrypt", "pads", "AES pads generated to decrypt data read"),
    S("stats.security.aes_ops.reencrypt", "pads", "pads for re-encryption after overflows (2 per line: decrypt and encrypt)"),
    S("stats.security.aes_ops.design", "pads", "pads the design generates itself"),
    S("stats.security.aes_ops.total", "pads", "all pads above"),
    S("stats.security.counter_overflows", "overflows", "minor-counter overflows (each re-encrypts a page)"),
    S("stats.security.reencrypted_lines", "lines", "lines re-encrypted because of overflows"),
    S("stats.security.root_updates", "updates", "updates of the on-chip tree root register"),
    S("stats.latency_cycles.*.count", "requests", "data reads (read) or data writes (write) the controller timed"),
    S("stats.latency_cycles.*.mean", "cycles", "mean controller latency: arrival to usable plaintext (read) or to persistent (write)"),
    S("stats.latency_cycles.*.p50", "cycles", "median controller latency (histogram bucket bound, < 3.2% relative error)"),
    S("stats.latency_cycles.*.p99", "cycles", "99th-percentile controller latency"),
    S("stats.latency_cycles.*.p999", "cycles", "99.9th-percentile controller latency"),
    S("stats.latency_cycles.*.max", "cycles", "largest controller latency"),
    S("stats.energy.nvm_joules", "J", "dynamic energy of PCM array reads and writes, charged when issued to a bank"),
    S("stats.ports.*.reads.*", "requests", "requests the controller sent this further port (a storage device beside the memory), of this class"),
    S("stats.ports.*.writes.*", "requests", "write requests the controller sent this further port, of this class"),
    S("stats.ports.*.bytes_read", "bytes", "bytes read from the port's device"),
    S("stats.ports.*.bytes_written", "bytes", "bytes written to the port's device"),
    S("stats.ports.*.energy_joules", "J", "the port device's dynamic energy"),
    S("stats.flush_at_end.lines_written_back", "lines", "run.flush_at_end: distinct dirty lines written back after the last record"),
    S("os.zero_faults", "faults", "OS model: first touches of a page mapped to the zero page"),
    S("os.cow_faults", "faults", "OS model: writes to a shared page after fork, which copy it"),
    S("os.reuse_faults", "faults", "OS model: CoW faults on a page no other process shares, which take it over without a copy"),
    S("os.forks", "forks", "OS model: fork events"),
    S("os.frames_freed", "frames", "OS model: physical frames returned to the free list"),
    S("os.kernel_lines", "lines", "OS model: lines the kernel copied or zero-filled itself"),
    S("os.page_commands", "commands", "OS model: page commands sent to the design (copy, materialize, free, zero)"),
    S("os.materialize_commands", "commands", "OS model: page_phyc commands (lazy copies made real)"),
    S("os.cycles_by_pid.*", "cycles", "OS model: core cycles each process id ran"),
    S("os.roi_record", "record", "OS model: index of the trace's ROI record (null without one)"),
    S("os.logical_line_writes", "lines", "OS model: lines the processes and the kernel wrote, as the program sees them"),
    S("os.data_line_writes", "lines", "OS model: data lines written to memory"),
    S("os.write_amplification", "ratio", "OS model: data_line_writes / logical_line_writes"),
    S("os.engine_records", "records", "OS model: records the engine simulated for the trace's events"),
    S("io.reads", "I/Os", "storage reads of the trace (IOR records)"),
    S("io.writes", "I/Os", "storage writes of the trace (IOW records)"),
    S("io.bytes", "bytes", "bytes the storage I/Os moved"),
    S("io.blocked_us", "us", "time the core waited for its blocking I/Os"),
    S("io.dma_lines", "lines", "64 B DMA transfers through the memory controller"),
    S("io.commands", "commands", "NVMe commands issued (an I/O larger than io.max_transfer_kib is split)"),
    S("io.ssd.host_page_reads", "pages", "SSD: flash pages the host's reads asked for"),
    S("io.ssd.host_page_writes", "pages", "SSD: flash pages the host wrote"),
    S("io.ssd.buffer_read_hits", "pages", "SSD: reads served from the drive's write buffer"),
    S("io.ssd.unwritten_reads", "pages", "SSD: reads of pages never written (no flash access)"),
    S("io.ssd.partial_page_reads", "pages", "SSD: reads of part of a flash page"),
    S("io.ssd.flash_reads", "pages", "SSD: flash page reads (host, mapping table and GC)"),
    S("io.ssd.flash_programs", "pages", "SSD: flash page programs (host, mapping table and GC)"),
    S("io.ssd.erases", "blocks", "SSD: block erases"),
    S("io.ssd.gc_runs", "runs", "SSD: garbage collections"),
    S("io.ssd.gc_pages_moved", "pages", "SSD: valid pages garbage collection moved"),
    S("io.ssd.map_cache_hits", "lookups", "SSD: FTL mapping-table lookups that hit the cached mapping table"),
    S("io.ssd.map_cache_misses", "lookups", "SSD: FTL mapping-table lookups that missed"),
    S("io.ssd.map_reads", "pages", "SSD: mapping-table pages read from flash"),
    S("io.ssd.map_programs", "pages", "SSD: mapping-table pages written to flash"),
    S("io.ssd.write_buffer_stall_cycles_sum", "cycles, summed over writes", "SSD: cycles host writes waited for room in the write buffer, summed over writes"),
    S("io.ssd.channel_busy_cycles_sum", "cycles, summed over channels", "SSD: cycles each channel was busy, summed over the channels"),
    S("io.ssd.plane_busy_cycles_sum", "cycles, summed over planes", "SSD: cycles each plane was busy, summed over the planes"),
    S("io.ssd.die_busy_cycles_sum", "cycles, summed over dies", "SSD: cycles each die was busy, summed over the dies"),
];

/// The description of a reported statistic (its dotted name, as in `stats.txt`), or None.
/// `stats.design.NAME` is the run's design's (`design`, a registered name); every name under
/// `stats.flush_at_end.` is the end-of-run flush's figure of the same name; the SSD counters
/// under `stats.ports.ssd.` are those of `io.ssd.`.
pub fn describe(name: &str, design: &str) -> Option<StatDoc> {
    if let Some(rest) = name.strip_prefix("stats.design.") {
        let entry = secmem_schemes::designs::entry(design).ok()?;
        return entry.stats.iter().find(|d| d.name == rest).copied();
    }
    if let Some(rest) = name.strip_prefix("stats.flush_at_end.") {
        if rest != "lines_written_back" {
            return describe(&format!("stats.{rest}"), design);
        }
    }
    if let Some(rest) = name.strip_prefix("stats.ports.ssd.") {
        if let Some(d) = find(&format!("io.ssd.{rest}")) {
            return Some(d);
        }
    }
    find(name)
}

fn find(name: &str) -> Option<StatDoc> {
    // The most specific entry: an exact name before a family (`reads.total` before `reads.*`).
    GENERIC.iter().find(|d| d.name == name).or_else(|| GENERIC.iter().find(|d| matches(d.name, name))).copied()
}

fn matches(pattern: &str, name: &str) -> bool {
    let (mut p, mut n) = (pattern.split('.'), name.split('.'));
    loop {
        match (p.next(), n.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a == "*" || a == b => {}
            _ => return false,
        }
    }
}

/// Every documented statistic: the generic ones, then each design's as `stats.design.NAME`
/// with the designs that report it. For `secmem stats describe` and `docs/stats.md`.
pub fn all() -> Vec<(String, &'static str, String)> {
    let mut out: Vec<(String, &'static str, String)> = GENERIC.iter().map(|d| (d.name.to_string(), d.unit, d.description.to_string())).collect();
    out.push(("stats.flush_at_end.*".into(), "", "run.flush_at_end: every statistic of stats.* again, for the end-of-run flush alone".into()));
    out.push(("stats.ports.ssd.*".into(), "", "the SSD's counters as under io.ssd.*, when the drive is a port of the memory controller".into()));
    let mut designs: Vec<(&'static str, StatDoc, Vec<&'static str>)> = Vec::new();
    for e in secmem_schemes::designs::REGISTRY {
        for d in e.stats {
            match designs.iter_mut().find(|(n, _, _)| *n == d.name) {
                Some((_, _, names)) => names.push(e.name),
                None => designs.push((d.name, *d, vec![e.name])),
            }
        }
    }
    for (name, d, names) in designs {
        out.push((format!("stats.design.{name}"), d.unit, format!("{} ({})", d.description, names.join(", "))));
    }
    out
}

/// A report's figures, one per line as gem5's stats.txt: name, value, `# description (unit)`.
/// Every numeric leaf outside `config` and `meta`, in the report's order.
pub fn stats_text(report: &Value) -> String {
    let design = report["config"]["run"]["design"].as_str().unwrap_or("baseline");
    let rows = leaves(report);
    let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut out = String::from("# secmem statistics: name value # description (unit); docs/stats.md lists them all\n");
    for (name, v) in rows {
        let doc = describe(&name, design);
        let (unit, desc) = doc.map_or(("", "undocumented"), |d| (d.unit, d.description));
        out.push_str(&format!("{name:<width$}  {:>20}  # {desc}", number(&v)));
        if !unit.is_empty() {
            out.push_str(&format!(" ({unit})"));
        }
        out.push('\n');
    }
    out
}

/// The same as CSV: `name,value,unit,description`.
pub fn stats_csv(report: &Value) -> String {
    let design = report["config"]["run"]["design"].as_str().unwrap_or("baseline");
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let mut out = String::from("name,value,unit,description\n");
    for (name, v) in leaves(report) {
        let doc = describe(&name, design);
        let (unit, desc) = doc.map_or(("", ""), |d| (d.unit, d.description));
        out.push_str(&format!("{name},{},{},{}\n", number(&v), quote(unit), quote(desc)));
    }
    out
}

fn number(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        v => v.to_string(),
    }
}

/// `(dotted name, value)` of every number (and null) outside `config` and `meta`.
pub fn leaves(report: &Value) -> Vec<(String, Value)> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    walk(&if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, x, out);
                }
            }
            Value::Number(_) | Value::Null => out.push((prefix.to_string(), v.clone())),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Value::Object(m) = report {
        for (k, v) in m {
            if k != "config" && k != "meta" {
                walk(k, v, &mut out);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_name_wins_over_its_family_and_a_star_matches_one_segment() {
        assert_eq!(describe("stats.memory.reads.total", "baseline").unwrap().name, "stats.memory.reads.total");
        assert_eq!(describe("stats.memory.reads.tree", "baseline").unwrap().name, "stats.memory.reads.*");
        assert!(describe("stats.memory.reads.tree.x", "baseline").is_none());
        assert!(describe("stats.nothing", "baseline").is_none());
    }

    #[test]
    fn design_flush_and_port_names_resolve_through_their_owners() {
        assert_eq!(describe("stats.design.zero_reads", "silent-shredder").unwrap().unit, "lines");
        assert!(describe("stats.design.zero_reads", "baseline").is_none());
        assert_eq!(describe("stats.flush_at_end.memory.writes.total", "baseline").unwrap().name, "stats.memory.writes.total");
        assert_eq!(describe("stats.ports.ssd.erases", "baseline").unwrap().name, "io.ssd.erases");
        assert_eq!(describe("stats.ports.ssd.reads.data", "baseline").unwrap().name, "stats.ports.*.reads.*");
    }

    #[test]
    fn every_family_entry_and_name_is_distinct() {
        let mut names: Vec<&str> = GENERIC.iter().map(|d| d.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a statistic is described twice");
    }
}
