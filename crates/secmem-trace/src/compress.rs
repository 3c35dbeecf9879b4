//! Compressed traces: a gzip or xz file is read through its decompressor, whatever the trace
//! format inside (ChampSim's public corpora are xz, many others gzip).
//!
//! Compression is recognised by the stream's magic bytes, not the file name. Positions in
//! errors (line numbers, byte offsets) are those of the decompressed trace; a corrupt or
//! truncated compressed stream is an I/O error that says so, at the decompressed offset
//! where it was found.

use std::fmt;
use std::io::{self, Read};

/// How a trace file is compressed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    None,
    Gzip,
    Xz,
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
        })
    }
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const XZ_MAGIC: [u8; 6] = [0xfd, b'7', b'z', b'X', b'Z', 0];

/// The compression whose magic `head` starts with.
pub fn sniff(head: &[u8]) -> Compression {
    if head.starts_with(&XZ_MAGIC) {
        Compression::Xz
    } else if head.starts_with(&GZIP_MAGIC) {
        Compression::Gzip
    } else {
        Compression::None
    }
}

/// `inner` (whose first bytes were `head`) decompressed according to its magic. Multi-member
/// gzip and multi-stream xz files (as `cat a.xz b.xz` makes) are read whole.
pub(crate) fn decompressed<R: Read + Send + 'static>(head: &[u8], inner: R) -> (Box<dyn Read + Send>, Compression) {
    let comp = sniff(head);
    let boxed: Box<dyn Read + Send> = match comp {
        Compression::None => Box::new(inner),
        Compression::Gzip => Box::new(Labelled { inner: flate2::read::MultiGzDecoder::new(inner), what: comp, out_bytes: 0 }),
        Compression::Xz => Box::new(Labelled { inner: liblzma::read::XzDecoder::new_multi_decoder(inner), what: comp, out_bytes: 0 }),
    };
    (boxed, comp)
}

/// A writer that compresses into `inner` with `how` (gzip at its default level, xz at
/// `xz_preset`, 0-9 as `xz -N`); [`Compressor::finish`] ends the stream.
pub enum Compressor<W: io::Write> {
    None(W),
    Gzip(flate2::write::GzEncoder<W>),
    Xz(liblzma::write::XzEncoder<W>),
}

impl<W: io::Write> Compressor<W> {
    pub fn new(inner: W, how: Compression, xz_preset: u32) -> Self {
        match how {
            Compression::None => Compressor::None(inner),
            Compression::Gzip => Compressor::Gzip(flate2::write::GzEncoder::new(inner, flate2::Compression::default())),
            Compression::Xz => Compressor::Xz(liblzma::write::XzEncoder::new(inner, xz_preset.min(9))),
        }
    }

    /// Ends the compressed stream and flushes; returns the inner writer.
    pub fn finish(self) -> io::Result<W> {
        let mut w = match self {
            Compressor::None(w) => w,
            Compressor::Gzip(e) => e.finish()?,
            Compressor::Xz(e) => e.finish()?,
        };
        w.flush()?;
        Ok(w)
    }
}

impl<W: io::Write> io::Write for Compressor<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Compressor::None(w) => w.write(buf),
            Compressor::Gzip(e) => e.write(buf),
            Compressor::Xz(e) => e.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Compressor::None(w) => w.flush(),
            Compressor::Gzip(e) => e.flush(),
            Compressor::Xz(e) => e.flush(),
        }
    }
}

/// A decompressor whose errors say which compression failed and after how many
/// decompressed bytes.
struct Labelled<R> {
    inner: R,
    what: Compression,
    out_bytes: u64,
}

impl<R: Read> Read for Labelled<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.out_bytes += n as u64;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("{} data is corrupt or truncated after {} decompressed bytes ({e})", self.what, self.out_bytes),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn compressed(bytes: &[u8], how: Compression) -> Vec<u8> {
        let mut e = Compressor::new(Vec::new(), how, 6);
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> { compressed(bytes, Compression::Gzip) }

    fn xz(bytes: &[u8]) -> Vec<u8> { compressed(bytes, Compression::Xz) }

    fn read_all(file: Vec<u8>) -> (io::Result<Vec<u8>>, Compression) {
        let head = file[..file.len().min(16)].to_vec();
        let (mut r, c) = decompressed(&head, io::Cursor::new(file));
        let mut out = Vec::new();
        (r.read_to_end(&mut out).map(|_| out), c)
    }

    fn payload() -> Vec<u8> {
        (0..100_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect()
    }

    #[test]
    fn gzip_and_xz_files_read_back_as_their_contents_and_plain_files_pass_through() {
        let p = payload();
        assert_eq!(read_all(gzip(&p)).0.unwrap(), p);
        assert_eq!(read_all(gzip(&p)).1, Compression::Gzip);
        assert_eq!(read_all(xz(&p)).0.unwrap(), p);
        assert_eq!(read_all(xz(&p)).1, Compression::Xz);
        let (plain, c) = read_all(p.clone());
        assert_eq!((plain.unwrap(), c), (p, Compression::None));
    }

    #[test]
    fn concatenated_streams_are_read_whole() {
        let (a, b) = (b"first part ".to_vec(), b"second part".to_vec());
        assert_eq!(read_all([gzip(&a), gzip(&b)].concat()).0.unwrap(), [a.clone(), b.clone()].concat());
        assert_eq!(read_all([xz(&a), xz(&b)].concat()).0.unwrap(), [a, b].concat());
    }

    #[test]
    fn a_truncated_or_corrupt_stream_is_an_error_that_names_the_compression() {
        let p = payload();
        for (name, mut file) in [("gzip", gzip(&p)), ("xz", xz(&p))] {
            let cut = file[..file.len() / 2].to_vec();
            let e = read_all(cut).0.expect_err("a truncated stream must not read as a shorter one");
            assert!(e.to_string().starts_with(&format!("{name} data is corrupt or truncated after ")), "{e}");
            let mid = file.len() / 2;
            file[mid] ^= 0xff;
            let e = read_all(file).0.expect_err("a corrupt stream must be refused");
            assert!(e.to_string().contains("corrupt or truncated"), "{e}");
        }
    }
}
