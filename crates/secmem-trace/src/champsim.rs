//! ChampSim traces: the 64-byte `input_instr` records of the DPC-3 and later corpora
//! (usually xz-compressed; [`crate::open`] decompresses them).
//!
//! ```text
//! input_instr (64 B, little-endian):
//!   ip u64 | is_branch u8 | branch_taken u8 | destination_registers [u8; 2] |
//!   source_registers [u8; 4] | destination_memory [u64; 2] | source_memory [u64; 4]
//! ```
//!
//! Each non-zero `source_memory` entry is a load and each non-zero `destination_memory` entry
//! a store, in that order (an instruction reads its operands before it writes its result).
//! The records carry no access size: as in ChampSim, an operand touches the one line that
//! holds its address, so every record is 1 byte at the exact address. `inst_gap` counts the
//! instructions with no memory operand since the previous record, so `sum(inst_gap) +
//! records` is the instruction count plus one per extra operand of an instruction with more
//! than one. Addresses are virtual: `secmem run` translates them.
//!
//! A record whose `is_branch` or `branch_taken` byte is not 0 or 1 is refused: that is how a
//! file of another layout (or not a ChampSim trace at all) shows itself, and the error names
//! the record and its byte offset. A file that ends inside a record is refused likewise.

use std::io::{self, Read};

use crate::error::{ErrorKind, Position, TraceError, MEMORY_NAME};
use crate::{Op, Record};

/// Size of one ChampSim `input_instr` record in bytes.
pub const INSTR_BYTES: usize = 64;
const BATCH_INSTRS: usize = 16 * 1024;

/// Reads ChampSim `input_instr` traces as loads and stores.
pub struct ChampsimReader<R: Read> {
    inner: R,
    name: String,
    buf: Box<[u8]>,
    /// Valid bytes in `buf`, and the next unread one.
    len: usize,
    pos: usize,
    /// Byte offset of `buf[0]` in the (decompressed) trace.
    base: u64,
    /// Instructions with no memory operand since the last record.
    gap: u64,
    /// Records of the current instruction not yet returned (loads then stores).
    pending: [u64; 6],
    pending_ops: u8,
    pending_len: u8,
    pending_next: u8,
    done: bool,
}

impl<R: Read> ChampsimReader<R> {
    pub fn new(inner: R) -> Self {
        Self::with_name(inner, MEMORY_NAME)
    }

    /// A reader whose errors name `name`.
    pub fn with_name(inner: R, name: impl Into<String>) -> Self {
        ChampsimReader {
            inner,
            name: name.into(),
            buf: vec![0u8; BATCH_INSTRS * INSTR_BYTES].into_boxed_slice(),
            len: 0,
            pos: 0,
            base: 0,
            gap: 0,
            pending: [0; 6],
            pending_ops: 0,
            pending_len: 0,
            pending_next: 0,
            done: false,
        }
    }

    fn fail(&mut self, offset: u64, kind: ErrorKind, msg: String) -> Option<Result<Record, TraceError>> {
        self.done = true;
        Some(Err(TraceError::at_offset(self.name.clone(), offset, kind, msg)))
    }

    /// Moves the unread tail to the front and reads more; `Ok(false)` at EOF.
    fn refill(&mut self) -> io::Result<bool> {
        self.buf.copy_within(self.pos..self.len, 0);
        self.base += self.pos as u64;
        self.len -= self.pos;
        self.pos = 0;
        let mut got_any = false;
        while self.len < INSTR_BYTES || !got_any {
            match self.inner.read(&mut self.buf[self.len..]) {
                Ok(0) => return Ok(got_any),
                Ok(n) => {
                    self.len += n;
                    got_any = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    #[inline]
    fn take_pending(&mut self) -> Record {
        let i = self.pending_next as usize;
        self.pending_next += 1;
        let op = if self.pending_ops & (1 << i) != 0 { Op::Write } else { Op::Read };
        let gap = if i == 0 { u32::try_from(std::mem::take(&mut self.gap)).unwrap_or(u32::MAX) } else { 0 };
        Record { op, addr: self.pending[i], size_bytes: 1, inst_gap: gap, data: None }
    }
}

#[inline]
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl<R: Read> Iterator for ChampsimReader<R> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pending_next < self.pending_len {
            return Some(Ok(self.take_pending()));
        }
        loop {
            if self.done {
                return None;
            }
            if self.len - self.pos < INSTR_BYTES {
                match self.refill() {
                    Ok(true) => {}
                    Ok(false) => {
                        self.done = true;
                        if self.len > self.pos {
                            let (at, left) = (self.base + self.pos as u64, self.len - self.pos);
                            return self.fail(
                                at,
                                ErrorKind::Truncated,
                                format!(
                                    "truncated ChampSim record #{}: {left} bytes left, records are {INSTR_BYTES} bytes (is this a ChampSim input_instr trace?)",
                                    at / INSTR_BYTES as u64
                                ),
                            );
                        }
                        return None;
                    }
                    Err(e) => {
                        let at = self.base + self.pos as u64;
                        self.done = true;
                        return Some(Err(TraceError::io(self.name.clone(), Position::Offset(at), e)));
                    }
                }
                if self.len - self.pos < INSTR_BYTES {
                    continue; // EOF with a partial record: reported above on the next pass
                }
            }
            let b = &self.buf[self.pos..self.pos + INSTR_BYTES];
            let (is_branch, taken) = (b[8], b[9]);
            if is_branch > 1 || taken > 1 {
                let at = self.base + self.pos as u64;
                return self.fail(
                    at,
                    ErrorKind::Syntax,
                    format!(
                        "ChampSim record #{}: is_branch = {is_branch}, branch_taken = {taken} (each must be 0 or 1: is this a 64-byte input_instr trace?)",
                        at / INSTR_BYTES as u64
                    ),
                );
            }
            let mut n = 0usize;
            let mut writes = 0u8;
            for k in 0..4 {
                let a = le64(b, 32 + 8 * k);
                if a != 0 {
                    self.pending[n] = a;
                    n += 1;
                }
            }
            for k in 0..2 {
                let a = le64(b, 16 + 8 * k);
                if a != 0 {
                    self.pending[n] = a;
                    writes |= 1 << n;
                    n += 1;
                }
            }
            self.pos += INSTR_BYTES;
            if n == 0 {
                self.gap += 1;
                continue;
            }
            self.pending_ops = writes;
            self.pending_len = n as u8;
            self.pending_next = 0;
            return Some(Ok(self.take_pending()));
        }
    }
}

impl<R: Read> std::iter::FusedIterator for ChampsimReader<R> {}

/// Encodes one ChampSim `input_instr` record (for tests, fixtures and benchmarks).
pub fn encode_instr(ip: u64, is_branch: bool, taken: bool, dst_mem: [u64; 2], src_mem: [u64; 4]) -> [u8; INSTR_BYTES] {
    let mut b = [0u8; INSTR_BYTES];
    b[..8].copy_from_slice(&ip.to_le_bytes());
    b[8] = is_branch as u8;
    b[9] = taken as u8;
    for (k, a) in dst_mem.iter().enumerate() {
        b[16 + 8 * k..24 + 8 * k].copy_from_slice(&a.to_le_bytes());
    }
    for (k, a) in src_mem.iter().enumerate() {
        b[32 + 8 * k..40 + 8 * k].copy_from_slice(&a.to_le_bytes());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: Vec<u8>) -> Vec<Result<Record, TraceError>> {
        ChampsimReader::with_name(io::Cursor::new(bytes), "t.champsimtrace").collect()
    }

    #[test]
    fn loads_come_before_stores_and_gaps_count_instructions_without_operands() {
        let file = [
            encode_instr(0x400000, false, false, [0; 2], [0; 4]),
            encode_instr(0x400004, true, true, [0; 2], [0; 4]),
            encode_instr(0x400008, false, false, [0x7fff_0010, 0], [0x1000, 0, 0x2040, 0]),
            encode_instr(0x40000c, false, false, [0; 2], [0; 4]),
            encode_instr(0x400010, false, false, [0, 0x3000], [0; 4]),
        ]
        .concat();
        let recs: Vec<Record> = read(file).into_iter().map(Result::unwrap).collect();
        let r = |op, addr, gap| Record { op, addr, size_bytes: 1, inst_gap: gap, data: None };
        assert_eq!(
            recs,
            vec![r(Op::Read, 0x1000, 2), r(Op::Read, 0x2040, 0), r(Op::Write, 0x7fff_0010, 0), r(Op::Write, 0x3000, 1)]
        );
    }

    #[test]
    fn a_file_that_ends_inside_a_record_names_the_record_and_offset() {
        let mut file = [encode_instr(1, false, false, [0; 2], [0x40, 0, 0, 0]); 3].concat();
        file.truncate(64 * 2 + 20);
        let out = read(file);
        assert_eq!(out.len(), 3);
        let e = out[2].as_ref().unwrap_err();
        assert_eq!(e.offset(), Some(128));
        assert!(e.to_string().contains("truncated ChampSim record #2: 20 bytes left, records are 64 bytes"), "{e}");
    }

    #[test]
    fn a_record_of_another_layout_is_refused_at_its_offset() {
        let mut file = [encode_instr(1, false, false, [0; 2], [0x40, 0, 0, 0]); 4].concat();
        file[3 * 64 + 8] = 7;
        let out = read(file);
        assert_eq!(out.len(), 4, "three good records, then the error, then nothing");
        let e = out[3].as_ref().unwrap_err();
        assert_eq!((e.offset(), e.kind()), (Some(192), ErrorKind::Syntax));
        assert!(e.to_string().contains("record #3: is_branch = 7"), "{e}");
    }

    #[test]
    fn records_split_across_many_small_reads_decode_the_same() {
        struct Trickle(io::Cursor<Vec<u8>>);
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = buf.len().min(7);
                self.0.read(&mut buf[..n])
            }
        }
        let file: Vec<u8> = (0..3000u64).flat_map(|i| encode_instr(i, false, false, [i * 64 * (i % 3), 0], [i * 128 * (i % 2), 0, 0, 0])).collect();
        let whole = read(file.clone()).into_iter().map(Result::unwrap).collect::<Vec<_>>();
        let trickled = ChampsimReader::new(Trickle(io::Cursor::new(file))).map(Result::unwrap).collect::<Vec<_>>();
        assert_eq!(whole, trickled);
        assert!(whole.len() > 2000);
    }
}
