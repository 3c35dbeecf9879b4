//! The secmem text trace form, versions 1 and 2 (grammar in `docs/trace-format.md`).
//!
//! ```text
//! # secmem-trace v1
//! # comment lines start with '#'; blank lines are ignored
//! R 0x1000 64 3
//! W 0x1040 64 0 00112233...(128 hex digits)
//! F 0x0 0 5
//! FL 0x1040 64 0
//! ```
//!
//! Version 2 (`# secmem-trace v2`, or `# secmem-trace v2 os` for an OS-level trace) keeps
//! those lines and, in OS-level traces, adds `LD`, `ST`, `ALLOC`, `FREE`, `FORK`, `EXIT`,
//! `WBNOINVD` and `ROI` (see [`crate::event`]).

use std::io::{BufWriter, Read, Write};

use crate::error::{quote, ErrorKind, Position, TraceError, MEMORY_NAME};
use crate::event::{Event, EventOp, TraceKind, MAX_PID};
use crate::lines::{parse_dec, parse_u64_auto, LineReader};
use crate::{Op, Record};

/// The exact first line of a version-1 text trace.
pub const HEADER_LINE: &str = "# secmem-trace v1";
/// The first line of a version-2 text trace of physical records.
pub const HEADER_LINE_V2: &str = "# secmem-trace v2";
/// The first line of a version-2 OS-level text trace.
pub const HEADER_LINE_V2_OS: &str = "# secmem-trace v2 os";
/// The prefix shared by header lines of every version.
pub const HEADER_PREFIX: &str = "# secmem-trace";

/// The word a header line ends with when the trace's addresses are virtual
/// (`# secmem-trace v1 virtual`).
pub const VIRTUAL_WORD: &str = "virtual";

fn header_line(kind: TraceKind) -> Option<String> {
    let base = match (kind.version, kind.os_level, kind.virtual_addresses) {
        (1, false, _) => HEADER_LINE,
        (2, false, _) => HEADER_LINE_V2,
        (2, true, false) => HEADER_LINE_V2_OS,
        _ => return None,
    };
    Some(if kind.virtual_addresses { format!("{base} {VIRTUAL_WORD}") } else { base.to_string() })
}

/// The text mnemonic of an op: `R`, `W`, `F`, `FL`.
pub fn mnemonic(op: Op) -> &'static str {
    match op {
        Op::Read => "R",
        Op::Write => "W",
        Op::Fence => "F",
        Op::Flush => "FL",
    }
}

/// Writes secmem text v1 traces. Output is buffered; call [`TextWriter::finish`] to flush.
pub struct TextWriter<W: Write> {
    out: BufWriter<W>,
    name: String,
    line: u64,
    kind: TraceKind,
}

impl<W: Write> TextWriter<W> {
    /// Writes the header line.
    pub fn new(inner: W) -> Result<Self, TraceError> {
        Self::with_name(inner, MEMORY_NAME)
    }

    /// Writes the header line; `name` is used in errors.
    pub fn with_name(inner: W, name: impl Into<String>) -> Result<Self, TraceError> {
        Self::with_kind(inner, name, TraceKind::V1)
    }

    /// Writes the header line of `kind` (v1, v2, or v2 OS-level); only an OS-level writer
    /// accepts OS records.
    pub fn with_kind(inner: W, name: impl Into<String>, kind: TraceKind) -> Result<Self, TraceError> {
        let name = name.into();
        let Some(header) = header_line(kind) else {
            return Err(TraceError::at_line(
                name,
                1,
                ErrorKind::UnsupportedVersion,
                format!(
                    "cannot write text trace version {}{} (versions 1 and 2; OS-level needs 2 and cannot be virtual)",
                    kind.version,
                    if kind.os_level { " OS-level" } else { "" }
                ),
            ));
        };
        let mut w = TextWriter {
            out: BufWriter::with_capacity(256 * 1024, inner),
            name,
            line: 1,
            kind,
        };
        writeln!(w.out, "{header}")
            .map_err(|e| TraceError::io(w.name.clone(), Position::Line(1), e))?;
        Ok(w)
    }

    /// Appends one record line of any kind; OS records need an OS-level writer.
    pub fn write_event(&mut self, ev: &Event) -> Result<(), TraceError> {
        let line = self.line + 1;
        let bad = |w: &Self, msg: String| {
            Err(TraceError::at_line(w.name.clone(), line, ErrorKind::InvalidRecord, msg))
        };
        if let Err(m) = ev.check_writable(self.kind, format_args!("'{HEADER_LINE_V2_OS}'")) {
            return bad(self, m);
        }
        let data = match ev {
            Event::Phys(r) => return self.write(r),
            Event::Store { data, .. } => data.as_ref(),
            _ => None,
        };
        // `Display` of an event is exactly its text form without data.
        let r = write!(self.out, "{ev}")
            .and_then(|_| match data {
                Some(d) => self.out.write_all(&hex_field(d)),
                None => Ok(()),
            })
            .and_then(|_| self.out.write_all(b"\n"));
        r.map_err(|e| TraceError::io(self.name.clone(), Position::Line(line), e))?;
        self.line = line;
        Ok(())
    }

    /// Appends one record line. Data is only allowed on writes.
    pub fn write(&mut self, rec: &Record) -> Result<(), TraceError> {
        let line = self.line + 1;
        if rec.data.is_some() && rec.op != Op::Write {
            return Err(TraceError::at_line(
                self.name.clone(),
                line,
                ErrorKind::InvalidRecord,
                format!(
                    "data payload on a {:?} record (only writes carry data)",
                    rec.op
                ),
            ));
        }
        let r = write!(
            self.out,
            "{} 0x{:x} {} {}",
            mnemonic(rec.op),
            rec.addr,
            rec.size_bytes,
            rec.inst_gap
        )
        .and_then(|_| match &rec.data {
            Some(d) => self.out.write_all(&hex_field(d)),
            None => Ok(()),
        })
        .and_then(|_| self.out.write_all(b"\n"));
        r.map_err(|e| TraceError::io(self.name.clone(), Position::Line(line), e))?;
        self.line = line;
        Ok(())
    }

    /// Flushes everything and returns the inner writer.
    pub fn finish(self) -> Result<W, TraceError> {
        let name = self.name;
        let pos = Position::Line(self.line);
        let mut w = self
            .out
            .into_inner()
            .map_err(|e| TraceError::io(name.clone(), pos, e.into_error()))?;
        w.flush().map_err(|e| TraceError::io(name, pos, e))?;
        Ok(w)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A space and the 128 lower-case hex digits of a data payload.
fn hex_field(d: &[u8; 64]) -> [u8; 129] {
    let mut hex = [0u8; 129];
    hex[0] = b' ';
    for (i, b) in d.iter().enumerate() {
        hex[1 + 2 * i] = HEX[(b >> 4) as usize];
        hex[2 + 2 * i] = HEX[(b & 15) as usize];
    }
    hex
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decodes exactly 128 hex digits into a 64-byte payload.
fn parse_data(tok: &str) -> Result<[u8; 64], String> {
    let b = tok.as_bytes();
    if b.len() != 128 {
        return Err(format!(
            "data must be exactly 128 hex digits, got {}",
            tok.chars().count()
        ));
    }
    let mut d = [0u8; 64];
    for (i, out) in d.iter_mut().enumerate() {
        let hi = hex_val(b[2 * i]);
        let lo = hex_val(b[2 * i + 1]);
        match (hi, lo) {
            (Some(h), Some(l)) => *out = (h << 4) | l,
            _ => {
                let col = if hi.is_none() { 2 * i } else { 2 * i + 1 };
                // All bytes before `col` are ASCII hex digits, so `col` is a char boundary.
                let c = tok.get(col..).and_then(|s| s.chars().next()).unwrap_or('?');
                return Err(format!(
                    "bad hex digit '{}' at position {} of the data",
                    quote(c.encode_utf8(&mut [0; 4])),
                    col + 1
                ));
            }
        }
    }
    Ok(d)
}

/// Reads secmem text v1 and v2 traces, with line numbers in errors. As an iterator it yields
/// physical [`Record`]s; [`TextReader::events`] yields every record as an [`Event`].
///
/// After the first error, iteration ends.
pub struct TextReader<R: Read> {
    lines: LineReader<R>,
    done: bool,
    kind: TraceKind,
}

impl<R: Read> TextReader<R> {
    /// Reads and checks the header line; errors name `"<memory>"`.
    pub fn new(inner: R) -> Result<Self, TraceError> {
        Self::with_name(inner, MEMORY_NAME)
    }

    /// Reads and checks the header line; errors name `name`.
    pub fn with_name(inner: R, name: impl Into<String>) -> Result<Self, TraceError> {
        let mut lines = LineReader::new(inner, name.into());
        let first = lines.next_line()?.map(|l| l.trim_end().to_string());
        // `... virtual` marks a v1 or v2 (not OS-level) trace's addresses virtual.
        let (head, virtual_addresses) = match first.as_deref().and_then(|l| l.strip_suffix(VIRTUAL_WORD)) {
            Some(h) if h.ends_with(' ') && h.trim_end() != HEADER_LINE_V2_OS => (Some(h.trim_end()), true),
            _ => (first.as_deref(), false),
        };
        let kind = match head {
            Some(HEADER_LINE) => TraceKind::V1.with_virtual_addresses(virtual_addresses),
            Some(HEADER_LINE_V2) => TraceKind::V2.with_virtual_addresses(virtual_addresses),
            Some(HEADER_LINE_V2_OS) => TraceKind::V2_OS,
            Some(l) if l.starts_with(HEADER_PREFIX) => {
                let v = l[HEADER_PREFIX.len()..].trim();
                return Err(lines.err(
                    ErrorKind::UnsupportedVersion,
                    format!(
                        "unsupported text trace version '{}' (this reader supports v1, v2 and v2 os, and v1 virtual and v2 virtual)",
                        quote(v)
                    ),
                ));
            }
            _ => {
                let line = lines.line_no.max(1);
                return Err(TraceError::at_line(
                    lines.name.clone(),
                    line,
                    ErrorKind::MissingHeader,
                    format!(
                        "missing header line '{HEADER_LINE}' (first line of a secmem text trace)"
                    ),
                ));
            }
        };
        Ok(TextReader {
            lines,
            done: false,
            kind,
        })
    }

    /// What the header line says (version, OS-level).
    pub fn kind(&self) -> TraceKind {
        self.kind
    }

    /// An iterator of [`Event`]s over the rest of the trace.
    pub fn events(self) -> TextEvents<R> {
        TextEvents(self)
    }

    fn parse(&mut self) -> Result<Option<Event>, TraceError> {
        loop {
            let line = match self.lines.next_line()? {
                None => return Ok(None),
                Some(l) => l,
            };
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            return match parse_event(t, self.kind) {
                Ok(r) => Ok(Some(r)),
                Err((kind, msg)) => Err(self.lines.err(kind, msg)),
            };
        }
    }

    /// The next record as an [`Event`].
    pub fn next_event(&mut self) -> Option<Result<Event, TraceError>> {
        if self.done {
            return None;
        }
        match self.parse() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

type ParseError = (ErrorKind, String);

/// Parses one record line of a trace of `kind`.
fn parse_event(t: &str, kind: TraceKind) -> Result<Event, ParseError> {
    let op_tok = t.split_ascii_whitespace().next().unwrap_or("");
    let op = EventOp::from_mnemonic(op_tok).filter(|o| kind.version >= 2 || !o.is_os());
    let Some(op) = op else {
        let expected = if kind.version >= 2 {
            "R, W, F, FL, WBNOINVD, ROI, LD, ST, ALLOC, FREE, FORK, EXIT, IOR, IOW"
        } else {
            "R, W, F, FL"
        };
        return Err((
            ErrorKind::UnknownOp,
            format!("unknown operation '{}' (expected {expected})", quote(op_tok)),
        ));
    };
    if !op.is_os() {
        return parse_record(t).map(Event::Phys);
    }
    if !kind.os_level {
        return Err((
            ErrorKind::InvalidRecord,
            format!("{op} record in a trace whose header is not '{HEADER_LINE_V2_OS}'"),
        ));
    }
    let mut f = Fields {
        toks: t.split_ascii_whitespace().skip(1),
        prev: op_tok,
    };
    let ev = match op {
        EventOp::WbNoInvd => Event::WbNoInvd,
        EventOp::RoiBegin => Event::RoiBegin,
        EventOp::Load | EventOp::Store => {
            let pid = f.pid("pid")?;
            let vaddr = f.addr()?;
            let size_bytes = f.num("size", u16::MAX as u64)? as u16;
            let inst_gap = f.num("instruction gap", u32::MAX as u64)? as u32;
            if op == EventOp::Load {
                Event::Load {
                    pid,
                    vaddr,
                    size_bytes,
                    inst_gap,
                }
            } else {
                let data = match f.toks.next() {
                    None => None,
                    Some(d) => Some(parse_data(d).map_err(|m| (ErrorKind::Syntax, m))?),
                };
                Event::Store {
                    pid,
                    vaddr,
                    size_bytes,
                    inst_gap,
                    data,
                }
            }
        }
        EventOp::Alloc => {
            let pid = f.pid("pid")?;
            let vaddr = f.addr()?;
            let length = f.num("length", u64::MAX)?;
            let tok = f.next("page size")?;
            let page = tok.parse().map_err(|m| (ErrorKind::Syntax, m))?;
            Event::Alloc {
                pid,
                vaddr,
                length,
                page,
            }
        }
        EventOp::Free => {
            let pid = f.pid("pid")?;
            let vaddr = f.addr()?;
            let length = f.num("length", u64::MAX)?;
            Event::Free { pid, vaddr, length }
        }
        EventOp::Fork => {
            let parent = f.pid("parent pid")?;
            let child = f.pid("child pid")?;
            Event::Fork { parent, child }
        }
        EventOp::Exit => Event::Exit { pid: f.pid("pid")? },
        EventOp::IoRead | EventOp::IoWrite => {
            let pid = f.pid("pid")?;
            let offset = f.addr()?;
            let bytes = f.num("length", u32::MAX as u64)? as u32;
            let inst_gap = f.num("instruction gap", u32::MAX as u64)? as u32;
            let ev = Event::Io { pid, write: op == EventOp::IoWrite, offset, bytes, inst_gap };
            ev.validate().map_err(|m| (ErrorKind::InvalidRecord, m))?;
            ev
        }
        _ => unreachable!("physical ops are parsed by parse_record"),
    };
    if let Some(extra) = f.toks.next() {
        let msg = if op == EventOp::Load && extra.len() == 128 {
            "data on a LD record (only ST records carry data)".to_string()
        } else {
            format!("unexpected extra field '{}'", quote(extra))
        };
        return Err((ErrorKind::Syntax, msg));
    }
    Ok(ev)
}

/// The fields of one OS record, each parsed with an error naming it.
struct Fields<'a, I: Iterator<Item = &'a str>> {
    toks: I,
    /// The previous token, for "missing X after Y".
    prev: &'a str,
}

impl<'a, I: Iterator<Item = &'a str>> Fields<'a, I> {
    fn next(&mut self, what: &str) -> Result<&'a str, ParseError> {
        let t = self.toks.next().ok_or_else(|| {
            (
                ErrorKind::Syntax,
                format!("missing {what} after '{}'", quote(self.prev)),
            )
        })?;
        self.prev = t;
        Ok(t)
    }

    fn num(&mut self, what: &str, max: u64) -> Result<u64, ParseError> {
        let t = self.next(what)?;
        parse_dec(t).filter(|&v| v <= max).ok_or_else(|| {
            (
                ErrorKind::Syntax,
                format!("bad {what} '{}' (expected decimal 0..={max})", quote(t)),
            )
        })
    }

    fn pid(&mut self, what: &str) -> Result<u32, ParseError> {
        let t = self.next(what)?;
        match parse_dec(t) {
            Some(v) if v <= MAX_PID as u64 => Ok(v as u32),
            Some(v) => Err((
                ErrorKind::InvalidRecord,
                format!("{what} {v} out of range (0..={MAX_PID})"),
            )),
            None => Err((
                ErrorKind::Syntax,
                format!("bad {what} '{}' (expected decimal 0..={MAX_PID})", quote(t)),
            )),
        }
    }

    fn addr(&mut self) -> Result<u64, ParseError> {
        let t = self.next("address")?;
        parse_u64_auto(t).ok_or_else(|| {
            (
                ErrorKind::Syntax,
                format!(
                    "bad address '{}' (expected 0x-prefixed hex or decimal, at most 64 bits)",
                    quote(t)
                ),
            )
        })
    }
}

fn parse_record(t: &str) -> Result<Record, (ErrorKind, String)> {
    let mut toks = t.split_ascii_whitespace();
    let op_tok = toks.next().unwrap_or("");
    let op = match op_tok {
        "R" => Op::Read,
        "W" => Op::Write,
        "F" => Op::Fence,
        "FL" => Op::Flush,
        other => {
            return Err((
                ErrorKind::UnknownOp,
                format!(
                    "unknown operation '{}' (expected R, W, F, FL)",
                    quote(other)
                ),
            ))
        }
    };
    let syntax = |m: String| (ErrorKind::Syntax, m);
    let addr_tok = toks
        .next()
        .ok_or_else(|| syntax(format!("missing address after '{op_tok}'")))?;
    let addr = parse_u64_auto(addr_tok).ok_or_else(|| {
        syntax(format!(
            "bad address '{}' (expected 0x-prefixed hex or decimal, at most 64 bits)",
            quote(addr_tok)
        ))
    })?;
    let size_tok = toks
        .next()
        .ok_or_else(|| syntax("missing size after the address".into()))?;
    let size_bytes = parse_dec(size_tok)
        .and_then(|v| u16::try_from(v).ok())
        .ok_or_else(|| {
            syntax(format!(
                "bad size '{}' (expected decimal 0..=65535)",
                quote(size_tok)
            ))
        })?;
    let gap_tok = toks
        .next()
        .ok_or_else(|| syntax("missing instruction gap after the size".into()))?;
    let inst_gap = parse_dec(gap_tok)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| {
            syntax(format!(
                "bad instruction gap '{}' (expected decimal 0..=4294967295)",
                quote(gap_tok)
            ))
        })?;
    let data = match toks.next() {
        None => None,
        Some(d) => {
            if op != Op::Write {
                return Err((
                    ErrorKind::InvalidRecord,
                    format!("data on a {op_tok} record (only W records carry data)"),
                ));
            }
            Some(parse_data(d).map_err(syntax)?)
        }
    };
    if let Some(extra) = toks.next() {
        return Err(syntax(format!("unexpected extra field '{}'", quote(extra))));
    }
    Ok(Record {
        op,
        addr,
        size_bytes,
        inst_gap,
        data,
    })
}

impl<R: Read> Iterator for TextReader<R> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_event()? {
            Ok(Event::Phys(r)) => Some(Ok(r)),
            Ok(ev) => {
                self.done = true;
                Some(Err(self.lines.err(
                    ErrorKind::InvalidRecord,
                    format!(
                        "{} record in a physical-record stream: this is an OS-level trace; read \
                         it as events (`secmem run` drives the OS model with it)",
                        ev.op()
                    ),
                )))
            }
            Err(e) => Some(Err(e)),
        }
    }
}

/// Every record of a text trace as an [`Event`] (see [`TextReader::events`]).
pub struct TextEvents<R: Read>(TextReader<R>);

impl<R: Read> TextEvents<R> {
    pub fn kind(&self) -> TraceKind {
        self.0.kind
    }
}

impl<R: Read> Iterator for TextEvents<R> {
    type Item = Result<Event, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next_event()
    }
}

impl<R: Read> std::iter::FusedIterator for TextEvents<R> {}

impl<R: Read> std::iter::FusedIterator for TextReader<R> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(records: &[Record]) -> String {
        let mut w = TextWriter::new(Vec::new()).unwrap();
        for r in records {
            w.write(r).unwrap();
        }
        String::from_utf8(w.finish().unwrap()).unwrap()
    }

    fn decode(s: &str) -> Result<Vec<Record>, TraceError> {
        TextReader::with_name(s.as_bytes(), "trace.txt")?.collect()
    }

    fn payload() -> [u8; 64] {
        let mut d = [0u8; 64];
        for (i, b) in d.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37) ^ 0xa5;
        }
        d
    }

    #[test]
    fn every_op_round_trips_with_and_without_data() {
        let recs = vec![
            Record::read(0x1000, 3),
            Record::write(0x1040, 0),
            Record {
                data: Some(payload()),
                ..Record::write(u64::MAX, u32::MAX)
            },
            Record::fence(5),
            Record::flush(0x1040, 0),
            Record {
                size_bytes: 8,
                ..Record::read(7, 1)
            },
        ];
        let text = encode(&recs);
        assert_eq!(decode(&text).unwrap(), recs);
    }

    #[test]
    fn writer_output_matches_the_documented_form() {
        let text = encode(&[
            Record::read(0x1000, 3),
            Record::fence(5),
            Record::flush(0x40, 0),
        ]);
        assert_eq!(
            text,
            "# secmem-trace v1\nR 0x1000 64 3\nF 0x0 0 5\nFL 0x40 64 0\n"
        );
        let text = encode(&[Record {
            data: Some([0xab; 64]),
            ..Record::write(0x40, 1)
        }]);
        assert_eq!(
            text,
            format!("# secmem-trace v1\nW 0x40 64 1 {}\n", "ab".repeat(64))
        );
    }

    #[test]
    fn comments_blank_lines_decimal_addresses_and_crlf_are_accepted() {
        let text = "# secmem-trace v1\r\n\n# a comment\n  R 4096 64 2\r\n\tW 0X40 8 0  \n";
        assert_eq!(
            decode(text).unwrap(),
            vec![
                Record::read(4096, 2),
                Record {
                    size_bytes: 8,
                    ..Record::write(0x40, 0)
                }
            ]
        );
    }

    #[test]
    fn missing_header_line_is_reported_at_line_1() {
        let e = decode("R 0x0 64 0\n").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MissingHeader);
        assert_eq!(e.line(), Some(1));
        let e = decode("").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MissingHeader);
        assert_eq!(e.to_string(), "trace.txt:1: missing header line '# secmem-trace v1' (first line of a secmem text trace)");
    }

    #[test]
    fn other_header_versions_are_rejected_by_name() {
        let e = decode("# secmem-trace v3\nR 0x0 64 0\n").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnsupportedVersion);
        assert_eq!(
            e.to_string(),
            "trace.txt:1: unsupported text trace version 'v3' (this reader supports v1, v2 and v2 os, and v1 virtual and v2 virtual)"
        );
        // An OS-level trace carries its own address spaces: it cannot be marked virtual.
        let e = decode("# secmem-trace v2 os virtual
").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnsupportedVersion);
    }

    #[test]
    fn a_virtual_header_marks_the_addresses_virtual_and_survives_a_round_trip() {
        for (header, kind) in [("# secmem-trace v1 virtual", TraceKind::V1), ("# secmem-trace v2 virtual", TraceKind::V2)] {
            let text = format!("{header}\nR 0x7ffd00001000 8 0\n");
            let r = TextReader::with_name(text.as_bytes(), "t").unwrap();
            assert_eq!(r.kind(), kind.with_virtual_addresses(true), "{header}");
            let mut out = Vec::new();
            let w = TextWriter::with_kind(&mut out, "t", kind.with_virtual_addresses(true)).unwrap();
            w.finish().unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), format!("{header}\n"));
        }
        assert!(!TextReader::new("# secmem-trace v1\n".as_bytes()).unwrap().kind().virtual_addresses);
    }

    #[test]
    fn unknown_op_reports_line_number_and_token() {
        let e = decode("# secmem-trace v1\nR 0x0 64 0\n\nX 0x40 64 0\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "trace.txt:4: unknown operation 'X' (expected R, W, F, FL)"
        );
        assert_eq!(e.kind(), ErrorKind::UnknownOp);
    }

    #[test]
    fn bad_hex_data_is_rejected_with_its_position() {
        let mut hex = "00".repeat(64);
        hex.replace_range(10..11, "g");
        let e = decode(&format!("# secmem-trace v1\nW 0x0 64 0 {hex}\n")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "trace.txt:2: bad hex digit 'g' at position 11 of the data"
        );
        let e = decode(&format!(
            "# secmem-trace v1\nW 0x0 64 0 {}\n",
            "0".repeat(127)
        ))
        .unwrap_err();
        assert_eq!(e.message(), "data must be exactly 128 hex digits, got 127");
        // Non-ASCII in the data must not panic on a char boundary.
        let mut s = "0".repeat(126);
        s.push('é');
        let e = decode(&format!("# secmem-trace v1\nW 0x0 64 0 {s}\n")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Syntax);
        let mut s = "0".repeat(125);
        s.push('é');
        s.push('0');
        let e = decode(&format!("# secmem-trace v1\nW 0x0 64 0 {s}\n")).unwrap_err();
        assert_eq!(e.message(), "bad hex digit 'é' at position 126 of the data");
    }

    #[test]
    fn a_control_character_in_the_data_is_shown_escaped() {
        let mut data = "ab".repeat(64);
        data.replace_range(26..27, "\0");
        let e = decode(&format!("# secmem-trace v1\nW 0x0 64 0 {data}\n")).unwrap_err();
        assert_eq!(e.message(), "bad hex digit '\\u{0}' at position 27 of the data");
    }

    #[test]
    fn data_on_a_read_is_rejected() {
        let e = decode(&format!(
            "# secmem-trace v1\nR 0x0 64 0 {}\n",
            "00".repeat(64)
        ))
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidRecord);
        assert_eq!(
            e.to_string(),
            "trace.txt:2: data on a R record (only W records carry data)"
        );
        let mut w = TextWriter::new(Vec::new()).unwrap();
        let e = w
            .write(&Record {
                data: Some([0; 64]),
                ..Record::flush(0, 0)
            })
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidRecord);
        assert_eq!(e.line(), Some(2));
    }

    #[test]
    fn malformed_fields_are_syntax_errors_naming_the_field() {
        let cases = [
            ("R", "missing address"),
            ("R 0x0", "missing size"),
            ("R 0x0 64", "missing instruction gap"),
            ("R 0xzz 64 0", "bad address '0xzz'"),
            ("R 0x10000000000000000 64 0", "bad address"),
            ("R 0x0 65536 0", "bad size '65536'"),
            ("R 0x0 -1 0", "bad size"),
            ("R 0x0 64 4294967296", "bad instruction gap '4294967296'"),
            ("R 0x0 64 0 extra", "data on a R record"),
            (
                &format!("W 0x0 64 0 {} extra", "00".repeat(64)),
                "unexpected extra field 'extra'",
            ),
        ];
        for (line, want) in cases {
            let e = decode(&format!("# secmem-trace v1\n{line}\n")).unwrap_err();
            assert_eq!(e.line(), Some(2), "{line}");
            assert!(e.message().contains(want), "{line}: got {e}");
        }
    }

    #[test]
    fn iteration_stops_after_the_first_error() {
        let mut r = TextReader::new(&b"# secmem-trace v1\nQ\nR 0x0 64 0\n"[..]).unwrap();
        assert!(r.next().unwrap().is_err());
        assert!(r.next().is_none());
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let alphabet = b"RWFL0x123456789abcdefg \n#\t\xff-";
        for _ in 0..3000 {
            let len = rng.gen_range(0..120);
            let mut bytes = b"# secmem-trace v1\n".to_vec();
            bytes.extend((0..len).map(|_| alphabet[rng.gen_range(0..alphabet.len())]));
            if let Ok(r) = TextReader::new(&bytes[..]) {
                let _ = r.count();
            }
        }
    }

    #[test]
    fn uppercase_hex_data_decodes_like_lowercase() {
        let rec = Record { data: Some([0xab; 64]), ..Record::write(0x40, 0) };
        let text = encode(std::slice::from_ref(&rec));
        let upper = text.replace(&"ab".repeat(64), &"AB".repeat(64));
        assert_ne!(upper, text, "the payload is written as lowercase hex");
        assert_eq!(decode(&upper).unwrap(), vec![rec]);
        // Mixed case too (each digit on its own), and every digit value.
        let rec = Record { data: Some(std::array::from_fn(|i| (i as u8).wrapping_mul(4).wrapping_add(0x0f))), ..Record::write(0x40, 0) };
        let text = encode(std::slice::from_ref(&rec));
        let (head, hex) = text.trim_end().rsplit_once(' ').unwrap();
        let mixed: String = hex.chars().enumerate().map(|(i, c)| if i % 2 == 0 { c.to_ascii_uppercase() } else { c }).collect();
        assert_eq!(decode(&format!("{head} {mixed}\n")).unwrap(), vec![rec]);
    }

    #[test]
    fn only_a_128_digit_field_after_a_ld_record_is_called_data() {
        let read = |line: &str| TextReader::with_name(format!("{HEADER_LINE_V2_OS}\n{line}\n").as_bytes(), "t.txt").unwrap().events().collect::<Result<Vec<_>, _>>().unwrap_err();
        let hex = "00".repeat(64);
        let e = read(&format!("LD 1 0x40 64 0 {hex}"));
        assert_eq!(e.to_string(), "t.txt:2: data on a LD record (only ST records carry data)");
        // A 128-digit field after another record is just an extra field...
        let e = read(&format!("FREE 1 0x40 4096 {hex}"));
        assert_eq!(e.to_string(), format!("t.txt:2: unexpected extra field '{}...'", "0".repeat(40)));
        // ...and so is a shorter field after a LD record.
        let e = read("LD 1 0x40 64 0 00");
        assert_eq!(e.to_string(), "t.txt:2: unexpected extra field '00'");
    }
}
