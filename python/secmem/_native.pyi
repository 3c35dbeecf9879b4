"""Type stubs for the Rust extension (JSON text crosses the boundary; see secmem.api)."""

from typing import List, Optional

def presets() -> str: ...
def designs() -> str: ...
def config_toml(preset: Optional[str] = None, config: Optional[str] = None, overrides: List[str] = ...) -> str: ...
def config_json(preset: Optional[str] = None, config: Optional[str] = None, overrides: List[str] = ...) -> str: ...
def run(
    preset: Optional[str] = None,
    config: Optional[str] = None,
    overrides: List[str] = ...,
    trace: Optional[str] = None,
    out: Optional[str] = None,
    save_image: Optional[str] = None,
) -> str: ...
def trace_gen(
    pattern: str,
    requests: int,
    footprint_bytes: int,
    read_ratio: float,
    seed: int,
    out: str,
    format: str = "binary",
    stride_bytes: int = 4096,
    zipf_theta: float = 0.99,
    inst_gap: int = 10,
) -> int: ...
def trace_convert(input: str, output: str, out_format: str = "binary", in_format: Optional[str] = None) -> int: ...
def trace_info(path: str, format: Optional[str] = None) -> str: ...
def crash(
    preset: Optional[str] = None,
    config: Optional[str] = None,
    overrides: List[str] = ...,
    trace: Optional[str] = None,
    points: int = 2000,
    seed: int = 1,
) -> str: ...
def attack(
    preset: Optional[str] = None,
    config: Optional[str] = None,
    overrides: List[str] = ...,
    trace: Optional[str] = None,
    per_class: int = 500,
    seed: int = 1,
    classes: Optional[List[str]] = None,
    clean_reads: int = 1000000,
) -> str: ...
def image_verify(path: str, preset: Optional[str] = None, config: Optional[str] = None, overrides: List[str] = ...) -> str: ...
def drain(
    scheme: str,
    preset: Optional[str] = None,
    config: Optional[str] = None,
    overrides: List[str] = ...,
    trace: Optional[str] = None,
    from_workload: bool = False,
    after_records: Optional[int] = None,
    recover: bool = False,
) -> str: ...
def vault_attack(
    dlm: bool = False,
    preset: Optional[str] = None,
    config: Optional[str] = None,
    overrides: List[str] = ...,
    trace: Optional[str] = None,
    per_class: int = 100,
    seed: int = 1,
) -> str: ...
def bench_scenarios() -> str: ...
def bench_run(name: str, scale: float = 1.0) -> str: ...
def stat_docs() -> str: ...
def version() -> str: ...
