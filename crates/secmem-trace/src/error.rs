//! [`TraceError`]: every trace error says which file and where in it.

use std::fmt;
use std::io;

/// The name used for traces that do not come from a named file.
pub const MEMORY_NAME: &str = "<memory>";

/// Where in a trace an error was found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Position {
    /// The error concerns the file as a whole (cannot open it, cannot detect its format...).
    File,
    /// 1-based line number (text formats).
    Line(u64),
    /// 0-based byte offset (binary format).
    Offset(u64),
}

/// What kind of problem a [`TraceError`] reports (for callers that want to match on it).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// An I/O error from the underlying reader or writer.
    Io,
    /// The binary magic is wrong: this is not a secmem binary trace.
    BadMagic,
    /// The header names a format version this reader does not support.
    UnsupportedVersion,
    /// A text trace lacks its `# secmem-trace v1` first line.
    MissingHeader,
    /// An operation code or mnemonic is not known.
    UnknownOp,
    /// Reserved bits or fields are not zero.
    ReservedBits,
    /// The input ends in the middle of a header, record or payload.
    Truncated,
    /// A field is malformed (bad number, bad hex, wrong number of tokens, too long a line...).
    Syntax,
    /// A well-formed record is not allowed (e.g. data payload on a read).
    InvalidRecord,
    /// The format of a file could not be detected or is not usable for this operation.
    Format,
}

/// A trace error: file name (or `"<memory>"`), position, kind and message.
///
/// Displays as `trace.txt:17: message`, `trace.bin: byte offset 4096: message` or
/// `trace.bin: message` for errors about the whole file.
///
/// The error is one pointer wide (its fields are boxed) so `Result<Record, TraceError>`
/// stays small on the hot decoding path.
#[derive(Debug)]
pub struct TraceError(Box<Inner>);

#[derive(Debug)]
struct Inner {
    file: String,
    position: Position,
    kind: ErrorKind,
    message: String,
    source: Option<io::Error>,
}

impl TraceError {
    /// A new error; prefer the `at_line` / `at_offset` / `whole_file` shorthands.
    pub fn new(
        file: impl Into<String>,
        position: Position,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> TraceError {
        TraceError(Box::new(Inner {
            file: file.into(),
            position,
            kind,
            message: message.into(),
            source: None,
        }))
    }

    /// An error at a 1-based line of a text trace.
    pub fn at_line(
        file: impl Into<String>,
        line: u64,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> TraceError {
        TraceError::new(file, Position::Line(line), kind, message)
    }

    /// An error at a byte offset of a binary trace.
    pub fn at_offset(
        file: impl Into<String>,
        offset: u64,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> TraceError {
        TraceError::new(file, Position::Offset(offset), kind, message)
    }

    /// An error about a file as a whole.
    pub fn whole_file(
        file: impl Into<String>,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> TraceError {
        TraceError::new(file, Position::File, kind, message)
    }

    /// An I/O error at `position`; the `io::Error` is kept as [`std::error::Error::source`].
    pub fn io(file: impl Into<String>, position: Position, err: io::Error) -> TraceError {
        let message = format!("I/O error: {err}");
        TraceError(Box::new(Inner {
            file: file.into(),
            position,
            kind: ErrorKind::Io,
            message,
            source: Some(err),
        }))
    }

    /// The file name (or `"<memory>"`).
    pub fn file(&self) -> &str {
        &self.0.file
    }
    /// Where the error is.
    pub fn position(&self) -> Position {
        self.0.position
    }
    /// The 1-based line number, for text-format errors.
    pub fn line(&self) -> Option<u64> {
        match self.0.position {
            Position::Line(l) => Some(l),
            _ => None,
        }
    }
    /// The byte offset, for binary-format errors.
    pub fn offset(&self) -> Option<u64> {
        match self.0.position {
            Position::Offset(o) => Some(o),
            _ => None,
        }
    }
    /// The kind of error.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }
    /// The message without the file/position prefix.
    pub fn message(&self) -> &str {
        &self.0.message
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.position {
            Position::File => write!(f, "{}: {}", self.0.file, self.0.message),
            Position::Line(l) => write!(f, "{}:{}: {}", self.0.file, l, self.0.message),
            Position::Offset(o) => {
                write!(f, "{}: byte offset {}: {}", self.0.file, o, self.0.message)
            }
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Shortens untrusted text quoted in an error message (a token may be a megabyte long), and
/// escapes its control characters (`\r`, `\0`...), which a terminal would otherwise act on: the
/// one "line" of a file with lone CR line endings printed as its last line alone.
pub fn quote(token: &str) -> String {
    const MAX: usize = 40;
    let mut s = String::new();
    for c in token.chars().take(MAX) {
        if c.is_control() {
            s.extend(c.escape_default());
        } else {
            s.push(c);
        }
    }
    if token.chars().nth(MAX).is_some() {
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn line_errors_display_as_file_colon_line() {
        let e = TraceError::at_line(
            "trace.txt",
            17,
            ErrorKind::UnknownOp,
            "unknown operation 'X' (expected R, W, F, FL)",
        );
        assert_eq!(
            e.to_string(),
            "trace.txt:17: unknown operation 'X' (expected R, W, F, FL)"
        );
        assert_eq!(e.line(), Some(17));
        assert_eq!(e.offset(), None);
        assert_eq!(e.kind(), ErrorKind::UnknownOp);
    }

    #[test]
    fn offset_errors_display_the_byte_offset() {
        let e = TraceError::at_offset(
            "trace.bin",
            4096,
            ErrorKind::Truncated,
            "truncated record (needs 16 bytes, 7 left)",
        );
        assert_eq!(
            e.to_string(),
            "trace.bin: byte offset 4096: truncated record (needs 16 bytes, 7 left)"
        );
        assert_eq!(e.offset(), Some(4096));
    }

    #[test]
    fn whole_file_errors_name_only_the_file() {
        let e = TraceError::whole_file("x.trace", ErrorKind::Format, "cannot detect format");
        assert_eq!(e.to_string(), "x.trace: cannot detect format");
        assert_eq!(e.position(), Position::File);
    }

    #[test]
    fn io_errors_keep_their_source() {
        let e = TraceError::io(
            MEMORY_NAME,
            Position::Offset(3),
            io::Error::other("disk on fire"),
        );
        assert_eq!(e.kind(), ErrorKind::Io);
        assert!(e
            .to_string()
            .starts_with("<memory>: byte offset 3: I/O error: disk on fire"));
        assert!(e.source().is_some());
    }

    #[test]
    fn quoted_tokens_are_shortened() {
        let long = "x".repeat(1000);
        let q = quote(&long);
        assert_eq!(q.len(), 43);
        assert!(q.ends_with("..."));
        assert_eq!(quote("FOO"), "FOO");
    }

    #[test]
    fn quoted_tokens_show_control_characters_escaped() {
        assert_eq!(quote("0x1000 READ 12\r0x2000 READ 13\0"), "0x1000 READ 12\\r0x2000 READ 13\\u{0}");
        assert_eq!(quote("a\tb"), "a\\tb");
        assert_eq!(quote("\u{e9}t\u{e9}"), "\u{e9}t\u{e9}");
    }

    #[test]
    fn file_returns_the_name_the_error_prints() {
        let e = TraceError::at_line("dir/trace.txt", 3, ErrorKind::Syntax, "bad");
        assert_eq!(e.file(), "dir/trace.txt");
        assert_eq!(TraceError::io(MEMORY_NAME, Position::File, io::Error::other("x")).file(), "<memory>");
    }
}
