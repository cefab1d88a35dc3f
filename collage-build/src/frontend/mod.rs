//! Frontends: ONNX files and the `model!` DSL. Both produce an [`crate::ir::Graph`].
pub mod dsl;
pub mod onnx;
