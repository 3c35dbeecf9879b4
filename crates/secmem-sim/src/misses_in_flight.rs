//! The core's misses in flight (its MSHRs): the completion cycles of at most `capacity`
//! outstanding L1 misses, for the core model in [`engine`](crate::engine).
//!
//! Each slot holds the completion cycle of the last miss it took; a slot whose cycle is at
//! or before now is free (slots start at cycle 0). A miss takes the slot that frees first:
//! if even that one is busy, the core stalls until it frees. This is exactly "drop the
//! misses completed by now; if every slot is still busy, wait for the earliest": a slot
//! freed before now never delays anything later, and the run ends at the latest completion.
//! Each slot's word is its cycle shifted left with the slot's own index in the low bits, so
//! one minimum pass over `capacity` words (no data-dependent branch; vectorised) gives both
//! the earliest completion and the slot holding it. A flat list compacted on every miss
//! (what this replaced) cost about 90 host instructions per record at the default 8 slots;
//! a sorted ring was fewer instructions but slower (its insertion and drop loops branch on
//! the data).

use secmem_core::Cycle;

#[derive(Clone, Debug)]
pub struct MissesInFlight {
    /// Per slot: `completion << shift | slot`.
    slots: Vec<u64>,
    /// Bits holding a slot index: `ceil(log2(capacity))`.
    shift: u32,
}

impl MissesInFlight {
    /// At most `capacity` (>= 1; the config allows up to 4096) misses in flight.
    pub fn new(capacity: usize) -> MissesInFlight {
        let capacity = capacity.max(1);
        let shift = capacity.next_power_of_two().trailing_zeros();
        MissesInFlight { slots: (0..capacity as u64).collect(), shift }
    }

    /// The largest completion cycle a slot can hold: at least 2^52 (13 days at 4 GHz, for
    /// 4096 slots); a later one is clamped.
    fn max_cycle(&self) -> u64 { u64::MAX >> self.shift }

    /// Adds a miss completing at `done`, issued at `now`. If every slot is busy at `now`, the
    /// core first waits for the earliest completion: returns the cycle it can issue at (`now`
    /// unless it stalled).
    #[inline]
    pub fn add(&mut self, now: Cycle, done: Cycle) -> Cycle {
        let first = match <&[u64; 8]>::try_from(self.slots.as_slice()) {
            // The default size, as a fixed-length array the compiler fully unrolls.
            Ok(v) => v.iter().copied().fold(u64::MAX, u64::min),
            Err(_) => self.slots.iter().copied().fold(u64::MAX, u64::min),
        };
        let slot = (first & ((1 << self.shift) - 1)) as usize;
        self.slots[slot] = done.0.min(self.max_cycle()) << self.shift | slot as u64;
        now.max(Cycle(first >> self.shift))
    }

    /// The latest completion in flight, or `now` if later (when the run would end).
    pub fn latest(&self, now: Cycle) -> Cycle { now.max(Cycle(self.slots.iter().copied().fold(0, u64::max) >> self.shift)) }

    /// Lets every miss complete; returns [`latest`](Self::latest).
    pub fn settle(&mut self, now: Cycle) -> Cycle {
        let end = self.latest(now);
        for (i, s) in self.slots.iter_mut().enumerate() {
            *s = i as u64;
        }
        end
    }

    /// Slots busy at `now`.
    pub fn busy(&self, now: Cycle) -> usize { self.slots.iter().filter(|&&c| c >> self.shift > now.0).count() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The model this replaced: a flat array, one pass dropping completed misses and finding
    /// the earliest when full.
    struct Reference {
        v: Vec<Cycle>,
        capacity: usize,
    }

    impl Reference {
        fn add(&mut self, now: Cycle, done: Cycle) -> Cycle {
            let mut now = now;
            if self.v.len() >= self.capacity {
                self.v.retain(|&c| c > now);
                if self.v.len() >= self.capacity {
                    let (at, &earliest) = self.v.iter().enumerate().min_by_key(|&(_, c)| *c).unwrap();
                    now = earliest;
                    self.v.swap_remove(at);
                }
            }
            self.v.push(done);
            now
        }
    }

    #[test]
    fn a_full_set_stalls_until_the_earliest_completion() {
        let mut m = MissesInFlight::new(2);
        assert_eq!(m.add(Cycle(0), Cycle(100)), Cycle(0));
        assert_eq!(m.add(Cycle(1), Cycle(50)), Cycle(1));
        // Both busy at 2: wait for the one completing at 50.
        assert_eq!(m.add(Cycle(2), Cycle(300)), Cycle(50));
        assert_eq!(m.latest(Cycle(0)), Cycle(300));
        // At 100 the miss completing then has freed its slot: no stall.
        assert_eq!(m.add(Cycle(100), Cycle(120)), Cycle(100));
        assert_eq!(m.settle(Cycle(0)), Cycle(300));
        assert_eq!(m.busy(Cycle(0)), 0);
    }

    #[test]
    fn a_miss_completing_exactly_now_frees_its_slot() {
        let mut m = MissesInFlight::new(1);
        m.add(Cycle(0), Cycle(10));
        assert_eq!(m.add(Cycle(10), Cycle(20)), Cycle(10));
        assert_eq!(m.add(Cycle(11), Cycle(30)), Cycle(20));
    }

    #[test]
    fn slots_start_free_and_ties_go_to_either_slot_alike() {
        // Eight misses at once, all completing at 10: none stalls; the ninth waits for 10.
        let mut m = MissesInFlight::new(8);
        for _ in 0..8 {
            assert_eq!(m.add(Cycle(0), Cycle(10)), Cycle(0));
        }
        assert_eq!(m.busy(Cycle(0)), 8);
        assert_eq!(m.add(Cycle(0), Cycle(20)), Cycle(10));
        assert_eq!(m.busy(Cycle(10)), 1);
    }

    #[test]
    fn a_completion_past_the_largest_cycle_a_slot_holds_is_clamped() {
        let mut m = MissesInFlight::new(4096);
        assert_eq!(m.max_cycle(), (1 << 52) - 1);
        m.add(Cycle(0), Cycle(u64::MAX));
        assert_eq!(m.latest(Cycle(0)), Cycle((1 << 52) - 1));
        // The other slots are still free.
        assert_eq!(m.add(Cycle(5), Cycle(9)), Cycle(5));
    }

    #[test]
    fn latest_is_never_before_now() {
        let mut m = MissesInFlight::new(4);
        assert_eq!(m.latest(Cycle(7)), Cycle(7));
        m.add(Cycle(0), Cycle(5));
        assert_eq!(m.latest(Cycle(7)), Cycle(7));
        assert_eq!(m.latest(Cycle(3)), Cycle(5));
    }

    proptest! {
        /// Same stalls, same end as the flat-array model, for any capacity (powers of two and
        /// not) and completions in and out of issue order, with ties.
        #[test]
        fn gives_the_stalls_and_end_of_the_flat_array_model(
            capacity in 1usize..20,
            steps in proptest::collection::vec((0u64..30, 0u64..400), 1..300),
        ) {
            let mut m = MissesInFlight::new(capacity);
            let mut r = Reference { v: Vec::new(), capacity };
            let (mut now_m, mut now_r) = (Cycle(0), Cycle(0));
            for (gap, latency) in steps {
                now_m = m.add(now_m + Cycle(gap), now_m + Cycle(gap + latency));
                now_r = r.add(now_r + Cycle(gap), now_r + Cycle(gap + latency));
                prop_assert_eq!(now_m, now_r);
                prop_assert_eq!(m.busy(now_m), r.v.iter().filter(|&&c| c > now_m).count());
            }
            let end_r = r.v.iter().copied().fold(now_r, Cycle::max);
            prop_assert_eq!(m.latest(now_m), end_r);
        }
    }
}
