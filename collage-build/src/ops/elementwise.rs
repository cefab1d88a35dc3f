//! Elementwise and broadcasting operators: arithmetic, comparisons, logic, activations, casts.
use std::fmt;
use std::sync::Arc;

use super::{
    broadcast_shapes, Constructor, InferCx, LowerCx, OpCx, OpKind, OpResult, Operator, ALL, FLOATS,
    INTS, NUMERIC,
};
use crate::error::OpError;
use crate::te::{BinOp, Expr, Scalar, UnOp};
use crate::tensor::{DType, E8M0Round, TensorType};

/// The output element type of an elementwise operator.
#[derive(Clone, Copy, Debug, PartialEq)]
enum OutTy {
    /// The type of input 0.
    Same,
    /// The type of input 1 (`Where`).
    Second,
    /// Bool (comparisons, logic, tests).
    Bool,
    /// A fixed type (`Cast`).
    To(DType),
}

/// The compute function: inputs at the output element (omitted optional inputs are `None`),
/// the operator, and the output element type.
type Compute = fn(&Ew, &[Option<Expr>], DType) -> Expr;

/// An elementwise operator with numpy broadcasting over all its inputs.
pub struct Ew {
    op_type: &'static str,
    /// Allowed type of input 0.
    types: &'static [DType],
    /// True if every input must have input 0's type.
    same_types: bool,
    out: OutTy,
    /// Float attributes (alpha, beta, ...), by meaning per op.
    p: Vec<f64>,
    /// Integer attribute (fmod, detect flags).
    n: i64,
    /// The fewest and most inputs the operator takes (omitted optional ones counted).
    arity: (usize, usize),
    f: Compute,
}

impl fmt::Debug for Ew {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{")?;
        if !self.p.is_empty() {
            write!(f, "p={:?}", self.p)?;
        }
        if self.n != 0 {
            write!(f, " n={}", self.n)?;
        }
        if let OutTy::To(d) = self.out {
            write!(f, " to={d}")?;
        }
        write!(f, "}}")
    }
}

fn ew(op_type: &'static str, types: &'static [DType], out: OutTy, f: Compute) -> Ew {
    Ew {
        op_type,
        types,
        same_types: true,
        out,
        p: vec![],
        n: 0,
        arity: arity(op_type),
        f,
    }
}

/// The input count of an operator of this family, as its ONNX schema gives it: the compute
/// functions read the required inputs unchecked, so [`Ew::infer`] checks the count first.
fn arity(op_type: &str) -> (usize, usize) {
    match op_type {
        "Add" | "Sub" | "Mul" | "Div" | "And" | "Or" | "Xor" | "Equal" | "Less" | "LessOrEqual"
        | "Greater" | "GreaterOrEqual" | "Pow" | "Mod" | "PRelu" | "CastLike" | "BitShift"
        | "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" => (2, 2),
        "Max" | "Min" | "Sum" | "Mean" => (1, usize::MAX),
        "Clip" => (1, 3),
        "Where" => (3, 3),
        _ => (1, 1),
    }
}

impl Ew {
    fn c(&self, d: DType, v: f64) -> Expr {
        Expr::c(d, v)
    }
}

impl Operator for Ew {
    fn op_type(&self) -> &'static str {
        self.op_type
    }

    fn kind(&self) -> OpKind {
        OpKind::Broadcast
    }

    fn infer(&self, cx: &InferCx) -> OpResult<Vec<TensorType>> {
        let (min, max) = self.arity;
        super::check_arity(cx, min, max)?;
        let first = if self.op_type == "Where" { 1 } else { 0 };
        let d0 = super::check_dtype(cx, first, self.types)?;
        if self.op_type == "Where" {
            super::check_dtype(cx, 0, &[DType::Bool])?;
        }
        let mut shapes = Vec::new();
        for (i, t) in cx.inputs.iter().enumerate() {
            if let Some(t) = t {
                if self.same_types && i > first && t.dtype != d0 {
                    return Err(OpError::expected(
                        format!("input {i} of type {d0} like input {first}"),
                        t.dtype,
                    ));
                }
                // CastLike's second input only gives the type.
                if self.op_type != "CastLike" || i == 0 {
                    shapes.push(t.shape.as_slice());
                }
            }
        }
        let shape = broadcast_shapes(&shapes)?;
        let dtype = match self.out {
            OutTy::Same => d0,
            OutTy::Second => cx.input(1)?.dtype,
            OutTy::Bool => DType::Bool,
            OutTy::To(d) => d,
        };
        Ok(vec![TensorType::new(dtype, shape)])
    }

    fn lower(&self, cx: &mut LowerCx) -> OpResult<Vec<crate::te::Src>> {
        let out = cx.output(0).clone();
        // A cast to the input's own type is no conversion (FLOAT8E8M0's, rounding up by default,
        // would take 2^-127 to 2^-126).
        if matches!(self.op_type, "Cast" | "CastLike") && *cx.input(0) == out {
            return Ok(vec![crate::te::Src::Arg(0)]);
        }
        let args: Vec<Option<Expr>> = (0..cx.inputs.len())
            .map(|i| {
                (cx.has(i) && !(self.op_type == "CastLike" && i == 1))
                    .then(|| cx.load_bcast(i, &out.shape))
            })
            .collect();
        let body = (self.f)(self, &args, out.dtype);
        Ok(vec![cx.stage(out, body)])
    }
}

/// `x` where it is positive (`x >= 0` when `ge`, else `x > 0`), else `neg`, an exponential
/// branch `alpha * (exp(x) - 1)` (Elu, Selu). With `alpha > 0` the branch has `x`'s sign, so
/// this is `max(x, 0) + min(neg, 0)` (NaN-propagating, as Celu is written): no select, which
/// the C compiler turns into a branch per element rather than vectorise next to an `exp`
/// (Elu 1.29 ms against Celu's 0.11 on [1, 64, 56, 56], AMD EPYC Zen 4, one thread).
fn positive_or(alpha: f64, x: Expr, neg: Expr, d: DType, ge: bool) -> Expr {
    if alpha > 0.0 {
        x.max(Expr::c(d, 0.0)).add(neg.min(Expr::c(d, 0.0)))
    } else if ge {
        Expr::select(x.clone().ge(Expr::c(d, 0.0)), x, neg)
    } else {
        Expr::select(x.clone().gt(Expr::c(d, 0.0)), x, neg)
    }
}

fn a0(a: &[Option<Expr>]) -> Expr {
    a[0].clone().expect("input 0")
}

fn a1(a: &[Option<Expr>]) -> Expr {
    a[1].clone().expect("input 1")
}

fn unary(op_type: &'static str, types: &'static [DType], op: UnOp) -> OpResult<Arc<dyn Operator>> {
    let mut e = ew(op_type, types, OutTy::Same, |o, a, _| {
        Expr::Un(unop_of(o.op_type), Box::new(a0(a)))
    });
    if matches!(op, UnOp::Not | UnOp::IsNaN) {
        e.out = OutTy::Bool;
    }
    Ok(Arc::new(e))
}

fn unop_of(op_type: &str) -> UnOp {
    match op_type {
        "Neg" => UnOp::Neg,
        "Abs" => UnOp::Abs,
        "Sqrt" => UnOp::Sqrt,
        "Exp" => UnOp::Exp,
        "Log" => UnOp::Log,
        "Sin" => UnOp::Sin,
        "Cos" => UnOp::Cos,
        "Tan" => UnOp::Tan,
        "Asin" => UnOp::Asin,
        "Acos" => UnOp::Acos,
        "Atan" => UnOp::Atan,
        "Sinh" => UnOp::Sinh,
        "Cosh" => UnOp::Cosh,
        "Asinh" => UnOp::Asinh,
        "Acosh" => UnOp::Acosh,
        "Atanh" => UnOp::Atanh,
        "Tanh" => UnOp::Tanh,
        "Erf" => UnOp::Erf,
        "Floor" => UnOp::Floor,
        "Ceil" => UnOp::Ceil,
        "Round" => UnOp::Round,
        "Sign" => UnOp::Sign,
        "Not" => UnOp::Not,
        "IsNaN" => UnOp::IsNaN,
        "BitwiseNot" => UnOp::BitNot,
        other => unreachable!("not a unary op: {other}"),
    }
}

fn binop_of(op_type: &str) -> BinOp {
    match op_type {
        "Add" => BinOp::Add,
        "Sub" => BinOp::Sub,
        "Mul" => BinOp::Mul,
        "Div" => BinOp::Div,
        "And" => BinOp::And,
        "Or" => BinOp::Or,
        "Xor" => BinOp::Xor,
        "BitwiseAnd" => BinOp::BitAnd,
        "BitwiseOr" => BinOp::BitOr,
        "BitwiseXor" => BinOp::BitXor,
        "Equal" => BinOp::Eq,
        "Less" => BinOp::Lt,
        "LessOrEqual" => BinOp::Le,
        "Greater" => BinOp::Gt,
        "GreaterOrEqual" => BinOp::Ge,
        other => unreachable!("not a binary op: {other}"),
    }
}

fn binary(
    op_type: &'static str,
    types: &'static [DType],
    out: OutTy,
) -> OpResult<Arc<dyn Operator>> {
    Ok(Arc::new(ew(op_type, types, out, |o, a, _| {
        Expr::bin(binop_of(o.op_type), a0(a), a1(a))
    })))
}

/// Variadic Max / Min / Sum / Mean.
fn variadic(op_type: &'static str) -> OpResult<Arc<dyn Operator>> {
    let types = if op_type == "Sum" || op_type == "Mean" {
        FLOATS
    } else {
        NUMERIC
    };
    Ok(Arc::new(ew(op_type, types, OutTy::Same, |o, a, d| {
        let mut it = a.iter().flatten().cloned();
        let first = it.next().expect("at least one input");
        let n = a.iter().flatten().count();
        let r = it.fold(first, |acc, x| match o.op_type {
            "Max" => acc.max(x),
            "Min" => acc.min(x),
            _ => acc.add(x),
        });
        if o.op_type == "Mean" {
            r.div(Expr::c(d, n as f64))
        } else {
            r
        }
    })))
}

fn with_p(mut e: Ew, p: Vec<f64>) -> OpResult<Arc<dyn Operator>> {
    e.p = p;
    Ok(Arc::new(e))
}

fn activation(
    cx: &OpCx,
    op_type: &'static str,
    defaults: &[(&str, f32)],
    f: Compute,
) -> OpResult<Arc<dyn Operator>> {
    let mut p = Vec::new();
    for (name, d) in defaults {
        p.push(cx.attrs.float(name, *d)? as f64);
    }
    with_p(ew(op_type, FLOATS, OutTy::Same, f), p)
}

fn sigmoid(x: Expr, d: DType) -> Expr {
    Expr::c(d, 1.0).div(Expr::c(d, 1.0).add(x.neg().exp()))
}

/// `x` converted to `d`. Conversions to an 8-bit float saturate at its largest finite value
/// (`Expr::cast`); with `saturate` = 0 a value that rounds past it (and infinity) becomes
/// infinity where the type has one (E5M2), NaN where not, as ONNX's Cast specifies. FLOAT4E2M1
/// always saturates (it has neither infinity nor NaN); FLOAT8E8M0 rounds as `round` says
/// ([`e8m0`]).
pub(crate) fn cast(x: Expr, d: DType, saturate: bool, round: E8M0Round) -> Expr {
    if d == DType::F8E8M0 {
        return e8m0(x, round, saturate);
    }
    let Some(f8) = d.float8().filter(|_| !saturate) else {
        return x.cast(d);
    };
    // The overflow threshold: half a quantum above the largest value; a tie rounds to even,
    // past the largest value when its mantissa is odd.
    let e_max = (f8.max.log2().floor()) as i32;
    let threshold = f8.max + 2f64.powi(e_max - f8.man) / 2.0;
    let odd = (f8.max * 2f64.powi(f8.man - e_max)) as u64 % 2 == 1;
    let v = x.clone().cast(DType::F64);
    let big = if odd {
        v.clone().abs().ge(Expr::c(DType::F64, threshold))
    } else {
        v.clone().abs().gt(Expr::c(DType::F64, threshold))
    };
    let overflow = match f8.kind {
        crate::tensor::Float8Kind::Ieee => Expr::select(
            v.gt(Expr::c(DType::F64, 0.0)),
            Expr::Const(Scalar::F8(d, 0x7c)),
            Expr::Const(Scalar::F8(d, 0xfc)),
        ),
        _ => Expr::Const(Scalar::F8(d, f8.nan())),
    };
    Expr::select(big, overflow, x.cast(d))
}

/// `x` converted to FLOAT8E8M0 with a rounding mode and saturation (Cast's `round_mode` and
/// `saturate`), as [`crate::tensor::e8m0_encode`] does it, on the bits of `x` as f32: its
/// biased exponent, plus one when `round` rounds the fraction up (without `saturate`, past
/// 2^127 to 0xff, NaN); NaN and infinity are NaN.
fn e8m0(x: Expr, round: E8M0Round, saturate: bool) -> Expr {
    let u = |v: u32| Expr::Const(Scalar::U32(v));
    let bits = Expr::Un(UnOp::BitCast(DType::U32), Box::new(x.cast(DType::F32)));
    let e = bits.clone().shr(u(23)).bitand(u(0xff));
    let up = match round {
        E8M0Round::Down => Expr::bool(false),
        E8M0Round::Up => bits.bitand(u(0x7f_ffff)).ne(u(0)),
        E8M0Round::Nearest => {
            let guard = bits.clone().bitand(u(0x40_0000)).ne(u(0));
            let rest = bits.bitand(u(0x3f_ffff)).ne(u(0));
            guard.and(rest.or(e.clone().gt(u(0))))
        }
    };
    let up = if saturate {
        up.and(e.clone().ne(u(0xfe)))
    } else {
        up
    };
    let code = Expr::select(
        e.clone().eq(u(0xff)),
        u(0xff),
        e.add(Expr::select(up, u(1), u(0))),
    );
    Expr::Un(UnOp::BitCast(DType::F8E8M0), Box::new(code.cast(DType::U8)))
}

/// Cast's `round_mode` attribute (`up` by default; it concerns FLOAT8E8M0 only).
fn round_mode(cx: &OpCx) -> OpResult<E8M0Round> {
    match cx.attrs.string("round_mode", "up")?.as_str() {
        "up" => Ok(E8M0Round::Up),
        "down" => Ok(E8M0Round::Down),
        "nearest" => Ok(E8M0Round::Nearest),
        other => Err(OpError::expected(
            "attribute round_mode up, down or nearest",
            format!("{other:?}"),
        )),
    }
}

/// The rounding mode of a Cast (or CastLike) whose `n` is [`cast_flags`]'s.
fn round_of(n: i64) -> E8M0Round {
    match n >> 1 {
        1 => E8M0Round::Down,
        2 => E8M0Round::Nearest,
        _ => E8M0Round::Up,
    }
}

/// Cast's and CastLike's attributes in the operator's `n`: bit 0 `saturate`, the bits above the
/// rounding mode (0 up, 1 down, 2 nearest).
fn cast_flags(cx: &OpCx) -> OpResult<i64> {
    let saturate = (cx.attrs.int("saturate", 1)? != 0) as i64;
    let round = match round_mode(cx)? {
        E8M0Round::Up => 0,
        E8M0Round::Down => 1,
        E8M0Round::Nearest => 2,
    };
    Ok(saturate | round << 1)
}

fn softplus(x: Expr, d: DType) -> Expr {
    // log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|)): stable for any x, and without a
    // select, whose unused side GCC would move into a branch that keeps the loop scalar.
    let pos = x.clone().max(Expr::c(d, 0.0));
    let neg_abs = Expr::c(d, 0.0).sub(x.abs());
    pos.add(Expr::c(d, 1.0).add(neg_abs.exp()).log())
}

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[
    ("Add", |_| binary("Add", NUMERIC, OutTy::Same)),
    ("Sub", |_| binary("Sub", NUMERIC, OutTy::Same)),
    ("Mul", |_| binary("Mul", NUMERIC, OutTy::Same)),
    ("Div", |_| binary("Div", NUMERIC, OutTy::Same)),
    ("And", |_| binary("And", &[DType::Bool], OutTy::Bool)),
    ("Or", |_| binary("Or", &[DType::Bool], OutTy::Bool)),
    ("Xor", |_| binary("Xor", &[DType::Bool], OutTy::Bool)),
    ("BitwiseAnd", |_| binary("BitwiseAnd", INTS, OutTy::Same)),
    ("BitwiseOr", |_| binary("BitwiseOr", INTS, OutTy::Same)),
    ("BitwiseXor", |_| binary("BitwiseXor", INTS, OutTy::Same)),
    ("BitwiseNot", |_| unary("BitwiseNot", INTS, UnOp::BitNot)),
    ("BitShift", |cx| {
        let mut e = ew("BitShift", INTS, OutTy::Same, |o, a, _| {
            if o.n == 0 {
                a0(a).shl(a1(a))
            } else {
                a0(a).shr(a1(a))
            }
        });
        e.n = match cx.attrs.string("direction", "")?.as_str() {
            "LEFT" => 0,
            "RIGHT" => 1,
            other => {
                return Err(OpError::expected(
                    "attribute direction LEFT or RIGHT",
                    format!("{other:?}"),
                ))
            }
        };
        Ok(Arc::new(e))
    }),
    ("Equal", |_| binary("Equal", ALL, OutTy::Bool)),
    ("Less", |_| binary("Less", NUMERIC, OutTy::Bool)),
    ("LessOrEqual", |_| {
        binary("LessOrEqual", NUMERIC, OutTy::Bool)
    }),
    ("Greater", |_| binary("Greater", NUMERIC, OutTy::Bool)),
    ("GreaterOrEqual", |_| {
        binary("GreaterOrEqual", NUMERIC, OutTy::Bool)
    }),
    ("Pow", |_| {
        let mut e = ew("Pow", NUMERIC, OutTy::Same, |_, a, d| {
            a0(a).pow(a1(a).cast(d))
        });
        e.same_types = false;
        Ok(Arc::new(e))
    }),
    ("Mod", |cx| {
        let mut e = ew("Mod", NUMERIC, OutTy::Same, |o, a, _| {
            if o.n != 0 {
                a0(a).fmod(a1(a))
            } else {
                a0(a).modulo(a1(a))
            }
        });
        e.n = cx.attrs.int("fmod", 0)?;
        Ok(Arc::new(e))
    }),
    ("Max", |_| variadic("Max")),
    ("Min", |_| variadic("Min")),
    ("Sum", |_| variadic("Sum")),
    ("Mean", |_| variadic("Mean")),
    ("Neg", |_| unary("Neg", NUMERIC, UnOp::Neg)),
    ("Abs", |_| unary("Abs", NUMERIC, UnOp::Abs)),
    ("Sign", |_| unary("Sign", NUMERIC, UnOp::Sign)),
    ("Sqrt", |_| unary("Sqrt", FLOATS, UnOp::Sqrt)),
    ("Exp", |_| unary("Exp", FLOATS, UnOp::Exp)),
    ("Log", |_| unary("Log", FLOATS, UnOp::Log)),
    ("Sin", |_| unary("Sin", FLOATS, UnOp::Sin)),
    ("Cos", |_| unary("Cos", FLOATS, UnOp::Cos)),
    ("Tan", |_| unary("Tan", FLOATS, UnOp::Tan)),
    ("Asin", |_| unary("Asin", FLOATS, UnOp::Asin)),
    ("Acos", |_| unary("Acos", FLOATS, UnOp::Acos)),
    ("Atan", |_| unary("Atan", FLOATS, UnOp::Atan)),
    ("Sinh", |_| unary("Sinh", FLOATS, UnOp::Sinh)),
    ("Cosh", |_| unary("Cosh", FLOATS, UnOp::Cosh)),
    ("Asinh", |_| unary("Asinh", FLOATS, UnOp::Asinh)),
    ("Acosh", |_| unary("Acosh", FLOATS, UnOp::Acosh)),
    ("Atanh", |_| unary("Atanh", FLOATS, UnOp::Atanh)),
    ("Tanh", |_| unary("Tanh", FLOATS, UnOp::Tanh)),
    ("Erf", |_| unary("Erf", FLOATS, UnOp::Erf)),
    ("Floor", |_| unary("Floor", FLOATS, UnOp::Floor)),
    ("Ceil", |_| unary("Ceil", FLOATS, UnOp::Ceil)),
    ("Round", |_| unary("Round", FLOATS, UnOp::Round)),
    ("Not", |_| unary("Not", &[DType::Bool], UnOp::Not)),
    ("IsNaN", |_| unary("IsNaN", FLOATS, UnOp::IsNaN)),
    ("IsInf", |cx| {
        let mut e = ew("IsInf", FLOATS, OutTy::Bool, |o, a, _| {
            let x = a0(a);
            let pos = Expr::Un(UnOp::IsPosInf, Box::new(x.clone()));
            let neg = Expr::Un(UnOp::IsNegInf, Box::new(x));
            match o.n {
                3 => pos.or(neg),
                2 => pos,
                1 => neg,
                _ => Expr::bool(false),
            }
        });
        e.n = (cx.attrs.int("detect_positive", 1)? << 1) | cx.attrs.int("detect_negative", 1)?;
        Ok(Arc::new(e))
    }),
    ("Reciprocal", |_| {
        Ok(Arc::new(ew(
            "Reciprocal",
            FLOATS,
            OutTy::Same,
            |_, a, d| Expr::c(d, 1.0).div(a0(a)),
        )))
    }),
    ("Relu", |_| {
        Ok(Arc::new(ew("Relu", NUMERIC, OutTy::Same, |_, a, d| {
            a0(a).max(Expr::c(d, 0.0))
        })))
    }),
    ("LeakyRelu", |cx| {
        activation(cx, "LeakyRelu", &[("alpha", 0.01)], |o, a, d| {
            let x = a0(a);
            Expr::select(x.clone().ge(o.c(d, 0.0)), x.clone(), x.mul(o.c(d, o.p[0])))
        })
    }),
    ("PRelu", |_| {
        let mut e = ew("PRelu", NUMERIC, OutTy::Same, |_, a, d| {
            let x = a0(a);
            Expr::select(x.clone().ge(Expr::c(d, 0.0)), x.clone(), x.mul(a1(a)))
        });
        e.same_types = true;
        Ok(Arc::new(e))
    }),
    ("ThresholdedRelu", |cx| {
        activation(cx, "ThresholdedRelu", &[("alpha", 1.0)], |o, a, d| {
            let x = a0(a);
            Expr::select(x.clone().gt(o.c(d, o.p[0])), x, o.c(d, 0.0))
        })
    }),
    ("Sigmoid", |_| {
        Ok(Arc::new(ew("Sigmoid", FLOATS, OutTy::Same, |_, a, d| {
            sigmoid(a0(a), d)
        })))
    }),
    ("HardSigmoid", |cx| {
        activation(
            cx,
            "HardSigmoid",
            &[("alpha", 0.2), ("beta", 0.5)],
            |o, a, d| {
                a0(a)
                    .mul(o.c(d, o.p[0]))
                    .add(o.c(d, o.p[1]))
                    .max(o.c(d, 0.0))
                    .min(o.c(d, 1.0))
            },
        )
    }),
    ("HardSwish", |_| {
        Ok(Arc::new(ew("HardSwish", FLOATS, OutTy::Same, |_, a, d| {
            let x = a0(a);
            x.clone().mul(
                x.mul(Expr::c(d, 1.0 / 6.0))
                    .add(Expr::c(d, 0.5))
                    .max(Expr::c(d, 0.0))
                    .min(Expr::c(d, 1.0)),
            )
        })))
    }),
    ("Elu", |cx| {
        activation(cx, "Elu", &[("alpha", 1.0)], |o, a, d| {
            let x = a0(a);
            let neg = o.c(d, o.p[0]).mul(x.clone().exp().sub(o.c(d, 1.0)));
            positive_or(o.p[0], x, neg, d, true)
        })
    }),
    ("Selu", |cx| {
        activation(
            cx,
            "Selu",
            &[("alpha", 1.673_263_2), ("gamma", 1.050_701)],
            |o, a, d| {
                let x = a0(a);
                let neg = o.c(d, o.p[0]).mul(x.clone().exp().sub(o.c(d, 1.0)));
                o.c(d, o.p[1]).mul(positive_or(o.p[0], x, neg, d, false))
            },
        )
    }),
    ("Celu", |cx| {
        activation(cx, "Celu", &[("alpha", 1.0)], |o, a, d| {
            let x = a0(a);
            let al = o.c(d, o.p[0]);
            let neg = al
                .clone()
                .mul(x.clone().div(al).exp().sub(o.c(d, 1.0)))
                .min(o.c(d, 0.0));
            x.max(o.c(d, 0.0)).add(neg)
        })
    }),
    ("Softplus", |_| {
        Ok(Arc::new(ew("Softplus", FLOATS, OutTy::Same, |_, a, d| {
            softplus(a0(a), d)
        })))
    }),
    ("Softsign", |_| {
        Ok(Arc::new(ew("Softsign", FLOATS, OutTy::Same, |_, a, d| {
            let x = a0(a);
            x.clone().div(Expr::c(d, 1.0).add(x.abs()))
        })))
    }),
    ("Mish", |_| {
        Ok(Arc::new(ew("Mish", FLOATS, OutTy::Same, |_, a, d| {
            let x = a0(a);
            x.clone().mul(softplus(x, d).tanh())
        })))
    }),
    ("Swish", |cx| {
        activation(cx, "Swish", &[("alpha", 1.0)], |o, a, d| {
            let x = a0(a);
            x.clone().mul(sigmoid(x.mul(o.c(d, o.p[0])), d))
        })
    }),
    ("Gelu", |cx| {
        let approx = cx.attrs.string("approximate", "none")?;
        let mut e = ew("Gelu", FLOATS, OutTy::Same, |o, a, d| {
            let x = a0(a);
            let h = Expr::c(d, 0.5);
            if o.n == 1 {
                let inner =
                    Expr::c(d, (2.0f64 / std::f64::consts::PI).sqrt())
                        .mul(x.clone().add(
                            Expr::c(d, 0.044715).mul(x.clone().mul(x.clone()).mul(x.clone())),
                        ));
                h.mul(x).mul(Expr::c(d, 1.0).add(inner.tanh()))
            } else {
                h.mul(x.clone()).mul(
                    Expr::c(d, 1.0).add(x.mul(Expr::c(d, std::f64::consts::FRAC_1_SQRT_2)).erf()),
                )
            }
        });
        e.n = match approx.as_str() {
            "none" => 0,
            "tanh" => 1,
            other => {
                return Err(OpError::expected(
                    "approximate = \"none\" or \"tanh\"",
                    other,
                ))
            }
        };
        Ok(Arc::new(e))
    }),
    ("Clip", |cx| {
        let mut e = ew("Clip", NUMERIC, OutTy::Same, |o, a, d| {
            let mut x = a0(a);
            if o.p.len() == 2 {
                x = x.max(Expr::c(d, o.p[0])).min(Expr::c(d, o.p[1]));
            }
            if let Some(lo) = a.get(1).cloned().flatten() {
                x = x.max(lo);
            }
            if let Some(hi) = a.get(2).cloned().flatten() {
                x = x.min(hi);
            }
            x
        });
        if cx.opset < 11 {
            e.p = vec![
                cx.attrs.float("min", f32::MIN)? as f64,
                cx.attrs.float("max", f32::MAX)? as f64,
            ];
        }
        Ok(Arc::new(e))
    }),
    ("Where", |_| {
        let mut e = ew("Where", ALL, OutTy::Second, |_, a, _| {
            Expr::select(a0(a), a1(a), a[2].clone().expect("input 2"))
        });
        e.same_types = true;
        Ok(Arc::new(e))
    }),
    ("Cast", |cx| {
        // A code outside i32 is no type (not a truncated one).
        let to = i32::try_from(cx.attrs.int("to", 0)?).unwrap_or(-1);
        let d = DType::from_onnx(to)
            .ok_or_else(|| OpError::Unsupported(format!("Cast to {}", DType::onnx_name(to))))?;
        let mut e = ew("Cast", ALL, OutTy::To(d), |o, a, d| {
            cast(a0(a), d, o.n & 1 != 0, round_of(o.n))
        });
        e.n = cast_flags(cx)?;
        Ok(Arc::new(e))
    }),
    ("CastLike", |cx| {
        let mut e = ew("CastLike", ALL, OutTy::Second, |o, a, d| {
            cast(a0(a), d, o.n & 1 != 0, round_of(o.n))
        });
        e.same_types = false;
        e.n = cast_flags(cx)?;
        Ok(Arc::new(e))
    }),
    ("Identity", |_| {
        Ok(Arc::new(ew("Identity", ALL, OutTy::Same, |_, a, _| a0(a))))
    }),
];
