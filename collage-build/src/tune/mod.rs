//! Tuning: measured kernel latencies and the schedule parameters that achieved them, the harness
//! that measures them ([`measure`]) and the prices placement reads from them ([`price`]).
//!
//! A normal build only reads the [`CostCache`], a TOML file checked in next to the model; `collage
//! tune` measures kernels and writes it. Every entry is keyed by the [`TargetFingerprint`] of the
//! machine that measured it, so a cache tuned elsewhere is reported as foreign
//! ([`CacheError::ForeignTarget`]) instead of steering placement with numbers from another machine.
//! The file format is documented in [`cache`].

pub mod cache;
pub mod eto;
pub mod measure;
pub mod plans;
pub mod price;

pub use cache::{
    tune_command, CacheError, CostCache, Entry, EntryProblem, Key, TargetFingerprint,
    FORMAT_VERSION, TUNER_VERSION,
};
