//! Operators of the `image` family: `GridSample`, `AffineGrid`, `Col2Im`, `MaxUnpool`,
//! `RoiAlign` and `DeformConv`.
//!
//! The sampling operators (`GridSample`, `RoiAlign`, `DeformConv`) read their input at positions
//! computed from run-time data. Every such read goes through an index that is clamped into the
//! dimension it indexes, and a tap outside the input is masked by a `Select` (it contributes 0),
//! so that no data can make a load leave its buffer. A run-time coordinate becomes an integer
//! only through `to_index`, which maps non-finite and huge values to an index outside every
//! dimension before the conversion (a C conversion of such a float is undefined).
use std::sync::Arc;

use super::{
    check_arity as arity, check_dtype, dim_from_i64, shape_numel, Constructor, InferCx, LowerCx,
    OpCx, OpResult, Operator, FLOATS, NUMERIC,
};
use crate::error::OpError;
use crate::te::{Expr, Src};
use crate::tensor::{DType, TensorType};

mod regions;

/// The output index variables `Var(0..n)`.
fn vars(n: usize) -> Vec<Expr> {
    (0..n).map(Expr::var).collect()
}

/// Magnitude past which a run-time coordinate is treated as outside every dimension (2^50:
/// above [`super::MAX_DIM`], exact in f32).
const FAR: f64 = (1u64 << 50) as f64;

/// A float expression with an integral value (floored, rounded) as an I64 index; NaN, infinities
/// and values beyond [`FAR`] become `-FAR`, outside every dimension.
fn to_index(x: Expr, d: DType) -> Expr {
    let ok = x
        .clone()
        .ge(Expr::c(d, -FAR))
        .and(x.clone().le(Expr::c(d, FAR)));
    Expr::select(ok, x, Expr::c(d, -FAR)).cast(DType::I64)
}

/// `i` clamped into `[0, n)` (`n` > 0).
fn clamp_index(i: Expr, n: usize) -> Expr {
    i.max(Expr::i(0)).min(Expr::i(n as i64 - 1))
}

/// True when the I64 index `i` lies in `[0, n)`.
fn in_range(i: Expr, n: usize) -> Expr {
    i.clone().ge(Expr::i(0)).and(i.lt(Expr::i(n as i64)))
}

/// The conjunction of `conds` (`None` when empty: always true).
fn all(conds: Vec<Expr>) -> Option<Expr> {
    conds.into_iter().reduce(|a, b| a.and(b))
}

/// `x` (of float type `d`) reflected by the borders `lo` and `hi` until it lies between them
/// (each reflection folds the distance past a border back inside, alternating borders).
fn reflect(x: Expr, lo: f64, hi: f64, d: DType) -> Expr {
    let span = hi - lo;
    if span <= 0.0 {
        // One admissible position.
        return Expr::c(d, lo);
    }
    // `dx` >= 0 past the border `near`; `far` is the other border.
    let fold = |dx: Expr, near: f64, far: f64| {
        let n = dx.clone().div(Expr::c(d, span)).floor();
        let r = dx.sub(n.clone().mul(Expr::c(d, span)));
        let even = n.fmod(Expr::c(d, 2.0)).eq(Expr::c(d, 0.0));
        let toward = |from: f64, r: Expr| {
            if from < (lo + hi) / 2.0 {
                Expr::c(d, from).add(r)
            } else {
                Expr::c(d, from).sub(r)
            }
        };
        Expr::select(even, toward(near, r.clone()), toward(far, r))
    };
    let below = fold(Expr::c(d, lo).sub(x.clone()), lo, hi);
    let above = fold(x.clone().sub(Expr::c(d, hi)), hi, lo);
    Expr::select(
        x.clone().lt(Expr::c(d, lo)),
        below,
        Expr::select(x.clone().gt(Expr::c(d, hi)), above, x),
    )
}

/// The most taps (interpolation points) one output element may combine: 2^8 (linear
/// interpolation over 8 spatial dimensions, cubic over 4). Each is a term of the element's
/// expression.
const MAX_TAPS: u64 = 256;

/// The sum of `terms` (at least one) as a balanced tree, so that the expression's depth grows
/// with the logarithm of their count.
fn balanced_sum(mut terms: Vec<Expr>) -> Expr {
    while terms.len() > 1 {
        let mut next = Vec::with_capacity(terms.len().div_ceil(2));
        let mut it = terms.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => a.add(b),
                None => a,
            });
        }
        terms = next;
    }
    terms.pop().expect("at least one term")
}

/// The value of a type's zero.
fn zero(d: DType) -> Expr {
    Expr::c(d, 0.0)
}

/// `v` (computed in float type `f`) converted to the output type `d`: floats as they are,
/// integers truncated after clamping into the type's range (NaN becomes 0), so that the
/// conversion is always defined.
fn to_output(v: Expr, f: DType, d: DType) -> Expr {
    if d.is_float() {
        return v.cast(d);
    }
    let Some((lo, hi)) = d.int_range() else {
        return v.cast(d);
    };
    let v = Expr::select(v.clone().is_nan(), zero(f), v);
    v.max(Expr::c(f, lo as f64))
        .min(Expr::c(f, hi as f64))
        .cast(d)
}

// ---------------------------------------------------------------------------------------------
// GridSample
// ---------------------------------------------------------------------------------------------

/// GridSample's interpolation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Interp {
    Nearest,
    Linear,
    Cubic,
}

/// GridSample's treatment of positions outside the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Padding {
    /// Taps outside the input read 0.
    Zeros,
    /// Positions are clamped to the border.
    Border,
    /// Positions are reflected by the borders.
    Reflection,
}

/// `GridSample` (opset 16: modes `bilinear`, `nearest`, `bicubic`; opset 20 on: `linear`,
/// `nearest`, `cubic`, any number of spatial dimensions).
#[derive(Debug)]
struct GridSample {
    mode: Interp,
    padding: Padding,
    align_corners: bool,
}

/// Keys' cubic convolution coefficient (as PyTorch's and ONNX's reference).
const CUBIC_A: f64 = -0.75;

impl GridSample {
    /// Taps per spatial dimension and the offset of the first from `floor(x)`.
    fn taps(&self) -> (usize, i64) {
        match self.mode {
            Interp::Nearest => (1, 0),
            Interp::Linear => (2, 0),
            Interp::Cubic => (4, -1),
        }
    }

    /// The borders of the admissible coordinates along a dimension of size `n`.
    fn borders(&self, n: usize) -> (f64, f64) {
        let n = n as f64;
        if self.align_corners {
            (0.0, n - 1.0)
        } else {
            (-0.5, n - 0.5)
        }
    }

    /// The position along a dimension of size `n` for normalised coordinate `g` (of float type
    /// `f`), after rounding (nearest) and the padding's treatment of positions outside.
    fn coord(&self, g: Expr, n: usize, f: DType) -> Expr {
        let one = Expr::c(f, 1.0);
        let nf = n as f64;
        let x = if self.align_corners {
            g.add(one).div(Expr::c(f, 2.0)).mul(Expr::c(f, nf - 1.0))
        } else {
            g.add(one)
                .mul(Expr::c(f, nf))
                .sub(Expr::c(f, 1.0))
                .div(Expr::c(f, 2.0))
        };
        let x = if self.mode == Interp::Nearest {
            x.round()
        } else {
            x
        };
        let (lo, hi) = self.borders(n);
        match self.padding {
            Padding::Zeros => x,
            Padding::Border => {
                let outside = x
                    .clone()
                    .lt(Expr::c(f, lo))
                    .or(x.clone().gt(Expr::c(f, hi)));
                let clamped = x.clone().max(Expr::c(f, 0.0)).min(Expr::c(f, nf - 1.0));
                Expr::select(outside, clamped, x)
            }
            Padding::Reflection => reflect(x, lo, hi, f),
        }
    }

    /// The index read for tap position `p` (integral, of float type `f`) along a dimension of
    /// size `n`: inside `[0, n)`, or -1 for a tap that reads 0 (zeros padding).
    fn tap_index(&self, p: Expr, n: usize, f: DType) -> Expr {
        match self.padding {
            Padding::Zeros => {
                let i = to_index(p, f);
                Expr::select(in_range(i.clone(), n), i, Expr::i(-1))
            }
            Padding::Border => clamp_index(to_index(p, f), n),
            Padding::Reflection => {
                let (lo, hi) = self.borders(n);
                clamp_index(to_index(reflect(p, lo, hi, f), f), n)
            }
        }
    }

    /// The weight of tap `k` (an I64 expression) at fraction `t` in `[0, 1)`.
    fn weight(&self, t: Expr, k: Expr, f: DType) -> Expr {
        let c = |v: f64| Expr::c(f, v);
        match self.mode {
            Interp::Nearest => c(1.0),
            Interp::Linear => Expr::select(k.eq(Expr::i(0)), c(1.0).sub(t.clone()), t),
            Interp::Cubic => {
                let a = CUBIC_A;
                // |distance| 1..2 (outer taps) and 0..1 (inner taps).
                let outer = |s: Expr| {
                    c(a).mul(s.clone())
                        .sub(c(5.0 * a))
                        .mul(s.clone())
                        .add(c(8.0 * a))
                        .mul(s)
                        .sub(c(4.0 * a))
                };
                let inner = |s: Expr| {
                    c(a + 2.0)
                        .mul(s.clone())
                        .sub(c(a + 3.0))
                        .mul(s.clone())
                        .mul(s)
                        .add(c(1.0))
                };
                let w0 = outer(t.clone().add(c(1.0)));
                let w1 = inner(t.clone());
                let w2 = inner(c(1.0).sub(t.clone()));
                let w3 = outer(c(2.0).sub(t));
                Expr::select(
                    k.clone().eq(Expr::i(0)),
                    w0,
                    Expr::select(
                        k.clone().eq(Expr::i(1)),
                        w1,
                        Expr::select(k.eq(Expr::i(2)), w2, w3),
                    ),
                )
            }
        }
    }
}

impl Operator for GridSample {
    fn op_type(&self) -> &'static str {
        "GridSample"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 2, 2)?;
        let d = if self.mode == Interp::Nearest {
            check_dtype(cx, 0, super::ALL)?
        } else {
            check_dtype(cx, 0, NUMERIC)?
        };
        check_dtype(cx, 1, FLOATS)?;
        let (x, g) = (cx.input(0)?, cx.input(1)?);
        if x.rank() < 3 {
            return Err(OpError::expected("X of rank >= 3 (N, C, spatial...)", x));
        }
        let r = x.rank() - 2;
        let taps = (self.taps().0 as u64).checked_pow(r as u32);
        if taps.is_none_or(|t| t > MAX_TAPS) {
            return Err(OpError::expected(
                format!("at most {MAX_TAPS} interpolation taps per output element (X {x})"),
                format!("{}^{r}", self.taps().0),
            ));
        }
        if g.rank() != r + 2 || g.shape[0] != x.shape[0] || g.shape[r + 1] != r {
            return Err(OpError::expected(
                format!(
                    "grid of shape ({}, out_1..out_{r}, {r}) for X {x}",
                    x.shape[0]
                ),
                g,
            ));
        }
        let mut shape = vec![x.shape[0], x.shape[1]];
        shape.extend_from_slice(&g.shape[1..=r]);
        let out = TensorType::new(d, shape);
        if out.numel() > 0 && x.shape[2..].contains(&0) {
            return Err(OpError::expected(
                "X with non-empty spatial dimensions (there is nothing to sample)",
                x,
            ));
        }
        Ok(vec![out])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let g = cx.input(1).clone();
        let out = cx.output(0).clone();
        let (d, f) = (out.dtype, g.dtype);
        if out.numel() == 0 {
            return Ok(vec![cx.stage(out, zero(d))]);
        }
        let r = x.rank() - 2;
        // Weights and sums are computed in X's float type, or in f64 for integer X.
        let wf = if d.is_float() { d } else { DType::F64 };
        let (k, off) = self.taps();
        let pos_shape = g.shape[..=r].to_vec();
        let mut tap_shape = pos_shape.clone();
        tap_shape.push(k);
        shape_numel(&tap_shape, "GridSample's taps")?;
        let pos = vars(r + 1);
        let tap_var = Expr::var(r + 1);
        // Per spatial dimension: the position, each tap's index and (interpolating) weight.
        let mut index = Vec::with_capacity(r);
        let mut weight = Vec::with_capacity(r);
        for i in 0..r {
            let n = x.shape[2 + i];
            // The grid lists coordinates innermost dimension first.
            let mut gi = pos.clone();
            gi.push(Expr::i((r - 1 - i) as i64));
            let body = self.coord(Expr::load(Src::Arg(1), gi), n, f);
            let c = cx.materialized_stage(TensorType::new(f, pos_shape.clone()), body);
            let at = Expr::load(c, pos.clone());
            let base = if self.mode == Interp::Nearest {
                at.clone()
            } else {
                at.clone().floor()
            };
            let p = base.clone().add(tap_var.clone().add(Expr::i(off)).cast(f));
            let ity = TensorType::new(DType::I64, tap_shape.clone());
            index.push(cx.materialized_stage(ity, self.tap_index(p, n, f)));
            if self.mode != Interp::Nearest {
                let t = at.sub(base);
                let w = self.weight(t, tap_var.clone(), f).cast(wf);
                let wty = TensorType::new(wf, tap_shape.clone());
                weight.push(cx.materialized_stage(wty, w));
            }
        }
        // Output (n, c, o..): the sum over every combination of taps.
        let mut opos = vec![Expr::var(0)];
        opos.extend((2..2 + r).map(Expr::var));
        let mut terms = Vec::new();
        let combos = k.pow(r as u32);
        for mut code in 0..combos {
            let mut idx = vec![Expr::var(0), Expr::var(1)];
            let mut conds = Vec::new();
            let mut w: Option<Expr> = None;
            for i in (0..r).rev() {
                let tap = (code % k) as i64;
                code /= k;
                let mut ti = opos.clone();
                ti.push(Expr::i(tap));
                let ii = Expr::load(index[i], ti.clone());
                if self.padding == Padding::Zeros {
                    conds.push(ii.clone().ge(Expr::i(0)));
                }
                idx.push(ii.max(Expr::i(0)));
                if let Some(&ws) = weight.get(i) {
                    let wi = Expr::load(ws, ti);
                    w = Some(match w {
                        None => wi,
                        Some(w) => wi.mul(w),
                    });
                }
            }
            idx[2..].reverse();
            let v = Expr::load(Src::Arg(0), idx);
            let (term, z) = match w {
                None => (v, zero(d)),
                Some(w) => (w.mul(v.cast(wf)), zero(wf)),
            };
            terms.push(match all(conds) {
                None => term,
                Some(c) => Expr::select(c, term, z),
            });
        }
        let sum = balanced_sum(terms);
        let body = if self.mode == Interp::Nearest {
            sum
        } else {
            to_output(sum, wf, d)
        };
        Ok(vec![cx.stage(out, body)])
    }
}

fn grid_sample(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let (linear, cubic) = if cx.opset < 20 {
        ("bilinear", "bicubic")
    } else {
        ("linear", "cubic")
    };
    let mode = match cx.attrs.string("mode", linear)?.as_str() {
        "nearest" => Interp::Nearest,
        m if m == linear => Interp::Linear,
        m if m == cubic => Interp::Cubic,
        other => {
            return Err(OpError::expected(
                format!("mode {linear}, nearest or {cubic} (opset {})", cx.opset),
                other,
            ))
        }
    };
    let padding = match cx.attrs.string("padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => {
            return Err(OpError::expected(
                "padding_mode zeros, border or reflection",
                other,
            ))
        }
    };
    let align_corners = match cx.attrs.int("align_corners", 0)? {
        0 => false,
        1 => true,
        other => return Err(OpError::expected("align_corners 0 or 1", other)),
    };
    Ok(Arc::new(GridSample {
        mode,
        padding,
        align_corners,
    }))
}

// ---------------------------------------------------------------------------------------------
// Shared attribute helpers
// ---------------------------------------------------------------------------------------------

pub(super) use super::nn::dims_attr;

/// A constant 1-D int64 input `i` (`what` names it) of `len` elements (any length when `None`).
fn const_list(
    cx: &InferCx,
    i: usize,
    what: &'static str,
    len: Option<usize>,
) -> OpResult<Vec<i64>> {
    check_dtype(cx, i, &[DType::I64])?;
    let t = cx.input(i)?;
    if t.rank() != 1 || len.is_some_and(|n| t.shape[0] != n) {
        let want = match len {
            Some(n) => format!("{what} of shape [{n}]"),
            None => format!("{what} of rank 1"),
        };
        return Err(OpError::expected(want, t));
    }
    Ok(cx.konst(i, what)?.to_i64())
}

/// An [`InferCx`] over a lowering context's inputs, to recompute what constant inputs decide.
fn icx<'a>(cx: &'a LowerCx) -> InferCx<'a> {
    InferCx {
        inputs: cx.inputs,
        consts: cx.consts,
    }
}

// ---------------------------------------------------------------------------------------------
// AffineGrid
// ---------------------------------------------------------------------------------------------

/// `AffineGrid`: the normalised positions of an `(H, W)` or `(D, H, W)` image (constant input
/// `size`) transformed by each batch entry's affine matrix `theta` (`(N, 2, 3)` or `(N, 3, 4)`).
/// Computed in f64.
#[derive(Debug)]
struct AffineGrid {
    align_corners: bool,
}

impl AffineGrid {
    /// The spatial sizes (from constant input `size`).
    fn spatial(&self, cx: &InferCx) -> OpResult<Vec<usize>> {
        let theta = cx.input(0)?;
        let size = const_list(cx, 1, "AffineGrid's size", None)?;
        let r = size.len().saturating_sub(2);
        if !(2..=3).contains(&r) || theta.rank() != 3 || theta.shape[1..] != [r, r + 1] {
            return Err(OpError::expected(
                "theta (N, 2, 3) with size of 4 values, or (N, 3, 4) with 5",
                format!("{theta} and {size:?}"),
            ));
        }
        if size[0] != theta.shape[0] as i64 {
            return Err(OpError::expected(
                format!("size[0] equal to theta's batch ({})", theta.shape[0]),
                size[0],
            ));
        }
        dim_from_i64(size[1], "AffineGrid's size[1]")?;
        size[2..]
            .iter()
            .map(|&v| dim_from_i64(v, "AffineGrid's spatial sizes"))
            .collect()
    }
}

impl Operator for AffineGrid {
    fn op_type(&self) -> &'static str {
        "AffineGrid"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 2, 2)?;
        let d = check_dtype(cx, 0, FLOATS)?;
        let sp = self.spatial(cx)?;
        let mut shape = vec![cx.input(0)?.shape[0]];
        shape.extend_from_slice(&sp);
        shape.push(sp.len());
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let sp = self.spatial(&icx(cx))?;
        let out = cx.output(0).clone();
        let r = sp.len();
        let f = DType::F64;
        // Output (n, s_1..s_r, j): sum_k theta[n, j, k] * p_k + theta[n, j, r], where p_0 is the
        // position along the innermost dimension.
        let mut acc = Expr::load(
            Src::Arg(0),
            vec![Expr::var(0), Expr::var(r + 1), Expr::i(r as i64)],
        )
        .cast(f);
        for k in 0..r {
            let a = r - k; // the output variable of the dimension p_k runs along
            let n = sp[a - 1] as f64;
            let (start, step) = if self.align_corners {
                (-1.0, if n > 1.0 { 2.0 / (n - 1.0) } else { 0.0 })
            } else {
                (-1.0 + 1.0 / n, 2.0 / n)
            };
            let p = Expr::c(f, start).add(Expr::var(a).cast(f).mul(Expr::c(f, step)));
            let t = Expr::load(
                Src::Arg(0),
                vec![Expr::var(0), Expr::var(r + 1), Expr::i(k as i64)],
            )
            .cast(f);
            acc = t.mul(p).add(acc);
        }
        let d = out.dtype;
        Ok(vec![cx.stage(out, acc.cast(d))])
    }
}

// ---------------------------------------------------------------------------------------------
// Registry
// ---------------------------------------------------------------------------------------------

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("GridSample", grid_sample),
    ("AffineGrid", |cx| {
        let align_corners = match cx.attrs.int("align_corners", 0)? {
            0 => false,
            1 => true,
            other => return Err(OpError::expected("align_corners 0 or 1", other)),
        };
        Ok(Arc::new(AffineGrid { align_corners }))
    }),
    ("Col2Im", regions::col2im),
    ("DeformConv", regions::deform_conv),
    ("MaxUnpool", regions::max_unpool),
    ("RoiAlign", regions::roi_align),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{testing, Attr};
    use crate::tensor::Tensor;

    fn op(op_type: &str, opset: i64, attrs: &[(&str, Attr)]) -> OpResult<Arc<dyn Operator>> {
        testing::build(op_type, attrs, opset, 3, 1)
    }

    fn s(v: &str) -> Attr {
        Attr::Str(v.into())
    }

    /// Infers, lowers and interprets `op` on `args` (those in `konst` as constants): the output.
    fn run(op: &dyn Operator, args: &[Tensor], konst: &[usize]) -> Vec<f64> {
        let args: Vec<Option<Tensor>> = args.iter().cloned().map(Some).collect();
        let y = testing::eval(op, &args, konst).expect("runs").remove(0);
        (0..y.numel()).map(|i| y.get_f64(i)).collect()
    }

    #[test]
    fn grid_sample_mode_names_follow_the_opset() {
        assert!(op("GridSample", 16, &[("mode", s("bicubic"))]).is_ok());
        assert!(op("GridSample", 16, &[("mode", s("cubic"))]).is_err());
        assert!(op("GridSample", 22, &[("mode", s("cubic"))]).is_ok());
        assert!(op("GridSample", 22, &[("mode", s("bilinear"))]).is_err());
        assert!(op("GridSample", 22, &[("padding_mode", s("wrap"))]).is_err());
        assert!(op("GridSample", 22, &[("align_corners", Attr::Int(2))]).is_err());
    }

    /// Non-finite and huge grid positions read inside the input (the interpreter's loads are
    /// checked) and give 0 with zeros padding.
    #[test]
    fn grid_sample_of_hostile_positions_stays_inside_the_input() {
        let x = Tensor::from_f64_as(DType::F32, &[1, 1, 2, 3], &[1., 2., 3., 4., 5., 6.]);
        let bad = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e30, -1e30, 3e9];
        let mut g = Vec::new();
        for &b in &bad {
            g.extend([b, 0.0]);
        }
        let grid = Tensor::from_f64_as(DType::F32, &[1, 1, bad.len(), 2], &g);
        for mode in ["nearest", "linear", "cubic"] {
            for pad in ["zeros", "border", "reflection"] {
                for ac in [0, 1] {
                    let o = op(
                        "GridSample",
                        22,
                        &[
                            ("mode", s(mode)),
                            ("padding_mode", s(pad)),
                            ("align_corners", Attr::Int(ac)),
                        ],
                    )
                    .expect("valid");
                    let y = run(o.as_ref(), &[x.clone(), grid.clone()], &[]);
                    if pad == "zeros" {
                        // NaN positions give NaN weights; every other tap is outside.
                        assert!(y[1..].iter().all(|&v| v == 0.0), "{mode} {ac}: {y:?}");
                    }
                }
            }
        }
    }

    /// With run-time rois the adaptive sample count is covered by a window of samples; it gives
    /// what the exact count of constant rois gives.
    #[test]
    fn roi_align_adaptive_window_matches_constant_rois() {
        let x: Vec<f64> = (0..2 * 7 * 9)
            .map(|i| ((i * 37) % 23) as f64 - 11.0)
            .collect();
        let x = Tensor::from_f64_as(DType::F32, &[1, 2, 7, 9], &x);
        let rois = Tensor::from_f64_as(
            DType::F32,
            &[4, 4],
            &[
                0., 0., 8., 6., 1.5, -3., 20., 4.2, -30., -30., -25., -26., 6., 5., 2., 1.,
            ],
        );
        let bi = Tensor::from_i64(&[4], &[0, 0, 0, 0]);
        for mode in ["avg", "max"] {
            for ctm in ["half_pixel", "output_half_pixel"] {
                let o = op(
                    "RoiAlign",
                    22,
                    &[
                        ("mode", s(mode)),
                        ("coordinate_transformation_mode", s(ctm)),
                        ("output_height", Attr::Int(2)),
                        ("output_width", Attr::Int(3)),
                    ],
                )
                .expect("valid");
                let args = [x.clone(), rois.clone(), bi.clone()];
                let window = run(o.as_ref(), &args, &[]);
                let exact = run(o.as_ref(), &args, &[1]);
                for (a, b) in window.iter().zip(&exact) {
                    assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{mode} {ctm}");
                }
            }
        }
    }

    /// Repeated indices: the last element written wins; indices outside write nothing.
    #[test]
    fn max_unpool_last_write_wins_and_outside_indices_are_dropped() {
        let o = op(
            "MaxUnpool",
            22,
            &[
                ("kernel_shape", Attr::Ints(vec![2])),
                ("strides", Attr::Ints(vec![2])),
            ],
        )
        .expect("valid");
        let x = Tensor::from_f64_as(DType::F32, &[1, 1, 3], &[1., 2., 3.]);
        let i = Tensor::from_i64(&[1, 1, 3], &[4, 4, -1]);
        let y = run(o.as_ref(), &[x, i], &[]);
        assert_eq!(y, vec![0., 0., 0., 0., 2., 0.]);
    }
}
