//! Operators of the `text` family: `TfIdfVectorizer` on integer token ids (string pools need
//! string tensors, which the compiler does not have).
use std::sync::Arc;

use super::{
    check_arity as arity, check_dtype, Constructor, InferCx, LowerCx, OpCx, OpResult, Operator,
};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src};
use crate::tensor::{DType, TensorType};

/// Most pool n-grams `TfIdfVectorizer` compiles (each is a comparison chain in the generated
/// expression).
const MAX_POOL: usize = 4096;

/// How counts become outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The count.
    Tf,
    /// 1 (or the weight) where the count is positive.
    Idf,
    /// The count times the weight.
    TfIdf,
}

/// `TfIdfVectorizer`: per row of token ids, how often each n-gram of the pool occurs — n-grams
/// of `min_gram_length..=max_gram_length` tokens, `0..=max_skip_count` tokens apart (unigrams
/// counted once) — written at the n-gram's output coordinate, weighted by `mode`.
#[derive(Debug)]
struct TfIdf {
    skips: usize,
    mode: Mode,
    /// The pool's n-grams (token ids) of the counted sizes, with their output coordinates.
    grams: Vec<(Vec<i64>, usize)>,
    /// The output length: the largest coordinate + 1.
    width: usize,
    /// Per output coordinate (empty: none).
    weights: Vec<f32>,
}

impl Operator for TfIdf {
    fn op_type(&self) -> &'static str {
        "TfIdfVectorizer"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 1, 1)?;
        check_dtype(cx, 0, &[DType::I32, DType::I64])?;
        let x = cx.input(0)?;
        let shape = match x.shape.as_slice() {
            [_] => vec![self.width],
            [n, _] => vec![*n, self.width],
            _ => {
                return Err(OpError::expected(
                    "token ids of rank 1 or 2 ([C] or [N, C])",
                    x,
                ))
            }
        };
        Ok(vec![TensorType::new(DType::F32, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let out = cx.output(0).clone();
        let rank = x.rank();
        let c = x.shape[rank - 1];
        let col = Expr::var(rank - 1);
        // Reduction over (start p = RVar(0), skip distance d = RVar(1) + 1).
        let (p, d) = (Expr::rvar(0), Expr::rvar(1).add(Expr::i(1)));
        let token = |pos: Expr| {
            let mut idx: Vec<Expr> = (0..rank - 1).map(Expr::var).collect();
            idx.push(pos.max(Expr::i(0)).min(Expr::i(c.saturating_sub(1) as i64)));
            Expr::load(Src::Arg(0), idx).cast(DType::I64)
        };
        let mut body = Expr::i(0);
        for (gram, at) in &self.grams {
            let n = gram.len();
            // Unigrams once (skip distance 1 only); the last token within the row.
            let last = p.clone().add(d.clone().mul(Expr::i(n as i64 - 1)));
            let mut hit = last.lt(Expr::i(c as i64));
            if n == 1 {
                hit = hit.and(Expr::rvar(1).eq(Expr::i(0)));
            }
            for (t, &tok) in gram.iter().enumerate() {
                let pos = p.clone().add(d.clone().mul(Expr::i(t as i64)));
                hit = hit.and(token(pos).eq(Expr::i(tok)));
            }
            let one = Expr::select(hit, Expr::i(1), Expr::i(0));
            body = body.add(Expr::select(
                col.clone().eq(Expr::i(*at as i64)),
                one,
                Expr::i(0),
            ));
        }
        let counts_ty = TensorType::new(DType::I64, out.shape.clone());
        let counts = cx.reduce(counts_ty, RedOp::Sum, vec![c, self.skips + 1], body, None);
        let count = Expr::load(counts, (0..rank).map(Expr::var).collect()).cast(DType::F32);
        let weight = || {
            // The weight of the output coordinate (a select chain over the coordinates).
            let mut w = Expr::c(DType::F32, 0.0);
            for (k, &v) in self.weights.iter().enumerate() {
                w = Expr::select(
                    col.clone().eq(Expr::i(k as i64)),
                    Expr::c(DType::F32, v as f64),
                    w,
                );
            }
            w
        };
        let zero = Expr::c(DType::F32, 0.0);
        let value = match (self.mode, self.weights.is_empty()) {
            (Mode::Tf, _) | (Mode::TfIdf, true) => count,
            (Mode::Idf, true) => {
                Expr::select(count.gt(zero.clone()), Expr::c(DType::F32, 1.0), zero)
            }
            (Mode::Idf, false) => Expr::select(count.gt(zero.clone()), weight(), zero),
            (Mode::TfIdf, false) => count.mul(weight()),
        };
        Ok(vec![cx.stage(out, value)])
    }
}

fn tfidf(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let a = cx.attrs;
    if a.has("pool_strings") {
        return Err(OpError::Unsupported(
            "TfIdfVectorizer with pool_strings (string tensors)".into(),
        ));
    }
    let size = |name: &str| -> OpResult<usize> {
        usize::try_from(a.int(name, -1)?).map_err(|_| {
            OpError::expected(
                format!("attribute `{name}` >= 0"),
                "a negative value or none",
            )
        })
    };
    let (min, max, skips) = (
        size("min_gram_length")?,
        size("max_gram_length")?,
        size("max_skip_count")?,
    );
    if min == 0 || max < min {
        return Err(OpError::expected(
            "1 <= min_gram_length <= max_gram_length",
            format!("{min}, {max}"),
        ));
    }
    let mode = match a.string("mode", "")?.as_str() {
        "TF" => Mode::Tf,
        "IDF" => Mode::Idf,
        "TFIDF" => Mode::TfIdf,
        m => return Err(OpError::expected("mode TF, IDF or TFIDF", format!("{m:?}"))),
    };
    let pool = a.ints("pool_int64s")?.unwrap_or_default();
    let starts = a.ints("ngram_counts")?.unwrap_or_default();
    let indexes = a.ints("ngram_indexes")?.unwrap_or_default();
    // n-grams of size k + 1 lie in pool[starts[k]..starts[k + 1]].
    let mut grams = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let e = starts.get(k + 1).copied().unwrap_or(pool.len() as i64);
        let (s, e) = (usize::try_from(s).ok(), usize::try_from(e).ok());
        let (Some(s), Some(e)) = (s, e) else {
            return Err(OpError::expected(
                "ngram_counts >= 0",
                format!("{starts:?}"),
            ));
        };
        let n = k + 1;
        if s > e || e > pool.len() || (e - s) % n != 0 {
            return Err(OpError::expected(
                format!(
                    "ngram_counts that split pool_int64s ({} ids) into {n}-grams",
                    pool.len()
                ),
                format!("{starts:?}"),
            ));
        }
        for g in pool[s..e].chunks(n) {
            grams.push(g.to_vec());
        }
    }
    if grams.len() != indexes.len() || grams.len() > MAX_POOL {
        return Err(OpError::expected(
            format!("one ngram_indexes entry per pool n-gram (at most {MAX_POOL})"),
            format!("{} n-grams, {} indexes", grams.len(), indexes.len()),
        ));
    }
    let mut width = 0;
    let mut pairs = Vec::with_capacity(grams.len());
    for (g, &i) in grams.into_iter().zip(&indexes) {
        let i = usize::try_from(i)
            .ok()
            .filter(|&i| i < 1 << 24)
            .ok_or_else(|| OpError::expected("ngram_indexes in [0, 2^24)", i))?;
        width = width.max(i + 1);
        // Only sizes within [min, max] are counted.
        if (min..=max).contains(&g.len()) {
            pairs.push((g, i));
        }
    }
    let weights: Vec<f32> = a.floats("weights")?.unwrap_or_default();
    if !weights.is_empty() && weights.len() < width {
        return Err(OpError::expected(
            format!("{width} weights (one per output coordinate)"),
            weights.len(),
        ));
    }
    Ok(Arc::new(TfIdf {
        skips,
        mode,
        grams: pairs,
        width,
        weights,
    }))
}

/// The `text` family's registry.
pub const OPS: &[(&str, Constructor)] = &[("TfIdfVectorizer", tfidf)];
