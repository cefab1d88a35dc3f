//! Operators of the `misc` family: Resize / Upsample, Einsum, Attention, RotaryEmbedding, SwiGLU.
use std::sync::Arc;

use super::{
    check_dtype, dim_add, dim_from_f64, dim_from_i64, dim_mul, norm_axis, Constructor, InferCx,
    LowerCx, OpCx, OpKind, OpResult, Operator, FLOATS, MAX_DIM, NUMERIC,
};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src, UnOp};
use crate::tensor::{DType, Tensor, TensorType};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// An F64 constant.
fn f64c(v: f64) -> Expr {
    Expr::c(DType::F64, v)
}

/// `-inf` of `d`.
fn neg_inf(d: DType) -> Expr {
    Expr::c(d, f64::NEG_INFINITY)
}

/// True where `e` is `-inf`.
fn is_neg_inf(e: Expr) -> Expr {
    Expr::Un(UnOp::IsNegInf, Box::new(e))
}

/// `e` clamped to `[0, n - 1]` (I64).
fn clamp_index(e: Expr, n: usize) -> Expr {
    e.max(Expr::i(0)).min(Expr::i(n as i64 - 1))
}

/// The type of input `i`, if present.
fn in_ty(inputs: &[Option<TensorType>], i: usize) -> Option<&TensorType> {
    inputs.get(i).and_then(|t| t.as_ref())
}

/// True if input `i` is present and has at least one element.
fn nonempty(inputs: &[Option<TensorType>], i: usize) -> bool {
    in_ty(inputs, i).is_some_and(|t| t.numel() > 0)
}

/// Input `i`'s compile-time value, or a `NeedsConstant` error.
fn konst<'a>(
    consts: &'a [Option<Arc<Tensor>>],
    i: usize,
    what: &'static str,
) -> OpResult<&'a Tensor> {
    consts
        .get(i)
        .and_then(|t| t.as_deref())
        .ok_or(OpError::NeedsConstant {
            index: i,
            what,
            graph_inputs: vec![],
        })
}

/// Input `i`'s type or an error naming it.
fn need<'a>(inputs: &'a [Option<TensorType>], i: usize, what: &str) -> OpResult<&'a TensorType> {
    in_ty(inputs, i).ok_or_else(|| OpError::expected(format!("input {i} ({what})"), "none"))
}

// ---------------------------------------------------------------------------------------------
// Resize / Upsample
// ---------------------------------------------------------------------------------------------

/// Interpolation mode.
#[derive(Clone, Copy, Debug, PartialEq)]
enum RMode {
    Nearest,
    Linear,
    Cubic,
}

/// `coordinate_transformation_mode`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
}

/// `nearest_mode`; `Simple` is the rule of Resize-10 / Upsample (floor when upsampling, ceil
/// when downsampling).
#[derive(Clone, Copy, Debug, PartialEq)]
enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    Simple,
}

/// `keep_aspect_ratio_policy`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Aspect {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// Resize (opset 10, 11, 13, 18, 19) and Upsample (opset 7, 9, 10).
#[derive(Debug)]
struct Resize {
    op_type: &'static str,
    mode: RMode,
    coord: Coord,
    nearest: NearestMode,
    cubic_a: f64,
    exclude_outside: bool,
    extrapolation: f64,
    antialias: bool,
    axes: Option<Vec<i64>>,
    aspect: Aspect,
    /// Upsample-7's `scales` attribute.
    scales_attr: Option<Vec<f32>>,
    roi_input: Option<usize>,
    scales_input: Option<usize>,
    sizes_input: Option<usize>,
}

/// The resolved geometry of one Resize.
struct Plan {
    /// Scale per dimension.
    scales: Vec<f64>,
    /// Output size per dimension.
    out: Vec<usize>,
    /// Region of interest (start, end) per dimension.
    roi: Vec<(f64, f64)>,
    /// The dimensions to interpolate, in order.
    axes: Vec<usize>,
}

fn parse_mode(s: &str) -> OpResult<RMode> {
    match s.to_ascii_lowercase().as_str() {
        "nearest" | "nn" => Ok(RMode::Nearest),
        "linear" | "bilinear" => Ok(RMode::Linear),
        "cubic" => Ok(RMode::Cubic),
        other => Err(OpError::expected("mode nearest, linear or cubic", other)),
    }
}

fn resize_ctor(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let a = cx.attrs;
    let mode = parse_mode(&a.string("mode", "nearest")?)?;
    if cx.opset < 11 {
        if mode == RMode::Cubic {
            return Err(OpError::expected("mode nearest or linear", "cubic"));
        }
        return Ok(Arc::new(Resize {
            op_type: "Resize",
            mode,
            coord: Coord::Asymmetric,
            nearest: NearestMode::Simple,
            cubic_a: -0.75,
            exclude_outside: false,
            extrapolation: 0.0,
            antialias: false,
            axes: None,
            aspect: Aspect::Stretch,
            scales_attr: None,
            roi_input: None,
            scales_input: Some(1),
            sizes_input: None,
        }));
    }
    let coord = match a
        .string("coordinate_transformation_mode", "half_pixel")?
        .as_str()
    {
        "half_pixel" => Coord::HalfPixel,
        "half_pixel_symmetric" if cx.opset >= 19 => Coord::HalfPixelSymmetric,
        "pytorch_half_pixel" => Coord::PytorchHalfPixel,
        "align_corners" => Coord::AlignCorners,
        "asymmetric" => Coord::Asymmetric,
        "tf_crop_and_resize" => Coord::TfCropAndResize,
        "tf_half_pixel_for_nn" => {
            return Err(OpError::Unsupported(
                "Resize coordinate_transformation_mode tf_half_pixel_for_nn".into(),
            ))
        }
        other => {
            return Err(OpError::expected(
                "a valid coordinate_transformation_mode",
                other,
            ))
        }
    };
    let nearest = match a.string("nearest_mode", "round_prefer_floor")?.as_str() {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        other => return Err(OpError::expected("a valid nearest_mode", other)),
    };
    let aspect = match a.string("keep_aspect_ratio_policy", "stretch")?.as_str() {
        "stretch" => Aspect::Stretch,
        "not_larger" => Aspect::NotLarger,
        "not_smaller" => Aspect::NotSmaller,
        other => return Err(OpError::expected("a valid keep_aspect_ratio_policy", other)),
    };
    let antialias = a.int("antialias", 0)? != 0;
    if antialias && mode == RMode::Nearest {
        return Err(OpError::expected(
            "antialias only with linear or cubic mode",
            "nearest",
        ));
    }
    Ok(Arc::new(Resize {
        op_type: "Resize",
        mode,
        coord,
        nearest,
        cubic_a: a.float("cubic_coeff_a", -0.75)? as f64,
        exclude_outside: a.int("exclude_outside", 0)? != 0,
        extrapolation: a.float("extrapolation_value", 0.0)? as f64,
        antialias,
        axes: a.ints("axes")?,
        aspect,
        scales_attr: None,
        roi_input: Some(1),
        scales_input: Some(2),
        sizes_input: Some(3),
    }))
}

fn upsample_ctor(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    if cx.opset < 7 {
        return Err(OpError::Unsupported(format!(
            "Upsample-{} (experimental opset-1 form)",
            cx.opset
        )));
    }
    let mode = parse_mode(&cx.attrs.string("mode", "nearest")?)?;
    if mode == RMode::Cubic {
        return Err(OpError::expected("mode nearest or linear", "cubic"));
    }
    let scales_attr = if cx.opset < 9 {
        Some(
            cx.attrs
                .floats("scales")?
                .ok_or_else(|| OpError::expected("attribute `scales`", "none"))?,
        )
    } else {
        None
    };
    Ok(Arc::new(Resize {
        op_type: "Upsample",
        mode,
        coord: Coord::Asymmetric,
        nearest: NearestMode::Simple,
        cubic_a: -0.75,
        exclude_outside: false,
        extrapolation: 0.0,
        antialias: false,
        axes: None,
        aspect: Aspect::Stretch,
        roi_input: None,
        scales_input: if scales_attr.is_some() { None } else { Some(1) },
        scales_attr,
        sizes_input: None,
    }))
}

impl Resize {
    fn plan(
        &self,
        inputs: &[Option<TensorType>],
        consts: &[Option<Arc<Tensor>>],
    ) -> OpResult<Plan> {
        let x = need(inputs, 0, "X")?;
        let r = x.rank();
        let in_shape = &x.shape;
        let axes: Vec<usize> = match &self.axes {
            Some(ax) => {
                let mut v = Vec::new();
                for &a in ax {
                    let a = norm_axis(a, r)?;
                    if v.contains(&a) {
                        return Err(OpError::expected("distinct axes", format!("{ax:?}")));
                    }
                    v.push(a);
                }
                v
            }
            None => (0..r).collect(),
        };
        let has_sizes = self.sizes_input.is_some_and(|i| nonempty(inputs, i));
        let has_scales =
            self.scales_attr.is_some() || self.scales_input.is_some_and(|i| nonempty(inputs, i));
        let mut scales = vec![1.0f64; r];
        let mut out: Vec<usize> = in_shape.clone();
        if has_sizes && has_scales {
            return Err(OpError::expected(
                "only one of `scales` and `sizes`",
                "both",
            ));
        }
        if has_sizes {
            let i = self.sizes_input.unwrap();
            if in_ty(inputs, i).unwrap().dtype != DType::I64 {
                return Err(OpError::expected(
                    "sizes of type i64",
                    in_ty(inputs, i).unwrap().dtype,
                ));
            }
            let sizes = konst(consts, i, "sizes")?.to_i64();
            if sizes.len() != axes.len() {
                return Err(OpError::expected(
                    format!("{} sizes", axes.len()),
                    sizes.len(),
                ));
            }
            for (k, &a) in axes.iter().enumerate() {
                out[a] = dim_from_i64(sizes[k], "Resize sizes")?;
                scales[a] = sizes[k] as f64 / in_shape[a] as f64;
            }
            if self.aspect != Aspect::Stretch {
                let it = axes.iter().map(|&a| scales[a]);
                let s = if self.aspect == Aspect::NotLarger {
                    it.fold(f64::INFINITY, f64::min)
                } else {
                    it.fold(f64::NEG_INFINITY, f64::max)
                };
                for &a in &axes {
                    scales[a] = s;
                    // An empty dimension stays empty (whatever `s`, infinite from a 0 divisor).
                    out[a] = if in_shape[a] == 0 {
                        0
                    } else {
                        dim_from_f64(s * in_shape[a] as f64 + 0.5, "Resize output sizes")?
                    };
                }
            }
        } else if has_scales {
            let sc: Vec<f64> = match &self.scales_attr {
                Some(v) => v.iter().map(|&x| x as f64).collect(),
                None => konst(consts, self.scales_input.unwrap(), "scales")?.to_f64(),
            };
            if sc.len() != axes.len() {
                return Err(OpError::expected(
                    format!("{} scales", axes.len()),
                    sc.len(),
                ));
            }
            for (k, &a) in axes.iter().enumerate() {
                if sc[k].is_nan() || sc[k] <= 0.0 || !sc[k].is_finite() {
                    return Err(OpError::expected("positive scales", sc[k]));
                }
                scales[a] = sc[k];
                out[a] = dim_from_f64(sc[k] * in_shape[a] as f64, "Resize output sizes")?;
            }
        } else {
            return Err(OpError::expected("`scales` or `sizes`", "neither"));
        }
        for &a in &axes {
            if in_shape[a] == 0 && out[a] != 0 {
                return Err(OpError::expected(
                    format!("a non-empty input dimension {a} to resize"),
                    x,
                ));
            }
        }
        let mut roi = vec![(0.0, 1.0); r];
        if self.coord == Coord::TfCropAndResize {
            let i = self.roi_input.unwrap();
            if !nonempty(inputs, i) {
                return Err(OpError::expected(
                    "a non-empty `roi` for tf_crop_and_resize",
                    "none",
                ));
            }
            let v = konst(consts, i, "roi")?.to_f64();
            if v.len() != 2 * axes.len() {
                return Err(OpError::expected(
                    format!("{} roi values", 2 * axes.len()),
                    v.len(),
                ));
            }
            let n = axes.len();
            for (k, &a) in axes.iter().enumerate() {
                roi[a] = (v[k], v[n + k]);
            }
        }
        let axes: Vec<usize> = axes
            .into_iter()
            .filter(|&a| {
                let identity = (scales[a] - 1.0).abs() <= 1e-9 * scales[a].abs().max(1.0)
                    && out[a] == in_shape[a]
                    && roi[a] == (0.0, 1.0);
                !identity
            })
            .collect();
        // The filter of a linear/cubic axis (the antialiased one widens as the scale shrinks):
        // its taps per output position must stay in range. An empty output is never lowered.
        if self.mode != RMode::Nearest && !out.contains(&0) {
            for &a in &axes {
                let (n, _) = self.taps(scales[a])?;
                dim_mul(out[a], n, "Resize filter taps times output size")?;
            }
        }
        Ok(Plan {
            scales,
            out,
            roi,
            axes,
        })
    }

    /// The source coordinate of output coordinate `y` (F64) along one axis.
    fn x_ori(&self, y: Expr, scale: f64, w_in: usize, out_int: usize, roi: (f64, f64)) -> Expr {
        let out_w = scale * w_in as f64;
        let win = w_in as f64;
        let half = || y.clone().add(f64c(0.5)).div(f64c(scale)).sub(f64c(0.5));
        match self.coord {
            Coord::AlignCorners => {
                if out_w == 1.0 {
                    f64c(0.0)
                } else {
                    y.mul(f64c(win - 1.0)).div(f64c(out_w - 1.0))
                }
            }
            Coord::Asymmetric => y.div(f64c(scale)),
            Coord::TfCropAndResize => {
                let x = if out_w == 1.0 {
                    f64c((roi.1 - roi.0) * (win - 1.0) / 2.0)
                } else {
                    y.mul(f64c(roi.1 - roi.0))
                        .mul(f64c(win - 1.0))
                        .div(f64c(out_w - 1.0))
                };
                x.add(f64c(roi.0 * (win - 1.0)))
            }
            Coord::PytorchHalfPixel => {
                if out_w == 1.0 {
                    f64c(-0.5)
                } else {
                    half()
                }
            }
            Coord::HalfPixel => half(),
            Coord::HalfPixelSymmetric => {
                let adjustment = out_int as f64 / out_w;
                let center = win / 2.0;
                let offset = center * (1.0 - adjustment);
                f64c(offset)
                    .add(y.clone().add(f64c(0.5)).div(f64c(scale)))
                    .sub(f64c(0.5))
            }
        }
    }

    /// Number of taps and kernel scale of the linear/cubic filter for `scale`.
    fn taps(&self, scale: f64) -> OpResult<(usize, f64)> {
        let ks = if self.antialias { scale.min(1.0) } else { 1.0 };
        let reach = if self.mode == RMode::Cubic { 2.0 } else { 1.0 };
        let lo = (-reach / ks).floor();
        // `lo` in [-MAX_DIM, -1]: the count `2 - 2 * start` below is then in [2, 2 * MAX_DIM].
        if lo.is_nan() || lo < -(MAX_DIM as f64) {
            return Err(OpError::expected(
                "a Resize scale for which the antialias filter has at most 2^49 taps",
                scale,
            ));
        }
        let start = lo as i64 + 1;
        Ok(((2 - 2 * start) as usize, ks))
    }

    /// `floor(i * w_in / o)` for output position `i` (variable 0) when the nearest-neighbour index
    /// map `idx` (of variable 0, reading the source coordinate `xo` as local stage 0) takes exactly
    /// those values at every one of the `o` positions: `i / s` for an upsampling by a whole `s`,
    /// `i * s` for a downsampling by one, `i` for neither. Computed by evaluating the map, so the
    /// rewrite holds by construction; `None` for any other map.
    fn integer_map(xo: &Expr, idx: &Expr, w_in: usize, o: usize) -> Option<Expr> {
        let stage = |ty: TensorType, body: Expr| crate::te::Stage {
            name: "resize_index".into(),
            ty,
            body,
            reduce: None,
            materialize: false,
            part: 0,
            exec: crate::te::Exec::Generated,
            choice: None,
        };
        let xs = stage(TensorType::new(DType::F64, vec![o]), xo.clone());
        let is = stage(TensorType::new(DType::I64, vec![o]), idx.clone());
        let table = crate::te::eval_stages(&[xs, is], &[], &[Src::Local(1)]).pop()?;
        let (wi, oi) = (w_in as i64, o as i64);
        let ok = (0..oi).all(|i| table.get_f64(i as usize) as i64 == i * wi / oi);
        if !ok {
            return None;
        }
        Some(if wi == oi {
            Expr::var(0)
        } else if oi % wi == 0 {
            Expr::var(0).div(Expr::i(oi / wi))
        } else if wi % oi == 0 {
            Expr::var(0).mul(Expr::i(wi / oi))
        } else {
            Expr::var(0).mul(Expr::i(wi)).div(Expr::i(oi))
        })
    }

    /// The filter weight at distance `d` (F64, already scaled).
    fn kernel(&self, d: Expr) -> Expr {
        let x = d.abs();
        if self.mode == RMode::Linear {
            return f64c(1.0).sub(x).max(f64c(0.0)).min(f64c(1.0));
        }
        let a = self.cubic_a;
        let x2 = x.clone().mul(x.clone());
        let x3 = x2.clone().mul(x.clone());
        let near = f64c(a + 2.0)
            .mul(x3.clone())
            .sub(f64c(a + 3.0).mul(x2.clone()))
            .add(f64c(1.0));
        let far = f64c(a)
            .mul(x3)
            .sub(f64c(5.0 * a).mul(x2))
            .add(f64c(8.0 * a).mul(x.clone()))
            .sub(f64c(4.0 * a));
        Expr::select(
            x.clone().le(f64c(1.0)),
            near,
            Expr::select(x.lt(f64c(2.0)), far, f64c(0.0)),
        )
    }
}

impl Operator for Resize {
    fn op_type(&self) -> &'static str {
        self.op_type
    }

    fn kind(&self) -> OpKind {
        if self.mode == RMode::Nearest {
            OpKind::Injective
        } else {
            OpKind::Opaque
        }
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let d = check_dtype(cx, 0, NUMERIC)?;
        let p = self.plan(cx.inputs, cx.consts)?;
        Ok(vec![TensorType::new(d, p.out)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let p = self.plan(cx.inputs, cx.consts)?;
        let x = cx.input(0).clone();
        let out_d = x.dtype;
        if p.axes.is_empty() {
            return Ok(vec![Src::Arg(0)]);
        }
        if p.out.contains(&0) {
            // Nothing to interpolate (and no filter to size for a vanishing scale).
            let out = cx.output(0).clone();
            return Ok(vec![cx.stage(out, Expr::c(out_d, 0.0))]);
        }
        let mut cur = Src::Arg(0);
        let mut shape = x.shape.clone();
        let n_axes = p.axes.len();
        for (step, &a) in p.axes.iter().enumerate() {
            let last = step + 1 == n_axes;
            let w_in = shape[a];
            let o = p.out[a];
            let scale = p.scales[a];
            let mut new_shape = shape.clone();
            new_shape[a] = o;
            let cur_d = cx.dtype(cur);
            // Source coordinate per output position.
            let xo_body = self.x_ori(Expr::var(0).cast(DType::F64), scale, w_in, o, p.roi[a]);
            let xo = cx.stage(TensorType::new(DType::F64, vec![o]), xo_body.clone());
            let xo_at = |k: usize| Expr::load(xo, vec![Expr::var(k)]);
            let extrap = |v: Expr, d: DType| -> Expr {
                if self.coord != Coord::TfCropAndResize {
                    return v;
                }
                let x = xo_at(a);
                Expr::select(
                    x.clone().lt(f64c(0.0)).or(x.gt(f64c(w_in as f64 - 1.0))),
                    Expr::c(d, self.extrapolation),
                    v,
                )
            };
            // xf: the tap left of the coordinate (one less on exact integers), ratio in (0, 1].
            let xf_of = |x: Expr| -> Expr {
                let fl = x.clone().floor();
                Expr::select(x.eq(fl.clone()), fl.clone().sub(f64c(1.0)), fl)
            };
            let vars = |k: usize, idx: Expr| -> Vec<Expr> {
                (0..shape.len())
                    .map(|j| if j == k { idx.clone() } else { Expr::var(j) })
                    .collect()
            };
            if self.mode == RMode::Nearest {
                let x = Expr::load(xo, vec![Expr::var(0)]);
                let idx_f = match self.nearest {
                    NearestMode::Simple => {
                        if scale < 1.0 {
                            x.ceil()
                        } else {
                            x.floor()
                        }
                    }
                    NearestMode::Floor => x.floor(),
                    NearestMode::Ceil => x.ceil(),
                    NearestMode::RoundPreferFloor | NearestMode::RoundPreferCeil => {
                        let xf = xf_of(x.clone());
                        let r = x.sub(xf.clone());
                        let cond = if self.nearest == NearestMode::RoundPreferFloor {
                            r.le(f64c(0.5))
                        } else {
                            r.lt(f64c(0.5))
                        };
                        Expr::select(cond, xf.clone(), xf.add(f64c(1.0)))
                    }
                };
                let idx_body = clamp_index(idx_f.cast(DType::I64), w_in);
                // An index map that is an integer up- or downsampling (what nearest resizes by
                // whole factors are) is written as one: no per-element float arithmetic.
                let local = idx_body.map_src(&|s| if s == xo { Src::Local(0) } else { s });
                let idx = match Self::integer_map(&xo_body, &local, w_in, o) {
                    Some(e) => e.subst_vars(&[Expr::var(a)]),
                    None => {
                        let idx_s = cx.stage(TensorType::new(DType::I64, vec![o]), idx_body);
                        Expr::load(idx_s, vec![Expr::var(a)])
                    }
                };
                let body = Expr::load(cur, vars(a, idx));
                let body = extrap(body, cur_d);
                cur = cx.stage(TensorType::new(cur_d, new_shape.clone()), body);
                shape = new_shape;
                continue;
            }
            let (n, ks) = self.taps(scale)?;
            let first = 1 - (n as i64) / 2;
            let x = Expr::load(xo, vec![Expr::var(0)]);
            let xf = xf_of(x.clone());
            let base = cx.stage(
                TensorType::new(DType::I64, vec![o]),
                xf.clone().cast(DType::I64).add(Expr::i(first)),
            );
            let ratio = cx.stage(TensorType::new(DType::F64, vec![o]), x.sub(xf));
            // Raw weights per (output position, tap).
            let dist = Expr::var(1)
                .add(Expr::i(first))
                .cast(DType::F64)
                .sub(Expr::load(ratio, vec![Expr::var(0)]));
            let dist = if ks != 1.0 { dist.mul(f64c(ks)) } else { dist };
            let mut w = self.kernel(dist);
            if self.exclude_outside {
                let idx = Expr::load(base, vec![Expr::var(0)]).add(Expr::var(1));
                w = Expr::select(
                    idx.clone().lt(Expr::i(0)).or(idx.ge(Expr::i(w_in as i64))),
                    f64c(0.0),
                    w,
                );
            }
            let wraw = cx.stage(TensorType::new(DType::F64, vec![o, n]), w);
            let norm = self.antialias || self.exclude_outside;
            let wsum = norm.then(|| {
                cx.reduce(
                    TensorType::new(DType::F64, vec![o]),
                    RedOp::Sum,
                    vec![n],
                    Expr::load(wraw, vec![Expr::var(0), Expr::rvar(0)]),
                    Some(Expr::select(Expr::Acc.eq(f64c(0.0)), f64c(1.0), Expr::Acc)),
                )
            });
            // Accumulate in F64 except for the final float output.
            let acc_d = if last && out_d.is_float() {
                out_d
            } else {
                DType::F64
            };
            let src_idx = clamp_index(
                Expr::load(base, vec![Expr::var(a)]).add(Expr::rvar(0)),
                w_in,
            );
            let val = Expr::load(cur, vars(a, src_idx));
            let body = Expr::load(wraw, vec![Expr::var(a), Expr::rvar(0)])
                .mul(if cur_d == DType::F64 {
                    val
                } else {
                    val.cast(DType::F64)
                })
                .cast(acc_d);
            let mut fin = Expr::Acc;
            if let Some(ws) = wsum {
                fin = fin.div(Expr::load(ws, vec![Expr::var(a)]).cast(acc_d));
            }
            let fin = extrap(fin, acc_d);
            cur = cx.reduce(
                TensorType::new(acc_d, new_shape.clone()),
                RedOp::Sum,
                vec![n],
                body,
                Some(fin),
            );
            shape = new_shape;
        }
        if cx.dtype(cur) != out_d {
            let v = Expr::load(cur, (0..shape.len()).map(Expr::var).collect());
            let v = if out_d.is_int() { v.round() } else { v };
            let v = if out_d == DType::I32 {
                v.max(f64c(i32::MIN as f64)).min(f64c(i32::MAX as f64))
            } else {
                v
            };
            cur = cx.stage(TensorType::new(out_d, shape), v.cast(out_d));
        }
        Ok(vec![cur])
    }
}

// ---------------------------------------------------------------------------------------------
// Einsum
// ---------------------------------------------------------------------------------------------

/// One dimension label: a letter or the k-th broadcast (`...`) dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    Letter(u8),
    Ell(usize),
}

/// One term of the equation: letters with an optional ellipsis position.
#[derive(Clone, Debug)]
struct Term {
    letters: Vec<u8>,
    /// Index in `letters` where `...` stands.
    ell: Option<usize>,
}

fn parse_term(s: &str) -> OpResult<Term> {
    let mut letters = Vec::new();
    let mut ell = None;
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'.' {
            if b.len() < i + 3 || &b[i..i + 3] != b"..." || ell.is_some() {
                return Err(OpError::expected("a well-formed einsum term", s));
            }
            ell = Some(letters.len());
            i += 3;
        } else if b[i].is_ascii_alphabetic() {
            letters.push(b[i]);
            i += 1;
        } else {
            return Err(OpError::expected("letters or `...` in einsum terms", s));
        }
    }
    Ok(Term { letters, ell })
}

/// Einsum (opset 12, 28).
#[derive(Debug)]
struct Einsum {
    equation: String,
    inputs: Vec<Term>,
    /// Explicit output term.
    output: Option<Term>,
}

/// The resolved contraction.
struct EinsumPlan {
    /// Labels of every operand dimension.
    operand_labels: Vec<Vec<Label>>,
    out_labels: Vec<Label>,
    red_labels: Vec<Label>,
    size: Vec<(Label, usize)>,
}

impl EinsumPlan {
    fn size_of(&self, l: Label) -> usize {
        self.size
            .iter()
            .find(|(k, _)| *k == l)
            .map_or(1, |(_, s)| *s)
    }
}

fn einsum_ctor(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let eq: String = cx
        .attrs
        .string("equation", "")?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let inputs = lhs
        .split(',')
        .map(parse_term)
        .collect::<OpResult<Vec<_>>>()?;
    let output = rhs.map(parse_term).transpose()?;
    if inputs.len() != cx.n_inputs {
        return Err(OpError::expected(
            format!("{} inputs for equation `{eq}`", inputs.len()),
            cx.n_inputs,
        ));
    }
    Ok(Arc::new(Einsum {
        equation: eq,
        inputs,
        output,
    }))
}

impl Einsum {
    fn plan(&self, inputs: &[Option<TensorType>]) -> OpResult<EinsumPlan> {
        let mut shapes = Vec::new();
        for i in 0..self.inputs.len() {
            shapes.push(need(inputs, i, "operand")?.shape.clone());
        }
        // Broadcast dimensions per operand.
        let mut n_ell = 0;
        let mut operand_labels = Vec::new();
        let mut size: Vec<(Label, usize)> = Vec::new();
        let mut ell_count = Vec::new();
        for (t, s) in self.inputs.iter().zip(&shapes) {
            let e = match t.ell {
                Some(_) if s.len() >= t.letters.len() => s.len() - t.letters.len(),
                None if s.len() == t.letters.len() => 0,
                _ => {
                    return Err(OpError::expected(
                        format!("operand rank matching equation `{}`", self.equation),
                        format!("{s:?}"),
                    ))
                }
            };
            n_ell = n_ell.max(e);
            ell_count.push(e);
        }
        for ((t, s), &e) in self.inputs.iter().zip(&shapes).zip(&ell_count) {
            let mut labels = Vec::new();
            for (k, &c) in t.letters.iter().enumerate() {
                if t.ell == Some(k) {
                    labels.extend((n_ell - e..n_ell).map(Label::Ell));
                }
                labels.push(Label::Letter(c));
            }
            if t.ell == Some(t.letters.len()) {
                labels.extend((n_ell - e..n_ell).map(Label::Ell));
            }
            for (l, &d) in labels.iter().zip(s) {
                match size.iter_mut().find(|(k, _)| k == l) {
                    Some((_, sz)) => {
                        if *sz == 1 {
                            *sz = d;
                        } else if d != 1 && d != *sz {
                            return Err(OpError::expected(
                                format!("matching sizes for label {l:?} in `{}`", self.equation),
                                format!("{sz} and {d}"),
                            ));
                        }
                    }
                    None => size.push((*l, d)),
                }
            }
            operand_labels.push(labels);
        }
        let out_labels: Vec<Label> = match &self.output {
            Some(t) => {
                let mut v = Vec::new();
                for (k, &c) in t.letters.iter().enumerate() {
                    if t.ell == Some(k) {
                        v.extend((0..n_ell).map(Label::Ell));
                    }
                    v.push(Label::Letter(c));
                }
                if t.ell == Some(t.letters.len()) {
                    v.extend((0..n_ell).map(Label::Ell));
                }
                for (k, l) in v.iter().enumerate() {
                    if !size.iter().any(|(s, _)| s == l) || v[..k].contains(l) {
                        return Err(OpError::expected(
                            format!(
                                "output labels that occur once in the inputs of `{}`",
                                self.equation
                            ),
                            format!("{l:?}"),
                        ));
                    }
                }
                v
            }
            None => {
                let mut v: Vec<Label> = (0..n_ell).map(Label::Ell).collect();
                let mut letters: Vec<u8> = Vec::new();
                for t in &self.inputs {
                    for &c in &t.letters {
                        let count: usize = self
                            .inputs
                            .iter()
                            .map(|t| t.letters.iter().filter(|&&x| x == c).count())
                            .sum();
                        if count == 1 && !letters.contains(&c) {
                            letters.push(c);
                        }
                    }
                }
                letters.sort();
                v.extend(letters.into_iter().map(Label::Letter));
                v
            }
        };
        let red_labels = size
            .iter()
            .map(|(l, _)| *l)
            .filter(|l| !out_labels.contains(l))
            .collect();
        Ok(EinsumPlan {
            operand_labels,
            out_labels,
            red_labels,
            size,
        })
    }
}

/// A two-operand `Einsum` that is a (batched) matrix product, as [`einsum_as_matmul`] finds it:
/// `A` permuted to `[batch.., m.., k..]`, `B` to `[batch.., k.., n..]`, their product
/// `[batch.., m.., n..]` permuted by `out_perm` to the output's order. Each list holds sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct EinsumMatMul {
    /// The permutation of `A`'s dimensions to `[batch.., m.., k..]`.
    pub perm_a: Vec<usize>,
    /// The permutation of `B`'s dimensions to `[batch.., k.., n..]`.
    pub perm_b: Vec<usize>,
    /// Sizes of the batch labels (in `A`, `B` and the output).
    pub batch: Vec<usize>,
    /// Sizes of the labels of `A` and the output only.
    pub m: Vec<usize>,
    /// Sizes of the labels of `B` and the output only.
    pub n: Vec<usize>,
    /// Sizes of the contracted labels (in `A` and `B`, not in the output).
    pub k: Vec<usize>,
    /// Output dimension `i` is dimension `out_perm[i]` of `[batch.., m.., n..]`.
    pub out_perm: Vec<usize>,
}

/// `op` as a matrix product when it is an `Einsum` of two operands of shapes `a` and `b` that
/// contracts at least one label and keeps at least one of each side (`bik,bjk->bij`,
/// `ij,jk->ik`, `bhqd,bhkd->bhqk`): no label repeated in an operand, none broadcast, none summed
/// within one operand. `None` otherwise (the node keeps its loop nest).
pub fn einsum_as_matmul(op: &dyn Operator, a: &[usize], b: &[usize]) -> Option<EinsumMatMul> {
    let e = op.as_any().downcast_ref::<Einsum>()?;
    if e.inputs.len() != 2 {
        return None;
    }
    let types = [
        Some(TensorType::new(DType::F32, a.to_vec())),
        Some(TensorType::new(DType::F32, b.to_vec())),
    ];
    let p = e.plan(&types).ok()?;
    let (la, lb) = (&p.operand_labels[0], &p.operand_labels[1]);
    let distinct = |ls: &[Label]| ls.iter().enumerate().all(|(i, l)| !ls[..i].contains(l));
    let exact = |ls: &[Label], s: &[usize]| ls.iter().zip(s).all(|(&l, &d)| p.size_of(l) == d);
    if !distinct(la) || !distinct(lb) || !exact(la, a) || !exact(lb, b) {
        return None;
    }
    let out = &p.out_labels;
    let in_out = |l: &Label| out.contains(l);
    if la.iter().any(|l| !lb.contains(l) && !in_out(l))
        || lb.iter().any(|l| !la.contains(l) && !in_out(l))
    {
        return None;
    }
    // Batch, m and n labels in the output's order; contracted ones in A's.
    let batch: Vec<Label> = out
        .iter()
        .filter(|l| la.contains(l) && lb.contains(l))
        .copied()
        .collect();
    let m: Vec<Label> = out.iter().filter(|l| !lb.contains(l)).copied().collect();
    let n: Vec<Label> = out.iter().filter(|l| !la.contains(l)).copied().collect();
    let k: Vec<Label> = la.iter().filter(|l| !in_out(l)).copied().collect();
    if k.is_empty() || m.is_empty() || n.is_empty() {
        return None;
    }
    let pos = |ls: &[Label], l: &Label| ls.iter().position(|x| x == l).expect("a label");
    let order = |ls: &[Label], parts: [&[Label]; 3]| -> Vec<usize> {
        parts
            .iter()
            .flat_map(|part| part.iter().map(|l| pos(ls, l)))
            .collect()
    };
    let mid: Vec<Label> = batch.iter().chain(&m).chain(&n).copied().collect();
    let sizes = |ls: &[Label]| ls.iter().map(|&l| p.size_of(l)).collect();
    Some(EinsumMatMul {
        perm_a: order(la, [&batch, &m, &k]),
        perm_b: order(lb, [&batch, &k, &n]),
        batch: sizes(&batch),
        m: sizes(&m),
        n: sizes(&n),
        k: sizes(&k),
        out_perm: out.iter().map(|l| pos(&mid, l)).collect(),
    })
}

impl Operator for Einsum {
    fn op_type(&self) -> &'static str {
        "Einsum"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        if cx.inputs.len() != self.inputs.len() {
            return Err(OpError::expected(
                format!("{} operands", self.inputs.len()),
                cx.inputs.len(),
            ));
        }
        let d = check_dtype(cx, 0, NUMERIC)?;
        for i in 1..self.inputs.len() {
            if check_dtype(cx, i, NUMERIC)? != d {
                return Err(OpError::expected(
                    format!("operand {i} of type {d}"),
                    cx.input(i)?.dtype,
                ));
            }
        }
        let p = self.plan(cx.inputs)?;
        let shape: Vec<usize> = p.out_labels.iter().map(|&l| p.size_of(l)).collect();
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let p = self.plan(cx.inputs)?;
        let out = cx.output(0).clone();
        let index_of = |l: Label| -> Expr {
            if let Some(k) = p.out_labels.iter().position(|x| *x == l) {
                Expr::var(k)
            } else {
                Expr::rvar(p.red_labels.iter().position(|x| *x == l).unwrap())
            }
        };
        let mut body: Option<Expr> = None;
        for (i, labels) in p.operand_labels.iter().enumerate() {
            let shape = &cx.input(i).shape;
            let idx = labels
                .iter()
                .zip(shape)
                .map(|(&l, &d)| {
                    if d == 1 && p.size_of(l) != 1 {
                        Expr::i(0)
                    } else {
                        index_of(l)
                    }
                })
                .collect();
            let v = Expr::load(Src::Arg(i as u32), idx);
            body = Some(match body {
                None => v,
                Some(b) => b.mul(v),
            });
        }
        let body = body.expect("at least one operand");
        if p.red_labels.is_empty() {
            return Ok(vec![cx.stage(out, body)]);
        }
        let extents = p.red_labels.iter().map(|&l| p.size_of(l)).collect();
        Ok(vec![cx.reduce(out, RedOp::Sum, extents, body, None)])
    }
}

// ---------------------------------------------------------------------------------------------
// Attention
// ---------------------------------------------------------------------------------------------

/// The ONNX Attention operator (opset 23, 24, 25).
#[derive(Debug)]
struct Attention {
    is_causal: bool,
    q_heads: Option<i64>,
    kv_heads: Option<i64>,
    qk_mode: i64,
    scale: Option<f32>,
    softcap: f32,
    softmax_precision: Option<DType>,
    left_window: i64,
    right_window: i64,
    n_outputs: usize,
}

/// Resolved sizes of one Attention.
struct AttnDims {
    dtype: DType,
    three_d: bool,
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    past: usize,
    total: usize,
    dk: usize,
    dv: usize,
}

const ATT_MASK: usize = 3;
const ATT_PAST_K: usize = 4;
const ATT_PAST_V: usize = 5;
const ATT_NONPAD: usize = 6;

fn attention_ctor(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let a = cx.attrs;
    let softmax_precision = match a.opt_int("softmax_precision")? {
        None => None,
        // A code outside i32 is no type (not a truncated one).
        Some(code) => match DType::from_onnx(i32::try_from(code).unwrap_or(-1)) {
            Some(d) if d.is_float() => Some(d),
            _ => {
                return Err(OpError::Unsupported(format!(
                    "Attention softmax_precision {}",
                    DType::onnx_name(i32::try_from(code).unwrap_or(-1))
                )))
            }
        },
    };
    let qk_mode = a.int("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&qk_mode) {
        return Err(OpError::expected("qk_matmul_output_mode in 0..=3", qk_mode));
    }
    let (left_window, right_window) = if cx.opset >= 25 {
        (
            a.int("left_window_size", -1)?,
            a.int("right_window_size", -1)?,
        )
    } else {
        (-1, -1)
    };
    if left_window < -1 || right_window < -1 {
        return Err(OpError::expected(
            "window sizes of -1 or more",
            format!("{left_window}, {right_window}"),
        ));
    }
    Ok(Arc::new(Attention {
        is_causal: a.int("is_causal", 0)? != 0,
        q_heads: a.opt_int("q_num_heads")?,
        kv_heads: a.opt_int("kv_num_heads")?,
        qk_mode,
        scale: a.opt_float("scale")?,
        softcap: a.float("softcap", 0.0)?,
        softmax_precision,
        left_window,
        right_window,
        n_outputs: cx.n_outputs.max(1),
    }))
}

impl Attention {
    fn dims(&self, inputs: &[Option<TensorType>]) -> OpResult<AttnDims> {
        let q = need(inputs, 0, "Q")?;
        let k = need(inputs, 1, "K")?;
        let v = need(inputs, 2, "V")?;
        let dtype = q.dtype;
        if !FLOATS.contains(&dtype) {
            return Err(OpError::expected("Q of a float type", dtype));
        }
        if k.dtype != dtype || v.dtype != dtype {
            return Err(OpError::expected(
                format!("K and V of type {dtype}"),
                format!("{} and {}", k.dtype, v.dtype),
            ));
        }
        let rank = q.rank();
        if !(rank == 3 || rank == 4) || k.rank() != rank || v.rank() != rank {
            return Err(OpError::expected(
                "Q, K and V all 3D or all 4D",
                format!("{q}, {k}, {v}"),
            ));
        }
        let bad = |what: &str| OpError::expected(what.to_string(), format!("Q {q}, K {k}, V {v}"));
        let (three_d, b, hq, hkv, sq, skv, dk, dv);
        if rank == 3 {
            let (Some(qh), Some(kvh)) = (self.q_heads, self.kv_heads) else {
                return Err(OpError::expected(
                    "q_num_heads and kv_num_heads for 3D inputs",
                    "none",
                ));
            };
            if qh <= 0 || kvh <= 0 {
                return Err(OpError::expected(
                    "positive head counts",
                    format!("{qh}, {kvh}"),
                ));
            }
            let (qh, kvh) = (
                dim_from_i64(qh, "q_num_heads")?,
                dim_from_i64(kvh, "kv_num_heads")?,
            );
            if q.shape[2] % qh != 0 || k.shape[2] % kvh != 0 || v.shape[2] % kvh != 0 {
                return Err(bad("hidden sizes divisible by the head counts"));
            }
            three_d = true;
            b = q.shape[0];
            hq = qh;
            hkv = kvh;
            sq = q.shape[1];
            skv = k.shape[1];
            dk = q.shape[2] / qh;
            if k.shape[2] / kvh != dk {
                return Err(bad("equal Q and K head sizes"));
            }
            dv = v.shape[2] / kvh;
            if k.shape[0] != b || v.shape[0] != b || v.shape[1] != skv {
                return Err(bad("matching batch and sequence sizes"));
            }
        } else {
            three_d = false;
            b = q.shape[0];
            hq = q.shape[1];
            hkv = k.shape[1];
            sq = q.shape[2];
            skv = k.shape[2];
            dk = q.shape[3];
            dv = v.shape[3];
            if k.shape[0] != b
                || v.shape[0] != b
                || v.shape[1] != hkv
                || v.shape[2] != skv
                || k.shape[3] != dk
            {
                return Err(bad("matching batch, head, sequence and head sizes"));
            }
        }
        if hkv == 0 || hq % hkv != 0 {
            return Err(bad("q_num_heads a multiple of kv_num_heads"));
        }
        let has_pk = in_ty(inputs, ATT_PAST_K).is_some();
        let has_pv = in_ty(inputs, ATT_PAST_V).is_some();
        if has_pk != has_pv {
            return Err(OpError::expected(
                "past_key and past_value together",
                "only one",
            ));
        }
        let mut past = 0;
        if has_pk {
            let pk = in_ty(inputs, ATT_PAST_K).unwrap();
            let pv = in_ty(inputs, ATT_PAST_V).unwrap();
            past = pk.shape.get(2).copied().unwrap_or(0);
            if pk.dtype != dtype
                || pv.dtype != dtype
                || pk.shape != [b, hkv, past, dk]
                || pv.shape != [b, hkv, past, dv]
            {
                return Err(OpError::expected(
                    format!("past_key [{b},{hkv},P,{dk}] and past_value [{b},{hkv},P,{dv}]"),
                    format!("{pk} and {pv}"),
                ));
            }
        }
        let total = dim_add(past, skv, "past plus current sequence length")?;
        if let Some(m) = in_ty(inputs, ATT_MASK) {
            if m.dtype != DType::Bool && m.dtype != dtype {
                return Err(OpError::expected(
                    format!("attn_mask of type bool or {dtype}"),
                    m.dtype,
                ));
            }
            let full = [b, hq, sq, total];
            let r = m.rank();
            if r == 0 || r > 4 {
                return Err(OpError::expected("attn_mask of rank 1 to 4", m));
            }
            for (k, &d) in m.shape.iter().enumerate() {
                let want = full[4 - r + k];
                let ok = if k == r - 1 {
                    d <= want
                } else {
                    d == 1 || d == want
                };
                if !ok {
                    return Err(OpError::expected(
                        format!("attn_mask broadcastable to {full:?}"),
                        m,
                    ));
                }
            }
        }
        if let Some(n) = in_ty(inputs, ATT_NONPAD) {
            if has_pk {
                return Err(OpError::expected(
                    "nonpad_kv_seqlen without past_key/past_value",
                    "both",
                ));
            }
            if n.dtype != DType::I64 || n.shape != [b] {
                return Err(OpError::expected(
                    format!("nonpad_kv_seqlen of type i64[{b}]"),
                    n,
                ));
            }
        }
        Ok(AttnDims {
            dtype,
            three_d,
            b,
            hq,
            hkv,
            sq,
            past,
            total,
            dk,
            dv,
        })
    }

    /// Loads element `(b, h, s, d)` of Q/K/V (input `i`, head size `hd`) in the 4D layout.
    fn load_bhsd(three_d: bool, i: u32, hd: usize, b: Expr, h: Expr, s: Expr, d: Expr) -> Expr {
        if three_d {
            Expr::load(Src::Arg(i), vec![b, s, h.mul(Expr::i(hd as i64)).add(d)])
        } else {
            Expr::load(Src::Arg(i), vec![b, h, s, d])
        }
    }

    /// The present key/value cache: past concatenated with the current K (`i` = 1) or V (2).
    fn present(&self, cx: &mut LowerCx, dm: &AttnDims, i: u32, hd: usize) -> Src {
        if dm.past == 0 && !dm.three_d {
            return Src::Arg(i);
        }
        let past_in = if i == 1 { ATT_PAST_K } else { ATT_PAST_V } as u32;
        let v = |k: usize| Expr::var(k);
        let cur = Self::load_bhsd(
            dm.three_d,
            i,
            hd,
            v(0),
            v(1),
            v(2).sub(Expr::i(dm.past as i64)),
            v(3),
        );
        let body = if dm.past > 0 {
            Expr::select(
                v(2).lt(Expr::i(dm.past as i64)),
                Expr::load(Src::Arg(past_in), vec![v(0), v(1), v(2), v(3)]),
                cur,
            )
        } else {
            cur
        };
        cx.stage(
            TensorType::new(dm.dtype, vec![dm.b, dm.hkv, dm.total, hd]),
            body,
        )
    }

    /// The additive bias at `(b, h, i, j)` = `Var(0..4)`, if any masking applies.
    fn bias(&self, cx: &LowerCx, dm: &AttnDims) -> Option<Expr> {
        let d = dm.dtype;
        let j = Expr::var(3);
        let i = Expr::var(2);
        let mask = in_ty(cx.inputs, ATT_MASK).map(|m| {
            let r = m.rank();
            let idx: Vec<Expr> = m
                .shape
                .iter()
                .enumerate()
                .map(|(k, &n)| {
                    if n == 1 && k != r - 1 {
                        Expr::i(0)
                    } else {
                        Expr::var(4 - r + k)
                    }
                })
                .collect();
            let last = m.shape[r - 1];
            let load = Expr::load(Src::Arg(ATT_MASK as u32), idx);
            let val = if m.dtype == DType::Bool {
                Expr::select(load, Expr::c(d, 0.0), neg_inf(d))
            } else {
                load
            };
            if last < dm.total {
                Expr::select(j.clone().lt(Expr::i(last as i64)), val, neg_inf(d))
            } else {
                val
            }
        });
        let nonpad = in_ty(cx.inputs, ATT_NONPAD)
            .is_some()
            .then(|| Expr::load(Src::Arg(ATT_NONPAD as u32), vec![Expr::var(0)]));
        let offset = if dm.past > 0 {
            Expr::i(dm.past as i64)
        } else if let Some(n) = &nonpad {
            n.clone().sub(Expr::i(dm.sq as i64))
        } else {
            Expr::i(0)
        };
        let pos = i.add(offset);
        let mut allowed: Option<Expr> = None;
        let mut and = |c: Expr| {
            allowed = Some(match allowed.take() {
                None => c,
                Some(a) => a.and(c),
            })
        };
        if self.is_causal {
            and(j.clone().le(pos.clone()));
        }
        if self.left_window >= 0 {
            and(pos.clone().sub(j.clone()).le(Expr::i(self.left_window)));
        }
        if self.right_window >= 0 {
            and(j.clone().sub(pos.clone()).le(Expr::i(self.right_window)));
        }
        if let Some(n) = nonpad {
            and(j.clone().lt(n));
        }
        match (mask, allowed) {
            (Some(m), Some(a)) => Some(Expr::select(a, m, neg_inf(d))),
            (Some(m), None) => Some(m),
            (None, Some(a)) => Some(Expr::select(a, Expr::c(d, 0.0), neg_inf(d))),
            (None, None) => None,
        }
    }
}

impl Operator for Attention {
    fn op_type(&self) -> &'static str {
        "Attention"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let dm = self.dims(cx.inputs)?;
        let d = dm.dtype;
        let y = if dm.three_d {
            vec![
                dm.b,
                dm.sq,
                dim_mul(dm.hq, dm.dv, "Attention output hidden size")?,
            ]
        } else {
            vec![dm.b, dm.hq, dm.sq, dm.dv]
        };
        let all = vec![
            TensorType::new(d, y),
            TensorType::new(d, vec![dm.b, dm.hkv, dm.total, dm.dk]),
            TensorType::new(d, vec![dm.b, dm.hkv, dm.total, dm.dv]),
            TensorType::new(d, vec![dm.b, dm.hq, dm.sq, dm.total]),
        ];
        Ok(all.into_iter().take(self.n_outputs.min(4)).collect())
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let dm = self.dims(cx.inputs)?;
        let d = dm.dtype;
        let sp = self.softmax_precision.unwrap_or(d);
        let v = |k: usize| Expr::var(k);
        let group = dm.hq / dm.hkv;
        let kv_head = |h: Expr| {
            if group == 1 {
                h
            } else {
                h.div(Expr::i(group as i64))
            }
        };
        let pk = self.present(cx, &dm, 1, dm.dk);
        let pv = self.present(cx, &dm, 2, dm.dv);
        let scores_ty = TensorType::new(d, vec![dm.b, dm.hq, dm.sq, dm.total]);
        let row_ty = TensorType::new(sp, vec![dm.b, dm.hq, dm.sq]);

        // Scores: (Q * sqrt(scale)) . (K * sqrt(scale)), then softcap.
        let scale = match self.scale {
            Some(s) => s as f64,
            None => 1.0 / (dm.dk as f64).sqrt(),
        };
        let s = Expr::c(d, scale.sqrt());
        let q = Self::load_bhsd(dm.three_d, 0, dm.dk, v(0), v(1), v(2), Expr::rvar(0));
        let k = Expr::load(pk, vec![v(0), kv_head(v(1)), v(3), Expr::rvar(0)]);
        let body = q.mul(s.clone()).mul(k.mul(s));
        let fin = (self.softcap > 0.0).then(|| {
            let c = Expr::c(d, self.softcap as f64);
            Expr::Acc.div(c.clone()).tanh().mul(c)
        });
        let scores = cx.reduce(scores_ty.clone(), RedOp::Sum, vec![dm.dk], body, fin);
        let at = |s: Src| Expr::load(s, vec![v(0), v(1), v(2), v(3)]);
        let row = |s: Src| Expr::load(s, vec![v(0), v(1), v(2)]);
        let at_r = |s: Src| Expr::load(s, vec![v(0), v(1), v(2), Expr::rvar(0)]);

        // Bias: mask, causal, window and padding.
        let bias = self.bias(cx, &dm).map(|b| cx.stage(scores_ty.clone(), b));
        let qkb = match bias {
            Some(b) => cx.stage(scores_ty.clone(), at(scores).add(at(b))),
            None => scores,
        };

        // Softmax with fully-masked rows mapped to zero.
        let x_r = if sp == d {
            at_r(qkb)
        } else {
            at_r(qkb).cast(sp)
        };
        let mx = cx.reduce(
            row_ty.clone(),
            RedOp::Max,
            vec![dm.total],
            x_r,
            Some(Expr::select(
                is_neg_inf(Expr::Acc),
                Expr::c(sp, 0.0),
                Expr::Acc,
            )),
        );
        let x = if sp == d { at(qkb) } else { at(qkb).cast(sp) };
        let ex = cx.stage(
            TensorType::new(sp, scores_ty.shape.clone()),
            x.sub(row(mx)).exp_nonpos(),
        );
        let sum = cx.reduce(
            row_ty,
            RedOp::Sum,
            vec![dm.total],
            at_r(ex),
            Some(Expr::select(
                Expr::Acc.eq(Expr::c(sp, 0.0)),
                Expr::c(sp, 1.0),
                Expr::Acc,
            )),
        );
        let mut p = at(ex).div(row(sum));
        if sp != d {
            p = p.cast(d);
        }
        if let Some(b) = bias {
            let masked = cx.reduce(
                TensorType::new(d, vec![dm.b, dm.hq, dm.sq]),
                RedOp::Max,
                vec![dm.total],
                at_r(b),
                None,
            );
            p = Expr::select(is_neg_inf(row(masked)), Expr::c(d, 0.0), p);
        }
        let probs = cx.stage(scores_ty, p);

        // Weighted sum of values.
        let (y_shape, bi, hi, ii, dvi) = if dm.three_d {
            let dvn = Expr::i(dm.dv as i64);
            (
                vec![dm.b, dm.sq, dm.hq * dm.dv],
                v(0),
                v(2).div(dvn.clone()),
                v(1),
                v(2).fmod(dvn),
            )
        } else {
            (vec![dm.b, dm.hq, dm.sq, dm.dv], v(0), v(1), v(2), v(3))
        };
        let pr = Expr::load(probs, vec![bi.clone(), hi.clone(), ii, Expr::rvar(0)]);
        let vv = Expr::load(pv, vec![bi, kv_head(hi), Expr::rvar(0), dvi]);
        let y = cx.reduce(
            TensorType::new(d, y_shape),
            RedOp::Sum,
            vec![dm.total],
            pr.mul(vv),
            None,
        );
        let qk_out = match self.qk_mode {
            0 | 1 => scores,
            2 => qkb,
            _ => probs,
        };
        let outs = [y, pk, pv, qk_out];
        Ok(outs.into_iter().take(self.n_outputs.min(4)).collect())
    }
}

// ---------------------------------------------------------------------------------------------
// RotaryEmbedding
// ---------------------------------------------------------------------------------------------

/// RotaryEmbedding (opset 23).
#[derive(Debug)]
struct Rotary {
    interleaved: bool,
    rotary_dim: i64,
    num_heads: i64,
}

/// Resolved sizes of one RotaryEmbedding.
struct RotDims {
    head: usize,
    rot: usize,
}

impl Rotary {
    fn dims(&self, inputs: &[Option<TensorType>]) -> OpResult<RotDims> {
        let x = need(inputs, 0, "X")?;
        let d = x.dtype;
        if !FLOATS.contains(&d) {
            return Err(OpError::expected("X of a float type", d));
        }
        let (b, s, head) = match x.rank() {
            4 => (x.shape[0], x.shape[2], x.shape[3]),
            3 => {
                if self.num_heads <= 0 {
                    return Err(OpError::expected(
                        "num_heads for a 3D input",
                        self.num_heads,
                    ));
                }
                let nh = self.num_heads as usize;
                if x.shape[2] % nh != 0 {
                    return Err(OpError::expected(
                        format!("hidden size divisible by num_heads {nh}"),
                        x.shape[2],
                    ));
                }
                (x.shape[0], x.shape[1], x.shape[2] / nh)
            }
            _ => return Err(OpError::expected("X of rank 3 or 4", x)),
        };
        let rot = if self.rotary_dim > 0 {
            self.rotary_dim as usize
        } else {
            head
        };
        if rot > head || rot % 2 != 0 {
            return Err(OpError::expected(
                format!("an even rotary_embedding_dim <= head size {head}"),
                rot,
            ));
        }
        let half = rot / 2;
        let cos = need(inputs, 1, "cos_cache")?;
        let sin = need(inputs, 2, "sin_cache")?;
        if cos.dtype != d || sin.dtype != d || cos.shape != sin.shape {
            return Err(OpError::expected(
                format!("cos_cache and sin_cache of type {d} and equal shapes"),
                format!("{cos} and {sin}"),
            ));
        }
        if let Some(p) = in_ty(inputs, 3) {
            if p.dtype != DType::I64 || p.shape != [b, s] {
                return Err(OpError::expected(
                    format!("position_ids of type i64[{b},{s}]"),
                    p,
                ));
            }
            if cos.rank() != 2 || cos.shape[1] != half {
                return Err(OpError::expected(
                    format!("caches of shape [max_position, {half}]"),
                    cos,
                ));
            }
        } else if cos.shape != [b, s, half] {
            return Err(OpError::expected(
                format!("caches of shape [{b},{s},{half}] without position_ids"),
                cos,
            ));
        }
        Ok(RotDims { head, rot })
    }
}

impl Operator for Rotary {
    fn op_type(&self) -> &'static str {
        "RotaryEmbedding"
    }

    fn kind(&self) -> OpKind {
        OpKind::Injective
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        self.dims(cx.inputs)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let rd = self.dims(cx.inputs)?;
        let xt = cx.input(0).clone();
        let rank = xt.rank();
        let last = rank - 1;
        let (bv, sv) = if rank == 4 {
            (Expr::var(0), Expr::var(2))
        } else {
            (Expr::var(0), Expr::var(1))
        };
        let dpos = if rank == 4 {
            Expr::var(3)
        } else {
            Expr::var(2).fmod(Expr::i(rd.head as i64))
        };
        let x_at = |delta: i64| {
            let idx = (0..rank)
                .map(|k| {
                    if k == last {
                        Expr::var(k).add(Expr::i(delta))
                    } else {
                        Expr::var(k)
                    }
                })
                .collect();
            Expr::load(Src::Arg(0), idx)
        };
        let has_pos = cx.has(3);
        let max_pos = cx.input(1).shape[0];
        let d = xt.dtype;
        let cache = |i: u32, j: Expr| -> Expr {
            if has_pos {
                let pos = Expr::load(Src::Arg(3), vec![bv.clone(), sv.clone()]);
                Expr::select(
                    pos.clone()
                        .ge(Expr::i(0))
                        .and(pos.clone().lt(Expr::i(max_pos as i64))),
                    Expr::load(Src::Arg(i), vec![pos, j]),
                    Expr::c(d, 0.0),
                )
            } else {
                Expr::load(Src::Arg(i), vec![bv.clone(), sv.clone(), j])
            }
        };
        let half = (rd.rot / 2) as i64;
        let (lo_cond, j_lo, j_hi, off) = if self.interleaved {
            (
                dpos.clone().fmod(Expr::i(2)).eq(Expr::i(0)),
                dpos.clone().div(Expr::i(2)),
                dpos.clone().div(Expr::i(2)),
                1,
            )
        } else {
            (
                dpos.clone().lt(Expr::i(half)),
                dpos.clone(),
                dpos.clone().sub(Expr::i(half)),
                half,
            )
        };
        // real = cos * x1 - sin * x2 ; imag = sin * x1 + cos * x2
        let real = cache(1, j_lo.clone())
            .mul(x_at(0))
            .sub(cache(2, j_lo).mul(x_at(off)));
        let imag = cache(2, j_hi.clone())
            .mul(x_at(-off))
            .add(cache(1, j_hi).mul(x_at(0)));
        let mut body = Expr::select(lo_cond, real, imag);
        if rd.rot < rd.head {
            body = Expr::select(dpos.lt(Expr::i(rd.rot as i64)), body, x_at(0));
        }
        Ok(vec![cx.stage(xt, body)])
    }
}

// ---------------------------------------------------------------------------------------------
// SwiGLU
// ---------------------------------------------------------------------------------------------

/// SwiGLU (opset 28): `A * sigmoid(alpha * A) * B`.
#[derive(Debug)]
struct SwiGlu {
    alpha: f32,
}

impl Operator for SwiGlu {
    fn op_type(&self) -> &'static str {
        "SwiGLU"
    }

    fn kind(&self) -> OpKind {
        OpKind::Elementwise
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        check_dtype(cx, 0, FLOATS)?;
        let a = cx.input(0)?;
        let b = cx.input(1)?;
        if a != b {
            return Err(OpError::expected(
                format!("B of the same type and shape as A ({a})"),
                b,
            ));
        }
        Ok(vec![a.clone()])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let t = cx.output(0).clone();
        let d = t.dtype;
        let idx: Vec<Expr> = (0..t.rank()).map(Expr::var).collect();
        let a = Expr::load(Src::Arg(0), idx.clone());
        let b = Expr::load(Src::Arg(1), idx);
        let one = Expr::c(d, 1.0);
        let sig = one
            .clone()
            .div(one.add(Expr::c(d, -(self.alpha as f64)).mul(a.clone()).exp()));
        Ok(vec![cx.stage(t, a.mul(sig).mul(b))])
    }
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("Resize", resize_ctor),
    ("Upsample", upsample_ctor),
    ("Einsum", einsum_ctor),
    ("Attention", attention_ctor),
    ("RotaryEmbedding", |cx| {
        Ok(Arc::new(Rotary {
            interleaved: cx.attrs.int("interleaved", 0)? != 0,
            rotary_dim: cx.attrs.int("rotary_embedding_dim", 0)?,
            num_heads: cx.attrs.int("num_heads", 0)?,
        }))
    }),
    ("SwiGLU", |cx| {
        Ok(Arc::new(SwiGlu {
            alpha: cx.attrs.float("alpha", 1.0)?,
        }))
    }),
];
