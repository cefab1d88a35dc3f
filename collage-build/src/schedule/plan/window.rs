//! Padded windows (pooling): a reduction whose body is `cond ? x : identity`, where every
//! conjunct of `cond` either does not involve the innermost output variable `v` or is a range
//! check on `s * v + rest` (`s > 0`, `rest` free of `v`). The generator then runs the window
//! loops outside and `v` inside over a row of accumulators: for each window point the valid `v`
//! form one interval, so the inner loop has no guard and walks the input with a constant stride
//! (vectorisable), and each element still combines its window points in the same order.
use crate::ir::DType;
use crate::schedule::analysis::conjuncts;
use crate::te::{BinOp, Bound, Expr, Program, RedOp, Reduce, Scalar, Src, Window};

fn mentions(e: &Expr, v: u32) -> bool {
    match e {
        Expr::Var(k) => *k == v,
        Expr::RVar(_) | Expr::Acc | Expr::Const(_) => false,
        Expr::Load(_, idx) => idx.iter().any(|i| mentions(i, v)),
        Expr::LoadFlat(_, f) => mentions(f, v),
        Expr::Un(_, a) | Expr::Cast(_, a) => mentions(a, v),
        Expr::Bin(_, a, b) => mentions(a, v) || mentions(b, v),
        Expr::Select(c, a, b) => mentions(c, v) || mentions(a, v) || mentions(b, v),
    }
}

/// Whether `e` reads reduction variable `r`.
fn mentions_r(e: &Expr, r: u32) -> bool {
    let mut found = false;
    e.visit(&mut |x| found |= *x == Expr::RVar(r));
    found
}

fn int(e: &Expr) -> Option<i64> {
    match e {
        Expr::Const(c) if c.dtype().is_int() => Some(c.as_i64()),
        _ => None,
    }
}

/// `e` as `s * Var(v) + rest` over integer `+`, `-` and products with constants.
fn linear(e: &Expr, v: u32) -> Option<(i64, Expr)> {
    if !mentions(e, v) {
        return Some((0, e.clone()));
    }
    let bin = |op, a: Expr, b: Expr| Expr::Bin(op, Box::new(a), Box::new(b));
    match e {
        Expr::Var(k) if *k == v => Some((1, Expr::i(0))),
        Expr::Bin(BinOp::Add, a, b) => {
            let ((sa, ra), (sb, rb)) = (linear(a, v)?, linear(b, v)?);
            Some((sa + sb, bin(BinOp::Add, ra, rb)))
        }
        Expr::Bin(BinOp::Sub, a, b) => {
            let ((sa, ra), (sb, rb)) = (linear(a, v)?, linear(b, v)?);
            Some((sa - sb, bin(BinOp::Sub, ra, rb)))
        }
        Expr::Bin(BinOp::Mul, a, b) => {
            let (c, x) = match (int(a), int(b)) {
                (_, Some(c)) => (c, a),
                (Some(c), _) => (c, b),
                _ => return None,
            };
            let (s, r) = linear(x, v)?;
            Some((s * c, bin(BinOp::Mul, r, Expr::i(c))))
        }
        _ => None,
    }
}

/// The window of an unpadded pool: a float max, min or sum whose body is one load, with no
/// guard, so every window point is valid over the whole row (no bounds).
pub fn unpadded(body: &Expr, op: RedOp, dtype: DType) -> Option<Window> {
    (matches!(body, Expr::Load(..))
        && matches!(op, RedOp::Max | RedOp::Min | RedOp::Sum)
        && dtype.is_float())
    .then(|| Window {
        bounds: Vec::new(),
        invariant: Vec::new(),
        value: body.clone(),
    })
}

/// The window of a reduction body with identity `init`, split for `Var(v)`, when its guard has
/// at least one range check on `v` and every other conjunct is free of `v`.
pub fn split(body: &Expr, init: Scalar, v: u32) -> Option<Window> {
    let Expr::Select(cond, x, y) = body else {
        return None;
    };
    if **y != Expr::Const(init) {
        return None;
    }
    let mut atoms = Vec::new();
    conjuncts(cond, &mut atoms);
    let mut w = Window {
        bounds: Vec::new(),
        invariant: Vec::new(),
        value: (**x).clone(),
    };
    for a in atoms {
        if !mentions(&a, v) {
            w.invariant.push(a);
            continue;
        }
        let Expr::Bin(op, l, b) = &a else {
            return None;
        };
        if mentions(b, v) {
            return None;
        }
        let (s, rest) = linear(l, v)?;
        if s <= 0 {
            return None;
        }
        let num = Expr::Bin(BinOp::Sub, b.clone(), Box::new(rest));
        // s*v >= n <=> v >= ceil(n/s);  s*v > n <=> v >= floor(n/s) + 1;
        // s*v < n <=> v < ceil(n/s);    s*v <= n <=> v < floor(n/s) + 1.
        let (lower, ceil) = match op {
            BinOp::Ge => (true, true),
            BinOp::Gt => (true, false),
            BinOp::Lt => (false, true),
            BinOp::Le => (false, false),
            _ => return None,
        };
        w.bounds.push(Bound {
            lower,
            num,
            s,
            ceil,
        });
    }
    (!w.bounds.is_empty()).then_some(w)
}

/// Widest input row a separable window keeps on the stack (floats).
const MAX_SEPARABLE_ROW: usize = 4096;

/// A max or min window `w` of reduction `r` (split for output variable `v`) over two reduction
/// variables, the first picking its input row and the second moving along that row (a 2-D
/// pool): the load with the row's column as `col` instead, the loaded column, and the row's
/// width. The window's maximum is then the maximum over its columns of each input column's
/// maximum over the window's rows; the bounds on `v` depend on the second variable only.
pub(crate) fn separable(
    p: &Program,
    w: &Window,
    r: &Reduce,
    v: u32,
    col: &Expr,
) -> Option<(Expr, Expr, usize)> {
    if !matches!(r.op, RedOp::Max | RedOp::Min) || r.extents.len() != 2 {
        return None;
    }
    let Expr::Load(Src::Buf(b), idx) = &w.value else {
        return None;
    };
    let buf = &p.bufs[b.index()];
    let (last, rows) = idx.split_last()?;
    let width = *buf.ty.shape.last()?;
    let fits = !buf.packed && idx.len() == buf.ty.rank() && width <= MAX_SEPARABLE_ROW;
    let rows_ok = rows.iter().all(|e| !mentions_r(e, 1) && !mentions(e, v));
    let rest_ok = w.invariant.iter().all(|e| !mentions_r(e, 1))
        && w.bounds.iter().all(|b| !mentions_r(&b.num, 0));
    (fits && rows_ok && !mentions_r(last, 0) && rest_ok).then(|| {
        let mut at = rows.to_vec();
        at.push(col.clone());
        (Expr::Load(Src::Buf(*b), at), last.clone(), width)
    })
}

/// A separable unpadded max or min window ([`separable`]) over an f32 row whose columns are
/// `2 * v + r1` for the window's two columns `r1` (a 2x2 or 3x2 pool of stride 2 along the row):
/// the window's columns are the even and odd lanes of one vector of `2 * lanes / 2` inputs, so
/// a vector of `lanes` inputs gives `lanes / 2` outputs by one shuffle each way and one max.
/// Returns the load at column `col` (the row's element `col`) and the row's width. Such a pool
/// vectorises on rows narrower than a vector, where the scalar window took a load, a compare
/// and a select per window point (mnist_cnn's 2x2 pool of 8x28x28, Zen 5, AVX-512, two
/// threads: 1.5 -> 0.4 us).
pub(crate) fn pairs(
    p: &Program,
    w: &Window,
    r: &Reduce,
    v: u32,
    col: &Expr,
    dtype: DType,
) -> Option<(Expr, usize)> {
    if dtype != DType::F32
        || !w.bounds.is_empty()
        || !w.invariant.is_empty()
        || r.extents.get(1) != Some(&2)
        || r.finalize.is_some()
    {
        return None;
    }
    let (rowload, at, width) = separable(p, w, r, v, col)?;
    // The column `2 * v + r1`, exactly: the rest is `r1` at both of its values.
    let (s, rest) = linear(&at, v)?;
    let at_r1 = |k: i64| eval_r1(&rest, k);
    (s == 2 && at_r1(0) == Some(0) && at_r1(1) == Some(1)).then_some((rowload, width))
}

/// The value of integer expression `e` with `RVar(1)` at `k`, if it reads nothing else.
fn eval_r1(e: &Expr, k: i64) -> Option<i64> {
    match e {
        Expr::RVar(1) => Some(k),
        Expr::Const(_) => int(e),
        Expr::Bin(op, a, b) => {
            let (a, b) = (eval_r1(a, k)?, eval_r1(b, k)?);
            match op {
                BinOp::Add => a.checked_add(b),
                BinOp::Sub => a.checked_sub(b),
                BinOp::Mul => a.checked_mul(b),
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;
    use crate::te::Src;

    fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Bin(op, Box::new(a), Box::new(b))
    }

    /// `i3 * 2 - 1 + r1`: a stride-2 padded column.
    fn col() -> Expr {
        bin(
            BinOp::Add,
            bin(
                BinOp::Sub,
                bin(BinOp::Mul, Expr::Var(3), Expr::i(2)),
                Expr::i(1),
            ),
            Expr::RVar(1),
        )
    }

    /// Evaluates a bound for given r1 and checks it against brute force over v.
    fn eval(e: &Expr, r1: i64) -> i64 {
        match e {
            Expr::RVar(1) => r1,
            Expr::Const(c) => c.as_i64(),
            Expr::Bin(BinOp::Add, a, b) => eval(a, r1) + eval(b, r1),
            Expr::Bin(BinOp::Sub, a, b) => eval(a, r1) - eval(b, r1),
            Expr::Bin(BinOp::Mul, a, b) => eval(a, r1) * eval(b, r1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stride_two_window_bounds_match_brute_force() {
        let ninf = Scalar::F32(f32::NEG_INFINITY);
        let row = bin(BinOp::Ge, Expr::RVar(0), Expr::i(1));
        for (op, b) in [
            (BinOp::Ge, 0),
            (BinOp::Gt, 0),
            (BinOp::Lt, 111),
            (BinOp::Le, 111),
        ] {
            let cond = bin(BinOp::And, row.clone(), bin(op, col(), Expr::i(b)));
            let load = Expr::Load(Src::Buf(crate::te::BufId(0)), vec![col()]);
            let body = Expr::Select(
                Box::new(Expr::Cast(DType::Bool, Box::new(cond))),
                Box::new(load.clone()),
                Box::new(Expr::Const(ninf)),
            );
            let w = split(&body, ninf, 3).unwrap();
            assert_eq!(w.value, load);
            assert_eq!(w.invariant, vec![row.clone()]);
            let bd = &w.bounds[0];
            for r1 in 0..3 {
                let n = eval(&bd.num, r1);
                let q = if bd.ceil {
                    n.div_euclid(bd.s) + i64::from(n.rem_euclid(bd.s) != 0)
                } else {
                    n.div_euclid(bd.s) + 1
                };
                for v in -3..60i64 {
                    let p = v * 2 - 1 + r1;
                    let holds = match op {
                        BinOp::Ge => p >= b,
                        BinOp::Gt => p > b,
                        BinOp::Lt => p < b,
                        _ => p <= b,
                    };
                    let inside = if bd.lower { v >= q } else { v < q };
                    assert_eq!(holds, inside, "{op:?} {b} r1={r1} v={v}");
                }
            }
        }
        // Negative coefficient or the variable in the bound: no window.
        let neg = bin(
            BinOp::Ge,
            bin(BinOp::Sub, Expr::i(5), Expr::Var(3)),
            Expr::i(0),
        );
        let body = Expr::Select(
            Box::new(neg),
            Box::new(Expr::RVar(0)),
            Box::new(Expr::Const(ninf)),
        );
        assert!(split(&body, ninf, 3).is_none());
    }
}
