//! Contractions vectorised along their output channels: `out[.., c, j] = sum_r w'[r, c] *
//! x[.., r, j]` for a row `j` that whole vectors cover poorly (a 7x7 image's 49 columns fill 49
//! of 64 lanes, and the last column takes a second pass over the weights). The weight has been
//! transposed so that its channels are contiguous ([`super::channel_axis`]); the register tile
//! is `vecs` vectors of channels by `rows` columns, every `x` value a broadcast.
//!
//! A task is one tile of channels over a group of columns. The reduction runs in blocks of `kc`
//! (GotoBLAS's panel: the block of `w'` a tile reads, `kc x tile` floats, stays in L2 while
//! every column block of the group uses it, instead of each column block streaming all of
//! `w'`); partial sums live in a scratch of the task's outputs on the stack between blocks.
//! The epilogue runs once per output after the last block, along the channels when it
//! vectorises there (a bias, a clip), else one element at a time. The outputs of one vector are
//! a row apart in memory: blocks of `lanes` columns by `lanes` channels are transposed in
//! registers (log2(lanes) stages of two-vector shuffles) and stored a vector per channel; the
//! columns left over, and epilogues that do not vectorise, store one float at a time.
use super::{
    jam_expr, jammed_offset, transpose_in_registers, vector_expr, vector_expr_acc, vectorizable,
    CWriter, Emitter,
};
use crate::ir::strides;
use crate::te::{BufId, ChannelPlan, Stage};

impl ChannelPlan {
    pub(super) fn emit(&self, out: &mut CWriter, em: &Emitter, id: BufId, st: &Stage) {
        let shape = &st.ty.shape;
        let r = st.reduce.as_ref().expect("a reduction");
        let (c, row, w, nv) = (self.c, self.row, self.lanes, self.vecs);
        let tw = w * nv;
        let n = shape[row];
        let k = r.extents[0];
        let vt = format!("cl_f32x{w}");
        let st_strides = strides(shape);
        let s = out;
        s.line(format!("float accb[{}];", self.group * tw));
        s.open("for (int64_t o = begin; o < end; ++o) {");
        s.line(format!(
            "const int64_t g = o % {}, t0 = (o / {}) % {} * {tw};",
            self.n_groups, self.n_groups, self.n_tiles
        ));
        let mut rem = format!("(o / {})", self.n_groups * self.n_tiles);
        for d in (0..shape.len()).rev().filter(|&d| d != c && d != row) {
            s.line(format!("const int64_t i{d} = {rem} % {};", shape[d]));
            rem = format!("({rem} / {})", shape[d]);
        }
        s.line(format!(
            "const int64_t j0 = g * {g}, j1 = j0 + {g} < {n} ? j0 + {g} : {n};",
            g = self.group
        ));
        s.line(format!(
            "for (int64_t q = 0; q < (j1 - j0) * {tw}; ++q) accb[q] = 0.0f;"
        ));
        let kc = self.kc;
        s.open(format!("for (int64_t kb = 0; kb < {k}; kb += {kc}) {{"));
        s.line(format!(
            "const int64_t ke = kb + {kc} < {k} ? kb + {kc} : {k};"
        ));
        s.line(format!("int64_t i{row} = j0;"));
        // A register tile of `jn` columns from `i{row}`: load its partial sums, run the block,
        // store them back.
        let jam = Some((row, self.rows));
        let sums = |s: &mut CWriter, jn: usize, line: &dyn Fn(usize, String) -> String| {
            for j in 0..jn {
                for t in 0..nv {
                    let at = format!("*({vt} *)&accb[(i{row} - j0 + {j}) * {tw} + {}]", t * w);
                    s.line(line(j * nv + t, at));
                }
            }
        };
        let name = |k: usize| format!("c{}_{}", k / nv, k % nv);
        let tile = |s: &mut CWriter, jn: usize| {
            sums(s, jn, &|k, at| format!("{vt} {} = {at};", name(k)));
            s.open("for (int64_t r0 = kb; r0 < ke; ++r0) {");
            for j in 0..jn {
                let body = jam_expr(&st.body, shape.len(), jam, j);
                for t in 0..nv {
                    let x = vector_expr(em, &body, c as u32, &format!("t0 + {}", t * w), &vt);
                    s.line(format!("c{j}_{t} += {x};"));
                }
            }
            s.close("}");
            sums(s, jn, &|k, at| format!("{at} = {};", name(k)));
        };
        s.open(format!(
            "for (; i{row} + {} <= j1; i{row} += {}) {{",
            self.rows, self.rows
        ));
        tile(s, self.rows);
        s.close("}");
        if self.rows > 1 {
            s.open(format!("for (; i{row} < j1; ++i{row}) {{"));
            tile(s, 1);
            s.close("}");
        }
        s.close("}");
        let vec_fin = r
            .finalize
            .as_ref()
            .is_none_or(|f| vectorizable(em.p, f, c as u32));
        let skip_c = jammed_offset(shape, &st_strides, usize::MAX, 0, Some(c));
        let all = jammed_offset(shape, &st_strides, usize::MAX, 0, None);
        // The epilogue. With one that vectorises along the channels and a row of unit stride,
        // blocks of `w` columns by `w` channels are transposed in registers, so each channel's
        // columns are stored as one vector instead of one float at a time.
        s.line(format!("int64_t i{row} = j0;"));
        if vec_fin && st_strides[row] == 1 && matches!(w, 4 | 8 | 16) {
            let value = |col: &str| match &r.finalize {
                Some(f) => vector_expr_acc(em, f, c as u32, col, &vt, "av"),
                None => "av".to_string(),
            };
            s.open(format!("for (; i{row} + {w} <= j1; i{row} += {w}) {{"));
            s.line(format!("const int64_t jb = i{row};"));
            for t in 0..nv {
                let col = format!("t0 + {}", t * w);
                s.open("{");
                s.line(format!("{vt} v[{w}];"));
                s.line(format!(
                    "for (int64_t l = 0; l < {w}; ++l) {{ const int64_t i{row} = jb + l; const {vt} av = *({vt} *)&accb[(i{row} - j0) * {tw} + {}]; v[l] = {}; }}",
                    t * w,
                    value(&col)
                ));
                transpose_in_registers(s, w, &vt);
                s.line(format!(
                    "for (int64_t l = 0; l < {w}; ++l) *({vt} *)&b{id}[{skip_c} + ({col} + l) * {}] = v[l];",
                    st_strides[c]
                ));
                s.close("}");
            }
            s.close("}");
        }
        // The rest, column by column: a block per vector, its statements two columns in.
        s.open(format!("for (; i{row} < j1; ++i{row}) {{"));
        for t in 0..nv {
            let col = format!("t0 + {}", t * w);
            s.line(format!(
                "{{ const {vt} av = *({vt} *)&accb[(i{row} - j0) * {tw} + {}]; float tv[{w}];",
                t * w
            ));
            if vec_fin {
                let value = match &r.finalize {
                    Some(f) => vector_expr_acc(em, f, c as u32, &col, &vt, "av"),
                    None => "av".to_string(),
                };
                s.line(format!("  *({vt} *)tv = {value};"));
                s.line(format!(
                    "  for (int64_t l = 0; l < {w}; ++l) b{id}[{skip_c} + ({col} + l) * {}] = tv[l]; }}",
                    st_strides[c]
                ));
            } else {
                let fin = r
                    .finalize
                    .as_ref()
                    .map(|f| em.expr(f))
                    .unwrap_or_else(|| "acc".into());
                s.line(format!("  *({vt} *)tv = av;"));
                s.line(format!(
                    "  for (int64_t l = 0; l < {w}; ++l) {{ const int64_t i{c} = {col} + l; const float acc = tv[l]; b{id}[{all}] = {fin}; }} }}"
                ));
            }
        }
        s.close("}");
        s.close("}");
    }
}
