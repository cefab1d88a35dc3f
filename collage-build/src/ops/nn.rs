//! Operators of the `nn` family: convolutions, pooling and normalizations.
use std::sync::Arc;

use super::{
    check_dtype, dim_from_i64, dim_mul, norm_axis, Constructor, InferCx, LowerCx, OpCx, OpKind,
    OpResult, Operator, FLOATS, MAX_DIM, NUMERIC,
};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src, WindowKind, WindowOp};
use crate::tensor::{DType, TensorType};

// ---------------------------------------------------------------------------------------------
// Sliding windows (Conv, ConvTranspose, pools)
// ---------------------------------------------------------------------------------------------

/// The `auto_pad` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

fn auto_pad(cx: &OpCx) -> OpResult<AutoPad> {
    Ok(match cx.attrs.string("auto_pad", "NOTSET")?.as_str() {
        "NOTSET" | "" => AutoPad::NotSet,
        "SAME_UPPER" => AutoPad::SameUpper,
        "SAME_LOWER" => AutoPad::SameLower,
        "VALID" => AutoPad::Valid,
        other => {
            return Err(OpError::expected(
                "auto_pad NOTSET, SAME_UPPER, SAME_LOWER or VALID",
                other,
            ))
        }
    })
}

/// Window attributes as given (validated against the input rank at inference).
#[derive(Clone, Debug)]
struct Window {
    auto_pad: AutoPad,
    kernel: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    ceil_mode: bool,
}

impl Window {
    fn parse(cx: &OpCx) -> OpResult<Window> {
        Ok(Window {
            auto_pad: auto_pad(cx)?,
            kernel: cx.attrs.ints("kernel_shape")?,
            strides: cx.attrs.ints("strides")?,
            dilations: cx.attrs.ints("dilations")?,
            pads: cx.attrs.ints("pads")?,
            ceil_mode: cx.attrs.int("ceil_mode", 0)? != 0,
        })
    }
}

/// Resolved window geometry over the spatial dimensions.
#[derive(Clone, Debug)]
struct Geom {
    /// Input spatial sizes.
    input: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<i64>,
    dil: Vec<i64>,
    /// Padding at the start and end of each spatial dimension.
    pb: Vec<i64>,
    pe: Vec<i64>,
    /// Output spatial sizes.
    out: Vec<usize>,
}

/// A per-dimension attribute list of length `r` (default `dflt`), every value in
/// `[min, MAX_DIM]` (so that sums and products of two of them stay far inside `i64`).
pub(super) fn dims_attr(
    v: &Option<Vec<i64>>,
    r: usize,
    dflt: i64,
    min: i64,
    what: &str,
) -> OpResult<Vec<i64>> {
    match v {
        None => Ok(vec![dflt; r]),
        Some(v) if v.is_empty() => Ok(vec![dflt; r]),
        Some(v) => {
            if v.len() != r || v.iter().any(|&x| x < min || x > MAX_DIM as i64) {
                return Err(OpError::expected(
                    format!("{what}: {r} values in [{min}, 2^48]"),
                    format!("{v:?}"),
                ));
            }
            Ok(v.clone())
        }
    }
}

/// A spatial input size as `i64`, at most [`MAX_DIM`].
fn spatial_i64(i: usize, input: &[usize]) -> OpResult<i64> {
    if i > MAX_DIM {
        return Err(OpError::expected(
            "spatial input dimensions at most 2^48",
            format!("{input:?}"),
        ));
    }
    Ok(i as i64)
}

/// The extent `(k - 1) * d + 1` of a kernel of `k` points dilated by `d`, at most [`MAX_DIM`]
/// (`k` and `d` are at most [`MAX_DIM`] already; `k` may be 0, from empty weights).
fn dilated_extent(k: usize, d: i64, kernel: &[usize], dil: &[i64]) -> OpResult<i64> {
    (k as i64 - 1)
        .checked_mul(d)
        .map(|e| e + 1)
        .filter(|&e| e <= MAX_DIM as i64)
        .ok_or_else(|| {
            OpError::expected(
                "dilated kernel extents (kernel - 1) * dilation + 1 at most 2^48",
                format!("kernel {kernel:?}, dilations {dil:?}"),
            )
        })
}

impl Window {
    /// The kernel: the attribute, checked against `from_weights` when both are known.
    fn kernel(&self, r: usize, from_weights: Option<&[usize]>) -> OpResult<Vec<usize>> {
        match (&self.kernel, from_weights) {
            (Some(k), w) => {
                let k = dims_attr(&Some(k.clone()), r, 1, 1, "kernel_shape")?;
                let k: Vec<usize> = k.iter().map(|&x| x as usize).collect();
                if let Some(w) = w {
                    if w != k.as_slice() {
                        return Err(OpError::expected(
                            format!("kernel_shape equal to the weights' spatial shape {w:?}"),
                            format!("{k:?}"),
                        ));
                    }
                }
                Ok(k)
            }
            (None, Some(w)) => {
                if w.iter().any(|&x| x > MAX_DIM) {
                    return Err(OpError::expected(
                        "weights' spatial dimensions at most 2^48",
                        format!("{w:?}"),
                    ));
                }
                Ok(w.to_vec())
            }
            (None, None) => Err(OpError::expected("attribute kernel_shape", "none")),
        }
    }

    /// Geometry of a convolution or pooling window over spatial sizes `input`.
    fn geom(&self, input: &[usize], from_weights: Option<&[usize]>, pool: bool) -> OpResult<Geom> {
        let r = input.len();
        let kernel = self.kernel(r, from_weights)?;
        let strides = dims_attr(&self.strides, r, 1, 1, "strides")?;
        let dil = dims_attr(&self.dilations, r, 1, 1, "dilations")?;
        let pads = dims_attr(&self.pads, 2 * r, 0, 0, "pads")?;
        let mut pb = vec![0i64; r];
        let mut pe = vec![0i64; r];
        let mut out = vec![0usize; r];
        // Every term below is at most MAX_DIM in magnitude (input, kernel extent, stride, pads),
        // so the sums and the products `(o - 1) * s` (at most the padded input) fit `i64`.
        for j in 0..r {
            let (i, s) = (spatial_i64(input[j], input)?, strides[j]);
            let dk = dilated_extent(kernel[j], dil[j], &kernel, &dil)?;
            let o = match self.auto_pad {
                AutoPad::NotSet => {
                    pb[j] = pads[j];
                    pe[j] = pads[r + j];
                    let avail = i + pb[j] + pe[j] - dk;
                    if avail < 0 {
                        -1
                    } else if pool && self.ceil_mode {
                        let mut o = (avail + s - 1) / s + 1;
                        // The last window must start inside the input or its start padding.
                        if (o - 1) * s >= i + pb[j] {
                            o -= 1;
                        }
                        o
                    } else {
                        avail / s + 1
                    }
                }
                AutoPad::Valid => {
                    if i < dk {
                        -1
                    } else {
                        (i - dk) / s + 1
                    }
                }
                AutoPad::SameUpper | AutoPad::SameLower => {
                    let o = (i + s - 1) / s;
                    let total = ((o - 1) * s + dk - i).max(0);
                    if self.auto_pad == AutoPad::SameUpper {
                        pb[j] = total / 2;
                    } else {
                        pb[j] = total - total / 2;
                    }
                    pe[j] = total - pb[j];
                    o
                }
            };
            if o < 1 {
                return Err(OpError::expected(
                    "a window that fits the (padded) input",
                    format!(
                        "input {input:?}, kernel {kernel:?}, strides {strides:?}, dilations {dil:?}, pads {pads:?}"
                    ),
                ));
            }
            out[j] = dim_from_i64(o, "output spatial sizes")?;
        }
        Ok(Geom {
            input: input.to_vec(),
            kernel,
            strides,
            dil,
            pb,
            pe,
            out,
        })
    }
}

impl Geom {
    /// Input positions read by the window point `RVar(rbase + j)` of output `Var(2 + j)`, and the
    /// condition that all of them lie inside the input (`None` when always true). `uniform`:
    /// the same bounds at every input size (an end bound wherever there is end padding),
    /// for a program served over a range of sizes.
    fn positions(&self, rbase: usize, uniform: bool) -> (Vec<Expr>, Option<Expr>) {
        let mut pos = Vec::new();
        let mut cond: Option<Expr> = None;
        for j in 0..self.input.len() {
            let (s, d, pb) = (self.strides[j], self.dil[j], self.pb[j]);
            let p = Expr::var(2 + j)
                .mul(Expr::i(s))
                .sub(Expr::i(pb))
                .add(Expr::rvar(rbase + j).mul(Expr::i(d)));
            let max = (self.out[j] as i64 - 1) * s - pb + (self.kernel[j] as i64 - 1) * d;
            let mut c = Vec::new();
            if pb > 0 {
                c.push(p.clone().ge(Expr::i(0)));
            }
            let overrun = if uniform {
                self.pe[j] > 0
            } else {
                max >= self.input[j] as i64
            };
            if overrun {
                c.push(p.clone().lt(Expr::i(self.input[j] as i64)));
            }
            for e in c {
                cond = Some(match cond {
                    None => e,
                    Some(a) => a.and(e),
                });
            }
            pos.push(p);
        }
        (pos, cond)
    }
}

/// The reduction shared by Conv and ConvTranspose: `sum over (channel, window) of x[xi] * w[wi]`
/// where `cond` holds, plus the optional bias (input 2) per output channel.
fn weighted_sum(
    cx: &mut LowerCx,
    out: TensorType,
    xi: Vec<Expr>,
    wi: Vec<Expr>,
    cond: Option<Expr>,
    channels: usize,
    kernel: &[usize],
) -> Src {
    let d = out.dtype;
    let prod = Expr::load(Src::Arg(0), xi).mul(Expr::load(Src::Arg(1), wi));
    let body = guard(cond, prod, Expr::c(d, 0.0));
    let mut extents = vec![channels];
    extents.extend(kernel);
    let fin = cx
        .has(2)
        .then(|| Expr::Acc.add(Expr::load(Src::Arg(2), vec![Expr::var(1)])));
    cx.reduce(out, RedOp::Sum, extents, body, fin)
}

impl Geom {
    /// The oneDNN form of a 2-D window over `x` (NCHW, f32) with `oc` output channels, or
    /// `None` when oneDNN's geometry cannot express it: the end padding is re-derived so that
    /// oneDNN's output-size formula gives ONNX's output size (ceil mode), and windows lying
    /// wholly in the padding are refused (ONNX and oneDNN disagree on them).
    fn window_op(
        &self,
        kind: WindowKind,
        x: &TensorType,
        oc: usize,
        groups: usize,
    ) -> Option<WindowOp> {
        if x.rank() != 4 || x.dtype != DType::F32 || self.input.len() != 2 {
            return None;
        }
        let mut end = [0i64; 2];
        for (j, end_j) in end.iter_mut().enumerate() {
            let (i, o, s, p0) = (
                self.input[j] as i64,
                self.out[j] as i64,
                self.strides[j],
                self.pb[j],
            );
            let ext = (self.kernel[j] as i64 - 1) * self.dil[j] + 1;
            let fits = |p1: i64| i + p0 + p1 >= ext && (i + p0 + p1 - ext) / s + 1 == o;
            let needed = (o - 1) * s + ext - i - p0;
            *end_j = if fits(self.pe[j]) {
                self.pe[j]
            } else if needed >= 0 && fits(needed) {
                needed
            } else {
                return None;
            };
            // oneDNN's own limits: paddings shorter than the window, dilation gaps shorter
            // than the input.
            if ext <= p0 || ext <= *end_j || self.dil[j] > i {
                return None;
            }
            // Every window must have a point inside the input (ONNX and oneDNN disagree on
            // windows wholly in the padding).
            let (k, dl) = (self.kernel[j] as i64, self.dil[j]);
            let reaches = |start: i64| {
                let first = if start >= 0 {
                    0
                } else {
                    (-start + dl - 1) / dl
                };
                first < k && start + first * dl < i
            };
            if !(0..o).all(|w| reaches(w * s - p0)) {
                return None;
            }
            if kind == WindowKind::AvgPoolIncludePad && *end_j != self.pe[j] {
                return None;
            }
        }
        let d = |v: usize| v as i64;
        Some(WindowOp {
            kind,
            n: d(x.shape[0]),
            ic: d(x.shape[1]),
            ih: d(self.input[0]),
            iw: d(self.input[1]),
            oc: d(oc),
            oh: d(self.out[0]),
            ow: d(self.out[1]),
            kh: d(self.kernel[0]),
            kw: d(self.kernel[1]),
            sh: self.strides[0],
            sw: self.strides[1],
            dh: self.dil[0],
            dw: self.dil[1],
            pt: self.pb[0],
            pl: self.pb[1],
            pb: end[0],
            pr: end[1],
            groups: d(groups),
        })
    }
}

fn guard(cond: Option<Expr>, value: Expr, other: Expr) -> Expr {
    match cond {
        None => value,
        Some(c) => Expr::select(c, value, other),
    }
}

fn rank_at_least(t: &TensorType, r: usize, what: &str) -> OpResult<()> {
    if t.rank() < r {
        return Err(OpError::expected(
            format!("{what} of rank >= {r}"),
            format!("{:?}", t.shape),
        ));
    }
    Ok(())
}

fn spatial_out(x: &[usize], c: usize, out: &[usize]) -> Vec<usize> {
    let mut v = vec![x[0], c];
    v.extend_from_slice(out);
    v
}

// ---------------------------------------------------------------------------------------------
// Conv
// ---------------------------------------------------------------------------------------------

/// `Conv`: grouped, strided, dilated, padded N-d convolution with optional bias.
#[derive(Debug)]
struct Conv {
    win: Window,
    group: usize,
}

impl Conv {
    fn geom(&self, x: &TensorType, w: &TensorType) -> OpResult<Geom> {
        self.win.geom(&x.shape[2..], Some(&w.shape[2..]), false)
    }
}

/// Largest im2col buffer (bytes) the GEMM lowering of a convolution may use.
const MAX_IM2COL_BYTES: usize = 64 << 20;

impl Conv {
    /// Lowers an ungrouped f32 convolution to a contraction `[N, M, P] = W[M, K] x col[N, K, P]`
    /// (P = output pixels, K = input channels x kernel window) over an im2col buffer, or straight
    /// over the input for a 1x1 / stride-1 / unpadded kernel. The contraction's rows are output
    /// pixels, so the code generator's register-blocked schedule applies; the result is reshaped
    /// to `[N, M, spatial..]` (a free view). `None` when the direct lowering fits better.
    fn lower_as_gemm(
        &self,
        cx: &mut LowerCx,
        x: &TensorType,
        w: &TensorType,
        geo: &Geom,
        out: &TensorType,
    ) -> Option<Vec<Src>> {
        let d = out.dtype;
        let (n, c, m) = (x.shape[0], x.shape[1], w.shape[0]);
        // Checked: the weights (hence the kernel) may be empty with large other dimensions.
        let p = geo.out.iter().try_fold(1usize, |a, &b| a.checked_mul(b))?;
        let window = geo
            .kernel
            .iter()
            .try_fold(1usize, |a, &b| a.checked_mul(b))?;
        let k = c.checked_mul(window)?;
        let col_bytes = k.checked_mul(p).and_then(|v| v.checked_mul(4));
        let (pos, cond) = geo.positions(1, cx.uniform);
        let pointwise = window == 1
            && cond.is_none()
            && geo.strides.iter().all(|&s| s == 1)
            && geo.pb.iter().all(|&b| b == 0);
        // Fewer than 16 pixels: direct, except a pointwise layer (a squeeze-and-excitation
        // block's 1x1 convolutions on a 1x1 image), whose one reduction variable lets the
        // contraction vectorise along its channels or its reduction instead of a scalar loop
        // over the unit kernel window.
        let spatial_in = x.shape[2..]
            .iter()
            .try_fold(1usize, |a, &b| a.checked_mul(b))?;
        // A uniform lowering (served over a range of sizes) keeps the direct form, the im2col
        // layout being chosen by size, but for a pointwise layer that reads its input as it is:
        // its row is then the whole image, not one line of it, at every size.
        let flat_pointwise = pointwise && spatial_in == p;
        if (cx.uniform && !flat_pointwise)
            || self.group != 1
            || d != DType::F32
            || p == 0
            || (p < 16 && !pointwise)
            || window == 0
            || (!cx.uniform && !matches!(col_bytes, Some(b) if b <= MAX_IM2COL_BYTES))
        {
            return None;
        }
        let col_ty = TensorType::new(d, vec![n, k, p]);
        // Small images: col is laid out [n, ci, window.., out..] and written without index
        // arithmetic; large ones: [n, K, P] (which the code generator stores in column panels).
        let natural = p < 1024;
        let col = if pointwise && spatial_in == p {
            None
        } else if natural {
            let sp = geo.out.len();
            let mut dims = vec![n, c];
            dims.extend(&geo.kernel);
            dims.extend(&geo.out);
            // Var(1) = ci, Var(2 + j) = window point j, Var(2 + sp + j) = output position j.
            let relabel = |e: &Expr| -> Expr {
                e.rewrite(&mut |y| match y {
                    Expr::Var(v) if *v >= 2 => Some(Expr::var(*v as usize + sp)),
                    Expr::RVar(r) if *r >= 1 => Some(Expr::var(1 + *r as usize)),
                    _ => None,
                })
            };
            let mut xi = vec![Expr::var(0), Expr::var(1)];
            xi.extend(pos.iter().map(relabel));
            let body = guard(
                cond.as_ref().map(relabel),
                Expr::load(Src::Arg(0), xi),
                Expr::c(d, 0.0),
            );
            Some(cx.materialized_stage(TensorType::new(d, dims), body))
        } else {
            // col[n, kk, pp] = x[n, ci, pos(pp, window point)] with (ci, window point) = kk.
            let mut kdims = vec![c];
            kdims.extend(&geo.kernel);
            let kk = Expr::unflatten(&Expr::var(1), &kdims);
            let pp = Expr::unflatten(&Expr::var(2), &geo.out);
            // Substitute the convolution's variables: Var(2 + j) -> output position j, RVar(1 + j)
            // -> window point j.
            let relabel = |e: &Expr| -> Expr {
                e.rewrite(&mut |y| match y {
                    Expr::Var(v) if *v >= 2 => Some(pp[*v as usize - 2].clone()),
                    Expr::RVar(r) if *r >= 1 => Some(kk[*r as usize].clone()),
                    _ => None,
                })
            };
            let mut xi = vec![Expr::var(0), kk[0].clone()];
            xi.extend(pos.iter().map(relabel));
            let value = Expr::load(Src::Arg(0), xi);
            let body = guard(cond.as_ref().map(relabel), value, Expr::c(d, 0.0));
            Some(cx.materialized_stage(col_ty.clone(), body))
        };
        let operand = match col {
            Some(s) if natural => Expr::load_flat(
                s,
                Expr::var(0)
                    .mul(Expr::i((k * p) as i64))
                    .add(Expr::rvar(0).mul(Expr::i(p as i64)))
                    .add(Expr::var(2)),
            ),
            Some(s) => Expr::load(s, vec![Expr::var(0), Expr::rvar(0), Expr::var(2)]),
            None => Expr::load_flat(
                Src::Arg(0),
                Expr::var(0)
                    .mul(Expr::i((c * p) as i64))
                    .add(Expr::rvar(0).mul(Expr::i(p as i64)))
                    .add(Expr::var(2)),
            ),
        };
        let weight = Expr::load_flat(
            Src::Arg(1),
            Expr::var(1).mul(Expr::i(k as i64)).add(Expr::rvar(0)),
        );
        let fin = cx
            .has(2)
            .then(|| Expr::Acc.add(Expr::load(Src::Arg(2), vec![Expr::var(1)])));
        let gemm = cx.reduce(
            TensorType::new(d, vec![n, m, p]),
            RedOp::Sum,
            vec![k],
            weight.mul(operand),
            fin,
        );
        let vars: Vec<Expr> = (0..out.rank()).map(Expr::var).collect();
        let view = cx.stage(
            out.clone(),
            Expr::load_flat(gemm, Expr::flatten(&vars, &out.shape)),
        );
        Some(vec![view])
    }
}

impl Operator for Conv {
    fn op_type(&self) -> &'static str {
        "Conv"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, FLOATS)?;
        check_dtype(cx, 1, &[d])?;
        let (x, w) = (cx.input(0)?, cx.input(1)?);
        rank_at_least(x, 3, "Conv input")?;
        if w.rank() != x.rank() {
            return Err(OpError::expected(
                format!("Conv weights of rank {}", x.rank()),
                format!("{:?}", w.shape),
            ));
        }
        let g = self.group;
        let (c, m) = (x.shape[1], w.shape[0]);
        if g == 0 || c % g != 0 || m % g != 0 || w.shape[1].checked_mul(g) != Some(c) {
            return Err(OpError::expected(
                format!("Conv weights [M, C/group, ...] with C = {c}, group = {g}"),
                format!("{:?}", w.shape),
            ));
        }
        if cx.has(2) {
            check_dtype(cx, 2, &[d])?;
            if cx.input(2)?.shape != [m] {
                return Err(OpError::expected(
                    format!("Conv bias of shape [{m}]"),
                    format!("{:?}", cx.input(2)?.shape),
                ));
            }
        }
        let geo = self.geom(x, w)?;
        Ok(vec![TensorType::new(d, spatial_out(&x.shape, m, &geo.out))])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (x, w) = (cx.input(0).clone(), cx.input(1).clone());
        let geo = self.geom(&x, &w)?;
        let out = cx.output(0).clone();
        if !cx.direct {
            if let Some(srcs) = self.lower_as_gemm(cx, &x, &w, &geo, &out) {
                return Ok(srcs);
            }
        }
        let cg = w.shape[1];
        let mg = w.shape[0] / self.group;
        let ci = if self.group == 1 {
            Expr::rvar(0)
        } else {
            Expr::var(1)
                .div(Expr::i(mg as i64))
                .mul(Expr::i(cg as i64))
                .add(Expr::rvar(0))
        };
        let (pos, cond) = geo.positions(1, cx.uniform);
        let mut xi = vec![Expr::var(0), ci];
        xi.extend(pos);
        let mut wi = vec![Expr::var(1), Expr::rvar(0)];
        wi.extend((0..geo.kernel.len()).map(|j| Expr::rvar(1 + j)));
        Ok(vec![weighted_sum(cx, out, xi, wi, cond, cg, &geo.kernel)])
    }

    fn window(&self, cx: &LowerCx) -> Option<WindowOp> {
        let (x, w) = (cx.input(0), cx.input(1));
        let geo = self.geom(x, w).ok()?;
        geo.window_op(WindowKind::Conv, x, w.shape[0], self.group)
    }
}

// ---------------------------------------------------------------------------------------------
// ConvTranspose
// ---------------------------------------------------------------------------------------------

/// `ConvTranspose`: the gradient of Conv, computed as a gather over input positions.
#[derive(Debug)]
struct ConvTranspose {
    win: Window,
    group: usize,
    output_padding: Option<Vec<i64>>,
    output_shape: Option<Vec<i64>>,
}

/// ConvTranspose geometry: kernel, strides, dilations, start padding, output spatial sizes.
struct CtGeom {
    kernel: Vec<usize>,
    strides: Vec<i64>,
    dil: Vec<i64>,
    pb: Vec<i64>,
    out: Vec<usize>,
    /// The unpadded output size `stride * (input - 1) + output_padding + dilated kernel`.
    natural: Vec<i64>,
}

impl ConvTranspose {
    fn geom(&self, input: &[usize], wk: &[usize]) -> OpResult<CtGeom> {
        let r = input.len();
        let win = &self.win;
        let kernel = win.kernel(r, Some(wk))?;
        let strides = dims_attr(&win.strides, r, 1, 1, "strides")?;
        let dil = dims_attr(&win.dilations, r, 1, 1, "dilations")?;
        let pads = dims_attr(&win.pads, 2 * r, 0, 0, "pads")?;
        let opad = dims_attr(&self.output_padding, r, 0, 0, "output_padding")?;
        let oshape = match &self.output_shape {
            None => None,
            Some(v) if v.len() == r + 2 => Some(dims_attr(
                &Some(v[2..].to_vec()),
                r,
                1,
                1,
                "output_shape (spatial part)",
            )?),
            Some(v) => Some(dims_attr(&Some(v.clone()), r, 1, 1, "output_shape")?),
        };
        let too_big = |what: &str| {
            OpError::expected(
                format!("a ConvTranspose {what} at most 2^48"),
                format!(
                    "input {input:?}, kernel {kernel:?}, strides {strides:?}, dilations {dil:?}, \
                     output_padding {opad:?}"
                ),
            )
        };
        let mut pb = vec![0i64; r];
        let mut out = vec![0usize; r];
        let mut naturals = vec![0i64; r];
        // Inputs, kernel extents and attributes are at most MAX_DIM in magnitude; the unpadded
        // output `natural` and `i * s` are checked, so every later sum fits `i64`.
        for j in 0..r {
            let (i, s) = (spatial_i64(input[j], input)?, strides[j]);
            let dk = dilated_extent(kernel[j], dil[j], &kernel, &dil)?;
            let natural = s
                .checked_mul(i - 1)
                .map(|v| v + opad[j] + dk)
                .filter(|&v| v <= MAX_DIM as i64)
                .ok_or_else(|| too_big("unpadded output size stride * (input - 1) + ..."))?;
            let o = match win.auto_pad {
                AutoPad::SameUpper | AutoPad::SameLower => {
                    let o = match &oshape {
                        Some(v) => v[j],
                        None => i
                            .checked_mul(s)
                            .filter(|&v| v <= MAX_DIM as i64)
                            .ok_or_else(|| too_big("output size input * stride"))?,
                    };
                    let total = natural - o;
                    pb[j] = if win.auto_pad == AutoPad::SameUpper {
                        total.div_euclid(2)
                    } else {
                        total - total.div_euclid(2)
                    };
                    o
                }
                AutoPad::Valid => oshape.as_ref().map_or(natural, |v| v[j]),
                // With an explicit output shape the padding follows from it (as SAME_LOWER).
                AutoPad::NotSet => match &oshape {
                    Some(v) => {
                        let total = natural - v[j];
                        pb[j] = total - total.div_euclid(2);
                        v[j]
                    }
                    None => {
                        pb[j] = pads[j];
                        natural - pads[j] - pads[r + j]
                    }
                },
            };
            if o < 1 {
                return Err(OpError::expected(
                    "a positive ConvTranspose output size",
                    format!("{o} (input {input:?}, kernel {kernel:?}, pads {pads:?})"),
                ));
            }
            out[j] = o as usize;
            naturals[j] = natural;
        }
        Ok(CtGeom {
            kernel,
            strides,
            dil,
            pb,
            out,
            natural: naturals,
        })
    }
}

impl Operator for ConvTranspose {
    fn op_type(&self) -> &'static str {
        "ConvTranspose"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, FLOATS)?;
        check_dtype(cx, 1, &[d])?;
        let (x, w) = (cx.input(0)?, cx.input(1)?);
        rank_at_least(x, 3, "ConvTranspose input")?;
        let g = self.group;
        let c = x.shape[1];
        if w.rank() != x.rank() || g == 0 || c % g != 0 || w.shape[0] != c {
            return Err(OpError::expected(
                format!("ConvTranspose weights [C, M/group, ...] with C = {c}, group = {g}"),
                format!("{:?}", w.shape),
            ));
        }
        let m = dim_mul(w.shape[1], g, "ConvTranspose output channels")?;
        if cx.has(2) {
            check_dtype(cx, 2, &[d])?;
            if cx.input(2)?.shape != [m] {
                return Err(OpError::expected(
                    format!("ConvTranspose bias of shape [{m}]"),
                    format!("{:?}", cx.input(2)?.shape),
                ));
            }
        }
        let geo = self.geom(&x.shape[2..], &w.shape[2..])?;
        Ok(vec![TensorType::new(d, spatial_out(&x.shape, m, &geo.out))])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (x, w) = (cx.input(0).clone(), cx.input(1).clone());
        let geo = self.geom(&x.shape[2..], &w.shape[2..])?;
        let out = cx.output(0).clone();
        let mg = w.shape[1];
        let cg = x.shape[1] / self.group;
        let (ci, co) = if self.group == 1 {
            (Expr::rvar(0), Expr::var(1))
        } else {
            (
                Expr::var(1)
                    .div(Expr::i(mg as i64))
                    .mul(Expr::i(cg as i64))
                    .add(Expr::rvar(0)),
                Expr::var(1).fmod(Expr::i(mg as i64)),
            )
        };
        let mut xi = vec![Expr::var(0), ci.clone()];
        let mut wi = vec![ci, co];
        let mut conds: Vec<Expr> = Vec::new();
        for j in 0..geo.kernel.len() {
            let (s, dl, pb) = (geo.strides[j], geo.dil[j], geo.pb[j]);
            let inp = x.shape[2 + j] as i64;
            let t = Expr::var(2 + j)
                .add(Expr::i(pb))
                .sub(Expr::rvar(1 + j).mul(Expr::i(dl)));
            let tmin = pb - (geo.kernel[j] as i64 - 1) * dl;
            let tmax = geo.out[j] as i64 - 1 + pb;
            if tmin < 0 {
                conds.push(t.clone().ge(Expr::i(0)));
            }
            if tmax >= inp * s {
                conds.push(t.clone().lt(Expr::i(inp * s)));
            }
            if s > 1 {
                conds.push(t.clone().fmod(Expr::i(s)).eq(Expr::i(0)));
            }
            xi.push(t.div(Expr::i(s)));
            wi.push(Expr::rvar(1 + j));
        }
        let cond = conds.into_iter().reduce(|a, b| a.and(b));
        Ok(vec![weighted_sum(cx, out, xi, wi, cond, cg, &geo.kernel)])
    }
}

// ---------------------------------------------------------------------------------------------
// Pooling
// ---------------------------------------------------------------------------------------------

/// `MaxPool` (with the optional `Indices` output).
#[derive(Debug)]
struct MaxPool {
    win: Window,
    storage_order: i64,
    indices: bool,
}

/// `AveragePool`.
#[derive(Debug)]
struct AveragePool {
    win: Window,
    count_include_pad: bool,
}

fn pool_infer(cx: &InferCx, win: &Window, types: &[DType]) -> OpResult<(TensorType, Geom)> {
    let d = check_dtype(cx, 0, types)?;
    let x = cx.input(0)?;
    rank_at_least(x, 3, "pooling input")?;
    let geo = win.geom(&x.shape[2..], None, true)?;
    let ty = TensorType::new(d, spatial_out(&x.shape, x.shape[1], &geo.out));
    Ok((ty, geo))
}

fn pool_geom(cx: &LowerCx, win: &Window) -> OpResult<Geom> {
    win.geom(&cx.input(0).shape[2..], None, true)
}

fn x_index(pos: Vec<Expr>) -> Vec<Expr> {
    let mut xi = vec![Expr::var(0), Expr::var(1)];
    xi.extend(pos);
    xi
}

impl Operator for MaxPool {
    fn op_type(&self) -> &'static str {
        "MaxPool"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let (ty, _) = pool_infer(cx, &self.win, NUMERIC)?;
        let mut v = vec![ty.clone()];
        if self.indices {
            v.push(TensorType::new(DType::I64, ty.shape));
        }
        Ok(v)
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let geo = pool_geom(cx, &self.win)?;
        let out = cx.output(0).clone();
        let d = out.dtype;
        let (pos, cond) = geo.positions(0, cx.uniform);
        let lowest = Expr::Const(RedOp::Max.init(d));
        let x = Expr::load(Src::Arg(0), x_index(pos));
        let body = guard(cond.clone(), x.clone(), lowest);
        let y = cx.reduce(out.clone(), RedOp::Max, geo.kernel.clone(), body, None);
        if !self.indices {
            return Ok(vec![y]);
        }
        // The first window point (row-major) holding the maximum, then its input offset.
        let r = geo.kernel.len();
        let rv: Vec<Expr> = (0..r).map(Expr::rvar).collect();
        let flat_k = Expr::flatten(&rv, &geo.kernel);
        let yv = Expr::load(y, (0..out.rank()).map(Expr::var).collect());
        let hit = x.eq(yv);
        let hit = match cond {
            None => hit,
            Some(c) => c.and(hit),
        };
        let big = i64::MAX;
        let body = Expr::select(hit, flat_k, Expr::i(big));
        let k = Expr::unflatten(&Expr::Acc, &geo.kernel);
        let n_sp: i64 = geo.input.iter().product::<usize>() as i64;
        let c = cx.input(0).shape[1] as i64;
        let nc = Expr::var(0).mul(Expr::i(c)).add(Expr::var(1));
        let mut off = Expr::i(0);
        let mut stride = 1i64;
        let order: Vec<usize> = if self.storage_order == 1 {
            (0..r).collect()
        } else {
            (0..r).rev().collect()
        };
        for j in order {
            let p = Expr::var(2 + j)
                .mul(Expr::i(geo.strides[j]))
                .sub(Expr::i(geo.pb[j]))
                .add(k[j].clone().mul(Expr::i(geo.dil[j])));
            off = off.add(p.mul(Expr::i(stride)));
            stride *= geo.input[j] as i64;
        }
        let fin = nc.mul(Expr::i(n_sp)).add(off);
        let ity = TensorType::new(DType::I64, out.shape.clone());
        let idx = cx.reduce(ity, RedOp::Min, geo.kernel.clone(), body, Some(fin));
        Ok(vec![y, idx])
    }

    fn window(&self, cx: &LowerCx) -> Option<WindowOp> {
        if self.indices {
            return None;
        }
        let x = cx.input(0);
        pool_geom(cx, &self.win)
            .ok()?
            .window_op(WindowKind::MaxPool, x, x.shape[1], 1)
    }
}

/// The number of window points `k` in `[0, kernel)` with `lo <= st + k * d < hi`, where `st` is the
/// window start of output `Var(2 + j)`.
fn window_count(geo: &Geom, j: usize, lo: i64, hi: i64) -> Expr {
    let (s, d, pb, k) = (geo.strides[j], geo.dil[j], geo.pb[j], geo.kernel[j] as i64);
    let first = -pb;
    let last = (geo.out[j] as i64 - 1) * s - pb;
    if first >= lo && last + (k - 1) * d < hi {
        return Expr::i(k);
    }
    let st = Expr::var(2 + j).mul(Expr::i(s)).sub(Expr::i(pb));
    let kmin = Expr::i(lo)
        .sub(st.clone())
        .max(Expr::i(0))
        .add(Expr::i(d - 1))
        .div(Expr::i(d));
    let span = Expr::i(hi - 1).sub(st);
    let kend = Expr::select(
        span.clone().ge(Expr::i(0)),
        span.div(Expr::i(d)).add(Expr::i(1)).min(Expr::i(k)),
        Expr::i(0),
    );
    kend.sub(kmin).max(Expr::i(0))
}

impl Operator for AveragePool {
    fn op_type(&self) -> &'static str {
        "AveragePool"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        Ok(vec![pool_infer(cx, &self.win, FLOATS)?.0])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let geo = pool_geom(cx, &self.win)?;
        let out = cx.output(0).clone();
        let d = out.dtype;
        let (pos, cond) = geo.positions(0, cx.uniform);
        let x = Expr::load(Src::Arg(0), x_index(pos));
        let body = guard(cond, x, Expr::c(d, 0.0));
        let mut count = Expr::i(1);
        for j in 0..geo.kernel.len() {
            let (lo, hi) = if self.count_include_pad {
                (-geo.pb[j], geo.input[j] as i64 + geo.pe[j])
            } else {
                (0, geo.input[j] as i64)
            };
            count = count.mul(window_count(&geo, j, lo, hi));
        }
        let fin = Expr::Acc.div(count.cast(d));
        Ok(vec![cx.reduce(
            out,
            RedOp::Sum,
            geo.kernel.clone(),
            body,
            Some(fin),
        )])
    }

    fn window(&self, cx: &LowerCx) -> Option<WindowOp> {
        let kind = if self.count_include_pad {
            WindowKind::AvgPoolIncludePad
        } else {
            WindowKind::AvgPoolExcludePad
        };
        let x = cx.input(0);
        pool_geom(cx, &self.win)
            .ok()?
            .window_op(kind, x, x.shape[1], 1)
    }
}

/// `LpPool`: `(sum over the window of |x|^p)^(1/p)`, the padding contributing nothing.
#[derive(Debug)]
struct LpPool {
    win: Window,
    p: i64,
}

impl Operator for LpPool {
    fn op_type(&self) -> &'static str {
        "LpPool"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        if cx.inputs.len() > 1 {
            return Err(OpError::expected("at most 1 input", cx.inputs.len()));
        }
        let (ty, geo) = pool_infer(cx, &self.win, FLOATS)?;
        // Checks the output size (the window count times the kernel stays in range too).
        dim_mul(
            geo.out.iter().product::<usize>().max(1),
            geo.kernel.iter().product::<usize>().max(1),
            "window points",
        )?;
        Ok(vec![ty])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let geo = pool_geom(cx, &self.win)?;
        let out = cx.output(0).clone();
        let d = out.dtype;
        let (pos, cond) = geo.positions(0, cx.uniform);
        let v = Expr::load(Src::Arg(0), x_index(pos));
        let (term, fin) = match self.p {
            1 => (v.abs(), None),
            2 => (v.clone().mul(v), Some(Expr::Acc.sqrt())),
            p => (
                v.abs().pow(Expr::c(d, p as f64)),
                Some(Expr::Acc.pow(Expr::c(d, 1.0 / p as f64))),
            ),
        };
        let body = guard(cond, term, Expr::c(d, 0.0));
        Ok(vec![cx.reduce(
            out,
            RedOp::Sum,
            geo.kernel.clone(),
            body,
            fin,
        )])
    }
}

fn lp_pool(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let win = Window::parse(cx)?;
    let p = cx.attrs.int("p", 2)?;
    if !(1..=1 << 20).contains(&p) {
        return Err(OpError::expected("p in [1, 2^20]", p));
    }
    if win.kernel.is_none() {
        return Err(OpError::expected("attribute kernel_shape", "none"));
    }
    Ok(Arc::new(LpPool { win, p }))
}

/// `GlobalAveragePool` / `GlobalMaxPool`.
#[derive(Debug)]
struct GlobalPool {
    max: bool,
}

impl Operator for GlobalPool {
    fn op_type(&self) -> &'static str {
        if self.max {
            "GlobalMaxPool"
        } else {
            "GlobalAveragePool"
        }
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, if self.max { NUMERIC } else { FLOATS })?;
        let x = cx.input(0)?;
        rank_at_least(x, 2, "global pooling input")?;
        let mut shape = x.shape.clone();
        shape[2..].iter_mut().for_each(|s| *s = 1);
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let out = cx.output(0).clone();
        let mut ext: Vec<usize> = x.shape[2..].to_vec();
        let xi = if ext.len() > 1 && ext.iter().all(|&e| e > 0) {
            // One reduction over the whole image, `x[n, c, r / W, r % W]`, which the loads'
            // simplification reads flat: a max or a sum vectorised over 56 x 56 pixels, not 56
            // rows of 56 (each with its own horizontal reduction and tail), and over 7 x 7 or
            // 14 x 14 pixels at all (rows of 7 or 14 are too short to vectorise).
            let n: usize = ext.iter().product();
            let mut below = n;
            let pos = ext
                .iter()
                .map(|&e| {
                    below /= e;
                    Expr::rvar(0)
                        .div(Expr::i(below as i64))
                        .fmod(Expr::i(e as i64))
                })
                .collect();
            ext = vec![n];
            x_index(pos)
        } else {
            x_index((0..ext.len()).map(Expr::rvar).collect())
        };
        let body = Expr::load(Src::Arg(0), xi);
        // In f64: exact for any tensor within the size limits, and no overflow on an empty one.
        let n: f64 = ext.iter().map(|&e| e as f64).product();
        let (op, fin) = if self.max {
            (RedOp::Max, None)
        } else {
            (RedOp::Sum, Some(Expr::Acc.div(Expr::c(out.dtype, n))))
        };
        Ok(vec![cx.reduce(out, op, ext, body, fin)])
    }
}

// ---------------------------------------------------------------------------------------------
// Normalizations
// ---------------------------------------------------------------------------------------------

/// Statistics of input 0 over groups of elements: one value per element of `stat` (output
/// variables), reducing over `extents` (reduction variables); `xi` indexes input 0.
struct Moments {
    stat: TensorType,
    extents: Vec<usize>,
    xi: Vec<Expr>,
}

impl Moments {
    /// Statistics over `axes` of a tensor of `shape`, kept as size-1 dimensions.
    fn over_axes(d: DType, shape: &[usize], axes: &[usize]) -> Moments {
        let mut stat = shape.to_vec();
        let mut xi = Vec::new();
        // Consecutive axes (an instance's or a group's image) are one reduction variable `r`
        // read as `x[.., r / W, r % W]`, which the loads' simplification reads flat: one
        // vectorised loop over the image, not a horizontal sum and a tail per row.
        let total: usize = axes.iter().map(|&a| shape[a]).product();
        let consecutive = axes.len() > 1 && total > 0 && axes.windows(2).all(|w| w[1] == w[0] + 1);
        let mut below = total;
        for (k, s) in stat.iter_mut().enumerate() {
            match axes.iter().position(|&a| a == k) {
                Some(_) if consecutive => {
                    *s = 1;
                    below /= shape[k];
                    xi.push(
                        Expr::rvar(0)
                            .div(Expr::i(below as i64))
                            .fmod(Expr::i(shape[k] as i64)),
                    );
                }
                Some(p) => {
                    *s = 1;
                    xi.push(Expr::rvar(p));
                }
                None => xi.push(Expr::var(k)),
            }
        }
        // Reduction variable `p` runs over axis `axes[p]` (over all of them when consecutive).
        let ext: Vec<usize> = if consecutive {
            vec![total]
        } else {
            axes.iter().map(|&a| shape[a]).collect()
        };
        Moments {
            stat: TensorType::new(d, stat),
            extents: ext,
            xi,
        }
    }

    fn n(&self) -> f64 {
        // In f64: exact for any tensor within the size limits, and no overflow on an empty one.
        self.extents.iter().map(|&e| e as f64).product()
    }

    fn x(&self) -> Expr {
        Expr::load(Src::Arg(0), self.xi.clone())
    }

    /// The statistic at the current reduction's output element.
    fn at(&self, s: Src) -> Expr {
        Expr::load(s, (0..self.stat.rank()).map(Expr::var).collect())
    }

    /// Mean of `x`.
    fn mean(&self, cx: &mut LowerCx) -> Src {
        let d = self.stat.dtype;
        let fin = Expr::Acc.div(Expr::c(d, self.n()));
        cx.reduce(
            self.stat.clone(),
            RedOp::Sum,
            self.extents.clone(),
            self.x(),
            Some(fin),
        )
    }

    /// `f(variance)` given the mean.
    fn var(&self, cx: &mut LowerCx, mean: Src, f: impl FnOnce(Expr) -> Expr) -> Src {
        let d = self.stat.dtype;
        let dx = self.x().sub(self.at(mean));
        let fin = f(Expr::Acc.div(Expr::c(d, self.n())));
        cx.reduce(
            self.stat.clone(),
            RedOp::Sum,
            self.extents.clone(),
            dx.clone().mul(dx),
            Some(fin),
        )
    }

    /// `f(mean of x^2)`.
    fn mean_sq(&self, cx: &mut LowerCx, f: impl FnOnce(Expr) -> Expr) -> Src {
        let d = self.stat.dtype;
        let x = self.x();
        let fin = f(Expr::Acc.div(Expr::c(d, self.n())));
        cx.reduce(
            self.stat.clone(),
            RedOp::Sum,
            self.extents.clone(),
            x.clone().mul(x),
            Some(fin),
        )
    }
}

/// `1 / sqrt(v + eps)`.
fn inv_std(v: Expr, d: DType, eps: f64) -> Expr {
    Expr::c(d, 1.0).div(v.add(Expr::c(d, eps)).sqrt())
}

/// Index of a statistic kept with size-1 `axes`, read at output element `Var(..)`.
fn stat_index(rank: usize, axes: &[usize]) -> Vec<Expr> {
    (0..rank)
        .map(|k| {
            if axes.contains(&k) {
                Expr::i(0)
            } else {
                Expr::var(k)
            }
        })
        .collect()
}

/// Input `i` broadcast (numpy, unidirectionally) to `shape`, converted to `d`.
fn param_bcast(cx: &LowerCx, i: usize, shape: &[usize], d: DType) -> Expr {
    cx.load_bcast(i, shape).cast(d)
}

fn check_bcast_to(cx: &InferCx, i: usize, shape: &[usize], what: &str) -> OpResult<()> {
    let p = &cx.input(i)?.shape;
    let ok = p.len() <= shape.len()
        && p.iter()
            .enumerate()
            .all(|(k, &x)| x == 1 || x == shape[k + shape.len() - p.len()]);
    if !ok {
        return Err(OpError::expected(
            format!("{what} broadcastable to {shape:?}"),
            format!("{p:?}"),
        ));
    }
    Ok(())
}

fn stash_dtype(stash: i64, d: DType) -> OpResult<DType> {
    match stash {
        1 => Ok(DType::F32),
        11 => Ok(DType::F64),
        other => {
            // A code outside i32 is no type (not a truncated one).
            let code = i32::try_from(other).unwrap_or(-1);
            if DType::from_onnx(code) == Some(d) {
                Ok(d)
            } else {
                Err(OpError::Unsupported(format!(
                    "stash_type {}",
                    DType::onnx_name(code)
                )))
            }
        }
    }
}

/// Passes `s` through, or converts it to `d` in a new stage.
fn cast_to(cx: &mut LowerCx, s: Src, ty: &TensorType) -> Src {
    if cx.dtype(s) == ty.dtype {
        return s;
    }
    let body = Expr::load(s, (0..ty.rank()).map(Expr::var).collect()).cast(ty.dtype);
    cx.stage(ty.clone(), body)
}

/// `LayerNormalization` (opset 17): normalizes over dimensions `axis..`.
#[derive(Debug)]
struct LayerNorm {
    axis: i64,
    epsilon: f64,
    stash_type: i64,
}

impl Operator for LayerNorm {
    fn op_type(&self) -> &'static str {
        "LayerNormalization"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, FLOATS)?;
        let x = cx.input(0)?.clone();
        let axis = norm_axis(self.axis, x.rank())?;
        check_dtype(cx, 1, FLOATS)?;
        check_bcast_to(cx, 1, &x.shape, "LayerNormalization scale")?;
        if cx.has(2) {
            check_dtype(cx, 2, FLOATS)?;
            check_bcast_to(cx, 2, &x.shape, "LayerNormalization bias")?;
        }
        let sd = stash_dtype(self.stash_type, d)?;
        let mut st = x.shape.clone();
        st[axis..].iter_mut().for_each(|s| *s = 1);
        Ok(vec![
            x.clone(),
            TensorType::new(sd, st.clone()),
            TensorType::new(sd, st),
        ])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let d = x.dtype;
        let axis = norm_axis(self.axis, x.rank())?;
        let axes: Vec<usize> = (axis..x.rank()).collect();
        let m = Moments::over_axes(d, &x.shape, &axes);
        let mean = m.mean(cx);
        let eps = self.epsilon;
        let inv = m.var(cx, mean, |v| inv_std(v, d, eps));
        let si = stat_index(x.rank(), &axes);
        let xv = Expr::load(Src::Arg(0), (0..x.rank()).map(Expr::var).collect());
        let mut y = xv
            .sub(Expr::load(mean, si.clone()))
            .mul(Expr::load(inv, si))
            .mul(param_bcast(cx, 1, &x.shape, d));
        if cx.has(2) {
            y = y.add(param_bcast(cx, 2, &x.shape, d));
        }
        let y = cx.stage(x.clone(), y);
        let mut outs = vec![y];
        for i in 1..cx.outputs.len().min(3) {
            let ty = cx.output(i).clone();
            outs.push(cast_to(cx, if i == 1 { mean } else { inv }, &ty));
        }
        Ok(outs)
    }
}

/// `RMSNormalization` (opset 23): `x / sqrt(mean(x^2) + eps) * scale` over dimensions `axis..`.
#[derive(Debug)]
struct RmsNorm {
    axis: i64,
    epsilon: f64,
}

impl Operator for RmsNorm {
    fn op_type(&self) -> &'static str {
        "RMSNormalization"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, FLOATS)?;
        let x = cx.input(0)?.clone();
        norm_axis(self.axis, x.rank())?;
        check_dtype(cx, 1, FLOATS)?;
        check_bcast_to(cx, 1, &x.shape, "RMSNormalization scale")?;
        Ok(vec![x])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let d = x.dtype;
        let axis = norm_axis(self.axis, x.rank())?;
        let axes: Vec<usize> = (axis..x.rank()).collect();
        let m = Moments::over_axes(d, &x.shape, &axes);
        let eps = self.epsilon;
        let inv = m.mean_sq(cx, |v| inv_std(v, d, eps));
        let si = stat_index(x.rank(), &axes);
        let xv = Expr::load(Src::Arg(0), (0..x.rank()).map(Expr::var).collect());
        let y = xv
            .mul(Expr::load(inv, si))
            .mul(param_bcast(cx, 1, &x.shape, d));
        Ok(vec![cx.stage(x, y)])
    }
}

/// Checks that input `i` is a vector of `n` floats.
fn check_vec(cx: &InferCx, i: usize, n: usize, what: &str) -> OpResult<()> {
    check_dtype(cx, i, FLOATS)?;
    let s = &cx.input(i)?.shape;
    if s.as_slice() != [n] {
        return Err(OpError::expected(
            format!("{what} of shape [{n}]"),
            format!("{s:?}"),
        ));
    }
    Ok(())
}

/// `InstanceNormalization`: per (batch, channel) normalization with per-channel scale and bias.
#[derive(Debug)]
struct InstanceNorm {
    epsilon: f64,
}

impl Operator for InstanceNorm {
    fn op_type(&self) -> &'static str {
        "InstanceNormalization"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, FLOATS)?;
        let x = cx.input(0)?.clone();
        rank_at_least(&x, 3, "InstanceNormalization input")?;
        check_vec(cx, 1, x.shape[1], "InstanceNormalization scale")?;
        check_vec(cx, 2, x.shape[1], "InstanceNormalization bias")?;
        Ok(vec![x])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let d = x.dtype;
        let axes: Vec<usize> = (2..x.rank()).collect();
        let m = Moments::over_axes(d, &x.shape, &axes);
        let mean = m.mean(cx);
        let eps = self.epsilon;
        let inv = m.var(cx, mean, |v| inv_std(v, d, eps));
        let si = stat_index(x.rank(), &axes);
        let c = vec![Expr::var(1)];
        let xv = Expr::load(Src::Arg(0), (0..x.rank()).map(Expr::var).collect());
        let y = xv
            .sub(Expr::load(mean, si.clone()))
            .mul(Expr::load(inv, si))
            .mul(Expr::load(Src::Arg(1), c.clone()).cast(d))
            .add(Expr::load(Src::Arg(2), c).cast(d));
        Ok(vec![cx.stage(x, y)])
    }
}

/// `GroupNormalization`: statistics per (batch, group of channels); scale and bias per channel
/// (opset 21) or per group (opset 18).
#[derive(Debug)]
struct GroupNorm {
    num_groups: usize,
    epsilon: f64,
    opset: i64,
}

impl GroupNorm {
    /// True if scale and bias hold one value per group rather than per channel.
    fn per_group(&self, c: usize, n: usize) -> OpResult<bool> {
        let g = self.num_groups;
        if n == c {
            Ok(false)
        } else if n == g && self.opset < 21 {
            Ok(true)
        } else {
            Err(OpError::expected(
                if self.opset < 21 {
                    format!("GroupNormalization scale/bias of shape [{g}] or [{c}]")
                } else {
                    format!("GroupNormalization scale/bias of shape [{c}]")
                },
                n,
            ))
        }
    }
}

impl Operator for GroupNorm {
    fn op_type(&self) -> &'static str {
        "GroupNormalization"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, FLOATS)?;
        let x = cx.input(0)?.clone();
        rank_at_least(&x, 2, "GroupNormalization input")?;
        let (c, g) = (x.shape[1], self.num_groups);
        if g == 0 || c % g != 0 {
            return Err(OpError::expected(
                format!("num_groups dividing the {c} channels"),
                g,
            ));
        }
        for i in [1, 2] {
            check_dtype(cx, i, FLOATS)?;
            let s = &cx.input(i)?.shape;
            if s.len() != 1 {
                return Err(OpError::expected(
                    "GroupNormalization scale/bias of rank 1",
                    format!("{s:?}"),
                ));
            }
            self.per_group(c, s[0])?;
        }
        Ok(vec![x])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let d = x.dtype;
        let (c, g) = (x.shape[1], self.num_groups);
        let cg = c / g;
        let mut extents = vec![cg];
        extents.extend(&x.shape[2..]);
        let mut xi = vec![
            Expr::var(0),
            Expr::var(1).mul(Expr::i(cg as i64)).add(Expr::rvar(0)),
        ];
        xi.extend((2..x.rank()).map(|k| Expr::rvar(k - 1)));
        let m = Moments {
            stat: TensorType::new(d, vec![x.shape[0], g]),
            extents,
            xi,
        };
        let mean = m.mean(cx);
        let eps = self.epsilon;
        let inv = m.var(cx, mean, |v| inv_std(v, d, eps));
        let grp = Expr::var(1).div(Expr::i(cg as i64));
        let si = vec![Expr::var(0), grp.clone()];
        let param = |i: usize| {
            let n = cx.input(i).shape[0];
            let idx = if n != c { grp.clone() } else { Expr::var(1) };
            Expr::load(Src::Arg(i as u32), vec![idx]).cast(d)
        };
        let (scale, bias) = (param(1), param(2));
        let xv = Expr::load(Src::Arg(0), (0..x.rank()).map(Expr::var).collect());
        let y = xv
            .sub(Expr::load(mean, si.clone()))
            .mul(Expr::load(inv, si))
            .mul(scale)
            .add(bias);
        Ok(vec![cx.stage(x, y)])
    }
}

/// `MeanVarianceNormalization`: `(x - mean) / (std + 1e-9)` over `axes`.
#[derive(Debug)]
struct Mvn {
    axes: Vec<i64>,
}

impl Mvn {
    fn axes(&self, rank: usize) -> OpResult<Vec<usize>> {
        let mut v = Vec::new();
        for &a in &self.axes {
            let a = norm_axis(a, rank)?;
            if v.contains(&a) {
                return Err(OpError::expected(
                    "distinct axes",
                    format!("{:?}", self.axes),
                ));
            }
            v.push(a);
        }
        Ok(v)
    }
}

impl Operator for Mvn {
    fn op_type(&self) -> &'static str {
        "MeanVarianceNormalization"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, FLOATS)?;
        let x = cx.input(0)?.clone();
        self.axes(x.rank())?;
        Ok(vec![x])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let d = x.dtype;
        let axes = self.axes(x.rank())?;
        let m = Moments::over_axes(d, &x.shape, &axes);
        let mean = m.mean(cx);
        let std = m.var(cx, mean, |v| v.sqrt().add(Expr::c(d, 1e-9)));
        let si = stat_index(x.rank(), &axes);
        let xv = Expr::load(Src::Arg(0), (0..x.rank()).map(Expr::var).collect());
        let y = xv
            .sub(Expr::load(mean, si.clone()))
            .div(Expr::load(std, si));
        Ok(vec![cx.stage(x, y)])
    }
}

/// `LRN`: local response normalization across channels.
#[derive(Debug)]
struct Lrn {
    alpha: f64,
    beta: f64,
    bias: f64,
    size: i64,
}

impl Operator for Lrn {
    fn op_type(&self) -> &'static str {
        "LRN"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, FLOATS)?;
        let x = cx.input(0)?.clone();
        rank_at_least(&x, 2, "LRN input")?;
        if self.size < 1 || self.size > MAX_DIM as i64 {
            return Err(OpError::expected("LRN size in [1, 2^48]", self.size));
        }
        Ok(vec![x])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let d = x.dtype;
        let c = x.shape[1] as i64;
        let lo = (self.size - 1) / 2;
        let ch = Expr::var(1).sub(Expr::i(lo)).add(Expr::rvar(0));
        let mut xi: Vec<Expr> = (0..x.rank()).map(Expr::var).collect();
        xi[1] = ch.clone();
        let v = Expr::load(Src::Arg(0), xi);
        let cond = ch.clone().ge(Expr::i(0)).and(ch.lt(Expr::i(c)));
        let body = Expr::select(cond, v.clone().mul(v), Expr::c(d, 0.0));
        let xv = Expr::load(Src::Arg(0), (0..x.rank()).map(Expr::var).collect());
        let den = Expr::c(d, self.bias)
            .add(Expr::c(d, self.alpha / self.size as f64).mul(Expr::Acc))
            .pow(Expr::c(d, self.beta));
        let fin = xv.div(den);
        Ok(vec![cx.reduce(
            x,
            RedOp::Sum,
            vec![self.size as usize],
            body,
            Some(fin),
        )])
    }
}

/// `BatchNormalization`, in inference or training mode.
#[derive(Debug)]
pub struct BatchNorm {
    /// Added to the variance.
    pub epsilon: f64,
    momentum: f64,
    /// Statistics come from the batch (and running statistics are output).
    training: bool,
    /// Output arity (opsets before 14: Y, mean, var, saved_mean, saved_var).
    n_outputs: usize,
}

impl BatchNorm {
    /// True if the parameters are per channel (`[C]`), false if per activation (`x.shape[1..]`,
    /// `spatial = 0` before opset 9).
    fn per_channel(x: &[usize], p: &[usize]) -> OpResult<bool> {
        if p == [x[1]] {
            Ok(true)
        } else if p == &x[1..] {
            Ok(false)
        } else {
            Err(OpError::expected(
                format!("BatchNormalization parameters of shape [{}]", x[1]),
                format!("{p:?}"),
            ))
        }
    }
}

impl Operator for BatchNorm {
    fn op_type(&self) -> &'static str {
        "BatchNormalization"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, FLOATS)?;
        let x = cx.input(0)?.clone();
        rank_at_least(&x, 2, "BatchNormalization input")?;
        for i in 1..5 {
            check_dtype(cx, i, FLOATS)?;
            let per_channel = Self::per_channel(&x.shape, &cx.input(i)?.shape)?;
            if self.training && !per_channel {
                return Err(OpError::Unsupported(
                    "BatchNormalization training mode with per-activation (spatial = 0) \
                     parameters"
                        .into(),
                ));
            }
        }
        let mut v = vec![x.clone()];
        if self.training {
            let c = x.shape[1];
            let td = cx.input(3)?.dtype;
            v.push(TensorType::new(td, vec![c]));
            v.push(TensorType::new(td, vec![c]));
            v.push(TensorType::new(td, vec![c]));
            v.push(TensorType::new(td, vec![c]));
            v.truncate(self.n_outputs.max(1));
        } else if self.n_outputs > 1 {
            return Err(OpError::Unsupported(
                "BatchNormalization statistics outputs in inference mode".into(),
            ));
        }
        Ok(v)
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let d = x.dtype;
        let r = x.rank();
        let xv = Expr::load(Src::Arg(0), (0..r).map(Expr::var).collect());
        let param = |cx: &LowerCx, i: usize| -> OpResult<Expr> {
            let per_channel = Self::per_channel(&x.shape, &cx.input(i).shape)?;
            let idx = if per_channel {
                vec![Expr::var(1)]
            } else {
                (1..r).map(Expr::var).collect()
            };
            Ok(Expr::load(Src::Arg(i as u32), idx).cast(d))
        };
        let (scale, bias) = (param(cx, 1)?, param(cx, 2)?);
        if !self.training {
            let (mean, var) = (param(cx, 3)?, param(cx, 4)?);
            let y = xv
                .sub(mean)
                .mul(scale.div(var.add(Expr::c(d, self.epsilon)).sqrt()))
                .add(bias);
            return Ok(vec![cx.stage(x, y)]);
        }
        // Batch statistics per channel.
        let mut extents = vec![x.shape[0]];
        extents.extend(&x.shape[2..]);
        let mut xi = vec![Expr::rvar(0), Expr::var(0)];
        xi.extend((2..r).map(|k| Expr::rvar(k - 1)));
        let c = x.shape[1];
        let m = Moments {
            stat: TensorType::new(d, vec![c]),
            extents,
            xi,
        };
        let mean = m.mean(cx);
        let var = m.var(cx, mean, |v| v);
        let ch = vec![Expr::var(1)];
        let y = xv
            .sub(Expr::load(mean, ch.clone()))
            .mul(scale.div(Expr::load(var, ch).add(Expr::c(d, self.epsilon)).sqrt()))
            .add(bias);
        let y = cx.stage(x, y);
        let mut outs = vec![y];
        let n_out = cx.outputs.len();
        if n_out > 1 {
            let td = cx.output(1).dtype;
            let running = |cx: &mut LowerCx, i: u32, stat: Src| {
                let old = Expr::load(Src::Arg(i), vec![Expr::var(0)]);
                let cur = Expr::load(stat, vec![Expr::var(0)]).cast(td);
                let body = old
                    .mul(Expr::c(td, self.momentum))
                    .add(cur.mul(Expr::c(td, 1.0 - self.momentum)));
                cx.stage(TensorType::new(td, vec![c]), body)
            };
            outs.push(running(cx, 3, mean));
            if n_out > 2 {
                outs.push(running(cx, 4, var));
            }
            let ty = TensorType::new(td, vec![c]);
            if n_out > 3 {
                outs.push(cast_to(cx, mean, &ty));
            }
            if n_out > 4 {
                outs.push(cast_to(cx, var, &ty));
            }
        }
        Ok(outs)
    }
}

fn batchnorm(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let training = if cx.opset >= 14 {
        cx.attrs.int("training_mode", 0)? != 0
    } else {
        cx.n_outputs > 1
    };
    if cx.opset < 9 && cx.attrs.int("spatial", 1)? == 0 && training {
        return Err(OpError::Unsupported(
            "BatchNormalization training mode with spatial = 0".into(),
        ));
    }
    Ok(Arc::new(BatchNorm {
        epsilon: cx.attrs.float("epsilon", 1e-5)? as f64,
        momentum: cx.attrs.float("momentum", 0.9)? as f64,
        training,
        n_outputs: cx.n_outputs,
    }))
}

/// A count attribute (`group`, `num_groups`): at least 1 (and at most [`MAX_DIM`]).
fn count_attr(v: i64, what: &str) -> OpResult<usize> {
    if v < 1 {
        return Err(OpError::expected(format!("{what} >= 1"), v));
    }
    dim_from_i64(v, what)
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("Conv", |cx: &OpCx| {
        Ok(Arc::new(Conv {
            win: Window::parse(cx)?,
            group: count_attr(cx.attrs.int("group", 1)?, "group")?,
        }))
    }),
    ("ConvTranspose", |cx: &OpCx| {
        Ok(Arc::new(ConvTranspose {
            win: Window::parse(cx)?,
            group: count_attr(cx.attrs.int("group", 1)?, "group")?,
            output_padding: cx.attrs.ints("output_padding")?,
            output_shape: cx.attrs.ints("output_shape")?,
        }))
    }),
    ("MaxPool", |cx: &OpCx| {
        Ok(Arc::new(MaxPool {
            win: Window::parse(cx)?,
            storage_order: cx.attrs.int("storage_order", 0)?,
            indices: cx.n_outputs > 1,
        }))
    }),
    ("AveragePool", |cx: &OpCx| {
        Ok(Arc::new(AveragePool {
            win: Window::parse(cx)?,
            count_include_pad: cx.attrs.int("count_include_pad", 0)? != 0,
        }))
    }),
    ("LpPool", lp_pool),
    ("GlobalAveragePool", |_: &OpCx| {
        Ok(Arc::new(GlobalPool { max: false }))
    }),
    ("GlobalMaxPool", |_: &OpCx| {
        Ok(Arc::new(GlobalPool { max: true }))
    }),
    ("BatchNormalization", batchnorm),
    ("LayerNormalization", |cx: &OpCx| {
        Ok(Arc::new(LayerNorm {
            axis: cx.attrs.int("axis", -1)?,
            epsilon: cx.attrs.float("epsilon", 1e-5)? as f64,
            stash_type: cx.attrs.int("stash_type", 1)?,
        }))
    }),
    ("RMSNormalization", |cx: &OpCx| {
        Ok(Arc::new(RmsNorm {
            axis: cx.attrs.int("axis", -1)?,
            epsilon: cx.attrs.float("epsilon", 1e-5)? as f64,
        }))
    }),
    ("InstanceNormalization", |cx: &OpCx| {
        Ok(Arc::new(InstanceNorm {
            epsilon: cx.attrs.float("epsilon", 1e-5)? as f64,
        }))
    }),
    ("GroupNormalization", |cx: &OpCx| {
        let g = cx
            .attrs
            .opt_int("num_groups")?
            .ok_or_else(|| OpError::expected("attribute num_groups", "none"))?;
        Ok(Arc::new(GroupNorm {
            num_groups: count_attr(g, "num_groups")?,
            epsilon: cx.attrs.float("epsilon", 1e-5)? as f64,
            opset: cx.opset,
        }))
    }),
    ("MeanVarianceNormalization", |cx: &OpCx| {
        Ok(Arc::new(Mvn {
            axes: cx.attrs.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]),
        }))
    }),
    ("LRN", |cx: &OpCx| {
        Ok(Arc::new(Lrn {
            alpha: cx.attrs.float("alpha", 1e-4)? as f64,
            beta: cx.attrs.float("beta", 0.75)? as f64,
            bias: cx.attrs.float("bias", 1.0)? as f64,
            size: cx
                .attrs
                .opt_int("size")?
                .ok_or_else(|| OpError::expected("attribute size", "none"))?,
        }))
    }),
];

/// The epsilon of an inference-mode BatchNormalization operator, or `None` for any other operator
/// (including training-mode batch normalization, whose statistics come from the batch).
pub fn batchnorm_epsilon(op: &dyn super::Operator) -> Option<f64> {
    op.as_any()
        .downcast_ref::<BatchNorm>()
        .filter(|b| !b.training)
        .map(|b| b.epsilon)
}

/// A `ConvTranspose` as a product and a fold: `Y = Col2Im(W^T X)`, the product's columns every
/// (output channel, kernel offset) of every input position, folded into the image as `Col2Im`
/// takes them (`passes::deconv`).
#[derive(Clone, Debug, PartialEq)]
pub struct DeconvFold {
    /// Kernel extents.
    pub kernel: Vec<usize>,
    /// Strides.
    pub strides: Vec<i64>,
    /// Dilations.
    pub dilations: Vec<i64>,
    /// Col2Im's pads: every dimension's start, then every dimension's end.
    pub pads: Vec<i64>,
    /// The output's spatial extents.
    pub image: Vec<usize>,
}

/// The fold of `op` when it is a `ConvTranspose` of one group over an input of spatial extents
/// `x` with kernel extents `w` whose output is Col2Im's image of exactly the input's positions
/// (non-negative pads at both ends, an output padding below the stride); `None` otherwise.
pub fn conv_transpose_fold(
    op: &dyn super::Operator,
    x: &[usize],
    w: &[usize],
) -> Option<DeconvFold> {
    let ct = op.as_any().downcast_ref::<ConvTranspose>()?;
    if ct.group != 1 || x.len() != w.len() {
        return None;
    }
    let geo = ct.geom(x, w).ok()?;
    let r = x.len();
    let mut pads = vec![0i64; 2 * r];
    for j in 0..r {
        let pe = geo.natural[j] - geo.out[j] as i64 - geo.pb[j];
        let dk = geo.dil[j] * (geo.kernel[j] as i64 - 1) + 1;
        // Col2Im's blocks over the padded image must be the input's positions.
        let padded = geo.out[j] as i64 + geo.pb[j] + pe;
        let blocks = (padded - dk).div_euclid(geo.strides[j]) + 1;
        if geo.pb[j] < 0 || pe < 0 || blocks != x[j] as i64 {
            return None;
        }
        pads[j] = geo.pb[j];
        pads[r + j] = pe;
    }
    Some(DeconvFold {
        kernel: geo.kernel,
        strides: geo.strides,
        dilations: geo.dil,
        pads,
        image: geo.out,
    })
}

/// The begin pads and output size of a convolution that F(4x4, 3x3) computes
/// ([`super::winograd`]): one group, a 3x3 kernel, stride and dilation 1, over a rank-4 input
/// `x` with weights `w`; `None` for any other.
pub fn winograd_geometry(
    op: &dyn super::Operator,
    x: &TensorType,
    w: &TensorType,
) -> Option<([usize; 2], [usize; 2])> {
    let conv = op.as_any().downcast_ref::<Conv>()?;
    if conv.group != 1 || x.rank() != 4 || w.rank() != 4 || w.shape[2..] != [3, 3] {
        return None;
    }
    let geo = conv.geom(x, w).ok()?;
    if geo.strides.iter().any(|&s| s != 1) || geo.dil.iter().any(|&d| d != 1) {
        return None;
    }
    let pads = [
        usize::try_from(geo.pb[0]).ok()?,
        usize::try_from(geo.pb[1]).ok()?,
    ];
    Some((pads, [geo.out[0], geo.out[1]]))
}

/// True for a Conv operator.
pub fn is_conv(op: &dyn super::Operator) -> bool {
    op.op_type() == "Conv"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1-row, `w`-wide pooling window geometry over a [1, 1, 1, w] input.
    fn pool(w: usize, k: i64, s: i64, d: i64, pads: [i64; 2], ceil: bool) -> Option<WindowOp> {
        let win = Window {
            auto_pad: AutoPad::NotSet,
            kernel: Some(vec![1, k]),
            strides: Some(vec![1, s]),
            dilations: Some(vec![1, d]),
            pads: Some(vec![0, pads[0], 0, pads[1]]),
            ceil_mode: ceil,
        };
        let geo = win.geom(&[1, w], None, true).ok()?;
        let x = TensorType::new(DType::F32, vec![1, 1, 1, w]);
        geo.window_op(WindowKind::AvgPoolExcludePad, &x, 1, 1)
    }

    /// What oneDNN's pooling refuses, or computes differently from ONNX, stays generated code.
    #[test]
    fn windows_onednn_cannot_express_are_refused() {
        // Plain, padded and ceil-mode windows map (ceil mode by a longer end padding).
        assert!(pool(8, 3, 1, 1, [1, 1], false).is_some());
        let ceil = pool(5, 2, 2, 1, [0, 0], true).expect("ceil mode");
        assert_eq!((ceil.ow, ceil.pr), (3, 1));
        // End padding as long as the window; a window with every point in the padding.
        assert!(pool(10, 2, 4, 1, [0, 2], false).is_none());
        assert!(pool(4, 2, 1, 1, [2, 0], false).is_none());
        // Dilated taps that skip the whole input.
        assert!(pool(2, 2, 1, 3, [1, 1], false).is_none());
    }
}
