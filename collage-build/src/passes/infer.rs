//! Shape inference and constant folding, in one walk: shapes often depend on folded values
//! (`Shape -> Gather -> Concat -> Reshape`).
use std::collections::HashSet;
use std::sync::Arc;

use crate::error::{Error, OpError, Result};
use crate::ir::{Graph, Tensor, ValueId};
use crate::ops::{InferCx, LowerCx};
use crate::te::eval_stages;

/// Largest constant (in elements) the folder computes at compile time.
const FOLD_LIMIT: usize = 1 << 24;

/// Infers every node's output types and folds nodes whose inputs are all constants; folded nodes are
/// removed (their outputs become constants).
///
/// Every graph input, constant and inferred output is checked against the graph's [`crate::ir::Limits`]
/// (`crate::ir::Limits`) before anything computes with its size: a model whose tensors do not fit
/// is an error naming the value (and the node and op that computed it), never a wrapped size.
pub fn infer_and_fold(g: &mut Graph) -> Result<()> {
    let limits = g.limits;
    for v in &g.values {
        let ty = v.konst.as_ref().map(|k| &k.ty).or(v.ty.as_ref());
        if let Some(ty) = ty {
            limits.check(ty).map_err(|e| Error::Model {
                model: g.name.clone(),
                detail: format!("value `{}`: {e}", v.name),
            })?;
        }
    }
    let nodes = std::mem::take(&mut g.nodes);
    let mut kept = Vec::with_capacity(nodes.len());
    let mut produced_by: std::collections::HashMap<ValueId, usize> = Default::default();
    for node in nodes {
        let err = |error: OpError| node.error(error);
        let (inputs, consts) = node.input_facts(g);
        let cx = InferCx {
            inputs: &inputs,
            consts: &consts,
        };
        let outs = match node.op.infer(&cx) {
            Ok(o) => o,
            Err(OpError::NeedsConstant { index, what, .. }) => {
                let graph_inputs = node
                    .inputs
                    .get(index)
                    .copied()
                    .flatten()
                    .map(|v| depends_on(g, &kept, &produced_by, v))
                    .unwrap_or_default();
                return Err(err(OpError::NeedsConstant {
                    index,
                    what,
                    graph_inputs,
                }));
            }
            Err(e) => return Err(err(e)),
        };
        if outs.len() < node.outputs.iter().filter(|_| true).count()
            && outs.len() != node.outputs.len()
        {
            return Err(err(OpError::expected(
                format!("at most {} outputs", outs.len()),
                node.outputs.len(),
            )));
        }
        for (k, (o, t)) in node.outputs.iter().zip(&outs).enumerate() {
            limits.check(t).map_err(|e| {
                err(OpError::expected(
                    format!(
                        "output {k} (`{}`) of a size the target holds",
                        g.value(*o).name
                    ),
                    e,
                ))
            })?;
            g.value_mut(*o).ty = Some(t.clone());
        }
        let folded = if let Some(vals) = node.op.fold_from_types(&cx) {
            Some(vals)
        } else {
            let all_const = node.inputs.iter().flatten().all(|v| g.konst(*v).is_some());
            let small = outs.iter().all(|t| t.numel() <= FOLD_LIMIT);
            if all_const && small {
                let mut lcx = LowerCx {
                    inputs: &inputs,
                    consts: &consts,
                    outputs: &outs,
                    stages: vec![],
                    name: node.name.clone(),
                    direct: false,
                };
                let srcs = node.op.lower(&mut lcx).map_err(err)?;
                let args: Vec<Option<&Tensor>> = consts.iter().map(|c| c.as_deref()).collect();
                Some(eval_stages(&lcx.stages, &args, &srcs))
            } else {
                None
            }
        };
        match folded {
            Some(vals) => {
                for (o, t) in node.outputs.iter().zip(vals) {
                    g.value_mut(*o).konst = Some(Arc::new(t));
                }
            }
            None => {
                for o in &node.outputs {
                    produced_by.insert(*o, kept.len());
                }
                kept.push(node);
            }
        }
    }
    g.nodes = kept;
    Ok(())
}

/// The graph inputs `v` depends on, for "must be a constant" messages.
fn depends_on(
    g: &Graph,
    nodes: &[crate::ir::Node],
    produced_by: &std::collections::HashMap<ValueId, usize>,
    v: ValueId,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        if g.inputs.contains(&v) {
            out.push(g.value(v).name.clone());
        } else if let Some(&n) = produced_by.get(&v) {
            stack.extend(nodes[n].inputs.iter().flatten().copied());
        }
    }
    out.sort();
    out
}
