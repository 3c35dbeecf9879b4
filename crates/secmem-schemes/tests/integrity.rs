//! Security checks of the controller and of recovery that the end-to-end campaigns do not
//! reach: attacks on the boot-content shortcut of data reads, recovery's naming of the first
//! bad node and its work report, and where the controller's device accesses go.

use secmem_core::cache::CacheConfig;
use secmem_core::Cycle;
use secmem_media::{AccessKind, MemoryPort, TrafficClass};
use secmem_schemes::config::*;
use secmem_schemes::controller::set_bits;
use secmem_schemes::controller::functional::NvmImage;
use secmem_schemes::controller::recovery::rebuild_and_verify;
use secmem_schemes::testing::{AccessLog, FixedLatencyMedia};
use secmem_schemes::{IntegrityError, SecureMc};

/// 64 pages at arity 8: counters (64) -> level 1 (8 nodes) -> root.
const MEM: u64 = 64 * 4096;

type Log = AccessLog;

fn build(functional: bool, update: TreeUpdate, persist: MetadataPersistence, cache_kib: u64) -> (SecureMc, Log) {
    build_arity(functional, update, persist, cache_kib, 8)
}

fn build_arity(functional: bool, update: TreeUpdate, persist: MetadataPersistence, cache_kib: u64, arity: u64) -> (SecureMc, Log) {
    let sec = SecurityConfig { metadata_persistence: persist, ..Default::default() };
    let caches = MetadataCachesConfig {
        counter: CacheConfig::new(cache_kib, 16, 2),
        mac: CacheConfig::new(cache_kib, 16, 2),
        tree: CacheConfig::new(cache_kib, 16, 2), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared,};
    let (media, log) = FixedLatencyMedia::recording(100, 300, 1 << 30);
    let media = Box::new(media);
    let tree = TreeConfig { arity, update, ..TreeConfig::default() };
    let m = if functional {
        SecureMc::new_functional(&sec, &tree, &caches, MEM, media, 42)
    } else {
        SecureMc::new(&sec, &tree, &caches, MEM, media, 42)
    };
    (m.unwrap(), log)
}

fn functional(update: TreeUpdate, persist: MetadataPersistence) -> SecureMc { build(true, update, persist, 64).0 }

fn content(line: u64, v: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[..8].copy_from_slice(&line.to_le_bytes());
    b[8..16].copy_from_slice(&v.to_le_bytes());
    b
}

/// Sets the MAC slot of `line` in the NVM image to `mac`.
fn put_mac(m: &mut SecureMc, line: u64, mac: u64) {
    let (addr, slot) = m.layout.mac_addr(line);
    let per_block = m.layout.macs_per_block;
    let f = m.func.as_mut().unwrap();
    let mut block = f.image.get(addr >> 6);
    set_bits(&mut block, slot, per_block, mac);
    f.image.put(addr >> 6, block);
}

// ---------------------------------------------------------------- the boot-content shortcut

#[test]
fn a_written_line_cut_out_of_nvm_with_its_mac_slot_zeroed_fails_its_mac_check() {
    // A line absent from NVM with a MAC slot of 0 is boot content only under its initial
    // counter: once its counter has advanced, the pair (no data, MAC 0) is an attack (the
    // written line removed, its MAC slot reset), and reading it must fail, not return zeros.
    let mut m = functional(TreeUpdate::Lazy, MetadataPersistence::WriteBack);
    m.write_line(70, Some(&content(70, 1)), Cycle(0)).unwrap();
    m.flush_metadata(Cycle(1000)).unwrap();
    m.drop_metadata_caches();
    let f = m.func.as_mut().unwrap();
    let mut kept = NvmImage::default();
    for (l, b) in f.image.iter().filter(|&(l, _)| l != 70) {
        kept.put(l, b);
    }
    f.image = kept;
    put_mac(&mut m, 70, 0);
    assert_ne!(m.counters.counter_of_line(70), (0, 0), "the write advanced the line's counter");
    assert_eq!(m.read_line(70, Cycle(2000)).unwrap_err(), IntegrityError::DataMac { line: 70, addr: 70 << 6 });
}

#[test]
fn a_forged_mac_for_a_never_written_line_is_detected() {
    // A never-written line's MAC slot must hold 0 (its boot MAC): any other value is a forged
    // MAC, and the read fails even though the line itself is still boot content.
    let mut m = functional(TreeUpdate::Lazy, MetadataPersistence::WriteBack);
    let line = 5 * 64 + 3;
    assert_eq!(m.read_line(line, Cycle(0)).unwrap().1.unwrap(), [0; 64]);
    m.drop_metadata_caches();
    put_mac(&mut m, line, 0x1234_5678);
    assert_eq!(m.read_line(line, Cycle(1000)).unwrap_err(), IntegrityError::DataMac { line, addr: line << 6 });
}

// ---------------------------------------------------------------- recovery

#[test]
fn recovery_names_the_lowest_leftmost_bad_node_after_matching_ones_and_stray_ones() {
    // Level 1 has 8 nodes, one per 8 pages. Pages 0 (node 0), 9 (node 1) and 40 (node 5) are
    // written; a stray node is planted at index 3 (whose pages were never written) and page
    // 40's counter block is replayed. Node 0 and 1 match, node 3 is the first that differs.
    let mut m = functional(TreeUpdate::Eager, MetadataPersistence::Strict);
    for (i, line) in [0u64, 9 * 64 + 1, 40 * 64 + 2].into_iter().enumerate() {
        m.write_line(line, Some(&content(line, 1)), Cycle(i as u64 * 1000)).unwrap();
    }
    let caddr = m.layout.counter_addr(40) >> 6;
    let old = m.func.as_ref().unwrap().image.get(caddr);
    m.write_line(40 * 64 + 2, Some(&content(40 * 64 + 2, 2)), Cycle(10_000)).unwrap();
    m.crash(false);
    let stray = m.layout.tree.node_addr(1, 3);
    let f = m.func.as_mut().unwrap();
    f.image.put(caddr, old);
    f.image.put(stray >> 6, [0xa5; 64]);
    let e = rebuild_and_verify(&mut m, Cycle(0)).unwrap_err();
    assert_eq!(e.first_bad, format!("tree level 1 index 3 (address {stray:#x})"), "{e}");
}

#[test]
fn what_does_a_failed_recovery_say_when_a_replayed_counter_block_leaves_a_stored_node_stale() {
    // docs/security.md "Recovery", step 3: the error reads "recovery failed closed: <why>;
    // first bad node: <node>". Page 40 belongs to level-1 node 40 / 8 = 5; replaying its
    // counter block makes the rebuilt node 5 differ from the stored one (nodes 0..4 are
    // never written, so absent in NVM and rebuilt as absent: they match).
    let mut m = functional(TreeUpdate::Eager, MetadataPersistence::Strict);
    let line = 40 * 64 + 2;
    m.write_line(line, Some(&content(line, 1)), Cycle(0)).unwrap();
    let caddr = m.layout.counter_addr(40) >> 6;
    let old = m.func.as_ref().unwrap().image.get(caddr);
    m.write_line(line, Some(&content(line, 2)), Cycle(1000)).unwrap();
    m.crash(false);
    m.func.as_mut().unwrap().image.put(caddr, old);
    let node = m.layout.tree.node_addr(1, 5);
    let e = rebuild_and_verify(&mut m, Cycle(0)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "recovery failed closed: the tree rebuilt from persisted counters does not match the on-chip root; \
             first bad node: tree level 1 index 5 (address {node:#x})"
        )
    );
}

#[test]
fn what_does_a_failed_recovery_name_when_every_stored_node_matches_but_the_root_register_does_not() {
    // Step 3: the first bad node is `root` when every stored node equals its rebuilt value.
    // NVM is consistent after a strict run; only the on-chip root register is altered.
    let mut m = functional(TreeUpdate::Eager, MetadataPersistence::Strict);
    m.write_line(70, Some(&content(70, 1)), Cycle(0)).unwrap();
    m.crash(false);
    m.func.as_mut().unwrap().root[0] ^= 1;
    let e = rebuild_and_verify(&mut m, Cycle(0)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "recovery failed closed: the tree rebuilt from persisted counters does not match the on-chip root; first bad node: root"
    );
}

#[test]
fn counting_mode_recovery_reports_the_same_reads_hashes_and_cycles_as_functional_mode() {
    // Counting mode has no bytes to rebuild from; its report must still be the work the
    // functional rebuild does over the same persisted counter blocks: the same device reads
    // (the counter blocks, by address), hashes, stored nodes compared, and cycles.
    let run = |functional: bool, arity: u64| {
        let (mut m, log) = build_arity(functional, TreeUpdate::Eager, MetadataPersistence::Strict, 64, arity);
        for i in 0..400u64 {
            let line = (i * 2654435761) % (MEM / 64);
            let data = content(line, i);
            m.write_line(line, functional.then_some(&data), Cycle(i * 1000)).unwrap();
        }
        m.crash(false);
        log.borrow_mut().clear();
        let report = rebuild_and_verify(&mut m, Cycle(1 << 30)).unwrap();
        let mut reads: Vec<(u64, AccessKind, TrafficClass)> = log.borrow().clone();
        reads.sort_unstable_by_key(|r| r.0);
        (report, reads)
    };
    // Arity 2 gives a tree of 7 levels, whose stored levels lie one above the other.
    for arity in [8, 2] {
        assert_eq!(run(false, arity), run(true, arity), "arity {arity}");
    }
    let (func, func_reads) = run(true, 8);
    // 400 scattered writes touch all 64 pages: 64 counter-block reads, 64 + 8 hashes, the 8
    // level-1 nodes compared, and one read latency plus the hashes one after another.
    assert_eq!((func.counter_blocks_read, func.hashes, func.nodes_read), (64, 72, 8));
    assert_eq!(func.cycles, 100 + 72 * 160);
    let m = build(false, TreeUpdate::Eager, MetadataPersistence::Strict, 64).0;
    let want: Vec<(u64, AccessKind, TrafficClass)> =
        (0..64).map(|p| (m.layout.counter_addr(p), AccessKind::Read, TrafficClass::Counter)).collect();
    assert_eq!(func_reads, want);
}

// ---------------------------------------------------------------- device addresses

#[test]
fn data_reads_and_writes_go_to_the_lines_own_address_and_evictions_to_the_blocks_address() {
    // 1 KiB metadata caches (16 blocks each): writes to 40 pages evict dirty counter blocks,
    // which must be written back to their own addresses (and lazily update their parents).
    let (mut m, log) = build(true, TreeUpdate::Lazy, MetadataPersistence::WriteBack, 1);
    for page in 0..40u64 {
        let line = page * 64 + 5;
        log.borrow_mut().clear();
        m.write_line(line, Some(&content(line, page)), Cycle(page * 10_000)).unwrap();
        let data: Vec<_> = log.borrow().iter().filter(|r| r.2 == TrafficClass::Data).copied().collect();
        assert_eq!(data, [(line << 6, AccessKind::Write, TrafficClass::Data)], "write of line {line}");
        for &(addr, kind, class) in log.borrow().iter().filter(|r| r.1 == AccessKind::Write && r.2 == TrafficClass::Counter) {
            assert_eq!(m.kind_of_key(addr >> 6), Some(secmem_schemes::MetaKind::Counter), "{kind:?} {class:?} {addr:#x}");
        }
    }
    assert!(m.media.stats().writes_by_class[TrafficClass::Counter as usize] > 0, "the counter cache overflowed");
    log.borrow_mut().clear();
    assert_eq!(m.read_line(7 * 64 + 5, Cycle(1 << 30)).unwrap().1.unwrap(), content(7 * 64 + 5, 7));
    let data: Vec<_> = log.borrow().iter().filter(|r| r.2 == TrafficClass::Data).copied().collect();
    assert_eq!(data, [((7 * 64 + 5) << 6, AccessKind::Read, TrafficClass::Data)]);
    // Every counter block written back holds what the counter store says.
    let first = m.layout.counter_base >> 6;
    let f = m.func.as_ref().unwrap();
    let persisted = f.image.lines_in(first, first + m.layout.counter_blocks);
    assert!(!persisted.is_empty());
    for line in persisted {
        let block = secmem_core::counters::CounterBlock::decode(&f.image.get(line), 7);
        assert_eq!(block.counter_of(5), (0, 1), "counter block of page {}", line - first);
    }
}

// ---------------------------------------------------------------- re-encryption and crashes

#[test]
fn a_crash_right_after_a_page_reencryption_under_strict_persistence_loses_no_new_mac() {
    // Page 0 fully written, then line 13 (in the page's second MAC block) written until its
    // minor overflows: the other 63 lines are re-encrypted in place, and strict persistence
    // must write every one of the page's MAC blocks through with them, not only the written
    // line's. A crash right after the write then recovers every line of the page.
    let (mut m, log) = build(true, TreeUpdate::Eager, MetadataPersistence::Strict, 64);
    for l in 0..64u64 {
        m.write_line(l, Some(&content(l, 0)), Cycle(l * 1000)).unwrap();
    }
    let mut v = 0u64;
    while m.stats.counter_overflows == 0 {
        v += 1;
        log.borrow_mut().clear();
        m.write_line(13, Some(&content(13, v)), Cycle((64 + v) * 1000)).unwrap();
    }
    assert_eq!((v, m.stats.reencrypted_lines, m.stats.mac_ops.reencrypt, m.stats.aes_ops.reencrypt), (127, 63, 63, 126));
    // Each of the other lines is read and written back at its own address.
    let mut reenc: Vec<(u64, bool)> =
        log.borrow().iter().filter(|r| r.2 == TrafficClass::Reencrypt).map(|r| (r.0, r.1 == AccessKind::Write)).collect();
    reenc.sort_unstable();
    let want: Vec<(u64, bool)> = (0..64u64).filter(|&l| l != 13).flat_map(|l| [(l << 6, false), (l << 6, true)]).collect();
    assert_eq!(reenc, want);
    // And each of the page's 8 MAC blocks is written through once.
    let mut macs: Vec<u64> = log.borrow().iter().filter(|r| r.1 == AccessKind::Write && r.2 == TrafficClass::Mac).map(|r| r.0).collect();
    macs.sort_unstable();
    assert_eq!(macs, (0..8u64).map(|b| m.layout.mac_addr(b * 8).0).collect::<Vec<_>>());
    m.crash(false);
    rebuild_and_verify(&mut m, Cycle(1 << 30)).unwrap();
    for l in 0..64u64 {
        let want = content(l, if l == 13 { v } else { 0 });
        assert_eq!(m.read_line(l, Cycle(1 << 31)).unwrap().1.unwrap(), want, "line {l}");
    }
}

// ---------------------------------------------------------------- metadata regions and drains

#[test]
fn every_device_line_is_classified_by_the_metadata_block_it_holds() {
    // Saved metadata is put back by its key: a key must be a counter block, MAC block or
    // stored tree node exactly when the layout places one there (data lines and lines past
    // the tree are none), at every region boundary.
    for arity in [8, 2] {
        let m = build_arity(false, TreeUpdate::Lazy, MetadataPersistence::WriteBack, 64, arity).0;
        let l = &m.layout;
        let counters: std::collections::HashSet<u64> = (0..l.counter_blocks).map(|p| l.counter_addr(p) >> 6).collect();
        let macs: std::collections::HashSet<u64> = (0..MEM / 64).map(|line| l.mac_addr(line).0 >> 6).collect();
        let nodes: std::collections::HashSet<u64> =
            (1..l.tree.root_level()).flat_map(|lvl| (0..l.tree.nodes[lvl]).map(move |i| l.tree.node_addr(lvl, i) >> 6)).collect();
        assert_eq!((counters.len() as u64, macs.len() as u64), (l.counter_blocks, l.mac_blocks));
        for key in 0..(l.end >> 6) + 64 {
            let want = if counters.contains(&key) {
                Some(secmem_schemes::MetaKind::Counter)
            } else if macs.contains(&key) {
                Some(secmem_schemes::MetaKind::Mac)
            } else if nodes.contains(&key) {
                Some(secmem_schemes::MetaKind::Tree)
            } else {
                None
            };
            assert_eq!(m.kind_of_key(key), want, "arity {arity} key {key:#x}");
        }
    }
}

#[test]
fn the_dirty_metadata_saved_at_a_crash_and_restored_reads_back_every_line() {
    // What an eADR drain does: save every dirty metadata block at power loss, lose the
    // caches, rebuild the counter view from NVM and put the saved blocks back. Every line
    // must then read back what was last written (lazy update: NVM alone is stale).
    let (mut m, _) = build(true, TreeUpdate::Lazy, MetadataPersistence::WriteBack, 1);
    m.func.as_mut().unwrap().reuse = Some(secmem_crypto::PadReuseDetector::new());
    let mut oracle = std::collections::BTreeMap::new();
    for i in 0..600u64 {
        let line = (i * 2654435761) % (MEM / 64);
        m.write_line(line, Some(&content(line, i)), Cycle(i * 1000)).unwrap();
        oracle.insert(line, content(line, i));
    }
    let saved = m.dirty_metadata();
    let dirty = m.counter_cache.dirty_count() + m.tree_cache.dirty_count() + m.mac_cache.dirty_count();
    assert!(dirty > 0);
    assert_eq!(saved.len(), dirty);
    for b in &saved {
        assert_eq!(m.kind_of_key(b.key), Some(b.kind), "{b:?}");
    }
    m.crash(false);
    m.load_counter_view_from_image();
    for b in saved {
        m.restore_metadata(b);
    }
    for (line, want) in &oracle {
        assert_eq!(m.read_line(*line, Cycle(1 << 30)).unwrap().1.unwrap(), *want, "line {line}");
    }
    // The counter view is back too: writes after recovery continue from the last counters
    // (no pad is used twice) and read back.
    for (i, line) in oracle.keys().copied().enumerate() {
        m.write_line(line, Some(&content(line, 1_000_000)), Cycle((1 << 30) + i as u64 * 1000)).unwrap();
        assert_eq!(m.read_line(line, Cycle(1 << 31)).unwrap().1.unwrap(), content(line, 1_000_000), "line {line}");
    }
    let f = m.func.as_ref().unwrap();
    assert!(f.reuse_violation.is_none(), "{:?}", f.reuse_violation);
}

#[test]
fn after_a_metadata_flush_a_crash_recovers_and_every_write_went_to_its_block() {
    // A lazily updated tree is consistent with NVM only after a flush that writes back every
    // dirty counter block, node and MAC block, children before parents, repeating while a
    // parent's fetch evicts a block already written. With 1 KiB metadata caches over 64
    // pages (and arity 2: a tall tree) the flush must take several passes; then the tree
    // rebuilt from NVM matches the root, and every line reads back.
    for arity in [8, 2] {
        let (mut m, log) = build_arity(true, TreeUpdate::Lazy, MetadataPersistence::WriteBack, 1, arity);
        let mut oracle = std::collections::BTreeMap::new();
        for i in 0..3000u64 {
            let line = (i * 2654435761) % (MEM / 64);
            m.write_line(line, Some(&content(line, i)), Cycle(i * 1000)).unwrap();
            oracle.insert(line, content(line, i));
        }
        log.borrow_mut().clear();
        m.flush_metadata(Cycle(1 << 30)).unwrap();
        assert_eq!(m.counter_cache.dirty_count() + m.tree_cache.dirty_count() + m.mac_cache.dirty_count(), 0, "arity {arity}");
        for &(addr, kind, class) in log.borrow().iter().filter(|r| r.1 == AccessKind::Write) {
            let want = match class {
                TrafficClass::Counter => secmem_schemes::MetaKind::Counter,
                TrafficClass::Mac => secmem_schemes::MetaKind::Mac,
                TrafficClass::Tree => secmem_schemes::MetaKind::Tree,
                _ => panic!("a flush writes metadata only: {kind:?} {class:?} {addr:#x}"),
            };
            assert_eq!(m.kind_of_key(addr >> 6), Some(want), "{class:?} write to {addr:#x}");
        }
        // Reads fetch (clean) counter blocks and nodes; a flush then has nothing to write.
        for page in 0..64u64 {
            m.read_line(page * 64 + 1, Cycle((1 << 30) + page)).unwrap();
        }
        log.borrow_mut().clear();
        m.flush_metadata(Cycle(1 << 31)).unwrap();
        assert_eq!(log.borrow().iter().filter(|r| r.1 == AccessKind::Write).count(), 0, "arity {arity}: a flush of clean metadata");
        m.crash(false);
        rebuild_and_verify(&mut m, Cycle(1 << 31)).unwrap_or_else(|e| panic!("arity {arity}: {e}"));
        for (line, want) in &oracle {
            assert_eq!(m.read_line(*line, Cycle(1 << 32)).unwrap().1.unwrap(), *want, "arity {arity} line {line}");
        }
    }
}

// ---------------------------------------------------------------- MAC slots

#[test]
fn each_mac_slot_of_every_width_reads_back_what_was_set_and_leaves_its_neighbours_alone() {
    // MACs of 8, 16, 32 and 64 bits are packed 64, 32, 16 and 8 to a block; setting one must
    // replace exactly its own bits (clearing ones as well as setting them).
    use secmem_schemes::controller::get_bits;
    for per_block in [8u64, 16, 32, 64] {
        let width = 512 / per_block;
        let mask = if width == 64 { u64::MAX } else { (1 << width) - 1 };
        let mut block = [0u8; 64];
        for (i, b) in block.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37) ^ 0x5c;
        }
        let mut want: Vec<u64> = (0..per_block as usize).map(|s| get_bits(&block, s, per_block)).collect();
        for step in 0..3 * per_block as usize {
            let slot = (step * 7) % per_block as usize;
            let v = (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(step as u64 + 1)) & mask;
            set_bits(&mut block, slot, per_block, v);
            want[slot] = v;
            let got: Vec<u64> = (0..per_block as usize).map(|s| get_bits(&block, s, per_block)).collect();
            assert_eq!(got, want, "{per_block} per block, step {step}");
        }
        // And the fields tile the block: all ones in every slot is a block of ones.
        for s in 0..per_block as usize {
            set_bits(&mut block, s, per_block, mask);
        }
        assert_eq!(block, [0xff; 64], "{per_block} per block");
    }
}

// ---------------------------------------------------------------- design building blocks

#[test]
fn a_lelantus_copy_and_a_write_to_it_under_strict_eager_persistence_survive_a_crash() {
    // Designs write data and change counter blocks through `write_line_under` and
    // `counter_block_updated`: under strict persistence with eager update those must hash the
    // new counters up to the root and write them through, as the baseline's writes do, so a
    // crash right after the copy, or right after a write to it, still recovers and reads back.
    use secmem_schemes::designs::Design;
    use secmem_schemes::designs::lelantus::{Encoding, Lelantus};
    use secmem_schemes::PageCommand;
    let (a, b) = (10u64, 20u64);
    for write_before_crash in [false, true] {
        let (mut m, log) = build(true, TreeUpdate::Eager, MetadataPersistence::Strict, 64);
        let mut d = Lelantus::new(Encoding::Resized);
        for i in 0..64u64 {
            d.write(&mut m, a * 64 + i, Some(&content(a * 64 + i, 1)), Cycle(i * 1000)).unwrap();
        }
        d.page_command(&mut m, PageCommand::Copy { src: a, dst: b }, Cycle(100_000)).unwrap();
        if write_before_crash {
            log.borrow_mut().clear();
            d.write(&mut m, b * 64 + 5, Some(&content(b * 64 + 5, 2)), Cycle(200_000)).unwrap();
            let data: Vec<_> = log.borrow().iter().filter(|r| r.2 == TrafficClass::Data).copied().collect();
            assert_eq!(data, [((b * 64 + 5) << 6, AccessKind::Write, TrafficClass::Data)], "the write goes to the copy's line");
        }
        d.crash(&mut m, false);
        d.recover(&mut m, Cycle(1 << 30)).unwrap();
        log.borrow_mut().clear();
        assert_eq!(d.read(&mut m, b * 64 + 6, Cycle(1 << 31)).unwrap().1.unwrap(), content(a * 64 + 6, 1));
        let data: Vec<_> = log.borrow().iter().filter(|r| r.2 == TrafficClass::Data).copied().collect();
        assert_eq!(data, [((a * 64 + 6) << 6, AccessKind::Read, TrafficClass::Data)], "an uncopied line is read from the source");
        for i in 0..64u64 {
            let want = if i == 5 && write_before_crash { content(b * 64 + 5, 2) } else { content(a * 64 + i, 1) };
            assert_eq!(d.read(&mut m, b * 64 + i, Cycle(1 << 31)).unwrap().1.unwrap(), want, "line {i} of the copy");
            assert_eq!(d.read(&mut m, a * 64 + i, Cycle(1 << 31)).unwrap().1.unwrap(), content(a * 64 + i, 1), "line {i} of the source");
        }
    }
}

/// Pages of the Lelantus tests below: `A` is copied to `B`.
const A: u64 = 10;
const B: u64 = 20;

/// A functional strict/eager controller with Lelantus (Resized): the first `lines` lines of
/// page `A` written, then `A` copied to `B`.
fn strict_lelantus_copy(lines: u64) -> (SecureMc, secmem_schemes::designs::lelantus::Lelantus) {
    use secmem_schemes::designs::Design;
    use secmem_schemes::designs::lelantus::{Encoding, Lelantus};
    let (mut m, _) = build(true, TreeUpdate::Eager, MetadataPersistence::Strict, 64);
    let mut d = Lelantus::new(Encoding::Resized);
    for i in 0..lines {
        d.write(&mut m, A * 64 + i, Some(&content(A * 64 + i, 1)), Cycle(i * 1000)).unwrap();
    }
    d.page_command(&mut m, secmem_schemes::PageCommand::Copy { src: A, dst: B }, Cycle(100_000)).unwrap();
    (m, d)
}

#[test]
fn a_resized_lelantus_copy_can_be_written_after_a_crash_and_recovery() {
    // Found by mutation testing, fixed by Lelantus' own `recover`. The baseline recovery alone
    // left the copy's counter view at major 2^63 + 1 (the COW flag read as part of the
    // major): the next write encrypted under it, its read decoded major 1 from the
    // verified bytes, and the MAC check failed on a run with no attack.
    use secmem_schemes::designs::Design;
    let (mut m, mut d) = strict_lelantus_copy(64);
    d.crash(&mut m, false);
    d.recover(&mut m, Cycle(1 << 30)).unwrap();
    assert_eq!(m.counters.block(B).major, 1, "the copy's major after recovery");
    assert_eq!(d.source_of(B), Some(A), "the copy record, rebuilt from the counter block");
    assert_eq!(d.read(&mut m, B * 64 + 9, Cycle(1 << 30)).unwrap().1.unwrap(), content(A * 64 + 9, 1), "an uncopied line");
    d.write(&mut m, B * 64 + 5, Some(&content(B * 64 + 5, 2)), Cycle(1 << 31)).unwrap();
    assert_eq!(d.read(&mut m, B * 64 + 5, Cycle(1 << 32)).unwrap().1.unwrap(), content(B * 64 + 5, 2));
}

#[test]
fn a_freed_lelantus_copy_leaves_nvm_consistent_with_the_root() {
    // Found by the OS-level crash campaign: page_free of a lazy copy rewrote its counter block
    // without its CoW fields but neither rehashed its tree path (eager) nor wrote it through
    // (strict). Once written back, NVM disagreed with the root register.
    use secmem_schemes::designs::Design;
    let (mut m, mut d) = strict_lelantus_copy(64);
    d.write(&mut m, B * 64 + 5, Some(&content(B * 64 + 5, 2)), Cycle(200_000)).unwrap();
    d.page_command(&mut m, secmem_schemes::PageCommand::Free { page: B }, Cycle(300_000)).unwrap();
    d.finish(&mut m, Cycle(400_000)).unwrap();
    d.crash(&mut m, false);
    d.recover(&mut m, Cycle(1 << 30)).unwrap();
    assert_eq!(d.source_of(B), None, "a freed page is no copy after recovery");
    assert_eq!(d.read(&mut m, A * 64 + 3, Cycle(1 << 31)).unwrap().1.unwrap(), content(A * 64 + 3, 1));
}

#[test]
fn materialising_a_fully_written_lelantus_copy_leaves_nvm_consistent_with_the_root() {
    // page_phyc of a copy whose every line was written since has no line to copy: it only
    // clears the CoW fields, and must still rehash and persist the block.
    use secmem_schemes::designs::Design;
    let (mut m, mut d) = strict_lelantus_copy(1);
    for i in 0..64u64 {
        d.write(&mut m, B * 64 + i, Some(&content(B * 64 + i, 2)), Cycle(200_000 + i * 1000)).unwrap();
    }
    d.page_command(&mut m, secmem_schemes::PageCommand::Materialize { page: B }, Cycle(300_000)).unwrap();
    d.finish(&mut m, Cycle(400_000)).unwrap();
    d.crash(&mut m, false);
    d.recover(&mut m, Cycle(1 << 30)).unwrap();
    assert_eq!(d.source_of(B), None, "a materialised page is no copy after recovery");
    assert_eq!(d.read(&mut m, B * 64 + 7, Cycle(1 << 31)).unwrap().1.unwrap(), content(B * 64 + 7, 2));
}

#[test]
fn freeing_a_source_materialises_every_copy_of_it_even_after_one_copy_went_private() {
    // The controller's own check of early reclamation (section III-D): page_free of a source
    // copies its remaining lazy copies for real. One copy (B) going private must not take the
    // other (C) off the source's list, or C would read the freed page's next content.
    use secmem_schemes::designs::Design;
    use secmem_schemes::PageCommand;
    const C: u64 = 30;
    let (mut m, mut d) = strict_lelantus_copy(64);
    d.page_command(&mut m, PageCommand::Copy { src: A, dst: C }, Cycle(150_000)).unwrap();
    d.page_command(&mut m, PageCommand::Materialize { page: B }, Cycle(200_000)).unwrap();
    d.page_command(&mut m, PageCommand::Free { page: A }, Cycle(300_000)).unwrap();
    assert_eq!(d.source_of(C), None, "C was materialised when its source was freed");
    // The freed frame is reused: new content everywhere.
    for i in 0..64u64 {
        d.write(&mut m, A * 64 + i, Some(&content(A * 64 + i, 9)), Cycle(400_000 + i * 1000)).unwrap();
    }
    for (page, what) in [(B, "B"), (C, "C")] {
        let got = d.read(&mut m, page * 64 + 11, Cycle(1 << 30)).unwrap().1.unwrap();
        assert_eq!(got, content(A * 64 + 11, 1), "{what} reads the source as it was when copied");
    }
}

#[test]
fn a_recovered_lelantus_cow_record_line_makes_copies_only_of_its_valid_records() {
    // Lelantus-CoW keeps 8 records per line; recovery must take only the slots marked valid.
    // Page B + 1 shares B's record line but was never copied: after recovery its never-written
    // lines read as zeros (its own boot content), not as page 0's.
    use secmem_schemes::designs::Design;
    use secmem_schemes::designs::lelantus::{Encoding, Lelantus};
    use secmem_schemes::PageCommand;
    let (mut m, _) = build(true, TreeUpdate::Eager, MetadataPersistence::Strict, 64);
    let mut d = Lelantus::new(Encoding::Supplementary);
    for (page, v) in [(0u64, 5u64), (A, 1)] {
        for i in 0..64u64 {
            d.write(&mut m, page * 64 + i, Some(&content(page * 64 + i, v)), Cycle(i * 1000)).unwrap();
        }
    }
    d.page_command(&mut m, PageCommand::Copy { src: A, dst: B }, Cycle(100_000)).unwrap();
    d.crash(&mut m, false);
    let rep = d.recover(&mut m, Cycle(1 << 30)).unwrap();
    // Its time is its own (reading the record lines included), not the clock it started at.
    assert!(rep.cycles > 0 && rep.cycles < 1 << 20, "{rep:?}");
    assert_eq!((d.source_of(B), d.source_of(B + 1)), (Some(A), None));
    // B + 1 first: its read misses the CoW cache and decodes the record line it fetches.
    assert_eq!(d.read(&mut m, (B + 1) * 64 + 3, Cycle(1 << 31)).unwrap().1.unwrap(), [0; 64]);
    assert_eq!(d.read(&mut m, B * 64 + 3, Cycle(1 << 31)).unwrap().1.unwrap(), content(A * 64 + 3, 1));
}

#[test]
fn lelantus_cow_carves_its_32_kib_cow_cache_out_of_the_counter_cache() {
    // Section V-A: a 32 KB CoW cache taken from the 256 KB counter cache (16 ways each).
    use secmem_schemes::designs::Design;
    use secmem_schemes::designs::lelantus::{Encoding, Lelantus};
    let (mut m, _) = build(false, TreeUpdate::Lazy, MetadataPersistence::WriteBack, 256);
    assert_eq!(m.counter_cache.capacity_lines(), 4096);
    let mut d = Lelantus::new(Encoding::Supplementary);
    d.read(&mut m, 0, Cycle(0)).unwrap();
    assert_eq!((m.counter_cache.capacity_lines(), d.cow_cache_lines()), (4096 - 512, 512));
    let mut r = Lelantus::new(Encoding::Resized);
    let (mut m, _) = build(false, TreeUpdate::Lazy, MetadataPersistence::WriteBack, 256);
    r.read(&mut m, 0, Cycle(0)).unwrap();
    assert_eq!((m.counter_cache.capacity_lines(), r.cow_cache_lines()), (4096, 0), "Lelantus keeps its source in the counter block");
}

#[test]
fn the_lelantus_cow_record_region_is_the_top_512th_of_data_memory() {
    use secmem_schemes::designs::lelantus::record_region_first_line;
    // One 8 B record per 4 KB page: a 64 B record line per 512 data lines, rounded up.
    assert_eq!(record_region_first_line(1 << 24), (1 << 24) - (1 << 15));
    assert_eq!(record_region_first_line(1000), 998);
}

#[test]
fn a_regular_resized_page_keeps_minors_past_63_through_a_crash() {
    // Only a CoW page's block has 6-bit minors: recovery must decode a regular page's block
    // with 7-bit ones, or a minor of 70 comes back as 6 and the next write reuses a pad.
    use secmem_schemes::designs::Design;
    let (mut m, mut d) = strict_lelantus_copy(1);
    for v in 0..70u64 {
        d.write(&mut m, A * 64, Some(&content(A * 64, v + 10)), Cycle(200_000 + v * 1000)).unwrap();
    }
    let before = m.counters.block(A);
    assert_eq!(before.minors[0], 71);
    d.crash(&mut m, false);
    d.recover(&mut m, Cycle(1 << 30)).unwrap();
    assert_eq!(m.counters.block(A), before);
    d.write(&mut m, A * 64, Some(&content(A * 64, 99)), Cycle(1 << 31)).unwrap();
    assert_eq!(d.read(&mut m, A * 64, Cycle(1 << 32)).unwrap().1.unwrap(), content(A * 64, 99));
}


// ---------------------------------------------------------------- hash memos

#[test]
fn a_fetched_block_without_a_memo_is_hashed_and_that_hash_memoised_on_its_own_line() {
    // verify_chain hashes a fetched block that has no memo and records the hash as that
    // block's memo (nvm_image module docs: a refetch of the unchanged block need not hash it
    // again). The memo must be exactly the block's tree entry, on the block's own line.
    let mut m = functional(TreeUpdate::Lazy, MetadataPersistence::WriteBack);
    let line = 9 * 64 + 1; // page 9, under level-1 node 1
    m.write_line(line, Some(&content(line, 1)), Cycle(0)).unwrap();
    m.flush_metadata(Cycle(1000)).unwrap();
    m.drop_metadata_caches();
    let counter_key = m.layout.counter_addr(9) >> 6;
    let node_key = m.layout.tree.node_addr(1, 1) >> 6;
    let f = m.func.as_mut().unwrap();
    let tag = f.memo_tag();
    // Writing a line clears its memo (the write-back above memoised both blocks): putting the
    // same bytes back leaves blocks the next read must hash.
    for key in [counter_key, node_key] {
        let b = f.image.get(key);
        f.image.put(key, b);
        assert_eq!(f.image.get_opt_with_memo(key, &tag).1, 0);
    }
    m.read_line(line, Cycle(2000)).unwrap();
    let f = m.func.as_ref().unwrap();
    for (level, index, key) in [(0, 9, counter_key), (1, 1, node_key)] {
        let (bytes, memo) = f.image.get_opt_with_memo(key, &tag);
        let entry = f.child_entry(level, index, &bytes.unwrap());
        assert_ne!(entry, 0, "level {level}: a written block's entry is never 0");
        assert_eq!(memo, entry, "level {level}");
    }
}

#[test]
fn a_lazily_written_back_block_is_memoised_with_the_hash_its_parent_took() {
    // A lazy write-back persists a counter block or node (which clears its memo) and hashes
    // it into its parent: that hash is the block's memo, so a refetch need not hash it again.
    let mut m = functional(TreeUpdate::Lazy, MetadataPersistence::WriteBack);
    let line = 9 * 64 + 1; // page 9, under level-1 node 1
    m.write_line(line, Some(&content(line, 1)), Cycle(0)).unwrap();
    m.flush_metadata(Cycle(1000)).unwrap();
    let f = m.func.as_ref().unwrap();
    let tag = f.memo_tag();
    for (level, index, key) in [(0, 9, m.layout.counter_addr(9) >> 6), (1, 1, m.layout.tree.node_addr(1, 1) >> 6)] {
        let (bytes, memo) = f.image.get_opt_with_memo(key, &tag);
        assert_eq!(memo, f.child_entry(level, index, &bytes.expect("written back")), "level {level}");
    }
}

#[test]
fn the_persist_data_before_counter_canary_leaves_only_the_counter_block_unpersisted() {
    // The planted bug must be exactly the one its name says: under strict persistence the
    // MAC block is still written through and left clean, the counter block is left dirty.
    let mut m = functional(TreeUpdate::Eager, MetadataPersistence::Strict);
    m.func.as_mut().unwrap().canaries.persist_data_before_counter = true;
    m.write_line(3, Some(&content(3, 1)), Cycle(0)).unwrap();
    assert_eq!((m.counter_cache.dirty_count(), m.mac_cache.dirty_count()), (1, 0));
}

#[test]
fn the_skip_counter_verification_canary_skips_only_counter_blocks() {
    // With the planted bug a forged counter block passes the tree and only the data MAC check
    // (which covers the counter) stops the read; a forged tree node is still caught.
    let mut m = functional(TreeUpdate::Lazy, MetadataPersistence::WriteBack);
    m.func.as_mut().unwrap().canaries.skip_counter_verification = true;
    let line = 9 * 64 + 1; // page 9, under level-1 node 1
    m.write_line(line, Some(&content(line, 1)), Cycle(0)).unwrap();
    m.flush_metadata(Cycle(1000)).unwrap();
    m.drop_metadata_caches();
    let (counter, node) = (m.layout.counter_addr(9), m.layout.tree.node_addr(1, 1));
    secmem_schemes::testing::flip_bit(&mut m, counter, 0);
    assert!(matches!(m.read_line(line, Cycle(2000)), Err(IntegrityError::DataMac { .. })));
    m.drop_metadata_caches();
    secmem_schemes::testing::flip_bit(&mut m, counter, 0); // restored
    secmem_schemes::testing::flip_bit(&mut m, node, 0);
    assert!(matches!(m.read_line(line, Cycle(3000)), Err(IntegrityError::TreeNode { level: 1, .. })));
}

#[test]
fn a_design_reads_a_cached_counter_block_as_its_verified_bytes_in_functional_mode_only() {
    // Lelantus and Silent Shredder take a line's counter from these bytes (what the tree
    // verified) and fall back to the counter store only in counting mode, which has no bytes.
    let mut m = functional(TreeUpdate::Lazy, MetadataPersistence::WriteBack);
    m.write_line(3 * 64 + 5, Some(&content(3 * 64 + 5, 1)), Cycle(0)).unwrap();
    let bytes = m.counter_payload(3).expect("cached, with its bytes");
    assert_eq!(bytes, m.counters.block(3).encode(7));
    assert_eq!(secmem_core::counters::CounterBlock::decode_one(&bytes, 5, 7), (0, 1));
    let (mut counting, _) = build(false, TreeUpdate::Lazy, MetadataPersistence::WriteBack, 64);
    counting.write_line(3 * 64 + 5, None, Cycle(0)).unwrap();
    assert_eq!(counting.counter_payload(3), None);
}
