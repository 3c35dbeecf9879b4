//! Host memory for the simulator's large arrays (the counter store, the biggest cache arrays).
//!
//! [`ZeroedSlice`] is a fixed-length slice in zeroed memory that the OS commits only when a
//! page is first written, so a sparse array costs host memory only where it is used. On Linux
//! it comes from an anonymous `mmap` advised for transparent huge pages: random accesses over
//! a hundred-MB array then miss the host TLB far less (each miss is a page walk, nested and
//! expensive under a hypervisor), at the price of committing memory in 2 MB steps. Elsewhere,
//! or when the mapping fails, it falls back to the global allocator's `alloc_zeroed`.
//!
//! Nothing here changes a simulated value: it only decides where the bytes live.

use std::ops::{Deref, DerefMut};

/// Arrays smaller than this are not worth a mapping of their own.
const MAP_MIN_BYTES: usize = 4 << 20;

/// A fixed-length slice of `T` in zeroed, lazily committed host memory.
pub struct ZeroedSlice<T> {
    ptr: *mut T,
    len: usize,
    /// Bytes mapped with `mmap` (0: allocated with the global allocator).
    mapped: usize,
}

// SAFETY: a ZeroedSlice owns its memory exclusively, like a Box<[T]>.
unsafe impl<T: Send> Send for ZeroedSlice<T> {}
// SAFETY: shared access only hands out &[T], like a Box<[T]>.
unsafe impl<T: Sync> Sync for ZeroedSlice<T> {}

impl<T> ZeroedSlice<T> {
    /// `len` values of all-zero bytes.
    ///
    /// # Safety
    /// All-zero bytes must be a valid value of `T` (plain integers and arrays of them).
    pub unsafe fn new(len: usize) -> ZeroedSlice<T> {
        let bytes = std::mem::size_of::<T>().checked_mul(len).expect("array size overflows");
        if bytes == 0 || std::mem::size_of::<T>() == 0 {
            return ZeroedSlice { ptr: std::ptr::NonNull::dangling().as_ptr(), len, mapped: 0 };
        }
        #[cfg(target_os = "linux")]
        if bytes >= MAP_MIN_BYTES && std::mem::align_of::<T>() <= 4096 {
            // SAFETY: an anonymous private mapping is zero-filled and page-aligned; it is
            // unmapped exactly once, in Drop, with the same length.
            let p = libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if p != libc::MAP_FAILED {
                // Advice only: ignored where transparent huge pages are off.
                libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
                return ZeroedSlice { ptr: p as *mut T, len, mapped: bytes };
            }
        }
        let layout = std::alloc::Layout::array::<T>(len).expect("array size overflows");
        let ptr = std::alloc::alloc_zeroed(layout) as *mut T;
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        ZeroedSlice { ptr, len, mapped: 0 }
    }
}

impl<T> Drop for ZeroedSlice<T> {
    fn drop(&mut self) {
        let bytes = std::mem::size_of::<T>() * self.len;
        if bytes == 0 {
            return;
        }
        // SAFETY: the memory came from `new` with exactly this size (values of T need no
        // drop: they are plain data, as `new` requires).
        unsafe {
            #[cfg(target_os = "linux")]
            if self.mapped != 0 {
                libc::munmap(self.ptr as *mut libc::c_void, self.mapped);
                return;
            }
            std::alloc::dealloc(self.ptr as *mut u8, std::alloc::Layout::array::<T>(self.len).expect("array size"));
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
        for n in [0usize, 1, 1000, (MAP_MIN_BYTES / 8) + 3] {
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
}
