//! An OS memory model on top of the engine: processes with mapped ranges and lazily filled
//! page tables (an entry only for a page written, as in Linux, so host memory follows the
//! pages touched, not the size of a mapping), 4 KB pages and 2 MB huge pages, the shared
//! zero page, fork with copy-on-write sharing, CoW faults, page free and map counts. It turns
//! faults into what the kernel would do for the design in use:
//!
//! * **zero-page fault** (first write to an allocated page): `PageCommand::Zero` if the
//!   design takes it (Silent Shredder), else `PageCommand::Copy` from the zero page (Lelantus'
//!   page_copy), else the kernel zero-fills the page itself;
//! * **CoW fault** (write to a page shared with another process): `PageCommand::Copy` per 4 KB
//!   frame (a huge page is 512 of them) if the design takes it, else the kernel copies;
//! * **reuse** (write to a CoW page whose map count dropped to 1) and **free** of a frame:
//!   first `PageCommand::Materialize` for every lazy copy still reading from that frame
//!   (Lelantus' early reclamation, Fig. 8), then `PageCommand::Free` when the frame is freed.
//!
//! The kernel's own copy and zero fill (baseline, and Silent Shredder's copies) are what Linux
//! does: for 4 KB pages, cached loads and stores (`copy_page` / `clear_page`); for huge pages,
//! non-temporal stores, so every copied line is a memory write (Lelantus section II).
//!
//! The kernel mirrors the controller's copy chains the way Linux' rmap lets it find them
//! (section III-D): `lazy_src[dst]` is the frame a lazy copy reads from, with the paper's
//! recursive-chain rule (a copy of an unmodified lazy copy reads from the original).
//!
//! Physical layout: frame 0 is the 4 KB zero page, frames 512..1024 the 2 MB huge zero page;
//! 4 KB frames are allocated upwards from 1024 and huge pages downwards from the top, below
//! the frames any registered design keeps records of its own in (`DesignEntry::data_lines_reserved`:
//! the top 1/512 of memory, Lelantus-CoW's per-page records).

use crate::config::Config;
use secmem_core::config_section;

config_section! {
    /// The OS memory model (copy-on-write workloads and OS-level traces).
    pub struct OsConfig {
        page_fault_cycles: u64 = 0 => "Core cycles the kernel spends entering and leaving each zero-page, copy-on-write or reuse fault (trap, handler, page-table update), before any copy work; every scheme pays it alike. 0 = not modelled (default). Linux minor faults cost on the order of 1 us";
    }
}
use crate::engine::{Engine, RecordError};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;
use secmem_core::addr::LINES_PER_PAGE;
use secmem_core::error::ConfigError;
use secmem_schemes::PageCommand;
use secmem_trace::Record;

/// Page sizes the model maps: the trace format's, so an OS-level trace's `alloc` needs no
/// conversion.
pub use secmem_trace::PageSize;

/// 4 KB frames per page.
fn frames(size: PageSize) -> u64 { size.bytes() / 4096 }

/// A page size as a person types it on a command line or in the Python API: the trace
/// format's `4k` or `2m`, or `4kb`, `4096`, `2mb`, `2097152`, in any case. (A text trace
/// takes only `4k` and `2m`: a file format has one spelling.)
pub fn parse_page_size(s: &str) -> Result<PageSize, String> {
    match s.to_ascii_lowercase().as_str() {
        "4k" | "4kb" | "4096" => Ok(PageSize::Small),
        "2m" | "2mb" | "2097152" => Ok(PageSize::Huge),
        _ => Err(format!("unknown page size '{}'; known: 4k, 2m", secmem_trace::error::quote(s))),
    }
}

/// A request the OS model cannot carry out.
#[derive(Clone, Debug, PartialEq)]
pub struct OsError(pub String);

impl std::fmt::Display for OsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(&self.0) }
}
impl std::error::Error for OsError {}
impl From<RecordError> for OsError {
    fn from(e: RecordError) -> Self { OsError(e.message) }
}
impl From<secmem_schemes::IntegrityError> for OsError {
    fn from(e: secmem_schemes::IntegrityError) -> Self { OsError(e.to_string()) }
}
impl From<ConfigError> for OsError {
    fn from(e: ConfigError) -> Self { OsError(e.to_string()) }
}

/// A page-table entry.
#[derive(Copy, Clone, Debug)]
struct Pte {
    /// First 4 KB frame.
    frame: u64,
    size: PageSize,
    /// Write-protected: mapped to a zero page or shared after fork.
    cow: bool,
}

/// A mapped range of virtual addresses with one page size, as `mmap` leaves it: its pages
/// have no entries until they are written.
#[derive(Copy, Clone, Debug)]
struct Vma {
    /// One past its last byte.
    end: u64,
    size: PageSize,
}

/// One process's memory: its mapped ranges and the page-table entries of the pages it has
/// written (or inherited written). Like Linux, the model fills page tables lazily: a page of
/// a mapped range that has no entry maps the zero page (write-protected), so a mapping costs
/// host memory only for the pages the workload touches, however large it is.
#[derive(Clone, Debug, Default)]
struct AddressSpace {
    /// Mapped ranges by first address; they never overlap.
    vmas: BTreeMap<u64, Vma>,
    /// First virtual address of a page -> its entry. Never a zero-page entry.
    ptes: FxHashMap<u64, Pte>,
}

impl AddressSpace {
    /// The range holding `vaddr`: (its first address, the range).
    fn vma_at(&self, vaddr: u64) -> Option<(u64, Vma)> {
        self.vmas.range(..=vaddr).next_back().filter(|(_, v)| v.end > vaddr).map(|(&s, &v)| (s, v))
    }

    /// The page holding `vaddr`: its first address and its entry (the zero page's if it was
    /// never written).
    fn page(&self, vaddr: u64) -> Option<(u64, Pte)> {
        let (_, vma) = self.vma_at(vaddr)?;
        let key = vaddr & !(vma.size.bytes() - 1);
        let zero = Pte { frame: if vma.size == PageSize::Huge { HUGE_ZERO_FRAME } else { ZERO_FRAME }, size: vma.size, cow: true };
        Some((key, self.ptes.get(&key).copied().unwrap_or(zero)))
    }

    /// The lowest mapped address in `vaddr..end`, if any.
    fn first_mapped(&self, vaddr: u64, end: u64) -> Option<u64> {
        if self.vma_at(vaddr).is_some() {
            return Some(vaddr);
        }
        self.vmas.range(vaddr..end).next().map(|(&s, _)| s)
    }

    /// The lowest address in `vaddr..end` that no range maps, if any.
    fn first_unmapped(&self, vaddr: u64, end: u64) -> Option<u64> {
        let mut v = vaddr;
        while v < end {
            match self.vma_at(v) {
                Some((_, vma)) => v = vma.end,
                None => return Some(v),
            }
        }
        None
    }
}

/// Counters of the OS model.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct OsStats {
    pub zero_faults: u64,
    pub cow_faults: u64,
    pub reuse_faults: u64,
    pub forks: u64,
    pub frames_freed: u64,
    /// Lines the kernel copied or zero-filled itself.
    pub kernel_lines: u64,
    pub page_commands: u64,
    pub materialize_commands: u64,
}

pub const ZERO_FRAME: u64 = 0;
pub const HUGE_ZERO_FRAME: u64 = 512;
const FIRST_FREE_FRAME: u64 = 1024;

pub struct Os {
    pub engine: Engine,
    /// Per process id, its memory (`None` once it exited).
    spaces: Vec<Option<AddressSpace>>,
    mapcount: FxHashMap<u64, u32>,
    next_small: u64,
    next_huge_top: u64,
    free_small: Vec<u64>,
    free_huge: Vec<u64>,
    lazy_src: FxHashMap<u64, u64>,
    lazy_children: FxHashMap<u64, Vec<u64>>,
    modified: FxHashSet<u64>,
    /// Whether the design takes `Copy` / `Zero` (learnt from its first answer).
    copy_ok: Option<bool>,
    zero_ok: Option<bool>,
    /// Non-memory instructions between the workload's accesses.
    pub inst_gap: u32,
    records: u64,
    pub stats: OsStats,
}

impl Os {
    /// An OS over a fresh engine for `cfg`, with process 0 (no mappings).
    pub fn new(cfg: &Config) -> Result<Os, OsError> {
        let engine = Engine::new(cfg)?;
        let frames = cfg.data_bytes() / 4096;
        // Frames that hold a design's own records (Lelantus-CoW's) are never given out, under
        // any design, so that a trace lands in the same frames whichever design runs it.
        let reserved_lines = secmem_schemes::designs::data_lines_reserved_by_any(cfg.data_bytes() / 64);
        let usable = frames - reserved_lines.div_ceil(LINES_PER_PAGE);
        if usable < FIRST_FREE_FRAME + 1024 {
            return Err(OsError(format!("memory.capacity_gib = {} is too small for the OS model", cfg.memory.capacity_gib)));
        }
        let mut os = Os {
            engine,
            spaces: vec![Some(AddressSpace::default())],
            mapcount: FxHashMap::default(),
            next_small: FIRST_FREE_FRAME,
            next_huge_top: usable & !511,
            free_small: Vec::new(),
            free_huge: Vec::new(),
            lazy_src: FxHashMap::default(),
            lazy_children: FxHashMap::default(),
            modified: FxHashSet::default(),
            copy_ok: None,
            zero_ok: None,
            inst_gap: 10,
            records: 0,
            stats: OsStats::default(),
        };
        // The kernel learns at boot whether the controller offers Lelantus' commands: a
        // page_phyc of a frame that is no lazy copy is a no-op where they exist.
        os.copy_ok = Some(os.engine.page_command(PageCommand::Materialize { page: FIRST_FREE_FRAME })?);
        Ok(os)
    }

    fn space(&self, pid: usize) -> Result<&AddressSpace, OsError> {
        self.spaces.get(pid).and_then(|t| t.as_ref()).ok_or_else(|| OsError(format!("no process {pid}")))
    }

    fn space_mut(&mut self, pid: usize) -> Result<&mut AddressSpace, OsError> {
        self.spaces.get_mut(pid).and_then(|t| t.as_mut()).ok_or_else(|| OsError(format!("no process {pid}")))
    }

    /// Accesses sent through the engine so far (workload and kernel).
    pub fn records(&self) -> u64 { self.records }

    /// Live process ids.
    pub fn processes(&self) -> Vec<usize> { (0..self.spaces.len()).filter(|&p| self.spaces[p].is_some()).collect() }

    /// Map count of the page whose first frame is `frame`.
    pub fn map_count(&self, frame: u64) -> u32 { self.mapcount.get(&frame).copied().unwrap_or(0) }

    /// The frame a lazy copy `frame` reads its uncopied lines from, as the kernel tracks it.
    pub fn lazy_source(&self, frame: u64) -> Option<u64> { self.lazy_src.get(&frame).copied() }

    /// Bytes of physical memory not yet given out (never-used frames and freed pages).
    pub fn free_bytes(&self) -> u64 {
        let never_used = self.next_huge_top.saturating_sub(self.next_small);
        (never_used + self.free_small.len() as u64 + 512 * self.free_huge.len() as u64) * 4096
    }

    fn alloc_frames(&mut self, size: PageSize) -> Result<u64, OsError> {
        let oom = || OsError("out of physical memory (raise memory.capacity_gib)".into());
        match size {
            PageSize::Small => {
                if let Some(f) = self.free_small.pop() {
                    return Ok(f);
                }
                if self.next_small >= self.next_huge_top {
                    return Err(oom());
                }
                self.next_small += 1;
                Ok(self.next_small - 1)
            }
            PageSize::Huge => {
                if let Some(f) = self.free_huge.pop() {
                    return Ok(f);
                }
                if self.next_huge_top < self.next_small + 512 {
                    return Err(oom());
                }
                self.next_huge_top -= 512;
                Ok(self.next_huge_top)
            }
        }
    }

    /// Maps `bytes` at `vaddr` in process `pid` to the zero page (no memory is touched until the
    /// first write, and no page-table entry is made before it). `vaddr` and `bytes` must be
    /// multiples of the page size. A mapping may be larger than the simulated memory, as with
    /// Linux' overcommit (only the pages written take frames), but may not wrap around the
    /// address space.
    pub fn alloc(&mut self, pid: usize, vaddr: u64, bytes: u64, size: PageSize) -> Result<(), OsError> {
        let pb = size.bytes();
        if !vaddr.is_multiple_of(pb) || !bytes.is_multiple_of(pb) || bytes == 0 {
            return Err(OsError(format!("alloc of {bytes} bytes at {vaddr:#x}: both must be non-zero multiples of the {pb}-byte page")));
        }
        let end = vaddr.checked_add(bytes).ok_or_else(|| OsError(format!("range {vaddr:#x} + {bytes} wraps around the address space")))?;
        let space = self.space_mut(pid)?;
        if let Some(v) = space.first_mapped(vaddr, end) {
            return Err(OsError(format!("process {pid}: {v:#x} is already mapped")));
        }
        space.vmas.insert(vaddr, Vma { end, size });
        Ok(())
    }

    /// The lowest mapped address of `vaddr..vaddr + bytes` in `pid` (`None` if none is, or no
    /// such process).
    pub fn first_mapped(&self, pid: usize, vaddr: u64, bytes: u64) -> Option<u64> {
        self.space(pid).ok()?.first_mapped(vaddr, vaddr.saturating_add(bytes))
    }

    /// The lowest address of `vaddr..vaddr + bytes` that nothing maps in `pid` (`None` if all
    /// of it is mapped; `Some(vaddr)` if there is no such process).
    pub fn first_unmapped(&self, pid: usize, vaddr: u64, bytes: u64) -> Option<u64> {
        match self.space(pid) {
            Ok(s) => s.first_unmapped(vaddr, vaddr.saturating_add(bytes)),
            Err(_) => Some(vaddr),
        }
    }

    /// Forks `parent`: the child gets a copy of its page table, every private page becomes
    /// shared and write-protected in both. Returns the child's pid.
    pub fn fork(&mut self, parent: usize) -> Result<usize, OsError> {
        self.stats.forks += 1;
        let space = self.space_mut(parent)?;
        for pte in space.ptes.values_mut() {
            pte.cow = true;
        }
        // Pages never written need no entry in either process: both map the zero page.
        let child = space.clone();
        let mut shared: Vec<Pte> = child.ptes.values().copied().collect();
        for pte in &shared {
            *self.mapcount.entry(pte.frame).or_insert(0) += 1;
        }
        if self.copy_ok == Some(true) {
            // Lelantus III-B: before a page is write-protected its dirty lines are flushed, so
            // the controller's lazy copies read the current content from memory.
            shared.sort_by_key(|p| p.frame);
            for pte in shared {
                for l in pte.frame * LINES_PER_PAGE..(pte.frame + frames(pte.size)) * LINES_PER_PAGE {
                    self.engine.clean_line(l)?;
                }
            }
        }
        self.spaces.push(Some(child));
        Ok(self.spaces.len() - 1)
    }

    /// The entry mapping `vaddr` in `pid` (key, entry).
    fn lookup(&self, pid: usize, vaddr: u64) -> Result<(u64, Pte), OsError> {
        self.space(pid)?.page(vaddr).ok_or_else(|| OsError(format!("process {pid}: address {vaddr:#x} is not mapped")))
    }

    fn phys(pte: &Pte, key: u64, vaddr: u64) -> u64 { pte.frame * 4096 + (vaddr - key) }

    /// The page mapping `vaddr` in `pid`: its first virtual address and size; `None` when
    /// nothing maps it or there is no such process. (Trace drivers check requests with it
    /// before the model acts, so their errors can name the trace's own pids.)
    pub fn page_of(&self, pid: usize, vaddr: u64) -> Option<(u64, PageSize)> {
        let (key, pte) = self.spaces.get(pid)?.as_ref()?.page(vaddr)?;
        Some((key, pte.size))
    }

    fn step(&mut self, rec: Record) -> Result<(), OsError> {
        self.records += 1;
        self.engine.step(&rec, self.records - 1)?;
        Ok(())
    }

    /// A 64 B load by `pid` at `vaddr` (line aligned). Returns the line's content in functional
    /// mode.
    pub fn load(&mut self, pid: usize, vaddr: u64) -> Result<Option<[u8; 64]>, OsError> {
        let (key, pte) = self.lookup(pid, vaddr & !63)?;
        let pa = Self::phys(&pte, key, vaddr & !63);
        self.step(Record::read(pa, self.inst_gap))?;
        Ok(self.engine.hier.cached_data(pa >> 6))
    }

    /// A 64 B store by `pid` at `vaddr` (line aligned), faulting first if the page is
    /// write-protected. `data` is the line's new content (functional mode; synthesised if
    /// absent).
    pub fn store(&mut self, pid: usize, vaddr: u64, data: Option<[u8; 64]>) -> Result<(), OsError> {
        let (key, mut pte) = self.lookup(pid, vaddr & !63)?;
        if pte.cow {
            pte = self.fault(pid, key, pte)?;
        }
        let pa = Self::phys(&pte, key, vaddr & !63);
        let frame = pa >> 12;
        if self.lazy_src.contains_key(&frame) {
            self.modified.insert(frame);
        }
        let rec = match data {
            Some(d) => Record::write_data(pa, self.inst_gap, d),
            None => Record::write(pa, self.inst_gap),
        };
        self.step(rec)
    }

    /// Handles a write to a write-protected page; returns the new entry.
    fn fault(&mut self, pid: usize, key: u64, pte: Pte) -> Result<Pte, OsError> {
        self.engine.stall(secmem_core::Cycle(self.engine.cfg.os.page_fault_cycles));
        let n = frames(pte.size);
        let new = if is_zero(pte.frame) {
            self.stats.zero_faults += 1;
            let new = self.alloc_frames(pte.size)?;
            for i in 0..n {
                self.zero_fill(new + i, pte.frame + i, pte.size)?;
            }
            self.mapcount.insert(new, 1);
            Pte { frame: new, size: pte.size, cow: false }
        } else if self.map_count(pte.frame) > 1 {
            self.stats.cow_faults += 1;
            let new = self.alloc_frames(pte.size)?;
            for i in 0..n {
                self.copy_frame(pte.frame + i, new + i, pte.size)?;
            }
            *self.mapcount.get_mut(&pte.frame).expect("shared page has a count") -= 1;
            self.mapcount.insert(new, 1);
            Pte { frame: new, size: pte.size, cow: false }
        } else {
            // The last sharer writes in place (wp_page_reuse), after the lazy copies still
            // reading from this page got their lines (early reclamation).
            self.stats.reuse_faults += 1;
            for i in 0..n {
                self.reclaim(pte.frame + i)?;
            }
            Pte { cow: false, ..pte }
        };
        self.space_mut(pid)?.ptes.insert(key, new);
        Ok(new)
    }

    fn invalidate_frame(&mut self, frame: u64) {
        for l in frame * LINES_PER_PAGE..(frame + 1) * LINES_PER_PAGE {
            self.engine.invalidate_line(l);
        }
    }

    /// Sends a page command; false when the design does not support it.
    fn command(&mut self, cmd: PageCommand) -> Result<bool, OsError> {
        let ok = self.engine.page_command(cmd)?;
        if ok {
            self.stats.page_commands += 1;
        }
        Ok(ok)
    }

    /// Records a lazy copy `dst` of `src` with the recursive-chain rule.
    fn note_lazy(&mut self, src: u64, dst: u64) {
        let from = match self.lazy_src.get(&src) {
            Some(&s) if !self.modified.contains(&src) => s,
            _ => src,
        };
        self.lazy_src.insert(dst, from);
        self.lazy_children.entry(from).or_default().push(dst);
    }

    fn zero_fill(&mut self, dst: u64, zero_src: u64, size: PageSize) -> Result<(), OsError> {
        self.invalidate_frame(dst);
        if self.zero_ok != Some(false) {
            let ok = self.command(PageCommand::Zero { page: dst })?;
            self.zero_ok = Some(ok);
            if ok {
                return Ok(());
            }
        }
        if self.copy_ok != Some(false) {
            let ok = self.command(PageCommand::Copy { src: zero_src, dst })?;
            self.copy_ok = Some(ok);
            if ok {
                self.note_lazy(zero_src, dst);
                return Ok(());
            }
        }
        for l in dst * LINES_PER_PAGE..(dst + 1) * LINES_PER_PAGE {
            self.kernel_store(l, [0; 64], size)?;
        }
        Ok(())
    }

    fn copy_frame(&mut self, src: u64, dst: u64, size: PageSize) -> Result<(), OsError> {
        self.invalidate_frame(dst);
        if self.copy_ok != Some(false) {
            // The controller copies from memory: the source's dirty lines go there first.
            for l in src * LINES_PER_PAGE..(src + 1) * LINES_PER_PAGE {
                self.engine.clean_line(l)?;
            }
            let ok = self.command(PageCommand::Copy { src, dst })?;
            self.copy_ok = Some(ok);
            if ok {
                self.note_lazy(src, dst);
                return Ok(());
            }
        }
        for i in 0..LINES_PER_PAGE {
            let s = src * LINES_PER_PAGE + i;
            self.step(Record::read(s << 6, 1))?;
            let data = self.engine.hier.cached_data(s).unwrap_or([0; 64]);
            self.kernel_store(dst * LINES_PER_PAGE + i, data, size)?;
        }
        Ok(())
    }

    /// One line of the kernel's own copy or fill: a cached store for 4 KB pages, a
    /// non-temporal store for huge pages.
    fn kernel_store(&mut self, line: u64, data: [u8; 64], size: PageSize) -> Result<(), OsError> {
        self.stats.kernel_lines += 1;
        let data = self.engine.hier.tracks_data().then_some(data);
        match size {
            PageSize::Small => {
                let rec = match data {
                    Some(d) => Record::write_data(line << 6, 1, d),
                    None => Record::write(line << 6, 1),
                };
                self.step(rec)
            }
            PageSize::Huge => {
                self.records += 1;
                Ok(self.engine.store_non_temporal(line, data)?)
            }
        }
    }

    /// Early reclamation of `frame`: every lazy copy that may still read from it is copied for
    /// real — its direct copies and, transitively, copies of those. The kernel marks a frame
    /// modified when it is *stored to*; the controller, when a line is *written back*. After a
    /// crash has dropped a store that never left the caches, the controller may have recorded
    /// `frame` itself as the source of a copy of a copy (the recursive-chain rule applied to a
    /// frame it sees unmodified) where the kernel recorded the middle frame. Walking the whole
    /// chain, as the paper's OS walks every sibling at the same virtual address, covers both;
    /// the controller's page_phyc check ("does the page still refer to a source?") skips pages
    /// that are already private, so nothing is copied twice.
    fn reclaim(&mut self, frame: u64) -> Result<(), OsError> {
        let mut todo = vec![frame];
        while let Some(f) = todo.pop() {
            let Some(children) = self.lazy_children.remove(&f) else { continue };
            for d in children {
                if self.lazy_src.get(&d) == Some(&f) {
                    self.stats.materialize_commands += 1;
                    self.command(PageCommand::Materialize { page: d })?;
                    self.lazy_src.remove(&d);
                    self.modified.remove(&d);
                    todo.push(d);
                }
            }
        }
        Ok(())
    }

    /// Before a physical write record (a device or the kernel, bypassing translation) changes
    /// `rec`'s lines: a write into a zero page is refused (every untouched mapping reads it;
    /// the kernel keeps it read-only), and a frame that lazy copies still read from has them
    /// made real first (early reclamation, as before the last sharer writes in place), and a
    /// lazy copy it writes to counts as modified, so the write changes that frame only, under
    /// every design. Without this, Lelantus' copies read
    /// the new bytes where the kernel's copies (baseline) kept the old ones: a silent
    /// corruption in `secmem crash`, false alarms in `secmem attack` (found by fuzzing).
    pub(crate) fn before_physical_write(&mut self, rec: &Record) -> Result<(), OsError> {
        if rec.size_bytes == 0 {
            return Ok(());
        }
        // An address past the memory (or the address space) is the engine's error to report.
        let Some(last) = rec.addr.checked_add(rec.size_bytes as u64 - 1) else { return Ok(()) };
        for frame in (rec.addr >> 12)..=(last >> 12) {
            let zero_page = if frame == ZERO_FRAME {
                Some(("4 KB", ZERO_FRAME, PageSize::Small))
            } else if (HUGE_ZERO_FRAME..FIRST_FREE_FRAME).contains(&frame) {
                Some(("2 MB", HUGE_ZERO_FRAME, PageSize::Huge))
            } else {
                None
            };
            if let Some((name, base, size)) = zero_page {
                return Err(OsError(format!(
                    "physical write into the {name} zero page (physical {:#x}..{:#x}), which every untouched mapping reads: the kernel keeps it read-only",
                    base << 12,
                    (base << 12) + size.bytes()
                )));
            }
            self.reclaim(frame)?;
            // A lazy copy written to no longer reads as its source (the recursive-chain rule
            // must not skip it when it is copied in turn), as after a process' store.
            if self.lazy_src.contains_key(&frame) {
                self.modified.insert(frame);
            }
        }
        Ok(())
    }

    fn free_frame(&mut self, frame: u64) -> Result<(), OsError> {
        self.stats.frames_freed += 1;
        self.reclaim(frame)?;
        self.command(PageCommand::Free { page: frame })?;
        if let Some(s) = self.lazy_src.remove(&frame) {
            if let Some(v) = self.lazy_children.get_mut(&s) {
                v.retain(|&d| d != frame);
            }
        }
        self.modified.remove(&frame);
        Ok(())
    }

    /// Unmaps `bytes` at `vaddr` from `pid`; a page whose map count drops to 0 is freed. All of
    /// the range must be mapped; a huge page it covers only in part is unmapped whole.
    pub fn free(&mut self, pid: usize, vaddr: u64, bytes: u64) -> Result<(), OsError> {
        let end = vaddr.checked_add(bytes).ok_or_else(|| OsError(format!("range {vaddr:#x} + {bytes} wraps around the address space")))?;
        let space = self.space_mut(pid)?;
        if let Some(v) = space.first_unmapped(vaddr, end) {
            return Err(OsError(format!("process {pid}: address {v:#x} is not mapped")));
        }
        // Cut the range out of every mapping it overlaps (widened to whole pages).
        let overlapping: Vec<(u64, Vma)> = space.vmas.range(..end).rev().take_while(|(_, v)| v.end > vaddr).map(|(&s, &v)| (s, v)).collect();
        let mut cut: Vec<(u64, u64, u64)> = Vec::new();
        for (start, vma) in overlapping {
            let pb = vma.size.bytes();
            let lo = vaddr.max(start) & !(pb - 1);
            let hi = end.min(vma.end).next_multiple_of(pb);
            space.vmas.remove(&start);
            if start < lo {
                space.vmas.insert(start, Vma { end: lo, size: vma.size });
            }
            if hi < vma.end {
                space.vmas.insert(hi, vma);
            }
            cut.push((lo, hi, pb));
        }
        // The written pages in the cut: looked up page by page, or found by a scan of the
        // entries when there are fewer of those than pages.
        let mut gone: Vec<(u64, Pte)> = Vec::new();
        let pages: u64 = cut.iter().map(|&(lo, hi, pb)| (hi - lo) / pb).sum();
        if pages <= space.ptes.len() as u64 {
            for &(lo, hi, pb) in &cut {
                for key in (lo..hi).step_by(pb as usize) {
                    if let Some(p) = space.ptes.remove(&key) {
                        gone.push((key, p));
                    }
                }
            }
        } else {
            let keys: Vec<u64> = space.ptes.keys().copied().filter(|&k| cut.iter().any(|&(lo, hi, _)| (lo..hi).contains(&k))).collect();
            for key in keys {
                gone.push((key, space.ptes.remove(&key).expect("listed key")));
            }
        }
        gone.sort_by_key(|&(key, _)| key); // address order, as the kernel walks the range
        for (_, pte) in gone {
            self.unmap(pte)?;
        }
        Ok(())
    }

    fn unmap(&mut self, pte: Pte) -> Result<(), OsError> {
        debug_assert!(!is_zero(pte.frame), "zero-page mappings have no entry to unmap");
        let c = self.mapcount.get_mut(&pte.frame).expect("mapped page has a count");
        *c -= 1;
        if *c == 0 {
            self.mapcount.remove(&pte.frame);
            for i in 0..frames(pte.size) {
                self.free_frame(pte.frame + i)?;
            }
            match pte.size {
                PageSize::Small => self.free_small.push(pte.frame),
                PageSize::Huge => self.free_huge.push(pte.frame),
            }
        }
        Ok(())
    }

    /// The process exits: every mapping is dropped.
    pub fn exit(&mut self, pid: usize) -> Result<(), OsError> {
        let space = self.spaces.get_mut(pid).and_then(|t| t.take()).ok_or_else(|| OsError(format!("no process {pid}")))?;
        let mut ptes: Vec<Pte> = space.ptes.into_values().collect();
        ptes.sort_by_key(|p| p.frame); // deterministic order
        for pte in ptes {
            self.unmap(pte)?;
        }
        Ok(())
    }
}

fn is_zero(frame: u64) -> bool { frame == ZERO_FRAME || frame == HUGE_ZERO_FRAME }

#[cfg(test)]
mod tests {
    use super::*;

    const VA: u64 = 1 << 32;

    #[test]
    fn a_typed_page_size_takes_its_usual_spellings_and_names_the_known_ones_otherwise() {
        for s in ["4k", "4K", "4kb", "4KB", "4096"] {
            assert_eq!(parse_page_size(s), Ok(PageSize::Small), "{s}");
        }
        for s in ["2m", "2M", "2mb", "2097152"] {
            assert_eq!(parse_page_size(s), Ok(PageSize::Huge), "{s}");
        }
        assert_eq!(parse_page_size("1g").unwrap_err(), "unknown page size '1g'; known: 4k, 2m");
        // The offending text is quoted as typed, control characters escaped.
        assert_eq!(parse_page_size("4K\n").unwrap_err(), "unknown page size '4K\\n'; known: 4k, 2m");
        assert_eq!(frames(PageSize::Small), 1);
        assert_eq!(frames(PageSize::Huge), 512);
    }

    /// The `lelantus` preset on 1 GiB, counting mode unless `functional`; its caches are large
    /// enough that the few lines a test stores stay dirty in them.
    fn os(design: &str, functional: bool) -> Os {
        let o = [
            format!("run.design=\"{design}\""),
            format!("run.functional={functional}"),
            "memory.capacity_gib=1".into(),
            "run.progress=false".into(),
        ];
        Os::new(&Config::load(Some("lelantus"), None, &o).unwrap()).unwrap()
    }

    fn memory_writes(os: &Os) -> u64 { os.engine.core_stats().memory_writes_issued }

    /// The content of the `n`th store of a test.
    fn tag(n: u64) -> [u8; 64] { [n as u8 + 1; 64] }

    #[test]
    fn fork_writes_back_the_dirty_lines_of_the_pages_it_shares_only_when_the_controller_copies() {
        let (small, huge) = (PageSize::Small, PageSize::Huge);
        for (design, size) in [("lelantus", small), ("lelantus", huge), ("baseline", small), ("baseline", huge)] {
            // The controller's lazy copies read memory (Lelantus III-B); the kernel's own copies
            // read through the caches.
            let want = |n: u64| if design == "lelantus" { n } else { 0 };
            let mut os = os(design, false);
            let (a, c) = (VA, VA + 64 * size.bytes());
            os.alloc(0, a, size.bytes(), size).unwrap();
            os.alloc(0, c, size.bytes(), size).unwrap();
            os.store(0, a, None).unwrap();
            os.store(0, a + size.bytes() - 64, None).unwrap();
            let before = memory_writes(&os);
            let child = os.fork(0).unwrap();
            assert_eq!(memory_writes(&os) - before, want(2), "{design} {size:?}: the first and last line of the page");
            // The child's private copy of A (dirty) lies between A and the parent's new page C:
            // the second fork shares A (clean now) and C, not the child's copy.
            os.store(child, a + 5 * 64, None).unwrap();
            os.store(0, c, None).unwrap();
            let before = memory_writes(&os);
            os.fork(0).unwrap();
            assert_eq!(memory_writes(&os) - before, want(1), "{design} {size:?}: C's line only");
            assert_eq!(os.stats.forks, 2);
        }
    }

    #[test]
    fn every_4k_frame_of_a_huge_page_is_zero_filled_copied_and_reclaimed() {
        // Frames 1, 2 and the last: wrong per-frame arithmetic shows in any frame but the first.
        let probes = |h: u64| [1u64, 2, 511].map(|f| h + f * 4096 + 2 * 64);
        for design in ["baseline", "lelantus", "lelantus-cow", "silent-shredder"] {
            let mut os = os(design, true);
            // The first 4 KB frame, holding data in memory, is a wrong source a huge zero fill
            // could read.
            os.alloc(0, VA, 4096, PageSize::Small).unwrap();
            os.store(0, VA + 2 * 64, Some(tag(100))).unwrap();
            os.engine.flush_hierarchy().unwrap();
            let h = VA + (2 << 20);
            os.alloc(0, h, 2 << 20, PageSize::Huge).unwrap();
            for (n, va) in probes(h).into_iter().enumerate() {
                os.store(0, va, Some(tag(n as u64))).unwrap();
            }
            // Freed and faulted in again (the same frames): zeros everywhere.
            os.free(0, h, 2 << 20).unwrap();
            os.alloc(0, h, 2 << 20, PageSize::Huge).unwrap();
            os.store(0, h, Some(tag(9))).unwrap();
            for va in probes(h) {
                assert_eq!(os.load(0, va).unwrap(), Some([0; 64]), "{design}: {va:#x} after the zero fault");
            }
            for (n, va) in probes(h).into_iter().enumerate() {
                os.store(0, va, Some(tag(10 + n as u64))).unwrap();
            }
            // The parent's CoW fault copies every frame; the child's later reuse fault must
            // first give the parent's (lazy) copy every line it still reads from the child's frames.
            let child = os.fork(0).unwrap();
            os.store(0, h, Some(tag(20))).unwrap();
            os.store(child, h, Some(tag(21))).unwrap();
            assert_eq!((os.stats.cow_faults, os.stats.reuse_faults), (1, 1), "{design}");
            for (n, va) in probes(h).into_iter().enumerate() {
                os.store(child, va, Some(tag(30 + n as u64))).unwrap();
            }
            // In memory, where a copy still lazy would read them.
            os.engine.flush_hierarchy().unwrap();
            for (n, va) in probes(h).into_iter().enumerate() {
                assert_eq!(os.load(0, va).unwrap(), Some(tag(10 + n as u64)), "{design}: parent {va:#x}");
                assert_eq!(os.load(child, va).unwrap(), Some(tag(30 + n as u64)), "{design}: child {va:#x}");
            }
            assert_eq!(os.load(0, VA + 2 * 64).unwrap(), Some(tag(100)), "{design}: the small page");
            // A grandchild's copy reads from the parent's frames; the parent exits, its frames
            // are freed and given to a new huge page: the copy must have got its lines first.
            let grandchild = os.fork(0).unwrap();
            os.store(grandchild, h, Some(tag(40))).unwrap();
            os.exit(0).unwrap();
            let h2 = h + (2 << 20);
            os.alloc(child, h2, 2 << 20, PageSize::Huge).unwrap();
            for (n, va) in probes(h2).into_iter().enumerate() {
                os.store(child, va, Some(tag(50 + n as u64))).unwrap();
            }
            os.engine.flush_hierarchy().unwrap();
            for (n, va) in probes(h).into_iter().enumerate() {
                assert_eq!(os.load(grandchild, va).unwrap(), Some(tag(10 + n as u64)), "{design}: grandchild {va:#x}");
            }
        }
    }

    #[test]
    fn after_a_reuse_fault_the_page_is_writable_without_faulting_again() {
        let mut os = os("lelantus", false);
        os.alloc(0, VA, 4096, PageSize::Small).unwrap();
        os.store(0, VA, None).unwrap();
        let child = os.fork(0).unwrap();
        os.exit(child).unwrap();
        for i in 0..3 {
            os.store(0, VA + i * 64, None).unwrap();
        }
        assert_eq!((os.stats.zero_faults, os.stats.cow_faults, os.stats.reuse_faults), (1, 0, 1));
    }

    #[test]
    fn a_range_freed_from_the_start_of_a_mapping_can_be_mapped_again() {
        let mut os = os("baseline", false);
        os.alloc(0, VA, 4 * 4096, PageSize::Small).unwrap();
        os.free(0, VA, 2 * 4096).unwrap();
        assert_eq!(os.first_mapped(0, VA, 4 * 4096), Some(VA + 2 * 4096));
        os.alloc(0, VA, 2 * 4096, PageSize::Small).unwrap();
        os.free(0, VA, 4 * 4096).unwrap();
        os.alloc(0, VA, 4 * 4096, PageSize::Small).unwrap();
    }

    #[test]
    fn a_mapping_at_address_zero_can_be_written_and_freed() {
        let mut os = os("baseline", false);
        os.alloc(0, 0, 2 * 4096, PageSize::Small).unwrap();
        os.store(0, 4096, None).unwrap();
        os.free(0, 0, 2 * 4096).unwrap();
        assert_eq!((os.first_mapped(0, 0, 2 * 4096), os.stats.frames_freed), (None, 1));
    }

    #[test]
    fn a_zero_page_fault_is_a_zero_command_a_copy_of_the_zero_page_or_the_kernels_own_fill() {
        // (design, page commands, lines the kernel stores, frame the new page lazily copies)
        let cases = [
            ("baseline", 0, 64, None),
            ("lelantus", 1, 0, Some(ZERO_FRAME)),
            ("lelantus-cow", 1, 0, Some(ZERO_FRAME)),
            ("silent-shredder", 1, 0, None),
        ];
        for (design, commands, kernel_lines, source) in cases {
            let mut os = os(design, false);
            os.alloc(0, VA, 4096, PageSize::Small).unwrap();
            os.store(0, VA, None).unwrap();
            let frame = os.lookup(0, VA).unwrap().1.frame;
            assert_eq!((os.stats.zero_faults, os.stats.page_commands, os.stats.kernel_lines), (1, commands, kernel_lines), "{design}");
            assert_eq!(os.lazy_source(frame), source, "{design}");
        }
    }

    #[test]
    fn a_reuse_fault_materialises_the_lazy_copy_reading_from_the_page() {
        let mut os = os("lelantus", false);
        os.alloc(0, VA, 4096, PageSize::Small).unwrap();
        os.store(0, VA, None).unwrap();
        let original = os.lookup(0, VA).unwrap().1.frame;
        let child = os.fork(0).unwrap();
        os.store(0, VA, None).unwrap();
        let copy = os.lookup(0, VA).unwrap().1.frame;
        assert_eq!(os.lazy_source(copy), Some(original));
        os.store(child, VA, None).unwrap();
        assert_eq!((os.stats.reuse_faults, os.stats.materialize_commands, os.lazy_source(copy)), (1, 1, None));
    }

    #[test]
    fn unmapping_a_huge_page_frees_each_of_its_4k_frames() {
        // The controller materialises the copies of a page it copies into anyway; only its
        // page_free commands show which frames the kernel freed.
        let mut os = os("lelantus", false);
        let freed = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let log = freed.clone();
        os.engine.on_page_command = Some(Box::new(move |c| {
            if let PageCommand::Free { page } = c {
                log.borrow_mut().push(page);
            }
        }));
        os.alloc(0, VA, 2 << 20, PageSize::Huge).unwrap();
        os.store(0, VA, None).unwrap();
        let frame = os.lookup(0, VA).unwrap().1.frame;
        os.free(0, VA, 2 << 20).unwrap();
        assert_eq!(*freed.borrow(), (frame..frame + 512).collect::<Vec<_>>());
        assert_eq!(os.stats.frames_freed, 512);
    }

    #[test]
    fn a_cow_copy_sees_what_a_device_wrote_to_the_shared_frame_after_the_fork() {
        // A physical record of an OS trace dirties a line of a write-protected frame in the
        // caches; the controller copies from memory, so the fault must write the line back.
        for design in ["lelantus", "lelantus-cow", "baseline"] {
            let mut os = os(design, true);
            os.alloc(0, VA, 4096, PageSize::Small).unwrap();
            os.store(0, VA, Some(tag(1))).unwrap();
            let child = os.fork(0).unwrap();
            let frame = os.lookup(0, VA).unwrap().1.frame;
            os.step(Record::write_data(frame * 4096 + 3 * 64, 1, tag(2))).unwrap();
            os.store(child, VA, Some(tag(3))).unwrap();
            assert_eq!(os.stats.cow_faults, 1, "{design}");
            assert_eq!(os.load(child, VA + 3 * 64).unwrap(), Some(tag(2)), "{design}");
        }
    }

    #[test]
    fn the_kernels_huge_page_fill_writes_every_line_to_memory_and_a_small_pages_stays_cached() {
        // Linux clears a huge page with non-temporal stores, a 4 KB page with cached ones.
        for (size, lines, written) in [(PageSize::Small, 64, 0), (PageSize::Huge, 512 * 64, 512 * 64)] {
            let mut os = os("baseline", false);
            os.alloc(0, VA, size.bytes(), size).unwrap();
            os.store(0, VA, None).unwrap();
            assert_eq!((os.stats.kernel_lines, os.records(), memory_writes(&os)), (lines, lines + 1, written), "{size:?}");
        }
    }

    #[test]
    fn a_copy_of_an_unmodified_lazy_copy_reads_from_the_original() {
        // A huge page's zero fill makes 512 lazy copies of the huge zero page; the first store
        // modifies one. Copying the page again (CoW) records the zero page's frames as the
        // source of the other 511 (the recursive-chain rule, section III-D).
        let mut os = os("lelantus", false);
        os.alloc(0, VA, 2 << 20, PageSize::Huge).unwrap();
        os.store(0, VA, None).unwrap();
        let first = os.lookup(0, VA).unwrap().1.frame;
        assert_eq!(os.lazy_source(first + 1), Some(HUGE_ZERO_FRAME + 1));
        os.fork(0).unwrap();
        os.store(0, VA, None).unwrap();
        let copy = os.lookup(0, VA).unwrap().1.frame;
        assert_eq!(os.lazy_source(copy), Some(first), "modified: the copy reads from it");
        assert_eq!(os.lazy_source(copy + 1), Some(HUGE_ZERO_FRAME + 1));
    }

    #[test]
    fn small_frames_go_up_from_1024_and_huge_pages_down_from_the_top_until_they_meet() {
        let mut os = os("baseline", false);
        let top = os.next_huge_top;
        assert_eq!((os.alloc_frames(PageSize::Small), os.alloc_frames(PageSize::Small)), (Ok(FIRST_FREE_FRAME), Ok(FIRST_FREE_FRAME + 1)));
        assert_eq!(os.alloc_frames(PageSize::Huge), Ok(top - 512));
        // Room for exactly one more huge page: the two ends meet and nothing is left.
        os.next_small = top - 1024;
        assert_eq!(os.free_bytes(), 2 << 20);
        assert_eq!(os.alloc_frames(PageSize::Huge), Ok(top - 1024));
        assert!(os.alloc_frames(PageSize::Huge).is_err() && os.alloc_frames(PageSize::Small).is_err());
        // Freed pages are given out again.
        os.free_small.push(FIRST_FREE_FRAME);
        os.free_huge.push(top - 512);
        assert_eq!(os.free_bytes(), 4096 + (2 << 20));
        assert_eq!((os.alloc_frames(PageSize::Small), os.alloc_frames(PageSize::Huge)), (Ok(FIRST_FREE_FRAME), Ok(top - 512)));
    }

    #[test]
    fn a_mapping_must_start_and_end_on_a_page_boundary_and_cover_at_least_a_page() {
        // Trace drivers check this before calling; the model must not rely on it.
        let mut os = os("baseline", false);
        let (small, huge) = (PageSize::Small, PageSize::Huge);
        for (vaddr, bytes, size) in [(VA + 64, 4096, small), (VA, 100, small), (VA, 0, small), (VA + 4096, 2 << 20, huge), (VA, 4096, huge)] {
            let e = os.alloc(0, vaddr, bytes, size).unwrap_err();
            assert!(e.0.contains("non-zero multiples"), "{vaddr:#x} {bytes} {size:?}: {e}");
        }
        assert_eq!(os.first_mapped(0, 0, u64::MAX), None);
    }

    #[test]
    fn processes_lists_the_live_pids_and_an_exited_pid_is_gone_for_good() {
        let mut os = os("baseline", false);
        let (a, b) = (os.fork(0).unwrap(), os.fork(0).unwrap());
        assert_eq!(os.processes(), vec![0, a, b]);
        os.exit(0).unwrap();
        assert_eq!(os.processes(), vec![a, b]);
        assert!(os.fork(0).is_err() && os.exit(0).is_err());
    }
}
