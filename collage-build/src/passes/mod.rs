//! Graph passes, run as an explicit ordered pipeline with the verifier after each.
mod batchnorm;
mod canonical;
mod control;
mod dce;
mod deconv;
mod einsum;
mod infer;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Result;
use crate::ir::{verify, Graph, Node};
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
