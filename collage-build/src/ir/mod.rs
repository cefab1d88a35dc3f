//! The intermediate representation: a typed DAG of operators over statically shaped tensors.
mod graph;
mod tensor;
mod types;
mod verify;

pub use graph::{Graph, Node, NodeId, ValueData, ValueId};
pub use tensor::Tensor;
pub use types::{strides, DType, Limits, TensorType};
pub use verify::verify;
