//! secmem-trace: what a workload says to the memory system.
//!
//! A trace is a stream of [`Record`]s. Formats are documented in `docs/trace-format.md`:
//!
//! * [`binary`]: the versioned secmem binary format (fast, compact, optional data payloads);
//! * [`text`]: the secmem text form (human-readable, same information);
//! * [`event`]: version 2's OS-level records (process-tagged virtual loads and stores,
//!   alloc, free, fork, exit), read with [`open_events`] and written with [`write_events`];
//! * [`foreign`]: readers for Ramulator, DRAMSim3 and valgrind lackey traces;
//! * [`champsim`]: ChampSim's 64-byte `input_instr` traces;
//! * [`compress`]: gzip and xz files, read through their decompressor in any format;
//! * [`generate`]: seeded synthetic workloads (sequential, random, stride, zipf).
//!
//! [`open`] auto-detects a file's format, [`open_as`] takes it explicitly, [`write()`] writes
//! binary or text, and [`info`] summarises a trace. Every error is a [`TraceError`] naming the
//! file and the line or byte offset.

pub mod binary;
#[cfg(target_os = "linux")]
pub mod capture;
pub mod champsim;
pub mod compress;
pub mod error;
pub mod event;
pub mod foreign;
pub mod generate;
mod lines;
pub mod payload;
pub mod text;

use std::collections::HashSet;
use std::fmt;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{Cursor, Read};
use std::path::Path;
use std::str::FromStr;

pub use binary::{BinaryHeader, BinaryReader, BinaryWriter};
pub use champsim::ChampsimReader;
pub use compress::Compression;
pub use error::{ErrorKind, Position, TraceError};
pub use event::{Event, EventOp, PageSize, TraceKind};
pub use foreign::{Dramsim3Reader, LackeyReader, RamulatorReader};
pub use generate::{GenSpec, Generator, Pattern};
pub use text::{TextReader, TextWriter};

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

impl Op {
    /// All ops, in code order.
    pub const ALL: [Op; 4] = [Op::Read, Op::Write, Op::Fence, Op::Flush];

    /// The op with binary code `code` (0=Read, 1=Write, 2=Fence, 3=Flush).
    pub fn from_code(code: u8) -> Option<Op> {
        Op::ALL.get(code as usize).copied()
    }
}

/// One trace record. `inst_gap` is the number of non-memory instructions retired since the
/// previous record (the core model turns it into cycles).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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
        Record {
            op: Op::Read,
            addr,
            size_bytes: 64,
            inst_gap,
            data: None,
        }
    }
    pub fn write(addr: u64, inst_gap: u32) -> Record {
        Record {
            op: Op::Write,
            addr,
            size_bytes: 64,
            inst_gap,
            data: None,
        }
    }
    /// A 64 B write carrying the line content after the write.
    pub fn write_data(addr: u64, inst_gap: u32, data: [u8; 64]) -> Record {
        Record {
            op: Op::Write,
            addr,
            size_bytes: 64,
            inst_gap,
            data: Some(data),
        }
    }
    /// A persist barrier (`addr` 0, `size_bytes` 0 by convention).
    pub fn fence(inst_gap: u32) -> Record {
        Record {
            op: Op::Fence,
            addr: 0,
            size_bytes: 0,
            inst_gap,
            data: None,
        }
    }
    /// A write-back of the 64 B line holding `addr` (a flush covers `size_bytes` from `addr`).
    pub fn flush(addr: u64, inst_gap: u32) -> Record {
        Record {
            op: Op::Flush,
            addr: addr & !63,
            size_bytes: 64,
            inst_gap,
            data: None,
        }
    }
}

/// A boxed stream of records, as returned by [`open`] and [`open_as`]. It is `Send`, so a
/// trace can be read on another thread; it coerces to `Box<dyn Iterator<...>>` without `Send`.
pub type RecordIter = Box<dyn Iterator<Item = Result<Record, TraceError>> + Send>;

/// A trace file format.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    Binary,
    Text,
    Ramulator,
    Dramsim3,
    Lackey,
    Champsim,
}

impl Format {
    pub const ALL: [Format; 6] = [
        Format::Binary,
        Format::Text,
        Format::Ramulator,
        Format::Dramsim3,
        Format::Lackey,
        Format::Champsim,
    ];

    /// The lower-case name accepted by `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Binary => "binary",
            Format::Text => "text",
            Format::Ramulator => "ramulator",
            Format::Dramsim3 => "dramsim3",
            Format::Lackey => "lackey",
            Format::Champsim => "champsim",
        }
    }

    /// Whether [`write()`] can produce this format.
    pub fn is_writable(self) -> bool {
        matches!(self, Format::Binary | Format::Text)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = String;
    /// Accepts the names of [`Format::name`] in any case, plus `bin`, `txt` and `dramsim`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "binary" | "bin" => Ok(Format::Binary),
            "text" | "txt" => Ok(Format::Text),
            "ramulator" => Ok(Format::Ramulator),
            "dramsim3" | "dramsim" => Ok(Format::Dramsim3),
            "lackey" => Ok(Format::Lackey),
            "champsim" => Ok(Format::Champsim),
            _ => Err(format!(
                "unknown trace format '{s}' (expected one of: binary, text, ramulator, dramsim3, lackey, champsim)"
            )),
        }
    }
}

/// How many leading bytes [`detect`] looks at.
const SNIFF_BYTES: usize = 64 * 1024;
/// How many significant lines the sniffer may look at.
const SNIFF_LINES: usize = 64;

fn path_name(path: &Path) -> String {
    path.display().to_string()
}

/// Guesses the format from the first bytes of a trace; `None` when no format fits.
///
/// Binary: starts with the magic. Text: first line starts with `# secmem-trace`. Otherwise
/// the first significant line (skipping blank lines, `#` comments and valgrind `==` lines)
/// decides: `<I|L|S|M> <hex>,<size>` is lackey, `<addr> <READ|WRITE|P_MEM_*|P_FETCH> <cycle>`
/// is DRAMSim3, `<addr> <R|W>` or 2-3 numbers is Ramulator. A file with only `==` lines is
/// lackey output without accesses.
pub fn detect_bytes(head: &[u8]) -> Option<Format> {
    if head.starts_with(&binary::MAGIC[..7]) {
        return Some(Format::Binary);
    }
    if head.starts_with(text::HEADER_PREFIX.as_bytes()) {
        return Some(Format::Text);
    }
    let mut saw_valgrind = false;
    // The last piece may be a line cut off by the sniff limit; skip it unless it is all there is.
    let pieces: Vec<&[u8]> = head.split(|&b| b == b'\n').collect();
    let complete = if head.len() >= SNIFF_BYTES && pieces.len() > 1 {
        pieces.len() - 1
    } else {
        pieces.len()
    };
    for raw in pieces
        .into_iter()
        .take(complete)
        .filter(|l| !l.is_empty())
        .take(SNIFF_LINES)
    {
        let Ok(line) = std::str::from_utf8(raw) else {
            return None;
        };
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if t.starts_with("==") {
            saw_valgrind = true;
            continue;
        }
        return classify_line(t);
    }
    saw_valgrind.then_some(Format::Lackey)
}

fn classify_line(t: &str) -> Option<Format> {
    let toks: Vec<&str> = t.split_ascii_whitespace().take(4).collect();
    let is_num = |s: &str| lines::parse_u64_auto(s).is_some();
    match toks.as_slice() {
        [op, arg] if matches!(*op, "I" | "L" | "S" | "M") && arg.contains(',') => {
            Some(Format::Lackey)
        }
        [_, op, cyc]
            if ["READ", "WRITE", "P_MEM_RD", "P_MEM_WR", "P_FETCH"]
                .iter()
                .any(|k| op.eq_ignore_ascii_case(k))
                && lines::parse_dec(cyc).is_some() =>
        {
            Some(Format::Dramsim3)
        }
        [_, "R" | "W"] => Some(Format::Ramulator),
        [a, b] if lines::parse_dec(a).is_some() && is_num(b) => Some(Format::Ramulator),
        [a, b, c] if lines::parse_dec(a).is_some() && is_num(b) && is_num(c) => {
            Some(Format::Ramulator)
        }
        _ => None,
    }
}

/// Reads up to `SNIFF_BYTES` from `r` (fewer only at EOF).
fn read_head(r: &mut impl Read, name: &str) -> Result<Vec<u8>, TraceError> {
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    r.by_ref()
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| TraceError::io(name, Position::File, e))?;
    Ok(head)
}

fn open_file(path: &Path) -> Result<File, TraceError> {
    File::open(path).map_err(|e| TraceError::io(path_name(path), Position::File, e))
}

/// A trace file opened for reading: decompressed when it is gzip or xz (see [`compress`]),
/// with its first (decompressed) bytes kept for format detection.
struct Source {
    name: String,
    /// Up to `SNIFF_BYTES` leading bytes of the trace (also at the start of `reader`).
    head: Vec<u8>,
    reader: Box<dyn Read + Send>,
    compression: Compression,
    /// Whether the name says ChampSim (`*.champsimtrace`, before any `.xz`/`.gz`).
    champsim_name: bool,
}

fn open_source(path: &Path) -> Result<Source, TraceError> {
    let name = path_name(path);
    let mut f = open_file(path)?;
    let raw = read_head(&mut f, &name)?;
    let compression = compress::sniff(&raw);
    let (head, reader): (Vec<u8>, Box<dyn Read + Send>) = match compression {
        Compression::None => (raw.clone(), Box::new(Cursor::new(raw).chain(f))),
        _ => {
            let (mut r, _) = compress::decompressed(&raw, Cursor::new(raw.clone()).chain(f));
            let head = read_head(&mut r, &name)?;
            (head.clone(), Box::new(Cursor::new(head).chain(r)))
        }
    };
    let file_name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    let stem = [".xz", ".gz", ".gzip"].iter().find_map(|ext| file_name.strip_suffix(ext)).unwrap_or(&file_name);
    let champsim_name = stem.ends_with(".champsimtrace") || stem.ends_with(".champsim");
    Ok(Source { name, head, reader, compression, champsim_name })
}

impl Source {
    /// The format: ChampSim by name (its records have no magic), otherwise by content.
    fn detect(&self) -> Result<Format, TraceError> {
        if self.champsim_name && detect_bytes(&self.head).is_none() {
            return Ok(Format::Champsim);
        }
        detect_head(&self.head, &self.name)
    }
}

/// Detects the format of the trace at `path` (see [`detect_bytes`]; a gzip or xz file is
/// looked at decompressed, and a `*.champsimtrace[.xz|.gz]` file is ChampSim).
pub fn detect(path: &Path) -> Result<Format, TraceError> {
    open_source(path)?.detect()
}

/// The compression of the file at `path`, from its magic bytes.
pub fn compression(path: &Path) -> Result<Compression, TraceError> {
    let name = path_name(path);
    Ok(compress::sniff(&read_head(&mut open_file(path)?, &name)?))
}

fn detect_head(head: &[u8], name: &str) -> Result<Format, TraceError> {
    if head.is_empty() {
        return Err(TraceError::whole_file(
            name,
            ErrorKind::Format,
            "empty file: cannot detect the trace format (give it explicitly: --trace-format, or run.trace_format)",
        ));
    }
    detect_bytes(head).ok_or_else(|| {
        TraceError::whole_file(
            name,
            ErrorKind::Format,
            "cannot detect the trace format (expected a secmem binary or text trace, or a \
             Ramulator, DRAMSim3 or lackey trace, or a ChampSim trace named *.champsimtrace; \
             give the format explicitly: --trace-format, or run.trace_format)",
        )
    })
}

/// Opens a trace, detecting its format (see [`detect`]); gzip and xz files are decompressed.
pub fn open(path: &Path) -> Result<RecordIter, TraceError> {
    let src = open_source(path)?;
    let format = src.detect()?;
    reader_for(src.reader, src.name, format)
}

/// Opens a trace in the given format; gzip and xz files are decompressed.
pub fn open_as(path: &Path, format: Format) -> Result<RecordIter, TraceError> {
    let src = open_source(path)?;
    reader_for(src.reader, src.name, format)
}

/// A boxed reader of `format` over any byte source; errors name `name`.
pub fn reader_for<R: Read + Send + 'static>(
    inner: R,
    name: String,
    format: Format,
) -> Result<RecordIter, TraceError> {
    Ok(match format {
        Format::Binary => Box::new(BinaryReader::with_name(inner, name)?),
        Format::Text => Box::new(TextReader::with_name(inner, name)?),
        Format::Ramulator => Box::new(RamulatorReader::with_name(inner, name)),
        Format::Dramsim3 => Box::new(Dramsim3Reader::with_name(inner, name)),
        Format::Lackey => Box::new(LackeyReader::with_name(inner, name)),
        Format::Champsim => Box::new(ChampsimReader::with_name(inner, name)),
    })
}

/// A boxed stream of [`Event`]s.
pub type EventIter = Box<dyn Iterator<Item = Result<Event, TraceError>> + Send>;

/// An opened trace read as events: its format, what its header says, and the records.
pub struct EventStream {
    pub format: Format,
    /// Version and OS-level flag of a secmem trace; version 0 for foreign formats.
    pub kind: TraceKind,
    /// How the file was compressed (`None` for a stream not opened from a file).
    pub compression: Compression,
    pub events: EventIter,
}

/// Opens a trace as [`Event`]s, detecting its format (gzip and xz files are decompressed).
/// Foreign and version-1 traces yield only [`Event::Phys`].
pub fn open_events(path: &Path) -> Result<EventStream, TraceError> {
    let src = open_source(path)?;
    let format = src.detect()?;
    let compression = src.compression;
    Ok(EventStream { compression, ..events_reader_for(src.reader, src.name, format)? })
}

/// Opens a trace as [`Event`]s in the given format.
pub fn open_events_as(path: &Path, format: Format) -> Result<EventStream, TraceError> {
    let src = open_source(path)?;
    let compression = src.compression;
    Ok(EventStream { compression, ..events_reader_for(src.reader, src.name, format)? })
}

/// What the header of the trace at `path` says (format detected); version 0 for foreign
/// formats. Reads only the header.
pub fn trace_kind(path: &Path) -> Result<TraceKind, TraceError> {
    Ok(open_events(path)?.kind)
}

/// A boxed event reader of `format` over any byte source; errors name `name`.
pub fn events_reader_for<R: Read + Send + 'static>(
    inner: R,
    name: String,
    format: Format,
) -> Result<EventStream, TraceError> {
    let (kind, events): (TraceKind, EventIter) = match format {
        Format::Binary => {
            let r = BinaryReader::with_name(inner, name)?;
            (r.header().kind(), Box::new(r.events()))
        }
        Format::Text => {
            let r = TextReader::with_name(inner, name)?;
            (r.kind(), Box::new(r.events()))
        }
        _ => {
            let it = reader_for(inner, name, format)?;
            // Lackey and ChampSim traces are a program's loads and stores: virtual addresses.
            let foreign = TraceKind {
                version: 0,
                os_level: false,
                virtual_addresses: matches!(format, Format::Lackey | Format::Champsim),
            };
            (foreign, Box::new(it.map(|r| r.map(Event::Phys))))
        }
    };
    Ok(EventStream {
        format,
        kind,
        compression: Compression::None,
        events,
    })
}

/// Creates `path` for a trace of `format`, refusing unwritable formats before touching the
/// file; errors call it `name`.
fn create_trace_file(path: &Path, name: String, format: Format) -> Result<File, TraceError> {
    if !format.is_writable() {
        return Err(TraceError::whole_file(
            name,
            ErrorKind::Format,
            format!("cannot write {format} traces (writable formats: binary, text)"),
        ));
    }
    File::create(path).map_err(|e| TraceError::io(name, Position::File, e))
}

/// Writes `events` to `path` as a secmem trace of `format` (binary or text) and `kind`
/// (version 1 or 2; OS records need `os_level`); stops at (and returns) the first error of
/// the input. Returns the record count.
pub fn write_events(
    path: &Path,
    format: Format,
    kind: TraceKind,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
) -> Result<u64, TraceError> {
    // Written beside `path` and renamed over it only when complete: a bad input record (or a
    // full disk) leaves no partial trace behind and an existing file at `path` as it was.
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".partial-{}", std::process::id()));
    let partial = std::path::PathBuf::from(partial);
    let name = path_name(path);
    // Errors name the file the user asked for, not the temporary one.
    let f = create_trace_file(&partial, name.clone(), format)?;
    let written = (|| {
        let mut w = EventWriter::new(f, name.clone(), format, kind)?;
        for e in events {
            w.write(&e?)?;
        }
        w.finish()
    })();
    let done = written.and_then(|n| std::fs::rename(&partial, path).map(|_| n).map_err(|e| TraceError::io(name, Position::File, e)));
    if done.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    done
}

/// Which records of a program a capture keeps: it drops the first `skip` (a program's start
/// is mostly the dynamic loader and its libraries' initialisation) and stops after `max`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CaptureWindow {
    pub skip: u64,
    pub max: Option<u64>,
}

/// Converts a running program's lackey output (`valgrind --tool=lackey --trace-mem=yes`, read
/// from `lackey` as valgrind writes it, so no text trace is kept on disk) into a secmem
/// binary trace at `output`, marked virtual (a program's addresses), keeping the records of
/// `window`. `progress(records)` is called every 2^20 records kept. Returns the record
/// count; on an error (also one in a skipped record) the output is not written.
pub fn capture_lackey<R: Read + Send + 'static>(
    lackey: R,
    name: String,
    output: &Path,
    window: CaptureWindow,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, TraceError> {
    let records = reader_for(lackey, name, Format::Lackey)?;
    let limit = usize::try_from(window.max.unwrap_or(u64::MAX)).unwrap_or(usize::MAX);
    let (mut n, mut skipped) = (0u64, 0u64);
    let kept = records.filter(|r| {
        let drop = r.is_ok() && skipped < window.skip;
        skipped += drop as u64;
        !drop
    });
    let events = kept.take(limit).map(|r| {
        n += 1;
        if n.is_multiple_of(1 << 20) {
            progress(n);
        }
        r.map(Event::Phys)
    });
    write_events(output, Format::Binary, TraceKind::V1.with_virtual_addresses(true), events)
}

/// A writer of binary or text traces of any version, record by record.
pub enum EventWriter<W: std::io::Write> {
    Binary(BinaryWriter<W>),
    Text(TextWriter<W>, u64),
}

impl<W: std::io::Write> EventWriter<W> {
    /// Writes the header of `kind` in `format` (binary or text); `name` is used in errors.
    pub fn new(inner: W, name: String, format: Format, kind: TraceKind) -> Result<Self, TraceError> {
        match format {
            Format::Binary => Ok(EventWriter::Binary(BinaryWriter::with_kind(inner, name, true, kind)?)),
            Format::Text => Ok(EventWriter::Text(TextWriter::with_kind(inner, name, kind)?, 0)),
            other => Err(TraceError::whole_file(
                name,
                ErrorKind::Format,
                format!("cannot write {other} traces (writable formats: binary, text)"),
            )),
        }
    }

    pub fn write(&mut self, ev: &Event) -> Result<(), TraceError> {
        match self {
            EventWriter::Binary(w) => w.write_event(ev),
            EventWriter::Text(w, n) => {
                w.write_event(ev)?;
                *n += 1;
                Ok(())
            }
        }
    }

    /// Flushes; returns the number of records written.
    pub fn finish(self) -> Result<u64, TraceError> {
        match self {
            EventWriter::Binary(w) => {
                let n = w.records_written();
                w.finish()?;
                Ok(n)
            }
            EventWriter::Text(w, n) => {
                w.finish()?;
                Ok(n)
            }
        }
    }
}

/// Writes `records` to `path` in `format` (binary or text); returns the record count.
pub fn write(
    path: &Path,
    format: Format,
    records: impl IntoIterator<Item = Record>,
) -> Result<u64, TraceError> {
    write_results(path, format, records.into_iter().map(Ok))
}

/// Like [`write()`], but stops at (and returns) the first error of the input; the output file
/// then holds the records before it.
pub fn write_results(
    path: &Path,
    format: Format,
    records: impl IntoIterator<Item = Result<Record, TraceError>>,
) -> Result<u64, TraceError> {
    let name = path_name(path);
    let f = create_trace_file(path, name.clone(), format)?;
    if format == Format::Binary {
        let mut w = BinaryWriter::with_options(f, name, true)?;
        for r in records {
            w.write(&r?)?;
        }
        let n = w.records_written();
        w.finish()?;
        Ok(n)
    } else {
        let mut w = TextWriter::with_name(f, name)?;
        let mut n = 0u64;
        for r in records {
            w.write(&r?)?;
            n += 1;
        }
        w.finish()?;
        Ok(n)
    }
}

/// Converts a trace (format detected when `from` is `None`) into `to` (binary or text);
/// returns the record count. A version-2 secmem trace stays version 2 (OS-level or not);
/// version-1 and foreign traces are written as version 1. Virtual addresses stay marked
/// virtual (a lackey trace's are).
pub fn convert(
    input: &Path,
    from: Option<Format>,
    output: &Path,
    to: Format,
) -> Result<u64, TraceError> {
    let stream = match from {
        Some(f) => open_events_as(input, f)?,
        None => open_events(input)?,
    };
    let kind = if stream.kind.version == 2 {
        stream.kind
    } else {
        TraceKind::V1.with_virtual_addresses(stream.kind.virtual_addresses)
    };
    write_events(output, to, kind, stream.events)
}

/// Most distinct lines [`info`] tracks (about 1 GiB of hash set); beyond it, counting stops.
pub const DISTINCT_LINE_CAP: u64 = 50_000_000;

/// Summary statistics of a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceInfo {
    pub records: u64,
    pub reads: u64,
    pub writes: u64,
    pub fences: u64,
    pub flushes: u64,
    pub records_with_data: u64,
    /// Distinct 64 B contents among the payloads (`records_with_data` when every payload
    /// differs; a low share means most written lines repeat). At most [`DISTINCT_LINE_CAP`].
    pub distinct_data_contents: u64,
    /// Distinct 64 B lines touched by reads, writes and flushes (a record spanning several
    /// lines touches all of them). At most [`DISTINCT_LINE_CAP`].
    pub distinct_lines: u64,
    /// Whether `distinct_lines` stopped counting at the cap (the true value is larger).
    pub distinct_lines_capped: bool,
    /// Lowest / highest `addr` of reads, writes and flushes (`None` without any).
    pub min_addr: Option<u64>,
    pub max_addr: Option<u64>,
    /// `sum(inst_gap) + records` (every record is one instruction).
    pub total_instructions: u64,
    /// `distinct_lines * 64`.
    pub footprint_bytes: u64,
    /// The OS records of an OS-level (version 2) trace; `None` for other traces.
    pub os: Option<OsInfo>,
}

/// Summary of the OS records of an OS-level trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OsInfo {
    pub loads: u64,
    pub stores: u64,
    pub allocs: u64,
    pub frees: u64,
    pub forks: u64,
    pub exits: u64,
    pub wbnoinvds: u64,
    pub roi_markers: u64,
    /// Distinct pids named by any record.
    pub processes: u64,
    /// Bytes allocated with 4 KB pages and with 2 MB pages, and bytes freed.
    pub alloc_bytes_4k: u64,
    pub alloc_bytes_2m: u64,
    pub free_bytes: u64,
    /// Storage I/O records (`IOR`, `IOW`) and the bytes they move.
    pub io_reads: u64,
    pub io_writes: u64,
    pub io_bytes: u64,
}

impl OsInfo {
    fn to_json(&self) -> String {
        format!(
            "{{\"loads\":{},\"stores\":{},\"allocs\":{},\"frees\":{},\"forks\":{},\"exits\":{},\
             \"wbnoinvds\":{},\"roi_markers\":{},\"processes\":{},\"alloc_bytes_4k\":{},\
             \"alloc_bytes_2m\":{},\"free_bytes\":{},\"io_reads\":{},\"io_writes\":{},\"io_bytes\":{}}}",
            self.loads,
            self.stores,
            self.allocs,
            self.frees,
            self.forks,
            self.exits,
            self.wbnoinvds,
            self.roi_markers,
            self.processes,
            self.alloc_bytes_4k,
            self.alloc_bytes_2m,
            self.free_bytes,
            self.io_reads,
            self.io_writes,
            self.io_bytes
        )
    }
}

impl TraceInfo {
    /// A JSON object with the fields above (`min_addr`/`max_addr` are `null` when absent;
    /// `os` only for OS-level traces).
    pub fn to_json(&self) -> String {
        let opt = |v: Option<u64>| v.map_or_else(|| "null".to_string(), |x| x.to_string());
        let os = self
            .os
            .as_ref()
            .map_or_else(String::new, |o| format!(",\"os\":{}", o.to_json()));
        format!(
            "{{\"records\":{},\"reads\":{},\"writes\":{},\"fences\":{},\"flushes\":{},\
             \"records_with_data\":{},\"distinct_data_contents\":{},\"distinct_lines\":{},\"distinct_lines_capped\":{},\
             \"min_addr\":{},\"max_addr\":{},\"total_instructions\":{},\"footprint_bytes\":{}{os}}}",
            self.records,
            self.reads,
            self.writes,
            self.fences,
            self.flushes,
            self.records_with_data,
            self.distinct_data_contents,
            self.distinct_lines,
            self.distinct_lines_capped,
            opt(self.min_addr),
            opt(self.max_addr),
            self.total_instructions,
            self.footprint_bytes
        )
    }
}

/// A fast hasher for line numbers (a multiply-xorshift mix; not for untrusted-key DoS
/// resistance, which a trace summary does not need).
#[derive(Default)]
struct LineHasher(u64);

impl Hasher for LineHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A 128-bit fingerprint of a line's content (two independent 64-bit mixes): distinct
/// contents are counted without keeping 64 B each; among the at most [`DISTINCT_LINE_CAP`]
/// contents counted a collision is vanishingly unlikely.
fn content_fingerprint(d: &[u8; 64]) -> u128 {
    let (mut a, mut b) = (0x243f_6a88_85a3_08d3u64, 0x1319_8a2e_0370_7344u64);
    for w in d.chunks_exact(8) {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        a = (a ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
        b = (b.rotate_left(23) ^ w).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    }
    let mut h = LineHasher(a);
    let a = h.finish();
    h.0 = b ^ a;
    (u128::from(a) << 64) | u128::from(h.finish())
}

/// Summarises a trace, stopping at its first error.
pub fn info<I>(records: I) -> Result<TraceInfo, TraceError>
where
    I: IntoIterator<Item = Result<Record, TraceError>>,
{
    info_capped(records, DISTINCT_LINE_CAP)
}

fn info_capped<I>(records: I, cap: u64) -> Result<TraceInfo, TraceError>
where
    I: IntoIterator<Item = Result<Record, TraceError>>,
{
    info_events_capped(records.into_iter().map(|r| r.map(Event::Phys)), false, cap)
}

/// Summarises a trace read as events (see [`open_events`]), stopping at its first error;
/// `os_level` (the header's flag) adds the `os` block. The physical-record fields count
/// [`Event::Phys`] records only; virtual loads and stores are in the `os` block.
pub fn info_events<I>(events: I, os_level: bool) -> Result<TraceInfo, TraceError>
where
    I: IntoIterator<Item = Result<Event, TraceError>>,
{
    info_events_capped(events, os_level, DISTINCT_LINE_CAP)
}

fn info_events_capped<I>(events: I, os_level: bool, cap: u64) -> Result<TraceInfo, TraceError>
where
    I: IntoIterator<Item = Result<Event, TraceError>>,
{
    let mut t = TraceInfo::default();
    let mut os = OsInfo::default();
    let mut pids: HashSet<u32> = HashSet::new();
    let mut lines: HashSet<u64, BuildHasherDefault<LineHasher>> = HashSet::default();
    let mut contents: HashSet<u128> = HashSet::new();
    let mut note_content = |d: &Option<[u8; 64]>| {
        if let Some(d) = d {
            if (contents.len() as u64) < cap {
                contents.insert(content_fingerprint(d));
            }
        }
    };
    for ev in events {
        let ev = ev?;
        t.records += 1;
        if ev.is_instruction() {
            t.total_instructions = t
                .total_instructions
                .saturating_add(ev.inst_gap() as u64 + 1);
        }
        pids.extend(ev.pids());
        let r = match ev {
            Event::Phys(r) => r,
            Event::Load { .. } => {
                os.loads += 1;
                continue;
            }
            Event::Store { data, .. } => {
                os.stores += 1;
                t.records_with_data += data.is_some() as u64;
                note_content(&data);
                continue;
            }
            Event::Alloc { length, page, .. } => {
                os.allocs += 1;
                let b = match page {
                    PageSize::Small => &mut os.alloc_bytes_4k,
                    PageSize::Huge => &mut os.alloc_bytes_2m,
                };
                *b = b.saturating_add(length);
                continue;
            }
            Event::Free { length, .. } => {
                os.frees += 1;
                os.free_bytes = os.free_bytes.saturating_add(length);
                continue;
            }
            Event::Fork { .. } => {
                os.forks += 1;
                continue;
            }
            Event::Exit { .. } => {
                os.exits += 1;
                continue;
            }
            Event::WbNoInvd => {
                os.wbnoinvds += 1;
                continue;
            }
            Event::RoiBegin => {
                os.roi_markers += 1;
                continue;
            }
            Event::Io { write, bytes, .. } => {
                if write { os.io_writes += 1 } else { os.io_reads += 1 }
                os.io_bytes = os.io_bytes.saturating_add(u64::from(bytes));
                continue;
            }
        };
        if r.data.is_some() {
            t.records_with_data += 1;
            note_content(&r.data);
        }
        match r.op {
            Op::Read => t.reads += 1,
            Op::Write => t.writes += 1,
            Op::Fence => {
                t.fences += 1;
                continue;
            }
            Op::Flush => t.flushes += 1,
        }
        t.min_addr = Some(t.min_addr.map_or(r.addr, |m| m.min(r.addr)));
        t.max_addr = Some(t.max_addr.map_or(r.addr, |m| m.max(r.addr)));
        let first = r.addr / 64;
        let last = r.addr.saturating_add((r.size_bytes as u64).max(1) - 1) / 64;
        for line in first..=last {
            if (lines.len() as u64) < cap {
                lines.insert(line);
            } else if !lines.contains(&line) {
                t.distinct_lines_capped = true;
            }
        }
    }
    t.distinct_lines = lines.len() as u64;
    t.distinct_data_contents = contents.len() as u64;
    t.footprint_bytes = t.distinct_lines * 64;
    if os_level {
        os.processes = pids.len() as u64;
        t.os = Some(os);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A fresh path in the temp dir, removed on drop.
    struct TempPath(PathBuf);
    impl TempPath {
        fn new(ext: &str) -> TempPath {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            TempPath(std::env::temp_dir().join(format!(
                "secmem-trace-test-{}-{n}.{ext}",
                std::process::id()
            )))
        }
        fn with(ext: &str, content: &[u8]) -> TempPath {
            let p = TempPath::new(ext);
            std::fs::write(&p.0, content).unwrap();
            p
        }
    }
    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn sample() -> Vec<Record> {
        vec![
            Record::read(0x1000, 3),
            Record::write_data(0x1040, 0, [0x5a; 64]),
            Record::fence(2),
            Record::flush(0x1040, 0),
            Record::write(0x1000, 1),
        ]
    }

    fn collect(it: RecordIter) -> Vec<Record> {
        it.map(|r| r.unwrap()).collect()
    }

    #[test]
    fn write_then_open_round_trips_binary_and_text_with_detection() {
        for (format, ext) in [(Format::Binary, "bin"), (Format::Text, "txt")] {
            let p = TempPath::new(ext);
            assert_eq!(write(&p.0, format, sample()).unwrap(), 5);
            assert_eq!(detect(&p.0).unwrap(), format);
            assert_eq!(collect(open(&p.0).unwrap()), sample());
            assert_eq!(collect(open_as(&p.0, format).unwrap()), sample());
        }
    }

    #[test]
    fn io_records_round_trip_in_both_encodings_and_info_counts_them() {
        let events = vec![
            Event::Load { pid: 0, vaddr: 0x1000, size_bytes: 8, inst_gap: 3 },
            Event::Io { pid: 0, write: false, offset: 1 << 33, bytes: 128 << 10, inst_gap: 50 },
            Event::Io { pid: 0, write: true, offset: 4096, bytes: 512, inst_gap: 0 },
        ];
        for (format, ext) in [(Format::Binary, "bin"), (Format::Text, "txt")] {
            let p = TempPath::new(ext);
            assert_eq!(write_events(&p.0, format, TraceKind::V2_OS, events.iter().cloned().map(Ok)).unwrap(), 3);
            let back: Vec<Event> = open_events(&p.0).unwrap().events.map(|e| e.unwrap()).collect();
            assert_eq!(back, events);
            let info = info_events(open_events(&p.0).unwrap().events, true).unwrap();
            let os = info.os.unwrap();
            assert_eq!((os.io_reads, os.io_writes, os.io_bytes), (1, 1, (128 << 10) + 512));
        }
        let text = TempPath::with("txt", b"# secmem-trace v2 os\nIOR 0 0x1000 4096 7\nIOW 0 0x1000 100 0\n");
        let e = open_events(&text.0).unwrap().events.map(|e| e.map(|_| ())).collect::<Result<Vec<()>, _>>().unwrap_err().to_string();
        assert!(e.contains(":3") && e.contains("512 B blocks"), "{e}");
        let plain = TempPath::with("txt", b"# secmem-trace v2\nIOR 0 0x1000 4096 7\n");
        let e = open_events(&plain.0).unwrap().events.map(|e| e.map(|_| ())).collect::<Result<Vec<()>, _>>().unwrap_err().to_string();
        assert!(e.contains("IOR record in a trace whose header is not"), "{e}");
    }

    #[test]
    fn open_detects_foreign_formats() {
        let cases: [(&str, Format, Vec<Record>); 5] = [
            (
                "0x1000 R\n0x1040 W\n",
                Format::Ramulator,
                vec![Record::read(0x1000, 0), Record::write(0x1040, 0)],
            ),
            (
                "5 4096\n2 8192 4096\n",
                Format::Ramulator,
                vec![
                    Record::read(4096, 5),
                    Record::read(8192, 2),
                    Record::write(4096, 0),
                ],
            ),
            (
                "0x1000 READ 10\n0x1040 WRITE 25\n",
                Format::Dramsim3,
                vec![Record::read(0x1000, 10), Record::write(0x1040, 15)],
            ),
            (
                "==7== Lackey\n==7==\nI  0400,3\n L 1000,8\n",
                Format::Lackey,
                vec![Record {
                    size_bytes: 8,
                    ..Record::read(0x1000, 0)
                }],
            ),
            (
                "# a comment\n\n0x40 W\n",
                Format::Ramulator,
                vec![Record::write(0x40, 0)],
            ),
        ];
        for (content, format, want) in cases {
            let p = TempPath::with("trace", content.as_bytes());
            assert_eq!(detect(&p.0).unwrap(), format, "{content}");
            assert_eq!(collect(open(&p.0).unwrap()), want, "{content}");
        }
    }

    #[test]
    fn undetectable_and_empty_files_are_errors_naming_the_file() {
        let p = TempPath::with("trace", b"hello world, this is not a trace\n");
        let e = open(&p.0).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::Format);
        assert!(
            e.to_string()
                .starts_with(&format!("{}: cannot detect", p.0.display())),
            "{e}"
        );
        let p = TempPath::with("trace", b"");
        assert!(open(&p.0).err().unwrap().message().contains("empty file"));
        let e = open(Path::new("/nonexistent/secmem.trace")).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::Io);
        assert!(
            e.to_string()
                .starts_with("/nonexistent/secmem.trace: I/O error"),
            "{e}"
        );
    }

    #[test]
    fn errors_from_opened_files_name_the_path_and_line() {
        let p = TempPath::with("txt", b"# secmem-trace v1\nR 0x0 64 0\nZ 0x0 64 0\n");
        let e = open(&p.0).unwrap().find_map(|r| r.err()).unwrap();
        assert_eq!(
            e.to_string(),
            format!(
                "{}:3: unknown operation 'Z' (expected R, W, F, FL)",
                p.0.display()
            )
        );
        // A binary file with a bad version is detected as binary and rejected by version.
        let mut bytes = binary::MAGIC.to_vec();
        bytes.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0]);
        let p = TempPath::with("bin", &bytes);
        assert_eq!(
            open(&p.0).err().unwrap().kind(),
            ErrorKind::UnsupportedVersion
        );
    }

    #[test]
    fn detection_reads_past_the_sniff_window_correctly() {
        // A long trace: detection consumes the head, and the reader must still see everything.
        let recs: Vec<Record> = (0..20_000u64).map(|i| Record::read(i * 64, 1)).collect();
        let p = TempPath::new("txt");
        write(&p.0, Format::Text, recs.clone()).unwrap();
        assert!(std::fs::metadata(&p.0).unwrap().len() > SNIFF_BYTES as u64);
        assert_eq!(collect(open(&p.0).unwrap()), recs);
        let mut ram = String::new();
        for i in 0..10_000u64 {
            ram.push_str(&format!("0x{:x} R\n", i * 64));
        }
        let p = TempPath::with("trace", ram.as_bytes());
        assert_eq!(open(&p.0).unwrap().count(), 10_000);
    }

    #[test]
    fn writing_foreign_formats_is_refused_without_creating_the_file() {
        let p = TempPath::new("trace");
        let e = write(&p.0, Format::Lackey, sample()).unwrap_err();
        assert_eq!(
            e.message(),
            "cannot write lackey traces (writable formats: binary, text)"
        );
        assert!(!p.0.exists());
    }

    #[test]
    fn convert_turns_a_foreign_trace_into_binary() {
        let src = TempPath::with("trace", b"0x1000 READ 10\n0x1040 WRITE 25\n");
        let dst = TempPath::new("bin");
        assert_eq!(convert(&src.0, None, &dst.0, Format::Binary).unwrap(), 2);
        assert_eq!(
            collect(open(&dst.0).unwrap()),
            vec![Record::read(0x1000, 10), Record::write(0x1040, 15)]
        );
    }

    #[test]
    fn a_failed_convert_leaves_the_existing_output_as_it_was_and_no_partial_file() {
        // It used to leave the records before the bad one in the output, over the old file.
        let src = TempPath::with("trace", b"0x1000 READ 10\n0x1040 WRITE 25\nnot a record\n");
        let dst = TempPath::with("bin", b"precious");
        assert!(convert(&src.0, None, &dst.0, Format::Binary).is_err());
        assert_eq!(std::fs::read(&dst.0).unwrap(), b"precious");
        let dir = dst.0.parent().unwrap();
        let stem = dst.0.file_name().unwrap().to_string_lossy().to_string();
        let leftovers: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&format!("{stem}.partial"))).collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    fn compressed(bytes: &[u8], xz: bool) -> Vec<u8> {
        use std::io::Write;
        let mut e = compress::Compressor::new(Vec::new(), if xz { Compression::Xz } else { Compression::Gzip }, 6);
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_gzip_or_xz_trace_of_any_format_opens_as_its_contents() {
        let bin = TempPath::new("bin");
        write(&bin.0, Format::Binary, sample()).unwrap();
        let text = "0x1000 R\n0x2000 W\n";
        for xz in [false, true] {
            let zbin = TempPath::with("bin.z", &compressed(&std::fs::read(&bin.0).unwrap(), xz));
            assert_eq!(detect(&zbin.0).unwrap(), Format::Binary);
            assert_eq!(compression(&zbin.0).unwrap(), if xz { Compression::Xz } else { Compression::Gzip });
            assert_eq!(open_events(&zbin.0).unwrap().compression, compression(&zbin.0).unwrap());
            let back: Vec<Record> = open(&zbin.0).unwrap().map(Result::unwrap).collect();
            assert_eq!(back, sample());
            let zram = TempPath::with("trace.gz", &compressed(text.as_bytes(), xz));
            assert_eq!(detect(&zram.0).unwrap(), Format::Ramulator);
            assert_eq!(open(&zram.0).unwrap().count(), 2);
        }
    }

    #[test]
    fn a_champsim_trace_is_known_by_its_name_and_its_addresses_are_virtual() {
        let instrs = [
            champsim::encode_instr(0x40, false, false, [0; 2], [0x7ffd_0000_1000, 0, 0, 0]),
            champsim::encode_instr(0x44, false, false, [0x7ffd_0000_2000, 0], [0; 4]),
        ]
        .concat();
        let p = TempPath::with("champsimtrace.xz", &compressed(&instrs, true));
        assert_eq!(detect(&p.0).unwrap(), Format::Champsim);
        let stream = open_events(&p.0).unwrap();
        assert!(stream.kind.virtual_addresses);
        assert_eq!(stream.events.count(), 2);
        // Without the name it is not guessed: bytes alone do not say ChampSim.
        let anon = TempPath::with("xz", &compressed(&instrs, true));
        assert!(detect(&anon.0).unwrap_err().to_string().contains("*.champsimtrace"));
        assert_eq!(open_as(&anon.0, Format::Champsim).unwrap().count(), 2);
    }

    #[test]
    fn a_truncated_compressed_trace_is_an_error_naming_the_file() {
        let bin = TempPath::new("bin");
        let many: Vec<Record> = (0..50_000u64).map(|i| Record::read(i * 4096 % (1 << 30), (i % 7) as u32)).collect();
        write(&bin.0, Format::Binary, many).unwrap();
        for xz in [false, true] {
            let mut z = compressed(&std::fs::read(&bin.0).unwrap(), xz);
            z.truncate(z.len() * 2 / 3);
            let p = TempPath::with("bin.z", &z);
            let e = open(&p.0).unwrap().find_map(Result::err).expect("an error, not a short trace");
            assert_eq!(e.file(), p.0.display().to_string());
            assert!(e.to_string().contains("corrupt or truncated"), "{e}");
            assert!(e.offset().is_some(), "{e}");
        }
    }

    #[test]
    fn format_names_parse_and_unknown_names_list_the_known_ones() {
        for f in Format::ALL {
            assert_eq!(f.to_string().parse::<Format>().unwrap(), f);
        }
        assert_eq!("BIN".parse::<Format>().unwrap(), Format::Binary);
        assert_eq!(
            "csv".parse::<Format>().unwrap_err(),
            "unknown trace format 'csv' (expected one of: binary, text, ramulator, dramsim3, lackey, champsim)"
        );
    }

    #[test]
    fn op_codes_match_the_binary_format() {
        for op in Op::ALL {
            assert_eq!(Op::from_code(op as u8), Some(op));
        }
        assert_eq!(Op::from_code(4), None);
    }

    #[test]
    fn info_counts_ops_lines_addresses_and_instructions() {
        let mut recs = sample();
        recs.push(Record {
            size_bytes: 8,
            ..Record::read(0x10bc, 0)
        }); // spans 0x1080 and 0x10c0
        let t = info(recs.into_iter().map(Ok)).unwrap();
        assert_eq!(
            t,
            TraceInfo {
                records: 6,
                reads: 2,
                writes: 2,
                fences: 1,
                flushes: 1,
                records_with_data: 1,
                distinct_data_contents: 1,
                distinct_lines: 4,
                distinct_lines_capped: false,
                min_addr: Some(0x1000),
                max_addr: Some(0x10bc),
                total_instructions: 6 + 3 + 2 + 1,
                footprint_bytes: 256,
                os: None,
            }
        );
        assert_eq!(
            t.to_json(),
            "{\"records\":6,\"reads\":2,\"writes\":2,\"fences\":1,\"flushes\":1,\"records_with_data\":1,\
             \"distinct_data_contents\":1,\"distinct_lines\":4,\"distinct_lines_capped\":false,\"min_addr\":4096,\"max_addr\":4284,\
             \"total_instructions\":12,\"footprint_bytes\":256}"
        );
    }

    #[test]
    fn info_counts_distinct_payload_contents_among_repeated_ones() {
        let recs = (0..100u64).map(|i| Ok(Record::write_data(i * 64, 0, [(i % 7) as u8; 64])));
        let t = info(recs).unwrap();
        assert_eq!((t.records_with_data, t.distinct_data_contents), (100, 7));
    }

    #[test]
    fn info_of_an_empty_trace_has_null_addresses() {
        let t = info(std::iter::empty()).unwrap();
        assert_eq!(t.records, 0);
        assert!(t.to_json().contains("\"min_addr\":null,\"max_addr\":null"));
    }

    #[test]
    fn info_stops_counting_distinct_lines_at_the_cap() {
        let recs = (0..100u64).map(|i| Ok(Record::read(i * 64, 0)));
        let t = info_capped(recs, 10).unwrap();
        assert_eq!(
            (t.distinct_lines, t.distinct_lines_capped, t.records),
            (10, true, 100)
        );
        // Revisiting already-counted lines at the cap does not set the flag.
        let recs = (0..100u64).map(|i| Ok(Record::read((i % 10) * 64, 0)));
        let t = info_capped(recs, 10).unwrap();
        assert_eq!((t.distinct_lines, t.distinct_lines_capped), (10, false));
    }

    #[test]
    fn info_propagates_the_first_error() {
        let it = TextReader::new(&b"# secmem-trace v1\nR 0x0 64 0\nbogus\n"[..]).unwrap();
        let e = info(it).unwrap_err();
        assert_eq!(e.line(), Some(3));
    }

    #[test]
    fn info_of_a_generated_trace_matches_the_spec() {
        let spec = GenSpec {
            pattern: Pattern::Sequential,
            requests: 1000,
            footprint_bytes: 64 * 100,
            inst_gap: 4,
            base_addr: 0x4000,
            ..GenSpec::default()
        };
        let t = info(spec.generator().unwrap().map(Ok)).unwrap();
        assert_eq!(t.distinct_lines, 100);
        assert_eq!(t.footprint_bytes, 6400);
        assert_eq!(
            (t.min_addr, t.max_addr),
            (Some(0x4000), Some(0x4000 + 99 * 64))
        );
        assert_eq!(t.total_instructions, 5000);
        assert_eq!(t.reads + t.writes, 1000);
    }

    #[test]
    fn detect_bytes_classifies_single_lines() {
        assert_eq!(detect_bytes(b"SECMTRC\0\x01\0"), Some(Format::Binary));
        assert_eq!(detect_bytes(b"# secmem-trace v7\n"), Some(Format::Text));
        assert_eq!(detect_bytes(b"I  04001100,3\n"), Some(Format::Lackey));
        assert_eq!(detect_bytes(b" M 0421a228,4\n"), Some(Format::Lackey));
        assert_eq!(detect_bytes(b"==1== only noise\n"), Some(Format::Lackey));
        assert_eq!(
            detect_bytes(b"0x1234 P_MEM_WR 15\n"),
            Some(Format::Dramsim3)
        );
        assert_eq!(detect_bytes(b"0x1234 W\n"), Some(Format::Ramulator));
        assert_eq!(detect_bytes(b"12 0x40 4096\n"), Some(Format::Ramulator));
        assert_eq!(
            detect_bytes(b"R 0x40 64 0\n"),
            None,
            "text body without header"
        );
        assert_eq!(detect_bytes(b"\xff\xfe\n"), None);
    }

    #[test]
    fn detection_looks_at_the_first_64_kib_of_a_file() {
        // Blank lines are skipped however many there are: a first record at 60 KiB is seen...
        let mut bytes = vec![b'\n'; 60 * 1024];
        bytes.extend_from_slice(b"0x40 READ 12\n");
        let p = TempPath::with("trace", &bytes);
        assert_eq!(detect(&p.0).unwrap(), Format::Dramsim3);
        // ...and one at 70 KiB is not.
        let mut bytes = vec![b'\n'; 70 * 1024];
        bytes.extend_from_slice(b"0x40 READ 12\n");
        let p = TempPath::with("trace", &bytes);
        assert!(detect(&p.0).unwrap_err().message().starts_with("cannot detect the trace format"));
    }

    #[test]
    fn a_line_cut_off_by_the_sniff_window_is_not_classified_unless_it_is_all_there_is() {
        // Cut after "0x40 R", a DRAMSim3 line would look like Ramulator.
        let mut head = vec![b'\n'; SNIFF_BYTES - 6];
        head.extend_from_slice(b"0x40 READ 12\n");
        assert_eq!(detect_bytes(&head[..SNIFF_BYTES]), None);
        // One line filling the whole window is still classified.
        let mut head = b"0x40 R".to_vec();
        head.resize(SNIFF_BYTES, b' ');
        assert_eq!(detect_bytes(&head), Some(Format::Ramulator));
        // A short file's last line needs no newline.
        assert_eq!(detect_bytes(b"\n0x40 R"), Some(Format::Ramulator));
    }

    #[test]
    fn lines_that_only_half_look_like_a_format_are_not_detected() {
        // Lackey needs both the op and the comma; Ramulator needs every field numeric.
        for line in ["L 4096", "0x10 1,2", "hello world", "x 4096", "4096 x", "a b c", "x 1 2", "1 x 2", "1 2 x"] {
            assert_eq!(detect_bytes(format!("{line}\n").as_bytes()), None, "{line}");
        }
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        (
            0u8..4,
            any::<u64>(),
            any::<u16>(),
            any::<u32>(),
            any::<bool>(),
            any::<[u8; 32]>(),
            any::<[u8; 32]>(),
        )
            .prop_map(|(op, addr, size_bytes, inst_gap, with_data, lo, hi)| {
                let op = Op::from_code(op).unwrap();
                let data = (op == Op::Write && with_data).then(|| {
                    let mut d = [0u8; 64];
                    d[..32].copy_from_slice(&lo);
                    d[32..].copy_from_slice(&hi);
                    d
                });
                Record {
                    op,
                    addr,
                    size_bytes,
                    inst_gap,
                    data,
                }
            })
    }

    proptest! {
        #[test]
        fn random_records_round_trip_through_binary_and_text(recs in prop::collection::vec(arb_record(), 0..64)) {
            let mut bw = BinaryWriter::new(Vec::new()).unwrap();
            let mut tw = TextWriter::new(Vec::new()).unwrap();
            for r in &recs {
                bw.write(r).unwrap();
                tw.write(r).unwrap();
            }
            let bin = bw.finish().unwrap();
            let txt = tw.finish().unwrap();
            let from_bin: Vec<Record> = BinaryReader::new(&bin[..]).unwrap().collect::<Result<_, _>>().unwrap();
            let from_txt: Vec<Record> = TextReader::new(&txt[..]).unwrap().collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(&from_bin, &recs);
            prop_assert_eq!(&from_txt, &recs);
            prop_assert_eq!(detect_bytes(&bin), Some(Format::Binary));
            prop_assert_eq!(detect_bytes(&txt), Some(Format::Text));
        }
    }
}
