//! Verifying a saved NVM image: load it (rejecting damaged files), rebuild the controller's
//! view with the design's recovery, and read every data line it holds through the secure
//! read path.

use super::crash::fresh_controller;
use crate::config::Config;
use crate::run::SimError;
use secmem_core::addr::{LINES_PER_PAGE, LINE_SHIFT};
use secmem_core::tree::SecureLayout;
use secmem_core::Cycle;
use secmem_core::ConfigError;
use secmem_schemes::controller::functional::NvmImage;
use secmem_schemes::controller::image_file;
use secmem_schemes::controller::recovery::RecoveryReport;
use serde::Serialize;
use std::path::Path;

#[derive(Clone, Debug, Default, Serialize)]
pub struct ImageCheck {
    pub lines_in_image: u64,
    pub data_lines_verified: u64,
    pub integrity_failures: u64,
    pub first_failure: Option<String>,
    pub recovery: Option<RecoveryReport>,
    pub recovery_error: Option<String>,
}

impl ImageCheck {
    pub fn ok(&self) -> bool { self.integrity_failures == 0 && self.recovery_error.is_none() }
}

pub fn verify_image(cfg: &Config, path: &Path) -> Result<ImageCheck, SimError> {
    let (meta, root, image) = image_file::load(path).map_err(|e| SimError::Io { path: e.path.clone(), message: match e.offset {
        Some(o) => format!("byte offset {o}: {}", e.message),
        None => e.message,
    } })?;
    let mismatch = |field: &str, have: u64, want: u64| {
        SimError::Config(ConfigError::new(field, format!("the image was made with {have}, the config says {want}")))
    };
    if meta.data_bytes != cfg.data_bytes() {
        return Err(SimError::Config(ConfigError::new(
            "memory.capacity_gib",
            format!("the image was made for {} bytes of data, the config says {} ({} GiB)", meta.data_bytes, cfg.data_bytes(), cfg.memory.capacity_gib),
        )));
    }
    if meta.arity as u64 != cfg.tree.arity {
        return Err(mismatch("tree.arity", meta.arity as u64, cfg.tree.arity));
    }
    if meta.mac_bits != cfg.security.mac_bits {
        return Err(mismatch("security.mac_bits", meta.mac_bits as u64, cfg.security.mac_bits as u64));
    }
    if meta.minor_bits != cfg.security.minor_counter_bits {
        return Err(mismatch("security.minor_counter_bits", meta.minor_bits as u64, cfg.security.minor_counter_bits as u64));
    }
    let random = cfg.security.counter_init == secmem_schemes::config::CounterInit::Random;
    if meta.random_counters != random {
        let name = |r: bool| if r { "random" } else { "zero" };
        return Err(SimError::Config(ConfigError::new(
            "security.counter_init",
            format!("the image was made with {}, the config says {}", name(meta.random_counters), name(random)),
        )));
    }
    let mut fcfg = cfg.clone();
    fcfg.run.functional = true;
    fcfg.run.seed = meta.key_seed;
    fcfg.validate()?;
    let mut mc = fresh_controller(&fcfg)?;
    let mut design = crate::engine::build_design(&fcfg)?;
    let data_lines = lines_to_read(&mc.layout, &image);
    let mut out = ImageCheck { lines_in_image: image.len() as u64, ..Default::default() };
    // Nothing a run saves lies past the tree (the reserved region above it is a drain's, and
    // no secure read covers it): such a line is not part of a verifiable image.
    let end_line = mc.layout.end >> LINE_SHIFT;
    for line in image.lines_in(end_line, u64::MAX) {
        out.integrity_failures += 1;
        out.first_failure.get_or_insert(format!(
            "line {line:#x} (address {:#x}) is past secure memory (data, counters, MACs and tree end at address {:#x}): a saved image holds nothing there",
            line << LINE_SHIFT,
            mc.layout.end
        ));
    }
    {
        let f = mc.func.as_mut().expect("functional");
        f.image = image;
        f.root = root;
    }
    design.crash(&mut mc, false);
    match design.recover(&mut mc, Cycle::ZERO) {
        Ok(r) => out.recovery = Some(r),
        Err(e) => {
            out.recovery_error = Some(e.to_string());
            return Ok(out);
        }
    }
    for line in data_lines {
        match design.read(&mut mc, line, Cycle::ZERO) {
            Ok(_) => out.data_lines_verified += 1,
            Err(e) => {
                out.integrity_failures += 1;
                out.first_failure.get_or_insert(e.to_string());
            }
        }
    }
    Ok(out)
}

/// The data lines whose secure reads cover every line of `image` within secure memory, so that
/// no stored byte goes unchecked:
/// * every data line it holds;
/// * every line of a page whose counter block it holds (a written line cut out of the image
///   reads as boot content under its advanced counter and fails);
/// * every line whose MAC a stored MAC block holds (a MAC slot changed for a line nothing else
///   names would otherwise pass);
/// * for every stored tree node, the first line under each of its children, so that each
///   entry is compared with its child on the way up (recovery compares only the root: a
///   changed entry of a subtree no read visits would otherwise pass).
fn lines_to_read(l: &SecureLayout, image: &NvmImage) -> Vec<u64> {
    let mut lines: Vec<u64> = image.lines_in(0, l.data_bytes >> LINE_SHIFT);
    let counter_first = l.counter_base >> LINE_SHIFT;
    for ctr in image.lines_in(counter_first, counter_first + l.counter_blocks) {
        let page = ctr - counter_first;
        lines.extend(page * LINES_PER_PAGE..(page + 1) * LINES_PER_PAGE);
    }
    let mac_first = l.mac_base >> LINE_SHIFT;
    let data_lines = l.data_bytes >> LINE_SHIFT;
    for mac in image.lines_in(mac_first, mac_first + l.mac_blocks) {
        let first = (mac - mac_first) * l.macs_per_block;
        lines.extend(first..(first + l.macs_per_block).min(data_lines));
    }
    let tree = &l.tree;
    // Pages under one node of level `level - 1`: arity^(level - 1).
    let mut pages_per_child = 1u64;
    for level in 1..tree.root_level() {
        let base = tree.base[level] >> LINE_SHIFT;
        for node in image.lines_in(base, base + tree.nodes[level]) {
            let first_child = (node - base) * tree.arity;
            for child in first_child..(first_child + tree.arity).min(tree.nodes[level - 1]) {
                lines.push(child * pages_per_child * LINES_PER_PAGE);
            }
        }
        pages_per_child = pages_per_child.saturating_mul(tree.arity);
    }
    lines.sort_unstable();
    lines.dedup();
    lines
}
