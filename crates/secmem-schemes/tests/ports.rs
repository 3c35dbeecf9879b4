//! A controller with a second port beside its memory: a design reaches it through `McOps`,
//! requests carry their size, and each device keeps statistics of its own.

use secmem_core::cache::CacheConfig;
use secmem_core::Cycle;
use secmem_media::simple::{SimpleConfig, SimpleMedia};
use secmem_media::{AccessKind, MemRequest, TrafficClass};
use secmem_schemes::config::*;
use secmem_schemes::controller::functional::IntegrityError;
use secmem_schemes::testing::FixedLatencyMedia;
use secmem_schemes::{Design, McOps, SecureMc};

const MEM: u64 = 64 * 4096;
const BLOCK: u32 = 4096;

fn controller() -> SecureMc {
    let c = || CacheConfig::new(16, 4, 2);
    let caches = MetadataCachesConfig { counter: c(), mac: c(), tree: c(), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared };
    SecureMc::new(&SecurityConfig::default(), &TreeConfig::default(), &caches, MEM, Box::new(FixedLatencyMedia::new(100, 300, 1 << 30)), 1).unwrap()
}

/// Writes each written line's page through to a storage port as one 4 KiB block (a toy
/// write-back of pages to a drive), after the memory write.
#[derive(Clone, Default)]
struct PagesToStorage;

impl Design for PagesToStorage {
    fn name(&self) -> &'static str { "pages-to-storage" }
    fn clone_box(&self) -> Box<dyn Design> { Box::new(self.clone()) }
    fn write(&mut self, mc: &mut McOps, line: u64, data: Option<&[u8; 64]>, now: Cycle) -> Result<Cycle, IntegrityError> {
        let done = mc.write_line(line, data, now)?;
        let port = mc.port("storage").expect("a storage port is attached");
        let addr = (line * 64 / u64::from(BLOCK)) * u64::from(BLOCK);
        assert!(addr + u64::from(BLOCK) <= mc.port_capacity_bytes(port));
        Ok(mc.port_access(port, MemRequest { addr, size_bytes: BLOCK, kind: AccessKind::Write, class: TrafficClass::Data, issue: done }))
    }
}

#[test]
fn a_design_writes_sized_blocks_to_a_second_port_whose_statistics_are_its_own() {
    let mut mc = controller();
    // 10 us writes, 2 GB/s: a 4 KiB block is 2048 ns on the port.
    let storage = SimpleConfig { read_latency_ns: 10_000.0, write_latency_ns: 10_000.0, bandwidth_gb_per_s: 2.0 };
    mc.attach_port("storage", Box::new(SimpleMedia::new(&storage, 1000, 1 << 30)));
    assert!(mc.port("nvme1").is_none());
    let mut d: Box<dyn Design> = Box::new(PagesToStorage);
    let memory_done = {
        let mut probe = controller();
        probe.write_line(5, None, Cycle(0)).unwrap()
    };
    // At 1 GHz: the block goes out when the memory write is persistent, takes 2048 cycles
    // on the port and 10,000 more.
    let done = d.serve_write(&mut mc, 5, None, Cycle(0)).unwrap();
    assert_eq!(done, memory_done + Cycle(2048 + 10_000));
    d.serve_write(&mut mc, 64 + 3, None, Cycle(0)).unwrap();
    let ports = mc.port_stats();
    assert_eq!(ports.len(), 1);
    let (name, s) = &ports[0];
    assert_eq!((name.as_str(), s.writes(), s.bytes_written, s.reads()), ("storage", 2, 2 * u64::from(BLOCK), 0));
    // The second block waited for the first one's transfer.
    assert!(s.device_counter("port_wait_cycles").unwrap() > 0);
    // The memory's own statistics count only memory traffic: 64 B lines.
    let (_, memory) = mc.snapshot();
    assert_eq!(memory.writes_by_class[TrafficClass::Data as usize], 2);
    assert_eq!(memory.bytes_written, memory.writes() * 64);
}

#[test]
#[should_panic(expected = "a port named 'storage' is attached already")]
fn two_ports_cannot_share_a_name() {
    let mut mc = controller();
    let cfg = SimpleConfig::default();
    mc.attach_port("storage", Box::new(SimpleMedia::new(&cfg, 1000, 1 << 30)));
    mc.attach_port("storage", Box::new(SimpleMedia::new(&cfg, 1000, 1 << 30)));
}
