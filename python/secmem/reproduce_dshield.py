"""``secmem reproduce dshield``: D-Shield (HPCA'23): Fig. 3 (the software baselines' runtime
over ``insecure`` on FIO's six patterns), Fig. 13 (D-Shield and D-Shield-Pro on the same
patterns), Fig. 14 (throughput on key-value workloads: YCSB on SQLite, recorded here, for the
paper's database servers), Fig. 16b (cache size) and Fig. 17 (metadata I/Os), on the
``dshield`` preset (Table I's drive, Table II's FIO) with every I/O's DMA through the secure
memory controller; D-Shield, D-Shield-Hyb and D-Shield-Pro (on Hyb, as in the paper).

Writes ``OUT/reproduce.json`` (rows ``{"figure", "metric", "paper", "ours", "unit"}``),
``OUT/runs.json`` (every run's report), ``OUT/fig3.png``, ``OUT/fig13.png``, ``OUT/fig14.png``
and ``OUT/report.md``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List

from . import api, reproduce_table
from .reproduce_table import mean, ours

PATTERNS = ["seq-read", "seq-write", "seq-rw", "rand-read", "rand-write", "rand-rw"]
LABEL = {"seq-read": "Seq-R", "seq-write": "Seq-W", "seq-rw": "Seq-RW", "rand-read": "Rand-R", "rand-write": "Rand-W", "rand-rw": "Rand-RW"}
STACKS = ["insecure", "enc", "enc-int", "dshield", "dshield-hyb", "dshield-pro"]
SEQUENTIAL = ["seq-read", "seq-write", "seq-rw"]
# Fig. 16b: the on-chip metadata caches' size on a random pattern, KiB each (the paper's sizes
# are not stated; 256 KB is Table I's).
CACHE_KIB = [64, 256, 1024, 4096]
# Fig. 14: YCSB's read/write mixed (A), read-heavy (B) and read-only (C) workloads on SQLite,
# recorded with `secmem io-capture` by scripts/traces/record_ycsb.sh (5,000 operations each on
# a 64 MB database of 1 KB records), replayed as fast as the drive allows.
YCSB = {"rwm": "RWm", "rh": "Rh", "ro": "Ro"}
TRACES = os.path.join(os.path.dirname(__file__), "traces")
# The shared crypto engine's issue models (`security.crypto_engine`), the preset's first, and
# where they are compared.
ENGINES = ["serial", "pipelined", "unlimited"]
ENGINE_PATTERNS = ["seq-read", "rand-read", "rand-rw"]
ENGINE_STACKS = ["insecure", "dshield", "dshield-hyb"]

# Section III: "2.4x on average for encryption only and 16.1x for encryption with integrity
# protection" (per-pattern bars are not quoted).
PAPER = {
    ("fig3", "enc runtime / insecure, mean of the six patterns"): 2.4,
    ("fig3", "enc-int runtime / insecure, mean of the six patterns"): 16.1,
    # Section VIII-B on Fig. 13 (128K transactions): "D-Shield demonstrates on average 2.6x and
    # 9x speedup compared to Enc and Enc+Int" (sequential patterns); "49% overhead on random
    # write (Rand-W) while showing 74% and 55% performance degradation for random read
    # (Rand-R) and random read/write (Rand-RW)"; "57% NVMe CMAC cache miss in D-Shield for
    # random workloads".
    ("fig13", "enc runtime / dshield, mean of the sequential patterns"): 2.6,
    ("fig13", "enc-int runtime / dshield, mean of the sequential patterns"): 9.0,
    ("fig13", "dshield runtime / insecure, Rand-W"): 1.49,
    ("fig13", "dshield runtime / insecure, Rand-R"): 1.74,
    ("fig13", "dshield runtime / insecure, Rand-RW"): 1.55,
    ("fig13", "dshield CMAC cache miss rate, random patterns"): 0.57,
    # "By reducing the redundant cryptographic operations with D-Shield-Hyb (Section VI), this
    # execution time overhead is minimized to 46% ... the number of cryptographic operations
    # (128-bit granularity) on D-Shield-Hyb is 2.3x lowered compared to regular D-Shield."
    ("fig13", "dshield-hyb runtime / insecure, mean of the random patterns"): 1.46,
    ("fig13", "dshield crypto operations / dshield-hyb, random patterns"): 2.3,
    # "D-Shield-Pro can retain almost the same performance (i.e., 95%) as the baseline" on the
    # sequential patterns (runtime 1 / 0.95); on the random ones, 41% overhead (Fig. 13).
    ("fig13", "dshield-pro runtime / insecure, mean of the sequential patterns"): round(1 / 0.95, 4),
    ("fig13", "dshield-pro runtime / insecure, mean of the random patterns"): 1.41,
    # Section VIII-C on Fig. 17: "D-Shield and D-Shield-Hyb introduces 7% and 39% of additional
    # overhead for sequential and random workloads while D-Shield-Pro reduces the overhead to
    # 5% and 24%" (metadata I/Os over all disk I/Os).
    ("fig17", "dshield metadata I/Os / all disk I/Os, sequential patterns"): 0.07,
    ("fig17", "dshield metadata I/Os / all disk I/Os, random patterns"): 0.39,
    ("fig17", "dshield-pro metadata I/Os / all disk I/Os, sequential patterns"): 0.05,
    ("fig17", "dshield-pro metadata I/Os / all disk I/Os, random patterns"): 0.24,
    ("fig17", "dshield-hyb metadata I/Os / all disk I/Os, sequential patterns"): 0.07,
    ("fig17", "dshield-hyb metadata I/Os / all disk I/Os, random patterns"): 0.39,
    # Section VIII-B on Fig. 14: "D-Shield schemes can maintain 89%, 93%, and 94% throughput of
    # the performance of insecure baseline, and on the other hand, Enc and Enc+Int only achieve
    # 71% and 47%" (D-Shield, -Hyb, -Pro; over the five servers and three YCSB patterns).
    ("fig14", "dshield throughput / insecure, mean of the key-value workloads"): 0.89,
    ("fig14", "dshield-hyb throughput / insecure, mean of the key-value workloads"): 0.93,
    ("fig14", "dshield-pro throughput / insecure, mean of the key-value workloads"): 0.94,
    # Section V-B and VIII: CMAC blocks are 3.12% of the drive, the tree under 0.06%, 3.14% in all.
    ("storage", "CMAC blocks / drive"): 0.0312,
    ("storage", "storage metadata / drive"): 0.0314,
    ("fig14", "enc throughput / insecure, mean of the key-value workloads"): 0.71,
    ("fig14", "enc-int throughput / insecure, mean of the key-value workloads"): 0.47,
}

REPORT_NOTES = """
## Where and why we differ

* **What Fig. 3 measured.** The paper ran fio on a real machine (Core i7-9700K, Samsung 970
  EVO Plus, Linux 5.15) with dm-crypt and dm-crypt + dm-integrity. secmem runs the same six
  patterns on Table I's simulated Z-NAND drive with Table II's FIO setup (4 threads, 4 KB,
  8 GB space; {ios:,} I/Os per run), one I/O outstanding per thread, and every DMA transfer
  through the secure memory controller. The drive is faster than the 970 EVO Plus (10.5 us
  reads), which makes the host's share larger, not smaller.
* **enc ({enc_mean:.2f}x against 2.4x).** Our dm-crypt is its cipher alone:
  AES-XTS per 512 B sector at {aes:.0f} ns (RustCrypto with AES-NI, measured by
  `secmem io-calibrate`), on the submitting core before a write and on the completing core
  after a read. The kernel's dm-crypt also hands every bio to its kcryptd workqueue and back
  (context switches, queueing, cache misses on the bounce pages), which is not modelled, and
  neither is the CPU's memory traffic of encrypting into bounce pages. Those costs, not the
  cipher, are most of the 2.4x on a fast drive, so ours is a lower bound.
* **enc-int ({enc_int_mean:.2f}x against 16.1x).** dm-integrity is modelled from its on-disk
  format and its journal: {tag}-byte HMAC-SHA256 tags ({hmac:.0f} ns a sector on the core),
  journal sections of {entries} entries behind 8 entry sectors, commits that pad the open
  section, the writer copying committed sections to their places, and tag updates through a
  cache of 64 KiB metadata buffers (2% of the host's memory, as dm-bufio sizes it) that reads
  a buffer it does not hold. Random writes pay most (journal, data and a 64 KiB buffer read per
  tag update: {rand_w:.1f}x); reads pay one buffer read per 1 MiB of data the first time
  ({rand_r:.1f}x on random reads). dm-integrity's bio splitting, range locks and its
  single-threaded workqueues, which serialise work the model overlaps, are not modelled.
* **Writes land in memory first.** Without flushes (fio's default), dm-integrity completes a
  write once it is in the journal's memory; the device work comes later, when the journal is
  half full. A run with fewer writes than that (29 MiB of 4 KB writes: the `--quick` runs)
  pays little of it, and sequential writes, whose journal copies are long runs, can even
  finish before `insecure`'s, which waits for the drive each time (Seq-W: {seq_w:.2f}x here).
* **The average** is the arithmetic mean of the six patterns' ratios, as the paper's "on
  average" reads.
* **D-Shield's CMAC misses ({miss:.1%} against 57% on random patterns).** Uniform random 4 KB
  I/Os over Table II's 8 GB space touch a new 16 KB CMAC block almost every time, and 256 KB
  of CMAC cache covers 8 MB of data: about 0.1% of the space. The paper's 43% hits mean its
  random streams had locality Table II does not state (a smaller effective range, repeats).
* **D-Shield on random writes ({rand_w_ds:.2f}x against 1.49x).** Each write needs its CMAC
  block before it can be encrypted, so a missed block is a flash read on the write's path,
  and every dirty block that leaves the cache is a 512 B metadata write: part of a 4 KB page,
  so the drive reads the old page and programs a new one. A write thus brings
  {flash_reads:.1f} flash reads and {programs:.1f} programs here, and the metadata reads
  queue behind the programs on their planes. The paper's CMAC hit rate would take much of
  that away; secmem's drive keeps no metadata in its DRAM beyond the write buffer.
* **D-Shield on random reads ({rand_r_ds:.2f}x against 1.74x).** A read's metadata reads
  start at its submission and run beside the data's on other planes, and nothing is written
  back, so at one I/O per thread a read waits mostly for the engine (8 pads and a MAC per
  sector: 1.3 us for 4 KB), behind the memory side's work on the same engine (below).
* **Storage overhead ({storage:.2%} of the drive against 3.14%).** The CMAC blocks are Fig. 6's
  512 B per 32 data blocks and the tree's 8 B hashes sit above them, in the metadata namespace
  at the drive's end; the share is of the whole drive.
* **One crypto engine for memory and storage.** The DIE delegates its cryptography to the
  memory controller's engine, where it queues with the memory side's pads and MACs for every
  DMA line (section VIII). The preset's engine is serial, as Table I's costs imply (a 512 B
  hash is eight 64 B operations end to end). The `engine` rows run the same patterns on a
  pipelined engine (4 cycles per 64 B) and an unlimited one: on Rand-R D-Shield is
  {eng_serial:.2f}x / {eng_pipe:.2f}x / {eng_unl:.2f}x insecure, so the engine's throughput is
  {eng_share:.0%} of D-Shield's read overhead; the serial engine is
  {eng_util:.0%} busy under D-Shield on Rand-R and {eng_util_ins:.0%} under insecure (the
  memory side alone). D-Shield-Hyb on Seq-R is {hyb_seq:.2f}x insecure on the serial engine:
  its reads skip the memory side's pad and MAC for every DMA line, which insecure pays.
* **Sequential (enc / D-Shield {seq_enc:.2f}x, enc-int / D-Shield {seq_encint:.2f}x against
  2.6x and 9x).** Our software baselines are cheaper than the paper's (above), and D-Shield's
  sequential writes pay a CMAC write-back per 16 KB ({seq_w_ds:.2f}x insecure on Seq-W).
* **D-Shield-Pro (sequential {pro_seq:.2f}x, random {pro_rand:.2f}x against 1.05x and
  1.41x).** Its 128 MB memory cache could hold half of the 256 MB of CMAC blocks behind the
  8 GB space, but only blocks read before (a non-zero Useful count) go there, and a run of
  {ios:,} uniform random I/Os comes back to few of the 524,288 blocks: it serves
  {pro_hit:.1%} of the on-chip misses. On sequential patterns every block is new once, so Pro
  is Hyb there. Pro builds on D-Shield-Hyb, as in the paper.
* **D-Shield-Hyb (random {hyb_rand:.2f}x against 1.46x; {hyb_crypto:.1f}x fewer cryptographic
  operations against 2.3x).** A read's data lands in memory as the drive's ciphertext (its
  lines' PD bits set in their pages' counter blocks), without the engine's check and
  decryption or the memory's encryption, and its completion is no longer held: the check
  waits for the processor's read, which fio never makes. So Hyb's reads cost the insecure
  path plus the metadata fetch that the DIE still starts, and the cryptography left is the
  writes' (8 pads and a MAC per sector, the memory's pad and MAC per line read out of the
  buffer) and the metadata's. Our operations are counted in 64 B units, the paper's in
  128-bit ones: the ratio is the same. With an application that reads and writes its blocks
  (`io.touch_data`), Rand-RW's ratio is {hyb_touch:.2f}x: D-Shield's reads then also pay the
  memory's decryption, Hyb's their deferred check, and writes cost both the same. Hyb's
  runtime on the random patterns stays near D-Shield's ({ds_rand:.2f}x): what they pay is the
  metadata's flash traffic (above), which Hyb keeps; the engine time it saves is small beside
  it. Hyb's random writes are D-Shield's: fio never writes
  back data it read, so no sector is unchanged; a buffer that held a read's data moves it
  (decrypted with its own sector's metadata, encrypted for the new one).
* **Metadata I/Os (Fig. 17: sequential {f17_seq:.0%}, random {f17_rand:.0%} of the drive's
  I/Os against 7% and 39%; Pro {f17_pro_seq:.0%} and {f17_pro_rand:.0%} against 5% and
  24%).** A sequential 4 KB stream reads and writes back one CMAC block per four I/Os; a
  random I/O misses its CMAC block and often its level-1 node, and writes back what it
  displaces.
* **Key-value workloads (Fig. 14: D-Shield {f14_ds:.0%}, Pro {f14_pro:.0%}, enc {f14_enc:.0%},
  enc-int {f14_encint:.0%} of insecure's throughput, against 89%, 94%, 71% and 47%).** The
  paper ran YCSB on RocksDB, MongoDB, PostgreSQL, Accumulo and Redis with an 8 GB database;
  none of them runs here. secmem replays YCSB's workloads A, B and C (RWm, Rh, Ro) on SQLite,
  recorded on this machine with `secmem io-capture` (`scripts/traces/record_ycsb.sh`: 5,000
  operations each on a 64 MB database of 1 KB records, Zipfian keys, each update its own
  transaction through SQLite's rollback journal), over 4 threads. Throughput is I/Os over the
  replay's runtime: between two fsyncs the I/Os go as fast as the queues allow, and each fsync
  is a barrier ({f14_flushes:,} on RWm) that waits for the I/Os before it and, under enc-int,
  for dm-integrity's journal commit. The database's CPU time is not in the trace, so a stack's
  cost is measured against the drive's time alone, which makes every ratio here a bound on
  what an application would see. SQLite's small journal rewrites merge in the drive's write
  buffer. Our dm-crypt is its cipher alone (above), hence enc's {f14_enc:.0%}. enc-int pays a
  journal commit per fsync ({f14_encint_rwm:.0%} on RWm). D-Shield pays its CMAC reads and
  write-backs ({f14_hit:.0%} CMAC hits on RWm: Zipfian keys over 64 MB give the cache reuse).
* **Cache size (Fig. 16b: Rand-RW hit ratio {f16_lo:.1%} at 64 KB to {f16_hi:.1%} at 4 MB,
  against 13% to 50% over the paper's unstated sizes).** Uniform random I/O over 8 GB has no
  reuse for a few MB of cache to catch; the paper's random streams had some.
"""



def collect(quick: bool) -> (List[Dict[str, Any]], Dict[str, Any]):
    ios = 16_384 if quick else 131_072
    runs: Dict[str, Dict[str, Any]] = {}
    for pat in PATTERNS:
        for stack in STACKS:
            params = ["run.progress=false", f"io.pattern={pat}", f"io.stack={stack}", f"io.ios={ios}"]
            runs[f"{pat}/{stack}"] = api.run_io(preset="dshield", params=params)
    rows: List[Dict[str, Any]] = []

    def row(metric, ours, unit="x"):
        rows.append({"figure": "fig3", "metric": metric, "paper": PAPER.get(("fig3", metric)), "ours": round(ours, 4), "unit": unit})

    ratio = {s: {} for s in STACKS[1:]}
    for pat in PATTERNS:
        base = runs[f"{pat}/insecure"]["io"]["runtime_us"]
        for stack in STACKS[1:]:
            ratio[stack][pat] = runs[f"{pat}/{stack}"]["io"]["runtime_us"] / base
            row(f"{stack} runtime / insecure, {LABEL[pat]}", ratio[stack][pat])
    for stack in ("enc", "enc-int"):
        row(f"{stack} runtime / insecure, mean of the six patterns", mean(list(ratio[stack].values())))
    # Fig. 13: the basic D-Shield.
    rows[:] = [r for r in rows if not r["metric"].startswith("dshield")]

    def row13(metric, ours, unit="x"):
        rows.append({"figure": "fig13", "metric": metric, "paper": PAPER.get(("fig13", metric)), "ours": round(ours, 4), "unit": unit})

    for pat in PATTERNS:
        row13(f"dshield runtime / insecure, {LABEL[pat]}", ratio["dshield"][pat])
    for stack in ("enc", "enc-int"):
        row13(f"{stack} runtime / dshield, mean of the sequential patterns", mean([ratio[stack][p] / ratio["dshield"][p] for p in SEQUENTIAL]))
    randoms = [p for p in PATTERNS if p not in SEQUENTIAL]
    for stack in ("dshield-hyb", "dshield-pro"):
        for name, pats in (("sequential", SEQUENTIAL), ("random", randoms)):
            row13(f"{stack} runtime / insecure, mean of the {name} patterns", mean([ratio[stack][p] for p in pats]))
    # Cryptographic operations (the DIE's and the memory's on the DMA path, in 64 B units).
    crypto = {st: sum(runs[f"{p}/{st}"]["dshield"]["crypto_ops_64b"] for p in randoms) for st in ("dshield", "dshield-hyb")}
    row13("dshield crypto operations / dshield-hyb, random patterns", crypto["dshield"] / max(crypto["dshield-hyb"], 1))
    # The same on Rand-RW with an application that reads and writes its blocks (io.touch_data):
    # D-Shield's reads then also pay the memory's decryption, Hyb's their deferred check.
    for st in ("dshield", "dshield-hyb"):
        runs[f"rand-rw/{st}/touch"] = api.run_io(preset="dshield", params=["run.progress=false", "io.pattern=rand-rw", f"io.stack={st}", f"io.ios={ios}", "io.touch_data=true"])
    touch = [runs[f"rand-rw/{st}/touch"]["dshield"]["crypto_ops_64b"] for st in ("dshield", "dshield-hyb")]
    row13("dshield crypto operations / dshield-hyb, Rand-RW, the application using its data", touch[0] / max(touch[1], 1))
    # Fig. 17: the metadata's share of the drive's I/Os (every data I/O is one command here).
    for stack in ("dshield", "dshield-hyb", "dshield-pro"):
        for name, pats in (("sequential", SEQUENTIAL), ("random", [p for p in PATTERNS if p not in SEQUENTIAL])):
            meta = sum(runs[f"{p}/{stack}"]["dshield"]["metadata_reads"] + runs[f"{p}/{stack}"]["dshield"]["metadata_writes"] for p in pats)
            data = sum(runs[f"{p}/{stack}"]["io"]["ios"] for p in pats)
            rows.append({"figure": "fig17", "metric": f"{stack} metadata I/Os / all disk I/Os, {name} patterns",
                         "paper": PAPER.get(("fig17", f"{stack} metadata I/Os / all disk I/Os, {name} patterns")),
                         "ours": round(meta / (meta + data), 4), "unit": "ratio"})
    # Fig. 16b: the caches' size on Rand-RW.
    for kib in CACHE_KIB:
        r = runs[f"rand-rw/dshield/{kib}"] = api.run_io(preset="dshield", params=["run.progress=false", "io.pattern=rand-rw", "io.stack=dshield", f"io.ios={ios}", f"io.dshield_cache_kib={kib}"])
        rows.append({"figure": "fig16", "metric": f"dshield CMAC hit ratio, Rand-RW, {kib} KB caches", "paper": None, "ours": round(r["dshield"]["cmac_hit_rate"], 4), "unit": "ratio"})
        rows.append({"figure": "fig16", "metric": f"dshield runtime / insecure, Rand-RW, {kib} KB caches", "paper": None,
                     "ours": round(r["io"]["runtime_us"] / runs["rand-rw/insecure"]["io"]["runtime_us"], 4), "unit": "x"})
    # Fig. 14: the recorded key-value workloads.
    for w in YCSB:
        for stack in STACKS:
            runs[f"ycsb-{w}/{stack}"] = api.run_io(preset="dshield", params=[
                "run.progress=false", f"io.stack={stack}", f"io.trace={json.dumps(os.path.join(TRACES, f'ycsb-sqlite-{w}.iolog'))}", "io.space_gib=1"])
    thr = {s: {w: runs[f"ycsb-{w}/insecure"]["io"]["runtime_us"] / runs[f"ycsb-{w}/{s}"]["io"]["runtime_us"] for w in YCSB} for s in STACKS[1:]}
    for stack in STACKS[1:]:
        for w in YCSB:
            rows.append({"figure": "fig14", "metric": f"{stack} throughput / insecure, YCSB-{YCSB[w]} on SQLite", "paper": None, "ours": round(thr[stack][w], 4), "unit": "ratio"})
        metric = f"{stack} throughput / insecure, mean of the key-value workloads"
        rows.append({"figure": "fig14", "metric": metric, "paper": PAPER.get(("fig14", metric)), "ours": round(mean(list(thr[stack].values())), 4), "unit": "ratio"})
    # The shared engine's throughput: the preset's serial engine (Table I) beside a pipelined
    # and an unlimited one, on the patterns where the engine's share is largest.
    for mode in ENGINES[1:]:
        for pat in ENGINE_PATTERNS:
            for stack in ENGINE_STACKS:
                runs[f"{pat}/{stack}/engine-{mode}"] = api.run_io(preset="dshield", params=[
                    "run.progress=false", f"io.pattern={pat}", f"io.stack={stack}", f"io.ios={ios}", f"security.crypto_engine={mode}"])
    for mode in ENGINES:
        def key(pat: str, st: str, mode: str = mode) -> str:
            """The preset's engine is the main runs'; the others have runs of their own."""
            return f"{pat}/{st}" if mode == ENGINES[0] else f"{pat}/{st}/engine-{mode}"

        for pat in ENGINE_PATTERNS:
            base = runs[key(pat, "insecure")]
            for stack in ENGINE_STACKS[1:]:
                rows.append({"figure": "engine", "metric": f"{stack} runtime / insecure, {LABEL[pat]}, {mode} engine", "paper": None,
                             "ours": round(runs[key(pat, stack)]["io"]["runtime_us"] / base["io"]["runtime_us"], 4), "unit": "x"})
            for stack in ENGINE_STACKS if mode != "unlimited" else []:
                rows.append({"figure": "engine", "metric": f"{stack} crypto engine utilisation, {LABEL[pat]}, {mode} engine", "paper": None,
                             "ours": round(runs[key(pat, stack)]["crypto_engine"]["utilisation"], 4), "unit": "ratio"})
    # Section VIII's storage overhead: the CMAC blocks (Fig. 6: 512 B per 32 data blocks) and
    # the tree's 8 B hashes, as shares of the drive.
    share = runs["rand-read/dshield"]["dshield"]["metadata_share_of_drive"]
    for metric, ours in (("CMAC blocks / drive", share["cmac"]), ("tree nodes / drive", share["tree"]), ("storage metadata / drive", share["cmac"] + share["tree"])):
        rows.append({"figure": "storage", "metric": metric, "paper": PAPER.get(("storage", metric)), "ours": round(ours, 5), "unit": "ratio"})
    misses = [runs[f"{p}/dshield"]["dshield"] for p in PATTERNS if p.startswith("rand")]
    row13("dshield CMAC cache miss rate, random patterns", sum(d["cmac_misses"] for d in misses) / sum(d["cmac_misses"] + d["cmac_hits"] for d in misses), "ratio")
    io_config = api.config_json(preset="dshield")["io"]
    return rows, {"ios": ios, "ratio": ratio, "throughput": thr, "runs": runs, "io_config": io_config}



def _pro_hit(runs: Dict[str, Any]) -> float:
    """The share of D-Shield-Pro's on-chip CMAC misses its memory cache served, random patterns."""
    d = [runs[f"{p}/dshield-pro"]["dshield"] for p in PATTERNS if p.startswith("rand")]
    misses = sum(x["cmac_misses"] for x in d)
    return sum(x["memory_cache_hits"] for x in d) / misses if misses else 0.0


def plots(series: Dict[str, Any], out: str) -> List[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def save(fig, ax, title: str, name: str) -> None:
        """Every figure's pattern axis, labels and file."""
        ax.set_xticks(list(xs))
        ax.set_xticklabels([LABEL[p] for p in PATTERNS])
        ax.set_ylabel("runtime / insecure")
        ax.set_title(title)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=110)
        plt.close(fig)

    xs = range(len(PATTERNS))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.27
    ax.bar([x - width for x in xs], [1.0] * len(PATTERNS), width, label="insecure")
    for k, stack in enumerate(("enc", "enc-int")):
        ax.bar([x + k * width for x in xs], [series["ratio"][stack][p] for p in PATTERNS], width, label=stack)
    ax.axhline(2.4, color="C1", ls="--", lw=1, label="paper enc mean (2.4x)")
    ax.axhline(16.1, color="C2", ls="--", lw=1, label="paper enc-int mean (16.1x)")
    save(fig, ax, "Fig 3: software storage protection on FIO", "fig3.png")

    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.14
    for k, stack in enumerate(STACKS):
        ys = [1.0] * len(PATTERNS) if stack == "insecure" else [series["ratio"][stack][p] for p in PATTERNS]
        ax.bar([x + (k - 2.5) * width for x in xs], ys, width * 0.95, label=stack)
    paper = {p: PAPER[key] for p in PATTERNS if (key := ("fig13", f"dshield runtime / insecure, {LABEL[p]}")) in PAPER}
    ax.scatter([PATTERNS.index(p) + 1 * width for p in paper], list(paper.values()), color="k", marker="_", s=200, zorder=3, label="paper dshield")
    ax.set_yscale("log")
    save(fig, ax, "Fig 13: D-Shield against the software baselines", "fig13.png")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ws = list(YCSB)
    width = 0.16
    for k, stack in enumerate(STACKS[1:]):
        ax.bar([x + (k - 2) * width for x in range(len(ws))], [series["throughput"][stack][w] for w in ws], width * 0.95, label=stack)
    for k, stack in enumerate(STACKS[1:]):
        paper = PAPER.get(("fig14", f"{stack} throughput / insecure, mean of the key-value workloads"))
        if paper is not None:
            ax.axhline(paper, color=f"C{k}", ls="--", lw=1, label=f"paper {stack} mean ({paper:.0%})")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(ws)))
    ax.set_xticklabels([f"YCSB-{YCSB[w]}" for w in ws])
    ax.set_ylabel("throughput / insecure")
    ax.set_title("Fig 14: key-value workloads (YCSB on SQLite)")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fig14.png"), dpi=110)
    plt.close(fig)
    return ["fig3.png", "fig13.png", "fig14.png"]


def report_md(rows: List[Dict[str, Any]], series: Dict[str, Any], out: str, quick: bool, wall: float) -> str:
    run = series["runs"]["rand-write/enc-int"]
    eng_serial = ours(rows, "dshield runtime / insecure, Rand-R, serial engine")
    eng_unl = ours(rows, "dshield runtime / insecure, Rand-R, unlimited engine")
    notes = {
        "ios": series["ios"],
        "enc_mean": mean(list(series["ratio"]["enc"].values())),
        "enc_int_mean": mean(list(series["ratio"]["enc-int"].values())),
        "rand_w": series["ratio"]["enc-int"]["rand-write"],
        "rand_r": series["ratio"]["enc-int"]["rand-read"],
        "seq_w": series["ratio"]["enc-int"]["seq-write"],
        "tag": run["integrity"]["tag_bytes"],
        "entries": run["integrity"]["section_entries"],
        "aes": series["io_config"]["aes_xts_ns_per_sector"],
        "hmac": series["io_config"]["hmac_sha256_ns_per_sector"],
        "miss": next(r["ours"] for r in rows if r["metric"] == "dshield CMAC cache miss rate, random patterns"),
        "rand_w_ds": series["ratio"]["dshield"]["rand-write"],
        "rand_r_ds": series["ratio"]["dshield"]["rand-read"],
        "seq_w_ds": series["ratio"]["dshield"]["seq-write"],
        "seq_enc": next(r["ours"] for r in rows if r["metric"] == "enc runtime / dshield, mean of the sequential patterns"),
        "seq_encint": next(r["ours"] for r in rows if r["metric"] == "enc-int runtime / dshield, mean of the sequential patterns"),
        "flash_reads": series["runs"]["rand-write/dshield"]["ssd"]["flash_reads"] / series["runs"]["rand-write/dshield"]["io"]["writes"],
        "programs": series["runs"]["rand-write/dshield"]["ssd"]["flash_programs"] / series["runs"]["rand-write/dshield"]["io"]["writes"],
        "pro_seq": next(r["ours"] for r in rows if r["metric"] == "dshield-pro runtime / insecure, mean of the sequential patterns"),
        "pro_rand": next(r["ours"] for r in rows if r["metric"] == "dshield-pro runtime / insecure, mean of the random patterns"),
        "pro_hit": _pro_hit(series["runs"]),
        "f17_seq": ours(rows, "dshield metadata I/Os / all disk I/Os, sequential patterns"),
        "f17_rand": ours(rows, "dshield metadata I/Os / all disk I/Os, random patterns"),
        "f17_pro_seq": ours(rows, "dshield-pro metadata I/Os / all disk I/Os, sequential patterns"),
        "f17_pro_rand": ours(rows, "dshield-pro metadata I/Os / all disk I/Os, random patterns"),
        "f16_lo": ours(rows, f"dshield CMAC hit ratio, Rand-RW, {CACHE_KIB[0]} KB caches"),
        "f16_hi": ours(rows, f"dshield CMAC hit ratio, Rand-RW, {CACHE_KIB[-1]} KB caches"),
        "hyb_rand": ours(rows, "dshield-hyb runtime / insecure, mean of the random patterns"),
        "ds_rand": mean([series["ratio"]["dshield"][p] for p in PATTERNS if p not in SEQUENTIAL]),
        "hyb_crypto": ours(rows, "dshield crypto operations / dshield-hyb, random patterns"),
        "hyb_touch": ours(rows, "dshield crypto operations / dshield-hyb, Rand-RW, the application using its data"),
        "f14_ds": ours(rows, "dshield throughput / insecure, mean of the key-value workloads"),
        "f14_pro": ours(rows, "dshield-pro throughput / insecure, mean of the key-value workloads"),
        "f14_enc": ours(rows, "enc throughput / insecure, mean of the key-value workloads"),
        "f14_encint": ours(rows, "enc-int throughput / insecure, mean of the key-value workloads"),
        "f14_encint_rwm": series["throughput"]["enc-int"]["rwm"],
        "f14_flushes": series["runs"]["ycsb-rwm/insecure"]["io"]["flushes"],
        "f14_hit": series["runs"]["ycsb-rwm/dshield"]["dshield"]["cmac_hit_rate"],
        "eng_serial": eng_serial,
        "eng_pipe": ours(rows, "dshield runtime / insecure, Rand-R, pipelined engine"),
        "eng_unl": eng_unl,
        # The engine's share of D-Shield's Rand-R overhead: what an unlimited engine saves of it.
        "eng_share": (eng_serial - eng_unl) / (eng_serial - 1) if eng_serial > 1 else 0.0,
        "eng_util": ours(rows, "dshield crypto engine utilisation, Rand-R, serial engine"),
        "eng_util_ins": ours(rows, "insecure crypto engine utilisation, Rand-R, serial engine"),
        "hyb_seq": ours(rows, "dshield-hyb runtime / insecure, Seq-R, serial engine"),
        "storage": ours(rows, "storage metadata / drive"),
    }
    lines = [
        "# D-Shield (HPCA'23) reproduced on secmem: the software baselines (Fig. 3), D-Shield, D-Shield-Hyb and D-Shield-Pro (Figs. 13, 14, 16b, 17)",
        "",
        f"Preset `dshield` (Table I drive, Table II FIO), counting mode, "
        f"{'--quick: ' if quick else ''}{series['ios']:,} I/Os per run, {len(series['runs'])} runs; {wall:.0f} s of simulation. "
        "Runtime is the time to complete the run's I/Os (fio's runtime).",
        "",
    ]
    return reproduce_table.write_report(out, lines, rows, REPORT_NOTES.format(**notes), "Plots: fig3.png, fig13.png, fig14.png. Every run's full report: runs.json.")


def main(out: str = "reproduce", quick: bool = False) -> int:
    """Entry point of ``secmem reproduce dshield``."""
    return reproduce_table.run_and_write(out, quick, collect, plots, report_md)
