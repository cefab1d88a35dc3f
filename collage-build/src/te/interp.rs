//! A reference interpreter for stages: constant folding and checks of the code generator.
use super::{BinOp, Expr, RedOp, Scalar, Src, Stage, UnOp};
use crate::tensor::{strides, DType, Tensor};

/// Evaluates stages over tensors that sources resolve to.
pub struct Evaluator<'a> {
    /// Resolves a source to its tensor.
    pub src: &'a dyn Fn(Src) -> &'a Tensor,
}

fn load(t: &Tensor, flat: i64) -> Scalar {
    let i = flat as usize;
    if flat < 0 || i >= t.numel() {
        // Out-of-range reads are a compiler bug or invalid data (e.g. a Gather index out of range);
        // yield zero rather than reading past the buffer, as the generated code clamps too.
        return Scalar::from_f64(t.ty.dtype, 0.0);
    }
    match t.ty.dtype {
        DType::F32 => Scalar::F32(t.get_f64(i) as f32),
        DType::F64 => Scalar::F64(t.get_f64(i)),
        // The one-byte floats as their byte (decoding and encoding again need not give it back:
        // FLOAT8E8M0 rounds 2^-127, an f32 subnormal, up).
        d if d.is_byte_float() => Scalar::F8(d, t.data[i]),
        d if d.is_narrow_float() => Scalar::from_f64(d, t.get_f64(i)),
        d => Scalar::from_int(d, t.get_int(i)),
    }
}

fn store(t: &mut Tensor, i: usize, v: Scalar) {
    match v {
        // A one-byte float as its byte (see `load`).
        Scalar::F8(d, b) if d == t.ty.dtype => t.data[i] = b,
        v if v.dtype().is_float() => t.set_f64(i, v.as_f64()),
        v => t.set_int(i, v.as_int()),
    }
}

fn un_f64(op: UnOp, x: f64) -> f64 {
    match op {
        UnOp::Neg => -x,
        UnOp::Abs => x.abs(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Exp | UnOp::ExpNonPos => x.exp(),
        UnOp::Log => x.ln(),
        UnOp::Sin => x.sin(),
        UnOp::Cos => x.cos(),
        UnOp::Tan => x.tan(),
        UnOp::Asin => x.asin(),
        UnOp::Acos => x.acos(),
        UnOp::Atan => x.atan(),
        UnOp::Sinh => x.sinh(),
        UnOp::Cosh => x.cosh(),
        UnOp::Asinh => x.asinh(),
        UnOp::Acosh => x.acosh(),
        UnOp::Atanh => x.atanh(),
        UnOp::Tanh => x.tanh(),
        UnOp::Erf => libm::erf(x),
        UnOp::Floor => x.floor(),
        UnOp::Ceil => x.ceil(),
        UnOp::Round => x.round_ties_even(),
        UnOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }
        UnOp::Not
        | UnOp::IsNaN
        | UnOp::IsPosInf
        | UnOp::IsNegInf
        | UnOp::BitNot
        | UnOp::BitCast(_) => {
            unreachable!()
        }
    }
}

fn un(op: UnOp, a: Scalar) -> Scalar {
    match op {
        UnOp::Not => return Scalar::Bool(a.is_zero()),
        UnOp::IsNaN => return Scalar::Bool(a.as_f64().is_nan()),
        UnOp::IsPosInf => return Scalar::Bool(a.as_f64() == f64::INFINITY),
        UnOp::IsNegInf => return Scalar::Bool(a.as_f64() == f64::NEG_INFINITY),
        UnOp::BitCast(d) => return bitcast(d, a),
        _ => {}
    }
    match a {
        Scalar::F32(x) => Scalar::F32(un_f64(op, x as f64) as f32),
        Scalar::F64(x) => Scalar::F64(un_f64(op, x)),
        // The 16-bit floats compute in f32 and round the result, as the graph's casts do.
        h if h.dtype().is_narrow_float() => {
            Scalar::from_f64(h.dtype(), un_f64(op, h.as_f64()) as f32 as f64)
        }
        i => Scalar::from_int(i.dtype(), un_int(op, i.as_int())),
    }
}

/// The bits of `a` (zero-extended to 64) reinterpreted as `d`, a type of the same size (to
/// Bool: whether any bit is set, as the generated code stores it).
fn bitcast(d: DType, a: Scalar) -> Scalar {
    let bits: u64 = match a {
        Scalar::F32(x) => x.to_bits() as u64,
        Scalar::F64(x) => x.to_bits(),
        Scalar::F16(b) | Scalar::BF16(b) => b as u64,
        Scalar::F8(_, b) => b as u64,
        i => {
            let width = 8 * i.dtype().size() as u32;
            (i.as_int() as u64) & (u64::MAX >> (64 - width))
        }
    };
    match d {
        DType::F32 => Scalar::F32(f32::from_bits(bits as u32)),
        DType::F64 => Scalar::F64(f64::from_bits(bits)),
        DType::F16 => Scalar::F16(bits as u16),
        DType::BF16 => Scalar::BF16(bits as u16),
        DType::Bool => Scalar::Bool(bits != 0),
        d if d.is_byte_float() => Scalar::F8(d, bits as u8),
        d => Scalar::from_int(d, bits as i128),
    }
}

/// A unary operation on an integer (the caller wraps the result to the type).
fn un_int(op: UnOp, x: i128) -> i128 {
    match op {
        UnOp::Neg => x.wrapping_neg(),
        UnOp::Abs => x.wrapping_abs(),
        UnOp::Sign => x.signum(),
        UnOp::Floor | UnOp::Ceil | UnOp::Round => x,
        UnOp::BitNot => !x,
        other => un_f64(other, x as f64) as i128,
    }
}

fn bin_f64(op: BinOp, a: f64, b: f64) -> f64 {
    match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        BinOp::Div => a / b,
        BinOp::Pow => a.powf(b),
        BinOp::Max => {
            if a >= b || a.is_nan() {
                a
            } else {
                b
            }
        }
        BinOp::Min => {
            if a <= b || a.is_nan() {
                a
            } else {
                b
            }
        }
        BinOp::Mod => {
            let r = a % b;
            if r != 0.0 && ((r < 0.0) != (b < 0.0)) {
                r + b
            } else {
                r
            }
        }
        BinOp::FMod => a % b,
        _ => unreachable!(),
    }
}

/// A binary operation on integers (exact, or wrapping past i128; the caller wraps the result
/// to the type, which matches C's arithmetic modulo 2^bits).
fn bin_int(op: BinOp, a: i128, b: i128) -> i128 {
    match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::Div => {
            if b == 0 {
                0
            } else {
                a.wrapping_div(b)
            }
        }
        BinOp::Pow => {
            if b < 0 {
                (a as f64).powf(b as f64) as i128
            } else {
                a.wrapping_pow(b.min(u32::MAX as i128) as u32)
            }
        }
        BinOp::Max => a.max(b),
        BinOp::Min => a.min(b),
        BinOp::Mod => {
            if b == 0 {
                0
            } else {
                let r = a.wrapping_rem(b);
                if r != 0 && ((r < 0) != (b < 0)) {
                    r + b
                } else {
                    r
                }
            }
        }
        BinOp::FMod => {
            if b == 0 {
                0
            } else {
                a.wrapping_rem(b)
            }
        }
        BinOp::And => ((a != 0) && (b != 0)) as i128,
        BinOp::Or => ((a != 0) || (b != 0)) as i128,
        BinOp::Xor => ((a != 0) ^ (b != 0)) as i128,
        // Two's complement in i128 agrees with every narrower type once wrapped.
        BinOp::BitAnd => a & b,
        BinOp::BitOr => a | b,
        BinOp::BitXor => a ^ b,
        _ => unreachable!(),
    }
}

fn bin(op: BinOp, a: Scalar, b: Scalar) -> Scalar {
    if op.is_compare() {
        let (x, y) = (a, b);
        let r = if x.dtype().is_float() || y.dtype().is_float() {
            cmp(op, x.as_f64().partial_cmp(&y.as_f64()))
        } else {
            cmp(op, x.as_int().partial_cmp(&y.as_int()))
        };
        return Scalar::Bool(r);
    }
    match a {
        Scalar::F32(x) => {
            let y = b.as_f64() as f32;
            let r = match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x * y,
                BinOp::Div => x / y,
                BinOp::FMod => x % y,
                _ => bin_f64(op, x as f64, y as f64) as f32,
            };
            Scalar::F32(r)
        }
        Scalar::F64(x) => Scalar::F64(bin_f64(op, x, b.as_f64())),
        h if h.dtype().is_narrow_float() => {
            let r = bin(
                op,
                Scalar::F32(h.as_f64() as f32),
                Scalar::F32(b.as_f64() as f32),
            );
            Scalar::from_f64(h.dtype(), r.as_f64())
        }
        i => {
            // The right operand is converted to the left's type first, as the C code does.
            let d = i.dtype();
            let y = Scalar::from_int(d, b.as_int()).as_int();
            if let BinOp::Shl | BinOp::Shr = op {
                let bits = 8 * d.size() as i128;
                let r = if !(0..bits).contains(&y) {
                    // An arithmetic right shift of a negative value by the width or more.
                    -((op == BinOp::Shr && i.as_int() < 0) as i128)
                } else if op == BinOp::Shl {
                    i.as_int() << y
                } else {
                    i.as_int() >> y
                };
                return Scalar::from_int(d, r);
            }
            Scalar::from_int(d, bin_int(op, i.as_int(), y))
        }
    }
}

fn cmp(op: BinOp, o: Option<std::cmp::Ordering>) -> bool {
    use std::cmp::Ordering::*;
    match (op, o) {
        (BinOp::Ne, None) => true,
        (_, None) => false,
        (BinOp::Eq, Some(o)) => o == Equal,
        (BinOp::Ne, Some(o)) => o != Equal,
        (BinOp::Lt, Some(o)) => o == Less,
        (BinOp::Le, Some(o)) => o != Greater,
        (BinOp::Gt, Some(o)) => o == Greater,
        (BinOp::Ge, Some(o)) => o != Less,
        _ => unreachable!(),
    }
}

fn cast(d: DType, v: Scalar) -> Scalar {
    match d {
        // No conversion (a one-byte float decoded and encoded again need not give its byte).
        d if v.dtype() == d => v,
        DType::Bool => Scalar::Bool(!v.is_zero()),
        d if d.is_int() => match v {
            f if f.dtype().is_float() => {
                let x = v.as_f64();
                // Out-of-range and NaN conversions are undefined in C; pin them as x86 does.
                let i = if x.is_nan() || x >= 9.2e18 || x <= -9.3e18 {
                    if d == DType::U64 && (0.0..1.8e19).contains(&x) {
                        x as u64 as i128
                    } else {
                        i64::MIN as i128
                    }
                } else {
                    x as i64 as i128
                };
                Scalar::from_int(d, i)
            }
            _ => Scalar::from_int(d, v.as_int()),
        },
        _ if v.dtype().is_float() => Scalar::from_f64(d, v.as_f64()),
        _ => Scalar::from_int(d, v.as_int()),
    }
}

impl Evaluator<'_> {
    fn eval(&self, e: &Expr, vars: &[i64], rvars: &[i64], acc: Option<Scalar>) -> Scalar {
        match e {
            Expr::Var(k) => Scalar::I64(vars[*k as usize]),
            Expr::RVar(k) => Scalar::I64(rvars[*k as usize]),
            Expr::Acc => acc.expect("Acc outside finalize"),
            Expr::Const(s) => *s,
            Expr::Load(s, idx) => {
                let t = (self.src)(*s);
                let st = strides(&t.ty.shape);
                let mut flat = 0i64;
                for (k, ie) in idx.iter().enumerate() {
                    let i = self.eval(ie, vars, rvars, acc).as_i64();
                    if i < 0 || i as usize >= t.ty.shape[k] {
                        return Scalar::from_f64(t.ty.dtype, 0.0);
                    }
                    flat += i * st[k] as i64;
                }
                load(t, flat)
            }
            Expr::LoadFlat(s, f) => load((self.src)(*s), self.eval(f, vars, rvars, acc).as_i64()),
            Expr::Un(op, a) => un(*op, self.eval(a, vars, rvars, acc)),
            Expr::Bin(op, a, b) => bin(
                *op,
                self.eval(a, vars, rvars, acc),
                self.eval(b, vars, rvars, acc),
            ),
            Expr::Select(c, a, b) => {
                if !self.eval(c, vars, rvars, acc).is_zero() {
                    self.eval(a, vars, rvars, acc)
                } else {
                    self.eval(b, vars, rvars, acc)
                }
            }
            Expr::Cast(d, a) => cast(*d, self.eval(a, vars, rvars, acc)),
        }
    }

    /// Computes every element of `stage`.
    pub fn stage(&self, stage: &Stage) -> Tensor {
        let mut out = Tensor::zeros(stage.ty.clone());
        let shape = &stage.ty.shape;
        let n = stage.ty.numel();
        let mut idx = vec![0i64; shape.len()];
        for flat in 0..n {
            let mut rem = flat;
            for k in (0..shape.len()).rev() {
                idx[k] = (rem % shape[k]) as i64;
                rem /= shape[k];
            }
            let v = match &stage.reduce {
                None => self.eval(&stage.body, &idx, &[], None),
                Some(r) => {
                    let mut acc = r.op.init(stage.ty.dtype);
                    let total: usize = r.extents.iter().product();
                    let mut ridx = vec![0i64; r.extents.len()];
                    for rf in 0..total {
                        let mut rem = rf;
                        for k in (0..r.extents.len()).rev() {
                            ridx[k] = (rem % r.extents[k]) as i64;
                            rem /= r.extents[k];
                        }
                        let x = self.eval(&stage.body, &idx, &ridx, None);
                        acc = combine(r.op, acc, x);
                    }
                    match &r.finalize {
                        Some(f) => self.eval(f, &idx, &[], Some(acc)),
                        None => acc,
                    }
                }
            };
            store(&mut out, flat, cast(stage.ty.dtype, v));
        }
        out
    }
}

fn combine(op: RedOp, acc: Scalar, x: Scalar) -> Scalar {
    match op {
        // Max/Min propagate NaN like the generated code.
        RedOp::Max | RedOp::Min if x.as_f64().is_nan() => x,
        _ => bin(op.combine(), acc, x),
    }
}

/// Evaluates an operator's local stages given its argument tensors; returns the tensors of `outs`.
pub fn eval_stages(stages: &[Stage], args: &[Option<&Tensor>], outs: &[Src]) -> Vec<Tensor> {
    let mut done: Vec<Tensor> = Vec::with_capacity(stages.len());
    for st in stages {
        let t = {
            let done_ref = &done;
            let resolve = |s: Src| -> &Tensor {
                match s {
                    Src::Arg(i) => args[i as usize].expect("argument present"),
                    Src::Local(j) => &done_ref[j as usize],
                    Src::Buf(_) => panic!("global source in local stages"),
                }
            };
            Evaluator { src: &resolve }.stage(st)
        };
        done.push(t);
    }
    outs.iter()
        .map(|s| match s {
            Src::Arg(i) => args[*i as usize].expect("argument present").clone(),
            Src::Local(j) => done[*j as usize].clone(),
            Src::Buf(_) => panic!("global source in local stages"),
        })
        .collect()
}

/// The output tensors of a whole program on its `inputs` (tests): every stage evaluated in
/// order; dead buffers hold nothing.
#[cfg(test)]
pub(crate) fn run_program(p: &super::Program, inputs: &[Tensor]) -> Vec<Tensor> {
    use super::BufKind;
    let mut vals: Vec<Tensor> = Vec::with_capacity(p.bufs.len());
    for b in &p.bufs {
        let t = match &b.kind {
            BufKind::Input(k) => inputs[*k].clone(),
            BufKind::Const(t) => (**t).clone(),
            BufKind::Stage(st) => {
                let resolve = |s: Src| -> &Tensor {
                    match s {
                        Src::Buf(b) => &vals[b.index()],
                        other => panic!("unresolved {other:?}"),
                    }
                };
                Evaluator { src: &resolve }.stage(st)
            }
            _ => Tensor::from_f32(&[0], &[]),
        };
        vals.push(t);
    }
    p.outputs.iter().map(|b| vals[b.index()].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Integer arithmetic wraps to the operand type as C's does once stored; shifts past the
    /// width give 0 (or -1 for a negative value shifted right).
    #[test]
    fn integer_semantics() {
        let u8s = |v: u8| Scalar::U8(v);
        assert_eq!(bin(BinOp::Add, u8s(200), u8s(100)), Scalar::U8(44));
        assert_eq!(bin(BinOp::Sub, u8s(1), u8s(2)), Scalar::U8(255));
        assert_eq!(
            bin(BinOp::Mul, Scalar::I16(300), Scalar::I16(300)),
            Scalar::I16(24464)
        );
        assert_eq!(
            bin(BinOp::Mul, Scalar::U64(u64::MAX), Scalar::U64(u64::MAX)),
            Scalar::U64(1)
        );
        assert_eq!(
            bin(BinOp::Gt, Scalar::U64(u64::MAX), Scalar::U64(1)),
            Scalar::Bool(true)
        );
        assert_eq!(bin(BinOp::Shl, u8s(0x81), u8s(1)), Scalar::U8(2));
        assert_eq!(bin(BinOp::Shl, u8s(1), u8s(8)), Scalar::U8(0));
        assert_eq!(
            bin(BinOp::Shr, Scalar::I8(-128), Scalar::I8(9)),
            Scalar::I8(-1)
        );
        assert_eq!(
            bin(BinOp::Shr, Scalar::I8(-128), Scalar::I8(1)),
            Scalar::I8(-64)
        );
        assert_eq!(
            bin(BinOp::BitXor, Scalar::I32(-1), Scalar::I32(5)),
            Scalar::I32(-6)
        );
        assert_eq!(un(UnOp::BitNot, u8s(5)), Scalar::U8(250));
        assert_eq!(un(UnOp::Neg, u8s(1)), Scalar::U8(255));
        assert_eq!(cast(DType::U8, Scalar::I64(-1)), Scalar::U8(255));
        assert_eq!(cast(DType::U32, Scalar::F64(3.9)), Scalar::U32(3));
        assert_eq!(RedOp::Max.init(DType::U16), Scalar::U16(0));
        assert_eq!(RedOp::Min.init(DType::I8), Scalar::I8(127));
    }

    /// BitCast keeps every bit (sign bits, NaN payloads, the 16-bit floats' bits).
    #[test]
    fn bitcast_bits() {
        let bc = |d: DType, v: Scalar| un(UnOp::BitCast(d), v);
        assert_eq!(bc(DType::I32, Scalar::F32(1.0)), Scalar::I32(0x3f80_0000));
        assert_eq!(bc(DType::U32, Scalar::F32(-0.0)), Scalar::U32(0x8000_0000));
        assert!(bc(DType::F32, Scalar::I32(-1)).as_f64().is_nan());
        assert_eq!(
            bc(DType::I64, Scalar::F64(-2.0)),
            Scalar::I64(-4_611_686_018_427_387_904)
        );
        assert_eq!(
            bc(DType::F64, Scalar::U64(0x3ff0_0000_0000_0000)),
            Scalar::F64(1.0)
        );
        assert_eq!(bc(DType::I16, Scalar::F16(0xc000)), Scalar::I16(-16384));
        assert_eq!(bc(DType::BF16, Scalar::I16(-1)), Scalar::BF16(0xffff));
        assert_eq!(bc(DType::F16, Scalar::BF16(0x3f80)), Scalar::F16(0x3f80));
        assert_eq!(bc(DType::U8, Scalar::I8(-2)), Scalar::U8(254));
        assert_eq!(bc(DType::U8, Scalar::Bool(true)), Scalar::U8(1));
        assert_eq!(bc(DType::Bool, Scalar::U8(2)), Scalar::Bool(true));
    }
}

#[cfg(test)]
mod half_tests {
    use super::*;

    /// The 16-bit floats round to nearest even on every conversion, keep NaN and overflow to inf.
    #[test]
    fn half_conversions() {
        let h = |v: f64| cast(DType::F16, Scalar::F64(v));
        assert_eq!(h(1.0), Scalar::F16(0x3c00));
        assert_eq!(h(65504.0), Scalar::F16(0x7bff));
        assert_eq!(h(65520.0), Scalar::F16(0x7c00), "ties to even: up to inf");
        assert_eq!(h(2f64.powi(-24)), Scalar::F16(0x0001), "smallest subnormal");
        assert!(h(f64::NAN).as_f64().is_nan());
        assert_eq!(cast(DType::F32, Scalar::F16(0xc000)), Scalar::F32(-2.0));
        assert_eq!(cast(DType::I32, Scalar::F16(0x4500)), Scalar::I32(5));
        let b = cast(DType::BF16, Scalar::F32(1.0 + 1.0 / 256.0)); // a tie: to even (1.0)
        assert_eq!(b, Scalar::BF16(0x3f80));
        // Arithmetic rounds each result to the type.
        assert_eq!(
            bin(BinOp::Add, Scalar::F16(0x3c00), Scalar::F16(0x1000)),
            Scalar::F16(0x3c00)
        );
    }
}
