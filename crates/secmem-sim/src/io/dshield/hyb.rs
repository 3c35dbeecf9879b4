//! D-Shield-Hyb (section VI, Figs. 10 and 11): data read from the drive stays in the storage
//! protection domain in memory, so it is not decrypted and re-encrypted as it crosses.
//!
//! * **Protection-domain vectors.** Each memory page's counter block holds a 64-bit PD vector,
//!   a bit per line (the block keeps its size: its minors shrink to 6 bits). A set bit says
//!   the line holds the drive's ciphertext, to be checked and decrypted with the storage
//!   metadata when the processor reads it. The counter block's traffic is the memory
//!   controller's own (the host's `LineDomain`); the bits are kept here.
//! * **Page frame to logic block table.** For each 512 B chunk of memory in the storage domain,
//!   the drive sector it came from: where its storage metadata is.
//! * **Reads** DMA the drive's ciphertext into memory as it is (PD bits set), and their
//!   completion is not held: the DIE still fetches the CMAC block and tree path as the
//!   command passes, for the processor's later read, which checks and decrypts then.
//! * **Writes** of a sector whose 8 lines are all in the storage domain *and came from that
//!   same sector* store it with no cryptography (its content has not changed). Other sectors
//!   are encrypted for the drive as in D-Shield; their storage-domain lines (from another
//!   sector) are first checked and decrypted with their own sector's metadata.
//! * **The processor** (with `io.touch_data`) reads each block an I/O read: a storage-domain
//!   sector is checked and decrypted by the engine with its CMAC then, its lines read past the
//!   memory's encryption. It writes each block before an I/O writes it: the lines move to the
//!   memory domain (their bits cleared), encrypted by the memory controller.

use super::super::host::{LineDomain, LineDomains};
use rustc_hash::FxHashMap;

/// What a write finds in a sector's 8 buffer lines.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SectorSource {
    /// All 8 lines came from this very sector and are unchanged: stored without cryptography.
    Unchanged,
    /// `lines` of the 8 are storage-domain lines of sector `from`: checked and decrypted with
    /// its metadata before the sector is encrypted for its new place.
    Storage { from: u64, lines: u32 },
    /// All in the memory domain: encrypted for the drive as in D-Shield.
    Memory,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HybStats {
    /// Lines the drive put into memory in the storage domain.
    pub storage_domain_lines: u64,
    /// Sectors read whose check and decryption wait for the processor's read.
    pub deferred_sector_checks: u64,
    /// Sectors written back unchanged, without cryptography.
    pub unchanged_sectors_written: u64,
    /// Sectors written from storage-domain lines of another sector (decrypted, re-encrypted).
    pub moved_sectors_written: u64,
    /// Storage-domain sectors the processor read: checked and decrypted then.
    pub processor_checked_sectors: u64,
    /// Storage-domain lines the processor wrote, which moved to the memory domain.
    pub lines_moved_to_memory: u64,
}

#[derive(Default)]
pub struct ProtectionDomains {
    /// Each page's PD vector (absent: all lines in the memory domain).
    pd: FxHashMap<u64, u64>,
    /// The drive sector of each storage-domain 512 B chunk of memory (by its first line / 8).
    sector_of_chunk: FxHashMap<u64, u64>,
    pub stats: HybStats,
}

impl ProtectionDomains {
    pub fn in_storage(&self, line: u64) -> bool { self.pd.get(&(line >> 6)).is_some_and(|v| v & (1 << (line & 63)) != 0) }

    /// The drive sector a storage-domain line's chunk came from.
    pub fn sector_of_line(&self, line: u64) -> Option<u64> { self.sector_of_chunk.get(&(line >> 3)).copied() }

    /// The processor writes `line`: it moves to the memory domain (section VI: encrypted with
    /// the memory's metadata whatever its bit said). Whether its bit was set.
    pub fn processor_write(&mut self, line: u64) -> bool {
        let Some(v) = self.pd.get_mut(&(line >> 6)) else { return false };
        let bit = 1 << (line & 63);
        let was = *v & bit != 0;
        *v &= !bit;
        if was {
            self.stats.lines_moved_to_memory += 1;
        }
        was
    }

    /// A write of drive sector `sector` from the 8 memory lines at `first_line`.
    pub fn source(&mut self, sector: u64, first_line: u64) -> SectorSource {
        let lines = (first_line..first_line + 8).filter(|&l| self.in_storage(l)).count() as u32;
        let from = self.sector_of_chunk.get(&(first_line >> 3)).copied();
        match (lines, from) {
            (0, _) | (_, None) => SectorSource::Memory,
            (8, Some(f)) if f == sector => {
                self.stats.unchanged_sectors_written += 1;
                SectorSource::Unchanged
            }
            (n, Some(f)) => {
                self.stats.moved_sectors_written += 1;
                SectorSource::Storage { from: f, lines: n }
            }
        }
    }
}

impl LineDomains for ProtectionDomains {
    fn dma_line(&mut self, line: u64, sector: u64, to_memory: bool) -> LineDomain {
        if !to_memory {
            return if self.in_storage(line) { LineDomain::Storage { recorded: false } } else { LineDomain::Memory };
        }
        // The drive's data lands in memory as it is, in the storage domain.
        self.stats.storage_domain_lines += 1;
        self.sector_of_chunk.insert(line >> 3, sector);
        let v = self.pd.entry(line >> 6).or_insert(0);
        let bit = 1 << (line & 63);
        let recorded = *v & bit == 0;
        *v |= bit;
        LineDomain::Storage { recorded }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sector_read_and_written_back_unchanged_needs_no_cryptography_and_a_moved_one_does() {
        let mut d = ProtectionDomains::default();
        // Sector 100 read into lines 64..72 (page 1): every line enters the storage domain,
        // and its page's counter block records it once.
        let first: Vec<_> = (64..72).map(|l| d.dma_line(l, 100, true)).collect();
        assert!(first.iter().all(|x| *x == LineDomain::Storage { recorded: true }));
        assert_eq!(d.dma_line(64, 100, true), LineDomain::Storage { recorded: false });
        // Written back to sector 100 from the same lines: unchanged.
        assert_eq!(d.source(100, 64), SectorSource::Unchanged);
        assert_eq!(d.dma_line(64, 100, false), LineDomain::Storage { recorded: false });
        // Written to sector 7 from them: re-encrypted for its new place.
        assert_eq!(d.source(7, 64), SectorSource::Storage { from: 100, lines: 8 });
        // Lines never read from the drive are the memory's.
        assert_eq!(d.source(7, 0), SectorSource::Memory);
        // A processor write moves a line to the memory's domain: the sector is no longer unchanged.
        assert!(d.processor_write(65) && !d.processor_write(65));
        assert_eq!(d.source(100, 64), SectorSource::Storage { from: 100, lines: 7 });
        assert_eq!(d.dma_line(0, 7, false), LineDomain::Memory);
    }
}
