//! The store behind functional mode's sparse NVM image.
//!
//! A random run over gigabytes leaves millions of written lines, and every simulated device
//! access reads or writes one of them at a random place: the store's cost is host memory
//! latency and footprint, so it is laid out for both.
//!
//! * **Slab**: the 64 B line contents, one after another in the order lines were first
//!   written, in chunks that grow from 64 KiB to 8 MiB and are never moved (growing copies
//!   nothing; a small image stays small, which matters because harnesses clone images).
//!   Large chunks ask for transparent huge pages: they are filled densely.
//! * **Index**: an open-addressing hash table with linear probing, 16 B per bucket
//!   (`line + 1`, 0 for empty; the line's chunk and offset in the slab), kept at most 3/4
//!   full, doubling when it would be fuller. A lookup touches one or two adjacent host cache
//!   lines of the index and then the line's slab entry; both can be prefetched ahead of use
//!   ([`NvmImage::prefetch_index`], [`NvmImage::prefetch_bytes`]). From
//!   `RESERVE_MIN_BUCKETS` buckets on, the index lives in a mapping with room reserved for
//!   `RESERVE_BUCKETS` and doubles in place (`NvmImage::rehash_in_place`): the pages the
//!   smaller table committed are reused, so the kernel zeroes each index page once, where
//!   doubling into a new table zeroed twice the final index in all (under a hypervisor,
//!   first-touch zeroing is slow: it was 4.6% of a random functional run's time).
//!
//! * **Sparse lines inline**: a line whose 64 bytes hold at most one non-zero 8-byte word
//!   keeps that word in its index bucket instead of a slab slot (the word's position goes in
//!   spare bits of the bucket's key). Under a random workload most MAC blocks are such lines:
//!   a write-back of one data line sets one MAC in a block whose other seven are still zero.
//!   Kept inline, a MAC block costs no slab slot (64 B of host memory) and its read no host
//!   cache miss of its own: with shared homes its bucket sits beside its data line's, which
//!   the access has just read. A line that stops being sparse moves to a slab slot and keeps
//!   it.
//!
//! * **Shared homes** (optional, [`NvmImage::with_shared_homes`]): the data lines of one MAC
//!   block and that MAC block hash to one home bucket, so their entries sit in one probe run,
//!   usually one host cache line. A read or write-back of a data line looks up its MAC block
//!   right after it (to verify it, or to update its MAC): that second lookup then finds the
//!   index line already in the host cache, and a run over consecutive lines of one block
//!   stays on one index line instead of a random one per line.
//!
//! * **Dense ranges** (optional, [`NvmImage::with_dense_ranges`]): ranges of device lines
//!   that a run fills densely (the counter blocks and tree nodes) are kept in arrays indexed
//!   by line, in lazily committed zeroed memory: one host cache miss per access instead of
//!   two, and their address is known without a lookup, so a prefetch needs no index. Whether
//!   a line is stored is told by its memo word (below), which the access reads anyway.
//!
//! * **Hash memo** (dense ranges only): next to each line, the tree-hash entry a caller
//!   computed from exactly the bytes stored there ([`NvmImage::set_memo`] checks them), under
//!   the key and layout named by a [`MemoTag`]. Every write to the line clears it, so a memo
//!   is always the hash of the line's current bytes: a caller may use it instead of hashing
//!   them again (a block refetched unchanged since it was last hashed), and a tampered line
//!   (every change goes through [`NvmImage::put`]) is always hashed afresh. A memo under
//!   another tag is never returned.
//!
//! Lines are never removed (a device line, once written, always holds bytes). Iteration
//! order is the index's, which is arbitrary: callers that need an order sort.
//!
//! About 80 B of host memory per stored line (64 B content plus 16 B of index at a load of
//! 3/8..3/4), 16 B of index alone for a sparse line, where a `HashMap<u64, [u8; 64]>` took
//! 72 B / load plus its rehash peak.

use secmem_core::hostmem::ZeroedSlice;
use secmem_core::prefault::Prefaulter;

/// Lines in the first slab chunk (64 KiB); each further chunk doubles, up to
/// [`MAX_CHUNK_SHIFT`].
const FIRST_CHUNK_SHIFT: u32 = 10;
/// Largest slab chunk: 2^17 lines (8 MiB, four huge pages).
const MAX_CHUNK_SHIFT: u32 = 17;
/// Index buckets of the first table.
const MIN_BUCKETS: usize = 1024;
/// Fibonacci hashing multiplier (2^64 / golden ratio): spreads consecutive lines apart.
const HASH_MUL: u64 = 0x9E37_79B9_7F4A_7C15;
/// Index tables of at least this many buckets (4 MiB) get a mapping that can grow in place;
/// smaller ones (most images in tests and harness clones) are not worth a huge page each.
const RESERVE_MIN_BUCKETS: usize = 1 << 18;
/// Buckets of address space reserved for such a table (4 GiB of address space, committed
/// only as the table grows into it): room for about 200 M lines. A table that outgrows it
/// moves to a new reservation four times its size.
const RESERVE_BUCKETS: usize = 1 << 28;

/// Bits of a bucket's first word that hold `line + 1`; lines are below `KEY_MASK` (2^56 - 1,
/// far past the 2^40 an image file allows).
const KEY_MASK: u64 = (1 << 56) - 1;
/// Set in a bucket's first word when the line is stored inline: its second word is then the
/// line's only word that may be non-zero, the one at position `(first word >> WORD_SHIFT) & 7`.
const INLINE: u64 = 1 << 63;
const WORD_SHIFT: u32 = 56;

/// The line number a bucket's first word (non-zero) is for.
#[inline(always)]
fn line_of_key(k: u64) -> u64 { (k & KEY_MASK) - 1 }

/// `Some((position, value))` of the one 8-byte word of `bytes` that may be non-zero (the
/// first, if all are zero); None if two or more are.
#[inline]
fn sparse_word(bytes: &[u8; 64]) -> Option<(u64, u64)> {
    let mut found = None;
    for (w, chunk) in bytes.chunks_exact(8).enumerate() {
        let v = u64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
        if v != 0 {
            if found.is_some() {
                return None;
            }
            found = Some((w as u64, v));
        }
    }
    Some(found.unwrap_or((0, 0)))
}

/// What a hash memo was computed under: the key generation (seed), the layout that maps
/// device lines to tree positions, and the counters' boot values (a tree entry is 0 for a
/// block still at its boot content, which `security.counter_init` decides). Memos under one
/// tag are never returned under another.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoTag {
    pub key_id: u64,
    pub data_bytes: u64,
    pub arity: u64,
    pub mac_bits: u32,
    pub counter_init: secmem_core::counters::InitialCounters,
}

/// Whether two lines hold the same bytes: XOR-OR over their words, inlined (the derived
/// array comparison calls memcmp, whose call costs more than the comparison of 64 bytes).
#[inline]
fn same_line(a: &[u8; 64], b: &[u8; 64]) -> bool {
    let word = |x: &[u8]| u64::from_ne_bytes(x.try_into().expect("8 bytes"));
    a.chunks_exact(8).zip(b.chunks_exact(8)).fold(0, |acc, (x, y)| acc | (word(x) ^ word(y))) == 0
}

/// Lines `[first, first + lines.len())`, stored by position. `memo` has one word per line:
/// 0 for a line never written, [`NO_MEMO`] for a stored line without a hash memo, else its
/// memo. So the access that reads a line's memo learns from the same word whether the line
/// is there, and the hot paths touch two host cache lines per block (its bytes and its memo
/// word), not three (a presence bitmap, tried, was a third). `present`, one bit per
/// line, is kept in step for walking the stored lines in order.
struct Dense {
    first: u64,
    lines: ZeroedSlice<[u8; 64]>,
    present: ZeroedSlice<u64>,
    memo: ZeroedSlice<u64>,
}

/// A dense line's memo word when the line is stored without a memo (see [`Dense`]). A memo
/// that happens to equal it is not recorded: the line is hashed again when next read, the
/// cost of one chance in 2^64.
const NO_MEMO: u64 = u64::MAX;

impl Dense {
    fn new(first: u64, end: u64) -> Dense {
        let n = usize::try_from(end - first).expect("dense range fits the address space");
        // Huge pages: a dense range is touched all over (at worst this commits the whole
        // range, which for counter blocks and tree nodes is under 2% of the data size).
        // SAFETY: all-zero bytes are valid `[u8; 64]` and `u64`; neither needs drop.
        unsafe { Dense { first, lines: ZeroedSlice::new_huge(n), present: ZeroedSlice::new(n.div_ceil(64)), memo: ZeroedSlice::new_huge(n) } }
    }

    #[inline(always)]
    fn slot(&self, line: u64) -> Option<usize> {
        let i = line.wrapping_sub(self.first);
        (i < self.lines.len() as u64).then_some(i as usize)
    }

    #[inline(always)]
    fn has(&self, i: usize) -> bool { self.memo[i] != 0 }

    /// Positions of the present lines, ascending.
    fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.present.iter().enumerate().flat_map(|(w, &bits)| {
            let mut b = bits;
            std::iter::from_fn(move || {
                (b != 0).then(|| {
                    let i = b.trailing_zeros() as usize;
                    b &= b - 1;
                    w * 64 + i
                })
            })
        })
    }
}

impl Clone for Dense {
    fn clone(&self) -> Dense {
        let mut d = Dense::new(self.first, self.first + self.lines.len() as u64);
        d.present.copy_from_slice(&self.present);
        // Only the present lines: the rest is zero and stays uncommitted.
        for i in self.positions() {
            d.lines[i] = self.lines[i];
            d.memo[i] = self.memo[i];
        }
        d
    }
}

/// The persistent bytes of the device, by device line number; absent lines are zeros.
#[derive(Default)]
pub struct NvmImage {
    /// At most a few ranges of lines stored by position (checked before the index).
    dense: Vec<Dense>,
    /// Lines stored in `dense`.
    dense_len: usize,
    /// The tag every memo in `dense` was computed under (None: no memo set yet).
    memo_tag: Option<MemoTag>,
    /// Which lines share a home bucket (see [`SharedHomes`]); none by default.
    homes: Option<SharedHomes>,
    /// `[line + 1, chunk << 32 | offset]` per bucket, or for a line stored inline
    /// `[line + 1 | INLINE | position << WORD_SHIFT, word]`; `[0, _]` is empty.
    table: Option<ZeroedSlice<[u64; 2]>>,
    /// 64 - log2(table length): the hash's top bits index the table.
    shift: u32,
    len: usize,
    chunks: Vec<ZeroedSlice<[u8; 64]>>,
    /// Lines used in the last chunk.
    fill: usize,
    /// Commits host memory the image will write soon, in a core's idle time: see
    /// [`with_prefault`](Self::with_prefault). None unless asked for, and in clones.
    prefault: Option<Prefaulter>,
    /// The slab chunk after the last, made (and handed to `prefault`) once the last is half
    /// full.
    next_chunk: Option<ZeroedSlice<[u8; 64]>>,
}

/// Lines that hash to one home bucket: data lines `[0, data_lines)` in groups of
/// `1 << group_shift`, group `g` with line `group_first + g` (its MAC block). Every other line
/// has a home of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedHomes {
    pub data_lines: u64,
    pub group_shift: u32,
    pub group_first: u64,
}

impl SharedHomes {
    /// The line whose hash places `line`: its group's line for a data line, else itself.
    /// Distinct groups have distinct keys, and no data line is another line's key, so lines
    /// share a home only within a group.
    #[inline(always)]
    fn key(homes: Option<SharedHomes>, line: u64) -> u64 {
        match homes {
            Some(h) if line < h.data_lines => h.group_first + (line >> h.group_shift),
            _ => line,
        }
    }
}

/// Home bucket of `line` in a table of `64 - shift` bits: Fibonacci hashing of its key.
#[inline(always)]
fn home(homes: Option<SharedHomes>, shift: u32, line: u64) -> usize {
    (SharedHomes::key(homes, line).wrapping_add(1).wrapping_mul(HASH_MUL) >> shift) as usize
}

fn chunk_lines(chunk: usize) -> usize {
    1 << (FIRST_CHUNK_SHIFT + chunk as u32).min(MAX_CHUNK_SHIFT)
}

fn new_table(buckets: usize) -> ZeroedSlice<[u64; 2]> {
    // SAFETY: all-zero `[u64; 2]` is a valid (empty) bucket; u64 needs no drop.
    unsafe {
        if buckets >= RESERVE_MIN_BUCKETS {
            ZeroedSlice::with_capacity_huge(buckets, RESERVE_BUCKETS.max(4 * buckets))
        } else {
            ZeroedSlice::new_huge(buckets)
        }
    }
}

fn new_chunk(lines: usize) -> ZeroedSlice<[u8; 64]> {
    // SAFETY: all-zero bytes are valid `[u8; 64]`; u8 needs no drop.
    unsafe { ZeroedSlice::new_huge(lines) }
}

impl NvmImage {
    /// An empty image that stores the lines of each range `[first, end)` by position (see
    /// the module docs); meant for ranges a run fills densely. The ranges must not overlap.
    pub fn with_dense_ranges(ranges: &[(u64, u64)]) -> NvmImage {
        let mut sorted = ranges.to_vec();
        sorted.sort_unstable();
        assert!(sorted.windows(2).all(|w| w[0].1 <= w[1].0), "dense ranges overlap: {ranges:?}");
        let mut image = NvmImage::default();
        image.dense = ranges.iter().filter(|r| r.1 > r.0).map(|&(a, b)| Dense::new(a, b)).collect();
        image
    }

    /// This image with its growth committed ahead of its first write, on a background
    /// thread of idle priority ([`Prefaulter`]): each slab chunk of its own mapping once the
    /// chunk before is half full, and the room the index doubles into once the index is 5/8
    /// full (of the 3/4 it doubles at). The thread starts at the first such request, so a
    /// small image never has one. Changes no stored byte; clones do not inherit it.
    ///
    /// Why: under this project's hypervisor the kernel allocates and zeroes fresh host memory
    /// at a few hundred MB/s, and the image of a 10 M-record random run grows by about 600
    /// MiB of slab and index (the rest of it, its dense ranges, fills at random places that
    /// cannot be told ahead).
    pub fn with_prefault(mut self) -> NvmImage {
        self.prefault = Some(Prefaulter::default());
        self
    }

    /// Whether the prefault thread was started (for tests).
    pub fn prefault_started(&self) -> bool { self.prefault.as_ref().is_some_and(Prefaulter::started) }

    /// This image with the data lines of each group and the group's own line hashed to one
    /// home (see the module docs). Call it on an empty image: stored lines would not move.
    ///
    /// # Panics
    /// If a line is already stored in the index, or a group's line is a data line.
    pub fn with_shared_homes(mut self, homes: SharedHomes) -> NvmImage {
        assert!(self.len == 0, "shared homes are set on an image whose index is empty");
        assert!(homes.group_first >= homes.data_lines && homes.group_shift < 64, "group lines lie above the data: {homes:?}");
        self.homes = Some(homes);
        self
    }

    /// The dense range holding `line` and its position there.
    #[inline(always)]
    fn dense_slot(&self, line: u64) -> Option<(usize, usize)> {
        self.dense.iter().enumerate().find_map(|(d, r)| r.slot(line).map(|i| (d, i)))
    }

    #[inline(always)]
    fn bucket(&self, line: u64) -> usize { home(self.homes, self.shift, line) }

    /// Index of `line`'s bucket, or of the empty bucket where it would go.
    #[inline(always)]
    fn find(table: &[[u64; 2]], mut b: usize, line: u64) -> usize {
        let mask = table.len() - 1;
        loop {
            let k = table[b][0];
            if k & KEY_MASK == line + 1 || k == 0 {
                return b;
            }
            b = (b + 1) & mask;
        }
    }

    #[inline(always)]
    fn slab(&self, loc: u64) -> &[u8; 64] { &self.chunks[(loc >> 32) as usize][loc as u32 as usize] }

    /// The bucket of `line` in the index: its entry, or `[0, _]` if it is not there (or there
    /// is no index yet).
    #[inline(always)]
    fn entry(&self, line: u64) -> [u64; 2] {
        self.table.as_ref().map_or([0, 0], |t| t[Self::find(t, self.bucket(line), line)])
    }

    /// The bytes of a stored line from its (non-empty) bucket.
    #[inline(always)]
    fn entry_bytes(&self, e: [u64; 2]) -> [u8; 64] {
        if e[0] & INLINE == 0 {
            return *self.slab(e[1]);
        }
        let mut bytes = [0; 64];
        let w = (e[0] >> WORD_SHIFT & 7) as usize;
        bytes[8 * w..8 * w + 8].copy_from_slice(&e[1].to_ne_bytes());
        bytes
    }

    /// The bytes at `line`, if it was ever written.
    #[inline]
    pub fn get_opt(&self, line: u64) -> Option<[u8; 64]> {
        if let Some((d, i)) = self.dense_slot(line) {
            let r = &self.dense[d];
            return r.has(i).then(|| r.lines[i]);
        }
        let e = self.entry(line);
        (e[0] != 0).then(|| self.entry_bytes(e))
    }

    /// The bytes at `line` (zeros if it was never written).
    #[inline]
    pub fn get(&self, line: u64) -> [u8; 64] {
        if let Some((d, i)) = self.dense_slot(line) {
            // An absent dense line is zeros in place: no need to read its presence bit.
            return self.dense[d].lines[i];
        }
        self.get_opt(line).unwrap_or([0; 64])
    }

    pub fn contains(&self, line: u64) -> bool { self.get_opt(line).is_some() }

    /// Writes `bytes` at `line`.
    ///
    /// # Panics
    /// If `line` is 2^56 - 1 or more (no device has that many lines).
    #[inline]
    pub fn put(&mut self, line: u64, bytes: [u8; 64]) {
        assert!(line < KEY_MASK, "device line number out of range");
        if let Some((d, i)) = self.dense_slot(line) {
            let r = &mut self.dense[d];
            if !r.has(i) {
                r.present[i / 64] |= 1 << (i % 64);
                self.dense_len += 1;
            }
            r.lines[i] = bytes;
            r.memo[i] = NO_MEMO;
            return;
        }
        if (self.len + 1) * 4 > self.table.as_ref().map_or(0, |t| t.len()) * 3 {
            self.grow();
        }
        let b = self.bucket(line);
        let table = self.table.as_mut().expect("grown above");
        let b = Self::find(table, b, line);
        let key = table[b][0];
        if key == 0 {
            self.len += 1;
            // (At exactly 5/8: once per table size.)
            if self.len * 8 == table.len() * 5 && self.prefault.is_some() {
                self.prefault_index_growth();
            }
        }
        let table = self.table.as_mut().expect("grown above");
        let loc = if key != 0 && key & INLINE == 0 {
            table[b][1]
        } else if let Some((w, v)) = sparse_word(&bytes) {
            // New or already inline, and still sparse: the bucket is the whole line.
            table[b] = [(line + 1) | INLINE | w << WORD_SHIFT, v];
            return;
        } else {
            // New, or inline until now: a slab slot, the line's from now on.
            if self.chunks.last().is_none_or(|c| self.fill == c.len()) {
                let chunk = self.next_chunk.take().unwrap_or_else(|| new_chunk(chunk_lines(self.chunks.len())));
                self.chunks.push(chunk);
                self.fill = 0;
            }
            let loc = ((self.chunks.len() as u64 - 1) << 32) | self.fill as u64;
            self.fill += 1;
            table[b] = [line + 1, loc];
            // (Only the largest chunks, 8 MiB, are mappings of their own that can be
            // committed ahead; smaller ones come from the allocator.)
            if self.fill * 2 == self.chunks.last().map_or(0, |c| c.len())
                && self.prefault.is_some()
                && chunk_lines(self.chunks.len()) == 1 << MAX_CHUNK_SHIFT
            {
                self.prefault_next_chunk();
            }
            loc
        };
        self.chunks[(loc >> 32) as usize][loc as u32 as usize] = bytes;
    }

    /// The bytes at `line` if it was ever written, and its hash memo under `tag` (0 if there
    /// is none). Absent lines are told apart from stored zeros: an absent counter block holds
    /// its boot content, which is not zeros under random initial counters.
    #[inline]
    pub fn get_opt_with_memo(&self, line: u64, tag: &MemoTag) -> (Option<[u8; 64]>, u64) {
        if let Some((d, i)) = self.dense_slot(line) {
            let r = &self.dense[d];
            let word = r.memo[i];
            if word == 0 {
                return (None, 0);
            }
            let memo = if word != NO_MEMO && self.memo_tag.as_ref() == Some(tag) { word } else { 0 };
            return (Some(r.lines[i]), memo);
        }
        (self.get_opt(line), 0)
    }

    /// Records `memo` (non-zero), computed under `tag` from `bytes`, as the hash memo of
    /// `line` — only if `line` is a stored line of a dense range holding exactly `bytes`
    /// (otherwise nothing is recorded). Memos under an earlier, different tag are dropped.
    pub fn set_memo(&mut self, line: u64, tag: &MemoTag, bytes: &[u8; 64], memo: u64) {
        let Some((d, i)) = self.dense_slot(line) else { return };
        // (0 is not a memo: in the memo word it would mark the line absent.)
        if memo == 0 || !self.dense[d].has(i) || !same_line(&self.dense[d].lines[i], bytes) {
            return;
        }
        if self.memo_tag.as_ref() != Some(tag) {
            if self.memo_tag.is_some() {
                for r in &mut self.dense {
                    let positions: Vec<usize> = r.positions().collect();
                    for p in positions {
                        r.memo[p] = NO_MEMO;
                    }
                }
            }
            self.memo_tag = Some(*tag);
        }
        // (A memo equal to NO_MEMO is not recorded: the line keeps no memo.)
        self.dense[d].memo[i] = memo;
    }

    /// Makes the next slab chunk now and has the prefault thread commit it, if it is a
    /// mapping of its own (`put` asks only for the largest chunks, which are). Kept either
    /// way: the next `put` that needs a chunk takes it.
    #[cold]
    fn prefault_next_chunk(&mut self) {
        let chunk = new_chunk(chunk_lines(self.chunks.len()));
        if let (Some(p), Some((start, bytes))) = (self.prefault.as_mut(), chunk.address_range(0, chunk.len())) {
            // SAFETY: the chunk is this image's until it drops, and then it is retired to the
            // prefaulter (Drop), not unmapped.
            unsafe { p.populate(start, bytes) };
        }
        self.next_chunk = Some(chunk);
    }

    /// Has the prefault thread commit the room the index will double into in place (see
    /// [`grow`](Self::grow)), if it has that room.
    #[cold]
    fn prefault_index_growth(&mut self) {
        let (Some(p), Some(t)) = (self.prefault.as_mut(), self.table.as_ref()) else { return };
        if let Some((start, bytes)) = t.address_range(t.len(), 2 * t.len()) {
            // SAFETY: the table's mapping is retired to the prefaulter, never simply dropped,
            // whether it is replaced (`replace_table`) or the image drops.
            unsafe { p.populate(start, bytes) };
        }
    }

    /// Installs a new index table; the old one's memory goes to the prefault thread, if there
    /// is one, which may still be committing part of it.
    fn replace_table(&mut self, table: ZeroedSlice<[u64; 2]>) {
        if let Some(old) = self.table.replace(table) {
            match self.prefault.as_mut() {
                Some(p) => p.retire(Box::new(old)),
                None => drop(old),
            }
        }
    }

    /// Doubles the index (or creates it), re-placing every entry; the slab does not move.
    #[cold]
    fn grow(&mut self) {
        let buckets = self.table.as_ref().map_or(MIN_BUCKETS, |t| t.len() * 2);
        let shift = 64 - buckets.trailing_zeros();
        if let Some(t) = self.table.as_mut() {
            let old = t.len();
            if t.grow_in_place(buckets) {
                Self::rehash_in_place(t, old, shift, self.homes);
                self.shift = shift;
                return;
            }
        }
        let mut table = new_table(buckets);
        if let Some(old) = self.table.as_ref() {
            for e in old.iter().filter(|e| e[0] != 0) {
                let l = line_of_key(e[0]);
                let b = Self::find(&table, home(self.homes, shift, l), l);
                table[b] = *e;
            }
        }
        self.replace_table(table);
        self.shift = shift;
    }

    /// Re-places the entries of a table of `old` buckets, just doubled in place to
    /// `table.len() == 2 * old` (the new half empty), for the doubled table's `shift`.
    ///
    /// With Fibonacci hashing a line's bucket is the top bits of its hash, so its new home is
    /// twice its old one, or one more: the entries move up, about twice as far as they are
    /// from the table's start. Sweeping down from the last old bucket, each entry is taken
    /// out and placed at the first empty bucket from its new home on, without wrapping. When
    /// that home lies above the entry's old bucket, every bucket from the home up holds only
    /// entries already placed (the ones not yet moved all sit below), so the entry lands
    /// where an insertion into the new table would put it, and no bucket emptied later lies
    /// inside a placed entry's probe run. The few entries this does not hold for (a home at
    /// or below the old bucket, which only probe runs near the start or wrapped around the
    /// end give, or a probe reaching the end) wait in a list and are inserted as usual once
    /// the sweep is done.
    fn rehash_in_place(table: &mut [[u64; 2]], old: usize, shift: u32, homes: Option<SharedHomes>) {
        debug_assert_eq!(table.len(), 2 * old);
        let new_home = |key: u64| home(homes, shift, line_of_key(key));
        let mut later = Vec::new();
        for p in (0..old).rev() {
            let e = table[p];
            if e[0] == 0 {
                continue;
            }
            table[p] = [0, 0];
            let h = new_home(e[0]);
            if h <= p {
                later.push(e);
                continue;
            }
            match (h..table.len()).find(|&q| table[q][0] == 0) {
                Some(q) => table[q] = e,
                None => later.push(e),
            }
        }
        for e in later {
            let b = Self::find(table, new_home(e[0]), line_of_key(e[0]));
            table[b] = e;
        }
    }

    pub fn len(&self) -> usize { self.len + self.dense_len }
    pub fn is_empty(&self) -> bool { self.len() == 0 }

    /// Device line numbers present in `[first, end)`, sorted.
    pub fn lines_in(&self, first: u64, end: u64) -> Vec<u64> {
        let dense = self.dense.iter().flat_map(|r| r.positions().map(move |i| r.first + i as u64));
        let table = self.table.iter().flat_map(|t| t.iter()).filter(|e| e[0] != 0).map(|e| line_of_key(e[0]));
        let mut v: Vec<u64> = table.chain(dense).filter(|&l| l >= first && l < end).collect();
        v.sort_unstable();
        v
    }

    /// Every stored line and its bytes, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, [u8; 64])> + '_ {
        let dense = self.dense.iter().flat_map(|r| r.positions().map(move |i| (r.first + i as u64, r.lines[i])));
        let table = self.table.iter().flat_map(|t| t.iter());
        table.filter(|e| e[0] != 0).map(|e| (line_of_key(e[0]), self.entry_bytes(*e))).chain(dense)
    }

    /// Hints the host CPU to fetch what a lookup of `line` reads first (first look-ahead
    /// stage): in a dense range the line and its memo word; else the host line of its index
    /// bucket and the one after, where a probe run goes on. Changes nothing.
    #[inline]
    pub fn prefetch_index(&self, line: u64) {
        #[cfg(target_arch = "x86_64")]
        if let Some((d, i)) = self.dense_slot(line) {
            // No index: the line itself and its memo word, which also says whether it is
            // stored (the presence bitmap is only written by a first put, not read here).
            // SAFETY: `i` is in bounds; a prefetch has no effect on program state.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch(self.dense[d].lines.as_ptr().add(i) as *const i8, _MM_HINT_T0);
                _mm_prefetch(self.dense[d].memo.as_ptr().add(i) as *const i8, _MM_HINT_T0);
            }
        } else if let Some(t) = self.table.as_ref() {
            // The home bucket's host line and the next: a lookup of a line not stored probes
            // to the first empty bucket, and at a load near 3/4 that run is 8 buckets long on
            // average, past the home line.
            let b = self.bucket(line);
            let next = (b | 3).wrapping_add(1) & (t.len() - 1);
            // SAFETY: `b` and `next` are in bounds; a prefetch has no effect on program state.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch(t.as_ptr().add(b) as *const i8, _MM_HINT_T0);
                _mm_prefetch(t.as_ptr().add(next) as *const i8, _MM_HINT_T0);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }

    /// Hints the host CPU to fetch the bytes of `line` if it is stored (second look-ahead
    /// stage: reads the index, which [`prefetch_index`](Self::prefetch_index) brought in).
    /// Changes nothing.
    #[inline]
    pub fn prefetch_bytes(&self, line: u64) {
        #[cfg(target_arch = "x86_64")]
        if self.dense_slot(line).is_some() {
            // Prefetched by `prefetch_index` already.
        } else {
            let e = self.entry(line);
            // An inline line's bytes are in the bucket just read.
            if e[0] != 0 && e[0] & INLINE == 0 {
                // SAFETY: a prefetch has no effect on program state.
                unsafe {
                    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                    _mm_prefetch(self.slab(e[1]).as_ptr() as *const i8, _MM_HINT_T0);
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }
}

impl Clone for NvmImage {
    fn clone(&self) -> NvmImage {
        let table = self.table.as_ref().map(|t| {
            let mut c = new_table(t.len());
            c.copy_from_slice(t);
            c
        });
        let n = self.chunks.len();
        let chunks = self
            .chunks
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut d = new_chunk(c.len());
                // Only the used part: the rest is still zero (and uncommitted).
                let used = if i + 1 == n { self.fill } else { c.len() };
                d[..used].copy_from_slice(&c[..used]);
                d
            })
            .collect();
        NvmImage {
            dense: self.dense.clone(),
            dense_len: self.dense_len,
            memo_tag: self.memo_tag,
            homes: self.homes,
            table,
            shift: self.shift,
            len: self.len,
            chunks,
            fill: self.fill,
            prefault: None,
            next_chunk: None,
        }
    }
}

impl Drop for NvmImage {
    /// Memory the prefault thread may still be committing is handed to it to drop.
    fn drop(&mut self) {
        if let Some(mut p) = self.prefault.take() {
            p.cancel();
            let memory = (std::mem::take(&mut self.chunks), self.table.take(), self.next_chunk.take());
            p.retire(Box::new(memory));
        }
    }
}

impl std::fmt::Debug for NvmImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmImage").field("lines", &self.len()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secmem_core::counters::InitialCounters;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn line_bytes(line: u64, v: u8) -> [u8; 64] { std::array::from_fn(|i| (line as u8) ^ v ^ i as u8) }

    /// Bytes of one of three shapes: every word non-zero (`shape` 0), all zeros (1), or one
    /// non-zero word, at position `v % 8` (2): the last two are stored inline.
    fn shaped_bytes(line: u64, v: u8, shape: u8) -> [u8; 64] {
        match shape % 3 {
            0 => line_bytes(line, v),
            1 => [0; 64],
            _ => {
                let mut b = [0; 64];
                let w = (v % 8) as usize;
                b[8 * w..8 * w + 8].copy_from_slice(&(line << 8 | v as u64 | 1).to_le_bytes());
                b
            }
        }
    }

    #[test]
    fn the_sparse_word_is_the_only_non_zero_word_or_none() {
        assert_eq!(sparse_word(&[0; 64]), Some((0, 0)));
        for w in 0..8 {
            for byte in 0..8 {
                let mut b = [0u8; 64];
                b[8 * w + byte] = 0x5a;
                let v = u64::from_ne_bytes(b[8 * w..8 * w + 8].try_into().unwrap());
                assert_eq!(sparse_word(&b), Some((w as u64, v)), "word {w} byte {byte}");
                for other in (0..64).filter(|&o| o / 8 != w) {
                    let mut two = b;
                    two[other] = 1;
                    assert_eq!(sparse_word(&two), None, "words {w} and {}", other / 8);
                }
            }
        }
    }

    #[test]
    fn a_sparse_line_takes_no_slab_slot_until_it_has_a_second_non_zero_word() {
        let mut img = NvmImage::default().with_shared_homes(SharedHomes { data_lines: 1 << 20, group_shift: 3, group_first: 1 << 20 });
        let mac_block = (1 << 20) + 5;
        let mut one = [0u8; 64];
        one[24..32].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        img.put(mac_block, one);
        img.put(7, [0; 64]);
        assert!(img.chunks.is_empty(), "inline lines use no slab");
        assert_eq!((img.get_opt(mac_block), img.get_opt(7), img.len()), (Some(one), Some([0; 64]), 2));
        img.prefetch_bytes(mac_block);
        let mut two = one;
        two[63] = 1;
        img.put(mac_block, two);
        assert_eq!((img.get(mac_block), img.fill), (two, 1), "a second word moves the line to a slab slot");
        img.put(mac_block, one);
        assert_eq!((img.get(mac_block), img.fill, img.len()), (one, 1, 2), "sparse again: the line keeps its slot");
        let mut listed: Vec<(u64, [u8; 64])> = img.clone().iter().collect();
        listed.sort_unstable_by_key(|x| x.0);
        assert_eq!(listed, [(7, [0; 64]), (mac_block, one)]);
        assert_eq!(img.lines_in(0, u64::MAX), [7, mac_block]);
    }

    #[test]
    fn lines_differing_in_any_one_byte_are_not_the_same() {
        let a = line_bytes(7, 3);
        assert!(same_line(&a, &a.clone()));
        for i in 0..64 {
            let mut b = a;
            b[i] ^= 0x80;
            assert!(!same_line(&a, &b), "byte {i}");
        }
    }

    #[test]
    fn absent_lines_read_as_zeros_and_are_not_listed() {
        for mut img in [NvmImage::default(), NvmImage::with_dense_ranges(&[(0, 6)]), NvmImage::with_dense_ranges(&[(5, 6)])] {
        assert_eq!(img.get(5), [0; 64]);
        assert!(img.get_opt(5).is_none() && img.is_empty());
        img.put(5, [0; 64]);
        assert!(img.contains(5), "a written all-zero line is stored");
        assert!(!img.contains(6) && !img.contains(4));
        assert_eq!(img.len(), 1);
        img.prefetch_index(7);
        img.prefetch_bytes(5);
        img.prefetch_index(5);
        }
    }

    #[test]
    fn a_memo_holds_only_for_the_bytes_it_was_set_for_under_its_tag() {
        let tag = MemoTag { key_id: 1, data_bytes: 4096, arity: 8, mac_bits: 64, counter_init: InitialCounters::Zero };
        let other = MemoTag { key_id: 2, ..tag };
        let random_init = MemoTag { counter_init: InitialCounters::Random { seed: 1 }, ..tag };
        let mut img = NvmImage::with_dense_ranges(&[(10, 20)]);
        let (a, b) = ([1u8; 64], [2u8; 64]);
        img.set_memo(11, &tag, &a, 7);
        assert_eq!(img.get_opt_with_memo(11, &tag), (None, 0), "absent line: no bytes, no memo");
        img.put(11, a);
        img.set_memo(11, &tag, &b, 7);
        assert_eq!(img.get_opt_with_memo(11, &tag), (Some(a), 0), "other bytes: no memo");
        img.set_memo(11, &tag, &a, 7);
        assert_eq!(img.get_opt_with_memo(11, &tag), (Some(a), 7));
        assert_eq!(img.get_opt_with_memo(11, &other), (Some(a), 0), "other tag: no memo");
        let copy = img.clone();
        assert_eq!(copy.get_opt_with_memo(11, &tag), (Some(a), 7), "a clone keeps memos");
        assert_eq!(img.get_opt_with_memo(11, &random_init), (Some(a), 0), "other boot counters: no memo");
        img.put(11, a);
        assert_eq!(img.get_opt_with_memo(11, &tag), (Some(a), 0), "any write clears the memo");
        img.set_memo(11, &tag, &a, 7);
        img.put(12, b);
        img.set_memo(12, &other, &b, 9);
        assert_eq!(img.get_opt_with_memo(11, &other), (Some(a), 0), "a new tag drops the old memos");
        assert_eq!(img.get_opt_with_memo(12, &other), (Some(b), 9));
        // Outside dense ranges nothing is memoised.
        img.put(30, a);
        img.set_memo(30, &other, &a, 5);
        assert_eq!(img.get_opt_with_memo(30, &other), (Some(a), 0));
    }

    #[test]
    fn a_dense_line_is_stored_whatever_its_memo_word_holds_and_absent_only_until_its_first_put() {
        // The memo word tells whether a dense line is stored: no memo, a memo dropped by a new
        // tag, a memo that would read as "no memo" and a zero memo must all leave a stored
        // line stored, zeros included, and in the list of stored lines.
        let tag = MemoTag { key_id: 1, data_bytes: 4096, arity: 8, mac_bits: 64, counter_init: InitialCounters::Zero };
        let other = MemoTag { key_id: 2, ..tag };
        let mut img = NvmImage::with_dense_ranges(&[(10, 20)]);
        let zeros = [0u8; 64];
        assert_eq!((img.get_opt(13), img.len()), (None, 0));
        img.put(13, zeros);
        assert_eq!(img.get_opt_with_memo(13, &tag), (Some(zeros), 0), "stored zeros, no memo");
        img.set_memo(13, &tag, &zeros, 0);
        img.set_memo(13, &tag, &zeros, NO_MEMO);
        assert_eq!(img.get_opt_with_memo(13, &tag), (Some(zeros), 0), "0 and NO_MEMO are not memos");
        img.set_memo(13, &tag, &zeros, 5);
        img.put(14, [3; 64]);
        img.set_memo(14, &other, &[3; 64], 6);
        assert_eq!(img.get_opt_with_memo(13, &other), (Some(zeros), 0), "memo dropped, line kept");
        assert_eq!(img.get_opt_with_memo(13, &tag), (Some(zeros), 0));
        img.put(13, zeros);
        assert_eq!((img.len(), img.lines_in(10, 20)), (2, vec![13, 14]));
        assert_eq!(img.get_opt(15), None);
    }

    #[test]
    fn an_image_holding_lines_is_not_empty_and_shows_how_many() {
        let mut img = NvmImage::default();
        img.put(3, [0; 64]);
        img.put(300, [1; 64]);
        assert!(!img.is_empty());
        assert_eq!(format!("{img:?}"), "NvmImage { lines: 2, .. }");
        let mut dense = NvmImage::with_dense_ranges(&[(0, 8)]);
        dense.put(3, [0; 64]);
        assert!(!dense.is_empty(), "a dense line counts");
        dense.put(100, [1; 64]);
        assert_eq!(format!("{dense:?}"), "NvmImage { lines: 2, .. }", "dense and indexed lines both counted");
    }

    #[test]
    fn the_slab_grows_from_a_64_kib_chunk_by_doubling_up_to_8_mib_chunks() {
        let bytes = |c| chunk_lines(c) * 64;
        assert_eq!([bytes(0), bytes(1), bytes(6), bytes(7), bytes(100)], [64 << 10, 128 << 10, 4 << 20, 8 << 20, 8 << 20]);
        let mut img = NvmImage::default();
        img.put(3, [1; 64]);
        assert_eq!(img.chunks.iter().map(|c| c.len()).collect::<Vec<_>>(), [1024], "a small image holds one small chunk");
    }

    #[test]
    fn the_index_doubles_when_the_next_line_would_fill_it_past_three_quarters() {
        let buckets = |img: &NvmImage| img.table.as_ref().map_or(0, |t| t.len());
        let mut img = NvmImage::default();
        assert_eq!(buckets(&img), 0, "no index before the first line");
        for line in 0..768 {
            img.put(line, [1; 64]);
        }
        assert_eq!(buckets(&img), 1024, "768 lines fill 1024 buckets to exactly 3/4");
        img.put(768, [1; 64]);
        assert_eq!(buckets(&img), 2048);
        img.put(5, [2; 64]);
        assert_eq!((buckets(&img), img.len()), (2048, 769), "an overwrite adds no line");
    }

    #[test]
    fn growing_the_index_keeps_a_line_whose_probe_run_passes_the_bucket_of_the_line_two_above() {
        // Buckets of a line in a table of `n` buckets; the index grows from 1024 to 2048 buckets
        // when the 769th line is put.
        let home = |line: u64, n: u64| (line + 1).wrapping_mul(HASH_MUL) >> (64 - n.trailing_zeros());
        // A line x near the start of the first table, and the lines whose buckets in the doubled
        // table lie from x's to a little past x + 2's: put first, they fill that stretch of the
        // doubled table before x is re-placed (x, put after them, sits at the end of their run).
        let x = (1u64 << 20..).find(|&l| home(l, 1024) < 16).unwrap();
        let ahead = |l: u64| (home(l, 2048) + 2048 - home(x, 2048)) % 2048;
        let d = ahead(x + 2);
        assert!(d < 600, "x + 2's bucket is {d} past x's");
        let run: Vec<u64> = (1u64 << 30..).filter(|&l| ahead(l) <= d + 8).take(d as usize + 32).collect();
        let mut lines = run.clone();
        lines.extend([x + 2, x]);
        lines.extend((1u64 << 40..).filter(|&l| (600..1000).contains(&home(l, 1024))).take(769 - lines.len()));
        let mut img = NvmImage::default();
        for &l in &lines {
            img.put(l, line_bytes(l, 5));
        }
        let table = img.table.as_ref().unwrap();
        assert_eq!(table.len(), 2048);
        let at = |l: u64| (table.iter().position(|e| e[0] == l + 1).unwrap() as u64 + 2048 - home(x, 2048)) % 2048;
        assert!(at(x) > at(x + 2), "x's probe run passed x + 2's bucket");
        for &l in &lines {
            assert_eq!(img.get_opt(l), Some(line_bytes(l, 5)), "line {l}");
        }
        assert_eq!(img.len(), 769);
    }

    #[test]
    fn an_index_of_reserved_size_doubles_in_place_and_keeps_every_line() {
        let mut img = NvmImage::default();
        let mut lines = (0u64..).map(|i| i.wrapping_mul(0x9E37_79B9) % (1 << 36));
        // Until the index first has RESERVE_MIN_BUCKETS buckets.
        while img.table.as_ref().map_or(0, |t| t.len()) < RESERVE_MIN_BUCKETS {
            let l = lines.next().unwrap();
            img.put(l, line_bytes(l, 1));
        }
        let table = img.table.as_ref().unwrap();
        if table.capacity() == table.len() {
            return; // the OS refused the reservation: the index grows by copying, as before
        }
        let at = table.as_ptr();
        // Two more doublings, both in place.
        while img.table.as_ref().unwrap().len() < 4 * RESERVE_MIN_BUCKETS {
            let l = lines.next().unwrap();
            img.put(l, line_bytes(l, 1));
        }
        assert_eq!(img.table.as_ref().unwrap().as_ptr(), at, "the table did not move");
        let n = img.len() as u64;
        let mut all = (0u64..).map(|i| i.wrapping_mul(0x9E37_79B9) % (1 << 36));
        for l in all.by_ref().take(n as usize) {
            assert_eq!(img.get_opt(l), Some(line_bytes(l, 1)), "line {l}");
        }
        assert_eq!(img.get_opt(all.next().unwrap()), None);
    }

    #[test]
    fn an_image_whose_growth_is_prefaulted_keeps_every_line_and_its_clone_has_no_thread() {
        // Enough lines for the largest slab chunks (of their own mapping, prefaulted half a
        // chunk ahead) and for an index of reserved size to double in place after its room
        // was prefaulted at 5/8.
        let n = 3 * (1u64 << MAX_CHUNK_SHIFT);
        let lines = |n: u64| (0..n).map(|i| i.wrapping_mul(0x9E37_79B9) % (1 << 36));
        let mut img = NvmImage::default().with_prefault();
        for l in lines(n) {
            img.put(l, line_bytes(l, 3));
        }
        // One sparse (inline) line and an overwrite, for good measure.
        img.put(1 << 37, [0; 64]);
        img.put(5 * 0x9E37_79B9 % (1 << 36), line_bytes(7, 7));
        if cfg!(target_os = "linux") {
            assert!(img.prefault_started(), "chunks of their own mapping were made ahead");
            assert!(img.next_chunk.is_some() || img.fill * 2 < img.chunks.last().unwrap().len());
        }
        let copy = img.clone();
        assert!(!copy.prefault_started() && copy.prefault.is_none());
        for (i, l) in lines(n).enumerate() {
            let want = if i == 5 { line_bytes(7, 7) } else { line_bytes(l, 3) };
            assert_eq!(img.get_opt(l), Some(want), "line {l}");
            assert_eq!(copy.get_opt(l), Some(want), "copied line {l}");
        }
        assert_eq!(img.get_opt(1 << 37), Some([0; 64]));
        assert_eq!((img.len(), copy.len()), (n as usize + 1, n as usize + 1));
        // Its memory goes to the thread to drop, after what it was still committing.
        drop(img);
    }

    #[test]
    fn rehashing_in_place_keeps_a_deferred_line_whose_probe_run_passes_the_bucket_of_the_line_two_above() {
        // The in-place counterpart of the test above, for the entries the sweep defers: x sits in
        // old bucket 0 with new home 0 (not above its bucket), so it is inserted after the sweep,
        // when the lines homed from 0 to a little past x + 2's new home have filled that stretch.
        // x's probe run then passes x + 2's bucket, and must not take it for x's own.
        let (old, new) = (1024usize, 2048usize);
        let home_in = |line: u64, n: usize| home(None, 64 - n.trailing_zeros(), line);
        let x = (1u64 << 20..).find(|&l| home_in(l, new) == 0).unwrap();
        let d = home_in(x + 2, new);
        assert!(d < 600, "x + 2's new home is {d}");
        let run: Vec<u64> = (1u64 << 30..).filter(|&l| home_in(l, new) <= d + 8).take(d + 32).collect();
        let mut lines = vec![x];
        lines.extend(&run);
        lines.push(x + 2);
        let mut table = vec![[0u64; 2]; old];
        for (i, &l) in lines.iter().enumerate() {
            let b = NvmImage::find(&table, home_in(l, old), l);
            table[b] = [l + 1, i as u64];
        }
        assert_eq!(table[0][0], x + 1, "x sits in old bucket 0");
        table.resize(new, [0, 0]);
        NvmImage::rehash_in_place(&mut table, old, 64 - new.trailing_zeros(), None);
        let at = |l: u64| table.iter().position(|e| e[0] == l + 1);
        assert!(at(x).unwrap() > at(x + 2).unwrap(), "x's probe run passed x + 2's bucket");
        for (i, &l) in lines.iter().enumerate() {
            assert_eq!(table[NvmImage::find(&table, home_in(l, new), l)], [l + 1, i as u64], "line {l}");
        }
    }

    #[test]
    fn a_table_that_outgrows_its_reservation_moves_to_one_four_times_its_size() {
        // Tables from RESERVE_MIN_BUCKETS on get room for RESERVE_BUCKETS; one that has grown to
        // fill that (about 200 M lines) gets room for four times its size, so it can double in
        // place twice more. Only address space: nothing here is written, so nothing is committed.
        let t = new_table(RESERVE_MIN_BUCKETS);
        if t.capacity() == t.len() {
            return; // the OS refused the reservation: tables grow by copying
        }
        assert_eq!(t.capacity(), RESERVE_BUCKETS);
        assert_eq!(new_table(RESERVE_BUCKETS / 4).capacity(), RESERVE_BUCKETS);
        let big = new_table(RESERVE_BUCKETS);
        assert_eq!((big.len(), big.capacity()), (RESERVE_BUCKETS, 4 * RESERVE_BUCKETS));
    }

    #[test]
    fn a_data_line_and_its_group_line_share_a_home_and_other_lines_keep_their_own() {
        let homes = SharedHomes { data_lines: 1 << 20, group_shift: 3, group_first: 1 << 21 };
        let plain = |l: u64| home(None, 40, l);
        let shared = |l: u64| home(Some(homes), 40, l);
        for g in [0u64, 1, 12_345, (1 << 17) - 1] {
            let group_line = (1 << 21) + g;
            assert_eq!(shared(group_line), plain(group_line), "a group's own line keeps its home");
            for l in 8 * g..8 * g + 8 {
                assert_eq!(shared(l), shared(group_line), "data line {l}");
            }
        }
        assert_ne!(shared(7), shared(8), "lines of neighbouring groups");
        assert_eq!(shared(1 << 20), plain(1 << 20), "the first line past the data");
        assert_eq!(shared(5 << 30), plain(5 << 30));
    }

    #[test]
    fn an_image_with_shared_homes_keeps_every_line_through_growth_by_copy_and_in_place() {
        // Data lines in runs of consecutive groups (long probe runs) and their group lines,
        // from an empty table through copying doublings and past RESERVE_MIN_BUCKETS, where
        // the table doubles in place.
        let homes = SharedHomes { data_lines: 1 << 30, group_shift: 3, group_first: 1 << 31 };
        let mut img = NvmImage::default().with_shared_homes(homes);
        let mut reference = BTreeMap::new();
        let n = RESERVE_MIN_BUCKETS as u64;
        for i in 0..n {
            let line = if i % 4 == 3 { (1 << 31) + (i / 4) * 3 } else { (i / 4) * 24 + (i % 4) * 5 };
            img.put(line, line_bytes(line, i as u8));
            reference.insert(line, line_bytes(line, i as u8));
        }
        assert!(img.table.as_ref().unwrap().len() > RESERVE_MIN_BUCKETS);
        for (l, b) in &reference {
            assert_eq!(img.get_opt(*l), Some(*b), "line {l}");
        }
        assert_eq!(img.get_opt(1), None);
        let copy = img.clone();
        assert_eq!(copy.len(), reference.len());
        assert_eq!(copy.get_opt((1 << 31) + 3), reference.get(&((1 << 31) + 3)).copied());
    }

    #[test]
    #[should_panic(expected = "overlap")]
    fn overlapping_dense_ranges_are_rejected() {
        NvmImage::with_dense_ranges(&[(10, 20), (0, 11)]);
    }

    #[test]
    fn many_lines_across_growth_and_chunks_match_a_reference_map_and_clone() {
        let mut img = NvmImage::default();
        let mut reference = BTreeMap::new();
        // Past several index doublings and into the fixed-size chunks; overwrites included.
        let n = (1u64 << MAX_CHUNK_SHIFT) * 2 + 12_345;
        for i in 0..n {
            let line = i.wrapping_mul(0x2545_F491) % (n * 3) + (i & 1) * (1 << 40);
            let b = line_bytes(line, i as u8);
            img.put(line, b);
            reference.insert(line, b);
        }
        assert_eq!(img.len(), reference.len());
        let copy = img.clone();
        img.put(0xdead, [9; 64]);
        for (l, b) in &reference {
            assert_eq!(img.get_opt(*l), Some(*b));
            assert_eq!(copy.get_opt(*l), Some(*b));
        }
        assert_eq!(copy.get_opt(0xdead), reference.get(&0xdead).copied(), "the clone is independent");
        let mut listed: Vec<(u64, [u8; 64])> = copy.iter().collect();
        listed.sort_unstable_by_key(|x| x.0);
        assert_eq!(listed, reference.into_iter().collect::<Vec<_>>());
    }

    proptest! {
        /// Small crowded tables, where probe runs from the table's start and runs wrapping
        /// around its end (the cases the in-place sweep defers) are common.
        #[test]
        fn rehashing_in_place_leaves_every_line_reachable_from_its_new_bucket(
            wide in proptest::collection::hash_set(1u64..KEY_MASK, 0..48),
            narrow in proptest::collection::hash_set(1u64..200, 0..48),
            old_shift in 3u32..7,
            shared: bool,
        ) {
            // With shared homes, keys from a narrow range: groups of up to 8 lines plus their
            // group's line share a home, and make long runs.
            let homes = shared.then_some(SharedHomes { data_lines: 128, group_shift: 3, group_first: 150 });
            let old = 1usize << old_shift;
            let keys: Vec<u64> = if shared { narrow } else { wide }.into_iter().take(old * 3 / 4).collect();
            let mut table = vec![[0u64; 2]; old];
            let home_in = |k: u64, n: usize| home(homes, 64 - n.trailing_zeros(), k - 1);
            // Every third entry flagged as an inline line (its word position is `i % 8`): the
            // flags must not move it.
            let flags = |i: usize| if i.is_multiple_of(3) { INLINE | (i as u64 % 8) << WORD_SHIFT } else { 0 };
            for (i, &k) in keys.iter().enumerate() {
                let b = NvmImage::find(&table, home_in(k, old), k - 1);
                table[b] = [k | flags(i), i as u64];
            }
            table.resize(2 * old, [0, 0]);
            NvmImage::rehash_in_place(&mut table, old, 64 - (2 * old).trailing_zeros(), homes);
            prop_assert_eq!(table.iter().filter(|e| e[0] != 0).count(), keys.len());
            for (i, &k) in keys.iter().enumerate() {
                let b = NvmImage::find(&table, home_in(k, 2 * old), k - 1);
                prop_assert_eq!(table[b], [k | flags(i), i as u64], "key {:#x}", k);
                // No empty bucket between its home and where it sits.
                let mut q = home_in(k, 2 * old);
                while q != b {
                    prop_assert!(table[q][0] != 0, "hole at {} before key {:#x}", q, k);
                    q = (q + 1) % (2 * old);
                }
            }
        }

        #[test]
        fn behaves_like_a_map(
            ops in proptest::collection::vec((0u64..3000, any::<u8>(), any::<u8>()), 0..3000),
            lo in 0u64..3000, span in 0u64..3000, dense: bool, shared: bool,
        ) {
            // With dense ranges, lines inside, outside and on both sides of their edges; with
            // shared homes, groups of 8 data lines below 1200 and their lines from 2000 on.
            let mut img = if dense { NvmImage::with_dense_ranges(&[(1500, 1601), (100, 700)]) } else { NvmImage::default() };
            if shared {
                img = img.with_shared_homes(SharedHomes { data_lines: 1200, group_shift: 3, group_first: 2000 });
            }
            let mut reference = BTreeMap::new();
            // Lines of all three shapes, so that lines go inline, move to the slab, and are
            // overwritten in every order.
            for (line, v, shape) in ops {
                img.put(line, shaped_bytes(line, v, shape));
                reference.insert(line, shaped_bytes(line, v, shape));
            }
            for l in 0..3000 {
                prop_assert_eq!(img.get(l), reference.get(&l).copied().unwrap_or([0; 64]));
            }
            let want: Vec<u64> = reference.range(lo..lo + span).map(|(l, _)| *l).collect();
            prop_assert_eq!(img.lines_in(lo, lo + span), want);
            prop_assert_eq!(img.len(), reference.len());
            let copy = img.clone();
            let mut listed: Vec<(u64, [u8; 64])> = copy.iter().collect();
            listed.sort_unstable_by_key(|x| x.0);
            prop_assert_eq!(listed, reference.into_iter().collect::<Vec<_>>());
        }
    }
}
