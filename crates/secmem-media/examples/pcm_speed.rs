//! Measures how many random 64 B accesses per second the PCM model handles on one core.
//!
//! `cargo run --release -p secmem-media --example pcm_speed [accesses] [scenario filter] [dyn]`
//!
//! With `dyn`, accesses go through `&mut dyn MemoryPort`, as the secure memory controller
//! used to make them (`Box<dyn MemoryPort>`; it now holds PCM by value in `Media::Pcm`):
//! `access` is then a real call, not inlined into this loop, as for a device plugged in
//! as `Media::Other`.
//!
//! Wall-clock rates: on a loaded machine run it twice and take the better figure.

use secmem_core::Cycle;
use secmem_media::pcm::{DrainPolicy, PcmConfig, PcmMedia};
use secmem_media::{AccessKind, MemRequest, MemoryPort, TrafficClass};
use std::time::Instant;

/// xorshift64*: a few cycles per number, so the generator does not dominate the measurement.
struct Rng(u64);
impl Rng {
    #[inline]
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Runs `n` accesses (70% reads) to random lines, one every `gap` cycles on average.
fn run(name: &str, cfg: &PcmConfig, n: u64, gap: u64, dyn_port: bool) {
    let mut pcm = PcmMedia::new(cfg, 4000, 32 << 30);
    if dyn_port {
        // `black_box` hides the concrete type, so the call is not devirtualized and inlined.
        run_on(name, std::hint::black_box(&mut pcm as &mut dyn MemoryPort), n, gap)
    } else {
        run_on(name, &mut pcm, n, gap)
    }
}

fn run_on<M: MemoryPort + ?Sized>(name: &str, dev: &mut M, n: u64, gap: u64) {
    let lines = dev.capacity_bytes() / 64;
    assert!(lines.is_power_of_two());
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut t = 0u64;
    let mut sink = 0u64;
    let cpu0 = cpu_ns();
    let start = Instant::now();
    for _ in 0..n {
        let r = rng.next();
        t += r & (2 * gap - 1);
        let kind = if (r >> 8) % 10 < 7 { AccessKind::Read } else { AccessKind::Write };
        let addr = ((r >> 20) & (lines - 1)) * 64;
        sink = sink.wrapping_add(dev.access(MemRequest::line(addr, kind, TrafficClass::Data, Cycle(t))).0);
    }
    let end = dev.drain(Cycle(t));
    let secs = start.elapsed().as_secs_f64();
    let cpu = match (cpu0, cpu_ns()) {
        (Some(a), Some(b)) => format!(" ({:.1} M/s of CPU time)", n as f64 / ((b - a) as f64 * 1e-9) / 1e6),
        _ => String::new(),
    };
    let s = dev.stats();
    let dc = |name| s.device_counter(name).unwrap_or(0);
    println!(
        "{name:<34} {:>5.1} M accesses/s{cpu}\n    reads {}, writes {}, array writes {}, wpq full stalls {}, \
         read queue stalls {}, mean bank wait {:.0} cyc, last write done at {} cyc; sink {}",
        n as f64 / secs / 1e6,
        s.reads(),
        s.writes(),
        dc("array_writes"),
        dc("wpq_full_stalls"),
        dc("read_queue_full_stalls"),
        dc("bank_conflict_cycles_sum") as f64 / dc("array_reads").max(1) as f64,
        end.0,
        sink % 10,
    );
}

/// CPU time of this thread in ns (Linux), so that a busy machine does not distort the rate.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20_000_000);
    let filter = std::env::args().nth(2).unwrap_or_default();
    let dyn_port = std::env::args().nth(3).is_some_and(|a| a == "dyn");
    let wm = PcmConfig::default();
    let eager = PcmConfig { drain_policy: DrainPolicy::Eager, ..PcmConfig::default() };
    // gap is a power of two; mean inter-arrival = gap cycles.
    for (name, cfg, gap) in [
        ("watermark, light load (1/128 cyc)", &wm, 128),
        ("watermark, saturated (1/8 cyc)", &wm, 8),
        ("eager, light load (1/128 cyc)", &eager, 128),
        ("eager, saturated (1/8 cyc)", &eager, 8),
    ] {
        if name.contains(filter.as_str()) {
            run(name, cfg, n, gap, dyn_port);
        }
    }
}
