//! secmem-core: the vocabulary every other secmem crate speaks.
//!
//! * [`time`] — `Cycle`, the one clock of the simulator (CPU cycles), and ns conversion.
//! * [`addr`] — line/page arithmetic shared by caches, counters and media.
//! * [`schema`] — the config-section macro: every field has a default and a description,
//!   unknown keys are rejected, layers (defaults < preset < file < `-p`) merge field by field.
//! * [`cache`] — a real set-associative cache with LRU and dirty bits (used for L1/L2/LLC and
//!   for the counter/MAC/tree metadata caches).
//! * [`counters`] — split counters (major + 64 minors per 4 KB page).
//! * [`ecc`] — the SEC-DED (72,64) code a DIMM stores per 8 B word (ESD's line fingerprint).
//! * [`tree`] — Bonsai Merkle Tree geometry and the NVM region layout.
//! * [`stats`] — latency histograms with percentiles; counters subtract for warm-up removal.
//! * [`hostmem`] — zeroed, lazily committed host arrays (huge pages where dense).
//! * [`prefault`] — commits host memory ahead of its first write, on an idle-priority thread.
//! * [`pow2`] — power-of-two arrays indexed modulo their length, without bounds checks.
//! * [`error`] — the typed configuration error that names the field.

pub mod addr;
pub mod cache;
pub mod counters;
pub mod ecc;
pub mod error;
pub mod hostmem;
pub mod pow2;
pub mod prefault;
pub mod schema;
pub mod stats;
pub mod time;
pub mod tree;

pub use addr::{LINE_BYTES, PAGE_BYTES, LINES_PER_PAGE};
pub use error::ConfigError;
pub use time::Cycle;
