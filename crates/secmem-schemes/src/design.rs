//! The seam between the shared controller and a design.
//!
//! A design sees memory only through [`SecureMc`] (which sees the device only through
//! `MemoryPort`). Every hook has a default that is the baseline behaviour, so a design overrides
//! only what its paper changes: Lelantus the write path and page commands, Horus crash/drain and
//! recovery, BMF the tree update, ESD the write path, D-Shield the device.

use crate::controller::SecureMc;
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
    fn page_command(&mut self, mc: &mut SecureMc, cmd: PageCommand, now: Cycle) -> Result<Cycle, Unsupported> {
        let _ = (mc, now);
        Err(Unsupported { design: self.name(), operation: format!("{cmd:?}") })
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

    /// Design-specific counters for the report (flat name -> value).
    fn extra_stats(&self) -> Vec<(&'static str, f64)> { Vec::new() }
}

/// Baseline secure memory (or non-secure, with `security.enabled = false`): the controller's
/// own paths, unchanged.
#[derive(Default)]
pub struct Baseline;

impl Design for Baseline {
    fn name(&self) -> &'static str { "baseline" }
}

/// The closed set of designs, picked by name in the config.
pub const DESIGNS: &[&str] = &["baseline", "lelantus", "lelantus-cow", "silent-shredder"];

/// Builds a design by its public name.
pub fn build(name: &str) -> Result<Box<dyn Design>, String> {
    match name {
        "baseline" => Ok(Box::new(Baseline)),
        "lelantus" => Ok(Box::new(crate::lelantus::Lelantus::new(crate::lelantus::Encoding::Resized))),
        "lelantus-cow" => Ok(Box::new(crate::lelantus::Lelantus::new(crate::lelantus::Encoding::Supplementary))),
        "silent-shredder" => Ok(Box::new(crate::silent_shredder::SilentShredder::default())),
        other => Err(format!("unknown design '{other}'; known: {}", DESIGNS.join(", "))),
    }
}
