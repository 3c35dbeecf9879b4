//! The seam between the shared controller and a design.
//!
//! A design sees memory only through [`SecureMc`] (which sees the device only through
//! `MemoryPort`). Every hook has a default that is the baseline behaviour, so a design overrides
//! only what its paper changes: Lelantus the write path and page commands, Horus crash/drain and
//! recovery, BMF the tree update, ESD the write path, D-Shield the device.

use crate::config::TreeUpdate;
use crate::controller::SecureMc;
use crate::eadr::{self, DrainClock, DrainLine, DrainRecovery, DrainRecoveryError, DrainStats, MetadataSaveRegisters};
use crate::functional::IntegrityError;
use secmem_core::Cycle;

/// Page-level memory-controller commands issued by an OS model (Lelantus' page_copy /
/// page_phyc / page_free; zero-fill for Silent Shredder).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PageCommand {
    /// Copy 4 KB page `src` to page `dst` (page indices).
    Copy { src: u64, dst: u64 },
    /// Physically materialise every not-yet-copied line of a lazily copied page.
    Materialize { page: u64 },
    /// The OS freed `page`.
    Free { page: u64 },
    /// Zero-fill `page`.
    Zero { page: u64 },
}

/// A design refused an operation it does not model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    pub design: &'static str,
    pub operation: String,
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "design '{}' does not support {}", self.design, self.operation)
    }
}
impl std::error::Error for Unsupported {}

/// Why a page command did not complete: the design does not model it (the OS then falls back
/// to doing the work itself), or it failed an integrity check on the way (tampered metadata:
/// the run stops there, as a read or write would).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageCommandError {
    Unsupported(Unsupported),
    Integrity(IntegrityError),
}

impl std::fmt::Display for PageCommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PageCommandError::Unsupported(u) => u.fmt(f),
            PageCommandError::Integrity(e) => e.fmt(f),
        }
    }
}
impl std::error::Error for PageCommandError {}
impl From<Unsupported> for PageCommandError {
    fn from(u: Unsupported) -> Self { PageCommandError::Unsupported(u) }
}
impl From<IntegrityError> for PageCommandError {
    fn from(e: IntegrityError) -> Self { PageCommandError::Integrity(e) }
}

pub trait Design {
    /// Short public name, as spelled in configs.
    fn name(&self) -> &'static str;

    /// An LLC miss for data `line` arriving at the controller at `now`; returns when the
    /// plaintext is usable by the core and, in functional mode, the verified plaintext.
    fn read(&mut self, mc: &mut SecureMc, line: u64, now: Cycle) -> Result<(Cycle, Option<[u8; 64]>), IntegrityError> {
        mc.read_line(line, now)
    }

    /// A data write (LLC write-back, flush or write-through) of `line`; `data` is the new
    /// plaintext (always present in functional mode). Returns when the write is persistent.
    fn write(&mut self, mc: &mut SecureMc, line: u64, data: Option<&[u8; 64]>, now: Cycle) -> Result<Cycle, IntegrityError> {
        mc.write_line(line, data, now)
    }

    /// A persist barrier reached the controller at `now`.
    fn fence(&mut self, mc: &mut SecureMc, now: Cycle) -> Cycle {
        let _ = mc;
        now
    }

    /// A page-level command from the OS model.
    fn page_command(&mut self, mc: &mut SecureMc, cmd: PageCommand, now: Cycle) -> Result<Cycle, PageCommandError> {
        let _ = (mc, now);
        Err(Unsupported { design: self.name(), operation: format!("{cmd:?}") }.into())
    }

    /// Make the design's state durable (baseline: flush dirty metadata, so the tree in NVM
    /// matches the root register).
    fn finish(&mut self, mc: &mut SecureMc, now: Cycle) -> Result<Cycle, IntegrityError> { mc.flush_metadata(now) }

    /// Power loss: the design loses its volatile state (the crash harness calls this on a
    /// controller holding a copy of what survived: the NVM image and the root register).
    fn crash(&mut self, mc: &mut SecureMc, keep_metadata_caches: bool) { mc.crash(keep_metadata_caches) }

    /// Recovery after a crash: rebuild and verify what the design needs to read memory again.
    fn recover(&mut self, mc: &mut SecureMc, now: Cycle) -> Result<crate::recovery::RecoveryReport, crate::recovery::RecoveryError> {
        crate::recovery::rebuild_and_verify(mc, now)
    }

    /// A copy of the design, on-chip state included: what survives power loss when that state
    /// is battery-backed (`security.metadata_persistence = "battery-backed"`); the crash
    /// harness recovers on the copy while the live run goes on.
    fn clone_box(&self) -> Box<dyn Design>;

    /// Design-specific counters for the report (flat name -> value).
    fn extra_stats(&self) -> Vec<(&'static str, f64)> { Vec::new() }

    /// The name of design metadata this design keeps in data lines of its own (read and
    /// written through the controller's secure data path), for the attack harness's classes
    /// `tamper-NAME`, `replay-NAME` and `splice-NAME`; None if it keeps none. Metadata kept
    /// in counter blocks needs no class of its own: the counter classes cover it.
    fn attack_surface_name(&self) -> Option<&'static str> { None }

    /// The metadata lines of [`attack_surface_name`](Self::attack_surface_name) now in use,
    /// each with a data line whose read fetches and verifies it (after
    /// [`drop_metadata_caches`](Self::drop_metadata_caches)): `(metadata line, data line)`,
    /// device line numbers.
    fn attack_surface(&self, mc: &SecureMc) -> Vec<(u64, u64)> {
        let _ = mc;
        Vec::new()
    }

    /// Forgets every clean on-chip copy of metadata, the controller's and the design's own, so
    /// that the next accesses fetch and verify it from NVM (attack harnesses, after `finish`:
    /// nothing dirty may be on chip).
    fn drop_metadata_caches(&mut self, mc: &mut SecureMc) { mc.drop_metadata_caches() }

    /// eADR power loss: make `lines` (every dirty line of the cache hierarchy) and the
    /// metadata caches durable and recoverable, paced by `clock`; the design adds the counts
    /// only it knows (vault writes, its MACs) to `stats`. Default: every line through this
    /// design's write path, then the metadata caches written home with full propagation to the
    /// root (correct under either tree update; Base-EU's drain).
    fn drain(&mut self, mc: &mut SecureMc, lines: &[DrainLine], clock: &mut DrainClock, stats: &mut DrainStats) -> Result<(), IntegrityError> {
        let _ = stats;
        eadr::drain_in_place(mc, lines, clock, &mut |mc, line, data, t| self.write(mc, line, data, t))?;
        let done = mc.flush_metadata(clock.now())?;
        clock.complete(done);
        Ok(())
    }

    /// Recovery after a drain and a crash: rebuild and verify what the design needs, and hand
    /// back lines to put into the cache hierarchy again. Default: rebuild the tree from NVM and
    /// check it against the root register (what a drain that wrote everything home needs).
    fn recover_drained(&mut self, mc: &mut SecureMc, now: Cycle) -> Result<DrainRecovery, DrainRecoveryError> {
        Ok(self.recover(mc, now)?.into())
    }
}

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

    fn drain(&mut self, mc: &mut SecureMc, lines: &[DrainLine], clock: &mut DrainClock, stats: &mut DrainStats) -> Result<(), IntegrityError> {
        eadr::drain_in_place(mc, lines, clock, &mut |mc, line, data, t| mc.write_line(line, data, t))?;
        if !mc.p.secure {
            return Ok(());
        }
        match mc.p.update {
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

    fn recover_drained(&mut self, mc: &mut SecureMc, now: Cycle) -> Result<DrainRecovery, DrainRecoveryError> {
        if !mc.p.secure {
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

/// What a design may need to know about the system it is built into.
#[derive(Clone, Copy, Debug, Default)]
pub struct DesignContext {
    /// Lines in L1 + L2 + LLC (the most an eADR drain can flush).
    pub hierarchy_lines: u64,
    /// Blocks in the counter, MAC and tree caches.
    pub metadata_lines: u64,
}

/// The closed set of designs, picked by name in the config.
pub const DESIGNS: &[&str] = &["baseline", "horus-slm", "horus-dlm", "lelantus", "lelantus-cow", "silent-shredder"];

/// Builds a design by its public name.
pub fn build(name: &str, ctx: &DesignContext) -> Result<Box<dyn Design>, String> {
    use crate::horus::{Horus, MacLevels};
    match name {
        "baseline" => Ok(Box::new(Baseline::default())),
        "horus-slm" => Ok(Box::new(Horus::new(MacLevels::Single, ctx.hierarchy_lines, ctx.metadata_lines))),
        "horus-dlm" => Ok(Box::new(Horus::new(MacLevels::Double, ctx.hierarchy_lines, ctx.metadata_lines))),
        "lelantus" => Ok(Box::new(crate::lelantus::Lelantus::new(crate::lelantus::Encoding::Resized))),
        "lelantus-cow" => Ok(Box::new(crate::lelantus::Lelantus::new(crate::lelantus::Encoding::Supplementary))),
        "silent-shredder" => Ok(Box::new(crate::silent_shredder::SilentShredder::default())),
        other => Err(format!("unknown design '{other}'; known: {}", DESIGNS.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_design_built_by_its_config_name_reports_that_name() {
        // Reports and error messages name the design through `name()`.
        let ctx = DesignContext { hierarchy_lines: 1024, metadata_lines: 256 };
        for &name in DESIGNS {
            assert_eq!(build(name, &ctx).unwrap().name(), name);
        }
    }
}
