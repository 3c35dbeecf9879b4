//! Config sections the secure memory controller reads (two-phase: read, then `validate`).

use secmem_core::cache::CacheConfig;
use secmem_core::error::{ensure, ConfigError};
use secmem_core::{config_enum, config_section};

config_enum! {
    /// When integrity-tree updates propagate (Horus section II-C).
    pub enum TreeUpdate {
        Lazy => "lazy": "a node's parent is updated only when the node is evicted from the metadata cache",
        Eager => "eager": "every counter update recomputes the whole path up to the on-chip root"
    }
}

config_enum! {
    /// When security metadata reaches NVM.
    pub enum MetadataPersistence {
        WriteBack => "write-back": "metadata is written to NVM only when evicted from its cache (recovery-oblivious)",
        Strict => "strict": "every counter, MAC and tree-node update is written through to NVM before the data write completes (recoverable, with eager update)",
        BatteryBacked => "battery-backed": "as write-back while running, but the metadata caches survive power loss with the counters and the design's other on-chip state (battery-backed or non-volatile, as Lelantus section V-A assumes for its counter cache): nothing is rebuilt from NVM after a crash"
    }
}

config_enum! {
    /// The value every counter block holds at boot.
    pub enum CounterInit {
        Zero => "zero": "every major and minor counter starts at 0",
        Random => "random": "major 0, every minor a seeded pseudo-random value in its range, a pure function of (run.seed, page) (Lelantus section V-A)"
    }
}

config_enum! {
    /// How many operations the memory controller's crypto engine accepts at once
    /// (`controller::engine`).
    pub enum EngineIssue {
        Unlimited => "unlimited": "latency only: every operation starts when its inputs are ready (the memory papers' model)",
        Pipelined => "pipelined": "each 64 B of input holds the engine's input for security.crypto_engine_cycles_per_64b cycles; later operations queue",
        Serial => "serial": "one operation at a time, each holding the engine for its whole latency; later operations queue"
    }
}

config_section! {
    /// Secure memory: encryption, authentication and their costs.
    pub struct SecurityConfig {
        enabled: bool = true => "Secure memory on (counter-mode encryption, per-line MACs, Bonsai Merkle Tree); false runs the same controller path with no security work, for comparison";
        minor_counter_bits: u32 = 7 => "Bits per minor counter in a split counter block (64 minors + 64-bit major per 4 KB page; 7 fills 64 B exactly; 8 only in counting mode, as 8-bit minors do not fit a 64 B block)";
        mac_bits: u32 = 64 => "Width of each per-line MAC in bits (8 per 64 B MAC block at 64 bits)";
        aes_latency_cycles: u64 = 40 => "Latency of one AES pad generation, CPU cycles (Horus Table I: 40)";
        mac_latency_cycles: u64 = 160 => "Latency of one MAC computation over a data line, CPU cycles (Horus Table I single hash: 160)";
        hash_latency_cycles: u64 = 160 => "Latency of one integrity-tree node hash, CPU cycles (Horus Table I: 160)";
        crypto_engine: EngineIssue = EngineIssue::Unlimited => "The crypto engine's throughput, shared by everything that delegates crypto to the memory controller: unlimited (latency only, as Horus and Lelantus model it), pipelined or serial";
        crypto_engine_cycles_per_64b: u64 = 4 => "Pipelined engine: cycles each 64 B of input holds its input (initiation interval), CPU cycles (4: a fully pipelined AES-128 unit takes one 16 B block per cycle)";
        verify_on_critical_path: bool = false => "Reads also wait for the data MAC check; false overlaps it with data use (speculative, as in BMF and Horus). A fetched counter is always verified against the tree before its pad is used";
        metadata_persistence: MetadataPersistence = MetadataPersistence::WriteBack => "write-back (recovery-oblivious), strict (write-through metadata, recoverable from NVM) or battery-backed (write-back metadata caches that survive power loss)";
        counter_init: CounterInit = CounterInit::Zero => "Value of every counter block at boot: zero, or random (major 0, minors uniformly random in their range, derived from run.seed and the page, so a line's first overflow comes after 2^bits - 1 - init writes; Lelantus section V-A initialises counters randomly to model overflow)";
    }
}

config_section! {
    /// The Bonsai Merkle Tree over counter blocks.
    pub struct TreeConfig {
        arity: u64 = 8 => "Children per tree node (8 x 64-bit hashes fill a 64 B node; functional mode needs <= 8); height is derived from capacity";
        update: TreeUpdate = TreeUpdate::Lazy => "lazy or eager tree update (Horus II-C)";
        verify_parent_on_write_back: bool = true => "A parent fetched to absorb an evicted block's hash (lazy update) is verified up its path like any fetched node (Horus II-C's walk); false fetches the parent alone, unverified (a timing variant for counting mode: functional mode refuses it, as an unverified parent would let a forged node be re-hashed as genuine)";
    }
}

config_enum! {
    /// How the Merkle-tree node cache is shared between the tree's levels.
    pub enum TreeCacheOrganisation {
        Shared => "shared": "one cache for every node level: any node may take any way of its set",
        PerLevel => "per-level": "the ways are partitioned between the node levels below the root (equal shares, the remainder to the lowest levels): a level's nodes only evict its own"
    }
}

config_section! {
    /// The memory controller's metadata caches (separate, as in Horus and BMF).
    pub struct MetadataCachesConfig {
        counter: CacheConfig = CacheConfig::new(256, 8, 2) => "Counter-block cache (Horus Table I: 256 kB, 8-way)";
        mac: CacheConfig = CacheConfig::new(512, 8, 2) => "MAC-block cache (Horus Table I: 512 kB, 8-way)";
        tree: CacheConfig = CacheConfig::new(256, 8, 2) => "Merkle-tree node cache (Horus Table I: 256 kB, 8-way)";
        tree_organisation: TreeCacheOrganisation = TreeCacheOrganisation::Shared => "How the tree cache is shared between node levels: shared (Horus Table I lists one 256 kB, 8-way Merkle-tree cache) or per-level (a way partition per level)";
    }
}

impl SecurityConfig {
    /// The initial counters of a run with seed `seed` (`run.seed`).
    pub fn initial_counters(&self, seed: u64) -> secmem_core::counters::InitialCounters {
        match self.counter_init {
            CounterInit::Zero => secmem_core::counters::InitialCounters::Zero,
            CounterInit::Random => secmem_core::counters::InitialCounters::Random { seed },
        }
    }

    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        ensure((1..=8).contains(&self.minor_counter_bits), &format!("{path}.minor_counter_bits"), || {
            format!("must be 1..=8 (a 0-bit counter cannot count), got {}", self.minor_counter_bits)
        })?;
        ensure(matches!(self.mac_bits, 8 | 16 | 32 | 64), &format!("{path}.mac_bits"), || {
            format!("must be 8, 16, 32 or 64, got {}", self.mac_bits)
        })?;
        for (name, v) in [
            ("aes_latency_cycles", self.aes_latency_cycles),
            ("mac_latency_cycles", self.mac_latency_cycles),
            ("hash_latency_cycles", self.hash_latency_cycles),
        ] {
            secmem_core::error::ensure_latency_cycles(v, &format!("{path}.{name}"))?;
        }
        ensure((1..=1_000_000).contains(&self.crypto_engine_cycles_per_64b), &format!("{path}.crypto_engine_cycles_per_64b"), || {
            format!("must be 1..=1000000 cycles, got {}", self.crypto_engine_cycles_per_64b)
        })?;
        Ok(())
    }
}

impl TreeConfig {
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        ensure((2..=64).contains(&self.arity), &format!("{path}.arity"), || {
            format!("must be 2..=64 (arity 0 or 1 gives no tree; a 64 B node holds at most 64 one-byte hashes), got {}", self.arity)
        })
    }
}

impl MetadataCachesConfig {
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        self.counter.validate(&format!("{path}.counter"))?;
        self.mac.validate(&format!("{path}.mac"))?;
        self.tree.validate(&format!("{path}.tree"))
    }
}
