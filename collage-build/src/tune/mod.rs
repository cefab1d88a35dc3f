//! Tuning: measured kernel latencies and the schedule parameters that achieved them.
//!
//! A normal build only reads the [`CostCache`], a TOML file checked in next to the model; `collage
//! tune` measures kernels and writes it. Every entry is keyed by the [`TargetFingerprint`] of the
//! machine that measured it, so a cache tuned elsewhere is reported as foreign
//! ([`CacheError::ForeignTarget`]) instead of steering placement with numbers from another machine.
//! The file format is documented in [`cache`].

pub mod cache;

pub use cache::{
    tune_command, CacheError, CostCache, Entry, EntryProblem, Key, TargetFingerprint,
    FORMAT_VERSION, TUNER_VERSION,
};
