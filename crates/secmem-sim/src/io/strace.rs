//! I/O traces of real programs: their `pread64`, `pwrite64`, `fsync` and `fdatasync` calls as
//! `strace` records them (`strace -f -ttt -y -s 0 -e trace=pread64,pwrite64,fsync,fdatasync`),
//! written as a fio iolog (version 3) that `io.trace` replays. An `fsync` becomes a `sync`
//! action and an `fdatasync` a `datasync` on the file it names: the replay's barriers.
//!
//! Each call becomes one I/O at its time (microseconds from the first call), on the file it
//! names (`-y` prints the path behind each descriptor; each file gets its own region of the
//! drive on replay), with the bytes the call returned. Offsets and lengths are rounded out to
//! whole 512 B sectors, what a block device transfers. These are the application's requests:
//! the page cache between them and the drive is not modelled (as with `O_DIRECT`). Failed and
//! empty calls are left out; calls an interrupted thread resumes are joined. White space in a
//! file's name becomes `_` (the iolog separates its fields with white space).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::Command;

/// What a call does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Sync,
    Datasync,
}

/// One call, as recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub time_s: f64,
    pub op: Op,
    pub file: String,
    pub offset: u64,
    pub bytes: u64,
}

/// What a capture recorded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Captured {
    pub reads: u64,
    pub writes: u64,
    /// `fsync` and `fdatasync` calls.
    pub syncs: u64,
    pub files: u64,
    /// Calls left out: failed, empty, or on a descriptor `strace` could not name.
    pub skipped: u64,
}

/// Parses `strace -f -ttt -y -s 0` output (with or without the pid column); an error names the
/// line it cannot read.
pub fn parse(text: impl BufRead) -> Result<(Vec<Call>, u64), String> {
    let mut calls = Vec::new();
    let mut skipped = 0u64;
    // An unfinished call's first half, by pid.
    let mut pending: HashMap<String, String> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", i + 1))?;
        // strace pads the pid column to five characters.
        let (pid, rest) = match line.split_once(' ') {
            Some((p, r)) if p.bytes().all(|b| b.is_ascii_digit()) => (p.to_string(), r.trim_start()),
            _ => (String::new(), line.as_str()),
        };
        let Some((time, call)) = rest.split_once(' ') else { continue };
        let Ok(time_s) = time.parse::<f64>() else { continue };
        let call = if let Some(head) = call.strip_suffix(" <unfinished ...>") {
            pending.insert(pid, head.to_string());
            continue;
        } else if let Some(tail) = call.strip_prefix("<... ") {
            let Some(head) = pending.remove(&pid) else { continue };
            let Some((_, tail)) = tail.split_once(" resumed>") else { return Err(format!("line {}: a resumed call without 'resumed>'", i + 1)) };
            format!("{head}{tail}")
        } else {
            call.to_string()
        };
        let op = if call.starts_with("pwrite64(") {
            Op::Write
        } else if call.starts_with("pread64(") {
            Op::Read
        } else if call.starts_with("fsync(") {
            Op::Sync
        } else if call.starts_with("fdatasync(") {
            Op::Datasync
        } else {
            continue; // signals, exits and other calls
        };
        let c = parse_call(&call, op, time_s).map_err(|e| format!("line {}: {e}: {}", i + 1, line))?;
        match c {
            Some(c) => calls.push(c),
            None => skipped += 1,
        }
    }
    Ok((calls, skipped))
}

/// `pread64(3</path>, ""..., 4096, 8192) = 4096` or `fsync(3</path>) = 0`: the call, or None
/// when it moved nothing or failed.
fn parse_call(call: &str, op: Op, time_s: f64) -> Result<Option<Call>, String> {
    let args = &call[call.find('(').expect("starts with the name and '('") + 1..];
    let (args, ret) = args.rsplit_once(") = ").ok_or("no result")?;
    let ret: i64 = ret.split_whitespace().next().and_then(|r| r.parse().ok()).ok_or("a result that is not a number")?;
    if matches!(op, Op::Sync | Op::Datasync) {
        let file = match (args.find('<'), args.rfind('>')) {
            (Some(a), Some(b)) if a < b && ret == 0 => args[a + 1..b].to_string(),
            _ => return Ok(None), // failed, or a descriptor strace could not name
        };
        return Ok(Some(Call { time_s, op, file, offset: 0, bytes: 0 }));
    }
    let file = match (args.find('<'), args.find(">,")) {
        (Some(a), Some(b)) if a < b => args[a + 1..b].to_string(),
        _ => return Ok(None), // a descriptor strace could not name
    };
    let mut tail = args.rsplitn(3, ", ");
    let offset: u64 = tail.next().and_then(|o| o.trim().parse().ok()).ok_or("an offset that is not a number")?;
    if ret <= 0 {
        return Ok(None);
    }
    Ok(Some(Call { time_s, op, file, offset, bytes: ret as u64 }))
}

/// Writes `calls` as a fio iolog v3 (sector-aligned); how many files it names.
pub fn write_iolog(calls: &[Call], out: &mut impl Write) -> std::io::Result<u64> {
    writeln!(out, "fio version 3 iolog")?;
    let t0 = calls.iter().map(|c| c.time_s).fold(f64::INFINITY, f64::min);
    let mut files: BTreeMap<String, ()> = BTreeMap::new();
    for c in calls {
        let us = ((c.time_s - t0) * 1e6).round() as u64;
        // The iolog's fields are separated by white space.
        let file = c.file.replace(char::is_whitespace, "_");
        if files.insert(file.clone(), ()).is_none() {
            writeln!(out, "{us} {file} add")?;
            writeln!(out, "{us} {file} open")?;
        }
        let start = c.offset / 512 * 512;
        let end = (c.offset + c.bytes).div_ceil(512) * 512;
        match c.op {
            Op::Read => writeln!(out, "{us} {file} read {start} {}", end - start)?,
            Op::Write => writeln!(out, "{us} {file} write {start} {}", end - start)?,
            Op::Sync => writeln!(out, "{us} {file} sync 0 0")?,
            Op::Datasync => writeln!(out, "{us} {file} datasync 0 0")?,
        }
    }
    Ok(files.len() as u64)
}

/// Runs `command` under `strace` and writes its pread64/pwrite64/fsync/fdatasync calls to
/// `out` as a fio iolog (v3).
pub fn capture(command: &[String], out: &Path) -> Result<Captured, String> {
    let Some((prog, args)) = command.split_first() else { return Err("no command to run".into()) };
    let log = out.with_extension("strace");
    let status = Command::new("strace")
        .args(["-f", "-ttt", "-y", "-s", "0", "-e", "trace=pread64,pwrite64,fsync,fdatasync", "-e", "signal=none", "-o"])
        .arg(&log)
        .arg("--")
        .arg(prog)
        .args(args)
        .status()
        .map_err(|e| format!("cannot run strace (install it: apt-get install strace): {e}"))?;
    if !status.success() {
        let _ = std::fs::remove_file(&log);
        return Err(format!("'{}' under strace exited with {status}", command.join(" ")));
    }
    let text = std::fs::File::open(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let parsed = parse(std::io::BufReader::new(text));
    let _ = std::fs::remove_file(&log);
    let (calls, skipped) = parsed?;
    let mut f = std::io::BufWriter::new(std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?);
    let files = write_iolog(&calls, &mut f).and_then(|n| f.flush().map(|_| n)).map_err(|e| format!("{}: {e}", out.display()))?;
    let count = |op| calls.iter().filter(|c| c.op == op).count() as u64;
    Ok(Captured { reads: count(Op::Read), writes: count(Op::Write), syncs: count(Op::Sync) + count(Op::Datasync), files, skipped })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_lines_become_sector_aligned_iolog_ios_per_file() {
        let log = "\
4242  1700000000.000100 pread64(3</tmp/a.db>, \"\"..., 100, 0) = 100
4242 1700000000.000300 pwrite64(3</tmp/a.db>, \"\"..., 4096, 8192) = 4096
4243 1700000000.000400 pread64(5</tmp/b.wal>, <unfinished ...>
4242 1700000000.000450 pread64(3</tmp/a.db>, \"\"..., 4096, 1048576) = 0
4243 1700000000.000500 <... pread64 resumed>\"\"..., 1024, 512) = 1024
4242 1700000000.000600 pread64(7, \"\"..., 512, 0) = 512
4242 1700000000.000700 pread64(3</tmp/a.db>, 0x7ffd, 4096, 4096) = -1 EBADF (Bad file descriptor)
4242 1700000000.000750 fsync(3</tmp/a.db>) = 0
4242 1700000000.000760 fdatasync(9) = 0
4242 1700000000.000800 +++ exited with 0 +++
";
        let (calls, skipped) = parse(log.as_bytes()).unwrap();
        assert_eq!(calls.len(), 4);
        assert_eq!(skipped, 4, "an empty read, an unnamed descriptor, a failed call, an unnamed fdatasync");
        assert_eq!(calls[2], Call { time_s: 1700000000.0005, op: Op::Read, file: "/tmp/b.wal".into(), offset: 512, bytes: 1024 });
        assert_eq!(calls[3], Call { time_s: 1700000000.00075, op: Op::Sync, file: "/tmp/a.db".into(), offset: 0, bytes: 0 });
        let mut out = Vec::new();
        assert_eq!(write_iolog(&calls, &mut out).unwrap(), 2);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "fio version 3 iolog\n0 /tmp/a.db add\n0 /tmp/a.db open\n0 /tmp/a.db read 0 512\n200 /tmp/a.db write 8192 4096\n\
             400 /tmp/b.wal add\n400 /tmp/b.wal open\n400 /tmp/b.wal read 512 1024\n650 /tmp/a.db sync 0 0\n"
        );
        // The iolog reader takes it back.
        let p = std::env::temp_dir().join(format!("secmem-strace-{}.iolog", std::process::id()));
        std::fs::write(&p, &text).unwrap();
        let t = super::super::trace::read(&p, 1 << 30, 16 << 30).unwrap();
        let _ = std::fs::remove_file(&p);
        assert_eq!(t.requests.len(), 4);
        assert!(t.requests[3].flush);
        assert_eq!((t.requests[2].offset, t.requests[2].bytes), ((1 << 30) + 512, 1024), "the second file's region");
    }

    #[test]
    fn a_call_it_cannot_read_is_an_error_naming_the_line() {
        let e = parse("1 1700000000.1 pread64(3</x>, \"\"..., 4096, zz) = 4096\n".as_bytes()).unwrap_err();
        assert!(e.starts_with("line 1: an offset"), "{e}");
    }

    #[test]
    fn sqlite_under_strace_writes_and_reads_its_database_file() {
        if Command::new("strace").arg("-V").output().is_err() || Command::new("sqlite3").arg("-version").output().is_err() {
            panic!("this test needs strace and sqlite3 (apt-get install strace sqlite3)");
        }
        let dir = std::env::temp_dir().join(format!("secmem-strace-sqlite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("bank.db");
        let sql = "create table t(k integer primary key, v blob); \
                   with recursive n(i) as (select 1 union all select i + 1 from n where i < 2000) insert into t select i, randomblob(200) from n; \
                   select count(*), sum(length(v)) from t where k % 7 = 0;";
        let out = dir.join("sqlite.iolog");
        let cmd: Vec<String> = ["sqlite3", db.to_str().unwrap(), sql].iter().map(|s| s.to_string()).collect();
        let c = capture(&cmd, &out).unwrap();
        assert!(c.writes > 10 && c.files >= 1, "{c:?}");
        let t = super::super::trace::read(&out, 1 << 30, 16 << 30).unwrap();
        assert_eq!(t.requests.len() as u64, c.reads + c.writes + c.syncs);
        assert!(c.syncs > 0, "sqlite syncs its journal and database: {c:?}");
        assert!(t.requests.iter().all(|r| r.bytes % 512 == 0 && r.offset % 512 == 0));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
