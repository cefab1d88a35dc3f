//! Tile propagation and the memory-traffic model (Welder §3.2–3.3) over tensor expressions.
//!
//! A tile of a stage is a box of its output: an extent per dimension (and, for reductions, an
//! extent per reduction axis: the slice of the reduction one step keeps in fast memory). What a
//! tile reads from each source follows from the stage's index expressions by interval
//! arithmetic: the output variables range over `[0, extent)`, the reduction variables over theirs,
//! and each index dimension of a load gets the interval its expression spans. That covers the
//! affine maps of windows (`s * i + r - pad`), transposes (permuted variables), broadcasts
//! (constant indices), padding (the guarded load still spans its interval; it is clamped to the
//! source) and the integer divisions of reshapes (conservatively). Extents are position
//! independent for affine maps, which is what lets a tile shape stand for every tile.
use crate::te::{BinOp, BufId, Expr, Program, Src, Stage};

/// An integer interval `[lo, hi]`, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// Lowest value.
    pub lo: i64,
    /// Highest value.
    pub hi: i64,
}

impl Interval {
    /// `[0, n)`.
    pub fn upto(n: usize) -> Interval {
        Interval {
            lo: 0,
            hi: n as i64 - 1,
        }
    }

    /// How many integers it holds.
    pub fn len(self) -> usize {
        (self.hi - self.lo + 1).max(0) as usize
    }

    /// Whether it holds none.
    pub fn is_empty(self) -> bool {
        self.hi < self.lo
    }

    fn point(v: i64) -> Interval {
        Interval { lo: v, hi: v }
    }

    fn hull(self, o: Interval) -> Interval {
        Interval {
            lo: self.lo.min(o.lo),
            hi: self.hi.max(o.hi),
        }
    }
}

/// The interval an integer index expression spans when output variable `k` ranges over
/// `vars[k]` and reduction variable `r` over `rvars[r]`; `None` for what interval arithmetic
/// does not follow (a load inside an index, a float).
pub fn bounds(e: &Expr, vars: &[Interval], rvars: &[Interval]) -> Option<Interval> {
    use crate::te::Scalar;
    let b = |x: &Expr| bounds(x, vars, rvars);
    Some(match e {
        Expr::Var(k) => *vars.get(*k as usize)?,
        Expr::RVar(r) => *rvars.get(*r as usize)?,
        Expr::Const(Scalar::I64(v)) => Interval::point(*v),
        Expr::Const(Scalar::I32(v)) => Interval::point(*v as i64),
        Expr::Const(Scalar::Bool(v)) => Interval::point(*v as i64),
        Expr::Cast(_, x) => b(x)?,
        Expr::Select(_, x, y) => b(x)?.hull(b(y)?),
        Expr::Bin(op, x, y) => {
            let (x, y) = (b(x)?, b(y)?);
            match op {
                BinOp::Add => Interval {
                    lo: x.lo + y.lo,
                    hi: x.hi + y.hi,
                },
                BinOp::Sub => Interval {
                    lo: x.lo - y.hi,
                    hi: x.hi - y.lo,
                },
                BinOp::Mul => {
                    let c = [x.lo * y.lo, x.lo * y.hi, x.hi * y.lo, x.hi * y.hi];
                    Interval {
                        lo: *c.iter().min()?,
                        hi: *c.iter().max()?,
                    }
                }
                BinOp::Div if y.lo == y.hi && y.lo > 0 => Interval {
                    lo: x.lo.div_euclid(y.lo),
                    hi: x.hi.div_euclid(y.lo),
                },
                BinOp::Mod | BinOp::FMod if y.lo == y.hi && y.lo > 0 => {
                    let m = y.lo;
                    if x.lo.div_euclid(m) == x.hi.div_euclid(m) {
                        Interval {
                            lo: x.lo.rem_euclid(m),
                            hi: x.hi.rem_euclid(m),
                        }
                    } else {
                        Interval { lo: 0, hi: m - 1 }
                    }
                }
                BinOp::Max => Interval {
                    lo: x.lo.max(y.lo),
                    hi: x.hi.max(y.hi),
                },
                BinOp::Min => Interval {
                    lo: x.lo.min(y.lo),
                    hi: x.hi.min(y.hi),
                },
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// The box of one source that a tile reads: its buffer and an extent per dimension (one flat
/// dimension for flat loads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// The buffer read.
    pub buf: BufId,
    /// Elements per dimension.
    pub extents: Vec<usize>,
    /// Bytes per element.
    pub elem: usize,
}

impl Region {
    /// Elements in the box.
    pub fn elems(&self) -> usize {
        self.extents.iter().product()
    }

    /// Bytes in the box.
    pub fn bytes(&self) -> usize {
        self.elems() * self.elem
    }
}

/// What a tile of `st` with output extents `tile` (and reduction extents `rtile`, the whole
/// reduction when `None`) reads from each source, one region per buffer (the hull of all its
/// loads), sorted by buffer. An index that interval arithmetic cannot follow reads the whole
/// dimension; every extent is clamped to the source's. A flat load reads at most as many
/// elements as its index takes values (the product of the extents of the variables it uses),
/// which is less than its hull when the index strides (a residual read through a reshape: one
/// row segment per output row of the tile).
pub fn propagate(p: &Program, st: &Stage, tile: &[usize], rtile: Option<&[usize]>) -> Vec<Region> {
    let vars: Vec<Interval> = tile.iter().map(|&t| Interval::upto(t)).collect();
    let rext: Vec<usize> = match (rtile, &st.reduce) {
        (Some(r), _) => r.to_vec(),
        (None, Some(r)) => r.extents.clone(),
        (None, None) => vec![],
    };
    let rvars: Vec<Interval> = rext.iter().map(|&t| Interval::upto(t)).collect();
    // Per buffer: the hull per dimension (None: the whole dimension), and for flat loads the
    // most index values they take.
    type Hull = (BufId, Vec<Option<Interval>>, Option<usize>);
    let mut hulls: Vec<Hull> = Vec::new();
    let mut visit = |e: &Expr, vars: &[Interval], rvars: &[Interval]| {
        e.visit(&mut |x| {
            let (b, dims, points): Hull = match x {
                Expr::Load(Src::Buf(b), idx) => (
                    *b,
                    idx.iter().map(|i| bounds(i, vars, rvars)).collect(),
                    None,
                ),
                Expr::LoadFlat(Src::Buf(b), i) => {
                    let mut points = 1usize;
                    let (mut seen, mut rseen) = (vec![false; vars.len()], vec![false; rvars.len()]);
                    i.visit(&mut |y| match y {
                        Expr::Var(k) if !seen.get(*k as usize).copied().unwrap_or(true) => {
                            seen[*k as usize] = true;
                            points = points.saturating_mul(vars[*k as usize].len());
                        }
                        Expr::RVar(k) if !rseen.get(*k as usize).copied().unwrap_or(true) => {
                            rseen[*k as usize] = true;
                            points = points.saturating_mul(rvars[*k as usize].len());
                        }
                        _ => {}
                    });
                    (*b, vec![bounds(i, vars, rvars)], Some(points))
                }
                _ => return,
            };
            match hulls.iter_mut().find(|(h, _, _)| *h == b) {
                Some((_, h, pts)) => {
                    for (a, d) in h.iter_mut().zip(dims) {
                        *a = match (*a, d) {
                            (Some(a), Some(d)) => Some(a.hull(d)),
                            _ => None,
                        };
                    }
                    *pts = match (*pts, points) {
                        (Some(a), Some(b)) => Some(a.saturating_add(b)),
                        _ => None,
                    };
                }
                None => hulls.push((b, dims, points)),
            }
        })
    };
    visit(&st.body, &vars, &rvars);
    if let Some(f) = st.reduce.as_ref().and_then(|r| r.finalize.as_ref()) {
        visit(f, &vars, &[]);
    }
    hulls.sort_by_key(|(b, _, _)| *b);
    hulls
        .into_iter()
        .map(|(b, dims, points)| {
            let ty = &p.bufs[b.index()].ty;
            let full: Vec<usize> = if dims.len() == ty.shape.len() {
                ty.shape.clone()
            } else {
                vec![ty.numel()]
            };
            let extents = dims
                .iter()
                .zip(&full)
                .map(|(d, &n)| {
                    let e = d.map_or(n, |d| d.len().clamp(1, n.max(1)));
                    points.map_or(e, |pts| e.min(pts.max(1)))
                })
                .collect();
            Region {
                buf: b,
                extents,
                elem: ty.dtype.size(),
            }
        })
        .collect()
}

/// Tiles of extents `tile` needed to cover `shape`.
pub fn tile_count(shape: &[usize], tile: &[usize]) -> usize {
    shape
        .iter()
        .zip(tile)
        .map(|(&n, &t)| n.div_ceil(t.max(1)))
        .product()
}

/// Bytes one tile step keeps live: the regions it reads (with the reduction cut to `rtile`) and
/// its output tile.
pub fn footprint(p: &Program, st: &Stage, tile: &[usize], rtile: Option<&[usize]>) -> usize {
    let out: usize = tile.iter().product::<usize>() * st.ty.dtype.size();
    out + propagate(p, st, tile, rtile)
        .iter()
        .map(Region::bytes)
        .sum::<usize>()
}

/// Memory traffic of computing all of `st` in tiles of `tile` when nothing stays in the cache
/// between tiles: every tile reads its regions (the whole reduction), the output is written once.
pub fn traffic(p: &Program, st: &Stage, tile: &[usize]) -> usize {
    let reads: usize = propagate(p, st, tile, None).iter().map(Region::bytes).sum();
    tile_count(&st.ty.shape, tile) * reads + st.ty.bytes()
}

/// Candidate output tiles of a stage of `shape` (Welder's enumeration): every dimension takes a
/// power of two up to its extent or the whole extent; the innermost dimension a multiple of
/// `lanes` (or the whole extent when shorter), so tiles stay vector- and cache-line aligned.
/// Sorted, deduplicated.
pub fn candidate_tiles(shape: &[usize], lanes: usize) -> Vec<Vec<usize>> {
    let rank = shape.len();
    let choices = |k: usize| -> Vec<usize> {
        let n = shape[k];
        let mut c: Vec<usize> = if k + 1 == rank && n > lanes {
            (0..).map(|s| lanes << s).take_while(|&t| t < n).collect()
        } else {
            (0..).map(|s| 1usize << s).take_while(|&t| t < n).collect()
        };
        c.push(n);
        c
    };
    let mut out: Vec<Vec<usize>> = vec![vec![]];
    for k in 0..rank {
        let c = choices(k);
        out = out
            .into_iter()
            .flat_map(|t| {
                c.iter().map(move |&x| {
                    let mut t = t.clone();
                    t.push(x);
                    t
                })
            })
            .collect();
    }
    out.sort();
    out.dedup();
    out
}

/// Welder's first step for one stage: the `k` candidate tiles with the lowest traffic whose
/// footprint (reduction cut to `rtile`) fits `capacity` bytes, with their traffic, best first
/// (ties: the larger tile, then the lexicographically smaller).
pub fn best_tiles(
    p: &Program,
    st: &Stage,
    lanes: usize,
    capacity: usize,
    rtile: Option<&[usize]>,
    k: usize,
) -> Vec<(Vec<usize>, usize)> {
    best_of(
        p,
        st,
        candidate_tiles(&st.ty.shape, lanes),
        capacity,
        rtile,
        k,
    )
}

/// [`best_tiles`] over given candidates (a plan's tiles: shapes its loops can run): the `k`
/// whose footprint fits `capacity` bytes with the lowest traffic, with their traffic, best
/// first (ties: the larger tile, then the lexicographically smaller).
pub fn best_of(
    p: &Program,
    st: &Stage,
    candidates: Vec<Vec<usize>>,
    capacity: usize,
    rtile: Option<&[usize]>,
    k: usize,
) -> Vec<(Vec<usize>, usize)> {
    let mut ranked: Vec<(Vec<usize>, usize)> = candidates
        .into_iter()
        .filter(|t| footprint(p, st, t, rtile) <= capacity)
        .map(|t| {
            let tr = traffic(p, st, &t);
            (t, tr)
        })
        .collect();
    ranked.sort_by(|(ta, a), (tb, b)| {
        a.cmp(b)
            .then_with(|| {
                tb.iter()
                    .product::<usize>()
                    .cmp(&ta.iter().product::<usize>())
            })
            .then_with(|| ta.cmp(tb))
    });
    ranked.truncate(k);
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::te::{BufKind, Expr, RedOp, Reduce, Stage};
    use crate::tensor::{DType, TensorType};

    fn input(p: &mut Program, shape: &[usize]) -> BufId {
        let i = p.inputs.len();
        let b = p.push(
            format!("x{i}"),
            TensorType::new(DType::F32, shape.to_vec()),
            BufKind::Input(i),
        );
        p.inputs.push(b);
        b
    }

    fn stage(shape: &[usize], body: Expr, reduce: Option<Vec<usize>>) -> Stage {
        Stage {
            name: "s".into(),
            ty: TensorType::new(DType::F32, shape.to_vec()),
            body,
            reduce: reduce.map(|extents| Reduce {
                op: RedOp::Sum,
                extents,
                finalize: None,
            }),
            materialize: false,
            part: 0,
            exec: Default::default(),
            choice: None,
        }
    }

    fn ext(r: &[Region]) -> Vec<(u32, Vec<usize>)> {
        r.iter().map(|r| (r.buf.0, r.extents.clone())).collect()
    }

    /// C[i, j] = sum_k A[i, k] B[k, j], 64x96x128.
    fn matmul() -> (Program, Stage) {
        let mut p = Program::default();
        let a = input(&mut p, &[64, 128]);
        let b = input(&mut p, &[128, 96]);
        let body = Expr::load(Src::Buf(a), vec![Expr::var(0), Expr::rvar(0)])
            .mul(Expr::load(Src::Buf(b), vec![Expr::rvar(0), Expr::var(1)]));
        (p, stage(&[64, 96], body, Some(vec![128])))
    }

    #[test]
    fn matmul_tiles_read_row_and_column_panels() {
        let (p, st) = matmul();
        assert_eq!(
            ext(&propagate(&p, &st, &[16, 32], None)),
            [(0, vec![16, 128]), (1, vec![128, 32])]
        );
        // A reduction step of 8: 16x8 of A, 8x32 of B, 16x32 outputs (f32).
        assert_eq!(
            footprint(&p, &st, &[16, 32], Some(&[8])),
            (16 * 8 + 8 * 32 + 16 * 32) * 4
        );
        // 4 x 3 tiles, each reading (16 + 32) x 128 floats, output written once.
        assert_eq!(
            traffic(&p, &st, &[16, 32]),
            12 * (16 * 128 + 128 * 32) * 4 + 64 * 96 * 4
        );
        // The whole output in one tile reads each operand once.
        assert_eq!(
            traffic(&p, &st, &[64, 96]),
            (64 * 128 + 128 * 96 + 64 * 96) * 4
        );
    }

    #[test]
    fn strided_padded_window() {
        // y[c, h, w] = sum_{r, s} x[c, 2h + r - 1, 2w + s - 1] (guarded), x: 8x32x32, 3x3,
        // stride 2, pad 1, y: 8x16x16.
        let mut p = Program::default();
        let x = input(&mut p, &[8, 32, 32]);
        let ih = Expr::var(1)
            .mul(Expr::i(2))
            .add(Expr::rvar(0))
            .sub(Expr::i(1));
        let iw = Expr::var(2)
            .mul(Expr::i(2))
            .add(Expr::rvar(1))
            .sub(Expr::i(1));
        let cond = ih.clone().ge(Expr::i(0)).and(ih.clone().lt(Expr::i(32)));
        let body = Expr::select(
            cond,
            Expr::load(Src::Buf(x), vec![Expr::var(0), ih, iw]),
            Expr::c(DType::F32, 0.0),
        );
        let st = stage(&[8, 16, 16], body, Some(vec![3, 3]));
        // A 4x8 output tile of 2 channels: 2(4-1)+3 = 9 rows, 2(8-1)+3 = 17 columns.
        assert_eq!(
            ext(&propagate(&p, &st, &[2, 4, 8], None)),
            [(0, vec![2, 9, 17])]
        );
        // The whole output: 2*15+3 = 33 rows, clamped to the 32 there are.
        assert_eq!(
            ext(&propagate(&p, &st, &[8, 16, 16], None)),
            [(0, vec![8, 32, 32])]
        );
        // One reduction row (rtile [1, 3]): 2(4-1)+1 = 7 rows.
        assert_eq!(
            ext(&propagate(&p, &st, &[2, 4, 8], Some(&[1, 3]))),
            [(0, vec![2, 7, 17])]
        );
    }

    #[test]
    fn transpose_broadcast_and_reshape() {
        let mut p = Program::default();
        let x = input(&mut p, &[32, 64]);
        let bias = input(&mut p, &[1, 64]);
        let flat = input(&mut p, &[2048]);
        // y[i, j] = x[j, i] + bias[0, i] + flat[i * 32 + j] (y: 64x32).
        let body = Expr::load(Src::Buf(x), vec![Expr::var(1), Expr::var(0)])
            .add(Expr::load(Src::Buf(bias), vec![Expr::i(0), Expr::var(0)]))
            .add(Expr::load_flat(
                Src::Buf(flat),
                Expr::var(0).mul(Expr::i(32)).add(Expr::var(1)),
            ));
        let st = stage(&[64, 32], body, None);
        assert_eq!(
            ext(&propagate(&p, &st, &[4, 8], None)),
            // The flat load's hull is 3 * 32 + 8 elements; its index takes 4 * 8 values.
            [(0, vec![8, 4]), (1, vec![1, 4]), (2, vec![4 * 8])]
        );
        // An index split by division and remainder: x[k / 64, k % 64] over a tile of 16 of k
        // spans one row and 16 columns at the origin; 128 of k spans two rows, every column.
        let k = Expr::var(0);
        let body = Expr::load(
            Src::Buf(x),
            vec![
                Expr::bin(BinOp::Div, k.clone(), Expr::i(64)),
                Expr::bin(BinOp::Mod, k, Expr::i(64)),
            ],
        );
        let st = stage(&[2048], body, None);
        assert_eq!(ext(&propagate(&p, &st, &[16], None)), [(0, vec![1, 16])]);
        assert_eq!(ext(&propagate(&p, &st, &[128], None)), [(0, vec![2, 64])]);
        // A load inside an index reads the whole dimension.
        let body = Expr::load(
            Src::Buf(x),
            vec![
                Expr::load(Src::Buf(bias), vec![Expr::i(0), Expr::var(0)]).cast(DType::I64),
                Expr::var(0),
            ],
        );
        let st = stage(&[32], body, None);
        assert_eq!(
            ext(&propagate(&p, &st, &[8], None)),
            [(0, vec![32, 8]), (1, vec![1, 8])]
        );
    }

    #[test]
    fn candidates_are_aligned_and_ranked_by_traffic() {
        assert_eq!(
            candidate_tiles(&[3, 20], 8),
            [
                [1, 8],
                [1, 16],
                [1, 20],
                [2, 8],
                [2, 16],
                [2, 20],
                [3, 8],
                [3, 16],
                [3, 20]
            ]
        );
        let (p, st) = matmul();
        // With room for everything, the whole output is one tile (each operand read once).
        let best = best_tiles(&p, &st, 8, usize::MAX, None, 3);
        assert_eq!(best[0], (vec![64, 96], (64 * 128 + 128 * 96 + 64 * 96) * 4));
        // Under 16 KiB with a reduction step of 8 (t0 t1 + 8 (t0 + t1) <= 4096 floats): 32x96
        // (2 tiles of 128 rows and columns: 256 x 128 floats read) beats 64x32 (3 x 96).
        let best = best_tiles(&p, &st, 8, 16 << 10, Some(&[8]), 2);
        let out = 64 * 96 * 4;
        assert_eq!(
            best,
            [
                (vec![32, 96], 256 * 128 * 4 + out),
                (vec![64, 32], 288 * 128 * 4 + out)
            ]
        );
    }
}
