//! Functional mode: the bytes behind the timing model.
//!
//! In functional mode the controller keeps, next to every mechanism the timing model already
//! has, the exact bytes a real secure memory would: a sparse NVM image holding data
//! ciphertext, encoded counter blocks, MAC blocks and tree nodes in their regions; 64 B
//! payloads in the metadata caches; and the on-chip root register. Every read decrypts and
//! verifies, and the data is released only after its MAC and its counter's path to the root
//! have been checked. Timing and traffic are decided by exactly the same code as in counting
//! mode, so both modes report the same counts.
//!
//! Conventions of the sparse image (secure memory is initialised at boot, lazily):
//! * a counter block absent from the image holds its boot content: the encoding of its page's
//!   initial block (all zeros under `security.counter_init = "zero"`; see
//!   [`InitialCounters`]);
//! * a data line absent from the image holds its boot content: zeros encrypted under its
//!   initial counter ((0, 0) under zero init), i.e. the pad itself; a MAC slot holding 0
//!   stands for that boot content's MAC (real MACs are never 0: a computed 0 is stored as 1).
//!   Every read is therefore verified, never-written lines included, and a line whose counter
//!   was lost fails its MAC check instead of reading as zeros;
//! * a tree-node entry of 0 stands for a child block still at its boot content (a counter
//!   block's initial encoding, a tree node's zeros); a real hash that happens to be 0 is
//!   stored as 1, so the two cannot be confused. Replacing a written block by its boot content
//!   is therefore still caught: its parent entry is not 0.

use secmem_core::addr::{line_in_page, page_of_line};
use secmem_core::counters::InitialCounters;
use secmem_crypto::{node_entry, set_node_entry, xor_line, Keys, PadReuseDetector};

/// Which check failed, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntegrityError {
    /// A data line's MAC did not match (tampered, replayed or spliced data or MAC).
    DataMac { line: u64, addr: u64 },
    /// A counter block did not match its parent's hash entry.
    CounterBlock { page: u64, addr: u64 },
    /// A tree node at `level` (1 = just above the counters) did not match its parent.
    TreeNode { level: usize, index: u64, addr: u64 },
    /// Not an integrity check: a remapping design found no free physical line for a write of
    /// `line` (every line it may place data on holds data). The run stops, as on a failure.
    NoFreeLine { line: u64 },
}

impl IntegrityError {
    /// Short class name: `data-mac`, `counter`, `tree-level-N`.
    pub fn class(&self) -> String {
        match self {
            IntegrityError::DataMac { .. } => "data-mac".into(),
            IntegrityError::CounterBlock { .. } => "counter".into(),
            IntegrityError::TreeNode { level, .. } => format!("tree-level-{level}"),
            IntegrityError::NoFreeLine { .. } => "no-free-line".into(),
        }
    }
    /// Device address of the block whose check failed.
    pub fn addr(&self) -> u64 {
        match *self {
            IntegrityError::DataMac { addr, .. } | IntegrityError::CounterBlock { addr, .. } | IntegrityError::TreeNode { addr, .. } => addr,
            IntegrityError::NoFreeLine { line } => line << 6,
        }
    }
}

impl std::fmt::Display for IntegrityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IntegrityError::DataMac { line, addr } => {
                write!(f, "integrity failure: data MAC mismatch for line {line:#x} (address {addr:#x})")
            }
            IntegrityError::CounterBlock { page, addr } => {
                write!(f, "integrity failure: counter block of page {page:#x} (address {addr:#x}) does not match its tree parent")
            }
            IntegrityError::TreeNode { level, index, addr } => {
                write!(f, "integrity failure: tree node level {level} index {index} (address {addr:#x}) does not match its parent")
            }
            IntegrityError::NoFreeLine { line } => {
                write!(f, "no free data line to place a write of line {line:#x}: every line the design may use holds data (the footprint is larger than the memory it leaves to data)")
            }
        }
    }
}
impl std::error::Error for IntegrityError {}

pub use crate::controller::nvm_image::{MemoTag, NvmImage};

/// Deliberately wrong variants of the protocol, compiled only into test builds, so that the
/// test suite can show it catches each one (a test that cannot fail is a defect).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Canaries {
    /// MAC computed without the line address (splicing lines goes unnoticed).
    pub mac_without_address: bool,
    /// MAC computed without the counter (replaying old data + MAC goes unnoticed).
    pub mac_without_counter: bool,
    /// Counter updates do not reach the tree (replaying a counter block goes unnoticed).
    pub skip_tree_update: bool,
    /// Recovery does not compare the rebuilt root with the on-chip root.
    pub skip_root_check: bool,
    /// A minor counter wraps to 0 instead of bumping the major and re-encrypting (pad reuse).
    pub minor_wrap_without_reencryption: bool,
    /// Under strict persistence the data is persisted but its counter block is not
    /// (a crash then leaves new data under an old counter).
    pub persist_data_before_counter: bool,
    /// Fetched counter blocks are not checked against their tree parent (replaying an old
    /// counter block with its old data and MAC goes unnoticed).
    pub skip_counter_verification: bool,
    /// Reads skip the data MAC check (tampered data is returned).
    pub skip_data_mac_check: bool,
    /// Horus' vault MACs leave out the drain counter (a vault from an earlier drain episode
    /// replays unnoticed).
    pub vault_mac_without_drain_counter: bool,
    /// Horus' recovery skips the metadata-tree root check (tampered metadata blocks are
    /// restored into the metadata caches).
    pub skip_vault_metadata_check: bool,
}

/// The functional state of one controller.
pub struct Functional {
    pub keys: Keys,
    pub image: NvmImage,
    /// The on-chip root register: one 64-bit entry per child of the root.
    pub root: [u8; 64],
    pub mac_bits: u32,
    /// Every pad used for encryption (enabled in tests and campaigns).
    pub reuse: Option<PadReuseDetector>,
    /// First pad reuse seen (the run continues; harnesses check this).
    pub reuse_violation: Option<secmem_crypto::PadReuse>,
    pub canaries: Canaries,
    /// Running hash of every persistent write (address + bytes) and root update, in order:
    /// two runs with the same seed must produce the same value.
    event_log: EventLog,
    /// The counters' boot values, which decide the boot content of counter blocks and data
    /// lines (set by the controller from `security.counter_init`).
    pub init: InitialCounters,
    /// Minor-counter width of the boot encoding of counter blocks.
    pub minor_bits: u32,
    /// The layout (data bytes, arity, MAC bits) that maps image lines to tree positions, for
    /// the image's hash memos ([`Functional::memo_tag`]); set by the controller.
    pub memo_layout: (u64, u64, u32),
}

/// A BLAKE3 hash of a byte stream fed a few bytes at a time, buffered: hashing 72 B per
/// update costs one compression per 64 B, one after another, while BLAKE3 hashes a large
/// update many 1 KiB chunks at a time with SIMD. The digest is the same either way (it is
/// the hash of the concatenated stream).
///
/// Handed off ([`Functional::hand_off_event_log`]), it hashes nothing itself: each full
/// buffer goes, in order, to another thread, whose [`EventLogHasher`] hashes the stream.
struct EventLog {
    hasher: blake3::Hasher,
    buf: Vec<u8>,
    hand_off: HandOff,
}

enum HandOff {
    /// Hashed here.
    No,
    /// Full buffers go to this channel's receiver.
    To(std::sync::mpsc::Sender<Vec<u8>>),
    /// Handed off and ended: the rest of the stream was sent; nothing more may be logged.
    Ended,
}

impl EventLog {
    /// Bytes buffered before they are hashed (a multiple of BLAKE3's 1 KiB chunk).
    const BUFFER: usize = 64 << 10;

    fn new() -> EventLog { EventLog { hasher: blake3::Hasher::new(), buf: Vec::with_capacity(Self::BUFFER), hand_off: HandOff::No } }

    #[inline]
    fn update(&mut self, bytes: &[u8]) {
        if self.buf.len() + bytes.len() > Self::BUFFER {
            self.flush();
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Hashes the buffer, or hands it off, and empties it.
    #[inline(never)]
    fn flush(&mut self) {
        match &self.hand_off {
            HandOff::No => {
                self.hasher.update(&self.buf);
                self.buf.clear();
            }
            HandOff::To(to) => {
                let full = std::mem::replace(&mut self.buf, Vec::with_capacity(Self::BUFFER));
                // A receiver gone means the other thread stopped (it failed): this run's result
                // is not wanted, and its log is not either.
                let _ = to.send(full);
            }
            HandOff::Ended => panic!("an event was logged after the event log's hand-off ended"),
        }
    }

    fn finalize(&self) -> blake3::Hash {
        assert!(matches!(self.hand_off, HandOff::No), "the digest of a handed-off event log is its receiver's");
        let mut h = self.hasher.clone();
        h.update(&self.buf);
        h.finalize()
    }
}

/// The 64-bit digest of an event log's hash: its first 8 bytes, little-endian.
fn digest_of(hash: blake3::Hash) -> u64 { u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes")) }

/// The receiving end of a handed-off event log ([`Functional::hand_off_event_log`]): hashes
/// the buffers it is given, which must be every buffer sent, in order.
pub struct EventLogHasher {
    hasher: blake3::Hasher,
}

impl Default for EventLogHasher {
    fn default() -> EventLogHasher { EventLogHasher { hasher: blake3::Hasher::new() } }
}

impl EventLogHasher {
    /// Hashes the next buffer of the stream.
    pub fn absorb(&mut self, buffer: &[u8]) { self.hasher.update(buffer); }

    /// Hashes every buffer waiting in `from`, without waiting for more.
    pub fn absorb_all(&mut self, from: &std::sync::mpsc::Receiver<Vec<u8>>) {
        while let Ok(buffer) = from.try_recv() {
            self.absorb(&buffer);
        }
    }

    /// The digest of the stream so far: once every buffer is absorbed, the handing-off log's
    /// [`Functional::event_log_digest`] would-be value.
    pub fn digest(&self) -> u64 { digest_of(self.hasher.finalize()) }
}

impl Functional {
    pub fn new(seed: u64, mac_bits: u32) -> Functional {
        Functional {
            keys: Keys::from_seed(seed),
            image: NvmImage::default(),
            root: [0; 64],
            mac_bits,
            reuse: None,
            reuse_violation: None,
            canaries: Canaries::default(),
            event_log: EventLog::new(),
            init: InitialCounters::Zero,
            minor_bits: 7,
            memo_layout: (0, 0, 0),
        }
    }

    /// The boot content of metadata block (`level`, `index`): a counter block's initial
    /// encoding at level 0, zeros for a tree node.
    #[inline]
    pub fn boot_block(&self, level: usize, index: u64) -> [u8; 64] {
        if level > 0 || self.init.is_zero() {
            return [0; 64];
        }
        self.init.block(index, self.minor_bits).encode(self.minor_bits)
    }

    /// The bytes NVM holds for metadata block (`level`, `index`) at device line `device_line`
    /// (the image's, or its boot content), and the image's tree-hash memo of them (0: none).
    #[inline]
    pub fn block_bytes(&self, level: usize, index: u64, device_line: u64) -> ([u8; 64], u64) {
        match self.image.get_opt_with_memo(device_line, &self.memo_tag()) {
            (Some(b), memo) => (b, memo),
            (None, _) => (self.boot_block(level, index), 0),
        }
    }

    /// The counter data `line` was encrypted under at boot.
    #[inline]
    pub fn initial_counter(&self, line: u64) -> (u64, u8) {
        if self.init.is_zero() {
            return (0, 0);
        }
        self.init.block(page_of_line(line), self.minor_bits).counter_of(line_in_page(line))
    }

    /// Writes `bytes` to the persistent image and logs the event.
    #[inline]
    pub fn persist(&mut self, device_line: u64, bytes: [u8; 64]) {
        // The same stream as two updates (address, then bytes), appended in one copy.
        let mut record = [0u8; 72];
        record[..8].copy_from_slice(&device_line.to_le_bytes());
        record[8..].copy_from_slice(&bytes);
        self.event_log.update(&record);
        self.image.put(device_line, bytes);
    }

    /// The entry a parent stores for a child block at (`level`, `index`): 0 for a block at
    /// its boot content (never written), else its keyed hash (never 0).
    pub fn child_entry(&self, level: usize, index: u64, block: &[u8; 64]) -> u64 {
        let at_boot = if level > 0 || self.init.is_zero() {
            // The boot content is zeros: an OR over the words, with no call to memcmp and no
            // boot block built.
            block.chunks_exact(8).fold(0, |acc, w| acc | u64::from_ne_bytes(w.try_into().expect("8 bytes"))) == 0
        } else {
            block == &self.boot_block(level, index)
        };
        if at_boot {
            return 0;
        }
        self.keys.node_hash(level as u32, index, block).max(1)
    }

    /// The tag of this controller's tree-hash memos in the image: its key and layout.
    #[inline]
    pub fn memo_tag(&self) -> MemoTag {
        let (data_bytes, arity, mac_bits) = self.memo_layout;
        MemoTag { key_id: self.keys.key_id(), data_bytes, arity, mac_bits, counter_init: self.init }
    }

    /// The MAC of a data line's ciphertext under counter (major, minor); never 0 (0 marks a
    /// boot-time MAC slot).
    pub fn data_mac(&self, ct: &[u8; 64], line: u64, major: u64, minor: u8) -> u64 {
        let line = if self.canaries.mac_without_address { 0 } else { line };
        let (major, minor) = if self.canaries.mac_without_counter { (0, 0) } else { (major, minor) };
        self.keys.line_mac(ct, line, major, minor, self.mac_bits).max(1)
    }

    /// The boot content of data `line`: zeros encrypted under its initial counter.
    pub fn boot_line(&self, line: u64) -> [u8; 64] {
        let (major, minor) = self.initial_counter(line);
        self.keys.pad(line, major, minor)
    }

    /// The MAC a slot stands for: its value, or for 0 the boot content's MAC.
    pub fn effective_mac(&self, stored: u64, line: u64) -> u64 {
        if stored != 0 {
            return stored;
        }
        let (major, minor) = self.initial_counter(line);
        self.data_mac(&self.keys.pad(line, major, minor), line, major, minor)
    }

    /// Encrypts a plaintext line in place (recording the pad for the reuse detector).
    pub fn encrypt(&mut self, buf: &mut [u8; 64], line: u64, major: u64, minor: u8) {
        // The boot content of a line is zeros under its initial counter's pad, i.e. that pad is
        // in NVM for anyone to read: no write may encrypt under the initial counter (a correct
        // design bumps a counter before every write).
        let boot = self.reuse.is_some().then(|| ((major, minor) == self.initial_counter(line), self.keys.key_id()));
        if let (Some((boot_pad, key_id)), Some(r)) = (boot, self.reuse.as_mut()) {
            let seen = r.record(key_id, 0, line, major, minor);
            let e = if boot_pad { Err(secmem_crypto::PadReuse { key_id, domain: 0, line, major, minor }) } else { seen };
            if let Err(e) = e {
                self.reuse_violation.get_or_insert(e);
            }
        }
        xor_line(buf, &self.keys.pad(line, major, minor));
    }

    /// Decrypts a ciphertext line in place.
    pub fn decrypt(&self, buf: &mut [u8; 64], line: u64, major: u64, minor: u8) {
        xor_line(buf, &self.keys.pad(line, major, minor));
    }

    pub fn root_entry(&self, slot: usize) -> u64 { node_entry(&self.root, slot) }

    pub fn set_root_entry(&mut self, slot: usize, v: u64) {
        set_node_entry(&mut self.root, slot, v);
        self.event_log.update(b"root");
        self.event_log.update(&(slot as u64).to_le_bytes());
        self.event_log.update(&v.to_le_bytes());
    }

    /// The 64-bit event-log digest so far.
    ///
    /// # Panics
    /// If the log was handed off ([`hand_off_event_log`](Self::hand_off_event_log)): its
    /// receiver has the digest.
    pub fn event_log_digest(&self) -> u64 { digest_of(self.event_log.finalize()) }

    /// From now on, sends each full 64 KiB buffer of the event log to `to`, in order, instead
    /// of hashing it on this thread; an [`EventLogHasher`] on the receiving thread hashes
    /// them. The functional half of a two-thread run hands its log to the timing half, which
    /// waits on it much of the time: BLAKE3 was about 4% of the functional half's host
    /// instructions. [`end_event_log_hand_off`](Self::end_event_log_hand_off) sends the rest.
    ///
    /// # Panics
    /// If anything was logged already (the receiver must get the whole stream).
    pub fn hand_off_event_log(&mut self, to: std::sync::mpsc::Sender<Vec<u8>>) {
        let log = &mut self.event_log;
        assert!(log.buf.is_empty() && log.hasher.count() == 0 && matches!(log.hand_off, HandOff::No), "the event log is handed off before anything is logged");
        log.hand_off = HandOff::To(to);
    }

    /// Sends the rest of a handed-off event log and closes the channel; nothing may be logged
    /// after it. No effect on a log hashed here.
    pub fn end_event_log_hand_off(&mut self) {
        let log = &mut self.event_log;
        if let HandOff::To(to) = &log.hand_off {
            let _ = to.send(std::mem::take(&mut log.buf));
            log.hand_off = HandOff::Ended;
        }
    }
}

pub use secmem_crypto::{node_entry as entry_of, set_node_entry as set_entry_of};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_block_at_its_boot_content_gets_the_boot_entry() {
        let mut f = Functional::new(3, 64);
        for (init, level) in [(InitialCounters::Zero, 0), (InitialCounters::Zero, 2), (InitialCounters::Random { seed: 9 }, 0)] {
            f.init = init;
            let boot = f.boot_block(level, 5);
            assert_eq!(f.child_entry(level, 5, &boot), 0, "{init:?} level {level}");
            for i in 0..64 {
                let mut b = boot;
                b[i] ^= 1;
                assert_ne!(f.child_entry(level, 5, &b), 0, "{init:?} level {level} byte {i}");
            }
        }
    }

    #[test]
    fn a_block_whose_words_cancel_out_is_not_taken_for_boot_content() {
        // Two equal non-zero words XOR to zero: only a block of zeros is at its boot content
        // (else it would share the entry 0 with the zeros, which could replace it unnoticed).
        let f = Functional::new(3, 64);
        let mut b = [0u8; 64];
        b[3] = 0x5a;
        b[8 + 3] = 0x5a;
        for level in [0, 1, 2] {
            assert_ne!(f.child_entry(level, 5, &b), 0, "level {level}");
        }
    }

    #[test]
    fn buffered_event_log_is_the_hash_of_the_whole_stream() {
        let mut log = EventLog::new();
        let mut all = Vec::new();
        for i in 0..5000u64 {
            // Updates of every size 0..=72, crossing the buffer boundary many times.
            let b: Vec<u8> = (0..i % 73).map(|j| (i * 31 + j) as u8).collect();
            log.update(&b);
            all.extend_from_slice(&b);
            if i % 997 == 0 {
                assert_eq!(log.finalize(), blake3::hash(&all), "after {i} updates");
            }
        }
        assert!(all.len() > 2 * EventLog::BUFFER);
        assert_eq!(log.finalize(), blake3::hash(&all));
    }

    #[test]
    fn a_handed_off_event_log_digests_on_the_receiving_thread_to_what_it_would_have_here() {
        // Enough persists for several full buffers and a partial last one, received while the
        // log is still being written (as the timing half does) and after it ended.
        let (mut here, mut away) = (Functional::new(3, 64), Functional::new(3, 64));
        let (tx, rx) = std::sync::mpsc::channel();
        away.hand_off_event_log(tx);
        let mut hasher = EventLogHasher::default();
        for i in 0..3000u64 {
            for f in [&mut here, &mut away] {
                f.persist(i * 7, [i as u8; 64]);
                f.set_root_entry((i % 8) as usize, i);
            }
            if i % 500 == 0 {
                hasher.absorb_all(&rx);
            }
        }
        assert!(3000 * (72 + 20) > 3 * EventLog::BUFFER);
        away.end_event_log_hand_off();
        drop(away);
        hasher.absorb_all(&rx);
        assert!(matches!(rx.try_recv(), Err(std::sync::mpsc::TryRecvError::Disconnected)), "every buffer was received");
        assert_eq!(hasher.digest(), here.event_log_digest());
        assert_ne!(hasher.digest(), Functional::new(3, 64).event_log_digest(), "not the empty log's");
    }

    #[test]
    fn each_integrity_error_names_its_class_and_the_address_of_the_failed_block() {
        // The attack harness matches detections by (class, address); the text is what a user
        // sees. (secmem-sim's attack tests check these too; this pins them in the crate.)
        let cases = [
            (IntegrityError::DataMac { line: 0x46, addr: 0x1180 }, "data-mac", 0x1180, "data MAC mismatch for line 0x46 (address 0x1180)"),
            (
                IntegrityError::CounterBlock { page: 1, addr: 0x40040 },
                "counter",
                0x40040,
                "counter block of page 0x1 (address 0x40040) does not match its tree parent",
            ),
            (
                IntegrityError::TreeNode { level: 2, index: 3, addr: 0x410c0 },
                "tree-level-2",
                0x410c0,
                "tree node level 2 index 3 (address 0x410c0) does not match its parent",
            ),
        ];
        for (e, class, addr, text) in cases {
            assert_eq!((e.class(), e.addr(), e.to_string()), (class.to_string(), addr, format!("integrity failure: {text}")));
        }
    }

    #[test]
    fn the_event_log_hashes_its_buffer_only_when_the_next_update_would_overflow_it() {
        // 64 B updates fill the 64 KiB buffer exactly after 1024 of them: it is hashed when the
        // 1025th arrives, in one 64 KiB batch, never earlier, and never holds more than 64 KiB (a
        // run logs 72 B per persistent write: unbounded, the buffer would hold the whole log).
        let mut log = EventLog::new();
        let per = EventLog::BUFFER / 64;
        assert_eq!(per, 1024);
        for n in 1..=3 * per + 5 {
            log.update(&[n as u8; 64]);
            let hashed = (n - 1) / per * EventLog::BUFFER;
            assert_eq!((log.hasher.count() as usize, log.buf.len()), (hashed, n * 64 - hashed), "after {n} updates");
        }
    }

    #[test]
    fn the_event_log_digest_is_the_hash_of_every_persisted_line_and_root_update_in_order() {
        // The stream is (address as 8 LE bytes, 64 B) per persist and ("root", slot, value as
        // 8 LE bytes each) per root update; the digest is its BLAKE3 hash's first 8 bytes, LE.
        let mut f = Functional::new(3, 64);
        let digest = |stream: &[u8]| u64::from_le_bytes(blake3::hash(stream).as_bytes()[..8].try_into().unwrap());
        assert_eq!(f.event_log_digest(), digest(&[]));
        f.persist(5, [7; 64]);
        f.set_root_entry(2, 0x1234);
        let mut stream = Vec::new();
        stream.extend_from_slice(&5u64.to_le_bytes());
        stream.extend_from_slice(&[7; 64]);
        stream.extend_from_slice(b"root");
        stream.extend_from_slice(&2u64.to_le_bytes());
        stream.extend_from_slice(&0x1234u64.to_le_bytes());
        assert_eq!(f.event_log_digest(), digest(&stream));
        assert_eq!((f.image.get(5), f.root_entry(2)), ([7; 64], 0x1234));
    }

    #[test]
    fn a_never_written_line_holds_zeros_encrypted_under_its_initial_counter() {
        // Its boot content is the pad itself: ciphertext, not zeros, and zeros once decrypted.
        let mut f = Functional::new(3, 64);
        for init in [InitialCounters::Zero, InitialCounters::Random { seed: 9 }] {
            f.init = init;
            for line in [0, 70, 4095] {
                let (major, minor) = f.initial_counter(line);
                let mut b = f.boot_line(line);
                assert_eq!(b, f.keys.pad(line, major, minor), "{init:?} line {line}");
                assert_ne!(b, [0; 64], "{init:?} line {line}");
                f.decrypt(&mut b, line, major, minor);
                assert_eq!(b, [0; 64], "{init:?} line {line}");
            }
        }
    }

    #[test]
    fn a_memo_set_under_one_key_layout_or_boot_counters_is_not_read_under_another() {
        // Two controllers may meet the same image (a harness moves or clones it): a memo is the
        // hash under the key and tree layout of the controller that set it, and a tree entry of
        // 0 means boot content only under the boot counters it was computed under.
        let block = [7u8; 64];
        let mut f = Functional::new(3, 64);
        f.memo_layout = (4096, 8, 64);
        f.image = NvmImage::with_dense_ranges(&[(100, 110)]);
        f.image.put(101, block);
        let tag = f.memo_tag();
        f.image.set_memo(101, &tag, &block, 99);
        assert_eq!(f.block_bytes(0, 1, 101), (block, 99));
        let other_key = Functional { image: f.image.clone(), memo_layout: f.memo_layout, ..Functional::new(4, 64) };
        assert_eq!(other_key.block_bytes(0, 1, 101), (block, 0), "another key");
        let zero = InitialCounters::Zero;
        let others = [((8192, 8, 64), zero), ((4096, 16, 64), zero), ((4096, 8, 56), zero), ((4096, 8, 64), InitialCounters::Random { seed: 1 })];
        for (layout, init) in others {
            let g = Functional { image: f.image.clone(), memo_layout: layout, init, ..Functional::new(3, 64) };
            assert_eq!(g.block_bytes(0, 1, 101), (block, 0), "{layout:?} {init:?}");
        }
        assert_eq!(f.block_bytes(0, 1, 101), (block, 99), "the setter still reads its memo");
    }
}
