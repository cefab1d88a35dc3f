//! Convolutions without an im2col buffer. A convolution lowers to a contraction over an im2col
//! stage, `col[.., k, p] = in_bounds(x_idx) ? x[x_idx] : 0`, nine (a 3x3 kernel) or more copies
//! of its input that the contraction reads once each. When the contraction vectorises along its
//! output channels ([`ChannelPlan`](crate::te::ChannelPlan): every input value a broadcast,
//! read in any order), it can read the input itself: the im2col stage becomes the input with its
//! padding written out (`xp`, one copy of the input plus a border of zeros), and the contraction
//! reads `xp` at the im2col's index, shifted by the border, with no guard left (or `x` itself
//! when the convolution has no padding, the im2col stage then dead). What the
//! contraction computes is unchanged: the im2col's guard is exactly the bounds of its load (the
//! rewrite checks that), and `xp` holds zeros where the guard fails.
//!
//! The index is written as its reduction part plus its output part, so that the C compiler
//! computes the first once per reduction step for every column of a register tile and hoists
//! the second out of the reduction loop. Measured on ResNet-18 (AVX-512, one thread): the
//! im2col fills and copies cost 2.4 ms of 38 and scaled badly to two threads (each thread's
//! share of the buffer was read by the other).
use crate::fusion::tile::{bounds, Interval};
use crate::ir::{strides, DType, TensorType};
use crate::te::{affine_terms, simplify, BinOp, BufId, BufKind, Exec, Expr, Program, Src, Stage};

use crate::schedule::analysis::{channel_axis, channel_weight, generated_f32_sum};

/// The most elements a padded input may have, as a multiple of the input's.
const MAX_GROWTH: usize = 4;

/// Rewrites every contraction that qualifies (see the module documentation) to read its
/// convolution's padded input instead of an im2col buffer; the im2col stage becomes the padded
/// input (same buffer, new shape and body).
pub(super) fn direct_convs(p: &mut Program) {
    let readers = p.readers();
    let mut edits = Vec::new();
    for (g, b) in p.buf_ids().zip(&p.bufs) {
        let BufKind::Stage(st) = &b.kind else {
            continue;
        };
        if let Some(e) = direct(p, &readers, g, st) {
            edits.push(e);
        }
    }
    for (a, padded, g, body) in edits {
        match padded {
            Some(padded) => {
                p.bufs[a.index()].ty = padded.ty.clone();
                p.bufs[a.index()].kind = BufKind::Stage(padded);
            }
            None => p.bufs[a.index()].kind = BufKind::Dead,
        }
        if let BufKind::Stage(st) = &mut p.bufs[g.index()].kind {
            st.body = body;
        }
    }
}

/// For contraction `g`: the im2col buffer it reads, that buffer's new stage (the padded input),
/// `g`, and `g`'s new body.
fn direct(
    p: &Program,
    readers: &[Vec<BufId>],
    g: BufId,
    st: &Stage,
) -> Option<(BufId, Option<Stage>, BufId, Expr)> {
    let r = generated_f32_sum(st)?;
    let shape = &st.ty.shape;
    let c = shape.len() - 2;
    let Expr::Bin(BinOp::Mul, x, y) = &st.body else {
        return None;
    };
    let is_w = |e: &Expr| channel_weight(p, e, c as u32, shape[c], &r.extents).is_some();
    let (w, operand, w_first) = if is_w(x) {
        (x, y, true)
    } else if is_w(y) {
        (y, x, false)
    } else {
        return None;
    };
    // The im2col stage and its index as this contraction reads it.
    let (a, a_idx) = match operand.as_ref() {
        Expr::Load(Src::Buf(a), idx) => (*a, idx.clone()),
        Expr::LoadFlat(Src::Buf(a), f) => (
            *a,
            delinearize(f, &p.bufs[a.index()].ty.shape, shape, &r.extents)?,
        ),
        _ => return None,
    };
    let ab = &p.bufs[a.index()];
    let BufKind::Stage(ast) = &ab.kind else {
        return None;
    };
    let mut rs = readers[a.index()].clone();
    rs.dedup();
    // The operand is the contraction's only read of the im2col (its epilogue keeps its reads).
    let in_fin = r
        .finalize
        .as_ref()
        .is_some_and(|f| f.sources().contains(&Src::Buf(a)));
    if ast.reduce.is_some()
        || ast.exec != Exec::Generated
        || ast.ty.dtype != DType::F32
        || ab.packed
        || p.outputs.contains(&a)
        || rs != [g]
        || in_fin
    {
        return None;
    }
    let (cond, value) = match &ast.body {
        Expr::Select(cnd, v, z) if **z == Expr::c(DType::F32, 0.0) => (Some(cnd), v.as_ref()),
        v => (None, v),
    };
    let Expr::Load(Src::Buf(xb), xi) = value else {
        return None;
    };
    let xbuf = &p.bufs[xb.index()];
    let xs = &xbuf.ty.shape;
    if xbuf.ty.dtype != DType::F32 || xbuf.packed || xi.len() != xs.len() {
        return None;
    }
    // The guard must be exactly the load's bounds: each conjunct `xi[d] >= 0` or
    // `xi[d] < xs[d]`; a side without one must hold over the im2col's whole domain.
    let n = xs.len();
    let (has_lo, has_hi) = match cond {
        Some(cnd) => crate::schedule::pad::bound_sides(cnd, xi, xs)?,
        None => (vec![false; n], vec![false; n]),
    };
    let domain: Vec<Interval> = ast.ty.shape.iter().map(|&e| Interval::upto(e)).collect();
    let mut lo = vec![0i64; n];
    let mut pshape = vec![0usize; n];
    for d in 0..n {
        let iv = bounds(&xi[d], &domain, &[])?;
        if (!has_lo[d] && iv.lo < 0) || (!has_hi[d] && iv.hi >= xs[d] as i64) {
            return None;
        }
        lo[d] = iv.lo.min(0);
        pshape[d] = (iv.hi.max(xs[d] as i64 - 1) - lo[d] + 1) as usize;
    }
    let numel = pshape.iter().try_fold(1usize, |n, &e| n.checked_mul(e))?;
    if numel > xbuf.ty.numel().max(1).saturating_mul(MAX_GROWTH) {
        return None;
    }
    // The padded input: `xp[y] = x[y + lo]` inside `x`, else 0.
    let at: Vec<Expr> = (0..n).map(|d| Expr::var(d).add(Expr::i(lo[d]))).collect();
    let low: Vec<bool> = lo.iter().map(|&l| l < 0).collect();
    let high: Vec<bool> = (0..n)
        .map(|d| pshape[d] as i64 + lo[d] > xs[d] as i64)
        .collect();
    let guarded = low.iter().chain(&high).any(|&b| b);
    // Without padding (a patch embedding) the contraction reads `x` itself.
    let padded = guarded.then(|| Stage {
        name: format!("{}_padded", ast.name),
        ty: TensorType::new(DType::F32, pshape.clone()),
        body: crate::schedule::pad::zero_outside(
            Expr::load(Src::Buf(*xb), at.clone()),
            &at,
            xs,
            &low,
            &high,
        ),
        reduce: None,
        materialize: true,
        part: ast.part,
        exec: Exec::Generated,
        choice: None,
    });
    let src = if padded.is_some() { a } else { *xb };
    // The contraction's read: `xp` at the im2col's index, its reduction part first.
    let pst = strides(&pshape);
    let mut flat = Expr::i(0);
    for d in 0..n {
        let y = xi[d].subst_vars(&a_idx).add(Expr::i(-lo[d]));
        flat = flat.add(y.mul(Expr::i(pst[d] as i64)));
    }
    let flat = simplify(&flat, shape, &r.extents);
    let (terms, offset) = affine_terms(&flat);
    let uses_rvar = |e: &Expr| {
        let mut yes = false;
        e.visit(&mut |x| yes |= matches!(x, Expr::RVar(_)));
        yes
    };
    let sum = |red: bool| {
        terms
            .iter()
            .filter(|(t, _)| uses_rvar(t) == red)
            .fold(Expr::i(0), |s, (t, k)| s.add(t.clone().mul(Expr::i(*k))))
    };
    let index = sum(true).add(sum(false)).add(Expr::i(offset));
    let read = Expr::load_flat(Src::Buf(src), index);
    let new_body = if w_first {
        Expr::bin(BinOp::Mul, w.as_ref().clone(), read)
    } else {
        Expr::bin(BinOp::Mul, read, w.as_ref().clone())
    };
    // Only where the channel-vectorised plan then takes the contraction: no other plan reads
    // an input that is not affine along the row. (The new read is flat, so what `channel_axis`
    // reads of the program — the weight, the epilogue's sources — is as before the rewrite.)
    let probe = Stage {
        body: new_body.clone(),
        ..st.clone()
    };
    channel_axis(p, &probe)?;
    Some((a, padded, g, new_body))
}

/// The multi-dimensional index of a `shape` buffer read at the flat offset `flat`, when `flat`
/// is a sum of output and reduction variables (extents `vars`, `rvars`) each scaled by the
/// stride of a run of dimensions its extent fills exactly: `n * K * P + r * P + p` over
/// `[n, c, kh, kw, oh, ow]` is `[n, r / 9, r / 3 % 3, r % 3, p / ow, p % ow]`. Every index is a
/// function of one variable, so none mixes the reduction with the output.
fn delinearize(flat: &Expr, shape: &[usize], vars: &[usize], rvars: &[usize]) -> Option<Vec<Expr>> {
    let st = strides(shape);
    let (terms, offset) = affine_terms(flat);
    if offset != 0 {
        return None;
    }
    let mut idx: Vec<Option<Expr>> = vec![None; shape.len()];
    for (t, k) in terms {
        let ext = match t {
            Expr::Var(v) => *vars.get(v as usize)?,
            Expr::RVar(q) => *rvars.get(q as usize)?,
            _ => return None,
        };
        // The innermost dimension of that stride, widened outwards until the extents fill it.
        let last = (0..shape.len()).rev().find(|&d| st[d] as i64 == k)?;
        let mut first = last;
        let mut fill = shape[last];
        while fill < ext && first > 0 {
            first -= 1;
            fill *= shape[first];
        }
        if fill != ext {
            return None;
        }
        let parts = Expr::unflatten(&t, &shape[first..=last]);
        for (d, e) in (first..=last).zip(parts) {
            if idx[d].replace(e).is_some() {
                return None;
            }
        }
    }
    (0..shape.len())
        .map(|d| {
            idx[d]
                .take()
                .or_else(|| (shape[d] == 1).then(|| Expr::i(0)))
        })
        .collect()
}
