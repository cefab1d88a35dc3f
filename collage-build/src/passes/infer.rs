//! Shape inference and constant folding, in one walk: shapes often depend on folded values
//! (`Shape -> Gather -> Concat -> Reshape`).
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::error::{Error, OpError, Result};
use crate::ir::control::ControlFlow;
use crate::ir::{DType, Graph, Node, Tensor, TensorType, ValueId};
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
    let mut queue: VecDeque<(Node, Option<DType>)> = std::mem::take(&mut g.nodes)
        .into_iter()
        .map(|n| (n, None))
        .collect();
    let mut kept = Vec::with_capacity(queue.len());
    let mut produced_by: std::collections::HashMap<ValueId, usize> = Default::default();
    let mut halves = Halves::default();
    while let Some((mut node, low)) = queue.pop_front() {
        // Control flow becomes the nodes it runs (its inputs are inferred by now).
        if let Some(cf) = node.op.as_any().downcast_ref::<ControlFlow>() {
            let nodes = super::control::expand(g, &node, cf).map_err(|e| match e {
                // A trip count or condition that must be known at build time: name the graph
                // inputs it depends on (as for an operator's constant inputs below).
                Error::Node {
                    node: name,
                    op,
                    error: OpError::NeedsConstant { index, what, .. },
                } => Error::Node {
                    node: name,
                    op,
                    error: OpError::NeedsConstant {
                        index,
                        what,
                        graph_inputs: node
                            .inputs
                            .get(index)
                            .copied()
                            .flatten()
                            .map(|v| depends_on(g, &kept, &produced_by, v))
                            .unwrap_or_default(),
                    },
                },
                e => e,
            })?;
            for n in nodes.into_iter().rev() {
                queue.push_front((n, None));
            }
            continue;
        }
        // A node reading a 16-bit float computes on f32 instead: its inputs are cast first (the
        // casts run next, then the node again, remembering the type to cast its outputs back to).
        if low.is_none() {
            if let Some((low, casts)) = halves.widen_inputs(g, &mut node) {
                queue.push_front((node, Some(low)));
                for c in casts.into_iter().rev() {
                    queue.push_front((c, None));
                }
                continue;
            }
        }
        let (node_name, op_type) = (node.name.clone(), node.op.op_type().to_string());
        let err = |error: OpError| Error::Node {
            node: node_name.clone(),
            op: op_type.clone(),
            error,
        };
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
        if let Some(low) = low {
            // Outputs computed as f32 where the model has the 16-bit type: cast back.
            for c in halves
                .narrow_outputs(g, &mut node, &outs, low)
                .into_iter()
                .rev()
            {
                queue.push_front((c, None));
            }
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
                    uniform: false,
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

/// The narrow floats (`f16`, `bf16`, the float8 types, FLOAT4E2M1, FLOAT8E8M0) are storage
/// types: every operator but the conversions computes on f32, between casts this pass inserts
/// (as ONNX Runtime's CPU kernels and numpy's float16 arithmetic do: each operator's result is
/// rounded to the narrow type once).
#[derive(Default)]
struct Halves {
    /// The f32 version of each narrow float value read so far.
    widened: HashMap<ValueId, ValueId>,
}

/// The operators that read and write the narrow floats themselves.
fn converts_halves(op_type: &str) -> bool {
    matches!(op_type, "Cast" | "CastLike" | "BitCast")
}

/// The inputs an operator reads in their own narrow float type rather than widened: the
/// quantized operands of `QuantizeLinear` (its zero point, whose type is the output's) and
/// `DequantizeLinear` (the quantized input and its zero point), which convert them themselves.
fn reads_narrow(op_type: &str, k: usize) -> bool {
    match op_type {
        "QuantizeLinear" => k == 2,
        "DequantizeLinear" => k == 0 || k == 2,
        _ => false,
    }
}

fn cast_node(name: String, input: ValueId, output: ValueId, to: DType) -> Node {
    let mut attrs = crate::ops::Attrs::default();
    attrs
        .0
        .insert("to".into(), crate::ops::Attr::Int(to.onnx_code() as i64));
    if to == DType::F8E8M0 {
        // To the nearest power of two, which gives each value of the type back its code (Cast's
        // default, up, takes 2^-127, an f32 subnormal, to 2^-126).
        attrs
            .0
            .insert("round_mode".into(), crate::ops::Attr::Str("nearest".into()));
    }
    let cx = crate::ops::OpCx {
        attrs: &attrs,
        opset: 21,
        n_inputs: 1,
        n_outputs: 1,
    };
    let op = crate::ops::lookup("Cast").expect("Cast is registered")(&cx)
        .expect("a Cast to a supported type constructs");
    Node {
        name,
        op,
        inputs: vec![Some(input)],
        outputs: vec![output],
    }
}

impl Halves {
    /// Replaces `node`'s 16-bit float inputs by f32 ones; returns the 16-bit type and the casts
    /// to run first, or `None` when the node reads no 16-bit float (or converts them itself).
    fn widen_inputs(&mut self, g: &mut Graph, node: &mut Node) -> Option<(DType, Vec<Node>)> {
        if converts_halves(node.op.op_type()) {
            return None;
        }
        let mut low = None;
        let mut casts = Vec::new();
        for k in 0..node.inputs.len() {
            let Some(v) = node.inputs[k] else { continue };
            let Some(d) = g.value(v).ty.as_ref().map(|t| t.dtype) else {
                continue;
            };
            if !d.is_narrow_float() || reads_narrow(node.op.op_type(), k) {
                continue;
            }
            low.get_or_insert(d);
            let wide = match self.widened.get(&v) {
                Some(&w) => w,
                None => {
                    let name = format!("{}.f32", g.value(v).name);
                    let w = match g.konst(v).cloned() {
                        Some(t) => g.add_const(
                            name,
                            Tensor::from_f64_as(DType::F32, &t.ty.shape, &t.to_f64()),
                        ),
                        None => {
                            let w = g.add_value(name, None);
                            casts.push(cast_node(
                                format!("{}.widen{k}", node.name),
                                v,
                                w,
                                DType::F32,
                            ));
                            w
                        }
                    };
                    self.widened.insert(v, w);
                    w
                }
            };
            node.inputs[k] = Some(wide);
        }
        low.map(|d| (d, casts))
    }

    /// Points `node`'s f32 outputs that the model has as `low` (declared so, or not declared)
    /// at new f32 values; returns the casts from those to the model's values.
    fn narrow_outputs(
        &mut self,
        g: &mut Graph,
        node: &mut Node,
        outs: &[TensorType],
        low: DType,
    ) -> Vec<Node> {
        let mut casts = Vec::new();
        for (k, t) in outs.iter().enumerate() {
            let Some(&o) = node.outputs.get(k) else { break };
            let declared = g.value(o).ty.as_ref().map(|t| t.dtype);
            if t.dtype != DType::F32 || declared.is_some_and(|d| d != low) {
                continue;
            }
            let name = format!("{}.f32", g.value(o).name);
            let wide = g.add_value(name, None);
            node.outputs[k] = wide;
            // The model's value now holds the cast's result (its declared type is checked
            // there).
            g.value_mut(o).ty = None;
            casts.push(cast_node(format!("{}.narrow{k}", node.name), wide, o, low));
        }
        casts
    }
}
