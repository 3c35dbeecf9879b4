//! Hand-worked baseline eADR drains (Base-EU, Base-LU's metadata save region) and the shared
//! drain pieces: the drain clock, the counted work and its totals, recovery reports.

use secmem_core::cache::CacheConfig;
use secmem_core::Cycle;
use secmem_media::{AccessKind, MediaStats, MemRequest, MemoryPort, TrafficClass};
use secmem_schemes::config::*;
use secmem_schemes::designs::Baseline;
use secmem_schemes::controller::eadr::{self, DrainClock, DrainLine, DrainMacs, DrainReads, DrainRecovery, DrainRecoveryError, DrainStats, DrainWrites};
use secmem_schemes::designs::horus::{Horus, MacLevels};
use secmem_schemes::controller::recovery::RecoveryReport;
use secmem_schemes::testing::{flip_bit, write_some_lines, AccessLog, FixedLatencyMedia};
use secmem_schemes::controller::cache_tree;
use secmem_schemes::{Design, McStats, SecureMc};

/// 64 pages, 4 KiB metadata caches; reads take 100 cycles, writes `write`; a 1 GiB device
/// unless `capacity` says otherwise.
fn controller(functional: bool, update: TreeUpdate, write: u64, capacity: u64) -> (SecureMc, AccessLog) {
    let (media, log) = FixedLatencyMedia::recording(100, write, capacity);
    (controller_on(functional, update, Box::new(media)), log)
}

fn controller_on(functional: bool, update: TreeUpdate, media: Box<dyn MemoryPort>) -> SecureMc {
    let sec = SecurityConfig::default();
    let tree = TreeConfig { arity: 8, update, ..TreeConfig::default() };
    let caches = MetadataCachesConfig { counter: CacheConfig::new(4, 4, 2), mac: CacheConfig::new(4, 4, 2), tree: CacheConfig::new(4, 4, 2), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared };
    if functional {
        SecureMc::new_functional(&sec, &tree, &caches, 64 * 4096, media, 3).unwrap()
    } else {
        SecureMc::new(&sec, &tree, &caches, 64 * 4096, media, 1).unwrap()
    }
}

/// A device whose reads below byte address `split` take `below` cycles and the others
/// `above`; writes take 300.
struct SplitReads {
    split: u64,
    below: u64,
    above: u64,
    stats: MediaStats,
}

impl MemoryPort for SplitReads {
    fn access(&mut self, req: MemRequest) -> Cycle {
        req.issue + Cycle(match req.kind {
            AccessKind::Write => 300,
            AccessKind::Read if req.addr < self.split => self.below,
            AccessKind::Read => self.above,
        })
    }
    fn drain(&mut self, now: Cycle) -> Cycle { now }
    fn capacity_bytes(&self) -> u64 { 1 << 30 }
    fn stats(&self) -> MediaStats { self.stats.clone() }
}

/// Dirty hierarchy lines, none of them written before.
fn hierarchy_lines(functional: bool) -> Vec<DrainLine> {
    (0..6u64).map(|i| DrainLine { line: i * 53 + 2, data: functional.then_some([0xA0 + i as u8; 64]), read_cycles: 2 }).collect()
}

// ---------------------------------------------------------------- shared pieces

#[test]
fn the_drain_clock_issues_after_each_read_and_waits_for_the_earliest_flush_when_full() {
    let mut c = DrainClock::new(2, Cycle(10));
    assert_eq!(c.now(), Cycle(10));
    assert_eq!(c.issue(5), Cycle(15));
    c.complete(Cycle(100));
    assert_eq!(c.issue(5), Cycle(20));
    c.complete(Cycle(50));
    // Two in flight: the third waits for the one that finishes first (50), not the first issued.
    assert_eq!(c.issue(5), Cycle(50));
    c.complete(Cycle(60));
    assert_eq!(c.issue(0), Cycle(60));
    assert_eq!((c.now(), c.last_done), (Cycle(60), Cycle(100)));
    // No in-flight slot at all would deadlock: 0 means 1.
    let mut one = DrainClock::new(0, Cycle(0));
    one.issue(0);
    one.complete(Cycle(7));
    assert_eq!(one.issue(1), Cycle(7));
}

#[test]
fn drain_totals_add_every_field_once() {
    let w = DrainWrites { data: 1, counter: 2, mac: 4, tree: 8, reencrypt: 16, vault_data: 32, vault_address: 64, vault_mac: 128, metadata_save: 256 };
    assert_eq!(w.total(), 511);
    let r = DrainReads { data: 1, counter: 2, mac: 4, tree: 8, reencrypt: 16 };
    assert_eq!(r.total(), 31);
    let m = DrainMacs { data: 1, tree_update: 2, verify: 4, metadata_protect: 8, vault_data: 16, vault_level2: 32, reencrypt: 64 };
    assert_eq!(m.total(), 127);
}

#[test]
fn absorbing_controller_snapshots_takes_each_class_and_operation_from_the_difference() {
    let mut before = (McStats::default(), MediaStats::default());
    before.0.mac_ops.data_verify = 100;
    before.1.reads_by_class = [100; 6];
    before.1.writes_by_class = [100; 6];
    let mut after = before.clone();
    after.1.reads_by_class = [101, 102, 103, 104, 105, 106];
    after.1.writes_by_class = [110, 120, 130, 140, 150, 160];
    let m = &mut after.0.mac_ops;
    (m.data_write, m.tree_update, m.tree_verify, m.data_verify, m.reencrypt) = (1, 2, 4, 108, 16);
    let a = &mut after.0.aes_ops;
    (a.data_encrypt, a.data_decrypt, a.reencrypt, a.design) = (1, 2, 4, 8);
    let mut s = DrainStats { aes_ops: 1000, ..Default::default() };
    s.writes.vault_data = 7;
    s.absorb_controller(&before, &after);
    assert_eq!(s.reads, DrainReads { data: 1, counter: 2, mac: 3, tree: 4, reencrypt: 5 });
    let writes = DrainWrites { data: 10, counter: 20, mac: 30, tree: 40, reencrypt: 50, vault_data: 7, ..Default::default() };
    assert_eq!(s.writes, writes, "design writes are the design's to count");
    assert_eq!(s.mac_ops, DrainMacs { data: 1, tree_update: 2, verify: 4 + 8, reencrypt: 16, ..Default::default() });
    assert_eq!(s.aes_ops, 1000 + 1 + 2 + 4, "added to what the design counted; the design's own AES is not the controller's");
}

#[test]
fn a_recovery_error_names_its_class_and_place() {
    let e = DrainRecoveryError { class: "metadata-tree".into(), location: "saved metadata block 3".into() };
    assert_eq!(e.to_string(), "recovery failed closed (metadata-tree): saved metadata block 3");
}

#[test]
fn a_tree_rebuild_report_becomes_drain_recovery_work_with_the_same_serial_time() {
    let r = RecoveryReport { counter_blocks_read: 3, hashes: 5, nodes_read: 7, cycles: 11 };
    assert_eq!(DrainRecovery::from(r), DrainRecovery { blocks_read: 3, hashes: 5, cycles: 11, serial_cycles: 11, ..Default::default() });
}

#[test]
fn the_reserved_region_starts_at_the_first_page_boundary_past_the_tree() {
    let (mc, _) = controller(false, TreeUpdate::Lazy, 300, 1 << 30);
    let (end, base) = (mc.layout.end, eadr::reserved_base(&mc));
    assert!(base % 4096 == 0 && base >= end && base < end + 4096, "end {end:#x}, reserved base {base:#x}");
    assert_eq!(Horus::new(MacLevels::Single, 4, 0).layout(&mc).data_base, base);
}

#[test]
fn the_save_region_holds_the_blocks_and_one_address_block_per_eight() {
    assert_eq!(eadr::shadow_bytes(0), 0);
    assert_eq!(eadr::shadow_bytes(9), 9 * 64 + 2 * 64);
    assert_eq!(eadr::shadow_bytes(16), 16 * 64 + 2 * 64);
}

#[test]
#[should_panic(expected = "beyond the device")]
fn a_drain_into_a_device_too_small_for_the_reserved_region_stops() {
    let (mc, _) = controller(false, TreeUpdate::Lazy, 300, 1 << 30);
    let base = eadr::reserved_base(&mc);
    // A device that ends where the reserved region would begin.
    let (mut mc, _) = controller(false, TreeUpdate::Lazy, 300, base);
    let mut h = Horus::new(MacLevels::Single, 4, 0);
    let lines = hierarchy_lines(false);
    h.drain(&mut mc, &lines[..1], &mut DrainClock::new(4, Cycle(0)), &mut DrainStats::default()).unwrap();
}

// ---------------------------------------------------------------- baseline drains

#[test]
fn base_eu_writes_every_drained_line_home_and_they_read_back_after_recovery() {
    let (mut mc, _) = controller(true, TreeUpdate::Eager, 300, 1 << 30);
    let written = write_some_lines(&mut mc);
    let lines = hierarchy_lines(true);
    let mut b = Baseline::default();
    let mut clock = DrainClock::new(4, Cycle(100_000));
    b.drain(&mut mc, &lines, &mut clock, &mut DrainStats::default()).unwrap();
    b.crash(&mut mc, false);
    let rec = b.recover_drained(&mut mc, Cycle(200_000)).unwrap();
    assert!(rec.lines.is_empty(), "nothing to hand back: every line went home");
    for (line, bytes) in lines.iter().map(|l| (l.line, l.data.unwrap())).chain(written) {
        assert_eq!(mc.read_line(line, Cycle(300_000)).unwrap().1, Some(bytes), "line {line}");
    }
}

#[test]
fn base_lu_saves_each_dirty_metadata_block_then_an_address_block_per_eight() {
    let (mut mc, log) = controller(false, TreeUpdate::Lazy, 300, 1 << 30);
    write_some_lines(&mut mc);
    let n = mc.dirty_metadata().len() as u64;
    assert!(n > 8, "{n} dirty metadata blocks: more than one address block's worth");
    let base = eadr::reserved_base(&mc);
    let mut stats = DrainStats::default();
    let before = log.borrow().len();
    let regs = eadr::save_metadata(&mut mc, base, &mut DrainClock::new(4, Cycle(0)), &mut stats).unwrap();
    assert_eq!(regs.blocks, n);
    let log = log.borrow();
    assert!(log[before..].iter().all(|x| (x.1, x.2) == (AccessKind::Write, TrafficClass::Design)), "a save only writes, as design traffic");
    let writes: Vec<u64> = log[before..].iter().map(|x| x.0).collect();
    let mut want = Vec::new();
    for i in 0..n {
        want.push(base + i * 64);
        if i % 8 == 7 || i + 1 == n {
            want.push(base + n * 64 + i / 8 * 64);
        }
    }
    assert_eq!(writes, want);
    assert_eq!((stats.metadata_blocks, stats.writes.metadata_save, stats.writes.vault_address), (n, n, n.div_ceil(8)));
    assert_eq!(stats.mac_ops.metadata_protect, cache_tree::hash_count(n));
}

#[test]
fn with_writes_faster_than_hashing_a_metadata_save_is_paced_by_the_hash_engine() {
    let (mut mc, _) = controller(false, TreeUpdate::Lazy, 1, 1 << 30);
    write_some_lines(&mut mc);
    let base = eadr::reserved_base(&mc);
    let mut clock = DrainClock::new(4, Cycle(0));
    let n = eadr::save_metadata(&mut mc, base, &mut clock, &mut DrainStats::default()).unwrap().blocks;
    assert!(n > 8, "{n} blocks: a tree of two levels or more");
    // Each block's leaf hash (160) holds its in-flight slot: four blocks leave every 160
    // cycles; after the last, the internal levels hash one after another.
    assert_eq!(clock.now(), Cycle((n - 1) / 4 * 160));
    assert_eq!(clock.last_done, clock.now() + Cycle(cache_tree::height(n) as u64 * 160));
}

#[test]
fn base_lu_recovery_restores_the_saved_metadata_so_lines_written_before_and_drained_read_back() {
    let (mut mc, _) = controller(true, TreeUpdate::Lazy, 300, 1 << 30);
    let written = write_some_lines(&mut mc);
    let lines = hierarchy_lines(true);
    let mut b = Baseline::default();
    let mut stats = DrainStats::default();
    b.drain(&mut mc, &lines, &mut DrainClock::new(4, Cycle(100_000)), &mut stats).unwrap();
    let n = stats.metadata_blocks;
    assert!(n > 8, "{n} saved blocks");
    b.crash(&mut mc, false);
    let rec = b.recover_drained(&mut mc, Cycle(200_000)).unwrap();
    assert_eq!((rec.metadata_restored, rec.blocks_read, rec.hashes), (n, n + n.div_ceil(8), cache_tree::hash_count(n)));
    for (line, bytes) in lines.iter().map(|l| (l.line, l.data.unwrap())).chain(written) {
        assert_eq!(mc.read_line(line, Cycle(300_000)).unwrap().1, Some(bytes), "line {line}");
    }
}

#[test]
fn base_lu_recovery_reports_the_same_work_and_time_in_counting_mode_whenever_it_starts() {
    for functional in [false, true] {
        let (mut mc, _) = controller(functional, TreeUpdate::Lazy, 300, 1 << 30);
        write_some_lines(&mut mc);
        let base = eadr::reserved_base(&mc);
        let regs = eadr::save_metadata(&mut mc, base, &mut DrainClock::new(4, Cycle(0)), &mut DrainStats::default()).unwrap();
        let n = regs.blocks;
        mc.crash(false);
        let rec = eadr::restore_metadata(&mut mc, base, regs, Cycle(5000)).unwrap();
        let blocks = n + n.div_ceil(8);
        assert_eq!((rec.metadata_restored, rec.blocks_read, rec.hashes), (n, blocks, cache_tree::hash_count(n)), "functional {functional}");
        // Every read is issued at once and takes 100; the tree's levels and root follow.
        let h = cache_tree::height(n) as u64;
        assert_eq!(rec.cycles, 100 + (h + 1) * 160, "functional {functional}");
        // One at a time: each read, each leaf hash, then the levels and the root.
        assert_eq!(rec.serial_cycles, blocks * 100 + (n + h + 1) * 160, "functional {functional}");
    }
    // Nothing saved: nothing read, no time.
    let (mut mc, _) = controller(false, TreeUpdate::Lazy, 300, 1 << 30);
    let base = eadr::reserved_base(&mc);
    let rec = eadr::restore_metadata(&mut mc, base, eadr::MetadataSaveRegisters::default(), Cycle(5000)).unwrap();
    assert_eq!((rec.blocks_read, rec.serial_cycles), (0, 0));
}

#[test]
fn base_lu_serial_recovery_time_counts_every_read_at_the_fastest_one_be_it_a_block_or_an_address_block() {
    let (mut mc, _) = controller(false, TreeUpdate::Lazy, 300, 1 << 30);
    write_some_lines(&mut mc);
    let n = mc.dirty_metadata().len() as u64;
    let base = eadr::reserved_base(&mc);
    // Reads of the address blocks, which follow the saved blocks, take 40 cycles and the
    // others 100; then the other way round.
    for (below, above) in [(100, 40), (40, 100)] {
        let media = SplitReads { split: base + n * 64, below, above, stats: MediaStats::default() };
        let mut mc = controller_on(false, TreeUpdate::Lazy, Box::new(media));
        write_some_lines(&mut mc);
        let regs = eadr::save_metadata(&mut mc, base, &mut DrainClock::new(4, Cycle(0)), &mut DrainStats::default()).unwrap();
        assert_eq!(regs.blocks, n);
        mc.crash(false);
        let rec = eadr::restore_metadata(&mut mc, base, regs, Cycle(5000)).unwrap();
        let h = cache_tree::height(n) as u64;
        assert_eq!(rec.cycles, 100 + (h + 1) * 160, "the slowest read is the last");
        assert_eq!(rec.serial_cycles, (n + n.div_ceil(8)) * 40 + (n + h + 1) * 160, "reads below {below}, above {above}");
    }
}

#[test]
fn a_saved_metadata_block_or_address_with_a_flipped_bit_fails_recovery() {
    for (what, in_address_block, bit) in [("block", false, 77), ("address", true, 2 * 64 + 3)] {
        let (mut mc, _) = controller(true, TreeUpdate::Lazy, 300, 1 << 30);
        write_some_lines(&mut mc);
        let base = eadr::reserved_base(&mc);
        let regs = eadr::save_metadata(&mut mc, base, &mut DrainClock::new(4, Cycle(0)), &mut DrainStats::default()).unwrap();
        // Block 2, or the address slot of block 2.
        flip_bit(&mut mc, if in_address_block { base + regs.blocks * 64 } else { base + 2 * 64 }, bit);
        mc.crash(false);
        let e = eadr::restore_metadata(&mut mc, base, regs, Cycle(0)).expect_err(what);
        assert_eq!(e.class, "metadata-tree", "{what}: {e}");
    }
}
