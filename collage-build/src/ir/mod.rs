//! The intermediate representation: a typed DAG of operators over statically shaped tensors.
//!
//! The value types ([`Tensor`], [`TensorType`], ...) live in [`crate::tensor`], below the
//! operators that nodes hold; they are re-exported here with the graph.
pub mod control;
mod graph;
mod verify;

pub use crate::tensor::{strides, DType, Limits, Tensor, TensorType};
pub use graph::{Graph, Node, NodeId, ValueData, ValueId};
pub use verify::verify;

/// A C-identifier-safe symbol for a name.
pub fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 'm');
    }
    s
}
