//! Band groups (Welder's tiles connected across a window, GraphTurbo's instances along an
//! image's rows): a pointwise stage and the depthwise window that reads it, split into bands of
//! output rows, with the window's halo recomputed.
//!
//! An inverted residual block expands a narrow tensor into a wide one (1x1, 16 -> 96 channels at
//! 112x112: a 4.8 MB intermediate), which a depthwise window reads back. The two share no leading
//! dimension a row group could split along (the expansion reads every input channel, the window
//! reads rows around its own), so apart they send the wide tensor to memory and back. Split along
//! the window's output rows instead: an instance computes the expansion of exactly the input rows
//! its band of output rows reads (every channel, into a per-thread scratch slot), then the window
//! over that band. Neighbouring bands share `taps - stride` input rows, which each computes: the
//! halo, recomputed rather than communicated (GraphTurbo's instances run independently; Welder's
//! traffic model prices the recompute against the traffic it saves).
//!
//! Split information: the members are a register-blocked stage over the flattened pixels of
//! `[N, C, H * W]` (its tiles run slowest, so a pixel range is a range of outer iterations) and a
//! depthwise plane plan over `[N, C, Ho, Wo]` reading that buffer as `[N, C, H, W]`, in every
//! variant; the first's output is read by the second alone. The band is chosen by the traffic
//! model: a band's step (the scratch slot and the expansion's inputs over the band's rows; the
//! window's output is written once and streams out) must fit half of the build target's L2, the
//! rows computed in all may exceed the image's by at most a quarter ([`MAX_RECOMPUTE`]), the
//! group must leave at least [`MIN_BANDS`] instances, and the wide tensor must be larger than
//! half of the last-level cache (else it meets its reader there, and its round trip costs less
//! than the recompute). Among the bands that satisfy those, the tallest (the least recompute);
//! `--schedule-seed` draws among them. Binding: contiguous shares of the bands, one per thread
//! on a slot of its own (so a thread's bands reuse one slot in its L2), at most one slot per
//! core of the target.
use crate::fusion::tile::propagate;
use crate::schedule::kernel::Draw;
use crate::target::Target;
use crate::te::{Band, BufId, Exec, Expr, Isa, KernelPlan, Program, RowGroup};

use super::group::slots;

/// Most rows the expansion computes in all, over the image's rows: a quarter more.
pub const MAX_RECOMPUTE: f64 = 1.25;

/// Instances a band group has at least (threads to share them).
pub const MIN_BANDS: usize = 8;

/// The depthwise plane plans of stage `d` in every variant, when none is channel-blocked or
/// flat and each reads its input planes at `i0, i1`.
fn window(p: &Program, d: BufId) -> Option<(BufId, crate::te::Axis, crate::te::Axis)> {
    let st = p.stage(d)?;
    if st.exec != Exec::Generated || st.ty.rank() != 4 || p.bufs[d.index()].packed {
        return None;
    }
    let plans = &p.plans[d.index()];
    if plans.len() != Isa::ALL.len() {
        return None;
    }
    let mut found = None;
    for plan in plans {
        let KernelPlan::Plane(pp) = plan else {
            return None;
        };
        if pp.chan || pp.flat {
            return None;
        }
        let xs = &p.bufs[pp.x.index()].ty.shape;
        if xs.len() != 4
            || pp.plane != Expr::flatten(&[Expr::var(0), Expr::var(1), Expr::i(0), Expr::i(0)], xs)
        {
            return None;
        }
        let this = (pp.x, pp.h, pp.w);
        if found.is_some_and(|f| f != this) {
            return None;
        }
        found = Some(this);
    }
    found
}

/// Whether stage `x` is register-blocked over its flattened pixels `[N, C, H * W]` in every
/// variant, its pixel tiles slowest.
fn pointwise(p: &Program, x: BufId) -> bool {
    let Some(st) = p.stage(x) else { return false };
    let (shape, bs) = (&st.ty.shape, &p.bufs[x.index()].ty.shape);
    if st.exec != Exec::Generated
        || shape.len() != 3
        || bs.len() != 4
        || shape[..2] != bs[..2]
        || shape[2] != bs[2] * bs[3]
        || p.bufs[x.index()].packed
    {
        return false;
    }
    let plans = &p.plans[x.index()];
    plans.len() == Isa::ALL.len()
        && plans.iter().all(|plan| match plan {
            KernelPlan::Gemm(g) => {
                let tiles = shape[2].div_ceil(g.lanes * g.vecs);
                g.v == 2 && g.outer.iter().all(|&k| k < 2) && g.n_outer % tiles == 0
            }
            _ => false,
        })
}

/// The rows `(computed, widest)` the expansion computes over every band of `block` output rows:
/// their sum, and the most of one band.
fn band_rows(band: &Band, block: usize) -> (usize, usize) {
    let out = band.axis.out;
    let (mut sum, mut most) = (0, 0);
    let mut y0 = 0;
    while y0 < out {
        let (lo, hi) = band.input_rows(y0, (y0 + block).min(out));
        sum += hi - lo;
        most = most.max(hi - lo);
        y0 += block;
    }
    (sum, most)
}

/// Bytes one band of `rows` input rows keeps live: the scratch slot and the expansion's operands
/// over those rows.
fn step_bytes(p: &Program, x: BufId, band: &Band, rows: usize) -> usize {
    let st = p.stage(x).expect("a member is a stage");
    let mut tile = st.ty.shape.clone();
    tile[2] = rows * band.width;
    let slot = tile.iter().product::<usize>() * st.ty.dtype.size();
    slot + propagate(p, st, &tile, None)
        .iter()
        .map(|r| r.bytes())
        .sum::<usize>()
}

/// The band groups of planned program `p` for `target` (see the module's text); `seed` draws
/// each group's band among those that fit.
pub fn plan_band_groups(p: &Program, target: &Target, seed: Option<u64>) -> Vec<RowGroup> {
    let cpu = target.host_cpu();
    let cap = cpu.l2 / 2;
    let last_level = cpu.l3.max(cpu.l2);
    let readers = p.readers();
    let mut draw = seed.map(|s| Draw::new(s ^ 0x6261_6e64));
    let mut draw_slots = seed.map(|s| Draw::new(s ^ 0x0062_736c_6f74));
    let mut groups = Vec::new();
    for d in p.buf_ids() {
        let Some((x, h, w)) = window(p, d) else {
            continue;
        };
        if !pointwise(p, x)
            || p.outputs.contains(&x)
            || readers[x.index()] != [d]
            || p.groups
                .iter()
                .any(|g| [g.producer, g.consumer].iter().any(|m| *m == x || *m == d))
        {
            continue;
        }
        // The wide tensor meets its reader in the last-level cache without a group: there its
        // round trip costs less than the recomputed halo (measured: MobileNetV2's 4.8 MB
        // expansion at 112x112 ran 15% slower banded on a core with a 32 MiB L3; a 19 MB one
        // at 224x224, 14% faster).
        if p.bufs[x.index()].ty.bytes() <= last_level / 2 {
            continue;
        }
        let mut band = Band {
            axis: h,
            width: w.input,
            pixels: 0,
        };
        let fitting: Vec<(usize, usize)> = (1..=h.out)
            .filter_map(|block| {
                let (sum, most) = band_rows(&band, block);
                let ok = sum as f64 <= MAX_RECOMPUTE * h.input as f64
                    && step_bytes(p, x, &band, most) <= cap
                    && h.out.div_ceil(block) >= MIN_BANDS;
                ok.then_some((block, most))
            })
            .collect();
        let Some(&tallest) = fitting.last() else {
            continue;
        };
        let (block, most) = match draw.as_mut() {
            Some(r) => fitting[r.below(fitting.len() as u64) as usize],
            None => tallest,
        };
        band.pixels = most * band.width;
        let instances = h.out.div_ceil(block);
        groups.push(RowGroup {
            stages: vec![x, d],
            dims: 0,
            rows: h.out,
            row: h.out,
            block,
            instances,
            // A slot is a large share of L2: one per core the target has, which the run's
            // threads reuse band after band.
            slots: slots(instances.min(cpu.cores.max(1)), draw_slots.as_mut()),
            scratch: vec![x],
            band: Some(band),
        });
    }
    groups
}

/// What `collage explain` shows of band group `g`: the last member's output box per instance,
/// the bytes one band keeps live, and the rows the expansion computes against the image's.
pub fn describe(p: &Program, g: &RowGroup, band: &Band) -> (Vec<usize>, usize, (usize, usize)) {
    let (sum, most) = band_rows(band, g.block);
    let mut tile = p
        .stage(g.last())
        .expect("a member is a stage")
        .ty
        .shape
        .clone();
    tile[2] = g.block.min(tile[2]);
    (
        tile,
        step_bytes(p, g.stages[0], band, most),
        (sum, band.axis.input),
    )
}
