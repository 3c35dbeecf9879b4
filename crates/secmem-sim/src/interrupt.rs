//! A request to stop, from outside the simulation (Ctrl-C in the `secmem` command).
//!
//! The engine never installs a signal handler itself: the caller (the Python binding) sets the
//! flag from its SIGINT handler, and the long loops check it now and then. A plain run stops at
//! its next check and reports the records done so far, marked `meta.interrupted`; the commands
//! made of many runs or steps (campaigns, `secmem io`) stop with [`crate::run::SimError::Interrupted`].

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Records (or I/Os, or campaign steps) between two looks at the flag in the hot loops: a
/// relaxed load each time would cost nothing measurable either, but this keeps the check out
/// of the loop's fast path. At 1 M records/s it is a 4 ms latency.
pub const CHECK_EVERY: u64 = 4096;

/// Asks every running simulation to stop at its next check. Async-signal-safe (one atomic store).
pub fn request() { REQUESTED.store(true, Ordering::Relaxed); }

/// Withdraws the request (before a new command starts).
pub fn clear() { REQUESTED.store(false, Ordering::Relaxed); }

/// Whether a stop was asked for.
#[inline]
pub fn requested() -> bool { REQUESTED.load(Ordering::Relaxed) }

/// `Err(Interrupted)` when a stop was asked for: for the loops of multi-step commands.
pub fn check() -> Result<(), crate::run::SimError> {
    if requested() {
        return Err(crate::run::SimError::Interrupted);
    }
    Ok(())
}
