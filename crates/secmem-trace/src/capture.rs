//! Capturing the data a running program writes, beside its loads and stores (Linux).
//!
//! [`capture_lackey_data`] reads lackey's output as [`crate::capture_lackey`] does, and
//! attaches to every store the 64 B line it wrote, read from the program's own memory.
//! Valgrind runs the program in its own process at the program's own addresses, so
//! `/proc/PID/mem` of the valgrind process holds the program's lines at the addresses lackey
//! prints.
//!
//! **Time resolution.** Records are gathered in intervals of `interval_records`. At the end
//! of an interval the program is paused (`SIGSTOP`), the lackey text already in the pipe is
//! read, every line stored to in the interval is read from the program's memory, and the
//! program resumes (`SIGCONT`). A store's payload is therefore its line as the program left
//! it at the first pause after the store: several stores to one line within an interval all
//! carry the line's content at the pause. (A write-back to memory, which is what a secure
//! memory controller sees, happens later still, when the cache evicts the line.)
//!
//! **What it misses.** Stores whose line could not be read — the page was unmapped before
//! the pause, or the stores came after the last pause as the program exited — are written
//! without a payload and counted in [`DataCapture::writes_without_data`] (functional mode
//! then writes its synthetic content for them). A store that spans two lines becomes two
//! records, one per line, so every payload is exactly the line its record touches.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{ErrorKind, Position, TraceError};
use crate::event::{Event, TraceKind};
use crate::foreign::{parse_significant, Lackey, Parsed};
use crate::{write_events, CaptureWindow, Format, Op, Record};

/// What a data capture produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataCapture {
    pub records: u64,
    pub writes: u64,
    /// Writes that carry their line.
    pub writes_with_data: u64,
    /// Writes whose line could not be read (see the module docs).
    pub writes_without_data: u64,
    /// Times the program was paused to read its memory.
    pub pauses: u64,
}

/// Default records per interval between two reads of the program's memory.
pub const DEFAULT_INTERVAL_RECORDS: u64 = 1 << 16;

/// The program being captured: its process, and its memory.
struct Program {
    pid: i32,
}

impl Program {
    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) with a pid we started; an error (the program has exited) is fine.
        unsafe {
            libc::kill(self.pid, sig);
        }
    }

    /// Whether every thread of the program is stopped (or the program is gone).
    fn all_stopped(&self) -> bool {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return true;
        };
        tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat")).map_or(true, |stat| {
                // The state follows the ")" that closes the command name.
                let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
                matches!(state, Some('T' | 't' | 'Z' | 'X') | None)
            })
        })
    }

    /// Stops the program and waits until it is stopped (at most a second, then goes on: the
    /// lines read are then from a moment slightly later, which the time resolution allows).
    fn pause(&self) {
        self.signal(libc::SIGSTOP);
        let start = Instant::now();
        while !self.all_stopped() && start.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Reads the lines in `lines` (sorted, deduplicated line numbers) into `out`, a page span
    /// at a time; lines that cannot be read are left out.
    fn read_lines(&self, lines: &[u64], out: &mut HashMap<u64, [u8; 64]>) {
        // Opened afresh at each pause: the `valgrind` launcher execs the tool, and a handle
        // opened before an exec reads the old, gone address space.
        if lines.is_empty() {
            return;
        }
        let Ok(mem) = File::open(format!("/proc/{}/mem", self.pid)) else { return };
        let mut buf = vec![0u8; 4096];
        let mut i = 0;
        while i < lines.len() {
            // Lines of one 4 KB page are read with one pread, from the first to the last needed.
            let page = lines[i] >> 6;
            let mut j = i;
            while j + 1 < lines.len() && lines[j + 1] >> 6 == page {
                j += 1;
            }
            let (first, last) = (lines[i], lines[j]);
            let len = ((last - first + 1) * 64) as usize;
            if mem.read_exact_at(&mut buf[..len], first << 6).is_ok() {
                for &l in &lines[i..=j] {
                    let off = ((l - first) * 64) as usize;
                    out.insert(l, buf[off..off + 64].try_into().expect("64 bytes"));
                }
            } else {
                // Part of the span may be unmapped: try each line alone.
                for &l in &lines[i..=j] {
                    let mut line = [0u8; 64];
                    if mem.read_exact_at(&mut line, l << 6).is_ok() {
                        out.insert(l, line);
                    }
                }
            }
            i = j + 1;
        }
    }
}

/// The bytes in the pipe `fd`, not yet read (FIONREAD).
fn pipe_bytes(fd: i32) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer we pass.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n as *mut libc::c_int) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n.max(0) as usize)
    }
}

/// Lackey text split into lines and parsed, keeping an unfinished last line for later.
struct LackeyLines {
    name: String,
    dialect: Lackey,
    partial: Vec<u8>,
    line_no: u64,
}

impl LackeyLines {
    /// Parses the complete lines of `bytes` (after what was left over), appending records.
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Record>) -> Result<(), TraceError> {
        self.partial.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(nl) = self.partial[start..].iter().position(|&b| b == b'\n') {
            let end = start + nl;
            self.line_no += 1;
            let line = &self.partial[start..end];
            start = end + 1;
            let t = std::str::from_utf8(line)
                .map_err(|_| TraceError::at_line(self.name.clone(), self.line_no, ErrorKind::Syntax, "line is not valid UTF-8"))?;
            match parse_significant(&mut self.dialect, t) {
                Ok(Parsed::Nothing) => {}
                Ok(Parsed::One(r)) => split_into_lines(r, out),
                Ok(Parsed::Two(a, b)) => {
                    split_into_lines(a, out);
                    split_into_lines(b, out);
                }
                Err((kind, msg)) => return Err(TraceError::at_line(self.name.clone(), self.line_no, kind, msg)),
            }
        }
        self.partial.drain(..start);
        if self.partial.len() > crate::lines::MAX_LINE {
            return Err(TraceError::at_line(self.name.clone(), self.line_no + 1, ErrorKind::Syntax, format!("line is longer than {} bytes", crate::lines::MAX_LINE)));
        }
        Ok(())
    }
}

/// Appends `r`, a store spanning two lines split into one record per line (the second with
/// no instruction gap); loads stay whole, as the simulator splits them itself.
fn split_into_lines(r: Record, out: &mut Vec<Record>) {
    let end = r.addr.saturating_add(u64::from(r.size_bytes.max(1)) - 1);
    if r.op != Op::Write || r.addr >> 6 == end >> 6 {
        out.push(r);
        return;
    }
    let mut addr = r.addr;
    let mut gap = r.inst_gap;
    while addr <= end {
        let line_end = (addr | 63).min(end);
        out.push(Record { op: Op::Write, addr, size_bytes: (line_end - addr + 1) as u16, inst_gap: gap, data: None });
        gap = 0;
        match line_end.checked_add(1) {
            Some(a) => addr = a,
            None => break,
        }
    }
}

/// The records of a data capture, an interval at a time (see [`capture_lackey_data`]).
struct Intervals {
    pipe: File,
    program: Program,
    lines: LackeyLines,
    limit: u64,
    /// Records still to drop before the window starts.
    skip: u64,
    interval_records: u64,
    stats: DataCapture,
    pending: Vec<Record>,
    ready: std::vec::IntoIter<Record>,
    chunk: Vec<u8>,
    contents: HashMap<u64, [u8; 64]>,
    wanted: Vec<u64>,
    done: bool,
}

impl Intervals {
    fn io_err(&self, e: io::Error) -> TraceError {
        TraceError::io(self.lines.name.clone(), Position::Line(self.lines.line_no + 1), e)
    }

    /// Parses the first `n` bytes of `chunk` into pending records, dropping those still
    /// before the window.
    fn take_in(&mut self, n: usize) -> Result<(), TraceError> {
        self.lines.feed(&self.chunk[..n], &mut self.pending)?;
        let drop = (self.pending.len() as u64).min(self.skip);
        self.pending.drain(..drop as usize);
        self.skip -= drop;
        Ok(())
    }

    /// Reads lackey text until an interval is complete (or the output ends), pauses the
    /// program, gives the interval's stores their lines, and makes the records ready.
    fn next_interval(&mut self) -> Result<(), TraceError> {
        let at_end = loop {
            let n = match self.pipe.read(&mut self.chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_err(e)),
            };
            if n == 0 {
                if !self.lines.partial.is_empty() {
                    self.lines.feed(b"\n", &mut self.pending)?; // a last line without its newline
                }
                break true;
            }
            self.take_in(n)?;
            let have = self.pending.len() as u64;
            if have >= self.interval_records || self.stats.records + have >= self.limit {
                break false;
            }
        };
        if !at_end {
            // Everything lackey has written so far happened before the pause: read it too.
            self.program.pause();
            self.stats.pauses += 1;
            let mut left = pipe_bytes(self.pipe.as_raw_fd()).map_err(|e| self.io_err(e))?;
            while left > 0 {
                let k = left.min(self.chunk.len());
                if let Err(e) = self.pipe.read_exact(&mut self.chunk[..k]) {
                    return Err(self.io_err(e));
                }
                self.take_in(k)?;
                left -= k;
            }
        }
        let take = (self.pending.len() as u64).min(self.limit - self.stats.records) as usize;
        self.pending.truncate(take);
        self.wanted.clear();
        self.wanted.extend(self.pending.iter().filter(|r| r.op == Op::Write).map(|r| r.addr >> 6));
        self.wanted.sort_unstable();
        self.wanted.dedup();
        self.contents.clear();
        self.program.read_lines(&self.wanted, &mut self.contents);
        self.stats.records += take as u64;
        let stopped_for_good = self.stats.records >= self.limit;
        if !at_end && !stopped_for_good {
            self.program.resume();
        }
        for r in self.pending.iter_mut().filter(|r| r.op == Op::Write) {
            self.stats.writes += 1;
            r.data = self.contents.get(&(r.addr >> 6)).copied();
            if r.data.is_some() {
                self.stats.writes_with_data += 1;
            } else {
                self.stats.writes_without_data += 1;
            }
        }
        self.ready = std::mem::take(&mut self.pending).into_iter();
        self.done = at_end || stopped_for_good;
        Ok(())
    }
}

impl Iterator for &mut Intervals {
    type Item = Result<Event, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.ready.next() {
                return Some(Ok(Event::Phys(r)));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.next_interval() {
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}

/// Converts the lackey output of the running valgrind process `pid` (read from `pipe`, the
/// read end of its `--log-fd`) into a binary trace at `output`, marked virtual, whose writes
/// carry the lines the program wrote (see the module docs), keeping the records of `window`.
/// Records are gathered `interval_records` at a time between two reads of the program's
/// memory. At the end of the window the program is left stopped: the caller ends it.
/// `progress(records)` is called after every interval. On an error the output is not written.
pub fn capture_lackey_data(
    pipe: File,
    pid: i32,
    name: String,
    output: &Path,
    window: CaptureWindow,
    interval_records: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<DataCapture, TraceError> {
    if interval_records == 0 {
        return Err(TraceError::whole_file(name, ErrorKind::Format, "the data capture interval must be at least 1 record"));
    }
    let mem_path = format!("/proc/{pid}/mem");
    File::open(&mem_path).map_err(|e| {
        TraceError::whole_file(
            name.clone(),
            ErrorKind::Io,
            format!("cannot read the program's memory at {mem_path} ({e}): the data capture reads the memory of the valgrind process it started"),
        )
    })?;
    let mut it = Intervals {
        pipe,
        program: Program { pid },
        lines: LackeyLines { name, dialect: Lackey::default(), partial: Vec::new(), line_no: 0 },
        limit: window.max.unwrap_or(u64::MAX),
        skip: window.skip,
        interval_records,
        stats: DataCapture::default(),
        pending: Vec::new(),
        ready: Vec::new().into_iter(),
        chunk: vec![0u8; 1 << 20],
        contents: HashMap::new(),
        wanted: Vec::new(),
        done: false,
    };
    let mut last_shown = 0;
    let events = std::iter::from_fn(|| {
        let e = (&mut it).next();
        if it.stats.records >= last_shown + (1 << 20) {
            last_shown = it.stats.records;
            progress(last_shown);
        }
        e
    });
    write_events(output, Format::Binary, TraceKind::V1.with_virtual_addresses(true), events)?;
    Ok(it.stats)
}
