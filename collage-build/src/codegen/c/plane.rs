//! Depthwise window reductions over whole image planes: a depthwise convolution (one input
//! channel per output channel) computes each output plane from one input plane, so one task
//! takes one plane. A band of the plane's input rows is first copied into a zero-padded scratch
//! on the stack (the padding the guard `select(in bounds, x * w, 0)` describes), so no tap tests
//! a bound. A strided window's rows are stored deinterleaved, one row per phase of the column
//! stride (columns `s * c + k` at `c` of phase `k`), so every tap of every output vector is one
//! contiguous load, whatever the stride. Each output row is then computed in whole vectors of the
//! variant's lanes (the last one overlapping its predecessor when the row is not a multiple,
//! narrower vectors for narrow rows), the taps summed in registers, the epilogue (bias, clip,
//! residual) applied to the vector and the result stored straight into the output: no
//! accumulator scratch, no second pass. Rows narrower than a vector at unit strides (7x7 and
//! 14x14 planes) instead run flat: the band's outputs as one run of whole vectors on the
//! scratch's row pitch (two junk columns per row), the epilogue on those vectors, and each row
//! copied out — a 7x7 row would fill four lanes of a vector, the flat run fills all of them.
//!
//! Strided windows and rows under half a vector run channel-blocked instead when their channels
//! come in blocks of 16 and their epilogue runs along the channels ([`PlanePlan::chan`]): the
//! block's padded planes transposed into a pixel-major scratch, every output a vector of 16
//! channels, the outputs transposed back in registers.
use std::fmt::Write;

use super::{
    conjuncts, transpose_in_registers, uses_var, vector_expr_acc, vectorizable, Emitter, CACHE_LINE,
};
use crate::ir::{strides, DType};
use crate::te::{affine_terms, BinOp, Expr, Program, RedOp, Src, Stage};

/// Scratch (the padded input band) per task, in floats: 32 KiB.
const SCRATCH_FLOATS: usize = 8 * 1024;

/// Channels per task of a channel-blocked plan ([`PlanePlan::chan`]): one AVX-512 vector,
/// two AVX2 vectors, four SSE vectors; every variant has the same tasks.
const CHAN_BLOCK: usize = 16;

/// The most floats of a channel-blocked plan's padded input (every padded pixel's block of
/// channels): 64 KiB, a 30x30 padded plane.
const CHAN_SCRATCH_FLOATS: usize = 16 * 1024;

/// Input planes of at least this many bytes (a page) have the next task's plane prefetched
/// while a task copies its rows.
const PREFETCH_PLANE_BYTES: usize = 4096;

/// Rows narrower than this (an AVX-512 vector) run flat ([`PlanePlan::flat`]): a 7x7 plane's
/// rows fill four lanes of a vector each, the flat run all sixteen.
const FLAT_BELOW: usize = 16;

/// The most lanes of any variant: the slack a flat run reads past the band.
const MAX_LANES: usize = 16;

/// One spatial axis of the window: input index `stride * i + dilation * r + offset`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Axis {
    /// Output extent.
    out: usize,
    /// Input extent.
    input: usize,
    stride: usize,
    dilation: usize,
    /// Taps (the reduction extent).
    taps: usize,
    /// The reduction variable of the taps.
    rvar: u32,
    /// Constant offset (minus the leading padding).
    offset: i64,
}

impl Axis {
    /// Input positions one band of `rows` outputs spans.
    fn span(&self, rows: usize) -> usize {
        (rows - 1) * self.stride + (self.taps - 1) * self.dilation + 1
    }

    /// Padded positions per phase of the stride: position `p` lies at `p / stride` of phase
    /// `p % stride`.
    fn phase_len(&self) -> usize {
        self.span(self.out).div_ceil(self.stride)
    }
}

/// The plan of a depthwise window stage (see the module documentation).
#[derive(Clone, Debug)]
pub(super) struct PlanePlan {
    /// The input buffer.
    x: u32,
    /// The input plane's flat offset with its spatial indices at 0, over `i0`, `i1`.
    plane: Expr,
    /// The weight (the factor that does not read `x`).
    weight: Expr,
    /// Reduction variables of extent 1 (set to 0).
    unit_rvars: Vec<u32>,
    h: Axis,
    w: Axis,
    /// Parts of each plane's output rows, each its own task ([`PlanePlan::parts_for`]).
    parts: usize,
    /// Output rows per part (the last part may have fewer).
    part_rows: usize,
    /// Output rows per band (within a part).
    band: usize,
    /// Narrow rows (fewer than [`FLAT_BELOW`] columns) at unit strides with an epilogue that
    /// reads no spatial index: the band is computed as one flat run of whole vectors over the
    /// padded rows (two junk columns per row), then its rows are copied out.
    flat: bool,
    /// Small planes with channels in blocks of [`CHAN_BLOCK`]: a task takes a block of
    /// channels, transposes their padded planes into a scratch of pixels (the block's channels
    /// contiguous), computes every output as vectors along the channels (the taps' weights one
    /// vector each, the per-channel epilogue along the vector) and transposes the outputs back
    /// in registers. A 7x7 plane's rows fill few lanes and strided rows must be deinterleaved;
    /// along the channels every lane is used and every load is a vector.
    chan: bool,
    /// Outer tasks: parts of output planes (`parts * shape[0] * shape[1]`), part-major; or
    /// blocks of channels (`shape[0] * shape[1] / CHAN_BLOCK`).
    pub(super) n_outer: usize,
}

impl PlanePlan {
    /// The plan for `st` when it is a depthwise window reduction: an f32 sum over taps of
    /// `x[n, c, sh * i2 + dh * a + oh, sw * i3 + dw * b + ow] * w(c, a, b)`, under a guard that
    /// only tests those two input indices against the input's extents.
    pub(super) fn new(p: &Program, st: &Stage) -> Option<PlanePlan> {
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
        let reads_plane = |e: &Expr| -> Option<(u32, Vec<Expr>)> {
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
        let xb = &p.bufs[x as usize];
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
                    Expr::Bin(BinOp::Ge, e, z) => {
                        (**e == idx[2] || **e == idx[3]) && **z == Expr::i(0)
                    }
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
        let flat = h.stride == 1
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
        let parts = Self::parts_for(h.out);
        let part_rows = h.out.div_ceil(parts);
        // As many bands per part as that needs, of even heights.
        let band = part_rows.div_ceil(part_rows.div_ceil(most));
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
        let chan = (h.stride > 1 || w.stride > 1 || w.out < FLAT_BELOW / 2)
            && shape[1].is_multiple_of(CHAN_BLOCK)
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
            n_outer,
        })
    }

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

    /// The schedule's text (the filetests' form).
    pub(super) fn text(&self) -> String {
        if self.chan {
            return format!(
                "depthwise channels {CHAN_BLOCK} taps {}x{} stride {}x{} outer [i0,i1] trips {}",
                self.h.taps, self.w.taps, self.h.stride, self.w.stride, self.n_outer
            );
        }
        format!(
            "depthwise plane taps {}x{} stride {}x{}{} band {}{} outer [i0,i1] trips {}",
            self.h.taps,
            self.w.taps,
            self.h.stride,
            self.w.stride,
            if self.parts > 1 {
                format!(" parts {}x{}", self.parts, self.part_rows)
            } else {
                String::new()
            },
            self.band,
            if self.flat { " flat" } else { "" },
            self.n_outer
        )
    }

    /// The stage's kernel for a variant of `lanes` f32 lanes.
    pub(super) fn emit(&self, out: &mut String, em: &Emitter, id: u32, st: &Stage, lanes: usize) {
        if self.chan {
            return self.emit_chan(out, em, id, st, lanes);
        }
        let shape = &st.ty.shape;
        let r = st.reduce.as_ref().expect("a reduction");
        let (h, w) = (self.h, self.w);
        let x = self.x;
        // The scratch: `rows_in` padded input rows of `phases` rows of `pitch` floats each.
        let phases = w.stride;
        let pitch = w.phase_len();
        let row = phases * pitch;
        let rows_in = h.span(self.band);
        let st_strides = strides(shape);
        let o = |k: usize| if shape[k] == 1 { 0 } else { st_strides[k] };
        let c1 = shape[1];
        // The vector width: the variant's lanes, or a narrower vector for narrow rows; rows
        // narrower than four columns run scalar.
        let v = if self.flat {
            lanes
        } else {
            [lanes, 8, 4]
                .into_iter()
                .filter(|&v| v <= lanes && v <= w.out)
                .max()
                .unwrap_or(1)
        };
        let vt = format!("cl_f32x{v}");
        // An epilogue that reads the output itself (a residual added in place) must see each
        // column once: no overlapping last vector, a scalar remainder instead.
        let in_place = r
            .finalize
            .as_ref()
            .is_some_and(|f| f.sources().contains(&Src::Buf(id)));
        let vec_fin = r.finalize.as_ref().is_none_or(|f| vectorizable(em.p, f, 3));
        let fin = r
            .finalize
            .as_ref()
            .map(|f| em.expr(f))
            .unwrap_or_else(|| "acc".into());
        let s = out;
        if self.flat {
            // The flat run reads up to a row and a vector past the band (zeros).
            writeln!(
                s,
                "    float pad[{}], accs[{}];",
                rows_in * row + row + MAX_LANES,
                self.band * row + MAX_LANES
            )
            .unwrap();
        } else {
            writeln!(s, "    float pad[{}];", rows_in * row).unwrap();
        }
        writeln!(s, "    for (int64_t o = begin; o < end; ++o) {{").unwrap();
        let planes = shape[0] * c1;
        if self.parts > 1 {
            writeln!(
                s,
                "        const int64_t i1 = o % {c1}, i0 = o / {c1} % {}, part = o / {planes};\n        const int64_t ylo = part * {pr}, yhi = ylo + {pr} < {ho} ? ylo + {pr} : {ho};",
                shape[0],
                pr = self.part_rows,
                ho = h.out
            )
            .unwrap();
        } else {
            writeln!(s, "        const int64_t i1 = o % {c1}, i0 = o / {c1};").unwrap();
            writeln!(s, "        const int64_t ylo = 0, yhi = {};", h.out).unwrap();
        }
        for k in &self.unit_rvars {
            writeln!(s, "        const int64_t r{k} = 0;").unwrap();
        }
        writeln!(
            s,
            "        const float *restrict xp = b{x} + {};",
            em.expr(&self.plane)
        )
        .unwrap();
        let (ra, rb) = (h.rvar, w.rvar);
        let taps = h.taps * w.taps;
        writeln!(
            s,
            "        float wv[{taps}];\n        for (int64_t r{ra} = 0; r{ra} < {}; ++r{ra})\n            for (int64_t r{rb} = 0; r{rb} < {}; ++r{rb}) wv[r{ra} * {} + r{rb}] = {};",
            h.taps,
            w.taps,
            w.taps,
            em.expr(&self.weight)
        )
        .unwrap();
        if v > 1 {
            writeln!(
                s,
                "        {vt} wvv[{taps}];\n        for (int64_t t = 0; t < {taps}; ++t) wvv[t] = ({vt}){{0}} + wv[t];"
            )
            .unwrap();
        }
        writeln!(
            s,
            "        for (int64_t y0 = ylo; y0 < yhi; y0 += {}) {{",
            self.band
        )
        .unwrap();
        writeln!(
            s,
            "            const int64_t rows = yhi - y0 < {b} ? yhi - y0 : {b};",
            b = self.band
        )
        .unwrap();
        writeln!(
            s,
            "            const int64_t rows_in = (rows - 1) * {} + {};",
            h.stride,
            (h.taps - 1) * h.dilation + 1
        )
        .unwrap();
        // The band's input rows, zero-padded, each as `phases` deinterleaved rows.
        writeln!(
            s,
            "            for (int64_t yy = 0; yy < rows_in; ++yy) {{\n                float *restrict d = pad + yy * {row};\n                const int64_t y = y0 * {} + yy + ({});",
            h.stride, h.offset
        )
        .unwrap();
        writeln!(
            s,
            "                if (y < 0 || y >= {}) {{ for (int64_t c = 0; c < {row}; ++c) d[c] = 0.0f; continue; }}\n                const float *restrict src = xp + y * {};",
            h.input, w.input
        )
        .unwrap();
        // The next task's plane (the next channel: tasks run channel-minor) a row at a time,
        // while this one copies: planes of a page or more each start on a page of their own,
        // where the hardware's prefetchers stop.
        let plane_floats = h.input * w.input;
        if plane_floats * 4 >= PREFETCH_PLANE_BYTES {
            writeln!(
                s,
                "                for (int64_t k = 0; k < {}; k += {CACHE_LINE}) __builtin_prefetch((const char *)(src + {plane_floats}) + k);",
                w.input * 4
            )
            .unwrap();
        }
        for k in 0..phases {
            // Phase `k` holds padded columns `phases * c + k`, input columns
            // `phases * c + k + offset`: in bounds for `c` in `[lo, hi)`.
            let phase_index = |col: i64| (col.max(0) as usize).div_ceil(phases).min(pitch) as i64;
            let lo = phase_index(-w.offset - k as i64);
            let hi = phase_index(w.input as i64 - w.offset - k as i64).max(lo);
            let d = if k == 0 {
                "d".to_string()
            } else {
                format!("(d + {})", k * pitch)
            };
            if lo > 0 {
                writeln!(
                    s,
                    "                for (int64_t c = 0; c < {lo}; ++c) {d}[c] = 0.0f;"
                )
                .unwrap();
            }
            if hi > lo {
                let at = k as i64 + w.offset;
                if phases == 1 {
                    writeln!(
                        s,
                        "                __builtin_memcpy({d} + {lo}, src + {}, {});",
                        lo + at,
                        (hi - lo) * 4
                    )
                    .unwrap();
                } else {
                    writeln!(
                        s,
                        "                for (int64_t c = {lo}; c < {hi}; ++c) {d}[c] = src[c * {phases} + ({at})];"
                    )
                    .unwrap();
                }
            }
            if (hi as usize) < pitch {
                writeln!(
                    s,
                    "                for (int64_t c = {hi}; c < {pitch}; ++c) {d}[c] = 0.0f;"
                )
                .unwrap();
            }
        }
        writeln!(s, "            }}").unwrap();
        if self.flat {
            writeln!(
                s,
                "            for (int64_t q = rows_in * {row}; q < rows_in * {row} + {}; ++q) pad[q] = 0.0f;",
                row + MAX_LANES
            )
            .unwrap();
        }
        // Every output sums its taps in registers; each tap is a load at a constant offset from
        // the output row's first padded row.
        let off = |t: usize| {
            let (a, b) = (t / w.taps, t % w.taps);
            let col = b * w.dilation;
            a * h.dilation * row + (col % phases) * pitch + col / phases
        };
        let vsum = (0..taps)
            .map(|t| format!("wvv[{t}] * *(const {vt} *)(p + {} + x3)", off(t)))
            .collect::<Vec<_>>()
            .join(" + ");
        let ssum = (0..taps)
            .map(|t| format!("wv[{t}] * p[{} + x3]", off(t)))
            .collect::<Vec<_>>()
            .join(" + ");
        let all = format!(
            "i0 * {} + i1 * {} + i2 * {} + i3 * {}",
            o(0),
            o(1),
            o(2),
            o(3)
        );
        if self.flat {
            let value = match &r.finalize {
                Some(f) => vector_expr_acc(em, f, 3, "0", &vt, "av"),
                None => "av".to_string(),
            };
            let fsum = (0..taps)
                .map(|t| format!("wvv[{t}] * *(const {vt} *)(pad + q + {})", off(t)))
                .collect::<Vec<_>>()
                .join(" + ");
            writeln!(
                s,
                "            for (int64_t q = 0; q < rows * {row}; q += {v}) {{\n                const {vt} av = {fsum};\n                *({vt} *)&accs[q] = {value};\n            }}"
            )
            .unwrap();
            writeln!(
                s,
                "            for (int64_t y = 0; y < rows; ++y) __builtin_memcpy(b{id} + i0 * {} + i1 * {} + (y0 + y) * {}, accs + y * {row}, {});",
                o(0),
                o(1),
                o(2),
                w.out * 4
            )
            .unwrap();
            writeln!(s, "        }}\n    }}\n}}").unwrap();
            return;
        }
        writeln!(
            s,
            "            for (int64_t y = 0; y < rows; ++y) {{\n                const int64_t i2 = y0 + y;\n                const float *restrict p = pad + y * {};",
            h.stride * row
        )
        .unwrap();
        let scalar_loop = |s: &mut String, from: &str| {
            writeln!(
                s,
                "                for ({from}; x3 < {}; ++x3) {{ const int64_t i3 = x3; const float acc = {ssum}; b{id}[{all}] = {fin}; }}",
                w.out
            )
            .unwrap();
        };
        if v == 1 {
            scalar_loop(s, "int64_t x3 = 0");
        } else {
            let overlap = !in_place && !w.out.is_multiple_of(v);
            if overlap {
                writeln!(
                    s,
                    "                for (int64_t c0 = 0; c0 < {}; c0 += {v}) {{\n                    const int64_t x3 = c0 + {v} <= {} ? c0 : {};",
                    w.out,
                    w.out,
                    w.out - v
                )
                .unwrap();
            } else {
                writeln!(
                    s,
                    "                int64_t x3 = 0;\n                for (; x3 + {v} <= {}; x3 += {v}) {{",
                    w.out
                )
                .unwrap();
            }
            writeln!(s, "                    const {vt} av = {vsum};").unwrap();
            if vec_fin {
                let value = match &r.finalize {
                    Some(f) => vector_expr_acc(em, f, 3, "x3", &vt, "av"),
                    None => "av".to_string(),
                };
                let base = format!("i0 * {} + i1 * {} + i2 * {}", o(0), o(1), o(2));
                writeln!(
                    s,
                    "                    *({vt} *)&b{id}[{base} + x3] = {value};"
                )
                .unwrap();
            } else {
                writeln!(
                    s,
                    "                    float tv[{v}];\n                    *({vt} *)tv = av;\n                    for (int64_t l = 0; l < {v}; ++l) {{ const int64_t i3 = x3 + l; const float acc = tv[l]; b{id}[{all}] = {fin}; }}"
                )
                .unwrap();
            }
            writeln!(s, "                }}").unwrap();
            if !overlap && !w.out.is_multiple_of(v) {
                scalar_loop(s, "");
            }
        }
        writeln!(s, "            }}\n        }}\n    }}\n}}").unwrap();
    }

    /// The kernel of a channel-blocked plan ([`PlanePlan::chan`]) for a variant of `lanes` f32
    /// lanes: each block of [`CHAN_BLOCK`] channels is `CHAN_BLOCK / lanes` vectors.
    fn emit_chan(&self, s: &mut String, em: &Emitter, id: u32, st: &Stage, lanes: usize) {
        let shape = &st.ty.shape;
        let r = st.reduce.as_ref().expect("a reduction");
        let (h, w) = (self.h, self.w);
        let (hp, wp) = (h.span(h.out), w.span(w.out));
        let (hw, ohw) = (h.input * w.input, h.out * w.out);
        let (cb, l) = (CHAN_BLOCK, lanes);
        let (ncb, sv) = (shape[1] / cb, cb / l);
        let vt = format!("cl_f32x{l}");
        let st_strides = strides(shape);
        let o0 = if shape[0] == 1 { 0 } else { st_strides[0] };
        let o1 = st_strides[1];
        let taps = h.taps * w.taps;
        let (ra, rb) = (h.rvar, w.rvar);
        // The padding never changes: zeroed once per call, the interior rewritten per task.
        writeln!(
            s,
            "    float xs[{}], wt[{}];\n    for (int64_t q = 0; q < {}; ++q) xs[q] = 0.0f;",
            hp * wp * cb,
            taps * cb,
            hp * wp * cb
        )
        .unwrap();
        writeln!(
            s,
            "    for (int64_t o = begin; o < end; ++o) {{\n        const int64_t c0 = o % {ncb} * {cb}, i0 = o / {ncb};"
        )
        .unwrap();
        for k in &self.unit_rvars {
            writeln!(s, "        const int64_t r{k} = 0;").unwrap();
        }
        // Every tap's weights of the block's channels, contiguous.
        writeln!(
            s,
            "        for (int64_t l = 0; l < {cb}; ++l) {{\n            const int64_t i1 = c0 + l;\n            for (int64_t r{ra} = 0; r{ra} < {}; ++r{ra})\n                for (int64_t r{rb} = 0; r{rb} < {}; ++r{rb}) wt[(r{ra} * {} + r{rb}) * {cb} + l] = {};\n        }}",
            h.taps,
            w.taps,
            w.taps,
            em.expr(&self.weight)
        )
        .unwrap();
        writeln!(
            s,
            "        const float *restrict xp;\n        {{ const int64_t i1 = c0; xp = b{} + {}; }}",
            self.x,
            em.expr(&self.plane)
        )
        .unwrap();
        // Input pixel `p` of the plane at padded pixel `(y, x)`, when the window reaches it.
        let at = |p: &str| {
            format!(
                "const int64_t y = ({p}) / {iw} - ({oh}), x = ({p}) % {iw} - ({ow}); if ((uint64_t)y < {hp} && (uint64_t)x < {wp})",
                iw = w.input,
                oh = h.offset,
                ow = w.offset
            )
        };
        // The block's planes into the scratch: `lanes` pixels of `lanes` channels at a time,
        // transposed in registers; the plane's last pixels one channel at a time.
        writeln!(
            s,
            "        for (int64_t p = 0; p + {l} <= {hw}; p += {l})\n            for (int64_t sb = 0; sb < {sv}; ++sb) {{\n                {vt} v[{l}];\n                for (int64_t k = 0; k < {l}; ++k) v[k] = *(const {vt} *)(xp + (sb * {l} + k) * {hw} + p);"
        )
        .unwrap();
        transpose_in_registers(s, l, &vt, "                ");
        writeln!(
            s,
            "                for (int64_t k = 0; k < {l}; ++k) {{ {} *({vt} *)&xs[(y * {wp} + x) * {cb} + sb * {l}] = v[k]; }}\n            }}",
            at("p + k")
        )
        .unwrap();
        writeln!(
            s,
            "        for (int64_t p = {}; p < {hw}; ++p) {{ {} for (int64_t c = 0; c < {cb}; ++c) xs[(y * {wp} + x) * {cb} + c] = xp[c * {hw} + p]; }}",
            hw / l * l,
            at("p")
        )
        .unwrap();
        // Outputs: the taps summed along the channels, `lanes` pixels transposed back into a
        // vector per channel; the plane's last pixels through a scratch vector.
        let off = |t: usize| {
            let (a, b) = (t / w.taps, t % w.taps);
            (a * h.dilation * wp + b * w.dilation) * cb
        };
        let sum = (0..taps)
            .map(|t| format!("wv[{t}] * *(const {vt} *)(xq + {})", off(t)))
            .collect::<Vec<_>>()
            .join(" + ");
        let value = match &r.finalize {
            Some(f) => vector_expr_acc(em, f, 1, &format!("c0 + sb * {l}"), &vt, "acc"),
            None => "acc".to_string(),
        };
        let pixel = |q: &str| {
            format!(
                "const int64_t oy = ({q}) / {ow}, ox = ({q}) % {ow}; const float *restrict xq = xs + (oy * {} + ox * {}) * {cb} + sb * {l}; const {vt} acc = {sum};",
                h.stride * wp,
                w.stride,
                ow = w.out
            )
        };
        writeln!(
            s,
            "        for (int64_t sb = 0; sb < {sv}; ++sb) {{\n            {vt} wv[{taps}];\n            for (int64_t t = 0; t < {taps}; ++t) wv[t] = *(const {vt} *)&wt[t * {cb} + sb * {l}];\n            int64_t q0 = 0;\n            for (; q0 + {l} <= {ohw}; q0 += {l}) {{\n                {vt} v[{l}];\n                for (int64_t k = 0; k < {l}; ++k) {{ {} v[k] = {value}; }}",
            pixel("q0 + k")
        )
        .unwrap();
        transpose_in_registers(s, l, &vt, "                ");
        writeln!(
            s,
            "                for (int64_t k = 0; k < {l}; ++k) *({vt} *)&b{id}[i0 * {o0} + (c0 + sb * {l} + k) * {o1} + q0] = v[k];\n            }}"
        )
        .unwrap();
        writeln!(
            s,
            "            for (; q0 < {ohw}; ++q0) {{ {} float tv[{l}]; *({vt} *)tv = {value}; for (int64_t k = 0; k < {l}; ++k) b{id}[i0 * {o0} + (c0 + sb * {l} + k) * {o1} + q0] = tv[k]; }}\n        }}\n    }}\n}}",
            pixel("q0")
        )
        .unwrap();
    }
}

fn uses(idx: &[Expr], v: u32) -> bool {
    idx.iter().any(|e| uses_var(e, v))
}

fn has_rvar(e: &Expr) -> bool {
    let mut yes = false;
    e.visit(&mut |x| yes |= matches!(x, Expr::RVar(_)));
    yes
}
