//! `Col2Im`, `MaxUnpool`, `DeformConv` and `RoiAlign`: the window and region operators of the
//! `image` family (the parent module holds the sampling helpers they share with `GridSample`).
use std::sync::Arc;

use crate::ops::OpKind;

use super::{
    all, balanced_sum, clamp_index, const_list, dims_attr, icx, to_index, vars, zero, GridSample,
    Interp, Padding, MAX_TAPS,
};
use crate::error::OpError;
use crate::ops::{
    check_arity as arity, check_dtype, dim_from_f64, dim_from_i64, shape_numel, InferCx, LowerCx,
    OpCx, OpResult, Operator, FLOATS, MAX_DIM, NUMERIC,
};
use crate::te::{Expr, RedOp, Src};
use crate::tensor::{DType, TensorType};

// ---------------------------------------------------------------------------------------------
// Col2Im
// ---------------------------------------------------------------------------------------------

/// `Col2Im`: column blocks `(N, C * prod(block), L)` summed back into an image `(N, C, dims..)`
/// (constant inputs `image_shape` and `block_shape`); each image element reduces over the block
/// positions whose column lands on it.
#[derive(Debug)]
struct Col2Im {
    strides: Option<Vec<i64>>,
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
}

/// Col2Im's resolved geometry.
struct Col2ImGeom {
    image: Vec<usize>,
    block: Vec<usize>,
    strides: Vec<i64>,
    dilations: Vec<i64>,
    pads: Vec<i64>,
    /// Blocks along each dimension.
    blocks: Vec<usize>,
    /// Channels.
    c: usize,
}

impl Col2Im {
    fn geom(&self, cx: &InferCx) -> OpResult<Col2ImGeom> {
        let x = cx.input(0)?;
        let image = const_list(cx, 1, "Col2Im's image_shape", None)?;
        let r = image.len();
        let block = const_list(cx, 2, "Col2Im's block_shape", Some(r))?;
        if r == 0 || x.rank() != 3 {
            return Err(OpError::expected(
                "input (N, C * prod(block_shape), L) and a non-empty image_shape",
                format!("{x} and {image:?}"),
            ));
        }
        let pos = |v: &[i64], what: &str| -> OpResult<Vec<usize>> {
            v.iter()
                .map(|&d| match dim_from_i64(d, what)? {
                    0 => Err(OpError::expected(format!("{what} >= 1"), d)),
                    d => Ok(d),
                })
                .collect()
        };
        let image = pos(&image, "Col2Im's image_shape")?;
        let block = pos(&block, "Col2Im's block_shape")?;
        let strides = dims_attr(&self.strides, r, 1, 1, "strides")?;
        let dilations = dims_attr(&self.dilations, r, 1, 1, "dilations")?;
        let pads = dims_attr(&self.pads, 2 * r, 0, 0, "pads")?;
        let mut blocks = Vec::with_capacity(r);
        for i in 0..r {
            // Every term is at most 2^48: no overflow in i128.
            let span = dilations[i] as i128 * (block[i] as i128 - 1) + 1;
            let room = image[i] as i128 + pads[i] as i128 + pads[r + i] as i128 - span;
            if room < 0 {
                return Err(OpError::expected(
                    format!(
                        "a block (extent {span}) that fits the padded image along dimension {i}"
                    ),
                    format!("image {image:?}, pads {pads:?}"),
                ));
            }
            blocks.push((room / strides[i] as i128 + 1) as usize);
        }
        let k = shape_numel(&block, "Col2Im's block size")?;
        let l = shape_numel(&blocks, "Col2Im's block count")?;
        if x.shape[1] % k != 0 || x.shape[2] != l {
            return Err(OpError::expected(
                format!("input (N, C * {k}, {l}) for blocks {blocks:?} of {block:?}"),
                x,
            ));
        }
        Ok(Col2ImGeom {
            c: x.shape[1] / k,
            image,
            block,
            strides,
            dilations,
            pads,
            blocks,
        })
    }
}

impl Operator for Col2Im {
    fn op_type(&self) -> &'static str {
        "Col2Im"
    }

    // A sum over kernel offsets: elementwise consumers (a transposed convolution's bias and
    // activation) fuse into it as an epilogue.
    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 3, 3)?;
        let d = check_dtype(cx, 0, NUMERIC)?;
        let g = self.geom(cx)?;
        let mut shape = vec![cx.input(0)?.shape[0], g.c];
        shape.extend_from_slice(&g.image);
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let g = self.geom(&icx(cx))?;
        let out = cx.output(0).clone();
        let d = out.dtype;
        if out.numel() == 0 {
            return Ok(vec![cx.stage(out, zero(d))]);
        }
        let r = g.image.len();
        // Image position p lands in the column of block b at kernel offset k when
        // p + pad_begin - k * dilation = b * stride. Without dilation and with a stride, only
        // the offsets k = (p + pad_begin) % stride + j * stride land (the position's phase): the
        // reduction runs over j, ceil(kernel / stride) of them, and b = (p + pad_begin) / stride
        // - j, with no divisibility test per offset (a transposed convolution's fold whose
        // kernel is its stride takes one offset per position).
        let mut conds = Vec::new();
        let mut b = Vec::with_capacity(r);
        let mut offsets = Vec::with_capacity(r);
        let mut extents = Vec::with_capacity(r);
        for i in 0..r {
            let (s, dl, kn) = (g.strides[i], g.dilations[i], g.block[i]);
            let nb = g.blocks[i] as i64;
            let p = Expr::var(2 + i).add(Expr::i(g.pads[i]));
            if dl == 1 && s > 1 {
                let taps = kn.div_ceil(s as usize);
                let k = p
                    .clone()
                    .fmod(Expr::i(s))
                    .add(Expr::rvar(i).mul(Expr::i(s)));
                if kn % s as usize != 0 {
                    conds.push(k.clone().lt(Expr::i(kn as i64)));
                }
                let q = p.div(Expr::i(s)).sub(Expr::rvar(i));
                conds.push(q.clone().ge(Expr::i(0)));
                conds.push(q.clone().lt(Expr::i(nb)));
                b.push(q.max(Expr::i(0)).min(Expr::i(nb - 1)));
                offsets.push(k.min(Expr::i(kn as i64 - 1)));
                extents.push(taps);
                continue;
            }
            let t = p.sub(Expr::rvar(i).mul(Expr::i(dl)));
            conds.push(t.clone().ge(Expr::i(0)));
            if s != 1 {
                conds.push(t.clone().fmod(Expr::i(s)).eq(Expr::i(0)));
            }
            let q = t.div(Expr::i(s));
            conds.push(q.clone().lt(Expr::i(nb)));
            b.push(q.max(Expr::i(0)).min(Expr::i(nb - 1)));
            offsets.push(Expr::rvar(i));
            extents.push(kn);
        }
        let k = shape_numel(&g.block, "Col2Im's block size")? as i64;
        let ch = Expr::var(1)
            .mul(Expr::i(k))
            .add(Expr::flatten(&offsets, &g.block));
        let col = Expr::flatten(&b, &g.blocks);
        let v = Expr::load(Src::Arg(0), vec![Expr::var(0), ch, col]);
        let body = Expr::select(all(conds).expect("conditions"), v, zero(d));
        check_work(&out.shape, &extents, "Col2Im")?;
        if extents.iter().all(|&e| e == 1) {
            // One offset per position (a kernel that is its stride): a gather, no sum.
            let zeros = vec![Expr::i(0); r];
            let body = body.rewrite(&mut |e| match e {
                Expr::RVar(k) => Some(zeros[*k as usize].clone()),
                _ => None,
            });
            return Ok(vec![cx.stage(out, body)]);
        }
        Ok(vec![cx.reduce(out, RedOp::Sum, extents, body, None)])
    }
}

// ---------------------------------------------------------------------------------------------
// MaxUnpool
// ---------------------------------------------------------------------------------------------

/// `MaxUnpool`: each element of `X` written at its flat index `I` into a zero tensor of the
/// unpooled shape `(N, C, (in - 1) * stride - pads + kernel ..)` (the last write wins); with
/// `output_shape` (a constant, at least that shape in every dimension) that tensor is placed at
/// the origin of a zero tensor of `output_shape`, as ONNX's reference does. Indices outside the
/// unpooled tensor write nothing. Each output element searches every element of `I` (a run-time
/// scatter), so the work is the product of the two sizes.
#[derive(Debug)]
struct MaxUnpool {
    kernel: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
}

impl MaxUnpool {
    /// The unpooled shape and the output shape.
    fn shapes(&self, cx: &InferCx) -> OpResult<(Vec<usize>, Vec<usize>)> {
        let x = cx.input(0)?;
        let i = cx.input(1)?;
        if x.rank() < 3 || i.shape != x.shape {
            return Err(OpError::expected(
                format!("X of rank >= 3 and indices of its shape ({x})"),
                i,
            ));
        }
        let r = x.rank() - 2;
        let kernel = match &self.kernel {
            Some(k) if !k.is_empty() => dims_attr(&self.kernel, r, 1, 1, "kernel_shape")?,
            _ => return Err(OpError::expected("a kernel_shape attribute", "none")),
        };
        let strides = dims_attr(&self.strides, r, 1, 1, "strides")?;
        let pads = dims_attr(&self.pads, 2 * r, 0, 0, "pads")?;
        let mut unpooled = x.shape[..2].to_vec();
        for j in 0..r {
            let n = x.shape[2 + j] as i128;
            let v = (n - 1).max(0) * strides[j] as i128 - (pads[j] + pads[r + j]) as i128
                + kernel[j] as i128;
            let v = if n == 0 { 0 } else { v };
            if v < 0 || v > MAX_DIM as i128 {
                return Err(OpError::expected(
                    format!("an unpooled size in [0, 2^48] along dimension {j}"),
                    v,
                ));
            }
            unpooled.push(v as usize);
        }
        shape_numel(&unpooled, "MaxUnpool's unpooled size")?;
        let out = if cx.has(2) {
            let s = const_list(cx, 2, "MaxUnpool's output_shape", Some(x.rank()))?;
            let s: Vec<usize> = s
                .iter()
                .map(|&v| dim_from_i64(v, "MaxUnpool's output_shape"))
                .collect::<OpResult<_>>()?;
            if s.iter().zip(&unpooled).any(|(o, u)| o < u) {
                return Err(OpError::expected(
                    format!("output_shape at least the unpooled shape {unpooled:?}"),
                    format!("{s:?}"),
                ));
            }
            s
        } else {
            unpooled.clone()
        };
        Ok((unpooled, out))
    }
}

impl Operator for MaxUnpool {
    fn op_type(&self) -> &'static str {
        "MaxUnpool"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 2, 3)?;
        let d = check_dtype(cx, 0, FLOATS)?;
        check_dtype(cx, 1, &[DType::I64])?;
        let (_, out) = self.shapes(cx)?;
        Ok(vec![TensorType::new(d, out)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (unpooled, _) = self.shapes(&icx(cx))?;
        let x = cx.input(0).clone();
        let out = cx.output(0).clone();
        let d = out.dtype;
        if out.numel() == 0 || x.numel() == 0 || unpooled.contains(&0) {
            return Ok(vec![cx.stage(out, zero(d))]);
        }
        let rank = x.rank();
        // The last element of X whose index is the unpooled position's flat offset (-1: none).
        let uv = vars(rank);
        let flat = Expr::flatten(&uv, &unpooled);
        let rv: Vec<Expr> = (0..rank).map(Expr::rvar).collect();
        let hit = Expr::load(Src::Arg(1), rv.clone()).eq(flat);
        let body = Expr::select(hit, Expr::flatten(&rv, &x.shape), Expr::i(-1));
        check_work(
            &unpooled,
            &x.shape,
            "MaxUnpool (output elements x input elements)",
        )?;
        let ity = TensorType::new(DType::I64, unpooled.clone());
        let last = cx.reduce(ity, RedOp::Max, x.shape.clone(), body, None);
        // The output: the unpooled tensor at the origin, zeros elsewhere.
        let inside = all((0..rank)
            .filter(|&k| out.shape[k] > unpooled[k])
            .map(|k| Expr::var(k).lt(Expr::i(unpooled[k] as i64)))
            .collect());
        let at: Vec<Expr> = (0..rank)
            .map(|k| Expr::var(k).min(Expr::i(unpooled[k] as i64 - 1)))
            .collect();
        let l = Expr::load(last, at);
        let n = x.numel() as i64;
        let v = Expr::load_flat(Src::Arg(0), l.clone().max(Expr::i(0)).min(Expr::i(n - 1)));
        let found = l.ge(Expr::i(0));
        let cond = match inside {
            None => found,
            Some(c) => c.and(found),
        };
        Ok(vec![cx.stage(out, Expr::select(cond, v, zero(d)))])
    }
}

// ---------------------------------------------------------------------------------------------
// DeformConv
// ---------------------------------------------------------------------------------------------

/// `DeformConv`: a grouped convolution whose kernel taps are read at run-time offsets from their
/// regular positions (bilinear interpolation, zero outside the input), each tap's value scaled by
/// `mask` (default 1). Lowered as a materialised table of sampled values `(N, C, K, out..)`
/// (`K` kernel positions) contracted with the weights.
#[derive(Debug)]
struct DeformConv {
    kernel: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    group: i64,
    offset_group: i64,
}

/// DeformConv's resolved geometry.
struct DeformGeom {
    kernel: Vec<usize>,
    strides: Vec<i64>,
    dilations: Vec<i64>,
    pads: Vec<i64>,
    out: Vec<usize>,
    group: usize,
    offset_group: usize,
}

impl DeformConv {
    fn geom(&self, cx: &InferCx) -> OpResult<DeformGeom> {
        let (x, w, off) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
        if x.rank() < 3 || w.rank() != x.rank() {
            return Err(OpError::expected(
                "X (N, C, spatial..) and W (oC, C / group, kernel..) of the same rank >= 3",
                format!("{x} and {w}"),
            ));
        }
        let r = x.rank() - 2;
        if 1u64.checked_shl(r as u32).is_none_or(|t| t > MAX_TAPS) {
            return Err(OpError::expected(
                format!("at most {MAX_TAPS} interpolation taps per sample (2^{r} for X {x})"),
                "more",
            ));
        }
        let (c, oc) = (x.shape[1], w.shape[0]);
        let group = usize::try_from(self.group).unwrap_or(0);
        let og = usize::try_from(self.offset_group).unwrap_or(0);
        if group == 0
            || og == 0
            || c % og != 0
            || oc % group != 0
            || w.shape[1].checked_mul(group) != Some(c)
        {
            return Err(OpError::expected(
                format!("group >= 1 and offset_group >= 1 dividing C ({c}), group dividing oC ({oc}) and W's dimension 1 equal to C / group"),
                format!("group {}, offset_group {}, W {w}", self.group, self.offset_group),
            ));
        }
        let kernel = w.shape[2..].to_vec();
        if let Some(k) = self.kernel.as_ref().filter(|k| !k.is_empty()) {
            if k.len() != r || k.iter().zip(&kernel).any(|(&a, &b)| a != b as i64) {
                return Err(OpError::expected(
                    format!("kernel_shape equal to W's spatial shape {kernel:?}"),
                    format!("{k:?}"),
                ));
            }
        }
        let strides = dims_attr(&self.strides, r, 1, 1, "strides")?;
        let dilations = dims_attr(&self.dilations, r, 1, 1, "dilations")?;
        let pads = dims_attr(&self.pads, 2 * r, 0, 0, "pads")?;
        let mut out = Vec::with_capacity(r);
        for i in 0..r {
            let span = dilations[i] as i128 * (kernel[i] as i128 - 1) + 1;
            let room = x.shape[2 + i] as i128 + pads[i] as i128 + pads[r + i] as i128 - span;
            if room < 0 || kernel[i] == 0 {
                return Err(OpError::expected(
                    format!("a non-empty kernel (extent {span}) that fits the padded input along dimension {i}"),
                    format!("X {x}, pads {pads:?}"),
                ));
            }
            out.push((room / strides[i] as i128 + 1) as usize);
        }
        let k = shape_numel(&kernel, "DeformConv's kernel size")?;
        let lead = |ch: usize| -> OpResult<Vec<usize>> {
            let mut s = vec![x.shape[0], ch];
            s.extend_from_slice(&out);
            Ok(s)
        };
        let want = lead(og * k * r)?;
        if off.shape != want {
            return Err(OpError::expected(format!("offset of shape {want:?}"), off));
        }
        if cx.has(4) {
            let want = lead(og * k)?;
            let m = cx.input(4)?;
            if m.shape != want {
                return Err(OpError::expected(format!("mask of shape {want:?}"), m));
            }
        }
        if cx.has(3) {
            let b = cx.input(3)?;
            if b.shape != [oc] {
                return Err(OpError::expected(format!("B of shape [{oc}]"), b));
            }
        }
        Ok(DeformGeom {
            kernel,
            strides,
            dilations,
            pads,
            out,
            group,
            offset_group: og,
        })
    }
}

impl Operator for DeformConv {
    fn op_type(&self) -> &'static str {
        "DeformConv"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 3, 5)?;
        let d = check_dtype(cx, 0, FLOATS)?;
        for i in 1..5 {
            if cx.has(i) {
                check_dtype(cx, i, &[d])?;
            }
        }
        let g = self.geom(cx)?;
        let mut shape = vec![cx.input(0)?.shape[0], cx.input(1)?.shape[0]];
        shape.extend_from_slice(&g.out);
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let g = self.geom(&icx(cx))?;
        let x = cx.input(0).clone();
        let w = cx.input(1).clone();
        let out = cx.output(0).clone();
        let d = out.dtype;
        if out.numel() == 0 {
            return Ok(vec![cx.stage(out, zero(d))]);
        }
        let r = x.rank() - 2;
        let (n, c) = (x.shape[0], x.shape[1]);
        let k = shape_numel(&g.kernel, "DeformConv's kernel size")?;
        if x.shape[2..].contains(&0) {
            // Every tap is outside the input: the bias alone.
            let b = if cx.has(3) {
                Expr::load(Src::Arg(3), vec![Expr::var(1)])
            } else {
                zero(d)
            };
            return Ok(vec![cx.stage(out, b)]);
        }
        let sampler = GridSample {
            mode: Interp::Linear,
            padding: Padding::Zeros,
            align_corners: true,
        };
        // Per spatial dimension, over (n, offset group, kernel position, out..): the position
        // read, its two taps' indices (-1 outside) and weights.
        let mut pos_shape = vec![n, g.offset_group, k];
        pos_shape.extend_from_slice(&g.out);
        let mut tap_shape = pos_shape.clone();
        tap_shape.push(2);
        shape_numel(&tap_shape, "DeformConv's taps")?;
        let pv = vars(pos_shape.len());
        let kpos = Expr::unflatten(&Expr::var(2), &g.kernel);
        let mut index = Vec::with_capacity(r);
        let mut weight = Vec::with_capacity(r);
        for (i, kp) in kpos.into_iter().enumerate() {
            let ch = Expr::var(1)
                .mul(Expr::i(k as i64))
                .add(Expr::var(2))
                .mul(Expr::i(r as i64))
                .add(Expr::i(i as i64));
            let mut oi = vec![Expr::var(0), ch];
            oi.extend((3..3 + r).map(Expr::var));
            let regular = Expr::var(3 + i)
                .mul(Expr::i(g.strides[i]))
                .add(kp.mul(Expr::i(g.dilations[i])))
                .sub(Expr::i(g.pads[i]))
                .cast(d);
            let body = regular.add(Expr::load(Src::Arg(2), oi));
            let p = cx.materialized_stage(TensorType::new(d, pos_shape.clone()), body);
            let at = Expr::load(p, pv.clone());
            let base = at.clone().floor();
            let tap = base.clone().add(Expr::var(pos_shape.len()).cast(d));
            let ity = TensorType::new(DType::I64, tap_shape.clone());
            index.push(cx.materialized_stage(ity, sampler.tap_index(tap, x.shape[2 + i], d)));
            let wt = sampler.weight(at.sub(base), Expr::var(pos_shape.len()), d);
            weight.push(cx.materialized_stage(TensorType::new(d, tap_shape.clone()), wt));
        }
        // Sampled values (n, c, kernel position, out..).
        let mut s_shape = vec![n, c, k];
        s_shape.extend_from_slice(&g.out);
        let grp = Expr::var(1).div(Expr::i((c / g.offset_group) as i64));
        let mut terms = Vec::new();
        for code in 0..1usize << r {
            let mut idx = vec![Expr::var(0), Expr::var(1)];
            let mut conds = Vec::new();
            let mut wprod: Option<Expr> = None;
            for i in 0..r {
                let tap = ((code >> (r - 1 - i)) & 1) as i64;
                let mut ti = vec![Expr::var(0), grp.clone(), Expr::var(2)];
                ti.extend((3..3 + r).map(Expr::var));
                ti.push(Expr::i(tap));
                let ii = Expr::load(index[i], ti.clone());
                conds.push(ii.clone().ge(Expr::i(0)));
                idx.push(ii.max(Expr::i(0)));
                let wi = Expr::load(weight[i], ti);
                wprod = Some(match wprod {
                    None => wi,
                    Some(w) => w.mul(wi),
                });
            }
            let v = wprod.expect("r >= 1").mul(Expr::load(Src::Arg(0), idx));
            terms.push(Expr::select(all(conds).expect("r >= 1"), v, zero(d)));
        }
        let mut sample = balanced_sum(terms);
        if cx.has(4) {
            let mut mi = vec![Expr::var(0), grp.mul(Expr::i(k as i64)).add(Expr::var(2))];
            mi.extend((3..3 + r).map(Expr::var));
            sample = sample.mul(Expr::load(Src::Arg(4), mi));
        }
        let s = cx.materialized_stage(TensorType::new(d, s_shape), sample);
        // The contraction over the group's input channels and the kernel positions.
        let cg = w.shape[1];
        let ocg = w.shape[0] / g.group;
        let ci = Expr::var(1)
            .div(Expr::i(ocg as i64))
            .mul(Expr::i(cg as i64))
            .add(Expr::rvar(0));
        let mut si = vec![Expr::var(0), ci, Expr::rvar(1)];
        si.extend((2..2 + r).map(Expr::var));
        let mut wi = vec![Expr::var(1), Expr::rvar(0)];
        wi.extend(Expr::unflatten(&Expr::rvar(1), &g.kernel));
        let body = Expr::load(Src::Arg(1), wi).mul(Expr::load(s, si));
        let fin = cx
            .has(3)
            .then(|| Expr::Acc.add(Expr::load(Src::Arg(3), vec![Expr::var(1)])));
        check_work(&out.shape, &[cg, k], "DeformConv")?;
        Ok(vec![cx.reduce(out, RedOp::Sum, vec![cg, k], body, fin)])
    }
}

// ---------------------------------------------------------------------------------------------
// RoiAlign
// ---------------------------------------------------------------------------------------------

/// `RoiAlign`: each region of interest (run-time `rois`, `batch_indices`) pooled into an
/// `output_height x output_width` grid of bins, each bin the average (or maximum) of bilinear
/// samples on a regular grid of `sampling_ratio` points per axis (adaptive, `ceil(bin size)`,
/// when 0). Samples outside the image count as 0.
///
/// Lowering: per axis, a table over (roi, bin, sample) of each sample's lower and upper row (or
/// column), its fraction and whether it exists and lies inside; then a reduction over the samples
/// of a bin. The samples of an axis are `sampling_ratio` of them, or with an adaptive count the
/// largest any constant roi needs; with run-time rois and an adaptive count, a window of
/// `2 * size + 5` samples starting at the first sample inside the image covers every sample that
/// reads the image (their spacing exceeds 1/2), and the count of the others is known.
#[derive(Debug)]
struct RoiAlign {
    max: bool,
    half_pixel: bool,
    out_h: usize,
    out_w: usize,
    sampling_ratio: usize,
    spatial_scale: f64,
}

/// Lower-index codes in RoiAlign's sample tables.
const NO_SAMPLE: i64 = -1;
const OUTSIDE: i64 = -2;

impl RoiAlign {
    /// The samples per bin along an axis (the extent of the sample tables) and whether they are
    /// a window that starts at the first sample inside the image.
    fn extent(&self, cx: &InferCx, axis: usize) -> OpResult<(usize, bool)> {
        if self.sampling_ratio > 0 {
            return Ok((self.sampling_ratio, false));
        }
        let x = cx.input(0)?;
        let (n, o, c0) = if axis == 0 {
            (x.shape[2], self.out_h, 1)
        } else {
            (x.shape[3], self.out_w, 0)
        };
        let Some(rois) = cx.consts.get(1).and_then(|c| c.as_deref()) else {
            let e = n
                .checked_mul(2)
                .and_then(|v| v.checked_add(5))
                .filter(|&v| v <= MAX_DIM)
                .ok_or_else(|| OpError::expected("an image of at most 2^47 rows and columns", x))?;
            return Ok((e, true));
        };
        // The largest adaptive count of a constant roi, plus one for rounding differences.
        let mut most = 0usize;
        for r in 0..rois.ty.shape[0] {
            let at = |j: usize| rois.get_f64(r * 4 + j) * self.spatial_scale;
            let mut len = at(c0 + 2) - at(c0);
            if !self.half_pixel {
                len = len.max(1.0);
            }
            let g = (len / o as f64).ceil();
            if g.is_finite() && g > 0.0 {
                most = most.max(dim_from_f64(g, "RoiAlign's adaptive sampling count")?);
            }
        }
        let e = most.saturating_add(1);
        if e > MAX_DIM {
            return Err(OpError::expected(
                "adaptive sampling counts at most 2^48",
                e,
            ));
        }
        Ok((e, false))
    }
}

impl Operator for RoiAlign {
    fn op_type(&self) -> &'static str {
        "RoiAlign"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 3, 3)?;
        let d = check_dtype(cx, 0, FLOATS)?;
        check_dtype(cx, 1, &[d])?;
        check_dtype(cx, 2, &[DType::I64])?;
        let (x, rois, bi) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
        if x.rank() != 4 {
            return Err(OpError::expected("X of shape (N, C, H, W)", x));
        }
        let r = rois.shape.first().copied().unwrap_or(0);
        if rois.shape != [r, 4] || bi.shape != [r] {
            return Err(OpError::expected(
                "rois (num_rois, 4) and batch_indices (num_rois)",
                format!("{rois} and {bi}"),
            ));
        }
        if let Some(b) = cx.consts.get(2).and_then(|c| c.as_deref()) {
            let n = x.shape[0] as i64;
            if let Some(v) = b.to_i64().into_iter().find(|&v| v < 0 || v >= n) {
                return Err(OpError::expected(format!("batch_indices in [0, {n})"), v));
            }
        }
        if let Some(t) = cx.consts.get(1).and_then(|c| c.as_deref()) {
            if let Some(v) = t.to_f32().into_iter().find(|v| !v.is_finite()) {
                return Err(OpError::expected("finite rois", v));
            }
        }
        self.extent(cx, 0)?;
        self.extent(cx, 1)?;
        Ok(vec![TensorType::new(
            d,
            vec![r, x.shape[1], self.out_h, self.out_w],
        )])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (ey, wy) = self.extent(&icx(cx), 0)?;
        let (ex, wx) = self.extent(&icx(cx), 1)?;
        let x = cx.input(0).clone();
        let out = cx.output(0).clone();
        let f = out.dtype;
        if out.numel() == 0 {
            return Ok(vec![cx.stage(out, zero(f))]);
        }
        if x.numel() == 0 {
            // No image to sample (N > 0 with an empty plane): every sample is outside.
            return Ok(vec![cx.stage(out, zero(f))]);
        }
        let nroi = out.shape[0];
        let c = |v: f64| Expr::c(f, v);
        let off = if self.half_pixel { 0.5 } else { 0.0 };
        // Coordinate `j` of roi `Var(0)`, scaled and shifted.
        let roi = |j: i64| {
            Expr::load(Src::Arg(1), vec![Expr::var(0), Expr::i(j)])
                .mul(c(self.spatial_scale))
                .sub(c(off))
        };
        // Per axis: the bin size and the sample count of roi `Var(0)`.
        let axis_geom = |axis: usize| {
            let (o, c0) = if axis == 0 {
                (self.out_h, 1)
            } else {
                (self.out_w, 0)
            };
            let mut len = roi(c0 + 2).sub(roi(c0));
            if !self.half_pixel {
                len = len.max(c(1.0));
            }
            let start = roi(c0);
            let bin = len.div(c(o as f64));
            let g = if self.sampling_ratio > 0 {
                c(self.sampling_ratio as f64)
            } else {
                bin.clone().ceil()
            };
            (start, bin, g)
        };
        let mut tables = Vec::new();
        for (axis, e, windowed) in [(0, ey, wy), (1, ex, wx)] {
            let (n, o) = if axis == 0 {
                (x.shape[2], self.out_h)
            } else {
                (x.shape[3], self.out_w)
            };
            let (start, bin, g) = axis_geom(axis);
            let first = start.add(Expr::var(1).cast(f).mul(bin.clone()));
            let step = bin.div(g.clone());
            let k = if windowed {
                // One before the first sample at or after -1 (never below 0).
                let at = c(-1.0).sub(first.clone()).div(step.clone()).sub(c(0.5));
                let s0 = to_index(at.floor(), f).sub(Expr::i(1)).max(Expr::i(0));
                s0.add(Expr::var(2))
            } else {
                Expr::var(2)
            };
            let kf = k.cast(f);
            let y = first.add(kf.clone().add(c(0.5)).mul(step));
            let exists = kf.lt(g);
            let inside = y.clone().ge(c(-1.0)).and(y.clone().le(c(n as f64)));
            let yc = y.max(c(0.0));
            let fl = yc.clone().floor();
            let li = to_index(fl.clone(), f);
            let last = Expr::i(n as i64 - 1);
            let edge = li.clone().ge(last.clone());
            let lo = Expr::select(
                exists.not(),
                Expr::i(NO_SAMPLE),
                Expr::select(
                    inside.not(),
                    Expr::i(OUTSIDE),
                    Expr::select(edge.clone(), last.clone(), li.clone().min(last.clone())),
                ),
            );
            let hi = Expr::select(edge.clone(), last.clone(), li.add(Expr::i(1)).min(last));
            let frac = Expr::select(edge, c(0.0), yc.sub(fl));
            let shape = vec![nroi, o, e];
            shape_numel(&shape, "RoiAlign's sample table")?;
            let lo = cx.materialized_stage(TensorType::new(DType::I64, shape.clone()), lo);
            let hi = cx.materialized_stage(TensorType::new(DType::I64, shape.clone()), hi);
            let frac = cx.materialized_stage(TensorType::new(f, shape), frac);
            // Samples inside the image, per (roi, bin).
            let inside =
                Expr::load(lo, vec![Expr::var(0), Expr::var(1), Expr::rvar(0)]).ge(Expr::i(0));
            let cnt = cx.reduce(
                TensorType::new(DType::I64, vec![nroi, o]),
                RedOp::Sum,
                vec![e],
                Expr::select(inside, Expr::i(1), Expr::i(0)),
                None,
            );
            tables.push((lo, hi, frac, cnt));
        }
        let (ylo, yhi, ly, cy) = tables[0];
        let (xlo, xhi, lx, cx_) = tables[1];
        let at_y = |s: Src| Expr::load(s, vec![Expr::var(0), Expr::var(2), Expr::rvar(0)]);
        let at_x = |s: Src| Expr::load(s, vec![Expr::var(0), Expr::var(3), Expr::rvar(1)]);
        let (h, w) = (x.shape[2], x.shape[3]);
        let b = clamp_index(Expr::load(Src::Arg(2), vec![Expr::var(0)]), x.shape[0]);
        let px = |yi: Expr, xi: Expr| {
            Expr::load(
                Src::Arg(0),
                vec![
                    b.clone(),
                    Expr::var(1),
                    clamp_index(yi, h),
                    clamp_index(xi, w),
                ],
            )
        };
        let (fy, fx) = (at_y(ly), at_x(lx));
        let (gy, gx) = (c(1.0).sub(fy.clone()), c(1.0).sub(fx.clone()));
        let t = [
            gy.clone().mul(gx.clone()).mul(px(at_y(ylo), at_x(xlo))),
            gy.mul(fx.clone()).mul(px(at_y(ylo), at_x(xhi))),
            fy.clone().mul(gx).mul(px(at_y(yhi), at_x(xlo))),
            fy.mul(fx).mul(px(at_y(yhi), at_x(xhi))),
        ];
        let inside = at_y(ylo).ge(Expr::i(0)).and(at_x(xlo).ge(Expr::i(0)));
        // Roi `Var(0)`'s samples per bin along each axis.
        let (_, _, g_y) = axis_geom(0);
        let (_, _, g_x) = axis_geom(1);
        let total = g_y.clone().mul(g_x.clone());
        let [t1, t2, t3, t4] = t;
        let (op, body, fin) = if self.max {
            let m = t1.max(t2).max(t3).max(t4);
            let body = Expr::select(inside, m, c(f64::NEG_INFINITY));
            let n_in = Expr::load(cy, vec![Expr::var(0), Expr::var(2)])
                .mul(Expr::load(cx_, vec![Expr::var(0), Expr::var(3)]))
                .cast(f);
            // Samples outside the image count as 0; no samples at all give 0.
            let none = g_y.le(c(0.0)).or(g_x.le(c(0.0)));
            let fin = Expr::select(
                none,
                c(0.0),
                Expr::select(n_in.lt(total), Expr::Acc.max(c(0.0)), Expr::Acc),
            );
            (RedOp::Max, body, fin)
        } else {
            let body = Expr::select(inside, t1.add(t2).add(t3).add(t4), c(0.0));
            (RedOp::Sum, body, Expr::Acc.div(total.max(c(1.0))))
        };
        check_work(&out.shape, &[ey, ex], "RoiAlign")?;
        Ok(vec![cx.reduce(out, op, vec![ey, ex], body, Some(fin))])
    }
}

/// Creates a `RoiAlign`.
pub(super) fn roi_align(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let a = cx.attrs;
    let max = match a.string("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        other => return Err(OpError::expected("mode avg or max", other)),
    };
    // Opset 10 has no attribute and shifts nothing.
    let dflt = if cx.opset < 16 {
        "output_half_pixel"
    } else {
        "half_pixel"
    };
    let half_pixel = match a.string("coordinate_transformation_mode", dflt)?.as_str() {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(OpError::expected(
                "coordinate_transformation_mode half_pixel or output_half_pixel",
                other,
            ))
        }
    };
    let out_h = a.int("output_height", 1)?;
    let out_w = a.int("output_width", 1)?;
    if out_h < 1 || out_w < 1 {
        return Err(OpError::expected(
            "output_height and output_width >= 1",
            format!("{out_h} and {out_w}"),
        ));
    }
    let spatial_scale = a.float("spatial_scale", 1.0)? as f64;
    if !spatial_scale.is_finite() {
        return Err(OpError::expected("a finite spatial_scale", spatial_scale));
    }
    Ok(Arc::new(RoiAlign {
        max,
        half_pixel,
        out_h: dim_from_i64(out_h, "output_height")?,
        out_w: dim_from_i64(out_w, "output_width")?,
        sampling_ratio: dim_from_i64(a.int("sampling_ratio", 0)?, "sampling_ratio")?,
        spatial_scale,
    }))
}

/// Checks that a reduction over `extents` for every element of `shape` stays within 2^48 body
/// evaluations (so that its work, and every count derived from it, is far from overflowing).
fn check_work(shape: &[usize], extents: &[usize], what: &str) -> OpResult<()> {
    let mut all = shape.to_vec();
    all.extend_from_slice(extents);
    if all.contains(&0) {
        return Ok(());
    }
    shape_numel(
        &all,
        &format!("{what}'s work (output elements x reduction points)"),
    )?;
    Ok(())
}

/// Creates a `Col2Im`.
pub(super) fn col2im(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    Ok(Arc::new(Col2Im {
        strides: cx.attrs.ints("strides")?,
        dilations: cx.attrs.ints("dilations")?,
        pads: cx.attrs.ints("pads")?,
    }))
}

/// Creates a `DeformConv`.
pub(super) fn deform_conv(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    Ok(Arc::new(DeformConv {
        kernel: cx.attrs.ints("kernel_shape")?,
        strides: cx.attrs.ints("strides")?,
        dilations: cx.attrs.ints("dilations")?,
        pads: cx.attrs.ints("pads")?,
        group: cx.attrs.int("group", 1)?,
        offset_group: cx.attrs.int("offset_group", 1)?,
    }))
}

/// Creates a `MaxUnpool`.
pub(super) fn max_unpool(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    Ok(Arc::new(MaxUnpool {
        kernel: cx.attrs.ints("kernel_shape")?,
        strides: cx.attrs.ints("strides")?,
        pads: cx.attrs.ints("pads")?,
    }))
}
