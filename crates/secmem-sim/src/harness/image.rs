//! Verifying a saved NVM image: load it (rejecting damaged files), rebuild the controller's
//! view with the design's recovery, and read every data line it holds through the secure
//! read path.

use super::crash::fresh_controller;
use crate::config::Config;
use crate::run::SimError;
use secmem_core::addr::{LINES_PER_PAGE, LINE_SHIFT};
use secmem_core::Cycle;
use secmem_core::ConfigError;
use secmem_schemes::image_file;
use secmem_schemes::recovery::RecoveryReport;
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
            "pcm.capacity_gib",
            format!("the image was made for {} bytes of data, the config says {} ({} GiB)", meta.data_bytes, cfg.data_bytes(), cfg.pcm.capacity_gib),
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
    // Every data line the image holds, and every line of a page whose counter block it holds:
    // a written line deleted from the image reads back as boot content under its advanced
    // counter, which the secure read must reject (reading only the lines present would
    // pass an image with written lines cut out).
    let data_lines_end = cfg.data_bytes() >> LINE_SHIFT;
    let mut data_lines: Vec<u64> = image.lines_in(0, data_lines_end);
    let l = &mc.layout;
    let counter_first = l.counter_base >> LINE_SHIFT;
    for ctr in image.lines_in(counter_first, counter_first + l.counter_blocks) {
        let page = ctr - counter_first;
        data_lines.extend(page * LINES_PER_PAGE..(page + 1) * LINES_PER_PAGE);
    }
    data_lines.sort_unstable();
    data_lines.dedup();
    let mut out = ImageCheck { lines_in_image: image.len() as u64, ..Default::default() };
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
