//! Helpers shared by the integration tests that use them (`mod common;`).

use secmem_sim::Config;

/// A temporary directory, created empty and removed when dropped (also when the test fails).
#[allow(dead_code)] // not every test that includes `common` makes one
pub struct TmpDir(pub std::path::PathBuf);
#[allow(dead_code)]
impl TmpDir {
    pub fn new(name: &str) -> TmpDir {
        let d = std::env::temp_dir().join(format!("secmem-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        TmpDir(d)
    }
}
impl Drop for TmpDir {
    fn drop(&mut self) { let _ = std::fs::remove_dir_all(&self.0); }
}

/// `preset` with caches small enough that metadata is evicted, written back and fetched again
/// many times in 6,000 random records over 256 KiB, then `extra`.
#[allow(dead_code)] // not every test that includes `common` uses it
pub fn cfg(preset: &str, extra: &[&str]) -> Config {
    let mut o: Vec<String> = [
        "run.progress=false",
        "workload.footprint_bytes=262144",
        "workload.requests=6000",
        "workload.pattern=random",
        "l1.size_kib=4", "l1.ways=2", "l2.size_kib=8", "l2.ways=4", "llc.size_kib=16", "llc.ways=4",
        "metadata_cache.counter.size_kib=2", "metadata_cache.mac.size_kib=2", "metadata_cache.tree.size_kib=2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    o.extend(extra.iter().map(|s| s.to_string()));
    Config::load(Some(preset), None, &o).unwrap()
}
