//! Depthwise window reductions over whole image planes: a depthwise convolution (one input
//! channel per output channel) computes each output plane from one input plane, so one task
//! takes one plane. A band of the plane is first copied into a zero-padded scratch on the
//! stack (the padding the guard `select(in bounds, x * w, 0)` describes), so no tap tests a
//! bound; with unit strides the band's output rows are computed on the scratch's row pitch, one
//! contiguous loop of `rows x padded width` per tap (two columns per row are computed and
//! dropped), so a 7x7 or 14x14 plane still runs long vector loops. Strided windows run a loop
//! per output row on the same scratch. The flat loops run in whole vectors of [`VL`] (the scratch
//! has the slack), so no scalar remainder runs per plane; an epilogue that reads no spatial index
//! (bias, clip: the usual ones) runs on the accumulators in the same vectors, and whole rows are
//! copied in and out with fixed-size copies — a 7x7 plane's rows are too short for a loop to
//! vectorise.
use std::fmt::Write;

use super::{conjuncts, uses_var, Emitter};
use crate::ir::{strides, DType};
use crate::te::{affine_terms, BinOp, Expr, Program, RedOp, Src, Stage};

/// Scratch (padded input band and accumulators) per task, in floats: 32 KiB.
const SCRATCH_FLOATS: usize = 8 * 1024;

/// Lanes of the flat loops: one AVX-512 vector, two AVX2 ones.
const VL: usize = 16;

/// `n` rounded up to whole vectors.
fn round_up(n: usize) -> usize {
    n.div_ceil(VL) * VL
}

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
    /// Output rows per band.
    band: usize,
    /// Outer tasks: output planes (`shape[0] * shape[1]`).
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
        let pw = w.span(w.out);
        let acc_pitch = if h.stride == 1 && w.stride == 1 {
            pw
        } else {
            w.out
        };
        // The largest band whose scratch (padded input rows and accumulators) fits.
        let band = (1..=h.out)
            .rev()
            .find(|&rows| h.span(rows) * pw + rows * acc_pitch <= SCRATCH_FLOATS)?;
        let plane = Expr::flatten(
            &[idx[0].clone(), idx[1].clone(), Expr::i(0), Expr::i(0)],
            &xb.ty.shape,
        );
        Some(PlanePlan {
            x,
            plane,
            weight,
            unit_rvars,
            h,
            w,
            band,
            n_outer: shape[0] * shape[1],
        })
    }

    /// The schedule's text (the filetests' form).
    pub(super) fn text(&self) -> String {
        format!(
            "depthwise plane taps {}x{} stride {}x{} band {} outer [i0,i1] trips {}",
            self.h.taps, self.w.taps, self.h.stride, self.w.stride, self.band, self.n_outer
        )
    }

    pub(super) fn emit(&self, out: &mut String, em: &Emitter, id: u32, st: &Stage) {
        let shape = &st.ty.shape;
        let r = st.reduce.as_ref().expect("a reduction");
        let (h, w) = (self.h, self.w);
        let unit = h.stride == 1 && w.stride == 1;
        // Padded row pitch: the input columns the outputs span. With unit strides the taps read
        // past a row's end into the next row's start (columns that are computed and dropped),
        // and past the band's last row into one more zero row.
        let pw = w.span(w.out);
        let pitch = if unit { pw } else { w.out };
        let rows_in = h.span(self.band);
        let x = self.x;
        let (lo_c, hi_c) = (
            (-w.offset).clamp(0, pw as i64),
            (w.input as i64 - w.offset).clamp(0, pw as i64),
        );
        let st_strides = strides(shape);
        let o = |k: usize| if shape[k] == 1 { 0 } else { st_strides[k] };
        let fin = r
            .finalize
            .as_ref()
            .map(|f| em.expr(f))
            .unwrap_or_else(|| "acc".into());
        let c1 = shape[1];
        // An epilogue that reads no spatial index runs on the accumulators as they lie (junk
        // columns too), and the rows are copied out whole.
        let flat_epilogue = r
            .finalize
            .as_ref()
            .is_none_or(|f| !uses_var(f, 2) && !uses_var(f, 3));
        let mut s = String::new();
        let wr = &mut s;
        // The flat loops read up to a vector past the band's last row (pw + VL slack, zero).
        writeln!(
            wr,
            "    float pad[{}], accs[{}];",
            rows_in * pw + pw + VL,
            round_up(self.band * pitch)
        )
        .unwrap();
        writeln!(wr, "    for (int64_t o = begin; o < end; ++o) {{").unwrap();
        writeln!(wr, "        const int64_t i1 = o % {c1}, i0 = o / {c1};").unwrap();
        for k in &self.unit_rvars {
            writeln!(wr, "        const int64_t r{k} = 0;").unwrap();
        }
        writeln!(
            wr,
            "        const float *restrict xp = b{x} + {};",
            em.expr(&self.plane)
        )
        .unwrap();
        let (ra, rb) = (h.rvar, w.rvar);
        writeln!(
            wr,
            "        float wv[{}];\n        for (int64_t r{ra} = 0; r{ra} < {}; ++r{ra})\n            for (int64_t r{rb} = 0; r{rb} < {}; ++r{rb}) wv[r{ra} * {} + r{rb}] = {};",
            h.taps * w.taps,
            h.taps,
            w.taps,
            w.taps,
            em.expr(&self.weight)
        )
        .unwrap();
        writeln!(
            wr,
            "        for (int64_t y0 = 0; y0 < {}; y0 += {}) {{",
            h.out, self.band
        )
        .unwrap();
        writeln!(
            wr,
            "            const int64_t rows = {} - y0 < {} ? {} - y0 : {};",
            h.out, self.band, h.out, self.band
        )
        .unwrap();
        // The band's input rows, zero-padded; the slack row stays zero.
        writeln!(
            wr,
            "            const int64_t rows_in = (rows - 1) * {} + {};",
            h.stride,
            (h.taps - 1) * h.dilation + 1
        )
        .unwrap();
        writeln!(
            wr,
            "            for (int64_t q = rows_in * {pw}; q < rows_in * {pw} + {}; ++q) pad[q] = 0.0f;",
            pw + VL
        )
        .unwrap();
        writeln!(
            wr,
            "            for (int64_t yy = 0; yy < rows_in; ++yy) {{"
        )
        .unwrap();
        writeln!(wr, "                float *restrict d = pad + yy * {pw};").unwrap();
        writeln!(
            wr,
            "                const int64_t y = y0 * {} + yy + ({});",
            h.stride, h.offset
        )
        .unwrap();
        writeln!(
            wr,
            "                if (y < 0 || y >= {}) {{ for (int64_t c = 0; c < {pw}; ++c) d[c] = 0.0f; continue; }}",
            h.input
        )
        .unwrap();
        writeln!(
            wr,
            "                const float *restrict src = xp + y * {};",
            w.input
        )
        .unwrap();
        writeln!(
            wr,
            "                for (int64_t c = 0; c < {lo_c}; ++c) d[c] = 0.0f;"
        )
        .unwrap();
        if hi_c > lo_c {
            writeln!(
                wr,
                "                __builtin_memcpy(d + {lo_c}, src + {}, {});",
                lo_c + w.offset,
                (hi_c - lo_c) * 4
            )
            .unwrap();
        }
        writeln!(
            wr,
            "                for (int64_t c = {hi_c}; c < {pw}; ++c) d[c] = 0.0f;"
        )
        .unwrap();
        writeln!(wr, "            }}").unwrap();
        // Every output sums its taps in a register: the taps' offsets in the scratch are
        // constants, their weights are read once per plane.
        let taps = h.taps * w.taps;
        let term = |t: usize, at: &str| {
            let off = (t / w.taps) * h.dilation * pw + (t % w.taps) * w.dilation;
            format!("wv[{t}] * pad[{at} + {off}]")
        };
        let sum = |at: &str| {
            (0..taps)
                .map(|t| term(t, at))
                .collect::<Vec<_>>()
                .join(" + ")
        };
        if unit {
            writeln!(
                wr,
                "            for (int64_t q0 = 0; q0 < rows * {pw}; q0 += {VL}) {{\n#pragma omp simd\n                for (int64_t q = q0; q < q0 + {VL}; ++q) accs[q] = {};\n            }}",
                sum("q")
            )
            .unwrap();
        } else {
            writeln!(
                wr,
                "            for (int64_t y = 0; y < rows; ++y)\n                for (int64_t c = 0; c < {}; ++c) accs[y * {pitch} + c] = {};",
                w.out,
                sum(&format!("y * {} + c * {}", h.stride * pw, w.stride))
            )
            .unwrap();
        }
        if flat_epilogue {
            writeln!(
                wr,
                "            for (int64_t q0 = 0; q0 < rows * {pitch}; q0 += {VL}) {{\n#pragma omp simd\n                for (int64_t q = q0; q < q0 + {VL}; ++q) {{ const float acc = accs[q]; accs[q] = {fin}; }}\n            }}"
            )
            .unwrap();
            let base = format!("b{id} + i0 * {} + i1 * {} + y0 * {}", o(0), o(1), w.out);
            if pitch == w.out {
                writeln!(
                    wr,
                    "            __builtin_memcpy({base}, accs, rows * {});",
                    w.out * 4
                )
                .unwrap();
            } else {
                writeln!(
                    wr,
                    "            for (int64_t y = 0; y < rows; ++y) __builtin_memcpy({base} + y * {}, accs + y * {pitch}, {});",
                    w.out,
                    w.out * 4
                )
                .unwrap();
            }
            writeln!(wr, "        }}\n    }}\n}}").unwrap();
            out.push_str(&s);
            return;
        }
        // The epilogue, per output element.
        writeln!(
            wr,
            "            for (int64_t y = 0; y < rows; ++y) {{\n                const int64_t i2 = y0 + y;"
        )
        .unwrap();
        writeln!(
            wr,
            "                for (int64_t i3 = 0; i3 < {}; ++i3) {{ const float acc = accs[y * {pitch} + i3]; b{id}[i0 * {} + i1 * {} + i2 * {} + i3 * {}] = {fin}; }}",
            w.out,
            o(0),
            o(1),
            o(2),
            o(3)
        )
        .unwrap();
        writeln!(wr, "            }}\n        }}\n    }}\n}}").unwrap();
        out.push_str(&s);
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
