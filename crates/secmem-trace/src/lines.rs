//! Line reading shared by the text and foreign readers: line numbers, a length cap and
//! UTF-8 checking, without panicking on any input.

use std::io::{BufRead, BufReader, Read};

use crate::error::{ErrorKind, Position, TraceError};

/// Longest accepted line (bytes, excluding the newline). Longer lines are an error rather
/// than an unbounded allocation.
pub(crate) const MAX_LINE: usize = 64 * 1024;
const BUFFER: usize = 256 * 1024;

pub(crate) struct LineReader<R: Read> {
    inp: BufReader<R>,
    buf: Vec<u8>,
    pub(crate) name: String,
    /// 1-based number of the line most recently returned (0 before the first).
    pub(crate) line_no: u64,
}

impl<R: Read> LineReader<R> {
    pub(crate) fn new(inner: R, name: String) -> Self {
        LineReader {
            inp: BufReader::with_capacity(BUFFER, inner),
            buf: Vec::with_capacity(256),
            name,
            line_no: 0,
        }
    }

    pub(crate) fn err(&self, kind: ErrorKind, msg: impl Into<String>) -> TraceError {
        TraceError::at_line(self.name.clone(), self.line_no, kind, msg)
    }

    /// The next line without its line terminator (`\n` or `\r\n`), or `Ok(None)` at EOF.
    pub(crate) fn next_line(&mut self) -> Result<Option<&str>, TraceError> {
        self.buf.clear();
        let limit = MAX_LINE as u64 + 2; // room for "\r\n"
        let n = match (&mut self.inp).take(limit).read_until(b'\n', &mut self.buf) {
            Ok(n) => n,
            Err(e) => {
                return Err(TraceError::io(
                    self.name.clone(),
                    Position::Line(self.line_no + 1),
                    e,
                ))
            }
        };
        if n == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        }
        if self.buf.len() > MAX_LINE {
            return Err(self.err(
                ErrorKind::Syntax,
                format!("line is longer than {MAX_LINE} bytes"),
            ));
        }
        match std::str::from_utf8(&self.buf) {
            Ok(s) => Ok(Some(s)),
            Err(e) => Err(TraceError::at_line(
                self.name.clone(),
                self.line_no,
                ErrorKind::Syntax,
                format!(
                    "line is not valid UTF-8 (bad byte at column {})",
                    e.valid_up_to() + 1
                ),
            )),
        }
    }
}

/// Parses an unsigned number: `0x`/`0X` prefix means hex, otherwise decimal.
pub(crate) fn parse_u64_auto(tok: &str) -> Option<u64> {
    if let Some(h) = tok.strip_prefix("0x").or_else(|| tok.strip_prefix("0X")) {
        parse_hex(h)
    } else {
        parse_dec(tok)
    }
}

/// Strict decimal (digits only, no sign, no empty string).
pub(crate) fn parse_dec(tok: &str) -> Option<u64> {
    if tok.is_empty() || !tok.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    tok.parse().ok()
}

/// Strict hex (hex digits only, no prefix, no empty string).
pub(crate) fn parse_hex(tok: &str) -> Option<u64> {
    if tok.is_empty() || !tok.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(tok, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_and_stripped_of_crlf() {
        let mut r = LineReader::new(&b"a\r\nb\n\nc"[..], "x".into());
        assert_eq!(r.next_line().unwrap(), Some("a"));
        assert_eq!(r.next_line().unwrap(), Some("b"));
        assert_eq!(r.next_line().unwrap(), Some(""));
        assert_eq!(r.next_line().unwrap(), Some("c"));
        assert_eq!(r.line_no, 4);
        assert_eq!(r.next_line().unwrap(), None);
    }

    #[test]
    fn non_utf8_line_is_an_error_with_its_line_number() {
        let mut r = LineReader::new(&b"ok\nbad \xff\xfe\n"[..], "x.txt".into());
        r.next_line().unwrap();
        let e = r.next_line().unwrap_err();
        assert_eq!(e.line(), Some(2));
        assert_eq!(
            e.to_string(),
            "x.txt:2: line is not valid UTF-8 (bad byte at column 5)"
        );
    }

    #[test]
    fn overlong_line_is_an_error_not_an_allocation() {
        let mut big = vec![b'x'; MAX_LINE + 10];
        big.push(b'\n');
        let mut r = LineReader::new(&big[..], "x".into());
        let e = r.next_line().unwrap_err();
        assert_eq!(e.line(), Some(1));
        assert!(e.message().contains("longer than"));
    }

    #[test]
    fn numbers_parse_strictly() {
        assert_eq!(parse_u64_auto("0x10"), Some(16));
        assert_eq!(parse_u64_auto("0XfF"), Some(255));
        assert_eq!(parse_u64_auto("10"), Some(10));
        assert_eq!(parse_u64_auto("+10"), None);
        assert_eq!(parse_u64_auto("0x"), None);
        assert_eq!(parse_u64_auto("18446744073709551616"), None);
        assert_eq!(parse_u64_auto("0x1ffffffffffffffff"), None);
        assert_eq!(parse_hex("04222cac"), Some(0x0422_2cac));
        assert_eq!(parse_dec(""), None);
    }

    #[test]
    fn a_line_of_exactly_64_kib_is_accepted_and_one_byte_more_is_not() {
        // The documented limit is 64 KiB, line terminator (`\n` or `\r\n`) excluded.
        let mut input = vec![b'x'; 65536];
        input.extend_from_slice(b"\r\n");
        input.extend_from_slice(&[b'y'; 65536]);
        input.push(b'\n');
        input.extend_from_slice(&[b'z'; 65537]);
        input.push(b'\n');
        let mut r = LineReader::new(&input[..], "x.txt".into());
        assert_eq!(r.next_line().unwrap().map(str::len), Some(65536));
        assert_eq!(r.next_line().unwrap().map(str::len), Some(65536));
        let e = r.next_line().unwrap_err();
        assert_eq!(e.to_string(), "x.txt:3: line is longer than 65536 bytes");
    }

    /// Yields its bytes, then fails with a real I/O error.
    struct FailsAfter<'a>(&'a [u8]);
    impl Read for FailsAfter<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(std::io::Error::other("disk on fire"));
            }
            self.0.read(buf)
        }
    }

    #[test]
    fn an_io_error_names_the_line_it_was_reading() {
        let mut r = LineReader::new(FailsAfter(b"a\nb\n"), "x.txt".into());
        assert_eq!(r.next_line().unwrap(), Some("a"));
        assert_eq!(r.next_line().unwrap(), Some("b"));
        let e = r.next_line().unwrap_err();
        assert_eq!((e.kind(), e.line()), (ErrorKind::Io, Some(3)));
        assert_eq!(e.to_string(), "x.txt:3: I/O error: disk on fire");
    }

    #[test]
    fn hex_and_decimal_numbers_refuse_a_sign() {
        // `u64::from_str_radix` and `str::parse` accept a leading '+'; the trace grammar does not.
        assert_eq!(parse_hex("+ff"), None);
        assert_eq!(parse_u64_auto("0x+ff"), None);
        assert_eq!(parse_dec("+7"), None);
        assert_eq!(parse_hex("ff"), Some(255));
        assert_eq!(parse_dec("7"), Some(7));
    }
}
