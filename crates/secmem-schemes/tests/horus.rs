//! Hand-worked Horus drains: a 4-line hierarchy, the exact vault block sequence, the drain
//! counters and the MAC counts of SLM and DLM; and the vault-size formula of section IV-D.

use proptest::prelude::*;
use secmem_core::cache::CacheConfig;
use secmem_core::Cycle;
use secmem_media::AccessKind;
use secmem_schemes::config::*;
use secmem_schemes::controller::eadr::{DrainClock, DrainLine, DrainStats};
use secmem_schemes::designs::horus::{ChvLayout, Horus, MacLevels};
use secmem_schemes::testing::{flip_bit, write_some_lines, AccessLog, FixedLatencyMedia};
use secmem_schemes::controller::cache_tree;
use secmem_schemes::{Design, SecureMc};

fn controller(functional: bool) -> (SecureMc, AccessLog) { controller_writing_in(functional, 300) }

/// As [`controller`], with writes taking `write` cycles (reads 100).
fn controller_writing_in(functional: bool, write: u64) -> (SecureMc, AccessLog) {
    let (media, log) = FixedLatencyMedia::recording(100, write, 1 << 30);
    let media = Box::new(media);
    let sec = SecurityConfig::default();
    let tree = TreeConfig { arity: 8, update: TreeUpdate::Lazy, ..TreeConfig::default() };
    let caches = MetadataCachesConfig { counter: CacheConfig::new(4, 4, 2), mac: CacheConfig::new(4, 4, 2), tree: CacheConfig::new(4, 4, 2), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared };
    let mc = if functional {
        SecureMc::new_functional(&sec, &tree, &caches, 64 * 4096, media, 3).unwrap()
    } else {
        SecureMc::new(&sec, &tree, &caches, 64 * 4096, media, 1).unwrap()
    };
    (mc, log)
}

fn four_lines(functional: bool) -> Vec<DrainLine> {
    [5u64, 700, 64, 1023].iter().map(|&l| DrainLine { line: l, data: functional.then_some([l as u8; 64]), read_cycles: 2 }).collect()
}

fn drain(h: &mut Horus, mc: &mut SecureMc, lines: &[DrainLine]) -> DrainStats {
    let mut clock = DrainClock::new(4, Cycle(0));
    let mut stats = DrainStats::default();
    h.drain(mc, lines, &mut clock, &mut stats).unwrap();
    stats
}

#[test]
fn slm_writes_four_entries_then_one_address_block_then_one_mac_block() {
    let (mut mc, log) = controller(false);
    // A 4-line hierarchy and no metadata cache to drain.
    let mut h = Horus::new(MacLevels::Single, 4, 0);
    let chv = h.layout(&mc);
    let s = drain(&mut h, &mut mc, &four_lines(false));
    let writes: Vec<u64> = log.borrow().iter().filter(|x| x.1 == AccessKind::Write).map(|x| x.0).collect();
    let d = |k: u64| chv.data_base + k * 64;
    assert_eq!(writes, vec![d(0), d(1), d(2), d(3), chv.addr_base, chv.mac_base]);
    assert_eq!(log.borrow().iter().filter(|x| x.1 == AccessKind::Read).count(), 0, "Horus reads no metadata");
    assert_eq!((h.regs.dc, h.regs.edc), (4, 4));
    assert_eq!((s.mac_ops.vault_data, s.mac_ops.vault_level2), (4, 0));
    assert_eq!((s.writes.vault_data, s.writes.vault_address, s.writes.vault_mac), (4, 1, 1));
    assert_eq!(s.aes_ops, 4);
}

#[test]
fn dlm_adds_one_second_level_mac_per_eight_lines_and_dc_keeps_growing_across_episodes() {
    let (mut mc, _) = controller(false);
    let mut h = Horus::new(MacLevels::Double, 16, 0);
    let lines: Vec<DrainLine> = (0..12u64).map(|i| DrainLine { line: i * 97, data: None, read_cycles: 2 }).collect();
    let s = drain(&mut h, &mut mc, &lines);
    // 12 lines: groups of 8 and 4 -> 2 second-level MACs, one MAC block, two address blocks.
    assert_eq!((s.mac_ops.vault_data, s.mac_ops.vault_level2), (12, 2));
    assert_eq!((s.writes.vault_address, s.writes.vault_mac), (2, 1));
    assert_eq!((h.regs.dc, h.regs.edc), (12, 12));
    // Recovery clears eDC, never DC; the next episode continues from DC.
    h.crash(&mut mc, false);
    h.recover_drained(&mut mc, Cycle(0)).unwrap();
    assert_eq!((h.regs.dc, h.regs.edc), (12, 0));
    drain(&mut h, &mut mc, &lines[..3]);
    assert_eq!((h.regs.dc, h.regs.edc), (15, 3));
}

#[test]
fn functional_drain_of_four_lines_recovers_them_in_reverse_order() {
    let (mut mc, _) = controller(true);
    for slm in [true, false] {
        let mut h = Horus::new(if slm { MacLevels::Single } else { MacLevels::Double }, 4, 0);
        let lines = four_lines(true);
        drain(&mut h, &mut mc, &lines);
        h.crash(&mut mc, false);
        let rec = h.recover_drained(&mut mc, Cycle(0)).unwrap();
        let want: Vec<(u64, Option<[u8; 64]>)> = lines.iter().rev().map(|l| (l.line, l.data)).collect();
        assert_eq!(rec.lines, want);
        assert_eq!(rec.hashes, 4 + if slm { 0 } else { 1 } + 1, "line MACs (+ DLM's group MAC) + the empty metadata tree's root");
    }
}

#[test]
fn vault_size_is_the_papers_formula_for_slm() {
    // Section IV-D: Size_CHV = 1.25 x Size_cache + 1.125 x Size_metadata_cache (Horus-SLM).
    let (cache, md) = (295_936u64, 16_384u64);
    let v = ChvLayout::new(0, cache, md, MacLevels::Single);
    assert_eq!(v.size_bytes() as f64, 1.25 * (cache * 64) as f64 + 1.125 * (md * 64) as f64);
    let d = ChvLayout::new(0, cache, md, MacLevels::Double);
    assert_eq!(d.size_bytes(), (cache + md) * 64 + (cache + md) / 8 * 64 + cache / 64 * 64);
}

/// `n` hierarchy lines, each with its own content in functional mode.
fn many_lines(n: u64, functional: bool) -> Vec<DrainLine> {
    let data = |i: u64| functional.then(|| std::array::from_fn(|b| (i * 7 + b as u64) as u8));
    (0..n).map(|i| DrainLine { line: i * 53 + 1, data: data(i), read_cycles: 2 }).collect()
}

#[test]
fn vault_areas_and_blocks_are_placed_from_a_nonzero_base() {
    // 100 lines + 20 metadata blocks: 120 entries, 15 address blocks, 13 SLM or 2 DLM MAC blocks.
    let base = 0x10000;
    let s = ChvLayout::new(base, 100, 20, MacLevels::Single);
    assert_eq!((s.data_base, s.addr_base, s.mac_base, s.end), (base, base + 120 * 64, base + 135 * 64, base + 148 * 64));
    assert_eq!((s.size_bytes(), s.entries, s.mac_entries), (148 * 64, 120, 100));
    assert_eq!([s.data_addr(0), s.data_addr(9)], [base, base + 9 * 64]);
    assert_eq!([s.addr_block(7), s.addr_block(8), s.addr_block(119)], [s.addr_base, s.addr_base + 64, s.addr_base + 14 * 64]);
    let single = |e| s.mac_block(e, MacLevels::Single);
    assert_eq!([single(7), single(8), single(99)], [s.mac_base, s.mac_base + 64, s.mac_base + 12 * 64]);
    let d = ChvLayout::new(base, 100, 20, MacLevels::Double);
    assert_eq!((d.mac_base, d.size_bytes()), (s.mac_base, 137 * 64));
    let double = |e| d.mac_block(e, MacLevels::Double);
    assert_eq!([double(63), double(64), double(99)], [d.mac_base, d.mac_base + 64, d.mac_base + 64]);
}

#[test]
fn horus_is_named_by_how_it_keeps_vault_macs() {
    assert_eq!(Horus::new(MacLevels::Single, 4, 0).name(), "horus-slm");
    assert_eq!(Horus::new(MacLevels::Double, 4, 0).name(), "horus-dlm");
}

#[test]
fn dirty_metadata_follows_the_lines_into_the_vault_with_addresses_and_no_vault_mac() {
    let (mut mc, log) = controller(false);
    write_some_lines(&mut mc);
    let m = mc.dirty_metadata().len() as u64;
    assert!(m > 8, "{m} dirty metadata blocks: more than one address block's worth");
    let mut h = Horus::new(MacLevels::Single, 16, 256);
    let chv = h.layout(&mc);
    let before = log.borrow().len();
    let s = drain(&mut h, &mut mc, &many_lines(10, false));
    assert_eq!(s.metadata_blocks, m);
    assert_eq!((s.writes.vault_data, s.writes.metadata_save, s.writes.vault_address, s.writes.vault_mac), (10, m, (10 + m).div_ceil(8), 2));
    assert_eq!((s.mac_ops.vault_data, s.mac_ops.metadata_protect, s.aes_ops), (10, cache_tree::hash_count(m), 10 + m));
    assert_eq!((h.regs.dc, h.regs.edc, h.regs.metadata_blocks), (10 + m, 10 + m, m));
    let entries: Vec<u64> = log.borrow()[before..].iter().filter(|x| x.0 < chv.addr_base).map(|x| x.0).collect();
    assert_eq!(entries, (0..10 + m).map(|k| chv.data_addr(k)).collect::<Vec<u64>>(), "lines, then metadata blocks, one entry each");
}

#[test]
fn seventy_lines_and_the_dirty_metadata_come_back_and_lines_written_before_the_drain_read_back() {
    for levels in [MacLevels::Single, MacLevels::Double] {
        let (mut mc, _) = controller(true);
        let written = write_some_lines(&mut mc);
        // 70 lines: 9 address blocks' worth, two DLM MAC blocks.
        let mut h = Horus::new(levels, 128, 256);
        let lines = many_lines(70, true);
        let md = drain(&mut h, &mut mc, &lines).metadata_blocks;
        assert!(md > 8, "{md} metadata blocks");
        h.crash(&mut mc, false);
        let rec = h.recover_drained(&mut mc, Cycle(0)).unwrap();
        let want: Vec<(u64, Option<[u8; 64]>)> = lines.iter().rev().map(|l| (l.line, l.data)).collect();
        assert_eq!(rec.lines, want, "{levels:?}");
        assert_eq!((rec.lines_restored, rec.metadata_restored), (70, md));
        // Their counters were dirty on chip when power failed: only the vault has them.
        for (line, bytes) in written {
            assert_eq!(mc.read_line(line, Cycle(1_000_000)).unwrap().1, Some(bytes), "{levels:?}: line {line}");
        }
        assert_eq!((h.regs.edc, h.regs.metadata_blocks), (0, 0));
    }
}

#[test]
fn a_drained_vault_with_a_flipped_bit_fails_recovery() {
    for levels in [MacLevels::Single, MacLevels::Double] {
        let chv = Horus::new(levels, 16, 256).layout(&controller(true).0);
        let (line_class, mac_bit) = match levels {
            // Slot 3 of the MAC block: entry 3's MAC.
            MacLevels::Single => ("vault-data-mac", 3 * 64 + 1),
            // Slot 0: the second-level MAC of the first group of 8.
            MacLevels::Double => ("vault-level2-mac", 1),
        };
        // Entry 3's ciphertext, its address slot, its MAC, a metadata entry's bytes and its
        // address slot (10 lines drained: entry 12 is the third metadata block).
        let cases = [
            ("data", chv.data_addr(3), 100, line_class),
            ("address", chv.addr_block(3), 3 * 64 + 5, line_class),
            ("mac", chv.mac_base, mac_bit, line_class),
            ("metadata", chv.data_addr(12), 7, "metadata-tree"),
            ("metadata address", chv.addr_block(12), 4 * 64 + 2, "metadata-tree"),
        ];
        for (what, addr, bit, class) in cases {
            let (mut mc, _) = controller(true);
            write_some_lines(&mut mc);
            let mut h = Horus::new(levels, 16, 256);
            drain(&mut h, &mut mc, &many_lines(10, true));
            flip_bit(&mut mc, addr, bit);
            h.crash(&mut mc, false);
            let e = h.recover_drained(&mut mc, Cycle(0)).expect_err(what);
            assert_eq!(e.class, class, "{levels:?}, {what}: {e}");
        }
    }
}

#[test]
fn the_last_mac_block_is_written_one_mac_after_the_last_ciphertext_two_under_dlm() {
    // Lines leave the caches at 2, 4, 6, 8; each ciphertext is ready one AES (40) and one XOR
    // cycle later, and a write takes 300: the last data and address writes end at 349. The MAC
    // block waits one MAC (160) more under SLM, two (the second-level MAC) under DLM.
    for (levels, done) in [(MacLevels::Single, 509), (MacLevels::Double, 669)] {
        let (mut mc, _) = controller(false);
        let mut h = Horus::new(levels, 4, 0);
        let mut clock = DrainClock::new(4, Cycle(0));
        h.drain(&mut mc, &four_lines(false), &mut clock, &mut DrainStats::default()).unwrap();
        assert_eq!(clock.last_done, Cycle(done), "{levels:?}");
    }
}

#[test]
fn with_writes_faster_than_hashing_the_drain_ends_when_the_metadata_tree_root_is_computed() {
    let (mut mc, _) = controller_writing_in(false, 1);
    write_some_lines(&mut mc);
    let mut h = Horus::new(MacLevels::Single, 4, 256);
    let mut clock = DrainClock::new(4, Cycle(0));
    let mut stats = DrainStats::default();
    h.drain(&mut mc, &four_lines(false), &mut clock, &mut stats).unwrap();
    let md = stats.metadata_blocks;
    assert!(md > 8, "{md} metadata blocks: a tree of more than one level");
    // After the last block leaves, the tree's levels hash one after another, then the root.
    assert_eq!(clock.last_done, clock.now() + Cycle((cache_tree::height(md) as u64 + 1) * 160));
}

#[test]
fn recovery_reads_each_vault_block_once_and_reports_its_work_and_time_whenever_it_starts() {
    for levels in [MacLevels::Single, MacLevels::Double] {
        let (mut mc, _) = controller(false);
        write_some_lines(&mut mc);
        let mut h = Horus::new(levels, 128, 256);
        let md = drain(&mut h, &mut mc, &many_lines(70, false)).metadata_blocks;
        assert!(md > 8, "{md} metadata blocks");
        h.crash(&mut mc, false);
        let rec = h.recover_drained(&mut mc, Cycle(1000)).unwrap();
        let total = 70 + md;
        let (mac_blocks, level2, macs_in_line) = match levels {
            MacLevels::Single => (70u64.div_ceil(8), 0, 1),
            MacLevels::Double => (70u64.div_ceil(64), 70u64.div_ceil(8), 2),
        };
        assert_eq!(rec.blocks_read, total + total.div_ceil(8) + mac_blocks, "{levels:?}: entries, address blocks, MAC blocks");
        assert_eq!((rec.aes_ops, rec.hashes), (total, 70 + level2 + cache_tree::hash_count(md)), "{levels:?}");
        assert_eq!((rec.lines_restored, rec.metadata_restored, rec.lines.len()), (70, md, 70));
        // Every read is issued at once and takes 100; a MAC (two under DLM) and an AES follow
        // the last, then the metadata tree's levels and its root binding.
        let tree = (cache_tree::height(md) as u64 + 1) * 160;
        assert_eq!(rec.cycles, 100 + macs_in_line * 160 + 40 + tree, "{levels:?}");
        // One block at a time: every read, every decryption and MAC, then the tree.
        assert_eq!(rec.serial_cycles, rec.blocks_read * 100 + total * 40 + (70 + level2) * 160 + tree, "{levels:?}");
    }
}

proptest! {
    /// Every line is drained exactly once, and the vault writes are ceil(n/8) address blocks
    /// and ceil(n/8) (SLM) or ceil(n/64) (DLM) MAC blocks.
    #[test]
    fn each_line_drained_once_and_block_counts_follow_the_ceil_formula(n in 1usize..200, dlm: bool) {
        let (mut mc, log) = controller(false);
        let levels = if dlm { MacLevels::Double } else { MacLevels::Single };
        let mut h = Horus::new(levels, 256, 0);
        let chv = h.layout(&mc);
        let lines: Vec<DrainLine> = (0..n as u64).map(|i| DrainLine { line: i * 131 + 7, data: None, read_cycles: 1 }).collect();
        let s = drain(&mut h, &mut mc, &lines);
        let n = n as u64;
        prop_assert_eq!(s.writes.vault_data, n);
        prop_assert_eq!(s.writes.vault_address, n.div_ceil(8));
        prop_assert_eq!(s.writes.vault_mac, if dlm { n.div_ceil(64) } else { n.div_ceil(8) });
        let mut data_writes: Vec<u64> = log.borrow().iter().filter(|x| x.1 == AccessKind::Write && x.0 < chv.addr_base).map(|x| x.0).collect();
        data_writes.sort_unstable();
        data_writes.dedup();
        prop_assert_eq!(data_writes.len() as u64, n);
    }
}
