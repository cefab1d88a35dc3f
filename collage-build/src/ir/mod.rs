//! The intermediate representation: a typed DAG of operators over statically shaped tensors.
//!
//! The value types ([`Tensor`], [`TensorType`], ...) live in [`crate::tensor`], below the
//! operators that nodes hold; they are re-exported here with the graph.
mod graph;
mod verify;

pub use crate::tensor::{strides, DType, Limits, Tensor, TensorType};
pub use graph::{Graph, Node, NodeId, ValueData, ValueId};
pub use verify::verify;
