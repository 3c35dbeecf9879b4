//! secmem-schemes: the secure memory controller every design shares, and the designs.
//!
//! Two rooms, and a design never reaches from one into the other except through the
//! controller's operations:
//!
//! * [`controller`] — the shared secure memory controller: counters, MACs, the Bonsai Merkle
//!   Tree and its walk, metadata caches, lazy/eager update, re-encryption on overflow, the
//!   baseline's read/write data path, functional mode's image and crypto, recovery, and the
//!   generic eADR drain machinery.
//! * [`designs`] — the [`Design`] trait (hooks with baseline defaults), one file per design,
//!   and the registry ([`designs::REGISTRY`]): the one place that lists them.
//! * [`config`] — the config sections the controller reads.

pub mod config;
pub mod controller;
pub mod designs;
pub mod testing;

pub use controller::functional::{Canaries, IntegrityError};
pub use controller::ops::McOps;
pub use controller::{McStats, MetaBlock, MetaKind, PortId, SecureMc};
pub use designs::{Design, PageCommand, PageCommandError};
