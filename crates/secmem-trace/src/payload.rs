//! Compact data payloads of the binary format (record flag bit 1; layout in
//! `docs/trace-format.md`).
//!
//! Most lines a program writes repeat (zeros, small integers, the same pointers), so a
//! payload is one of:
//!
//! ```text
//! tag 0  REF   u16 LE slot               the content of dictionary slot `slot`      3 B
//! tag 1  WORDS u32 LE nibbles + bytes    8 words, word k keeps its low n_k bytes   5-68 B
//!                                        (n_k = nibble k, 0..=8), little-endian
//! tag 2  RAW   64 B                      the line as is                            65 B
//! ```
//!
//! Every WORDS or RAW payload enters the dictionary: slot `i` holds the `i`-th new content
//! modulo [`DICT_SLOTS`] (a FIFO of the most recent 65,536 distinct contents, 4 MiB on each
//! side). The writer sends a REF when the content is in the dictionary, else the shorter of
//! WORDS and RAW.

use std::collections::HashMap;

use crate::error::ErrorKind;

/// Slots of the payload dictionary.
pub const DICT_SLOTS: usize = 1 << 16;
pub(crate) const TAG_REF: u8 = 0;
pub(crate) const TAG_WORDS: u8 = 1;
pub(crate) const TAG_RAW: u8 = 2;

/// Significant (low, little-endian) bytes of each 8-byte word of `line`, as 8 nibbles.
#[inline]
fn word_lengths(line: &[u8; 64]) -> (u32, usize) {
    let mut nibbles = 0u32;
    let mut total = 0usize;
    for k in 0..8 {
        let w = u64::from_le_bytes(line[8 * k..8 * k + 8].try_into().expect("8 bytes"));
        let n = 8 - (w.leading_zeros() / 8) as usize;
        nibbles |= (n as u32) << (4 * k);
        total += n;
    }
    (nibbles, total)
}

/// The writer's side: the dictionary, with an index from content to slot.
pub(crate) struct PayloadEncoder {
    slot_of: HashMap<[u8; 64], u16>,
    ring: Vec<[u8; 64]>,
    next: usize,
}

impl PayloadEncoder {
    pub(crate) fn new() -> Self {
        PayloadEncoder { slot_of: HashMap::new(), ring: Vec::new(), next: 0 }
    }

    /// Appends the encoding of `line` to `out` (cleared first).
    pub(crate) fn encode(&mut self, line: &[u8; 64], out: &mut Vec<u8>) {
        out.clear();
        if let Some(&slot) = self.slot_of.get(line) {
            out.push(TAG_REF);
            out.extend_from_slice(&slot.to_le_bytes());
            return;
        }
        let (nibbles, total) = word_lengths(line);
        if 4 + total < 64 {
            out.push(TAG_WORDS);
            out.extend_from_slice(&nibbles.to_le_bytes());
            for k in 0..8 {
                let n = (nibbles >> (4 * k) & 0xf) as usize;
                out.extend_from_slice(&line[8 * k..8 * k + n]);
            }
        } else {
            out.push(TAG_RAW);
            out.extend_from_slice(line);
        }
        let slot = self.next;
        if self.ring.len() < DICT_SLOTS {
            self.ring.push(*line);
        } else {
            let old = std::mem::replace(&mut self.ring[slot], *line);
            self.slot_of.remove(&old);
        }
        self.slot_of.insert(*line, slot as u16);
        self.next = (slot + 1) % DICT_SLOTS;
    }
}

/// The reader's side: the dictionary as the writer filled it.
pub(crate) struct PayloadDecoder {
    ring: Vec<[u8; 64]>,
    next: usize,
}

/// Why a payload could not be decoded: the byte offset within the payload, and a message.
pub(crate) type PayloadError = (u64, ErrorKind, String);

impl PayloadDecoder {
    pub(crate) fn new() -> Self {
        PayloadDecoder { ring: Vec::new(), next: 0 }
    }

    fn remember(&mut self, line: [u8; 64]) {
        if self.ring.len() < DICT_SLOTS {
            self.ring.push(line);
        } else {
            self.ring[self.next] = line;
        }
        self.next = (self.next + 1) % DICT_SLOTS;
    }

    /// Decodes one payload, reading its bytes with `fill` (which returns how many bytes it
    /// could read: fewer means the input ended).
    pub(crate) fn decode(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> std::io::Result<usize>) -> Result<Result<[u8; 64], PayloadError>, std::io::Error> {
        let mut need = |buf: &mut [u8], at: u64, what: &str| -> Result<Result<(), PayloadError>, std::io::Error> {
            let n = fill(buf)?;
            Ok(if n < buf.len() { Err((at, ErrorKind::Truncated, format!("truncated compact payload: {what} needs {} bytes, {n} left", buf.len()))) } else { Ok(()) })
        };
        let mut tag = [0u8; 1];
        if let Err(e) = need(&mut tag, 0, "the tag")? {
            return Ok(Err(e));
        }
        match tag[0] {
            TAG_REF => {
                let mut s = [0u8; 2];
                if let Err(e) = need(&mut s, 1, "a dictionary reference")? {
                    return Ok(Err(e));
                }
                let slot = u16::from_le_bytes(s) as usize;
                Ok(match self.ring.get(slot) {
                    Some(line) => Ok(*line),
                    None => Err((1, ErrorKind::InvalidRecord, format!("compact payload refers to dictionary slot {slot}, but only {} are filled", self.ring.len()))),
                })
            }
            TAG_WORDS => {
                let mut nb = [0u8; 4];
                if let Err(e) = need(&mut nb, 1, "the word lengths")? {
                    return Ok(Err(e));
                }
                let nibbles = u32::from_le_bytes(nb);
                let mut line = [0u8; 64];
                let mut at = 5u64;
                for k in 0..8 {
                    let n = (nibbles >> (4 * k) & 0xf) as usize;
                    if n > 8 {
                        return Ok(Err((1, ErrorKind::InvalidRecord, format!("compact payload word {k} has {n} bytes (at most 8)"))));
                    }
                    if n > 0 {
                        if let Err(e) = need(&mut line[8 * k..8 * k + n], at, "a word")? {
                            return Ok(Err(e));
                        }
                        at += n as u64;
                    }
                }
                self.remember(line);
                Ok(Ok(line))
            }
            TAG_RAW => {
                let mut line = [0u8; 64];
                if let Err(e) = need(&mut line, 1, "a raw line")? {
                    return Ok(Err(e));
                }
                self.remember(line);
                Ok(Ok(line))
            }
            t => Ok(Err((0, ErrorKind::UnknownOp, format!("unknown compact payload tag {t} (expected 0 = REF, 1 = WORDS, 2 = RAW)")))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(lines: &[[u8; 64]]) -> (Vec<[u8; 64]>, usize) {
        let mut enc = PayloadEncoder::new();
        let mut bytes = Vec::new();
        let mut buf = Vec::new();
        for l in lines {
            enc.encode(l, &mut buf);
            bytes.extend_from_slice(&buf);
        }
        let total = bytes.len();
        let mut cur = std::io::Cursor::new(bytes);
        let mut dec = PayloadDecoder::new();
        let mut fill = |b: &mut [u8]| std::io::Read::read(&mut cur, b);
        let out = lines.iter().map(|_| dec.decode(&mut fill).unwrap().unwrap()).collect();
        (out, total)
    }

    fn line_of_words(words: [u64; 8]) -> [u8; 64] {
        let mut l = [0u8; 64];
        for (k, w) in words.iter().enumerate() {
            l[8 * k..8 * k + 8].copy_from_slice(&w.to_le_bytes());
        }
        l
    }

    #[test]
    fn zeros_small_integers_and_pointers_cost_less_than_a_raw_line() {
        let zeros = [0u8; 64];
        let ints = line_of_words([1, 2, 3, 4, 5, 6, 7, 200]);
        let ptrs = line_of_words([0x7ffd_1234_5678; 8]);
        let (out, total) = round_trip(&[zeros, ints, ptrs]);
        assert_eq!(out, vec![zeros, ints, ptrs]);
        assert_eq!(total, 5 + (5 + 8) + (5 + 48));
    }

    #[test]
    fn a_repeated_line_is_a_three_byte_reference_and_random_lines_stay_raw() {
        let mut rnd = [0u8; 64];
        for (i, b) in rnd.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(151).wrapping_add(0x9d) | 0x80;
        }
        let (out, total) = round_trip(&[rnd, rnd, rnd]);
        assert_eq!(out, vec![rnd; 3]);
        assert_eq!(total, 65 + 3 + 3);
    }

    #[test]
    fn the_dictionary_forgets_its_oldest_content_and_both_sides_agree() {
        // More distinct lines than slots, then the first ones again: they were evicted, so
        // they are sent whole again and still decode to themselves.
        let lines: Vec<[u8; 64]> = (0..DICT_SLOTS as u64 + 10).chain(0..20).map(|i| line_of_words([i + 1, 0, 0, 0, 0, 0, 0, 0])).collect();
        let (out, _) = round_trip(&lines);
        assert_eq!(out, lines);
    }

    #[test]
    fn bad_payloads_are_errors_at_their_byte() {
        let dec = |bytes: &[u8]| {
            let mut cur = std::io::Cursor::new(bytes.to_vec());
            let mut fill = |b: &mut [u8]| std::io::Read::read(&mut cur, b);
            PayloadDecoder::new().decode(&mut fill).unwrap().unwrap_err()
        };
        assert_eq!(dec(&[7]).0, 0);
        assert!(dec(&[7]).2.contains("unknown compact payload tag 7"));
        assert!(dec(&[0, 5, 0]).2.contains("dictionary slot 5, but only 0 are filled"));
        assert!(dec(&[1, 0x09, 0, 0, 0]).2.contains("word 0 has 9 bytes"));
        assert_eq!(dec(&[1, 0x02, 0, 0, 0, 0xaa]), (5, ErrorKind::Truncated, "truncated compact payload: a word needs 2 bytes, 1 left".to_string()));
        assert!(dec(&[2, 1, 2]).2.contains("a raw line needs 64 bytes, 2 left"));
    }
}
