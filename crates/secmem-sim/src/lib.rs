//! secmem-sim: the engine and everything around a run.
//!
//! Reading order: [`config`] (what can be set) -> [`hierarchy`] (L1/L2/LLC) -> [`engine`]
//! (core model, drives a design on the secure controller) -> [`run`](mod@run) (trace in,
//! report out) -> [`report`] -> [`bench`](mod@bench).

pub mod bench;
pub mod config;
pub mod cow_workloads;
pub mod engine;
pub mod harness;
pub mod hierarchy;
pub mod interrupt;
pub mod io;
pub mod misses_in_flight;
pub mod os;
pub mod os_trace;
pub mod persist;
pub mod presets;
pub mod report;
pub mod run;
pub mod stat_docs;
pub mod translate;

pub use config::Config;
/// The design registry, for front ends that list designs and their drain schemes.
pub use secmem_schemes::designs;
pub use run::{run, run_to_dir, SimError, TraceInput};
