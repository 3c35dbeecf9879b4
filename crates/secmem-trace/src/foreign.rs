//! Readers for traces produced by other tools: Ramulator, DRAMSim3 and valgrind lackey.
//!
//! All readers yield `Result<Record, TraceError>` with 1-based line numbers in errors, skip
//! blank lines and lines starting with `#`, and stop after the first error.
//!
//! * **Ramulator** ([`RamulatorReader`]) — two line shapes, detected per line:
//!   - memory trace: `<addr> <R|W>`, address in hex (`0x` prefix optional), e.g.
//!     `0x12345680 R`. Records get `inst_gap = 0`.
//!   - CPU trace: `<instructions> <read-addr> [<writeback-addr>]`: a decimal count of
//!     non-memory instructions (becomes `inst_gap`), a read address, and optionally the address
//!     of a write-back that follows the read (`inst_gap = 0`). Addresses are decimal, or hex
//!     with a `0x` prefix.
//!
//!   A line whose second field starts with a letter is a memory-trace line; one whose second
//!   field starts with a digit is a CPU-trace line. All records have `size_bytes = 64`.
//! * **DRAMSim3** ([`Dramsim3Reader`]) — `<addr> <op> <cycle>`, e.g. `0x1234 READ 12`. The
//!   address is hex (`0x` optional); `op` is `READ` or `WRITE` (any case; DRAMSim2's
//!   `P_MEM_RD`/`P_FETCH` and `P_MEM_WR` are accepted as read/write). `inst_gap` is the cycle
//!   minus the previous record's cycle (the first record counts from cycle 0), saturating at 0
//!   when cycles decrease and at `u32::MAX`. All records have `size_bytes = 64`.
//! * **lackey** ([`LackeyReader`]) — valgrind `--tool=lackey --trace-mem=yes` output:
//!   `I  <addr>,<size>`, ` L <addr>,<size>`, ` S <addr>,<size>`, ` M <addr>,<size>` with hex
//!   addresses (no `0x`) and decimal sizes. Lines starting with `==` are valgrind's own output
//!   and are skipped. `I` lines emit no record: they count instructions. Because lackey prints
//!   the `I` line of a load/store just before its accesses, a memory record's `inst_gap` is the
//!   number of `I` lines since the previous record minus one (the access's own instruction),
//!   never below 0 — so `sum(inst_gap) + records` approximates the instruction count. `L` is a
//!   read, `S` a write, and `M` (modify) a read followed by a write of the same address (the
//!   write has `inst_gap = 0`). `size_bytes` comes from after the comma.

use std::io::Read;

use crate::error::{quote, ErrorKind, TraceError, MEMORY_NAME};
use crate::lines::{parse_dec, parse_hex, parse_u64_auto, LineReader};
use crate::{Op, Record};

/// What one line of a foreign trace turned into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Nothing to emit (e.g. a lackey `I` line or valgrind noise).
    Nothing,
    One(Record),
    /// Two records from one line (Ramulator read + write-back, lackey `M`).
    Two(Record, Record),
}

/// A line-oriented foreign trace dialect. Implemented by [`Ramulator`], [`Dramsim3`] and
/// [`Lackey`]; `t` is a trimmed, non-blank, non-`#` line.
pub trait Dialect {
    fn parse_line(&mut self, t: &str) -> Result<Parsed, (ErrorKind, String)>;
}

/// A reader for a line-oriented foreign trace; use the [`RamulatorReader`],
/// [`Dramsim3Reader`] and [`LackeyReader`] aliases.
pub struct ForeignReader<R: Read, D: Dialect> {
    lines: LineReader<R>,
    dialect: D,
    pending: Option<Record>,
    done: bool,
}

/// Reads Ramulator memory (`<addr> <R|W>`) and CPU (`<gap> <read> [<writeback>]`) traces.
pub type RamulatorReader<R> = ForeignReader<R, Ramulator>;
/// Reads DRAMSim3 traces (`<addr> <READ|WRITE> <cycle>`).
pub type Dramsim3Reader<R> = ForeignReader<R, Dramsim3>;
/// Reads valgrind lackey `--trace-mem=yes` output.
pub type LackeyReader<R> = ForeignReader<R, Lackey>;

impl<R: Read, D: Dialect + Default> ForeignReader<R, D> {
    /// A reader whose errors name `"<memory>"`.
    pub fn new(inner: R) -> Self {
        Self::with_name(inner, MEMORY_NAME)
    }

    /// A reader whose errors name `name`.
    pub fn with_name(inner: R, name: impl Into<String>) -> Self {
        ForeignReader {
            lines: LineReader::new(inner, name.into()),
            dialect: D::default(),
            pending: None,
            done: false,
        }
    }
}

impl<R: Read, D: Dialect> Iterator for ForeignReader<R, D> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(r) = self.pending.take() {
            return Some(Ok(r));
        }
        if self.done {
            return None;
        }
        loop {
            let line = match self.lines.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            match parse_significant(&mut self.dialect, line) {
                Ok(Parsed::Nothing) => continue,
                Ok(Parsed::One(r)) => return Some(Ok(r)),
                Ok(Parsed::Two(a, b)) => {
                    self.pending = Some(b);
                    return Some(Ok(a));
                }
                Err((kind, msg)) => {
                    self.done = true;
                    return Some(Err(self.lines.err(kind, msg)));
                }
            }
        }
    }
}

impl<R: Read, D: Dialect> std::iter::FusedIterator for ForeignReader<R, D> {}

/// Parses one line of a foreign trace: blank lines and lines starting with `#` (after
/// trimming) are [`Parsed::Nothing`], the rest go to the dialect.
pub(crate) fn parse_significant<D: Dialect>(dialect: &mut D, line: &str) -> Result<Parsed, (ErrorKind, String)> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        return Ok(Parsed::Nothing);
    }
    dialect.parse_line(t)
}

fn syntax(msg: String) -> (ErrorKind, String) {
    (ErrorKind::Syntax, msg)
}

/// Hex with an optional `0x`/`0X` prefix.
fn parse_hex_opt_prefix(tok: &str) -> Option<u64> {
    parse_hex(
        tok.strip_prefix("0x")
            .or_else(|| tok.strip_prefix("0X"))
            .unwrap_or(tok),
    )
}

fn rec(op: Op, addr: u64, size_bytes: u16, inst_gap: u32) -> Record {
    Record {
        op,
        addr,
        size_bytes,
        inst_gap,
        data: None,
    }
}

/// The Ramulator dialect (see the module docs).
#[derive(Debug, Default, Clone)]
pub struct Ramulator;

impl Dialect for Ramulator {
    fn parse_line(&mut self, t: &str) -> Result<Parsed, (ErrorKind, String)> {
        let mut toks = t.split_ascii_whitespace();
        let (a, b, c) = (toks.next().unwrap_or(""), toks.next(), toks.next());
        let extra = toks.next().is_some();
        let Some(b) = b else {
            return Err(syntax(format!(
                "expected '<addr> <R|W>' or '<instructions> <read-addr> [<writeback-addr>]', got '{}'",
                quote(t)
            )));
        };
        if !b.as_bytes()[0].is_ascii_digit() {
            // Memory-trace form: <addr> <R|W>.
            let op = match b {
                "R" => Op::Read,
                "W" => Op::Write,
                other => {
                    return Err((
                        ErrorKind::UnknownOp,
                        format!("unknown operation '{}' (expected R or W)", quote(other)),
                    ))
                }
            };
            if let Some(x) = c {
                return Err(syntax(format!(
                    "unexpected extra field '{}' after '{b}'",
                    quote(x)
                )));
            }
            let addr = parse_hex_opt_prefix(a).ok_or_else(|| {
                syntax(format!(
                    "bad address '{}' (expected hex, at most 64 bits)",
                    quote(a)
                ))
            })?;
            return Ok(Parsed::One(rec(op, addr, 64, 0)));
        }
        // CPU-trace form: <instructions> <read-addr> [<writeback-addr>].
        if extra {
            return Err(syntax(format!(
                "too many fields (expected '<instructions> <read-addr> [<writeback-addr>]'): '{}'",
                quote(t)
            )));
        }
        let gap = parse_dec(a).ok_or_else(|| {
            syntax(format!(
                "bad instruction count '{}' (expected a decimal number)",
                quote(a)
            ))
        })?;
        let gap = u32::try_from(gap)
            .map_err(|_| syntax(format!("instruction count {gap} does not fit in 32 bits")))?;
        let addr_of = |tok: &str| {
            parse_u64_auto(tok).ok_or_else(|| {
                syntax(format!(
                    "bad address '{}' (expected decimal or 0x-prefixed hex)",
                    quote(tok)
                ))
            })
        };
        let read = rec(Op::Read, addr_of(b)?, 64, gap);
        match c {
            None => Ok(Parsed::One(read)),
            Some(c) => Ok(Parsed::Two(read, rec(Op::Write, addr_of(c)?, 64, 0))),
        }
    }
}

/// The DRAMSim3 dialect (see the module docs). Remembers the previous record's cycle.
#[derive(Debug, Default, Clone)]
pub struct Dramsim3 {
    prev_cycle: u64,
}

impl Dialect for Dramsim3 {
    fn parse_line(&mut self, t: &str) -> Result<Parsed, (ErrorKind, String)> {
        let mut toks = t.split_ascii_whitespace();
        let (a, op, cyc) = (toks.next().unwrap_or(""), toks.next(), toks.next());
        let (Some(op_tok), Some(cyc), None) = (op, cyc, toks.next()) else {
            return Err(syntax(format!(
                "expected '<addr> <READ|WRITE> <cycle>', got '{}'",
                quote(t)
            )));
        };
        let op = if op_tok.eq_ignore_ascii_case("READ")
            || op_tok.eq_ignore_ascii_case("P_MEM_RD")
            || op_tok.eq_ignore_ascii_case("P_FETCH")
        {
            Op::Read
        } else if op_tok.eq_ignore_ascii_case("WRITE") || op_tok.eq_ignore_ascii_case("P_MEM_WR") {
            Op::Write
        } else {
            return Err((
                ErrorKind::UnknownOp,
                format!(
                    "unknown operation '{}' (expected READ or WRITE)",
                    quote(op_tok)
                ),
            ));
        };
        let addr = parse_hex_opt_prefix(a).ok_or_else(|| {
            syntax(format!(
                "bad address '{}' (expected hex, at most 64 bits)",
                quote(a)
            ))
        })?;
        let cycle = parse_dec(cyc).ok_or_else(|| {
            syntax(format!(
                "bad cycle '{}' (expected a decimal number)",
                quote(cyc)
            ))
        })?;
        let gap = u32::try_from(cycle.saturating_sub(self.prev_cycle)).unwrap_or(u32::MAX);
        self.prev_cycle = cycle;
        Ok(Parsed::One(rec(op, addr, 64, gap)))
    }
}

/// The valgrind lackey dialect (see the module docs). Counts `I` lines.
#[derive(Debug, Default, Clone)]
pub struct Lackey {
    instructions: u64,
}

impl Dialect for Lackey {
    fn parse_line(&mut self, t: &str) -> Result<Parsed, (ErrorKind, String)> {
        if t.starts_with("==") {
            return Ok(Parsed::Nothing);
        }
        let mut toks = t.split_ascii_whitespace();
        let (op_tok, arg) = (toks.next().unwrap_or(""), toks.next());
        let op = match op_tok {
            "I" | "L" | "S" | "M" => op_tok,
            other => {
                return Err((
                    ErrorKind::UnknownOp,
                    format!("unknown operation '{}' (expected I, L, S, M)", quote(other)),
                ))
            }
        };
        let (Some(arg), None) = (arg, toks.next()) else {
            return Err(syntax(format!(
                "expected '<I|L|S|M> <hex-addr>,<size>', got '{}'",
                quote(t)
            )));
        };
        let Some((addr_tok, size_tok)) = arg.split_once(',') else {
            return Err(syntax(format!(
                "expected '<hex-addr>,<size>', got '{}'",
                quote(arg)
            )));
        };
        let addr = parse_hex_opt_prefix(addr_tok).ok_or_else(|| {
            syntax(format!(
                "bad address '{}' (expected hex, at most 64 bits)",
                quote(addr_tok)
            ))
        })?;
        let size = parse_dec(size_tok)
            .and_then(|s| u16::try_from(s).ok())
            .ok_or_else(|| {
                syntax(format!(
                    "bad size '{}' (expected decimal 0..=65535)",
                    quote(size_tok)
                ))
            })?;
        if op == "I" {
            self.instructions = self.instructions.saturating_add(1);
            return Ok(Parsed::Nothing);
        }
        let gap = u32::try_from(self.instructions.saturating_sub(1)).unwrap_or(u32::MAX);
        self.instructions = 0;
        Ok(match op {
            "L" => Parsed::One(rec(Op::Read, addr, size, gap)),
            "S" => Parsed::One(rec(Op::Write, addr, size, gap)),
            _ => Parsed::Two(
                rec(Op::Read, addr, size, gap),
                rec(Op::Write, addr, size, 0),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramulator(s: &str) -> Result<Vec<Record>, TraceError> {
        RamulatorReader::with_name(s.as_bytes(), "ram.trace").collect()
    }
    fn dramsim3(s: &str) -> Result<Vec<Record>, TraceError> {
        Dramsim3Reader::with_name(s.as_bytes(), "ds3.trace").collect()
    }
    fn lackey(s: &str) -> Result<Vec<Record>, TraceError> {
        LackeyReader::with_name(s.as_bytes(), "lackey.out").collect()
    }

    #[test]
    fn ramulator_memory_trace_lines_become_reads_and_writes() {
        let got = ramulator("0x12345680 R\n0x12345690 W\n\n4000 R\n").unwrap();
        assert_eq!(
            got,
            vec![
                Record::read(0x12345680, 0),
                Record::write(0x12345690, 0),
                Record::read(0x4000, 0)
            ]
        );
    }

    #[test]
    fn ramulator_cpu_trace_lines_carry_gap_and_optional_writeback() {
        let got = ramulator("3 20734016\n1 20846400 20734016\n0 0x40\n").unwrap();
        assert_eq!(
            got,
            vec![
                Record::read(20734016, 3),
                Record::read(20846400, 1),
                Record::write(20734016, 0),
                Record::read(0x40, 0),
            ]
        );
    }

    #[test]
    fn ramulator_unknown_op_names_line_and_token() {
        let e = ramulator("0x10 R\n0x20 X\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "ram.trace:2: unknown operation 'X' (expected R or W)"
        );
        assert_eq!(e.kind(), ErrorKind::UnknownOp);
    }

    #[test]
    fn ramulator_malformed_lines_are_syntax_errors() {
        for (src, want) in [
            ("0x10\n", "expected '<addr> <R|W>'"),
            ("1 2 3 4\n", "too many fields"),
            ("x1 20\n", "bad instruction count 'x1'"),
            ("99999999999 20\n", "does not fit in 32 bits"),
            ("1 2x\n", "bad address '2x'"),
            ("0xzz R\n", "bad address '0xzz'"),
            ("0x10 R extra\n", "unexpected extra field"),
        ] {
            let e = ramulator(src).unwrap_err();
            assert_eq!(e.line(), Some(1), "{src}");
            assert!(e.message().contains(want), "{src}: {e}");
        }
    }

    #[test]
    fn dramsim3_cycles_become_instruction_gaps() {
        let got = dramsim3(
            "0x1234 READ 12\n0x1240 WRITE 15\n0x1280 read 15\n0x12c0 WRITE 10\n0x1300 READ 30\n",
        )
        .unwrap();
        let gaps: Vec<u32> = got.iter().map(|r| r.inst_gap).collect();
        assert_eq!(gaps, vec![12, 3, 0, 0, 20]);
        assert_eq!(got[0], Record::read(0x1234, 12));
        assert_eq!(got[1], Record::write(0x1240, 3));
        assert_eq!(got[2].op, Op::Read);
    }

    #[test]
    fn dramsim3_huge_cycle_gaps_saturate() {
        let got = dramsim3("1000 READ 0\n2000 P_MEM_WR 99999999999\n").unwrap();
        assert_eq!(got[1], Record::write(0x2000, u32::MAX));
    }

    #[test]
    fn dramsim3_unknown_op_and_bad_fields_name_the_line() {
        let e = dramsim3("0x1234 READ 12\n0x1234 ERASE 13\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "ds3.trace:2: unknown operation 'ERASE' (expected READ or WRITE)"
        );
        let e = dramsim3("0x1234 READ\n").unwrap_err();
        assert_eq!(e.line(), Some(1));
        assert_eq!(e.kind(), ErrorKind::Syntax);
        let e = dramsim3("0x1234 READ -4\n").unwrap_err();
        assert!(e.message().contains("bad cycle '-4'"), "{e}");
    }

    const LACKEY_SAMPLE: &str = "\
==12345== Lackey, an example Valgrind tool
==12345== Copyright (C) 2002-2017, and GNU GPL'd, by Nicholas Nethercote.
==12345== Using Valgrind-3.15.0 and LibVEX; rerun with -h for copyright info
==12345== Command: ./a.out
==12345==
I  04001100,3
I  04001103,5
 S 1ffefffd78,8
I  04001108,3
I  0400110b,2
I  0400110d,4
 L 04022e80,8
 M 0421a228,4
I  04001111,7
 L 04022e88,8
 S 1ffefffd70,8
==12345==
==12345== Counted 1 call to main()
";

    #[test]
    fn lackey_snippet_with_valgrind_noise_becomes_records_with_gaps() {
        let got = lackey(LACKEY_SAMPLE).unwrap();
        assert_eq!(
            got,
            vec![
                // Two I lines: one is the store itself, one is a non-memory instruction.
                Record {
                    op: Op::Write,
                    addr: 0x1ffefffd78,
                    size_bytes: 8,
                    inst_gap: 1,
                    data: None
                },
                Record {
                    op: Op::Read,
                    addr: 0x04022e80,
                    size_bytes: 8,
                    inst_gap: 2,
                    data: None
                },
                // M = read then write, same address and size; no I between.
                Record {
                    op: Op::Read,
                    addr: 0x0421a228,
                    size_bytes: 4,
                    inst_gap: 0,
                    data: None
                },
                Record {
                    op: Op::Write,
                    addr: 0x0421a228,
                    size_bytes: 4,
                    inst_gap: 0,
                    data: None
                },
                Record {
                    op: Op::Read,
                    addr: 0x04022e88,
                    size_bytes: 8,
                    inst_gap: 0,
                    data: None
                },
                Record {
                    op: Op::Write,
                    addr: 0x1ffefffd70,
                    size_bytes: 8,
                    inst_gap: 0,
                    data: None
                },
            ]
        );
    }

    #[test]
    fn lackey_unknown_op_and_bad_fields_name_the_line() {
        let e = lackey("I  04001100,3\n X 04001100,3\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "lackey.out:2: unknown operation 'X' (expected I, L, S, M)"
        );
        for (src, want) in [
            (" L 0400\n", "expected '<hex-addr>,<size>'"),
            (" L 04zz,8\n", "bad address '04zz'"),
            (" L 0400,x\n", "bad size 'x'"),
            (" L 0400,70000\n", "bad size '70000'"),
            (" L\n", "expected '<I|L|S|M> <hex-addr>,<size>'"),
        ] {
            let e = lackey(src).unwrap_err();
            assert_eq!(e.line(), Some(1), "{src}");
            assert!(e.message().contains(want), "{src}: {e}");
        }
    }

    #[test]
    fn foreign_readers_never_panic_on_garbage() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let alphabet = b"0x1aF RWILSM,READWRITE\n=#\xff\t9";
        for _ in 0..3000 {
            let len = rng.gen_range(0..80);
            let bytes: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
                .collect();
            let _ = RamulatorReader::new(&bytes[..]).count();
            let _ = Dramsim3Reader::new(&bytes[..]).count();
            let _ = LackeyReader::new(&bytes[..]).count();
        }
    }

    #[test]
    fn dramsim2_style_op_names_are_read_as_reads_and_writes() {
        // DRAMSim2's trace names (P_MEM_RD, P_FETCH, P_MEM_WR) appear in DRAMSim3 traces too.
        let got = dramsim3("0x40 P_MEM_RD 1\n0x80 P_FETCH 2\n0xc0 P_MEM_WR 3\n").unwrap();
        let ops: Vec<Op> = got.iter().map(|r| r.op).collect();
        assert_eq!(ops, vec![Op::Read, Op::Read, Op::Write]);
    }
}
