//! Expressions, stages and sources.
use super::BackendId;
use crate::tensor::{strides, DType, TensorType};

/// Where a load reads from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Src {
    /// Input `i` of the operator being lowered.
    Arg(u32),
    /// Stage `j` of the operator being lowered.
    Local(u32),
    /// Buffer `k` of a whole [`super::Program`].
    Buf(super::BufId),
}

/// A typed scalar constant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// f32.
    F32(f32),
    /// f64.
    F64(f64),
    /// i32.
    I32(i32),
    /// i64.
    I64(i64),
    /// bool.
    Bool(bool),
    /// i8.
    I8(i8),
    /// u8.
    U8(u8),
    /// i16.
    I16(i16),
    /// u16.
    U16(u16),
    /// u32.
    U32(u32),
    /// u64.
    U64(u64),
    /// IEEE half, as its bits.
    F16(u16),
    /// bfloat16, as its bits.
    BF16(u16),
    /// A one-byte storage float of the type (the float8 types, FLOAT8E8M0, FLOAT4E2M1), as its
    /// byte.
    F8(DType, u8),
    /// An integer of fewer than 8 bits of the type (INT4, UINT4, INT2, UINT2), as its value.
    Small(DType, i8),
}

impl Scalar {
    /// The element type.
    pub fn dtype(self) -> DType {
        match self {
            Scalar::F32(_) => DType::F32,
            Scalar::F64(_) => DType::F64,
            Scalar::I32(_) => DType::I32,
            Scalar::I64(_) => DType::I64,
            Scalar::Bool(_) => DType::Bool,
            Scalar::I8(_) => DType::I8,
            Scalar::U8(_) => DType::U8,
            Scalar::I16(_) => DType::I16,
            Scalar::U16(_) => DType::U16,
            Scalar::U32(_) => DType::U32,
            Scalar::U64(_) => DType::U64,
            Scalar::F16(_) => DType::F16,
            Scalar::BF16(_) => DType::BF16,
            Scalar::F8(d, _) | Scalar::Small(d, _) => d,
        }
    }

    /// `v` converted to `dtype` as a C cast would (out-of-range integers saturate).
    pub fn from_f64(dtype: DType, v: f64) -> Scalar {
        match dtype {
            DType::F32 => Scalar::F32(v as f32),
            DType::F64 => Scalar::F64(v),
            DType::F16 => Scalar::F16(half::f16::from_f64(v).to_bits()),
            DType::BF16 => Scalar::BF16(half::bf16::from_f64(v).to_bits()),
            d if d.is_byte_float() => Scalar::F8(d, d.encode_byte(v).expect("a one-byte float")),
            DType::Bool => Scalar::Bool(v != 0.0),
            d => {
                let (lo, hi) = d.int_range().expect("an integer type");
                Scalar::from_int(d, (v as i128).clamp(lo, hi))
            }
        }
    }

    /// `v` converted to `dtype` (wrapped to an integer type's range).
    pub fn from_i64(dtype: DType, v: i64) -> Scalar {
        Scalar::from_int(dtype, v as i128)
    }

    /// `v` converted to `dtype`: wrapped to an integer type's range as a C conversion does,
    /// converted to a float type.
    pub fn from_int(dtype: DType, v: i128) -> Scalar {
        let w = dtype.wrap_int(v);
        match dtype {
            DType::F32 => Scalar::F32(v as f32),
            DType::F64 => Scalar::F64(v as f64),
            DType::Bool => Scalar::Bool(w != 0),
            DType::I8 => Scalar::I8(w as i8),
            DType::U8 => Scalar::U8(w as u8),
            DType::I16 => Scalar::I16(w as i16),
            DType::U16 => Scalar::U16(w as u16),
            DType::I32 => Scalar::I32(w as i32),
            DType::U32 => Scalar::U32(w as u32),
            DType::I64 => Scalar::I64(w as i64),
            DType::U64 => Scalar::U64(w as u64),
            d if d.is_sub_byte_int() => Scalar::Small(d, w as i8),
            _ => Scalar::from_f64(dtype, v as f64),
        }
    }

    /// The value as f64.
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::F32(v) => v as f64,
            Scalar::F64(v) => v,
            Scalar::F16(b) => half::f16::from_bits(b).to_f64(),
            Scalar::BF16(b) => half::bf16::from_bits(b).to_f64(),
            Scalar::F8(d, b) => d.decode_byte(b).expect("a one-byte float"),
            i => i.as_int() as f64,
        }
    }

    /// The value of an integer or bool exactly (floats truncated, saturating).
    pub fn as_int(self) -> i128 {
        match self {
            Scalar::F32(v) => v as i128,
            Scalar::F64(v) => v as i128,
            Scalar::F16(_) | Scalar::BF16(_) | Scalar::F8(..) => self.as_f64() as i128,
            Scalar::Bool(v) => v as i128,
            Scalar::I8(v) => v as i128,
            Scalar::U8(v) => v as i128,
            Scalar::I16(v) => v as i128,
            Scalar::U16(v) => v as i128,
            Scalar::I32(v) => v as i128,
            Scalar::U32(v) => v as i128,
            Scalar::I64(v) => v as i128,
            Scalar::U64(v) => v as i128,
            Scalar::Small(_, v) => v as i128,
        }
    }

    /// The value as i64 (floats truncated, saturating; u64 above `i64::MAX` wraps).
    pub fn as_i64(self) -> i64 {
        if self.dtype().is_float() {
            self.as_f64() as i64
        } else {
            self.as_int() as i64
        }
    }

    /// True if zero (or false).
    pub fn is_zero(self) -> bool {
        if self.dtype().is_float() {
            self.as_f64() == 0.0
        } else {
            self.as_int() == 0
        }
    }
}

/// Unary operations.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Abs,
    Sqrt,
    Exp,
    /// `exp` of an argument that is at most 0 or NaN: `x - max(x)` over a softmax row. The
    /// same function as [`UnOp::Exp`] there (the interpreter computes `exp`); the C printer
    /// leaves out the overflow clamp and the second exponent scaling, and flushes results below
    /// the least normal float (arguments below -87) to 0.
    ExpNonPos,
    Log,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Tanh,
    Erf,
    Floor,
    Ceil,
    Round,
    Sign,
    Not,
    IsNaN,
    IsPosInf,
    IsNegInf,
    /// Bitwise complement of an integer.
    BitNot,
    /// The operand's bits reinterpreted as this type (of the same size); the result has this
    /// type, not the operand's.
    BitCast(DType),
}

impl UnOp {
    /// True for operations that cost much more than an add (transcendentals).
    pub fn is_expensive(self) -> bool {
        !matches!(
            self,
            UnOp::Neg
                | UnOp::Abs
                | UnOp::Floor
                | UnOp::Ceil
                | UnOp::Round
                | UnOp::Sign
                | UnOp::Not
                | UnOp::IsNaN
                | UnOp::IsPosInf
                | UnOp::IsNegInf
                | UnOp::BitNot
                | UnOp::BitCast(_)
        )
    }
}

/// Binary operations. Comparisons yield `Bool`; the rest keep the operand type.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    /// Remainder with the sign of the divisor (Python `%`).
    Mod,
    /// Remainder with the sign of the dividend (C `fmod` / `%`).
    FMod,
    /// Logical (bool) and, or, exclusive or.
    And,
    Or,
    Xor,
    /// Bitwise and, or, exclusive or of integers.
    BitAnd,
    BitOr,
    BitXor,
    /// Shifts of integers (right: arithmetic for signed types); a shift by a negative amount or
    /// by the type's width or more gives 0, or -1 for a right shift of a negative value.
    Shl,
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinOp {
    /// True for comparisons (result type `Bool`).
    pub fn is_compare(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}

/// Reduction combiners.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedOp {
    /// Sum, starting at 0.
    Sum,
    /// Product, starting at 1.
    Prod,
    /// Maximum, starting at the lowest value of the type.
    Max,
    /// Minimum, starting at the highest value of the type.
    Min,
}

impl RedOp {
    /// The identity element for `dtype`.
    pub fn init(self, dtype: DType) -> Scalar {
        match (self, dtype) {
            (RedOp::Sum, d) => Scalar::from_f64(d, 0.0),
            (RedOp::Prod, d) => Scalar::from_f64(d, 1.0),
            (RedOp::Max, DType::F32) => Scalar::F32(f32::NEG_INFINITY),
            (RedOp::Max, DType::F64) => Scalar::F64(f64::NEG_INFINITY),
            (RedOp::Min, DType::F32) => Scalar::F32(f32::INFINITY),
            (RedOp::Min, DType::F64) => Scalar::F64(f64::INFINITY),
            (RedOp::Max, d) if d.is_narrow_float() => Scalar::from_f64(d, f64::NEG_INFINITY),
            (RedOp::Min, d) if d.is_narrow_float() => Scalar::from_f64(d, f64::INFINITY),
            (RedOp::Max, d) => Scalar::from_int(d, d.int_range().expect("an integer type").0),
            (RedOp::Min, d) => Scalar::from_int(d, d.int_range().expect("an integer type").1),
        }
    }

    /// The binary operation that combines the accumulator with a new value.
    pub fn combine(self) -> BinOp {
        match self {
            RedOp::Sum => BinOp::Add,
            RedOp::Prod => BinOp::Mul,
            RedOp::Max => BinOp::Max,
            RedOp::Min => BinOp::Min,
        }
    }
}

/// A scalar expression evaluated at one output element (and one reduction point).
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// Output index variable `k` (type I64).
    Var(u32),
    /// Reduction variable `k` (type I64).
    RVar(u32),
    /// The reduction's accumulated value; only inside [`Reduce::finalize`].
    Acc,
    /// A constant.
    Const(Scalar),
    /// The element of a source at a multi-dimensional index (one I64 expression per dimension).
    Load(Src, Vec<Expr>),
    /// The element of a source at a flat row-major offset.
    LoadFlat(Src, Box<Expr>),
    /// A unary operation.
    Un(UnOp, Box<Expr>),
    /// A binary operation; both operands have the same type.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `cond ? a : b`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// Conversion as a C cast (floats to integers truncate; to bool is `!= 0`).
    Cast(DType, Box<Expr>),
}

/// A reduction: the stage body is combined over all points of `extents` (variables `RVar(k)`).
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    /// The combiner.
    pub op: RedOp,
    /// Extent of every reduction variable.
    pub extents: Vec<usize>,
    /// Applied to the accumulator ([`Expr::Acc`]) to produce the element; identity if `None`.
    pub finalize: Option<Expr>,
}

/// One loop nest: defines every element of a tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    /// A name for generated code and messages.
    pub name: String,
    /// The output type.
    pub ty: TensorType,
    /// The value (or reduced value) at each element.
    pub body: Expr,
    /// The reduction, if any.
    pub reduce: Option<Reduce>,
    /// Never inlined into readers (e.g. an im2col buffer that a contraction reads many times).
    pub materialize: bool,
    /// The placement partition the stage belongs to (its node's); fusion does not cross
    /// partitions, except that pure index remappings are inlined into generated readers.
    pub part: u32,
    /// Who computes the stage: generated loops, or a library call.
    pub exec: Exec,
    /// Its plan's kind and knobs when chosen from outside (tuned, or read from the cost
    /// cache); `None`: the target's default (`schedule::plan_stage` realises either). Not part
    /// of what the stage computes: never in its canonical text.
    pub choice: Option<super::PlanChoice>,
}

impl Stage {
    /// For a stage that a library call computes (stage `id` of its program): `fin`, what
    /// remains of its finalize after the call (the fused consumers the call does not take), as
    /// an in-place injective stage over the stage's own buffer. The stage iterates its own
    /// shape; the buffer may have another (a fused view), so the element is addressed by its
    /// flat position.
    pub fn epilogue_stage(&self, id: super::BufId, fin: &Expr) -> Stage {
        let vars: Vec<Expr> = (0..self.ty.rank()).map(Expr::var).collect();
        let this = Expr::load_flat(Src::Buf(id), Expr::flatten(&vars, &self.ty.shape));
        Stage {
            name: format!("{}_epilogue", self.name),
            body: fin.rewrite(&mut |x| (*x == Expr::Acc).then(|| this.clone())),
            reduce: None,
            exec: Exec::Generated,
            ..self.clone()
        }
    }

    /// What remains of a GEMM library call's finalize, for [`Stage::epilogue_stage`]: all of
    /// it but a bare accumulator.
    pub fn gemm_epilogue(&self) -> Option<Expr> {
        self.reduce
            .as_ref()
            .and_then(|r| r.finalize.clone())
            .filter(|f| *f != Expr::Acc)
    }
}

/// How a stage is executed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Exec {
    /// Loops generated by the `c` backend.
    #[default]
    Generated,
    /// A library backend's call computes the stage; its finalize (bias, fused elementwise
    /// consumers), where the call does not take it, runs afterwards as an in-place loop.
    Library {
        /// The backend whose library is called.
        backend: BackendId,
        /// What the call computes.
        call: LibraryCall,
    },
}

/// What a library call computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LibraryCall {
    /// A contraction as a (batched) GEMM: the body is `A * B` over affine operands.
    Gemm,
    /// A whole operator over a 2-D window (convolution, pooling). The body keeps the operator's
    /// direct lowering, which names the operands.
    Window(Box<WindowOp>),
}

impl Exec {
    /// The backend's name.
    pub fn backend(&self) -> &'static str {
        self.backend_id().name()
    }

    /// The backend.
    pub fn backend_id(&self) -> BackendId {
        match self {
            Exec::Generated => BackendId::C,
            Exec::Library { backend, .. } => *backend,
        }
    }

    /// A library GEMM call on `backend`.
    pub fn gemm(backend: BackendId) -> Exec {
        Exec::Library {
            backend,
            call: LibraryCall::Gemm,
        }
    }

    /// The window operator a library call computes, if it is one.
    pub fn window(&self) -> Option<&WindowOp> {
        match self {
            Exec::Library {
                call: LibraryCall::Window(w),
                ..
            } => Some(w),
            _ => None,
        }
    }
}

/// An operator over a 2-D window (NCHW activations), with ONNX's geometry: dilations count
/// from 1, pads at the start (`pt`, `pl`) and end (`pb`, `pr`) of each spatial axis. Library
/// backends with convolution and pooling primitives compute it whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WindowOp {
    /// What the operator computes.
    pub kind: WindowKind,
    /// Batch.
    pub n: i64,
    /// Input channels.
    pub ic: i64,
    /// Input height.
    pub ih: i64,
    /// Input width.
    pub iw: i64,
    /// Output channels (= `ic` for pooling).
    pub oc: i64,
    /// Output height.
    pub oh: i64,
    /// Output width.
    pub ow: i64,
    /// WindowOp height.
    pub kh: i64,
    /// WindowOp width.
    pub kw: i64,
    /// Vertical stride.
    pub sh: i64,
    /// Horizontal stride.
    pub sw: i64,
    /// Vertical dilation (1 = dense).
    pub dh: i64,
    /// Horizontal dilation (1 = dense).
    pub dw: i64,
    /// Padding at the top.
    pub pt: i64,
    /// Padding at the left.
    pub pl: i64,
    /// Padding at the bottom.
    pub pb: i64,
    /// Padding at the right.
    pub pr: i64,
    /// Convolution groups (1 for pooling).
    pub groups: i64,
}

/// The operator of a [`WindowOp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WindowKind {
    /// Convolution (weights `[oc, ic / groups, kh, kw]`, optional bias `[oc]`).
    Conv,
    /// Max pooling.
    MaxPool,
    /// Average pooling over the window points inside the input.
    AvgPoolExcludePad,
    /// Average pooling over the whole window, padding included.
    AvgPoolIncludePad,
}

impl Stage {
    /// The buffers this stage loads (its body and its reduction's finalize), in order of
    /// appearance, with repeats.
    pub fn reads(&self) -> impl Iterator<Item = super::BufId> {
        let mut srcs = self.body.sources();
        if let Some(f) = self.reduce.as_ref().and_then(|r| r.finalize.as_ref()) {
            srcs.extend(f.sources());
        }
        srcs.into_iter().filter_map(|s| match s {
            Src::Buf(b) => Some(b),
            _ => None,
        })
    }

    /// The number of body evaluations: output elements times reduction points.
    pub fn work(&self) -> usize {
        self.ty.numel()
            * self
                .reduce
                .as_ref()
                .map_or(1, |r| r.extents.iter().product())
    }
}

macro_rules! bin_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        $(
            #[doc = concat!("`self ", stringify!($op), " o`")]
            #[allow(clippy::should_implement_trait)]
            pub fn $name(self, o: Expr) -> Expr { Expr::bin(BinOp::$op, self, o) }
        )*
    };
}

macro_rules! un_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($op), "(self)`")]
            #[allow(clippy::should_implement_trait)]
            pub fn $name(self) -> Expr { Expr::Un(UnOp::$op, Box::new(self)) }
        )*
    };
}

impl Expr {
    /// Output index variable `k`.
    pub fn var(k: usize) -> Expr {
        Expr::Var(k as u32)
    }

    /// Reduction variable `k`.
    pub fn rvar(k: usize) -> Expr {
        Expr::RVar(k as u32)
    }

    /// An I64 constant.
    pub fn i(v: i64) -> Expr {
        Expr::Const(Scalar::I64(v))
    }

    /// A constant of `dtype`.
    pub fn c(dtype: DType, v: f64) -> Expr {
        Expr::Const(Scalar::from_f64(dtype, v))
    }

    /// A bool constant.
    pub fn bool(v: bool) -> Expr {
        Expr::Const(Scalar::Bool(v))
    }

    /// `src[idx]`.
    pub fn load(src: Src, idx: Vec<Expr>) -> Expr {
        Expr::Load(src, idx)
    }

    /// `src[flat]`.
    pub fn load_flat(src: Src, flat: Expr) -> Expr {
        Expr::LoadFlat(src, Box::new(flat))
    }

    /// `cond ? a : b`.
    pub fn select(cond: Expr, a: Expr, b: Expr) -> Expr {
        match cond {
            Expr::Const(c) => {
                if c.is_zero() {
                    b
                } else {
                    a
                }
            }
            cond => Expr::Select(Box::new(cond), Box::new(a), Box::new(b)),
        }
    }

    /// Conversion to `dtype`.
    pub fn cast(self, dtype: DType) -> Expr {
        match self {
            Expr::Const(s) if s.dtype().is_int() || dtype.is_float() => {
                Expr::Const(if dtype.is_int() {
                    Scalar::from_int(dtype, s.as_int())
                } else {
                    Scalar::from_f64(dtype, s.as_f64())
                })
            }
            Expr::Var(_) | Expr::RVar(_) if dtype == DType::I64 => self,
            e => Expr::Cast(dtype, Box::new(e)),
        }
    }

    /// A binary operation, folding integer constants and identities of index arithmetic.
    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        use Scalar::I64;
        match (op, &a, &b) {
            (BinOp::Add, Expr::Const(I64(x)), Expr::Const(I64(y))) => return Expr::i(x + y),
            (BinOp::Sub, Expr::Const(I64(x)), Expr::Const(I64(y))) => return Expr::i(x - y),
            (BinOp::Mul, Expr::Const(I64(x)), Expr::Const(I64(y))) => return Expr::i(x * y),
            (BinOp::Div, Expr::Const(I64(x)), Expr::Const(I64(y))) if *y != 0 => {
                return Expr::i(x / y)
            }
            (BinOp::Add | BinOp::Sub, _, Expr::Const(I64(0))) => return a,
            (BinOp::Add, Expr::Const(I64(0)), _) => return b,
            (BinOp::Mul, _, Expr::Const(I64(1))) | (BinOp::Div, _, Expr::Const(I64(1))) => {
                return a
            }
            (BinOp::Mul, Expr::Const(I64(1)), _) => return b,
            (BinOp::Mul, _, Expr::Const(I64(0))) | (BinOp::Mul, Expr::Const(I64(0)), _) => {
                return Expr::i(0)
            }
            (BinOp::FMod, _, Expr::Const(I64(1))) => return Expr::i(0),
            _ => {}
        }
        Expr::Bin(op, Box::new(a), Box::new(b))
    }

    bin_methods! {
        add => Add, sub => Sub, mul => Mul, div => Div, pow => Pow, max => Max, min => Min,
        modulo => Mod, fmod => FMod, and => And, or => Or, xor => Xor,
        bitand => BitAnd, bitor => BitOr, bitxor => BitXor, shl => Shl, shr => Shr,
        eq => Eq, ne => Ne, lt => Lt, le => Le, gt => Gt, ge => Ge,
    }

    un_methods! {
        neg => Neg, abs => Abs, sqrt => Sqrt, exp => Exp,
        exp_nonpos => ExpNonPos, log => Log, sin => Sin, cos => Cos,
        tan => Tan, asin => Asin, acos => Acos, atan => Atan, sinh => Sinh, cosh => Cosh,
        asinh => Asinh, acosh => Acosh, atanh => Atanh, tanh => Tanh, erf => Erf, floor => Floor,
        ceil => Ceil, round => Round, sign => Sign, not => Not, is_nan => IsNaN,
    }

    /// The element type, given the types of sources and (for `Acc`) the accumulator.
    pub fn dtype(&self, src: &dyn Fn(Src) -> DType, acc: DType) -> DType {
        match self {
            Expr::Var(_) | Expr::RVar(_) => DType::I64,
            Expr::Acc => acc,
            Expr::Const(s) => s.dtype(),
            Expr::Load(s, _) | Expr::LoadFlat(s, _) => src(*s),
            Expr::Un(UnOp::Not | UnOp::IsNaN | UnOp::IsPosInf | UnOp::IsNegInf, _) => DType::Bool,
            Expr::Un(UnOp::BitCast(d), _) => *d,
            Expr::Un(_, a) => a.dtype(src, acc),
            Expr::Bin(op, a, _) => {
                if op.is_compare() {
                    DType::Bool
                } else {
                    a.dtype(src, acc)
                }
            }
            Expr::Select(_, a, _) => a.dtype(src, acc),
            Expr::Cast(d, _) => *d,
        }
    }

    /// Calls `f` on every node, parents before children.
    pub fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Load(_, idx) => idx.iter().for_each(|e| e.visit(f)),
            Expr::LoadFlat(_, e) | Expr::Un(_, e) | Expr::Cast(_, e) => e.visit(f),
            Expr::Bin(_, a, b) => {
                a.visit(f);
                b.visit(f);
            }
            Expr::Select(c, a, b) => {
                c.visit(f);
                a.visit(f);
                b.visit(f);
            }
            _ => {}
        }
    }

    /// Rebuilds the expression bottom-up, replacing each node by `f(node)` when it returns `Some`.
    /// Children are rewritten first.
    pub fn rewrite(&self, f: &mut dyn FnMut(&Expr) -> Option<Expr>) -> Expr {
        let e = match self {
            Expr::Load(s, idx) => Expr::Load(*s, idx.iter().map(|e| e.rewrite(f)).collect()),
            Expr::LoadFlat(s, e) => Expr::LoadFlat(*s, Box::new(e.rewrite(f))),
            Expr::Un(op, e) => Expr::Un(*op, Box::new(e.rewrite(f))),
            Expr::Cast(d, e) => e.rewrite(f).cast(*d),
            Expr::Bin(op, a, b) => Expr::bin(*op, a.rewrite(f), b.rewrite(f)),
            Expr::Select(c, a, b) => Expr::select(c.rewrite(f), a.rewrite(f), b.rewrite(f)),
            e => e.clone(),
        };
        f(&e).unwrap_or(e)
    }

    /// Replaces `Var(k)` by `vars[k]`.
    pub fn subst_vars(&self, vars: &[Expr]) -> Expr {
        self.rewrite(&mut |e| match e {
            Expr::Var(k) => Some(vars[*k as usize].clone()),
            _ => None,
        })
    }

    /// Replaces every source by `f(src)`.
    pub fn map_src(&self, f: &dyn Fn(Src) -> Src) -> Expr {
        self.rewrite(&mut |e| match e {
            Expr::Load(s, idx) => Some(Expr::Load(f(*s), idx.clone())),
            Expr::LoadFlat(s, i) => Some(Expr::LoadFlat(f(*s), i.clone())),
            _ => None,
        })
    }

    /// Number of nodes, and number of expensive (transcendental or division) nodes.
    pub fn cost(&self) -> (usize, usize) {
        let (mut n, mut hard) = (0, 0);
        self.visit(&mut |e| {
            n += 1;
            match e {
                Expr::Un(op, _) if op.is_expensive() => hard += 1,
                Expr::Bin(BinOp::Pow, ..) => hard += 1,
                _ => {}
            }
        });
        (n, hard)
    }

    /// Every source this expression reads.
    pub fn sources(&self) -> Vec<Src> {
        let mut v = Vec::new();
        self.visit(&mut |e| {
            if let Expr::Load(s, _) | Expr::LoadFlat(s, _) = e {
                v.push(*s);
            }
        });
        v
    }

    /// The flat row-major offset of `idx` in `shape`.
    pub fn flatten(idx: &[Expr], shape: &[usize]) -> Expr {
        let st = strides(shape);
        let mut acc = Expr::i(0);
        for (k, e) in idx.iter().enumerate() {
            if shape[k] == 1 {
                continue;
            }
            acc = acc.add(e.clone().mul(Expr::i(st[k] as i64)));
        }
        acc
    }

    /// The multi-dimensional index of flat offset `flat` in `shape`.
    pub fn unflatten(flat: &Expr, shape: &[usize]) -> Vec<Expr> {
        let st = strides(shape);
        shape
            .iter()
            .enumerate()
            .map(|(k, &d)| {
                if d == 1 {
                    Expr::i(0)
                } else {
                    let q = flat.clone().div(Expr::i(st[k] as i64));
                    if k == 0 {
                        q
                    } else {
                        q.fmod(Expr::i(d as i64))
                    }
                }
            })
            .collect()
    }
}

/// The index into a tensor of shape `in_shape` that numpy-style broadcasting reads for output
/// element `Var(0..)` of an output of shape `out_shape`.
pub fn bcast_index(out_shape: &[usize], in_shape: &[usize]) -> Vec<Expr> {
    let off = out_shape.len() - in_shape.len();
    in_shape
        .iter()
        .enumerate()
        .map(|(k, &d)| {
            if d == 1 && out_shape[k + off] != 1 {
                Expr::i(0)
            } else {
                Expr::var(k + off)
            }
        })
        .collect()
}
