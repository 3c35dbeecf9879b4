//! Lelantus, Lelantus-CoW, Silent Shredder and the kernel-CoW baseline under the OS model,
//! in functional mode (real AES-CTR, MACs, tree) against an oracle of fork/CoW semantics.

use proptest::prelude::*;
use secmem_sim::config::Config;
use secmem_sim::cow_workloads::{self, CowSpec, CowWorkload};
use secmem_sim::os::{Os, PageSize};
use std::collections::HashMap;

const SCHEMES: [&str; 4] = ["baseline", "lelantus", "lelantus-cow", "silent-shredder"];

/// A small functional system: 1 GiB, small caches so lines and metadata get evicted.
fn cfg(design: &str, functional: bool) -> Config {
    let o: Vec<String> = [
        format!("run.design=\"{design}\""),
        format!("run.functional={functional}"),
        "pcm.capacity_gib=1".into(),
        "l1.size_kib=4".into(),
        "l1.ways=2".into(),
        "l2.size_kib=8".into(),
        "l2.ways=2".into(),
        "llc.size_kib=16".into(),
        "llc.ways=4".into(),
        "metadata_cache.counter.size_kib=64".into(),
        "metadata_cache.mac.size_kib=4".into(),
        "metadata_cache.tree.size_kib=4".into(),
        "run.check_pad_reuse=true".into(),
    ]
    .into_iter()
    .filter(|x| functional || !x.starts_with("run.check"))
    .collect();
    Config::load(Some("lelantus"), None, &o).unwrap()
}

fn line(tag: u64) -> [u8; 64] {
    let mut d = [0u8; 64];
    for (i, c) in d.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&(tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64).to_le_bytes());
    }
    d
}

/// The oracle: what every process must read, per virtual line.
#[derive(Default, Clone)]
struct Oracle {
    mem: HashMap<usize, HashMap<u64, [u8; 64]>>,
    mapped: HashMap<usize, Vec<(u64, u64)>>,
}

const VA: u64 = 1 << 32;

#[derive(Clone, Debug)]
enum Op {
    Store { proc: usize, page: u64, line: u64 },
    Load { proc: usize, page: u64, line: u64 },
    Fork { proc: usize },
    Free { proc: usize, page: u64 },
    Exit { proc: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..4, 0u64..6, 0u64..64).prop_map(|(proc, page, line)| Op::Store { proc, page, line }),
        6 => (0usize..4, 0u64..6, 0u64..64).prop_map(|(proc, page, line)| Op::Load { proc, page, line }),
        1 => (0usize..4).prop_map(|proc| Op::Fork { proc }),
        1 => (0usize..4, 0u64..6).prop_map(|(proc, page)| Op::Free { proc, page }),
        1 => (0usize..4).prop_map(|proc| Op::Exit { proc }),
    ]
}

/// Applies `ops` (process indices taken modulo the live processes) to every scheme and checks
/// every load against the oracle, then every mapped line of every process at the end.
fn check_sequence(design: &str, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut os = Os::new(&cfg(design, true)).unwrap();
    let mut o = Oracle::default();
    os.alloc(0, VA, 6 * 4096, PageSize::Small).unwrap();
    o.mem.insert(0, HashMap::new());
    o.mapped.insert(0, (0..6).map(|p| (VA + p * 4096, 4096)).collect());
    let mut tag = 0u64;
    for op in ops {
        let live = os.processes();
        if live.is_empty() {
            break;
        }
        let pick = |p: usize| live[p % live.len()];
        match *op {
            Op::Store { proc, page, line: l } => {
                let pid = pick(proc);
                let va = VA + page * 4096 + l * 64;
                if !o.mapped[&pid].iter().any(|&(a, n)| va >= a && va < a + n) {
                    continue;
                }
                tag += 1;
                os.store(pid, va, Some(line(tag))).map_err(|e| TestCaseError::fail(format!("{design}: {e}")))?;
                o.mem.get_mut(&pid).unwrap().insert(va, line(tag));
            }
            Op::Load { proc, page, line: l } => {
                let pid = pick(proc);
                let va = VA + page * 4096 + l * 64;
                if !o.mapped[&pid].iter().any(|&(a, n)| va >= a && va < a + n) {
                    continue;
                }
                let got = os.load(pid, va).map_err(|e| TestCaseError::fail(format!("{design}: {e}")))?.unwrap();
                let want = o.mem[&pid].get(&va).copied().unwrap_or([0; 64]);
                prop_assert_eq!(got, want, "{}: pid {} va {:#x}", design, pid, va);
            }
            Op::Fork { proc } => {
                let pid = pick(proc);
                let child = os.fork(pid).unwrap();
                let m = o.mem[&pid].clone();
                o.mem.insert(child, m);
                let mp = o.mapped[&pid].clone();
                o.mapped.insert(child, mp);
            }
            Op::Free { proc, page } => {
                let pid = pick(proc);
                let va = VA + page * 4096;
                if !o.mapped[&pid].iter().any(|&(a, _)| a == va) {
                    continue;
                }
                os.free(pid, va, 4096).map_err(|e| TestCaseError::fail(format!("{design}: {e}")))?;
                o.mapped.get_mut(&pid).unwrap().retain(|&(a, _)| a != va);
                o.mem.get_mut(&pid).unwrap().retain(|&k, _| !(k >= va && k < va + 4096));
            }
            Op::Exit { proc } => {
                let pid = pick(proc);
                if live.len() == 1 {
                    continue;
                }
                os.exit(pid).map_err(|e| TestCaseError::fail(format!("{design}: {e}")))?;
                o.mapped.remove(&pid);
                o.mem.remove(&pid);
            }
        }
    }
    for pid in os.processes() {
        for &(a, n) in &o.mapped[&pid].clone() {
            for va in (a..a + n).step_by(64) {
                let got = os.load(pid, va).map_err(|e| TestCaseError::fail(format!("{design}: {e}")))?.unwrap();
                prop_assert_eq!(got, o.mem[&pid].get(&va).copied().unwrap_or([0; 64]), "{}: final pid {} va {:#x}", design, pid, va);
            }
        }
    }
    let f = os.engine.mc.func.as_ref().unwrap();
    prop_assert!(f.reuse_violation.is_none(), "{design}: pad reuse {:?}", f.reuse_violation);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_process_reads_what_fork_semantics_say(ops in proptest::collection::vec(op(), 1..120)) {
        for d in SCHEMES {
            check_sequence(d, &ops)?;
        }
    }
}

#[test]
fn forkbench_runs_on_every_scheme_and_lelantus_writes_less() {
    let spec = CowSpec { workload: CowWorkload::Forkbench, page_size: PageSize::Small, footprint_bytes: 1 << 20, lines_per_page: 4, ops: 0, seed: 1 };
    let mut w = HashMap::new();
    for d in SCHEMES {
        let r = cow_workloads::run(&cfg(d, false), &spec).unwrap();
        w.insert(d, (r["memory_writes"].as_u64().unwrap(), r["cycles"].as_u64().unwrap()));
    }
    assert!(w["lelantus"].0 < w["baseline"].0 / 2, "{w:?}");
    assert!(w["lelantus"].1 < w["baseline"].1, "{w:?}");
    assert!(w["lelantus-cow"].0 < w["baseline"].0 / 2, "{w:?}");
}

