//! Secure memory controller and designs.
