//! Commits host memory before the simulator first writes it, on a background thread that
//! runs only when a host core would otherwise be idle.
//!
//! Why: functional mode's NVM image grows by hundreds of MiB over a long run (its slab of
//! line contents and its hash index), and the first write to each fresh host page stops the
//! writing thread while the kernel allocates and zeroes it. Under this project's hypervisor
//! that runs at a few hundred MB/s: on the 10 M-record random bench it was about 1.5 s of
//! the functional half's 17-18 s (`perf`), on a core the other half leaves idle
//! part of the time. A [`Prefaulter`] takes that work to such idle time: the owner of a
//! mapping asks for a range it will write soon (the next slab chunk, the room an index will
//! double into) and the background thread commits it with Linux `MADV_POPULATE_WRITE`,
//! which faults pages in as a write would, without writing: their contents stay zero.
//!
//! The thread has the lowest scheduling class (`SCHED_IDLE`): it never takes a core from a
//! simulating thread, so a run that leaves no core idle is not slowed, only not helped.
//! Nothing here changes a simulated value or a byte the simulator reads; it only decides
//! when the kernel does work it would do anyway. Elsewhere than on Linux every call is a
//! no-op.
//!
//! Memory a range lies in must not be unmapped while the thread may still be working on it:
//! its owner hands the memory to [`Prefaulter::retire`] instead of dropping it, and the
//! thread drops it after every range asked for before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

/// Bytes committed per `madvise` call: one huge page, so that a cancelled run stops within
/// one and the mmap lock is never held for long.
const PIECE_BYTES: usize = crate::hostmem::HUGE_BYTES;

enum Job {
    /// Commit `[start, start + bytes)`.
    Populate { start: usize, bytes: usize },
    /// Drop this (memory holding ranges asked for before) once those are done.
    Retire(Box<dyn Send>),
}

/// A handle on the background thread (started at the first request; none until then).
#[derive(Default)]
pub struct Prefaulter {
    jobs: Option<mpsc::Sender<Job>>,
    /// Set when the owner no longer wants what it asked for (it is being dropped): the
    /// thread skips the rest.
    cancel: Arc<AtomicBool>,
    /// The thread could not be started, or has ended: stop asking. (Where the kernel does
    /// not know `MADV_POPULATE_WRITE`, before Linux 5.14, the thread stays and skips every
    /// range after its first try.)
    unavailable: bool,
    /// Leave the thread at normal priority (tests that wait for it on a busy machine, where
    /// an idle-priority thread may not run for seconds).
    normal_priority: bool,
}

impl Prefaulter {
    /// Asks the thread to commit host pages `[start, start + bytes)` (byte addresses). Returns
    /// at once; the pages are committed when a host core has time, or by the owner's own
    /// first write if that comes first.
    ///
    /// # Safety
    /// The range must lie inside an anonymous private mapping that stays mapped until memory
    /// holding it is handed to [`retire`](Self::retire) (which drops it after this range is
    /// done), or until the process ends.
    pub unsafe fn populate(&mut self, start: usize, bytes: usize) {
        if bytes == 0 || !cfg!(target_os = "linux") {
            return;
        }
        if let Some(tx) = self.thread() {
            if tx.send(Job::Populate { start, bytes }).is_err() {
                self.unavailable = true;
            }
        }
    }

    /// Drops `memory` on the background thread after every range asked for so far is done
    /// with (at once, here, if no thread was ever started).
    pub fn retire(&mut self, memory: Box<dyn Send>) {
        match self.jobs.as_ref() {
            Some(tx) => {
                // The thread ends when its jobs are done and every sender is gone; if it has
                // ended already, the send fails and the memory drops here, which is safe then.
                let _ = tx.send(Job::Retire(memory));
            }
            None => drop(memory),
        }
    }

    /// Skips every range still waiting, now and from now on: the owner no longer needs them
    /// (it is being dropped).
    pub fn cancel(&mut self) { self.cancel.store(true, Ordering::Relaxed); }

    /// Whether a background thread was started (for tests).
    pub fn started(&self) -> bool { self.jobs.is_some() }

    fn thread(&mut self) -> Option<&mpsc::Sender<Job>> {
        if self.unavailable {
            return None;
        }
        if self.jobs.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            let cancel = Arc::clone(&self.cancel);
            let idle = !self.normal_priority;
            let spawned = std::thread::Builder::new().name("secmem-prefault".into()).spawn(move || serve(rx, &cancel, idle));
            match spawned {
                Ok(_) => self.jobs = Some(tx),
                Err(_) => {
                    self.unavailable = true;
                    return None;
                }
            }
        }
        self.jobs.as_ref()
    }
}

/// The background thread: commits each range asked for, in order, a huge page at a time.
fn serve(jobs: mpsc::Receiver<Job>, cancel: &AtomicBool, idle_priority: bool) {
    if idle_priority {
        lower_own_priority();
    }
    let mut supported = true;
    for job in jobs {
        match job {
            Job::Populate { start, bytes } => {
                let end = start + bytes;
                let mut at = start;
                while supported && at < end && !cancel.load(Ordering::Relaxed) {
                    let n = PIECE_BYTES.min(end - at);
                    supported = populate_write(at, n);
                    at += n;
                }
            }
            Job::Retire(memory) => drop(memory),
        }
    }
}

/// `SCHED_IDLE` for the calling thread: it runs only on a core nothing else wants.
fn lower_own_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: sched_setscheduler only reads the parameter struct; pid 0 is this thread.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
    }
}

/// Commits `[at, at + bytes)` as a write would, keeping its contents; false when the kernel
/// does not support it (then no later call is made). Other failures (a range the kernel will
/// not commit now, say for lack of memory) only leave the pages to the owner's first write.
fn populate_write(at: usize, bytes: usize) -> bool {
    #[cfg(target_os = "linux")]
    // SAFETY: `Prefaulter::populate`'s caller guarantees the range is still mapped (its
    // memory is dropped only by a later Retire job); MADV_POPULATE_WRITE never changes the
    // contents of a page, only whether it is committed.
    unsafe {
        if libc::madvise(at as *mut libc::c_void, bytes, libc::MADV_POPULATE_WRITE) != 0 {
            return std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL);
        }
    }
    let _ = (at, bytes);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostmem::ZeroedSlice;

    /// Sets its flag when dropped: tells when, and on which side, retired memory went.
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) { self.0.store(true, Ordering::SeqCst); }
    }

    /// Waits (bounded, 10 s) until `done()`. (The tests that wait leave the thread at normal
    /// priority: at idle priority, on a machine busy with other tests, it may not run for
    /// longer than that.)
    fn eventually(mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..2000 {
            if done() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        done()
    }

    #[test]
    fn a_populated_range_becomes_resident_and_stays_zero() {
        let len = 4 * crate::hostmem::HUGE_BYTES / 8;
        // SAFETY: zero is a valid u64.
        let s: ZeroedSlice<u64> = unsafe { ZeroedSlice::with_capacity_huge(len, len) };
        let Some((start, bytes)) = s.address_range(0, len) else { return }; // not Linux
        assert_eq!(s.is_page_mapped(len / 2), Some(false), "nothing was touched yet");
        let mut p = Prefaulter { normal_priority: true, ..Prefaulter::default() };
        assert!(!p.started());
        // SAFETY: `s` is retired to the prefaulter below, after the range is done.
        unsafe { p.populate(start, bytes) };
        assert!(p.started());
        let resident = eventually(|| (0..len).step_by(512).all(|i| s.is_page_mapped(i) == Some(true)));
        assert!(s.iter().all(|&x| x == 0));
        p.retire(Box::new(s));
        assert!(resident, "the range was never committed");
    }

    #[test]
    fn retiring_with_no_range_asked_for_starts_no_thread_and_drops_at_once() {
        let dropped = Arc::new(AtomicBool::new(false));
        let mut p = Prefaulter::default();
        p.retire(Box::new(Flag(Arc::clone(&dropped))));
        assert!(!p.started());
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn retired_memory_is_dropped_by_the_thread_after_the_ranges_before_it() {
        let len = 4 * crate::hostmem::HUGE_BYTES / 8;
        // SAFETY: zero is a valid u64.
        let s: ZeroedSlice<u64> = unsafe { ZeroedSlice::with_capacity_huge(len, len) };
        let Some((start, bytes)) = s.address_range(0, len) else { return };
        let dropped = Arc::new(AtomicBool::new(false));
        let mut p = Prefaulter { normal_priority: true, ..Prefaulter::default() };
        // SAFETY: `s` is retired below.
        unsafe { p.populate(start, bytes) };
        p.retire(Box::new((s, Flag(Arc::clone(&dropped)))));
        drop(p);
        assert!(eventually(|| dropped.load(Ordering::SeqCst)), "the thread never dropped what it was given");
    }
}
