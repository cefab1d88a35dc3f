//! `collage-build`: the build-time compiler of Collage for Rust.
//!
//! Use it from `build.rs` through [`Build`]; the `collage` binary wraps the same library.
//! The pipeline: frontend ([`frontend`]) → IR passes ([`passes`]) → lowering to tensor expressions
//! ([`te`]) → fusion → arena planning ([`schedule`]) → C kernels and Rust glue ([`codegen`]);
//! [`driver`] runs it for a whole model (placement on the backends, tuning, running). The modules
//! are layers, each using only those below it (`docs/ARCHITECTURE.md`, `tests/layers.rs`).
#![warn(missing_docs)]

pub mod backend;
mod build;
pub mod codegen;
pub mod driver;
pub mod error;
pub mod frontend;
pub mod fusion;
pub mod ir;
pub mod native;
pub mod ops;
pub mod partition;
pub mod passes;
pub mod report;
pub mod schedule;
pub mod target;
pub mod te;
pub mod tensor;
pub mod toolchain;
pub mod tune;

pub use build::{symbol_for, write_sources, write_variant_sources, Build, Built, BuiltModel};
pub use codegen::Compiled;
pub use driver::compile_graph;
pub use error::{Error, OpError, Result};
