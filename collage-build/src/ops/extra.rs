//! Operators of the `extra` family: `BitCast`, `CumProd`, `OneHot`, `EyeLike`, `Shrink`, the
//! window functions (`HannWindow`, `HammingWindow`, `BlackmanWindow`), `GatherND`, `ScatterND`,
//! `ScatterElements` (and its deprecated alias `Scatter`), `ReverseSequence` and
//! `CenterCropPad`.
//!
//! Shapes are static: the inputs that decide an output shape (`OneHot`'s depth, a window's size,
//! `CenterCropPad`'s shape) must be compile-time constants. The scatters read their indices at
//! run time: each output element reduces over the update positions that may land on it.
use std::sync::Arc;

use super::reduce::cumulative;
use super::{
    check_arity as arity, check_dtype, dim_from_f64, dim_from_i64, norm_axis, Constructor, InferCx,
    LowerCx, OpCx, OpKind, OpResult, Operator, ALL, NUMERIC,
};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src, UnOp};
use crate::tensor::{DType, TensorType};

/// Integer index types.
pub(super) const INDEX: &[DType] = &[DType::I32, DType::I64];

/// The types whose values [`Expr`] constants and the interpreter represent as such (`BitCast`,
/// `EyeLike`, `OneHot`'s values, ...): the numeric types, Bool and the 16-bit floats (not the
/// one-byte floats nor the integers of fewer than 8 bits).
const PLAIN: &[DType] = DType::byte_sized();

/// The numeric types and the 16-bit floats (the window functions' output types).
const NUMERIC_HALVES: &[DType] = &[
    DType::F32,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::I8,
    DType::U8,
    DType::I16,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::F16,
    DType::BF16,
];

/// The output index variables `Var(0..n)`.
pub(super) fn vars(n: usize) -> Vec<Expr> {
    (0..n).map(Expr::var).collect()
}

/// An [`InferCx`] over a lowering context's inputs, to recompute what constant inputs decide.
pub(super) fn icx<'a>(cx: &'a LowerCx) -> InferCx<'a> {
    InferCx {
        inputs: cx.inputs,
        consts: cx.consts,
    }
}

/// A type given by an attribute's ONNX code, one of `allowed`.
fn dtype_attr(code: i64, what: &str, allowed: &[DType]) -> OpResult<DType> {
    let code = i32::try_from(code).unwrap_or(-1);
    match DType::from_onnx(code) {
        Some(d) if allowed.contains(&d) => Ok(d),
        _ => Err(OpError::Unsupported(format!(
            "{what} {}",
            DType::onnx_name(code)
        ))),
    }
}

/// The conjunction of `conds` (`None` when empty: always true).
fn all(conds: Vec<Expr>) -> Option<Expr> {
    conds.into_iter().reduce(|a, b| a.and(b))
}

/// `cond ? value : other`, or `value` when there is no condition.
fn guard(cond: Option<Expr>, value: Expr, other: Expr) -> Expr {
    match cond {
        None => value,
        Some(c) => Expr::select(c, value, other),
    }
}

/// A run-time index read as i64, wrapped if negative and clamped into `[0, dim)` so that
/// invalid data never reads out of bounds.
pub(super) fn wrap_index(i: Expr, dim: usize) -> Expr {
    let d = dim as i64;
    let w = Expr::select(i.clone().lt(Expr::i(0)), i.clone().add(Expr::i(d)), i);
    w.max(Expr::i(0)).min(Expr::i((d - 1).max(0)))
}

/// A run-time index read as i64, wrapped if negative (not clamped: an index outside
/// `[-dim, dim)` matches no position).
fn wrap_negative(i: Expr, dim: usize) -> Expr {
    Expr::select(
        i.clone().lt(Expr::i(0)),
        i.clone().add(Expr::i(dim as i64)),
        i,
    )
}

/// Checks constant indices (input `i`) against the dimensions they index: element `k` indexes a
/// dimension of size `dims[k % dims.len()]`, and ONNX makes an index outside `[-n, n)` an error.
/// Run-time indices are clamped (or ignored) by the lowering instead.
fn check_const_indices(cx: &InferCx, i: usize, dims: &[usize]) -> OpResult<()> {
    let Some(t) = cx.consts.get(i).and_then(|c| c.as_deref()) else {
        return Ok(());
    };
    if dims.is_empty() {
        return Ok(());
    }
    for k in 0..t.numel() {
        let v = t.get_i64(k) as i128;
        let n = dims[k % dims.len()] as i128;
        if v < -n || v >= n {
            return Err(OpError::expected(
                format!("indices (input {i}) in [-{n}, {n})"),
                v,
            ));
        }
    }
    Ok(())
}

/// A scalar axis from constant input `i` (rank 0, or rank 1 with one element) for a tensor of
/// rank `rank`.
pub(super) fn scalar_axis(cx: &InferCx, i: usize, rank: usize) -> OpResult<usize> {
    check_dtype(cx, i, INDEX)?;
    let t = cx.input(i)?;
    if t.rank() > 1 {
        return Err(OpError::expected(format!("input {i} (axis) of rank 0"), t));
    }
    match cx.ints(i, "axis")?.as_deref() {
        Some(&[a]) => norm_axis(a, rank),
        Some(v) => Err(OpError::expected("a scalar axis", format!("{v:?}"))),
        None => Err(OpError::expected(format!("input {i} (axis)"), "none")),
    }
}

/// A non-negative integer from constant scalar input `i` (of any numeric type; floats are
/// truncated).
pub(super) fn scalar_dim(cx: &InferCx, i: usize, what: &'static str) -> OpResult<usize> {
    let t = cx.konst(i, what)?;
    if t.numel() != 1 {
        return Err(OpError::expected(
            format!("input {i} ({what}) with one element"),
            &t.ty,
        ));
    }
    if t.ty.dtype.is_float() {
        let v = t.get_f64(0);
        dim_from_f64(if v.is_finite() { v.trunc() } else { v }, what)
    } else {
        dim_from_i64(t.get_i64(0), what)
    }
}

// ---------------------------------------------------------------------------------------------
// BitCast
// ---------------------------------------------------------------------------------------------

/// `BitCast`: each element's bits reinterpreted as another type of the same size. It sees the
/// 16-bit floats as they are (`passes/infer.rs` does not widen them around it).
#[derive(Debug)]
struct BitCast {
    to: DType,
}

impl Operator for BitCast {
    fn op_type(&self) -> &'static str {
        "BitCast"
    }

    fn kind(&self) -> OpKind {
        OpKind::Broadcast
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 1, 1)?;
        let from = check_dtype(cx, 0, PLAIN)?;
        if from.size() != self.to.size() {
            return Err(OpError::expected(
                format!(
                    "an input type of the size of {} ({} bits)",
                    self.to,
                    8 * self.to.size()
                ),
                format!("{from} ({} bits)", 8 * from.size()),
            ));
        }
        Ok(vec![TensorType::new(self.to, cx.input(0)?.shape.clone())])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        if x.dtype == self.to {
            return Ok(vec![Src::Arg(0)]);
        }
        let load = Expr::load(Src::Arg(0), vars(x.rank()));
        let body = Expr::Un(UnOp::BitCast(self.to), Box::new(load));
        let out = cx.output(0).clone();
        Ok(vec![cx.stage(out, body)])
    }
}

// ---------------------------------------------------------------------------------------------
// CumProd
// ---------------------------------------------------------------------------------------------

/// `CumProd` along the axis given by constant input 1 (as `CumSum`, with products).
#[derive(Debug)]
struct CumProd {
    exclusive: bool,
    reverse: bool,
}

impl CumProd {
    fn axis(cx: &InferCx) -> OpResult<usize> {
        let x = cx.input(0)?;
        if x.rank() == 0 {
            return Err(OpError::expected("input 0 of rank >= 1", x));
        }
        scalar_axis(cx, 1, x.rank())
    }
}

impl Operator for CumProd {
    fn op_type(&self) -> &'static str {
        "CumProd"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 2, 2)?;
        check_dtype(cx, 0, NUMERIC)?;
        Self::axis(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let a = Self::axis(&icx(cx))?;
        Ok(vec![cumulative(
            cx,
            a,
            self.exclusive,
            self.reverse,
            RedOp::Prod,
            1.0,
        )])
    }
}

// ---------------------------------------------------------------------------------------------
// OneHot
// ---------------------------------------------------------------------------------------------

/// `OneHot`: `values[1]` where the (wrapped) index equals the position along the new axis,
/// `values[0]` elsewhere; the depth (input 1) must be a constant.
#[derive(Debug)]
struct OneHot {
    axis: i64,
}

impl OneHot {
    /// The new axis and the depth.
    fn geometry(&self, cx: &InferCx) -> OpResult<(usize, usize)> {
        let rank = cx.input(0)?.rank();
        let axis = norm_axis(self.axis, rank + 1)?;
        Ok((axis, scalar_dim(cx, 1, "depth")?))
    }
}

impl Operator for OneHot {
    fn op_type(&self) -> &'static str {
        "OneHot"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 3, 3)?;
        check_dtype(cx, 0, NUMERIC)?;
        check_dtype(cx, 1, NUMERIC)?;
        let d = check_dtype(cx, 2, PLAIN)?;
        let v = cx.input(2)?;
        if v.rank() != 1 || v.numel() != 2 {
            return Err(OpError::expected(
                "values (input 2): [off_value, on_value], of shape [2]",
                v,
            ));
        }
        let (axis, depth) = self.geometry(cx)?;
        let mut shape = cx.input(0)?.shape.clone();
        shape.insert(axis, depth);
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (axis, depth) = self.geometry(&icx(cx))?;
        let out = cx.output(0).clone();
        let mut idx = vars(out.rank());
        let k = idx.remove(axis);
        // Non-integer indices are converted to int64 first (as the ONNX specification says).
        let ind = Expr::load(Src::Arg(0), idx).cast(DType::I64);
        let hit = wrap_negative(ind, depth).eq(k);
        let on = Expr::load(Src::Arg(2), vec![Expr::i(1)]);
        let off = Expr::load(Src::Arg(2), vec![Expr::i(0)]);
        Ok(vec![cx.stage(out, Expr::select(hit, on, off))])
    }
}

// ---------------------------------------------------------------------------------------------
// EyeLike
// ---------------------------------------------------------------------------------------------

/// `EyeLike`: ones on diagonal `k` of a 2-D tensor of the input's shape, zeros elsewhere.
#[derive(Debug)]
struct EyeLike {
    dtype: Option<DType>,
    k: i64,
}

impl Operator for EyeLike {
    fn op_type(&self) -> &'static str {
        "EyeLike"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 1, 1)?;
        let d = check_dtype(cx, 0, ALL)?;
        let x = cx.input(0)?;
        if x.rank() != 2 {
            return Err(OpError::expected("input 0 of rank 2", x));
        }
        let d = self.dtype.unwrap_or(d);
        if !PLAIN.contains(&d) {
            return Err(OpError::Unsupported(format!("EyeLike of type {d}")));
        }
        Ok(vec![TensorType::new(d, x.shape.clone())])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let out = cx.output(0).clone();
        let d = out.dtype;
        let on = Expr::var(1).sub(Expr::var(0)).eq(Expr::i(self.k));
        let body = Expr::select(on, Expr::c(d, 1.0), Expr::c(d, 0.0));
        Ok(vec![cx.stage(out, body)])
    }
}

// ---------------------------------------------------------------------------------------------
// Shrink
// ---------------------------------------------------------------------------------------------

/// `Shrink`: `x + bias` below `-lambd`, `x - bias` above `lambd`, 0 between (integers compute in
/// f64 and truncate back).
#[derive(Debug)]
struct Shrink {
    bias: f64,
    lambd: f64,
}

impl Operator for Shrink {
    fn op_type(&self) -> &'static str {
        "Shrink"
    }

    fn kind(&self) -> OpKind {
        OpKind::Broadcast
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 1, 1)?;
        check_dtype(cx, 0, NUMERIC)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let out = cx.output(0).clone();
        let d = out.dtype;
        let cd = if d.is_float() { d } else { DType::F64 };
        let mut x = Expr::load(Src::Arg(0), vars(out.rank()));
        if cd != d {
            x = x.cast(cd);
        }
        let c = |v: f64| Expr::c(cd, v);
        let inner = Expr::select(
            x.clone().gt(c(self.lambd)),
            x.clone().sub(c(self.bias)),
            c(0.0),
        );
        let mut body = Expr::select(x.clone().lt(c(-self.lambd)), x.add(c(self.bias)), inner);
        if cd != d {
            body = body.cast(d);
        }
        Ok(vec![cx.stage(out, body)])
    }
}

// ---------------------------------------------------------------------------------------------
// HannWindow, HammingWindow, BlackmanWindow
// ---------------------------------------------------------------------------------------------

/// The window functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WindowFn {
    Hann,
    Hamming,
    Blackman,
}

/// A window function of the length given by constant input 0, computed in f64 and converted to
/// `output_datatype`.
#[derive(Debug)]
struct Window {
    f: WindowFn,
    periodic: bool,
    out: DType,
}

impl Window {
    fn size(cx: &InferCx) -> OpResult<usize> {
        check_dtype(cx, 0, INDEX)?;
        scalar_dim(cx, 0, "size")
    }
}

impl Operator for Window {
    fn op_type(&self) -> &'static str {
        match self.f {
            WindowFn::Hann => "HannWindow",
            WindowFn::Hamming => "HammingWindow",
            WindowFn::Blackman => "BlackmanWindow",
        }
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 1, 1)?;
        Ok(vec![TensorType::new(self.out, vec![Self::size(cx)?])])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let size = Self::size(&icx(cx))?;
        let out = cx.output(0).clone();
        let f = DType::F64;
        // The denominator: the length (periodic) or one less (symmetric).
        let n1 = if self.periodic {
            size as f64
        } else {
            size as f64 - 1.0
        };
        let n = Expr::var(0).cast(f);
        let pi = std::f64::consts::PI;
        // cos(2 pi m n / N)
        let cos = |m: f64| n.clone().mul(Expr::c(f, m * pi)).div(Expr::c(f, n1)).cos();
        let v = match self.f {
            WindowFn::Hann => {
                let s = n.clone().mul(Expr::c(f, pi)).div(Expr::c(f, n1)).sin();
                s.clone().mul(s)
            }
            WindowFn::Hamming => {
                let alpha = 25.0 / 46.0;
                Expr::c(f, alpha).sub(cos(2.0).mul(Expr::c(f, 1.0 - alpha)))
            }
            WindowFn::Blackman => Expr::c(f, 0.42)
                .sub(cos(2.0).mul(Expr::c(f, 0.5)))
                .add(cos(4.0).mul(Expr::c(f, 0.08))),
        };
        let body = if self.out == f { v } else { v.cast(self.out) };
        Ok(vec![cx.stage(out, body)])
    }
}

fn window(cx: &OpCx, f: WindowFn) -> OpResult<Arc<dyn Operator>> {
    Ok(Arc::new(Window {
        f,
        periodic: cx.attrs.int("periodic", 1)? != 0,
        out: dtype_attr(
            cx.attrs.int("output_datatype", 1)?,
            "window output_datatype",
            NUMERIC_HALVES,
        )?,
    }))
}

// ---------------------------------------------------------------------------------------------
// GatherND
// ---------------------------------------------------------------------------------------------

/// `GatherND`: slices of `data` addressed by the last dimension of `indices`, after `batch_dims`
/// leading dimensions both share.
#[derive(Debug)]
struct GatherNd {
    batch_dims: i64,
}

impl GatherNd {
    /// `(b, m)`: the batch dimensions and the length of one index tuple.
    fn geometry(&self, cx: &InferCx) -> OpResult<(usize, usize)> {
        let x = cx.input(0)?;
        let ind = cx.input(1)?;
        let (r, q) = (x.rank(), ind.rank());
        if r == 0 || q == 0 {
            return Err(OpError::expected(
                "data and indices of rank >= 1",
                format!("{x} and {ind}"),
            ));
        }
        let b = self.batch_dims;
        if b < 0 || b as usize >= r.min(q) {
            return Err(OpError::expected(
                format!("batch_dims in [0, {})", r.min(q)),
                b,
            ));
        }
        let b = b as usize;
        let m = ind.shape[q - 1];
        if m < 1 || m > r - b {
            return Err(OpError::expected(
                format!(
                    "indices' last dimension in [1, {}] (data rank - batch_dims)",
                    r - b
                ),
                m,
            ));
        }
        if x.shape[..b] != ind.shape[..b] {
            return Err(OpError::expected(
                format!("indices with the batch dimensions of data ({x})"),
                ind,
            ));
        }
        if x.shape[b..b + m].contains(&0) && ind.numel() > 0 {
            return Err(OpError::expected(
                format!("indices into non-empty dimensions of data ({x})"),
                ind,
            ));
        }
        check_const_indices(cx, 1, &x.shape[b..b + m])?;
        Ok((b, m))
    }
}

impl Operator for GatherNd {
    fn op_type(&self) -> &'static str {
        "GatherND"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 2, 2)?;
        let d = check_dtype(cx, 0, ALL)?;
        check_dtype(cx, 1, INDEX)?;
        let (b, m) = self.geometry(cx)?;
        let ind = cx.input(1)?;
        let mut shape = ind.shape[..ind.rank() - 1].to_vec();
        shape.extend_from_slice(&cx.input(0)?.shape[b + m..]);
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (b, m) = self.geometry(&icx(cx))?;
        let x = cx.input(0).clone();
        let q = cx.input(1).rank();
        let pos = vars(q - 1);
        let mut idx = pos[..b].to_vec();
        for j in 0..m {
            let mut ii = pos.clone();
            ii.push(Expr::i(j as i64));
            let v = Expr::load(Src::Arg(1), ii).cast(DType::I64);
            idx.push(wrap_index(v, x.shape[b + j]));
        }
        idx.extend((0..x.rank() - b - m).map(|k| Expr::var(q - 1 + k)));
        let out = cx.output(0).clone();
        Ok(vec![cx.stage(out, Expr::load(Src::Arg(0), idx))])
    }
}

// ---------------------------------------------------------------------------------------------
// ScatterND, ScatterElements, Scatter
// ---------------------------------------------------------------------------------------------

/// How a scatter combines an update with the element it lands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reduction {
    /// Replace (the last update wins where indices repeat).
    None,
    Add,
    Mul,
    Max,
    Min,
}

fn reduction(cx: &OpCx) -> OpResult<Reduction> {
    Ok(match cx.attrs.string("reduction", "none")?.as_str() {
        "none" => Reduction::None,
        "add" => Reduction::Add,
        "mul" => Reduction::Mul,
        "max" => Reduction::Max,
        "min" => Reduction::Min,
        other => {
            return Err(OpError::expected(
                "reduction none, add, mul, max or min",
                other,
            ))
        }
    })
}

impl Reduction {
    /// The allowed data types.
    fn types(self) -> &'static [DType] {
        if self == Reduction::None {
            ALL
        } else {
            NUMERIC
        }
    }
}

/// The output of a scatter: every output element `Var(..)` reduces over the update positions
/// `RVar(..)` (of `extents`, flat position `flat`) those `hit` it, reading the update `upd`.
/// Without a reduction the last hit (largest `flat`) wins: its position is found first, then
/// its update read (`upd` with the reduction variables replaced by that position).
fn scatter(
    cx: &mut LowerCx,
    red: Reduction,
    extents: Vec<usize>,
    flat: Expr,
    hit: Expr,
    upd: Expr,
) -> Src {
    let out = cx.output(0).clone();
    let d = out.dtype;
    let data = Expr::load(Src::Arg(0), vars(out.rank()));
    let acc = Expr::Acc;
    let (op, fin) = match red {
        Reduction::None => {
            let ity = TensorType::new(DType::I64, out.shape.clone());
            let body = Expr::select(hit, flat, Expr::i(-1));
            let last = cx.reduce(ity, RedOp::Max, extents.clone(), body, None);
            let l = Expr::load(last, vars(out.rank()));
            let at = Expr::unflatten(&l.clone().max(Expr::i(0)), &extents);
            let upd_at = upd.rewrite(&mut |e| match e {
                Expr::RVar(k) => Some(at[*k as usize].clone()),
                _ => None,
            });
            let body = Expr::select(l.ge(Expr::i(0)), upd_at, data);
            return cx.stage(out, body);
        }
        Reduction::Add => (RedOp::Sum, data.add(acc)),
        Reduction::Mul => (RedOp::Prod, data.mul(acc)),
        Reduction::Max => (RedOp::Max, data.max(acc)),
        Reduction::Min => (RedOp::Min, data.min(acc)),
    };
    let body = Expr::select(hit, upd, Expr::Const(op.init(d)));
    cx.reduce(out, op, extents, body, Some(fin))
}

/// `ScatterND`: `data` with the slices addressed by the index tuples (the last dimension of
/// `indices`) replaced by, or combined with, `updates`.
#[derive(Debug)]
struct ScatterNd {
    red: Reduction,
}

impl Operator for ScatterNd {
    fn op_type(&self) -> &'static str {
        "ScatterND"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 3, 3)?;
        let d = check_dtype(cx, 0, self.red.types())?;
        check_dtype(cx, 1, INDEX)?;
        check_dtype(cx, 2, &[d])?;
        let (x, ind, upd) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
        let (r, q) = (x.rank(), ind.rank());
        if r == 0 || q == 0 {
            return Err(OpError::expected(
                "data and indices of rank >= 1",
                format!("{x} and {ind}"),
            ));
        }
        let m = ind.shape[q - 1];
        if m > r {
            return Err(OpError::expected(
                format!("indices' last dimension at most the data rank ({r})"),
                m,
            ));
        }
        let mut want = ind.shape[..q - 1].to_vec();
        want.extend_from_slice(&x.shape[m..]);
        if upd.shape != want {
            return Err(OpError::expected(
                format!("updates of shape {want:?}"),
                format!("{:?}", upd.shape),
            ));
        }
        check_const_indices(cx, 1, &x.shape[..m])?;
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let ind = cx.input(1).clone();
        let q = ind.rank();
        let m = ind.shape[q - 1];
        let pos_shape = ind.shape[..q - 1].to_vec();
        if pos_shape.contains(&0) {
            return Ok(vec![Src::Arg(0)]);
        }
        // A single index tuple still reduces over one point.
        let extents = if pos_shape.is_empty() {
            vec![1]
        } else {
            pos_shape.clone()
        };
        let rv: Vec<Expr> = (0..pos_shape.len()).map(Expr::rvar).collect();
        let flat = Expr::flatten(&rv, &pos_shape);
        let mut conds = Vec::new();
        for j in 0..m {
            let mut ii = rv.clone();
            ii.push(Expr::i(j as i64));
            let v = Expr::load(Src::Arg(1), ii).cast(DType::I64);
            conds.push(wrap_negative(v, x.shape[j]).eq(Expr::var(j)));
        }
        let hit = all(conds).unwrap_or(Expr::bool(true));
        let mut ui = rv;
        ui.extend((m..x.rank()).map(Expr::var));
        let upd = Expr::load(Src::Arg(2), ui);
        Ok(vec![scatter(cx, self.red, extents, flat, hit, upd)])
    }
}

/// `ScatterElements` (and `Scatter`, its deprecated name): `data` with the element of each
/// update, at its own position but for `indices` along `axis`, replaced or combined.
#[derive(Debug)]
struct ScatterElements {
    op: &'static str,
    axis: i64,
    red: Reduction,
}

impl Operator for ScatterElements {
    fn op_type(&self) -> &'static str {
        self.op
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 3, 3)?;
        let d = check_dtype(cx, 0, self.red.types())?;
        check_dtype(cx, 1, INDEX)?;
        check_dtype(cx, 2, &[d])?;
        let (x, ind, upd) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
        if x.rank() == 0 || ind.rank() != x.rank() {
            return Err(OpError::expected(
                format!("indices of the same rank >= 1 as data ({x})"),
                ind,
            ));
        }
        if upd.shape != ind.shape {
            return Err(OpError::expected(
                format!("updates of the shape of indices ({ind})"),
                upd,
            ));
        }
        let axis = norm_axis(self.axis, x.rank())?;
        for k in 0..x.rank() {
            if k != axis && ind.shape[k] > x.shape[k] {
                return Err(OpError::expected(
                    format!("indices no larger than data ({x}) outside axis {axis}"),
                    ind,
                ));
            }
        }
        check_const_indices(cx, 1, &[x.shape[axis]])?;
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let ind = cx.input(1).clone();
        let axis = norm_axis(self.axis, x.rank())?;
        if ind.numel() == 0 {
            return Ok(vec![Src::Arg(0)]);
        }
        // Updates that may land on output element `Var(..)`: the same position outside the
        // axis (clamped so that every load stays inside the indices; `valid` masks the rest),
        // any position along it.
        let mut ui = Vec::with_capacity(x.rank());
        let mut valid = Vec::new();
        for k in 0..x.rank() {
            if k == axis {
                ui.push(Expr::rvar(0));
            } else if ind.shape[k] < x.shape[k] {
                let n = ind.shape[k] as i64;
                valid.push(Expr::var(k).lt(Expr::i(n)));
                ui.push(Expr::var(k).min(Expr::i(n - 1)));
            } else {
                ui.push(Expr::var(k));
            }
        }
        let v = Expr::load(Src::Arg(1), ui.clone()).cast(DType::I64);
        valid.push(wrap_negative(v, x.shape[axis]).eq(Expr::var(axis)));
        let hit = all(valid).expect("one condition at least");
        let upd = Expr::load(Src::Arg(2), ui);
        let extents = vec![ind.shape[axis]];
        Ok(vec![scatter(
            cx,
            self.red,
            extents,
            Expr::rvar(0),
            hit,
            upd,
        )])
    }
}

// ---------------------------------------------------------------------------------------------
// ReverseSequence
// ---------------------------------------------------------------------------------------------

/// `ReverseSequence`: along `time_axis`, the first `sequence_lens[b]` elements of each batch
/// entry `b` reversed, the rest kept.
#[derive(Debug)]
struct ReverseSequence {
    batch_axis: i64,
    time_axis: i64,
}

impl ReverseSequence {
    /// The batch and time axes.
    fn axes(&self, cx: &InferCx) -> OpResult<(usize, usize)> {
        let x = cx.input(0)?;
        if x.rank() < 2 {
            return Err(OpError::expected("input 0 of rank >= 2", x));
        }
        let (b, t) = (self.batch_axis, self.time_axis);
        if !(0..=1).contains(&b) || !(0..=1).contains(&t) || b == t {
            return Err(OpError::expected(
                "batch_axis and time_axis 0 and 1, or 1 and 0",
                format!("{b} and {t}"),
            ));
        }
        Ok((b as usize, t as usize))
    }
}

impl Operator for ReverseSequence {
    fn op_type(&self) -> &'static str {
        "ReverseSequence"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 2, 2)?;
        check_dtype(cx, 0, ALL)?;
        check_dtype(cx, 1, INDEX)?;
        let (b, t) = self.axes(cx)?;
        let x = cx.input(0)?;
        let lens = cx.input(1)?;
        if lens.shape != [x.shape[b]] {
            return Err(OpError::expected(
                format!("sequence_lens of shape [{}] (the batch size)", x.shape[b]),
                lens,
            ));
        }
        if let Some(l) = cx.consts.get(1).and_then(|c| c.as_deref()) {
            let n = x.shape[t] as i64;
            if let Some(v) = l.to_i64().into_iter().find(|v| !(0..=n).contains(v)) {
                return Err(OpError::expected(
                    format!("sequence_lens in [0, {n}] (the time dimension)"),
                    v,
                ));
            }
        }
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (b, t) = self.axes(&icx(cx))?;
        let x = cx.input(0).clone();
        let n = x.shape[t] as i64;
        let len = Expr::load(Src::Arg(1), vec![Expr::var(b)])
            .cast(DType::I64)
            .max(Expr::i(0))
            .min(Expr::i(n));
        let i = Expr::var(t);
        let rev = len.clone().sub(Expr::i(1)).sub(i.clone());
        let mut idx = vars(x.rank());
        idx[t] = Expr::select(i.clone().lt(len), rev, i);
        let out = cx.output(0).clone();
        Ok(vec![cx.stage(out, Expr::load(Src::Arg(0), idx))])
    }
}

// ---------------------------------------------------------------------------------------------
// CenterCropPad
// ---------------------------------------------------------------------------------------------

/// `CenterCropPad`: each of `axes` cropped or zero-padded, centred, to the size that constant
/// input 1 gives.
#[derive(Debug)]
struct CenterCropPad {
    axes: Option<Vec<i64>>,
}

impl CenterCropPad {
    /// The output shape.
    fn shape(&self, cx: &InferCx) -> OpResult<Vec<usize>> {
        check_dtype(cx, 1, INDEX)?;
        let x = cx.input(0)?;
        let rank = x.rank();
        if cx.input(1)?.rank() != 1 {
            return Err(OpError::expected("shape (input 1) of rank 1", cx.input(1)?));
        }
        let sizes = cx
            .ints(1, "shape")?
            .ok_or_else(|| OpError::expected("input 1 (shape)", "none"))?;
        let axes: Vec<usize> = match &self.axes {
            Some(a) => {
                let mut out = Vec::with_capacity(a.len());
                for &v in a {
                    let v = norm_axis(v, rank)?;
                    if out.contains(&v) {
                        return Err(OpError::expected("distinct axes", format!("{a:?}")));
                    }
                    out.push(v);
                }
                out
            }
            None => (0..rank).collect(),
        };
        if sizes.len() != axes.len() {
            return Err(OpError::expected(
                format!("{} sizes in shape (one per axis)", axes.len()),
                sizes.len(),
            ));
        }
        let mut shape = x.shape.clone();
        for (&a, &s) in axes.iter().zip(&sizes) {
            shape[a] = dim_from_i64(s, "shape")?;
        }
        Ok(shape)
    }
}

impl Operator for CenterCropPad {
    fn op_type(&self) -> &'static str {
        "CenterCropPad"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 2, 2)?;
        let d = check_dtype(cx, 0, PLAIN)?;
        Ok(vec![TensorType::new(d, self.shape(cx)?)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let shape = self.shape(&icx(cx))?;
        let x = cx.input(0).clone();
        let mut idx = Vec::with_capacity(x.rank());
        let mut conds = Vec::new();
        for (k, (&n, &s)) in x.shape.iter().zip(&shape).enumerate() {
            let v = Expr::var(k);
            if s <= n {
                // Crop: the output starts (n - s) / 2 into the input.
                idx.push(v.add(Expr::i(((n - s) / 2) as i64)));
            } else {
                // Pad: the input starts (s - n) / 2 into the output.
                let o = v.sub(Expr::i(((s - n) / 2) as i64));
                conds.push(o.clone().ge(Expr::i(0)));
                conds.push(o.clone().lt(Expr::i(n as i64)));
                idx.push(o);
            }
        }
        let out = cx.output(0).clone();
        let body = guard(
            all(conds),
            Expr::load(Src::Arg(0), idx),
            Expr::c(x.dtype, 0.0),
        );
        Ok(vec![cx.stage(out, body)])
    }
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("BitCast", |cx| {
        let to = cx
            .attrs
            .opt_int("to")?
            .ok_or_else(|| OpError::expected("attribute `to`", "none"))?;
        Ok(Arc::new(BitCast {
            to: dtype_attr(to, "BitCast to", PLAIN)?,
        }))
    }),
    ("CumProd", |cx| {
        Ok(Arc::new(CumProd {
            exclusive: cx.attrs.int("exclusive", 0)? != 0,
            reverse: cx.attrs.int("reverse", 0)? != 0,
        }))
    }),
    ("OneHot", |cx| {
        Ok(Arc::new(OneHot {
            axis: cx.attrs.int("axis", -1)?,
        }))
    }),
    ("EyeLike", |cx| {
        let dtype = match cx.attrs.opt_int("dtype")? {
            Some(code) => Some(dtype_attr(code, "EyeLike dtype", PLAIN)?),
            None => None,
        };
        Ok(Arc::new(EyeLike {
            dtype,
            k: cx.attrs.int("k", 0)?,
        }))
    }),
    ("Shrink", |cx| {
        Ok(Arc::new(Shrink {
            bias: cx.attrs.float("bias", 0.0)? as f64,
            lambd: cx.attrs.float("lambd", 0.5)? as f64,
        }))
    }),
    ("HannWindow", |cx| window(cx, WindowFn::Hann)),
    ("HammingWindow", |cx| window(cx, WindowFn::Hamming)),
    ("BlackmanWindow", |cx| window(cx, WindowFn::Blackman)),
    ("GatherND", |cx| {
        Ok(Arc::new(GatherNd {
            batch_dims: cx.attrs.int("batch_dims", 0)?,
        }))
    }),
    ("ScatterND", |cx| {
        Ok(Arc::new(ScatterNd {
            red: reduction(cx)?,
        }))
    }),
    ("ScatterElements", |cx| {
        Ok(Arc::new(ScatterElements {
            op: "ScatterElements",
            axis: cx.attrs.int("axis", 0)?,
            red: reduction(cx)?,
        }))
    }),
    ("Scatter", |cx| {
        Ok(Arc::new(ScatterElements {
            op: "Scatter",
            axis: cx.attrs.int("axis", 0)?,
            red: Reduction::None,
        }))
    }),
    ("ReverseSequence", |cx| {
        Ok(Arc::new(ReverseSequence {
            batch_axis: cx.attrs.int("batch_axis", 1)?,
            time_axis: cx.attrs.int("time_axis", 0)?,
        }))
    }),
    ("CenterCropPad", |cx| {
        Ok(Arc::new(CenterCropPad {
            axes: cx.attrs.ints("axes")?,
        }))
    }),
];
