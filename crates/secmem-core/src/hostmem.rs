//! Host memory for the simulator's largest array, the counter store.
//!
//! [`ZeroedSlice`] is a fixed-length slice in zeroed memory that the OS commits only when a
//! page is first written, so a sparse array costs host memory only where it is used. On Linux
//! it is an anonymous mapping aligned to 2 MiB, and a region of it that has become (almost)
//! fully resident can be collapsed into a transparent huge page
//! ([`collapse_if_resident`](ZeroedSlice::collapse_if_resident)): random accesses over a
//! hundred-MB array then miss the host TLB far less (each miss is a page walk, nested and
//! expensive under a hypervisor), while a sparse array stays sparse — a region is collapsed
//! only once at least 90% of its 4 KiB pages are resident, so collapsing commits at most 10%
//! more of it. Elsewhere, or when the mapping fails, it is the global allocator's
//! `alloc_zeroed`.
//!
//! Nothing here changes a simulated value: it only decides where the bytes live.

use std::ops::{Deref, DerefMut};

/// Huge-page size (x86-64 and aarch64 with 4 KiB base pages).
pub const HUGE_BYTES: usize = 2 << 20;

/// Host cache line: the least alignment of an array from the global allocator.
const CACHE_LINE_BYTES: usize = 64;

/// Arrays smaller than this are not worth a mapping of their own.
const MAP_MIN_BYTES: usize = 4 * HUGE_BYTES;

/// Linux's MADV_COLLAPSE (6.1+; not in the libc crate version we use).
#[cfg(target_os = "linux")]
const MADV_COLLAPSE: libc::c_int = 25;

/// A fixed-length slice of `T` in zeroed, lazily committed host memory; one made by
/// [`with_capacity_huge`](Self::with_capacity_huge) can also grow in place.
pub struct ZeroedSlice<T> {
    ptr: *mut T,
    len: usize,
    /// Values the memory holds (`>= len`); those past `len` have never been handed out, so
    /// they are still zero. Equal to `len` unless made by `with_capacity_huge`.
    cap: usize,
    /// The mapping (start, bytes) to unmap; bytes 0: allocated with the global allocator.
    map: (*mut u8, usize),
}

// SAFETY: a ZeroedSlice owns its memory exclusively, like a Box<[T]>.
unsafe impl<T: Send> Send for ZeroedSlice<T> {}
// SAFETY: shared access only hands out &[T], like a Box<[T]>.
unsafe impl<T: Sync> Sync for ZeroedSlice<T> {}

impl<T> ZeroedSlice<T> {
    /// `len` values of all-zero bytes.
    ///
    /// # Safety
    /// All-zero bytes must be a valid value of `T` (plain integers and arrays of them), and
    /// `T` must need no drop.
    pub unsafe fn new(len: usize) -> ZeroedSlice<T> {
        Self::new_with(len, false)
    }

    /// As [`new`](Self::new), and on Linux asks for transparent huge pages from the first
    /// touch on (`MADV_HUGEPAGE`), for an array that will be filled densely or touched at
    /// random all over anyway (so a huge page commits little that would not be committed
    /// later), where 4 KiB pages would cost a host TLB miss per access.
    ///
    /// # Safety
    /// As for [`new`](Self::new).
    pub unsafe fn new_huge(len: usize) -> ZeroedSlice<T> {
        Self::new_with(len, true)
    }

    unsafe fn new_with(len: usize, huge: bool) -> ZeroedSlice<T> {
        let bytes = std::mem::size_of::<T>().checked_mul(len).expect("array size overflows");
        if bytes == 0 {
            return ZeroedSlice { ptr: std::ptr::NonNull::dangling().as_ptr(), len, cap: len, map: (std::ptr::null_mut(), 0) };
        }
        if let Some(s) = Self::map_anonymous(len, len, huge) {
            return s;
        }
        let _ = huge;
        let layout = Self::heap_layout(len);
        let ptr = std::alloc::alloc_zeroed(layout) as *mut T;
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        ZeroedSlice { ptr, len, cap: len, map: (std::ptr::null_mut(), 0) }
    }

    /// `len` values of all-zero bytes in a mapping with room for `cap` (at least `len`), which
    /// [`grow_in_place`](Self::grow_in_place) can extend the slice into. The room past `len`
    /// is only reserved address space (Linux `MAP_NORESERVE`): it commits no host memory until
    /// it is grown into and written. Where it cannot be reserved (not Linux, too small to map,
    /// or the OS refuses the reservation) this is [`new_huge`](Self::new_huge)`(len)`, which
    /// cannot grow in place. Huge pages as in `new_huge`.
    ///
    /// For an array that doubles as it grows (the image's hash index): growing in place
    /// reuses the pages the smaller array committed, where a new array would commit (and have
    /// the kernel zero) them all again while the old one is still held.
    ///
    /// # Safety
    /// As for [`new`](Self::new).
    pub unsafe fn with_capacity_huge(len: usize, cap: usize) -> ZeroedSlice<T> {
        if std::mem::size_of::<T>() != 0 && len > 0 {
            if let Some(s) = Self::map_anonymous(len, cap.max(len), true) {
                return s;
            }
        }
        Self::new_huge(len)
    }

    /// Makes the slice `new_len` long if its memory has room (see
    /// [`with_capacity_huge`](Self::with_capacity_huge)); the values added are zero. Returns
    /// whether it did; `false` leaves the slice as it was.
    pub fn grow_in_place(&mut self, new_len: usize) -> bool {
        if new_len < self.len || new_len > self.cap {
            return false;
        }
        self.len = new_len;
        true
    }

    /// Values the slice can grow to in place.
    pub fn capacity(&self) -> usize { self.cap }

    /// The host byte addresses `(start, bytes)` of values `[from, to)`, which may reach past
    /// the slice's length into its room to grow (up to [`capacity`](Self::capacity)); None
    /// unless the slice is a mapping of its own (see [`is_mapped`](Self::is_mapped)), or if
    /// the range does not fit. For [`Prefaulter`](crate::prefault::Prefaulter), whose
    /// thread commits such a range ahead of its first write.
    pub fn address_range(&self, from: usize, to: usize) -> Option<(usize, usize)> {
        let size = std::mem::size_of::<T>();
        (self.is_mapped() && from <= to && to <= self.cap).then(|| (self.ptr as usize + from * size, (to - from) * size))
    }

    /// Whether the host page holding value `i` is mapped (`mincore`), None where that
    /// cannot be told (not Linux, not a mapping of its own, `i` out of range). A page only
    /// ever read is mapped too (to the kernel's shared zero page). For tests of which host
    /// pages a structure touches.
    pub fn is_page_mapped(&self, i: usize) -> Option<bool> {
        #[cfg(target_os = "linux")]
        if self.is_mapped() && i < self.len {
            let addr = (self.ptr as usize + i * std::mem::size_of::<T>()) & !4095;
            let mut resident = 0u8;
            // SAFETY: the page lies inside our mapping; mincore only reports.
            if unsafe { libc::mincore(addr as *mut libc::c_void, 1, &mut resident) } == 0 {
                return Some(resident & 1 != 0);
            }
        }
        let _ = i;
        None
    }

    /// An anonymous mapping for `cap` values (`len` of them visible), aligned to a huge page;
    /// None where the array is too small to be worth one, or the mapping fails.
    unsafe fn map_anonymous(len: usize, cap: usize, huge: bool) -> Option<ZeroedSlice<T>> {
        let bytes = std::mem::size_of::<T>().checked_mul(cap).expect("array size overflows");
        #[cfg(target_os = "linux")]
        if bytes >= MAP_MIN_BYTES && std::mem::align_of::<T>() <= HUGE_BYTES {
            // One huge page of slack so the array can start on a huge-page boundary.
            let map_bytes = bytes + HUGE_BYTES;
            // SAFETY: an anonymous private mapping is zero-filled; it is unmapped exactly
            // once, in Drop, with the same start and length.
            let p = libc::mmap(
                std::ptr::null_mut(),
                map_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if p != libc::MAP_FAILED {
                let start = (p as usize).next_multiple_of(HUGE_BYTES);
                if huge {
                    // Advice only: on failure the mapping keeps 4 KiB pages.
                    libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
                }
                return Some(ZeroedSlice { ptr: start as *mut T, len, cap, map: (p as *mut u8, map_bytes) });
            }
        }
        let _ = (len, huge, bytes);
        None
    }

    /// The global-allocator layout of `len` values: aligned to a host cache line at least, so
    /// that 64 B elements (image lines) never straddle two host cache lines.
    fn heap_layout(len: usize) -> std::alloc::Layout {
        let layout = std::alloc::Layout::array::<T>(len).expect("array size overflows");
        layout.align_to(CACHE_LINE_BYTES).expect("cache-line alignment is a power of two")
    }

    /// Whether the array lives in its own huge-page-aligned mapping (else collapsing is a
    /// no-op).
    pub fn is_mapped(&self) -> bool { self.map.1 != 0 }

    /// Collapses the huge-page region holding element `i` into a transparent huge page if at
    /// least 90% of its 4 KiB pages are resident already (so at most 10% more of it is
    /// committed). Returns whether the region was collapsed or already is a huge page; false
    /// leaves it as it was (not resident enough, or the kernel declined).
    pub fn collapse_if_resident(&self, i: usize) -> bool {
        #[cfg(target_os = "linux")]
        if self.is_mapped() && i < self.len {
            let addr = (self.ptr as usize + i * std::mem::size_of::<T>()) & !(HUGE_BYTES - 1);
            let mut resident = [0u8; HUGE_BYTES / 4096];
            // SAFETY: the region is inside our mapping (the array starts on a huge-page
            // boundary and the mapping has a huge page of slack past it); mincore only
            // reports, and MADV_COLLAPSE keeps the contents.
            unsafe {
                if libc::mincore(addr as *mut libc::c_void, HUGE_BYTES, resident.as_mut_ptr()) != 0 {
                    return false;
                }
                if resident.iter().filter(|&&r| r & 1 != 0).count() * 10 < resident.len() * 9 {
                    return false;
                }
                return libc::madvise(addr as *mut libc::c_void, HUGE_BYTES, MADV_COLLAPSE) == 0;
            }
        }
        let _ = i;
        false
    }
}

/// Asks the OS to back the whole huge pages inside `slice` with transparent huge pages from
/// their first touch on (Linux `MADV_HUGEPAGE`; advice only, a no-op elsewhere or when the
/// slice spans no whole huge page). For an array from the global allocator that is accessed
/// at random all over (a cache's content array): with 4 KiB pages each access past the host
/// TLB's reach is a page walk, nested and expensive under a hypervisor. Call it before the
/// array is first written, so that its pages are faulted in as huge pages.
pub fn advise_huge_pages<T>(slice: &mut [T]) {
    #[cfg(target_os = "linux")]
    {
        let first = slice.as_mut_ptr() as usize;
        let start = first.next_multiple_of(HUGE_BYTES);
        let end = (first + std::mem::size_of_val(slice)) & !(HUGE_BYTES - 1);
        if end > start {
            // SAFETY: [start, end) lies inside `slice`, which we borrow mutably; MADV_HUGEPAGE
            // changes how pages are backed, never their contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = slice;
}

impl<T> Drop for ZeroedSlice<T> {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if self.map.1 != 0 {
            // SAFETY: the mapping came from `map_anonymous` with exactly this start and size.
            unsafe { libc::munmap(self.map.0 as *mut libc::c_void, self.map.1) };
            return;
        }
        let bytes = std::mem::size_of::<T>() * self.len;
        if bytes == 0 {
            return;
        }
        // SAFETY: the memory came from `new` with exactly this size (values of T need no
        // drop, as `new` requires).
        // (Heap memory never grows: `cap == len`.)
        unsafe {
            std::alloc::dealloc(self.ptr as *mut u8, Self::heap_layout(self.len));
        }
    }
}

impl<T> Deref for ZeroedSlice<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialised (zeroed or since written) values.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T> DerefMut for ZeroedSlice<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_slices_start_zeroed_and_keep_writes() {
        for n in [0usize, 1, 2, 1000, (MAP_MIN_BYTES / 8) + 3] {
            // SAFETY: zero is a valid u64.
            let mut s: ZeroedSlice<u64> = unsafe { ZeroedSlice::new(n) };
            assert_eq!(s.len(), n);
            assert!(s.iter().step_by(4099).all(|&x| x == 0));
            if n > 1 {
                s[n - 1] = 7;
                s[0] = 5;
                assert_eq!((s[0], s[1], s[n - 1]), (5, if n == 2 { 7 } else { 0 }, 7));
            }
        }
    }

    #[test]
    fn a_reserved_slice_grows_in_place_up_to_its_capacity_with_zeros_and_keeps_its_values() {
        let len = MAP_MIN_BYTES / 8;
        // SAFETY: zero is a valid u64.
        let mut s: ZeroedSlice<u64> = unsafe { ZeroedSlice::with_capacity_huge(len, 4 * len) };
        assert_eq!(s.len(), len);
        s[0] = 3;
        s[len - 1] = 4;
        if cfg!(target_os = "linux") {
            assert_eq!(s.capacity(), 4 * len);
            let at = s.as_ptr();
            assert!(s.grow_in_place(2 * len));
            assert_eq!((s.len(), s.as_ptr()), (2 * len, at), "same memory, longer");
            assert_eq!((s[0], s[len - 1], s[len], s[2 * len - 1]), (3, 4, 0, 0));
            s[2 * len - 1] = 5;
            assert!(!s.grow_in_place(4 * len + 1), "past the capacity");
            assert!(!s.grow_in_place(len), "shorter");
            assert_eq!((s.len(), s[2 * len - 1]), (2 * len, 5));
        }
        // A reservation too small to map: an ordinary slice, which cannot grow.
        // SAFETY: zero is a valid u64.
        let mut small: ZeroedSlice<u64> = unsafe { ZeroedSlice::with_capacity_huge(10, 20) };
        assert_eq!((small.len(), small.capacity()), (10, 10));
        small[9] = 1;
        assert!(!small.grow_in_place(11));
        assert_eq!(small[9], 1);
    }

    #[test]
    fn a_reserved_slice_grows_to_exactly_its_capacity_and_to_its_own_length() {
        // Both ends of the range grow_in_place accepts: the image's index doubles into its
        // reservation up to the last bucket of it (RESERVE_BUCKETS is a power of two).
        let len = MAP_MIN_BYTES / 8;
        // SAFETY: zero is a valid u64.
        let mut s: ZeroedSlice<u64> = unsafe { ZeroedSlice::with_capacity_huge(len, 2 * len) };
        if s.capacity() == s.len() {
            return; // no reservation here (not Linux, or the OS refused it): nothing grows
        }
        s[len - 1] = 6;
        assert!(s.grow_in_place(len), "its own length: nothing to do, and nothing refused");
        assert_eq!(s.len(), len);
        assert!(s.grow_in_place(2 * len), "exactly the capacity");
        assert_eq!((s.len(), s[len - 1], s[2 * len - 1]), (2 * len, 6, 0));
    }

    #[test]
    fn a_reservation_smaller_than_its_length_still_holds_the_length_and_an_empty_one_reserves_nothing() {
        let len = 2 * MAP_MIN_BYTES / 8;
        // A capacity below the length is read as the length (the mapping must hold every value),
        // even where the capacity alone would be large enough to map.
        // SAFETY: zero is a valid u64.
        let mut s: ZeroedSlice<u64> = unsafe { ZeroedSlice::with_capacity_huge(len, len / 2) };
        assert_eq!((s.len(), s.capacity()), (len, len));
        s[len - 1] = 8;
        assert_eq!(s[len - 1], 8);
        // An empty slice gets no mapping, however much room is asked for.
        // SAFETY: zero is a valid u64.
        let mut e: ZeroedSlice<u64> = unsafe { ZeroedSlice::with_capacity_huge(0, 4 * len) };
        assert_eq!((e.len(), e.capacity(), e.is_mapped()), (0, 0, false));
        assert!(!e.grow_in_place(1));
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn dropping_a_reserved_slice_gives_its_address_space_back() {
        // 16 TiB reserved each time: the 128 TiB of a process's address space hold at most 8
        // such reservations, so if a drop did not unmap, the reservations would soon fail and
        // the slices fall back to ones that cannot grow. Reserving costs no memory.
        let (len, cap) = (MAP_MIN_BYTES / 8, 1usize << 41);
        for i in 0..64 {
            // SAFETY: zero is a valid u64.
            let mut s: ZeroedSlice<u64> = unsafe { ZeroedSlice::with_capacity_huge(len, cap) };
            if i == 0 && s.capacity() != cap {
                return; // the OS refuses so large a reservation here: nothing to test
            }
            assert_eq!(s.capacity(), cap, "reservation {i}");
            s[len - 1] = i as u64;
        }
    }

    #[test]
    fn a_mapped_slice_starts_on_a_huge_page_boundary() {
        // collapse_if_resident collapses the huge page around an element: it must lie inside the
        // array's own mapping, which holds only if the array starts on a huge-page boundary.
        for n in [MAP_MIN_BYTES / 8, MAP_MIN_BYTES / 8 + 1, 3 * MAP_MIN_BYTES / 8 + 5] {
            // SAFETY: zero is a valid u64.
            let a: ZeroedSlice<u64> = unsafe { ZeroedSlice::new(n) };
            // SAFETY: zero is a valid u64.
            let b: ZeroedSlice<u64> = unsafe { ZeroedSlice::with_capacity_huge(n, 3 * n) };
            for s in [&a, &b] {
                if s.is_mapped() {
                    assert_eq!(s.as_ptr() as usize % HUGE_BYTES, 0, "{n} values");
                }
            }
        }
    }

    #[test]
    fn line_arrays_start_on_a_host_cache_line_whatever_their_size() {
        for n in [1usize, 3, 1000, MAP_MIN_BYTES / 64 + 1] {
            // SAFETY: all-zero bytes are a valid [u8; 64].
            let s: ZeroedSlice<[u8; 64]> = unsafe { ZeroedSlice::new(n) };
            assert_eq!(s.as_ptr() as usize % CACHE_LINE_BYTES, 0, "{n} lines");
        }
    }

    #[test]
    fn huge_page_advice_keeps_an_arrays_contents_and_accepts_any_size() {
        for n in [0usize, 1, 1000, 3 * HUGE_BYTES / 8 + 5] {
            let mut v: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
            advise_huge_pages(&mut v);
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 3 + 1), "{n} values");
        }
    }

    #[test]
    fn a_sparse_region_is_not_collapsed_and_contents_survive_a_collapse() {
        // SAFETY: zero is a valid u64.
        let mut s: ZeroedSlice<u64> = unsafe { ZeroedSlice::new(MAP_MIN_BYTES / 8) };
        s[3] = 11;
        assert!(!s.collapse_if_resident(3), "one resident page of 512 is not enough");
        let per_region = HUGE_BYTES / 8;
        for i in (per_region..2 * per_region).step_by(512) {
            s[i] = i as u64;
        }
        // Whether the kernel collapses is up to it; the contents must not change either way.
        let _ = s.collapse_if_resident(per_region);
        assert!((per_region..2 * per_region).step_by(512).all(|i| s[i] == i as u64));
        assert_eq!(s[3], 11);
    }
}
