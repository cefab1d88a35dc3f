//! Expansion of control flow during shape inference ([`crate::ir::control`]): the graph stays a
//! static DAG. An `If` whose condition is a build-time constant becomes the nodes of its taken
//! branch (the other branch is never imported, so it may be invalid for these shapes, as in
//! expanded functions that branch on a rank); an `If` with a run-time condition computes both
//! branches and selects with `Where` (their outputs must have one type). A `Scan` is unrolled
//! over its sequence length: per step a `Gather` of each scan input, a copy of the body, and at
//! the end `Unsqueeze` + `Concat` of each scan output (an opset-8 `Scan`, with a batch axis,
//! becomes one such `Scan` per batch entry). A `Loop` is unrolled one iteration at a
//! time: each step imports a copy of the body and leaves a continuation (the same `Loop`, one
//! iteration on) to be expanded after the step's nodes are inferred, so that the condition the
//! body computes is known (folded) before the next step is taken; its trip count and condition
//! must be build-time constants. A `FlexAttention` with modifier graphs becomes its scores, the
//! `score_mod` body, `Softmax`, the `prob_mod` body and the weighted sum of values
//! ([`ops::seq::FlexPart`]).
use crate::error::{OpError, Result};
use crate::frontend::onnx::import_body;
use crate::ir::control::ControlFlow;
use crate::ir::{Graph, Node, Tensor, ValueId};
use crate::ops::seq::{FlexAttention, FlexPart};
use crate::ops::{self, Attr, Attrs, OpCx};

/// Most nodes one `Scan` may unroll to (steps times body nodes).
const MAX_UNROLLED_NODES: usize = 100_000;

/// The internal attribute of the per-batch `Scan`s an opset-8 `Scan` becomes: they have the
/// opset-9 form (no batch axis, no `sequence_lens`) whatever the model's opset.
const SCAN_PER_BATCH: &str = "__collage_scan_per_batch";

/// Most iterations a `Loop` is unrolled for.
const MAX_LOOP_ITERATIONS: i64 = 10_000;

/// The internal attributes of a `Loop` continuation: the iterations done so far, and how many
/// of its inputs (after the carried values) are the scan outputs of those iterations.
const LOOP_DONE: &str = "__collage_iterations_done";
const LOOP_PARTS: &str = "__collage_scan_parts";

/// The nodes that replace `node` (to be inferred in order, before the nodes after it).
pub fn expand(g: &mut Graph, node: &Node, cf: &ControlFlow) -> Result<Vec<Node>> {
    match cf.op_type {
        "If" => expand_if(g, node, cf),
        "Scan" => expand_scan(g, node, cf),
        "Loop" => expand_loop(g, node, cf),
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

/// Appends to `out` the nodes that stack `parts` along a new axis into `to`: each part
/// `Unsqueeze`d at `axes` (a constant holding `axis`) into a value `{prefix}/{step}{i}` by a node
/// `{prefix}/unsqueeze{i}`, then `{prefix}/concat` along `axis`.
fn stack(
    g: &mut Graph,
    out: &mut Vec<Node>,
    prefix: &str,
    step: &str,
    parts: Vec<ValueId>,
    (axes, axis): (ValueId, i64),
    to: ValueId,
) {
    let mut stacked = Vec::with_capacity(parts.len());
    for (i, p) in parts.into_iter().enumerate() {
        let u = g.add_value(format!("{prefix}/{step}{i}"), None);
        out.push(make(
            format!("{prefix}/unsqueeze{i}"),
            "Unsqueeze",
            vec![],
            vec![p, axes],
            vec![u],
        ));
        stacked.push(u);
    }
    out.push(make(
        format!("{prefix}/concat"),
        "Concat",
        vec![("axis", Attr::Int(axis))],
        stacked,
        vec![to],
    ));
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
    if cf.opset < 9 && cf.attrs.int(SCAN_PER_BATCH, 0).map_err(err)? == 0 {
        return expand_scan8(g, node, cf);
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
        if ty.rank() == 0 {
            return Err(err(OpError::expected(
                format!("scan input {j} of rank >= 1 (it is scanned along an axis)"),
                ty,
            )));
        }
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
        let prefix = format!("{}/out{k}", node.name);
        let to = node.outputs[n_state + k];
        stack(g, &mut out, &prefix, "t", parts, (axes_v, axis), to);
    }
    Ok(out)
}

/// A boolean or integer scalar known at build time (`None` when it is a run-time value).
fn const_scalar(
    g: &Graph,
    v: ValueId,
    what: &'static str,
    index: usize,
) -> std::result::Result<i64, OpError> {
    match g.konst(v) {
        Some(t) if t.numel() == 1 => Ok(t.get_i64(0)),
        Some(t) => Err(OpError::expected(
            format!("a {what} of one element"),
            t.ty.clone(),
        )),
        None => Err(OpError::NeedsConstant {
            index,
            what,
            graph_inputs: vec![],
        }),
    }
}

fn expand_loop(g: &mut Graph, node: &Node, cf: &ControlFlow) -> Result<Vec<Node>> {
    let err = |e: OpError| node.error(e);
    let done = cf.attrs.int(LOOP_DONE, 0).map_err(err)?;
    let n_in = node.inputs.len();
    if n_in < 2 {
        return Err(err(OpError::expected(
            "inputs M and cond (either may be empty)",
            n_in,
        )));
    }
    // Inputs: M, cond, the loop-carried values, then (in a continuation) the scan outputs of
    // the iterations done, iteration by iteration.
    let body = cf.body("body").map_err(err)?;
    let parts_len = usize::try_from(cf.attrs.int(LOOP_PARTS, 0).map_err(err)?).unwrap_or(0);
    let n_carried = n_in.saturating_sub(2 + parts_len);
    if node.outputs.len() < n_carried {
        return Err(err(OpError::expected(
            format!("at least {n_carried} outputs (the loop-carried values)"),
            node.outputs.len(),
        )));
    }
    let k_scan = node.outputs.len() - n_carried;
    let carried: Vec<ValueId> = node.inputs[2..2 + n_carried]
        .iter()
        .map(|v| v.ok_or_else(|| err(OpError::expected("loop-carried inputs", "an empty one"))))
        .collect::<Result<_>>()?;
    let parts: Vec<ValueId> = node.inputs[2 + n_carried..]
        .iter()
        .flatten()
        .copied()
        .collect();
    let trip = match node.inputs[0] {
        Some(m) => Some(const_scalar(g, m, "Loop trip count M", 0).map_err(err)?),
        None => None,
    };
    let go = match node.inputs[1] {
        Some(c) => const_scalar(g, c, "Loop condition", 1).map_err(err)? != 0,
        None => true,
    };
    if trip.is_none() && node.inputs[1].is_none() {
        return Err(err(OpError::expected(
            "a trip count M or a condition (a loop without either never ends)",
            "neither",
        )));
    }
    let mut out = Vec::new();
    if !go || trip.is_some_and(|m| done >= m) {
        // The loop ends: its carried values and the scan outputs stacked along a new axis 0.
        for (i, (&from, &to)) in carried.iter().zip(&node.outputs).enumerate() {
            out.push(identity(format!("{}/final{i}", node.name), from, to));
        }
        if let Some(iterations) = parts.len().checked_div(k_scan) {
            if iterations == 0 {
                return Err(err(OpError::Unsupported(
                    "a Loop with scan outputs that runs no iteration (their shape is unknown)"
                        .into(),
                )));
            }
            let axes = g.add_const(
                format!("{}/scan_axes", node.name),
                Tensor::from_i64(&[1], &[0]),
            );
            for k in 0..k_scan {
                let of_k = (0..iterations).map(|t| parts[t * k_scan + k]).collect();
                let prefix = format!("{}/scan{k}", node.name);
                let to = node.outputs[n_carried + k];
                stack(g, &mut out, &prefix, "t", of_k, (axes, 0), to);
            }
        }
        return Ok(out);
    }
    if done >= MAX_LOOP_ITERATIONS
        || (done as usize).saturating_mul(body.len() / 16 + 1) > MAX_UNROLLED_NODES
    {
        return Err(err(OpError::Unsupported(format!(
            "a Loop of more than {done} iterations over a body of {} bytes: it is unrolled at \
             build time (at most {MAX_LOOP_ITERATIONS} iterations, {MAX_UNROLLED_NODES} nodes)",
            body.len()
        ))));
    }
    // One iteration: the body on (iteration number, condition, carried values).
    let prefix = format!("{}/i{done}/", node.name);
    let iter = g.add_const(format!("{prefix}iteration"), Tensor::from_i64(&[], &[done]));
    let cond = g.add_const(
        format!("{prefix}cond"),
        Tensor::from_bytes(
            crate::ir::TensorType::new(crate::ir::DType::Bool, vec![]),
            vec![1],
        )
        .expect("one byte is a bool scalar"),
    );
    let mut args = vec![iter, cond];
    args.extend(&carried);
    let (nodes, outs) = import_body(body, g, &args, cf, &prefix)?;
    if outs.len() != 1 + n_carried + k_scan {
        return Err(err(OpError::expected(
            format!(
                "a body with {} outputs (the condition, {n_carried} carried, {k_scan} scanned)",
                1 + n_carried + k_scan
            ),
            outs.len(),
        )));
    }
    out.extend(nodes);
    // The continuation: the same loop, one iteration on.
    let mut attrs = cf.attrs.clone();
    attrs.0.insert(LOOP_DONE.into(), Attr::Int(done + 1));
    attrs
        .0
        .insert(LOOP_PARTS.into(), Attr::Int((parts.len() + k_scan) as i64));
    let next = ControlFlow {
        op_type: cf.op_type,
        attrs,
        bodies: cf.bodies.clone(),
        opset: cf.opset,
        base: cf.base.clone(),
        scope: cf.scope.clone(),
    };
    let mut inputs = vec![node.inputs[0], Some(outs[0])];
    inputs.extend(outs[1..1 + n_carried].iter().map(|&v| Some(v)));
    inputs.extend(parts.iter().map(|&v| Some(v)));
    inputs.extend(outs[1 + n_carried..].iter().map(|&v| Some(v)));
    out.push(Node {
        name: node.name.clone(),
        op: std::sync::Arc::new(next),
        inputs,
        outputs: node.outputs.clone(),
    });
    Ok(out)
}

/// An opset-8 `Scan` (inputs `sequence_lens`, states `[batch, ...]`, scan inputs
/// `[batch, sequence, ...]`): one opset-9 `Scan` per batch entry on its slices, the outputs
/// stacked back along the batch axis. `sequence_lens`, when given, must be a constant equal to
/// the sequence length for every entry (the static unrolling runs every step).
fn expand_scan8(g: &mut Graph, node: &Node, cf: &ControlFlow) -> Result<Vec<Node>> {
    let err = |e: OpError| node.error(e);
    let inputs: Vec<ValueId> = node
        .inputs
        .iter()
        .skip(1)
        .map(|v| v.ok_or_else(|| err(OpError::expected("no omitted inputs", "an empty one"))))
        .collect::<Result<_>>()?;
    let batch = match inputs.first().and_then(|&v| g.value(v).ty.clone()) {
        Some(t) if t.rank() >= 1 && t.shape[0] >= 1 => t.shape[0],
        _ => {
            return Err(err(OpError::expected(
                "inputs of a known type with a (non-empty) batch axis",
                "none",
            )))
        }
    };
    let m = cf.attrs.int("num_scan_inputs", -1).map_err(err)?;
    let m = usize::try_from(m)
        .ok()
        .filter(|&m| m >= 1 && m <= inputs.len())
        .ok_or_else(|| {
            err(OpError::expected(
                format!("num_scan_inputs in [1, {}]", inputs.len()),
                m,
            ))
        })?;
    for &v in &inputs {
        match &g.value(v).ty {
            Some(t) if t.rank() >= 1 && t.shape[0] == batch => {}
            t => {
                return Err(err(OpError::expected(
                    format!("inputs with batch axis {batch}"),
                    format!("{t:?}"),
                )))
            }
        }
    }
    if let Some(lens) = node.inputs.first().copied().flatten() {
        let full = g
            .value(inputs[inputs.len() - m])
            .ty
            .as_ref()
            .map_or(0, |t| t.shape.get(1).copied().unwrap_or(0));
        match g.konst(lens) {
            Some(t) if (0..t.numel()).all(|i| t.get_i64(i) == full as i64) => {}
            _ => {
                return Err(err(OpError::Unsupported(format!(
                    "Scan (opset 8) with sequence_lens other than the constant full length {full}"
                ))))
            }
        }
    }
    let mut attrs = cf.attrs.clone();
    attrs.0.insert(SCAN_PER_BATCH.into(), Attr::Int(1));
    if let Some(d) = attrs.0.remove("directions") {
        attrs.0.insert("scan_input_directions".into(), d);
    }
    let mut out = Vec::new();
    let mut per_batch: Vec<Vec<ValueId>> = vec![Vec::with_capacity(batch); node.outputs.len()];
    for b in 0..batch {
        let idx = g.add_const(
            format!("{}/b{b}/index", node.name),
            Tensor::from_i64(&[], &[b as i64]),
        );
        let mut args = Vec::with_capacity(inputs.len());
        for (j, &x) in inputs.iter().enumerate() {
            let slice = g.add_value(format!("{}/b{b}/in{j}", node.name), None);
            out.push(make(
                format!("{}/b{b}/slice{j}", node.name),
                "Gather",
                vec![("axis", Attr::Int(0))],
                vec![x, idx],
                vec![slice],
            ));
            args.push(Some(slice));
        }
        let outs: Vec<ValueId> = (0..node.outputs.len())
            .map(|k| g.add_value(format!("{}/b{b}/out{k}", node.name), None))
            .collect();
        for (k, &o) in outs.iter().enumerate() {
            per_batch[k].push(o);
        }
        out.push(Node {
            name: format!("{}/b{b}", node.name),
            op: std::sync::Arc::new(ControlFlow {
                op_type: cf.op_type,
                attrs: attrs.clone(),
                bodies: cf.bodies.clone(),
                opset: cf.opset,
                base: cf.base.clone(),
                scope: cf.scope.clone(),
            }),
            inputs: args,
            outputs: outs,
        });
    }
    let axes = g.add_const(
        format!("{}/batch_axes", node.name),
        Tensor::from_i64(&[1], &[0]),
    );
    for (k, parts) in per_batch.into_iter().enumerate() {
        let prefix = format!("{}/out{k}", node.name);
        stack(g, &mut out, &prefix, "b", parts, (axes, 0), node.outputs[k]);
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
