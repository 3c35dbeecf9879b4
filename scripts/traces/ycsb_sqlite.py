"""A YCSB-style key-value workload on SQLite, for recording real storage traces.

D-Shield's Fig. 14 runs YCSB against RocksDB, MongoDB, PostgreSQL, Accumulo and Redis, which
are not available here. This runs YCSB's core workload shape on SQLite (Python's built-in
``sqlite3``): a table of 1 KB records (YCSB's default record: 10 fields of 100 B, kept as one
1,000-byte value), keys chosen by YCSB's scrambled Zipfian distribution (constant 0.99), each
operation its own transaction. ``--phase load`` creates the database; ``--phase run`` runs the
operations, ``rwm`` (50% reads, 50% updates: YCSB workload A), ``rh`` (95/5: workload B) or
``ro`` (reads only: workload C). SQLite's page cache is kept small so the database's reads
reach the file, as with a database larger than memory.

Record the run phase's file I/O with ``secmem io-capture`` (scripts/traces/record_ycsb.sh records the three that `secmem reproduce dshield` uses):

    python3 scripts/traces/ycsb_sqlite.py --db /tmp/ycsb.db --phase load
    secmem io-capture --out rwm.iolog -- python3 scripts/traces/ycsb_sqlite.py --db /tmp/ycsb.db --phase run --workload rwm
"""

import argparse
import bisect
import os
import random
import sqlite3

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(v: int) -> int:
    """YCSB's FNV-1a hash of a long, used to scramble Zipfian ranks over the key space."""
    h = FNV_OFFSET
    for _ in range(8):
        h ^= v & 0xFF
        h = (h * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
        v >>= 8
    return h


class ScrambledZipfian:
    """Ranks drawn with P(rank k) proportional to 1 / k^theta, then hashed onto the keys."""

    def __init__(self, items: int, theta: float, rng: random.Random):
        weights = [1.0 / (k ** theta) for k in range(1, items + 1)]
        total = sum(weights)
        acc, self.cdf = 0.0, []
        for w in weights:
            acc += w / total
            self.cdf.append(acc)
        self.items, self.rng = items, rng

    def next(self) -> int:
        rank = min(bisect.bisect_left(self.cdf, self.rng.random()), self.items - 1)
        return fnv1a64(rank) % self.items


WORKLOADS = {"rwm": 0.50, "rh": 0.95, "ro": 1.00}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True)
    p.add_argument("--phase", choices=["load", "run"], required=True)
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="rwm")
    p.add_argument("--records", type=int, default=65536, help="records of 1,000 bytes (default 65536: 64 MB)")
    p.add_argument("--ops", type=int, default=20000, help="operations of the run phase (default 20000)")
    p.add_argument("--cache-kib", type=int, default=1024, help="SQLite's page cache, KiB (default 1024)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    if a.phase == "load":
        if os.path.exists(a.db):
            os.remove(a.db)
        db = sqlite3.connect(a.db)
        db.execute("CREATE TABLE usertable (key INTEGER PRIMARY KEY, field BLOB)")
        with db:
            db.executemany("INSERT INTO usertable VALUES (?, ?)", ((k, rng.randbytes(1000)) for k in range(a.records)))
        db.close()
        return
    db = sqlite3.connect(a.db, isolation_level=None)
    db.execute(f"PRAGMA cache_size = -{a.cache_kib}")
    keys = ScrambledZipfian(a.records, 0.99, rng)
    read_share = WORKLOADS[a.workload]
    for _ in range(a.ops):
        k = keys.next()
        if rng.random() < read_share:
            db.execute("SELECT field FROM usertable WHERE key = ?", (k,)).fetchone()
        else:
            db.execute("UPDATE usertable SET field = ? WHERE key = ?", (rng.randbytes(1000), k))
    db.close()


if __name__ == "__main__":
    main()
