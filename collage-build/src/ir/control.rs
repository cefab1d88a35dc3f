//! Control flow (`If`, `Loop`, `Scan`): operators whose bodies are graphs. They never reach
//! lowering: shape inference (`passes/infer.rs`) expands them in place — an `If` whose condition
//! is known at build time becomes its branch, one known only at run time both branches and a
//! `Where`; a `Scan` is unrolled over its (static) sequence length, a `Loop` over its build-time
//! trip count and conditions. `ai.onnx.preview:FlexAttention` with modifier graphs is imported
//! so too, and expanded into its parts around the bodies.
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::error::OpError;
use crate::ops::{Attrs, InferCx, LowerCx, OpResult, Operator};
use crate::te::Src;
use crate::tensor::TensorType;

/// An `If`, `Loop` or `Scan` node's operator: its attributes and its bodies, each an encoded ONNX
/// `GraphProto` (the frontend imports a body when inference expands the node).
pub struct ControlFlow {
    /// `"If"`, `"Loop"`, `"Scan"` or `"ai.onnx.preview:FlexAttention"`.
    pub op_type: &'static str,
    /// The non-graph attributes.
    pub attrs: Attrs,
    /// The graph attributes by name (`then_branch`, `else_branch`, `body`, `score_mod`,
    /// `prob_mod`), encoded.
    pub bodies: BTreeMap<String, Arc<Vec<u8>>>,
    /// The opset of the default domain, for the bodies' operators.
    pub opset: i64,
    /// The model's folder, where the bodies' external data lie.
    pub base: std::path::PathBuf,
    /// The values visible where the node is, by ONNX name: what the bodies' free names resolve
    /// to (a body nested in a body sees the enclosing body's values).
    pub scope: std::collections::HashMap<String, crate::ir::ValueId>,
}

impl ControlFlow {
    /// The body named `name`, or an error naming the missing attribute.
    pub fn body(&self, name: &str) -> OpResult<&[u8]> {
        self.bodies
            .get(name)
            .map(|b| b.as_slice())
            .ok_or_else(|| OpError::expected(format!("graph attribute `{name}`"), "none"))
    }
}

impl fmt::Debug for ControlFlow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?} bodies", self.op_type, self.attrs)?;
        for (k, b) in &self.bodies {
            write!(f, " {k}: {} bytes", b.len())?;
        }
        Ok(())
    }
}

impl Operator for ControlFlow {
    fn op_type(&self) -> &'static str {
        self.op_type
    }

    fn infer(&self, _cx: &InferCx) -> OpResult<Vec<TensorType>> {
        Err(OpError::Unsupported(format!(
            "{} outside shape inference (inference expands it)",
            self.op_type
        )))
    }

    fn lower(&self, _cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        Err(OpError::Unsupported(format!(
            "{} outside shape inference (inference expands it)",
            self.op_type
        )))
    }
}
