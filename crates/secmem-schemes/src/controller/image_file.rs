//! The NVM image file: what survives a power loss (the persistent bytes of the device and the
//! on-chip root register), saved after a functional run so that it can be verified, attacked
//! or recovered later.
//!
//! Layout (little-endian), version 1:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `SECMIMG\0` |
//! | 8 | 2 | version (1) |
//! | 10 | 2 | initial counters: 0 zero, 1 random (`security.counter_init`; files written before it existed hold 0 here) |
//! | 12 | 4 | MAC bits |
//! | 16 | 4 | minor-counter bits |
//! | 20 | 4 | tree arity |
//! | 24 | 8 | data bytes (protected capacity) |
//! | 32 | 8 | key seed (a simulator's keys are derived from the run seed; not a secret here) |
//! | 40 | 64 | root register |
//! | 104 | 8 | number of lines N |
//! | 112 | 72 N | N x (device line number u64, 64 bytes), sorted by line |
//! | 112 + 72 N | 32 | BLAKE3 of every byte before it (file integrity, not security) |
//!
//! The trailing checksum tells a damaged file (truncated, bit rot) from an attacked image:
//! a file that fails it is rejected before any byte is used; an attack on the image itself is
//! what the secure memory's own checks must catch.

use crate::controller::functional::NvmImage;
use std::io::{Read, Write};
use std::path::Path;

pub const MAGIC: &[u8; 8] = b"SECMIMG\0";
pub const VERSION: u16 = 1;
const HEADER: usize = 112;

/// Geometry and keys an image was made with; loading checks them against the config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageMeta {
    pub mac_bits: u32,
    pub minor_bits: u32,
    pub arity: u32,
    pub data_bytes: u64,
    pub key_seed: u64,
    /// The counters started at seeded random values (`security.counter_init = "random"`,
    /// derived from `key_seed`, the run seed), not at zero: the boot content of every block
    /// the image does not hold depends on it.
    pub random_counters: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageError {
    pub path: String,
    pub offset: Option<u64>,
    pub message: String,
}

impl std::fmt::Display for ImageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.offset {
            Some(o) => write!(f, "{}: byte offset {}: {}", self.path, o, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}
impl std::error::Error for ImageError {}

pub fn save(path: &Path, meta: &ImageMeta, root: &[u8; 64], image: &NvmImage) -> Result<(), ImageError> {
    let err = |m: String| ImageError { path: path.display().to_string(), offset: None, message: m };
    // Line numbers, not (line, bytes) pairs: sorting pairs would copy every line's bytes once
    // more than the file buffer does.
    let lines = image.lines_in(0, u64::MAX);
    let mut buf = Vec::with_capacity(HEADER + lines.len() * 72 + 32);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&VERSION.to_le_bytes());
    buf.extend_from_slice(&u16::from(meta.random_counters).to_le_bytes());
    buf.extend_from_slice(&meta.mac_bits.to_le_bytes());
    buf.extend_from_slice(&meta.minor_bits.to_le_bytes());
    buf.extend_from_slice(&meta.arity.to_le_bytes());
    buf.extend_from_slice(&meta.data_bytes.to_le_bytes());
    buf.extend_from_slice(&meta.key_seed.to_le_bytes());
    buf.extend_from_slice(root);
    buf.extend_from_slice(&(lines.len() as u64).to_le_bytes());
    for l in lines {
        buf.extend_from_slice(&l.to_le_bytes());
        buf.extend_from_slice(&image.get(l));
    }
    let sum = blake3::hash(&buf);
    buf.extend_from_slice(sum.as_bytes());
    let mut f = std::fs::File::create(path).map_err(|e| err(format!("cannot create: {e}")))?;
    f.write_all(&buf).map_err(|e| err(format!("cannot write: {e}")))
}

/// Largest device line number an image may hold: 2^40 lines (64 TiB), far past the 1 GiB ..
/// 1 TiB devices configs allow, metadata and vault regions included.
const MAX_LINE: u64 = (1 << 40) - 1;

pub fn load(path: &Path) -> Result<(ImageMeta, [u8; 64], NvmImage), ImageError> {
    let name = path.display().to_string();
    let at = |o: usize, m: String| ImageError { path: name.clone(), offset: Some(o as u64), message: m };
    let mut buf = Vec::new();
    let cannot = |e: std::io::Error| ImageError { path: name.clone(), offset: None, message: format!("cannot read: {e}") };
    let mut f = std::fs::File::open(path).map_err(cannot)?;
    // An image is a file written by `save`; a device or pipe (`/dev/zero`) would be read
    // until memory runs out.
    if !f.metadata().map_err(cannot)?.is_file() {
        return Err(ImageError { path: name.clone(), offset: None, message: "not a regular file".into() });
    }
    f.read_to_end(&mut buf).map_err(cannot)?;
    if buf.len() < 8 || &buf[..8] != MAGIC {
        return Err(at(0, "not a secmem NVM image (bad magic)".into()));
    }
    if buf.len() < HEADER {
        return Err(at(buf.len(), format!("truncated header (needs {HEADER} bytes, file has {})", buf.len())));
    }
    let u16_at = |o: usize| u16::from_le_bytes(buf[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(buf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(buf[o..o + 8].try_into().unwrap());
    let version = u16_at(8);
    if version != VERSION {
        return Err(at(8, format!("unsupported image version {version} (this secmem reads version {VERSION})")));
    }
    let random_counters = match u16_at(10) {
        0 => false,
        1 => true,
        other => return Err(at(10, format!("unknown initial-counter code {other} (0 zero, 1 random)"))),
    };
    let meta = ImageMeta { mac_bits: u32_at(12), minor_bits: u32_at(16), arity: u32_at(20), data_bytes: u64_at(24), key_seed: u64_at(32), random_counters };
    let mut root = [0u8; 64];
    root.copy_from_slice(&buf[40..104]);
    let n = u64_at(104);
    let body_end = n.checked_mul(72).and_then(|b| b.checked_add(HEADER as u64));
    let Some(body_end) = body_end.filter(|&e| e + 32 <= buf.len() as u64) else {
        return Err(at(buf.len(), format!("truncated: the header announces {n} lines, the file is {} bytes", buf.len())));
    };
    let body_end = body_end as usize;
    if buf.len() != body_end + 32 {
        return Err(at(body_end + 32, format!("{} unexpected bytes after the checksum", buf.len() - body_end - 32)));
    }
    if blake3::hash(&buf[..body_end]).as_bytes() != &buf[body_end..] {
        return Err(at(body_end, "checksum mismatch: the file is corrupt".into()));
    }
    let mut image = NvmImage::default();
    let mut last = None;
    for i in 0..n as usize {
        let o = HEADER + i * 72;
        let line = u64_at(o);
        if line > MAX_LINE {
            return Err(at(o, format!("line {line:#x} is beyond any device secmem simulates (lines < {:#x})", MAX_LINE + 1)));
        }
        if last.is_some_and(|l| l >= line) {
            return Err(at(o, format!("line {line:#x} is out of order or repeated")));
        }
        last = Some(line);
        let mut b = [0u8; 64];
        b.copy_from_slice(&buf[o + 8..o + 72]);
        image.put(line, b);
    }
    Ok((meta, root, image))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (ImageMeta, [u8; 64], NvmImage) {
        let mut img = NvmImage::default();
        img.put(3, [7; 64]);
        img.put(1, [9; 64]);
        (ImageMeta { mac_bits: 64, minor_bits: 7, arity: 8, data_bytes: 1 << 20, key_seed: 5, random_counters: true }, [1; 64], img)
    }

    /// A scratch file in the temp directory, removed when dropped (also when the test fails).
    struct Tmp(std::path::PathBuf);

    impl std::ops::Deref for Tmp {
        type Target = std::path::Path;
        fn deref(&self) -> &std::path::Path { &self.0 }
    }

    impl AsRef<std::path::Path> for Tmp {
        fn as_ref(&self) -> &std::path::Path { &self.0 }
    }

    impl Drop for Tmp {
        fn drop(&mut self) { let _ = std::fs::remove_file(&self.0); }
    }

    fn tmp(name: &str) -> Tmp { Tmp(std::env::temp_dir().join(format!("secmem-img-{}-{name}", std::process::id()))) }

    #[test]
    fn an_image_round_trips() {
        let (m, r, i) = sample();
        let p = tmp("rt");
        save(&p, &m, &r, &i).unwrap();
        let (m2, r2, i2) = load(&p).unwrap();
        assert_eq!((m2, r2, i2.get(3), i2.get(1), i2.len()), (m, r, [7; 64], [9; 64], 2));
    }

    #[test]
    fn truncated_and_corrupt_images_are_rejected_with_an_offset() {
        let (m, r, i) = sample();
        let p = tmp("bad");
        save(&p, &m, &r, &i).unwrap();
        let good = std::fs::read(&p).unwrap();
        std::fs::write(&p, &good[..good.len() - 40]).unwrap();
        let e = load(&p).unwrap_err();
        assert!(e.message.contains("truncated") && e.offset.is_some(), "{e}");
        let mut bad = good.clone();
        bad[HEADER + 20] ^= 1;
        std::fs::write(&p, &bad).unwrap();
        assert!(load(&p).unwrap_err().message.contains("corrupt"));
        std::fs::write(&p, b"hello").unwrap();
        assert!(load(&p).unwrap_err().message.contains("magic"));
        let mut v2 = good.clone();
        v2[8] = 2;
        std::fs::write(&p, &v2).unwrap();
        assert!(load(&p).unwrap_err().message.contains("version 2"));
    }

    #[test]
    fn a_line_number_past_any_device_is_an_error_at_its_offset_not_a_panic() {
        // With a valid checksum, line u64::MAX used to panic in the image store and 2^58 to
        // load silently.
        let (m, r, _) = sample();
        let p = tmp("far");
        for far in [u64::MAX, 1 << 58, MAX_LINE + 1] {
            save(&p, &m, &r, &NvmImage::default()).unwrap();
            let mut buf = std::fs::read(&p).unwrap();
            buf.truncate(HEADER);
            buf[104..112].copy_from_slice(&1u64.to_le_bytes());
            buf.extend_from_slice(&far.to_le_bytes());
            buf.extend_from_slice(&[0; 64]);
            let sum = blake3::hash(&buf);
            buf.extend_from_slice(sum.as_bytes());
            std::fs::write(&p, &buf).unwrap();
            let e = load(&p).unwrap_err();
            assert_eq!(e.offset, Some(HEADER as u64), "{far:#x}: {e}");
            assert!(e.message.contains("beyond any device"), "{e}");
        }
    }

    #[test]
    fn a_device_is_not_read_as_an_image() {
        // /dev/zero used to be read until memory ran out.
        let e = load(Path::new("/dev/zero")).unwrap_err();
        assert!(e.message.contains("not a regular file"), "{e}");
    }
}
