//! Expansion of control flow during shape inference ([`crate::ir::control`]): the graph stays a
//! static DAG. An `If` whose condition is a build-time constant becomes the nodes of its taken
//! branch (the other branch is never imported, so it may be invalid for these shapes, as in
//! expanded functions that branch on a rank); an `If` with a run-time condition computes both
//! branches and selects with `Where` (their outputs must have one type). A `Scan` is unrolled
//! over its sequence length: per step a `Gather` of each scan input, a copy of the body, and at
//! the end `Unsqueeze` + `Concat` of each scan output. A `FlexAttention` with modifier graphs
//! becomes its scores, the `score_mod` body, `Softmax`, the `prob_mod` body and the weighted sum
//! of values ([`ops::seq::FlexPart`]).
use crate::error::{OpError, Result};
use crate::frontend::onnx::import_body;
use crate::ir::control::ControlFlow;
use crate::ir::{Graph, Node, Tensor, ValueId};
use crate::ops::seq::{FlexAttention, FlexPart};
use crate::ops::{self, Attr, Attrs, OpCx};

/// Most nodes one `Scan` may unroll to (steps times body nodes).
const MAX_UNROLLED_NODES: usize = 100_000;

/// The nodes that replace `node` (to be inferred in order, before the nodes after it).
pub fn expand(g: &mut Graph, node: &Node, cf: &ControlFlow) -> Result<Vec<Node>> {
    match cf.op_type {
        "If" => expand_if(g, node, cf),
        "Scan" => expand_scan(g, node, cf),
        "ai.onnx.preview:FlexAttention" => expand_flex(g, node, cf),
        other => Err(node.error(OpError::Unsupported(other.to_string()))),
    }
}

/// A node of a registered operator (at the current opset's semantics).
fn make(
    name: String,
    op_type: &str,
    attrs: Vec<(&str, Attr)>,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
) -> Node {
    let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    let cx = OpCx {
        attrs: &attrs,
        opset: 21,
        n_inputs: inputs.len(),
        n_outputs: outputs.len(),
    };
    let op = ops::lookup(op_type).expect("a registered operator")(&cx)
        .expect("well-formed attributes construct");
    Node {
        name,
        op,
        inputs: inputs.into_iter().map(Some).collect(),
        outputs,
    }
}

fn identity(name: String, from: ValueId, to: ValueId) -> Node {
    make(name, "Identity", vec![], vec![from], vec![to])
}

fn expand_if(g: &mut Graph, node: &Node, cf: &ControlFlow) -> Result<Vec<Node>> {
    let cond = node
        .inputs
        .first()
        .copied()
        .flatten()
        .ok_or_else(|| node.error(OpError::expected("a condition input", "none")))?;
    let mut out = Vec::new();
    let taken = match g.konst(cond) {
        Some(t) if t.numel() == 1 => Some(t.get_f64(0) != 0.0),
        Some(t) => {
            return Err(node.error(OpError::expected(
                "a condition of one element",
                t.ty.clone(),
            )))
        }
        None => None,
    };
    let mut branch = |which: &str| -> Result<Vec<ValueId>> {
        let (nodes, outs) = import_body(
            cf.body(which).map_err(|e| node.error(e))?,
            g,
            &[],
            cf,
            &format!("{}/{which}/", node.name),
        )?;
        if outs.len() != node.outputs.len() {
            return Err(node.error(OpError::expected(
                format!("{which} with {} outputs", node.outputs.len()),
                outs.len(),
            )));
        }
        out.extend(nodes);
        Ok(outs)
    };
    match taken {
        Some(t) => {
            let outs = branch(if t { "then_branch" } else { "else_branch" })?;
            for (k, (&from, &to)) in outs.iter().zip(&node.outputs).enumerate() {
                out.push(identity(format!("{}/out{k}", node.name), from, to));
            }
        }
        None => {
            let then = branch("then_branch")?;
            let other = branch("else_branch")?;
            for (k, to) in node.outputs.iter().enumerate() {
                out.push(make(
                    format!("{}/select{k}", node.name),
                    "Where",
                    vec![],
                    vec![cond, then[k], other[k]],
                    vec![*to],
                ));
            }
        }
    }
    Ok(out)
}

fn expand_scan(g: &mut Graph, node: &Node, cf: &ControlFlow) -> Result<Vec<Node>> {
    let err = |e: OpError| node.error(e);
    if cf.opset < 9 {
        return Err(err(OpError::Unsupported(
            "Scan before opset 9 (with a batch axis)".into(),
        )));
    }
    let inputs: Vec<ValueId> = node
        .inputs
        .iter()
        .map(|v| v.ok_or_else(|| err(OpError::expected("no omitted inputs", "an empty one"))))
        .collect::<Result<_>>()?;
    let m = cf.attrs.int("num_scan_inputs", -1).map_err(err)?;
    if m < 1 || m as usize > inputs.len() {
        return Err(err(OpError::expected(
            format!("num_scan_inputs in [1, {}]", inputs.len()),
            m,
        )));
    }
    let m = m as usize;
    let n_state = inputs.len() - m;
    if node.outputs.len() < n_state {
        return Err(err(OpError::expected(
            format!("at least {n_state} outputs (the states)"),
            node.outputs.len(),
        )));
    }
    let k_out = node.outputs.len() - n_state;
    let list = |name: &str, n: usize| -> Result<Vec<i64>> {
        let v = cf.attrs.ints(name).map_err(err)?.unwrap_or(vec![0; n]);
        if v.len() != n {
            return Err(err(OpError::expected(
                format!("{n} values in `{name}`"),
                v.len(),
            )));
        }
        Ok(v)
    };
    let (in_axes, in_dirs) = (
        list("scan_input_axes", m)?,
        list("scan_input_directions", m)?,
    );
    let (out_axes, out_dirs) = (
        list("scan_output_axes", k_out)?,
        list("scan_output_directions", k_out)?,
    );
    // The sequence length, and each scan input's axis.
    let mut len = None;
    let mut axes = Vec::with_capacity(m);
    for (j, &x) in inputs[n_state..].iter().enumerate() {
        let ty = g.value(x).ty.clone().ok_or_else(|| {
            err(OpError::expected(
                format!("scan input {j} of a known type"),
                "none",
            ))
        })?;
        let axis = ops::norm_axis(in_axes[j], ty.rank()).map_err(err)?;
        let l = ty.shape[axis];
        if len.is_some_and(|n| n != l) {
            return Err(err(OpError::expected(
                format!("scan inputs of one sequence length ({})", len.unwrap_or(0)),
                l,
            )));
        }
        len = Some(l);
        axes.push(axis as i64);
    }
    let len = len.unwrap_or(0);
    let body = cf.body("body").map_err(err)?;
    if len == 0 {
        return Err(err(OpError::expected("a sequence length of at least 1", 0)));
    }
    // A rough bound: the body's encoding is at least a few bytes per node.
    if len.saturating_mul(body.len() / 16 + 1) > MAX_UNROLLED_NODES {
        return Err(err(OpError::Unsupported(format!(
            "a Scan of {len} steps over a body of {} bytes: it is unrolled at build time, and \
             that is over {MAX_UNROLLED_NODES} nodes",
            body.len()
        ))));
    }
    let mut out = Vec::new();
    let mut state: Vec<ValueId> = inputs[..n_state].to_vec();
    let mut scanned: Vec<Vec<ValueId>> = vec![Vec::with_capacity(len); k_out];
    for t in 0..len {
        let mut args = state.clone();
        for (j, &x) in inputs[n_state..].iter().enumerate() {
            let at = if in_dirs[j] == 1 { len - 1 - t } else { t };
            let idx = g.add_const(
                format!("{}/t{t}/index{j}", node.name),
                Tensor::from_i64(&[], &[at as i64]),
            );
            let slice = g.add_value(format!("{}/t{t}/in{j}", node.name), None);
            out.push(make(
                format!("{}/t{t}/slice{j}", node.name),
                "Gather",
                vec![("axis", Attr::Int(axes[j]))],
                vec![x, idx],
                vec![slice],
            ));
            args.push(slice);
        }
        let (nodes, outs) = import_body(body, g, &args, cf, &format!("{}/t{t}/", node.name))?;
        if outs.len() != node.outputs.len() {
            return Err(err(OpError::expected(
                format!("a body with {} outputs", node.outputs.len()),
                outs.len(),
            )));
        }
        out.extend(nodes);
        state = outs[..n_state].to_vec();
        for (k, s) in scanned.iter_mut().enumerate() {
            s.push(outs[n_state + k]);
        }
    }
    for (i, (&from, &to)) in state.iter().zip(&node.outputs).enumerate() {
        out.push(identity(format!("{}/state{i}", node.name), from, to));
    }
    for (k, mut parts) in scanned.into_iter().enumerate() {
        if out_dirs[k] == 1 {
            parts.reverse();
        }
        let axis = out_axes[k];
        let axes_v = g.add_const(
            format!("{}/out{k}/axes", node.name),
            Tensor::from_i64(&[1], &[axis]),
        );
        let mut stacked = Vec::with_capacity(parts.len());
        for (t, p) in parts.into_iter().enumerate() {
            let u = g.add_value(format!("{}/out{k}/t{t}", node.name), None);
            out.push(make(
                format!("{}/out{k}/unsqueeze{t}", node.name),
                "Unsqueeze",
                vec![],
                vec![p, axes_v],
                vec![u],
            ));
            stacked.push(u);
        }
        out.push(make(
            format!("{}/out{k}/concat", node.name),
            "Concat",
            vec![("axis", Attr::Int(axis))],
            stacked,
            vec![node.outputs[n_state + k]],
        ));
    }
    Ok(out)
}

fn expand_flex(g: &mut Graph, node: &Node, cf: &ControlFlow) -> Result<Vec<Node>> {
    let err = |e: OpError| node.error(e);
    let inputs: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
    let (&[q, k, v], &[y]) = (inputs.as_slice(), node.outputs.as_slice()) else {
        return Err(err(OpError::expected(
            "3 inputs (Q, K, V) and 1 output",
            format!("{} inputs, {} outputs", inputs.len(), node.outputs.len()),
        )));
    };
    if let Some(other) = cf
        .bodies
        .keys()
        .find(|n| !matches!(n.as_str(), "score_mod" | "prob_mod"))
    {
        return Err(err(OpError::Unsupported(format!(
            "FlexAttention graph attribute `{other}`"
        ))));
    }
    let part = |p: FlexPart| -> Result<std::sync::Arc<dyn ops::Operator>> {
        Ok(std::sync::Arc::new(
            FlexAttention::new(p, &cf.attrs).map_err(err)?,
        ))
    };
    let mut out = Vec::new();
    // The scores are declared in the softmax precision (f32 for 16-bit inputs), so that the
    // 16-bit handling of inference does not round them, nor what the modifiers and the softmax
    // make of them, to the inputs' type.
    let scores_op = part(FlexPart::Scores)?;
    let wide = |v: ValueId| {
        g.value(v).ty.clone().map(|mut t| {
            if t.dtype.is_narrow_float() {
                t.dtype = crate::ir::DType::F32;
            }
            t
        })
    };
    let scores_ty = scores_op
        .infer(&ops::InferCx {
            inputs: &[wide(q), wide(k)],
            consts: &[None, None],
        })
        .ok()
        .and_then(|t| t.into_iter().next());
    let compute = scores_ty.as_ref().map(|t| t.dtype);
    let scores = g.add_value(format!("{}/scores", node.name), scores_ty);
    out.push(Node {
        name: format!("{}/scores", node.name),
        op: scores_op,
        inputs: vec![Some(q), Some(k)],
        outputs: vec![scores],
    });
    // A modifier: its body applied to `x`, its result converted to the softmax precision (as
    // the reference does; a body of 16-bit types computes in them).
    let modify = |g: &mut Graph, out: &mut Vec<Node>, which: &str, x: ValueId| {
        let Some(body) = cf.bodies.get(which) else {
            return Ok(x);
        };
        let (nodes, outs) = import_body(body, g, &[x], cf, &format!("{}/{which}/", node.name))?;
        let &[r] = outs.as_slice() else {
            return Err(err(OpError::expected(
                format!("{which} with 1 output"),
                outs.len(),
            )));
        };
        out.extend(nodes);
        let Some(d) = compute else { return Ok(r) };
        let c = g.add_value(format!("{}/{which}/cast", node.name), None);
        out.push(make(
            format!("{}/{which}/cast", node.name),
            "Cast",
            vec![("to", Attr::Int(d.onnx_code() as i64))],
            vec![r],
            vec![c],
        ));
        Ok(c)
    };
    let x = modify(g, &mut out, "score_mod", scores)?;
    let probs = g.add_value(format!("{}/probs", node.name), None);
    out.push(make(
        format!("{}/softmax", node.name),
        "Softmax",
        vec![("axis", Attr::Int(-1))],
        vec![x],
        vec![probs],
    ));
    let p = modify(g, &mut out, "prob_mod", probs)?;
    out.push(Node {
        name: format!("{}/values", node.name),
        op: part(FlexPart::Values)?,
        inputs: vec![Some(p), Some(v), Some(q)],
        outputs: vec![y],
    });
    Ok(out)
}
