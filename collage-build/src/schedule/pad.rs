//! Padded inputs for windowed contractions served over a range of sizes.
//!
//! A convolution lowered for every size alike (`LowerCx::uniform`) reads its input under a
//! guard: `in_bounds(x_idx) ? x[x_idx] * w : 0`. That guard keeps the contraction from a
//! register-blocked plan (a tile of rows by vectors reads whole vectors of the input). Here the
//! input gets a copy with its padding written out (`xp`, zeros around `x`), placed just before
//! the contraction, which then reads `xp` at the index shifted by the border, with no guard.
//! What the contraction computes is unchanged: the guard is exactly the bounds of its load
//! (checked), `xp` holds zeros where the guard fails, and the contraction is a sum of products
//! with that load, so those terms add zeros. (The static pipeline does the same from an im2col
//! stage: `schedule::layout::direct`.)
//!
//! What the contraction computes of the input alone (an activation fusion inlined into its
//! reads, `hardswish(x[idx]) * w`) goes into the copy too: computed once per input element
//! instead of once per output channel, and the contraction is left a plain sum of products.
//! A row that steps over the input (a strided window) reads a copy stored by phase.
use crate::fusion::tile::{bounds, Interval};
use crate::ir::{DType, TensorType};
use crate::schedule::analysis::{coef, conjuncts, ranged_channel_axis, uses_var};
use crate::te::{BinOp, BufId, BufKind, Buffer, Exec, Expr, Program, RedOp, Src, Stage};

/// The most elements of padding per side of a dimension: a window's reach, not a size.
const MAX_PAD: i64 = 64;

/// The largest step of a window along its row that is split by phase.
const MAX_STEP: i64 = 4;

/// Rewrites every contraction that qualifies to read a padded copy of its guarded input.
pub fn pad_windows(p: &mut Program) {
    let mut g = 0;
    while g < p.bufs.len() {
        if let Some((padded, body)) = padded_read(p, BufId::new(g)) {
            insert_before(p, g, padded);
            g += 1;
            if let BufKind::Stage(st) = &mut p.bufs[g].kind {
                st.body = body(BufId::new(g - 1));
                crate::te::simplify_stage(st);
            }
        }
        g += 1;
    }
}

/// The padded input of stage `g` and its new body (given the padded buffer's id), if `g` is a
/// generated f32 sum of `select(bounds of x_idx, f(x[x_idx]) * w, 0)` (or of `f(x[x_idx]) * w`
/// with no guard, where `f` is more than the load or the row steps over `x`).
#[allow(clippy::type_complexity)]
fn padded_read(p: &Program, g: BufId) -> Option<(Buffer, Box<dyn Fn(BufId) -> Expr>)> {
    let st = p.stage(g)?;
    let r = st.reduce.as_ref()?;
    if st.exec != Exec::Generated || r.op != RedOp::Sum || st.ty.dtype != DType::F32 {
        return None;
    }
    let (cond, value) = match &st.body {
        Expr::Select(c, v, z) if **z == Expr::c(DType::F32, 0.0) => (Some(c.as_ref()), v.as_ref()),
        v => (None, v),
    };
    let Expr::Bin(BinOp::Mul, a, b) = value else {
        return None;
    };
    padded_factor(p, st, cond, a.as_ref(), b.as_ref(), true)
        .or_else(|| padded_factor(p, st, cond, b.as_ref(), a.as_ref(), false))
        .or_else(|| {
            cond.is_none()
                .then(|| {
                    computed_copy(p, st, a.as_ref(), b.as_ref(), true)
                        .or_else(|| computed_copy(p, st, b.as_ref(), a.as_ref(), false))
                })
                .flatten()
        })
}

/// [`padded_read`] with `fx` the factor that reads the input, `w` the other.
#[allow(clippy::type_complexity)]
fn padded_factor(
    p: &Program,
    st: &Stage,
    cond: Option<&Expr>,
    fx: &Expr,
    w: &Expr,
    x_first: bool,
) -> Option<(Buffer, Box<dyn Fn(BufId) -> Expr>)> {
    let r = st.reduce.as_ref()?;
    let (xb, xi) = one_read(fx)?;
    let xb = &xb;
    let xi = &xi[..];
    if p.bufs[xb.index()].packed {
        return None;
    }
    let xbuf = &p.bufs[xb.index()];
    let xs = &xbuf.ty.shape;
    if xbuf.ty.dtype != DType::F32 || xi.len() != xs.len() {
        return None;
    }
    let vars: Vec<Interval> = st.ty.shape.iter().map(|&e| Interval::upto(e)).collect();
    let rvars: Vec<Interval> = r.extents.iter().map(|&e| Interval::upto(e)).collect();
    // The other factor is read unguarded now: every load of it must stay in its buffer.
    let mut inside = true;
    w.visit(&mut |e| match e {
        Expr::Load(Src::Buf(b), idx) => {
            let shape = &p.bufs[b.index()].ty.shape;
            inside &= idx.len() == shape.len()
                && idx.iter().zip(shape).all(|(i, &n)| {
                    bounds(i, &vars, &rvars).is_some_and(|iv| iv.lo >= 0 && iv.hi < n as i64)
                });
        }
        Expr::LoadFlat(Src::Buf(b), f) => {
            let n = p.bufs[b.index()].ty.numel() as i64;
            inside &= bounds(f, &vars, &rvars).is_some_and(|iv| iv.lo >= 0 && iv.hi < n);
        }
        Expr::Load(..) | Expr::LoadFlat(..) | Expr::Acc => inside = false,
        _ => {}
    });
    if !inside {
        return None;
    }
    let n = xs.len();
    let (has_lo, has_hi) = match cond {
        Some(c) => bound_sides(c, xi, xs)?,
        None => (vec![false; n], vec![false; n]),
    };
    // Only where the rewrite lets the contraction vectorise: along its channels, unguarded
    // (`ranged_channel_axis`: every input value a broadcast, whatever the row's step), or
    // along a row that walks the input's last dimension with a small constant step (a step
    // above one reads a copy split by phase).
    let probe = Stage {
        body: if x_first {
            Expr::bin(BinOp::Mul, fx.clone(), w.clone())
        } else {
            Expr::bin(BinOp::Mul, w.clone(), fx.clone())
        },
        ..st.clone()
    };
    let channel = ranged_channel_axis(p, &probe).is_some();
    let row = st.ty.shape.len().checked_sub(1)? as u32;
    let step = coef(&xi[n - 1], row)?;
    if !channel && (xi[..n - 1].iter().any(|e| uses_var(e, row)) || !(1..=MAX_STEP).contains(&step))
    {
        return None;
    }
    // Unguarded, a copy of a bare load would change nothing but the phase.
    let bare = matches!(fx, Expr::Load(..));
    if cond.is_none() && bare && (step == 1 || channel) {
        return None;
    }
    let mut lo = vec![0i64; n];
    let mut pshape = vec![0usize; n];
    for d in 0..n {
        let iv = bounds(&xi[d], &vars, &rvars)?;
        if (!has_lo[d] && iv.lo < 0) || (!has_hi[d] && iv.hi >= xs[d] as i64) {
            return None;
        }
        lo[d] = iv.lo.min(0);
        // At least the border before it after it too: the same at every size where the
        // window's reach past the end depends on the size's parity (a strided window).
        let hi = iv.hi.max(xs[d] as i64 - 1 - lo[d]);
        if -lo[d] > MAX_PAD || hi - (xs[d] as i64 - 1) > MAX_PAD {
            return None;
        }
        pshape[d] = (hi - lo[d] + 1) as usize;
    }
    // `xp[y] = x[y + lo]` inside `x`, else 0; with a step `s` along the row, its last
    // dimension `s q + f` stored at `[f, q]` (phase `f` first), so that the row reads
    // consecutive `q`.
    let s = if channel { 1 } else { step as usize };
    let mut at: Vec<Expr> = (0..n).map(|d| Expr::var(d).add(Expr::i(lo[d]))).collect();
    let mut store_shape = pshape.clone();
    if s > 1 {
        at[n - 1] = Expr::var(n)
            .mul(Expr::i(step))
            .add(Expr::var(n - 1))
            .add(Expr::i(lo[n - 1]));
        store_shape[n - 1] = s;
        store_shape.push(pshape[n - 1].div_ceil(s));
    }
    let low: Vec<bool> = lo.iter().map(|&l| l < 0).collect();
    let high: Vec<bool> = (0..n)
        .map(|d| pshape[d] as i64 + lo[d] > xs[d] as i64 || (d == n - 1 && s > 1))
        .collect();
    let fx_at = {
        let at = at.clone();
        fx.rewrite(&mut |e| match e {
            Expr::Load(Src::Buf(b), _) if b == xb => Some(Expr::load(Src::Buf(*xb), at.clone())),
            _ => None,
        })
    };
    let body = zero_outside(fx_at, &at, xs, &low, &high);
    let padded = copy_of(st, "padded", TensorType::new(DType::F32, store_shape), body);
    let mut shifted: Vec<Expr> = (0..n).map(|d| xi[d].clone().add(Expr::i(-lo[d]))).collect();
    if s > 1 {
        // `e = s row + rest` (`rest >= 0`: `e >= 0` where the row is 0): phase `rest % s`,
        // column `row + rest / s`.
        let mut at_zero: Vec<Expr> = (0..st.ty.shape.len()).map(Expr::var).collect();
        at_zero[row as usize] = Expr::i(0);
        let rest = shifted[n - 1].subst_vars(&at_zero);
        shifted[n - 1] = Expr::bin(BinOp::Mod, rest.clone(), Expr::i(step));
        shifted.push(Expr::var(row as usize).add(Expr::bin(BinOp::Div, rest, Expr::i(step))));
    }
    let w = w.clone();
    let body = move |xp: BufId| product(Expr::load(Src::Buf(xp), shifted.clone()), &w, x_first);
    Some((padded, Box::new(body)))
}

/// A copy of what factor `fx` of an unguarded sum of products computes of one input alone, read
/// at a flat index (a pointwise convolution's flat image, an activation inlined into a
/// projection's reads): `xc[y] = f(x[y])` over the whole input, the factor then a read of
/// `xc` at the same index. The contraction is left a plain sum of products, which the
/// register-blocked plan takes, and `f` runs once per input element.
#[allow(clippy::type_complexity)]
fn computed_copy(
    p: &Program,
    st: &Stage,
    fx: &Expr,
    w: &Expr,
    x_first: bool,
) -> Option<(Buffer, Box<dyn Fn(BufId) -> Expr>)> {
    if matches!(fx, Expr::Load(..) | Expr::LoadFlat(..)) {
        return None;
    }
    let mut read: Option<(BufId, Expr)> = None;
    let mut ok = true;
    fx.visit(&mut |x| match x {
        Expr::LoadFlat(Src::Buf(b), f) => match &read {
            None => read = Some((*b, (**f).clone())),
            Some((rb, rf)) => ok &= rb == b && rf == f.as_ref(),
        },
        Expr::Load(..) | Expr::LoadFlat(..) | Expr::Acc => ok = false,
        _ => {}
    });
    let (xb, flat) = read.filter(|_| ok)?;
    let xbuf = &p.bufs[xb.index()];
    if xbuf.ty.dtype != DType::F32 || xbuf.packed {
        return None;
    }
    // Outside the read, no variable.
    let rest = fx.rewrite(&mut |x| match x {
        Expr::LoadFlat(..) => Some(Expr::c(DType::F32, 0.0)),
        _ => None,
    });
    let mut vars = false;
    rest.visit(&mut |x| vars |= matches!(x, Expr::Var(_) | Expr::RVar(_)));
    if vars {
        return None;
    }
    let ty = xbuf.ty.clone();
    let at: Vec<Expr> = (0..ty.rank()).map(Expr::var).collect();
    let body = fx.rewrite(&mut |x| match x {
        Expr::LoadFlat(..) => Some(Expr::load(Src::Buf(xb), at.clone())),
        _ => None,
    });
    let copy = copy_of(st, "input", ty, body);
    let w = w.clone();
    let body = move |xc: BufId| product(Expr::load_flat(Src::Buf(xc), flat.clone()), &w, x_first);
    Some((copy, Box::new(body)))
}

/// A materialised stage `<st's name>_<what>` of type `ty` computing `body`, in `st`'s part.
fn copy_of(st: &Stage, what: &str, ty: TensorType, body: Expr) -> Buffer {
    let name = format!("{}_{what}", st.name);
    Buffer {
        name: name.clone(),
        ty: ty.clone(),
        kind: BufKind::Stage(Stage {
            name,
            ty,
            body,
            reduce: None,
            materialize: true,
            part: st.part,
            exec: Exec::Generated,
            choice: None,
        }),
        packed: false,
    }
}

/// `read * w`, or `w * read` (the factors' order kept).
fn product(read: Expr, w: &Expr, x_first: bool) -> Expr {
    if x_first {
        Expr::bin(BinOp::Mul, read, w.clone())
    } else {
        Expr::bin(BinOp::Mul, w.clone(), read)
    }
}

/// Which sides of each dimension of load index `xi` (into a buffer of shape `xs`) the guard
/// `cond` checks, if it is made of nothing but such checks: each conjunct `xi[d] >= 0` or
/// `xi[d] < xs[d]`.
pub(crate) fn bound_sides(
    cond: &Expr,
    xi: &[Expr],
    xs: &[usize],
) -> Option<(Vec<bool>, Vec<bool>)> {
    let n = xs.len();
    let (mut has_lo, mut has_hi) = (vec![false; n], vec![false; n]);
    let mut cs = Vec::new();
    conjuncts(cond, &mut cs);
    for k in cs {
        let (lhs, rhs, lo) = match &k {
            Expr::Bin(BinOp::Ge, l, r) => (l, r, true),
            Expr::Bin(BinOp::Lt, l, r) => (l, r, false),
            _ => return None,
        };
        let d = xi.iter().position(|e| e == lhs.as_ref())?;
        let want = if lo { 0 } else { xs[d] as i64 };
        if **rhs != Expr::i(want) {
            return None;
        }
        if lo {
            has_lo[d] = true;
        } else {
            has_hi[d] = true;
        }
    }
    Some((has_lo, has_hi))
}

/// The read of an input and what is computed of it alone: the buffer and index of every load
/// of `e` (one buffer, one index, at least one load), where `e` uses no variable but in that
/// index.
fn one_read(e: &Expr) -> Option<(BufId, Vec<Expr>)> {
    let mut read: Option<(BufId, Vec<Expr>)> = None;
    let mut ok = true;
    e.visit(&mut |x| match x {
        Expr::Load(Src::Buf(b), idx) => match &read {
            None => read = Some((*b, idx.clone())),
            Some((rb, ri)) => ok &= rb == b && ri == idx,
        },
        Expr::Load(..) | Expr::LoadFlat(..) | Expr::Acc => ok = false,
        _ => {}
    });
    let read = read.filter(|_| ok)?;
    // Outside the load, no variable.
    let rest = e.rewrite(&mut |x| match x {
        Expr::Load(..) => Some(Expr::c(DType::F32, 0.0)),
        _ => None,
    });
    let mut vars = false;
    rest.visit(&mut |x| vars |= matches!(x, Expr::Var(_) | Expr::RVar(_)));
    (!vars).then_some(read)
}

/// `value` where `at` is inside the input (shape `xs`), else 0: the body of a padded copy,
/// checking `at[d] >= 0` where `low[d]` and `at[d] < xs[d]` where `high[d]`.
pub(crate) fn zero_outside(
    value: Expr,
    at: &[Expr],
    xs: &[usize],
    low: &[bool],
    high: &[bool],
) -> Expr {
    let mut guard: Option<Expr> = None;
    for d in 0..xs.len() {
        let mut push = |e: Expr| {
            guard = Some(match guard.take() {
                None => e,
                Some(q) => q.and(e),
            })
        };
        if low[d] {
            push(at[d].clone().ge(Expr::i(0)));
        }
        if high[d] {
            push(at[d].clone().lt(Expr::i(xs[d] as i64)));
        }
    }
    match guard {
        Some(c) => Expr::select(c, value, Expr::c(DType::F32, 0.0)),
        None => value,
    }
}

/// Inserts `buf` at index `at`, every later buffer one on (and every read of it renumbered).
/// Only for a program without groups or plans yet.
fn insert_before(p: &mut Program, at: usize, buf: Buffer) {
    debug_assert!(p.groups.is_empty() && p.row_groups.is_empty() && p.plans.is_empty());
    let up = |b: BufId| {
        if b.index() >= at {
            BufId::new(b.index() + 1)
        } else {
            b
        }
    };
    let up_src = |s: Src| match s {
        Src::Buf(b) => Src::Buf(up(b)),
        other => other,
    };
    for b in &mut p.bufs {
        if let BufKind::Stage(st) = &mut b.kind {
            st.body = st.body.map_src(&up_src);
            if let Some(f) = st.reduce.as_mut().and_then(|r| r.finalize.as_mut()) {
                *f = f.map_src(&up_src);
            }
        }
    }
    for b in p.inputs.iter_mut().chain(p.outputs.iter_mut()) {
        *b = up(*b);
    }
    p.parallel_calls.iter_mut().for_each(|b| *b = up(*b));
    p.bufs.insert(at, buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::te::Reduce;
    use crate::tensor::Tensor;

    /// The first output of `p` on `inputs`, by the reference interpreter.
    fn run(p: &Program, inputs: &[Tensor]) -> Vec<f32> {
        crate::te::run_program(p, inputs)[0].to_f32()
    }

    /// A one-dimensional window of 3 taps with a border of 1: `y[i] = sum_r x[i + r - 1] w[r]`.
    fn window() -> Program {
        strided(1, 5)
    }

    /// The window with step `s` over `x` of 5: `y[i] = sum_r x[s i + r - 1] w[r]`, `out` of
    /// them.
    fn strided(s: i64, out: usize) -> Program {
        let mut p = Program::default();
        let x = p.push("x", TensorType::new(DType::F32, vec![5]), BufKind::Input(0));
        let w = p.push("w", TensorType::new(DType::F32, vec![3]), BufKind::Input(1));
        p.inputs = vec![x, w];
        let at = Expr::var(0)
            .mul(Expr::i(s))
            .add(Expr::rvar(0))
            .add(Expr::i(-1));
        let cond = at.clone().ge(Expr::i(0)).and(at.clone().lt(Expr::i(5)));
        let body = Expr::select(
            cond,
            Expr::bin(
                BinOp::Mul,
                Expr::load(Src::Buf(x), vec![at]),
                Expr::load(Src::Buf(w), vec![Expr::rvar(0)]),
            ),
            Expr::c(DType::F32, 0.0),
        );
        output_sum(&mut p, vec![out], body, vec![3]);
        p
    }

    /// Adds the output `y`, a generated f32 sum of `body` over `extents`.
    fn output_sum(p: &mut Program, shape: Vec<usize>, body: Expr, extents: Vec<usize>) {
        let ty = TensorType::new(DType::F32, shape);
        let y = p.push(
            "y",
            ty.clone(),
            BufKind::Stage(Stage {
                name: "y".into(),
                ty,
                body,
                reduce: Some(Reduce {
                    op: RedOp::Sum,
                    extents,
                    finalize: None,
                }),
                materialize: true,
                part: 0,
                exec: Exec::Generated,
                choice: None,
            }),
        );
        p.outputs = vec![y];
    }

    /// `p` rewritten, with its copy's shape, and the output of the rewritten program on fixed
    /// data, checked equal to the original's.
    fn padded(p: &Program) -> (Program, Vec<usize>, Vec<f32>) {
        let mut q = p.clone();
        pad_windows(&mut q);
        assert_eq!(q.bufs.len(), 4);
        assert_eq!(q.outputs, vec![BufId::new(3)]);
        let y = q.stage(BufId::new(3)).unwrap();
        assert!(!matches!(y.body, Expr::Select(..)), "{:?}", y.body);
        let x = Tensor::from_f32(&[5], &[1.0, -2.0, 3.0, 4.0, 0.5]);
        let w = Tensor::from_f32(&[3], &[0.25, 2.0, -1.0]);
        let (a, b) = (run(p, &[x.clone(), w.clone()]), run(&q, &[x, w]));
        assert_eq!(a, b);
        let shape = q.bufs[2].ty.shape.clone();
        (q, shape, b)
    }

    #[test]
    fn a_guarded_window_reads_its_padded_input() {
        let (_, shape, b) = padded(&window());
        assert_eq!(shape, vec![7]);
        assert_eq!(
            b,
            [
                2.0 + 2.0,
                0.25 - 4.0 - 3.0,
                -0.5 + 6.0 - 4.0,
                0.75 + 8.0 - 0.5,
                1.0 + 1.0
            ]
        );
    }

    #[test]
    fn a_strided_window_reads_its_input_split_by_phase() {
        // x padded to 7, stored as 2 phases of 4.
        let (_, shape, b) = padded(&strided(2, 3));
        assert_eq!(shape, vec![2, 4]);
        assert_eq!(b, [2.0 + 2.0, -0.5 + 6.0 - 4.0, 1.0 + 1.0]);
    }

    /// `x * x + 1`, and the tap `w[r]` of [`strided`]'s program.
    fn square_and_tap(x: Expr) -> (Expr, Expr) {
        let fx = Expr::bin(BinOp::Mul, x.clone(), x).add(Expr::c(DType::F32, 1.0));
        (fx, Expr::load(Src::Buf(BufId::new(1)), vec![Expr::rvar(0)]))
    }

    #[test]
    fn what_a_contraction_computes_of_its_input_alone_is_computed_once() {
        // y[i] = sum_r (x[i] * x[i] + 1) w[r]: no guard, the square once per element of x.
        let mut p = strided(1, 5);
        if let BufKind::Stage(st) = &mut p.bufs[2].kind {
            let (fx, w) = square_and_tap(Expr::load(Src::Buf(BufId::new(0)), vec![Expr::var(0)]));
            st.body = Expr::bin(BinOp::Mul, w, fx);
        }
        let (_, shape, b) = padded(&p);
        assert_eq!(shape, vec![5]);
        assert_eq!(b[1], 5.0 * 1.25);
        // The same read at a flat index: a copy of the square over all of x, read at it.
        if let BufKind::Stage(st) = &mut p.bufs[2].kind {
            let (fx, w) = square_and_tap(Expr::load_flat(Src::Buf(BufId::new(0)), Expr::var(0)));
            st.body = Expr::bin(BinOp::Mul, fx, w);
        }
        let (q, shape, b) = padded(&p);
        assert_eq!(shape, vec![5]);
        assert_eq!(b[1], 5.0 * 1.25);
        let y = q.stage(BufId::new(3)).unwrap();
        assert!(
            matches!(&y.body, Expr::Bin(BinOp::Mul, a, _) if matches!(**a, Expr::LoadFlat(..))),
            "{:?}",
            y.body
        );
        // A bare load without a guard or a step is left as it is.
        let mut p = strided(1, 5);
        if let BufKind::Stage(st) = &mut p.bufs[2].kind {
            let x = Expr::load(Src::Buf(BufId::new(0)), vec![Expr::var(0)]);
            let w = Expr::load(Src::Buf(BufId::new(1)), vec![Expr::rvar(0)]);
            st.body = Expr::bin(BinOp::Mul, x, w);
        }
        let mut q = p.clone();
        pad_windows(&mut q);
        assert_eq!(q.bufs.len(), 3);
    }

    /// A strided convolution served over a range, as a uniform lowering writes it:
    /// `y[0, c, 0, i] = sum_{r0, r1} x[0, r0, 0, 2 i + r1 - 1] w[c * 6 + r0 * 3 + r1]` over 2
    /// input channels and 3 taps, 16 output channels, `x` of width 7, its padding a guard.
    fn channel_conv() -> Program {
        let mut p = Program::default();
        let x = p.push(
            "x",
            TensorType::new(DType::F32, vec![1, 2, 1, 7]),
            BufKind::Input(0),
        );
        let wt = Tensor::from_f32(
            &[96],
            &(0..96).map(|k| (k % 7) as f32 - 3.0).collect::<Vec<_>>(),
        );
        let w = p.push("w", wt.ty.clone(), BufKind::Const(std::sync::Arc::new(wt)));
        p.inputs = vec![x];
        let at = Expr::var(3)
            .mul(Expr::i(2))
            .add(Expr::rvar(1))
            .add(Expr::i(-1));
        let cond = at.clone().ge(Expr::i(0)).and(at.clone().lt(Expr::i(7)));
        let xi = vec![Expr::i(0), Expr::rvar(0), Expr::i(0), at];
        let wi = Expr::var(1)
            .mul(Expr::i(6))
            .add(Expr::rvar(0).mul(Expr::i(3)))
            .add(Expr::rvar(1));
        let body = Expr::select(
            cond,
            Expr::bin(
                BinOp::Mul,
                Expr::load(Src::Buf(x), xi),
                Expr::load_flat(Src::Buf(w), wi),
            ),
            Expr::c(DType::F32, 0.0),
        );
        output_sum(&mut p, vec![1, 16, 1, 3], body, vec![2, 3]);
        p
    }

    #[test]
    fn a_convolution_along_its_channels_reads_a_copy_not_split_by_phase() {
        let p = channel_conv();
        let mut q = p.clone();
        pad_windows(&mut q);
        assert_eq!(q.bufs.len(), 4);
        // The border written out, the row's step left to the index: every input value is a
        // broadcast of the channel-vectorised plan.
        assert_eq!(q.bufs[2].ty.shape, vec![1, 2, 1, 9]);
        let y = q.stage(BufId::new(3)).unwrap();
        assert_eq!(ranged_channel_axis(&q, y), Some(1));
        // Its weight transposed to `w'[r, channel]`, row-major.
        crate::schedule::layout::ranged_channel_weights(&mut q);
        assert_eq!(q.bufs[1].ty.shape, vec![6, 16]);
        assert!(!q.bufs[1].packed);
        let x = Tensor::from_f32(
            &[1, 2, 1, 7],
            &[
                1.0, -2.0, 3.0, 4.0, 0.5, -1.5, 2.5, 0.25, 1.0, -3.0, 2.0, 0.75, -0.5, 1.5,
            ],
        );
        assert_eq!(run(&p, std::slice::from_ref(&x)), run(&q, &[x]));
    }

    #[test]
    fn a_guard_that_is_not_the_loads_bounds_stays() {
        let mut p = window();
        // A guard that cuts inside the input: not padding.
        if let BufKind::Stage(st) = &mut p.bufs[2].kind {
            let Expr::Select(_, v, z) = st.body.clone() else {
                unreachable!()
            };
            let at = Expr::var(0).add(Expr::rvar(0)).add(Expr::i(-1));
            st.body = Expr::select(at.ge(Expr::i(1)), *v, *z);
        }
        let q = {
            let mut q = p.clone();
            pad_windows(&mut q);
            q
        };
        assert_eq!(q.bufs.len(), 3);
    }
}
