//! Trace format version 2: OS-level events (processes, virtual addresses, allocation, fork).
//!
//! A version-1 trace is a stream of physical [`Record`]s. Version 2 keeps those records
//! byte-for-byte and adds what an OS memory model needs to be driven by a trace: loads and
//! stores tagged with a process id and a *virtual* address, `alloc` / `free` of virtual ranges
//! with a page size, `fork` (parent -> child) and `exit`, plus two system records: a write-back
//! of every dirty cache line (`wbnoinvd`, the x86 instruction) and the start of the region of
//! interest (`roi`), so that a workload's setup phase can be replayed but not measured.
//!
//! [`Event`] is one record of either version; [`Event::Phys`] is a v1 record. A trace is
//! *OS-level* when its header says so (binary header flag bit 1, text header `v2 os`); only
//! then may it hold the new records. Layouts are in `docs/trace-format.md`.

use std::fmt;

use crate::{Op, Record};

/// Largest process id a trace may name: Linux' `PID_MAX_LIMIT` (2^22) minus one. Keeping pids
/// in Linux' range lets traces recorded from real systems keep their pids, and catches a
/// corrupt pid field instead of letting it create millions of processes.
pub const MAX_PID: u32 = (1 << 22) - 1;

/// Page size of an allocation.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PageSize {
    /// 4 KB pages.
    Small,
    /// 2 MB huge pages.
    Huge,
}

impl PageSize {
    pub fn bytes(self) -> u64 {
        1 << self.shift()
    }
    /// log2 of the page size: the value stored in the binary format (12 or 21).
    pub fn shift(self) -> u16 {
        match self {
            PageSize::Small => 12,
            PageSize::Huge => 21,
        }
    }
    pub fn from_shift(shift: u16) -> Option<PageSize> {
        match shift {
            12 => Some(PageSize::Small),
            21 => Some(PageSize::Huge),
            _ => None,
        }
    }
    /// The text form: `4k` or `2m`.
    pub fn name(self) -> &'static str {
        match self {
            PageSize::Small => "4k",
            PageSize::Huge => "2m",
        }
    }
}

impl std::str::FromStr for PageSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "4k" => Ok(PageSize::Small),
            "2m" => Ok(PageSize::Huge),
            other => Err(format!(
                "bad page size '{}' (expected 4k or 2m)",
                crate::error::quote(other)
            )),
        }
    }
}

/// One record of a version-1 or version-2 trace.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// A version-1 record: a physical address (unchanged in v2).
    Phys(Record),
    /// A load by process `pid` at virtual address `vaddr`.
    Load {
        pid: u32,
        vaddr: u64,
        size_bytes: u16,
        inst_gap: u32,
    },
    /// A store by process `pid` at virtual address `vaddr`; `data` is the 64 B line after it.
    Store {
        pid: u32,
        vaddr: u64,
        size_bytes: u16,
        inst_gap: u32,
        data: Option<[u8; 64]>,
    },
    /// `pid` maps `length` bytes at `vaddr` with pages of `page` (to the zero page: memory is
    /// touched only at the first write).
    Alloc {
        pid: u32,
        vaddr: u64,
        length: u64,
        page: PageSize,
    },
    /// `pid` unmaps `length` bytes at `vaddr`.
    Free { pid: u32, vaddr: u64, length: u64 },
    /// `parent` forks; the child is named `child` from here on.
    Fork { parent: u32, child: u32 },
    /// `pid` exits: all its mappings go.
    Exit { pid: u32 },
    /// Every dirty line of the cache hierarchy is written back and stays cached, clean
    /// (x86 `wbnoinvd`).
    WbNoInvd,
    /// Statistics start here (the region of interest begins).
    RoiBegin,
    /// `pid` reads (`write` false) or writes `bytes` at byte `offset` of the storage device,
    /// a blocking call (pread/pwrite with O_DIRECT): the core waits for it. Timed on the same
    /// clock as loads and stores: after `inst_gap` instructions, in trace order.
    Io {
        pid: u32,
        write: bool,
        offset: u64,
        bytes: u32,
        inst_gap: u32,
    },
}

/// The kind of an [`Event`], with its binary op code.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventOp {
    Read = 0,
    Write = 1,
    Fence = 2,
    Flush = 3,
    WbNoInvd = 4,
    RoiBegin = 5,
    Load = 8,
    Store = 9,
    Alloc = 10,
    Free = 11,
    Fork = 12,
    Exit = 13,
    IoRead = 14,
    IoWrite = 15,
}

impl EventOp {
    pub const ALL: [EventOp; 14] = [
        EventOp::Read,
        EventOp::Write,
        EventOp::Fence,
        EventOp::Flush,
        EventOp::WbNoInvd,
        EventOp::RoiBegin,
        EventOp::Load,
        EventOp::Store,
        EventOp::Alloc,
        EventOp::Free,
        EventOp::Fork,
        EventOp::Exit,
        EventOp::IoRead,
        EventOp::IoWrite,
    ];

    pub fn from_code(code: u8) -> Option<EventOp> {
        EventOp::ALL.iter().copied().find(|o| *o as u8 == code)
    }

    /// The text mnemonic (`R`, `W`, `F`, `FL`, `WBNOINVD`, `ROI`, `LD`, `ST`, `ALLOC`, `FREE`,
    /// `FORK`, `EXIT`, `IOR`, `IOW`).
    pub fn mnemonic(self) -> &'static str {
        match self {
            EventOp::Read => "R",
            EventOp::Write => "W",
            EventOp::Fence => "F",
            EventOp::Flush => "FL",
            EventOp::WbNoInvd => "WBNOINVD",
            EventOp::RoiBegin => "ROI",
            EventOp::Load => "LD",
            EventOp::Store => "ST",
            EventOp::Alloc => "ALLOC",
            EventOp::Free => "FREE",
            EventOp::Fork => "FORK",
            EventOp::Exit => "EXIT",
            EventOp::IoRead => "IOR",
            EventOp::IoWrite => "IOW",
        }
    }

    pub fn from_mnemonic(s: &str) -> Option<EventOp> {
        EventOp::ALL.iter().copied().find(|o| o.mnemonic() == s)
    }

    /// Whether only OS-level traces may hold this op (everything but the v1 ops).
    pub fn is_os(self) -> bool {
        (self as u8) >= 4
    }

    /// Whether the binary record has the 16-byte OS extension (op codes 8-15).
    pub fn is_extended(self) -> bool {
        (self as u8) & 8 != 0
    }
}

impl fmt::Display for EventOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mnemonic())
    }
}

impl Event {
    pub fn op(&self) -> EventOp {
        match self {
            Event::Phys(r) => match r.op {
                Op::Read => EventOp::Read,
                Op::Write => EventOp::Write,
                Op::Fence => EventOp::Fence,
                Op::Flush => EventOp::Flush,
            },
            Event::Load { .. } => EventOp::Load,
            Event::Store { .. } => EventOp::Store,
            Event::Alloc { .. } => EventOp::Alloc,
            Event::Free { .. } => EventOp::Free,
            Event::Fork { .. } => EventOp::Fork,
            Event::Exit { .. } => EventOp::Exit,
            Event::WbNoInvd => EventOp::WbNoInvd,
            Event::RoiBegin => EventOp::RoiBegin,
            Event::Io { write: false, .. } => EventOp::IoRead,
            Event::Io { write: true, .. } => EventOp::IoWrite,
        }
    }

    /// Non-memory instructions retired before this record (0 for records that are not
    /// instructions of the traced program: alloc, free, fork, exit, roi).
    pub fn inst_gap(&self) -> u32 {
        match self {
            Event::Phys(r) => r.inst_gap,
            Event::Load { inst_gap, .. } | Event::Store { inst_gap, .. } | Event::Io { inst_gap, .. } => *inst_gap,
            _ => 0,
        }
    }

    /// Whether the core executes this record as an instruction (loads, stores, fences,
    /// flushes, wbnoinvd); the OS operations are the kernel's and are not timed.
    pub fn is_instruction(&self) -> bool {
        matches!(
            self,
            Event::Phys(_) | Event::Load { .. } | Event::Store { .. } | Event::WbNoInvd | Event::Io { .. }
        )
    }

    /// Every pid this record names.
    pub fn pids(&self) -> impl Iterator<Item = u32> {
        let (a, b) = match *self {
            Event::Load { pid, .. }
            | Event::Store { pid, .. }
            | Event::Alloc { pid, .. }
            | Event::Free { pid, .. }
            | Event::Io { pid, .. }
            | Event::Exit { pid } => (Some(pid), None),
            Event::Fork { parent, child } => (Some(parent), Some(child)),
            _ => (None, None),
        };
        a.into_iter().chain(b)
    }

    /// Checks what the format itself requires of a record (pids in range, data only on
    /// stores); the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        for pid in self.pids() {
            if pid > MAX_PID {
                return Err(format!("pid {pid} out of range (0..={MAX_PID})"));
            }
        }
        if let Event::Io { bytes, offset, .. } = *self {
            if bytes == 0 || bytes % 512 != 0 || offset % 512 != 0 {
                return Err(format!("an I/O of {bytes} bytes at offset {offset}: both must be whole 512 B blocks, the length not 0"));
            }
        }
        if let Event::Phys(r) = self {
            if r.data.is_some() && r.op != Op::Write {
                return Err(format!(
                    "data payload on a {:?} record (only writes carry data)",
                    r.op
                ));
            }
        }
        Ok(())
    }

    /// What a writer checks before encoding a record into a trace of `kind`:
    /// [`validate`](Self::validate), and OS records only in an OS-level trace (`os_header`
    /// says, for the message, how that trace's header announces it). Returns the record's op.
    pub fn check_writable(&self, kind: TraceKind, os_header: fmt::Arguments<'_>) -> Result<EventOp, String> {
        self.validate()?;
        let op = self.op();
        if op.is_os() && !kind.os_level {
            return Err(format!("{op} record in a trace not written as OS-level ({os_header})"));
        }
        Ok(op)
    }
}

impl fmt::Display for Event {
    /// The record in its text form (without data), for error messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.op().mnemonic();
        match self {
            Event::Phys(r) => write!(f, "{m} {:#x} {} {}", r.addr, r.size_bytes, r.inst_gap),
            Event::Load {
                pid,
                vaddr,
                size_bytes,
                inst_gap,
            }
            | Event::Store {
                pid,
                vaddr,
                size_bytes,
                inst_gap,
                ..
            } => write!(f, "{m} {pid} {vaddr:#x} {size_bytes} {inst_gap}"),
            Event::Alloc {
                pid,
                vaddr,
                length,
                page,
            } => write!(f, "{m} {pid} {vaddr:#x} {length} {}", page.name()),
            Event::Free { pid, vaddr, length } => write!(f, "{m} {pid} {vaddr:#x} {length}"),
            Event::Fork { parent, child } => write!(f, "{m} {parent} {child}"),
            Event::Exit { pid } => write!(f, "{m} {pid}"),
            Event::WbNoInvd | Event::RoiBegin => f.write_str(m),
            Event::Io { pid, offset, bytes, inst_gap, .. } => write!(f, "{m} {pid} {offset:#x} {bytes} {inst_gap}"),
        }
    }
}

/// What a secmem trace's header says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TraceKind {
    /// Format version (1 or 2); 0 for foreign formats, which have none.
    pub version: u16,
    /// The header announces OS-level records (v2 only).
    pub os_level: bool,
    /// The records' addresses are a program's virtual addresses (captured from a program:
    /// valgrind lackey, `secmem trace capture`), to be translated to physical frames by the
    /// simulator; false: physical addresses. Not with `os_level` (an OS-level trace has its
    /// own address spaces).
    pub virtual_addresses: bool,
}

impl TraceKind {
    pub const V1: TraceKind = TraceKind {
        version: 1,
        os_level: false,
        virtual_addresses: false,
    };
    pub const V2: TraceKind = TraceKind {
        version: 2,
        os_level: false,
        virtual_addresses: false,
    };
    pub const V2_OS: TraceKind = TraceKind {
        version: 2,
        os_level: true,
        virtual_addresses: false,
    };

    /// This kind, with its addresses marked virtual (or not).
    pub fn with_virtual_addresses(self, virtual_addresses: bool) -> TraceKind { TraceKind { virtual_addresses, ..self } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_codes_mnemonics_and_extension_bit_agree() {
        for op in EventOp::ALL {
            assert_eq!(EventOp::from_code(op as u8), Some(op));
            assert_eq!(EventOp::from_mnemonic(op.mnemonic()), Some(op));
            assert_eq!(op.is_extended(), (op as u8) >= 8);
        }
        for code in [6u8, 7, 16, 255] {
            assert_eq!(EventOp::from_code(code), None);
        }
    }

    #[test]
    fn page_sizes_parse_and_shift() {
        assert_eq!("4k".parse::<PageSize>().unwrap().bytes(), 4096);
        assert_eq!("2m".parse::<PageSize>().unwrap().bytes(), 2 << 20);
        assert_eq!(PageSize::from_shift(13), None);
        assert_eq!(
            "3k".parse::<PageSize>().unwrap_err(),
            "bad page size '3k' (expected 4k or 2m)"
        );
    }

    #[test]
    fn pids_beyond_linux_pid_max_are_rejected() {
        assert!(Event::Exit { pid: MAX_PID }.validate().is_ok());
        let e = Event::Fork {
            parent: 1,
            child: MAX_PID + 1,
        }
        .validate()
        .unwrap_err();
        assert_eq!(e, "pid 4194304 out of range (0..=4194303)");
    }
}
