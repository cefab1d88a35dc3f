//! The layout decisions on a fused program, before its stages are planned: convolutions that
//! read their padded input directly instead of an im2col buffer (`direct`), contraction weights
//! transposed so that the dimension a kernel vectorises along is contiguous (channel weights,
//! `transB` weights), and operands stored in column panels (`te::PANEL`) that register-blocked
//! kernels stream. These rewrite the program (its constants, a buffer's layout, an im2col
//! stage); what a stage computes is unchanged.
mod direct;

use crate::ir::DType;
use crate::schedule::analysis::{channel_axis, channel_weight, ranged_channel_axis, uses_var};
use crate::te::{BufId, BufKind, Exec, Expr, Program, RedOp, Src, PANEL};

/// Stores constant operands of contraction stages in column panels when every read of them walks
/// the last dimension with the stage's row (`b[.., Var(row)]`): the register-blocked kernel then
/// streams each panel contiguously instead of striding across rows.
pub fn pack_weights(p: &mut Program) {
    direct::direct_convs(p);
    channel_weights(p);
    transpose_weights(p);
    let mut ok: Vec<Option<bool>> = vec![None; p.bufs.len()];
    for b in &p.bufs {
        let BufKind::Stage(st) = &b.kind else {
            continue;
        };
        let rank = st.ty.rank();
        let gemm_like = st.reduce.as_ref().is_some_and(|r| r.op == RedOp::Sum)
            && st.exec == Exec::Generated
            && st.ty.dtype == DType::F32
            && rank >= 1
            && st.ty.shape[rank - 1] >= PANEL;
        let v = rank.saturating_sub(1) as u32;
        let mut visit = |e: &Expr| {
            let (Expr::Load(Src::Buf(k), _) | Expr::LoadFlat(Src::Buf(k), _)) = e else {
                return;
            };
            let packable = match &p.bufs[k.index()].kind {
                BufKind::Const(_) => true,
                BufKind::Stage(s) => s.materialize && s.reduce.is_none() && !p.outputs.contains(k),
                _ => false,
            };
            if !packable {
                return;
            }
            let good = gemm_like
                && match e {
                    Expr::Load(_, idx) => {
                        let shape = &p.bufs[k.index()].ty.shape;
                        shape.len() >= 2
                            && shape[shape.len() - 1] == st.ty.shape[rank - 1]
                            && idx.last() == Some(&Expr::Var(v))
                            && idx[..idx.len() - 1].iter().all(|i| !uses_var(i, v))
                    }
                    _ => false,
                };
            let k = k.index();
            ok[k] = Some(ok[k].unwrap_or(true) && good);
        };
        st.body.visit(&mut visit);
        if let Some(f) = st.reduce.as_ref().and_then(|r| r.finalize.as_ref()) {
            f.visit(&mut visit);
        }
    }
    for (b, ok) in p.bufs.iter_mut().zip(ok) {
        if ok == Some(true) && b.ty.dtype == DType::F32 {
            b.packed = true;
        }
    }
}

/// Transposes rank-2 constant operands that contraction stages read as `w[row, r]` (e.g. Gemm with
/// `transB`), so that the row becomes the contiguous dimension: `w'[r, row]`.
fn transpose_weights(p: &mut Program) {
    let mut ok: Vec<Option<bool>> = vec![None; p.bufs.len()];
    for b in &p.bufs {
        let BufKind::Stage(st) = &b.kind else {
            continue;
        };
        let rank = st.ty.rank();
        let gemm_like = st.reduce.as_ref().is_some_and(|r| r.op == RedOp::Sum)
            && st.exec == Exec::Generated
            && st.ty.dtype == DType::F32
            && rank >= 1
            && st.ty.shape[rank - 1] >= 16;
        let v = rank.saturating_sub(1) as u32;
        let mut visit = |e: &Expr| {
            let (Expr::Load(Src::Buf(k), _) | Expr::LoadFlat(Src::Buf(k), _)) = e else {
                return;
            };
            let k = k.index();
            let BufKind::Const(t) = &p.bufs[k].kind else {
                return;
            };
            let good = gemm_like
                && t.ty.rank() == 2
                && t.ty.dtype == DType::F32
                && matches!(e, Expr::Load(_, idx) if idx[0] == Expr::Var(v) && !uses_var(&idx[1], v) && t.ty.shape[0] == st.ty.shape[rank - 1]);
            ok[k] = Some(ok[k].unwrap_or(true) && good);
        };
        st.body.visit(&mut visit);
        if let Some(f) = st.reduce.as_ref().and_then(|r| r.finalize.as_ref()) {
            f.visit(&mut visit);
        }
    }
    for (k, ok) in p.buf_ids().zip(ok).collect::<Vec<_>>() {
        if ok != Some(true) {
            continue;
        }
        transpose_const(p, k);
    }
}

/// Transposes rank-2 f32 constant `k` (`w[a, b]` becomes `w'[b, a]`) and every load of it.
fn transpose_const(p: &mut Program, k: BufId) {
    let BufKind::Const(t) = &p.bufs[k.index()].kind else {
        return;
    };
    let tt = transposed(t, t.ty.shape[0], t.ty.shape[1]);
    p.bufs[k.index()].ty = tt.ty.clone();
    p.bufs[k.index()].kind = BufKind::Const(std::sync::Arc::new(tt));
    for b in &mut p.bufs {
        let BufKind::Stage(st) = &mut b.kind else {
            continue;
        };
        let swap = |e: &Expr| -> Expr {
            e.rewrite(&mut |x| match x {
                Expr::Load(Src::Buf(b), idx) if *b == k => Some(Expr::Load(
                    Src::Buf(*b),
                    vec![idx[1].clone(), idx[0].clone()],
                )),
                _ => None,
            })
        };
        st.body = swap(&st.body);
        if let Some(f) = st.reduce.as_mut().and_then(|r| r.finalize.as_mut()) {
            *f = swap(f);
        }
    }
}

/// The f32 data of `t` read as a row-major `[rows, cols]` matrix, transposed: `[cols, rows]`.
fn transposed(t: &crate::ir::Tensor, rows: usize, cols: usize) -> crate::ir::Tensor {
    let mut tt = crate::ir::Tensor::zeros(crate::ir::TensorType::new(DType::F32, vec![cols, rows]));
    for i in 0..rows {
        for j in 0..cols {
            let (src, dst) = ((i * cols + j) * 4, (j * rows + i) * 4);
            tt.data[dst..dst + 4].copy_from_slice(&t.data[src..src + 4]);
        }
    }
    tt
}

/// Transposes the weights of the stages that vectorise along their channels ([`channel_axis`]):
/// `w[channel * k + r]` becomes `w'[r, channel]`, whose channels are contiguous. A weight any
/// other stage (or another expression) reads stays as it is, and its readers vectorise along
/// their rows.
fn channel_weights(p: &mut Program) {
    transpose_channel_weights(p, channel_axis, true);
}

/// [`channel_weights`] of a program served over a range of sizes, each of its samples alike
/// ([`ranged_channel_axis`]): the transposed weights stay row-major (a ranged program lays
/// out no panels).
pub fn ranged_channel_weights(p: &mut Program) {
    transpose_channel_weights(p, ranged_channel_axis, false);
}

/// Transposes the weights of the stages whose channel axis `axis` gives, in column panels when
/// `panels`.
fn transpose_channel_weights(
    p: &mut Program,
    axis: fn(&Program, &crate::te::Stage) -> Option<usize>,
    panels: bool,
) {
    // Per constant: its channels and row length, while every read of it is a channel weight of
    // that shape.
    let mut ok: Vec<Option<Option<(usize, usize)>>> = vec![None; p.bufs.len()];
    for b in &p.bufs {
        let BufKind::Stage(st) = &b.kind else {
            continue;
        };
        let c = axis(p, st);
        let extents = st.reduce.as_ref().map_or(&[][..], |r| &r.extents);
        // Only the body's reads are weights; a constant the epilogue reads (a bias) stays.
        let mut visit = |e: &Expr, in_body: bool| {
            let (Expr::Load(Src::Buf(k), _) | Expr::LoadFlat(Src::Buf(k), _)) = e else {
                return;
            };
            let k = k.index();
            if !matches!(p.bufs[k].kind, BufKind::Const(_)) {
                return;
            }
            let this = c.filter(|_| in_body).and_then(|c| {
                let ch = st.ty.shape[c];
                channel_weight(p, e, c as u32, ch, extents).map(|_| (ch, p.bufs[k].ty.numel() / ch))
            });
            ok[k] = Some(match ok[k] {
                None => this,
                Some(prev) => prev.filter(|_| prev == this),
            });
        };
        st.body.visit(&mut |e| visit(e, true));
        if let Some(f) = st.reduce.as_ref().and_then(|r| r.finalize.as_ref()) {
            f.visit(&mut |e| visit(e, false));
        }
    }
    let chosen: Vec<(BufId, usize, usize)> = p
        .buf_ids()
        .zip(&ok)
        .filter_map(|(k, o)| o.flatten().map(|(ch, row)| (k, ch, row)))
        .collect();
    if chosen.is_empty() {
        return;
    }
    // Every read becomes `w'[r, channel]` (computed on the program as it was).
    let mut new_exprs: Vec<(usize, Expr, Option<Expr>)> = Vec::new();
    for (id, b) in p.bufs.iter().enumerate() {
        let BufKind::Stage(st) = &b.kind else {
            continue;
        };
        let Some(c) = axis(p, st) else {
            continue;
        };
        let ch = st.ty.shape[c];
        let extents = st.reduce.as_ref().map_or(&[][..], |r| &r.extents);
        let rewrite = |e: &Expr| -> Expr {
            e.rewrite(&mut |x| {
                let (w, r) = channel_weight(p, x, c as u32, ch, extents)?;
                chosen
                    .iter()
                    .any(|&(k, _, _)| k == w)
                    .then(|| Expr::Load(Src::Buf(w), vec![r, Expr::Var(c as u32)]))
            })
        };
        let fin = st
            .reduce
            .as_ref()
            .and_then(|r| r.finalize.as_ref())
            .map(rewrite);
        new_exprs.push((id, rewrite(&st.body), fin));
    }
    for (id, body, fin) in new_exprs {
        let BufKind::Stage(st) = &mut p.bufs[id].kind else {
            continue;
        };
        st.body = body;
        if let (Some(f), Some(r)) = (fin, st.reduce.as_mut()) {
            r.finalize = Some(f);
        }
    }
    for (k, channels, row) in chosen {
        let buf = &mut p.bufs[k.index()];
        let BufKind::Const(t) = &buf.kind else {
            continue;
        };
        let tt = transposed(t, channels, row);
        buf.ty = tt.ty.clone();
        buf.kind = BufKind::Const(std::sync::Arc::new(tt));
        // In column panels: a tile's block of `kc` rows is one contiguous stream.
        buf.packed = panels;
    }
}
