//! Hand-worked Horus drains: a 4-line hierarchy, the exact vault block sequence, the drain
//! counters and the MAC counts of SLM and DLM; and the vault-size formula of section IV-D.

use proptest::prelude::*;
use secmem_core::cache::CacheConfig;
use secmem_core::Cycle;
use secmem_media::AccessKind;
use secmem_schemes::config::*;
use secmem_schemes::eadr::{DrainClock, DrainLine, DrainStats};
use secmem_schemes::horus::{ChvLayout, Horus, MacLevels};
use secmem_schemes::testing::{AccessLog, FixedLatencyMedia};
use secmem_schemes::{Design, SecureMc};

fn controller(functional: bool) -> (SecureMc, AccessLog) {
    let (media, log) = FixedLatencyMedia::recording(100, 300, 1 << 30);
    let media = Box::new(media);
    let sec = SecurityConfig::default();
    let tree = TreeConfig { arity: 8, update: TreeUpdate::Lazy };
    let caches = MetadataCachesConfig { counter: CacheConfig::new(4, 4, 2), mac: CacheConfig::new(4, 4, 2), tree: CacheConfig::new(4, 4, 2) };
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
