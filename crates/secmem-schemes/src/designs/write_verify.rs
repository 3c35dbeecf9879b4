//! Write-verify: the example design of `docs/architecture.md` ("Adding a design"), built only
//! in test builds (feature `example-design`).
//!
//! After a data write it reads the line back from the device, as a PCM controller that
//! verifies its writes would (a multi-level cell may need a second program pulse). A line
//! written as all zeros is not read back (the example's stand-in for a decision that depends
//! on the data, as deduplication's does): the design declares `needs_line_contents`, so
//! counting mode hands it the same contents functional mode does. The read is charged to
//! `TrafficClass::Design` and counted in `stats.design.verify_reads` (and the skipped ones in
//! `zero_writes_not_verified`). Everything else is the baseline's, so the conformance suite's
//! questions (read after write, attacks, crash recovery, pads, both modes) must come out as
//! they do for the baseline.

use secmem_core::stats::StatDoc;
use super::{implies_nothing, no_check, no_data_lines, no_regions, Design, DesignEntry};
use crate::controller::functional::IntegrityError;
use crate::controller::ops::McOps;
use secmem_core::addr::LINE_SHIFT;
use secmem_core::Cycle;
use secmem_media::TrafficClass;

pub static ENTRY: DesignEntry = DesignEntry {
    name: "write-verify",
    summary: "example design (tests only): every data write but an all-zero one is read back from the device",
    needs_security: true,
    baseline_data_path: false,
    needs_line_contents: true,
    check: no_check,
    implies: implies_nothing,
    regions: no_regions,
    data_lines_reserved: no_data_lines,
    drain_schemes: &[],
    tree_update: None,
    build: |_, _| Box::new(WriteVerify::default()),
    stats: &[
        StatDoc::new("verify_reads", "lines", "reads issued to verify a data write (design traffic)"),
        StatDoc::new("zero_writes_not_verified", "lines", "writes of all-zero lines left unverified"),
    ],
};

#[derive(Clone, Default)]
pub struct WriteVerify {
    verify_reads: u64,
    zero_writes_not_verified: u64,
}

impl Design for WriteVerify {
    fn name(&self) -> &'static str { ENTRY.name }

    fn clone_box(&self) -> Box<dyn Design> { Box::new(self.clone()) }

    fn write(&mut self, mc: &mut McOps, line: u64, data: Option<&[u8; 64]>, now: Cycle) -> Result<Cycle, IntegrityError> {
        let persisted = mc.write_line(line, data, now)?;
        let data = data.expect("write-verify declares needs_line_contents: every write carries its line");
        if data.iter().all(|&b| b == 0) {
            self.zero_writes_not_verified += 1;
            return Ok(persisted);
        }
        self.verify_reads += 1;
        Ok(mc.device_read(line << LINE_SHIFT, TrafficClass::Design, persisted))
    }

    fn extra_stats(&self) -> Vec<(&'static str, f64)> {
        vec![("verify_reads", self.verify_reads as f64), ("zero_writes_not_verified", self.zero_writes_not_verified as f64)]
    }
}
