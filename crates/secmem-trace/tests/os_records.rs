//! Format version 2: OS-level records in the binary and text forms (docs/trace-format.md).

use proptest::prelude::*;
use secmem_trace::binary::{BinaryReader, BinaryWriter};
use secmem_trace::event::MAX_PID;
use secmem_trace::text::{TextReader, TextWriter};
use secmem_trace::*;
use std::path::PathBuf;

fn data(seed: u8) -> [u8; 64] {
    std::array::from_fn(|i| seed.wrapping_mul(29).wrapping_add(i as u8))
}

/// One record of every kind.
fn every_kind() -> Vec<Event> {
    vec![
        Event::Alloc { pid: 0, vaddr: 1 << 40, length: 8192, page: PageSize::Small },
        Event::Alloc { pid: 0, vaddr: 1 << 41, length: 2 << 20, page: PageSize::Huge },
        Event::Store { pid: 0, vaddr: 1 << 40, size_bytes: 64, inst_gap: 10, data: None },
        Event::Store { pid: 0, vaddr: (1 << 40) + 64, size_bytes: 64, inst_gap: 0, data: Some(data(3)) },
        Event::WbNoInvd,
        Event::Fork { parent: 0, child: MAX_PID },
        Event::RoiBegin,
        Event::Load { pid: MAX_PID, vaddr: (1 << 40) + 8, size_bytes: 8, inst_gap: u32::MAX },
        Event::Phys(Record::read(0x1000, 3)),
        Event::Phys(Record::write_data(0x1040, 0, data(9))),
        Event::Phys(Record::fence(2)),
        Event::Phys(Record::flush(0x1040, 0)),
        Event::Free { pid: MAX_PID, vaddr: 1 << 40, length: 4096 },
        Event::Exit { pid: MAX_PID },
    ]
}

fn bin(events: &[Event]) -> Vec<u8> {
    let mut w = BinaryWriter::with_kind(Vec::new(), "t.bin", true, TraceKind::V2_OS).unwrap();
    for e in events {
        w.write_event(e).unwrap();
    }
    w.finish().unwrap()
}

fn txt(events: &[Event]) -> String {
    let mut w = TextWriter::with_kind(Vec::new(), "t.txt", TraceKind::V2_OS).unwrap();
    for e in events {
        w.write_event(e).unwrap();
    }
    String::from_utf8(w.finish().unwrap()).unwrap()
}

fn read_bin(bytes: &[u8]) -> Result<Vec<Event>, TraceError> {
    BinaryReader::with_name(bytes, "t.bin")?.events().collect()
}

fn read_txt(s: &str) -> Result<Vec<Event>, TraceError> {
    TextReader::with_name(s.as_bytes(), "t.txt")?.events().collect()
}

#[test]
fn every_os_record_round_trips_through_binary_and_text() {
    let evs = every_kind();
    assert_eq!(read_bin(&bin(&evs)).unwrap(), evs);
    assert_eq!(read_txt(&txt(&evs)).unwrap(), evs);
}

#[test]
fn binary_v2_layout_is_as_documented() {
    let bytes = bin(&[
        Event::Fork { parent: 1, child: 2 },
        Event::Alloc { pid: 3, vaddr: 0x0102030405060708, length: 0x200000, page: PageSize::Huge },
        Event::RoiBegin,
    ]);
    // Header: version 2, flags = data (bit 0) | OS-level (bit 1) | compact payloads (bit 3).
    assert_eq!(&bytes[..16], b"SECMTRC\0\x02\x00\x0b\x00\x00\x00\x00\x00");
    // FORK: op 12, 32 bytes, parent at 16, child at 20.
    assert_eq!(&bytes[16..48], &[12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    // ALLOC: op 10, page shift 21 in the size field, vaddr at 8, pid at 16, length at 24.
    assert_eq!(&bytes[48..80], &[10, 0, 21, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0]);
    // ROI: op 5, a 16-byte record of zeros.
    assert_eq!(&bytes[80..], &[5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn text_v2_lines_are_as_documented() {
    let t = txt(&[
        Event::Alloc { pid: 0, vaddr: 0x10000000000, length: 16384, page: PageSize::Small },
        Event::Store { pid: 0, vaddr: 0x10000000040, size_bytes: 64, inst_gap: 10, data: None },
        Event::WbNoInvd,
        Event::Fork { parent: 0, child: 1 },
        Event::RoiBegin,
        Event::Load { pid: 1, vaddr: 0x10000000040, size_bytes: 64, inst_gap: 10 },
        Event::Phys(Record::fence(0)),
        Event::Free { pid: 1, vaddr: 0x10000000000, length: 4096 },
        Event::Exit { pid: 1 },
    ]);
    assert_eq!(
        t,
        "# secmem-trace v2 os\nALLOC 0 0x10000000000 16384 4k\nST 0 0x10000000040 64 10\nWBNOINVD\n\
         FORK 0 1\nROI\nLD 1 0x10000000040 64 10\nF 0x0 0 0\nFREE 1 0x10000000000 4096\nEXIT 1\n"
    );
}

#[test]
fn version_1_files_still_read_unchanged_and_physical_writers_still_write_v1() {
    let v1 = "# secmem-trace v1\nR 0x1000 64 3\nFL 0x40 64 0\n";
    let want = vec![Record::read(0x1000, 3), Record::flush(0x40, 0)];
    let recs: Vec<Record> = TextReader::new(v1.as_bytes()).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(recs, want);
    let evs = read_txt(v1).unwrap();
    assert_eq!(evs, want.iter().cloned().map(Event::Phys).collect::<Vec<_>>());
    let mut w = BinaryWriter::new(Vec::new()).unwrap();
    w.write(&want[0]).unwrap();
    let b = w.finish().unwrap();
    assert_eq!(&b[8..10], &[1, 0], "physical writer keeps version 1");
    assert_eq!(read_bin(&b).unwrap(), vec![Event::Phys(want[0].clone())]);
}

#[test]
fn os_records_are_refused_in_v1_and_in_non_os_v2_traces() {
    // Text v1: the new mnemonics are unknown operations.
    let e = read_txt("# secmem-trace v1\nFORK 0 1\n").unwrap_err();
    assert_eq!(e.to_string(), "t.txt:2: unknown operation 'FORK' (expected R, W, F, FL)");
    // Text v2 without `os`.
    let e = read_txt("# secmem-trace v2\nR 0x0 64 0\nEXIT 3\n").unwrap_err();
    assert_eq!((e.kind(), e.line()), (ErrorKind::InvalidRecord, Some(3)));
    assert!(e.message().contains("header is not '# secmem-trace v2 os'"), "{e}");
    // Binary v1: op 12 is unknown.
    let mut b = bin(&[Event::Fork { parent: 0, child: 1 }]);
    b[8] = 1;
    b[10] = 1;
    let e = read_bin(&b).unwrap_err();
    assert_eq!((e.kind(), e.offset()), (ErrorKind::UnknownOp, Some(16)));
    assert!(e.message().ends_with("(expected 0=Read, 1=Write, 2=Fence, 3=Flush)"), "{e}");
    // Binary v2 without the OS flag.
    b[8] = 2;
    let e = read_bin(&b).unwrap_err();
    assert_eq!((e.kind(), e.offset()), (ErrorKind::InvalidRecord, Some(16)));
    assert!(e.message().contains("header flag bit 1"), "{e}");
    // Writers refuse too.
    let mut w = TextWriter::with_kind(Vec::new(), "t.txt", TraceKind::V2).unwrap();
    assert_eq!(w.write_event(&Event::RoiBegin).unwrap_err().kind(), ErrorKind::InvalidRecord);
    let mut w = BinaryWriter::new(Vec::new()).unwrap();
    assert_eq!(w.write_event(&Event::RoiBegin).unwrap_err().kind(), ErrorKind::InvalidRecord);
}

#[test]
fn the_record_iterator_names_the_os_record_it_cannot_yield() {
    let b = bin(&[Event::Phys(Record::read(0, 0)), Event::Exit { pid: 1 }]);
    let mut r = BinaryReader::with_name(&b[..], "t.bin").unwrap();
    assert!(r.next().unwrap().is_ok());
    let e = r.next().unwrap().unwrap_err();
    assert_eq!(e.offset(), Some(32));
    assert!(e.message().starts_with("EXIT record in a physical-record stream"), "{e}");
    let e = TextReader::with_name("# secmem-trace v2 os\nROI\n".as_bytes(), "t.txt")
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err();
    assert_eq!(e.line(), Some(2));
}

#[test]
fn malformed_text_os_records_name_the_line_and_field() {
    let ld_data = format!("LD 1 0x40 64 0 {}", "0".repeat(128));
    let cases: [(&str, ErrorKind, &str); 14] = [
        ("SPAWN 1", ErrorKind::UnknownOp, "unknown operation 'SPAWN' (expected R, W, F, FL, WBNOINVD, ROI, LD, ST, ALLOC, FREE, FORK, EXIT, IOR, IOW)"),
        ("LD", ErrorKind::Syntax, "missing pid after 'LD'"),
        ("LD 1 0x40 64", ErrorKind::Syntax, "missing instruction gap after '64'"),
        ("ALLOC 0 0x1000 4096", ErrorKind::Syntax, "missing page size after '4096'"),
        ("ALLOC 0 0x1000 4096 3k", ErrorKind::Syntax, "bad page size '3k' (expected 4k or 2m)"),
        ("ALLOC 0 0x1000 4096 4K", ErrorKind::Syntax, "bad page size '4K' (expected 4k or 2m)"),
        ("FORK 0 4194304", ErrorKind::InvalidRecord, "child pid 4194304 out of range (0..=4194303)"),
        ("EXIT 99999999999999999999", ErrorKind::Syntax, "bad pid '99999999999999999999' (expected decimal 0..=4194303)"),
        ("EXIT -1", ErrorKind::Syntax, "bad pid '-1'"),
        ("FREE 1 0xzz 4096", ErrorKind::Syntax, "bad address '0xzz'"),
        ("ST 1 0x40 65536 0", ErrorKind::Syntax, "bad size '65536' (expected decimal 0..=65535)"),
        ("EXIT 1 2", ErrorKind::Syntax, "unexpected extra field '2'"),
        ("ROI now", ErrorKind::Syntax, "unexpected extra field 'now'"),
        (&ld_data, ErrorKind::Syntax, "data on a LD record (only ST records carry data)"),
    ];
    for (line, kind, want) in cases {
        let e = read_txt(&format!("# secmem-trace v2 os\n# comment\nROI\n{line}\n")).unwrap_err();
        assert_eq!(e.line(), Some(4), "{line}");
        assert_eq!(e.kind(), kind, "{line}: {e}");
        assert!(e.message().starts_with(want), "{line}: got '{e}'");
    }
}

#[test]
fn malformed_binary_os_records_name_the_offset() {
    let base = bin(&[Event::RoiBegin, Event::Alloc { pid: 1, vaddr: 0x1000, length: 4096, page: PageSize::Small }]);
    let alloc = 32usize; // 16 header + 16 ROI
    let mutate = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = base.clone();
        f(&mut b);
        read_bin(&b).unwrap_err()
    };
    // Unknown op (6 is unassigned in v2).
    let e = mutate(&|b| b[alloc] = 6);
    assert_eq!((e.kind(), e.offset()), (ErrorKind::UnknownOp, Some(32)));
    // Bad page size.
    let e = mutate(&|b| b[alloc + 2] = 13);
    assert_eq!((e.kind(), e.offset()), (ErrorKind::InvalidRecord, Some(34)));
    assert_eq!(e.message(), "bad page size: shift 13 (expected 12 = 4 KB or 21 = 2 MB)");
    // Pid out of range.
    let e = mutate(&|b| b[alloc + 16..alloc + 20].copy_from_slice(&(MAX_PID + 1).to_le_bytes()));
    assert_eq!((e.kind(), e.offset()), (ErrorKind::InvalidRecord, Some(48)));
    assert_eq!(e.message(), "pid 4194304 out of range (0..=4194303)");
    // A field the op does not use (a "missing" field cannot exist in a fixed layout; unused
    // ones must be zero).
    let e = mutate(&|b| b[alloc + 20] = 1);
    assert_eq!((e.kind(), e.offset()), (ErrorKind::ReservedBits, Some(52)));
    assert_eq!(e.message(), "pid2 of this ALLOC record is 1 (unused by ALLOC: must be 0)");
    let e = mutate(&|b| b[16 + 4] = 7);
    assert_eq!(e.offset(), Some(20));
    // Truncated record: the OS extension cut short, and the fixed part cut short.
    let e = read_bin(&base[..base.len() - 5]).unwrap_err();
    assert_eq!(e.to_string(), "t.bin: byte offset 32: truncated record (needs 32 bytes, 27 left)");
    let e = read_bin(&base[..alloc + 3]).unwrap_err();
    assert_eq!(e.to_string(), "t.bin: byte offset 32: truncated record (needs 32 bytes, 3 left)");
    // Data on a LD record.
    let mut b = bin(&[Event::Load { pid: 0, vaddr: 0, size_bytes: 64, inst_gap: 0 }]);
    b[17] = 1;
    b.extend_from_slice(&[0; 64]);
    let e = read_bin(&b).unwrap_err();
    assert_eq!((e.kind(), e.offset()), (ErrorKind::InvalidRecord, Some(17)));
    // Truncated data payload of a ST record: after the 32-byte record and the payload's tag.
    let b = bin(&[Event::Store { pid: 0, vaddr: 0, size_bytes: 64, inst_gap: 0, data: Some(data(1)) }]);
    let e = read_bin(&b[..b.len() - 4]).unwrap_err();
    assert_eq!(e.to_string(), "t.bin: byte offset 49: truncated compact payload: a raw line needs 64 bytes, 60 left");
    // Reserved header flag bits of v2.
    let mut b = base.clone();
    b[10] |= 4;
    assert_eq!(read_bin(&b).unwrap_err().kind(), ErrorKind::ReservedBits);
}

#[test]
fn writers_refuse_pids_out_of_range() {
    let bad = Event::Exit { pid: MAX_PID + 1 };
    let mut w = BinaryWriter::with_kind(Vec::new(), "t.bin", true, TraceKind::V2_OS).unwrap();
    let e = w.write_event(&bad).unwrap_err();
    assert_eq!((e.kind(), e.offset()), (ErrorKind::InvalidRecord, Some(16)));
    let mut w = TextWriter::with_kind(Vec::new(), "t.txt", TraceKind::V2_OS).unwrap();
    assert_eq!(w.write_event(&bad).unwrap_err().line(), Some(2));
}

/// A fresh path in the temp dir, removed on drop.
struct TempPath(PathBuf);
impl TempPath {
    fn new(ext: &str) -> TempPath {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        TempPath(std::env::temp_dir().join(format!("secmem-os-records-{}-{n}.{ext}", std::process::id())))
    }
}
impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn convert_keeps_v2_os_traces_os_level_both_ways() {
    let evs = every_kind();
    let a = TempPath::new("bin");
    let b = TempPath::new("txt");
    let c = TempPath::new("bin");
    write_events(&a.0, Format::Binary, TraceKind::V2_OS, evs.iter().cloned().map(Ok)).unwrap();
    assert_eq!(trace_kind(&a.0).unwrap(), TraceKind::V2_OS);
    assert_eq!(convert(&a.0, None, &b.0, Format::Text).unwrap(), evs.len() as u64);
    assert!(std::fs::read_to_string(&b.0).unwrap().starts_with("# secmem-trace v2 os\n"));
    assert_eq!(convert(&b.0, None, &c.0, Format::Binary).unwrap(), evs.len() as u64);
    assert_eq!(std::fs::read(&a.0).unwrap(), std::fs::read(&c.0).unwrap(), "binary -> text -> binary is byte-identical");
    let s = open_events(&c.0).unwrap();
    assert_eq!(s.events.collect::<Result<Vec<_>, _>>().unwrap(), evs);
    // A v1 trace converts to v1.
    write(&a.0, Format::Binary, vec![Record::read(0, 0)]).unwrap();
    convert(&a.0, None, &b.0, Format::Text).unwrap();
    assert!(std::fs::read_to_string(&b.0).unwrap().starts_with("# secmem-trace v1\n"));
}

#[test]
fn info_summarises_the_os_records() {
    let t = info_events(every_kind().into_iter().map(Ok), true).unwrap();
    let os = t.os.clone().unwrap();
    assert_eq!((os.loads, os.stores, os.allocs, os.frees, os.forks, os.exits), (1, 2, 2, 1, 1, 1));
    assert_eq!((os.wbnoinvds, os.roi_markers, os.processes), (1, 1, 2));
    assert_eq!((os.alloc_bytes_4k, os.alloc_bytes_2m, os.free_bytes), (8192, 2 << 20, 4096));
    assert_eq!((t.records, t.reads, t.writes, t.fences, t.flushes, t.records_with_data), (14, 1, 1, 1, 1, 2));
    // Instructions: loads, stores, physical records and wbnoinvd (gaps 10+0+MAX+3+0+2+0).
    assert_eq!(t.total_instructions, 10 + u32::MAX as u64 + 3 + 2 + 8);
    assert!(t.to_json().ends_with(",\"os\":{\"loads\":1,\"stores\":2,\"allocs\":2,\"frees\":1,\"forks\":1,\"exits\":1,\"wbnoinvds\":1,\"roi_markers\":1,\"processes\":2,\"alloc_bytes_4k\":8192,\"alloc_bytes_2m\":2097152,\"free_bytes\":4096,\"io_reads\":0,\"io_writes\":0,\"io_bytes\":0}}"), "{}", t.to_json());
    // Physical traces have no `os` block.
    assert!(!info(vec![Ok(Record::read(0, 0))]).unwrap().to_json().contains("\"os\""));
}

fn arb_event() -> impl Strategy<Value = Event> {
    let pid = 0..=MAX_PID;
    let d = proptest::option::of(any::<[u8; 32]>().prop_map(|h| {
        let mut x = [0u8; 64];
        x[..32].copy_from_slice(&h);
        x[32..].copy_from_slice(&h);
        x
    }));
    prop_oneof![
        (0u8..4, any::<u64>(), any::<u16>(), any::<u32>()).prop_map(|(op, addr, size_bytes, inst_gap)| {
            Event::Phys(Record { op: Op::from_code(op).unwrap(), addr, size_bytes, inst_gap, data: None })
        }),
        (pid.clone(), any::<u64>(), any::<u16>(), any::<u32>()).prop_map(|(pid, vaddr, size_bytes, inst_gap)| Event::Load { pid, vaddr, size_bytes, inst_gap }),
        (pid.clone(), any::<u64>(), any::<u16>(), any::<u32>(), d).prop_map(|(pid, vaddr, size_bytes, inst_gap, data)| Event::Store { pid, vaddr, size_bytes, inst_gap, data }),
        (pid.clone(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(pid, vaddr, length, h)| Event::Alloc {
            pid, vaddr, length, page: if h { PageSize::Huge } else { PageSize::Small }
        }),
        (pid.clone(), any::<u64>(), any::<u64>()).prop_map(|(pid, vaddr, length)| Event::Free { pid, vaddr, length }),
        (pid.clone(), pid.clone()).prop_map(|(parent, child)| Event::Fork { parent, child }),
        pid.prop_map(|pid| Event::Exit { pid }),
        Just(Event::WbNoInvd),
        Just(Event::RoiBegin),
    ]
}

proptest! {
    #[test]
    fn random_v2_traces_round_trip_and_convert_losslessly(evs in prop::collection::vec(arb_event(), 0..48)) {
        let b = bin(&evs);
        let t = txt(&evs);
        prop_assert_eq!(&read_bin(&b).unwrap(), &evs);
        prop_assert_eq!(&read_txt(&t).unwrap(), &evs);
        prop_assert_eq!(detect_bytes(&b), Some(Format::Binary));
        prop_assert_eq!(detect_bytes(t.as_bytes()), Some(Format::Text));
    }

    #[test]
    fn truncating_a_v2_binary_trace_anywhere_is_an_error_or_a_prefix(evs in prop::collection::vec(arb_event(), 1..16), cut in 0usize..2000) {
        let b = bin(&evs);
        let cut = 16 + cut % (b.len() - 15);
        let mut got = Vec::new();
        let mut r = BinaryReader::with_name(&b[..cut], "t.bin").unwrap().events();
        let mut err = None;
        for e in r.by_ref() {
            match e { Ok(e) => got.push(e), Err(e) => { err = Some(e); break } }
        }
        prop_assert_eq!(&evs[..got.len()], &got[..]);
        if cut < b.len() && err.is_none() {
            // Only a cut exactly at a record boundary reads cleanly.
            prop_assert!(got.len() < evs.len());
        }
        if let Some(e) = err {
            prop_assert_eq!(e.kind(), ErrorKind::Truncated);
        }
    }
}

#[test]
fn arbitrary_bytes_after_a_v2_header_never_panic() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let header = bin(&[]);
    for _ in 0..3000 {
        let len = rng.gen_range(0..160);
        let mut bytes = header.clone();
        bytes.extend((0..len).map(|_| if rng.gen_bool(0.5) { rng.gen_range(0..16u8) } else { rng.gen() }));
        let _ = read_bin(&bytes);
    }
    let alphabet = ["LD", "ST", "ALLOC", "FREE", "FORK", "EXIT", "ROI", "WBNOINVD", "0", "0x40", "4k", "2m", "4194304", " ", "\n", "#"];
    for _ in 0..3000 {
        let mut s = String::from("# secmem-trace v2 os\n");
        for _ in 0..rng.gen_range(0..30) {
            s.push_str(alphabet[rng.gen_range(0..alphabet.len())]);
            s.push(' ');
        }
        let _ = read_txt(&s);
    }
}
