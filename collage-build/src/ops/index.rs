//! Operators of the `index` family: slicing, gathering, padding and rearranging elements.
use std::sync::Arc;

use super::{
    check_dtype, dim_add, dim_from_i64, dim_mul, norm_axis, Constructor, InferCx, LowerCx, OpCx,
    OpKind, OpResult, Operator, ALL, MAX_DIM,
};
use crate::error::OpError;
use crate::te::{Expr, Src};
use crate::tensor::{DType, Tensor, TensorType};

/// Integer index types.
const INDEX: &[DType] = &[DType::I32, DType::I64];

/// An [`InferCx`] over a lowering context's inputs, to recompute attributes that come from
/// constant inputs.
fn icx<'a>(cx: &'a LowerCx) -> InferCx<'a> {
    InferCx {
        inputs: cx.inputs,
        consts: cx.consts,
    }
}

/// The output index variables `Var(0..n)`.
fn vars(n: usize) -> Vec<Expr> {
    (0..n).map(Expr::var).collect()
}

/// An integer input that must be a constant 1-D (or scalar) list.
fn const_ints(cx: &InferCx, i: usize, what: &'static str) -> OpResult<Option<Vec<i64>>> {
    if !cx.has(i) {
        return Ok(None);
    }
    check_dtype(cx, i, INDEX)?;
    if cx.input(i)?.rank() > 1 {
        return Err(OpError::expected(
            format!("input {i} ({what}) of rank 0 or 1"),
            cx.input(i)?,
        ));
    }
    cx.ints(i, what)
}

/// Normalises a list of axes and rejects duplicates.
fn norm_axes(axes: &[i64], rank: usize) -> OpResult<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let a = norm_axis(a, rank)?;
        if out.contains(&a) {
            return Err(OpError::expected("distinct axes", format!("{axes:?}")));
        }
        out.push(a);
    }
    Ok(out)
}

/// A runtime index read as i64, wrapped if negative and clamped into `[0, dim)` so that invalid
/// data never reads out of bounds.
fn wrap_index(i: Expr, dim: usize) -> Expr {
    let d = dim as i64;
    let w = Expr::select(i.clone().lt(Expr::i(0)), i.clone().add(Expr::i(d)), i);
    w.max(Expr::i(0)).min(Expr::i((d - 1).max(0)))
}

// ---------------------------------------------------------------------------------------------
// Slice

/// `Slice`: starts/ends/axes attributes before opset 10, inputs (with steps) from 10.
#[derive(Debug)]
struct Slice {
    /// Attributes of opset 1 (`None` from opset 10).
    attrs: Option<SliceAttrs>,
}

#[derive(Debug)]
struct SliceAttrs {
    starts: Vec<i64>,
    ends: Vec<i64>,
    axes: Option<Vec<i64>>,
}

/// Start and step of one dimension of a slice, and the output extent.
#[derive(Clone, Copy, Debug)]
struct Range {
    start: i64,
    step: i64,
    len: usize,
}

/// Python slice semantics: `slice(start, end, step).indices(dim)` and the resulting length.
fn slice_range(start: i64, end: i64, step: i64, dim: usize) -> Range {
    let d = dim as i128;
    let (mut s, mut e, st) = (start as i128, end as i128, step as i128);
    if s < 0 {
        s += d;
    }
    if e < 0 {
        e += d;
    }
    if st > 0 {
        s = s.clamp(0, d);
        e = e.clamp(0, d);
    } else {
        s = s.clamp(-1, d - 1);
        e = e.clamp(-1, d - 1);
    }
    let len = if st > 0 {
        if e > s {
            (e - s + st - 1) / st
        } else {
            0
        }
    } else if s > e {
        (s - e + (-st) - 1) / (-st)
    } else {
        0
    };
    Range {
        start: if len == 0 { 0 } else { s as i64 },
        step,
        len: len as usize,
    }
}

impl Slice {
    fn ranges(&self, cx: &InferCx) -> OpResult<Vec<Range>> {
        let x = cx.input(0)?;
        let rank = x.rank();
        let (starts, ends, axes, steps) = match &self.attrs {
            Some(a) => (a.starts.clone(), a.ends.clone(), a.axes.clone(), None),
            None => {
                let starts = const_ints(cx, 1, "starts")?
                    .ok_or_else(|| OpError::expected("input 1 (starts)", "none"))?;
                let ends = const_ints(cx, 2, "ends")?
                    .ok_or_else(|| OpError::expected("input 2 (ends)", "none"))?;
                (
                    starts,
                    ends,
                    const_ints(cx, 3, "axes")?,
                    const_ints(cx, 4, "steps")?,
                )
            }
        };
        if starts.len() != ends.len() {
            return Err(OpError::expected(
                format!("as many ends as starts ({})", starts.len()),
                ends.len(),
            ));
        }
        let n = starts.len();
        let axes = match axes {
            Some(a) => {
                if a.len() != n {
                    return Err(OpError::expected(
                        format!("as many axes as starts ({n})"),
                        a.len(),
                    ));
                }
                norm_axes(&a, rank)?
            }
            None => {
                if n > rank {
                    return Err(OpError::expected(
                        format!("at most {rank} starts (the rank)"),
                        n,
                    ));
                }
                (0..n).collect()
            }
        };
        let steps = steps.unwrap_or_else(|| vec![1; n]);
        if steps.len() != n {
            return Err(OpError::expected(
                format!("as many steps as starts ({n})"),
                steps.len(),
            ));
        }
        let mut ranges: Vec<Range> = x
            .shape
            .iter()
            .map(|&d| Range {
                start: 0,
                step: 1,
                len: d,
            })
            .collect();
        for k in 0..n {
            if steps[k] == 0 {
                return Err(OpError::expected("non-zero steps", format!("{steps:?}")));
            }
            let a = axes[k];
            ranges[a] = slice_range(starts[k], ends[k], steps[k], x.shape[a]);
        }
        Ok(ranges)
    }
}

impl Operator for Slice {
    fn op_type(&self) -> &'static str {
        "Slice"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, ALL)?;
        let r = self.ranges(cx)?;
        Ok(vec![TensorType::new(
            d,
            r.iter().map(|r| r.len).collect::<Vec<_>>(),
        )])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let ranges = self.ranges(&icx(cx))?;
        let out = cx.output(0).clone();
        if out == *cx.input(0) && ranges.iter().all(|r| r.start == 0 && r.step == 1) {
            return Ok(vec![Src::Arg(0)]);
        }
        let idx = ranges
            .iter()
            .enumerate()
            .map(|(k, r)| Expr::i(r.start).add(Expr::var(k).mul(Expr::i(r.step))))
            .collect();
        Ok(vec![cx.stage(out, Expr::load(Src::Arg(0), idx))])
    }
}

fn slice(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let attrs = if cx.opset < 10 {
        let non_empty = |v: Option<Vec<i64>>| v.filter(|v| !v.is_empty());
        Some(SliceAttrs {
            starts: cx
                .attrs
                .ints("starts")?
                .ok_or_else(|| OpError::expected("attribute `starts`", "none"))?,
            ends: cx
                .attrs
                .ints("ends")?
                .ok_or_else(|| OpError::expected("attribute `ends`", "none"))?,
            axes: non_empty(cx.attrs.ints("axes")?),
        })
    } else {
        None
    };
    Ok(Arc::new(Slice { attrs }))
}

// ---------------------------------------------------------------------------------------------
// Split

/// `Split`: sizes from the `split` attribute (before 13) or input (opset 1 and from 13), from
/// `num_outputs` (from 18, last chunk smaller), or equal parts.
#[derive(Debug)]
struct Split {
    axis: i64,
    split: Option<Vec<i64>>,
    num_outputs: Option<i64>,
    n_outputs: usize,
}

impl Split {
    fn sizes(&self, cx: &InferCx) -> OpResult<(usize, Vec<usize>)> {
        let x = cx.input(0)?;
        let axis = norm_axis(self.axis, x.rank())?;
        let dim = x.shape.get(axis).copied().unwrap_or(1);
        let split = match const_ints(cx, 1, "split")? {
            Some(s) => Some(s),
            None => self.split.clone(),
        };
        let sizes: Vec<usize> = match split {
            Some(s) => {
                let s = s
                    .iter()
                    .map(|&v| dim_from_i64(v, "split sizes"))
                    .collect::<OpResult<Vec<usize>>>()?;
                let total = s
                    .iter()
                    .try_fold(0usize, |t, &v| dim_add(t, v, "the sum of the split sizes"))?;
                if total != dim {
                    return Err(OpError::expected(
                        format!("split sizes summing to dimension {axis} ({dim})"),
                        format!("{s:?}"),
                    ));
                }
                s
            }
            None => {
                let n = match self.num_outputs {
                    Some(n) if n < 1 => {
                        return Err(OpError::expected("num_outputs >= 1", n));
                    }
                    Some(n) => n as usize,
                    None => self.n_outputs.max(1),
                };
                let chunk = dim.div_ceil(n);
                if self.num_outputs.is_none() && chunk * n != dim {
                    return Err(OpError::expected(
                        format!("dimension {axis} ({dim}) divisible into {n} equal parts"),
                        dim,
                    ));
                }
                if chunk * (n - 1) > dim {
                    return Err(OpError::expected(
                        format!("dimension {axis} ({dim}) large enough for {n} outputs"),
                        dim,
                    ));
                }
                let mut s = vec![chunk; n];
                s[n - 1] = dim - chunk * (n - 1);
                s
            }
        };
        if sizes.len() != self.n_outputs {
            return Err(OpError::expected(
                format!("{} split sizes (one per output)", self.n_outputs),
                sizes.len(),
            ));
        }
        Ok((axis, sizes))
    }
}

impl Operator for Split {
    fn op_type(&self) -> &'static str {
        "Split"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, ALL)?;
        let x = cx.input(0)?;
        if x.rank() == 0 {
            return Err(OpError::expected("input 0 of rank >= 1", x));
        }
        let (axis, sizes) = self.sizes(cx)?;
        Ok(sizes
            .iter()
            .map(|&s| {
                let mut shape = x.shape.clone();
                shape[axis] = s;
                TensorType::new(d, shape)
            })
            .collect())
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (axis, sizes) = self.sizes(&icx(cx))?;
        let rank = cx.input(0).rank();
        let mut off = 0i64;
        let mut outs = Vec::with_capacity(sizes.len());
        for (j, &s) in sizes.iter().enumerate() {
            let ty = cx.output(j).clone();
            if ty == *cx.input(0) {
                outs.push(Src::Arg(0));
            } else {
                let mut idx = vars(rank);
                idx[axis] = Expr::var(axis).add(Expr::i(off));
                outs.push(cx.stage(ty, Expr::load(Src::Arg(0), idx)));
            }
            off += s as i64;
        }
        Ok(outs)
    }
}

fn split(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let split = if cx.opset < 13 {
        cx.attrs.ints("split")?.filter(|s| !s.is_empty())
    } else {
        None
    };
    let num_outputs = if cx.opset >= 18 {
        cx.attrs.opt_int("num_outputs")?
    } else {
        None
    };
    if let Some(n) = num_outputs {
        if usize::try_from(n).ok() != Some(cx.n_outputs) {
            return Err(OpError::expected(
                format!(
                    "num_outputs equal to the number of outputs ({})",
                    cx.n_outputs
                ),
                n,
            ));
        }
    }
    Ok(Arc::new(Split {
        axis: cx.attrs.int("axis", 0)?,
        split,
        num_outputs,
        n_outputs: cx.n_outputs,
    }))
}

// ---------------------------------------------------------------------------------------------
// Gather, GatherElements

/// Checks constant indices (input 1) into dimension `axis` of input 0: ONNX makes an index
/// outside `[-n, n)` an error. Run-time indices are clamped by the lowering instead.
fn check_const_indices(cx: &InferCx, axis: usize) -> OpResult<()> {
    let Some(t) = cx.consts.get(1).and_then(|c| c.as_deref()) else {
        return Ok(());
    };
    let x = cx.input(0)?;
    let n = x.shape[axis];
    let (lo, hi) = (-(n as i128), n as i128);
    for k in 0..t.numel() {
        let i = t.get_i64(k);
        if (i as i128) < lo || (i as i128) >= hi {
            return Err(OpError::expected(
                format!("indices in [-{n}, {n}) (dimension {axis} of {x})"),
                i,
            ));
        }
    }
    Ok(())
}

/// Constant indices of rank at most 1 into a dimension of `n` that are an arithmetic
/// progression, normalised into `[0, n)` (`infer` checked the range): `(first, step)`.
fn const_progression(c: Option<&Option<Arc<Tensor>>>, n: usize) -> Option<(i64, i64)> {
    let t = c?.as_deref()?;
    if t.ty.rank() > 1 || t.numel() == 0 {
        return None;
    }
    let at = |k: usize| {
        let i = t.get_i64(k);
        if i < 0 {
            i + n as i64
        } else {
            i
        }
    };
    let first = at(0);
    let step = if t.numel() > 1 { at(1) - first } else { 0 };
    (1..t.numel())
        .all(|k| at(k) == first + step * k as i64)
        .then_some((first, step))
}

/// `Gather`: `out[a.., i.., b..] = data[a.., indices[i..], b..]` along `axis`.
#[derive(Debug)]
struct Gather {
    axis: i64,
}

impl Operator for Gather {
    fn op_type(&self) -> &'static str {
        "Gather"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, ALL)?;
        check_dtype(cx, 1, INDEX)?;
        let x = cx.input(0)?;
        if x.rank() == 0 {
            return Err(OpError::expected("input 0 of rank >= 1", x));
        }
        let axis = norm_axis(self.axis, x.rank())?;
        check_const_indices(cx, axis)?;
        let mut shape = x.shape[..axis].to_vec();
        shape.extend_from_slice(&cx.input(1)?.shape);
        shape.extend_from_slice(&x.shape[axis + 1..]);
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let axis = norm_axis(self.axis, x.rank())?;
        let q = cx.input(1).rank();
        let mut idx: Vec<Expr> = (0..axis).map(Expr::var).collect();
        idx.push(match const_progression(cx.consts.get(1), x.shape[axis]) {
            // Affine, so the consumer's planner sees an ordinary load (a transformer's class
            // token, `x[:, 0]`, read by its classifier's matrix product).
            Some((start, _)) if q == 0 => Expr::i(start),
            Some((start, step)) => Expr::i(start).add(Expr::var(axis).mul(Expr::i(step))),
            None => wrap_index(
                Expr::load(Src::Arg(1), (axis..axis + q).map(Expr::var).collect()).cast(DType::I64),
                x.shape[axis],
            ),
        });
        idx.extend((axis + 1..x.rank()).map(|k| Expr::var(k + q - 1)));
        let out = cx.output(0).clone();
        Ok(vec![cx.stage(out, Expr::load(Src::Arg(0), idx))])
    }
}

/// `GatherElements`: `out[i..] = data[i.. with indices[i..] at axis]`.
#[derive(Debug)]
struct GatherElements {
    axis: i64,
}

impl Operator for GatherElements {
    fn op_type(&self) -> &'static str {
        "GatherElements"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, ALL)?;
        check_dtype(cx, 1, INDEX)?;
        let x = cx.input(0)?;
        let i = cx.input(1)?;
        if x.rank() == 0 || i.rank() != x.rank() {
            return Err(OpError::expected(
                format!("indices of the same rank >= 1 as data ({x})"),
                i,
            ));
        }
        let axis = norm_axis(self.axis, x.rank())?;
        check_const_indices(cx, axis)?;
        for k in 0..x.rank() {
            if k != axis && i.shape[k] > x.shape[k] {
                return Err(OpError::expected(
                    format!("indices no larger than data ({x}) outside axis {axis}"),
                    i,
                ));
            }
        }
        Ok(vec![TensorType::new(d, i.shape.clone())])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let axis = norm_axis(self.axis, x.rank())?;
        let ind = Expr::load(Src::Arg(1), vars(x.rank())).cast(DType::I64);
        let mut idx = vars(x.rank());
        idx[axis] = wrap_index(ind, x.shape[axis]);
        let out = cx.output(0).clone();
        Ok(vec![cx.stage(out, Expr::load(Src::Arg(0), idx))])
    }
}

// ---------------------------------------------------------------------------------------------
// Pad

#[derive(Clone, Copy, Debug, PartialEq)]
enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

/// `Pad`: `paddings`/`pads` and `value` attributes before opset 11; `pads`, `constant_value` and
/// (from 18) `axes` inputs after. Negative pads crop (before padding).
#[derive(Debug)]
struct Pad {
    mode: PadMode,
    /// Pads attribute (before opset 11).
    pads: Option<Vec<i64>>,
    /// Value attribute (before opset 11).
    value: f32,
}

/// The part of a dimension of size `d` that pads `(b, e)` keep (negative pads crop), exact.
fn kept_len(d: usize, b: i64, e: i64) -> i128 {
    d as i128 + b.min(0) as i128 + e.min(0) as i128
}

/// The size of a dimension of size `d` padded by `(b, e)`, exact.
fn padded_len(d: usize, b: i64, e: i64) -> i128 {
    d as i128 + b as i128 + e as i128
}

impl Pad {
    /// Begin and end pads of every dimension.
    fn pads(&self, cx: &InferCx) -> OpResult<Vec<(i64, i64)>> {
        let x = cx.input(0)?;
        let rank = x.rank();
        let (pads, axes) = match &self.pads {
            Some(p) => (p.clone(), None),
            None => (
                const_ints(cx, 1, "pads")?
                    .ok_or_else(|| OpError::expected("input 1 (pads)", "none"))?,
                const_ints(cx, 3, "axes")?,
            ),
        };
        let axes = match axes {
            Some(a) => norm_axes(&a, rank)?,
            None => (0..rank).collect(),
        };
        let n = axes.len();
        if pads.len() != 2 * n {
            return Err(OpError::expected(
                format!("{} pads (2 per axis)", 2 * n),
                pads.len(),
            ));
        }
        let mut out = vec![(0i64, 0i64); rank];
        for (k, &a) in axes.iter().enumerate() {
            out[a] = (pads[k], pads[k + n]);
        }
        for (k, &(b, e)) in out.iter().enumerate() {
            let d = x.shape[k];
            let kept = kept_len(d, b, e);
            if kept < 0 {
                return Err(OpError::expected(
                    format!("pads of dimension {k} that crop at most its size ({d})"),
                    format!("({b}, {e})"),
                ));
            }
            if padded_len(d, b, e) > MAX_DIM as i128 {
                return Err(OpError::expected(
                    format!("pads of dimension {k} ({d}) giving a size at most 2^48"),
                    format!("({b}, {e})"),
                ));
            }
            if kept == 0 && (b > 0 || e > 0) && self.mode != PadMode::Constant {
                return Err(OpError::expected(
                    format!("a non-empty dimension {k} to pad in {:?} mode", self.mode),
                    "an empty one",
                ));
            }
        }
        Ok(out)
    }
}

impl Operator for Pad {
    fn op_type(&self) -> &'static str {
        "Pad"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, ALL)?;
        if self.pads.is_none() && cx.has(2) {
            let v = cx.input(2)?;
            if v.dtype != d || v.numel() > 1 {
                return Err(OpError::expected(
                    format!("constant_value: a scalar of type {d}"),
                    v,
                ));
            }
        }
        let pads = self.pads(cx)?;
        // In [0, MAX_DIM]: checked by `pads`.
        let shape: Vec<usize> = cx
            .input(0)?
            .shape
            .iter()
            .zip(&pads)
            .map(|(&n, &(b, e))| padded_len(n, b, e) as usize)
            .collect();
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let pads = self.pads(&icx(cx))?;
        let x = cx.input(0).clone();
        let out = cx.output(0).clone();
        if pads.iter().all(|&p| p == (0, 0)) {
            return Ok(vec![Src::Arg(0)]);
        }
        let mut idx = Vec::with_capacity(x.rank());
        let mut inside: Option<Expr> = None;
        for (k, &(b, e)) in pads.iter().enumerate() {
            // `pads` checked that the kept part is in [0, padded size] (at most MAX_DIM) and
            // that the crops are at most the input size.
            let crop = b.min(0).unsigned_abs() as i64;
            let kept = kept_len(x.shape[k], b, e) as i64;
            let v = Expr::var(k);
            if b <= 0 && e <= 0 {
                idx.push(v.add(Expr::i(crop)));
                continue;
            }
            // Position in the cropped input; outside [0, kept) in the padding.
            let o = v.sub(Expr::i(b.max(0)));
            let i = match self.mode {
                PadMode::Constant => {
                    let mut c = Vec::new();
                    if b > 0 {
                        c.push(o.clone().ge(Expr::i(0)));
                    }
                    if e > 0 {
                        c.push(o.clone().lt(Expr::i(kept)));
                    }
                    for c in c {
                        inside = Some(match inside {
                            None => c,
                            Some(p) => p.and(c),
                        });
                    }
                    o
                }
                PadMode::Edge => o.max(Expr::i(0)).min(Expr::i(kept - 1)),
                PadMode::Wrap => o.modulo(Expr::i(kept)),
                PadMode::Reflect if kept == 1 => Expr::i(0),
                // One reflection at each end (pads shorter than the input, as exporters write
                // them): `n - |n - |o||` with `n = kept - 1`, no remainder per element.
                PadMode::Reflect if b < kept && e < kept => {
                    let n = Expr::i(kept - 1);
                    let a = o.clone().max(Expr::i(0).sub(o));
                    let d = n.clone().sub(a);
                    n.sub(d.clone().max(Expr::i(0).sub(d)))
                }
                PadMode::Reflect => {
                    let p = 2 * (kept - 1);
                    let m = o.modulo(Expr::i(p));
                    Expr::select(m.clone().lt(Expr::i(kept)), m.clone(), Expr::i(p).sub(m))
                }
            };
            idx.push(i.add(Expr::i(crop)));
        }
        let mut load = Expr::load(Src::Arg(0), idx.clone());
        // The innermost dimension reflected once at each end: a choice of three loads, each
        // affine in the loop (reversed at the ends), which vectorises as masked loads; the
        // index `n - |n - |o||` would be a gather per element (3x slower).
        let last = x.rank().saturating_sub(1);
        if let (PadMode::Reflect, Some(&(b, e))) = (self.mode, pads.get(last)) {
            let kept = kept_len(x.shape[last], b, e) as i64;
            if kept > 1 && (b > 0 || e > 0) && b < kept && e < kept {
                let crop = b.min(0).unsigned_abs() as i64;
                let o = Expr::var(last).sub(Expr::i(b.max(0)));
                let at = |i: Expr| {
                    let mut idx = idx.clone();
                    idx[last] = i.add(Expr::i(crop));
                    Expr::load(Src::Arg(0), idx)
                };
                let inner = Expr::select(
                    o.clone().lt(Expr::i(kept)),
                    at(o.clone()),
                    at(Expr::i(2 * (kept - 1)).sub(o.clone())),
                );
                load = Expr::select(o.clone().lt(Expr::i(0)), at(Expr::i(0).sub(o)), inner);
            }
        }
        let body = match inside {
            None => load,
            Some(c) => {
                let value = if self.pads.is_none() && cx.has(2) {
                    let v = cx.input(2);
                    if v.numel() == 0 {
                        Expr::c(x.dtype, 0.0)
                    } else {
                        Expr::load(Src::Arg(2), vec![Expr::i(0); v.rank()])
                    }
                } else {
                    Expr::c(x.dtype, self.value as f64)
                };
                Expr::select(c, load, value)
            }
        };
        Ok(vec![cx.stage(out, body)])
    }
}

fn pad(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let mode = match cx.attrs.string("mode", "constant")?.as_str() {
        "constant" => PadMode::Constant,
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Edge,
        "wrap" if cx.opset >= 19 => PadMode::Wrap,
        m => {
            return Err(OpError::expected(
                "mode constant, reflect, edge (or wrap from opset 19)",
                m,
            ))
        }
    };
    let (pads, value) = if cx.opset < 11 {
        let name = if cx.opset < 2 { "paddings" } else { "pads" };
        let pads = cx
            .attrs
            .ints(name)?
            .ok_or_else(|| OpError::expected(format!("attribute `{name}`"), "none"))?;
        (Some(pads), cx.attrs.float("value", 0.0)?)
    } else {
        (None, 0.0)
    };
    Ok(Arc::new(Pad { mode, pads, value }))
}

// ---------------------------------------------------------------------------------------------
// Tile

/// `Tile`: `repeats` input (from opset 6); `tiles` and `axis` inputs in opset 1.
#[derive(Debug)]
struct Tile {
    opset1: bool,
}

impl Tile {
    fn repeats(&self, cx: &InferCx) -> OpResult<Vec<usize>> {
        let rank = cx.input(0)?.rank();
        let reps = if self.opset1 {
            let tiles = const_ints(cx, 1, "tiles")?
                .ok_or_else(|| OpError::expected("input 1 (tiles)", "none"))?;
            let axis = const_ints(cx, 2, "axis")?
                .ok_or_else(|| OpError::expected("input 2 (axis)", "none"))?;
            if tiles.len() != 1 || axis.len() != 1 {
                return Err(OpError::expected("scalar tiles and axis", "lists"));
            }
            let mut r = vec![1; rank];
            r[norm_axis(axis[0], rank)?] = tiles[0];
            r
        } else {
            const_ints(cx, 1, "repeats")?
                .ok_or_else(|| OpError::expected("input 1 (repeats)", "none"))?
        };
        if reps.len() != rank {
            return Err(OpError::expected(
                format!("{rank} non-negative repeats (one per dimension)"),
                format!("{reps:?}"),
            ));
        }
        reps.iter().map(|&r| dim_from_i64(r, "repeats")).collect()
    }
}

impl Operator for Tile {
    fn op_type(&self) -> &'static str {
        "Tile"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, ALL)?;
        let reps = self.repeats(cx)?;
        let shape = cx
            .input(0)?
            .shape
            .iter()
            .zip(&reps)
            .map(|(&n, &r)| dim_mul(n, r, "tiled dimensions"))
            .collect::<OpResult<Vec<usize>>>()?;
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let out = cx.output(0).clone();
        if out == x {
            return Ok(vec![Src::Arg(0)]);
        }
        let idx = x
            .shape
            .iter()
            .zip(&out.shape)
            .enumerate()
            .map(|(k, (&n, &m))| {
                if n == m {
                    Expr::var(k)
                } else if n <= 1 {
                    Expr::i(0)
                } else {
                    Expr::var(k).fmod(Expr::i(n as i64))
                }
            })
            .collect();
        Ok(vec![cx.stage(out, Expr::load(Src::Arg(0), idx))])
    }
}

// ---------------------------------------------------------------------------------------------
// Trilu

/// `Trilu`: keeps the upper (`j - i >= k`) or lower (`j - i <= k`) triangle of the last two
/// dimensions; `k` may be a run-time scalar.
#[derive(Debug)]
struct Trilu {
    upper: bool,
}

impl Operator for Trilu {
    fn op_type(&self) -> &'static str {
        "Trilu"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, ALL)?;
        let x = cx.input(0)?;
        if x.rank() < 2 {
            return Err(OpError::expected("input 0 of rank >= 2", x));
        }
        if cx.has(1) {
            check_dtype(cx, 1, &[DType::I64])?;
            let k = cx.input(1)?;
            if k.numel() != 1 {
                return Err(OpError::expected("k: a scalar", k));
            }
        }
        Ok(vec![TensorType::new(d, x.shape.clone())])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let r = x.rank();
        let k = if !cx.has(1) {
            Expr::i(0)
        } else if let Some(t) = cx.consts.get(1).and_then(|c| c.as_deref()) {
            Expr::i(t.get_i64(0))
        } else {
            Expr::load(Src::Arg(1), vec![Expr::i(0); cx.input(1).rank()])
        };
        let diff = Expr::var(r - 1).sub(Expr::var(r - 2));
        let keep = if self.upper { diff.ge(k) } else { diff.le(k) };
        let body = Expr::select(
            keep,
            Expr::load(Src::Arg(0), vars(r)),
            Expr::c(x.dtype, 0.0),
        );
        Ok(vec![cx.stage(x, body)])
    }
}

// ---------------------------------------------------------------------------------------------
// DepthToSpace, SpaceToDepth

/// `DepthToSpace` (`to_space`) and `SpaceToDepth`, in DCR or CRD channel order.
#[derive(Debug)]
struct Rearrange {
    to_space: bool,
    blocksize: usize,
    crd: bool,
}

impl Operator for Rearrange {
    fn op_type(&self) -> &'static str {
        if self.to_space {
            "DepthToSpace"
        } else {
            "SpaceToDepth"
        }
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, ALL)?;
        let x = cx.input(0)?;
        if x.rank() != 4 {
            return Err(OpError::expected("input 0 of rank 4 (N, C, H, W)", x));
        }
        let b = self.blocksize;
        let bb = dim_mul(b, b, "blocksize^2")?;
        let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
        let shape = if self.to_space {
            if c % bb != 0 {
                return Err(OpError::expected(
                    format!("channels divisible by blocksize^2 ({bb})"),
                    c,
                ));
            }
            vec![
                n,
                c / bb,
                dim_mul(h, b, "DepthToSpace height")?,
                dim_mul(w, b, "DepthToSpace width")?,
            ]
        } else {
            if h % b != 0 || w % b != 0 {
                return Err(OpError::expected(
                    format!("height and width divisible by blocksize ({b})"),
                    x,
                ));
            }
            vec![n, dim_mul(c, bb, "SpaceToDepth channels")?, h / b, w / b]
        };
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let b = self.blocksize as i64;
        let out = cx.output(0).clone();
        let bi = |v: i64| Expr::i(v);
        let idx = if self.to_space {
            // out[n, c, h*b + i, w*b + j]
            let c_out = out.shape[1] as i64;
            let (y, x) = (Expr::var(2), Expr::var(3));
            let (i, j) = (y.clone().fmod(bi(b)), x.clone().fmod(bi(b)));
            let ch = if self.crd {
                Expr::var(1).mul(bi(b * b)).add(i.mul(bi(b))).add(j)
            } else {
                i.mul(bi(b)).add(j).mul(bi(c_out)).add(Expr::var(1))
            };
            vec![Expr::var(0), ch, y.div(bi(b)), x.div(bi(b))]
        } else {
            // out[n, oc, h, w] = in[n, c, h*b + i, w*b + j]
            let c_in = cx.input(0).shape[1] as i64;
            let oc = Expr::var(1);
            let (c, i, j) = if self.crd {
                (
                    oc.clone().div(bi(b * b)),
                    oc.clone().div(bi(b)).fmod(bi(b)),
                    oc.fmod(bi(b)),
                )
            } else {
                (
                    oc.clone().fmod(bi(c_in)),
                    oc.clone().div(bi(b * c_in)),
                    oc.div(bi(c_in)).fmod(bi(b)),
                )
            };
            vec![
                Expr::var(0),
                c,
                Expr::var(2).mul(bi(b)).add(i),
                Expr::var(3).mul(bi(b)).add(j),
            ]
        };
        Ok(vec![cx.stage(out, Expr::load(Src::Arg(0), idx))])
    }
}

fn rearrange(cx: &OpCx, to_space: bool) -> OpResult<Arc<dyn Operator>> {
    let b = cx
        .attrs
        .opt_int("blocksize")?
        .ok_or_else(|| OpError::expected("attribute `blocksize`", "none"))?;
    if b < 1 || b > MAX_DIM as i64 {
        return Err(OpError::expected("blocksize in [1, 2^48]", b));
    }
    let has_mode = if to_space {
        cx.opset >= 11
    } else {
        cx.opset >= 28
    };
    let mode = if has_mode {
        cx.attrs.string("mode", "DCR")?
    } else {
        "DCR".to_string()
    };
    let crd = match mode.as_str() {
        "DCR" => false,
        "CRD" => true,
        m => return Err(OpError::expected("mode DCR or CRD", m)),
    };
    Ok(Arc::new(Rearrange {
        to_space,
        blocksize: b as usize,
        crd,
    }))
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("Slice", slice),
    ("Split", split),
    ("Gather", |cx| {
        Ok(Arc::new(Gather {
            axis: cx.attrs.int("axis", 0)?,
        }))
    }),
    ("GatherElements", |cx| {
        Ok(Arc::new(GatherElements {
            axis: cx.attrs.int("axis", 0)?,
        }))
    }),
    ("Pad", pad),
    ("Tile", |cx| {
        Ok(Arc::new(Tile {
            opset1: cx.opset < 6,
        }))
    }),
    ("Trilu", |cx| {
        Ok(Arc::new(Trilu {
            upper: cx.attrs.int("upper", 1)? != 0,
        }))
    }),
    ("DepthToSpace", |cx| rearrange(cx, true)),
    ("SpaceToDepth", |cx| rearrange(cx, false)),
];
