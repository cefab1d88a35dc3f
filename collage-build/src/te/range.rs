//! A program served over a range of one dimension (`Build::dim_range`): one set of kernels whose
//! extent along that dimension is a run-time value `d`.
//!
//! The program is derived from the programs lowered at several sizes of the range (the
//! samples): they must have the same buffers and the same expressions, and may differ only in
//! integers (extents, strides, offsets, guards), each of which must be one function
//! `floor((a d + b) / c)` of the size at every sample ([`Sym::fit`]). Those integers become
//! the program's *parameters*: reads of a small `i64` input buffer (`Ranged::param_buf`)
//! that the entry point fills from `d`. Shape arithmetic an exporter writes (`Shape` ->
//! `Gather` -> `Concat` -> `Reshape`) is folded at every sample by shape inference, so it
//! arrives here as such integers. A caller checks the result against the program lowered at
//! a size that was not a sample ([`Ranged::verify`]) before using it.
//!
//! Every buffer whose shape has a parameter is laid out packed at its run-time shape (so a
//! reshape's flat reinterpretation stays exact); a constant whose shape depends on `d` (a
//! folded `Range` of positions) is stored at the largest size and copied into its run-time
//! shape by a stage, after checking that every sample's value is that prefix of it.

use super::{BufId, BufKind, Buffer, Exec, Expr, Program, Reduce, Scalar, Src, Stage};
use crate::tensor::{strides, DType, Tensor, TensorType};
use std::sync::Arc;

/// An integer of a program as a function of the run-time size `d`: `m floor((a d + b) / c) + k`,
/// `c > 0`, `m > 0` (`m = 1`, `k = 0` but for counts of tiles).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym {
    /// Coefficient of `d`.
    pub a: i64,
    /// Constant term.
    pub b: i64,
    /// Positive divisor (floor division).
    pub c: i64,
    /// Positive multiplier of the quotient (a tile's elements).
    pub m: i64,
    /// Constant added to the product (a border around whole tiles).
    pub k: i64,
}

impl Sym {
    /// `a d + b`.
    pub fn affine(a: i64, b: i64) -> Sym {
        Sym::quotient(a, b, 1)
    }

    /// `floor((a d + b) / c)`.
    pub fn quotient(a: i64, b: i64, c: i64) -> Sym {
        Sym {
            a,
            b,
            c,
            m: 1,
            k: 0,
        }
    }

    /// The value at size `d`.
    pub fn at(self, d: i64) -> i64 {
        self.m * (self.a * d + self.b).div_euclid(self.c) + self.k
    }

    /// The points as multiples of `m` plus a remainder `k`, for every divisor `m > 1` of the
    /// greatest common divisor of their differences: `(m, k, (d, (v - k) / m))`.
    fn scaled(points: &[(i64, i64)]) -> Vec<(i64, i64, Vec<(i64, i64)>)> {
        let Some(&(_, v0)) = points.first() else {
            return Vec::new();
        };
        let g = points
            .iter()
            .fold(0i64, |g, &(_, v)| gcd(g, (v - v0).abs()));
        (2..=g.min(1 << 16))
            .filter(|m| g % m == 0)
            .map(|m| {
                let k = v0.rem_euclid(m);
                (
                    m,
                    k,
                    points.iter().map(|&(d, v)| (d, (v - k) / m)).collect(),
                )
            })
            .collect()
    }

    /// The function through every point `(d, value)`: affine if one is (`c = 1`), else with
    /// the smallest divisor up to 16 that fits (a strided window's output extent), else such a
    /// quotient times a divisor of the values' differences plus their remainder (a count of
    /// tiles times a tile's elements, plus a border). `None` if none does. The points may
    /// leave several such functions ([`Sym::ambiguous_at`]).
    pub fn fit(points: &[(i64, i64)]) -> Option<Sym> {
        Self::candidates(points).into_iter().next()
    }

    /// Every function of the form through every point (the divisors up to 16, the slopes
    /// [`Sym::fit`] tries, every constant term that fits): the points may leave the constant
    /// term of a floor open (`(w + 1) / 4` and `(w + 2) / 4` agree at 32, 33, 176, 177, 319
    /// and 320).
    fn candidates(points: &[(i64, i64)]) -> Vec<Sym> {
        let mut out = Self::quotient_candidates(points);
        for (m, k, scaled) in Self::scaled(points) {
            out.extend(
                Self::quotient_candidates(&scaled)
                    .into_iter()
                    .map(|q| Sym { m, k, ..q }),
            );
        }
        out
    }

    /// [`Sym::candidates`] of a quotient alone.
    fn quotient_candidates(points: &[(i64, i64)]) -> Vec<Sym> {
        let mut out = Vec::new();
        let (Some(&(d0, v0)), Some(&(d1, v1))) = (points.first(), points.last()) else {
            return out;
        };
        if d0 == d1 {
            return out;
        }
        for c in 1..=16i64 {
            let mid = (c * (v1 - v0)).div_euclid(d1 - d0);
            for a in [mid, mid + 1, mid - 1] {
                let lo = points.iter().map(|&(d, v)| c * v - a * d).max();
                let hi = points.iter().map(|&(d, v)| c * v - a * d + c - 1).min();
                if let (Some(lo), Some(hi)) = (lo, hi) {
                    out.extend((lo..=hi).map(|b| Sym::quotient(a, b, c)));
                }
            }
        }
        out
    }

    /// A size in `lo..=hi` at which two functions through the points ([`Sym::candidates`])
    /// differ: a sample there decides between them. `None` if they are one function over the
    /// range.
    pub fn ambiguous_at(points: &[(i64, i64)], lo: i64, hi: i64) -> Option<i64> {
        let cands = Self::candidates(points);
        let (first, rest) = cands.split_first()?;
        (lo..=hi).find(|&d| {
            let v = first.at(d);
            rest.iter().any(|s| s.at(d) != v)
        })
    }

    /// As text over the dimension's name: `width`, `4*width - 3`, `(width + 1) / 2`.
    pub fn text(self, dim: &str) -> String {
        let lin = match (self.a, self.b) {
            (0, b) => b.to_string(),
            (1, 0) => dim.to_string(),
            (a, 0) => format!("{a}*{dim}"),
            (1, b) if b < 0 => format!("{dim} - {}", -b),
            (1, b) => format!("{dim} + {b}"),
            (a, b) if b < 0 => format!("{a}*{dim} - {}", -b),
            (a, b) => format!("{a}*{dim} + {b}"),
        };
        let q = match self.c {
            1 => lin,
            c if lin.contains(' ') => format!("({lin}) / {c}"),
            c => format!("{lin} / {c}"),
        };
        let q = match self.m {
            1 => q,
            m if q.contains(' ') => format!("{m}*({q})"),
            m => format!("{m}*{q}"),
        };
        match self.k {
            0 => q,
            k if k < 0 => format!("{q} - {}", -k),
            k => format!("{q} + {k}"),
        }
    }

    /// As C over the `int64_t` variable `d`.
    pub fn c_expr(self, d: &str) -> String {
        let lin = match (self.a, self.b) {
            (a, 0) => format!("{a} * {d}"),
            (a, b) => format!("({a} * {d} + {b})"),
        };
        let q = if self.c == 1 {
            lin
        } else {
            format!("cl_floordiv_i64({lin}, {})", self.c)
        };
        if (self.m, self.k) == (1, 0) {
            q
        } else {
            format!("({} * {q} + {})", self.m, self.k)
        }
    }
}

/// The greatest common divisor of `a` and `b` (`gcd(0, b) = b`).
fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A program served over `lo..=hi` of dimension `dim`.
#[derive(Clone, Debug)]
pub struct Ranged {
    /// The program at the range's largest size, its integers that depend on the size read
    /// from the parameter buffer.
    pub program: Program,
    /// The dimension's name.
    pub dim: String,
    /// Smallest size served.
    pub lo: usize,
    /// Largest size served: every buffer's room.
    pub hi: usize,
    /// Parameter `k` of the program is `params[k]` of the run-time size.
    pub params: Vec<Sym>,
    /// The `i64` input buffer of the parameters (the last input).
    pub param_buf: BufId,
    /// Every buffer's run-time shape: `I64` expressions (constants, or parameters).
    pub shapes: Vec<Vec<Expr>>,
    /// The run-time shape every stage iterates (its own type's, which a fused view's buffer
    /// stores at the same flat offsets under another shape).
    pub iters: Vec<Option<Vec<Expr>>>,
    /// The run-time extents of every stage's reduction.
    pub reduces: Vec<Option<Vec<Expr>>>,
    /// Constants whose shape depends on the size (converted by [`Ranged::finish`]).
    dyn_consts: Vec<BufId>,
    /// Sizes of the range at which the functions that fit some integer at the samples differ:
    /// until samples there decide, the program is not known to be right at every size.
    pub wanted: Vec<usize>,
}

/// Builds the parameters of a program from its samples.
struct Merger<'a> {
    dim: &'a str,
    sizes: Vec<i64>,
    /// The range served.
    lo: i64,
    hi: i64,
    params: Vec<Sym>,
    param_buf: BufId,
    /// Sizes at which the functions that fit some integer differ ([`Sym::ambiguous_at`]).
    wanted: std::collections::BTreeSet<usize>,
    /// What [`Sym::fit`] and [`Sym::ambiguous_at`] found for each set of points.
    scanned: std::collections::HashMap<Vec<(i64, i64)>, (Option<Sym>, Option<i64>)>,
}

impl Merger<'_> {
    /// [`Sym::fit`], noting a size that decides between the functions that fit where the
    /// points leave more than one over the range.
    fn fit(&mut self, points: &[(i64, i64)]) -> Option<Sym> {
        // Many integers are the same values (strides): each set of points is fitted once.
        let (lo, hi) = (self.lo, self.hi);
        let (sym, open) = *self.scanned.entry(points.to_vec()).or_insert_with(|| {
            let sym = Sym::fit(points);
            (sym, sym.and_then(|_| Sym::ambiguous_at(points, lo, hi)))
        });
        if let Some(d) = open {
            self.wanted.insert(d as usize);
        }
        sym
    }

    /// The parameter expression of `sym` (of type `dtype`).
    fn param(&mut self, sym: Sym, dtype: DType) -> Expr {
        let k = match self.params.iter().position(|&s| s == sym) {
            Some(k) => k,
            None => {
                self.params.push(sym);
                self.params.len() - 1
            }
        };
        let e = Expr::LoadFlat(Src::Buf(self.param_buf), Box::new(Expr::i(k as i64)));
        if dtype == DType::I64 {
            e
        } else {
            Expr::Cast(dtype, Box::new(e))
        }
    }

    /// The integer `values` (one per sample) as a constant, or as a parameter.
    fn int(
        &mut self,
        values: &[i64],
        dtype: DType,
        what: &dyn Fn() -> String,
    ) -> Result<Expr, String> {
        if values.iter().all(|&v| v == values[0]) {
            return Ok(Expr::Const(Scalar::from_i64(dtype, values[0])));
        }
        let points: Vec<(i64, i64)> = self
            .sizes
            .iter()
            .copied()
            .zip(values.iter().copied())
            .collect();
        let sym = self.fit(&points).ok_or_else(|| {
            format!(
                "{}: its value at the sizes {} of `{}` is {}, not one function floor((a*{} + b) / c) of it",
                what(),
                join(&self.sizes),
                self.dim,
                join(values),
                self.dim
            )
        })?;
        Ok(self.param(sym, dtype))
    }

    /// Floating-point `values` (one per sample) that are a count `n` of the size (a Div by a
    /// length) or its reciprocal `1 / n` (a mean's scale), as that expression of a parameter:
    /// `n` converts exactly, and `1 / n` divides as the folded constant did.
    fn float(&mut self, values: &[f64], dtype: DType) -> Option<Expr> {
        let whole = |x: f64| (x.round() - x).abs() <= 1e-6 * x.abs().max(1.0) && x.round() >= 1.0;
        let fit = |m: &mut Self, ns: Vec<i64>| -> Option<Expr> {
            let points: Vec<(i64, i64)> = m.sizes.iter().copied().zip(ns).collect();
            let sym = m.fit(&points)?;
            Some(m.param(sym, DType::I64).cast(dtype))
        };
        if values.iter().all(|&x| whole(x)) {
            return fit(self, values.iter().map(|x| x.round() as i64).collect());
        }
        if values.iter().all(|&x| x != 0.0 && whole(1.0 / x)) {
            let n = fit(
                self,
                values.iter().map(|x| (1.0 / x).round() as i64).collect(),
            )?;
            return Some(Expr::c(dtype, 1.0).div(n));
        }
        None
    }

    /// A dimension list: constants or parameters.
    fn shape(
        &mut self,
        shapes: &[&[usize]],
        what: &dyn Fn() -> String,
    ) -> Result<Vec<Expr>, String> {
        let rank = shapes[0].len();
        if shapes.iter().any(|s| s.len() != rank) {
            return Err(format!("{}: its rank changes with `{}`", what(), self.dim));
        }
        (0..rank)
            .map(|k| {
                let v: Vec<i64> = shapes.iter().map(|s| s[k] as i64).collect();
                let e = self.int(&v, DType::I64, &|| format!("{}, dimension {k}", what()))?;
                if let Some(s) = self.sym_of(&e) {
                    if s.a < 0 {
                        return Err(format!(
                            "{}: dimension {k} shrinks as `{}` grows, so the largest size does not bound its room",
                            what(),
                            self.dim
                        ));
                    }
                }
                Ok(e)
            })
            .collect()
    }

    fn sym_of(&self, e: &Expr) -> Option<Sym> {
        param_index(e, self.param_buf).map(|k| self.params[k])
    }

    /// The expression of every sample's `es` as one, its differing integers parameters.
    fn expr(&mut self, es: &[&Expr], what: &dyn Fn() -> String) -> Result<Expr, String> {
        let e0 = es[0];
        let dim = self.dim;
        let sizes = self.sizes.clone();
        let differ = || {
            let other = es.iter().position(|e| *e != e0).unwrap_or(0);
            format!(
                "{}: its expression changes with `{dim}`: `{}` at {}, `{}` at {}",
                what(),
                short(e0),
                sizes[0],
                short(es[other]),
                sizes[other]
            )
        };
        let same_kind = es
            .iter()
            .all(|e| std::mem::discriminant(*e) == std::mem::discriminant(e0));
        if !same_kind {
            return Err(differ());
        }
        Ok(match e0 {
            Expr::Const(s0) => {
                let cs: Vec<Scalar> = es
                    .iter()
                    .map(|e| match e {
                        Expr::Const(s) => *s,
                        _ => unreachable!("same kind"),
                    })
                    .collect();
                if cs.iter().all(|c| c == s0) {
                    return Ok(e0.clone());
                }
                let d = s0.dtype();
                if cs.iter().any(|c| c.dtype() != d) {
                    return Err(differ());
                }
                if d.is_float() {
                    let v: Vec<f64> = cs.iter().map(|c| c.as_f64()).collect();
                    if let Some(e) = self.float(&v, d) {
                        return Ok(e);
                    }
                }
                if d.is_float() || d == DType::Bool {
                    return Err(format!(
                        "{}: a constant ({}) changes with `{}`; a run-time size is served only where the sizes are integers (extents, strides, offsets)",
                        what(),
                        cs.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(", "),
                        self.dim
                    ));
                }
                let v: Vec<i64> = cs.iter().map(|c| c.as_i64()).collect();
                self.int(&v, d, what)?
            }
            Expr::Var(_) | Expr::RVar(_) | Expr::Acc => {
                if es.iter().any(|e| *e != e0) {
                    return Err(differ());
                }
                e0.clone()
            }
            Expr::Load(s, idx) => {
                let mut out = Vec::with_capacity(idx.len());
                for k in 0..idx.len() {
                    let parts: Vec<&Expr> = es
                        .iter()
                        .map(|e| match e {
                            Expr::Load(t, i) if t == s && i.len() == idx.len() => Ok(&i[k]),
                            _ => Err(differ()),
                        })
                        .collect::<Result<_, _>>()?;
                    out.push(self.expr(&parts, what)?);
                }
                Expr::Load(*s, out)
            }
            Expr::LoadFlat(s, _) => {
                let parts = child(es, &differ, |e| match e {
                    Expr::LoadFlat(t, f) if t == s => Some(&**f),
                    _ => None,
                })?;
                Expr::LoadFlat(*s, Box::new(self.expr(&parts, what)?))
            }
            Expr::Un(op, _) => {
                let parts = child(es, &differ, |e| match e {
                    Expr::Un(o, a) if o == op => Some(&**a),
                    _ => None,
                })?;
                Expr::Un(*op, Box::new(self.expr(&parts, what)?))
            }
            Expr::Cast(d, _) => {
                let parts = child(es, &differ, |e| match e {
                    Expr::Cast(t, a) if t == d => Some(&**a),
                    _ => None,
                })?;
                Expr::Cast(*d, Box::new(self.expr(&parts, what)?))
            }
            Expr::Bin(op, _, _) => {
                let mut lhs = Vec::new();
                let mut rhs = Vec::new();
                for e in es {
                    match e {
                        Expr::Bin(o, a, b) if o == op => {
                            lhs.push(&**a);
                            rhs.push(&**b);
                        }
                        _ => return Err(differ()),
                    }
                }
                Expr::Bin(
                    *op,
                    Box::new(self.expr(&lhs, what)?),
                    Box::new(self.expr(&rhs, what)?),
                )
            }
            Expr::Select(..) => {
                let (mut c, mut a, mut b) = (Vec::new(), Vec::new(), Vec::new());
                for e in es {
                    let Expr::Select(x, y, z) = e else {
                        return Err(differ());
                    };
                    c.push(&**x);
                    a.push(&**y);
                    b.push(&**z);
                }
                Expr::Select(
                    Box::new(self.expr(&c, what)?),
                    Box::new(self.expr(&a, what)?),
                    Box::new(self.expr(&b, what)?),
                )
            }
        })
    }
}

/// The child `pick` finds in every sample's expression; `differ` where one has none.
fn child<'e>(
    es: &[&'e Expr],
    differ: &dyn Fn() -> String,
    pick: impl Fn(&'e Expr) -> Option<&'e Expr>,
) -> Result<Vec<&'e Expr>, String> {
    es.iter().map(|e| pick(e).ok_or_else(differ)).collect()
}

/// An expression's text, cut to a line.
fn short(e: &Expr) -> String {
    let t = e.to_string();
    match t.char_indices().nth(120) {
        Some((i, _)) => format!("{}...", &t[..i]),
        None => t,
    }
}

fn join<T: std::fmt::Display>(v: &[T]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The parameter `e` reads, if it is one (through a cast or not).
fn param_index(e: &Expr, param_buf: BufId) -> Option<usize> {
    match e {
        Expr::Cast(_, a) => param_index(a, param_buf),
        Expr::LoadFlat(Src::Buf(b), k) if *b == param_buf => match **k {
            Expr::Const(s) => Some(s.as_i64() as usize),
            _ => None,
        },
        _ => None,
    }
}

/// Whether `small` is the leading block of `big` (same rank and type, every dimension at
/// most `big`'s): element `i` of `small` equals `big`'s element at the same index.
fn is_prefix(small: &Tensor, big: &Tensor) -> bool {
    let (s, b) = (&small.ty.shape, &big.ty.shape);
    let size = small.ty.dtype.size();
    if small.ty.dtype != big.ty.dtype || s.len() != b.len() || s.iter().zip(b).any(|(x, y)| x > y) {
        return false;
    }
    if size == 0 || small.data.len() != small.ty.numel() * size {
        return false;
    }
    let (ss, bs) = (strides(s), strides(b));
    (0..small.ty.numel()).all(|i| {
        let j: usize = ss
            .iter()
            .zip(&bs)
            .enumerate()
            .map(|(k, (&sk, &bk))| (i / sk % s[k]) * bk)
            .sum();
        small.data[i * size..(i + 1) * size] == big.data[j * size..(j + 1) * size]
    })
}

impl Ranged {
    /// The program served over `lo..=hi` of `dim` from the programs lowered (and fused) at
    /// the sizes of `samples`, the largest `hi`. An error says which buffer or stage changes
    /// otherwise than by such integers.
    pub fn from_samples(
        dim: &str,
        lo: usize,
        hi: usize,
        samples: &[(usize, Program)],
    ) -> Result<Ranged, String> {
        let mut samples: Vec<&(usize, Program)> = samples.iter().collect();
        samples.sort_by_key(|s| std::cmp::Reverse(s.0));
        let reference = &samples.first().ok_or("no samples")?.1;
        if samples[0].0 != hi {
            return Err(format!("no sample at the largest size {hi}"));
        }
        let n = reference.bufs.len();
        if let Some((d, _)) = samples
            .iter()
            .find(|(_, p)| p.bufs.len() != n || p.inputs.len() != reference.inputs.len())
        {
            return Err(format!(
                "the model lowers to {} buffers at `{dim}` = {hi} but {} at {d}: its program changes with the size",
                n,
                samples.iter().find(|s| s.0 == *d).map_or(0, |s| s.1.bufs.len())
            ));
        }
        if let Some((d, _)) = samples
            .iter()
            .find(|(_, p)| p.inputs != reference.inputs || p.outputs != reference.outputs)
        {
            return Err(format!(
                "the model's inputs or outputs are other buffers at `{dim}` = {d} than at {hi}"
            ));
        }
        let mut m = Merger {
            dim,
            sizes: samples.iter().map(|s| s.0 as i64).collect(),
            lo: lo as i64,
            hi: hi as i64,
            params: Vec::new(),
            param_buf: BufId::new(n),
            wanted: Default::default(),
            scanned: Default::default(),
        };
        let mut program = reference.clone();
        let mut shapes = Vec::with_capacity(n + 1);
        let mut reduces = Vec::with_capacity(n + 1);
        let mut iters = Vec::with_capacity(n + 1);
        let mut dyn_consts = Vec::new();
        for i in 0..n {
            let bufs: Vec<&Buffer> = samples.iter().map(|s| &s.1.bufs[i]).collect();
            let name = &bufs[0].name;
            let what = || format!("buffer {name}");
            let dims: Vec<&[usize]> = bufs.iter().map(|b| &b.ty.shape[..]).collect();
            if bufs
                .iter()
                .any(|b| b.ty.dtype != bufs[0].ty.dtype || b.packed)
            {
                return Err(format!("{}: its type changes with `{dim}`", what()));
            }
            let shape = m.shape(&dims, &what)?;
            let dynamic = shape.iter().any(|e| !matches!(e, Expr::Const(_)));
            let mut reduce = None;
            let mut iter = None;
            match &bufs[0].kind {
                BufKind::Input(k) => {
                    if bufs
                        .iter()
                        .any(|b| !matches!(b.kind, BufKind::Input(j) if j == *k))
                    {
                        return Err(format!("{}: not the same input at every size", what()));
                    }
                }
                BufKind::Dead => {
                    if bufs.iter().any(|b| !matches!(b.kind, BufKind::Dead)) {
                        return Err(format!("{}: fused at some sizes only", what()));
                    }
                }
                BufKind::Const(big) => {
                    for b in &bufs {
                        let BufKind::Const(t) = &b.kind else {
                            return Err(format!("{}: a constant at some sizes only", what()));
                        };
                        let same = if dynamic {
                            is_prefix(t, big)
                        } else {
                            t.data == big.data
                        };
                        if !same {
                            return Err(format!(
                                "{}: a constant whose values depend on `{dim}` (not only how many there are)",
                                what()
                            ));
                        }
                    }
                    if dynamic {
                        dyn_consts.push(BufId::new(i));
                    }
                }
                BufKind::Stage(st0) => {
                    let sts: Vec<&Stage> = bufs
                        .iter()
                        .map(|b| match &b.kind {
                            BufKind::Stage(s) => Ok(s),
                            _ => Err(format!("{}: a stage at some sizes only", what())),
                        })
                        .collect::<Result<_, _>>()?;
                    let swhat = || format!("stage {} ({})", i, st0.name);
                    if st0.exec != Exec::Generated {
                        return Err(format!(
                            "{}: runs on a library; a run-time size needs generated code",
                            swhat()
                        ));
                    }
                    if sts
                        .iter()
                        .any(|s| s.materialize != st0.materialize || s.exec != st0.exec)
                    {
                        return Err(format!("{}: changes with `{dim}`", swhat()));
                    }
                    if sts.iter().any(|s| s.ty.dtype != st0.ty.dtype) {
                        return Err(format!("{}: its type changes with `{dim}`", swhat()));
                    }
                    let own: Vec<&[usize]> = sts.iter().map(|s| &s.ty.shape[..]).collect();
                    iter = Some(m.shape(&own, &swhat)?);
                    let bodies: Vec<&Expr> = sts.iter().map(|s| &s.body).collect();
                    let body = m.expr(&bodies, &swhat)?;
                    let red = match &st0.reduce {
                        None => {
                            if sts.iter().any(|s| s.reduce.is_some()) {
                                return Err(format!("{}: a reduction at some sizes only", swhat()));
                            }
                            None
                        }
                        Some(r0) => {
                            let rs: Vec<&Reduce> = sts
                                .iter()
                                .map(|s| {
                                    s.reduce.as_ref().filter(|r| r.op == r0.op).ok_or_else(|| {
                                        format!("{}: its reduction changes with `{dim}`", swhat())
                                    })
                                })
                                .collect::<Result<_, _>>()?;
                            let ext: Vec<&[usize]> = rs.iter().map(|r| &r.extents[..]).collect();
                            reduce = Some(m.shape(&ext, &|| format!("{}'s reduction", swhat()))?);
                            let finalize = match &r0.finalize {
                                None => None,
                                Some(_) => {
                                    let fs: Vec<&Expr> = rs
                                        .iter()
                                        .map(|r| {
                                            r.finalize.as_ref().ok_or_else(|| {
                                                format!(
                                                    "{}: its reduction changes with `{dim}`",
                                                    swhat()
                                                )
                                            })
                                        })
                                        .collect::<Result<_, _>>()?;
                                    Some(m.expr(&fs, &swhat)?)
                                }
                            };
                            Some(Reduce {
                                op: r0.op,
                                extents: r0.extents.clone(),
                                finalize,
                            })
                        }
                    };
                    if let BufKind::Stage(st) = &mut program.bufs[i].kind {
                        st.body = body;
                        st.reduce = red;
                        st.choice = None;
                    }
                }
            }
            shapes.push(shape);
            reduces.push(reduce);
            iters.push(iter);
        }
        // The parameters: the last input.
        let np = m.params.len().max(1);
        program.bufs.push(Buffer {
            name: format!("{dim} parameters"),
            ty: TensorType::new(DType::I64, vec![np]),
            kind: BufKind::Input(program.inputs.len()),
            packed: false,
        });
        program.inputs.push(m.param_buf);
        program.input_names.push(format!("collage {dim}"));
        shapes.push(vec![Expr::i(np as i64)]);
        reduces.push(None);
        iters.push(None);
        Ok(Ranged {
            program,
            dim: dim.to_string(),
            lo,
            hi,
            params: m.params,
            param_buf: m.param_buf,
            shapes,
            iters,
            reduces,
            dyn_consts,
            wanted: m.wanted.into_iter().collect(),
        })
    }

    /// The parameters' values at size `d`.
    pub fn param_values(&self, d: usize) -> Vec<i64> {
        let mut v: Vec<i64> = self.params.iter().map(|s| s.at(d as i64)).collect();
        if v.is_empty() {
            v.push(0);
        }
        v
    }

    /// The function of the size that integer expression `e` is, if it is a parameter.
    pub fn sym_of(&self, e: &Expr) -> Option<Sym> {
        param_index(e, self.param_buf).map(|k| self.params[k])
    }

    /// Buffer `b`'s run-time type as text: `f32[1,3,32,width]`.
    pub fn type_text(&self, b: BufId) -> String {
        let dims: Vec<String> = self.shapes[b.index()]
            .iter()
            .map(|e| match self.sym_of(e) {
                Some(s) => s.text(&self.dim),
                None => self.int_at(e, self.lo).to_string(),
            })
            .collect();
        format!(
            "{}[{}]",
            self.program.bufs[b.index()].ty.dtype.name(),
            dims.join(",")
        )
    }

    /// Buffer `b`'s shape at size `d`.
    pub fn shape_at(&self, b: BufId, d: usize) -> Vec<usize> {
        self.shapes[b.index()]
            .iter()
            .map(|e| self.int_at(e, d) as usize)
            .collect()
    }

    /// An integer expression of the ranged program (a constant or a parameter) at size `d`.
    pub fn int_at(&self, e: &Expr, d: usize) -> i64 {
        match param_index(e, self.param_buf) {
            Some(k) => self.params[k].at(d as i64),
            None => match e {
                Expr::Const(s) => s.as_i64(),
                other => panic!("not a ranged integer: {other:?}"),
            },
        }
    }

    /// `e` with every parameter replaced by its value at `d`.
    fn expr_at(&self, e: &Expr, d: usize) -> Expr {
        e.rewrite(&mut |x| match x {
            // A reciprocal count, folded as lowering folds it.
            Expr::Bin(super::BinOp::Div, a, b) => match (&**a, &**b) {
                (Expr::Const(p), Expr::Const(q)) if p.dtype().is_float() => {
                    Some(Expr::c(p.dtype(), p.as_f64() / q.as_f64()))
                }
                _ => None,
            },
            _ => param_index(x, self.param_buf)
                .filter(|_| matches!(x, Expr::LoadFlat(..)))
                .map(|k| Expr::i(self.params[k].at(d as i64))),
        })
    }

    /// Checks the ranged program against `lowered`, the program lowered at size `d` (not a
    /// sample): with every parameter at its value there, the two must be the same.
    pub fn verify(&self, d: usize, lowered: &Program) -> Result<(), String> {
        let dim = &self.dim;
        let n = self.param_buf.index();
        if lowered.bufs.len() != n {
            return Err(format!(
                "the program at `{dim}` = {d} has {} buffers, not {n}",
                lowered.bufs.len()
            ));
        }
        for (i, (mine, theirs)) in self.program.bufs[..n].iter().zip(&lowered.bufs).enumerate() {
            let b = BufId::new(i);
            let what = format!("buffer {} at `{dim}` = {d}", mine.name);
            if self.shape_at(b, d) != theirs.ty.shape || mine.ty.dtype != theirs.ty.dtype {
                return Err(format!(
                    "{what}: expected the type {}, the model gives {}",
                    TensorType::new(mine.ty.dtype, self.shape_at(b, d)),
                    theirs.ty
                ));
            }
            match (&mine.kind, &theirs.kind) {
                (BufKind::Input(x), BufKind::Input(y)) if x == y => {}
                (BufKind::Dead, BufKind::Dead) => {}
                (BufKind::Const(big), BufKind::Const(t)) => {
                    if !is_prefix(t, big) {
                        return Err(format!(
                            "{what}: the constant is not the largest size's prefix"
                        ));
                    }
                }
                (BufKind::Stage(x), BufKind::Stage(y)) => {
                    let own: Vec<usize> = self.iters[i]
                        .as_ref()
                        .map(|r| r.iter().map(|e| self.int_at(e, d) as usize).collect())
                        .unwrap_or_default();
                    if own != y.ty.shape {
                        return Err(format!(
                            "{what}: the stage iterates {:?}, not {own:?}",
                            y.ty.shape
                        ));
                    }
                    let body = self.expr_at(&x.body, d);
                    if body != y.body {
                        return Err(format!(
                            "{what}: its expression is not the one the model lowers to"
                        ));
                    }
                    match (&x.reduce, &y.reduce) {
                        (None, None) => {}
                        (Some(rx), Some(ry)) => {
                            let ext: Vec<usize> = self.reduces[i]
                                .as_ref()
                                .map(|r| r.iter().map(|e| self.int_at(e, d) as usize).collect())
                                .unwrap_or_default();
                            let fin = rx.finalize.as_ref().map(|f| self.expr_at(f, d));
                            if rx.op != ry.op || ext != ry.extents || fin != ry.finalize {
                                return Err(format!(
                                    "{what}: its reduction is not the one the model lowers to"
                                ));
                            }
                        }
                        _ => {
                            return Err(format!(
                                "{what}: its reduction is not the one the model lowers to"
                            ))
                        }
                    }
                }
                _ => return Err(format!("{what}: not the same kind of buffer")),
            }
        }
        Ok(())
    }

    /// Makes the program printable: a constant whose shape depends on the size becomes a
    /// stage that copies its run-time block from the largest size's value (a new constant),
    /// and every multi-dimensional read of a buffer whose shape has a parameter becomes a
    /// read at its flat offset in the run-time shape.
    pub fn finish(&mut self) {
        for &b in &std::mem::take(&mut self.dyn_consts) {
            let buf = &self.program.bufs[b.index()];
            let BufKind::Const(big) = &buf.kind else {
                continue;
            };
            let big: Arc<Tensor> = big.clone();
            let store = BufId::new(self.program.bufs.len());
            let rank = buf.ty.rank();
            let stage = Stage {
                name: format!("{}_block", buf.name),
                ty: buf.ty.clone(),
                body: Expr::Load(Src::Buf(store), (0..rank).map(Expr::var).collect()),
                reduce: None,
                materialize: true,
                part: 0,
                exec: Exec::Generated,
                choice: None,
            };
            let name = format!("{} (largest)", buf.name);
            self.program.bufs.push(Buffer {
                name,
                ty: big.ty.clone(),
                kind: BufKind::Const(big.clone()),
                packed: false,
            });
            self.shapes
                .push(big.ty.shape.iter().map(|&x| Expr::i(x as i64)).collect());
            self.reduces.push(None);
            self.iters.push(None);
            self.iters[b.index()] = Some(self.shapes[b.index()].clone());
            self.program.bufs[b.index()].kind = BufKind::Stage(stage);
        }
        let dynamic: Vec<bool> = self
            .shapes
            .iter()
            .map(|s| s.iter().any(|e| !matches!(e, Expr::Const(_))))
            .collect();
        let shapes = self.shapes.clone();
        let flat = |e: &Expr| -> Option<Expr> {
            let Expr::Load(Src::Buf(b), idx) = e else {
                return None;
            };
            if !dynamic[b.index()] {
                return None;
            }
            Some(Expr::LoadFlat(
                Src::Buf(*b),
                Box::new(flatten(idx, &shapes[b.index()])),
            ))
        };
        for buf in &mut self.program.bufs {
            if let BufKind::Stage(st) = &mut buf.kind {
                st.body = st.body.rewrite(&mut |e| flat(e));
                if let Some(f) = st.reduce.as_mut().and_then(|r| r.finalize.as_mut()) {
                    *f = f.rewrite(&mut |e| flat(e));
                }
            }
        }
    }

    /// The flat offset of `idx` in the run-time shape that stage `b` iterates.
    pub fn flatten_iter(&self, idx: &[Expr], b: BufId) -> Expr {
        flatten(idx, self.iters[b.index()].as_ref().expect("a stage"))
    }
}

/// The flat row-major offset of `idx` in the symbolic `shape`.
fn flatten(idx: &[Expr], shape: &[Expr]) -> Expr {
    let mut acc = Expr::i(0);
    let mut stride = Expr::i(1);
    for (e, n) in idx.iter().zip(shape).rev() {
        if *n == Expr::i(1) {
            continue;
        }
        acc = e.clone().mul(stride.clone()).add(acc);
        stride = stride.mul(n.clone());
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_affine_and_floor_functions() {
        let pts =
            |f: &dyn Fn(i64) -> i64, ds: &[i64]| ds.iter().map(|&d| (d, f(d))).collect::<Vec<_>>();
        let ds = [2, 3, 100, 257, 511, 512];
        assert_eq!(Sym::fit(&pts(&|d| 64 * d, &ds)), Some(Sym::affine(64, 0)));
        assert_eq!(Sym::fit(&pts(&|d| d - 1, &ds)), Some(Sym::affine(1, -1)));
        // A stride-2 window's output extent, (d + 2 - 3) / 2 + 1.
        let s = Sym::fit(&pts(&|d| (d - 1) / 2 + 1, &ds)).expect("a floor function");
        assert!(ds
            .iter()
            .chain(&[7, 8, 9, 300])
            .all(|&d| s.at(d) == (d - 1) / 2 + 1));
        // d squared is no such function.
        assert_eq!(Sym::fit(&pts(&|d| d * d, &ds)), None);
        // Samples that leave the constant term of a floor open name a size that decides.
        let six = [320, 319, 177, 176, 33, 32];
        let mut p = pts(&|d| (d + 1) / 4, &six);
        assert!(
            Sym::ambiguous_at(&p, 32, 320).is_some(),
            "(w + 1) / 4 or (w + 2) / 4"
        );
        while let Some(d) = Sym::ambiguous_at(&p, 32, 320) {
            p.push((d, (d + 1) / 4));
            p.sort_by_key(|x| std::cmp::Reverse(x.0));
            assert!(p.len() < 16, "{p:?}");
        }
        let s = Sym::fit(&p).unwrap();
        assert!((32..=320).all(|d| s.at(d) == (d + 1) / 4));
        // Whole tiles of 4 over a quarter of the width, plus a border of 2 (a Winograd
        // input's width): decided with the samples the ambiguity asks for.
        let f = |d: i64| 4 * (((d + 1) / 4 + 3) / 4) + 2;
        let mut p = pts(&f, &six);
        while let Some(d) = Sym::ambiguous_at(&p, 32, 320) {
            p.push((d, f(d)));
            p.sort_by_key(|x| std::cmp::Reverse(x.0));
            assert!(p.len() < 16, "{p:?}");
        }
        let s = Sym::fit(&p).unwrap();
        assert!((32..=320).all(|d| s.at(d) == f(d)), "{s:?} {p:?}");
        assert_eq!((s.m, s.k), (4, 2));
        assert_eq!(s.text("w"), "4*((w + 13) / 16) + 2");
        // An affine integer is one function.
        assert_eq!(Sym::ambiguous_at(&pts(&|d| 64 * d, &ds), 1, 4096), None);
        assert_eq!(Sym::affine(1, 0).text("w"), "w");
        assert_eq!(Sym::affine(4, -3).text("w"), "4*w - 3");
        assert_eq!(Sym::quotient(1, 1, 2).text("w"), "(w + 1) / 2");
    }

    /// A program at size `n`: `y[i, j] = x[i, j] * k(n)` over `x: f32[n, 3]`, then the sum of
    /// each column of `y` reshaped flat (`z[j] = sum_i y[3 i + j]`).
    fn program(n: usize, k: &dyn Fn(usize) -> f32) -> Program {
        let mut p = Program::default();
        let x = p.push(
            "x",
            TensorType::new(DType::F32, vec![n, 3]),
            BufKind::Input(0),
        );
        p.inputs.push(x);
        p.input_names.push("x".into());
        let stage = |name: &str, ty, body, reduce| Stage {
            name: name.into(),
            ty,
            body,
            reduce,
            materialize: false,
            part: 0,
            exec: Exec::Generated,
            choice: None,
        };
        let ty = TensorType::new(DType::F32, vec![n, 3]);
        let body = Expr::Load(Src::Buf(x), vec![Expr::var(0), Expr::var(1)])
            .mul(Expr::Const(Scalar::F32(k(n))));
        let y = p.push("y", ty.clone(), BufKind::Stage(stage("y", ty, body, None)));
        let ty = TensorType::new(DType::F32, vec![3]);
        let flat = Expr::rvar(0).mul(Expr::i(3)).add(Expr::var(0));
        let red = Reduce {
            op: super::super::RedOp::Sum,
            extents: vec![n],
            finalize: None,
        };
        let z = p.push(
            "z",
            ty.clone(),
            BufKind::Stage(stage(
                "z",
                ty,
                Expr::LoadFlat(Src::Buf(y), Box::new(flat)),
                Some(red),
            )),
        );
        p.outputs.push(z);
        p.output_names.push("z".into());
        p
    }

    #[test]
    fn samples_become_parameters_and_a_changed_expression_is_an_error() {
        let mean = |n: usize| 1.0 / n as f32;
        let samples: Vec<(usize, Program)> = [9, 8, 5, 4, 3, 2]
            .iter()
            .map(|&n| (n, program(n, &mean)))
            .collect();
        let r = Ranged::from_samples("n", 2, 9, &samples).expect("ranged");
        assert_eq!(r.params, vec![Sym::affine(1, 0)]);
        assert_eq!(r.shape_at(BufId::new(0), 7), vec![7, 3]);
        assert_eq!(r.shape_at(r.param_buf, 7), vec![1]);
        r.verify(7, &program(7, &mean)).expect("the program at 7");
        // A different program at 7 (another scale) is caught.
        let e = r.verify(7, &program(7, &|_| 0.5)).unwrap_err();
        assert!(e.contains("buffer y") && e.contains("7"), "{e}");
        // A scale that is no count of the size names the stage and the values.
        let odd = |n: usize| (n * n) as f32 + 0.5;
        let samples: Vec<(usize, Program)> =
            [9, 8, 2].iter().map(|&n| (n, program(n, &odd))).collect();
        let e = Ranged::from_samples("n", 2, 9, &samples).unwrap_err();
        assert!(e.contains("stage 1 (y)") && e.contains("81.5"), "{e}");
    }

    #[test]
    fn prefix_blocks() {
        let t = |shape: &[usize], f: &dyn Fn(&[usize]) -> f32| {
            let ty = TensorType::new(DType::F32, shape.to_vec());
            let st = strides(shape);
            let data: Vec<u8> = (0..ty.numel())
                .flat_map(|i| {
                    let idx: Vec<usize> = st.iter().zip(shape).map(|(&s, &n)| i / s % n).collect();
                    f(&idx).to_le_bytes()
                })
                .collect();
            Tensor::from_bytes(ty, data).expect("sized")
        };
        let pos = |i: &[usize]| (i[0] * 100 + i[1]) as f32;
        assert!(is_prefix(&t(&[2, 3], &pos), &t(&[5, 3], &pos)));
        assert!(is_prefix(&t(&[3, 2], &pos), &t(&[3, 7], &pos)));
        // The last element differs: not a prefix.
        let other = |i: &[usize]| if i == [1, 1] { -1.0 } else { pos(i) };
        assert!(!is_prefix(&t(&[2, 2], &other), &t(&[3, 7], &pos)));
    }
}
