//! Hand-worked examples of the secure memory controller, on a device with fixed latencies.

use proptest::prelude::*;
use secmem_core::cache::CacheConfig;
use secmem_core::Cycle;
use secmem_media::MemoryPort;
use secmem_media::TrafficClass as C;
use secmem_schemes::config::*;
use secmem_schemes::testing::FixedLatencyMedia;
use secmem_schemes::controller::{AesOps, MacOps};
use secmem_schemes::designs::Baseline;
use secmem_schemes::{Design, McStats, SecureMc};

/// 64 pages (256 KiB) at arity 8: counters(64) -> level 1 (8 nodes) -> root. Height 3.
const SMALL: u64 = 64 * 4096;

fn mc_with(update: TreeUpdate, counter_kib: u64, persist: MetadataPersistence, secure: bool) -> SecureMc {
    let sec = SecurityConfig { enabled: secure, metadata_persistence: persist, ..Default::default() };
    let tree = TreeConfig { arity: 8, update, ..TreeConfig::default() };
    let caches = MetadataCachesConfig {
        counter: CacheConfig::new(counter_kib, 16, 2),
        mac: CacheConfig::new(64, 16, 2),
        tree: CacheConfig::new(64, 16, 2), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared,};
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
}

#[test]
fn an_eager_write_completes_when_the_last_of_its_sequential_path_hashes_updates_the_root() {
    // 4096 pages (16 MiB) at arity 8: counters (4096) -> 512 -> 64 -> 8 -> root. The eager
    // path from a counter block to the root is four hashes, one after another, and with every
    // block cached they outlast the data write, so they decide when the write is done.
    let sec = SecurityConfig::default();
    let tree = TreeConfig { arity: 8, update: TreeUpdate::Eager, ..TreeConfig::default() };
    let caches = MetadataCachesConfig {
        counter: CacheConfig::new(64, 16, 2),
        mac: CacheConfig::new(64, 16, 2),
        tree: CacheConfig::new(64, 16, 2), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared,};
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

// ---------------------------------------------------------------- pinned after mutation testing

#[test]
fn a_write_to_the_counter_and_mac_blocks_a_read_just_looked_up_dirties_both_and_counts_hits() {
    // The read leaves page 0's counter block and line 0's MAC block as their caches' last
    // lookup; the write to line 1 takes the controller's inline path for both (no search).
    let mut m = mc(TreeUpdate::Lazy);
    m.read_line(0, Cycle(0)).unwrap();
    assert_eq!(m.counter_cache.dirty_count() + m.mac_cache.dirty_count(), 0);
    let (ctr_hits, mac_hits) = (m.counter_cache.stats.hits, m.mac_cache.stats.hits);
    m.write_line(1, None, Cycle(1000)).unwrap();
    assert_eq!((m.counter_cache.stats.hits, m.mac_cache.stats.hits), (ctr_hits + 1, mac_hits + 1));
    assert_eq!((reads(&m, C::Counter), reads(&m, C::Mac)), (1, 1), "no refetch");
    assert_eq!((m.counter_cache.dirty_count(), m.mac_cache.dirty_count()), (1, 1));
    m.flush_metadata(Cycle(100_000)).unwrap();
    assert_eq!((writes(&m, C::Counter), writes(&m, C::Mac)), (1, 1), "both written back");
}

#[test]
fn a_write_to_a_page_read_before_another_page_dirties_its_counter_and_mac_blocks_without_a_refetch() {
    // Core-level traffic interleaves a run of fills with write-backs far behind them: page 0
    // is read, then page 5, then line 1 of page 0 is written. Its counter and MAC blocks are no
    // longer their caches' last lookup; the controller's hint of the block before it finds them.
    let mut m = mc(TreeUpdate::Lazy);
    m.read_line(0, Cycle(0)).unwrap();
    m.read_line(5 * 64, Cycle(1000)).unwrap();
    let (ctr_hits, mac_hits) = (m.counter_cache.stats.hits, m.mac_cache.stats.hits);
    m.write_line(1, None, Cycle(2000)).unwrap();
    assert_eq!((m.counter_cache.stats.hits, m.mac_cache.stats.hits), (ctr_hits + 1, mac_hits + 1));
    assert_eq!((reads(&m, C::Counter), reads(&m, C::Mac)), (2, 2), "no refetch");
    assert_eq!((m.counter_cache.dirty_count(), m.mac_cache.dirty_count()), (1, 1));
    // And back to page 5: its blocks are now the ones before.
    m.read_line(5 * 64 + 1, Cycle(3000)).unwrap();
    assert_eq!((m.counter_cache.stats.hits, m.mac_cache.stats.hits), (ctr_hits + 2, mac_hits + 2));
    m.flush_metadata(Cycle(100_000)).unwrap();
    assert_eq!((writes(&m, C::Counter), writes(&m, C::Mac)), (1, 1), "only page 0's blocks were written");
}

#[test]
fn a_block_taken_back_from_the_write_back_buffer_costs_a_hit_and_no_device_access() {
    // 1 KiB counter cache: one set of 16 ways (LRU). Only the end of an operation drains the
    // write-back buffer, so direct ensure_block calls leave their dirty victims in it: the
    // 17th page pushes dirty page 0 out, and asking for page 0 again takes it back from there.
    let mut m = mc_with(TreeUpdate::Lazy, 1, MetadataPersistence::WriteBack, true);
    m.ensure_block(0, 0, true, Cycle(0)).unwrap();
    for page in 1..17u64 {
        m.ensure_block(0, page, false, Cycle(page * 1000)).unwrap();
    }
    assert!(m.has_pending_evictions(), "dirty page 0 waits in the write-back buffer");
    let counter_reads = reads(&m, C::Counter);
    assert_eq!(m.ensure_block(0, 0, false, Cycle(100_000)).unwrap(), Cycle(100_000 + 2), "a counter-cache hit");
    assert_eq!(reads(&m, C::Counter), counter_reads, "no refetch");
    // Back in the cache, still dirty (its victim, page 1, was clean): nothing left to write back.
    assert!(!m.has_pending_evictions());
    assert_eq!(m.counter_cache.dirty_count(), 1);
    m.process_evictions(Cycle(100_000)).unwrap();
    assert_eq!(writes(&m, C::Counter), 0);
}

#[test]
fn a_write_whose_mac_block_hits_a_slow_mac_cache_macs_its_ciphertext_after_that_hit() {
    // A 500-cycle MAC-cache hit outlasts the pad (counter hit 2, AES 40, XOR 1), so it decides
    // when the data MAC (160) starts, and the device write (300) follows.
    let sec = SecurityConfig::default();
    let tree = TreeConfig { arity: 8, update: TreeUpdate::Lazy, ..TreeConfig::default() };
    let caches = MetadataCachesConfig {
        counter: CacheConfig::new(64, 16, 2),
        mac: CacheConfig::new(64, 16, 500),
        tree: CacheConfig::new(64, 16, 2), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared,};
    let mut m = SecureMc::new(&sec, &tree, &caches, SMALL, Box::new(FixedLatencyMedia::new(100, 300, 1 << 30)), 1).unwrap();
    m.write_line(0, None, Cycle(0)).unwrap(); // brings in the counter and MAC blocks of line 1
    let now = 100_000u64;
    assert_eq!(m.write_line(1, None, Cycle(now)).unwrap(), Cycle(now + 500 + 160 + 300));
}

#[test]
fn a_lazy_flush_updates_the_root_register_once_per_dirty_top_level_node() {
    let mut m = mc(TreeUpdate::Lazy);
    m.write_line(0, None, Cycle(0)).unwrap(); // page 0, under level-1 node 0
    m.write_line(8 * 64, None, Cycle(1000)).unwrap(); // page 8, under level-1 node 1
    m.flush_metadata(Cycle(10_000)).unwrap();
    // Each dirty counter block updates its level-1 parent, which then updates the root.
    assert_eq!((writes(&m, C::Counter), writes(&m, C::Tree)), (2, 2));
    assert_eq!(m.stats.mac_ops.tree_update, 4);
    assert_eq!(m.stats.root_updates, 2);
}

#[test]
fn each_core_read_and_write_is_counted_once_with_its_latency_secure_or_not() {
    // (secure, read latency, write latency) of a first access to an idle controller: a plain
    // device read (100) or write (300), or the secure paths worked out in the tests above.
    // Latency is recorded where a core request is served by a design, once.
    for (secure, read, write) in [(false, 100, 300), (true, 100 + 160 + 40 + 1, 100 + 160 + 40 + 1 + 160 + 300)] {
        let mut m = mc_with(TreeUpdate::Lazy, 64, MetadataPersistence::WriteBack, secure);
        let mut d: Box<dyn Design> = Box::new(Baseline::default());
        d.serve_read(&mut m, 0, Cycle(10_000)).unwrap();
        d.serve_write(&mut m, 8 * 64, None, Cycle(20_000)).unwrap(); // page 8: under another level-1 node
        assert_eq!((m.stats.data_reads, m.stats.data_writes), (1, 1), "secure {secure}");
        let (r, w) = (&m.stats.read_latency, &m.stats.write_latency);
        assert_eq!((r.count, r.max, w.count, w.max), (1, read, 1, write), "secure {secure}");
    }
}

#[test]
fn each_data_write_is_encrypted_and_maced_once_and_each_read_decrypted_and_verified_once() {
    let mut m = mc(TreeUpdate::Lazy);
    m.write_line(0, None, Cycle(0)).unwrap();
    m.write_line(1, None, Cycle(1000)).unwrap();
    m.read_line(2, Cycle(2000)).unwrap();
    let (aes, mac) = (m.stats.aes_ops, m.stats.mac_ops);
    assert_eq!((aes.data_encrypt, mac.data_write, aes.data_decrypt, mac.data_verify), (2, 2, 1, 1));
    assert_eq!((aes.reencrypt, mac.reencrypt), (0, 0));
}

#[test]
fn a_verified_read_waits_for_its_data_mac_check() {
    // verify_on_critical_path: the MAC over the fetched data (160) starts when the data (100)
    // and the cached MAC block (2) are in, and outlasts the pad (2 + 40, XOR 1).
    let sec = SecurityConfig { verify_on_critical_path: true, ..Default::default() };
    let tree = TreeConfig { arity: 8, update: TreeUpdate::Lazy, ..TreeConfig::default() };
    let caches = MetadataCachesConfig {
        counter: CacheConfig::new(64, 16, 2),
        mac: CacheConfig::new(64, 16, 2),
        tree: CacheConfig::new(64, 16, 2), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared,};
    let mut m = SecureMc::new(&sec, &tree, &caches, SMALL, Box::new(FixedLatencyMedia::new(100, 300, 1 << 30)), 1).unwrap();
    m.read_line(0, Cycle(0)).unwrap(); // brings in the counter and MAC blocks of line 1
    let now = 100_000u64;
    assert_eq!(m.read_line(1, Cycle(now)).unwrap().0, Cycle(now + 100 + 160));
}

#[test]
fn an_overflowing_write_is_done_when_the_last_reencrypted_line_is_written_back() {
    let mut m = mc(TreeUpdate::Lazy);
    for i in 0..127u64 {
        m.write_line(5, None, Cycle(i * 1000)).unwrap();
    }
    let now = 200_000u64;
    // Counter hit (2); each other line is read (100), decrypted and re-encrypted (40) and
    // re-MACed (160), then written (300): 602 cycles, past the write of line 5 itself
    // (2 + 40 + 1 + 160 + 300 = 503). Their MAC-block misses (100) are hidden.
    assert_eq!(m.write_line(5, None, Cycle(now)).unwrap(), Cycle(now + 2 + 100 + 40 + 160 + 300));
    assert_eq!(m.stats.counter_overflows, 1);
}

#[test]
fn mac_and_aes_totals_add_up_every_purpose() {
    let mac = MacOps { data_write: 1, data_verify: 2, tree_verify: 4, tree_update: 8, reencrypt: 16, design: 32 };
    assert_eq!(mac.total(), 63);
    let aes = AesOps { data_encrypt: 1, data_decrypt: 2, reencrypt: 4, design: 8 };
    assert_eq!(aes.total(), 15);
}

#[test]
fn stats_since_a_snapshot_subtract_every_counter() {
    // Every counter 12 now and 5 at the snapshot: 7 of each since (a sum gives 17, a ratio 2).
    let all = |v: u64| McStats {
        data_reads: v,
        data_writes: v,
        mac_ops: MacOps { data_write: v, data_verify: v, tree_verify: v, tree_update: v, reencrypt: v, design: v },
        aes_ops: AesOps { data_encrypt: v, data_decrypt: v, reencrypt: v, design: v },
        counter_overflows: v,
        reencrypted_lines: v,
        root_updates: v,
        ..Default::default()
    };
    assert_eq!(all(12).since(&all(5)), all(7));
}

#[test]
fn a_design_write_counts_as_a_data_write_or_as_a_reencryption_by_its_class() {
    // write_line_under with the counter available late (ctr_at = now + 500): the pad (40) and
    // XOR (1) follow it, then the MAC (160) and the device write (300); the MAC block's miss
    // (100) is hidden.
    let mut m = mc(TreeUpdate::Lazy);
    let now = 10_000u64;
    let done = m.write_line_under(0, None, 0, 1, C::Data, Cycle(now + 500), Cycle(now)).unwrap();
    assert_eq!(done, Cycle(now + 500 + 40 + 1 + 160 + 300));
    let (aes, mac) = (m.stats.aes_ops, m.stats.mac_ops);
    assert_eq!((m.stats.data_writes, aes.data_encrypt, mac.data_write, aes.reencrypt, mac.reencrypt), (1, 1, 1, 0, 0));
    m.write_line_under(1, None, 0, 1, C::Reencrypt, Cycle(now), Cycle(now)).unwrap();
    let (aes, mac) = (m.stats.aes_ops, m.stats.mac_ops);
    assert_eq!((m.stats.data_writes, aes.data_encrypt, mac.data_write, aes.reencrypt, mac.reencrypt), (1, 1, 1, 1, 1));
    assert_eq!((writes(&m, C::Data), writes(&m, C::Reencrypt)), (1, 1));
}

#[test]
fn a_design_read_for_reencryption_counts_a_reencryption_not_a_data_read() {
    let mut m = mc(TreeUpdate::Lazy);
    m.read_line_under(0, 0, 0, C::Reencrypt, Cycle(0), Cycle(0)).unwrap();
    let (aes, mac) = (m.stats.aes_ops, m.stats.mac_ops);
    assert_eq!((m.stats.data_reads, aes.reencrypt, aes.data_decrypt, mac.data_verify), (0, 1, 0, 0));
    m.read_line_under(1, 0, 0, C::Data, Cycle(0), Cycle(0)).unwrap();
    let (aes, mac) = (m.stats.aes_ops, m.stats.mac_ops);
    assert_eq!((m.stats.data_reads, aes.reencrypt, aes.data_decrypt, mac.data_verify), (1, 1, 1, 1));
}

#[test]
fn a_recovery_controller_takes_over_the_battery_backed_caches_and_counters() {
    let mut live = mc(TreeUpdate::Lazy);
    for page in 0..10u64 {
        live.write_line(page * 64 + 3, None, Cycle(page * 1000)).unwrap();
    }
    let mut rec = mc(TreeUpdate::Lazy);
    rec.keep_battery_backed_state_of(&live);
    assert_eq!(rec.counter_cache.dirty_count(), 10);
    assert_eq!((rec.mac_cache.dirty_count(), rec.tree_cache.dirty_count()), (live.mac_cache.dirty_count(), live.tree_cache.dirty_count()));
    assert_eq!(rec.counters.changed_blocks(), live.counters.changed_blocks());
    assert_eq!(rec.counters.counter_of_line(9 * 64 + 3), (0, 1));
}

#[test]
fn a_tree_of_24_levels_is_accepted_and_one_of_25_is_refused() {
    // One tree walk fetches at most one block per level, into fixed arrays of 24. At arity 2,
    // 2^23 pages give counters + 22 node levels + root = 24 levels; 2^24 pages give 25.
    let tree = TreeConfig { arity: 2, update: TreeUpdate::Lazy, ..TreeConfig::default() };
    let caches = MetadataCachesConfig::default();
    let build = |pages: u64| {
        let media = Box::new(FixedLatencyMedia::new(100, 300, 1 << 40));
        SecureMc::new(&SecurityConfig::default(), &tree, &caches, pages * 4096, media, 1)
    };
    assert_eq!(build(1 << 23).unwrap().layout.tree.height(), 24);
    assert_eq!(build(1 << 24).err().unwrap().field, "tree.arity");
}
