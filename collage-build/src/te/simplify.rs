//! Index simplification with variable ranges: `(a * c + b) / c` becomes `a` and `(a * c + b) % c`
//! becomes `b` when `0 <= b < c`. After inlining reshapes and transposes, index expressions are
//! full of such divisions; removing them makes loads affine (vectorisable, analysable).
use super::{BinOp, Expr, Scalar, Src, Stage};

/// An affine form: sum of `coef * atom` plus a constant.
#[derive(Clone, Debug)]
struct Lin {
    terms: Vec<(Expr, i64)>,
    c: i64,
}

impl Lin {
    fn add(mut self, o: Lin, sign: i64) -> Lin {
        for (a, k) in o.terms {
            match self.terms.iter_mut().find(|(b, _)| *b == a) {
                Some(t) => t.1 += sign * k,
                None => self.terms.push((a, sign * k)),
            }
        }
        self.c += sign * o.c;
        self.terms.retain(|(_, k)| *k != 0);
        self
    }

    fn scale(mut self, s: i64) -> Lin {
        self.terms.iter_mut().for_each(|t| t.1 *= s);
        self.c *= s;
        self.terms.retain(|(_, k)| *k != 0);
        self
    }

    fn to_expr(&self) -> Expr {
        let mut e = Expr::i(0);
        for (a, k) in &self.terms {
            e = e.add(a.clone().mul(Expr::i(*k)));
        }
        e.add(Expr::i(self.c))
    }
}

/// Inclusive ranges of the output and reduction variables.
struct Ranges<'a> {
    vars: &'a [usize],
    rvars: &'a [usize],
}

impl Ranges<'_> {
    fn atom(&self, e: &Expr) -> Option<(i64, i64)> {
        match e {
            Expr::Var(k) => self.vars.get(*k as usize).map(|&n| (0, n as i64 - 1)),
            Expr::RVar(k) => self.rvars.get(*k as usize).map(|&n| (0, n as i64 - 1)),
            Expr::Bin(op @ (BinOp::Div | BinOp::FMod), a, b) => {
                let Expr::Const(Scalar::I64(d)) = b.as_ref() else {
                    return None;
                };
                let (lo, hi) = self.range(&lin(a))?;
                if *d <= 0 || lo < 0 {
                    return None;
                }
                Some(if *op == BinOp::Div {
                    (lo / d, hi / d)
                } else if hi < *d {
                    (lo, hi)
                } else {
                    (0, d - 1)
                })
            }
            _ => None,
        }
    }

    fn range(&self, l: &Lin) -> Option<(i64, i64)> {
        let (mut lo, mut hi) = (l.c, l.c);
        for (a, k) in &l.terms {
            let (alo, ahi) = self.atom(a)?;
            let (x, y) = (alo.checked_mul(*k)?, ahi.checked_mul(*k)?);
            lo = lo.checked_add(x.min(y))?;
            hi = hi.checked_add(x.max(y))?;
        }
        Some((lo, hi))
    }
}

fn lin(e: &Expr) -> Lin {
    match e {
        Expr::Const(Scalar::I64(c)) => Lin {
            terms: vec![],
            c: *c,
        },
        Expr::Bin(BinOp::Add, a, b) => lin(a).add(lin(b), 1),
        Expr::Bin(BinOp::Sub, a, b) => lin(a).add(lin(b), -1),
        Expr::Bin(BinOp::Mul, a, b) => match (a.as_ref(), b.as_ref()) {
            (x, Expr::Const(Scalar::I64(c))) | (Expr::Const(Scalar::I64(c)), x) => lin(x).scale(*c),
            _ => Lin {
                terms: vec![(e.clone(), 1)],
                c: 0,
            },
        },
        other => Lin {
            terms: vec![(other.clone(), 1)],
            c: 0,
        },
    }
}

/// `e` as `sum(k * atom) + c` (the form the simplifier works on): the atoms are the variables and
/// every sub-expression that is not a sum, difference or product by an integer constant.
pub(crate) fn affine_terms(e: &Expr) -> (Vec<(Expr, i64)>, i64) {
    let l = lin(e);
    (l.terms, l.c)
}

/// Splits `l` into `q * d + r` with every coefficient of `r` smaller than `d` in magnitude.
fn divmod(l: &Lin, d: i64) -> (Lin, Lin) {
    let mut q = Lin {
        terms: vec![],
        c: l.c.div_euclid(d),
    };
    let mut r = Lin {
        terms: vec![],
        c: l.c.rem_euclid(d),
    };
    for (a, k) in &l.terms {
        if k % d == 0 {
            q.terms.push((a.clone(), k / d));
        } else {
            r.terms.push((a.clone(), *k));
        }
    }
    (q, r)
}

fn simplify_node(e: &Expr, rg: &Ranges) -> Option<Expr> {
    let Expr::Bin(op @ (BinOp::Div | BinOp::FMod | BinOp::Mod), a, b) = e else {
        return None;
    };
    let Expr::Const(Scalar::I64(d)) = b.as_ref() else {
        return None;
    };
    if *d <= 0 {
        return None;
    }
    let l = lin(a);
    let (lo, hi) = rg.range(&l)?;
    if lo < 0 {
        return None;
    }
    if hi < *d {
        return Some(if *op == BinOp::Div {
            Expr::i(0)
        } else {
            l.to_expr()
        });
    }
    let (q, r) = divmod(&l, *d);
    let (rlo, rhi) = rg.range(&r)?;
    if rlo >= 0 && rhi < *d {
        return Some(if *op == BinOp::Div {
            q.to_expr()
        } else {
            r.to_expr()
        });
    }
    if rlo >= 0 && !q.terms.is_empty() {
        // (q*d + r) / d = q + r / d and (q*d + r) % d = r % d when r >= 0.
        let rd = Expr::Bin(*op, Box::new(r.to_expr()), Box::new(Expr::i(*d)));
        let rd = simplify_node(&rd, rg).unwrap_or(rd);
        return Some(if *op == BinOp::Div {
            q.to_expr().add(rd)
        } else {
            rd
        });
    }
    None
}

/// A sum holding `(x / d) * k d` and `(x % d) * k` (C's truncating pair, so for any `x`) holds
/// `k x`: a reshape split `x` into a row and a column and the next flattening joined them again.
fn rejoin(e: &Expr) -> Option<Expr> {
    if !matches!(e, Expr::Bin(BinOp::Add | BinOp::Sub, ..)) {
        return None;
    }
    let mut l = lin(e);
    let mut changed = false;
    loop {
        let pair = l.terms.iter().enumerate().find_map(|(i, (a, k))| {
            let Expr::Bin(BinOp::FMod, x, d) = a else {
                return None;
            };
            let Expr::Const(Scalar::I64(dv)) = d.as_ref() else {
                return None;
            };
            let j = l.terms.iter().position(|(b, kb)| {
                Some(*kb) == k.checked_mul(*dv)
                    && matches!(b, Expr::Bin(BinOp::Div, y, d2) if y == x && d2 == d)
            })?;
            Some((i, j, lin(x).scale(*k)))
        });
        let Some((i, j, x)) = pair else { break };
        l.terms.remove(i.max(j));
        l.terms.remove(i.min(j));
        l = l.add(x, 1);
        changed = true;
    }
    changed.then(|| l.to_expr())
}

/// Simplifies every integer division and remainder in `e` given the variables' extents, and
/// re-joins split-and-flattened indices (`(x / d) * d + x % d` is `x`).
pub fn simplify(e: &Expr, vars: &[usize], rvars: &[usize]) -> Expr {
    let rg = Ranges { vars, rvars };
    e.rewrite(&mut |x| simplify_node(x, &rg))
        .rewrite(&mut rejoin)
}

/// `e` with every load of a program's buffer whose flat offset [`rejoin`]s read flat from that
/// offset (`shapes[b]`: buffer `b`'s shape): a residual read through a reshape,
/// `x[0, c, p / 14, p % 14]`, becomes `x{c * 196 + p}`, affine in `p` (vectorisable).
pub fn rejoin_loads(e: &Expr, shapes: &[Vec<usize>]) -> Expr {
    e.rewrite(&mut |x| {
        let Expr::Load(Src::Buf(b), idx) = x else {
            return None;
        };
        let flat = rejoin(&Expr::flatten(idx, shapes.get(b.index())?))?;
        // Only when no division is left: a load that keeps some (an im2col's window) stays
        // multi-dimensional, where the window analysis reads its bounds per dimension.
        let mut divides = false;
        flat.visit(&mut |e| {
            divides |= matches!(e, Expr::Bin(BinOp::Div | BinOp::FMod | BinOp::Mod, ..))
        });
        (!divides).then(|| Expr::LoadFlat(Src::Buf(*b), Box::new(flat)))
    })
}

/// Simplifies a stage's body and epilogue in place.
pub fn simplify_stage(st: &mut Stage) {
    let vars = st.ty.shape.clone();
    let rvars = st
        .reduce
        .as_ref()
        .map(|r| r.extents.clone())
        .unwrap_or_default();
    st.body = simplify(&st.body, &vars, &rvars);
    if let Some(f) = st.reduce.as_mut().and_then(|r| r.finalize.as_mut()) {
        *f = simplify(f, &vars, &[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_round_trip_divisions_vanish() {
        // ((i*768 + j*64 + r) / 768) % 128 with j < 12, r < 64, i < 128  ==>  i
        let flat = Expr::var(0)
            .mul(Expr::i(768))
            .add(Expr::var(1).mul(Expr::i(64)))
            .add(Expr::rvar(0));
        let e = flat.clone().div(Expr::i(768)).fmod(Expr::i(128));
        assert_eq!(simplify(&e, &[128, 12], &[64]), Expr::var(0));
        let m = flat.fmod(Expr::i(768));
        let want = Expr::var(1).mul(Expr::i(64)).add(Expr::rvar(0));
        assert_eq!(simplify(&m, &[128, 12], &[64]), want);
    }

    #[test]
    fn nested_divisions_peel_exact_multiples() {
        // ((i*768 + r) / 64) % 12 with r < 768  ==>  r / 64
        let e = Expr::var(0)
            .mul(Expr::i(768))
            .add(Expr::rvar(0))
            .div(Expr::i(64))
            .fmod(Expr::i(12));
        assert_eq!(simplify(&e, &[128], &[768]), Expr::rvar(0).div(Expr::i(64)));
    }

    #[test]
    fn split_and_flattened_indices_rejoin() {
        // i1 * 196 + (i2 / 14) * 14 + i2 % 14  ==>  i1 * 196 + i2, for any i2 (no range needed)
        let i2 = Expr::var(1);
        let e = Expr::var(0)
            .mul(Expr::i(196))
            .add(i2.clone().div(Expr::i(14)).mul(Expr::i(14)))
            .add(i2.clone().fmod(Expr::i(14)));
        let want = Expr::var(0).mul(Expr::i(196)).add(Expr::var(1));
        assert_eq!(simplify(&e, &[4, 1 << 40], &[]), want);
        // Scaled by 3, with the pair in the other order, around a reduction variable.
        let x = Expr::var(0).add(Expr::rvar(0));
        let e = x
            .clone()
            .fmod(Expr::i(7))
            .mul(Expr::i(3))
            .add(x.clone().div(Expr::i(7)).mul(Expr::i(21)));
        assert_eq!(
            simplify(&e, &[1 << 40], &[5]),
            Expr::var(0)
                .mul(Expr::i(3))
                .add(Expr::rvar(0).mul(Expr::i(3)))
        );
        // A remainder by another divisor does not pair.
        let keep = i2
            .clone()
            .div(Expr::i(14))
            .mul(Expr::i(14))
            .add(i2.clone().fmod(Expr::i(7)));
        assert_eq!(simplify(&keep, &[1 << 40, 1 << 40], &[]), keep);
    }

    #[test]
    fn divisions_that_do_not_simplify_are_kept() {
        let e = Expr::var(0).add(Expr::i(5)).div(Expr::i(4));
        assert_eq!(simplify(&e, &[10], &[]), e);
        let neg = Expr::var(0).sub(Expr::i(1)).div(Expr::i(4));
        assert_eq!(simplify(&neg, &[3], &[]), neg);
    }
}
