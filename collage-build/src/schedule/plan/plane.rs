//! The depthwise plane plan (`te::PlanePlan`): a depthwise window reduction over whole image
//! planes; `codegen/c/plane.rs` prints it.
use crate::ir::DType;
use crate::schedule::analysis::{conjuncts, uses_var, vectorizable};
use crate::te::{affine_terms, Axis, BinOp, BufId, Expr, PlanePlan, Program, RedOp, Src, Stage};

/// Scratch (the padded input band) per task, in floats: 32 KiB.
const SCRATCH_FLOATS: usize = 8 * 1024;

/// Channels per task of a channel-blocked plan ([`PlanePlan::chan`]): one AVX-512 vector,
/// two AVX2 vectors, four SSE vectors; every variant has the same tasks.
pub(crate) const CHAN_BLOCK: usize = crate::te::Isa::WIDEST_LANES;

/// The most floats of a channel-blocked plan's padded input (every padded pixel's block of
/// channels): 64 KiB, a 30x30 padded plane.
const CHAN_SCRATCH_FLOATS: usize = 16 * 1024;

/// Rows narrower than this (an AVX-512 vector) run flat ([`PlanePlan::flat`]): a 7x7 plane's
/// rows fill four lanes of a vector each, the flat run all sixteen.
const FLAT_BELOW: usize = 16;

/// The most lanes of any variant: the slack a flat run reads past the band.
pub(crate) const MAX_LANES: usize = crate::te::Isa::WIDEST_LANES;

/// The plane plan for `st` when it is a depthwise window reduction: an f32 sum over taps of
/// `x[n, c, sh * i2 + dh * a + oh, sw * i3 + dw * b + ow] * w(c, a, b)`, under a guard that
/// only tests those two input indices against the input's extents.
///
/// `knobs` (parts, band, flat, chan, prefetch), when given, replace the rules: parts and band
/// are clamped to what the plane and the scratch take, a flag whose condition does not hold is
/// off.
pub(crate) fn plane_plan(p: &Program, st: &Stage, knobs: Option<PlaneKnobs>) -> Option<PlanePlan> {
    let r = st.reduce.as_ref()?;
    let shape = &st.ty.shape;
    if r.op != RedOp::Sum || st.ty.dtype != DType::F32 || shape.len() != 4 {
        return None;
    }
    let unit_rvars: Vec<u32> = (0..r.extents.len() as u32)
        .filter(|&k| r.extents[k as usize] == 1)
        .collect();
    let body = st.body.rewrite(&mut |e| match e {
        Expr::RVar(k) if unit_rvars.contains(k) => Some(Expr::i(0)),
        _ => None,
    });
    let (cond, value) = match &body {
        Expr::Select(c, a, z) if matches!(z.as_ref(), Expr::Const(s) if s.is_zero()) => {
            (Some(c.as_ref().clone()), a.as_ref().clone())
        }
        other => (None, other.clone()),
    };
    let Expr::Bin(BinOp::Mul, a, b) = &value else {
        return None;
    };
    let reads_plane = |e: &Expr| -> Option<(BufId, Vec<Expr>)> {
        match e {
            Expr::Load(Src::Buf(x), idx) if idx.len() == 4 && uses(idx, 2) && uses(idx, 3) => {
                Some((*x, idx.clone()))
            }
            _ => None,
        }
    };
    let ((x, idx), weight) = match (reads_plane(a), reads_plane(b)) {
        (Some(l), None) => (l, b.as_ref().clone()),
        (None, Some(l)) => (l, a.as_ref().clone()),
        _ => return None,
    };
    let xb = &p.bufs[x.index()];
    if xb.packed || xb.ty.dtype != DType::F32 {
        return None;
    }
    // The weight is per channel and tap; the plane is the output's (n, c).
    if uses_var(&weight, 2) || uses_var(&weight, 3) {
        return None;
    }
    if [&idx[0], &idx[1]]
        .iter()
        .any(|e| uses_var(e, 2) || uses_var(e, 3) || has_rvar(e))
        || idx[1] != Expr::var(1)
    {
        return None;
    }
    let free: Vec<u32> = (0..r.extents.len() as u32)
        .filter(|k| !unit_rvars.contains(k))
        .collect();
    let axis = |e: &Expr, v: u32, input: usize| -> Option<Axis> {
        let (terms, offset) = affine_terms(e);
        let mut stride = 0;
        let mut tap = None;
        for (t, k) in terms {
            match t {
                Expr::Var(u) if u == v && k > 0 => stride = k as usize,
                Expr::RVar(u) if free.contains(&u) && k > 0 && tap.is_none() => {
                    tap = Some((u, k as usize))
                }
                _ => return None,
            }
        }
        let (rvar, dilation) = tap?;
        (stride > 0).then_some(Axis {
            out: shape[v as usize],
            input,
            stride,
            dilation,
            taps: r.extents[rvar as usize],
            rvar,
            offset,
        })
    };
    let h = axis(&idx[2], 2, xb.ty.shape[2])?;
    let w = axis(&idx[3], 3, xb.ty.shape[3])?;
    if h.rvar == w.rvar || free.len() != 2 {
        return None;
    }
    // Every conjunct of the guard is a bound of one of the two spatial input indices.
    if let Some(c) = cond {
        let mut cs = Vec::new();
        conjuncts(&c, &mut cs);
        for t in cs {
            let ok = match &t {
                Expr::Bin(BinOp::Ge, e, z) => (**e == idx[2] || **e == idx[3]) && **z == Expr::i(0),
                Expr::Bin(BinOp::Lt, e, n) => {
                    (**e == idx[2] && **n == Expr::i(h.input as i64))
                        || (**e == idx[3] && **n == Expr::i(w.input as i64))
                }
                _ => false,
            };
            if !ok {
                return None;
            }
        }
    }
    let flat = knobs.is_none_or(|k| k.flat)
        && h.stride == 1
        && w.stride == 1
        && w.out < FLAT_BELOW
        && r.finalize
            .as_ref()
            .is_none_or(|f| !uses_var(f, 2) && !uses_var(f, 3) && vectorizable(p, f, 3));
    // The tallest band whose padded input rows (and a flat run's outputs) fit the scratch.
    let row = w.stride * w.phase_len();
    let most = (1..=h.out).rev().find(|&rows| {
        let outs = if flat {
            rows * row + row + MAX_LANES
        } else {
            0
        };
        h.span(rows) * row + outs <= SCRATCH_FLOATS
    })?;
    let parts = match knobs {
        Some(k) => (k.parts as usize).clamp(1, h.out.min(8)),
        None => parts_for(h.out),
    };
    let part_rows = h.out.div_ceil(parts);
    let band = match knobs {
        Some(k) => (k.band as usize).clamp(1, most.min(part_rows)),
        // As many bands per part as that needs, of even heights.
        None => part_rows.div_ceil(part_rows.div_ceil(most)),
    };
    let plane = Expr::flatten(
        &[idx[0].clone(), idx[1].clone(), Expr::i(0), Expr::i(0)],
        &xb.ty.shape,
    );
    // Channel blocks where rows serve vectors worst — strided windows (deinterleaved rows)
    // and rows of under half a vector (a 7x7 plane: even a flat run spends more on the
    // copies than on the taps); 14x14 and wider unit-stride planes run faster along their
    // rows than through the transposes. Whole blocks, a padded plane that fits the scratch,
    // an epilogue along the channels (a bias, a clip) that reads no spatial index (so
    // neither a residual nor the output itself).
    let chan = knobs.map_or(
        h.stride > 1 || w.stride > 1 || w.out < FLAT_BELOW / 2,
        |k| k.chan,
    ) && shape[1].is_multiple_of(CHAN_BLOCK)
        && h.span(h.out) * w.span(w.out) * CHAN_BLOCK <= CHAN_SCRATCH_FLOATS
        && r.finalize
            .as_ref()
            .is_none_or(|f| !uses_var(f, 2) && !uses_var(f, 3) && vectorizable(p, f, 1));
    let (parts, part_rows, band) = if chan {
        (1, h.out, h.out)
    } else {
        (parts, part_rows, band)
    };
    let n_outer = if chan {
        shape[0] * shape[1] / CHAN_BLOCK
    } else {
        parts * shape[0] * shape[1]
    };
    Some(PlanePlan {
        x,
        plane,
        weight,
        unit_rvars,
        h,
        w,
        parts,
        part_rows,
        band,
        flat: flat && !chan,
        chan,
        chan_block: CHAN_BLOCK,
        prefetch: knobs.is_none_or(|k| k.prefetch)
            && !chan
            && h.input * w.input * 4 >= PREFETCH_PLANE_BYTES,
        n_outer,
        parallel: false,
    })
}

/// The knobs of a plane plan (`te::PlanChoice::Plane`'s).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlaneKnobs {
    pub parts: u8,
    pub band: u16,
    pub flat: bool,
    pub chan: bool,
    pub prefetch: bool,
}

/// Input planes of at least this many bytes (a page) have the next task's plane prefetched
/// while a task copies its rows.
const PREFETCH_PLANE_BYTES: usize = 4096;

/// Parts of a plane of `rows` output rows: tall planes are cut into 2, 4 or 8 parts of at
/// least 14 rows, and the tasks run part-major (every plane's first part, then every plane's
/// second, ...), so a thread's contiguous share of the tasks is a horizontal slab of every
/// channel — the rows the pixel-major pointwise layers around it give the same thread. Whole
/// planes per task would hand each thread half of the channels instead, and half of every
/// layer's input would come from the other core's cache.
fn parts_for(rows: usize) -> usize {
    let most = (rows / 14).clamp(1, 8);
    1 << most.ilog2()
}

fn uses(idx: &[Expr], v: u32) -> bool {
    idx.iter().any(|e| uses_var(e, v))
}

fn has_rvar(e: &Expr) -> bool {
    let mut yes = false;
    e.visit(&mut |x| yes |= matches!(x, Expr::RVar(_)));
    yes
}
