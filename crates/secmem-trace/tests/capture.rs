//! `capture_lackey`: lackey output streamed into a binary trace marked virtual.

use secmem_trace::{capture_lackey, open, trace_kind, CaptureWindow, ErrorKind, Op};

fn lackey(n: usize) -> String {
    let mut t = String::from("==7== Lackey, an example Valgrind tool\n");
    for i in 0..n {
        t += &format!("I  0400{i:04x},3\n L 1ffefff{:03x},8\n", (i * 8) % 4096);
    }
    t
}

#[test]
fn a_lackey_stream_becomes_a_binary_trace_marked_virtual() {
    let dir = std::env::temp_dir().join(format!("secmem-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("t.bin");
    let mut calls = 0;
    let n = capture_lackey(std::io::Cursor::new(lackey(1000)), "lackey output of t".into(), &out, CaptureWindow::default(), &mut |_| calls += 1).unwrap();
    assert_eq!(n, 1000);
    assert!(trace_kind(&out).unwrap().virtual_addresses);
    let recs: Vec<_> = open(&out).unwrap().map(Result::unwrap).collect();
    assert_eq!(recs.len(), 1000);
    assert!(recs.iter().all(|r| r.op == Op::Read && r.addr >= 0x1ffefff000 && r.size_bytes == 8));
    assert_eq!(calls, 0, "progress every 2^20 records");
    // A limit stops it there.
    assert_eq!(capture_lackey(std::io::Cursor::new(lackey(1000)), "t".into(), &out, CaptureWindow { skip: 0, max: Some(10) }, &mut |_| {}).unwrap(), 10);
    assert_eq!(open(&out).unwrap().count(), 10);
    // A window skips the start: records 100..110, the first of them at its own address.
    let w = CaptureWindow { skip: 100, max: Some(10) };
    assert_eq!(capture_lackey(std::io::Cursor::new(lackey(1000)), "t".into(), &out, w, &mut |_| {}).unwrap(), 10);
    assert_eq!(open(&out).unwrap().next().unwrap().unwrap().addr, 0x1ffefff000 + 800);
    // A malformed line names the stream and the line, and writes nothing.
    std::fs::remove_file(&out).unwrap();
    let e = capture_lackey(std::io::Cursor::new(lackey(3) + " X zz,1\n"), "lackey output of t".into(), &out, CaptureWindow { skip: 5, max: None }, &mut |_| {}).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownOp);
    assert!(e.to_string().starts_with("lackey output of t:8:"), "{e}");
    assert!(!out.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
