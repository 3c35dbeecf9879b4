//! Detection of counter-mode pad reuse.
//!
//! Encrypting two different plaintexts with the same pad leaks their XOR, so a secure
//! memory design must never let a pad leave the chip twice. [`PadReuseDetector`]
//! records every pad used for *encryption* (decryption re-derives a pad already
//! recorded, so it is not recorded) and reports the first repeat.
//!
//! Storage: one hash set per `key_id`, holding each pad's identity packed into a
//! `u128`: `major | line << 64 | minor << 112 | domain << 120` — the same fields, and
//! the same 48-bit line limit, as the pad's counter block, so two records collide
//! exactly when the pads would.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::pad::{MAX_DOMAIN, MAX_LINES};

/// A pad was about to be used for encryption a second time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PadReuse {
    pub key_id: u64,
    pub domain: u8,
    pub line: u64,
    pub major: u64,
    pub minor: u8,
}

impl std::fmt::Display for PadReuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pad reuse: key_id {} domain {} line {:#x} major {} minor {} was already used for encryption",
            self.key_id, self.domain, self.line, self.major, self.minor
        )
    }
}

impl std::error::Error for PadReuse {}

/// Records every `(key_id, domain, line, major, minor)` pad used for encryption and
/// flags repeats. About 17 bytes per recorded pad (plus hash-set slack).
#[derive(Clone, Debug, Default)]
pub struct PadReuseDetector {
    per_key: FxHashMap<u64, FxHashSet<u128>>,
    len: usize,
}

#[inline]
fn pack(domain: u8, line: u64, major: u64, minor: u8) -> u128 {
    assert!(
        line < MAX_LINES,
        "line index {line:#x} does not fit the 48-bit pad counter field"
    );
    assert!(
        domain <= MAX_DOMAIN,
        "pad domain {domain} exceeds {MAX_DOMAIN}"
    );
    major as u128 | (line as u128) << 64 | (minor as u128) << 112 | (domain as u128) << 120
}

impl PadReuseDetector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a pad used for encryption. Returns `Err` naming the tuple if the same
    /// pad was recorded before (the detector is left unchanged then).
    ///
    /// # Panics
    /// If `line >= MAX_LINES` or `domain > MAX_DOMAIN` (such a pad cannot be made).
    pub fn record(
        &mut self,
        key_id: u64,
        domain: u8,
        line: u64,
        major: u64,
        minor: u8,
    ) -> Result<(), PadReuse> {
        let packed = pack(domain, line, major, minor);
        if self.per_key.entry(key_id).or_default().insert(packed) {
            self.len += 1;
            Ok(())
        } else {
            Err(PadReuse {
                key_id,
                domain,
                line,
                major,
                minor,
            })
        }
    }

    /// Whether this pad has been recorded.
    pub fn contains(&self, key_id: u64, domain: u8, line: u64, major: u64, minor: u8) -> bool {
        let packed = pack(domain, line, major, minor);
        self.per_key
            .get(&key_id)
            .is_some_and(|s| s.contains(&packed))
    }

    /// Number of distinct pads recorded.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every pad recorded under `key_id` (e.g. after a re-key made them
    /// unreachable for good). Returns how many were forgotten.
    pub fn forget_key(&mut self, key_id: u64) -> usize {
        let n = self.per_key.remove(&key_id).map_or(0, |s| s.len());
        self.len -= n;
        n
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.per_key.clear();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn exact_repeat_is_flagged_with_the_repeated_tuple() {
        let mut d = PadReuseDetector::new();
        assert_eq!(d.record(7, 0, 0x40, 3, 2), Ok(()));
        let err = d.record(7, 0, 0x40, 3, 2).unwrap_err();
        assert_eq!(
            err,
            PadReuse {
                key_id: 7,
                domain: 0,
                line: 0x40,
                major: 3,
                minor: 2
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("line 0x40") && msg.contains("major 3") && msg.contains("minor 2"),
            "{msg}"
        );
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn domain_and_key_id_are_distinguished() {
        let mut d = PadReuseDetector::new();
        d.record(1, 0, 5, 6, 7).unwrap();
        d.record(1, 1, 5, 6, 7).unwrap();
        d.record(2, 0, 5, 6, 7).unwrap();
        assert_eq!(d.len(), 3);
        assert!(d.record(2, 0, 5, 6, 7).is_err());
        assert!(d.record(1, 1, 5, 6, 7).is_err());
        assert!(d.contains(1, 0, 5, 6, 7) && !d.contains(3, 0, 5, 6, 7));
        assert!(!d.is_empty());
        assert_eq!(d.forget_key(1), 2);
        // The count follows: key 2's pad is all that is left, then key 1's new one.
        assert_eq!(d.len(), 1);
        assert!(d.record(1, 0, 5, 6, 7).is_ok());
        assert_eq!(d.len(), 2);
        d.clear();
        assert!(d.is_empty());
    }

    #[test]
    fn extreme_field_values_do_not_alias() {
        let mut d = PadReuseDetector::new();
        d.record(0, MAX_DOMAIN, MAX_LINES - 1, u64::MAX, u8::MAX)
            .unwrap();
        d.record(0, 0, MAX_LINES - 1, u64::MAX, u8::MAX).unwrap();
        d.record(0, MAX_DOMAIN, 0, u64::MAX, u8::MAX).unwrap();
        d.record(0, MAX_DOMAIN, MAX_LINES - 1, 0, u8::MAX).unwrap();
        d.record(0, MAX_DOMAIN, MAX_LINES - 1, u64::MAX, 0).unwrap();
        assert_eq!(d.len(), 5);
    }

    proptest! {
        #[test]
        fn distinct_tuples_are_all_accepted_and_each_repeat_is_flagged(
            tuples in proptest::collection::hash_set(
                (0u64..4, 0..=MAX_DOMAIN, 0..MAX_LINES, any::<u64>(), any::<u8>()), 1..200),
        ) {
            let mut d = PadReuseDetector::new();
            for &(k, dom, l, ma, mi) in &tuples {
                prop_assert!(d.record(k, dom, l, ma, mi).is_ok());
            }
            prop_assert_eq!(d.len(), tuples.len());
            for &(k, dom, l, ma, mi) in &tuples {
                prop_assert_eq!(d.record(k, dom, l, ma, mi), Err(PadReuse { key_id: k, domain: dom, line: l, major: ma, minor: mi }));
            }
        }
    }
}
