//! Operators: attributes, type inference and lowering to tensor expressions.
//!
//! Each operator is a value implementing [`Operator`]. Frontends create operators through the
//! registry ([`lookup`]): one `(op_type, constructor)` entry per operator, kept in the family module
//! that implements it. Adding an operator = one struct, its `Operator` impl, one registry entry.
use std::fmt;
use std::sync::Arc;

use crate::error::OpError;
use crate::te::{Exec, Expr, RedOp, Reduce, Src, Stage};
use crate::tensor::{DType, Tensor, TensorType};

mod attrs;
pub mod elementwise;
pub mod extra;
pub mod folded;
pub mod image;
pub mod index;
pub mod loss;
pub mod matmul;
pub mod misc;
pub mod nn;
pub mod quant;
pub mod reduce;
pub mod rnn;
pub mod seq;
pub mod shape;
pub mod signal;
#[cfg(test)]
pub(crate) mod testing;
pub mod text;
pub mod training;
pub mod winograd;

pub use attrs::{Attr, Attrs};

/// Result of operator hooks.
pub type OpResult<T> = Result<T, OpError>;

/// How an operator relates its output elements to its input elements; drives fusion and
/// (later) partition rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    /// Output element i depends only on input element i (same shapes).
    Elementwise,
    /// Elementwise after numpy broadcasting.
    Broadcast,
    /// Each output element reads a fixed input element (reshape, transpose, slice, ...).
    Injective,
    /// Reduces over some axes.
    Reduction,
    /// A contraction (matmul, conv) whose elementwise consumers fuse as an epilogue.
    OutElementwiseFusable,
    /// Anything else.
    Opaque,
}

impl OpKind {
    /// Every kind.
    pub const ALL: [OpKind; 6] = [
        OpKind::Elementwise,
        OpKind::Broadcast,
        OpKind::Injective,
        OpKind::Reduction,
        OpKind::OutElementwiseFusable,
        OpKind::Opaque,
    ];
}

/// What an operator may look at to infer its output types.
pub struct InferCx<'a> {
    /// Input types; `None` for omitted optional inputs.
    pub inputs: &'a [Option<TensorType>],
    /// Input values known at compile time.
    pub consts: &'a [Option<Arc<Tensor>>],
}

impl InferCx<'_> {
    /// Input `i`'s type, or an error if it is missing.
    pub fn input(&self, i: usize) -> OpResult<&TensorType> {
        self.inputs
            .get(i)
            .and_then(|t| t.as_ref())
            .ok_or_else(|| OpError::expected(format!("input {i}"), "none"))
    }

    /// True if input `i` is present.
    pub fn has(&self, i: usize) -> bool {
        self.inputs.get(i).is_some_and(|t| t.is_some())
    }

    /// Input `i`'s compile-time value, or a `NeedsConstant` error.
    pub fn konst(&self, i: usize, what: &'static str) -> OpResult<&Tensor> {
        self.consts
            .get(i)
            .and_then(|t| t.as_deref())
            .ok_or(OpError::NeedsConstant {
                index: i,
                what,
                graph_inputs: vec![],
            })
    }

    /// Input `i` as a list of integers (a compile-time constant), `None` if absent.
    pub fn ints(&self, i: usize, what: &'static str) -> OpResult<Option<Vec<i64>>> {
        if !self.has(i) {
            return Ok(None);
        }
        Ok(Some(self.konst(i, what)?.to_i64()))
    }
}

/// State while lowering one operator: its types and the stages built so far.
pub struct LowerCx<'a> {
    /// Input types.
    pub inputs: &'a [Option<TensorType>],
    /// Input values known at compile time.
    pub consts: &'a [Option<Arc<Tensor>>],
    /// Output types (as inferred).
    pub outputs: &'a [TensorType],
    /// Stages built so far (`Src::Local(j)`).
    pub stages: Vec<Stage>,
    /// A prefix for stage names.
    pub name: String,
    /// Lower to the operator's direct form (one stage, no im2col): the node runs as a library
    /// primitive ([`Operator::window`]) and the stage only names its operands.
    pub direct: bool,
    /// Lower the same way at every size (a program served over a range of a dimension,
    /// [`crate::te::Ranged`]): no choice by size; where a choice pays off at large sizes,
    /// make it.
    pub uniform: bool,
}

impl LowerCx<'_> {
    /// Input `i`'s type; lowering runs after inference, so a missing input is a bug in the op.
    pub fn input(&self, i: usize) -> &TensorType {
        self.inputs[i].as_ref().expect("input checked by infer")
    }

    /// True if input `i` is present.
    pub fn has(&self, i: usize) -> bool {
        self.inputs.get(i).is_some_and(|t| t.is_some())
    }

    /// Output `i`'s type.
    pub fn output(&self, i: usize) -> &TensorType {
        &self.outputs[i]
    }

    /// Input `i` read with numpy broadcasting at output element `Var(..)` of an output of `shape`.
    pub fn load_bcast(&self, i: usize, shape: &[usize]) -> Expr {
        Expr::load(
            Src::Arg(i as u32),
            crate::te::bcast_index(shape, &self.input(i).shape),
        )
    }

    /// The element type of a source.
    pub fn dtype(&self, s: Src) -> DType {
        match s {
            Src::Arg(i) => self.input(i as usize).dtype,
            Src::Local(j) => self.stages[j as usize].ty.dtype,
            Src::Buf(_) => unreachable!(),
        }
    }

    /// Adds an injective stage.
    pub fn stage(&mut self, ty: TensorType, body: Expr) -> Src {
        let name = format!("{}_{}", self.name, self.stages.len());
        self.stages.push(Stage {
            name,
            ty,
            body,
            reduce: None,
            materialize: false,
            part: 0,
            exec: Exec::Generated,
            choice: None,
        });
        Src::Local(self.stages.len() as u32 - 1)
    }

    /// Adds an injective stage that fusion never inlines into its readers.
    pub fn materialized_stage(&mut self, ty: TensorType, body: Expr) -> Src {
        let s = self.stage(ty, body);
        self.stages.last_mut().expect("just pushed").materialize = true;
        s
    }

    /// Adds a reduction stage.
    pub fn reduce(
        &mut self,
        ty: TensorType,
        op: RedOp,
        extents: Vec<usize>,
        body: Expr,
        finalize: Option<Expr>,
    ) -> Src {
        let name = format!("{}_{}", self.name, self.stages.len());
        self.stages.push(Stage {
            name,
            ty,
            body,
            reduce: Some(Reduce {
                op,
                extents,
                finalize,
            }),
            materialize: false,
            part: 0,
            exec: Exec::Generated,
            choice: None,
        });
        Src::Local(self.stages.len() as u32 - 1)
    }
}

/// Access to the concrete operator type, for passes that pattern-match on operators.
pub trait AsAny {
    /// `self` as `Any`, to `downcast_ref` to a concrete operator.
    fn as_any(&self) -> &dyn std::any::Any;
}

impl<T: std::any::Any> AsAny for T {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// An operator instance with its attributes.
pub trait Operator: AsAny + fmt::Debug + Send + Sync + 'static {
    /// The ONNX op type (`"Conv"`).
    fn op_type(&self) -> &'static str;

    /// The fusion kind.
    fn kind(&self) -> OpKind {
        OpKind::Opaque
    }

    /// Output types from input types (and constant inputs where shapes depend on values).
    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>>;

    /// The outputs' values when they follow from the input *types* alone (`Shape`, `Size`), or
    /// from constant inputs whose values decide the output shape (`NonZero`, `Unique`: see
    /// [`folded`]).
    fn fold_from_types(&self, _cx: &InferCx) -> Option<Vec<Tensor>> {
        None
    }

    /// Lowers to stages; returns the source of each output (a stage, or an input passed through).
    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<Src>>;

    /// The oneDNN primitive that computes this node whole (lowered with [`LowerCx::direct`] to
    /// one reduction stage), if it has one for these types.
    fn window(&self, _cx: &LowerCx) -> Option<crate::te::WindowOp> {
        None
    }
}

/// What a constructor sees of the node being imported.
pub struct OpCx<'a> {
    /// Attributes.
    pub attrs: &'a Attrs,
    /// The opset version of the default domain (`ai.onnx`); an operator of another domain
    /// implements the one version of it that its registry entry names.
    pub opset: i64,
    /// Number of inputs (including omitted optional ones).
    pub n_inputs: usize,
    /// Number of outputs.
    pub n_outputs: usize,
}

/// Creates an operator from attributes.
pub type Constructor = fn(&OpCx) -> OpResult<Arc<dyn Operator>>;

/// Every operator family's registry.
const FAMILIES: &[&[(&str, Constructor)]] = &[
    elementwise::OPS,
    index::OPS,
    matmul::OPS,
    nn::OPS,
    quant::OPS,
    reduce::OPS,
    shape::OPS,
    misc::OPS,
    extra::OPS,
    signal::OPS,
    folded::OPS,
    text::OPS,
    loss::OPS,
    training::OPS,
    rnn::OPS,
    seq::OPS,
    image::OPS,
];

/// The constructor for an ONNX op type: `op_type` for the default domain, `domain:op_type`
/// for the others (`ai.onnx.ml:Binarizer`).
pub fn lookup(op_type: &str) -> Option<Constructor> {
    FAMILIES
        .iter()
        .flat_map(|f| f.iter())
        .find(|(n, _)| *n == op_type)
        .map(|(_, c)| *c)
}

/// Operators that graph passes create and no model names (the registry's [`lookup`] does not
/// know them): the C backend lowers them like any other.
pub const INTERNAL: &[&str] = &["WinogradConv"];

/// Every registered op type, sorted.
pub fn registered() -> Vec<&'static str> {
    let mut v: Vec<&str> = FAMILIES
        .iter()
        .flat_map(|f| f.iter())
        .map(|(n, _)| *n)
        .collect();
    v.sort();
    v
}

/// Normalises a possibly negative axis for a tensor of rank `rank`.
pub fn norm_axis(axis: i64, rank: usize) -> OpResult<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r.max(1) {
        return Err(OpError::expected(
            format!("axis in [{}, {})", -r, r.max(1)),
            axis,
        ));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// Numpy broadcasting of several shapes.
pub fn broadcast_shapes(shapes: &[&[usize]]) -> OpResult<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let off = rank - s.len();
        for (k, &d) in s.iter().enumerate() {
            let o = &mut out[off + k];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(OpError::expected(
                    "shapes that broadcast",
                    format!("{:?}", shapes),
                ));
            }
        }
    }
    Ok(out)
}

/// Checks that input `i` has one of `allowed` element types.
pub fn check_dtype(cx: &InferCx, i: usize, allowed: &[DType]) -> OpResult<DType> {
    let t = cx.input(i)?;
    if allowed.contains(&t.dtype) {
        Ok(t.dtype)
    } else {
        Err(OpError::expected(
            format!(
                "input {i} of type {}",
                allowed
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join("/")
            ),
            t.dtype,
        ))
    }
}

/// Checks that the node has between `min` and `max` inputs and that the first `min` are present.
pub(crate) fn check_arity(cx: &InferCx, min: usize, max: usize) -> OpResult<()> {
    if cx.inputs.len() > max {
        return Err(OpError::expected(
            format!("at most {max} input{}", if max == 1 { "" } else { "s" }),
            cx.inputs.len(),
        ));
    }
    for i in 0..min {
        cx.input(i)?;
    }
    Ok(())
}

/// Float types.
pub const FLOATS: &[DType] = &[DType::F32, DType::F64];
/// Numeric types: floats and integers.
pub const NUMERIC: &[DType] = DType::numeric();
/// Integer types.
pub const INTS: &[DType] = DType::ints();
/// Every type.
pub const ALL: &[DType] = &crate::tensor::ALL_DTYPES;

/// Largest extent of one dimension an operator may compute (2^48: every byte of a 64-bit address
/// space is far below it times an element size; sizes are checked against the configured limit
/// after inference, this only keeps the arithmetic of shape computations in range).
pub const MAX_DIM: usize = 1 << 48;

/// A dimension given as an integer (an attribute or a constant input): non-negative and at most
/// [`MAX_DIM`].
pub fn dim_from_i64(v: i64, what: &str) -> OpResult<usize> {
    if v < 0 || v as u64 > MAX_DIM as u64 {
        return Err(OpError::expected(format!("{what} in [0, 2^48]"), v));
    }
    Ok(v as usize)
}

/// A dimension computed in floating point (Resize scales, Range counts): finite, non-negative
/// and at most [`MAX_DIM`] after `floor`.
pub fn dim_from_f64(v: f64, what: &str) -> OpResult<usize> {
    if !v.is_finite() || v < 0.0 || v.floor() > MAX_DIM as f64 {
        return Err(OpError::expected(
            format!("{what} finite and in [0, 2^48]"),
            v,
        ));
    }
    Ok(v.floor() as usize)
}

/// `a * b` for dimensions, or an error naming `what` when the product exceeds [`MAX_DIM`].
pub fn dim_mul(a: usize, b: usize, what: &str) -> OpResult<usize> {
    a.checked_mul(b)
        .filter(|&p| p <= MAX_DIM)
        .ok_or_else(|| OpError::expected(format!("{what} at most 2^48"), format!("{a} * {b}")))
}

/// `a + b` for dimensions, or an error naming `what` when the sum exceeds [`MAX_DIM`].
pub fn dim_add(a: usize, b: usize, what: &str) -> OpResult<usize> {
    a.checked_add(b)
        .filter(|&p| p <= MAX_DIM)
        .ok_or_else(|| OpError::expected(format!("{what} at most 2^48"), format!("{a} + {b}")))
}

/// The element count of `shape`, or an error when it exceeds [`MAX_DIM`] (a shape read from
/// a constant, e.g. Reshape's, is checked before anything divides by or indexes with it).
pub fn shape_numel(shape: &[usize], what: &str) -> OpResult<usize> {
    shape.iter().try_fold(1usize, |n, &d| dim_mul(n, d, what))
}
