//! Configuration errors always name the field (dotted path) they are about.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    /// Dotted path of the offending field, e.g. `llc.ways`; empty for whole-file errors.
    pub field: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { field: field.into(), message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "config field '{}': {}", self.field, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Shorthand for validation code: `ensure(cond, "llc.ways", || format!(...))?`.
pub fn ensure(cond: bool, field: &str, msg: impl FnOnce() -> String) -> Result<(), ConfigError> {
    if cond { Ok(()) } else { Err(ConfigError::new(field, msg())) }
}
