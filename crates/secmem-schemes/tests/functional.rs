//! Functional mode at the controller: real bytes, real crypto, crash and recovery.

use secmem_core::cache::CacheConfig;
use secmem_core::Cycle;
use secmem_crypto::PadReuseDetector;
use secmem_schemes::config::*;
use secmem_schemes::testing::FixedLatencyMedia;
use secmem_schemes::{IntegrityError, SecureMc};

const MEM: u64 = 64 * 4096;

fn mc(update: TreeUpdate, persist: MetadataPersistence) -> SecureMc { mc_init(update, persist, CounterInit::Zero) }

fn mc_init(update: TreeUpdate, persist: MetadataPersistence, counter_init: CounterInit) -> SecureMc {
    let sec = SecurityConfig { metadata_persistence: persist, counter_init, ..Default::default() };
    let caches = MetadataCachesConfig {
        counter: CacheConfig::new(1, 16, 2),
        mac: CacheConfig::new(1, 16, 2),
        tree: CacheConfig::new(1, 16, 2), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared,};
    let mut m = SecureMc::new_functional(&sec, &TreeConfig { arity: 8, update, ..TreeConfig::default() }, &caches, MEM, Box::new(FixedLatencyMedia::new(100, 300, 1 << 30)), 42).unwrap();
    m.func.as_mut().unwrap().reuse = Some(PadReuseDetector::new());
    m
}

fn content(line: u64, v: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[..8].copy_from_slice(&line.to_le_bytes());
    b[8..16].copy_from_slice(&v.to_le_bytes());
    b
}

#[test]
fn reads_return_what_was_last_written_through_evictions_and_overflows() {
    for (update, init) in [(TreeUpdate::Lazy, CounterInit::Zero), (TreeUpdate::Eager, CounterInit::Zero), (TreeUpdate::Lazy, CounterInit::Random), (TreeUpdate::Eager, CounterInit::Random)] {
        let mut m = mc_init(update, MetadataPersistence::WriteBack, init);
        let mut oracle = std::collections::HashMap::new();
        for i in 0..6000u64 {
            // Hot line 3 overflows its minor many times; the rest spread over all pages.
            let line = if i % 3 == 0 { 3 } else { (i * 2654435761) % (MEM / 64) };
            m.write_line(line, Some(&content(line, i)), Cycle(i * 10)).unwrap();
            oracle.insert(line, content(line, i));
        }
        assert!(m.stats.counter_overflows > 10);
        for (line, want) in &oracle {
            assert_eq!(m.read_line(*line, Cycle(1 << 30)).unwrap().1.unwrap(), *want, "{update:?} {init:?} line {line}");
        }
        let never = (0..MEM / 64).find(|l| !oracle.contains_key(l)).expect("some line was never written");
        assert_eq!(m.read_line(never, Cycle(1 << 30)).unwrap().1.unwrap(), [0; 64], "never written reads as zeros");
        assert!(m.func.as_ref().unwrap().reuse_violation.is_none());
    }
}

#[test]
fn no_pad_is_reused_across_a_crash_and_recovery() {
    for init in [CounterInit::Zero, CounterInit::Random] {
        no_pad_is_reused_across_a_crash_and_recovery_with(init);
    }
}

fn no_pad_is_reused_across_a_crash_and_recovery_with(init: CounterInit) {
    let mut m = mc_init(TreeUpdate::Eager, MetadataPersistence::Strict, init);
    for i in 0..3000u64 {
        let line = (i * 7) % 512;
        m.write_line(line, Some(&content(line, i)), Cycle(i * 10)).unwrap();
    }
    m.crash(false);
    secmem_schemes::controller::recovery::rebuild_and_verify(&mut m, Cycle(0)).unwrap();
    // The detector saw every pad before the crash; writes after recovery continue from the
    // persisted counters and must not repeat any of them.
    for i in 0..3000u64 {
        let line = (i * 7) % 512;
        m.write_line(line, Some(&content(line, i + 10_000)), Cycle(1 << 20)).unwrap();
        assert_eq!(m.read_line(line, Cycle(1 << 21)).unwrap().1.unwrap(), content(line, i + 10_000));
    }
    assert!(m.func.as_ref().unwrap().reuse_violation.is_none(), "{:?}", m.func.as_ref().unwrap().reuse_violation);
}

#[test]
fn a_lazy_crash_that_loses_counters_would_reuse_pads_and_the_detector_says_so() {
    // Lazy write-back metadata: the counter cache is lost in the crash, so counters restart
    // from stale NVM values (recovery is skipped here on purpose) and pads repeat.
    let mut m = mc(TreeUpdate::Lazy, MetadataPersistence::WriteBack);
    for i in 0..200u64 {
        m.write_line(5, Some(&content(5, i)), Cycle(i * 10)).unwrap();
    }
    m.crash(false);
    let _ = m.write_line(5, Some(&content(5, 999)), Cycle(1 << 20));
    assert!(m.func.as_ref().unwrap().reuse_violation.is_some());
}

#[test]
fn tampered_counter_in_nvm_is_reported_as_a_counter_failure_with_its_address() {
    let mut m = mc(TreeUpdate::Eager, MetadataPersistence::Strict);
    m.write_line(70, Some(&content(70, 1)), Cycle(0)).unwrap();
    m.flush_metadata(Cycle(10)).unwrap();
    m.crash(false);
    secmem_schemes::controller::recovery::rebuild_and_verify(&mut m, Cycle(0)).unwrap();
    let caddr = m.layout.counter_addr(1);
    let f = m.func.as_mut().unwrap();
    let mut b = f.image.get(caddr >> 6);
    b[9] ^= 4;
    f.image.put(caddr >> 6, b);
    assert_eq!(m.read_line(70, Cycle(0)).unwrap_err(), IntegrityError::CounterBlock { page: 1, addr: caddr });
}

#[test]
fn recovery_names_the_first_bad_node_when_a_persisted_counter_is_replayed() {
    let mut m = mc(TreeUpdate::Eager, MetadataPersistence::Strict);
    m.write_line(70, Some(&content(70, 1)), Cycle(0)).unwrap();
    let caddr = m.layout.counter_addr(1) >> 6;
    let old = m.func.as_ref().unwrap().image.get(caddr);
    m.write_line(70, Some(&content(70, 2)), Cycle(100)).unwrap();
    m.crash(false);
    m.func.as_mut().unwrap().image.put(caddr, old);
    let e = secmem_schemes::controller::recovery::rebuild_and_verify(&mut m, Cycle(0)).unwrap_err();
    assert!(e.first_bad.starts_with("tree level 1 index 0"), "{e}");
}

// ---------------------------------------------------------------- random initial counters

fn random() -> SecureMc { mc_init(TreeUpdate::Eager, MetadataPersistence::Strict, CounterInit::Random) }

#[test]
fn under_random_counter_init_never_written_lines_read_as_zeros_and_verify() {
    let mut m = random();
    // Page 2 gets one written line; pages 3.. are never written at all.
    m.write_line(2 * 64 + 5, Some(&content(133, 1)), Cycle(0)).unwrap();
    let check_all = |m: &mut SecureMc, when: &str| {
        for line in (2 * 64..6 * 64).filter(|&l| l != 2 * 64 + 5) {
            assert_eq!(m.read_line(line, Cycle(1 << 20)).unwrap().1.unwrap(), [0; 64], "{when}: line {line}");
        }
        assert_eq!(m.read_line(2 * 64 + 5, Cycle(1 << 20)).unwrap().1.unwrap(), content(133, 1), "{when}");
    };
    check_all(&mut m, "warm");
    m.drop_metadata_caches();
    check_all(&mut m, "cold caches: every counter block fetched and verified from its boot bytes");
    m.crash(false);
    secmem_schemes::controller::recovery::rebuild_and_verify(&mut m, Cycle(0)).unwrap();
    check_all(&mut m, "after crash and recovery");
    // The boot bytes of a never-written counter block are its initial block's encoding, and
    // they are not stored: the image holds only what was written.
    let f = m.func.as_ref().unwrap();
    let caddr = m.layout.counter_addr(4) >> 6;
    assert!(!f.image.contains(caddr));
    assert_eq!(f.block_bytes(0, 4, caddr).0, m.counters.initial_block(4).encode(7));
    assert_ne!(m.counters.initial_block(4), secmem_core::counters::CounterBlock::default());
    assert!(f.reuse_violation.is_none());
}

#[test]
fn under_random_counter_init_zeroing_a_never_written_counter_block_or_line_is_caught() {
    // All zeros is no longer a block's boot content: a counter block replaced by zeros must
    // fail against its parent's entry 0 ("still at boot"), a data line replaced by zeros
    // against its boot MAC.
    let mut m = random();
    m.write_line(70, Some(&content(70, 1)), Cycle(0)).unwrap();
    let caddr = m.layout.counter_addr(3);
    m.func.as_mut().unwrap().image.put(caddr >> 6, [0; 64]);
    m.drop_metadata_caches();
    assert_eq!(m.read_line(3 * 64 + 1, Cycle(0)).unwrap_err(), IntegrityError::CounterBlock { page: 3, addr: caddr });
    let mut m = random();
    m.func.as_mut().unwrap().image.put(4 * 64 + 9, [0; 64]);
    assert_eq!(m.read_line(4 * 64 + 9, Cycle(0)).unwrap_err(), IntegrityError::DataMac { line: 4 * 64 + 9, addr: (4 * 64 + 9) << 6 });
    // And a line encrypted under counter (0, 0) instead of its initial counter is no boot
    // content either: only the initial counter opens it.
    let mut m = random();
    let line = (0..64).find(|&l| m.counters.counter_of_line(l).1 != 0).unwrap();
    let pad = m.func.as_ref().unwrap().keys.pad(line, 0, 0);
    m.func.as_mut().unwrap().image.put(line, pad);
    assert_eq!(m.read_line(line, Cycle(0)).unwrap_err(), IntegrityError::DataMac { line, addr: line << 6 });
}

#[test]
fn under_random_counter_init_a_line_overflows_after_127_minus_its_initial_minor_writes() {
    // Hand-worked on page 1's line with the highest initial minor: (127 - init) writes leave
    // no overflow, the next one bumps the major and re-encrypts the other 63 lines (each of
    // which still reads as zeros or its value afterwards, under fresh pads).
    let mut m = random();
    let line = (64..128u64).max_by_key(|&l| m.counters.counter_of_line(l).1).unwrap();
    let init = m.counters.counter_of_line(line).1;
    assert!(init > 100, "64 uniform 7-bit minors: the highest is well above 100 (it is {init})");
    m.write_line(64, Some(&content(64, 7)), Cycle(0)).unwrap();
    let line = if line == 64 { 65 } else { line };
    let init = m.counters.counter_of_line(line).1;
    for i in 0..(127 - init) as u64 {
        m.write_line(line, Some(&content(line, i)), Cycle(100 * (i + 1))).unwrap();
    }
    assert_eq!((m.stats.counter_overflows, m.counters.counter_of_line(line)), (0, (0, 127)));
    m.write_line(line, Some(&content(line, 999)), Cycle(1 << 20)).unwrap();
    assert_eq!((m.stats.counter_overflows, m.stats.reencrypted_lines), (1, 63));
    assert_eq!(m.counters.counter_of_line(line), (1, 0));
    for l in 64..128 {
        let want = if l == line { content(line, 999) } else if l == 64 { content(64, 7) } else { [0; 64] };
        assert_eq!(m.read_line(l, Cycle(1 << 21)).unwrap().1.unwrap(), want, "line {l}");
    }
    assert!(m.func.as_ref().unwrap().reuse_violation.is_none());
}

#[test]
fn a_functional_controller_refuses_minors_wider_than_a_64_byte_block_holds() {
    let caches = MetadataCachesConfig {
        counter: CacheConfig::new(1, 16, 2),
        mac: CacheConfig::new(1, 16, 2),
        tree: CacheConfig::new(1, 16, 2), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared,};
    let build = |bits: u32| {
        let sec = SecurityConfig { minor_counter_bits: bits, ..Default::default() };
        SecureMc::new_functional(&sec, &TreeConfig::default(), &caches, MEM, Box::new(FixedLatencyMedia::new(100, 300, 1 << 30)), 1)
    };
    let e = build(8).err().expect("8-bit minors accepted in functional mode");
    assert!(e.to_string().contains("security.minor_counter_bits"), "{e}");
    assert!(build(7).is_ok());
}
