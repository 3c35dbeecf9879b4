//! Functional mode at the controller: real bytes, real crypto, crash and recovery.

use secmem_core::cache::CacheConfig;
use secmem_core::Cycle;
use secmem_crypto::PadReuseDetector;
use secmem_schemes::config::*;
use secmem_schemes::testing::FixedLatencyMedia;
use secmem_schemes::{IntegrityError, SecureMc};

const MEM: u64 = 64 * 4096;

fn mc(update: TreeUpdate, persist: MetadataPersistence) -> SecureMc {
    let sec = SecurityConfig { metadata_persistence: persist, ..Default::default() };
    let caches = MetadataCachesConfig {
        counter: CacheConfig::new(1, 16, 2),
        mac: CacheConfig::new(1, 16, 2),
        tree: CacheConfig::new(1, 16, 2),
    };
    let mut m = SecureMc::new_functional(&sec, &TreeConfig { arity: 8, update }, &caches, MEM, Box::new(FixedLatencyMedia::new(100, 300, 1 << 30)), 42).unwrap();
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
    for update in [TreeUpdate::Lazy, TreeUpdate::Eager] {
        let mut m = mc(update, MetadataPersistence::WriteBack);
        let mut oracle = std::collections::HashMap::new();
        for i in 0..6000u64 {
            // Hot line 3 overflows its minor many times; the rest spread over all pages.
            let line = if i % 3 == 0 { 3 } else { (i * 2654435761) % (MEM / 64) };
            m.write_line(line, Some(&content(line, i)), Cycle(i * 10)).unwrap();
            oracle.insert(line, content(line, i));
        }
        assert!(m.stats.counter_overflows > 10);
        for (line, want) in &oracle {
            assert_eq!(m.read_line(*line, Cycle(1 << 30)).unwrap().1.unwrap(), *want, "{update:?} line {line}");
        }
        let never = (0..MEM / 64).find(|l| !oracle.contains_key(l)).expect("some line was never written");
        assert_eq!(m.read_line(never, Cycle(1 << 30)).unwrap().1.unwrap(), [0; 64], "never written reads as zeros");
        assert!(m.func.as_ref().unwrap().reuse_violation.is_none());
    }
}

#[test]
fn no_pad_is_reused_across_a_crash_and_recovery() {
    let mut m = mc(TreeUpdate::Eager, MetadataPersistence::Strict);
    for i in 0..3000u64 {
        let line = (i * 7) % 512;
        m.write_line(line, Some(&content(line, i)), Cycle(i * 10)).unwrap();
    }
    m.crash(false);
    secmem_schemes::recovery::rebuild_and_verify(&mut m, Cycle(0)).unwrap();
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
    secmem_schemes::recovery::rebuild_and_verify(&mut m, Cycle(0)).unwrap();
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
    let e = secmem_schemes::recovery::rebuild_and_verify(&mut m, Cycle(0)).unwrap_err();
    assert!(e.first_bad.starts_with("tree level 1 index 0"), "{e}");
}
