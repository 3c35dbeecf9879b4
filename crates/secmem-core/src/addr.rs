//! Line and page arithmetic. secmem works at 64-byte line granularity; a split counter block
//! covers one 4 KB page of 64 lines.

pub const LINE_BYTES: u64 = 64;
pub const LINE_SHIFT: u32 = 6;
pub const PAGE_BYTES: u64 = 4096;
pub const PAGE_SHIFT: u32 = 12;
pub const LINES_PER_PAGE: u64 = PAGE_BYTES / LINE_BYTES;

/// Page index of a line index.
#[inline]
pub fn page_of_line(line: u64) -> u64 { line >> (PAGE_SHIFT - LINE_SHIFT) }
/// Position (0..64) of a line inside its page.
#[inline]
pub fn line_in_page(line: u64) -> usize { (line & (LINES_PER_PAGE - 1)) as usize }
