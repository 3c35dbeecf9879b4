//! Real I/O traces for `secmem io` (`io.trace`): fio iologs (versions 2 and 3, as
//! `fio --write_iolog` records them) and MQSim's ASCII traces.
//!
//! * **fio iolog v2**: `fio version 2 iolog`, then `FILE add|open|close` and
//!   `FILE read|write|sync|datasync|trim|wait OFFSET LENGTH` (bytes; `wait` waits OFFSET
//!   microseconds after the previous wait). I/Os arrive as fast as the queues take them,
//!   `wait`s apart.
//! * **fio iolog v3**: `fio version 3 iolog`, every line led by a timestamp in microseconds
//!   since the start of the run (no `wait`). Each I/O arrives at its timestamp.
//! * **MQSim ASCII**: `ARRIVAL_NS DEVICE START_SECTOR SECTORS TYPE` (TYPE 0 = write,
//!   1 = read; 512 B sectors), one I/O per line, arriving at its time.
//!
//! Files of an iolog (and MQSim devices) map to consecutive regions of the drive, each
//! `io.space_gib` long, in the order they are first named. `sync` and `datasync` are flushes
//! (an application's `fsync`): barriers that wait for every I/O before them, and for what the
//! stack must make durable (dm-integrity's journal commit); the drive itself has power-loss
//! protection, so a flush adds no drive work. `trim` is counted and not simulated. Every
//! malformed line is an error naming the file and line: an unknown action, I/O on a file never added or not open, an I/O past
//! its region, a length that is not a whole number of 512 B blocks, timestamps going back.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// One I/O of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRequest {
    /// When it arrives (ns from the start); `None`: as soon as a queue slot is free.
    pub arrival_ns: Option<u64>,
    pub write: bool,
    /// A flush (`sync`, `datasync`): a barrier, no data.
    pub flush: bool,
    /// Byte offset on the drive.
    pub offset: u64,
    pub bytes: u32,
}

/// A parsed I/O trace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IoTrace {
    pub requests: Vec<IoRequest>,
    /// `sync`, `datasync` and `trim` actions (counted, not simulated).
    pub flushes_and_trims: u64,
    pub format: &'static str,
}

/// Reads the I/O trace at `path`; each file (or MQSim device) gets `region_bytes` of the drive.
pub fn read(path: &Path, region_bytes: u64, drive_bytes: u64) -> Result<IoTrace, String> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    let mut lines = BufReader::new(f).lines().enumerate();
    let Some((_, first)) = lines.next() else { return Err(format!("{name}: empty I/O trace")) };
    let first = first.map_err(|e| format!("{name}:1: {e}"))?;
    let mut out = IoTrace::default();
    let mut regions: HashMap<String, (u64, bool)> = HashMap::new(); // file -> (region index, open)
    let version = match first.trim() {
        "fio version 2 iolog" => 2,
        "fio version 3 iolog" => 3,
        _ => 0,
    };
    out.format = match version {
        2 => "fio-iolog-v2",
        3 => "fio-iolog-v3",
        _ => "mqsim",
    };
    let mut clock_ns = 0u64; // v2: the sum of the waits so far
    let mut last_ns = 0u64;
    let first_line = if version == 0 { Some((0usize, Ok(first))) } else { None };
    for (i, line) in first_line.into_iter().chain(lines) {
        let at = format!("{name}:{}", i + 1);
        let line = line.map_err(|e| format!("{at}: {e}"))?;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let toks: Vec<&str> = t.split_whitespace().collect();
        let num = |s: &str, what: &str| s.parse::<u64>().map_err(|_| format!("{at}: bad {what} '{s}' (expected a whole number)"));
        let check = |offset: u64, bytes: u64, region: u64| -> Result<IoRequest, String> {
            if bytes == 0 || !bytes.is_multiple_of(512) || bytes > 1 << 24 {
                return Err(format!("{at}: length {bytes} is not a whole number of 512-byte blocks (up to 16 MiB)"));
            }
            if !offset.is_multiple_of(512) {
                return Err(format!("{at}: offset {offset} is not 512-byte aligned"));
            }
            if offset + bytes > region_bytes || (region + 1) * region_bytes > drive_bytes {
                return Err(format!("{at}: I/O at {offset} + {bytes} bytes is past the end of its {region_bytes}-byte region of the drive (io.space_gib; ssd.capacity_gib)"));
            }
            Ok(IoRequest { arrival_ns: None, write: false, flush: false, offset: region * region_bytes + offset, bytes: bytes as u32 })
        };
        if version == 0 {
            let [arrival, device, sector, sectors, kind] = toks[..] else {
                return Err(format!("{at}: expected 'ARRIVAL_NS DEVICE START_SECTOR SECTORS TYPE' (MQSim ASCII), or a fio iolog's first line"));
            };
            let arrival = num(arrival, "arrival time")?;
            if arrival < last_ns {
                return Err(format!("{at}: arrival time {arrival} ns is before the previous line's {last_ns} ns"));
            }
            last_ns = arrival;
            let n = regions.len() as u64;
            let region = regions.entry(device.to_string()).or_insert((n, true)).0;
            let write = match kind {
                "0" => true,
                "1" => false,
                k => return Err(format!("{at}: unknown request type '{k}' (0 = write, 1 = read)")),
            };
            let mut r = check(num(sector, "start sector")?.saturating_mul(512), num(sectors, "sector count")?.saturating_mul(512), region)?;
            r.write = write;
            r.arrival_ns = Some(arrival);
            out.requests.push(r);
            continue;
        }
        let (stamp, rest) = if version == 3 {
            let Some((ts, rest)) = toks.split_first() else { unreachable!("a non-empty line") };
            (Some(num(ts, "timestamp")?), rest)
        } else {
            (None, &toks[..])
        };
        if let Some(us) = stamp {
            let ns = us.saturating_mul(1000);
            if ns < last_ns {
                return Err(format!("{at}: timestamp {us} us is before the previous line's {} us", last_ns / 1000));
            }
            last_ns = ns;
        }
        let (file, action, args) = match rest {
            [file, action, args @ ..] => (*file, *action, args),
            _ => return Err(format!("{at}: expected '{}FILE ACTION [OFFSET LENGTH]'", if version == 3 { "TIMESTAMP " } else { "" })),
        };
        let want_args = |n: usize| -> Result<(), String> {
            if args.len() == n { Ok(()) } else { Err(format!("{at}: '{action}' takes {n} numbers after the file name, got {}", args.len())) }
        };
        match action {
            "add" => {
                want_args(0)?;
                let n = regions.len() as u64;
                regions.entry(file.to_string()).or_insert((n, false));
            }
            "open" | "close" => {
                want_args(0)?;
                let Some(r) = regions.get_mut(file) else { return Err(format!("{at}: {action} of '{file}', which was never added")) };
                if action == "close" && !r.1 {
                    return Err(format!("{at}: close of '{file}', which is not open"));
                }
                r.1 = action == "open";
            }
            "wait" if version == 2 => {
                want_args(2)?;
                clock_ns = clock_ns.saturating_add(num(args[0], "wait")?.saturating_mul(1000));
            }
            "read" | "write" | "sync" | "datasync" | "trim" => {
                let region = match regions.get(file) {
                    Some(&(region, true)) => region,
                    Some(_) => return Err(format!("{at}: {action} on '{file}', which is not open")),
                    None => return Err(format!("{at}: {action} on '{file}', a file it never opened")),
                };
                let arrival = stamp.map(|us| us * 1000).or((clock_ns > 0).then_some(clock_ns));
                if matches!(action, "sync" | "datasync") {
                    // fio writes these with or without an offset and length.
                    out.flushes_and_trims += 1;
                    out.requests.push(IoRequest { arrival_ns: arrival, write: false, flush: true, offset: region * region_bytes, bytes: 0 });
                    continue;
                }
                want_args(2)?;
                let r = check(num(args[0], "offset")?, num(args[1], "length")?, region)?;
                if action == "trim" {
                    out.flushes_and_trims += 1;
                    continue;
                }
                out.requests.push(IoRequest { write: action == "write", arrival_ns: arrival, ..r });
            }
            other => {
                return Err(format!(
                    "{at}: unknown action '{other}' (expected add, open, close, read, write, sync, datasync, trim{})",
                    if version == 2 { ", wait" } else { "" }
                ))
            }
        }
    }
    if out.requests.iter().all(|r| r.flush) {
        return Err(format!("{name}: no reads or writes in the I/O trace"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<IoTrace, String> {
        let p = std::env::temp_dir().join(format!("secmem-iotrace-{}-{}.log", std::process::id(), text.len()));
        std::fs::write(&p, text).unwrap();
        let r = read(&p, 1 << 30, 16 << 30);
        let _ = std::fs::remove_file(&p);
        r.map_err(|e| e.rsplit_once(".log").map_or(e.clone(), |(_, rest)| rest.to_string()))
    }

    #[test]
    fn a_fio_v3_iolog_as_fio_writes_it_becomes_timed_reads_and_writes() {
        let t = parse("fio version 3 iolog\n19 /tmp/fio.dat add\n240 /tmp/fio.dat open\n245 /tmp/fio.dat read 61440 4096\n798 /tmp/fio.dat write 491520 4096\n900 /tmp/fio.dat close\n").unwrap();
        assert_eq!(t.format, "fio-iolog-v3");
        assert_eq!(
            t.requests,
            vec![
                IoRequest { arrival_ns: Some(245_000), write: false, flush: false, offset: 61440, bytes: 4096 },
                IoRequest { arrival_ns: Some(798_000), write: true, flush: false, offset: 491520, bytes: 4096 },
            ]
        );
    }

    #[test]
    fn v2_waits_space_the_ios_and_files_get_their_own_regions() {
        let t = parse("fio version 2 iolog\n/a add\n/b add\n/a open\n/b open\n/a read 0 4096\n/b wait 500 0\n/b write 512 1024\n/a sync 0 0\n").unwrap();
        assert_eq!(t.requests[0], IoRequest { arrival_ns: None, write: false, flush: false, offset: 0, bytes: 4096 });
        assert_eq!(t.requests[1], IoRequest { arrival_ns: Some(500_000), write: true, flush: false, offset: (1 << 30) + 512, bytes: 1024 });
        assert_eq!(t.flushes_and_trims, 1);
        // The sync is a barrier request at its file's region, carrying no data.
        assert_eq!(t.requests[2], IoRequest { arrival_ns: Some(500_000), write: false, flush: true, offset: 0, bytes: 0 });
    }

    #[test]
    fn an_mqsim_trace_is_sectors_and_nanoseconds() {
        let t = parse("0 0 8 8 1\n1500 0 16 16 0\n").unwrap();
        assert_eq!(t.format, "mqsim");
        assert_eq!(t.requests[1], IoRequest { arrival_ns: Some(1500), write: true, flush: false, offset: 8192, bytes: 8192 });
    }

    #[test]
    fn bad_lines_name_the_line_and_the_problem() {
        let v2 = "fio version 2 iolog\n/a add\n/a open\n";
        for (text, want) in [
            (format!("{v2}/a frobnicate 0 4096\n"), ":4: unknown action 'frobnicate'"),
            (format!("{v2}/b read 0 4096\n"), ":4: read on '/b', a file it never opened"),
            ("fio version 2 iolog\n/a add\n/a read 0 4096\n".into(), ":3: read on '/a', which is not open"),
            (format!("{v2}/a read 0 1000\n"), ":4: length 1000 is not a whole number of 512-byte blocks"),
            (format!("{v2}/a read 1073741312 4096\n"), ":4: I/O at 1073741312 + 4096 bytes is past the end"),
            ("fio version 3 iolog\n5 /a add\n6 /a open\n4 /a read 0 512\n".into(), ":4: timestamp 4 us is before the previous line's 6 us"),
            ("0 0 8 8 2\n".into(), ":1: unknown request type '2'"),
            ("0 0 8\n".into(), ":1: expected 'ARRIVAL_NS DEVICE START_SECTOR SECTORS TYPE'"),
            (v2.to_string(), "no reads or writes"),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
