//! The tree update as a strategy: a design's own strategy is called on every counter change,
//! works through the controller's operations, and can stop the path below the root register.

use secmem_core::cache::CacheConfig;
use secmem_core::Cycle;
use secmem_schemes::config::*;
use secmem_schemes::controller::tree_update::TreeUpdateStrategy;
use secmem_schemes::testing::FixedLatencyMedia;
use secmem_schemes::{IntegrityError, McOps, SecureMc};

/// 512 pages at arity 8: counters (512) -> level 1 (64) -> level 2 (8) -> root.
const MEM: u64 = 512 * 4096;

fn controller(update: TreeUpdate) -> SecureMc {
    let sec = SecurityConfig { metadata_persistence: MetadataPersistence::Strict, ..Default::default() };
    let c = || CacheConfig::new(4, 4, 2);
    let caches = MetadataCachesConfig { counter: c(), mac: c(), tree: c(), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared };
    let tree = TreeConfig { arity: 8, update, ..TreeConfig::default() };
    SecureMc::new_functional(&sec, &tree, &caches, MEM, Box::new(FixedLatencyMedia::new(100, 300, 1 << 30)), 7).unwrap()
}

/// Updates each changed path up to `top_level` and counts its calls.
#[derive(Clone)]
struct UpTo {
    top_level: usize,
    calls: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl TreeUpdateStrategy for UpTo {
    fn name(&self) -> &'static str { "up-to" }
    fn counter_changed(&mut self, mc: &mut McOps, page: u64, ctr_at: Cycle) -> Result<Cycle, IntegrityError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        mc.update_path(page, ctr_at, self.top_level)
    }
    fn absorbs_on_write_back(&self) -> bool { false }
}

fn data(line: u64, i: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[..8].copy_from_slice(&(line ^ i.rotate_left(13)).to_le_bytes());
    b
}

/// Writes 3,000 lines spread over every page (metadata caches far smaller than that), then
/// reads every one back; returns the last write's completion.
fn churn(m: &mut SecureMc) -> Cycle {
    let mut t = Cycle(0);
    for i in 0..3_000u64 {
        let line = (i * 2_654_435_761) % (MEM / 64);
        t = m.write_line(line, Some(&data(line, i)), t + Cycle(50)).unwrap();
    }
    for i in 0..3_000u64 {
        let line = (i * 2_654_435_761) % (MEM / 64);
        let (_, got) = m.read_line(line, t).unwrap();
        let last = (0..3_000u64).rev().find(|&j| (j * 2_654_435_761) % (MEM / 64) == line).unwrap();
        assert_eq!(got, Some(data(line, last)), "line {line}");
    }
    t
}

#[test]
fn a_design_strategy_that_walks_to_the_root_gives_eager_update_exactly() {
    let mut eager = controller(TreeUpdate::Eager);
    let mut own = controller(TreeUpdate::Eager);
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    own.set_tree_update(Box::new(UpTo { top_level: usize::MAX, calls: calls.clone() }));
    assert_eq!((eager.tree_update_name(), own.tree_update_name()), ("eager", "up-to"));
    let (a, b) = (churn(&mut eager), churn(&mut own));
    assert_eq!(a, b, "same timing");
    assert_eq!(eager.snapshot(), own.snapshot(), "same counts");
    assert_eq!(eager.func.as_ref().unwrap().root, own.func.as_ref().unwrap().root, "same root register");
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), own.stats.data_writes, "called once per write");
}

#[test]
fn a_design_strategy_that_stops_below_the_root_never_touches_the_root_register_and_a_refetch_then_fails() {
    let mut own = controller(TreeUpdate::Eager);
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    own.set_tree_update(Box::new(UpTo { top_level: 1, calls }));
    let root_before = own.func.as_ref().unwrap().root;
    let mut t = Cycle(0);
    // Pages 0..8, all under level-1 node 0, which stays cached (verified) throughout.
    for i in 0..200u64 {
        let line = (i % 8) * 64 + (i / 8) % 64;
        t = own.write_line(line, Some(&data(line, i)), t + Cycle(50)).unwrap();
    }
    assert_eq!(own.stats.root_updates, 0);
    assert_eq!(own.func.as_ref().unwrap().root, root_before);
    // One hash per write: the counter block into its level-1 parent, nothing above.
    assert_eq!(own.stats.mac_ops.tree_update, own.stats.data_writes);
    // Level 1 was persisted (strict) but level 2 never absorbed it: fetched again, the node
    // fails its check against its stale parent. A strategy that stops below the root must
    // keep the nodes it stops at somewhere trusted (Bonsai Merkle Forests' nvMC).
    own.drop_metadata_caches();
    let e = own.read_line(0, t).unwrap_err();
    assert!(matches!(e, IntegrityError::TreeNode { level: 1, .. }), "{e:?}");
}
