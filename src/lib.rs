//! Collage for Rust: an ahead-of-time deep-learning compiler.
//!
//! Applications depend on this facade crate and add `collage-build` as a build-dependency. The build
//! script compiles models (ONNX files or `model!` DSL blocks) into C kernels plus Rust glue; the
//! [`model!`] macro binds those build-time artifacts to a statically typed model type.
//!
//! ```ignore
//! collage::model!(pub Mnist = "models/mnist.onnx");
//! let mut m = Mnist::new();
//! let y: &[[f32; 10]; 1] = m.run(&[[[[0.0f32; 28]; 28]; 1]; 1]);
//! ```
#![no_std]
#![warn(missing_docs)]

pub use collage_macros::model;
/// The runtime the generated code links against: arena, executors, C ABI types.
pub use collage_runtime as runtime;
