//! Winograd convolution F(m x m, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional
//! Neural Networks", CVPR 2016): a 3x3 stride-1 convolution computed on `a x a` input tiles
//! (`a = m + 2`) that overlap by two, each giving an `m x m` output tile. F(4x4, 3x3) takes 36
//! multiplications per input and output channel where the direct convolution takes 144;
//! F(2x2, 3x3) 16 where it takes 36.
//!
//! ```text
//! V[xi, nu, tile, c]  = (BT d BT^T)[xi, nu]        d: the tile's a x a input window of channel c
//! M[xi, nu, tile, co] = sum_c V[xi, nu, tile, c] * U[xi, nu, c, co]     a^2 products
//! Y[tile, co]         = AT M AT^T  (+ bias)        U = G g G^T, computed at build time
//! ```
//!
//! The pass `passes::winograd` rewrites eligible `Conv` nodes into one [`WinogradConv`] node
//! whose weight is already `U` (`[36, C, Co]`); this module lowers that node to stages every
//! plan of the C backend runs well: the transforms are products with the 6x6 (4x6) matrices
//! along one axis at a time, their operands and results channel-last, so each is a short sum of
//! contiguous rows of channels (vectorised along the channels, the coefficients loaded once);
//! the `a^2` products are one batched contraction whose rows are tiles and whose vectors are output
//! channels (the register-blocked plan). The input is first laid out channel-last with its
//! padding (one transposing copy), and the output tiles are assembled channel-last and
//! transposed back to NCHW with the bias, so that the convolution's elementwise consumers fuse
//! into that last copy.
use super::{check_dtype, InferCx, LowerCx, OpKind, OpResult, Operator};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src};
use crate::tensor::{DType, TensorType};

/// The transform matrices of F(m, 3): `B^T` (`a x a`), `G` (`a x 3`), `A^T` (`m x a`).
#[derive(Clone, Copy, Debug)]
pub struct Tables {
    /// The output tile edge `m`.
    pub tile: usize,
    /// The input transform `B^T`.
    pub bt: &'static [&'static [f64]],
    /// The kernel transform `G`.
    pub g: &'static [[f64; 3]],
    /// The output transform `A^T`.
    pub at: &'static [&'static [f64]],
}

impl Tables {
    /// The input tile edge `a = m + 2`.
    pub fn alpha(&self) -> usize {
        self.tile + 2
    }
}

/// F(4x4, 3x3).
pub const F4: Tables = Tables {
    tile: 4,
    bt: &[
        &[4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
        &[0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
        &[0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
        &[0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
        &[0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
        &[0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
    ],
    g: &[
        [1.0 / 4.0, 0.0, 0.0],
        [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        [0.0, 0.0, 1.0],
    ],
    at: &[
        &[1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        &[0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
        &[0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
        &[0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
    ],
};

/// F(2x2, 3x3).
pub const F2: Tables = Tables {
    tile: 2,
    bt: &[
        &[1.0, 0.0, -1.0, 0.0],
        &[0.0, 1.0, 1.0, 0.0],
        &[0.0, -1.0, 1.0, 0.0],
        &[0.0, 1.0, 0.0, -1.0],
    ],
    g: &[
        [1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ],
    at: &[&[1.0, 1.0, 1.0, 0.0], &[0.0, 1.0, -1.0, -1.0]],
};

/// The transformed kernel `U[xi * a + nu, c, co] = (G g[co, c] G^T)[xi, nu]` of weights `w`
/// (`[co, c, 3, 3]`, row-major), computed in f64.
pub fn transform_kernel(f: &Tables, w: &[f64], co: usize, c: usize) -> Vec<f64> {
    let a = f.alpha();
    let mut u = vec![0.0; a * a * c * co];
    for o in 0..co {
        for ci in 0..c {
            let g = &w[(o * c + ci) * 9..][..9];
            // t = G g: [a, 3]
            let t: Vec<[f64; 3]> =
                f.g.iter()
                    .map(|gr| std::array::from_fn(|l| (0..3).map(|k| gr[k] * g[k * 3 + l]).sum()))
                    .collect();
            for (xi, tr) in t.iter().enumerate() {
                for (nu, gr) in f.g.iter().enumerate() {
                    let v: f64 = (0..3).map(|l| tr[l] * gr[l]).sum();
                    u[((xi * a + nu) * c + ci) * co + o] = v;
                }
            }
        }
    }
    u
}

/// A 3x3 stride-1 convolution of one group as F(m x m, 3x3) (module docs). Inputs: `X [N, C,
/// H, W]`, `U [a^2, C, Co]`, an optional bias `[Co]`, `B^T [a, a]` and `A^T [m, a]`.
#[derive(Debug)]
pub struct WinogradConv {
    /// The output tile edge `m` (4 or 2).
    pub tile: usize,
    /// Padding before the first row and column.
    pub pads: [usize; 2],
    /// Output rows and columns.
    pub out: [usize; 2],
}

impl WinogradConv {
    fn tiles(&self) -> [usize; 2] {
        [
            self.out[0].div_ceil(self.tile),
            self.out[1].div_ceil(self.tile),
        ]
    }
}

impl Operator for WinogradConv {
    fn op_type(&self) -> &'static str {
        "WinogradConv"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        for i in [0, 1, 3, 4] {
            check_dtype(cx, i, &[DType::F32])?;
        }
        let (x, u) = (cx.input(0)?, cx.input(1)?);
        let (bt, at) = (cx.input(3)?, cx.input(4)?);
        let (m, a) = (self.tile, self.tile + 2);
        let a2 = a * a;
        if x.rank() != 4
            || u.rank() != 3
            || u.shape[0] != a2
            || u.shape[1] != x.shape[1]
            || bt.shape != [a, a]
            || at.shape != [m, a]
        {
            return Err(OpError::expected(
                format!(
                    "WinogradConv inputs X [N, C, H, W], U [{a2}, C, Co], B^T [{a}, {a}], \
                     A^T [{m}, {a}]"
                ),
                format!(
                    "{:?}, {:?}, {:?}, {:?}",
                    x.shape, u.shape, bt.shape, at.shape
                ),
            ));
        }
        let co = u.shape[2];
        if cx.has(2) {
            check_dtype(cx, 2, &[DType::F32])?;
            if cx.input(2)?.shape != [co] {
                return Err(OpError::expected(
                    format!("WinogradConv bias of shape [{co}]"),
                    format!("{:?}", cx.input(2)?.shape),
                ));
            }
        }
        Ok(vec![TensorType::new(
            DType::F32,
            vec![x.shape[0], co, self.out[0], self.out[1]],
        )])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let d = DType::F32;
        let x = cx.input(0).clone();
        let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
        let co = cx.input(1).shape[2];
        let [th, tw] = self.tiles();
        let (tile, alpha) = (self.tile, self.tile + 2);
        let (hp, wp) = (tile * th + 2, tile * tw + 2);
        let nt = n * th * tw;
        let [pt, pl] = self.pads.map(|p| p as i64);
        let i = |v: usize| Expr::i(v as i64);
        let v = Expr::var;
        let bt = |row: Expr, k: usize| Expr::load(Src::Arg(3), vec![row, i(k)]);
        let at = |row: Expr, k: usize| Expr::load(Src::Arg(4), vec![row, i(k)]);
        let sum = |terms: Vec<Expr>| {
            terms
                .into_iter()
                .reduce(|a, b| a.add(b))
                .expect("a transform has terms")
        };

        // Xt[n, y, x, c] = X[n, c, y - pt, x - pl], zero outside: channel-last, padded to whole
        // tiles.
        let (y, xx) = (v(1).sub(Expr::i(pt)), v(2).sub(Expr::i(pl)));
        let mut conds = Vec::new();
        if pt > 0 {
            conds.push(y.clone().ge(Expr::i(0)));
        }
        if hp as i64 - pt > h as i64 {
            conds.push(y.clone().lt(i(h)));
        }
        if pl > 0 {
            conds.push(xx.clone().ge(Expr::i(0)));
        }
        if wp as i64 - pl > w as i64 {
            conds.push(xx.clone().lt(i(w)));
        }
        let load = Expr::load(Src::Arg(0), vec![v(0), v(3), y, xx]);
        let body = match conds.into_iter().reduce(|a, b| a.and(b)) {
            Some(cond) => Expr::select(cond, load, Expr::c(d, 0.0)),
            None => load,
        };
        let xt = cx.materialized_stage(TensorType::new(d, vec![n, hp, wp, c]), body);

        // T1[xi, n, th, x, c] = sum_i BT[xi, i] Xt[n, 4 th + i, x, c]
        let terms = (0..alpha)
            .map(|k| {
                bt(v(0), k).mul(Expr::load(
                    xt,
                    vec![v(1), v(2).mul(i(tile)).add(i(k)), v(3), v(4)],
                ))
            })
            .collect();
        let t1 = cx.materialized_stage(TensorType::new(d, vec![alpha, n, th, wp, c]), sum(terms));

        // V[xi, nu, n, th, tw, c] = sum_j BT[nu, j] T1[xi, n, th, 4 tw + j, c]
        let terms = (0..alpha)
            .map(|k| {
                bt(v(1), k).mul(Expr::load(
                    t1,
                    vec![v(0), v(2), v(3), v(4).mul(i(tile)).add(i(k)), v(5)],
                ))
            })
            .collect();
        let vt = cx.materialized_stage(
            TensorType::new(d, vec![alpha, alpha, n, th, tw, c]),
            sum(terms),
        );

        // M[k, t, o] = sum_c V[k, t, c] U[k, c, o]: 36 products, rows of tiles.
        let a2 = alpha * alpha;
        let vload = Expr::load_flat(
            vt,
            v(0).mul(i(nt * c)).add(v(1).mul(i(c))).add(Expr::rvar(0)),
        );
        let uload = Expr::load_flat(
            Src::Arg(1),
            v(0).mul(i(c * co)).add(Expr::rvar(0).mul(i(co))).add(v(2)),
        );
        let m = cx.reduce(
            TensorType::new(d, vec![a2, nt, co]),
            RedOp::Sum,
            vec![c],
            vload.mul(uload),
            None,
        );

        // O1[a, nu, t, o] = sum_xi AT[a, xi] M[xi * 6 + nu, t, o]
        let terms = (0..alpha)
            .map(|k| at(v(0), k).mul(Expr::load(m, vec![i(k * alpha).add(v(1)), v(2), v(3)])))
            .collect();
        let o1 = cx.materialized_stage(TensorType::new(d, vec![tile, alpha, nt, co]), sum(terms));

        // O2[n, th, a, tw, b, o] = sum_nu AT[b, nu] O1[a, nu, (n, th, tw), o]: the output,
        // channel-last, rows and columns in order (a view of [n, 4 th, 4 tw, o]).
        let t = v(0).mul(i(th * tw)).add(v(1).mul(i(tw))).add(v(3));
        let terms = (0..alpha)
            .map(|k| at(v(4), k).mul(Expr::load(o1, vec![v(2), i(k), t.clone(), v(5)])))
            .collect();
        let o2 = cx.materialized_stage(
            TensorType::new(d, vec![n, th, tile, tw, tile, co]),
            sum(terms),
        );

        // Y[n, o, y, x] = O2[n, y, x, o] (+ bias[o]).
        let (ho, wo) = (self.out[0], self.out[1]);
        let yload = Expr::load_flat(
            o2,
            v(0).mul(i(tile * th * tile * tw * co))
                .add(v(2).mul(i(tile * tw * co)))
                .add(v(3).mul(i(co)))
                .add(v(1)),
        );
        let body = if cx.has(2) {
            yload.add(Expr::load(Src::Arg(2), vec![v(1)]))
        } else {
            yload
        };
        Ok(vec![cx.stage(TensorType::new(d, vec![n, co, ho, wo]), body)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transforms compute a correlation: for an `a`-wide input and a 3-wide kernel,
    /// `AT ((G g) * (BT d))` is `y[i] = sum_k d[i + k] g[k]` (F(m, 3) in one dimension), for
    /// both tile sizes.
    #[test]
    fn one_dimensional_transforms_give_the_correlation() {
        let d = [0.5, -1.25, 2.0, 3.5, -0.75, 1.5];
        let g = [0.3, -0.7, 1.1];
        for f in [F4, F2] {
            let a = f.alpha();
            assert_eq!((f.bt.len(), f.g.len(), f.at.len()), (a, a, f.tile));
            let gg: Vec<f64> =
                f.g.iter()
                    .map(|r| (0..3).map(|k| r[k] * g[k]).sum())
                    .collect();
            let bd: Vec<f64> =
                f.bt.iter()
                    .map(|r| (0..a).map(|k| r[k] * d[k]).sum())
                    .collect();
            for (o, row) in f.at.iter().enumerate() {
                let y: f64 = (0..a).map(|r| row[r] * gg[r] * bd[r]).sum();
                let want: f64 = (0..3).map(|k| d[o + k] * g[k]).sum();
                assert!(
                    (y - want).abs() < 1e-12,
                    "F({}, 3) output {o}: {y} against {want}",
                    f.tile
                );
            }
        }
    }

    /// The transformed kernel of a kernel with one 1 at `(k, l)` is the outer product of `G`'s
    /// columns `k` and `l`.
    #[test]
    fn transformed_kernel_is_g_g_gt() {
        let mut w = vec![0.0; 2 * 3 * 9];
        // co = 1, c = 2, (k, l) = (2, 0)
        w[(3 + 2) * 9 + 2 * 3] = 1.0;
        let u = transform_kernel(&F2, &w, 2, 3);
        for xi in 0..4 {
            for nu in 0..4 {
                let got = u[((xi * 4 + nu) * 3 + 2) * 2 + 1];
                assert_eq!(got, F2.g[xi][2] * F2.g[nu][0]);
                assert_eq!(u[((xi * 4 + nu) * 3 + 1) * 2], 0.0);
            }
        }
    }
}
