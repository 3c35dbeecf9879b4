//! Crash injection with verified recovery.
//!
//! A campaign runs a trace twice. The first pass (counting mode, same counts) finds the
//! *persist points*: the records during which at least one write reached memory. Crash points
//! are drawn from them with the seed. The second pass runs in functional mode with an
//! independent plaintext oracle (the content of every line as last written to memory); at each
//! crash point it copies what survives a crash — the NVM image and the on-chip root register
//! (the write pending queue is in the ADR domain and already applied to the image) — into a
//! recovery controller whose volatile state starts empty, runs the design's recovery, and reads
//! every line the oracle knows through the full secure read path. A point recovers when
//! recovery succeeds and every line equals the oracle.
//!
//! An OS-level trace (format v2: process loads and stores, `alloc`, `fork`, `free`, `exit`)
//! runs through the OS model, so the design's page commands (Lelantus' page_copy, page_phyc
//! and page_free, Silent Shredder's zero fill) happen between crash points. The oracle follows
//! them as the memory the kernel sees: a copy makes the destination read as the source did, a
//! zero fill as zeros, and a freed page's content is undefined (it is not checked until
//! something is written or copied there again). A record that carried out a page command is
//! a persist point too.
//!
//! With `security.metadata_persistence = "battery-backed"` the metadata caches, the counter
//! view and the design's on-chip state survive too: the recovery controller takes copies of
//! the live ones, the design is a copy of the live design, and nothing is rebuilt.
//!
//! The harness knows nothing of the baseline: a design's own recovery (BMF's persistent
//! roots, Lelantus' copy records in its counter blocks) plugs in through `Design::crash` /
//! `Design::recover` on the surviving image. A hook that runs on the *live* state at the
//! moment of power loss (an eADR drain of the cache hierarchy, as Horus needs) is the drain
//! harness's (`super::drain`).

use super::replay::{Live, Oracle, Replay};
use crate::config::Config;
use crate::engine::{build_controller, build_design, build_media};
use crate::run::{SimError, TraceInput};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use secmem_core::Cycle;
use secmem_schemes::config::MetadataPersistence;
use secmem_schemes::controller::functional::NvmImage;
use secmem_schemes::{Design, SecureMc};
use serde::Serialize;

#[derive(Clone, Debug, Default, Serialize)]
pub struct CrashOutcome {
    pub points: u64,
    pub recovered: u64,
    /// Points whose recovery failed or that read back a line different from the oracle.
    pub mismatches: u64,
    /// Recovery failed closed (detected inconsistency) at this many points.
    pub recovery_failures: u64,
    /// Lines read back that differed from the oracle or failed verification, over all points.
    pub bad_lines: u64,
    /// Lines checked against the oracle, over all points.
    pub lines_checked: u64,
    /// Lines that read back *without* an integrity error but differ from the oracle: silent
    /// corruption, the one outcome a secure memory must never produce.
    pub silent_corruptions: u64,
    /// The first few failures, described.
    pub examples: Vec<String>,
    /// Mean recovery work per point.
    pub mean_recovery_counter_blocks: f64,
    pub mean_recovery_hashes: f64,
    pub mean_recovery_cycles: f64,
    /// Records in the trace and persist points available (in the region of interest: at or
    /// after `run.warmup_requests`).
    pub records: u64,
    pub persist_points: u64,
    /// Crash points right after a record that carried out a page command (an OS-level trace's
    /// copy, zero fill, page_phyc or free): how often the campaign crashed around them.
    pub page_command_points: u64,
}

/// A recovery controller with the run's geometry and keys, and empty volatile state.
pub(crate) fn fresh_controller(cfg: &Config) -> Result<SecureMc, SimError> {
    let mut fcfg = cfg.clone();
    fcfg.run.functional = true;
    Ok(build_controller(&fcfg)?)
}

pub fn crash_campaign(cfg: &Config, input: &TraceInput, points: u64, seed: u64) -> Result<CrashOutcome, SimError> {
    super::require_some(points, "--points", "crashes")?;
    if !cfg.pcm.adr {
        return Err(SimError::Config(secmem_core::ConfigError::new(
            "pcm.adr",
            "crash injection models the ADR persistence domain (writes persist when accepted); set pcm.adr = true",
        )));
    }
    // The campaign runs in functional mode whatever the config says: check the config as
    // a functional one (64 B counter blocks, arity <= 8) before spending a pass on it.
    let mut fcfg = cfg.clone();
    fcfg.run.functional = true;
    fcfg.validate()?;
    let replay = Replay::load(cfg, input)?;
    // The warm-up brings caches to a steady state before the region of interest, as in
    // `run`: crash points are drawn from the region only.
    let warmup = cfg.run.warmup_requests;
    crate::run::ensure_roi_left(warmup, replay.len() as u64)?;
    let roi_start = replay.roi_start(warmup);
    // Pass 1 (counting mode): which records persist something.
    let mut counting = cfg.clone();
    counting.run.functional = false;
    let mut persist_records: Vec<u64> = Vec::new();
    let mut command_records: rustc_hash::FxHashSet<u64> = Default::default();
    {
        let mut live = Live::new(&counting, &replay)?;
        let (mut last, mut last_commands) = (0u64, 0u64);
        for i in 0..replay.len() {
            live.step(&replay, i, cfg, input)?;
            let (now, commands) = (live.persisted(), live.page_commands());
            if now > last && i as u64 >= roi_start {
                persist_records.push(i as u64);
                if commands > last_commands {
                    command_records.insert(i as u64);
                }
            }
            (last, last_commands) = (now, commands);
        }
    }
    if persist_records.is_empty() {
        // Name what the user can change: the generated workload's fields, or the trace file.
        let (field, what, remedy) = match input {
            TraceInput::Workload => {
                ("workload", "the workload".to_string(), "use flushes/fences, e.g. workload.persist_writes = true, or a footprint larger than the caches")
            }
            TraceInput::File(p) => ("", format!("the trace {}", p.display()), "use a trace with flushes or fences, or one that touches more than the caches hold"),
        };
        let after = if warmup > 0 { " after the warm-up (run.warmup_requests)" } else { "" };
        return Err(SimError::Config(secmem_core::ConfigError::new(
            field,
            format!("{what} never writes to memory{after}, so there is no persist point to crash at ({remedy})"),
        )));
    }
    if points > persist_records.len() as u64 {
        // Crashing twice at one point tests nothing new; asking for more points than exist
        // is a request the run cannot meet, not one to shrink silently.
        return Err(SimError::Config(secmem_core::ConfigError::new(
            "--points",
            format!(
                "{points} crash points asked for, but the trace has only {} persist points (records during which a write or a page command reached memory)",
                persist_records.len()
            ),
        )));
    }
    let mut out = CrashOutcome { records: replay.len() as u64, persist_points: persist_records.len() as u64, ..Default::default() };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    persist_records.shuffle(&mut rng);
    persist_records.truncate(points as usize);
    persist_records.sort_unstable();
    out.page_command_points = persist_records.iter().filter(|r| command_records.contains(r)).count() as u64;

    // Pass 2 (functional): crash at each chosen point and recover.
    let mut live = Live::new(&fcfg, &replay)?;
    let oracle = Oracle::attach(live.engine());
    let mut recovery = fresh_controller(&fcfg)?;
    let mut design = build_design(&fcfg)?;
    let battery_backed = fcfg.security.metadata_persistence == MetadataPersistence::BatteryBacked;
    let mut next = 0usize;
    let (mut sum_blocks, mut sum_hashes, mut sum_cycles) = (0f64, 0f64, 0f64);
    for i in 0..replay.len() {
        if next >= persist_records.len() {
            break;
        }
        live.step(&replay, i, cfg, input)?;
        if persist_records[next] != i as u64 {
            continue;
        }
        next += 1;
        out.points += 1;
        // What survives: the NVM image and the root register; with battery-backed metadata
        // also the metadata caches, the counter view and the design's on-chip state (a copy
        // of the live design's, so the run goes on unaffected).
        let live_engine = live.engine();
        let f = live_engine.mc.func.as_ref().expect("functional");
        let (image, root): (NvmImage, [u8; 64]) = (f.image.clone(), f.root);
        {
            let f = recovery.func.as_mut().expect("functional");
            f.image = image;
            f.root = root;
        }
        // And what the design's tree update keeps on chip in battery-backed storage.
        recovery.adopt_tree_update_state_of(&live_engine.mc);
        let mut kept = None;
        if battery_backed {
            recovery.keep_battery_backed_state_of(&live_engine.mc);
            kept = Some(live_engine.design.clone_box());
        }
        let design: &mut dyn Design = match kept.as_mut() {
            Some(d) => d.as_mut(),
            None => design.as_mut(),
        };
        design.crash(&mut recovery, battery_backed);
        // Each recovery starts on an idle device at cycle 0, so its time is its own.
        recovery.media = build_media(&fcfg)?;
        // Battery-backed: nothing was lost that NVM must give back, so nothing is rebuilt
        // (the reads below still verify every line against the kept tree nodes and root).
        let recovered = if battery_backed { Ok(Default::default()) } else { design.recover(&mut recovery, Cycle::ZERO) };
        let ok = match recovered {
            Ok(rep) => {
                sum_blocks += rep.counter_blocks_read as f64;
                sum_hashes += rep.hashes as f64;
                sum_cycles += rep.cycles as f64;
                true
            }
            Err(e) => {
                out.recovery_failures += 1;
                if out.examples.len() < 5 {
                    out.examples.push(format!("crash after record {i}: {e}"));
                }
                false
            }
        };
        let mut bad = 0u64;
        if ok {
            let oracle = oracle.borrow();
            let mut lines: Vec<(&u64, &[u8; 64])> = oracle.lines.iter().collect();
            lines.sort_unstable_by_key(|x| *x.0);
            for (&line, want) in lines {
                out.lines_checked += 1;
                match design.read(&mut recovery, line, Cycle::ZERO) {
                    Ok((_, Some(got))) if &got == want => {}
                    Ok((_, got)) => {
                        bad += 1;
                        out.silent_corruptions += 1;
                        if out.examples.len() < 5 {
                            out.examples.push(format!("crash after record {i}: line {line:#x} reads {:02x?}.. expected {:02x?}..", got.map(|g| g[0]), want[0]));
                        }
                    }
                    Err(e) => {
                        bad += 1;
                        if out.examples.len() < 5 {
                            out.examples.push(format!("crash after record {i}: {e}"));
                        }
                    }
                }
            }
        }
        out.bad_lines += bad;
        if ok && bad == 0 {
            out.recovered += 1;
        } else {
            out.mismatches += 1;
        }
    }
    let n = out.points.max(1) as f64;
    out.mean_recovery_counter_blocks = sum_blocks / n;
    out.mean_recovery_hashes = sum_hashes / n;
    out.mean_recovery_cycles = sum_cycles / n;
    Ok(out)
}
