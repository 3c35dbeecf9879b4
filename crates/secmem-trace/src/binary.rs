//! The secmem binary trace format, versions 1 and 2 (layout in `docs/trace-format.md`).
//!
//! ```text
//! header (16 B): magic "SECMTRC\0" | version u16 LE (1 or 2) | flags u16 LE | reserved u32 = 0
//! record (16 B): op u8 | flags u8 | size_bytes u16 LE | inst_gap u32 LE | addr u64 LE
//!                [+ 16 B OS extension for v2 op codes 8-15: pid u32 | pid2 u32 | length u64]
//!                [+ 64 B data payload when record flag bit 0 is set]
//!                [+ 3-65 B compact data payload when record flag bit 1 is set]
//! ```
//!
//! [`BinaryReader`] reads both versions; as an iterator it yields physical [`Record`]s, and
//! [`BinaryReader::events`] yields every record as an [`Event`]. [`BinaryWriter::new`] writes
//! version 1 (a physical trace stays readable by version-1 readers);
//! [`BinaryWriter::with_kind`] writes version 2, OS-level or not.

use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};

use crate::error::{ErrorKind, Position, TraceError, MEMORY_NAME};
use crate::event::{Event, EventOp, PageSize, TraceKind, MAX_PID};
use crate::payload::{PayloadDecoder, PayloadEncoder};
use crate::{Op, Record};

/// The 8-byte magic at the start of every secmem binary trace.
pub const MAGIC: [u8; 8] = *b"SECMTRC\0";
/// The newest binary format version this crate reads and writes (it reads 1 and 2).
pub const VERSION: u16 = 2;
/// Size of the file header in bytes.
pub const HEADER_BYTES: usize = 16;
/// Size of the fixed part of a record in bytes.
pub const RECORD_BYTES: usize = 16;
/// Size of an optional data payload in bytes.
pub const DATA_BYTES: usize = 64;
/// Header flag bit 0: records may carry a data payload.
pub const HEADER_FLAG_DATA: u16 = 1;
/// Header flag bit 1 (version 2): an OS-level trace; records may be OS records (op 4+).
pub const HEADER_FLAG_OS: u16 = 2;
/// Header flag bit 2: the records' addresses are virtual (a program's), for the simulator to
/// translate; not with [`HEADER_FLAG_OS`].
pub const HEADER_FLAG_VIRTUAL: u16 = 4;
/// Header flag bit 3: data payloads may be compact (record flag bit 1, see [`crate::payload`]).
/// Writers set it with bit 0, so a reader that predates compact payloads refuses the file at
/// its header rather than at the first compact record.
pub const HEADER_FLAG_COMPACT_DATA: u16 = 8;
/// Size of the OS extension that follows the fixed part of op codes 8-15 (version 2).
pub const OS_EXTENSION_BYTES: usize = 16;
/// Record flag bit 0: a 64-byte data payload follows the fixed part.
pub const RECORD_FLAG_DATA: u8 = 1;
/// Record flag bit 1: a compact data payload follows the fixed part (see [`crate::payload`]).
pub const RECORD_FLAG_DATA_COMPACT: u8 = 2;

const READ_BUFFER: usize = 1 << 20;
const WRITE_BUFFER: usize = 1 << 20;

/// The decoded file header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BinaryHeader {
    pub version: u16,
    pub flags: u16,
}

impl BinaryHeader {
    /// Whether records of this trace may carry data payloads.
    pub fn may_carry_data(&self) -> bool {
        self.flags & HEADER_FLAG_DATA != 0
    }

    /// Whether this is an OS-level trace (version 2, header flag bit 1).
    pub fn os_level(&self) -> bool {
        self.flags & HEADER_FLAG_OS != 0
    }

    pub fn kind(&self) -> TraceKind {
        TraceKind {
            version: self.version,
            os_level: self.os_level(),
            virtual_addresses: self.flags & HEADER_FLAG_VIRTUAL != 0,
        }
    }

    fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&self.version.to_le_bytes());
        h[10..12].copy_from_slice(&self.flags.to_le_bytes());
        h
    }
}

/// Encodes the fixed 16-byte part of a record (no validation).
#[inline]
fn encode_fixed(rec: &Record) -> [u8; RECORD_BYTES] {
    let mut b = [0u8; RECORD_BYTES];
    b[0] = rec.op as u8;
    b[1] = if rec.data.is_some() {
        RECORD_FLAG_DATA_COMPACT
    } else {
        0
    };
    b[2..4].copy_from_slice(&rec.size_bytes.to_le_bytes());
    b[4..8].copy_from_slice(&rec.inst_gap.to_le_bytes());
    b[8..16].copy_from_slice(&rec.addr.to_le_bytes());
    b
}

/// Fills the fixed part and the OS extension of a version-2 record.
fn put(b: &mut [u8; 32], size: u16, gap: u32, addr: u64, pid: u32, pid2: u32, length: u64) {
    b[2..4].copy_from_slice(&size.to_le_bytes());
    b[4..8].copy_from_slice(&gap.to_le_bytes());
    b[8..16].copy_from_slice(&addr.to_le_bytes());
    b[16..20].copy_from_slice(&pid.to_le_bytes());
    b[20..24].copy_from_slice(&pid2.to_le_bytes());
    b[24..32].copy_from_slice(&length.to_le_bytes());
}

/// Reads until `buf` is full or EOF; returns how many bytes were read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Writes secmem binary v1 traces. Output is buffered; call [`BinaryWriter::finish`] to flush.
pub struct BinaryWriter<W: Write> {
    out: BufWriter<W>,
    name: String,
    offset: u64,
    records: u64,
    allow_data: bool,
    kind: TraceKind,
    payloads: PayloadEncoder,
    scratch: Vec<u8>,
}

impl<W: Write> BinaryWriter<W> {
    /// Writes the header (with the "records may carry data" flag set).
    pub fn new(inner: W) -> Result<Self, TraceError> {
        Self::with_options(inner, MEMORY_NAME, true)
    }

    /// Writes the header; `name` is used in errors; `allow_data` sets header flag bit 0.
    /// With `allow_data == false`, writing a record that carries data is an error.
    pub fn with_options(
        inner: W,
        name: impl Into<String>,
        allow_data: bool,
    ) -> Result<Self, TraceError> {
        Self::with_kind(inner, name, allow_data, TraceKind::V1)
    }

    /// Writes the header of `kind` (version 1 or 2; `os_level` sets header flag bit 1 and
    /// needs version 2). Only an OS-level writer accepts OS records.
    pub fn with_kind(
        inner: W,
        name: impl Into<String>,
        allow_data: bool,
        kind: TraceKind,
    ) -> Result<Self, TraceError> {
        let name = name.into();
        if !(kind.version == 1 && !kind.os_level || kind.version == 2) || kind.os_level && kind.virtual_addresses {
            return Err(TraceError::at_offset(
                name,
                0,
                ErrorKind::UnsupportedVersion,
                format!(
                    "cannot write binary trace version {}{} (versions 1 and 2; OS-level needs 2 and cannot be virtual)",
                    kind.version,
                    if kind.os_level { " OS-level" } else { "" }
                ),
            ));
        }
        let mut w = BinaryWriter {
            out: BufWriter::with_capacity(WRITE_BUFFER, inner),
            name,
            offset: 0,
            records: 0,
            allow_data,
            kind,
            payloads: PayloadEncoder::new(),
            scratch: Vec::with_capacity(1 + DATA_BYTES),
        };
        let header = BinaryHeader {
            version: kind.version,
            flags: if allow_data { HEADER_FLAG_DATA | HEADER_FLAG_COMPACT_DATA } else { 0 }
                | if kind.os_level { HEADER_FLAG_OS } else { 0 }
                | if kind.virtual_addresses { HEADER_FLAG_VIRTUAL } else { 0 },
        };
        w.out
            .write_all(&header.encode())
            .map_err(|e| TraceError::io(w.name.clone(), Position::Offset(0), e))?;
        w.offset = HEADER_BYTES as u64;
        Ok(w)
    }

    /// Appends one record. Data payloads are only allowed on writes.
    pub fn write(&mut self, rec: &Record) -> Result<(), TraceError> {
        if let Some(data) = &rec.data {
            if rec.op != Op::Write {
                return Err(TraceError::at_offset(
                    self.name.clone(),
                    self.offset,
                    ErrorKind::InvalidRecord,
                    format!(
                        "record #{}: data payload on a {:?} record (only writes carry data)",
                        self.records, rec.op
                    ),
                ));
            }
            if !self.allow_data {
                return Err(TraceError::at_offset(
                    self.name.clone(),
                    self.offset,
                    ErrorKind::InvalidRecord,
                    format!(
                        "record #{}: carries data but the writer was created without data",
                        self.records
                    ),
                ));
            }
            let fixed = encode_fixed(rec);
            self.payloads.encode(data, &mut self.scratch);
            let r = self
                .out
                .write_all(&fixed)
                .and_then(|_| self.out.write_all(&self.scratch));
            r.map_err(|e| TraceError::io(self.name.clone(), Position::Offset(self.offset), e))?;
            self.offset += (RECORD_BYTES + self.scratch.len()) as u64;
        } else {
            self.out
                .write_all(&encode_fixed(rec))
                .map_err(|e| TraceError::io(self.name.clone(), Position::Offset(self.offset), e))?;
            self.offset += RECORD_BYTES as u64;
        }
        self.records += 1;
        Ok(())
    }

    /// Appends one record of any kind; OS records need an OS-level writer.
    pub fn write_event(&mut self, ev: &Event) -> Result<(), TraceError> {
        let bad = |w: &Self, msg: String| {
            Err(TraceError::at_offset(
                w.name.clone(),
                w.offset,
                ErrorKind::InvalidRecord,
                format!("record #{}: {msg}", w.records),
            ))
        };
        let op = match ev.check_writable(self.kind, format_args!("version 2, header flag bit 1")) {
            Ok(op) => op,
            Err(m) => return bad(self, m),
        };
        let mut b = [0u8; RECORD_BYTES + OS_EXTENSION_BYTES];
        b[0] = op as u8;
        let mut payload = None;
        match *ev {
            Event::Phys(ref r) => return self.write(r),
            Event::WbNoInvd | Event::RoiBegin => {}
            Event::Load {
                pid,
                vaddr,
                size_bytes,
                inst_gap,
            } => {
                put(&mut b, size_bytes, inst_gap, vaddr, pid, 0, 0);
            }
            Event::Store {
                pid,
                vaddr,
                size_bytes,
                inst_gap,
                ref data,
            } => {
                put(&mut b, size_bytes, inst_gap, vaddr, pid, 0, 0);
                if let Some(d) = data {
                    if !self.allow_data {
                        return bad(self, "carries data but the writer was created without data".into());
                    }
                    b[1] = RECORD_FLAG_DATA_COMPACT;
                    self.payloads.encode(d, &mut self.scratch);
                    payload = Some(());
                }
            }
            Event::Alloc {
                pid,
                vaddr,
                length,
                page,
            } => put(&mut b, page.shift(), 0, vaddr, pid, 0, length),
            Event::Free { pid, vaddr, length } => put(&mut b, 0, 0, vaddr, pid, 0, length),
            Event::Fork { parent, child } => put(&mut b, 0, 0, 0, parent, child, 0),
            Event::Exit { pid } => put(&mut b, 0, 0, 0, pid, 0, 0),
            Event::Io { pid, offset, bytes, inst_gap, .. } => put(&mut b, 0, inst_gap, offset, pid, 0, u64::from(bytes)),
        }
        let len = if op.is_extended() {
            RECORD_BYTES + OS_EXTENSION_BYTES
        } else {
            RECORD_BYTES
        };
        let r = self.out.write_all(&b[..len]).and_then(|_| match payload {
            Some(()) => self.out.write_all(&self.scratch),
            None => Ok(()),
        });
        r.map_err(|e| TraceError::io(self.name.clone(), Position::Offset(self.offset), e))?;
        self.offset += (len + if payload.is_some() { self.scratch.len() } else { 0 }) as u64;
        self.records += 1;
        Ok(())
    }

    /// Records written so far.
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Bytes written so far (header included).
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    /// Flushes everything and returns the inner writer.
    pub fn finish(self) -> Result<W, TraceError> {
        let name = self.name;
        let offset = self.offset;
        self.out
            .into_inner()
            .map_err(|e| TraceError::io(name.clone(), Position::Offset(offset), e.into_error()))
            .and_then(|mut w| {
                w.flush()
                    .map_err(|e| TraceError::io(name, Position::Offset(offset), e))?;
                Ok(w)
            })
    }
}

/// Reads secmem binary v1 traces as an iterator of records.
///
/// Iteration ends at EOF on a record boundary; after the first error, it ends too.
pub struct BinaryReader<R: Read> {
    inp: BufReader<R>,
    name: String,
    header: BinaryHeader,
    offset: u64,
    done: bool,
    payloads: PayloadDecoder,
}

impl<R: Read> BinaryReader<R> {
    /// Reads and checks the header; errors name `"<memory>"`.
    pub fn new(inner: R) -> Result<Self, TraceError> {
        Self::with_name(inner, MEMORY_NAME)
    }

    /// Reads and checks the header; errors name `name`.
    pub fn with_name(inner: R, name: impl Into<String>) -> Result<Self, TraceError> {
        let name = name.into();
        let mut inp = BufReader::with_capacity(READ_BUFFER, inner);
        let mut h = [0u8; HEADER_BYTES];
        let n = read_full(&mut inp, &mut h)
            .map_err(|e| TraceError::io(name.clone(), Position::Offset(0), e))?;
        let magic_len = n.min(MAGIC.len());
        if h[..magic_len] != MAGIC[..magic_len] || n == 0 {
            return Err(TraceError::at_offset(
                name,
                0,
                ErrorKind::BadMagic,
                "not a secmem binary trace (bad magic; expected \"SECMTRC\\0\")",
            ));
        }
        if n < HEADER_BYTES {
            return Err(TraceError::at_offset(
                name,
                0,
                ErrorKind::Truncated,
                format!("truncated header (needs {HEADER_BYTES} bytes, {n} left)"),
            ));
        }
        let version = u16::from_le_bytes([h[8], h[9]]);
        if !(1..=VERSION).contains(&version) {
            return Err(TraceError::at_offset(
                name,
                8,
                ErrorKind::UnsupportedVersion,
                format!("unsupported binary trace version {version} (this reader supports versions 1 and 2)"),
            ));
        }
        let flags = u16::from_le_bytes([h[10], h[11]]);
        let known = if version == 1 {
            HEADER_FLAG_DATA | HEADER_FLAG_VIRTUAL | HEADER_FLAG_COMPACT_DATA
        } else {
            HEADER_FLAG_DATA | HEADER_FLAG_OS | HEADER_FLAG_VIRTUAL | HEADER_FLAG_COMPACT_DATA
        };
        if flags & !known != 0 {
            return Err(TraceError::at_offset(
                name,
                10,
                ErrorKind::ReservedBits,
                format!("header flags 0x{flags:04x} have reserved bits set"),
            ));
        }
        if flags & HEADER_FLAG_OS != 0 && flags & HEADER_FLAG_VIRTUAL != 0 {
            return Err(TraceError::at_offset(
                name,
                10,
                ErrorKind::ReservedBits,
                "header flags mark an OS-level trace virtual: OS-level traces carry their own address spaces".to_string(),
            ));
        }
        let reserved = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
        if reserved != 0 {
            return Err(TraceError::at_offset(
                name,
                12,
                ErrorKind::ReservedBits,
                format!("reserved header field is 0x{reserved:08x} (must be 0)"),
            ));
        }
        Ok(BinaryReader {
            inp,
            name,
            header: BinaryHeader { version, flags },
            offset: HEADER_BYTES as u64,
            done: false,
            payloads: PayloadDecoder::new(),
        })
    }

    /// The decoded header.
    pub fn header(&self) -> BinaryHeader {
        self.header
    }

    /// Byte offset of the next record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    #[cold]
    #[inline(never)]
    fn fail<T>(&mut self, at: u64, kind: ErrorKind, msg: String) -> Option<Result<T, TraceError>> {
        self.done = true;
        Some(Err(TraceError::at_offset(self.name.clone(), at, kind, msg)))
    }

    #[cold]
    #[inline(never)]
    fn fail_io<T>(&mut self, at: u64, e: io::Error) -> Option<Result<T, TraceError>> {
        self.done = true;
        Some(Err(TraceError::io(
            self.name.clone(),
            Position::Offset(at),
            e,
        )))
    }

    /// Fills `buf` from the buffered input; `Ok(n)` with `n < buf.len()` means EOF after `n`.
    #[inline]
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let avail = self.inp.buffer();
        if avail.len() >= buf.len() {
            buf.copy_from_slice(&avail[..buf.len()]);
            self.inp.consume(buf.len());
            Ok(buf.len())
        } else {
            read_full(&mut self.inp, buf)
        }
    }
}

impl<R: Read> Iterator for BinaryReader<R> {
    type Item = Result<Record, TraceError>;

    /// Fast path: a data-less, valid record entirely in the buffer. Everything else (refills,
    /// payloads, errors, EOF) goes through `next_general`.
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if let Some(b) = self.inp.buffer().get(..RECORD_BYTES) {
            let b: &[u8; RECORD_BYTES] = b.try_into().expect("slice of length RECORD_BYTES");
            let op = b[0];
            if b[1] == 0 && op <= 3 && !self.done {
                let rec = Record {
                    op: match op {
                        0 => Op::Read,
                        1 => Op::Write,
                        2 => Op::Fence,
                        _ => Op::Flush,
                    },
                    size_bytes: u16::from_le_bytes([b[2], b[3]]),
                    inst_gap: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
                    addr: u64::from_le_bytes([
                        b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15],
                    ]),
                    data: None,
                };
                self.inp.consume(RECORD_BYTES);
                self.offset += RECORD_BYTES as u64;
                return Some(Ok(rec));
            }
        }
        self.next_general()
    }
}

impl<R: Read> BinaryReader<R> {
    /// The record path outside the fast path: a physical record, or an error (an OS record
    /// cannot be a [`Record`]).
    #[inline(never)]
    fn next_general(&mut self) -> Option<Result<Record, TraceError>> {
        let at = self.offset;
        match self.decode()? {
            Ok(Event::Phys(r)) => Some(Ok(r)),
            Ok(ev) => self.fail(
                at,
                ErrorKind::InvalidRecord,
                format!(
                    "{} record in a physical-record stream: this is an OS-level trace; read it \
                     as events (`secmem run` drives the OS model with it)",
                    ev.op()
                ),
            ),
            Err(e) => Some(Err(e)),
        }
    }

    /// The next record as an [`Event`] (version-1 records are [`Event::Phys`]).
    pub fn next_event(&mut self) -> Option<Result<Event, TraceError>> {
        // Physical records take the record fast path.
        if matches!(self.inp.buffer().first(), Some(&op) if op <= 3) && !self.done {
            return self.next().map(|r| r.map(Event::Phys));
        }
        self.decode()
    }

    /// An iterator of [`Event`]s over the rest of the trace.
    pub fn events(self) -> BinaryEvents<R> {
        BinaryEvents(self)
    }

    /// Decodes one record of either version, checking every rule of the format.
    fn decode(&mut self) -> Option<Result<Event, TraceError>> {
        if self.done {
            return None;
        }
        let at = self.offset;
        let mut b = [0u8; RECORD_BYTES + OS_EXTENSION_BYTES];
        let n = match self.fill(&mut b[..RECORD_BYTES]) {
            Ok(n) => n,
            Err(e) => return self.fail_io(at, e),
        };
        if n == 0 {
            self.done = true;
            return None;
        }
        let v2 = self.header.version >= 2;
        let op = match EventOp::from_code(b[0]).filter(|o| v2 || !o.is_os()) {
            Some(op) => op,
            None => {
                let expected = if v2 {
                    "0=Read, 1=Write, 2=Fence, 3=Flush, 4=WbNoInvd, 5=RoiBegin, 8=Load, 9=Store, \
                     10=Alloc, 11=Free, 12=Fork, 13=Exit, 14=IoRead, 15=IoWrite"
                } else {
                    "0=Read, 1=Write, 2=Fence, 3=Flush"
                };
                return self.fail(
                    at,
                    ErrorKind::UnknownOp,
                    format!("unknown operation byte {} (expected {expected})", b[0]),
                );
            }
        };
        let len = if op.is_extended() {
            RECORD_BYTES + OS_EXTENSION_BYTES
        } else {
            RECORD_BYTES
        };
        let mut got = n;
        if n == RECORD_BYTES && len > RECORD_BYTES {
            got += match self.fill(&mut b[RECORD_BYTES..]) {
                Ok(m) => m,
                Err(e) => return self.fail_io(at, e),
            };
        }
        if got < len {
            return self.fail(
                at,
                ErrorKind::Truncated,
                format!("truncated record (needs {len} bytes, {got} left)"),
            );
        }
        if op.is_os() && !self.header.os_level() {
            return self.fail(
                at,
                ErrorKind::InvalidRecord,
                format!(
                    "{op} record (op byte {}) in a trace whose header does not announce OS \
                     records (header flag bit 1)",
                    b[0]
                ),
            );
        }
        let flags = b[1];
        if flags & !(RECORD_FLAG_DATA | RECORD_FLAG_DATA_COMPACT) != 0 || flags == RECORD_FLAG_DATA | RECORD_FLAG_DATA_COMPACT {
            return self.fail(
                at + 1,
                ErrorKind::ReservedBits,
                format!("record flags 0x{flags:02x} have reserved bits set"),
            );
        }
        let size_bytes = u16::from_le_bytes([b[2], b[3]]);
        let inst_gap = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let addr = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
        let pid = u32::from_le_bytes(b[16..20].try_into().expect("4 bytes"));
        let pid2 = u32::from_le_bytes(b[20..24].try_into().expect("4 bytes"));
        let length = u64::from_le_bytes(b[24..32].try_into().expect("8 bytes"));
        // Fields an op does not use are reserved: they must be 0, so a later version can give
        // them meaning.
        let unused: &[(&str, u64, u64)] = match op {
            EventOp::WbNoInvd | EventOp::RoiBegin => &[
                ("size_bytes", size_bytes as u64, 2),
                ("inst_gap", inst_gap as u64, 4),
                ("addr", addr, 8),
            ],
            EventOp::Load | EventOp::Store => &[("pid2", pid2 as u64, 20), ("length", length, 24)],
            EventOp::Alloc => &[("inst_gap", inst_gap as u64, 4), ("pid2", pid2 as u64, 20)],
            EventOp::Free => &[
                ("size_bytes", size_bytes as u64, 2),
                ("inst_gap", inst_gap as u64, 4),
                ("pid2", pid2 as u64, 20),
            ],
            EventOp::Fork => &[
                ("size_bytes", size_bytes as u64, 2),
                ("inst_gap", inst_gap as u64, 4),
                ("addr", addr, 8),
                ("length", length, 24),
            ],
            EventOp::IoRead | EventOp::IoWrite => &[("size_bytes", size_bytes as u64, 2), ("pid2", pid2 as u64, 20)],
            EventOp::Exit => &[
                ("size_bytes", size_bytes as u64, 2),
                ("inst_gap", inst_gap as u64, 4),
                ("addr", addr, 8),
                ("pid2", pid2 as u64, 20),
                ("length", length, 24),
            ],
            _ => &[],
        };
        if let Some(&(field, v, off)) = unused.iter().find(|u| u.1 != 0) {
            return self.fail(
                at + off,
                ErrorKind::ReservedBits,
                format!("{field} of this {op} record is {v} (unused by {op}: must be 0)"),
            );
        }
        if op.is_extended() {
            let pids: &[(u32, u64)] = if op == EventOp::Fork {
                &[(pid, 16), (pid2, 20)]
            } else {
                &[(pid, 16)]
            };
            if let Some(&(p, off)) = pids.iter().find(|p| p.0 > MAX_PID) {
                return self.fail(
                    at + off,
                    ErrorKind::InvalidRecord,
                    format!("pid {p} out of range (0..={MAX_PID})"),
                );
            }
        }
        let page = if op == EventOp::Alloc {
            match PageSize::from_shift(size_bytes) {
                Some(p) => Some(p),
                None => {
                    return self.fail(
                        at + 2,
                        ErrorKind::InvalidRecord,
                        format!(
                            "bad page size: shift {size_bytes} (expected 12 = 4 KB or 21 = 2 MB)"
                        ),
                    )
                }
            }
        } else {
            None
        };
        let (data, payload_bytes) = if flags != 0 {
            if !matches!(op, EventOp::Write | EventOp::Store) {
                return self.fail(
                    at + 1,
                    ErrorKind::InvalidRecord,
                    format!("data payload on a {} record (only writes carry data)", op_name(op)),
                );
            }
            if !self.header.may_carry_data() {
                return self.fail(
                    at + 1,
                    ErrorKind::InvalidRecord,
                    "record carries data but the header says records carry no data".to_string(),
                );
            }
            let pat = at + len as u64;
            if flags == RECORD_FLAG_DATA_COMPACT {
                if self.header.flags & HEADER_FLAG_COMPACT_DATA == 0 {
                    return self.fail(
                        at + 1,
                        ErrorKind::InvalidRecord,
                        "record carries a compact payload but the header does not announce them (header flag bit 3)".to_string(),
                    );
                }
                let mut dec = std::mem::replace(&mut self.payloads, PayloadDecoder::new());
                let mut used = 0usize;
                let got = dec.decode(&mut |buf| {
                    let n = self.fill(buf)?;
                    used += n;
                    Ok(n)
                });
                self.payloads = dec;
                match got {
                    Err(e) => return self.fail_io(pat, e),
                    Ok(Err((off, kind, msg))) => return self.fail(pat + off, kind, msg),
                    Ok(Ok(d)) => (Some(d), used),
                }
            } else {
                let mut d = [0u8; DATA_BYTES];
                let n = match self.fill(&mut d) {
                    Ok(n) => n,
                    Err(e) => return self.fail_io(pat, e),
                };
                if n < DATA_BYTES {
                    return self.fail(
                        pat,
                        ErrorKind::Truncated,
                        format!("truncated data payload (needs {DATA_BYTES} bytes, {n} left)"),
                    );
                }
                (Some(d), DATA_BYTES)
            }
        } else {
            (None, 0)
        };
        self.offset += (len + payload_bytes) as u64;
        let phys = |op| {
            Event::Phys(Record {
                op,
                addr,
                size_bytes,
                inst_gap,
                data,
            })
        };
        Some(Ok(match op {
            EventOp::Read => phys(Op::Read),
            EventOp::Write => phys(Op::Write),
            EventOp::Fence => phys(Op::Fence),
            EventOp::Flush => phys(Op::Flush),
            EventOp::WbNoInvd => Event::WbNoInvd,
            EventOp::RoiBegin => Event::RoiBegin,
            EventOp::Load => Event::Load {
                pid,
                vaddr: addr,
                size_bytes,
                inst_gap,
            },
            EventOp::Store => Event::Store {
                pid,
                vaddr: addr,
                size_bytes,
                inst_gap,
                data,
            },
            EventOp::Alloc => Event::Alloc {
                pid,
                vaddr: addr,
                length,
                page: page.expect("checked above"),
            },
            EventOp::Free => Event::Free {
                pid,
                vaddr: addr,
                length,
            },
            EventOp::Fork => Event::Fork {
                parent: pid,
                child: pid2,
            },
            EventOp::Exit => Event::Exit { pid },
            EventOp::IoRead | EventOp::IoWrite => {
                let Ok(bytes) = u32::try_from(length) else {
                    return self.fail(at + 24, ErrorKind::InvalidRecord, format!("an I/O of {length} bytes (at most {} a record)", u32::MAX));
                };
                let ev = Event::Io { pid, write: op == EventOp::IoWrite, offset: addr, bytes, inst_gap };
                if let Err(m) = ev.validate() {
                    return self.fail(at + 8, ErrorKind::InvalidRecord, m);
                }
                ev
            }
        }))
    }
}

/// The v1 name of physical ops in messages (`Read`, `Write`...), the mnemonic of the others.
fn op_name(op: EventOp) -> String {
    match op {
        EventOp::Read => "Read".into(),
        EventOp::Write => "Write".into(),
        EventOp::Fence => "Fence".into(),
        EventOp::Flush => "Flush".into(),
        other => other.to_string(),
    }
}

/// Every record of a binary trace as an [`Event`] (see [`BinaryReader::events`]).
pub struct BinaryEvents<R: Read>(BinaryReader<R>);

impl<R: Read> BinaryEvents<R> {
    pub fn header(&self) -> BinaryHeader {
        self.0.header()
    }
}

impl<R: Read> Iterator for BinaryEvents<R> {
    type Item = Result<Event, TraceError>;
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next_event()
    }
}

impl<R: Read> std::iter::FusedIterator for BinaryEvents<R> {}

impl<R: Read> std::iter::FusedIterator for BinaryReader<R> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(records: &[Record]) -> Vec<u8> {
        let mut w = BinaryWriter::new(Vec::new()).unwrap();
        for r in records {
            w.write(r).unwrap();
        }
        w.finish().unwrap()
    }

    fn decode(bytes: &[u8]) -> Result<Vec<Record>, TraceError> {
        BinaryReader::with_name(bytes, "t.bin")?.collect()
    }

    fn data(seed: u8) -> [u8; 64] {
        let mut d = [0u8; 64];
        for (i, b) in d.iter_mut().enumerate() {
            *b = seed.wrapping_mul(31).wrapping_add(i as u8);
        }
        d
    }

    fn every_op() -> Vec<Record> {
        vec![
            Record::read(0x1000, 3),
            Record::write(0x2040, 0),
            Record {
                op: Op::Write,
                addr: u64::MAX - 63,
                size_bytes: 64,
                inst_gap: u32::MAX,
                data: Some(data(7)),
            },
            Record {
                op: Op::Fence,
                addr: 0,
                size_bytes: 0,
                inst_gap: 12,
                data: None,
            },
            Record {
                op: Op::Flush,
                addr: 0xde_adbe_efc0,
                size_bytes: 64,
                inst_gap: 1,
                data: None,
            },
            Record {
                op: Op::Read,
                addr: 7,
                size_bytes: 8,
                inst_gap: 0,
                data: None,
            },
        ]
    }

    #[test]
    fn every_op_round_trips_with_and_without_data() {
        let recs = every_op();
        let bytes = encode(&recs);
        // 16 header + 6 * 16 fixed + one payload (a line of distinct bytes: tag + 64 raw).
        assert_eq!(bytes.len(), 16 + 6 * 16 + 65);
        assert_eq!(decode(&bytes).unwrap(), recs);
    }

    #[test]
    fn header_and_record_bytes_match_the_documented_layout() {
        let bytes = encode(&[Record {
            op: Op::Flush,
            addr: 0x0102030405060708,
            size_bytes: 0x0a0b,
            inst_gap: 0x11223344,
            data: None,
        }]);
        assert_eq!(&bytes[..8], b"SECMTRC\0");
        assert_eq!(&bytes[8..16], &[1, 0, 9, 0, 0, 0, 0, 0]);
        assert_eq!(
            &bytes[16..],
            &[3, 0, 0x0b, 0x0a, 0x44, 0x33, 0x22, 0x11, 8, 7, 6, 5, 4, 3, 2, 1]
        );
    }

    #[test]
    fn empty_trace_is_just_a_header_and_yields_nothing() {
        let bytes = encode(&[]);
        assert_eq!(bytes.len(), 16);
        assert_eq!(decode(&bytes).unwrap(), vec![]);
    }

    #[test]
    fn bad_magic_is_not_a_secmem_binary_trace() {
        let mut bytes = encode(&[Record::read(0, 0)]);
        bytes[0] = b'X';
        let e = decode(&bytes).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadMagic);
        assert_eq!(e.offset(), Some(0));
        assert!(e.to_string().contains("not a secmem binary trace"), "{e}");
        let e = decode(b"").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadMagic);
    }

    #[test]
    fn unsupported_version_is_named() {
        let mut bytes = encode(&[Record::read(0, 0)]);
        bytes[8] = 3;
        let e = decode(&bytes).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnsupportedVersion);
        assert_eq!(
            e.to_string(),
            "t.bin: byte offset 8: unsupported binary trace version 3 (this reader supports versions 1 and 2)"
        );
    }

    #[test]
    fn truncated_header_reports_how_much_was_left() {
        let bytes = encode(&[]);
        let e = decode(&bytes[..11]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Truncated);
        assert_eq!(
            e.to_string(),
            "t.bin: byte offset 0: truncated header (needs 16 bytes, 11 left)"
        );
    }

    #[test]
    fn the_virtual_flag_round_trips_and_is_refused_on_an_os_level_trace() {
        for kind in [TraceKind::V1, TraceKind::V2] {
            let mut w = BinaryWriter::with_kind(Vec::new(), "t.bin", false, kind.with_virtual_addresses(true)).unwrap();
            w.write(&Record::read(0x7ffd_0000_1000, 0)).unwrap();
            let bytes = w.finish().unwrap();
            let r = BinaryReader::with_name(&bytes[..], "t.bin").unwrap();
            assert_eq!(r.header().kind(), kind.with_virtual_addresses(true));
        }
        let mut bytes = BinaryWriter::with_kind(Vec::new(), "t.bin", false, TraceKind::V2_OS).unwrap().finish().unwrap();
        bytes[10] |= HEADER_FLAG_VIRTUAL as u8;
        let e = BinaryReader::with_name(&bytes[..], "t.bin").err().expect("refused");
        assert_eq!(e.kind(), ErrorKind::ReservedBits);
        assert!(e.to_string().contains("OS-level"), "{e}");
    }

    #[test]
    fn nonzero_reserved_header_bits_are_rejected() {
        let mut bytes = encode(&[]);
        bytes[11] = 0x80;
        let e = decode(&bytes).unwrap_err();
        assert_eq!((e.kind(), e.offset()), (ErrorKind::ReservedBits, Some(10)));
        let mut bytes = encode(&[]);
        bytes[15] = 1;
        let e = decode(&bytes).unwrap_err();
        assert_eq!((e.kind(), e.offset()), (ErrorKind::ReservedBits, Some(12)));
    }

    #[test]
    fn unknown_op_byte_reports_its_offset() {
        let mut bytes = encode(&[Record::read(0, 0), Record::read(64, 0)]);
        bytes[32] = 9;
        let mut it = BinaryReader::with_name(&bytes[..], "t.bin").unwrap();
        assert_eq!(it.next().unwrap().unwrap(), Record::read(0, 0));
        let e = it.next().unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownOp);
        assert_eq!(
            e.to_string(),
            "t.bin: byte offset 32: unknown operation byte 9 (expected 0=Read, 1=Write, 2=Fence, 3=Flush)"
        );
        assert!(it.next().is_none(), "iteration ends after an error");
    }

    #[test]
    fn nonzero_reserved_record_flag_bits_are_rejected() {
        let mut bytes = encode(&[Record::read(0, 0)]);
        bytes[17] = 0x04;
        let e = decode(&bytes).unwrap_err();
        assert_eq!((e.kind(), e.offset()), (ErrorKind::ReservedBits, Some(17)));
        assert!(e.message().contains("0x04"));
        // Raw and compact at once is not a payload either.
        let mut w = encode(&[Record::write_data(0, 0, [0; 64])]);
        w[17] = 0x03;
        assert_eq!(decode(&w).unwrap_err().kind(), ErrorKind::ReservedBits);
    }

    #[test]
    fn truncated_binary_record_reports_its_offset() {
        let bytes = encode(&[Record::read(0, 0), Record::read(64, 0)]);
        let e = decode(&bytes[..bytes.len() - 9]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.bin: byte offset 32: truncated record (needs 16 bytes, 7 left)"
        );
    }

    #[test]
    fn truncated_payload_reports_the_payload_offset() {
        let rec = Record {
            data: Some(data(1)),
            ..Record::write(64, 0)
        };
        let bytes = encode(&[rec]);
        let e = decode(&bytes[..bytes.len() - 54]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Truncated);
        assert_eq!(
            e.to_string(),
            "t.bin: byte offset 33: truncated compact payload: a raw line needs 64 bytes, 10 left"
        );
    }

    #[test]
    fn data_on_a_read_is_rejected_by_reader_and_writer() {
        let mut bytes = encode(&[Record::read(0, 0)]);
        bytes[17] = RECORD_FLAG_DATA;
        bytes.extend_from_slice(&[0u8; 64]);
        let e = decode(&bytes).unwrap_err();
        assert_eq!((e.kind(), e.offset()), (ErrorKind::InvalidRecord, Some(17)));

        let mut w = BinaryWriter::new(Vec::new()).unwrap();
        let bad = Record {
            data: Some([0; 64]),
            ..Record::read(0, 0)
        };
        assert_eq!(w.write(&bad).unwrap_err().kind(), ErrorKind::InvalidRecord);
    }

    #[test]
    fn data_flag_in_a_no_data_trace_is_rejected() {
        let mut w = BinaryWriter::with_options(Vec::new(), "t.bin", false).unwrap();
        w.write(&Record::write(0, 0)).unwrap();
        let with_data = Record {
            data: Some([1; 64]),
            ..Record::write(0, 0)
        };
        assert_eq!(
            w.write(&with_data).unwrap_err().kind(),
            ErrorKind::InvalidRecord
        );
        let mut bytes = w.finish().unwrap();
        assert_eq!(bytes[10], 0, "header data flag is clear");
        bytes[17] = RECORD_FLAG_DATA;
        bytes.extend_from_slice(&[0u8; 64]);
        let e = decode(&bytes).unwrap_err();
        assert_eq!((e.kind(), e.offset()), (ErrorKind::InvalidRecord, Some(17)), "at the second record's flag byte");
        assert!(e.message().contains("header says"), "{e}");
    }

    /// A reader that hands out one byte at a time, to exercise the slow (refill) path.
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }

    #[test]
    fn records_split_across_reads_still_decode() {
        let recs = every_op();
        let bytes = encode(&recs);
        let got: Vec<Record> = BinaryReader::new(Trickle(&bytes))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got, recs);
        // Truncation is still detected on the slow path.
        let e = BinaryReader::new(Trickle(&bytes[..bytes.len() - 3]))
            .unwrap()
            .find_map(|r| r.err())
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::Truncated);
        assert_eq!(e.offset(), Some(bytes.len() as u64 - 16));
    }

    #[test]
    fn many_records_cross_the_read_buffer_boundary() {
        let recs: Vec<Record> = (0..100_000u64)
            .map(|i| {
                if i % 7 == 0 {
                    Record {
                        data: Some(data(i as u8)),
                        ..Record::write(i * 64, i as u32)
                    }
                } else {
                    Record::read(i * 64, i as u32)
                }
            })
            .collect();
        let bytes = encode(&recs);
        assert!(bytes.len() > READ_BUFFER);
        assert_eq!(decode(&bytes).unwrap(), recs);
    }

    /// Run with `cargo test --release -p secmem-trace -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn print_binary_decoding_ns_per_record() {
        let n = 5_000_000u64;
        let mut w = BinaryWriter::new(Vec::with_capacity(16 * n as usize + 16)).unwrap();
        for i in 0..n {
            w.write(&Record::read(i * 64, i as u32)).unwrap();
        }
        let bytes = w.finish().unwrap();
        let t = std::time::Instant::now();
        let mut acc = 0u64;
        for r in BinaryReader::new(&bytes[..]).unwrap() {
            acc = acc.wrapping_add(r.unwrap().addr);
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        // A measurement to read, not a pass/fail threshold (speed is judged by benchmarks).
        println!("binary decode: {ns:.2} ns/record (checksum {acc:x})");
    }

    #[test]
    fn random_garbage_never_panics() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for _ in 0..2000 {
            let len = rng.gen_range(0..200);
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if rng.gen_bool(0.8) && bytes.len() >= 16 {
                bytes[..16].copy_from_slice(&encode(&[])[..16]);
            }
            if let Ok(r) = BinaryReader::new(&bytes[..]) {
                let _ = r.count();
            }
        }
    }

    /// A reader that fails every other call with `Interrupted` (a signal), else reads like `&[u8]`.
    struct Interrupting<'a>(&'a [u8], bool);
    impl Read for Interrupting<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.1 = !self.1;
            if self.1 {
                return Err(io::Error::from(io::ErrorKind::Interrupted));
            }
            self.0.read(buf)
        }
    }

    /// Reads `ok` bytes, then fails with a real I/O error.
    struct FailsAfter<'a>(&'a [u8]);
    impl Read for FailsAfter<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::Error::other("disk on fire"));
            }
            self.0.read(buf)
        }
    }

    #[test]
    fn an_interrupted_read_is_retried_and_a_real_io_error_ends_the_trace_with_an_error() {
        let recs = every_op();
        let bytes = encode(&recs);
        let got: Vec<Record> = BinaryReader::new(Interrupting(&bytes, false)).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(got, recs);
        // An I/O error after the header is an error at the first record, then the end: not a
        // clean end of the trace, not a retry loop.
        let mut r = BinaryReader::new(FailsAfter(&bytes[..HEADER_BYTES])).unwrap();
        let e = r.next().unwrap().unwrap_err();
        assert_eq!((e.kind(), e.offset()), (ErrorKind::Io, Some(HEADER_BYTES as u64)), "{e}");
        assert!(r.next().is_none());
    }

    #[test]
    fn iteration_stops_at_the_first_error_even_when_valid_records_follow() {
        let mut bytes = encode(&[Record::read(0, 0), Record::read(64, 0), Record::read(128, 0)]);
        bytes[HEADER_BYTES + RECORD_BYTES + 1] = 0x02; // the second record's flags: a reserved bit
        let got: Vec<_> = BinaryReader::new(&bytes[..]).unwrap().collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].is_ok() && got[1].is_err());
    }

    #[test]
    fn writers_refuse_versions_they_cannot_write() {
        for kind in [TraceKind { version: 1, os_level: true, virtual_addresses: false }, TraceKind { version: 3, os_level: false, virtual_addresses: false }, TraceKind::V2_OS.with_virtual_addresses(true)] {
            let e = BinaryWriter::with_kind(Vec::new(), "t.bin", false, kind).err().expect("refused");
            assert_eq!(e.kind(), ErrorKind::UnsupportedVersion, "{kind:?}");
        }
    }

    #[test]
    fn byte_counts_and_reader_offsets_follow_each_record_size() {
        // A v1 record is 16 B (+65 B for a line of distinct bytes, sent raw), an OS record 32 B.
        let mut w = BinaryWriter::with_kind(Vec::new(), "t.bin", true, TraceKind::V2_OS).unwrap();
        w.write(&Record { data: Some(data(1)), ..Record::write(0x40, 0) }).unwrap();
        assert_eq!(w.bytes_written(), 16 + 81);
        w.write_event(&Event::Load { pid: 1, vaddr: 0x1000, size_bytes: 64, inst_gap: 2 }).unwrap();
        assert_eq!(w.bytes_written(), 16 + 81 + 32);
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len(), 16 + 81 + 32);
        let two = encode(&[Record::read(0, 0), Record { data: Some(data(2)), ..Record::write(64, 0) }]);
        let mut r = BinaryReader::new(&two[..]).unwrap();
        assert_eq!(r.offset(), 16);
        r.next().unwrap().unwrap();
        assert_eq!(r.offset(), 32);
        r.next().unwrap().unwrap();
        assert_eq!(r.offset(), 113);
    }

    #[test]
    fn a_raw_payload_record_still_reads_and_compact_ones_need_the_header_flag() {
        // Raw payloads (record flag bit 0, 64 B) are how data was stored before compact ones.
        let mut bytes = BinaryHeader { version: 1, flags: HEADER_FLAG_DATA }.encode().to_vec();
        bytes.extend_from_slice(&encode_fixed(&Record::write(64, 3)));
        bytes[HEADER_BYTES + 1] = RECORD_FLAG_DATA;
        bytes.extend_from_slice(&data(5));
        assert_eq!(decode(&bytes).unwrap(), vec![Record::write_data(64, 3, data(5))]);
        // A compact payload in a file whose header does not announce them is refused.
        bytes[HEADER_BYTES + 1] = RECORD_FLAG_DATA_COMPACT;
        let e = decode(&bytes).unwrap_err();
        assert_eq!(e.offset(), Some(17));
        assert!(e.message().contains("header flag bit 3"), "{e}");
    }

    #[test]
    fn repeated_lines_shrink_to_references_and_round_trip() {
        let recs: Vec<Record> = (0..1000u64).map(|i| Record::write_data(i * 64, 0, data((i % 4) as u8))).collect();
        let bytes = encode(&recs);
        assert_eq!(bytes.len(), 16 + 1000 * 16 + 4 * 65 + 996 * 3);
        assert_eq!(decode(&bytes).unwrap(), recs);
    }

    /// One OS-level record after a v2 OS header; `poke` edits its 32 bytes.
    fn os_trace(ev: Event, poke: impl FnOnce(&mut [u8])) -> Vec<u8> {
        let mut w = BinaryWriter::with_kind(Vec::new(), "t.bin", false, TraceKind::V2_OS).unwrap();
        w.write_event(&ev).unwrap();
        let mut bytes = w.finish().unwrap();
        poke(&mut bytes[HEADER_BYTES..]);
        bytes
    }

    fn decode_events(bytes: &[u8]) -> Result<Vec<Event>, TraceError> {
        let mut r = BinaryReader::with_name(bytes, "t.bin")?;
        std::iter::from_fn(|| r.next_event()).collect()
    }

    #[test]
    fn fields_an_os_record_does_not_use_must_be_zero_and_the_error_names_the_field() {
        let load = Event::Load { pid: 1, vaddr: 0x1000, size_bytes: 64, inst_gap: 0 };
        let cases: [(Event, usize, &str); 5] = [
            (load.clone(), 24, "length"),
            (load, 20, "pid2"),
            (Event::Free { pid: 1, vaddr: 0x1000, length: 4096 }, 20, "pid2"),
            (Event::Fork { parent: 1, child: 2 }, 8, "addr"),
            (Event::Exit { pid: 1 }, 2, "size_bytes"),
        ];
        for (ev, field_at, field) in cases {
            assert!(decode_events(&os_trace(ev.clone(), |_| {})).is_ok(), "{ev:?} as written");
            let e = decode_events(&os_trace(ev.clone(), |b| b[field_at] = 1)).unwrap_err();
            assert_eq!((e.kind(), e.offset()), (ErrorKind::ReservedBits, Some((HEADER_BYTES + field_at) as u64)), "{ev:?}: {e}");
            assert!(e.message().starts_with(field), "{ev:?}: {e}");
        }
    }

    #[test]
    fn a_fork_child_pid_beyond_the_largest_pid_is_rejected_at_its_field() {
        let ev = Event::Fork { parent: 1, child: 2 };
        let e = decode_events(&os_trace(ev, |b| b[20..24].copy_from_slice(&(MAX_PID + 1).to_le_bytes()))).unwrap_err();
        assert_eq!((e.kind(), e.offset()), (ErrorKind::InvalidRecord, Some(HEADER_BYTES as u64 + 20)), "{e}");
        // The largest pid itself is a valid child.
        assert!(decode_events(&os_trace(Event::Fork { parent: 1, child: MAX_PID }, |_| {})).is_ok());
    }

    #[test]
    fn a_data_flag_on_a_record_that_cannot_carry_data_names_its_op() {
        // Physical ops by their v1 name, OS ops by their mnemonic.
        for (op, name) in [(0u8, "Read"), (2, "Fence"), (3, "Flush")] {
            let mut bytes = encode(&[Record::read(0, 0)]);
            bytes[16] = op;
            bytes[17] = RECORD_FLAG_DATA;
            bytes.extend_from_slice(&[0u8; 64]);
            let e = decode(&bytes).unwrap_err();
            assert_eq!(e.to_string(), format!("t.bin: byte offset 17: data payload on a {name} record (only writes carry data)"));
        }
        let mut bytes = os_trace(Event::Load { pid: 1, vaddr: 0x40, size_bytes: 64, inst_gap: 0 }, |b| b[1] = RECORD_FLAG_DATA);
        bytes.extend_from_slice(&[0u8; 64]);
        let e = decode_events(&bytes).unwrap_err();
        assert_eq!(e.to_string(), "t.bin: byte offset 17: data payload on a LD record (only writes carry data)");
    }
}
