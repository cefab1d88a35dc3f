//! Operators of the `signal` family: `DFT`, `STFT`, `Det` and `TensorScatter`.
//!
//! The transforms are direct sums over a static length (no FFT): one reduction stage per output,
//! with the twiddle factors computed once per run into a small table (a materialised stage), so
//! that the reduction's inner loop is a multiply-add. `Det` is Gaussian elimination with partial
//! pivoting, unrolled over the (static) matrix size.
use std::sync::Arc;

use super::extra::{icx, scalar_axis, scalar_dim, vars, INDEX};
use super::{
    check_arity as arity, check_dtype, norm_axis, Constructor, InferCx, LowerCx, OpCx, OpKind,
    OpResult, Operator, ALL, FLOATS,
};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src};
use crate::tensor::{DType, TensorType};

// ---------------------------------------------------------------------------------------------
// DFT and STFT
// ---------------------------------------------------------------------------------------------

/// The sizes of one discrete Fourier transform along an axis.
#[derive(Clone, Copy, Debug)]
struct Transform {
    /// The transform's length `n` (the input is cut or zero-padded to it).
    n: usize,
    /// How many input samples the sum runs over.
    terms: usize,
    /// The output length along the axis.
    out_len: usize,
    /// The inverse transform (`e^{+i...}`, scaled by `1/n`).
    inverse: bool,
    /// An inverse transform of a one-sided (Hermitian) spectrum to a real signal.
    to_real: bool,
}

impl Transform {
    fn new(len_in: usize, n: usize, inverse: bool, onesided: bool) -> Transform {
        let to_real = inverse && onesided;
        Transform {
            n,
            terms: len_in.min(if to_real { n / 2 + 1 } else { n }),
            out_len: if onesided && !inverse { n / 2 + 1 } else { n },
            inverse,
            to_real,
        }
    }

    /// The twiddle tables `[out_len, terms]`: `(cos, sin)` of `2 pi k j / n`, with the inverse's
    /// `1/n` and the one-sided inverse's weights (a bin stands for itself and its mirror image)
    /// folded in; materialised so that the sums read them instead of calling `cos`/`sin`.
    fn tables(&self, cx: &mut LowerCx, d: DType) -> (Src, Src) {
        let n = self.n as i64;
        let m = Expr::var(0).mul(Expr::var(1)).modulo(Expr::i(n));
        let theta = m.cast(DType::F64).mul(Expr::c(
            DType::F64,
            2.0 * std::f64::consts::PI / self.n as f64,
        ));
        let mut scale = Expr::c(
            DType::F64,
            if self.inverse {
                1.0 / self.n as f64
            } else {
                1.0
            },
        );
        if self.to_real {
            let j = Expr::var(1);
            let mut own = j.clone().eq(Expr::i(0));
            if self.n.is_multiple_of(2) {
                own = own.or(j.eq(Expr::i(n / 2)));
            }
            let w = Expr::select(own, Expr::c(DType::F64, 1.0), Expr::c(DType::F64, 2.0));
            scale = scale.mul(w);
        }
        let ty = TensorType::new(d, vec![self.out_len, self.terms]);
        let cos = theta.clone().cos().mul(scale.clone()).cast(d);
        let sin = theta.sin().mul(scale).cast(d);
        (
            cx.materialized_stage(ty.clone(), cos),
            cx.materialized_stage(ty, sin),
        )
    }

    /// The transform's value at output component `comp` (0 real, 1 imaginary) from the input's
    /// real and imaginary parts at reduction position `RVar(0)` (`xi` `None` for a real signal),
    /// reading twiddles at `(k, RVar(0))`.
    fn term(&self, tables: (Src, Src), k: Expr, xr: Expr, xi: Option<Expr>, comp: Expr) -> Expr {
        let at = vec![k, Expr::rvar(0)];
        let c = Expr::load(tables.0, at.clone());
        let s = Expr::load(tables.1, at);
        // Forward: (xr + i xi)(cos - i sin); inverse: (xr + i xi)(cos + i sin).
        let (re, im) = match xi {
            Some(xi) => {
                let (re, im) = if self.inverse {
                    (
                        xr.clone().mul(c.clone()).sub(xi.clone().mul(s.clone())),
                        xr.mul(s),
                    )
                } else {
                    (
                        xr.clone().mul(c.clone()).add(xi.clone().mul(s.clone())),
                        xr.mul(s).neg(),
                    )
                };
                (re, im.add(xi.mul(c)))
            }
            None if self.inverse => (xr.clone().mul(c), xr.mul(s)),
            None => (xr.clone().mul(c), xr.mul(s).neg()),
        };
        if self.to_real {
            re
        } else {
            Expr::select(comp.eq(Expr::i(0)), re, im)
        }
    }
}

/// `DFT`: the discrete Fourier transform of a real (`[..., 1]`) or complex (`[..., 2]`) signal
/// along one axis; `onesided` keeps the non-redundant half of a real signal's spectrum, and the
/// one-sided inverse rebuilds a real signal from it.
#[derive(Debug)]
struct Dft {
    inverse: bool,
    onesided: bool,
    /// The axis attribute (opset < 20); from opset 20 the axis is input 2.
    axis: Option<i64>,
}

impl Dft {
    /// `(axis, transform)`.
    fn geometry(&self, cx: &InferCx) -> OpResult<(usize, Transform)> {
        let x = cx.input(0)?;
        let r = x.rank();
        if r < 2 || !matches!(x.shape[r - 1], 1 | 2) {
            return Err(OpError::expected(
                "a signal of rank >= 2 whose last dimension is 1 (real) or 2 (complex)",
                x,
            ));
        }
        let axis = match self.axis {
            Some(a) => norm_axis(a, r)?,
            None if cx.has(2) => scalar_axis(cx, 2, r)?,
            None => r - 2,
        };
        if axis == r - 1 {
            return Err(OpError::expected(
                "an axis other than the last (the real/imaginary one)",
                axis,
            ));
        }
        let len_in = x.shape[axis];
        let n = if cx.has(1) {
            check_dtype(cx, 1, INDEX)?;
            scalar_dim(cx, 1, "dft_length")?
        } else if self.inverse && self.onesided {
            2 * len_in.saturating_sub(1)
        } else {
            len_in
        };
        if n == 0 {
            return Err(OpError::expected("a transform length >= 1", n));
        }
        Ok((axis, Transform::new(len_in, n, self.inverse, self.onesided)))
    }
}

impl Operator for Dft {
    fn op_type(&self) -> &'static str {
        "DFT"
    }

    fn kind(&self) -> OpKind {
        OpKind::Opaque
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 1, if self.axis.is_some() { 2 } else { 3 })?;
        let d = check_dtype(cx, 0, FLOATS)?;
        let (axis, t) = self.geometry(cx)?;
        let mut shape = cx.input(0)?.shape.clone();
        shape[axis] = t.out_len;
        *shape.last_mut().expect("rank >= 2") = if t.to_real { 1 } else { 2 };
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (axis, t) = self.geometry(&icx(cx))?;
        let x = cx.input(0).clone();
        let out = cx.output(0).clone();
        let r = x.rank();
        let tables = t.tables(cx, out.dtype);
        let part = |c: i64| {
            let mut idx = vars(r);
            idx[axis] = Expr::rvar(0);
            idx[r - 1] = Expr::i(c);
            Expr::load(Src::Arg(0), idx)
        };
        let xi = (x.shape[r - 1] == 2).then(|| part(1));
        let body = t.term(tables, Expr::var(axis), part(0), xi, Expr::var(r - 1));
        Ok(vec![cx.reduce(out, RedOp::Sum, vec![t.terms], body, None)])
    }
}

fn dft(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    Ok(Arc::new(Dft {
        inverse: cx.attrs.int("inverse", 0)? != 0,
        onesided: cx.attrs.int("onesided", 0)? != 0,
        axis: if cx.opset < 20 {
            Some(cx.attrs.int("axis", 1)?)
        } else {
            None
        },
    }))
}

/// `STFT`: the discrete Fourier transforms of the frames of a signal `[batch, length, 1|2]`,
/// `frame_step` apart, each multiplied by a window first.
#[derive(Debug)]
struct Stft {
    onesided: bool,
}

impl Stft {
    /// `(frame_step, frames, transform)`.
    fn geometry(&self, cx: &InferCx) -> OpResult<(usize, usize, Transform)> {
        let x = cx.input(0)?;
        if x.rank() != 3 || !matches!(x.shape[2], 1 | 2) {
            return Err(OpError::expected("a signal [batch, length, 1 or 2]", x));
        }
        check_dtype(cx, 1, INDEX)?;
        let step = scalar_dim(cx, 1, "frame_step")?;
        if step == 0 {
            return Err(OpError::expected("frame_step >= 1", 0));
        }
        let window = if cx.has(2) {
            let w = cx.input(2)?;
            if w.rank() != 1 {
                return Err(OpError::expected("a window of rank 1", w));
            }
            Some(w.shape[0])
        } else {
            None
        };
        let frame_len = if cx.has(3) {
            check_dtype(cx, 3, INDEX)?;
            let f = scalar_dim(cx, 3, "frame_length")?;
            if window.is_some_and(|w| w != f) {
                return Err(OpError::expected(
                    format!("a window of frame_length {f} elements"),
                    cx.input(2)?,
                ));
            }
            f
        } else {
            window.unwrap_or(x.shape[1])
        };
        if frame_len == 0 || frame_len > x.shape[1] {
            return Err(OpError::expected(
                format!("a frame length in [1, {}] (the signal length)", x.shape[1]),
                frame_len,
            ));
        }
        if self.onesided && x.shape[2] == 2 {
            return Err(OpError::expected(
                "a real signal for a one-sided transform (onesided=0 for complex input)",
                x,
            ));
        }
        let frames = 1 + (x.shape[1] - frame_len) / step;
        Ok((
            step,
            frames,
            Transform::new(frame_len, frame_len, false, self.onesided),
        ))
    }
}

impl Operator for Stft {
    fn op_type(&self) -> &'static str {
        "STFT"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 2, 4)?;
        let d = check_dtype(cx, 0, FLOATS)?;
        if cx.has(2) && cx.input(2)?.dtype != d {
            return Err(OpError::expected(
                format!("a window of the signal's type {d}"),
                cx.input(2)?,
            ));
        }
        let (_, frames, t) = self.geometry(cx)?;
        let batch = cx.input(0)?.shape[0];
        Ok(vec![TensorType::new(d, vec![batch, frames, t.out_len, 2])])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (step, _, t) = self.geometry(&icx(cx))?;
        let out = cx.output(0).clone();
        let complex = cx.input(0).shape[2] == 2;
        let window = cx.has(2);
        let tables = t.tables(cx, out.dtype);
        // Sample j of frame f: signal[b, f * step + j], times window[j].
        let pos = Expr::var(1).mul(Expr::i(step as i64)).add(Expr::rvar(0));
        let part = |c: i64| {
            let v = Expr::load(Src::Arg(0), vec![Expr::var(0), pos.clone(), Expr::i(c)]);
            if window {
                v.mul(Expr::load(Src::Arg(2), vec![Expr::rvar(0)]))
            } else {
                v
            }
        };
        let xi = complex.then(|| part(1));
        let body = t.term(tables, Expr::var(2), part(0), xi, Expr::var(3));
        Ok(vec![cx.reduce(out, RedOp::Sum, vec![t.terms], body, None)])
    }
}

fn stft(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    Ok(Arc::new(Stft {
        onesided: cx.attrs.int("onesided", 1)? != 0,
    }))
}

// ---------------------------------------------------------------------------------------------
// Det
// ---------------------------------------------------------------------------------------------

/// The largest matrix `Det` unrolls its elimination for (three stages per column).
const DET_MAX: usize = 64;

/// `Det`: the determinant of each square matrix of `[*, M, M]`, by Gaussian elimination with
/// partial pivoting (the row with the largest magnitude in the column), unrolled over `M`.
#[derive(Debug)]
struct Det;

impl Det {
    fn size(cx: &InferCx) -> OpResult<usize> {
        let x = cx.input(0)?;
        let r = x.rank();
        if r < 2 || x.shape[r - 1] != x.shape[r - 2] {
            return Err(OpError::expected("square matrices [*, M, M]", x));
        }
        let m = x.shape[r - 1];
        if m > DET_MAX {
            return Err(OpError::Unsupported(format!(
                "Det of {m}x{m} matrices (at most {DET_MAX}x{DET_MAX})"
            )));
        }
        Ok(m)
    }
}

impl Operator for Det {
    fn op_type(&self) -> &'static str {
        "Det"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 1, 1)?;
        let d = check_dtype(cx, 0, FLOATS)?;
        Self::size(cx)?;
        let x = cx.input(0)?;
        Ok(vec![TensorType::new(d, x.shape[..x.rank() - 2].to_vec())])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let m = Self::size(&icx(cx))?;
        let x = cx.input(0).clone();
        let out = cx.output(0).clone();
        let d = out.dtype;
        let b = x.rank() - 2;
        let batch = vars(b);
        let at = |src: Src, batch: &[Expr], i: Expr, j: Expr| {
            let mut idx = batch.to_vec();
            idx.push(i);
            idx.push(j);
            Expr::load(src, idx)
        };
        let zero = Expr::c(d, 0.0);
        let mut a = Src::Arg(0);
        let mut pivots = Vec::new();
        for k in 0..m {
            let kk = Expr::i(k as i64);
            // The pivot row: the first row i >= k with the largest |a[i][k]|. The reductions run
            // over rows k.. (RVar(0) + k).
            let row = Expr::rvar(0).add(kk.clone());
            let mag = at(a, &batch, row.clone(), kk.clone()).abs();
            let red_ty = TensorType::new(d, out.shape.clone());
            let best = cx.reduce(red_ty, RedOp::Max, vec![m - k], mag.clone(), None);
            let is_best = mag.eq(Expr::load(best, batch.clone()));
            let first = Expr::select(is_best, row, Expr::i(m as i64));
            let ity = TensorType::new(DType::I64, out.shape.clone());
            let p = cx.reduce(ity, RedOp::Min, vec![m - k], first, None);
            let pv = Expr::load(p, batch.clone()).min(Expr::i(m as i64 - 1));
            pivots.push(pv.clone());
            // Rows k and p swapped, then the rows below k eliminated with row k.
            let mut full = batch.clone();
            full.push(Expr::var(b));
            full.push(Expr::var(b + 1));
            let (i, j) = (Expr::var(b), Expr::var(b + 1));
            let src_row = |i: Expr| {
                Expr::select(
                    i.clone().eq(kk.clone()),
                    pv.clone(),
                    Expr::select(i.clone().eq(pv.clone()), kk.clone(), i),
                )
            };
            let sw = |i: Expr, j: Expr| at(a, &batch, src_row(i), j);
            let pivot = sw(kk.clone(), kk.clone());
            let factor = sw(i.clone(), kk.clone()).div(pivot.clone());
            let elim = sw(i.clone(), j.clone()).sub(factor.mul(sw(kk.clone(), j.clone())));
            let below = i.gt(kk.clone()).and(pivot.ne(zero.clone()));
            let body = Expr::select(below, elim, sw(Expr::var(b), j));
            a = cx.materialized_stage(x.clone(), body);
        }
        // det = (-1)^swaps * the product of the diagonal.
        let diag = at(a, &batch, Expr::rvar(0), Expr::rvar(0));
        let prod = cx.reduce(out.clone(), RedOp::Prod, vec![m], diag, None);
        let mut v = Expr::load(prod, batch.clone());
        for (k, p) in pivots.into_iter().enumerate() {
            let sign = Expr::select(p.eq(Expr::i(k as i64)), Expr::c(d, 1.0), Expr::c(d, -1.0));
            v = v.mul(sign);
        }
        Ok(vec![cx.stage(out, v)])
    }
}

// ---------------------------------------------------------------------------------------------
// TensorScatter
// ---------------------------------------------------------------------------------------------

/// `TensorScatter`: a key/value cache update — `update`'s sequence positions written into
/// `past_cache` along `axis`, from each batch entry's `write_indices` on (`circular` wraps
/// around the cache's length).
#[derive(Debug)]
struct TensorScatter {
    circular: bool,
    axis: i64,
}

impl TensorScatter {
    fn axis(&self, cx: &InferCx) -> OpResult<usize> {
        let past = cx.input(0)?;
        let upd = cx.input(1)?;
        let r = past.rank();
        let axis = norm_axis(self.axis, r)?;
        if axis == 0 || upd.rank() != r {
            return Err(OpError::expected(
                format!("an update of the cache's rank {r} and an axis other than the batch axis"),
                format!("{upd}, axis {axis}"),
            ));
        }
        for (i, (&p, &u)) in past.shape.iter().zip(&upd.shape).enumerate() {
            if (i == axis && u > p) || (i != axis && u != p) {
                return Err(OpError::expected(
                    format!(
                        "an update matching the cache {past} but along axis {axis} (no longer)"
                    ),
                    upd,
                ));
            }
        }
        if cx.has(2) {
            check_dtype(cx, 2, &[DType::I64])?;
            let w = cx.input(2)?;
            if w.shape != [past.shape[0]] {
                return Err(OpError::expected(
                    format!("write_indices [{}] (one per batch entry)", past.shape[0]),
                    w,
                ));
            }
        }
        Ok(axis)
    }
}

impl Operator for TensorScatter {
    fn op_type(&self) -> &'static str {
        "TensorScatter"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 2, 3)?;
        let d = check_dtype(cx, 0, ALL)?;
        if cx.input(1)?.dtype != d {
            return Err(OpError::expected(
                format!("an update of the cache's type {d}"),
                cx.input(1)?,
            ));
        }
        self.axis(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let axis = self.axis(&icx(cx))?;
        let out = cx.output(0).clone();
        let (max_len, len) = (out.shape[axis] as i64, cx.input(1).shape[axis] as i64);
        let start = if cx.has(2) {
            Expr::load(Src::Arg(2), vec![Expr::var(0)])
        } else {
            Expr::i(0)
        };
        // The update position that lands on cache position s, if any.
        let mut t = Expr::var(axis).sub(start);
        if self.circular {
            // ((s - start) mod L + L) mod L: non-negative for any start.
            t = t
                .modulo(Expr::i(max_len))
                .add(Expr::i(max_len))
                .modulo(Expr::i(max_len));
        }
        let hit = t.clone().ge(Expr::i(0)).and(t.clone().lt(Expr::i(len)));
        let mut idx = vars(out.rank());
        idx[axis] = t.max(Expr::i(0)).min(Expr::i((len - 1).max(0)));
        let upd = Expr::load(Src::Arg(1), idx);
        let past = Expr::load(Src::Arg(0), vars(out.rank()));
        let body = if len == 0 {
            past
        } else {
            Expr::select(hit, upd, past)
        };
        Ok(vec![cx.stage(out, body)])
    }
}

fn tensor_scatter(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let circular = match cx.attrs.string("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        m => {
            return Err(OpError::expected(
                "mode \"linear\" or \"circular\"",
                format!("{m:?}"),
            ))
        }
    };
    Ok(Arc::new(TensorScatter {
        circular,
        axis: cx.attrs.int("axis", -2)?,
    }))
}

/// The `signal` family's registry.
pub const OPS: &[(&str, Constructor)] = &[
    ("DFT", dft),
    ("STFT", stft),
    ("Det", |_| Ok(Arc::new(Det))),
    ("TensorScatter", tensor_scatter),
];
