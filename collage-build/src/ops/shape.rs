//! Operators of the `shape` family: constants, shape queries and data-movement operators that
//! only rearrange elements (reshape, transpose, concat, expand, ...).
use std::sync::Arc;

use super::{
    broadcast_shapes, check_dtype, dim_add, dim_from_i64, shape_numel, Attr, Constructor, InferCx,
    LowerCx, OpCx, OpKind, OpResult, Operator, FLOATS, NUMERIC,
};
use crate::error::OpError;
use crate::te::{Expr, Scalar, Src};
use crate::tensor::{DType, Tensor, TensorType};

/// Output index variables `Var(0..rank)`.
fn vars(rank: usize) -> Vec<Expr> {
    (0..rank).map(Expr::var).collect()
}

/// Lowers an operator whose output holds the input's elements in the same row-major order
/// (Reshape, Flatten, Squeeze, Unsqueeze).
fn lower_reshape(cx: &mut LowerCx) -> OpResult<Vec<Src>> {
    let out = cx.output(0).clone();
    if *cx.input(0) == out {
        return Ok(vec![Src::Arg(0)]);
    }
    let body = Expr::load_flat(Src::Arg(0), Expr::flatten(&vars(out.rank()), &out.shape));
    Ok(vec![cx.stage(out, body)])
}

/// Element 0 of a tensor as a scalar constant of its type.
fn scalar_of(t: &Tensor) -> Scalar {
    match t.ty.dtype {
        DType::Bool => Scalar::Bool(t.get_i64(0) != 0),
        d if d.is_int() => Scalar::from_int(d, t.get_int(0)),
        d if d.is_byte_float() => Scalar::F8(d, t.data[0]),
        d => Scalar::from_f64(d, t.get_f64(0)),
    }
}

/// Checks that input `i` is a 1-D integer tensor (a shape or a list of axes; a list of axes may
/// also be a scalar, one axis, as ONNX's reference implementation reads it).
fn check_int_list(cx: &InferCx, i: usize, what: &str) -> OpResult<()> {
    let t = cx.input(i)?;
    let rank_ok = t.rank() == 1 || (t.rank() == 0 && what == "axes");
    if !t.dtype.is_int() || !rank_ok {
        return Err(OpError::expected(
            format!("{what} (input {i}) to be a 1-D integer tensor"),
            t,
        ));
    }
    Ok(())
}

/// Normalises axes in `[-rank, rank)`, rejecting duplicates.
fn norm_axes(axes: &[i64], rank: usize) -> OpResult<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = super::norm_axis(a, rank)?;
        if n >= rank || out.contains(&n) {
            return Err(OpError::expected(
                format!("distinct axes in [{}, {})", -(rank as i64), rank),
                format!("{axes:?}"),
            ));
        }
        out.push(n);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Constant, ConstantOfShape

/// `Constant`: a value held in an attribute.
#[derive(Debug)]
struct Constant {
    value: Tensor,
}

impl Constant {
    fn new(cx: &OpCx) -> OpResult<Self> {
        let mut found = Vec::new();
        for (name, a) in &cx.attrs.0 {
            let v = match (name.as_str(), a) {
                ("value", Attr::Tensor(t)) => t.clone(),
                ("value_float", Attr::Float(f)) => Tensor::from_f32(&[], &[*f]),
                ("value_floats", Attr::Floats(f)) => Tensor::from_f32(&[f.len()], f),
                ("value_int", Attr::Int(i)) => Tensor::from_i64(&[], &[*i]),
                ("value_ints", Attr::Ints(i)) => Tensor::from_i64(&[i.len()], i),
                ("sparse_value", _) => {
                    return Err(OpError::Unsupported("Constant with a sparse_value".into()))
                }
                ("value_string" | "value_strings", _) => {
                    return Err(OpError::Unsupported("string constants".into()))
                }
                ("value" | "value_float" | "value_floats" | "value_int" | "value_ints", other) => {
                    return Err(OpError::expected(
                        format!("attribute `{name}` of the matching type"),
                        format!("{other:?}"),
                    ))
                }
                _ => continue,
            };
            found.push(v);
        }
        if found.len() != 1 {
            return Err(OpError::expected(
                "exactly one of the attributes value, value_float(s), value_int(s)",
                format!("{} of them", found.len()),
            ));
        }
        Ok(Constant {
            value: found.pop().expect("one value"),
        })
    }
}

impl Operator for Constant {
    fn op_type(&self) -> &'static str {
        "Constant"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, _cx: &InferCx) -> OpResult<Vec<TensorType>> {
        Ok(vec![self.value.ty.clone()])
    }

    fn fold_from_types(&self, _cx: &InferCx) -> Option<Vec<Tensor>> {
        Some(vec![self.value.clone()])
    }

    fn lower(&self, _cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        // Always folded by inference (`fold_from_types`); never lowered.
        Err(OpError::Unsupported(
            "lowering a Constant (it is folded during inference)".into(),
        ))
    }
}

/// `ConstantOfShape`: a tensor of a constant shape filled with one value.
#[derive(Debug)]
struct ConstantOfShape {
    value: Tensor,
}

impl Operator for ConstantOfShape {
    fn op_type(&self) -> &'static str {
        "ConstantOfShape"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_int_list(cx, 0, "shape")?;
        let dims = cx.ints(0, "shape")?.unwrap_or_default();
        let shape = dims
            .iter()
            .map(|&d| dim_from_i64(d, "ConstantOfShape dimensions"))
            .collect::<OpResult<Vec<usize>>>()?;
        Ok(vec![TensorType::new(self.value.ty.dtype, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let out = cx.output(0).clone();
        Ok(vec![cx.stage(out, Expr::Const(scalar_of(&self.value)))])
    }
}

fn constant_of_shape(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let value = match cx.attrs.tensor("value")? {
        Some(t) => {
            if t.numel() != 1 {
                return Err(OpError::expected(
                    "attribute `value` to hold one element",
                    &t.ty,
                ));
            }
            t.clone().reshaped(&[])
        }
        None => Tensor::from_f32(&[], &[0.0]),
    };
    Ok(Arc::new(ConstantOfShape { value }))
}

// ---------------------------------------------------------------------------------------------
// Shape, Size

/// `Shape`: the input's dimensions (a slice `start..end` of them from opset 15).
#[derive(Debug)]
struct Shape {
    start: i64,
    end: Option<i64>,
}

impl Shape {
    fn range(&self, rank: usize) -> (usize, usize) {
        let r = rank as i64;
        let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let s = clamp(self.start);
        let e = self.end.map_or(rank, clamp);
        (s, e.max(s))
    }
}

impl Operator for Shape {
    fn op_type(&self) -> &'static str {
        "Shape"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let (s, e) = self.range(cx.input(0)?.rank());
        Ok(vec![TensorType::new(DType::I64, [e - s])])
    }

    fn fold_from_types(&self, cx: &InferCx) -> Option<Vec<Tensor>> {
        let t = cx.input(0).ok()?;
        let (s, e) = self.range(t.rank());
        let dims: Vec<i64> = t.shape[s..e].iter().map(|&d| d as i64).collect();
        Some(vec![Tensor::from_i64(&[dims.len()], &dims)])
    }

    fn lower(&self, _cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        Err(OpError::Unsupported(
            "lowering a Shape (it is folded during inference)".into(),
        ))
    }
}

/// `Size`: the input's element count.
#[derive(Debug)]
struct Size;

impl Operator for Size {
    fn op_type(&self) -> &'static str {
        "Size"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        cx.input(0)?;
        Ok(vec![TensorType::new(DType::I64, [])])
    }

    fn fold_from_types(&self, cx: &InferCx) -> Option<Vec<Tensor>> {
        let n = cx.input(0).ok()?.numel();
        Some(vec![Tensor::from_i64(&[], &[n as i64])])
    }

    fn lower(&self, _cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        Err(OpError::Unsupported(
            "lowering a Size (it is folded during inference)".into(),
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Reshape, Flatten, Squeeze, Unsqueeze

/// `Reshape`: the shape comes from input 1 (opset 5+) or the `shape` attribute (opset 1-4).
#[derive(Debug)]
struct Reshape {
    allowzero: bool,
    attr_shape: Option<Vec<i64>>,
}

/// The output shape of a reshape of `input` to `spec` (0 copies, -1 infers).
fn reshape_shape(input: &[usize], spec: &[i64], allowzero: bool) -> OpResult<Vec<usize>> {
    let bad = |why: &str| {
        OpError::expected(
            format!("a shape compatible with {input:?} ({why})"),
            format!("{spec:?}"),
        )
    };
    let mut out = Vec::with_capacity(spec.len());
    let mut infer_at = None;
    for (i, &s) in spec.iter().enumerate() {
        match s {
            -1 => {
                if infer_at.is_some() {
                    return Err(bad("at most one -1"));
                }
                infer_at = Some(i);
                out.push(1);
            }
            0 if !allowzero => out.push(
                *input
                    .get(i)
                    .ok_or_else(|| bad("0 copies an input dimension"))?,
            ),
            s if s < 0 => return Err(bad("dimensions >= -1")),
            s => out.push(dim_from_i64(s, "Reshape dimensions")?),
        }
    }
    if allowzero && infer_at.is_some() && spec.contains(&0) {
        return Err(bad("-1 together with 0 when allowzero=1"));
    }
    let numel = shape_numel(input, "Reshape input size")?;
    let known = shape_numel(&out, "Reshape output size")?;
    if let Some(i) = infer_at {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(bad("the -1 dimension cannot be inferred"));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(bad("same element count"));
    }
    Ok(out)
}

impl Operator for Reshape {
    fn op_type(&self) -> &'static str {
        "Reshape"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let t = cx.input(0)?;
        let spec = match &self.attr_shape {
            Some(s) => s.clone(),
            None => {
                check_int_list(cx, 1, "shape")?;
                cx.ints(1, "shape")?
                    .ok_or_else(|| OpError::expected("input 1 (shape)", "none"))?
            }
        };
        let shape = reshape_shape(&t.shape, &spec, self.allowzero)?;
        Ok(vec![TensorType::new(t.dtype, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        lower_reshape(cx)
    }
}

/// `Flatten`: a 2-D view `[prod(d[..axis]), prod(d[axis..])]`.
#[derive(Debug)]
struct Flatten {
    axis: i64,
}

impl Operator for Flatten {
    fn op_type(&self) -> &'static str {
        "Flatten"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let t = cx.input(0)?;
        let r = t.rank() as i64;
        if self.axis < -r || self.axis > r {
            return Err(OpError::expected(
                format!("axis in [{}, {r}]", -r),
                self.axis,
            ));
        }
        let a = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        } as usize;
        let outer = shape_numel(&t.shape[..a], "Flatten outer size")?;
        let inner = shape_numel(&t.shape[a..], "Flatten inner size")?;
        Ok(vec![TensorType::new(t.dtype, [outer, inner])])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        lower_reshape(cx)
    }
}

/// `Squeeze`: removes dimensions of size 1 (the given axes, or all of them).
#[derive(Debug)]
struct Squeeze {
    /// Axes from the attribute (opset < 13).
    attr_axes: Option<Vec<i64>>,
    opset: i64,
}

impl Operator for Squeeze {
    fn op_type(&self) -> &'static str {
        "Squeeze"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let t = cx.input(0)?;
        let axes = if self.opset >= 13 {
            if cx.has(1) {
                check_int_list(cx, 1, "axes")?;
            }
            cx.ints(1, "axes")?
        } else {
            self.attr_axes.clone()
        };
        let shape: Vec<usize> = match axes {
            None => t.shape.iter().copied().filter(|&d| d != 1).collect(),
            Some(axes) => {
                let axes = norm_axes(&axes, t.rank())?;
                for &a in &axes {
                    if t.shape[a] != 1 {
                        return Err(OpError::expected(
                            format!("axis {a} of size 1 to squeeze"),
                            t,
                        ));
                    }
                }
                t.shape
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| !axes.contains(k))
                    .map(|(_, &d)| d)
                    .collect()
            }
        };
        Ok(vec![TensorType::new(t.dtype, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        lower_reshape(cx)
    }
}

/// `Unsqueeze`: inserts dimensions of size 1 at the given output axes.
#[derive(Debug)]
struct Unsqueeze {
    /// Axes from the attribute (opset < 13).
    attr_axes: Option<Vec<i64>>,
    opset: i64,
}

impl Operator for Unsqueeze {
    fn op_type(&self) -> &'static str {
        "Unsqueeze"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let t = cx.input(0)?;
        let axes = if self.opset >= 13 {
            check_int_list(cx, 1, "axes")?;
            cx.ints(1, "axes")?
        } else {
            self.attr_axes.clone()
        }
        .ok_or_else(|| OpError::expected("axes", "none"))?;
        let rank = t.rank() + axes.len();
        let axes = norm_axes(&axes, rank)?;
        let mut it = t.shape.iter();
        let shape: Vec<usize> = (0..rank)
            .map(|k| {
                if axes.contains(&k) {
                    1
                } else {
                    *it.next().expect("rank matches")
                }
            })
            .collect();
        Ok(vec![TensorType::new(t.dtype, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        lower_reshape(cx)
    }
}

// ---------------------------------------------------------------------------------------------
// Transpose, Concat, Expand

/// `Transpose`: output dimension `k` is input dimension `perm[k]`.
#[derive(Debug)]
struct Transpose {
    perm: Option<Vec<i64>>,
}

impl Transpose {
    fn perm(&self, rank: usize) -> OpResult<Vec<usize>> {
        let Some(p) = &self.perm else {
            return Ok((0..rank).rev().collect());
        };
        let bad = || {
            OpError::expected(
                format!("perm to be a permutation of 0..{rank}"),
                format!("{p:?}"),
            )
        };
        if p.len() != rank {
            return Err(bad());
        }
        let mut seen = vec![false; rank];
        let mut out = Vec::with_capacity(rank);
        for &a in p {
            if a < 0 || a as usize >= rank || seen[a as usize] {
                return Err(bad());
            }
            seen[a as usize] = true;
            out.push(a as usize);
        }
        Ok(out)
    }
}

impl Operator for Transpose {
    fn op_type(&self) -> &'static str {
        "Transpose"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let t = cx.input(0)?;
        let perm = self.perm(t.rank())?;
        let shape: Vec<usize> = perm.iter().map(|&p| t.shape[p]).collect();
        Ok(vec![TensorType::new(t.dtype, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let out = cx.output(0).clone();
        let perm = self.perm(out.rank())?;
        if perm.iter().enumerate().all(|(k, &p)| k == p) {
            return Ok(vec![Src::Arg(0)]);
        }
        let mut idx = vec![Expr::i(0); perm.len()];
        for (k, &p) in perm.iter().enumerate() {
            idx[p] = Expr::var(k);
        }
        Ok(vec![cx.stage(out, Expr::load(Src::Arg(0), idx))])
    }
}

/// `Concat`: joins inputs along an axis.
#[derive(Debug)]
struct Concat {
    axis: i64,
}

impl Operator for Concat {
    fn op_type(&self) -> &'static str {
        "Concat"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let first = cx.input(0)?;
        if first.rank() == 0 {
            return Err(OpError::expected("inputs of rank >= 1", first));
        }
        let axis = super::norm_axis(self.axis, first.rank())?;
        let mut shape = first.shape.clone();
        shape[axis] = 0;
        for i in 0..cx.inputs.len() {
            let t = cx.input(i)?;
            let same = t.dtype == first.dtype
                && t.rank() == first.rank()
                && t.shape
                    .iter()
                    .zip(&first.shape)
                    .enumerate()
                    .all(|(k, (a, b))| k == axis || a == b);
            if !same {
                return Err(OpError::expected(
                    format!("input {i} like {first} except along axis {axis}"),
                    t,
                ));
            }
            shape[axis] = dim_add(shape[axis], t.shape[axis], "Concat size along the axis")?;
        }
        Ok(vec![TensorType::new(first.dtype, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let out = cx.output(0).clone();
        let axis = super::norm_axis(self.axis, out.rank())?;
        // (input, offset, extent) of the inputs that contribute elements.
        let mut parts = Vec::new();
        let mut off = 0usize;
        for i in 0..cx.inputs.len() {
            let n = cx.input(i).shape[axis];
            if n > 0 {
                parts.push((i, off, n));
            }
            off += n;
        }
        if out.numel() == 0 || parts.is_empty() {
            let body = Expr::c(out.dtype, 0.0);
            return Ok(vec![cx.stage(out, body)]);
        }
        if parts.len() == 1 && *cx.input(parts[0].0) == out {
            return Ok(vec![Src::Arg(parts[0].0 as u32)]);
        }
        let load = |(i, off, _): (usize, usize, usize)| {
            let mut idx = vars(out.rank());
            idx[axis] = Expr::var(axis).sub(Expr::i(off as i64));
            Expr::load(Src::Arg(i as u32), idx)
        };
        let mut rev = parts.iter().rev();
        let mut body = load(*rev.next().expect("non-empty"));
        for &(i, off, n) in rev {
            let cond = Expr::var(axis).lt(Expr::i((off + n) as i64));
            body = Expr::select(cond, load((i, off, n)), body);
        }
        Ok(vec![cx.stage(out, body)])
    }
}

/// `Expand`: bidirectional broadcast of the input to a constant shape.
#[derive(Debug)]
struct Expand;

impl Operator for Expand {
    fn op_type(&self) -> &'static str {
        "Expand"
    }

    fn kind(&self) -> OpKind {
        OpKind::Broadcast
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let t = cx.input(0)?;
        check_int_list(cx, 1, "shape")?;
        let dims = cx
            .ints(1, "shape")?
            .ok_or_else(|| OpError::expected("input 1 (shape)", "none"))?;
        let target = dims
            .iter()
            .map(|&d| dim_from_i64(d, "Expand dimensions"))
            .collect::<OpResult<Vec<usize>>>()?;
        let shape = broadcast_shapes(&[&t.shape, &target])?;
        Ok(vec![TensorType::new(t.dtype, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let out = cx.output(0).clone();
        if *cx.input(0) == out {
            return Ok(vec![Src::Arg(0)]);
        }
        let body = cx.load_bcast(0, &out.shape);
        Ok(vec![cx.stage(out, body)])
    }
}

// ---------------------------------------------------------------------------------------------
// Range, Dropout

/// `Range`: `start + i * delta` for `i` in `0..max(ceil((limit - start) / delta), 0)`.
#[derive(Debug)]
struct Range;

/// Largest Range output accepted (elements).
const RANGE_LIMIT: i128 = 1 << 31;

impl Operator for Range {
    fn op_type(&self) -> &'static str {
        "Range"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, NUMERIC)?;
        for i in 0..3 {
            let t = cx.input(i)?;
            if t.dtype != d || t.numel() != 1 {
                return Err(OpError::expected(
                    format!("input {i} to be a scalar of type {d}"),
                    t,
                ));
            }
        }
        let start = cx.konst(0, "start")?;
        let limit = cx.konst(1, "limit")?;
        let delta = cx.konst(2, "delta")?;
        let n: i128 = if d.is_int() {
            let (s, l, dl) = (
                start.get_i64(0) as i128,
                limit.get_i64(0) as i128,
                delta.get_i64(0) as i128,
            );
            if dl == 0 {
                return Err(OpError::expected("a non-zero delta", 0));
            }
            let a = l - s;
            let (q, r) = (a / dl, a % dl);
            if r != 0 && ((r > 0) == (dl > 0)) {
                q + 1
            } else {
                q
            }
        } else {
            let (s, l, dl) = (start.get_f64(0), limit.get_f64(0), delta.get_f64(0));
            let n = ((l - s) / dl).ceil();
            // Non-finite bounds describe no sequence (an infinite start or delta, or a limit
            // that no step reaches), whatever sign the count would have.
            if dl == 0.0 || !s.is_finite() || !l.is_finite() || !dl.is_finite() || n.is_nan() {
                return Err(OpError::expected(
                    "finite start, limit and a non-zero delta",
                    format!("start={s} limit={l} delta={dl}"),
                ));
            }
            if n < 0.0 {
                0
            } else {
                n.min(RANGE_LIMIT as f64 + 1.0) as i128
            }
        };
        if n > RANGE_LIMIT {
            return Err(OpError::Unsupported(format!(
                "a Range of {n} elements (at most {RANGE_LIMIT})"
            )));
        }
        Ok(vec![TensorType::new(d, [n.max(0) as usize])])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let out = cx.output(0).clone();
        let d = out.dtype;
        let start = Expr::load_flat(Src::Arg(0), Expr::i(0));
        let delta = Expr::load_flat(Src::Arg(2), Expr::i(0));
        let body = start.add(Expr::var(0).cast(d).mul(delta));
        Ok(vec![cx.stage(out, body)])
    }
}

/// `Dropout` in inference: the output is the input, the mask all true.
#[derive(Debug)]
struct Dropout {
    /// The mask's element type is the input's before opset 10, Bool from 10.
    bool_mask: bool,
    n_outputs: usize,
}

impl Operator for Dropout {
    fn op_type(&self) -> &'static str {
        "Dropout"
    }

    fn kind(&self) -> OpKind {
        OpKind::Elementwise
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, FLOATS)?;
        if cx.has(1) {
            let r = cx.input(1)?;
            if !r.dtype.is_float() || r.numel() != 1 {
                return Err(OpError::expected("ratio (input 1) to be a float scalar", r));
            }
        }
        if cx.has(2) {
            let t = cx.input(2)?;
            if t.dtype != DType::Bool || t.numel() != 1 {
                return Err(OpError::expected(
                    "training_mode (input 2) to be a bool scalar",
                    t,
                ));
            }
            if cx.konst(2, "training_mode")?.get_i64(0) != 0 {
                // Training mode drops elements at random, unless the ratio is 0.
                let ratio = if cx.has(1) {
                    cx.konst(1, "ratio")?.get_f64(0)
                } else {
                    0.5
                };
                if ratio != 0.0 {
                    return Err(OpError::Unsupported(
                        "Dropout in training mode (random masks)".into(),
                    ));
                }
            }
        }
        let x = cx.input(0)?;
        let mut outs = vec![x.clone()];
        if self.n_outputs > 1 {
            let md = if self.bool_mask { DType::Bool } else { d };
            outs.push(TensorType::new(md, x.shape.clone()));
        }
        Ok(outs)
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let mut srcs = vec![Src::Arg(0)];
        if self.n_outputs > 1 {
            let m = cx.output(1).clone();
            let one = Expr::c(m.dtype, 1.0);
            srcs.push(cx.stage(m, one));
        }
        Ok(srcs)
    }
}

// ---------------------------------------------------------------------------------------------
// Registry

fn opt_axes(cx: &OpCx) -> OpResult<Option<Vec<i64>>> {
    if cx.opset >= 13 {
        Ok(None)
    } else {
        cx.attrs.ints("axes")
    }
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("Constant", |cx| Ok(Arc::new(Constant::new(cx)?))),
    ("ConstantOfShape", constant_of_shape),
    ("Shape", |cx| {
        let (start, end) = if cx.opset >= 15 {
            (cx.attrs.int("start", 0)?, cx.attrs.opt_int("end")?)
        } else {
            (0, None)
        };
        Ok(Arc::new(Shape { start, end }))
    }),
    ("Size", |_| Ok(Arc::new(Size))),
    ("Reshape", |cx| {
        let attr_shape = if cx.opset < 5 {
            Some(
                cx.attrs
                    .ints("shape")?
                    .ok_or_else(|| OpError::expected("attribute `shape`", "none"))?,
            )
        } else {
            None
        };
        Ok(Arc::new(Reshape {
            allowzero: cx.opset >= 14 && cx.attrs.int("allowzero", 0)? != 0,
            attr_shape,
        }))
    }),
    ("Flatten", |cx| {
        Ok(Arc::new(Flatten {
            axis: cx.attrs.int("axis", 1)?,
        }))
    }),
    ("Squeeze", |cx| {
        Ok(Arc::new(Squeeze {
            attr_axes: opt_axes(cx)?,
            opset: cx.opset,
        }))
    }),
    ("Unsqueeze", |cx| {
        Ok(Arc::new(Unsqueeze {
            attr_axes: opt_axes(cx)?,
            opset: cx.opset,
        }))
    }),
    ("Transpose", |cx| {
        Ok(Arc::new(Transpose {
            perm: cx.attrs.ints("perm")?,
        }))
    }),
    ("Concat", |cx| {
        let axis = if cx.opset < 4 {
            cx.attrs.int("axis", 1)?
        } else {
            cx.attrs
                .opt_int("axis")?
                .ok_or_else(|| OpError::expected("attribute `axis`", "none"))?
        };
        Ok(Arc::new(Concat { axis }))
    }),
    ("Expand", |_| Ok(Arc::new(Expand))),
    ("Range", |_| Ok(Arc::new(Range))),
    ("Dropout", |cx| {
        Ok(Arc::new(Dropout {
            bool_mask: cx.opset >= 10,
            n_outputs: cx.n_outputs.max(1),
        }))
    }),
];
