//! secmem-trace: what a workload says to the memory system.
//!
//! A trace is a stream of [`Record`]s. Formats are documented in `docs/trace-format.md`.

/// The operation of one trace record.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// A load of `size_bytes` at `addr`.
    Read = 0,
    /// A store of `size_bytes` at `addr` (data payload optional).
    Write = 1,
    /// A persist barrier (sfence after clwb): waits until all earlier writes are persistent.
    Fence = 2,
    /// A cache-line write-back (clwb/clflushopt) of the line holding `addr`.
    Flush = 3,
}

/// One trace record. `inst_gap` is the number of non-memory instructions retired since the
/// previous record (the core model turns it into cycles).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub op: Op,
    pub addr: u64,
    pub size_bytes: u16,
    pub inst_gap: u32,
    /// The 64 B line content after this write (writes only; `None` when the trace has no data).
    pub data: Option<[u8; 64]>,
}

impl Record {
    pub fn read(addr: u64, inst_gap: u32) -> Record {
        Record { op: Op::Read, addr, size_bytes: 64, inst_gap, data: None }
    }
    pub fn write(addr: u64, inst_gap: u32) -> Record {
        Record { op: Op::Write, addr, size_bytes: 64, inst_gap, data: None }
    }
}
