//! Operators of the `reduce` family: `Reduce*`, `ArgMax`/`ArgMin`, `Softmax`/`LogSoftmax`/`Hardmax`,
//! `TopK`, `CumSum` and `LpNormalization`.
use std::sync::Arc;

use super::{
    check_dtype, norm_axis, shape_numel, Constructor, InferCx, LowerCx, OpCx, OpKind, OpResult,
    Operator, FLOATS, NUMERIC,
};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src, UnOp};
use crate::tensor::{DType, TensorType};

/// Numeric types and bool (ReduceMax / ReduceMin from opset 20).
const NUMERIC_BOOL: &[DType] = &crate::tensor::ALL_DTYPES;

/// Normalised, sorted, distinct axes of a tensor of rank `rank`.
fn norm_axes(axes: &[i64], rank: usize) -> OpResult<Vec<usize>> {
    let mut v = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = norm_axis(a, rank)?;
        if n >= rank {
            return Err(OpError::expected(
                format!("axes in [{}, {})", -(rank as i64), rank),
                format!("{axes:?}"),
            ));
        }
        v.push(n);
    }
    v.sort_unstable();
    if v.windows(2).any(|w| w[0] == w[1]) {
        return Err(OpError::expected("distinct axes", format!("{axes:?}")));
    }
    Ok(v)
}

/// One axis, normalised, of a tensor of rank `rank` (at least 1).
fn one_axis(axis: i64, rank: usize) -> OpResult<usize> {
    if rank == 0 {
        return Err(OpError::expected("an input of rank >= 1", "a scalar"));
    }
    norm_axis(axis, rank)
}

/// `shape` with `axes` reduced: kept as 1 or dropped.
fn reduced_shape(shape: &[usize], axes: &[usize], keep: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(d, &n)| {
            if !axes.contains(&d) {
                Some(n)
            } else if keep {
                Some(1)
            } else {
                None
            }
        })
        .collect()
}

/// The input index read for output element `Var(..)` of a tensor reduced over `axes` (kept or
/// dropped), with reduced axis `axes[j]` at `at[j]`.
fn in_index(rank: usize, axes: &[usize], keep: bool, at: &[Expr]) -> Vec<Expr> {
    let mut k = 0;
    (0..rank)
        .map(|d| match axes.iter().position(|&a| a == d) {
            Some(j) => {
                if keep {
                    k += 1;
                }
                at[j].clone()
            }
            None => {
                k += 1;
                Expr::var(k - 1)
            }
        })
        .collect()
}

/// The reduction variables `RVar(0..n)`.
fn rvars(n: usize) -> Vec<Expr> {
    (0..n).map(Expr::rvar).collect()
}

/// The output variables `Var(0..n)`.
fn vars(n: usize) -> Vec<Expr> {
    (0..n).map(Expr::var).collect()
}

/// The index into a tensor reduced over `axes` with kept dims, read at element `Var(..)` of the
/// unreduced shape.
fn kept_index(rank: usize, axes: &[usize]) -> Vec<Expr> {
    (0..rank)
        .map(|d| {
            if axes.contains(&d) {
                Expr::i(0)
            } else {
                Expr::var(d)
            }
        })
        .collect()
}

/// `f(e)` computed in floating point: integers go through f64 and back.
fn in_float(e: Expr, d: DType, f: impl Fn(Expr) -> Expr) -> Expr {
    if d.is_float() {
        f(e)
    } else {
        f(e.cast(DType::F64)).cast(d)
    }
}

/// True where `x` is NaN (false for integers).
fn is_nan(x: Expr, d: DType) -> Expr {
    if d.is_float() {
        x.is_nan()
    } else {
        Expr::bool(false)
    }
}

/// True where `x` is +-infinity.
fn is_inf(x: Expr) -> Expr {
    Expr::Un(UnOp::IsPosInf, Box::new(x.clone())).or(Expr::Un(UnOp::IsNegInf, Box::new(x)))
}

/// `a > b` with NaN above everything (and NaN "equal" to NaN in [`eq_nan`]).
fn gt_nan(a: Expr, b: Expr, d: DType) -> Expr {
    let gt = a.clone().gt(b.clone());
    if d.is_float() {
        gt.or(a.is_nan().and(b.is_nan().not()))
    } else {
        gt
    }
}

/// `a == b`, with NaN equal to NaN.
fn eq_nan(a: Expr, b: Expr, d: DType) -> Expr {
    let eq = a.clone().eq(b.clone());
    if d.is_float() {
        eq.or(a.is_nan().and(b.is_nan()))
    } else {
        eq
    }
}

// ---------------------------------------------------------------------------------------------
// Reduce*
// ---------------------------------------------------------------------------------------------

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Red {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    SumSquare,
    LogSum,
    LogSumExp,
}

/// `Reduce*`: reduces over `axes` (attribute in old opsets, input 1 in new ones).
#[derive(Debug)]
struct Reduce {
    red: Red,
    /// The `axes` attribute (old opsets).
    axes: Option<Vec<i64>>,
    keepdims: bool,
    noop_with_empty_axes: bool,
}

impl Reduce {
    /// The reduced axes, or `None` when the operator is the identity (empty axes with
    /// `noop_with_empty_axes`).
    fn axes(&self, cx: &InferCx) -> OpResult<Option<Vec<usize>>> {
        let rank = cx.input(0)?.rank();
        let given = match cx.ints(1, "axes")? {
            Some(a) => Some(a),
            None => self.axes.clone(),
        };
        match given {
            Some(a) if !a.is_empty() => Ok(Some(norm_axes(&a, rank)?)),
            _ if self.noop_with_empty_axes => Ok(None),
            _ => Ok(Some((0..rank).collect())),
        }
    }
}

impl Operator for Reduce {
    fn op_type(&self) -> &'static str {
        match self.red {
            Red::Sum => "ReduceSum",
            Red::Mean => "ReduceMean",
            Red::Max => "ReduceMax",
            Red::Min => "ReduceMin",
            Red::Prod => "ReduceProd",
            Red::L1 => "ReduceL1",
            Red::L2 => "ReduceL2",
            Red::SumSquare => "ReduceSumSquare",
            Red::LogSum => "ReduceLogSum",
            Red::LogSumExp => "ReduceLogSumExp",
        }
    }

    fn kind(&self) -> OpKind {
        OpKind::Reduction
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let types = if matches!(self.red, Red::Max | Red::Min) {
            NUMERIC_BOOL
        } else {
            NUMERIC
        };
        let d = check_dtype(cx, 0, types)?;
        if cx.has(1) {
            check_dtype(cx, 1, &[DType::I64, DType::I32])?;
        }
        let x = cx.input(0)?;
        Ok(vec![match self.axes(cx)? {
            None => x.clone(),
            Some(axes) => TensorType::new(d, reduced_shape(&x.shape, &axes, self.keepdims)),
        }])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let icx = InferCx {
            inputs: cx.inputs,
            consts: cx.consts,
        };
        let Some(axes) = self.axes(&icx)? else {
            return Ok(vec![Src::Arg(0)]);
        };
        let xt = cx.input(0).clone();
        let out = cx.output(0).clone();
        let d = xt.dtype;
        let rank = xt.rank();
        let extents: Vec<usize> = axes.iter().map(|&a| xt.shape[a]).collect();
        // In f64: exact for any tensor within the size limits, and no overflow on an empty one.
        let n: f64 = extents.iter().map(|&e| e as f64).product();
        let x = Expr::load(
            Src::Arg(0),
            in_index(rank, &axes, self.keepdims, &rvars(axes.len())),
        );
        let (op, body, fin) = match self.red {
            Red::Sum => (RedOp::Sum, x, None),
            Red::Mean => (RedOp::Sum, x, Some(Expr::Acc.div(Expr::c(d, n)))),
            Red::Max => (RedOp::Max, x, None),
            Red::Min => (RedOp::Min, x, None),
            Red::Prod => (RedOp::Prod, x, None),
            Red::L1 => (RedOp::Sum, x.abs(), None),
            Red::L2 => (
                RedOp::Sum,
                x.clone().mul(x),
                Some(in_float(Expr::Acc, d, Expr::sqrt)),
            ),
            Red::SumSquare => (RedOp::Sum, x.clone().mul(x), None),
            Red::LogSum => (RedOp::Sum, x, Some(in_float(Expr::Acc, d, Expr::log))),
            Red::LogSumExp => return Ok(vec![log_sum_exp(cx, &extents, x, out)]),
        };
        Ok(vec![cx.reduce(out, op, extents, body, fin)])
    }
}

/// `m + log(sum(exp(x - m)))` with `m` the maximum (0 where it is infinite).
fn log_sum_exp(cx: &mut LowerCx, extents: &[usize], x: Expr, out: TensorType) -> Src {
    let d = out.dtype;
    let cd = if d.is_float() { d } else { DType::F64 };
    let x = x.cast(cd);
    let ct = TensorType::new(cd, out.shape.clone());
    let m = cx.reduce(ct.clone(), RedOp::Max, extents.to_vec(), x.clone(), None);
    let m = Expr::load(m, vars(out.rank()));
    let safe = Expr::select(is_inf(m.clone()), Expr::c(cd, 0.0), m);
    let s = cx.reduce(
        ct,
        RedOp::Sum,
        extents.to_vec(),
        x.sub(safe.clone()).exp(),
        Some(Expr::Acc.log().add(safe)),
    );
    if cd == d {
        s
    } else {
        let body = Expr::load(s, vars(out.rank())).cast(d);
        cx.stage(out, body)
    }
}

fn reduce(cx: &OpCx, red: Red) -> OpResult<Arc<dyn Operator>> {
    Ok(Arc::new(Reduce {
        red,
        axes: cx.attrs.ints("axes")?,
        keepdims: cx.attrs.int("keepdims", 1)? != 0,
        noop_with_empty_axes: cx.attrs.int("noop_with_empty_axes", 0)? != 0,
    }))
}

// ---------------------------------------------------------------------------------------------
// ArgMax / ArgMin
// ---------------------------------------------------------------------------------------------

/// `ArgMax` / `ArgMin` along one axis.
#[derive(Debug)]
struct ArgReduce {
    max: bool,
    axis: i64,
    keepdims: bool,
    select_last_index: bool,
}

impl Operator for ArgReduce {
    fn op_type(&self) -> &'static str {
        if self.max {
            "ArgMax"
        } else {
            "ArgMin"
        }
    }

    fn kind(&self) -> OpKind {
        OpKind::Reduction
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, NUMERIC)?;
        let x = cx.input(0)?;
        let a = one_axis(self.axis, x.rank())?;
        Ok(vec![TensorType::new(
            DType::I64,
            reduced_shape(&x.shape, &[a], self.keepdims),
        )])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let xt = cx.input(0).clone();
        let out = cx.output(0).clone();
        let d = xt.dtype;
        let a = one_axis(self.axis, xt.rank())?;
        let n = xt.shape[a];
        let x = Expr::load(
            Src::Arg(0),
            in_index(xt.rank(), &[a], self.keepdims, &[Expr::rvar(0)]),
        );
        let (pick, none) = if self.select_last_index {
            (RedOp::Max, -1)
        } else {
            (RedOp::Min, n as i64)
        };
        let ext = if self.max { RedOp::Max } else { RedOp::Min };
        let m = cx.reduce(
            TensorType::new(d, out.shape.clone()),
            ext,
            vec![n],
            x.clone(),
            None,
        );
        let m = Expr::load(m, vars(out.rank()));
        // The extreme propagates NaN: then the first (last) NaN is the answer.
        let hit = x.clone().eq(m).or(is_nan(x, d));
        let body = Expr::select(hit, Expr::rvar(0), Expr::i(none));
        Ok(vec![cx.reduce(out, pick, vec![n], body, None)])
    }
}

fn arg_reduce(cx: &OpCx, max: bool) -> OpResult<Arc<dyn Operator>> {
    Ok(Arc::new(ArgReduce {
        max,
        axis: cx.attrs.int("axis", 0)?,
        keepdims: cx.attrs.int("keepdims", 1)? != 0,
        select_last_index: cx.attrs.int("select_last_index", 0)? != 0,
    }))
}

// ---------------------------------------------------------------------------------------------
// Softmax / LogSoftmax / Hardmax
// ---------------------------------------------------------------------------------------------

/// Which normalisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Soft {
    Softmax,
    LogSoftmax,
    Hardmax,
}

/// `Softmax`, `LogSoftmax`, `Hardmax`: over one axis (opset >= 13) or, with `coerce`, over the
/// flattened dims from `axis` on (the input coerced to 2D).
#[derive(Debug)]
struct Softmax {
    soft: Soft,
    axis: i64,
    coerce: bool,
}

impl Softmax {
    fn axes(&self, rank: usize) -> OpResult<Vec<usize>> {
        let a = one_axis(self.axis, rank)?;
        Ok(if self.coerce {
            (a..rank).collect()
        } else {
            vec![a]
        })
    }
}

impl Operator for Softmax {
    fn op_type(&self) -> &'static str {
        match self.soft {
            Soft::Softmax => "Softmax",
            Soft::LogSoftmax => "LogSoftmax",
            Soft::Hardmax => "Hardmax",
        }
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, FLOATS)?;
        let x = cx.input(0)?;
        self.axes(x.rank())?;
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let xt = cx.input(0).clone();
        let d = xt.dtype;
        let rank = xt.rank();
        let axes = self.axes(rank)?;
        let extents: Vec<usize> = axes.iter().map(|&a| xt.shape[a]).collect();
        let kshape = reduced_shape(&xt.shape, &axes, true);
        let kt = TensorType::new(d, kshape.clone());
        let kept = kept_index(rank, &axes);
        // x at the reduction point, from an element of the kept-dims shape.
        let xr = Expr::load(Src::Arg(0), in_index(rank, &axes, true, &rvars(axes.len())));
        let xo = Expr::load(Src::Arg(0), vars(rank));
        let m = cx.reduce(kt.clone(), RedOp::Max, extents.clone(), xr.clone(), None);
        let mk = Expr::load(m, kept.clone());
        let body = match self.soft {
            Soft::Softmax => {
                // exp(x - max) once, in memory (its two readers keep it from being inlined):
                // the sum and the normalisation read it instead of computing it again. The
                // reciprocal of the sum once per row, a product per element: a vector division
                // costs as much as the exponential (as ONNX Runtime's MLAS does both).
                let e = cx.stage(xt.clone(), xo.sub(mk).exp_nonpos());
                let er = Expr::load(e, in_index(rank, &axes, true, &rvars(axes.len())));
                let recip = Some(Expr::c(d, 1.0).div(Expr::Acc));
                let s = cx.reduce(kt, RedOp::Sum, extents, er, recip);
                Expr::load(e, vars(rank)).mul(Expr::load(s, kept))
            }
            Soft::LogSoftmax => {
                let s = cx.reduce(
                    kt,
                    RedOp::Sum,
                    extents,
                    xr.sub(mk.clone()).exp_nonpos(),
                    Some(Expr::Acc.log()),
                );
                xo.sub(mk).sub(Expr::load(s, kept))
            }
            Soft::Hardmax => {
                // The first position (flat over the reduced dims) holding the maximum.
                let n = shape_numel(&extents, "the size of the normalised dimensions")?;
                let hit = xr.clone().eq(mk.clone()).or(is_nan(xr, d));
                let flat_r = Expr::flatten(&rvars(axes.len()), &extents);
                let first = cx.reduce(
                    TensorType::new(DType::I64, kshape),
                    RedOp::Min,
                    extents.clone(),
                    Expr::select(hit, flat_r, Expr::i(n as i64)),
                    None,
                );
                let here: Vec<Expr> = axes.iter().map(|&a| Expr::var(a)).collect();
                let flat_o = Expr::flatten(&here, &extents);
                Expr::select(
                    flat_o.eq(Expr::load(first, kept)),
                    Expr::c(d, 1.0),
                    Expr::c(d, 0.0),
                )
            }
        };
        Ok(vec![cx.stage(xt, body)])
    }
}

fn softmax(cx: &OpCx, soft: Soft) -> OpResult<Arc<dyn Operator>> {
    let coerce = cx.opset < 13;
    Ok(Arc::new(Softmax {
        soft,
        axis: cx.attrs.int("axis", if coerce { 1 } else { -1 })?,
        coerce,
    }))
}

// ---------------------------------------------------------------------------------------------
// TopK
// ---------------------------------------------------------------------------------------------

/// `TopK`: the `k` largest (smallest) elements along `axis`, sorted, ties by lower index.
#[derive(Debug)]
struct TopK {
    /// `k` as an attribute (opset < 10); input 1 otherwise.
    k: Option<i64>,
    axis: i64,
    largest: bool,
}

impl TopK {
    fn k(&self, cx: &InferCx) -> OpResult<i64> {
        if let Some(k) = self.k {
            return Ok(k);
        }
        check_dtype(cx, 1, &[DType::I64, DType::I32])?;
        match cx.ints(1, "k")?.as_deref() {
            Some(&[k]) => Ok(k),
            Some(v) => Err(OpError::expected("k with one element", format!("{v:?}"))),
            None => Err(OpError::expected("input 1 (k)", "none")),
        }
    }
}

/// The most elements [`TopK`] selects one at a time (two reductions over the axis each);
/// beyond it, or when `k` is half the axis, every element's rank is counted (`n^2` work).
const SELECT_K: usize = 16;

impl TopK {
    /// The `k` elements one at a time along axis `a`: each is the first, in the output's order,
    /// of the elements after the one chosen before it. The order is that of an integer key per
    /// element (the value itself for integers; for floats the bits made monotonic, every NaN
    /// the greatest and both zeros equal, as the ranking's comparisons take them), then the
    /// index: element `j` follows `(key, i)` when its key is past `key` or equal with `j > i`.
    fn select_iteratively(&self, cx: &mut LowerCx, a: usize, k: usize) -> Vec<Src> {
        let xt = cx.input(0).clone();
        let d = xt.dtype;
        let rank = xt.rank();
        let n = xt.shape[a];
        let at = |e: Expr| -> Vec<Expr> {
            let mut v = vars(rank);
            v[a] = e;
            v
        };
        let x = Expr::load(Src::Arg(0), vars(rank));
        let key = match d {
            DType::F32 | DType::F64 => {
                let (bits, mask) = if d == DType::F32 {
                    (DType::I32, i64::from(i32::MAX))
                } else {
                    (DType::I64, i64::MAX)
                };
                let b = Expr::Un(UnOp::BitCast(bits), Box::new(x.clone())).cast(DType::I64);
                let ordered =
                    Expr::select(b.clone().ge(Expr::i(0)), b.clone(), b.bitxor(Expr::i(mask)));
                let ordered = Expr::select(x.clone().eq(Expr::c(d, 0.0)), Expr::i(0), ordered);
                Expr::select(x.is_nan(), Expr::i(i64::MAX), ordered)
            }
            _ => x.cast(DType::I64),
        };
        let keys = cx.stage(TensorType::new(DType::I64, xt.shape.clone()), key);
        let mut one = xt.shape.clone();
        one[a] = 1;
        let kj = Expr::load(keys, at(Expr::rvar(0)));
        let (red, none) = if self.largest {
            (RedOp::Max, i64::MIN)
        } else {
            (RedOp::Min, i64::MAX)
        };
        let mut chosen: Vec<Src> = Vec::with_capacity(k);
        let mut prev: Option<(Src, Src)> = None;
        for _ in 0..k {
            let candidate = match prev {
                None => Expr::bool(true),
                Some((pk, pi)) => {
                    let (pk, pi) = (
                        Expr::load(pk, at(Expr::i(0))),
                        Expr::load(pi, at(Expr::i(0))),
                    );
                    let past = if self.largest {
                        kj.clone().lt(pk.clone())
                    } else {
                        kj.clone().gt(pk.clone())
                    };
                    past.or(kj.clone().eq(pk).and(Expr::rvar(0).gt(pi)))
                }
            };
            let best = cx.reduce(
                TensorType::new(DType::I64, one.clone()),
                red,
                vec![n],
                Expr::select(candidate.clone(), kj.clone(), Expr::i(none)),
                None,
            );
            let hit = candidate.and(kj.clone().eq(Expr::load(best, at(Expr::i(0)))));
            let idx = cx.reduce(
                TensorType::new(DType::I64, one.clone()),
                RedOp::Min,
                vec![n],
                Expr::select(hit, Expr::rvar(0), Expr::i(n as i64 - 1)),
                None,
            );
            chosen.push(idx);
            prev = Some((best, idx));
        }
        // Output position p along the axis takes the p-th choice.
        let mut index = Expr::load(chosen[k - 1], at(Expr::i(0)));
        for p in (0..k - 1).rev() {
            index = Expr::select(
                Expr::var(a).eq(Expr::i(p as i64)),
                Expr::load(chosen[p], at(Expr::i(0))),
                index,
            );
        }
        let vt = cx.output(0).clone();
        let it = TensorType::new(DType::I64, vt.shape.clone());
        let idx = cx.stage(it, index);
        let vals = cx.stage(vt, Expr::load(Src::Arg(0), at(Expr::load(idx, vars(rank)))));
        let mut outs = vec![vals, idx];
        outs.truncate(cx.outputs.len());
        outs
    }
}

impl Operator for TopK {
    fn op_type(&self) -> &'static str {
        "TopK"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, NUMERIC)?;
        let x = cx.input(0)?;
        let a = one_axis(self.axis, x.rank())?;
        let k = self.k(cx)?;
        if k < 0 || k as usize > x.shape[a] {
            return Err(OpError::expected(
                format!("k in [0, {}] (the axis length)", x.shape[a]),
                k,
            ));
        }
        let mut shape = x.shape.clone();
        shape[a] = k as usize;
        Ok(vec![
            TensorType::new(d, shape.clone()),
            TensorType::new(DType::I64, shape),
        ])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let xt = cx.input(0).clone();
        let d = xt.dtype;
        let rank = xt.rank();
        let a = one_axis(self.axis, rank)?;
        let n = xt.shape[a];
        let at = |e: Expr| -> Vec<Expr> {
            let mut v = vars(rank);
            v[a] = e;
            v
        };
        let k = cx.output(0).shape[a];
        if k > 0 && k <= SELECT_K && 2 * k < n {
            return Ok(self.select_iteratively(cx, a, k));
        }
        // rank(i) = #{j : x_j comes before x_i}.
        let xi = Expr::load(Src::Arg(0), vars(rank));
        let xj = Expr::load(Src::Arg(0), at(Expr::rvar(0)));
        let before = if self.largest {
            gt_nan(xj.clone(), xi.clone(), d)
        } else {
            gt_nan(xi.clone(), xj.clone(), d)
        };
        let tie = eq_nan(xj, xi, d).and(Expr::rvar(0).lt(Expr::var(a)));
        let pos = cx.reduce(
            TensorType::new(DType::I64, xt.shape.clone()),
            RedOp::Sum,
            vec![n],
            before.or(tie).cast(DType::I64),
            None,
        );
        // Output position p picks the element of rank p. (A node may leave out the Indices
        // output; the stage is then internal.)
        let vt = cx.output(0).clone();
        let it = TensorType::new(DType::I64, vt.shape.clone());
        let hit = Expr::load(pos, at(Expr::rvar(0))).eq(Expr::var(a));
        let idx = cx.reduce(
            it,
            RedOp::Max,
            vec![n],
            Expr::select(hit, Expr::rvar(0), Expr::i(-1)),
            None,
        );
        let i = Expr::load(idx, vars(rank)).max(Expr::i(0));
        let vals = cx.stage(vt, Expr::load(Src::Arg(0), at(i)));
        let mut outs = vec![vals, idx];
        outs.truncate(cx.outputs.len());
        Ok(outs)
    }
}

// ---------------------------------------------------------------------------------------------
// CumSum
// ---------------------------------------------------------------------------------------------

/// `CumSum` along the axis given by constant input 1.
#[derive(Debug)]
struct CumSum {
    exclusive: bool,
    reverse: bool,
}

fn cumsum_axis(cx: &InferCx) -> OpResult<usize> {
    check_dtype(cx, 1, &[DType::I64, DType::I32])?;
    let x = cx.input(0)?;
    match cx.ints(1, "axis")?.as_deref() {
        Some(&[a]) => one_axis(a, x.rank()),
        Some(v) => Err(OpError::expected("a scalar axis", format!("{v:?}"))),
        None => Err(OpError::expected("input 1 (axis)", "none")),
    }
}

impl Operator for CumSum {
    fn op_type(&self) -> &'static str {
        "CumSum"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, NUMERIC)?;
        cumsum_axis(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let icx = InferCx {
            inputs: cx.inputs,
            consts: cx.consts,
        };
        let a = cumsum_axis(&icx)?;
        Ok(vec![cumulative(
            cx,
            a,
            self.exclusive,
            self.reverse,
            RedOp::Sum,
            0.0,
        )])
    }
}

/// The cumulative `op` of input 0 along axis `a` (`CumSum`, `CumProd`): each output element
/// reduces the input elements before it (after it when `reverse`; itself excluded when
/// `exclusive`), the others counting as `identity`.
pub(super) fn cumulative(
    cx: &mut LowerCx,
    a: usize,
    exclusive: bool,
    reverse: bool,
    op: RedOp,
    identity: f64,
) -> Src {
    let xt = cx.input(0).clone();
    let mut idx = vars(xt.rank());
    idx[a] = Expr::rvar(0);
    let (j, i) = (Expr::rvar(0), Expr::var(a));
    let take = match (reverse, exclusive) {
        (false, false) => j.le(i),
        (false, true) => j.lt(i),
        (true, false) => j.ge(i),
        (true, true) => j.gt(i),
    };
    let other = Expr::c(xt.dtype, identity);
    let body = Expr::select(take, Expr::load(Src::Arg(0), idx), other);
    let n = xt.shape[a];
    cx.reduce(xt, op, vec![n], body, None)
}

// ---------------------------------------------------------------------------------------------
// LpNormalization
// ---------------------------------------------------------------------------------------------

/// `LpNormalization`: `x / ||x||_p` along `axis` (0 where the norm is 0).
#[derive(Debug)]
struct LpNorm {
    axis: i64,
    p: i64,
}

impl Operator for LpNorm {
    fn op_type(&self) -> &'static str {
        "LpNormalization"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, FLOATS)?;
        let x = cx.input(0)?;
        one_axis(self.axis, x.rank())?;
        if self.p != 1 && self.p != 2 {
            return Err(OpError::expected("p = 1 or 2", self.p));
        }
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let xt = cx.input(0).clone();
        let d = xt.dtype;
        let rank = xt.rank();
        let a = one_axis(self.axis, rank)?;
        let xr = Expr::load(Src::Arg(0), in_index(rank, &[a], true, &[Expr::rvar(0)]));
        let (body, fin) = if self.p == 1 {
            (xr.abs(), None)
        } else {
            (xr.clone().mul(xr), Some(Expr::Acc.sqrt()))
        };
        let norm = cx.reduce(
            TensorType::new(d, reduced_shape(&xt.shape, &[a], true)),
            RedOp::Sum,
            vec![xt.shape[a]],
            body,
            fin,
        );
        let nk = Expr::load(norm, kept_index(rank, &[a]));
        let x = Expr::load(Src::Arg(0), vars(rank));
        let body = Expr::select(nk.clone().eq(Expr::c(d, 0.0)), Expr::c(d, 0.0), x.div(nk));
        Ok(vec![cx.stage(xt, body)])
    }
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("ReduceSum", |cx| reduce(cx, Red::Sum)),
    ("ReduceMean", |cx| reduce(cx, Red::Mean)),
    ("ReduceMax", |cx| reduce(cx, Red::Max)),
    ("ReduceMin", |cx| reduce(cx, Red::Min)),
    ("ReduceProd", |cx| reduce(cx, Red::Prod)),
    ("ReduceL1", |cx| reduce(cx, Red::L1)),
    ("ReduceL2", |cx| reduce(cx, Red::L2)),
    ("ReduceSumSquare", |cx| reduce(cx, Red::SumSquare)),
    ("ReduceLogSum", |cx| reduce(cx, Red::LogSum)),
    ("ReduceLogSumExp", |cx| reduce(cx, Red::LogSumExp)),
    ("ArgMax", |cx| arg_reduce(cx, true)),
    ("ArgMin", |cx| arg_reduce(cx, false)),
    ("Softmax", |cx| softmax(cx, Soft::Softmax)),
    ("LogSoftmax", |cx| softmax(cx, Soft::LogSoftmax)),
    ("Hardmax", |cx| softmax(cx, Soft::Hardmax)),
    ("TopK", |cx| {
        Ok(Arc::new(TopK {
            k: if cx.opset < 10 {
                Some(cx.attrs.int("k", -1)?)
            } else {
                None
            },
            axis: cx.attrs.int("axis", -1)?,
            largest: cx.attrs.int("largest", 1)? != 0,
        }))
    }),
    ("CumSum", |cx| {
        Ok(Arc::new(CumSum {
            exclusive: cx.attrs.int("exclusive", 0)? != 0,
            reverse: cx.attrs.int("reverse", 0)? != 0,
        }))
    }),
    ("LpNormalization", |cx| {
        Ok(Arc::new(LpNorm {
            axis: cx.attrs.int("axis", -1)?,
            p: cx.attrs.int("p", 2)?,
        }))
    }),
];

#[cfg(test)]
mod tests {
    use super::super::testing;
    use crate::ops::Attr;
    use crate::tensor::{DType, Tensor};

    /// TopK of `x` ([rows, n], axis 1) by the definition: indices sorted by "comes before"
    /// (NaN the greatest, equal values by lower index), the first `k`.
    fn reference(x: &[f64], rows: usize, n: usize, k: usize, largest: bool) -> Vec<i64> {
        let gt = |a: f64, b: f64| a > b || (a.is_nan() && !b.is_nan());
        let mut out = Vec::new();
        for r in 0..rows {
            let row = &x[r * n..(r + 1) * n];
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_by(|&i, &j| {
                let (a, b) = (row[i], row[j]);
                let before = if largest { gt(a, b) } else { gt(b, a) };
                let after = if largest { gt(b, a) } else { gt(a, b) };
                if before {
                    std::cmp::Ordering::Less
                } else if after {
                    std::cmp::Ordering::Greater
                } else {
                    i.cmp(&j)
                }
            });
            out.extend(idx[..k].iter().map(|&i| i as i64));
        }
        out
    }

    /// Small `k` selects one element at a time: the same indices and values as the definition,
    /// with NaNs, infinities, both zeros and repeated values, largest and smallest, on floats
    /// and integers.
    #[test]
    fn top_k_one_at_a_time_matches_the_definition() {
        let (rows, n, k) = (3, 40, 7);
        let specials = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            2.5,
            2.5,
            -1.0,
        ];
        let mut x = Vec::new();
        let mut s: u64 = 17;
        for i in 0..rows * n {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = ((s >> 40) % 9) as f64 - 4.0;
            x.push(if i % 5 == 0 {
                specials[(i / 5) % specials.len()]
            } else {
                v
            });
        }
        for dtype in [DType::F32, DType::F64, DType::I64] {
            let xs: Vec<f64> = match dtype {
                DType::I64 => x
                    .iter()
                    .map(|v| if v.is_finite() { v.trunc() } else { 7.0 })
                    .collect(),
                _ => x.clone(),
            };
            for largest in [true, false] {
                let op =
                    testing::build("TopK", &[("largest", Attr::Int(largest as i64))], 11, 2, 2)
                        .unwrap();
                let args = [
                    Some(Tensor::from_f64_as(dtype, &[rows, n], &xs)),
                    Some(Tensor::from_i64(&[1], &[k as i64])),
                ];
                let out = testing::eval(op.as_ref(), &args, &[1]).unwrap();
                let want = reference(&xs, rows, n, k, largest);
                let got: Vec<i64> = out[1].to_f64().iter().map(|&v| v as i64).collect();
                assert_eq!(got, want, "{dtype:?} largest={largest}");
                for (r, (&i, v)) in want.iter().zip(out[0].to_f64()).enumerate() {
                    let w = xs[(r / k) * n + i as usize];
                    assert!(
                        v == w || (v.is_nan() && w.is_nan()),
                        "{dtype:?} value {v} != {w}"
                    );
                }
            }
        }
    }
}
