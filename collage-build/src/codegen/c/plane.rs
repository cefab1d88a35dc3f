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
use super::{transpose_in_registers, vector_expr_acc, vectorizable, CWriter, Emitter, CACHE_LINE};
use crate::ir::strides;
use crate::schedule::plan::MAX_LANES;
use crate::te::{BufId, PlanePlan, Src, Stage};

impl PlanePlan {
    /// The stage's kernel for a variant of `lanes` f32 lanes.
    pub(super) fn emit(
        &self,
        out: &mut CWriter,
        em: &Emitter,
        id: BufId,
        st: &Stage,
        lanes: usize,
    ) {
        if self.chan {
            return self.emit_chan(out, em, id, st, lanes);
        }
        if self.flat && self.emit_whole_plane(out, em, id, st, lanes) {
            return;
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
            s.line(format!(
                "float pad[{}], accs[{}];",
                rows_in * row + row + MAX_LANES,
                self.band * row + MAX_LANES
            ));
        } else {
            s.line(format!("float pad[{}];", rows_in * row));
        }
        let planes = shape[0] * c1;
        // A band group's window: every plane's output rows `[begin, end)`, its input planes in
        // the group's scratch slot, `pixels` apart ([`Emitter::band`]).
        let band = em.band.filter(|(b, _)| *b == x).map(|(_, pixels)| pixels);
        if band.is_some() {
            s.open(format!("for (int64_t o = 0; o < {planes}; ++o) {{"));
            s.line(format!("const int64_t i1 = o % {c1}, i0 = o / {c1};"));
            s.line("const int64_t ylo = begin, yhi = end;");
        } else if self.parts > 1 {
            s.open("for (int64_t o = begin; o < end; ++o) {");
            let (pr, ho) = (self.part_rows, h.out);
            s.line(format!(
                "const int64_t i1 = o % {c1}, i0 = o / {c1} % {}, part = o / {planes};",
                shape[0]
            ));
            s.line(format!(
                "const int64_t ylo = part * {pr}, yhi = ylo + {pr} < {ho} ? ylo + {pr} : {ho};"
            ));
        } else {
            s.open("for (int64_t o = begin; o < end; ++o) {");
            s.line(format!("const int64_t i1 = o % {c1}, i0 = o / {c1};"));
            s.line(format!("const int64_t ylo = 0, yhi = {};", h.out));
        }
        for k in &self.unit_rvars {
            s.line(format!("const int64_t r{k} = 0;"));
        }
        match band {
            Some(pixels) => {
                let cx = em.p.bufs[x.index()].ty.shape[1];
                s.line(format!(
                    "const float *restrict xp = b{x} + i0 * {} + i1 * {pixels};",
                    cx * pixels
                ));
            }
            None => s.line(format!(
                "const float *restrict xp = b{x} + {};",
                em.expr(&self.plane)
            )),
        }
        let taps = h.taps * w.taps;
        self.emit_tap_weights(s, em);
        if v > 1 {
            s.line(format!("{vt} wvv[{taps}];"));
            s.line(format!(
                "for (int64_t t = 0; t < {taps}; ++t) wvv[t] = ({vt}){{0}} + wv[t];"
            ));
        }
        s.open(format!(
            "for (int64_t y0 = ylo; y0 < yhi; y0 += {}) {{",
            self.band
        ));
        s.line(format!(
            "const int64_t rows = yhi - y0 < {b} ? yhi - y0 : {b};",
            b = self.band
        ));
        s.line(format!(
            "const int64_t rows_in = (rows - 1) * {} + {};",
            h.stride,
            (h.taps - 1) * h.dilation + 1
        ));
        // The band's input rows, zero-padded, each as `phases` deinterleaved rows.
        s.open("for (int64_t yy = 0; yy < rows_in; ++yy) {");
        s.line(format!("float *restrict d = pad + yy * {row};"));
        s.line(format!(
            "const int64_t y = y0 * {} + yy + ({});",
            h.stride, h.offset
        ));
        s.line(format!(
            "if (y < 0 || y >= {}) {{ for (int64_t c = 0; c < {row}; ++c) d[c] = 0.0f; continue; }}",
            h.input
        ));
        s.line(format!("const float *restrict src = xp + y * {};", w.input));
        // The next task's plane (the next channel: tasks run channel-minor) a row at a time,
        // while this one copies: planes of a page or more each start on a page of their own,
        // where the hardware's prefetchers stop.
        let plane_floats = band.unwrap_or(h.input * w.input);
        if self.prefetch {
            s.line(format!(
                "for (int64_t k = 0; k < {}; k += {CACHE_LINE}) __builtin_prefetch((const char *)(src + {plane_floats}) + k);",
                w.input * 4
            ));
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
                s.line(format!("for (int64_t c = 0; c < {lo}; ++c) {d}[c] = 0.0f;"));
            }
            if hi > lo {
                let at = k as i64 + w.offset;
                if phases == 1 {
                    s.line(format!(
                        "__builtin_memcpy({d} + {lo}, src + {}, {});",
                        lo + at,
                        (hi - lo) * 4
                    ));
                } else {
                    s.line(format!(
                        "for (int64_t c = {lo}; c < {hi}; ++c) {d}[c] = src[c * {phases} + ({at})];"
                    ));
                }
            }
            if (hi as usize) < pitch {
                s.line(format!(
                    "for (int64_t c = {hi}; c < {pitch}; ++c) {d}[c] = 0.0f;"
                ));
            }
        }
        s.close("}");
        if self.flat {
            s.line(format!(
                "for (int64_t q = rows_in * {row}; q < rows_in * {row} + {}; ++q) pad[q] = 0.0f;",
                row + MAX_LANES
            ));
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
            s.open(format!(
                "for (int64_t q = 0; q < rows * {row}; q += {v}) {{"
            ));
            s.line(format!("const {vt} av = {fsum};"));
            s.line(format!("*({vt} *)&accs[q] = {value};"));
            s.close("}");
            s.line(format!(
                "for (int64_t y = 0; y < rows; ++y) __builtin_memcpy(b{id} + i0 * {} + i1 * {} + (y0 + y) * {}, accs + y * {row}, {});",
                o(0),
                o(1),
                o(2),
                w.out * 4
            ));
            s.close("}");
            s.close("}");
            return;
        }
        s.open("for (int64_t y = 0; y < rows; ++y) {");
        s.line("const int64_t i2 = y0 + y;");
        s.line(format!(
            "const float *restrict p = pad + y * {};",
            h.stride * row
        ));
        let scalar_loop = |s: &mut CWriter, from: &str| {
            s.line(format!(
                "for ({from}; x3 < {}; ++x3) {{ const int64_t i3 = x3; const float acc = {ssum}; b{id}[{all}] = {fin}; }}",
                w.out
            ));
        };
        if v == 1 {
            scalar_loop(s, "int64_t x3 = 0");
        } else {
            let overlap = !in_place && !w.out.is_multiple_of(v);
            if overlap {
                s.open(format!(
                    "for (int64_t c0 = 0; c0 < {}; c0 += {v}) {{",
                    w.out
                ));
                s.line(format!(
                    "const int64_t x3 = c0 + {v} <= {} ? c0 : {};",
                    w.out,
                    w.out - v
                ));
            } else {
                s.line("int64_t x3 = 0;");
                s.open(format!("for (; x3 + {v} <= {}; x3 += {v}) {{", w.out));
            }
            s.line(format!("const {vt} av = {vsum};"));
            if vec_fin {
                let value = match &r.finalize {
                    Some(f) => vector_expr_acc(em, f, 3, "x3", &vt, "av"),
                    None => "av".to_string(),
                };
                let base = format!("i0 * {} + i1 * {} + i2 * {}", o(0), o(1), o(2));
                s.line(format!("*({vt} *)&b{id}[{base} + x3] = {value};"));
            } else {
                s.line(format!("float tv[{v}];"));
                s.line(format!("*({vt} *)tv = av;"));
                s.line(format!(
                    "for (int64_t l = 0; l < {v}; ++l) {{ const int64_t i3 = x3 + l; const float acc = tv[l]; b{id}[{all}] = {fin}; }}"
                ));
            }
            s.close("}");
            if !overlap && !w.out.is_multiple_of(v) {
                scalar_loop(s, "");
            }
        }
        s.close("}");
        s.close("}");
        s.close("}");
    }

    /// The task's channel's weights, one per tap, into `wv` (row-major over the taps).
    fn emit_tap_weights(&self, s: &mut CWriter, em: &Emitter) {
        s.line(format!("float wv[{}];", self.h.taps * self.w.taps));
        self.emit_tap_loop(s, em, |t| format!("wv[{t}]"));
    }

    /// A loop over every tap storing its weight into `dest(t)`, `t` the tap's row-major index.
    fn emit_tap_loop(&self, s: &mut CWriter, em: &Emitter, dest: impl Fn(&str) -> String) {
        let (h, w) = (self.h, self.w);
        let (ra, rb) = (h.rvar, w.rvar);
        s.line(format!(
            "for (int64_t r{ra} = 0; r{ra} < {}; ++r{ra})",
            h.taps
        ));
        let tap = format!("r{ra} * {} + r{rb}", w.taps);
        s.indented(|s| {
            s.line(format!(
                "for (int64_t r{rb} = 0; r{rb} < {}; ++r{rb}) {} = {};",
                w.taps,
                dest(&tap),
                em.expr(&self.weight)
            ))
        });
    }

    /// A flat plan's kernel when a task takes a whole plane whose output rows are as wide as
    /// its input rows (a "same" window at unit strides), in a plain program: the plane is
    /// copied once into a scratch between zero margins (zeroed once per call), and each output
    /// vector of `lanes` consecutive pixels of the plane — across rows, the last one
    /// overlapping its predecessor — reads each tap at a constant offset from its own pixel.
    /// A tap column that would wrap into the neighbouring row is summed apart and multiplied
    /// by its column mask (per vector position, computed once per call); rows above and below
    /// the plane read the margins' zeros. No junk columns, no row copies in or out: the output
    /// vectors are stored straight into the output plane. `false` (nothing printed) when the
    /// plan is not such a plan.
    fn emit_whole_plane(
        &self,
        s: &mut CWriter,
        em: &Emitter,
        id: BufId,
        st: &Stage,
        lanes: usize,
    ) -> bool {
        let shape = &st.ty.shape;
        let (h, w) = (self.h, self.w);
        let (plane_in, plane_out) = (h.input * w.input, h.out * w.out);
        let banded = em.band.is_some_and(|(b, _)| b == self.x);
        if banded
            || self.parts != 1
            || h.stride != 1
            || w.stride != 1
            || w.out != w.input
            || plane_out < lanes
            || plane_in > 8 * 1024
        {
            return false;
        }
        let r = st.reduce.as_ref().expect("a reduction");
        let st_strides = strides(shape);
        let o = |k: usize| if shape[k] == 1 { 0 } else { st_strides[k] };
        let width = w.input as i64;
        // Tap `(a, b)` of the output at flat pixel `f` reads the input at `f + off(a, b)`.
        let off = |a: usize, b: usize| {
            (a * h.dilation) as i64 * width + h.offset * width + (b * w.dilation) as i64 + w.offset
        };
        let lowest = off(0, 0).min(0);
        let highest = plane_out as i64 - 1 + off(h.taps - 1, w.taps - 1);
        let top = ((-lowest) as usize).next_multiple_of(MAX_LANES);
        let bottom = (highest - plane_in as i64 + 1).max(0) as usize;
        // The tap columns that stay in their row for every pixel need no mask.
        let shift = |b: usize| (b * w.dilation) as i64 + w.offset;
        let masked: Vec<usize> = (0..w.taps).filter(|&b| shift(b) != 0).collect();
        let nv = plane_out.div_ceil(lanes);
        let vt = format!("cl_f32x{lanes}");
        let c1 = shape[1];
        let taps = h.taps * w.taps;
        s.line(format!(
            "float pad[{}] CL_STACK_ALIGNED;",
            top + plane_in + bottom
        ));
        s.line(format!(
            "for (int64_t q = 0; q < {top}; ++q) pad[q] = 0.0f;"
        ));
        s.line(format!(
            "for (int64_t q = {}; q < {}; ++q) pad[q] = 0.0f;",
            top + plane_in,
            top + plane_in + bottom
        ));
        // The pixel the output vector at position `v` starts at.
        let first = |v: &str| {
            format!(
                "({v} * {lanes} + {lanes} <= {plane_out} ? {v} * {lanes} : {})",
                plane_out - lanes
            )
        };
        if !masked.is_empty() {
            let nm = masked.len();
            s.line(format!("float mk[{}] CL_STACK_ALIGNED;", nv * nm * lanes));
            s.open(format!("for (int64_t v = 0; v < {nv}; ++v) {{"));
            s.open(format!("for (int64_t l = 0; l < {lanes}; ++l) {{"));
            s.line(format!("const int64_t x = ({} + l) % {width};", first("v")));
            for (k, &b) in masked.iter().enumerate() {
                s.line(format!(
                    "mk[(v * {nm} + {k}) * {lanes} + l] = x + ({}) >= 0 && x + ({}) < {width} ? 1.0f : 0.0f;",
                    shift(b),
                    shift(b)
                ));
            }
            s.close("}");
            s.close("}");
        }
        s.open("for (int64_t o = begin; o < end; ++o) {");
        s.line(format!("const int64_t i1 = o % {c1}, i0 = o / {c1};"));
        for k in &self.unit_rvars {
            s.line(format!("const int64_t r{k} = 0;"));
        }
        self.emit_tap_weights(s, em);
        s.line(format!("{vt} wvv[{taps}];"));
        s.line(format!(
            "for (int64_t t = 0; t < {taps}; ++t) wvv[t] = ({vt}){{0}} + wv[t];"
        ));
        s.line(format!(
            "__builtin_memcpy(pad + {top}, b{} + {}, {});",
            self.x,
            em.expr(&self.plane),
            plane_in * 4
        ));
        s.line(format!("const float *restrict p = pad + {top};"));
        // Unrolled: each vector's pixel and masks at constant offsets.
        s.line("#pragma GCC unroll 16");
        s.open(format!("for (int64_t v = 0; v < {nv}; ++v) {{"));
        s.line(format!("const int64_t f = {};", first("v")));
        let column = |b: usize| {
            (0..h.taps)
                .map(|a| {
                    format!(
                        "wvv[{}] * *(const {vt} *)(p + f + ({}))",
                        a * w.taps + b,
                        off(a, b)
                    )
                })
                .collect::<Vec<_>>()
                .join(" + ")
        };
        let mut sum = Vec::new();
        for b in 0..w.taps {
            match masked.iter().position(|&m| m == b) {
                Some(k) => sum.push(format!(
                    "({}) * *(const {vt} *)&mk[(v * {} + {k}) * {lanes}]",
                    column(b),
                    masked.len()
                )),
                None => sum.push(column(b)),
            }
        }
        s.line(format!("const {vt} av = {};", sum.join(" + ")));
        let value = match &r.finalize {
            Some(f) => vector_expr_acc(em, f, 3, "0", &vt, "av"),
            None => "av".to_string(),
        };
        s.line(format!(
            "*({vt} *)&b{id}[i0 * {} + i1 * {} + f] = {value};",
            o(0),
            o(1)
        ));
        s.close("}");
        s.close("}");
        true
    }

    /// The kernel of a channel-blocked plan ([`PlanePlan::chan`]) for a variant of `lanes` f32
    /// lanes: each block of `chan_block` channels is `chan_block / lanes` vectors.
    fn emit_chan(&self, s: &mut CWriter, em: &Emitter, id: BufId, st: &Stage, lanes: usize) {
        let shape = &st.ty.shape;
        let r = st.reduce.as_ref().expect("a reduction");
        let (h, w) = (self.h, self.w);
        let (hp, wp) = (h.span(h.out), w.span(w.out));
        let (hw, ohw) = (h.input * w.input, h.out * w.out);
        let (cb, l) = (self.chan_block, lanes);
        let (ncb, sv) = (shape[1] / cb, cb / l);
        let vt = format!("cl_f32x{l}");
        let st_strides = strides(shape);
        let o0 = if shape[0] == 1 { 0 } else { st_strides[0] };
        let o1 = st_strides[1];
        let taps = h.taps * w.taps;
        // The padding never changes: zeroed once per call, the interior rewritten per task.
        s.line(format!("float xs[{}], wt[{}];", hp * wp * cb, taps * cb));
        s.line(format!(
            "for (int64_t q = 0; q < {}; ++q) xs[q] = 0.0f;",
            hp * wp * cb
        ));
        s.open("for (int64_t o = begin; o < end; ++o) {");
        s.line(format!(
            "const int64_t c0 = o % {ncb} * {cb}, i0 = o / {ncb};"
        ));
        for k in &self.unit_rvars {
            s.line(format!("const int64_t r{k} = 0;"));
        }
        // Every tap's weights of the block's channels, contiguous.
        s.open(format!("for (int64_t l = 0; l < {cb}; ++l) {{"));
        s.line("const int64_t i1 = c0 + l;");
        self.emit_tap_loop(s, em, |t| format!("wt[({t}) * {cb} + l]"));
        s.close("}");
        s.line("const float *restrict xp;");
        s.line(format!(
            "{{ const int64_t i1 = c0; xp = b{} + {}; }}",
            self.x,
            em.expr(&self.plane)
        ));
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
        s.line(format!("for (int64_t p = 0; p + {l} <= {hw}; p += {l})"));
        s.indented(|s| {
            s.open(format!("for (int64_t sb = 0; sb < {sv}; ++sb) {{"));
            s.line(format!("{vt} v[{l}];"));
            s.line(format!(
                "for (int64_t k = 0; k < {l}; ++k) v[k] = *(const {vt} *)(xp + (sb * {l} + k) * {hw} + p);"
            ));
            transpose_in_registers(s, l, &vt);
            s.line(format!(
                "for (int64_t k = 0; k < {l}; ++k) {{ {} *({vt} *)&xs[(y * {wp} + x) * {cb} + sb * {l}] = v[k]; }}",
                at("p + k")
            ));
            s.close("}");
        });
        s.line(format!(
            "for (int64_t p = {}; p < {hw}; ++p) {{ {} for (int64_t c = 0; c < {cb}; ++c) xs[(y * {wp} + x) * {cb} + c] = xp[c * {hw} + p]; }}",
            hw / l * l,
            at("p")
        ));
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
        s.open(format!("for (int64_t sb = 0; sb < {sv}; ++sb) {{"));
        s.line(format!("{vt} wv[{taps}];"));
        s.line(format!(
            "for (int64_t t = 0; t < {taps}; ++t) wv[t] = *(const {vt} *)&wt[t * {cb} + sb * {l}];"
        ));
        s.line("int64_t q0 = 0;");
        s.open(format!("for (; q0 + {l} <= {ohw}; q0 += {l}) {{"));
        s.line(format!("{vt} v[{l}];"));
        s.line(format!(
            "for (int64_t k = 0; k < {l}; ++k) {{ {} v[k] = {value}; }}",
            pixel("q0 + k")
        ));
        transpose_in_registers(s, l, &vt);
        s.line(format!(
            "for (int64_t k = 0; k < {l}; ++k) *({vt} *)&b{id}[i0 * {o0} + (c0 + sb * {l} + k) * {o1} + q0] = v[k];"
        ));
        s.close("}");
        s.line(format!(
            "for (; q0 < {ohw}; ++q0) {{ {} float tv[{l}]; *({vt} *)tv = {value}; for (int64_t k = 0; k < {l}; ++k) b{id}[i0 * {o0} + (c0 + sb * {l} + k) * {o1} + q0] = tv[k]; }}",
            pixel("q0")
        ));
        s.close("}");
        s.close("}");
    }
}
