//! Attacks on Horus' Cache Hierarchy Vault (functional mode).
//!
//! A trace runs, power fails and Horus drains into the vault; the vault (and the registers
//! on chip) is then kept as the clean post-drain state. Each injection starts from that state,
//! tampers with the vault in NVM the way an attacker with the DIMM could, crashes and runs
//! Horus' recovery, and checks the outcome: recovery must fail closed with the right class
//! before any line is restored. Classes:
//!
//! * `tamper-data`, `tamper-address`, `tamper-mac`: flip one random bit of a drained line's
//!   ciphertext, of its address slot, or of its MAC block;
//! * `splice`: swap two drained lines whole (ciphertext, address and, for SLM, MAC slot);
//! * `replay`: put back the vault of an earlier drain episode (the whole region);
//! * `truncate`: drop the last k drained blocks (k random in 1..=8): they read as what NVM
//!   held before this episode wrote them;
//! * `tamper-metadata`: flip one bit of a drained metadata-cache block.
//!
//! Expected class: `vault-data-mac` (SLM) or `vault-level2-mac` (DLM) for the line attacks,
//! `metadata-tree` for the metadata blocks; `truncate` and `replay` may hit either.

use crate::config::Config;
use crate::engine::{build_controller, Engine};
use crate::harness::replay::{collect, record_error};
use crate::run::{SimError, TraceInput};
use rand::{Rng, SeedableRng};
use secmem_core::addr::LINE_SHIFT;
use secmem_core::error::ConfigError;
use secmem_core::Cycle;
use secmem_crypto::{node_entry, set_node_entry};
use secmem_schemes::controller::eadr::{DrainClock, DrainStats};
use secmem_schemes::controller::functional::NvmImage;
use secmem_schemes::designs::horus::{Horus, MacLevels};
use secmem_schemes::{Design, SecureMc};
use serde::Serialize;
use std::collections::BTreeMap;

pub const VAULT_ATTACK_CLASSES: &[&str] = &["tamper-data", "tamper-address", "tamper-mac", "splice", "replay", "truncate", "tamper-metadata"];

#[derive(Clone, Debug, Default, Serialize)]
pub struct VaultClassOutcome {
    pub injected: u64,
    /// Recovery failed closed.
    pub detected: u64,
    /// ... naming an expected class.
    pub right_class: u64,
    /// Recovery succeeded although the vault was changed.
    pub missed: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct VaultAttackOutcome {
    pub scheme: String,
    pub classes: BTreeMap<String, VaultClassOutcome>,
    /// Clean recoveries (no tampering) and how many failed (false alarms).
    pub clean_recoveries: u64,
    pub false_alarms: u64,
    pub drained_lines: u64,
    pub drained_metadata_blocks: u64,
    pub examples: Vec<String>,
}

impl VaultAttackOutcome {
    pub fn all_detected(&self) -> bool {
        self.false_alarms == 0 && self.classes.values().all(|c| c.injected > 0 && c.right_class == c.injected)
    }
}

/// Swaps 64-bit slot `sx` of block `ax` with slot `sy` of block `ay` (device addresses).
fn swap_slots(img: &mut NvmImage, ax: u64, ay: u64, sx: usize, sy: usize) {
    let (lx, ly) = (ax >> LINE_SHIFT, ay >> LINE_SHIFT);
    let mut bx = img.get(lx);
    let (vx, vy) = (node_entry(&bx, sx), node_entry(&img.get(ly), sy));
    set_node_entry(&mut bx, sx, vy);
    if lx == ly {
        set_node_entry(&mut bx, sy, vx);
    } else {
        let mut by = img.get(ly);
        set_node_entry(&mut by, sy, vx);
        img.put(ly, by);
    }
    img.put(lx, bx);
}

/// One drain episode: run `records[range]` on `engine`, drain into the vault.
fn episode(engine: &mut Engine, horus: &mut Horus, records: &[secmem_trace::Record], first: usize, cfg: &Config, input: &TraceInput) -> Result<(u64, u64), SimError> {
    for (i, r) in records.iter().enumerate() {
        if (i as u64).is_multiple_of(crate::interrupt::CHECK_EVERY) {
            crate::interrupt::check()?;
        }
        engine.step(r, (first + i) as u64).map_err(|x| record_error(input, cfg, x))?;
    }
    engine.settle();
    let lines = crate::harness::drain::hierarchy_drain_lines(engine);
    let mut clock = DrainClock::new(cfg.drain.max_inflight, engine.now());
    let mut stats = DrainStats::default();
    horus.drain(&mut engine.mc, &lines, &mut clock, &mut stats).map_err(|e| SimError::Config(ConfigError::new("drain", e.to_string())))?;
    Ok((lines.len() as u64, stats.metadata_blocks))
}

fn image_of(mc: &SecureMc) -> NvmImage { mc.func.as_ref().expect("functional").image.clone() }

pub fn vault_attack_campaign(cfg: &Config, input: &TraceInput, dlm: bool, per_class: u64, seed: u64) -> Result<VaultAttackOutcome, SimError> {
    super::require_some(per_class, "--per-class", "injections")?;
    let levels = if dlm { MacLevels::Double } else { MacLevels::Single };
    // The campaign runs Horus' drain itself (SLM or DLM by `dlm`) on secure memory: a config
    // asking otherwise is a conflict, not something to override silently.
    if !cfg.security.enabled {
        return Err(SimError::Config(ConfigError::new("security.enabled", "vault attacks need secure memory")));
    }
    let mut fcfg = cfg.clone();
    fcfg.run.functional = true;
    let ctx = crate::engine::design_context(&fcfg);
    let mut horus = Horus::new(levels, ctx.hierarchy_lines, ctx.metadata_lines);
    // The engine's design is Horus (its device then holds the vault); its run-time data path
    // is the baseline's, so the episodes run as the baseline would.
    if cfg.run.design != secmem_schemes::designs::baseline::ENTRY.name && cfg.run.design != horus.name() {
        return Err(SimError::Config(ConfigError::new(
            "run.design",
            format!("vault-attack runs Horus' drain itself (--scheme horus-slm or horus-dlm) over the baseline's data path; the config asks for '{}'", cfg.run.design),
        )));
    }
    fcfg.run.design = horus.name().to_string();
    fcfg.validate()?;
    let records = collect(&fcfg, input)?;
    let half = records.len() / 2;
    // Episode 1 (first half of the trace), recovered; then episode 2 (second half): the
    // replay attack puts episode 1's vault back.
    let mut engine = Engine::new(&fcfg)?;
    episode(&mut engine, &mut horus, &records[..half], 0, &fcfg, input)?;
    let old_image = image_of(&engine.mc);
    horus.crash(&mut engine.mc, false);
    let rec = horus.recover_drained(&mut engine.mc, Cycle::ZERO).map_err(|e| SimError::Config(ConfigError::new("drain", e.to_string())))?;
    // The system resumes: the recovered lines are dirty in the hierarchy again.
    engine.hier = crate::hierarchy::Hierarchy::new(&fcfg.l1, &fcfg.l2, &fcfg.llc, fcfg.hierarchy.inclusive_llc, true);
    for (line, data) in rec.lines {
        engine.restore_dirty_line(line, data).map_err(|e| SimError::Config(ConfigError::new("drain", e.to_string())))?;
    }
    let (n_lines, n_md) = episode(&mut engine, &mut horus, &records[half..], half, &fcfg, input)?;
    let clean_image = image_of(&engine.mc);
    let clean_regs = horus.regs;
    let chv = horus.layout(&engine.mc);
    let mut out = VaultAttackOutcome { scheme: horus.name().into(), drained_lines: n_lines, drained_metadata_blocks: n_md, ..Default::default() };
    if n_lines < 2 || n_md == 0 {
        return Err(SimError::Config(ConfigError::new(
            "workload",
            format!("the trace leaves {n_lines} dirty lines and {n_md} dirty metadata blocks to drain; the attacks need at least 2 and 1 (write more lines than the LLC holds, so memory is written)"),
        )));
    }
    let total = clean_regs.edc;
    let mut mc = build_controller(&fcfg)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let line_class = if dlm { "vault-level2-mac" } else { "vault-data-mac" };

    let recover_with = |image: NvmImage, horus: &mut Horus, mc: &mut SecureMc| {
        mc.func.as_mut().unwrap().image = image;
        horus.regs = clean_regs;
        horus.crash(mc, false);
        mc.drop_metadata_caches();
        horus.recover_drained(mc, Cycle::ZERO)
    };
    // Clean recoveries first: no false alarms.
    for _ in 0..3 {
        out.clean_recoveries += 1;
        if let Err(e) = recover_with(clean_image.clone(), &mut horus, &mut mc) {
            out.false_alarms += 1;
            out.examples.push(format!("clean recovery failed: {e}"));
        }
    }
    let flip = |img: &mut NvmImage, addr: u64, rng: &mut rand_chacha::ChaCha8Rng| {
        let mut b = img.get(addr >> LINE_SHIFT);
        let bit = rng.gen_range(0..512);
        b[bit / 8] ^= 1 << (bit % 8);
        img.put(addr >> LINE_SHIFT, b);
    };
    for &class in VAULT_ATTACK_CLASSES {
        let entry = out.classes.entry(class.to_string()).or_default();
        for _ in 0..per_class {
            let mut img = clean_image.clone();
            let expected: &[&str] = match class {
                "tamper-data" => {
                    let e = rng.gen_range(0..n_lines);
                    flip(&mut img, chv.data_addr(e), &mut rng);
                    &[line_class]
                }
                "tamper-address" => {
                    let e = rng.gen_range(0..n_lines);
                    let a = chv.addr_block(e) >> LINE_SHIFT;
                    let mut b = img.get(a);
                    let bit = (e % 8) as usize * 64 + rng.gen_range(0..40);
                    b[bit / 8] ^= 1 << (bit % 8);
                    img.put(a, b);
                    &[line_class]
                }
                "tamper-mac" => {
                    let e = rng.gen_range(0..n_lines);
                    let a = chv.mac_block(e, levels);
                    let mut b = img.get(a >> LINE_SHIFT);
                    // A bit of a MAC slot in use (the slot of this line's MAC or group MAC).
                    let slot = if dlm { (e / 8) % 8 } else { e % 8 } as usize;
                    let bit = slot * 64 + rng.gen_range(0..fcfg.security.mac_bits as usize);
                    b[bit / 8] ^= 1 << (bit % 8);
                    img.put(a >> LINE_SHIFT, b);
                    &[line_class]
                }
                "splice" => {
                    let x = rng.gen_range(0..n_lines);
                    let mut y = rng.gen_range(0..n_lines);
                    while y == x {
                        y = rng.gen_range(0..n_lines);
                    }
                    let (dx, dy) = (img.get(chv.data_addr(x) >> LINE_SHIFT), img.get(chv.data_addr(y) >> LINE_SHIFT));
                    img.put(chv.data_addr(x) >> LINE_SHIFT, dy);
                    img.put(chv.data_addr(y) >> LINE_SHIFT, dx);
                    // The address slots move with the data, and (SLM) so do the MAC slots: the
                    // entries are complete and self-consistent, only their positions — hence
                    // the drain counters they were sealed with — are swapped.
                    swap_slots(&mut img, chv.addr_block(x), chv.addr_block(y), (x % 8) as usize, (y % 8) as usize);
                    if !dlm {
                        swap_slots(&mut img, chv.mac_block(x, levels), chv.mac_block(y, levels), (x % 8) as usize, (y % 8) as usize);
                    }
                    &[line_class]
                }
                "replay" => {
                    for l in (chv.data_base >> LINE_SHIFT)..(chv.end >> LINE_SHIFT) {
                        match old_image.get_opt(l) {
                            Some(b) => img.put(l, b),
                            None => img.put(l, [0; 64]),
                        }
                    }
                    &[line_class, "metadata-tree"]
                }
                "truncate" => {
                    let k = rng.gen_range(1..=8u64).min(total);
                    for e in total - k..total {
                        let l = chv.data_addr(e) >> LINE_SHIFT;
                        img.put(l, old_image.get_opt(l).unwrap_or([0; 64]));
                    }
                    &[line_class, "metadata-tree"]
                }
                "tamper-metadata" => {
                    let e = n_lines + rng.gen_range(0..n_md);
                    flip(&mut img, chv.data_addr(e), &mut rng);
                    &["metadata-tree"]
                }
                _ => unreachable!(),
            };
            entry.injected += 1;
            match recover_with(img, &mut horus, &mut mc) {
                Ok(_) => {
                    entry.missed += 1;
                    if out.examples.len() < 8 {
                        out.examples.push(format!("{class}: recovery succeeded on a tampered vault"));
                    }
                }
                Err(e) => {
                    entry.detected += 1;
                    if expected.contains(&e.class.as_str()) {
                        entry.right_class += 1;
                    } else if out.examples.len() < 8 {
                        out.examples.push(format!("{class}: detected as {} ({e})", e.class));
                    }
                }
            }
        }
    }
    Ok(out)
}
