//! Attack injection on a post-run NVM image.
//!
//! The trace runs in functional mode with a plaintext oracle; a copy of the image is kept
//! at the middle of the run (the attacker's recording, for replays). At the end every dirty
//! line is written back and the design's metadata is flushed, so NVM is consistent with the
//! on-chip root; then the controller restarts cold (crash + recovery). Each injection modifies
//! the image, drops every cached metadata block (so the modified blocks are fetched and
//! verified), reads a target line through the design, checks that the failure has the
//! expected class and address, and restores the image.
//!
//! Classes (expected failure in brackets):
//! * `tamper-data` — flip bits of a written line's ciphertext [data-mac, that line];
//! * `tamper-mac` — flip bits of its MAC [data-mac, that line];
//! * `tamper-counter` — flip bits of a written page's counter block [counter, that block];
//! * `tamper-tree-level-L` — flip bits of a stored tree node at level L on a written path
//!   [tree-level-L, that node];
//! * `replay-data-mac` — put back a line's old ciphertext and MAC block [data-mac, that line];
//! * `replay-data-mac-counter` — also its old counter block [counter, that block];
//! * `replay-tree-path` — old counter block and old path nodes [the highest replayed block
//!   that differs from the current one];
//! * `splice-data-mac` — swap two written lines' ciphertexts and MACs [data-mac, first line];
//! * `splice-counter` — swap two written pages' counter blocks [counter, first block].
//!
//! A design that keeps metadata in data lines of its own (Lelantus-CoW's copy records, named
//! `cow-record`: see `Design::attack_surface_name`) adds three classes, whose target is a data
//! line whose read must fetch and verify that metadata line:
//! * `tamper-NAME` — flip bits of a metadata line in use [data-mac, the metadata line];
//! * `replay-NAME` — put back a changed metadata line's old ciphertext and MAC block
//!   [data-mac, the metadata line];
//! * `splice-NAME` — swap two metadata lines' ciphertexts and MACs [data-mac, the first].
//!
//! They are in the default class list when the run leaves such metadata in use; asked for by
//! name, they are untested (so the campaign fails) when it leaves none.

use super::replay::{Live, Oracle, Replay};
use crate::config::Config;
use crate::engine::Engine;
use crate::run::{SimError, TraceInput};
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;
use secmem_core::addr::{page_of_line, LINE_SHIFT};
use secmem_core::Cycle;
use secmem_schemes::controller::{get_bits, set_bits};
use secmem_schemes::controller::functional::NvmImage;
use secmem_schemes::{Design, IntegrityError, SecureMc};
use serde::Serialize;
use std::collections::BTreeMap;

/// One attack class's injections and what became of them (the memory's campaigns and the
/// drive's, `io::dshield::campaign`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ClassOutcome {
    pub injected: u64,
    pub detected: u64,
    /// Detected, but with another class or address than expected.
    pub misattributed: u64,
    /// Not detected and the returned plaintext differs from the oracle.
    pub tampered_plaintext_returned: u64,
    /// A foreign key's pads decrypted the data to its plaintext (the drive moved to another
    /// machine); reported only when it happened.
    #[serde(skip_serializing_if = "is_zero")]
    pub plaintext_exposed: u64,
}

impl ClassOutcome {
    /// Every injection detected, as what it was, and nothing leaked.
    pub fn clean(&self) -> bool { self.injected > 0 && self.detected == self.injected && self.misattributed == 0 && self.tampered_plaintext_returned == 0 && self.plaintext_exposed == 0 }
}

fn is_zero(v: &u64) -> bool { *v == 0 }

#[derive(Clone, Debug, Default, Serialize)]
pub struct AttackOutcome {
    pub classes: BTreeMap<String, ClassOutcome>,
    pub clean_reads: u64,
    pub false_alarms: u64,
    pub examples: Vec<String>,
    /// Classes the run gave no candidate for (no injection made): they tested nothing.
    pub untested_classes: Vec<String>,
}

impl AttackOutcome {
    /// Every class tested (at least one injection) and every injection detected with the right
    /// class and address, and no false alarm. A class the run gave no candidate for (say,
    /// splicing with a single written page) tested nothing, so it cannot pass.
    pub fn all_detected(&self) -> bool {
        self.false_alarms == 0 && self.classes.values().all(|c| c.injected > 0 && c.detected == c.injected && c.misattributed == 0)
    }
}

pub const BASE_CLASSES: &[&str] = &[
    "tamper-data",
    "tamper-mac",
    "tamper-counter",
    "replay-data-mac",
    "replay-data-mac-counter",
    "replay-tree-path",
    "splice-data-mac",
    "splice-counter",
];

/// The classes attacking a design's own metadata lines named `surface`.
pub fn surface_class_names(surface: &str) -> Vec<String> { ["tamper", "replay", "splice"].iter().map(|k| format!("{k}-{surface}")).collect() }

/// Every class name for a tree of `root_level` (tree levels 1..root_level-1 are stored).
pub fn class_names(root_level: usize) -> Vec<String> {
    let mut v: Vec<String> = BASE_CLASSES.iter().map(|s| s.to_string()).collect();
    for l in 1..root_level {
        v.push(format!("tamper-tree-level-{l}"));
    }
    v
}

/// Whether a fetch of page `p`'s counter block verifies its stored path up to tree `level`:
/// no node at levels 1..=`level` of it is held on chip (a design's trusted node).
fn stored_path_reaches(mc: &SecureMc, p: u64, level: usize) -> bool {
    let tree = &mc.layout.tree;
    let mut idx = p;
    (1..=level).all(|l| {
        idx = tree.parent(l - 1, idx).1;
        !mc.is_trusted(l, idx)
    })
}

/// One prepared injection.
struct Injection {
    /// (device line, new bytes).
    writes: Vec<(u64, [u8; 64])>,
    /// Data line to read.
    target: u64,
    /// Expected (class, address).
    expect: (String, u64),
}

struct World {
    image_now: NvmImage,
    image_old: NvmImage,
    /// Lines holding their own last write, ascending (injection targets).
    written: Vec<u64>,
    changed: Vec<u64>,
    /// The device line holding each written line's bytes (`Design::data_line_of`: the line
    /// itself but under a remapping design).
    location: FxHashMap<u64, u64>,
    /// Pages of those device lines.
    pages: Vec<u64>,
    /// Every line the oracle knows, ascending (clean reads).
    readable: Vec<u64>,
    oracle: FxHashMap<u64, [u8; 64]>,
    /// The design's own metadata lines in use, each with a data line whose read fetches it
    /// (`Design::attack_surface`), and their name.
    surface: Vec<(u64, u64)>,
    surface_name: Option<&'static str>,
}

pub fn attack_campaign(
    cfg: &Config,
    input: &TraceInput,
    classes: Option<&[String]>,
    per_class: u64,
    clean_reads: u64,
    seed: u64,
) -> Result<AttackOutcome, SimError> {
    super::require_some(per_class, "--per-class", "injections")?;
    if clean_reads > super::MAX_CLEAN_READS {
        return Err(SimError::Config(secmem_core::ConfigError::new("", format!("--clean-reads must be at most {}, got {clean_reads}", super::MAX_CLEAN_READS))));
    }
    let mut fcfg = cfg.clone();
    fcfg.run.functional = true;
    if !fcfg.security.enabled {
        return Err(SimError::Config(secmem_core::ConfigError::new("security.enabled", "attack injection needs secure memory")));
    }
    // Attacks run in functional mode whatever the config says: check it as a functional one.
    fcfg.validate()?;
    // A physical trace, or an OS-level one through the OS model (page commands included).
    let replay = Replay::load(&fcfg, input)?;
    let mut live = Live::new(&fcfg, &replay)?;
    // Check the class names before spending a whole run.
    let base_classes = class_names(live.engine().mc.layout.tree.root_level());
    let surface_name = live.engine().design.attack_surface_name();
    let mut known = base_classes.clone();
    known.extend(surface_name.map(surface_class_names).unwrap_or_default());
    if let Some(c) = classes {
        for n in c {
            if !known.contains(n) {
                return Err(SimError::Config(secmem_core::ConfigError::new(
                    "attack.class",
                    format!("unknown attack class '{n}'; known: {}", known.join(", ")),
                )));
            }
        }
    }
    let oracle = Oracle::attach(live.engine());
    let mid = replay.len() / 2;
    let mut image_old = NvmImage::default();
    for i in 0..replay.len() {
        if i == mid {
            image_old = live.engine().mc.func.as_ref().unwrap().image.clone();
            oracle.borrow_mut().mark();
        }
        live.step(&replay, i, cfg, input)?;
    }
    let integrity = |e: IntegrityError| SimError::Integrity { trace: input.describe(cfg), message: e.to_string() };
    let engine = live.engine();
    engine.flush_hierarchy().map_err(integrity)?;
    engine.finish_design().map_err(integrity)?;
    let Engine { mc, design, .. } = engine;
    design.crash(mc, false);
    design
        .recover(mc, Cycle::ZERO)
        .map_err(|e| SimError::Integrity { trace: input.describe(cfg), message: format!("post-run recovery: {e}") })?;

    let oracle = std::mem::take(&mut *oracle.borrow_mut());
    // Targets: lines holding their own last write (a page command's destination reads another
    // page's bytes, so tampering with its own would test nothing). Clean reads: every line.
    let mut written: Vec<u64> = oracle.own.iter().copied().collect();
    written.sort_unstable();
    if written.is_empty() {
        return Err(SimError::Config(secmem_core::ConfigError::new("workload", "the trace wrote nothing to memory: no target to attack")));
    }
    let late_set = oracle.since_mark.unwrap_or_default();
    // Ascending, as `written` is.
    let changed: Vec<u64> = written.iter().copied().filter(|l| late_set.contains(l)).collect();
    let location: FxHashMap<u64, u64> = written.iter().map(|&l| (l, design.data_line_of(l))).collect();
    let mut pages: Vec<u64> = location.values().map(|&l| page_of_line(l)).collect();
    pages.sort_unstable();
    pages.dedup();
    let mut readable: Vec<u64> = oracle.lines.keys().copied().collect();
    readable.sort_unstable();
    let surface = design.attack_surface(mc);
    // By default the design's own classes only when the run leaves something to attack.
    let mut names: Vec<String> = match classes {
        Some(c) => c.to_vec(),
        None if surface.is_empty() => base_classes,
        None => known,
    };
    if classes.is_none() {
        // By default, no class for a tree level whose stored nodes no read verifies (every
        // written page's path is held on chip below it); asked for by name, it is untested.
        names.retain(|n| match n.strip_prefix("tamper-tree-level-").and_then(|l| l.parse::<usize>().ok()) {
            Some(level) => pages.iter().any(|&p| stored_path_reaches(mc, p, level)),
            None => true,
        });
    }
    let image_now = mc.func.as_ref().unwrap().image.clone();
    // A replay needs bytes that changed: under a remapping design a line written since the
    // recording may have been mapped to bytes already there then.
    let changed: Vec<u64> = changed.into_iter().filter(|l| image_old.get_opt(location[l]) != image_now.get_opt(location[l])).collect();
    let world = World { image_now, image_old, written, changed, location, pages, readable, oracle: oracle.lines, surface, surface_name };

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut out = AttackOutcome::default();
    for name in &names {
        let mut co = ClassOutcome::default();
        for _ in 0..per_class {
            let Some(inj) = prepare(name, &world, mc, &mut rng) else { continue };
            co.injected += 1;
            run_injection(mc, design.as_mut(), &world, inj, &mut co, &mut out.examples, name);
        }
        if co.injected == 0 {
            out.untested_classes.push(name.clone());
        }
        out.classes.insert(name.clone(), co);
    }
    // Clean reads: every line read must verify and equal the oracle.
    design.drop_metadata_caches(mc);
    for i in 0..clean_reads {
        if i % 4096 == 0 {
            design.drop_metadata_caches(mc); // re-verify from NVM now and then, not only from cache
        }
        let line = world.readable[rng.gen_range(0..world.readable.len())];
        out.clean_reads += 1;
        match design.read(mc, line, Cycle::ZERO) {
            Ok((_, Some(p))) if p == world.oracle[&line] => {}
            other => {
                out.false_alarms += 1;
                if out.examples.len() < 8 {
                    out.examples.push(format!("clean read of line {line:#x}: {:?}", other.map(|x| x.1.map(|d| d[0]))));
                }
            }
        }
    }
    Ok(out)
}

/// Flips one to three distinct random bits (a bit flipped twice would be no tampering).
fn flip(bytes: &mut [u8; 64], rng: &mut impl Rng) {
    let n = rng.gen_range(1..=3);
    let mut bits = [usize::MAX; 3];
    let mut k = 0;
    while k < n {
        let bit = rng.gen_range(0..512);
        if !bits[..k].contains(&bit) {
            bits[k] = bit;
            k += 1;
        }
    }
    for &bit in &bits[..n] {
        bytes[bit / 8] ^= 1 << (bit % 8);
    }
}

/// A random element of `v` satisfying `ok`, or None if none does: a few random draws, then
/// (when candidates are rare or absent, e.g. every written page holding the same counter
/// block) one pass from a random start, so the search always ends.
fn pick_where<T: Copy>(v: &[T], rng: &mut impl Rng, ok: impl Fn(T) -> bool) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    for _ in 0..64 {
        let x = v[rng.gen_range(0..v.len())];
        if ok(x) {
            return Some(x);
        }
    }
    let start = rng.gen_range(0..v.len());
    v[start..].iter().chain(&v[..start]).copied().find(|&x| ok(x))
}

fn prepare(name: &str, w: &World, mc: &SecureMc, rng: &mut impl Rng) -> Option<Injection> {
    let layout = &mc.layout;
    let tree = &layout.tree;
    let pick = |v: &Vec<u64>, rng: &mut dyn rand::RngCore| -> Option<u64> { (!v.is_empty()).then(|| v[rng.gen_range(0..v.len())]) };
    let line_addr = |l: u64| l << LINE_SHIFT;
    let counter_line = |p: u64| layout.counter_addr(p) >> LINE_SHIFT;
    let mac_of = |l: u64| layout.mac_addr(l);
    // Where a written line's bytes are, and a written line whose bytes are in page `p`.
    let at = |l: u64| w.location[&l];
    let line_in = |p: u64| w.written.iter().copied().find(|&l| page_of_line(at(l)) == p);
    // What the recorded (mid-run) image held at device line `l`: a line it does not hold was
    // still at its boot content, which a replay puts back (a counter block's initial
    // encoding, a data line's zeros under its initial counter, a tree node's or MAC block's
    // zeros).
    let f = mc.func.as_ref().expect("functional");
    let old = |l: u64| match w.image_old.get_opt(l) {
        Some(b) => b,
        None if mc.kind_of_key(l) == Some(secmem_schemes::MetaKind::Counter) => f.boot_block(0, l - (layout.counter_base >> LINE_SHIFT)),
        None if l < layout.data_bytes >> LINE_SHIFT => f.boot_line(l),
        None => [0; 64],
    };
    match name {
        "tamper-data" => {
            let t = pick(&w.written, rng)?;
            let l = at(t);
            let mut b = w.image_now.get(l);
            flip(&mut b, rng);
            Some(Injection { writes: vec![(l, b)], target: t, expect: ("data-mac".into(), line_addr(l)) })
        }
        "tamper-mac" => {
            let t = pick(&w.written, rng)?;
            let l = at(t);
            let (maddr, slot) = mac_of(l);
            let mut b = w.image_now.get(maddr >> LINE_SHIFT);
            let per = layout.macs_per_block;
            let width = 512 / per;
            let v = get_bits(&b, slot, per) ^ (1u64 << rng.gen_range(0..width));
            set_bits(&mut b, slot, per, v);
            Some(Injection { writes: vec![(maddr >> LINE_SHIFT, b)], target: t, expect: ("data-mac".into(), line_addr(l)) })
        }
        "tamper-counter" => {
            let p = pick(&w.pages, rng)?;
            let mut b = w.image_now.get(counter_line(p));
            flip(&mut b, rng);
            Some(Injection { writes: vec![(counter_line(p), b)], target: line_in(p)?, expect: ("counter".into(), layout.counter_addr(p)) })
        }
        n if n.starts_with("tamper-tree-level-") => {
            let level: usize = n["tamper-tree-level-".len()..].parse().ok()?;
            // A page whose stored path is read up to this level: no node at or below it is
            // held on chip (above such a node the stored copies are dead, never read).
            let p = pick_where(&w.pages, rng, |p| stored_path_reaches(mc, p, level))?;
            let mut idx = p;
            for _ in 0..level {
                idx = tree.parent(0, idx).1; // parent index only depends on the index
            }
            let addr = tree.node_addr(level, idx);
            let mut b = w.image_now.get(addr >> LINE_SHIFT);
            flip(&mut b, rng);
            Some(Injection { writes: vec![(addr >> LINE_SHIFT, b)], target: line_in(p)?, expect: (format!("tree-level-{level}"), addr) })
        }
        "replay-data-mac" => {
            let t = pick(&w.changed, rng)?;
            let l = at(t);
            let (maddr, _) = mac_of(l);
            Some(Injection {
                writes: vec![(l, old(l)), (maddr >> LINE_SHIFT, old(maddr >> LINE_SHIFT))],
                target: t,
                expect: ("data-mac".into(), line_addr(l)),
            })
        }
        "replay-data-mac-counter" => {
            let t = pick(&w.changed, rng)?;
            let l = at(t);
            let p = page_of_line(l);
            let (maddr, _) = mac_of(l);
            Some(Injection {
                writes: vec![
                    (l, old(l)),
                    (maddr >> LINE_SHIFT, old(maddr >> LINE_SHIFT)),
                    (counter_line(p), old(counter_line(p))),
                ],
                target: t,
                expect: ("counter".into(), layout.counter_addr(p)),
            })
        }
        "replay-tree-path" => {
            let t = pick(&w.changed, rng)?;
            let l = at(t);
            let p = page_of_line(l);
            let (maddr, _) = mac_of(l);
            let mut writes = vec![
                (l, old(l)),
                (maddr >> LINE_SHIFT, old(maddr >> LINE_SHIFT)),
                (counter_line(p), old(counter_line(p))),
            ];
            // The highest replayed block that differs from today's is what the walk trips on.
            let mut expect = (old(counter_line(p)) != w.image_now.get(counter_line(p)))
                .then(|| ("counter".to_string(), layout.counter_addr(p)));
            let mut idx = p;
            for level in 1..tree.root_level() {
                idx = tree.parent(0, idx).1;
                if mc.is_trusted(level, idx) {
                    break; // on chip: the walk stops below it, the stored copies above are dead
                }
                let a = tree.node_addr(level, idx);
                let old = old(a >> LINE_SHIFT);
                if old != w.image_now.get(a >> LINE_SHIFT) {
                    expect = Some((format!("tree-level-{level}"), a));
                }
                writes.push((a >> LINE_SHIFT, old));
            }
            Some(Injection { writes, target: t, expect: expect? })
        }
        "splice-data-mac" => {
            let t = pick(&w.written, rng)?;
            let a = at(t);
            let b = pick_where(&w.written, rng, |u| at(u) != a && w.image_now.get(a) != w.image_now.get(at(u)))?;
            Some(Injection { writes: swap_with_macs(w, layout, a, at(b)), target: t, expect: ("data-mac".into(), line_addr(a)) })
        }
        "splice-counter" => {
            let p = pick(&w.pages, rng)?;
            let q = pick_where(&w.pages, rng, |q| q != p && w.image_now.get(counter_line(p)) != w.image_now.get(counter_line(q)))?;
            Some(Injection {
                writes: vec![(counter_line(p), w.image_now.get(counter_line(q))), (counter_line(q), w.image_now.get(counter_line(p)))],
                target: line_in(p)?,
                expect: ("counter".into(), layout.counter_addr(p)),
            })
        }
        _ => prepare_surface(name, w, mc, rng, &old),
    }
}

/// An injection of a class attacking the design's own metadata lines (`tamper-NAME`,
/// `replay-NAME`, `splice-NAME`); `old` is what the recorded image held at a device line.
fn prepare_surface(name: &str, w: &World, mc: &SecureMc, rng: &mut impl Rng, old: &dyn Fn(u64) -> [u8; 64]) -> Option<Injection> {
    let kind = name.strip_suffix(w.surface_name?)?.strip_suffix('-')?;
    if w.surface.is_empty() {
        return None;
    }
    let layout = &mc.layout;
    let mac_line = |l: u64| layout.mac_addr(l).0 >> LINE_SHIFT;
    let expect = |l: u64| ("data-mac".to_string(), l << LINE_SHIFT);
    match kind {
        "tamper" => {
            let (l, reader) = w.surface[rng.gen_range(0..w.surface.len())];
            let mut b = w.image_now.get(l);
            flip(&mut b, rng);
            Some(Injection { writes: vec![(l, b)], target: reader, expect: expect(l) })
        }
        "replay" => {
            let (l, reader) = pick_where(&w.surface, rng, |(l, _)| old(l) != w.image_now.get(l))?;
            Some(Injection { writes: vec![(l, old(l)), (mac_line(l), old(mac_line(l)))], target: reader, expect: expect(l) })
        }
        "splice" => {
            let i = rng.gen_range(0..w.surface.len());
            let (a, reader) = w.surface[i];
            let (b, _) = pick_where(&w.surface, rng, |(b, _)| b != a && w.image_now.get(a) != w.image_now.get(b))?;
            Some(Injection { writes: swap_with_macs(w, layout, a, b), target: reader, expect: expect(a) })
        }
        _ => None,
    }
}

/// The image writes that swap lines `a` and `b` together with their MACs (in one MAC block or
/// two).
fn swap_with_macs(w: &World, layout: &secmem_core::tree::SecureLayout, a: u64, b: u64) -> Vec<(u64, [u8; 64])> {
    let (ma, sa) = layout.mac_addr(a);
    let (mb, sb) = layout.mac_addr(b);
    let (ma, mb) = (ma >> LINE_SHIFT, mb >> LINE_SHIFT);
    let per = layout.macs_per_block;
    let mut blocks: FxHashMap<u64, [u8; 64]> = FxHashMap::default();
    blocks.insert(ma, w.image_now.get(ma));
    blocks.insert(mb, w.image_now.get(mb));
    let va = get_bits(&blocks[&ma], sa, per);
    let vb = get_bits(&blocks[&mb], sb, per);
    set_bits(blocks.get_mut(&ma).unwrap(), sa, per, vb);
    set_bits(blocks.get_mut(&mb).unwrap(), sb, per, va);
    let mut writes = vec![(a, w.image_now.get(b)), (b, w.image_now.get(a))];
    writes.extend(blocks);
    writes
}

fn run_injection(
    mc: &mut SecureMc,
    design: &mut dyn Design,
    w: &World,
    inj: Injection,
    co: &mut ClassOutcome,
    examples: &mut Vec<String>,
    name: &str,
) {
    let saved: Vec<(u64, [u8; 64])> = inj.writes.iter().map(|(l, _)| (*l, w.image_now.get(*l))).collect();
    {
        let f = mc.func.as_mut().unwrap();
        for (l, b) in &inj.writes {
            f.image.put(*l, *b);
        }
    }
    design.drop_metadata_caches(mc);
    match design.read(mc, inj.target, Cycle::ZERO) {
        Err(e) => {
            co.detected += 1;
            if (e.class(), e.addr()) != (inj.expect.0.clone(), inj.expect.1) {
                co.misattributed += 1;
                if examples.len() < 8 {
                    examples.push(format!("{name}: expected {} at {:#x}, got {}", inj.expect.0, inj.expect.1, e));
                }
            }
        }
        Ok((_, plain)) => {
            if plain.as_ref() != w.oracle.get(&inj.target) {
                co.tampered_plaintext_returned += 1;
            }
            if examples.len() < 8 {
                examples.push(format!("{name}: undetected on line {:#x}", inj.target));
            }
        }
    }
    let f = mc.func.as_mut().unwrap();
    for (l, b) in saved {
        f.image.put(l, b);
    }
    design.drop_metadata_caches(mc);
}
