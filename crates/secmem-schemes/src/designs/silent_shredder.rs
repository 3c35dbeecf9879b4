//! Silent Shredder (ASPLOS'16), the comparison point of Lelantus section V-A: a minor counter
//! of 0 means "this line is all zeros", so zero-initialising a page is a counter-block update
//! (fresh major, every minor 0) instead of 64 line writes, and reading a zero line needs no
//! data fetch. Minor 0 is reserved: writes count 1..=127 and an overflow restarts at 1 (lines
//! still zero stay at 0 and are not rewritten). Copies are not helped: `PageCommand::Copy`
//! is unsupported, so the OS model copies those pages itself, as the baseline kernel does.
//!
//! Under `security.counter_init = "random"` a page's minors start anywhere in 0..=127 and,
//! until the page is zeroed, mean what they mean for the baseline: the line holds its boot
//! content (zeros encrypted under that counter), so it still reads as zeros — with a data
//! fetch when its minor is not 0, without one when it is — and an overflow re-encrypts it
//! like any line with a non-zero minor. The OS model zero-fills a page through
//! `PageCommand::Zero` at its zero-page fault (a process's first write after allocation),
//! which sets a fresh major and every minor to 0, so on those pages random boot values change
//! nothing. Pages never zeroed that way — frames the kernel copies into at a CoW fault (copies
//! are not helped), memory a memory-level trace writes — keep them, exactly as the baseline
//! does, and overflow as early.

use secmem_core::stats::StatDoc;
use crate::controller::ops::McOps;
use crate::designs::{implies_nothing, no_check, no_data_lines, no_regions, Design, DesignEntry, PageCommand, PageCommandError, Unsupported};
use crate::controller::functional::IntegrityError;
use secmem_core::addr::{line_in_page, page_of_line, LINES_PER_PAGE};
use secmem_core::counters::CounterBlock;
use secmem_core::Cycle;
use secmem_media::TrafficClass;

pub static ENTRY: DesignEntry = DesignEntry {
    name: "silent-shredder",
    summary: "Silent Shredder: a zero minor counter means a zero line, so zeroing a page is one counter-block update",
    needs_security: true,
    baseline_data_path: false,
    needs_line_contents: false,
    check: no_check,
    implies: implies_nothing,
    regions: no_regions,
    data_lines_reserved: no_data_lines,
    drain_schemes: &[],
    tree_update: None,
    build: |_, _| Box::new(SilentShredder::default()),
    stats: &[
        StatDoc::new("zeroed_pages", "pages", "pages zeroed by a counter update instead of writing zero lines"),
        StatDoc::new("zero_reads", "lines", "reads of zeroed lines answered without touching data memory"),
    ],
};

#[derive(Clone, Default)]
pub struct SilentShredder {
    /// Pages zeroed by a counter update.
    pub zeroed_pages: u64,
    /// Reads of zero lines answered without touching data memory.
    pub zero_reads: u64,
}

impl SilentShredder {
    /// (major, minor) of line `idx` of a cached counter block: from the verified bytes in
    /// functional mode.
    fn counter(mc: &McOps, page: u64, idx: usize) -> (u64, u8) {
        match mc.counter_payload(page) {
            Some(b) => CounterBlock::decode_one(&b, idx, mc.params().minor_bits),
            None => mc.counter_block(page).counter_of(idx),
        }
    }

    fn store(mc: &mut McOps, page: u64, block: CounterBlock, now: Cycle) -> Result<Cycle, IntegrityError> {
        let t = mc.fetch_counter_block(page, true, now)?;
        mc.set_counter_block(page, block);
        mc.store_counter_payload(page);
        Ok(t)
    }
}

impl Design for SilentShredder {
    fn name(&self) -> &'static str { "silent-shredder" }

    fn clone_box(&self) -> Box<dyn Design> { Box::new(self.clone()) }

    fn read(&mut self, mc: &mut McOps, line: u64, now: Cycle) -> Result<(Cycle, Option<[u8; 64]>), IntegrityError> {
        if !mc.params().secure {
            return mc.read_line(line, now);
        }
        let page = page_of_line(line);
        let ctr_at = mc.fetch_counter_block(page, false, now)?;
        let (major, minor) = Self::counter(mc, page, line_in_page(line));
        if minor == 0 {
            self.zero_reads += 1;
            mc.write_back_evictions(now)?;
            return Ok((ctr_at + Cycle(1), mc.is_functional().then_some([0u8; 64])));
        }
        mc.read_line_under(line, major, minor, TrafficClass::Data, ctr_at, now)
    }

    fn write(&mut self, mc: &mut McOps, line: u64, data: Option<&[u8; 64]>, now: Cycle) -> Result<Cycle, IntegrityError> {
        if !mc.params().secure {
            return mc.write_line(line, data, now);
        }
        let page = page_of_line(line);
        let idx = line_in_page(line);
        let ctr_at = mc.fetch_counter_block(page, true, now)?;
        let old = mc.counter_block(page);
        let max = ((1u32 << mc.params().minor_bits) - 1) as u8;
        let mut done = now;
        let block = if old.minors[idx] >= max {
            // Overflow: rewrite every non-zero line under the next major at minor 1.
            mc.count_counter_overflow();
            let mut plains = Vec::new();
            let mut ready = ctr_at;
            for i in 0..LINES_PER_PAGE as usize {
                if i != idx && old.minors[i] != 0 {
                    let l = page * LINES_PER_PAGE + i as u64;
                    let (t, p) = mc.read_line_under(l, old.major, old.minors[i], TrafficClass::Reencrypt, ctr_at, ctr_at)?;
                    ready = ready.max(t);
                    plains.push((l, p));
                }
            }
            let mut b = CounterBlock { major: old.major + 1, minors: old.minors };
            for m in b.minors.iter_mut() {
                *m = u8::from(*m != 0);
            }
            b.minors[idx] = 1;
            Self::store(mc, page, b, now)?;
            for (l, p) in plains {
                mc.count_reencrypted_line();
                done = done.max(mc.write_line_under(l, p.as_ref(), b.major, 1, TrafficClass::Reencrypt, ready, ready)?);
            }
            b
        } else {
            let mut b = old;
            b.minors[idx] += 1;
            Self::store(mc, page, b, now)?;
            b
        };
        let (major, minor) = block.counter_of(idx);
        Ok(mc.write_line_under(line, data, major, minor, TrafficClass::Data, ctr_at, now)?.max(done))
    }

    fn page_command(&mut self, mc: &mut McOps, cmd: PageCommand, now: Cycle) -> Result<Cycle, PageCommandError> {
        let pages = mc.layout().data_bytes / 4096;
        match cmd {
            PageCommand::Zero { page } if page < pages && mc.params().secure => {
                self.zeroed_pages += 1;
                let old = mc.counter_block(page);
                // A fresh major: the page's next writes never reuse a pad of its old content.
                // The zero fill cannot fail verification except by tampering: an integrity
                // error, which stops the run (not a refusal, which would let the kernel
                // zero-fill over the tampered page).
                let t = Self::store(mc, page, CounterBlock { major: old.major + 1, minors: [0; 64] }, now)?;
                Ok(mc.counter_block_updated(page, t)?)
            }
            PageCommand::Free { .. } => Ok(now),
            other => Err(Unsupported { design: "silent-shredder", operation: format!("{other:?}") }.into()),
        }
    }

    fn extra_stats(&self) -> Vec<(&'static str, f64)> {
        vec![("zeroed_pages", self.zeroed_pages as f64), ("zero_reads", self.zero_reads as f64)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SecureMc;
    use crate::config::{MetadataCachesConfig, SecurityConfig, TreeConfig};
    use crate::testing::FixedLatencyMedia;
    use secmem_core::cache::CacheConfig;

    /// Pages of the controllers below (counting mode, fixed device latencies).
    const PAGES: u64 = 64;

    fn mc(secure: bool) -> SecureMc {
        let sec = SecurityConfig { enabled: secure, ..Default::default() };
        let cache = || CacheConfig::new(64, 16, 2);
        let caches = MetadataCachesConfig { counter: cache(), mac: cache(), tree: cache(), tree_organisation: crate::config::TreeCacheOrganisation::Shared };
        SecureMc::new(&sec, &TreeConfig::default(), &caches, PAGES * 4096, Box::new(FixedLatencyMedia::new(100, 300, 1 << 30)), 1).unwrap()
    }

    #[test]
    fn a_zero_line_is_usable_one_cycle_after_its_counter_and_records_that_latency() {
        let (mut m, mut d) = (mc(true), Box::new(SilentShredder::default()) as Box<dyn Design>);
        let now = Cycle(10_000);
        // An identical controller tells when the (missing) counter block is verified.
        let ctr_at = mc(true).ensure_block(0, 0, false, now).unwrap();
        let (done, _) = d.serve_read(&mut m, 0, now).unwrap();
        assert_eq!(done, ctr_at + Cycle(1));
        assert_eq!(m.stats.data_reads, 0);
        let l = &m.stats.read_latency;
        assert_eq!((l.count, l.sum, l.max), (1, (done - now).0 as u128, (done - now).0));
    }

    #[test]
    fn reads_and_writes_of_written_lines_record_their_own_latency() {
        let (mut m, mut d) = (mc(true), Box::new(SilentShredder::default()) as Box<dyn Design>);
        let (t_write, t_read) = (Cycle(10_000), Cycle(20_000));
        let written = d.serve_write(&mut m, 5, None, t_write).unwrap();
        let (read, _) = d.serve_read(&mut m, 5, t_read).unwrap();
        assert_eq!(m.stats.data_reads, 1, "a written line is fetched");
        assert_eq!((m.stats.write_latency.count, m.stats.write_latency.sum), (1, (written - t_write).0 as u128));
        assert_eq!((m.stats.read_latency.count, m.stats.read_latency.sum), (1, (read - t_read).0 as u128));
    }

    #[test]
    fn zeroing_a_page_outside_memory_is_refused() {
        let (mut m, mut d) = (mc(true), SilentShredder::default());
        assert!(d.page_command(&mut m, PageCommand::Zero { page: PAGES - 1 }, Cycle(0)).is_ok());
        let e = d.page_command(&mut m, PageCommand::Zero { page: PAGES }, Cycle(0)).unwrap_err();
        assert!(matches!(e, PageCommandError::Unsupported(_)), "{e}");
        assert_eq!(d.zeroed_pages, 1);
    }

    #[test]
    fn without_security_zeroing_is_refused_so_the_kernel_zero_fills_the_page_itself() {
        // Without security a read returns the stored data whatever the counters say: a
        // counter reset would leave the page's old content readable.
        let (mut m, mut d) = (mc(false), SilentShredder::default());
        let e = d.page_command(&mut m, PageCommand::Zero { page: 3 }, Cycle(0)).unwrap_err();
        assert!(matches!(e, PageCommandError::Unsupported(_)), "{e}");
        assert_eq!(d.zeroed_pages, 0);
    }

    #[test]
    fn the_report_counts_zeroed_pages_and_zero_reads() {
        let (mut m, mut d) = (mc(true), SilentShredder::default());
        for page in [3, 4] {
            d.page_command(&mut m, PageCommand::Zero { page }, Cycle(0)).unwrap();
        }
        for line in [3 * 64, 3 * 64 + 1, 4 * 64 + 9] {
            d.read(&mut m, line, Cycle(0)).unwrap();
        }
        assert_eq!(d.extra_stats(), vec![("zeroed_pages", 2.0), ("zero_reads", 3.0)]);
    }
}
