//! Hand-worked Lelantus cases (section III) at the controller, in functional mode (real
//! AES-CTR, MACs, tree): CoW redirect, early reclamation, recursive chains, 6-bit overflow,
//! tampering with the CoW fields, crash with a battery-backed counter cache.

use secmem_core::cache::CacheConfig;
use secmem_core::Cycle;
use secmem_crypto::PadReuseDetector;
use secmem_schemes::config::*;
use secmem_schemes::designs::Design;
use secmem_schemes::designs::lelantus::{Encoding, Lelantus};
use secmem_schemes::testing::FixedLatencyMedia;
use secmem_schemes::{IntegrityError, PageCommand, PageCommandError, SecureMc};

const MEM: u64 = 4096 * 4096; // 16 MiB: 4096 pages

fn mc() -> SecureMc { mc_init(CounterInit::Zero) }

fn mc_init(counter_init: CounterInit) -> SecureMc {
    let caches = MetadataCachesConfig { counter: CacheConfig::new(4, 16, 2), mac: CacheConfig::new(1, 16, 2), tree: CacheConfig::new(1, 16, 2), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared };
    let sec = SecurityConfig { counter_init, ..Default::default() };
    let mut m = SecureMc::new_functional(&sec, &TreeConfig::default(), &caches, MEM, Box::new(FixedLatencyMedia::new(100, 300, 1 << 30)), 7).unwrap();
    m.func.as_mut().unwrap().reuse = Some(PadReuseDetector::new());
    m
}

fn data(v: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[..8].copy_from_slice(&v.to_le_bytes());
    b[63] = 0xAA;
    b
}

const A: u64 = 10;
const B: u64 = 20;
const C: u64 = 30;

fn line(page: u64, i: u64) -> u64 { page * 64 + i }

fn rd(d: &mut Lelantus, m: &mut SecureMc, l: u64) -> [u8; 64] { d.read(m, l, Cycle(0)).unwrap().1.unwrap() }
fn wr(d: &mut Lelantus, m: &mut SecureMc, l: u64, v: u64) { d.write(m, l, Some(&data(v)), Cycle(0)).unwrap(); }
fn cmd(d: &mut Lelantus, m: &mut SecureMc, c: PageCommand) { d.page_command(m, c, Cycle(0)).unwrap(); }

fn both() -> [Encoding; 2] { [Encoding::Resized, Encoding::Supplementary] }

/// Changes page `page`'s counter block in the NVM image with `tamper`, then drops the
/// metadata caches so that the next access refetches (and verifies) it. Returns the block as
/// NVM held it before.
fn tamper_counter_block_in_nvm(m: &mut SecureMc, page: u64, tamper: impl FnOnce(&mut [u8; 64])) -> [u8; 64] {
    let caddr = m.layout.counter_addr(page) >> 6;
    let f = m.func.as_mut().unwrap();
    let before = f.image.get(caddr);
    let mut block = before;
    tamper(&mut block);
    f.image.put(caddr, block);
    m.drop_metadata_caches();
    before
}

#[test]
fn uncopied_lines_read_the_source_and_a_write_back_makes_a_line_private() {
    for enc in both() {
        let (mut m, mut d) = (mc(), Lelantus::new(enc));
        for i in 0..64 {
            wr(&mut d, &mut m, line(A, i), 100 + i);
        }
        cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst: B });
        assert_eq!(d.source_of(B), Some(A));
        assert_eq!(rd(&mut d, &mut m, line(B, 5)), data(105), "{enc:?}: redirected to the source");
        assert_eq!(d.stats.redirected_reads, 1);
        wr(&mut d, &mut m, line(B, 5), 999);
        assert_eq!(rd(&mut d, &mut m, line(B, 5)), data(999), "{enc:?}: private after its first write-back");
        assert_eq!(rd(&mut d, &mut m, line(A, 5)), data(105), "{enc:?}: the source is untouched");
        assert_eq!(rd(&mut d, &mut m, line(B, 6)), data(106));
        assert_eq!(d.stats.redirected_reads, 2, "{enc:?}: the private line is not redirected");
        // The copy wrote no data line: only the counter block (and for Lelantus-CoW a record).
        assert_eq!(d.stats.lines_materialized, 0);
    }
}

#[test]
fn freeing_the_source_first_materialises_its_lazy_copies() {
    for enc in both() {
        let (mut m, mut d) = (mc(), Lelantus::new(enc));
        for i in 0..64 {
            wr(&mut d, &mut m, line(A, i), 100 + i);
        }
        cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst: B });
        wr(&mut d, &mut m, line(B, 0), 7);
        cmd(&mut d, &mut m, PageCommand::Free { page: A });
        assert_eq!(d.stats.lines_materialized, 63, "{enc:?}: every uncopied line copied, the written one not");
        assert_eq!(d.source_of(B), None);
        // The source page is reused for something else: the copy keeps the old content.
        for i in 0..64 {
            wr(&mut d, &mut m, line(A, i), 5000 + i);
        }
        assert_eq!(rd(&mut d, &mut m, line(B, 9)), data(109), "{enc:?}");
        assert_eq!(rd(&mut d, &mut m, line(B, 0)), data(7));
        // page_phyc of a page that is no longer a lazy copy does nothing.
        let before = d.stats.lines_materialized;
        cmd(&mut d, &mut m, PageCommand::Materialize { page: B });
        assert_eq!(d.stats.lines_materialized, before);
    }
}

#[test]
fn a_copy_of_an_unmodified_copy_records_the_original_and_reclaiming_it_copies_both() {
    for enc in both() {
        let (mut m, mut d) = (mc(), Lelantus::new(enc));
        wr(&mut d, &mut m, line(A, 3), 33);
        cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst: B });
        cmd(&mut d, &mut m, PageCommand::Copy { src: B, dst: C });
        assert_eq!(d.source_of(C), Some(A), "{enc:?}: B unmodified, C records A");
        assert_eq!(rd(&mut d, &mut m, line(C, 3)), data(33));
        cmd(&mut d, &mut m, PageCommand::Free { page: A });
        assert_eq!(d.source_of(B), None);
        assert_eq!(d.source_of(C), None, "{enc:?}: both copies materialised");
        assert_eq!(d.stats.lines_materialized, 128);
        assert_eq!(rd(&mut d, &mut m, line(C, 3)), data(33));
        assert_eq!(rd(&mut d, &mut m, line(B, 3)), data(33));
    }
}

#[test]
fn a_copy_of_a_modified_copy_records_it_and_reclaiming_the_original_copies_only_it() {
    for enc in both() {
        let (mut m, mut d) = (mc(), Lelantus::new(enc));
        wr(&mut d, &mut m, line(A, 3), 33);
        wr(&mut d, &mut m, line(A, 4), 44);
        cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst: B });
        wr(&mut d, &mut m, line(B, 4), 4444);
        cmd(&mut d, &mut m, PageCommand::Copy { src: B, dst: C });
        assert_eq!(d.source_of(C), Some(B), "{enc:?}: B modified, C records B");
        // C line 3 is uncopied in C and in B: a two-hop chain to A.
        assert_eq!(rd(&mut d, &mut m, line(C, 3)), data(33));
        assert_eq!(d.stats.redirect_hops, 2);
        assert_eq!(rd(&mut d, &mut m, line(C, 4)), data(4444));
        cmd(&mut d, &mut m, PageCommand::Free { page: A });
        assert_eq!(d.source_of(B), None);
        assert_eq!(d.source_of(C), Some(B), "{enc:?}: C is not touched");
        assert_eq!(d.stats.lines_materialized, 63);
        assert_eq!(rd(&mut d, &mut m, line(C, 3)), data(33));
        assert_eq!(rd(&mut d, &mut m, line(C, 4)), data(4444));
    }
}

#[test]
fn six_bit_minors_of_a_cow_page_overflow_after_63_writes_and_seven_bit_ones_after_127() {
    let (mut m, mut d) = (mc(), Lelantus::new(Encoding::Resized));
    wr(&mut d, &mut m, line(A, 7), 77);
    cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst: B });
    for k in 0..63 {
        wr(&mut d, &mut m, line(B, 0), k);
    }
    assert_eq!(m.stats.counter_overflows, 0);
    wr(&mut d, &mut m, line(B, 0), 1000);
    assert_eq!(d.stats.cow_overflows, 1, "the 64th write overflows a 6-bit minor");
    assert_eq!(d.source_of(B), None, "the overflow materialised the page");
    assert_eq!(rd(&mut d, &mut m, line(B, 7)), data(77), "uncopied line kept its source content");
    assert_eq!(rd(&mut d, &mut m, line(B, 0)), data(1000));
    // Lelantus-CoW keeps 7-bit minors (0 reserved): no overflow after the same 64 writes.
    let (mut m, mut d) = (mc(), Lelantus::new(Encoding::Supplementary));
    cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst: B });
    for k in 0..127 {
        wr(&mut d, &mut m, line(B, 0), k);
    }
    assert_eq!(d.stats.cow_overflows, 0);
    wr(&mut d, &mut m, line(B, 0), 1000);
    assert_eq!(d.stats.cow_overflows, 1, "the 128th write overflows a 7-bit minor with 0 reserved");
    assert_eq!(rd(&mut d, &mut m, line(B, 0)), data(1000));
    assert!(m.func.as_ref().unwrap().reuse_violation.is_none());
}

#[test]
fn under_random_counter_init_a_regular_line_overflows_after_127_minus_init_writes_and_a_cow_line_after_63_or_127() {
    for enc in both() {
        let (mut m, mut d) = (mc_init(CounterInit::Random), Lelantus::new(enc));
        // Regular page A: its line with the highest initial minor (seed 7).
        let i = (0..64).max_by_key(|&i| m.counters.counter_of_line(line(A, i)).1).unwrap();
        let init = m.counters.counter_of_line(line(A, i)).1;
        assert!(init > 100, "{enc:?}: the highest of 64 random 7-bit minors is {init}");
        for k in 0..(127 - init) as u64 {
            wr(&mut d, &mut m, line(A, i), k);
        }
        assert_eq!(d.stats.overflows, 0, "{enc:?}");
        wr(&mut d, &mut m, line(A, i), 500);
        assert_eq!((d.stats.overflows, d.stats.cow_overflows), (1, 0), "{enc:?}: write {} of a line starting at {init}", 128 - init);
        // Never-written lines of the page (re-encrypted by the overflow) and of an untouched
        // page still read as zeros.
        assert_eq!(rd(&mut d, &mut m, line(A, (i + 1) % 64)), [0; 64], "{enc:?}");
        assert_eq!(rd(&mut d, &mut m, line(C, 3)), [0; 64], "{enc:?}");
        // page_copy resets B's (random) minors to 0: its lines overflow after exactly 63
        // writes (6-bit, Lelantus) or 127 (7-bit with 0 reserved, Lelantus-CoW).
        cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst: B });
        let room = if enc == Encoding::Resized { 63 } else { 127 };
        for k in 0..room {
            wr(&mut d, &mut m, line(B, 0), k);
        }
        assert_eq!(d.stats.cow_overflows, 0, "{enc:?}");
        wr(&mut d, &mut m, line(B, 0), 1000);
        assert_eq!((d.stats.overflows, d.stats.cow_overflows), (2, 1), "{enc:?}");
        assert_eq!(rd(&mut d, &mut m, line(B, i)), data(500), "{enc:?}: the uncopied line kept its source content");
        assert_eq!(rd(&mut d, &mut m, line(B, 0)), data(1000), "{enc:?}");
        assert!(m.func.as_ref().unwrap().reuse_violation.is_none(), "{enc:?}");
    }
}

#[test]
fn tampering_with_the_cow_fields_or_the_record_is_detected() {
    // Lelantus: the source address lives in the counter block, under the tree.
    let (mut m, mut d) = (mc(), Lelantus::new(Encoding::Resized));
    wr(&mut d, &mut m, line(A, 1), 11);
    wr(&mut d, &mut m, line(C, 1), 99);
    cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst: B });
    d.finish(&mut m, Cycle(0)).unwrap();
    // Point B at another page.
    let before = tamper_counter_block_in_nvm(&mut m, B, |b| b[56..64].copy_from_slice(&C.to_le_bytes()));
    assert_eq!(before[7] & 0x80, 0x80, "CoW flag set in NVM");
    assert!(matches!(d.read(&mut m, line(B, 1), Cycle(0)), Err(IntegrityError::CounterBlock { .. })));

    // Lelantus-CoW: the 8 B record is encrypted and MACed like data.
    let (mut m, mut d) = (mc(), Lelantus::new(Encoding::Supplementary));
    wr(&mut d, &mut m, line(A, 1), 11);
    cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst: B });
    d.finish(&mut m, Cycle(0)).unwrap();
    // The read caches B's record line on chip; dropping the metadata caches must drop it too.
    assert_eq!(rd(&mut d, &mut m, line(B, 1)), data(11));
    let rline = secmem_schemes::designs::lelantus::record_region_first_line(MEM / 64) + B / 8;
    let f = m.func.as_mut().unwrap();
    assert!(f.image.contains(rline), "record written back at finish");
    let mut ct = f.image.get(rline);
    ct[(B % 8) as usize * 8] ^= 1;
    f.image.put(rline, ct);
    d.drop_metadata_caches(&mut m);
    let e = d.read(&mut m, line(B, 1), Cycle(0)).unwrap_err();
    assert!(matches!(e, IntegrityError::DataMac { line, .. } if line == rline), "{e}");
}

#[test]
fn a_page_command_that_meets_tampered_metadata_fails_with_the_integrity_error_at_once() {
    // page_phyc of B reads B's counter block, whose source address was rewritten in NVM: the
    // command itself reports the failure (not a refusal the OS would work around, and not an
    // error held back for a later read).
    let (mut m, mut d) = (mc(), Lelantus::new(Encoding::Resized));
    wr(&mut d, &mut m, line(A, 1), 11);
    cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst: B });
    d.finish(&mut m, Cycle(0)).unwrap();
    tamper_counter_block_in_nvm(&mut m, B, |b| b[56..64].copy_from_slice(&C.to_le_bytes()));
    let e = d.page_command(&mut m, PageCommand::Materialize { page: B }, Cycle(0)).unwrap_err();
    assert!(matches!(e, PageCommandError::Integrity(IntegrityError::CounterBlock { page, .. }) if page == B), "{e}");

    // Silent Shredder's zero fill of a page whose counter block was tampered with likewise.
    let mut m = mc();
    let mut s = secmem_schemes::designs::silent_shredder::SilentShredder::default();
    s.write(&mut m, line(A, 1), Some(&data(5)), Cycle(0)).unwrap();
    s.finish(&mut m, Cycle(0)).unwrap();
    tamper_counter_block_in_nvm(&mut m, A, |b| b[0] ^= 1);
    let e = s.page_command(&mut m, PageCommand::Zero { page: A }, Cycle(0)).unwrap_err();
    assert!(matches!(e, PageCommandError::Integrity(IntegrityError::CounterBlock { .. })), "{e}");
}

#[test]
fn after_a_crash_with_battery_backed_counter_cache_a_lazy_copy_reads_old_or_new_never_garbage() {
    for enc in both() {
        let (mut m, mut d) = (mc(), Lelantus::new(enc));
        for i in 0..64 {
            wr(&mut d, &mut m, line(A, i), 100 + i);
        }
        cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst: B });
        for i in 0..10 {
            wr(&mut d, &mut m, line(B, i), 900 + i);
        }
        d.crash(&mut m, true);
        for i in 0..64 {
            let want = if i < 10 { data(900 + i) } else { data(100 + i) };
            assert_eq!(rd(&mut d, &mut m, line(B, i)), want, "{enc:?}: line {i}");
        }
        d.finish(&mut m, Cycle(0)).unwrap();
    }
}

#[test]
fn page_commands_outside_memory_are_refused_with_a_message() {
    let (mut m, mut d) = (mc(), Lelantus::new(Encoding::Resized));
    let e = d.page_command(&mut m, PageCommand::Copy { src: 1, dst: 1 << 40 }, Cycle(0)).unwrap_err();
    assert!(e.to_string().contains("inside the 4096 data pages"), "{e}");
    let e = d.page_command(&mut m, PageCommand::Copy { src: 5, dst: 5 }, Cycle(0)).unwrap_err();
    assert!(e.to_string().contains("distinct"), "{e}");
}

#[test]
fn under_random_counter_init_silent_shredder_reads_zeros_and_a_zeroed_page_behaves_as_under_zero_init() {
    use secmem_schemes::designs::silent_shredder::SilentShredder;
    let (mut m, mut d) = (mc_init(CounterInit::Random), SilentShredder::default());
    // Before the OS zeroes it, a line with a random non-zero minor holds its boot content
    // (zeros under that counter): it reads as zeros, fetched and verified like data.
    let nonzero: Vec<u64> = (0..64).filter(|&i| m.counters.counter_of_line(line(C, i)).1 != 0).collect();
    for &i in &nonzero {
        assert_eq!(d.read(&mut m, line(C, i), Cycle(0)).unwrap().1.unwrap(), [0; 64]);
    }
    assert_eq!(m.stats.data_reads, nonzero.len() as u64);
    // Zeroing sets every minor to 0 under a fresh major: from then on the page is exactly a
    // zero-init page (zero lines answered without a data read, writes counting from 1).
    d.page_command(&mut m, PageCommand::Zero { page: C }, Cycle(0)).unwrap();
    assert_eq!(m.counters.block(C).minors, [0; 64]);
    let before = m.stats.data_reads;
    for i in 0..64 {
        assert_eq!(d.read(&mut m, line(C, i), Cycle(0)).unwrap().1.unwrap(), [0; 64]);
    }
    assert_eq!((m.stats.data_reads, d.zero_reads), (before, 64));
    d.write(&mut m, line(C, 9), Some(&data(9)), Cycle(0)).unwrap();
    assert_eq!(m.counters.counter_of_line(line(C, 9)).1, 1);
    assert_eq!(d.read(&mut m, line(C, 9), Cycle(0)).unwrap().1.unwrap(), data(9));
    assert!(m.func.as_ref().unwrap().reuse_violation.is_none());
}

#[test]
fn a_page_copy_whose_record_line_evicts_the_destination_counter_block_still_updates_the_tree() {
    // Lelantus-CoW under strict eager persistence with a direct-mapped counter cache of 16
    // sets once the CoW cache is carved out: one of 16 consecutive destinations shares its set
    // with the counter block of the page holding the record lines. page_copy looked the record
    // up (and wrote it through) between storing the destination's new counter block and
    // hashing it into the tree, so that fetch evicted the block first: the eager path update
    // found it gone ("counter cached" panic; found by fuzzing `secmem attack` with
    // metadata_cache.counter.ways = 1).
    let caches = MetadataCachesConfig { counter: CacheConfig::new(33, 1, 2), mac: CacheConfig::new(1, 16, 2), tree: CacheConfig::new(1, 16, 2), tree_organisation: secmem_schemes::config::TreeCacheOrganisation::Shared };
    let sec = SecurityConfig { metadata_persistence: MetadataPersistence::Strict, ..Default::default() };
    let tree = TreeConfig { update: TreeUpdate::Eager, ..Default::default() };
    let mut m = SecureMc::new_functional(&sec, &tree, &caches, MEM, Box::new(FixedLatencyMedia::new(100, 300, 1 << 30)), 7).unwrap();
    let mut d = Lelantus::new(Encoding::Supplementary);
    for i in 0..64 {
        wr(&mut d, &mut m, line(A, i), 100 + i);
    }
    let dsts = 100..116;
    for dst in dsts.clone() {
        cmd(&mut d, &mut m, PageCommand::Copy { src: A, dst });
    }
    // Every copy reads its source's lines through counter blocks fetched and verified again.
    d.drop_metadata_caches(&mut m);
    for dst in dsts {
        for i in [0, 63] {
            assert_eq!(rd(&mut d, &mut m, line(dst, i)), data(100 + i), "page {dst} line {i}");
        }
    }
}
