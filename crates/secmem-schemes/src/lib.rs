//! secmem-schemes: the secure memory controller every design shares, and the designs.
//!
//! * [`controller`] — counters, MACs, Bonsai Merkle Tree, metadata caches, lazy/eager update,
//!   re-encryption on overflow; the baseline read/write paths.
//! * [`design`] — the [`Design`] trait (hooks with baseline defaults) and the
//!   closed list of designs.
//! * [`config`] — the config sections the controller reads.
//! * [`eadr`] — draining the cache hierarchy on power loss (eADR), the baselines' drains.
//! * [`horus`] — Horus: the Cache Hierarchy Vault drain and its recovery.
//! * [`cache_tree`] — the small tree protecting a saved metadata cache.
//! * [`nvm_image`] — the store behind functional mode's sparse NVM image.

pub mod cache_tree;
pub mod config;
pub mod controller;
pub mod design;
pub mod eadr;
pub mod functional;
pub mod horus;
pub mod image_file;
pub mod lelantus;
pub mod nvm_image;
pub mod recovery;
pub mod silent_shredder;
pub mod testing;

pub use controller::{McStats, MetaBlock, MetaKind, SecureMc};
pub use design::{Design, PageCommand, PageCommandError};
pub use functional::{Canaries, IntegrityError};
