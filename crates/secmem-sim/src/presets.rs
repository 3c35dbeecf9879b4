//! Named presets. Each is a TOML layer over the defaults, kept in `configs/presets/` and
//! compiled in, and cites the table of the paper it comes from.

use secmem_core::error::ConfigError;

pub struct Preset {
    pub name: &'static str,
    /// Where its numbers come from.
    pub source: &'static str,
    pub toml: &'static str,
}

pub const PRESETS: &[Preset] = &[
    Preset { name: "default", source: "built-in defaults (Horus Table I geometry)", toml: "" },
    Preset { name: "horus", source: "Horus (MICRO'22) Table I and Table II", toml: include_str!("../../../configs/presets/horus.toml") },
    Preset { name: "strict", source: "recoverable baseline: Horus (MICRO'22) Table I geometry, eager update, strict persistence (Horus II-C, Triad-NVM)", toml: include_str!("../../../configs/presets/strict.toml") },
    Preset { name: "bmf", source: "Bonsai Merkle Forests (MICRO'21) Table 1", toml: include_str!("../../../configs/presets/bmf.toml") },
    Preset { name: "esd", source: "ESD Table I", toml: include_str!("../../../configs/presets/esd.toml") },
    Preset { name: "dshield", source: "D-Shield (HPCA'23) Table I (NVMe SSD) and Table II (FIO); main memory: the defaults", toml: include_str!("../../../configs/presets/dshield.toml") },
    Preset { name: "lelantus", source: "Lelantus (HPCA'20) Table III", toml: include_str!("../../../configs/presets/lelantus.toml") },
];

pub fn get(name: &str) -> Result<&'static Preset, ConfigError> {
    PRESETS.iter().find(|p| p.name == name).ok_or_else(|| {
        let known: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        ConfigError::new("preset", format!("unknown preset '{name}'; known: {}", known.join(", ")))
    })
}
