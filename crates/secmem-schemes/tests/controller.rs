//! Hand-worked examples of the secure memory controller, on a device with fixed latencies.

use proptest::prelude::*;
use secmem_core::cache::CacheConfig;
use secmem_core::Cycle;
use secmem_media::MemoryPort;
use secmem_media::TrafficClass as C;
use secmem_schemes::config::*;
use secmem_schemes::testing::FixedLatencyMedia;
use secmem_schemes::SecureMc;

/// 64 pages (256 KiB) at arity 8: counters(64) -> level 1 (8 nodes) -> root. Height 3.
const SMALL: u64 = 64 * 4096;

fn mc_with(update: TreeUpdate, counter_kib: u64, persist: MetadataPersistence, secure: bool) -> SecureMc {
    let sec = SecurityConfig { enabled: secure, metadata_persistence: persist, ..Default::default() };
    let tree = TreeConfig { arity: 8, update };
    let caches = MetadataCachesConfig {
        counter: CacheConfig::new(counter_kib, 16, 2),
        mac: CacheConfig::new(64, 16, 2),
        tree: CacheConfig::new(64, 16, 2),
    };
    SecureMc::new(&sec, &tree, &caches, SMALL, Box::new(FixedLatencyMedia::new(100, 300, 1 << 30)), 1).unwrap()
}

fn mc(update: TreeUpdate) -> SecureMc { mc_with(update, 64, MetadataPersistence::WriteBack, true) }

fn reads(m: &SecureMc, c: C) -> u64 { m.media.stats().reads_by_class[c as usize] }
fn writes(m: &SecureMc, c: C) -> u64 { m.media.stats().writes_by_class[c as usize] }

#[test]
fn small_tree_has_three_levels() {
    assert_eq!(mc(TreeUpdate::Lazy).layout.tree.nodes, vec![64, 8, 1]);
}

#[test]
fn first_write_fetches_counter_and_its_parent_and_verifies_both() {
    let mut m = mc(TreeUpdate::Lazy);
    m.write_line(0, None, Cycle(0)).unwrap();
    assert_eq!((reads(&m, C::Counter), reads(&m, C::Tree), reads(&m, C::Mac)), (1, 1, 1));
    assert_eq!(writes(&m, C::Data), 1);
    assert_eq!(m.stats.mac_ops.tree_verify, 2);
    assert_eq!(m.stats.mac_ops.tree_update, 0, "lazy: nothing propagates until eviction");
    // Second write to the same page: everything hits.
    m.write_line(1, None, Cycle(1000)).unwrap();
    assert_eq!(reads(&m, C::Counter) + reads(&m, C::Tree), 2);
}

#[test]
fn eager_update_hashes_every_level_up_to_the_root_on_each_write() {
    let mut m = mc(TreeUpdate::Eager);
    m.write_line(0, None, Cycle(0)).unwrap();
    m.write_line(64, None, Cycle(1000)).unwrap(); // page 1: same level-1 parent as page 0
    assert_eq!(m.stats.mac_ops.tree_update, 4, "2 writes x (level-1 node + root)");
    assert_eq!(m.stats.root_updates, 2);
    assert_eq!(reads(&m, C::Tree), 1, "the shared parent is fetched once");
}

#[test]
fn lazy_counter_eviction_writes_it_back_and_updates_its_parent_once() {
    // 1 KiB counter cache = 16 blocks in one set: the 17th page evicts the first (LRU).
    let mut m = mc_with(TreeUpdate::Lazy, 1, MetadataPersistence::WriteBack, true);
    for page in 0..17u64 {
        m.write_line(page * 64, None, Cycle(page * 1000)).unwrap();
    }
    assert_eq!(writes(&m, C::Counter), 1);
    assert_eq!(m.stats.mac_ops.tree_update, 1);
    assert_eq!(m.stats.counter_cache.dirty_evictions, 0, "stats are copied on snapshot");
    assert_eq!(m.snapshot().0.counter_cache.dirty_evictions, 1);
}

#[test]
fn eager_eviction_only_writes_back() {
    let mut m = mc_with(TreeUpdate::Eager, 1, MetadataPersistence::WriteBack, true);
    for page in 0..17u64 {
        m.write_line(page * 64, None, Cycle(page * 1000)).unwrap();
    }
    assert_eq!(writes(&m, C::Counter), 1);
    assert_eq!(m.stats.mac_ops.tree_update, 17 * 2, "only the per-write path updates");
}

#[test]
fn the_128th_write_to_a_line_overflows_and_reencrypts_the_other_63_lines() {
    let mut m = mc(TreeUpdate::Lazy);
    for i in 0..127u64 {
        m.write_line(5, None, Cycle(i * 1000)).unwrap();
    }
    assert_eq!(m.stats.counter_overflows, 0);
    m.write_line(5, None, Cycle(200_000)).unwrap();
    assert_eq!(m.stats.counter_overflows, 1);
    assert_eq!((reads(&m, C::Reencrypt), writes(&m, C::Reencrypt)), (63, 63));
    assert_eq!(m.stats.aes_ops.reencrypt, 126);
    assert_eq!(m.counters.counter_of_line(5), (1, 0));
}

#[test]
fn read_with_counter_hit_overlaps_pad_generation_with_the_data_fetch() {
    let mut m = mc(TreeUpdate::Lazy);
    m.read_line(0, Cycle(0)).unwrap(); // warms the counter and MAC
    let done = m.read_line(1, Cycle(10_000)).unwrap().0;
    // data 100 cycles; pad = hit (2) + AES (40) finishes earlier; +1 for the XOR.
    assert_eq!(done, Cycle(10_000 + 100 + 1));
}

#[test]
fn read_with_counter_miss_waits_for_counter_then_aes() {
    let mut m = mc(TreeUpdate::Lazy);
    let done = m.read_line(0, Cycle(0)).unwrap().0;
    // counter + parent fetched in parallel (100), verified (160), then AES (40), XOR (1).
    assert_eq!(done, Cycle(100 + 160 + 40 + 1));
}

#[test]
fn write_with_counter_miss_is_persistent_after_counter_pad_mac_and_the_device_write() {
    let mut m = mc(TreeUpdate::Lazy);
    let done = m.write_line(0, None, Cycle(0)).unwrap();
    // counter + parent fetched (100) and verified (160); pad (40) and XOR (1); MAC (160);
    // then the data write (300). The MAC block's fetch (100) is hidden behind the pad.
    assert_eq!(done, Cycle(100 + 160 + 40 + 1 + 160 + 300));
    assert_eq!((m.stats.write_latency.count, m.stats.write_latency.max), (1, 761));
}

#[test]
fn an_eager_write_completes_when_the_last_of_its_sequential_path_hashes_updates_the_root() {
    // 4096 pages (16 MiB) at arity 8: counters (4096) -> 512 -> 64 -> 8 -> root. The eager
    // path from a counter block to the root is four hashes, one after another, and with every
    // block cached they outlast the data write, so they decide when the write is done.
    let sec = SecurityConfig::default();
    let tree = TreeConfig { arity: 8, update: TreeUpdate::Eager };
    let caches = MetadataCachesConfig {
        counter: CacheConfig::new(64, 16, 2),
        mac: CacheConfig::new(64, 16, 2),
        tree: CacheConfig::new(64, 16, 2),
    };
    let media = Box::new(FixedLatencyMedia::new(100, 300, 1 << 30));
    let mut m = SecureMc::new(&sec, &tree, &caches, 4096 * 4096, media, 1).unwrap();
    assert_eq!(m.layout.tree.nodes, vec![4096, 512, 64, 8, 1]);
    m.write_line(0, None, Cycle(0)).unwrap(); // brings in the counter, MAC and path
    let now = 100_000u64;
    let done = m.write_line(1, None, Cycle(now)).unwrap();
    // Counter hit (2); the first hash waits for its parent's hit (2 more), the later parents
    // hit while earlier hashes run; then 4 hashes of 160. The data write alone would be done
    // after 2 + 40 + 1 (pad, XOR) + 160 (MAC) + 300 = 503 cycles.
    let ctr_at_cycles = 2;
    assert_eq!(done, Cycle(now + ctr_at_cycles + 2 + 4 * 160));
}

#[test]
fn non_secure_mode_sends_only_data_traffic() {
    let mut m = mc_with(TreeUpdate::Lazy, 64, MetadataPersistence::WriteBack, false);
    m.write_line(0, None, Cycle(0)).unwrap();
    m.read_line(64, Cycle(0)).unwrap();
    let s = m.media.stats();
    assert_eq!((s.reads(), s.writes()), (1, 1));
    assert_eq!(m.stats.mac_ops.total() + m.stats.aes_ops.total(), 0);
}

#[test]
fn strict_persistence_writes_counter_mac_and_path_through() {
    let mut m = mc_with(TreeUpdate::Eager, 64, MetadataPersistence::Strict, true);
    m.write_line(0, None, Cycle(0)).unwrap();
    assert_eq!((writes(&m, C::Data), writes(&m, C::Counter), writes(&m, C::Mac), writes(&m, C::Tree)), (1, 1, 1, 1));
    assert_eq!(m.counter_cache.dirty_count() + m.mac_cache.dirty_count() + m.tree_cache.dirty_count(), 0);
}

#[test]
fn strict_persistence_with_lazy_update_is_rejected() {
    let sec = SecurityConfig { metadata_persistence: MetadataPersistence::Strict, ..Default::default() };
    let e = SecureMc::new(&sec, &TreeConfig::default(), &MetadataCachesConfig::default(), SMALL,
        Box::new(FixedLatencyMedia::new(1, 1, 1 << 30)), 1).err().unwrap();
    assert_eq!(e.field, "security.metadata_persistence");
}

#[test]
fn flush_metadata_leaves_nothing_dirty() {
    let mut m = mc_with(TreeUpdate::Lazy, 1, MetadataPersistence::WriteBack, true);
    for page in 0..40u64 {
        m.write_line(page * 64 + 3, None, Cycle(page * 1000)).unwrap();
    }
    m.flush_metadata(Cycle(1_000_000)).unwrap();
    assert_eq!(m.counter_cache.dirty_count() + m.tree_cache.dirty_count() + m.mac_cache.dirty_count(), 0);
    assert!(m.stats.root_updates > 0);
}

proptest! {
    #[test]
    fn writes_to_n_distinct_pages_touch_at_least_n_counter_blocks(pages in proptest::collection::hash_set(0u64..64, 1..40)) {
        let mut m = mc_with(TreeUpdate::Lazy, 1, MetadataPersistence::WriteBack, true);
        for (i, p) in pages.iter().enumerate() {
            m.write_line(p * 64, None, Cycle(i as u64 * 1000)).unwrap();
        }
        let s = m.snapshot().0.counter_cache;
        prop_assert!(s.hits + s.misses >= pages.len() as u64);
        prop_assert_eq!(m.counters.pages_touched(), pages.len() as u64);
    }
}
