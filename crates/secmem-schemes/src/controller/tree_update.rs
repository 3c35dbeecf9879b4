//! The tree update: how the Merkle tree absorbs a changed counter block.
//!
//! Two strategies are built in and chosen by `tree.update` (Horus II-C):
//!
//! * **lazy** — a changed counter block or node is hashed into its parent only when it is
//!   written back from its cache; the root register is current only after a flush.
//! * **eager** — every counter change recomputes the path from the block to the root at once
//!   (with strict persistence each node on the way is written through).
//!
//! A design may bring its own ([`TreeUpdateStrategy`], declared by its
//! [`DesignEntry::tree_update`](crate::designs::DesignEntry::tree_update)): for example one
//! that stops the path at a persistent sub-tree root instead of the root register, as Bonsai
//! Merkle Forests do. A strategy works through [`McOps`], chiefly
//! [`McOps::update_path`], the eager walk up to a level of its choosing.
//!
//! The built-in two stay variants of an enum so that the write path, which asks on every
//! write, dispatches on them without an indirect call.

use crate::controller::functional::IntegrityError;
use crate::controller::ops::McOps;
use crate::controller::recovery::{RecoveryError, RecoveryReport};
use secmem_core::Cycle;

/// A design's own tree update (see the module documentation).
pub trait TreeUpdateStrategy: Send {
    /// Short name, for reports.
    fn name(&self) -> &'static str;

    /// `page`'s counter block changed and is usable at `ctr_at` (a data write, a
    /// re-encryption, a design's counter update). Bring the tree up to date as far as this
    /// strategy does at once; returns when that is done (the write it belongs to is
    /// persistent no earlier).
    fn counter_changed(&mut self, mc: &mut McOps, page: u64, ctr_at: Cycle) -> Result<Cycle, IntegrityError>;

    /// Whether a dirty counter block or tree node written back from its cache hashes itself
    /// into its parent then (lazy update's rule). A strategy that keeps every path current
    /// at [`counter_changed`](Self::counter_changed) answers false.
    fn absorbs_on_write_back(&self) -> bool;

    /// What of this strategy survives power loss (a battery-backed store of trusted nodes),
    /// with its volatile state reset; None if nothing does. The crash harness installs it in
    /// the controller that recovers.
    fn persistent_copy(&self) -> Option<Box<dyn TreeUpdateStrategy>> { None }

    /// Recovery after a crash: rebuild and verify the tree against what this strategy trusts.
    /// Default: the baseline's, against the root register.
    fn recover(&mut self, mc: &mut McOps, now: Cycle) -> Result<RecoveryReport, RecoveryError> { mc.rebuild_and_verify(now) }

    /// A persist barrier (the end of an epoch) reached the controller at `now`: finish what
    /// this strategy deferred. Returns when the barrier may retire.
    fn fence(&mut self, mc: &mut McOps, now: Cycle) -> Result<Cycle, IntegrityError> {
        let _ = mc;
        Ok(now)
    }

    /// The strategy's own counters, reported with its design's (`stats.design.NAME`).
    fn stats(&self) -> Vec<(&'static str, f64)> { Vec::new() }
}

/// The strategy in force in a controller.
pub(crate) enum Updater {
    Lazy,
    Eager,
    /// A design's own. `None` only while its `counter_changed` runs (it is taken out to be
    /// handed the controller); a nested call would find it missing, and none can happen:
    /// the operations a strategy calls never change a counter block.
    Own(Option<Box<dyn TreeUpdateStrategy>>),
}

impl Updater {
    /// The strategy's name, for reports.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Updater::Lazy => "lazy",
            Updater::Eager => "eager",
            Updater::Own(s) => s.as_ref().map_or("(running)", |s| s.name()),
        }
    }
}
