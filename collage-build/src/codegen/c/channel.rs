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
//! vectorises there (a bias, a clip), else along the row when it vectorises there (a residual
//! read in the output's layout), else one element at a time. The outputs of one vector are
//! a row apart in memory: blocks of `lanes` columns by `lanes` channels are transposed in
//! registers (log2(lanes) stages of two-vector shuffles) and stored a vector per channel,
//! the epilogue applied before the transpose (along the channels) or after it (along the
//! row); the columns left over, and epilogues that vectorise neither way, store one float at
//! a time.
use super::{
    jam_expr, jammed_offset, transpose_in_registers, vector_expr, vector_expr_acc, vectorizable,
    CWriter, Emitter, Ext,
};
use crate::ir::strides;
use crate::schedule::analysis::is_vector;
use crate::te::{BufId, ChannelPlan, Expr, Src, Stage};

/// The extents a channel-vectorised stage's C is written over (as [`super::GemmExtents`]):
/// the stage's own (literals), or a ranged program's run-time ones.
pub(super) struct ChannelExtents<'a> {
    /// Every output dimension's extent.
    pub dims: Vec<Ext>,
    /// Every reduction extent.
    pub reduce: Vec<Ext>,
    /// The C offset of the output element at the stage's variables, without the channel's
    /// term when the flag is set (the caller adds the channel times [`Self::c_stride`]).
    pub offset: &'a dyn Fn(bool) -> String,
    /// The channel dimension's stride in the output.
    pub c_stride: Ext,
    /// Whether the row's stride in the output is one.
    pub row_unit: bool,
}

impl ChannelPlan {
    pub(super) fn emit(&self, out: &mut CWriter, em: &Emitter, id: BufId, st: &Stage) {
        let shape = &st.ty.shape;
        let r = st.reduce.as_ref().expect("a reduction");
        let st_strides = strides(shape);
        let offset =
            |skip: bool| jammed_offset(shape, &st_strides, usize::MAX, 0, skip.then_some(self.c));
        let x = ChannelExtents {
            dims: shape.iter().map(|&n| Ext::Lit(n)).collect(),
            reduce: r.extents.iter().map(|&n| Ext::Lit(n)).collect(),
            offset: &offset,
            c_stride: Ext::Lit(st_strides[self.c]),
            row_unit: st_strides[self.row] == 1,
        };
        self.emit_over(out, em, id, st, &x);
    }

    /// A register tile of `jn` columns from `i{row}` that holds two columns a vector (the plan's
    /// `paired`: eight channels in sixteen lanes, lane `2 * c + t` channel `c` of column `t` of
    /// a pair): each pair of adjacent inputs is one 64-bit broadcast, each weight vector's lanes
    /// doubled, half the multiply-adds of eight-lane vectors; the sums start at zero (one
    /// reduction block) and go to the scratch unpaired, a column's eight channels apart. False
    /// (nothing printed) where a pair's inputs are not adjacent: the caller prints the tile
    /// unpaired. mnist_cnn's 5x5 convolution of 8 channels at 28x28, Zen 5, AVX-512.
    fn paired_tile(
        &self,
        s: &mut CWriter,
        em: &Emitter,
        st: &Stage,
        x: &ChannelExtents,
        jn: usize,
        cols: &[ColumnPointer],
    ) -> bool {
        let (c, row) = (self.c, self.row);
        let Some((weight, input)) = crate::schedule::plan::paired_body(em.p, st, c, row)
            .filter(|_| jn >= 2 && jn.is_multiple_of(2) && x.reduce.len() == 1)
        else {
            return false;
        };
        let Some(q) = cols.iter().position(|p| p.load == input) else {
            return false;
        };
        let offsets = &cols[q].offsets;
        if (0..jn / 2).any(|k| offsets[2 * k + 1] != offsets[2 * k] + 1) {
            return false;
        }
        let pairs = jn / 2;
        for k in 0..pairs {
            s.line(format!("cl_f32x16 p{k} = (cl_f32x16){{0}};"));
        }
        s.open("for (int64_t r0 = kb; r0 < ke; ++r0) {");
        declare_column_pointers(s, em, cols);
        let w8 = vector_expr(em, &weight, c as u32, "t0", "cl_f32x8");
        s.line(format!("const cl_f32x8 w8 = {w8};"));
        let doubled: Vec<String> = (0..16).map(|l| format!("w8[{}]", l / 2)).collect();
        s.line(format!(
            "const cl_f32x16 wv = (cl_f32x16){{{}}};",
            doubled.join(", ")
        ));
        for k in 0..pairs {
            s.line(format!(
                "p{k} += wv * (cl_f32x16)(*(const cl_i64a *)&xc{q}[{}] + (cl_i64x8){{0}});",
                offsets[2 * k]
            ));
        }
        s.close("}");
        let tw = self.lanes * self.vecs;
        for k in 0..pairs {
            for t in 0..2 {
                let lanes: Vec<String> = (0..8).map(|l| format!("p{k}[{}]", 2 * l + t)).collect();
                s.line(format!(
                    "*(cl_f32x8 *)&accb[(i{row} - j0 + {}) * {tw}] = (cl_f32x8){{{}}};",
                    2 * k + t,
                    lanes.join(", ")
                ));
            }
        }
        true
    }

    /// The stage's C over extents `x`.
    pub(super) fn emit_over(
        &self,
        out: &mut CWriter,
        em: &Emitter,
        id: BufId,
        st: &Stage,
        x: &ChannelExtents,
    ) {
        let r = st.reduce.as_ref().expect("a reduction");
        let rank = st.ty.shape.len();
        let (c, row, w, nv) = (self.c, self.row, self.lanes, self.vecs);
        let tw = w * nv;
        let n = &x.dims[row];
        let k = &x.reduce[0];
        let vt = format!("cl_f32x{w}");
        let s = out;
        // The column groups: a literal, or as many as the run-time row needs.
        let n_groups = match n {
            Ext::Lit(_) => Ext::Lit(self.n_groups),
            run => run.ceil_div(self.group),
        };
        let groups_tiles = match &n_groups {
            Ext::Lit(g) => Ext::Lit(g * self.n_tiles),
            Ext::Run(g) => Ext::Run(format!("({g} * {})", self.n_tiles)),
        };
        s.line(format!("float accb[{}];", self.group * tw));
        s.open("for (int64_t o = begin; o < end; ++o) {");
        s.line(format!(
            "const int64_t g = o % {n_groups}, t0 = (o / {n_groups}) % {} * {tw};",
            self.n_tiles
        ));
        let mut rem = format!("(o / {groups_tiles})");
        for d in (0..rank).rev().filter(|&d| d != c && d != row) {
            s.line(format!("const int64_t i{d} = {rem} % {};", x.dims[d]));
            rem = format!("({rem} / {})", x.dims[d]);
        }
        s.line(format!(
            "const int64_t j0 = g * {g}, j1 = j0 + {g} < {n} ? j0 + {g} : {n};",
            g = self.group
        ));
        // Over a literal, non-empty reduction every column's sums are written by the first
        // block, which starts its accumulators at zero: the scratch needs no clearing (a stem
        // whose one block is its whole reduction otherwise clears and reloads its outputs'
        // worth of zeros).
        let zero_first = matches!(k, Ext::Lit(n) if *n > 0);
        if !zero_first {
            s.line(format!(
                "for (int64_t q = 0; q < (j1 - j0) * {tw}; ++q) accb[q] = 0.0f;"
            ));
        }
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
        let run_row = matches!(n, Ext::Run(_));
        // Every tile of more than one column starts at a multiple of `align` (groups start at
        // multiples of `group`, tiles step by `rows`): a column's place in a flattened image
        // then follows from the tile's by a constant, when `align` and the image's width
        // divide one another ([`aligned_columns`]).
        let align = match n {
            Ext::Lit(_) => crate::schedule::group::gcd(self.rows, self.group),
            Ext::Run(_) => 1,
        };
        let tile = |s: &mut CWriter, jn: usize, aligned: bool| {
            // Over run-time extents, and over literal ones where the tile starts aligned to a
            // flattened image's rows, each column's broadcast value is read through a pointer
            // to the tile's first column and a constant offset (the C compiler otherwise keeps
            // an address per column and spills the accumulators).
            let aligned = aligned && align > 1;
            let column = |e: &Expr, j: usize| {
                let e = jam_expr(e, rank, jam, j);
                if aligned {
                    aligned_columns(&e, row as u32, align)
                } else {
                    e
                }
            };
            let cols = if run_row || aligned {
                column_pointers(em, &st.body, (c as u32, row as u32), jn, &column)
            } else {
                Vec::new()
            };
            if aligned && self.paired && self.paired_tile(s, em, st, x, jn, &cols) {
                return;
            }
            sums(s, jn, &|k, at| {
                if zero_first {
                    format!("{vt} {} = kb == 0 ? ({vt}){{0}} : {at};", name(k))
                } else {
                    format!("{vt} {} = {at};", name(k))
                }
            });
            s.open("for (int64_t r0 = kb; r0 < ke; ++r0) {");
            // The other reduction variables whole, inside the block of the first.
            for (q, e) in x.reduce.iter().enumerate().skip(1) {
                // Unrolled, a window's taps share column values that the C compiler then
                // keeps in registers the accumulators need (measured 10.6 -> 9.5 us on the
                // CRNN's first layer at width 100, one thread).
                if run_row {
                    s.line("#pragma GCC unroll 1");
                }
                s.open(format!("for (int64_t r{q} = 0; r{q} < {e}; ++r{q}) {{"));
            }
            declare_column_pointers(s, em, &cols);
            for j in 0..jn {
                let body = column(&st.body, j);
                for t in 0..nv {
                    let mut x = vector_expr(em, &body, c as u32, &format!("t0 + {}", t * w), &vt);
                    for (q, p) in cols.iter().enumerate() {
                        let at = em.expr(&column(&p.load, j));
                        x = x.replace(&at, &format!("xc{q}[{}]", p.offsets[j]));
                    }
                    s.line(format!("c{j}_{t} += {x};"));
                }
            }
            for _ in 1..x.reduce.len() {
                s.close("}");
            }
            s.close("}");
            sums(s, jn, &|k, at| format!("{at} = {};", name(k)));
        };
        s.open(format!(
            "for (; i{row} + {} <= j1; i{row} += {}) {{",
            self.rows, self.rows
        ));
        tile(s, self.rows, true);
        s.close("}");
        // Over a literal row, the columns a group leaves past its whole tiles are known: one
        // tile of exactly that many (a 14x14 image's last group of 4 columns past tiles of 8
        // then keeps 4 x vecs accumulators going, not vecs, whose chain of dependent adds
        // bound a column at a time).
        if let Ext::Lit(len) = n {
            let last = len.saturating_sub(self.n_groups.saturating_sub(1) * self.group);
            let mut rems = vec![self.group % self.rows, last % self.rows];
            rems.dedup();
            for rem in rems.into_iter().filter(|&r| r > 1) {
                s.open(format!("if (j1 - i{row} == {rem}) {{"));
                tile(s, rem, true);
                s.line(format!("i{row} += {rem};"));
                s.close("}");
            }
        }
        // The columns left: tiles of half as many, and so on down to one (a row shorter than
        // a tile, at run time, then takes a few tiles rather than a column at a time).
        let mut jn = self.rows;
        while jn > 1 {
            jn = if matches!(n, Ext::Lit(_)) { 1 } else { jn / 2 };
            let step = if jn == 1 {
                format!("++i{row}")
            } else {
                format!("i{row} += {jn}")
            };
            if jn == 1 {
                s.open(format!("for (; i{row} < j1; {step}) {{"));
            } else {
                s.open(format!("if (i{row} + {jn} <= j1) {{"));
            }
            tile(s, jn, false);
            if jn > 1 {
                s.line(format!("{step};"));
            }
            s.close("}");
        }
        s.close("}");
        let vec_fin = r
            .finalize
            .as_ref()
            .is_none_or(|f| vectorizable(em.p, f, c as u32));
        let row_fin = r
            .finalize
            .as_ref()
            .is_some_and(|f| vectorizable(em.p, f, row as u32));
        let skip_c = (x.offset)(true);
        let all = (x.offset)(false);
        let c_stride = &x.c_stride;
        // The epilogue. With one that vectorises along the channels, or else along the row, and a
        // row of unit stride, blocks of `w` columns by `w` channels are transposed in registers,
        // so each channel's columns are stored as one vector instead of one float at a time:
        // the epilogue runs on the sums before the transpose (along the channels: a bias, a
        // clip) or on each channel's vector of columns after it (along the row: a residual
        // read in the output's layout; MobileNetV2's four projections with a residual at 14x14
        // and 7x7, AVX-512, Zen 5, two threads: 203-210 -> 197 us a run for the four, against
        // one float at a time).
        s.line(format!("int64_t i{row} = j0;"));
        let transposes = x.row_unit && matches!(w, 4 | 8 | 16);
        if transposes && (vec_fin || row_fin) {
            // Blocks of `bw` columns: whole vectors (`bw == w`) while they last, then at most
            // one block of each narrower power of two down to 4, each channel vector cut into
            // `w / bw` pieces of `bw` lanes that are transposed as `bw x bw` blocks (a 14x14
            // image's group of 14 columns: 8 by vectors of 8 and 6 one at a time, not 14).
            let mut bw = w;
            while bw >= 4 {
                let bt = format!("cl_f32x{bw}");
                let row_value = match &r.finalize {
                    Some(f) if !vec_fin => {
                        vector_expr_acc(em, f, row as u32, &format!("i{row}"), &bt, "av")
                    }
                    _ => String::new(),
                };
                if bw == w {
                    s.open(format!("for (; i{row} + {w} <= j1; i{row} += {w}) {{"));
                } else {
                    s.open(format!("if (i{row} + {bw} <= j1) {{"));
                }
                s.line(format!("const int64_t jb = i{row};"));
                for t in 0..nv {
                    let col = format!("t0 + {}", t * w);
                    s.open("{");
                    let value = match &r.finalize {
                        Some(f) if vec_fin => vector_expr_acc(em, f, c as u32, &col, &vt, "av"),
                        _ => "av".to_string(),
                    };
                    s.line(format!("{vt} fv[{bw}];"));
                    s.line(format!(
                        "for (int64_t l = 0; l < {bw}; ++l) {{ const int64_t i{row} = jb + l; const {vt} av = *({vt} *)&accb[(i{row} - j0) * {tw} + {}]; fv[l] = {value}; }}",
                        t * w
                    ));
                    for q in 0..w / bw {
                        let piece = if bw == w {
                            "fv[l]".to_string()
                        } else {
                            let lanes: Vec<String> =
                                (0..bw).map(|k| format!("fv[l][{}]", q * bw + k)).collect();
                            format!("({bt}){{{}}}", lanes.join(", "))
                        };
                        let first = format!("{col} + {}", q * bw);
                        s.open("{");
                        s.line(format!("{bt} v[{bw}];"));
                        s.line(format!(
                            "for (int64_t l = 0; l < {bw}; ++l) v[l] = {piece};"
                        ));
                        transpose_in_registers(s, bw, &bt);
                        if vec_fin {
                            s.line(format!(
                                "for (int64_t l = 0; l < {bw}; ++l) *({bt} *)&b{id}[{skip_c} + ({first} + l) * {c_stride}] = v[l];"
                            ));
                        } else {
                            s.line(format!(
                                "for (int64_t l = 0; l < {bw}; ++l) {{ const int64_t i{c} = {first} + l; const {bt} av = v[l]; *({bt} *)&b{id}[{all}] = {row_value}; }}"
                            ));
                        }
                        s.close("}");
                    }
                    s.close("}");
                }
                if bw < w {
                    s.line(format!("i{row} += {bw};"));
                }
                s.close("}");
                bw /= 2;
            }
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
                    "  for (int64_t l = 0; l < {w}; ++l) b{id}[{skip_c} + ({col} + l) * {c_stride}] = tv[l]; }}"
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

/// `e` (a column of a register tile, its row variable `row` jammed as `i{row} + j`) with the
/// tile's start `s` known to be a multiple of `align` and `j < align`: each `(s + j) / W` and
/// `(s + j) % W` of a flattened image of width `W` is rewritten so that `j` is a constant
/// offset from the tile's first column. Where `W` divides `align` (the tile covers whole image
/// rows): `s / W + j / W` and `j % W`; where `align` divides `W` (the tile stays inside one
/// image row): `s / W` and `s % W + j`. The C compiler then reads every column through one
/// address and a displacement, where it kept an address per column (mnist_cnn's 5x5
/// convolution at 14x14: two dozen addresses spilled to the stack and reloaded every step).
fn aligned_columns(e: &Expr, row: u32, align: usize) -> Expr {
    use crate::te::BinOp;
    let offset = |x: &Expr| -> Option<i64> {
        match x {
            Expr::Var(v) if *v == row => Some(0),
            Expr::Bin(BinOp::Add, a, b) => match (&**a, &**b) {
                (Expr::Var(v), Expr::Const(j)) | (Expr::Const(j), Expr::Var(v))
                    if *v == row && !j.dtype().is_float() =>
                {
                    Some(j.as_i64())
                }
                _ => None,
            },
            _ => None,
        }
    };
    e.rewrite(&mut |x| {
        let Expr::Bin(op @ (BinOp::Div | BinOp::Mod | BinOp::FMod), a, b) = x else {
            return None;
        };
        let Expr::Const(w) = &**b else { return None };
        let w = w.as_i64();
        let j = offset(a)?;
        if w <= 0 || j < 0 || j >= align as i64 {
            return None;
        }
        let s = Expr::Var(row);
        let div = matches!(op, BinOp::Div);
        let align = align as i64;
        if align % w == 0 {
            Some(if div {
                Expr::bin(BinOp::Add, Expr::bin(*op, s, Expr::i(w)), Expr::i(j / w))
            } else {
                Expr::i(j % w)
            })
        } else if w % align == 0 {
            Some(if div {
                Expr::bin(*op, s, Expr::i(w))
            } else {
                Expr::bin(BinOp::Add, Expr::bin(*op, s, Expr::i(w)), Expr::i(j))
            })
        } else {
            None
        }
    })
}

/// A load read through a pointer to its element at a tile's first column (`xc<q>`, the `q`-th
/// of [`column_pointers`]).
struct ColumnPointer {
    /// The load, unjammed (as in the stage's body).
    load: Expr,
    /// Its source buffer.
    buf: BufId,
    /// Its flat index at the tile's first column.
    first: Expr,
    /// Its offset from there at every column of the tile.
    offsets: Vec<i64>,
}

/// The loads of `body` the same for every channel `c` whose flat index at column `j` of a
/// tile of `jn` (the load as `column` gives it) is the tile's first column's plus a constant,
/// in the pointers' order ([`declare_column_pointers`] prints them).
fn column_pointers(
    em: &Emitter,
    body: &Expr,
    (c, row): (u32, u32),
    jn: usize,
    column: &dyn Fn(&Expr, usize) -> Expr,
) -> Vec<ColumnPointer> {
    let mut loads: Vec<Expr> = Vec::new();
    body.visit(&mut |e| {
        if matches!(e, Expr::Load(..) | Expr::LoadFlat(..)) && !loads.contains(e) {
            loads.push(e.clone());
        }
    });
    let flat_of = |load: &Expr| match load {
        Expr::Load(Src::Buf(b), idx) => {
            let buf = &em.p.bufs[b.index()];
            (!buf.packed).then(|| (*b, Expr::flatten(idx, &buf.ty.shape)))
        }
        Expr::LoadFlat(Src::Buf(b), f) => Some((*b, (**f).clone())),
        _ => None,
    };
    let mut out = Vec::new();
    for load in loads {
        let Some((b, flat)) = flat_of(&load) else {
            continue;
        };
        if is_vector(&load, c)
            || !is_vector(&flat, row)
            || em.p.bufs[b.index()].ty.dtype != crate::ir::DType::F32
        {
            continue;
        }
        // Every column's flat index as the first column's terms plus a constant.
        let Some((_, first)) = flat_of(&column(&load, 0)) else {
            continue;
        };
        let (terms, c0) = crate::te::affine_terms(&first);
        let offsets: Option<Vec<i64>> = (0..jn)
            .map(|j| {
                let (_, f) = flat_of(&column(&load, j))?;
                let (t, cj) = crate::te::affine_terms(&f);
                (t == terms).then_some(cj - c0)
            })
            .collect();
        let Some(offsets) = offsets else {
            continue;
        };
        out.push(ColumnPointer {
            load,
            buf: b,
            first,
            offsets,
        });
    }
    out
}

/// Declares the C pointers `xc<q>` of `ptrs` in `s`, at the current reduction step.
fn declare_column_pointers(s: &mut CWriter, em: &Emitter, ptrs: &[ColumnPointer]) {
    for (q, p) in ptrs.iter().enumerate() {
        s.line(format!(
            "const float *restrict xc{q} = &b{}[{}];",
            p.buf,
            em.expr(&p.first)
        ));
    }
}
