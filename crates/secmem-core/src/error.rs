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

/// A float as quoted in an error message: plain when that is short, else in scientific
/// notation (`1e308` in plain notation is 309 digits).
pub fn number(v: f64) -> String {
    let plain = format!("{v}");
    if plain.len() <= 20 { plain } else { format!("{v:e}") }
}

/// Largest latency or delay a config may give in cycles: 2^32, about a second at 4 GHz.
/// Larger values are typos, and long runs would overflow the u64 cycle arithmetic with them.
pub const MAX_LATENCY_CYCLES: u64 = 1 << 32;

/// Rejects a latency in cycles above [`MAX_LATENCY_CYCLES`], naming `field`.
pub fn ensure_latency_cycles(v: u64, field: &str) -> Result<(), ConfigError> {
    ensure(v <= MAX_LATENCY_CYCLES, field, || {
        format!("{v} cycles is more than the {MAX_LATENCY_CYCLES} (about 1 s at 4 GHz) secmem accepts for a latency")
    })
}

#[cfg(test)]
mod tests {
    use super::number;

    #[test]
    fn numbers_in_errors_stay_short_however_large_or_small() {
        assert_eq!(number(1e308), "1e308");
        assert_eq!(number(-2.5e-300), "-2.5e-300");
        assert_eq!(number(0.001), "0.001");
        assert_eq!(number(1500.0), "1500");
        assert_eq!(number(f64::NAN), "NaN");
    }
}
