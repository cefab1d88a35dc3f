//! The text form of tensor expressions: stages, whole programs, and the canonical form of a
//! stage that keys the cost cache.
//!
//! Every construct is printed explicitly (never through `Debug`), so that renaming a Rust field or
//! variant does not change the text, and with it every cache key. The grammar, by example:
//!
//! ```text
//! b7 = stage "Conv_6_0" f32[1,8,28,28] part 1 c
//!   sum over [1,5,5] of (b2[i0, r0, (i2 + r1), (i3 + r2)] * b3[i1, r0, r1, r2])
//!   finalize max((acc + b4[i1]), 0f32)
//! ```
//!
//! Variables are `i<k>` (output) and `r<k>` (reduction); `acc` is the accumulator; sources are
//! `b<k>` (a program buffer), `a<k>` (an operator argument) and `s<k>` (an operator's own stage);
//! `b<k>{e}` loads at a flat offset; constants carry their type (`0.5f32`, `3i64`, `true`).
use std::fmt::{self, Display, Formatter, Write as _};

use super::{
    BinOp, BufKind, Exec, Expr, LibraryCall, Program, RedOp, Scalar, Src, Stage, UnOp, WindowKind,
};

impl Display for Src {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Src::Arg(k) => write!(f, "a{k}"),
            Src::Local(k) => write!(f, "s{k}"),
            Src::Buf(k) => write!(f, "b{k}"),
        }
    }
}

impl Display for Scalar {
    /// Floats print in Rust's shortest round-trip form (`inf`, `NaN` included), then the type.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match *self {
            Scalar::F32(v) => write!(f, "{v:?}f32"),
            Scalar::F64(v) => write!(f, "{v:?}f64"),
            Scalar::I32(v) => write!(f, "{v}i32"),
            Scalar::I64(v) => write!(f, "{v}i64"),
            Scalar::Bool(v) => write!(f, "{v}"),
            h @ (Scalar::F16(_) | Scalar::BF16(_) | Scalar::F8(..)) => {
                write!(f, "{:?}{}", h.as_f64(), h.dtype())
            }
            i => write!(f, "{}{}", i.as_int(), i.dtype()),
        }
    }
}

impl UnOp {
    /// The operation's name in the text form.
    pub fn name(self) -> &'static str {
        match self {
            UnOp::Neg => "neg",
            UnOp::Abs => "abs",
            UnOp::Sqrt => "sqrt",
            UnOp::Exp => "exp",
            UnOp::ExpNonPos => "exp_nonpos",
            UnOp::Log => "log",
            UnOp::Sin => "sin",
            UnOp::Cos => "cos",
            UnOp::Tan => "tan",
            UnOp::Asin => "asin",
            UnOp::Acos => "acos",
            UnOp::Atan => "atan",
            UnOp::Sinh => "sinh",
            UnOp::Cosh => "cosh",
            UnOp::Asinh => "asinh",
            UnOp::Acosh => "acosh",
            UnOp::Atanh => "atanh",
            UnOp::Tanh => "tanh",
            UnOp::Erf => "erf",
            UnOp::Floor => "floor",
            UnOp::Ceil => "ceil",
            UnOp::Round => "round",
            UnOp::Sign => "sign",
            UnOp::Not => "not",
            UnOp::IsNaN => "isnan",
            UnOp::IsPosInf => "isposinf",
            UnOp::IsNegInf => "isneginf",
            UnOp::BitNot => "bitnot",
            UnOp::BitCast(_) => "bitcast",
        }
    }
}

impl BinOp {
    /// The infix symbol, for the operations printed infix.
    fn infix(self) -> Option<&'static str> {
        Some(match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::And => "&",
            BinOp::Or => "|",
            BinOp::Xor => "^",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::Pow
            | BinOp::Max
            | BinOp::Min
            | BinOp::Mod
            | BinOp::FMod
            | BinOp::BitAnd
            | BinOp::BitOr
            | BinOp::BitXor => return None,
        })
    }

    /// The operation's name in the text form (the function name of those not printed infix).
    pub fn name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
            BinOp::Pow => "pow",
            BinOp::Max => "max",
            BinOp::Min => "min",
            BinOp::Mod => "mod",
            BinOp::FMod => "fmod",
            BinOp::And => "and",
            BinOp::Or => "or",
            BinOp::Xor => "xor",
            BinOp::BitAnd => "bitand",
            BinOp::BitOr => "bitor",
            BinOp::BitXor => "bitxor",
            BinOp::Shl => "shl",
            BinOp::Shr => "shr",
            BinOp::Eq => "eq",
            BinOp::Ne => "ne",
            BinOp::Lt => "lt",
            BinOp::Le => "le",
            BinOp::Gt => "gt",
            BinOp::Ge => "ge",
        }
    }
}

impl Display for RedOp {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
        })
    }
}

fn list<T: Display>(f: &mut Formatter<'_>, items: &[T]) -> fmt::Result {
    for (k, e) in items.iter().enumerate() {
        if k > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{e}")?;
    }
    Ok(())
}

impl Display for Expr {
    /// Fully parenthesised: binary operations print as `(a op b)` or `name(a, b)`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Var(k) => write!(f, "i{k}"),
            Expr::RVar(k) => write!(f, "r{k}"),
            Expr::Acc => f.write_str("acc"),
            Expr::Const(c) => write!(f, "{c}"),
            Expr::Load(s, idx) => {
                write!(f, "{s}[")?;
                list(f, idx)?;
                f.write_str("]")
            }
            Expr::LoadFlat(s, e) => write!(f, "{s}{{{e}}}"),
            Expr::Un(UnOp::BitCast(d), e) => write!(f, "bitcast<{d}>({e})"),
            Expr::Un(op, e) => write!(f, "{}({e})", op.name()),
            Expr::Bin(op, a, b) => match op.infix() {
                Some(sym) => write!(f, "({a} {sym} {b})"),
                None => write!(f, "{}({a}, {b})", op.name()),
            },
            Expr::Select(c, a, b) => write!(f, "select({c}, {a}, {b})"),
            Expr::Cast(d, e) => write!(f, "cast<{d}>({e})"),
        }
    }
}

impl Display for WindowKind {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WindowKind::Conv => "conv",
            WindowKind::MaxPool => "maxpool",
            WindowKind::AvgPoolExcludePad => "avgpool_exclude_pad",
            WindowKind::AvgPoolIncludePad => "avgpool_include_pad",
        })
    }
}

impl Display for Exec {
    /// `c`, `<backend> gemm`, or `<backend> <window operator>(<geometry>)`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Exec::Generated => f.write_str("c"),
            Exec::Library {
                backend,
                call: LibraryCall::Gemm,
            } => write!(f, "{backend} gemm"),
            Exec::Library {
                backend,
                call: LibraryCall::Window(d),
            } => write!(
                f,
                "{backend} {}(n={} ic={} ih={} iw={} oc={} oh={} ow={} k={}x{} s={}x{} d={}x{} pad={},{},{},{} groups={})",
                d.kind,
                d.n,
                d.ic,
                d.ih,
                d.iw,
                d.oc,
                d.oh,
                d.ow,
                d.kh,
                d.kw,
                d.sh,
                d.sw,
                d.dh,
                d.dw,
                d.pt,
                d.pl,
                d.pb,
                d.pr,
                d.groups
            ),
        }
    }
}

impl Stage {
    /// What the stage computes, without its name or partition: its type, executor, body and
    /// reduction, one construct per line (indented by two spaces after the first). Two stages
    /// with the same canonical text compile to the same kernel; the cost cache is keyed by it.
    pub fn canonical_text(&self) -> String {
        let mut s = String::new();
        write!(s, "{} {}", self.ty, self.exec).unwrap();
        if self.materialize {
            s.push_str(" materialize");
        }
        match &self.reduce {
            None => write!(s, "\n  {}", self.body).unwrap(),
            Some(r) => {
                write!(s, "\n  {} over {:?} of {}", r.op, r.extents, self.body).unwrap();
                if let Some(fin) = &r.finalize {
                    write!(s, "\n  finalize {fin}").unwrap();
                }
            }
        }
        s
    }
}

impl Display for Stage {
    /// `stage "<name>" part <p> <canonical text>`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stage {:?} part {} {}",
            self.name,
            self.part,
            self.canonical_text()
        )
    }
}

impl Display for Program {
    /// One buffer per line (a stage's body on the lines after it): inputs, constants (type and
    /// storage, not contents), stages and the buffers fusion removed; then the outputs.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (k, b) in self.bufs.iter().enumerate() {
            match &b.kind {
                BufKind::Input(i) => writeln!(f, "b{k} = input {i} {:?} {}", b.name, b.ty)?,
                BufKind::Const(_) => writeln!(
                    f,
                    "b{k} = const {:?} {}{}",
                    b.name,
                    b.ty,
                    if b.packed { " packed" } else { "" }
                )?,
                BufKind::Stage(st) => writeln!(f, "b{k} = {st}")?,
                BufKind::Dead => writeln!(f, "b{k} = dead {:?}", b.name)?,
            }
        }
        f.write_str("outputs")?;
        for (o, name) in self.outputs.iter().zip(&self.output_names) {
            write!(f, " b{o} {name:?}")?;
        }
        writeln!(f)
    }
}

/// FNV-1a (64-bit) of a string: stable across runs and machines, for names and keys.
pub fn fnv64(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::te::{BufId, Reduce};
    use crate::tensor::{DType, TensorType};

    #[test]
    fn a_stage_prints_every_construct() {
        let x = Expr::load(Src::Buf(BufId(2)), vec![Expr::var(0), Expr::rvar(0)]);
        let st = Stage {
            name: "MatMul_3_0".into(),
            ty: TensorType::new(DType::F32, [4]),
            body: Expr::bin(BinOp::Mul, x, Expr::c(DType::F32, 0.5)),
            reduce: Some(Reduce {
                op: RedOp::Sum,
                extents: vec![8],
                finalize: Some(Expr::bin(
                    BinOp::Max,
                    Expr::Acc,
                    Expr::Cast(DType::F32, Box::new(Expr::i(0))),
                )),
            }),
            materialize: false,
            part: 3,
            exec: Exec::Generated,
            choice: None,
        };
        assert_eq!(
            st.to_string(),
            "stage \"MatMul_3_0\" part 3 f32[4] c\n  sum over [8] of (b2[i0, r0] * 0.5f32)\n  finalize max(acc, cast<f32>(0i64))"
        );
        let renamed = Stage {
            name: "other".into(),
            part: 9,
            ..st.clone()
        };
        assert_eq!(st.canonical_text(), renamed.canonical_text());
    }
}
