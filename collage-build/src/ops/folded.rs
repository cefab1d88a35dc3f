//! Operators whose output *shape* depends on input *values*: `NonZero`, `Unique`,
//! `NonMaxSuppression`, `MelWeightMatrix` and `Compress`; and the optional-value operators on
//! tensors (`OptionalHasElement` is known at build time: a tensor input is always present).
//!
//! Shapes are static in generated code, so the inputs that decide the shape must be build-time
//! constants (an error names the graph inputs they depend on otherwise; `collage conformance`
//! binds those from the test data, as for a `Reshape` whose shape is an input). `NonZero`,
//! `Unique`, `NonMaxSuppression` and `MelWeightMatrix` then compute their outputs at build time
//! ([`Operator::fold_from_types`]); `Compress` needs only its condition: the data it selects
//! from may be a run-time value.
use std::cmp::Ordering;
use std::sync::Arc;

use super::extra::{icx, vars};
use super::{
    check_arity as arity, check_dtype, dim_from_i64, norm_axis, Constructor, InferCx, LowerCx,
    OpCx, OpKind, OpResult, Operator, FLOATS, INTS,
};
use crate::error::OpError;
use crate::te::{Expr, RedOp, Src};
use crate::tensor::{DType, Tensor, TensorType};

/// The types whose values a constant [`Tensor`] reads exactly: the numeric types, Bool and the
/// 16-bit floats (the narrow floats are widened to f32 before these operators see them).
const PLAIN: &[DType] = DType::byte_sized();

/// Element `i` of a constant as a totally ordered key: integers exactly, floats with `-0 == 0`
/// and every NaN equal and after every number (numpy's order for `unique`).
#[derive(Clone, Copy, Debug)]
enum Key {
    Int(i128),
    Float(f64),
}

impl Key {
    fn of(t: &Tensor, i: usize) -> Key {
        if t.ty.dtype.is_float() {
            Key::Float(t.get_f64(i))
        } else {
            Key::Int(t.get_int(i))
        }
    }
}

impl Ord for Key {
    fn cmp(&self, o: &Key) -> Ordering {
        match (self, o) {
            (Key::Int(a), Key::Int(b)) => a.cmp(b),
            (Key::Float(a), Key::Float(b)) => match (a.is_nan(), b.is_nan()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                _ => a.partial_cmp(b).unwrap_or(Ordering::Equal),
            },
            // One tensor has one type.
            (Key::Int(_), Key::Float(_)) => Ordering::Less,
            (Key::Float(_), Key::Int(_)) => Ordering::Greater,
        }
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Key) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl PartialEq for Key {
    fn eq(&self, o: &Key) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl Eq for Key {}

fn nonzero(t: &Tensor, i: usize) -> bool {
    if t.ty.dtype.is_float() {
        t.get_f64(i) != 0.0
    } else {
        t.get_int(i) != 0
    }
}

// ---------------------------------------------------------------------------------------------
// NonZero
// ---------------------------------------------------------------------------------------------

/// `NonZero`: the coordinates of the non-zero elements, `[rank, count]`, in row-major order.
#[derive(Debug)]
struct NonZero;

impl NonZero {
    fn eval(cx: &InferCx) -> OpResult<Tensor> {
        let x = cx.konst(
            0,
            "NonZero's input (its count of non-zeros decides the shape)",
        )?;
        let shape = &x.ty.shape;
        let hits: Vec<usize> = (0..x.numel()).filter(|&i| nonzero(x, i)).collect();
        let mut coords: Vec<Vec<i64>> = vec![Vec::with_capacity(hits.len()); shape.len()];
        for &i in &hits {
            let mut rest = i;
            for (d, &n) in shape.iter().enumerate().rev() {
                coords[d].push((rest % n) as i64);
                rest /= n;
            }
        }
        let count = hits.len();
        let flat: Vec<i64> = coords.concat();
        Ok(Tensor::from_i64(&[shape.len(), count], &flat))
    }
}

impl Operator for NonZero {
    fn op_type(&self) -> &'static str {
        "NonZero"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 1, 1)?;
        check_dtype(cx, 0, PLAIN)?;
        Ok(vec![Self::eval(cx)?.ty])
    }

    fn fold_from_types(&self, cx: &InferCx) -> Option<Vec<Tensor>> {
        Self::eval(cx).ok().map(|t| vec![t])
    }

    fn lower(&self, _cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        Err(OpError::Unsupported(
            "NonZero of a run-time value (folded at build time only)".into(),
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Unique
// ---------------------------------------------------------------------------------------------

/// `Unique`: the distinct elements (or slices along `axis`), sorted or in order of first
/// occurrence, with the index of each one's first occurrence, each input position's index into
/// them, and their counts.
#[derive(Debug)]
struct Unique {
    axis: Option<i64>,
    sorted: bool,
}

impl Unique {
    fn eval(&self, cx: &InferCx) -> OpResult<Vec<Tensor>> {
        let x = cx.konst(0, "Unique's input (its distinct values decide the shape)")?;
        let shape = x.ty.shape.clone();
        // Slices: (outer, len, inner) around the axis; without an axis, the flattened elements.
        let (axis, outer, len, inner) = match self.axis {
            Some(a) => {
                let axis = norm_axis(a, shape.len())?;
                let outer: usize = shape[..axis].iter().product();
                let inner: usize = shape[axis + 1..].iter().product();
                (Some(axis), outer, shape[axis], inner)
            }
            None => (None, 1, x.numel(), 1),
        };
        let slice = |s: usize| -> Vec<Key> {
            let mut v = Vec::with_capacity(outer * inner);
            for o in 0..outer {
                for i in 0..inner {
                    v.push(Key::of(x, (o * len + s) * inner + i));
                }
            }
            v
        };
        let keys: Vec<Vec<Key>> = (0..len).map(slice).collect();
        // Positions sorted by key (stable: the first occurrence leads each run of equals).
        let mut order: Vec<usize> = (0..len).collect();
        order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
        let mut firsts: Vec<usize> = Vec::new();
        let mut group_of = vec![0usize; len];
        for (k, &p) in order.iter().enumerate() {
            if k == 0 || keys[order[k - 1]] != keys[p] {
                firsts.push(p);
            }
            group_of[p] = firsts.len() - 1;
        }
        // Output order: sorted (as found), or by first occurrence.
        let mut rank: Vec<usize> = (0..firsts.len()).collect();
        if !self.sorted {
            rank.sort_by_key(|&g| firsts[g]);
        }
        let mut pos_of_group = vec![0usize; firsts.len()];
        for (out, &g) in rank.iter().enumerate() {
            pos_of_group[g] = out;
        }
        let n = firsts.len();
        let mut counts = vec![0i64; n];
        let inverse: Vec<i64> = group_of
            .iter()
            .map(|&g| {
                counts[pos_of_group[g]] += 1;
                pos_of_group[g] as i64
            })
            .collect();
        let indices: Vec<i64> = rank.iter().map(|&g| firsts[g] as i64).collect();
        // Y: the chosen slices, copied byte for byte.
        let size = x.ty.dtype.size();
        let mut y_shape = shape.clone();
        match axis {
            Some(a) => y_shape[a] = n,
            None => y_shape = vec![n],
        }
        let mut data = Vec::with_capacity(outer * n * inner * size);
        for o in 0..outer {
            for &g in &rank {
                let s = firsts[g];
                let at = (o * len + s) * inner * size;
                data.extend_from_slice(&x.data[at..at + inner * size]);
            }
        }
        let y = Tensor::from_bytes(TensorType::new(x.ty.dtype, y_shape), data)
            .ok_or_else(|| OpError::expected("a well-formed constant input", &x.ty))?;
        Ok(vec![
            y,
            Tensor::from_i64(&[n], &indices),
            Tensor::from_i64(&[len], &inverse),
            Tensor::from_i64(&[n], &counts),
        ])
    }
}

impl Operator for Unique {
    fn op_type(&self) -> &'static str {
        "Unique"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 1, 1)?;
        check_dtype(cx, 0, PLAIN)?;
        Ok(self.eval(cx)?.into_iter().map(|t| t.ty).collect())
    }

    fn fold_from_types(&self, cx: &InferCx) -> Option<Vec<Tensor>> {
        self.eval(cx).ok()
    }

    fn lower(&self, _cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        Err(OpError::Unsupported(
            "Unique of a run-time value (folded at build time only)".into(),
        ))
    }
}

fn unique(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    Ok(Arc::new(Unique {
        axis: cx.attrs.opt_int("axis")?,
        sorted: cx.attrs.int("sorted", 1)? != 0,
    }))
}

// ---------------------------------------------------------------------------------------------
// NonMaxSuppression
// ---------------------------------------------------------------------------------------------

/// `NonMaxSuppression`: per batch and class, boxes in order of decreasing score (ties: lower
/// index first) above `score_threshold`, each kept unless its intersection over union with a
/// box kept before exceeds `iou_threshold`, at most `max_output_boxes_per_class` of them.
#[derive(Debug)]
struct Nms {
    center_point_box: bool,
}

/// `(min, max)` along one axis of a box.
type Extent = (f64, f64);

impl Nms {
    fn extents(&self, b: [f64; 4]) -> (Extent, Extent) {
        if self.center_point_box {
            let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
            ((b[0] - hw, b[0] + hw), (b[1] - hh, b[1] + hh))
        } else {
            let mm = |a: f64, c: f64| if a >= c { (c, a) } else { (a, c) };
            (mm(b[1], b[3]), mm(b[0], b[2]))
        }
    }

    /// Whether `b` is suppressed by the kept box `a`.
    fn suppresses(&self, a: [f64; 4], b: [f64; 4], iou_threshold: f64) -> bool {
        let ((ax0, ax1), (ay0, ay1)) = self.extents(a);
        let ((bx0, bx1), (by0, by1)) = self.extents(b);
        let (ix0, ix1) = (ax0.max(bx0), ax1.min(bx1));
        let (iy0, iy1) = (ay0.max(by0), ay1.min(by1));
        if ix1 <= ix0 || iy1 <= iy0 {
            return false;
        }
        let inter = (ix1 - ix0) * (iy1 - iy0);
        let area_a = (ax1 - ax0) * (ay1 - ay0);
        let area_b = (bx1 - bx0) * (by1 - by0);
        let union = area_a + area_b - inter;
        if inter <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
            return false;
        }
        inter / union > iou_threshold
    }

    fn eval(&self, cx: &InferCx) -> OpResult<Tensor> {
        let boxes = cx.konst(
            0,
            "NonMaxSuppression's boxes (the selection decides the shape)",
        )?;
        let scores = cx.konst(
            1,
            "NonMaxSuppression's scores (the selection decides the shape)",
        )?;
        let (bs, ss) = (&boxes.ty.shape, &scores.ty.shape);
        if bs.len() != 3 || bs[2] != 4 || ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
            return Err(OpError::expected(
                "boxes [batch, boxes, 4] and scores [batch, classes, boxes]",
                format!("{} and {}", boxes.ty, scores.ty),
            ));
        }
        let scalar = |i: usize, what: &'static str| -> OpResult<Option<f64>> {
            if !cx.has(i) {
                return Ok(None);
            }
            let t = cx.konst(i, what)?;
            match t.numel() {
                0 => Ok(None),
                1 => Ok(Some(t.get_f64(0))),
                _ => Err(OpError::expected(format!("{what} with one element"), &t.ty)),
            }
        };
        let max_out = scalar(2, "max_output_boxes_per_class")?
            .unwrap_or(0.0)
            .max(0.0) as usize;
        let iou = scalar(3, "iou_threshold")?.unwrap_or(0.0);
        let score_min = scalar(4, "score_threshold")?;
        let (batches, classes, n) = (ss[0], ss[1], ss[2]);
        let mut out = Vec::new();
        for b in 0..batches {
            let bx = |i: usize| -> [f64; 4] {
                std::array::from_fn(|k| boxes.get_f64((b * n + i) * 4 + k))
            };
            for c in 0..classes {
                let score = |i: usize| scores.get_f64((b * classes + c) * n + i);
                let mut cand: Vec<usize> = (0..n)
                    .filter(|&i| score_min.is_none_or(|t| score(i) > t))
                    .collect();
                // Decreasing score, then increasing index.
                cand.sort_by(|&i, &j| {
                    score(j)
                        .partial_cmp(&score(i))
                        .unwrap_or(Ordering::Equal)
                        .then(i.cmp(&j))
                });
                let mut kept: Vec<usize> = Vec::new();
                for i in cand {
                    if kept.len() >= max_out {
                        break;
                    }
                    if kept.iter().all(|&k| !self.suppresses(bx(k), bx(i), iou)) {
                        kept.push(i);
                        out.extend([b as i64, c as i64, i as i64]);
                    }
                }
            }
        }
        Ok(Tensor::from_i64(&[out.len() / 3, 3], &out))
    }
}

impl Operator for Nms {
    fn op_type(&self) -> &'static str {
        "NonMaxSuppression"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 2, 5)?;
        check_dtype(cx, 0, FLOATS)?;
        check_dtype(cx, 1, FLOATS)?;
        Ok(vec![self.eval(cx)?.ty])
    }

    fn fold_from_types(&self, cx: &InferCx) -> Option<Vec<Tensor>> {
        self.eval(cx).ok().map(|t| vec![t])
    }

    fn lower(&self, _cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        Err(OpError::Unsupported(
            "NonMaxSuppression of run-time boxes (folded at build time only)".into(),
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// MelWeightMatrix
// ---------------------------------------------------------------------------------------------

/// `MelWeightMatrix`: the triangular filters `[dft_length / 2 + 1, num_mel_bins]` that map a
/// linear-frequency spectrum to the mel scale, as the ONNX reference computes them.
#[derive(Debug)]
struct MelWeightMatrix {
    out: DType,
}

impl MelWeightMatrix {
    fn eval(&self, cx: &InferCx) -> OpResult<Tensor> {
        let int = |i: usize, what: &'static str| -> OpResult<usize> {
            check_dtype(cx, i, INTS)?;
            let t = cx.konst(i, what)?;
            if t.numel() != 1 {
                return Err(OpError::expected(format!("{what} with one element"), &t.ty));
            }
            dim_from_i64(t.get_i64(0), what)
        };
        let float = |i: usize, what: &'static str| -> OpResult<f64> {
            check_dtype(cx, i, FLOATS)?;
            let t = cx.konst(i, what)?;
            if t.numel() != 1 {
                return Err(OpError::expected(format!("{what} with one element"), &t.ty));
            }
            Ok(t.get_f64(0))
        };
        let bins = int(0, "num_mel_bins")?;
        let dft = int(1, "dft_length")?;
        let rate = int(2, "sample_rate")?;
        let (low, high) = (float(3, "lower_edge_hertz")?, float(4, "upper_edge_hertz")?);
        if rate == 0 || !(0.0..=high).contains(&low) {
            return Err(OpError::expected(
                "sample_rate >= 1 and 0 <= lower_edge_hertz <= upper_edge_hertz",
                format!("{rate}, {low}, {high}"),
            ));
        }
        let rows = dft / 2 + 1;
        let mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / 10f64.ln();
        let (lo, hi) = (mel(low), mel(high));
        let step = (hi - lo) / (bins + 2) as f64;
        let mut points = Vec::with_capacity(bins + 2);
        for k in 0..bins + 2 {
            let m = k as f64 * step + lo;
            let hz = 700.0 * (m / 2595.0 * 10f64.ln()).exp_m1();
            let bin = ((dft + 1) as f64 * hz / rate as f64).floor();
            if !(0.0..rows as f64).contains(&bin) {
                return Err(OpError::expected(
                    format!("mel band edges within the {rows} spectrum bins"),
                    bin,
                ));
            }
            points.push(bin as usize);
        }
        let mut w = vec![0.0f64; rows * bins];
        for i in 0..bins {
            let (l, c, h) = (points[i], points[i + 1], points[i + 2]);
            if c == l {
                w[c * bins + i] = 1.0;
            } else {
                for j in l..=c {
                    w[j * bins + i] = (j - l) as f64 / (c - l) as f64;
                }
            }
            if h > c {
                for j in c..h {
                    w[j * bins + i] = (h - j) as f64 / (h - c) as f64;
                }
            }
        }
        Ok(Tensor::from_f64_as(self.out, &[rows, bins], &w))
    }
}

impl Operator for MelWeightMatrix {
    fn op_type(&self) -> &'static str {
        "MelWeightMatrix"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 5, 5)?;
        Ok(vec![self.eval(cx)?.ty])
    }

    fn fold_from_types(&self, cx: &InferCx) -> Option<Vec<Tensor>> {
        self.eval(cx).ok().map(|t| vec![t])
    }

    fn lower(&self, _cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        Err(OpError::Unsupported(
            "MelWeightMatrix of run-time sizes (folded at build time only)".into(),
        ))
    }
}

fn mel_weight_matrix(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    let code = i32::try_from(cx.attrs.int("output_datatype", 1)?).unwrap_or(-1);
    let out = match DType::from_onnx(code) {
        Some(d) if PLAIN.contains(&d) && d != DType::Bool => d,
        _ => {
            return Err(OpError::Unsupported(format!(
                "MelWeightMatrix output_datatype {}",
                DType::onnx_name(code)
            )))
        }
    };
    Ok(Arc::new(MelWeightMatrix { out }))
}

// ---------------------------------------------------------------------------------------------
// Compress
// ---------------------------------------------------------------------------------------------

/// `Compress`: the slices along `axis` (or the elements of the flattened input) whose entry of
/// the boolean `condition` is true. The condition must be a build-time constant (it decides the
/// shape); the data may be a run-time value: the output gathers through an index table the
/// generated code computes from the (constant) condition.
#[derive(Debug)]
struct Compress {
    axis: Option<i64>,
}

impl Compress {
    /// `(axis, condition length used, selected count)`; `axis` `None` for the flattened input.
    fn geometry(&self, cx: &InferCx) -> OpResult<(Option<usize>, usize, usize)> {
        let x = cx.input(0)?;
        let cond = cx.konst(1, "Compress's condition (it decides the output shape)")?;
        if cond.ty.rank() != 1 {
            return Err(OpError::expected("a condition of rank 1", &cond.ty));
        }
        let axis = self.axis.map(|a| norm_axis(a, x.rank())).transpose()?;
        let len = axis.map_or(x.numel(), |a| x.shape[a]);
        let mut sel = 0;
        for i in 0..cond.numel() {
            if nonzero(cond, i) {
                if i >= len {
                    return Err(OpError::expected(
                        format!("true conditions only within the {len} selectable positions"),
                        format!("position {i}"),
                    ));
                }
                sel += 1;
            }
        }
        Ok((axis, cond.numel().min(len), sel))
    }
}

impl Operator for Compress {
    fn op_type(&self) -> &'static str {
        "Compress"
    }

    fn kind(&self) -> OpKind {
        OpKind::Opaque
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 2, 2)?;
        let d = check_dtype(cx, 0, PLAIN)?;
        check_dtype(cx, 1, &[DType::Bool])?;
        let (axis, _, sel) = self.geometry(cx)?;
        let shape = match axis {
            Some(a) => {
                let mut s = cx.input(0)?.shape.clone();
                s[a] = sel;
                s
            }
            None => vec![sel],
        };
        Ok(vec![TensorType::new(d, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (axis, n, sel) = self.geometry(&icx(cx))?;
        let out = cx.output(0).clone();
        let on = |i: Expr| {
            Expr::load(Src::Arg(1), vec![i])
                .cast(DType::I64)
                .ne(Expr::i(0))
        };
        // before[i]: how many true conditions precede position i.
        let ity = |len: usize| TensorType::new(DType::I64, vec![len]);
        let one = Expr::select(
            Expr::rvar(0).lt(Expr::var(0)).and(on(Expr::rvar(0))),
            Expr::i(1),
            Expr::i(0),
        );
        let before = cx.reduce(ity(n), RedOp::Sum, vec![n], one, None);
        // index[k]: the position of the k-th true condition.
        let hit = on(Expr::rvar(0)).and(Expr::load(before, vec![Expr::rvar(0)]).eq(Expr::var(0)));
        let pick = Expr::select(hit, Expr::rvar(0), Expr::i(0));
        let index = cx.reduce(ity(sel), RedOp::Sum, vec![n], pick, None);
        let body = match axis {
            Some(a) => {
                let mut idx = vars(out.rank());
                idx[a] = Expr::load(index, vec![Expr::var(a)]);
                Expr::load(Src::Arg(0), idx)
            }
            None => Expr::load_flat(Src::Arg(0), Expr::load(index, vec![Expr::var(0)])),
        };
        Ok(vec![cx.stage(out, body)])
    }
}

fn compress(cx: &OpCx) -> OpResult<Arc<dyn Operator>> {
    Ok(Arc::new(Compress {
        axis: cx.attrs.opt_int("axis")?,
    }))
}

// ---------------------------------------------------------------------------------------------
// OptionalHasElement, OptionalGetElement
// ---------------------------------------------------------------------------------------------

/// `OptionalHasElement`: whether its input is present — a build-time fact here, since every
/// value is a tensor (an omitted input is an empty optional).
#[derive(Debug)]
struct OptionalHasElement;

impl Operator for OptionalHasElement {
    fn op_type(&self) -> &'static str {
        "OptionalHasElement"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 0, 1)?;
        Ok(vec![TensorType::new(DType::Bool, vec![])])
    }

    fn fold_from_types(&self, cx: &InferCx) -> Option<Vec<Tensor>> {
        let ty = TensorType::new(DType::Bool, vec![]);
        Tensor::from_bytes(ty, vec![cx.has(0) as u8]).map(|t| vec![t])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let present = cx.has(0);
        let out = cx.output(0).clone();
        Ok(vec![cx.stage(out, Expr::bool(present))])
    }
}

/// `OptionalGetElement` of a tensor: the tensor itself.
#[derive(Debug)]
struct OptionalGetElement;

impl Operator for OptionalGetElement {
    fn op_type(&self) -> &'static str {
        "OptionalGetElement"
    }

    fn kind(&self) -> OpKind {
        OpKind::Elementwise
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, 1, 1)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, _cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        Ok(vec![Src::Arg(0)])
    }
}

/// The `folded` family's registry.
pub const OPS: &[(&str, Constructor)] = &[
    ("NonZero", |_| Ok(Arc::new(NonZero))),
    ("Unique", unique),
    ("NonMaxSuppression", |cx| {
        Ok(Arc::new(Nms {
            center_point_box: cx.attrs.int("center_point_box", 0)? != 0,
        }))
    }),
    ("MelWeightMatrix", mel_weight_matrix),
    ("Compress", compress),
    ("OptionalHasElement", |_| Ok(Arc::new(OptionalHasElement))),
    ("OptionalGetElement", |_| Ok(Arc::new(OptionalGetElement))),
];
