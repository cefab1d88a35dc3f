//! Graph passes, run as an explicit ordered pipeline with the verifier after each.
mod batchnorm;
mod canonical;
mod control;
mod dce;
mod deconv;
mod einsum;
mod infer;
mod winograd;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Result;
use crate::ir::{verify, DType, Graph, Node, Tensor, TensorType, ValueId};
use crate::ops::{lookup, Attr, Attrs, OpCx, Operator};

pub use infer::infer_and_fold;

/// One pass: a name for messages and the function.
pub type Pass = (&'static str, fn(&mut Graph) -> Result<()>);

/// The default pipeline: shape inference with constant folding, BatchNorm folding, transposed
/// convolutions as a product and a fold (`deconv`), einsums that are matrix products as
/// `MatMul`s (`einsum`), and dead-code elimination.
pub const PIPELINE: &[Pass] = &[
    ("infer", infer_and_fold),
    ("canonical", canonical::run),
    ("fold_batchnorm", batchnorm::run),
    ("deconv", deconv::run),
    ("einsum", einsum::run),
    ("dce", dce::run),
];

/// [`PIPELINE`], with 3x3 convolutions rewritten as Winograd F(m x m, 3x3) (`winograd`, before
/// `dce`) where `winograd` is on. The rewrite takes the convolution from the libraries (only
/// `c` runs its node): `driver::pipeline` turns it on where the generated code comes first
/// for convolutions.
pub fn pipeline_for(winograd: bool) -> Vec<Pass> {
    with_winograd(winograd.then_some(winograd::run))
}

/// The pipeline of a model served over a range of sizes (`Build::dim_range`): [`PIPELINE`], with
/// Winograd convolutions where `winograd`, chosen by their channels alone (one choice at every
/// size of the range).
pub fn pipeline_ranged(winograd: bool) -> Vec<Pass> {
    with_winograd(winograd.then_some(winograd::run_any_size))
}

/// [`PIPELINE`] with the Winograd rewrite `pass` before `dce`, if any.
fn with_winograd(pass: Option<fn(&mut Graph) -> Result<()>>) -> Vec<Pass> {
    let mut passes = PIPELINE.to_vec();
    if let Some(pass) = pass {
        let at = passes.len() - 1;
        passes.insert(at, ("winograd", pass));
    }
    passes
}

/// Runs `passes` in order, verifying the graph after each.
pub fn run(g: &mut Graph, passes: &[Pass]) -> Result<()> {
    verify(g, "import")?;
    for (name, pass) in passes {
        pass(g)?;
        verify(g, name)?;
    }
    Ok(())
}

/// Replaces every node `rewrite` gives nodes for by those nodes, in its place (the graph stays
/// in topological order), then types the new values. Nothing changes where it gives none.
pub(crate) fn replace_nodes(
    g: &mut Graph,
    mut rewrite: impl FnMut(&mut Graph, usize) -> Option<Vec<Node>>,
) -> Result<()> {
    let mut replaced: BTreeMap<usize, Vec<Node>> = BTreeMap::new();
    for ni in 0..g.nodes.len() {
        if let Some(nodes) = rewrite(g, ni) {
            replaced.insert(ni, nodes);
        }
    }
    if replaced.is_empty() {
        return Ok(());
    }
    let old = std::mem::take(&mut g.nodes);
    for (i, n) in old.into_iter().enumerate() {
        match replaced.remove(&i) {
            Some(nodes) => g.nodes.extend(nodes),
            None => g.nodes.push(n),
        }
    }
    infer_and_fold(g)
}

/// Drops the nodes marked in `remove` (indexed like `g.nodes`), keeping the others' order.
pub(crate) fn drop_nodes(g: &mut Graph, remove: &[bool]) {
    let mut i = 0;
    g.nodes.retain(|_| {
        i += 1;
        !remove[i - 1]
    });
}

/// An operator of `op_type` (opset 18) with `attrs`, taking `n_inputs` inputs, for a pass's
/// new nodes.
pub(crate) fn op(
    op_type: &str,
    attrs: Vec<(&str, Attr)>,
    n_inputs: usize,
) -> Option<Arc<dyn Operator>> {
    let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    lookup(op_type)?(&OpCx {
        attrs: &attrs,
        opset: 18,
        n_inputs,
        n_outputs: 1,
    })
    .ok()
}

/// A convolution-like node of f32 with constant weights (and bias), as the rewrites of
/// convolutions (`deconv`, `winograd`) take it.
pub(crate) struct ConstConv {
    /// The node's name.
    pub name: String,
    /// The input and its type.
    pub x: ValueId,
    pub xt: TensorType,
    /// The weights and the bias.
    pub w: Arc<Tensor>,
    pub bias: Option<Arc<Tensor>>,
    /// The output.
    pub y: ValueId,
}

/// Node `ni` as a [`ConstConv`] when it is an `op_type` node with one output, an f32 input of
/// known type and constant f32 weights and bias; `None` otherwise.
pub(crate) fn const_conv(g: &Graph, ni: usize, op_type: &str) -> Option<ConstConv> {
    let node = &g.nodes[ni];
    if node.op.op_type() != op_type || node.outputs.len() != 1 {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let w = g.konst(node.inputs.get(1).copied().flatten()?)?.clone();
    let bias = match node.inputs.get(2).copied().flatten() {
        Some(b) => Some(g.konst(b)?.clone()),
        None => None,
    };
    let xt = g.value(x).ty.clone()?;
    if xt.dtype != DType::F32 || w.ty.dtype != DType::F32 {
        return None;
    }
    Some(ConstConv {
        name: node.name.clone(),
        x,
        xt,
        w,
        bias,
        y: node.outputs[0],
    })
}
