//! Operators of the `quant` family: linear quantization (`QuantizeLinear`, `DequantizeLinear`,
//! `DynamicQuantizeLinear`) and the integer and quantized contractions (`MatMulInteger`,
//! `ConvInteger`, `QLinearMatMul`, `QLinearConv`).
//!
//! Quantization divides by the scale, rounds half to even, adds the zero point and saturates to
//! the output type's range, all in floating point (NaN saturates to the lowest value), then
//! converts; to a float type (float8, FLOAT4E2M1) it divides, adds the zero point and converts
//! (rounding to the type's nearest value, saturating as `Cast` does). The contractions subtract their zero points in i32 stages and lower the contraction
//! itself through the `MatMul` / `Conv` operators of the `matmul` / `nn` families over those
//! stages, so that it accumulates in i32; the quantized ones then requantize the i32 result in
//! f64: `saturate(round(acc * (scale_a * scale_b / scale_y) + zero_point_y))`, the multiplier
//! computed in the scales' type (as the ONNX reference implementation does).
use std::sync::Arc;

use super::{
    check_dtype, lookup, norm_axis, Constructor, InferCx, LowerCx, OpCx, OpKind, OpResult,
    Operator, FLOATS,
};
use crate::error::OpError;
use crate::te::{bcast_index, Expr, RedOp, Src};
use crate::tensor::{DType, E8M0Round, TensorType};

/// The types a tensor is quantized to: integers (of 16 bits and less) and the float8 types and
/// FLOAT4E2M1 (`passes/infer.rs` does not widen these floats where they are the quantized
/// operand).
const QUANT: &[DType] = &[
    DType::I8,
    DType::U8,
    DType::I16,
    DType::U16,
    DType::I4,
    DType::U4,
    DType::I2,
    DType::U2,
    DType::F8E4M3FN,
    DType::F8E4M3FNUZ,
    DType::F8E5M2,
    DType::F8E5M2FNUZ,
    DType::F4E2M1,
];
/// The element types of the integer contractions' operands.
const BYTES: &[DType] = &[DType::I8, DType::U8];
/// What QuantizeLinear quantizes, and its scales.
const Q_INPUTS: &[DType] = &[DType::F32, DType::F64, DType::I32, DType::F16, DType::BF16];
/// The types of scales. The inference pass widens the 16-bit floats to f32 before most
/// operators see them; read as such, they round as their type would.
const SCALES: &[DType] = &[DType::F32, DType::F64, DType::F16, DType::BF16];
/// What DequantizeLinear dequantizes.
const DQ_INPUTS: &[DType] = &[
    DType::I8,
    DType::U8,
    DType::I16,
    DType::U16,
    DType::I32,
    DType::I4,
    DType::U4,
    DType::I2,
    DType::U2,
    DType::F8E4M3FN,
    DType::F8E4M3FNUZ,
    DType::F8E5M2,
    DType::F8E5M2FNUZ,
    DType::F4E2M1,
];
/// DequantizeLinear's output types.
const DQ_OUTPUTS: &[DType] = &[DType::F32, DType::F64, DType::F16, DType::BF16];
/// The types of QuantizeLinear's `precision` attribute.
const PRECISIONS: &[DType] = &[DType::F32, DType::F64, DType::F16, DType::BF16];

/// True if a tensor of `shape` holds exactly one element.
fn is_single(shape: &[usize]) -> bool {
    shape.iter().all(|&d| d == 1)
}

/// Output index variables `Var(0..rank)`.
fn vars(rank: usize) -> Vec<Expr> {
    (0..rank).map(Expr::var).collect()
}

/// `e` of type `from` converted to `to` (no conversion when they are the same).
fn convert(e: Expr, from: DType, to: DType) -> Expr {
    if from == to {
        e
    } else {
        e.cast(to)
    }
}

/// `v`, a value of float type `fd` holding an integer (or NaN or an infinity), saturated to the
/// range of the integer type `to` and converted to it; NaN becomes the lowest value.
fn saturate(v: Expr, fd: DType, to: DType) -> Expr {
    let (lo, hi) = to.int_range().expect("an integer type");
    let (lo, hi) = (Expr::c(fd, lo as f64), Expr::c(fd, hi as f64));
    Expr::select(v.clone().ge(lo.clone()), v, lo)
        .min(hi)
        .cast(to)
}

/// Checks the input count: inputs `0..min` present, at most `max` given.
fn arity(cx: &InferCx, required: &[usize], max: usize) -> OpResult<()> {
    if cx.inputs.len() > max {
        return Err(OpError::expected(
            format!("at most {max} inputs"),
            cx.inputs.len(),
        ));
    }
    for &i in required {
        cx.input(i)?;
    }
    Ok(())
}

/// A type-valued attribute (an ONNX `TensorProto.DataType` code, 0 or absent: none) that must
/// be one of `allowed`.
fn dtype_attr(cx: &OpCx, name: &str, allowed: &[DType]) -> OpResult<Option<DType>> {
    let code = cx.attrs.int(name, 0)?;
    if code == 0 {
        return Ok(None);
    }
    // A code outside i32 is no type (not a truncated one).
    let code = i32::try_from(code).unwrap_or(-1);
    let names = || {
        allowed
            .iter()
            .map(|d| DType::onnx_name(d.onnx_code()))
            .collect::<Vec<_>>()
            .join("/")
    };
    match DType::from_onnx(code) {
        Some(d) if allowed.contains(&d) => Ok(Some(d)),
        Some(_) => Err(OpError::expected(
            format!("attribute `{name}` {}", names()),
            DType::onnx_name(code),
        )),
        // A type of the ONNX standard without an element type here (string, complex).
        None if (1..=26).contains(&code) => Err(OpError::Unsupported(format!(
            "`{name}` {}",
            DType::onnx_name(code)
        ))),
        None => Err(OpError::expected(
            format!("attribute `{name}` {}", names()),
            code,
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// QuantizeLinear, DequantizeLinear
// ---------------------------------------------------------------------------------------------

/// How the scale (and zero point) of QuantizeLinear / DequantizeLinear maps onto the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gran {
    /// One value for the whole tensor.
    Tensor,
    /// One value per index along an axis (a 1-D parameter).
    Axis(usize),
    /// One value per `size` consecutive indices along `axis` (a parameter of the input's rank).
    Block {
        /// The blocked axis.
        axis: usize,
        /// The block size.
        size: usize,
    },
}

impl Gran {
    /// The granularity of a scale of shape `p` for an input of shape `x`.
    fn of(x: &[usize], p: &[usize], axis: i64, block: i64) -> OpResult<Gran> {
        let r = x.len();
        if block < 0 {
            return Err(OpError::expected("block_size >= 0", block));
        }
        // One value: a scalar, a 1-element vector, or (blocked) a tensor of the input's rank.
        if is_single(p) && (p.len() <= 1 || p.len() == r) {
            return Ok(Gran::Tensor);
        }
        if block == 0 {
            if p.len() != 1 || r == 0 {
                return Err(OpError::expected(
                    format!(
                        "a scale of one element or a 1-D scale along `axis` of the input {x:?} \
                         (or block_size for a blocked one)"
                    ),
                    format!("{p:?}"),
                ));
            }
            let a = norm_axis(axis, r)?;
            if p[0] != x[a] {
                return Err(OpError::expected(
                    format!(
                        "a 1-D scale of length {} (input {x:?} along axis {a})",
                        x[a]
                    ),
                    format!("{p:?}"),
                ));
            }
            return Ok(Gran::Axis(a));
        }
        let bad = |a: Option<usize>| {
            OpError::expected(
                format!(
                    "a blocked scale of the input's shape {x:?} but along axis {} \
                     ceil(dimension / block_size {block})",
                    a.map_or(axis.to_string(), |a| a.to_string())
                ),
                format!("{p:?}"),
            )
        };
        if p.len() != r {
            return Err(bad(None));
        }
        let a = norm_axis(axis, r)?;
        let size = usize::try_from(block).map_err(|_| bad(Some(a)))?;
        for d in 0..r {
            let want = if d == a { x[d].div_ceil(size) } else { x[d] };
            if p[d] != want {
                return Err(bad(Some(a)));
            }
        }
        Ok(Gran::Block { axis: a, size })
    }

    /// The index of a parameter of shape `p` read at input element `Var(0..)`.
    fn index(self, p: &[usize]) -> Vec<Expr> {
        match self {
            _ if is_single(p) => vec![Expr::i(0); p.len()],
            Gran::Tensor => vec![Expr::i(0); p.len()],
            Gran::Axis(a) => vec![Expr::var(a)],
            Gran::Block { axis, size } => (0..p.len())
                .map(|d| {
                    if d == axis {
                        Expr::var(d).div(Expr::i(size as i64))
                    } else {
                        Expr::var(d)
                    }
                })
                .collect(),
        }
    }
}

/// Checks that a zero point of shape `zp` matches its scale's shape `scale`.
fn check_zero_point(scale: &[usize], zp: &[usize]) -> OpResult<()> {
    if scale == zp || (is_single(scale) && is_single(zp) && zp.len() <= scale.len().max(1)) {
        Ok(())
    } else {
        Err(OpError::expected(
            format!("a zero point of the scale's shape {scale:?}"),
            format!("{zp:?}"),
        ))
    }
}

/// `QuantizeLinear`: `saturate(round(x / y_scale) + y_zero_point)`, per tensor, per axis or
/// blocked. To a float type (float8, FLOAT4E2M1): `x / y_scale + y_zero_point` (not rounded to
/// an integer) converted to the type, saturating at its largest value unless `saturate` is 0
/// (float8 only, as `Cast`).
#[derive(Debug)]
struct QuantizeLinear {
    axis: i64,
    block_size: i64,
    output_dtype: Option<DType>,
    precision: Option<DType>,
    saturate: bool,
}

impl Operator for QuantizeLinear {
    fn op_type(&self) -> &'static str {
        "QuantizeLinear"
    }

    fn kind(&self) -> OpKind {
        if self.block_size == 0 {
            OpKind::Broadcast
        } else {
            OpKind::Injective
        }
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, &[0, 1], 3)?;
        check_dtype(cx, 0, Q_INPUTS)?;
        check_dtype(cx, 1, Q_INPUTS)?;
        let out = if cx.has(2) {
            let z = check_dtype(cx, 2, QUANT)?;
            if let Some(o) = self.output_dtype.filter(|&o| o != z) {
                return Err(OpError::expected(
                    format!("output_dtype {o} equal to y_zero_point's type"),
                    z,
                ));
            }
            z
        } else {
            self.output_dtype.unwrap_or(DType::U8)
        };
        let (x, s) = (cx.input(0)?, cx.input(1)?);
        Gran::of(&x.shape, &s.shape, self.axis, self.block_size)?;
        if cx.has(2) {
            check_zero_point(&s.shape, &cx.input(2)?.shape)?;
        }
        Ok(vec![TensorType::new(out, x.shape.clone())])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (x, s) = (cx.input(0).clone(), cx.input(1).clone());
        let g = Gran::of(&x.shape, &s.shape, self.axis, self.block_size)?;
        let out = cx.output(0).clone();
        // The division's precision: the attribute's, else the scale's (f64 for an i32 scale).
        // The 16-bit floats compute on f32, rounded to their type after each step.
        let precision = self.precision.or(Some(s.dtype).filter(|d| d.is_half()));
        let cd = match precision {
            Some(DType::F64) => DType::F64,
            Some(_) => DType::F32,
            None if s.dtype == DType::F32 => DType::F32,
            None => DType::F64,
        };
        let half = precision.filter(|d| d.is_half());
        let narrow = |e: Expr| match half {
            Some(h) => e.cast(h).cast(DType::F32),
            None => e,
        };
        let xv = narrow(convert(
            Expr::load(Src::Arg(0), vars(x.rank())),
            x.dtype,
            cd,
        ));
        let sv = narrow(convert(
            Expr::load(Src::Arg(1), g.index(&s.shape)),
            s.dtype,
            cd,
        ));
        let mut q = narrow(xv.div(sv));
        if !out.dtype.is_float() {
            q = q.round();
        }
        if cx.has(2) {
            let z = cx.input(2).clone();
            q = q.add(Expr::load(Src::Arg(2), g.index(&z.shape)).cast(cd));
        }
        let y = if out.dtype.is_float() {
            super::elementwise::cast(q, out.dtype, self.saturate, E8M0Round::Up)
        } else {
            saturate(q, cd, out.dtype)
        };
        Ok(vec![cx.stage(out.clone(), y)])
    }
}

/// `DequantizeLinear`: `(x - x_zero_point) * x_scale`, per tensor, per axis or blocked (the
/// float8 and FLOAT4E2M1 inputs too: their zero point, usually zero, is subtracted as the
/// formula says).
#[derive(Debug)]
struct DequantizeLinear {
    axis: i64,
    block_size: i64,
    output_dtype: Option<DType>,
}

impl Operator for DequantizeLinear {
    fn op_type(&self) -> &'static str {
        "DequantizeLinear"
    }

    fn kind(&self) -> OpKind {
        if self.block_size == 0 {
            OpKind::Broadcast
        } else {
            OpKind::Injective
        }
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, &[0, 1], 3)?;
        let dx = check_dtype(cx, 0, DQ_INPUTS)?;
        let ds = check_dtype(cx, 1, SCALES)?;
        let (x, s) = (cx.input(0)?, cx.input(1)?);
        Gran::of(&x.shape, &s.shape, self.axis, self.block_size)?;
        if cx.has(2) {
            check_dtype(cx, 2, &[dx])?;
            check_zero_point(&s.shape, &cx.input(2)?.shape)?;
        }
        let out = self.output_dtype.unwrap_or(ds);
        Ok(vec![TensorType::new(out, x.shape.clone())])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let (x, s) = (cx.input(0).clone(), cx.input(1).clone());
        let g = Gran::of(&x.shape, &s.shape, self.axis, self.block_size)?;
        let out = cx.output(0).clone();
        let cd = if out.dtype == DType::F64 || s.dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let mut v = Expr::load(Src::Arg(0), vars(x.rank())).cast(cd);
        if cx.has(2) {
            let z = cx.input(2).clone();
            v = v.sub(Expr::load(Src::Arg(2), g.index(&z.shape)).cast(cd));
        }
        let sv = convert(Expr::load(Src::Arg(1), g.index(&s.shape)), s.dtype, cd);
        let y = convert(v.mul(sv), cd, out.dtype);
        Ok(vec![cx.stage(out, y)])
    }
}

// ---------------------------------------------------------------------------------------------
// DynamicQuantizeLinear
// ---------------------------------------------------------------------------------------------

/// `DynamicQuantizeLinear`: uint8 quantization with the scale and zero point that map the
/// input's range (widened to include 0) onto [0, 255].
#[derive(Debug)]
struct DynamicQuantizeLinear;

impl Operator for DynamicQuantizeLinear {
    fn op_type(&self) -> &'static str {
        "DynamicQuantizeLinear"
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, &[0], 1)?;
        let d = check_dtype(cx, 0, FLOATS)?;
        let x = cx.input(0)?;
        Ok(vec![
            TensorType::new(DType::U8, x.shape.clone()),
            TensorType::new(d, vec![]),
            TensorType::new(DType::U8, vec![]),
        ])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let x = cx.input(0).clone();
        let d = x.dtype;
        let (extents, idx) = if x.rank() == 0 {
            (vec![1], vec![])
        } else {
            (x.shape.clone(), (0..x.rank()).map(Expr::rvar).collect())
        };
        let scalar = TensorType::new(d, vec![]);
        let xr = Expr::load(Src::Arg(0), idx);
        let hi = cx.reduce(
            scalar.clone(),
            RedOp::Max,
            extents.clone(),
            xr.clone(),
            None,
        );
        let lo = cx.reduce(scalar.clone(), RedOp::Min, extents, xr, None);
        let c = |v: f64| Expr::c(d, v);
        let max = Expr::load(hi, vec![]).max(c(0.0));
        let min = Expr::load(lo, vec![]).min(c(0.0));
        let range = Expr::select(max.clone().eq(min.clone()), c(1.0), max.sub(min.clone()));
        let scale = cx.stage(scalar.clone(), range.div(c(255.0)));
        let sv = Expr::load(scale, vec![]);
        // qmin - min / scale, saturated to [0, 255] and rounded (min <= 0: it is >= 0 unless
        // NaN).
        let zp = c(0.0).sub(min.div(sv.clone()));
        let zp = Expr::select(zp.clone().ge(c(0.0)), zp, c(0.0))
            .min(c(255.0))
            .round();
        let zpf = cx.stage(scalar, zp);
        let zv = Expr::load(zpf, vec![]);
        let q = Expr::load(Src::Arg(0), vars(x.rank()))
            .div(sv)
            .round()
            .add(zv.clone());
        let y = cx.stage(
            TensorType::new(DType::U8, x.shape.clone()),
            saturate(q, d, DType::U8),
        );
        let z = cx.stage(TensorType::new(DType::U8, vec![]), zv.cast(DType::U8));
        Ok(vec![y, scale, z])
    }
}

// ---------------------------------------------------------------------------------------------
// Integer contractions: shared pieces
// ---------------------------------------------------------------------------------------------

/// The operator `op_type` of another family, built from this node's attributes: the contraction
/// the integer operators lower through.
fn inner_op(cx: &OpCx, op_type: &str, n_inputs: usize) -> OpResult<Arc<dyn Operator>> {
    let make = lookup(op_type)
        .ok_or_else(|| OpError::Unsupported(format!("{op_type} (not registered)")))?;
    make(&OpCx {
        attrs: cx.attrs,
        opset: cx.opset,
        n_inputs,
        n_outputs: 1,
    })
}

/// The output type `op` infers from the input types `inputs`.
fn inner_infer(op: &dyn Operator, inputs: &[Option<TensorType>]) -> OpResult<TensorType> {
    let consts = vec![None; inputs.len()];
    let mut outs = op.infer(&InferCx {
        inputs,
        consts: &consts,
    })?;
    if outs.is_empty() {
        return Err(OpError::expected(
            format!("an output of {}", op.op_type()),
            "none",
        ));
    }
    Ok(outs.swap_remove(0))
}

/// Lowers `op` over `args` (sources and their types; `None` for omitted inputs) to outputs of
/// types `outs`, appending its stages to `cx`; returns the sources of its outputs.
fn lower_via(
    cx: &mut LowerCx,
    op: &dyn Operator,
    args: &[Option<(Src, TensorType)>],
    outs: &[TensorType],
) -> OpResult<Vec<Src>> {
    let inputs: Vec<Option<TensorType>> = args
        .iter()
        .map(|a| a.as_ref().map(|(_, t)| t.clone()))
        .collect();
    let consts = vec![None; args.len()];
    let mut inner = LowerCx {
        inputs: &inputs,
        consts: &consts,
        outputs: outs,
        stages: vec![],
        name: cx.name.clone(),
        direct: false,
        uniform: false,
    };
    let srcs = op.lower(&mut inner)?;
    let base = cx.stages.len() as u32;
    let map = |s: Src| match s {
        Src::Arg(i) => {
            args[i as usize]
                .as_ref()
                .expect("lowering reads a present input")
                .0
        }
        Src::Local(j) => Src::Local(base + j),
        b => b,
    };
    for (j, mut st) in inner.stages.into_iter().enumerate() {
        st.name = format!("{}_{}", cx.name, base as usize + j);
        st.body = st.body.map_src(&map);
        if let Some(f) = st.reduce.as_mut().and_then(|r| r.finalize.as_mut()) {
            *f = f.map_src(&map);
        }
        cx.stages.push(st);
    }
    Ok(srcs.into_iter().map(map).collect())
}

/// A stage `i32(input i) - i32(zero point)`, the zero point (input `zp`, if present) read at
/// `zidx` (over the input's element variables).
fn shifted(cx: &mut LowerCx, i: usize, zp: Option<(usize, Vec<Expr>)>) -> (Src, TensorType) {
    let t = TensorType::new(DType::I32, cx.input(i).shape.clone());
    let mut e = Expr::load(Src::Arg(i as u32), vars(t.rank())).cast(DType::I32);
    if let Some((z, idx)) = zp {
        e = e.sub(Expr::load(Src::Arg(z as u32), idx).cast(DType::I32));
    }
    (cx.stage(t.clone(), e), t)
}

/// `t` with element type `d`.
fn retyped(t: &TensorType, d: DType) -> TensorType {
    TensorType::new(d, t.shape.clone())
}

/// The requantization multiplier `a * b / y` of scales of type `ts` as an f64 value, computed
/// in `ts` (the 16-bit floats on f32, rounded to their type after each step).
fn multiplier(a: Expr, b: Expr, y: Expr, ts: DType) -> Expr {
    let cd = if ts == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let round = |e: Expr| {
        if ts.is_half() {
            e.cast(ts).cast(DType::F32)
        } else {
            e
        }
    };
    let (a, b, y) = (convert(a, ts, cd), convert(b, ts, cd), convert(y, ts, cd));
    convert(round(round(a.mul(b)).div(y)), cd, DType::F64)
}

/// The requantization of an i32 contraction result `acc` at output element `Var(..)`:
/// `saturate(round(acc * mult + zero_point))` in f64, `mult` (f64, from [`multiplier`]) and the
/// zero point (input `zp`, if present, read at `zidx`) given. The zero point is added before
/// rounding, as the ONNX reference implementation does (an odd zero point moves ties).
fn requantize(acc: Expr, mult: Expr, zp: Option<(usize, Vec<Expr>)>, to: DType) -> Expr {
    let mut v = acc.cast(DType::F64).mul(mult);
    if let Some((z, idx)) = zp {
        v = v.add(Expr::load(Src::Arg(z as u32), idx).cast(DType::F64));
    }
    saturate(v.round(), DType::F64, to)
}

/// Input `i`, present, read at `idx`.
fn arg(i: usize, idx: Vec<Expr>) -> Expr {
    Expr::load(Src::Arg(i as u32), idx)
}

// ---------------------------------------------------------------------------------------------
// MatMulInteger, QLinearMatMul
// ---------------------------------------------------------------------------------------------

/// A matmul operand: A (parameters per row) or B (per column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    A,
    B,
}

impl Side {
    /// The contracted dimension of an operand of rank `r` (at least 1).
    fn contracted(self, r: usize) -> usize {
        match self {
            Side::A => r - 1,
            Side::B => r.saturating_sub(2),
        }
    }
}

/// The index of a per-tensor, per-row (A) or per-column (B) parameter of shape `p` (a zero
/// point or scale named `what`) of the operand of shape `op`, whose dimension `k` is read at
/// `dims[k]`: scalars and 1-element tensors per tensor, a 1-D parameter per row (A: length M)
/// or per column (B: length N), an N-D one broadcast against the operand but constant along
/// the contracted dimension.
fn operand_param(
    p: &[usize],
    op: &[usize],
    side: Side,
    dims: &[Expr],
    what: &str,
) -> OpResult<Vec<Expr>> {
    if is_single(p) {
        return Ok(vec![Expr::i(0); p.len()]);
    }
    let r = op.len();
    let kdim = side.contracted(r);
    let bad = || {
        OpError::expected(
            format!(
                "{what} of one element or per {} of the operand {op:?}",
                if side == Side::A { "row" } else { "column" }
            ),
            format!("{p:?}"),
        )
    };
    if p.len() == 1 && r >= 2 {
        let k = if side == Side::A { r - 2 } else { r - 1 };
        return if p[0] == op[k] {
            Ok(vec![dims[k].clone()])
        } else {
            Err(bad())
        };
    }
    if p.len() < 2 || p.len() > r {
        return Err(bad());
    }
    let off = r - p.len();
    p.iter()
        .enumerate()
        .map(|(j, &d)| {
            let k = off + j;
            if d == 1 {
                Ok(Expr::i(0))
            } else if d == op[k] && k != kdim {
                Ok(dims[k].clone())
            } else {
                Err(bad())
            }
        })
        .collect()
}

/// The index of a per-tensor parameter of shape `p` (`what`), or one broadcast against the
/// output of shape `out`, at output element `Var(..)`.
fn output_param(p: &[usize], out: &[usize], what: &str) -> OpResult<Vec<Expr>> {
    if is_single(p) {
        return Ok(vec![Expr::i(0); p.len()]);
    }
    let fits = p.len() <= out.len()
        && p.iter()
            .zip(&out[out.len() - p.len()..])
            .all(|(&d, &o)| d == 1 || d == o);
    if !fits {
        return Err(OpError::expected(
            format!("{what} of one element or broadcastable to the output {out:?}"),
            format!("{p:?}"),
        ));
    }
    Ok(bcast_index(out, p))
}

/// The output variables that index each dimension of a matmul operand of rank `r` in the
/// output (A of rank `a_rank` times B of rank `b_rank`, output rank `out_rank`); the contracted
/// dimension gets a placeholder 0, never read ([`operand_param`] refuses parameters varying
/// along it).
fn operand_dims_in_output(
    r: usize,
    side: Side,
    (a_rank, b_rank): (usize, usize),
    out_rank: usize,
) -> Vec<Expr> {
    let has_m = (a_rank >= 2) as usize;
    let nb = out_rank - has_m - (b_rank >= 2) as usize;
    let batch = r.saturating_sub(2);
    (0..r)
        .map(|k| {
            if k < batch {
                Expr::var(nb - batch + k)
            } else if k == side.contracted(r) {
                Expr::i(0)
            } else if side == Side::A {
                Expr::var(nb)
            } else {
                Expr::var(nb + has_m)
            }
        })
        .collect()
}

/// `MatMulInteger`: numpy `matmul` of `A - a_zero_point` and `B - b_zero_point`, in i32.
#[derive(Debug)]
struct MatMulInteger {
    mm: Arc<dyn Operator>,
}

impl Operator for MatMulInteger {
    fn op_type(&self) -> &'static str {
        "MatMulInteger"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, &[0, 1], 4)?;
        let da = check_dtype(cx, 0, BYTES)?;
        let db = check_dtype(cx, 1, BYTES)?;
        let (a, b) = (cx.input(0)?, cx.input(1)?);
        let out = inner_infer(
            &*self.mm,
            &[Some(retyped(a, DType::I32)), Some(retyped(b, DType::I32))],
        )?;
        for (z, d, t, side, what) in [
            (2, da, a, Side::A, "a_zero_point"),
            (3, db, b, Side::B, "b_zero_point"),
        ] {
            if cx.has(z) {
                check_dtype(cx, z, &[d])?;
                operand_param(&cx.input(z)?.shape, &t.shape, side, &vars(t.rank()), what)?;
            }
        }
        Ok(vec![out])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let mut args = Vec::new();
        for (i, z, side) in [(0, 2, Side::A), (1, 3, Side::B)] {
            let zp = if cx.has(z) {
                let t = &cx.input(i).shape;
                let idx = operand_param(&cx.input(z).shape, t, side, &vars(t.len()), "")?;
                Some((z, idx))
            } else {
                None
            };
            args.push(Some(shifted(cx, i, zp)));
        }
        let out = cx.output(0).clone();
        lower_via(cx, &*self.mm, &args, &[out])
    }
}

/// `QLinearMatMul`: the quantized matmul; zero points of A and B subtracted, accumulated in
/// i32, requantized with `a_scale * b_scale / y_scale` and `y_zero_point`.
#[derive(Debug)]
struct QLinearMatMul {
    mm: Arc<dyn Operator>,
}

impl QLinearMatMul {
    /// The parameters of each operand: (operand, scale, zero point, side).
    const OPERANDS: [(usize, usize, usize, Side); 2] = [(0, 1, 2, Side::A), (3, 4, 5, Side::B)];
}

impl Operator for QLinearMatMul {
    fn op_type(&self) -> &'static str {
        "QLinearMatMul"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, &[0, 1, 3, 4, 6], 8)?;
        let da = check_dtype(cx, 0, BYTES)?;
        let db = check_dtype(cx, 3, BYTES)?;
        let ts = check_dtype(cx, 1, SCALES)?;
        check_dtype(cx, 4, &[ts])?;
        check_dtype(cx, 6, &[ts])?;
        let (a, b) = (cx.input(0)?, cx.input(3)?);
        let acc = inner_infer(
            &*self.mm,
            &[Some(retyped(a, DType::I32)), Some(retyped(b, DType::I32))],
        )?;
        for (x, s, z, side) in Self::OPERANDS {
            let t = cx.input(x)?;
            let dims = vars(t.rank());
            let names = if side == Side::A {
                ["a_scale", "a_zero_point"]
            } else {
                ["b_scale", "b_zero_point"]
            };
            operand_param(&cx.input(s)?.shape, &t.shape, side, &dims, names[0])?;
            if cx.has(z) {
                check_dtype(cx, z, &[if side == Side::A { da } else { db }])?;
                operand_param(&cx.input(z)?.shape, &t.shape, side, &dims, names[1])?;
            }
        }
        output_param(&cx.input(6)?.shape, &acc.shape, "y_scale")?;
        let out = if cx.has(7) {
            output_param(&cx.input(7)?.shape, &acc.shape, "y_zero_point")?;
            check_dtype(cx, 7, BYTES)?
        } else {
            da
        };
        Ok(vec![retyped(&acc, out)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let out = cx.output(0).clone();
        let ranks = (cx.input(0).rank(), cx.input(3).rank());
        let mut args = Vec::new();
        let mut scales = Vec::new();
        for (x, s, z, side) in Self::OPERANDS {
            let t = cx.input(x).shape.clone();
            let zp = if cx.has(z) {
                let idx = operand_param(&cx.input(z).shape, &t, side, &vars(t.len()), "")?;
                Some((z, idx))
            } else {
                None
            };
            args.push(Some(shifted(cx, x, zp)));
            let dims = operand_dims_in_output(t.len(), side, ranks, out.rank());
            scales.push(arg(
                s,
                operand_param(&cx.input(s).shape, &t, side, &dims, "")?,
            ));
        }
        let ts = cx.input(1).dtype;
        let acc_ty = retyped(&out, DType::I32);
        let acc = lower_via(cx, &*self.mm, &args, &[acc_ty])?[0];
        let ys = arg(6, output_param(&cx.input(6).shape, &out.shape, "")?);
        let bs = scales.pop().expect("two operands");
        let mult = multiplier(scales.pop().expect("two operands"), bs, ys, ts);
        let zp = if cx.has(7) {
            Some((7, output_param(&cx.input(7).shape, &out.shape, "")?))
        } else {
            None
        };
        let acc = Expr::load(acc, vars(out.rank()));
        let body = requantize(acc, mult, zp, out.dtype);
        Ok(vec![cx.stage(out, body)])
    }
}

// ---------------------------------------------------------------------------------------------
// ConvInteger, QLinearConv
// ---------------------------------------------------------------------------------------------

/// True if a parameter of shape `p` (`what`) is per output channel (a 1-D tensor of the `m`
/// output channels); false if it is one value; an error otherwise.
fn per_channel(p: &[usize], m: usize, what: &str) -> OpResult<bool> {
    if is_single(p) && p.len() <= 1 {
        Ok(false)
    } else if p == [m] {
        Ok(true)
    } else {
        Err(OpError::expected(
            format!("{what} of one element or of the {m} output channels"),
            format!("{p:?}"),
        ))
    }
}

/// Checks that a parameter of shape `p` (`what`) is one value.
fn per_tensor(p: &[usize], what: &str) -> OpResult<()> {
    if is_single(p) && p.len() <= 1 {
        Ok(())
    } else {
        Err(OpError::expected(
            format!("{what} of one element (a scalar or a 1-element vector)"),
            format!("{p:?}"),
        ))
    }
}

/// The index of a per-tensor or per-output-channel parameter of shape `p`, the channel read at
/// `channel`.
fn channel_index(p: &[usize], m: usize, channel: Expr) -> OpResult<Vec<Expr>> {
    Ok(if per_channel(p, m, "")? {
        vec![channel]
    } else {
        vec![Expr::i(0); p.len()]
    })
}

/// The zero-point-shifted operands of a convolution and its bias: `x` (input `x`, zero point
/// `xz`), `w` (input `w`, zero point `wz` per tensor or per output channel), bias input `bias`.
fn conv_args(
    cx: &mut LowerCx,
    (x, xz): (usize, usize),
    (w, wz): (usize, usize),
    bias: usize,
) -> OpResult<Vec<Option<(Src, TensorType)>>> {
    let m = cx.input(w).shape[0];
    let xzp = cx
        .has(xz)
        .then(|| (xz, vec![Expr::i(0); cx.input(xz).rank()]));
    let wzp = if cx.has(wz) {
        Some((wz, channel_index(&cx.input(wz).shape, m, Expr::var(0))?))
    } else {
        None
    };
    let xs = shifted(cx, x, xzp);
    let ws = shifted(cx, w, wzp);
    let b = cx
        .has(bias)
        .then(|| (Src::Arg(bias as u32), cx.input(bias).clone()));
    Ok(vec![Some(xs), Some(ws), b])
}

/// The output type of `conv` (a `Conv`) over `x` and `w` (and a bias of type `bias`), element
/// type `d`.
fn conv_infer(
    conv: &dyn Operator,
    x: &TensorType,
    w: &TensorType,
    bias: Option<&TensorType>,
    d: DType,
) -> OpResult<TensorType> {
    if x.rank() < 3 {
        return Err(OpError::expected(
            "an input of rank >= 3 (N x C x D1 x ...)",
            format!("{:?}", x.shape),
        ));
    }
    let f = |t: &TensorType| retyped(t, DType::F32);
    let t = inner_infer(conv, &[Some(f(x)), Some(f(w)), bias.map(f)])?;
    Ok(retyped(&t, d))
}

/// `ConvInteger`: convolution of `x - x_zero_point` and `w - w_zero_point`, in i32.
#[derive(Debug)]
struct ConvInteger {
    conv: Arc<dyn Operator>,
}

impl Operator for ConvInteger {
    fn op_type(&self) -> &'static str {
        "ConvInteger"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, &[0, 1], 4)?;
        let dx = check_dtype(cx, 0, BYTES)?;
        let dw = check_dtype(cx, 1, BYTES)?;
        let (x, w) = (cx.input(0)?, cx.input(1)?);
        let out = conv_infer(&*self.conv, x, w, None, DType::I32)?;
        if cx.has(2) {
            check_dtype(cx, 2, &[dx])?;
            per_tensor(&cx.input(2)?.shape, "x_zero_point")?;
        }
        if cx.has(3) {
            check_dtype(cx, 3, &[dw])?;
            per_channel(&cx.input(3)?.shape, w.shape[0], "w_zero_point")?;
        }
        Ok(vec![out])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        // No bias: input 4 is never present.
        let args = conv_args(cx, (0, 2), (1, 3), 4)?;
        let out = cx.output(0).clone();
        lower_via(cx, &*self.conv, &args, &[out])
    }
}

/// `QLinearConv`: the quantized convolution; zero points subtracted, accumulated in i32 with
/// the i32 bias, requantized with `x_scale * w_scale / y_scale` (`w_scale` per tensor or per
/// output channel) and `y_zero_point`.
#[derive(Debug)]
struct QLinearConv {
    conv: Arc<dyn Operator>,
}

impl Operator for QLinearConv {
    fn op_type(&self) -> &'static str {
        "QLinearConv"
    }

    fn kind(&self) -> OpKind {
        OpKind::OutElementwiseFusable
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        arity(cx, &[0, 1, 3, 4, 6], 9)?;
        let dx = check_dtype(cx, 0, BYTES)?;
        let dw = check_dtype(cx, 3, BYTES)?;
        let ts = check_dtype(cx, 1, SCALES)?;
        check_dtype(cx, 4, &[ts])?;
        check_dtype(cx, 6, &[ts])?;
        let (x, w) = (cx.input(0)?, cx.input(3)?);
        let bias = if cx.has(8) {
            check_dtype(cx, 8, &[DType::I32])?;
            Some(cx.input(8)?)
        } else {
            None
        };
        let out = if cx.has(7) {
            check_dtype(cx, 7, BYTES)?
        } else {
            dx
        };
        let out = conv_infer(&*self.conv, x, w, bias, out)?;
        let m = w.shape[0];
        per_tensor(&cx.input(1)?.shape, "x_scale")?;
        per_channel(&cx.input(4)?.shape, m, "w_scale")?;
        per_tensor(&cx.input(6)?.shape, "y_scale")?;
        if cx.has(2) {
            check_dtype(cx, 2, &[dx])?;
            per_tensor(&cx.input(2)?.shape, "x_zero_point")?;
        }
        if cx.has(5) {
            check_dtype(cx, 5, &[dw])?;
            per_channel(&cx.input(5)?.shape, m, "w_zero_point")?;
        }
        if cx.has(7) {
            per_tensor(&cx.input(7)?.shape, "y_zero_point")?;
        }
        Ok(vec![out])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>> {
        let out = cx.output(0).clone();
        let m = cx.input(3).shape[0];
        let args = conv_args(cx, (0, 2), (3, 5), 8)?;
        let acc = lower_via(cx, &*self.conv, &args, &[retyped(&out, DType::I32)])?[0];
        let ts = cx.input(1).dtype;
        let zeros = |cx: &LowerCx, i: usize| vec![Expr::i(0); cx.input(i).rank()];
        let ws = channel_index(&cx.input(4).shape, m, Expr::var(1))?;
        let mult = multiplier(arg(1, zeros(cx, 1)), arg(4, ws), arg(6, zeros(cx, 6)), ts);
        let zp = cx.has(7).then(|| (7, zeros(cx, 7)));
        let acc = Expr::load(acc, vars(out.rank()));
        let body = requantize(acc, mult, zp, out.dtype);
        Ok(vec![cx.stage(out, body)])
    }
}

// ---------------------------------------------------------------------------------------------
// Registry
// ---------------------------------------------------------------------------------------------

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("QuantizeLinear", |cx: &OpCx| {
        Ok(Arc::new(QuantizeLinear {
            axis: cx.attrs.int("axis", 1)?,
            block_size: cx.attrs.int("block_size", 0)?,
            output_dtype: dtype_attr(cx, "output_dtype", QUANT)?,
            precision: dtype_attr(cx, "precision", PRECISIONS)?,
            // It concerns the float8 outputs only.
            saturate: cx.attrs.int("saturate", 1)? != 0,
        }))
    }),
    ("DequantizeLinear", |cx: &OpCx| {
        Ok(Arc::new(DequantizeLinear {
            axis: cx.attrs.int("axis", 1)?,
            block_size: cx.attrs.int("block_size", 0)?,
            output_dtype: dtype_attr(cx, "output_dtype", DQ_OUTPUTS)?,
        }))
    }),
    ("DynamicQuantizeLinear", |_: &OpCx| {
        Ok(Arc::new(DynamicQuantizeLinear))
    }),
    ("MatMulInteger", |cx: &OpCx| {
        Ok(Arc::new(MatMulInteger {
            mm: inner_op(cx, "MatMul", 2)?,
        }))
    }),
    ("QLinearMatMul", |cx: &OpCx| {
        Ok(Arc::new(QLinearMatMul {
            mm: inner_op(cx, "MatMul", 2)?,
        }))
    }),
    ("ConvInteger", |cx: &OpCx| {
        Ok(Arc::new(ConvInteger {
            conv: inner_op(cx, "Conv", 3)?,
        }))
    }),
    ("QLinearConv", |cx: &OpCx| {
        Ok(Arc::new(QLinearConv {
            conv: inner_op(cx, "Conv", 3)?,
        }))
    }),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{testing, Attr};
    use crate::tensor::Tensor;

    fn op(op_type: &str, attrs: &[(&str, Attr)]) -> OpResult<Arc<dyn Operator>> {
        testing::build(op_type, attrs, 21, 9, 1)
    }

    fn t(d: DType, shape: &[usize], v: &[f64]) -> Option<Tensor> {
        Some(Tensor::from_f64_as(d, shape, v))
    }

    fn ty(d: DType, shape: &[usize]) -> Option<TensorType> {
        Some(TensorType::new(d, shape))
    }

    fn infer(op: &dyn Operator, inputs: &[Option<TensorType>]) -> OpResult<Vec<TensorType>> {
        let consts = vec![None; inputs.len()];
        op.infer(&InferCx {
            inputs,
            consts: &consts,
        })
    }

    /// Infers, lowers and interprets `op` on run-time `args`: each output's type and values.
    fn run(op: &dyn Operator, args: &[Option<Tensor>]) -> Vec<(TensorType, Vec<f64>)> {
        testing::eval(op, args, &[])
            .expect("runs")
            .into_iter()
            .map(|v| (v.ty.clone(), v.to_f64()))
            .collect()
    }

    fn values(op: &dyn Operator, args: &[Option<Tensor>]) -> Vec<f64> {
        run(op, args).swap_remove(0).1
    }

    /// The sub-byte integers saturate to their own range; the float types are not rounded to
    /// integers, and a float8 output saturates unless `saturate` is 0 (then E4M3FN overflows to
    /// NaN). Dequantizing subtracts the zero point of every type.
    #[test]
    fn quantize_to_the_small_types() {
        let q = op("QuantizeLinear", &[]).unwrap();
        let one = t(DType::F32, &[], &[1.0]);
        let x = t(DType::F32, &[6], &[0.5, 1.5, 2.5, 100.0, -100.0, f64::NAN]);
        let got = values(&*q, &[x, one.clone(), t(DType::I4, &[], &[1.0])]);
        assert_eq!(got, [1., 3., 3., 7., -8., -8.]);
        let x = t(DType::F32, &[3], &[1.5, 5.0, -1.0]);
        let got = values(&*q, &[x.clone(), one.clone(), t(DType::U2, &[], &[0.0])]);
        assert_eq!(got, [2., 3., 0.]);
        let got = values(&*q, &[x.clone(), one.clone(), t(DType::I2, &[], &[-1.0])]);
        assert_eq!(got, [1., 1., -2.]);
        let x = t(DType::F32, &[3], &[1000.0, 1.1, 0.3]);
        let z8 = t(DType::F8E4M3FN, &[], &[0.0]);
        let got = values(&*q, &[x.clone(), one.clone(), z8.clone()]);
        assert_eq!(got, [448., 1.125, 0.3125]);
        let q0 = op("QuantizeLinear", &[("saturate", Attr::Int(0))]).unwrap();
        let got = values(&*q0, &[x.clone(), one.clone(), z8]);
        assert!(got[0].is_nan() && got[1..] == [1.125, 0.3125]);
        let z4 = t(DType::F4E2M1, &[], &[0.0]);
        let got = values(&*q, &[x, one.clone(), z4]);
        assert_eq!(got, [6., 1., 0.5]);

        let dq = op("DequantizeLinear", &[]).unwrap();
        let two = t(DType::F32, &[], &[2.0]);
        let x = t(DType::I4, &[3], &[-8.0, 0.0, 7.0]);
        let got = values(&*dq, &[x, two.clone(), t(DType::I4, &[], &[-1.0])]);
        assert_eq!(got, [-14., 2., 16.]);
        let x = t(DType::F8E5M2, &[2], &[-96.0, 0.5]);
        let got = values(&*dq, &[x, two.clone(), t(DType::F8E5M2, &[], &[0.5])]);
        assert_eq!(got, [-193., 0.]);
        // The zero point has the input's type.
        let x = ty(DType::U4, &[2]);
        let err = infer(&*dq, &[x, ty(DType::F32, &[]), ty(DType::U8, &[])]);
        assert!(err.is_err());
    }

    #[test]
    fn quantize_rounds_half_to_even_and_saturates() {
        let q = op("QuantizeLinear", &[]).unwrap();
        let x = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 300.0, -300.0, f64::NAN];
        let x = t(DType::F32, &[9], &x);
        let one = t(DType::F32, &[], &[1.0]);
        let got = values(&*q, &[x.clone(), one.clone(), t(DType::I8, &[], &[0.0])]);
        assert_eq!(got, [0., 2., 2., -0., -2., -2., 127., -128., -128.]);
        let got = values(&*q, &[x.clone(), one.clone(), t(DType::U8, &[1], &[10.0])]);
        assert_eq!(got, [10., 12., 12., 10., 8., 8., 255., 0., 0.]);
        // No zero point: uint8, unless output_dtype says otherwise.
        let r = run(&*q, &[x.clone(), one.clone()]);
        assert_eq!(r[0].0.dtype, DType::U8);
        let q16 = op("QuantizeLinear", &[("output_dtype", Attr::Int(5))]).unwrap();
        let r = run(&*q16, &[x, one]);
        assert_eq!(r[0].0.dtype, DType::I16);
        assert_eq!(r[0].1, [0., 2., 2., 0., -2., -2., 300., -300., -32768.]);
    }

    #[test]
    fn quantize_per_axis_and_blocked() {
        let x: Vec<f64> = (0..12).map(|i| i as f64 * 10.0).collect();
        let x = t(DType::F32, &[2, 6], &x);
        let q = op("QuantizeLinear", &[("axis", Attr::Int(0))]).unwrap();
        let s = t(DType::F32, &[2], &[10.0, 20.0]);
        let z = t(DType::U8, &[2], &[1.0, 2.0]);
        let got = values(&*q, &[x.clone(), s, z]);
        // Row 1: 60..110 / 20 = 3, 3.5, 4, 4.5, 5, 5.5 -> 3, 4, 4, 4, 5, 6; plus 2.
        assert_eq!(got, [1., 2., 3., 4., 5., 6., 5., 6., 6., 6., 7., 8.]);
        // Blocks of 4 along axis 1: 2 blocks, the last one short.
        let q = op(
            "QuantizeLinear",
            &[("axis", Attr::Int(-1)), ("block_size", Attr::Int(4))],
        )
        .unwrap();
        let s = t(DType::F32, &[2, 2], &[10.0, 1.0, 2.0, 5.0]);
        let got = values(&*q, &[x, s, t(DType::I8, &[2, 2], &[0.0; 4])]);
        assert_eq!(
            got,
            [0., 1., 2., 3., 40., 50., 30., 35., 40., 45., 20., 22.]
        );
    }

    #[test]
    fn quantize_precision_of_a_half_scale() {
        // -33.25 / 0.7002 = -47.487 in f32 (-> -47), -47.5 in f16 (-> -48).
        let q = op("QuantizeLinear", &[]).unwrap();
        let x = t(DType::F32, &[1], &[-33.25]);
        let z = t(DType::I8, &[], &[3.0]);
        let got = values(&*q, &[x.clone(), t(DType::F16, &[], &[0.7]), z.clone()]);
        assert_eq!(got, [-45.0]);
        let got = values(&*q, &[x.clone(), t(DType::F32, &[], &[0.7002]), z.clone()]);
        assert_eq!(got, [-44.0]);
        let q = op("QuantizeLinear", &[("precision", Attr::Int(10))]).unwrap();
        let got = values(&*q, &[x, t(DType::F32, &[], &[0.7002]), z]);
        assert_eq!(got, [-45.0]);
    }

    #[test]
    fn dequantize_per_axis_with_output_dtype() {
        let dq = op("DequantizeLinear", &[("axis", Attr::Int(1))]).unwrap();
        let x = t(DType::I8, &[2, 2], &[-128.0, 127.0, 0.0, 5.0]);
        let s = t(DType::F32, &[2], &[0.5, 2.0]);
        let z = t(DType::I8, &[2], &[-128.0, 1.0]);
        assert_eq!(
            values(&*dq, &[x.clone(), s.clone(), z.clone()]),
            [0.0, 252.0, 64.0, 8.0]
        );
        let dq = op(
            "DequantizeLinear",
            &[("axis", Attr::Int(1)), ("output_dtype", Attr::Int(10))],
        )
        .unwrap();
        let r = run(&*dq, &[x, s, z]);
        assert_eq!(r[0].0.dtype, DType::F16);
        assert_eq!(r[0].1, [0.0, 252.0, 64.0, 8.0]);
        let dq = op("DequantizeLinear", &[]).unwrap();
        let x = t(DType::I32, &[2], &[-1000.0, 3.0]);
        assert_eq!(
            values(&*dq, &[x, t(DType::F64, &[], &[0.25])]),
            [-250.0, 0.75]
        );
    }

    #[test]
    fn dynamic_quantize_matches_the_onnx_example() {
        let dq = op("DynamicQuantizeLinear", &[]).unwrap();
        let x = t(DType::F32, &[6], &[0.0, 2.0, -3.0, -2.5, 1.34, 0.5]);
        let r = run(&*dq, &[x]);
        assert_eq!(r[0].1, [153., 255., 0., 26., 221., 179.]);
        assert!((r[1].1[0] - 5.0 / 255.0).abs() < 1e-7);
        assert_eq!(r[2].1, [153.0]);
        // All zeros: scale 1 / 255, zero point 0.
        let r = run(&*dq, &[t(DType::F32, &[2], &[0.0, 0.0])]);
        assert_eq!((r[0].1.clone(), r[2].1[0]), (vec![0.0, 0.0], 0.0));
    }

    #[test]
    fn matmul_integer_per_row_and_per_column_zero_points() {
        let mm = op("MatMulInteger", &[]).unwrap();
        let a = t(DType::U8, &[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let b = t(DType::I8, &[3, 2], &[1., -1., 2., -2., 3., -3.]);
        let az = t(DType::U8, &[2], &[1.0, 4.0]);
        let bz = t(DType::I8, &[2], &[0.0, -1.0]);
        // A' = [[0, 1, 2], [0, 1, 2]], B' = [[1, 0], [2, -1], [3, -2]].
        let r = run(&*mm, &[a.clone(), b.clone(), az, bz]);
        assert_eq!(r[0].0, TensorType::new(DType::I32, vec![2, 2]));
        assert_eq!(r[0].1, [8., -5., 8., -5.]);
        let got = values(&*mm, &[a, b]);
        assert_eq!(got, [14., -14., 32., -32.]);
    }

    #[test]
    fn qlinear_matmul_requantizes() {
        let mm = op("QLinearMatMul", &[]).unwrap();
        let args = |yz: Option<Tensor>| {
            vec![
                t(DType::I8, &[1, 2], &[10.0, 20.0]),
                t(DType::F32, &[], &[0.5]),
                t(DType::I8, &[], &[0.0]),
                t(DType::I8, &[2, 1], &[3.0, 4.0]),
                t(DType::F32, &[], &[0.25]),
                t(DType::I8, &[], &[1.0]),
                t(DType::F32, &[], &[0.1]),
                yz,
            ]
        };
        // acc = 10 * 2 + 20 * 3 = 80; 80 * 1.25 = 100.
        assert_eq!(values(&*mm, &args(t(DType::U8, &[], &[30.0]))), [130.0]);
        assert_eq!(values(&*mm, &args(t(DType::I8, &[], &[30.0]))), [127.0]);
    }

    #[test]
    fn conv_integer_pads_with_the_zero_point() {
        let conv = op("ConvInteger", &[("pads", Attr::Ints(vec![1, 0, 0, 0]))]).unwrap();
        let x = t(DType::U8, &[1, 1, 2, 2], &[1., 2., 3., 4.]);
        let w = t(DType::U8, &[2, 1, 1, 1], &[2., 5.]);
        let xz = t(DType::U8, &[], &[1.0]);
        let wz = t(DType::U8, &[2], &[0.0, 2.0]);
        let r = run(&*conv, &[x, w, xz, wz]);
        assert_eq!(r[0].0, TensorType::new(DType::I32, vec![1, 2, 3, 2]));
        assert_eq!(r[0].1, [0., 0., 0., 2., 4., 6., 0., 0., 0., 3., 6., 9.]);
    }

    #[test]
    fn qlinear_conv_per_channel_with_bias() {
        let conv = op("QLinearConv", &[]).unwrap();
        let args = vec![
            t(DType::U8, &[1, 1, 1, 2], &[10.0, 20.0]),
            t(DType::F32, &[], &[0.5]),
            t(DType::U8, &[], &[10.0]),
            t(DType::I8, &[2, 1, 1, 1], &[2.0, -3.0]),
            t(DType::F32, &[2], &[1.0, 2.0]),
            t(DType::I8, &[2], &[0.0, 1.0]),
            t(DType::F32, &[], &[2.0]),
            t(DType::I8, &[], &[-1.0]),
            t(DType::I32, &[2], &[1.0, -3.0]),
        ];
        // The zero point is added before rounding (as the ONNX reference does).
        // Channel 0: (0, 20) + 1 = (1, 21), * 0.25 - 1 = -0.75, 4.25 -> -1, 4.
        // Channel 1: (0, -40) - 3 = (-3, -43), * 0.5 - 1 = -2.5, -22.5 -> -2, -22.
        assert_eq!(values(&*conv, &args), [-1., 4., -2., -22.]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let f = |s: &[usize]| ty(DType::F32, s);
        let u8t = |s: &[usize]| ty(DType::U8, s);
        let q = op("QuantizeLinear", &[]).unwrap();
        // Per-axis scale of the wrong length; a 2-D scale without block_size; a scalar input
        // with a per-axis scale; a zero point of another shape; a float zero point.
        assert!(infer(&*q, &[f(&[2, 3]), f(&[2]), None]).is_err());
        assert!(infer(&*q, &[f(&[2, 3]), f(&[2, 3])]).is_err());
        assert!(infer(&*q, &[f(&[]), f(&[3])]).is_err());
        assert!(infer(&*q, &[f(&[2, 3]), f(&[3]), u8t(&[1])]).is_err());
        assert!(infer(&*q, &[f(&[2, 3]), f(&[]), f(&[])]).is_err());
        assert!(infer(&*q, &[u8t(&[2, 3]), f(&[])]).is_err());
        assert!(infer(&*q, &[f(&[2, 3])]).is_err());
        let q = op("QuantizeLinear", &[("axis", Attr::Int(5))]).unwrap();
        assert!(infer(&*q, &[f(&[2, 3]), f(&[3])]).is_err());
        let blocked = |b: i64| {
            op(
                "QuantizeLinear",
                &[("axis", Attr::Int(1)), ("block_size", Attr::Int(b))],
            )
            .unwrap()
        };
        assert!(infer(&*blocked(2), &[f(&[2, 5]), f(&[2, 3])]).is_ok());
        assert!(infer(&*blocked(2), &[f(&[2, 5]), f(&[2, 2])]).is_err());
        assert!(infer(&*blocked(2), &[f(&[2, 5]), f(&[1, 3])]).is_err());
        assert!(infer(&*blocked(-1), &[f(&[2, 5]), f(&[2, 3])]).is_err());
        // output_dtype: a float, FLOAT8E8M0 (a scale type, not a quantized one), a mismatch
        // with the zero point.
        assert!(op("QuantizeLinear", &[("output_dtype", Attr::Int(1))]).is_err());
        assert!(op("QuantizeLinear", &[("output_dtype", Attr::Int(24))]).is_err());
        assert!(op("QuantizeLinear", &[("output_dtype", Attr::Int(17))]).is_ok());
        let q = op("QuantizeLinear", &[("output_dtype", Attr::Int(3))]).unwrap();
        assert!(infer(&*q, &[f(&[2]), f(&[]), u8t(&[])]).is_err());
        let dq = op("DequantizeLinear", &[]).unwrap();
        assert!(infer(&*dq, &[u8t(&[2]), f(&[]), ty(DType::I8, &[])]).is_err());
        assert!(infer(&*dq, &[f(&[2]), f(&[])]).is_err());
        assert!(infer(&*dq, &[u8t(&[2]), u8t(&[])]).is_err());
        let dy = op("DynamicQuantizeLinear", &[]).unwrap();
        assert!(infer(&*dy, &[u8t(&[2])]).is_err());

        let mm = op("MatMulInteger", &[]).unwrap();
        let i8t = |s: &[usize]| ty(DType::I8, s);
        assert!(infer(&*mm, &[u8t(&[]), u8t(&[2])]).is_err());
        assert!(infer(&*mm, &[u8t(&[2, 3]), u8t(&[2, 3])]).is_err());
        assert!(infer(&*mm, &[f(&[2, 3]), f(&[3, 2])]).is_err());
        // A's zero point per row (length M = 2), not along K.
        assert!(infer(&*mm, &[u8t(&[2, 3]), u8t(&[3, 4]), u8t(&[2])]).is_ok());
        assert!(infer(&*mm, &[u8t(&[2, 3]), u8t(&[3, 4]), u8t(&[3])]).is_err());
        assert!(infer(&*mm, &[u8t(&[2, 3]), u8t(&[3, 4]), u8t(&[1, 3])]).is_err());
        assert!(infer(&*mm, &[u8t(&[2, 3]), u8t(&[3, 4]), i8t(&[])]).is_err());
        assert!(infer(&*mm, &[u8t(&[2, 3]), u8t(&[3, 4]), None, u8t(&[4])]).is_ok());
        assert!(infer(&*mm, &[u8t(&[2, 3]), u8t(&[3, 4]), None, u8t(&[3, 1])]).is_err());
        assert!(infer(&*mm, &[u8t(&[3]), u8t(&[3]), u8t(&[3])]).is_err());

        let qmm = op("QLinearMatMul", &[]).unwrap();
        let qargs = |a_scale: &[usize]| {
            vec![
                u8t(&[2, 3]),
                f(a_scale),
                u8t(&[]),
                u8t(&[3, 4]),
                f(&[]),
                u8t(&[]),
                f(&[]),
                u8t(&[]),
            ]
        };
        assert!(infer(&*qmm, &qargs(&[2])).is_ok());
        assert!(infer(&*qmm, &qargs(&[3])).is_err());
        let mut missing = qargs(&[]);
        missing[6] = None;
        assert!(infer(&*qmm, &missing).is_err());

        let ci = op("ConvInteger", &[]).unwrap();
        assert!(infer(&*ci, &[u8t(&[1, 2]), u8t(&[1, 2])]).is_err());
        assert!(infer(&*ci, &[u8t(&[1, 2, 3, 3]), u8t(&[4, 2, 2, 2])]).is_ok());
        assert!(infer(&*ci, &[u8t(&[1, 2, 3, 3]), u8t(&[4, 3, 2, 2])]).is_err());
        let cargs = |xz: &[usize], wz: &[usize]| {
            vec![u8t(&[1, 2, 3, 3]), u8t(&[4, 2, 2, 2]), u8t(xz), u8t(wz)]
        };
        assert!(infer(&*ci, &cargs(&[1], &[4])).is_ok());
        assert!(infer(&*ci, &cargs(&[2], &[4])).is_err());
        assert!(infer(&*ci, &cargs(&[], &[3])).is_err());
        let qc = op("QLinearConv", &[]).unwrap();
        let qcargs = |w_scale: &[usize], bias: Option<TensorType>| {
            vec![
                u8t(&[1, 2, 3, 3]),
                f(&[]),
                u8t(&[]),
                u8t(&[4, 2, 2, 2]),
                f(w_scale),
                u8t(&[]),
                f(&[]),
                u8t(&[]),
                bias,
            ]
        };
        assert!(infer(&*qc, &qcargs(&[4], ty(DType::I32, &[4]))).is_ok());
        assert!(infer(&*qc, &qcargs(&[2], None)).is_err());
        assert!(infer(&*qc, &qcargs(&[], ty(DType::I32, &[3]))).is_err());
        assert!(infer(&*qc, &qcargs(&[], f(&[4]))).is_err());
    }
}
