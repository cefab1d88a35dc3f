//! Operators of the `matmul` family: MatMul (numpy semantics) and Gemm.
use std::sync::Arc;

use super::{
    broadcast_shapes, check_dtype, Constructor, InferCx, LowerCx, OpCx, OpKind, OpResult, Operator,
    NUMERIC,
};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src};
use crate::tensor::TensorType;

/// Index of an input's batch dimensions `in_batch` broadcast to the output's `out_batch`
/// (output variables `0..out_batch.len()`).
fn batch_index(out_batch: &[usize], in_batch: &[usize]) -> Vec<Expr> {
    let off = out_batch.len() - in_batch.len();
    in_batch
        .iter()
        .enumerate()
        .map(|(k, &d)| {
            if d == 1 && out_batch[k + off] != 1 {
                Expr::i(0)
            } else {
                Expr::var(k + off)
            }
        })
        .collect()
}

/// `MatMul`: numpy `matmul` (1-D operands promoted then squeezed, batch dimensions broadcast).
#[derive(Debug)]
struct MatMul;

/// The shapes of a matmul: batch of A, batch of B, broadcast batch, M, K, N.
struct MmShapes {
    batch_a: Vec<usize>,
    batch_b: Vec<usize>,
    batch: Vec<usize>,
    k: usize,
    out: Vec<usize>,
}

fn mm_shapes(a: &[usize], b: &[usize]) -> OpResult<MmShapes> {
    if a.is_empty() || b.is_empty() {
        return Err(OpError::expected(
            "MatMul operands of rank >= 1",
            format!("{a:?} x {b:?}"),
        ));
    }
    let ka = a[a.len() - 1];
    let kb = if b.len() == 1 { b[0] } else { b[b.len() - 2] };
    if ka != kb {
        return Err(OpError::expected(
            "MatMul operands with matching inner dimensions",
            format!("{a:?} x {b:?}"),
        ));
    }
    let batch_a = a[..a.len().saturating_sub(2)].to_vec();
    let batch_b = b[..b.len().saturating_sub(2)].to_vec();
    let batch = broadcast_shapes(&[&batch_a, &batch_b])?;
    let mut out = batch.clone();
    if a.len() >= 2 {
        out.push(a[a.len() - 2]);
    }
    if b.len() >= 2 {
        out.push(b[b.len() - 1]);
    }
    Ok(MmShapes {
        batch_a,
        batch_b,
        batch,
        k: ka,
        out,
    })
}

impl Operator for MatMul {
    fn op_type(&self) -> &'static str {
        "MatMul"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, NUMERIC)?;
        check_dtype(cx, 1, &[d])?;
        let s = mm_shapes(&cx.input(0)?.shape, &cx.input(1)?.shape)?;
        Ok(vec![TensorType::new(d, s.out)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let a = cx.input(0).shape.clone();
        let b = cx.input(1).shape.clone();
        let s = mm_shapes(&a, &b)?;
        let nb = s.batch.len();
        let mut ia = batch_index(&s.batch, &s.batch_a);
        let mut next = nb;
        if a.len() >= 2 {
            ia.push(Expr::var(next));
            next += 1;
        }
        ia.push(Expr::rvar(0));
        let mut ib = batch_index(&s.batch, &s.batch_b);
        ib.push(Expr::rvar(0));
        if b.len() >= 2 {
            ib.push(Expr::var(next));
        }
        // A computed right-hand side (attention's K^T, V) is copied once into a buffer of its own,
        // row-major in its logical shape: whatever transposes produced it are resolved in the copy,
        // and the contraction then streams rows of it contiguously.
        let rhs = if cx.consts.get(1).is_some_and(|c| c.is_none())
            && b.len() >= 2
            && (cx.uniform || cx.input(1).checked_numel().is_some_and(|n| n >= 1024))
        {
            let ty = cx.input(1).clone();
            let vars: Vec<Expr> = (0..ty.rank()).map(Expr::var).collect();
            cx.materialized_stage(ty, Expr::load(Src::Arg(1), vars))
        } else {
            Src::Arg(1)
        };
        let body = Expr::load(Src::Arg(0), ia).mul(Expr::load(rhs, ib));
        let out = cx.output(0).clone();
        Ok(vec![cx.reduce(out, RedOp::Sum, vec![s.k], body, None)])
    }
}

/// `Gemm`: `alpha * A' B' + beta * C` with optional transposes and C broadcast to `[M, N]`.
#[derive(Debug)]
struct Gemm {
    alpha: f64,
    beta: f64,
    trans_a: bool,
    trans_b: bool,
}

impl Gemm {
    /// (M, K, N).
    fn dims(&self, a: &[usize], b: &[usize]) -> OpResult<(usize, usize, usize)> {
        if a.len() != 2 || b.len() != 2 {
            return Err(OpError::expected(
                "Gemm operands of rank 2",
                format!("{a:?} x {b:?}"),
            ));
        }
        let (m, ka) = if self.trans_a {
            (a[1], a[0])
        } else {
            (a[0], a[1])
        };
        let (kb, n) = if self.trans_b {
            (b[1], b[0])
        } else {
            (b[0], b[1])
        };
        if ka != kb {
            return Err(OpError::expected(
                "Gemm operands with matching inner dimensions",
                format!(
                    "{a:?} x {b:?} (transA={}, transB={})",
                    self.trans_a as u8, self.trans_b as u8
                ),
            ));
        }
        Ok((m, ka, n))
    }
}

impl Operator for Gemm {
    fn op_type(&self) -> &'static str {
        "Gemm"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, NUMERIC)?;
        check_dtype(cx, 1, &[d])?;
        let (m, _, n) = self.dims(&cx.input(0)?.shape, &cx.input(1)?.shape)?;
        if cx.has(2) {
            check_dtype(cx, 2, &[d])?;
            let c = &cx.input(2)?.shape;
            let out = [m, n];
            let ok = c.len() <= 2
                && c.iter()
                    .enumerate()
                    .all(|(k, &x)| x == 1 || x == out[k + 2 - c.len()]);
            if !ok {
                return Err(OpError::expected(
                    format!("Gemm C broadcastable to [{m}, {n}]"),
                    format!("{c:?}"),
                ));
            }
        }
        Ok(vec![TensorType::new(d, vec![m, n])])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (_, k, _) = self.dims(&cx.input(0).shape, &cx.input(1).shape)?;
        let out = cx.output(0).clone();
        let d = out.dtype;
        let (m, n, r) = (Expr::var(0), Expr::var(1), Expr::rvar(0));
        let ia = if self.trans_a {
            vec![r.clone(), m]
        } else {
            vec![m, r.clone()]
        };
        let ib = if self.trans_b { vec![n, r] } else { vec![r, n] };
        let body = Expr::load(Src::Arg(0), ia).mul(Expr::load(Src::Arg(1), ib));
        let mut fin = Expr::Acc;
        if self.alpha != 1.0 {
            fin = fin.mul(Expr::c(d, self.alpha));
        }
        if cx.has(2) && self.beta != 0.0 {
            let mut c = cx.load_bcast(2, &out.shape);
            if self.beta != 1.0 {
                c = c.mul(Expr::c(d, self.beta));
            }
            fin = fin.add(c);
        }
        let fin = (fin != Expr::Acc).then_some(fin);
        Ok(vec![cx.reduce(out, RedOp::Sum, vec![k], body, fin)])
    }
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("MatMul", |_: &OpCx| Ok(Arc::new(MatMul))),
    ("Gemm", |cx: &OpCx| {
        Ok(Arc::new(Gemm {
            alpha: cx.attrs.float("alpha", 1.0)? as f64,
            beta: cx.attrs.float("beta", 1.0)? as f64,
            trans_a: cx.attrs.int("transA", 0)? != 0,
            trans_b: cx.attrs.int("transB", 0)? != 0,
        }))
    }),
];
