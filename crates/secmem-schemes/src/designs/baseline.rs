//! The baseline: secure memory as the shared controller does it (counter-mode encryption,
//! per-line MACs, a Bonsai Merkle Tree, lazy or eager update), or non-secure memory with
//! `security.enabled = false`. Every [`Design`] hook defaults to what this design does; its
//! own code is the eADR drain of the Horus paper's baselines.

use super::{implies_nothing, no_check, no_data_lines, Design, DesignContext, DesignEntry, DrainScheme, Region};
use crate::config::TreeUpdate;
use crate::controller::eadr::{self, DrainClock, DrainLine, DrainRecovery, DrainRecoveryError, DrainStats, MetadataSaveRegisters};
use crate::controller::functional::IntegrityError;
use crate::controller::ops::McOps;
use secmem_core::Cycle;

pub static ENTRY: DesignEntry = DesignEntry {
    name: "baseline",
    summary: "the shared secure controller as it is (security.enabled = false: non-secure memory)",
    needs_security: false,
    baseline_data_path: true,
    needs_line_contents: false,
    check: no_check,
    implies: implies_nothing,
    regions,
    data_lines_reserved: no_data_lines,
    drain_schemes: &[
        DrainScheme {
            name: "nonsecure",
            summary: "no security: every dirty line written home (the non-secure EPD reference)",
            secure: false,
            tree_update: None,
        },
        DrainScheme {
            name: "base-lu",
            summary: "lazy tree update at run time; lines through the secure write path, then the metadata caches saved under a small tree",
            secure: true,
            tree_update: Some(TreeUpdate::Lazy),
        },
        DrainScheme {
            name: "base-eu",
            summary: "eager tree update at run time; lines through the secure write path, then the metadata caches flushed home",
            secure: true,
            tree_update: Some(TreeUpdate::Eager),
        },
    ],
    tree_update: None,
    build: |_, _| Box::new(Baseline::default()),
    stats: &[],
};

/// Base-LU's drain saves the metadata caches above the tree (`eadr::save_metadata`).
fn regions(ctx: &DesignContext) -> Vec<Region> { vec![Region { name: "metadata-save", size_bytes: eadr::shadow_bytes(ctx.metadata_lines) }] }

/// Baseline secure memory (or non-secure, with `security.enabled = false`): the controller's
/// own paths, unchanged. Its eADR drain is the Horus paper's baseline: Base-EU with eager tree
/// update, Base-LU with lazy update (the metadata caches saved under a small tree whose root
/// stays on chip), a plain in-place flush when not secure.
#[derive(Clone, Default)]
pub struct Baseline {
    /// Base-LU's on-chip registers after a drain (None: nothing saved).
    saved: Option<MetadataSaveRegisters>,
}

impl Design for Baseline {
    fn name(&self) -> &'static str { "baseline" }

    fn clone_box(&self) -> Box<dyn Design> { Box::new(self.clone()) }

    fn drain(&mut self, mc: &mut McOps, lines: &[DrainLine], clock: &mut DrainClock, stats: &mut DrainStats) -> Result<(), IntegrityError> {
        eadr::drain_in_place(mc, lines, clock, &mut |mc, line, data, t| mc.write_line(line, data, t))?;
        if !mc.params().secure {
            return Ok(());
        }
        match mc.params().update {
            TreeUpdate::Eager => {
                // The root is current: the dirty metadata just goes home.
                let done = mc.flush_metadata(clock.now())?;
                clock.complete(done);
            }
            TreeUpdate::Lazy => {
                let base = eadr::reserved_base(mc);
                self.saved = Some(eadr::save_metadata(mc, base, clock, stats)?);
            }
        }
        Ok(())
    }

    fn recover_drained(&mut self, mc: &mut McOps, now: Cycle) -> Result<DrainRecovery, DrainRecoveryError> {
        if !mc.params().secure {
            return Ok(DrainRecovery::default());
        }
        match self.saved.take() {
            Some(regs) => {
                let base = eadr::reserved_base(mc);
                eadr::restore_metadata(mc, base, regs, now)
            }
            None => Ok(self.recover(mc, now)?.into()),
        }
    }
}

