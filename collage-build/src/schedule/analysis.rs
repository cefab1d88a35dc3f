//! What the planners and the code generator read of a stage's expressions: affine coefficients
//! of loads, which dimension a load walks contiguously, whether an expression vectorises along
//! a dimension, a guard's conjuncts, the channel axis of a contraction.
use crate::ir::{strides, DType};
use crate::te::{BinOp, BufId, BufKind, Exec, Expr, Program, RedOp, Scalar, Src, Stage, UnOp};

/// The coefficient of `Var(v)` in an index expression if it is affine in `Var(v)`.
pub(crate) fn coef(e: &Expr, v: u32) -> Option<i64> {
    match e {
        Expr::Var(k) => Some((*k == v) as i64),
        Expr::RVar(_) | Expr::Const(_) => Some(0),
        Expr::Bin(BinOp::Add, a, b) => Some(coef(a, v)? + coef(b, v)?),
        Expr::Bin(BinOp::Sub, a, b) => Some(coef(a, v)? - coef(b, v)?),
        Expr::Bin(BinOp::Mul, a, b) => match (a.as_ref(), b.as_ref()) {
            (x, Expr::Const(c)) | (Expr::Const(c), x) if c.dtype() == DType::I64 => {
                Some(coef(x, v)? * c.as_i64())
            }
            _ => {
                let (ca, cb) = (coef(a, v)?, coef(b, v)?);
                (ca == 0 && cb == 0).then_some(0)
            }
        },
        other => {
            let mut uses = false;
            other.visit(&mut |x| uses |= *x == Expr::Var(v));
            (!uses).then_some(0)
        }
    }
}

/// True if some load in `body` walks its source with stride 1 along output dimension `v`: then
/// the reduction is emitted with `v` innermost (vectorisable) and a row of accumulators.
pub(crate) fn contiguous_along(p: &Program, body: &Expr, v: u32) -> bool {
    let mut found = false;
    body.visit(&mut |e| found |= load_coef(p, e, v) == Some(1));
    found
}

/// `body` with `i{k} / w` and `i{k} % w` replaced by the split loop variables `i{rank}` and
/// `i{rank + 1}` (`rank` = `k + 1`, the innermost dimension split in two loops).
pub(crate) fn split_body(body: &Expr, k: usize, w: usize) -> Expr {
    let (hi, lo) = (k as u32 + 1, k as u32 + 2);
    body.rewrite(&mut |e| match e {
        Expr::Bin(BinOp::Div, a, b) if **a == Expr::Var(k as u32) && **b == Expr::i(w as i64) => {
            Some(Expr::Var(hi))
        }
        Expr::Bin(BinOp::FMod, a, b) if **a == Expr::Var(k as u32) && **b == Expr::i(w as i64) => {
            Some(Expr::Var(lo))
        }
        _ => None,
    })
}

/// True if some load in `body` walks its source with stride 1 along reduction variable `r`.
pub(crate) fn contiguous_along_r(p: &Program, body: &Expr, r: u32) -> bool {
    // Rename RVar(r) to a fresh Var and reuse the output-dimension analysis.
    const FRESH: u32 = u32::MAX - 1;
    let renamed = body.rewrite(&mut |e| match e {
        Expr::RVar(k) if *k == r => Some(Expr::Var(FRESH)),
        _ => None,
    });
    contiguous_along(p, &renamed, FRESH)
}

pub(crate) fn uses_var(e: &Expr, v: u32) -> bool {
    let mut uses = false;
    e.visit(&mut |x| uses |= *x == Expr::Var(v));
    uses
}

/// The conjuncts of a guard (`a && b && ...`, through bool casts).
pub(crate) fn conjuncts(c: &Expr, out: &mut Vec<Expr>) {
    match c {
        Expr::Bin(BinOp::And, a, b) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        Expr::Cast(DType::Bool, a) => conjuncts(a, out),
        other => out.push(other.clone()),
    }
}

/// The stride of a load along output dimension `v`, if affine.
pub(crate) fn load_coef(p: &Program, e: &Expr, v: u32) -> Option<i64> {
    match e {
        Expr::Load(Src::Buf(b), idx) => {
            let st = strides(&p.bufs[b.index()].ty.shape);
            idx.iter()
                .zip(&st)
                .try_fold(0i64, |acc, (ie, &s)| Some(acc + coef(ie, v)? * s as i64))
        }
        Expr::LoadFlat(_, f) => coef(f, v),
        _ => None,
    }
}

/// The first of the trailing dimensions `from..rank` of an injective stage's output that its
/// loops may run as one flat loop: every load's offset (and the row-major output's) along them
/// is one coefficient times their row-major flattening, and the body uses their variables in
/// nothing else. `None` unless at least two of them have an extent above one. The flat loop's
/// variable is the innermost such dimension's, the others are 0 ([`merge_body`]).
pub(crate) fn mergeable_from(
    p: &Program,
    body: &Expr,
    shape: &[usize],
    from: usize,
) -> Option<usize> {
    let rank = shape.len();
    let inner = flat_inner(shape, from)?;
    // Every load: its coefficients along the candidate dimensions, and whether it is a plain
    // row-major load of a buffer.
    let mut loads: Vec<Vec<Option<i64>>> = Vec::new();
    let mut plain = true;
    body.visit(&mut |e| match e {
        Expr::Load(Src::Buf(b), idx) => {
            // As the printer flattens it (unit dimensions skipped).
            let buf = &p.bufs[b.index()];
            plain &= !buf.packed;
            let flat = Expr::flatten(idx, &buf.ty.shape);
            loads.push((0..rank as u32).map(|v| coef(&flat, v)).collect());
        }
        Expr::LoadFlat(Src::Buf(b), f) => {
            plain &= !p.bufs[b.index()].packed;
            loads.push((0..rank as u32).map(|v| coef(f, v)).collect());
        }
        Expr::Load(..) | Expr::LoadFlat(..) => plain = false,
        _ => {}
    });
    if !plain {
        return None;
    }
    // Outside the loads' indices, no candidate variable may appear.
    let outside = body.rewrite(&mut |e| match e {
        Expr::Load(..) | Expr::LoadFlat(..) => Some(Expr::i(0)),
        _ => None,
    });
    let mut first = inner;
    let mut stride = 1i64;
    let mut non_unit = 1;
    for k in (from..inner).rev() {
        stride *= shape[k + 1] as i64;
        if shape[k] == 1 {
            first = k;
            continue;
        }
        let ok = !uses_var(&outside, k as u32)
            && loads.iter().all(|c| match (c[k], c[inner]) {
                (Some(ck), Some(ci)) => ck == ci * stride,
                _ => false,
            });
        if !ok {
            break;
        }
        first = k;
        non_unit += 1;
    }
    let inner_ok = !uses_var(&outside, inner as u32) && loads.iter().all(|c| c[inner].is_some());
    (non_unit >= 2 && inner_ok).then_some(first)
}

/// The dimension whose variable a flat loop over dimensions `from..` runs as: the innermost one
/// with an extent above one (`None` if there is none).
pub(crate) fn flat_inner(shape: &[usize], from: usize) -> Option<usize> {
    (from..shape.len()).rev().find(|&k| shape[k] > 1)
}

/// `body` with the merged dimensions `from..rank` ([`mergeable_from`]) read as one flat loop
/// variable: the innermost dimension with an extent above one keeps its variable (now the flat
/// position), the others read 0.
pub(crate) fn merge_body(body: &Expr, shape: &[usize], from: usize) -> Expr {
    let inner = flat_inner(shape, from);
    body.rewrite(&mut |e| match e {
        Expr::Var(k) if (*k as usize) >= from && Some(*k as usize) != inner => Some(Expr::i(0)),
        _ => None,
    })
}

/// True if `e` can be evaluated on a vector of consecutive `Var(v)`: every use of `v` is inside a
/// stride-1 load, combined only by + - * / and negation.
pub(crate) fn vectorizable(p: &Program, e: &Expr, v: u32) -> bool {
    if !is_vector(e, v) {
        return true;
    }
    match e {
        Expr::Load(..) | Expr::LoadFlat(..) => {
            let idx_ok = match e {
                Expr::Load(_, idx) => idx.iter().all(|i| coef(i, v).is_some()),
                Expr::LoadFlat(_, f) => coef(f, v).is_some(),
                _ => false,
            };
            idx_ok
                && load_coef(p, e, v) == Some(1)
                && p.dtype(match e {
                    Expr::Load(s, _) | Expr::LoadFlat(s, _) => *s,
                    _ => unreachable!(),
                }) == DType::F32
        }
        Expr::Bin(BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div, a, b) => {
            vectorizable(p, a, v) && vectorizable(p, b, v)
        }
        Expr::Bin(BinOp::Max | BinOp::Min, a, b) => vectorizable(p, a, v) && vectorizable(p, b, v),
        Expr::Un(UnOp::Neg | UnOp::Erf | UnOp::Exp, a) => vectorizable(p, a, v),
        Expr::Acc => true,
        _ => false,
    }
}

/// True if `e` varies along the row (uses `Var(v)` or the accumulator).
pub(crate) fn is_vector(e: &Expr, v: u32) -> bool {
    let mut yes = false;
    e.visit(&mut |x| yes |= *x == Expr::Var(v) || *x == Expr::Acc);
    yes
}

/// Lanes a channel-vectorised stage's channels must be whole vectors of (every variant's).
pub(crate) const CHANNEL_LANES: usize = crate::te::Isa::WIDEST_LANES;

/// Channels that are not whole [`CHANNEL_LANES`] vectors vectorise too when they are whole
/// tiles of this many: three vectors of eight (`ChannelPlan::lanes`), which the widest variant
/// uses instead of its own (24 output channels, as a detection head's 3x3 layers have, are
/// one and a half 16-lane vectors).
pub(crate) const NARROW_TILE: usize = 24;

/// Channels that vectorise as one vector of this many lanes (AVX2's width, half of AVX-512's).
pub(crate) const NARROW_VECTOR: usize = 8;

/// Rows shorter than this vectorise along the channels when they can ([`channel_axis`]).
/// Measured on ResNet-18 (AVX-512, one thread): its 7x7 layers 11.0 -> 9.3 ms, its 14x14
/// layers 10.5 -> 8.3 ms; longer rows (28x28 and up) were slower that way (they lose the
/// im2col groups, and their weights fit L2 already).
pub(crate) const MAX_CHANNEL_ROW: usize = 256;

/// The channel dimension (the one before the row) of a contraction that vectorises along it
/// rather than along its row: a short row ([`MAX_CHANNEL_ROW`]: whole vectors cover it poorly —
/// 49 columns of a 7x7 image fill 49 of 64 lanes and take a second pass over the weights for
/// the last column — and a tile of columns streams all of a large weight), channels that are
/// whole vectors (or whole [`NARROW_TILE`]s, or one [`NARROW_VECTOR`]), one reduction variable, a body `w[channel * k + r] * x` with `w` a constant
/// and `x` the same for every channel, and an epilogue that vectorises along the channels or
/// along the row (the codegen transposes the sums in registers before or after it), or a
/// reduction long enough (512) that storing the outputs one by one costs little. Its weight is transposed
/// to `w'[r, channel]` (`schedule::layout`) and the register tile spans channels; the row is
/// jammed.
pub(crate) fn channel_axis(p: &Program, st: &Stage) -> Option<usize> {
    channel_axis_in(p, st, false)
}

/// [`channel_axis`] in a program served over a range of sizes (`te::Ranged`, or one of its
/// samples): a convolution lowered for every size alike (`LowerCx::uniform`) keeps its output
/// `[n, m, oh, ow]` and sums over its input channels and window (several reduction
/// variables). Its row is one line of the image, a few columns however large the range, so
/// no row is too long here; the channels are the dimension its weight is read along. Outputs
/// of lower rank (a pointwise layer over its flat image) keep their row plan.
pub(crate) fn ranged_channel_axis(p: &Program, st: &Stage) -> Option<usize> {
    channel_axis_in(p, st, true)
}

/// [`channel_axis`], or [`ranged_channel_axis`] when `ranged`.
fn channel_axis_in(p: &Program, st: &Stage, ranged: bool) -> Option<usize> {
    let r = st.reduce.as_ref()?;
    if ranged {
        // An image's line: a flat row (a pointwise layer's whole image, or a sequence) is
        // long, or short at some sizes and long at others, and vectorises along itself.
        let ok = r.op == RedOp::Sum
            && st.exec == Exec::Generated
            && st.ty.dtype == DType::F32
            && st.ty.rank() >= 4
            && !r.extents.is_empty();
        if !ok {
            return None;
        }
    } else {
        generated_f32_sum(st)?;
    }
    let shape = &st.ty.shape;
    let rank = shape.len();
    let n = shape[rank - 1];
    // A long row too when the input is not affine along it (a convolution reading its padded
    // input directly, codegen/c/direct.rs): no plan vectorises along such a row.
    let affine_row = |e: &Expr| {
        let mut ok = true;
        e.visit(&mut |x| {
            if matches!(x, Expr::Load(..) | Expr::LoadFlat(..)) {
                ok &= load_coef(p, x, rank as u32 - 1).is_some();
            }
        });
        ok
    };
    if !ranged && n >= MAX_CHANNEL_ROW && affine_row(&st.body) {
        return None;
    }
    let Expr::Bin(BinOp::Mul, a, b) = &st.body else {
        return None;
    };
    let k: usize = r.extents.iter().product();
    let fits = |c: usize| {
        if !(shape[c].is_multiple_of(CHANNEL_LANES)
            || shape[c].is_multiple_of(NARROW_TILE)
            || shape[c] == NARROW_VECTOR)
        {
            return false;
        }
        let weight = |e: &Expr| {
            channel_weight(p, e, c as u32, shape[c], &r.extents).is_some()
                || matches!(e, Expr::Load(Src::Buf(w), idx)
                if matches!(p.bufs[w.index()].kind, BufKind::Const(_))
                    && p.bufs[w.index()].ty.rank() == 2
                    && p.bufs[w.index()].ty.shape[1] == shape[c]
                    && idx[1] == Expr::Var(c as u32)
                    && !has_var(&idx[0]))
        };
        let ok = (weight(a) && !uses_var(b, c as u32)) || (weight(b) && !uses_var(a, c as u32));
        let fin_ok =
            r.finalize.as_ref().is_none_or(|f| {
                vectorizable(p, f, c as u32) || vectorizable(p, f, rank as u32 - 1)
            }) || k >= 512;
        ok && fin_ok
    };
    if ranged {
        (0..rank - 1).find(|&c| fits(c))
    } else {
        fits(rank - 2).then_some(rank - 2)
    }
}

/// The reduction of a generated f32 sum over one reduction variable with an output of rank 2
/// or more (the contractions [`channel_axis`] and `layout::direct` considers).
pub(crate) fn generated_f32_sum(st: &Stage) -> Option<&crate::te::Reduce> {
    let r = st.reduce.as_ref()?;
    (r.op == RedOp::Sum
        && st.exec == Exec::Generated
        && st.ty.dtype == DType::F32
        && st.ty.rank() >= 2
        && r.extents.len() == 1)
        .then_some(r)
}

/// When `e` reads an f32 constant as a `[channels, k]` matrix at `channel * k + r` (`r` over
/// the reduction, in `[0, k)`): the constant and `r`.
pub(crate) fn channel_weight(
    p: &Program,
    e: &Expr,
    c: u32,
    channels: usize,
    extents: &[usize],
) -> Option<(BufId, Expr)> {
    let (w, flat) = match e {
        Expr::Load(Src::Buf(w), idx) => (*w, Expr::flatten(idx, &p.bufs[w.index()].ty.shape)),
        Expr::LoadFlat(Src::Buf(w), f) => (*w, f.as_ref().clone()),
        _ => return None,
    };
    let wb = &p.bufs[w.index()];
    if !matches!(wb.kind, BufKind::Const(_))
        || wb.ty.dtype != DType::F32
        || wb.packed
        || !wb.ty.numel().is_multiple_of(channels)
    {
        return None;
    }
    let k = wb.ty.numel() / channels;
    if k < 2 {
        return None;
    }
    let (terms, offset) = crate::te::affine_terms(&flat);
    let mut channel = false;
    let mut hi = offset;
    let mut r = Expr::i(offset);
    for (t, coef) in terms {
        match t {
            Expr::Var(v) if v == c && coef == k as i64 && !channel => channel = true,
            Expr::RVar(q) if coef > 0 && (q as usize) < extents.len() => {
                hi += coef * (extents[q as usize] as i64 - 1);
                r = r.add(t.mul(Expr::i(coef)));
            }
            _ => return None,
        }
    }
    (channel && offset >= 0 && hi < k as i64).then_some((w, r))
}

/// Whether `e` uses any output variable.
pub(crate) fn has_var(e: &Expr) -> bool {
    let mut yes = false;
    e.visit(&mut |x| yes |= matches!(x, Expr::Var(_)));
    yes
}

/// The factor `W` when `body` uses `Var(v)` only as `Var(v) / W` and `Var(v) % W` (the same `W`,
/// dividing the extent `n`).
pub(crate) fn split_factor(body: &Expr, v: u32, n: usize) -> Option<usize> {
    let mut w: Option<i64> = None;
    let mut ok = true;
    let mut wrapped = 0usize;
    body.visit(&mut |e| match e {
        Expr::Bin(BinOp::Div | BinOp::FMod, a, b) if **a == Expr::Var(v) => match b.as_ref() {
            Expr::Const(Scalar::I64(c)) if w.is_none_or(|x| x == *c) => {
                w = Some(*c);
                wrapped += 1;
            }
            _ => ok = false,
        },
        _ => {}
    });
    let mut uses = 0usize;
    body.visit(&mut |e| uses += (*e == Expr::Var(v)) as usize);
    let w = w? as usize;
    (ok && uses == wrapped && w > 1 && w < n && n.is_multiple_of(w)).then_some(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::te::{BufId, Buffer};
    use crate::tensor::TensorType;

    fn program(shapes: &[&[usize]]) -> Program {
        Program {
            bufs: shapes
                .iter()
                .enumerate()
                .map(|(i, s)| Buffer {
                    name: format!("x{i}"),
                    ty: TensorType::new(DType::F32, s.to_vec()),
                    kind: BufKind::Input(i),
                    packed: false,
                })
                .collect(),
            ..Program::default()
        }
    }

    fn load(b: u32, idx: Vec<Expr>) -> Expr {
        Expr::Load(Src::Buf(BufId(b)), idx)
    }

    fn add(a: Expr, b: Expr) -> Expr {
        Expr::Bin(BinOp::Add, Box::new(a), Box::new(b))
    }

    #[test]
    fn flat_loops_only_where_every_load_walks_the_rows_as_one_run() {
        let out = [1usize, 64, 56, 56];
        let v = |k| Expr::Var(k);
        let whole = || load(0, vec![v(0), v(1), v(2), v(3)]);
        let p = program(&[&out, &[64, 1, 1], &[56], &[1, 64, 56, 56], &[1, 1, 56, 56]]);
        // An element-wise stage and one with a per-channel operand: rows and columns are one
        // run from the channel on.
        assert_eq!(mergeable_from(&p, &whole(), &out, 2), Some(2));
        let bias = load(1, vec![v(1), Expr::i(0), Expr::i(0)]);
        assert_eq!(mergeable_from(&p, &add(whole(), bias), &out, 2), Some(2));
        // An operand broadcast along the rows walks the columns only: no flat loop.
        let row = load(2, vec![v(3)]);
        assert_eq!(mergeable_from(&p, &add(whole(), row), &out, 2), None);
        // A transposed operand: no flat loop.
        let t = load(3, vec![v(0), v(1), v(3), v(2)]);
        assert_eq!(mergeable_from(&p, &add(whole(), t), &out, 2), None);
        // An operand broadcast along the channels merges from the channel on only as far as
        // it walks: from 2 (its rows and columns are one run), and from 1 nothing, since its
        // channel coefficient is 0.
        let plane = load(4, vec![Expr::i(0), Expr::i(0), v(2), v(3)]);
        assert_eq!(
            mergeable_from(&p, &add(whole(), plane.clone()), &out, 2),
            Some(2)
        );
        assert_eq!(mergeable_from(&p, &add(whole(), plane), &out, 1), Some(2));
        assert_eq!(mergeable_from(&p, &whole(), &out, 0), Some(0));
        // A loop variable read as a value (an iota): no flat loop.
        let iota = add(whole(), Expr::Cast(DType::F32, Box::new(v(3))));
        assert_eq!(mergeable_from(&p, &iota, &out, 2), None);
        // The merged body reads the flat position through the innermost variable.
        assert_eq!(
            merge_body(&whole(), &out, 2),
            load(0, vec![v(0), v(1), Expr::i(0), v(3)])
        );
    }
}
