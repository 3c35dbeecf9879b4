//! Attacks on the drive and crashes of the DIE, in functional mode (`secmem io-attack`,
//! `secmem io-crash`).
//!
//! Both run a seeded workload of writes and reads through D-Shield's metadata with real bytes
//! ([`super::bytes`]) against a plaintext oracle: `ios` I/Os of `io.block_bytes`, `io.read_percent`
//! of them reads, over a hot set of `ios / 4` blocks spread evenly across `io.space_gib` (so
//! blocks are rewritten, which replays need, and the whole tree is in use). The namespace is the
//! drive's whole data namespace, as `secmem io` lays it out; the caches are the config's.
//!
//! **Attacks.** The drive is what the attacker controls. A copy of it is kept at the middle of
//! the run (the attacker's recording, for replays). At the end the DIE's metadata is flushed
//! and its caches dropped (a clean restart: the top node stays on chip). Each injection changes
//! the drive, reads a target block cold (so every changed block on its path is fetched and
//! verified) and checks the failure's class and block, then restores the drive. Classes, with
//! the failure expected:
//!
//! * `tamper-data` — flip a bit of a written block's ciphertext [data-mac, that block];
//! * `tamper-mac` — flip a bit of its MAC in its CMAC block [data-mac, that block];
//! * `tamper-counters` — flip a bit of its CMAC block's counters [counters, that CMAC block];
//! * `tamper-tree-level-L` — flip a bit of the level-L node on its path [tree-node, that node];
//! * `replay-data` — put back the block's recorded ciphertext [data-mac, that block];
//! * `replay-data-cmac` — put back the recorded block and CMAC block [counters, that CMAC block];
//! * `replay-path` — put back the recorded CMAC block and every recorded node on its path [the
//!   highest put-back block that differs];
//! * `splice-data` — swap two written blocks' ciphertexts [data-mac, the first];
//! * `splice-cmac` — swap two written CMAC blocks [counters, the first];
//! * `other-drive-slot` — the drive attached as another device of the same processor, its root
//!   carried over [tree-node or counters: the first block the walk fetches];
//! * `other-machine` — the drive and its root on another processor [as `other-drive-slot`];
//!   also checked: that processor's pads do not decrypt the block.
//!
//! **Crashes** (section VIII, "crash consistency"): the paper drains the DIE's cached metadata
//! to memory with eADR and restores it at boot. At each seeded crash point (an I/O of the run;
//! a write may be cut between its metadata update on chip and its data reaching the drive) two
//! copies of the state crash: one with the drain (`eadr`: recovery must return every completed
//! write, and an interrupted write reads back as a detected failure or as either version) and
//! one without (`no-drain`: dirty metadata is lost; reads must fail detectably, never return
//! wrong data). Silent wrong data in either is a mismatch.

use super::bytes::{self, Block, Detected};
use super::{Geometry, MetaBlock, Metadata, BLOCKS_PER_CMAC};
use crate::config::Config;
use crate::io::IoStack;
use crate::run::SimError;
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;
use secmem_core::error::ConfigError;
use secmem_crypto::storage::StorageKeys;
pub use crate::harness::attack::ClassOutcome;
use serde::Serialize;
use std::collections::BTreeMap;

/// The processor's key seed in campaigns, and its drive's device number.
const PROCESSOR_SEED: u64 = 0x5eed;
const DEVICE: u64 = 0;

/// The campaign's workload and state: the DIE's metadata with bytes, and the oracle.
struct Setup {
    meta: Metadata,
    oracle: FxHashMap<u64, Block>,
    /// The drive when half the I/Os had run.
    recorded: bytes::DriveImage,
    sectors_per_io: u64,
}

fn check_stack(cfg: &Config, command: &str) -> Result<(), SimError> {
    cfg.ssd.validate("ssd").map_err(SimError::Config)?;
    cfg.io.validate(cfg.ssd.capacity_gib).map_err(SimError::Config)?;
    if !matches!(cfg.io.stack, IoStack::Dshield | IoStack::DshieldHyb | IoStack::DshieldPro) {
        return Err(SimError::Config(ConfigError::new("io.stack", format!("{command} tests D-Shield's protection of the drive: set io.stack = \"dshield\", \"dshield-hyb\" or \"dshield-pro\", got \"{}\"", cfg.io.stack.as_str()))));
    }
    Ok(())
}

fn new_metadata(cfg: &Config) -> Result<Metadata, SimError> {
    let io = &cfg.io;
    let g = crate::io::dshield_geometry(cfg).map_err(SimError::Config)?;
    let mut meta = Metadata::new(g, io.dshield_cache_kib, io.dshield_cache_ways as usize, io.dshield_minor_counter_bits);
    if io.stack == IoStack::DshieldPro {
        meta = meta.with_memory_cache((io.dshield_pro_cache_mib << 20) / 512);
    }
    Ok(meta.with_bytes(StorageKeys::for_device(PROCESSOR_SEED, DEVICE)))
}

fn random_block(rng: &mut rand_chacha::ChaCha8Rng) -> Block {
    let mut b = [0u8; 512];
    rng.fill(&mut b[..]);
    b
}

/// The I/Os: (write, first sector); I/O `i` goes to namespace `i mod n` of `g`.
fn workload(cfg: &Config, g: &Geometry, ios: u64, seed: u64) -> Vec<(bool, u64)> {
    let io = &cfg.io;
    let per_io = u64::from(io.block_bytes) / 512;
    let space_blocks = ((io.space_gib << 30) / 512 / per_io).max(1);
    let hot = (ios / 4).clamp(1, space_blocks);
    let stride = space_blocks / hot;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..ios)
        .map(|i| {
            let write = rng.gen_range(0..100) >= io.read_percent;
            let ns = &g.regions[i as usize % g.regions.len()];
            (write, ns.first + rng.gen_range(0..hot) * stride * per_io)
        })
        .collect()
}

impl Setup {
    /// Runs the workload; `at_io(i, setup)` is called before I/O `i`. Reads are checked against
    /// the oracle as they go (a failure is a false alarm: the run stops with it).
    fn run(cfg: &Config, ios: u64, seed: u64, mut at_io: impl FnMut(usize, &mut Setup, bool, u64, &[Block]) -> Result<(), SimError>) -> Result<Setup, SimError> {
        let per_io = u64::from(cfg.io.block_bytes) / 512;
        let mut s = Setup { meta: new_metadata(cfg)?, oracle: FxHashMap::default(), recorded: Default::default(), sectors_per_io: per_io };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xda7a);
        let work = workload(cfg, &s.meta.geometry, ios, seed);
        let mut buf = vec![[0u8; 512]; per_io as usize];
        for (i, &(write, first)) in work.iter().enumerate() {
            crate::interrupt::check()?;
            if i == work.len() / 2 {
                s.recorded = s.meta.bytes().expect("functional").drive.clone();
            }
            if write {
                let plain: Vec<Block> = (0..per_io).map(|_| random_block(&mut rng)).collect();
                at_io(i, &mut s, true, first, &plain)?;
                let (_, ct) = s.meta.write_bytes(first, &plain).map_err(|d| false_alarm(&d))?;
                let fx = s.meta.bytes_mut().expect("functional");
                for (k, c) in ct.iter().enumerate() {
                    fx.drive.write(first + k as u64, c);
                    s.oracle.insert(first + k as u64, plain[k]);
                }
            } else {
                at_io(i, &mut s, false, first, &[])?;
                s.meta.read_bytes(first, &mut buf).map_err(|d| false_alarm(&d))?;
                for (k, b) in buf.iter().enumerate() {
                    if *b != s.oracle.get(&(first + k as u64)).copied().unwrap_or([0; 512]) {
                        return Err(integrity(format!("sector {} read back other data than was written (a verification that passed wrong data)", first + k as u64)));
                    }
                }
            }
        }
        Ok(s)
    }

    /// A cold read of sector `s`: its plaintext, or what verification found.
    fn read_cold(&mut self, s: u64) -> Result<Block, Detected> {
        self.meta.drop_caches();
        let mut out = [[0u8; 512]];
        let r = self.meta.read_bytes(s, &mut out).map(|_| out[0]);
        self.meta.drop_caches();
        r
    }

    fn drive(&mut self) -> &mut bytes::DriveImage { &mut self.meta.bytes_mut().expect("functional").drive }
}

fn integrity(message: String) -> SimError { SimError::Integrity { trace: "io workload".into(), message } }
fn false_alarm(d: &Detected) -> SimError { integrity(format!("false alarm on an untouched drive: {d}")) }

#[derive(Clone, Debug, Default, Serialize)]
pub struct AttackOutcome {
    pub classes: BTreeMap<String, ClassOutcome>,
    /// Written blocks read back cold after the run, untouched: each must verify and match.
    pub clean_reads: u64,
    pub false_alarms: u64,
    /// Classes asked for that found no target (e.g. nothing rewritten after the recording).
    pub untested_classes: Vec<String>,
    /// One example failure per class.
    pub examples: BTreeMap<String, String>,
}

impl AttackOutcome {
    pub fn all_detected(&self) -> bool {
        self.false_alarms == 0
            && self.untested_classes.is_empty()
            && !self.classes.is_empty()
            && self.classes.values().all(ClassOutcome::clean)
    }
}

/// Every class's name, for this geometry (one tamper class per stored tree level).
pub fn attack_classes(g: &Geometry) -> Vec<String> {
    let mut v: Vec<String> = ["tamper-data", "tamper-mac", "tamper-counters"].iter().map(|s| s.to_string()).collect();
    v.extend((1..g.top_level()).map(|l| format!("tamper-tree-level-{l}")));
    v.extend(["replay-data", "replay-data-cmac", "replay-path", "splice-data", "splice-cmac", "other-drive-slot", "other-machine"].iter().map(|s| s.to_string()));
    v
}

/// The blocks a cold read of `s` fetches, in the order they are verified (top down), ending
/// with its CMAC block.
fn path_of(g: &Geometry, s: u64) -> Vec<MetaBlock> {
    let mut p = vec![MetaBlock::Cmac(g.cmac_of(s))];
    while let Some(b) = g.parent(*p.last().unwrap()) {
        if g.is_top(b) {
            break;
        }
        p.push(b);
    }
    p.reverse();
    p
}

fn expected_of(b: MetaBlock) -> Detected {
    match b {
        MetaBlock::Cmac(cmac) => Detected::Counters { cmac },
        MetaBlock::Node(level, index) => Detected::Node { level, index },
    }
}

/// Attack injection on the drive (`secmem io-attack`).
pub fn attack_campaign(cfg: &Config, ios: u64, classes: Option<&[String]>, per_class: u64, seed: u64) -> Result<AttackOutcome, SimError> {
    check_stack(cfg, "io-attack")?;
    let mut s = Setup::run(cfg, ios, seed, |_, _, _, _, _| Ok(()))?;
    s.meta.flush();
    s.meta.drop_caches();
    let g = s.meta.geometry.clone();
    let all = attack_classes(&g);
    let chosen: Vec<String> = match classes {
        Some(c) if !c.is_empty() => {
            for name in c {
                if !all.contains(name) {
                    return Err(SimError::Config(ConfigError::new("--class", format!("unknown attack class {name:?}; the classes for this drive are: {}", all.join(", ")))));
                }
            }
            c.to_vec()
        }
        _ => all,
    };
    let mut out = AttackOutcome::default();
    // Clean reads: every written block, cold.
    let mut written: Vec<u64> = s.oracle.keys().copied().collect();
    written.sort_unstable();
    for &sector in &written {
        crate::interrupt::check()?;
        out.clean_reads += 1;
        match s.read_cold(sector) {
            Ok(p) if p == s.oracle[&sector] => {}
            _ => out.false_alarms += 1,
        }
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xa77ac);
    // Blocks whose recorded copy differs from the current one (rewritten after the recording).
    let rewritten: Vec<u64> = written.iter().copied().filter(|&x| s.recorded.read(x) != s.drive().read(x)).collect();
    for class in &chosen {
        let mut o = ClassOutcome::default();
        for _ in 0..per_class {
            crate::interrupt::check()?;
            let Some(inj) = inject(class, &mut s, &g, &written, &rewritten, &mut rng) else { break };
            o.injected += 1;
            let (target, expected, exposed) = (inj.target, inj.expected, inj.exposed);
            let result = s.read_cold(target);
            inj.undo(&mut s);
            match result {
                Err(d) => {
                    o.detected += 1;
                    if expected.is_some_and(|e| e != d) {
                        o.misattributed += 1;
                    }
                    out.examples.entry(class.clone()).or_insert_with(|| d.to_string());
                }
                Ok(p) if p != s.oracle[&target] => o.tampered_plaintext_returned += 1,
                Ok(_) => {}
            }
            o.plaintext_exposed += exposed;
        }
        if o.injected == 0 {
            out.untested_classes.push(class.clone());
        }
        out.classes.insert(class.clone(), o);
    }
    Ok(out)
}

/// One injection: the sectors changed (to put back), the block read, the failure expected.
struct Injection {
    saved: Vec<(u64, Block)>,
    keys: Option<StorageKeys>,
    target: u64,
    /// None: any detection is right (the walk's first block under foreign keys).
    expected: Option<Detected>,
    exposed: u64,
}

impl Injection {
    fn undo(self, s: &mut Setup) {
        for (sector, b) in self.saved.iter().rev() {
            s.drive().write(*sector, b);
        }
        if let Some(k) = self.keys {
            s.meta.bytes_mut().expect("functional").keys = k;
        }
    }
}

fn flip(b: &mut Block, bit: usize) { b[bit / 8] ^= 1 << (bit % 8); }

fn inject(class: &str, s: &mut Setup, g: &Geometry, written: &[u64], rewritten: &[u64], rng: &mut rand_chacha::ChaCha8Rng) -> Option<Injection> {
    let pick = |v: &[u64], rng: &mut rand_chacha::ChaCha8Rng| (!v.is_empty()).then(|| v[rng.gen_range(0..v.len())]);
    let mut inj = Injection { saved: Vec::new(), keys: None, target: 0, expected: None, exposed: 0 };
    // Changes sector `at` of the drive, saving it first.
    let change = |s: &mut Setup, inj: &mut Injection, at: u64, f: &dyn Fn(&mut Block)| {
        let old = s.drive().read(at);
        inj.saved.push((at, old));
        let mut b = old;
        f(&mut b);
        s.drive().write(at, &b);
    };
    let cmac_sector = |x: u64| g.sector_of(MetaBlock::Cmac(g.cmac_of(x)));
    match class {
        "tamper-data" => {
            let t = pick(written, rng)?;
            let bit = rng.gen_range(0..4096);
            change(s, &mut inj, t, &|b| flip(b, bit));
            (inj.target, inj.expected) = (t, Some(Detected::DataMac { sector: t }));
        }
        "tamper-mac" => {
            let t = pick(written, rng)?;
            let bit = 8 * (bytes::COUNTER_REGION + 11 * (t % BLOCKS_PER_CMAC) as usize) + rng.gen_range(0..88);
            change(s, &mut inj, cmac_sector(t), &|b| flip(b, bit));
            (inj.target, inj.expected) = (t, Some(Detected::DataMac { sector: t }));
        }
        "tamper-counters" => {
            let t = pick(written, rng)?;
            let bit = rng.gen_range(0..8 * bytes::COUNTER_REGION);
            change(s, &mut inj, cmac_sector(t), &|b| flip(b, bit));
            (inj.target, inj.expected) = (t, Some(Detected::Counters { cmac: g.cmac_of(t) }));
        }
        c if c.starts_with("tamper-tree-level-") => {
            let level: u32 = c["tamper-tree-level-".len()..].parse().ok()?;
            // A block of a namespace whose tree stores that level.
            let at_level = |t: u64| path_of(g, t).into_iter().find(|b| matches!(b, MetaBlock::Node(l, _) if *l == level));
            let cands: Vec<u64> = written.iter().copied().filter(|&t| at_level(t).is_some()).collect();
            let t = pick(&cands, rng)?;
            let node = at_level(t)?;
            let bit = rng.gen_range(0..4096);
            change(s, &mut inj, g.sector_of(node), &|b| flip(b, bit));
            (inj.target, inj.expected) = (t, Some(expected_of(node)));
        }
        "replay-data" => {
            let t = pick(rewritten, rng)?;
            let old = s.recorded.read(t);
            change(s, &mut inj, t, &|b| *b = old);
            (inj.target, inj.expected) = (t, Some(Detected::DataMac { sector: t }));
        }
        "replay-data-cmac" | "replay-path" => {
            // A rewritten block whose CMAC block also changed since the recording.
            let cands: Vec<u64> = rewritten.iter().copied().filter(|&x| s.recorded.read(cmac_sector(x)) != s.drive().read(cmac_sector(x))).collect();
            let t = pick(&cands, rng)?;
            let old = s.recorded.read(t);
            change(s, &mut inj, t, &|b| *b = old);
            let blocks = if class == "replay-path" { path_of(g, t) } else { vec![MetaBlock::Cmac(g.cmac_of(t))] };
            let mut first_changed = None;
            for b in blocks {
                let at = g.sector_of(b);
                let old = s.recorded.read(at);
                if old != s.drive().read(at) {
                    first_changed.get_or_insert(b);
                }
                change(s, &mut inj, at, &|x| *x = old);
            }
            (inj.target, inj.expected) = (t, first_changed.map(expected_of));
            inj.expected?;
        }
        "splice-data" | "splice-cmac" => {
            // Two written blocks (or their CMAC blocks) whose swap changes what is checked:
            // a few picks at most.
            let cmac = class == "splice-cmac";
            let differ = |a: &Block, b: &Block| if cmac { a[..bytes::COUNTER_REGION] != b[..bytes::COUNTER_REGION] } else { a != b };
            let (t, ta, ua, a, b) = (0..17).find_map(|_| {
                let (t, u) = (pick(written, rng)?, pick(written, rng)?);
                let (ta, ua) = if cmac { (cmac_sector(t), cmac_sector(u)) } else { (t, u) };
                let (a, b) = (s.drive().read(ta), s.drive().read(ua));
                (ta != ua && differ(&a, &b)).then_some((t, ta, ua, a, b))
            })?;
            change(s, &mut inj, ta, &|x| *x = b);
            change(s, &mut inj, ua, &|x| *x = a);
            let expected = if cmac { Detected::Counters { cmac: g.cmac_of(t) } } else { Detected::DataMac { sector: t } };
            (inj.target, inj.expected) = (t, Some(expected));
        }
        "other-drive-slot" | "other-machine" => {
            let t = pick(written, rng)?;
            let other = if class == "other-machine" { StorageKeys::for_device(PROCESSOR_SEED + 1, DEVICE) } else { StorageKeys::for_device(PROCESSOR_SEED, DEVICE + 1) };
            // Does the other key's pad decrypt the block (confidentiality)?
            let cm = s.drive().read(cmac_sector(t));
            let k = (t % BLOCKS_PER_CMAC) as usize;
            let mut ct = s.drive().read(t);
            other.xor_pad(&mut ct, t, bytes::major(&cm), bytes::minor(&cm, k));
            inj.exposed = u64::from(ct == s.oracle[&t]);
            let fx = s.meta.bytes_mut().expect("functional");
            inj.keys = Some(std::mem::replace(&mut fx.keys, other));
            (inj.target, inj.expected) = (t, None);
        }
        _ => return None,
    }
    Some(inj)
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CrashOutcome {
    pub points: u64,
    /// eADR: crash points after which every completed write read back verified and equal.
    pub recovered: u64,
    /// Either mode: a read returned data other than written, without a failure.
    pub mismatches: u64,
    /// eADR: blocks of a write cut by the crash, read back as a detected failure / as the old
    /// data / as the new.
    pub in_flight_detected: u64,
    pub in_flight_old: u64,
    pub in_flight_new: u64,
    /// Without the drain: crash points that lost data, and the blocks lost (each a detected
    /// failure).
    pub no_drain_points_with_loss: u64,
    pub no_drain_blocks_lost: u64,
    pub blocks_checked: u64,
    pub examples: Vec<String>,
}

/// Crash injection with recovery (`secmem io-crash`).
pub fn crash_campaign(cfg: &Config, ios: u64, points: u64, seed: u64) -> Result<CrashOutcome, SimError> {
    check_stack(cfg, "io-crash")?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xc4a5);
    let mut at: Vec<(usize, bool)> = (0..points).map(|_| (rng.gen_range(0..ios as usize), rng.gen_bool(0.5))).collect();
    at.sort_unstable();
    let mut out = CrashOutcome { points, ..Default::default() };
    let mut next = 0;
    Setup::run(cfg, ios, seed, |i, s, write, first, plain| {
        while next < at.len() && at[next].0 == i {
            let cut = write && at[next].1;
            next += 1;
            crash_point(s, cut.then_some((first, plain)), &mut out)?;
        }
        Ok(())
    })?;
    Ok(out)
}

/// Crashes copies of `s` (in the middle of writing `cut`'s blocks, if any) with and without
/// the drain, recovers and checks every block written.
fn crash_point(s: &mut Setup, cut: Option<(u64, &[Block])>, out: &mut CrashOutcome) -> Result<(), SimError> {
    let mut blocks: Vec<u64> = s.oracle.keys().copied().collect();
    blocks.sort_unstable();
    let in_flight: Vec<u64> = cut.map(|(first, _)| (first..first + s.sectors_per_io).collect()).unwrap_or_default();
    for drain in [true, false] {
        let mut meta = s.meta.clone();
        if let Some((first, plain)) = cut {
            // The metadata moved on chip; the data never reached the drive.
            meta.write_bytes(first, plain).map_err(|d| false_alarm(&d))?;
        }
        if drain {
            meta.flush();
        }
        meta.drop_caches();
        let mut lost = 0;
        let mut ok = true;
        for &b in blocks.iter().chain(in_flight.iter().filter(|b| !s.oracle.contains_key(b))) {
            crate::interrupt::check()?;
            out.blocks_checked += 1;
            let mut buf = [[0u8; 512]];
            let r = meta.read_bytes(b, &mut buf);
            meta.drop_caches();
            let old = s.oracle.get(&b).copied().unwrap_or([0; 512]);
            let flying = in_flight.contains(&b);
            let new = cut.filter(|_| flying).map(|(first, plain)| plain[(b - first) as usize]);
            match (drain, flying, r) {
                (true, true, Err(_)) => out.in_flight_detected += 1,
                (true, true, Ok(_)) if buf[0] == old => out.in_flight_old += 1,
                (true, true, Ok(_)) if Some(buf[0]) == new => out.in_flight_new += 1,
                (true, false, Err(d)) => {
                    ok = false;
                    out.mismatches += 1;
                    if out.examples.len() < 4 {
                        out.examples.push(format!("eADR: a completed write's block {b} failed after recovery: {d}"));
                    }
                }
                (false, _, Err(_)) => lost += 1,
                (_, _, Ok(_)) if buf[0] == old || (flying && Some(buf[0]) == new) => {}
                _ => {
                    ok = false;
                    out.mismatches += 1;
                    if out.examples.len() < 4 {
                        out.examples.push(format!("block {b} read back other data than written, undetected ({})", if drain { "eADR" } else { "no drain" }));
                    }
                }
            }
        }
        if drain && ok {
            out.recovered += 1;
        }
        if !drain && lost > 0 {
            out.no_drain_points_with_loss += 1;
            out.no_drain_blocks_lost += lost;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &[&str]) -> Config {
        let mut o: Vec<String> = vec!["io.stack=\"dshield\"".into(), "io.space_gib=1".into(), "io.read_percent=30".into()];
        o.extend(extra.iter().map(|s| s.to_string()));
        Config::load(None, None, &o).unwrap()
    }

    #[test]
    fn every_attack_class_is_detected_with_its_class_and_clean_reads_raise_no_alarm() {
        // 64 KiB caches so that metadata leaves the chip during the run, too.
        let out = attack_campaign(&cfg(&["io.dshield_cache_kib=64"]), 2000, None, 20, 3).unwrap();
        for (name, c) in &out.classes {
            assert_eq!((c.injected, c.detected, c.misattributed, c.tampered_plaintext_returned), (20, 20, 0, 0), "{name}: {c:?}");
        }
        assert!(out.clean_reads > 1000 && out.false_alarms == 0, "{out:?}");
        assert!(out.all_detected(), "{out:?}");
        // A 512 GB drive's tree stores levels 1..4: four tamper classes.
        assert!(out.classes.contains_key("tamper-tree-level-4"), "{:?}", out.classes.keys());
    }

    #[test]
    fn attacks_across_two_namespaces_are_detected_and_their_trees_are_apart() {
        let c = cfg(&["io.namespaces=\"1@0+2, 5@100+300\"", "io.dshield_cache_kib=64"]);
        let out = attack_campaign(&c, 2000, None, 15, 7).unwrap();
        assert!(out.all_detected(), "{out:?}");
        // The 300 GiB namespace stores four levels, the 2 GiB one two: level 4 only in one.
        assert!(out.classes["tamper-tree-level-4"].injected == 15, "{:?}", out.classes.keys());
    }

    #[test]
    fn a_tampered_block_that_goes_unread_changes_nothing_and_the_campaign_is_deterministic() {
        let a = attack_campaign(&cfg(&[]), 600, Some(&["tamper-data".into(), "replay-path".into()]), 10, 9).unwrap();
        let b = attack_campaign(&cfg(&[]), 600, Some(&["tamper-data".into(), "replay-path".into()]), 10, 9).unwrap();
        assert_eq!(a.classes, b.classes);
        assert_eq!(a.examples, b.examples);
    }

    #[test]
    fn an_unknown_class_or_a_stack_without_d_shield_is_a_config_error() {
        let e = attack_campaign(&cfg(&[]), 100, Some(&["tamper-everything".into()]), 1, 1).unwrap_err().to_string();
        assert!(e.contains("--class") && e.contains("tamper-data"), "{e}");
        let e = attack_campaign(&cfg(&["io.stack=\"enc\""]), 100, None, 1, 1).unwrap_err().to_string();
        assert!(e.contains("io.stack"), "{e}");
    }

    #[test]
    fn with_the_drain_every_completed_write_survives_a_crash_and_without_it_losses_are_detected() {
        let out = crash_campaign(&cfg(&["io.dshield_cache_kib=64"]), 800, 12, 5).unwrap();
        assert_eq!(out.points, 12);
        assert_eq!((out.recovered, out.mismatches), (12, 0), "{out:?}");
        // Small caches hold dirty metadata at most crash points: lost without the drain.
        assert!(out.no_drain_points_with_loss > 0 && out.no_drain_blocks_lost > 0, "{out:?}");
        // A cut write's blocks: their counters moved on chip and were drained, their data
        // never landed, so they fail verification rather than read back stale.
        assert!(out.in_flight_detected > 0 && out.in_flight_old == 0, "{out:?}");
    }

    #[test]
    fn the_drive_and_the_caches_stay_consistent_through_cascading_write_backs() {
        // Tiny caches with one and two ways: a fill's write-back walks evict blocks the walk
        // above them needs, and fetch blocks still being written back.
        for (kib, ways) in [(1, 1), (2, 2), (4, 4)] {
            let c = cfg(&[&format!("io.dshield_cache_kib={kib}"), &format!("io.dshield_cache_ways={ways}")]);
            let mut checked = 0;
            Setup::run(&c, 600, 4, |i, s, _, _, _| {
                if i % 10 == 0 {
                    s.meta.check().map_err(|e| integrity(format!("before I/O {i}: {e}")))?;
                    checked += 1;
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{kib} KiB, {ways} ways: {e}"));
            assert_eq!(checked, 60);
        }
    }

    #[test]
    fn pro_serves_blocks_from_memory_with_the_same_bytes() {
        // Every read of the run is checked against the oracle, those served from memory too.
        let c = cfg(&["io.stack=\"dshield-pro\"", "io.dshield_cache_kib=16", "io.read_percent=60"]);
        let s = Setup::run(&c, 3000, 2, |_, _, _, _, _| Ok(())).unwrap();
        assert!(s.meta.stats.memory_cache_hits > 50, "{:?}", s.meta.stats);
        let out = attack_campaign(&c, 1500, Some(&["tamper-data".into(), "tamper-counters".into()]), 10, 2).unwrap();
        assert!(out.all_detected(), "{out:?}");
    }

    #[test]
    fn both_modes_count_the_same_metadata_traffic() {
        let c = cfg(&["io.dshield_cache_kib=64"]);
        let mut counting = {
            let io = &c.io;
            Metadata::new(crate::io::dshield_geometry(&c).unwrap(), io.dshield_cache_kib, io.dshield_cache_ways as usize, io.dshield_minor_counter_bits)
        };
        let s = Setup::run(&c, 1500, 2, |_, _, _, _, _| Ok(())).unwrap();
        for (write, first) in workload(&c, &s.meta.geometry, 1500, 2) {
            if write {
                counting.write(first, s.sectors_per_io);
            } else {
                counting.read(first, s.sectors_per_io);
            }
        }
        assert_eq!(counting.stats, s.meta.stats);
        assert!(counting.stats.metadata_writes > 0);
    }
}
