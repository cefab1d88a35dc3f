//! Element types and static tensor types.
use std::fmt;

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// Boolean, stored as one byte holding 0 or 1.
    Bool,
    /// 8-bit signed integer.
    I8,
    /// 8-bit unsigned integer.
    U8,
    /// 16-bit signed integer.
    I16,
    /// 16-bit unsigned integer.
    U16,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit unsigned integer.
    U64,
    /// IEEE half (binary16), stored as its 16 bits. A storage type: operators compute on f32
    /// (the graph pass `passes::half` casts around every node but `Cast`).
    F16,
    /// bfloat16, stored as its 16 bits; a storage type like [`DType::F16`].
    BF16,
    /// 8-bit float E4M3FN (no infinity; NaN is all ones), a storage type like [`DType::F16`].
    F8E4M3FN,
    /// 8-bit float E4M3FNUZ (no infinity, no negative zero; NaN is 0x80).
    F8E4M3FNUZ,
    /// 8-bit float E5M2 (IEEE-like, with infinities).
    F8E5M2,
    /// 8-bit float E5M2FNUZ (no infinity, no negative zero; NaN is 0x80).
    F8E5M2FNUZ,
    /// 4-bit float E2M1 (no infinity, no NaN), stored one per byte in its low four bits; a
    /// storage type like [`DType::F16`]. Packed two per byte only in ONNX files.
    F4E2M1,
    /// 8-bit float E8M0: a power of two 2^(byte - 127), no sign, no zero; 0xff is NaN. A storage
    /// type like [`DType::F16`].
    F8E8M0,
    /// 4-bit signed integer, stored one per byte (an `i8` in -8..=7). Packed two per byte only
    /// in ONNX files.
    I4,
    /// 4-bit unsigned integer, stored one per byte (a `u8` in 0..=15).
    U4,
    /// 2-bit signed integer, stored one per byte (an `i8` in -2..=1). Packed four per byte
    /// only in ONNX files.
    I2,
    /// 2-bit unsigned integer, stored one per byte (a `u8` in 0..=3).
    U2,
}

/// The encoding of an 8-bit float type (and of the 4-bit FLOAT4E2M1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Float8 {
    /// Bits of the encoding: 8, or 4 for FLOAT4E2M1 (stored in the low bits of a byte).
    pub width: i32,
    /// Mantissa bits (3, 2 or 1; the exponent has the other `width` - 1 - `man`).
    pub man: i32,
    /// Exponent bias.
    pub bias: i32,
    /// How infinity and NaN are encoded.
    pub kind: Float8Kind,
    /// The largest finite value.
    pub max: f64,
}

/// How an 8-bit float encodes its special values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Float8Kind {
    /// No infinity; NaN is S.1111.111 (E4M3FN).
    Fn,
    /// No infinity, no negative zero; NaN is 0x80 (the FNUZ types).
    Fnuz,
    /// IEEE-like: exponent all ones is infinity (mantissa 0) or NaN (E5M2).
    Ieee,
    /// No infinity, no NaN (FLOAT4E2M1): NaN encodes as a zero of the opposite sign, as
    /// `ml_dtypes` (which the ONNX reference implementation uses) converts it.
    Finite,
}

impl Float8 {
    /// The sign bit.
    fn sign(self) -> u8 {
        1 << (self.width - 1)
    }

    /// The byte of NaN (the `Finite` kind has none: its positive zero).
    pub fn nan(self) -> u8 {
        match self.kind {
            Float8Kind::Fnuz => 0x80,
            Float8Kind::Finite => 0,
            _ => 0x7f,
        }
    }

    /// The value of byte `b` (bits above `width` ignored).
    pub fn decode(self, b: u8) -> f64 {
        let (man, bias) = (self.man, self.bias);
        let sign = self.sign();
        let b = b & (sign | (sign - 1));
        let e = ((b & (sign - 1)) >> man) as i32;
        let m = (b & ((1u8 << man) - 1)) as f64;
        let emax = (1 << (self.width - 1 - man)) - 1;
        match self.kind {
            Float8Kind::Fnuz if b == 0x80 => return f64::NAN,
            Float8Kind::Fn if b & 0x7f == 0x7f => return f64::NAN,
            Float8Kind::Ieee if e == emax => {
                return if m != 0.0 {
                    f64::NAN
                } else if b & 0x80 != 0 {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            }
            _ => {}
        }
        let v = if e == 0 {
            m * 2f64.powi(1 - bias - man)
        } else {
            (m + (1 << man) as f64) * 2f64.powi(e - bias - man)
        };
        if b & sign != 0 {
            -v
        } else {
            v
        }
    }

    /// The byte nearest `x` (ties to even), saturating: beyond the largest finite value (and
    /// infinity) is the largest finite value; NaN is NaN (for the `Finite` kind, a zero of the
    /// opposite sign).
    pub fn encode(self, x: f64) -> u8 {
        let s = if x.is_sign_negative() { self.sign() } else { 0 };
        if x.is_nan() {
            return match self.kind {
                Float8Kind::Finite => s ^ self.sign(),
                _ => self.nan(),
            };
        }
        let a = x.abs().min(self.max);
        // The exponent of the quantum at `a`: that of its binade, or of the subnormals.
        let exp = |v: f64| -> i32 {
            if v == 0.0 {
                i32::MIN
            } else {
                ((v.to_bits() >> 52) & 0x7ff) as i32 - 1023
            }
        };
        let q = (exp(a).max(1 - self.bias)) - self.man;
        let r = ((a * 2f64.powi(-q)).round_ties_even() * 2f64.powi(q)).min(self.max);
        if r == 0.0 {
            return if self.kind == Float8Kind::Fnuz { 0 } else { s };
        }
        let e = exp(r);
        let code = if e + self.bias <= 0 {
            (r * 2f64.powi(self.bias - 1 + self.man)) as u8
        } else {
            let m = (r * 2f64.powi(self.man - e)) as u8 - (1u8 << self.man);
            (((e + self.bias) as u8) << self.man) | m
        };
        s | code
    }
}

/// How a conversion to FLOAT8E8M0 rounds (Cast's `round_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum E8M0Round {
    /// Up (away from zero): any fraction goes to the next power of two (the default).
    Up,
    /// Down (towards zero): the fraction is dropped.
    Down,
    /// To the nearer power of two in the mantissa's sense (fraction >= 1/2 rounds up).
    Nearest,
}

/// The value of a FLOAT8E8M0 byte: 2^(b - 127), NaN for 0xff.
pub fn e8m0_decode(b: u8) -> f64 {
    if b == 0xff {
        f64::NAN
    } else {
        2f64.powi(b as i32 - 127)
    }
}

/// `x` (converted to f32 first) as FLOAT8E8M0, as ONNX's reference does it: the f32's biased
/// exponent, incremented when `round` says so; NaN and infinity are NaN (0xff); the sign is
/// ignored (negative values are undefined); zero and the f32 subnormals have exponent 0 (the
/// smallest value, 2^-127). With `saturate`, a value that would round past the largest power
/// (2^127) stays there; without, it becomes NaN.
pub fn e8m0_encode(x: f64, round: E8M0Round, saturate: bool) -> u8 {
    let bits = (x as f32).to_bits();
    let e = (bits >> 23) & 0xff;
    if e == 0xff {
        return 0xff;
    }
    let up = match round {
        E8M0Round::Down => false,
        E8M0Round::Up => bits & 0x7f_ffff != 0,
        // The guard bit (the fraction's first) and, for the f32 subnormals, a sticky bit below
        // it (ties there round down).
        E8M0Round::Nearest => bits & 0x40_0000 != 0 && (bits & 0x3f_ffff != 0 || e > 0),
    };
    let up = up && !(saturate && e == 0xfe);
    (e + up as u32) as u8
}

/// Every element type: the floats, the integers, Bool, the 16- and 8-bit storage floats, then
/// the types of fewer than 8 bits (so that the numeric and the integer types are sub-slices:
/// [`DType::numeric`], [`DType::ints`]; and those whose values occupy whole bytes too:
/// [`DType::byte_sized`]).
pub const ALL_DTYPES: [DType; 23] = [
    DType::F32,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::I8,
    DType::U8,
    DType::I16,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::Bool,
    DType::F16,
    DType::BF16,
    DType::F8E4M3FN,
    DType::F8E4M3FNUZ,
    DType::F8E5M2,
    DType::F8E5M2FNUZ,
    DType::F8E8M0,
    DType::F4E2M1,
    DType::I4,
    DType::U4,
    DType::I2,
    DType::U2,
];

impl DType {
    /// The numeric types: floats and integers (of 8 bits and more).
    pub const fn numeric() -> &'static [DType] {
        let all: &'static [DType] = &ALL_DTYPES;
        all.split_at(10).0
    }

    /// The integer types of 8 bits and more (not Bool).
    pub const fn ints() -> &'static [DType] {
        Self::numeric().split_at(2).1
    }

    /// The numeric types, Bool and the 16-bit floats: the types whose bits fill their storage
    /// and that `BitCast` reinterprets.
    pub const fn byte_sized() -> &'static [DType] {
        let all: &'static [DType] = &ALL_DTYPES;
        all.split_at(13).0
    }

    /// Bytes per element (the types of fewer than 8 bits: one, holding the value).
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => 1,
            DType::F8E8M0 | DType::F4E2M1 | DType::I4 | DType::U4 | DType::I2 | DType::U2 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// Bits of one element's value in ONNX's packed form: 4 or 2 for the sub-byte types, else
    /// 8 times the size.
    pub fn bits(self) -> usize {
        match self {
            DType::F4E2M1 | DType::I4 | DType::U4 => 4,
            DType::I2 | DType::U2 => 2,
            d => 8 * d.size(),
        }
    }

    /// True for the float types (F32, F64 and the narrow storage floats).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64) || self.is_narrow_float()
    }

    /// True for the storage floats of 16 bits and less: operators compute on f32 between casts,
    /// only `Cast` converts (`passes/infer.rs`).
    pub fn is_narrow_float(self) -> bool {
        self.is_half() || self.is_byte_float()
    }

    /// True for the storage floats of one byte: the float8 types, FLOAT8E8M0 and FLOAT4E2M1.
    pub fn is_byte_float(self) -> bool {
        self.minifloat().is_some() || self == DType::F8E8M0
    }

    /// The encoding of an 8-bit float type (the four with a sign, exponent and mantissa).
    pub fn float8(self) -> Option<Float8> {
        let (man, bias, kind, max) = match self {
            DType::F8E4M3FN => (3, 7, Float8Kind::Fn, 448.0),
            DType::F8E4M3FNUZ => (3, 8, Float8Kind::Fnuz, 240.0),
            DType::F8E5M2 => (2, 15, Float8Kind::Ieee, 57344.0),
            DType::F8E5M2FNUZ => (2, 16, Float8Kind::Fnuz, 57344.0),
            _ => return None,
        };
        Some(Float8 {
            width: 8,
            man,
            bias,
            kind,
            max,
        })
    }

    /// The encoding of a float8 type or of FLOAT4E2M1 (sign, exponent and mantissa).
    pub fn minifloat(self) -> Option<Float8> {
        match self {
            DType::F4E2M1 => Some(Float8 {
                width: 4,
                man: 1,
                bias: 1,
                kind: Float8Kind::Finite,
                max: 6.0,
            }),
            d => d.float8(),
        }
    }

    /// The value of byte `b` of a one-byte storage float ([`DType::is_byte_float`]).
    pub fn decode_byte(self, b: u8) -> Option<f64> {
        match self {
            DType::F8E8M0 => Some(e8m0_decode(b)),
            d => d.minifloat().map(|f| f.decode(b)),
        }
    }

    /// `x` as a one-byte storage float: the nearest value (ties to even), saturating (FLOAT8E8M0:
    /// [`E8M0Round::Nearest`], saturating, which gives every code's value back its code; `Cast`
    /// rounds up by default, [`e8m0_encode`]).
    pub fn encode_byte(self, x: f64) -> Option<u8> {
        match self {
            DType::F8E8M0 => Some(e8m0_encode(x, E8M0Round::Nearest, true)),
            d => d.minifloat().map(|f| f.encode(x)),
        }
    }

    /// True for the 16-bit storage floats, F16 and BF16.
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// True for the integer types (signed and unsigned; not Bool).
    pub fn is_int(self) -> bool {
        !self.is_float() && self != DType::Bool
    }

    /// True for the integers of fewer than 8 bits (INT4, UINT4, INT2, UINT2).
    pub fn is_sub_byte_int(self) -> bool {
        matches!(self, DType::I4 | DType::U4 | DType::I2 | DType::U2)
    }

    /// True for the unsigned integer types.
    pub fn is_unsigned(self) -> bool {
        matches!(
            self,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::U4 | DType::U2
        )
    }

    /// The smallest and largest value of an integer type (Bool: 0 and 1), as i128.
    pub fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            DType::I8 => (i8::MIN as i128, i8::MAX as i128),
            DType::U8 => (0, u8::MAX as i128),
            DType::I16 => (i16::MIN as i128, i16::MAX as i128),
            DType::U16 => (0, u16::MAX as i128),
            DType::I32 => (i32::MIN as i128, i32::MAX as i128),
            DType::U32 => (0, u32::MAX as i128),
            DType::I64 => (i64::MIN as i128, i64::MAX as i128),
            DType::U64 => (0, u64::MAX as i128),
            DType::I4 => (-8, 7),
            DType::U4 => (0, 15),
            DType::I2 => (-2, 1),
            DType::U2 => (0, 3),
            DType::Bool => (0, 1),
            _ => return None,
        })
    }

    /// `v` wrapped into an integer type's range (two's complement, as a C conversion does).
    pub fn wrap_int(self, v: i128) -> i128 {
        match self {
            DType::I8 => v as i8 as i128,
            DType::U8 => v as u8 as i128,
            DType::I16 => v as i16 as i128,
            DType::U16 => v as u16 as i128,
            DType::I32 => v as i32 as i128,
            DType::U32 => v as u32 as i128,
            DType::I64 => v as i64 as i128,
            DType::U64 => v as u64 as i128,
            DType::I4 => ((v & 0xf) ^ 0x8) - 0x8,
            DType::U4 => v & 0xf,
            DType::I2 => ((v & 0x3) ^ 0x2) - 0x2,
            DType::U2 => v & 0x3,
            DType::Bool => (v != 0) as i128,
            _ => v,
        }
    }

    /// The C type that stores one element.
    pub fn c_type(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F64 => "double",
            DType::I32 => "int32_t",
            DType::I64 => "int64_t",
            DType::Bool => "uint8_t",
            DType::I8 | DType::I4 | DType::I2 => "int8_t",
            DType::U8 | DType::U4 | DType::U2 => "uint8_t",
            DType::I16 => "int16_t",
            DType::U16 => "uint16_t",
            DType::U32 => "uint32_t",
            DType::U64 => "uint64_t",
            DType::F16 | DType::BF16 => "uint16_t",
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => "uint8_t",
            DType::F8E8M0 | DType::F4E2M1 => "uint8_t",
        }
    }

    /// The Rust type that stores one element (the 16-bit floats: their bits, `u16`; the 8-bit
    /// ones and FLOAT4E2M1: `u8`; the sub-byte integers one per byte: `i8` / `u8`).
    pub fn rust_type(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::I8 | DType::I4 | DType::I2 => "i8",
            DType::U8 | DType::U4 | DType::U2 => "u8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F16 | DType::BF16 => "u16",
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => "u8",
            DType::F8E8M0 | DType::F4E2M1 => "u8",
        }
    }

    /// The type's name in the text IR and the DSL: the Rust type, `f16` and `bf16` for the
    /// 16-bit floats, and so on for the others (`i4`, `f4e2m1`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E4M3FNUZ => "f8e4m3fnuz",
            DType::F8E5M2 => "f8e5m2",
            DType::F8E5M2FNUZ => "f8e5m2fnuz",
            DType::F8E8M0 => "f8e8m0",
            DType::F4E2M1 => "f4e2m1",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::I2 => "i2",
            DType::U2 => "u2",
            d => d.rust_type(),
        }
    }

    /// The ONNX `TensorProto.DataType` code.
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F64 => 11,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::F16 => 10,
            DType::BF16 => 16,
            DType::F8E4M3FN => 17,
            DType::F8E4M3FNUZ => 18,
            DType::F8E5M2 => 19,
            DType::F8E5M2FNUZ => 20,
            DType::U4 => 21,
            DType::I4 => 22,
            DType::F4E2M1 => 23,
            DType::F8E8M0 => 24,
            DType::U2 => 25,
            DType::I2 => 26,
        }
    }

    /// The type for an ONNX `TensorProto.DataType` code, if supported.
    pub fn from_onnx(code: i32) -> Option<DType> {
        ALL_DTYPES.into_iter().find(|d| d.onnx_code() == code)
    }

    /// The ONNX name of a `TensorProto.DataType` code, for messages.
    pub fn onnx_name(code: i32) -> &'static str {
        const NAMES: [&str; 27] = [
            "UNDEFINED",
            "FLOAT",
            "UINT8",
            "INT8",
            "UINT16",
            "INT16",
            "INT32",
            "INT64",
            "STRING",
            "BOOL",
            "FLOAT16",
            "DOUBLE",
            "UINT32",
            "UINT64",
            "COMPLEX64",
            "COMPLEX128",
            "BFLOAT16",
            "FLOAT8E4M3FN",
            "FLOAT8E4M3FNUZ",
            "FLOAT8E5M2",
            "FLOAT8E5M2FNUZ",
            "UINT4",
            "INT4",
            "FLOAT4E2M1",
            "FLOAT8E8M0",
            "UINT2",
            "INT2",
        ];
        NAMES.get(code as usize).copied().unwrap_or("UNKNOWN")
    }

    /// Parses the text-IR / DSL name (`f32`, `i64`, ...).
    pub fn parse(s: &str) -> Option<DType> {
        ALL_DTYPES.into_iter().find(|d| d.name() == s)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A static tensor type: element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first; empty for a scalar.
    pub shape: Vec<usize>,
}

impl TensorType {
    /// A tensor type.
    pub fn new(dtype: DType, shape: impl Into<Vec<usize>>) -> Self {
        TensorType {
            dtype,
            shape: shape.into(),
        }
    }

    /// Number of elements (saturating at `usize::MAX`: every type in a graph that passed the
    /// size check of [`Limits`] is far below it).
    pub fn numel(&self) -> usize {
        self.checked_numel().unwrap_or(usize::MAX)
    }

    /// Size in bytes (saturating, like [`TensorType::numel`]).
    pub fn bytes(&self) -> usize {
        self.checked_bytes().unwrap_or(usize::MAX)
    }

    /// Number of elements, `None` when it overflows `usize`.
    pub fn checked_numel(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// Size in bytes, `None` when it overflows `usize`.
    pub fn checked_bytes(&self) -> Option<usize> {
        self.checked_numel()?.checked_mul(self.dtype.size())
    }

    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        strides(&self.shape)
    }
}

/// The largest tensor and arena a compiled model may have, in bytes: what fits the target's
/// address space, and a configurable ceiling below it. Every value of a graph is checked against
/// it at import and after every operator's type inference, and the arena after planning, so the
/// generated code never meets a size it cannot address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Largest size in bytes of one tensor, and of the activation arena.
    pub max_bytes: usize,
}

impl Limits {
    /// The default ceiling: 64 GiB per tensor and for the arena.
    pub const DEFAULT_CEILING: u64 = 1 << 36;

    /// The limits for a target whose pointers are `pointer_bits` wide (objects are at most
    /// `isize::MAX` bytes there), with `ceiling` bytes as the configured maximum.
    pub fn for_target(pointer_bits: u32, ceiling: u64) -> Limits {
        let address_space = if pointer_bits >= 64 {
            i64::MAX as u64
        } else {
            (1u64 << pointer_bits.saturating_sub(1).max(1)) - 1
        };
        let max = ceiling.min(address_space).min(isize::MAX as u64);
        Limits {
            max_bytes: max as usize,
        }
    }

    /// The limits of the target being built: Cargo's `CARGO_CFG_TARGET_POINTER_WIDTH` in a build
    /// script, else this host's.
    pub fn for_build_target(ceiling: u64) -> Limits {
        let bits = std::env::var("CARGO_CFG_TARGET_POINTER_WIDTH")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(usize::BITS);
        Limits::for_target(bits, ceiling)
    }

    /// The most dimensions a tensor may have (NumPy's limit). Loops, index arithmetic and
    /// generated code grow with the rank; no model needs more, and a fuzzed one with a rank of
    /// 10^5 (all ones) made the index unravelling of its kernels hundreds of megabytes of C.
    pub const MAX_RANK: usize = 64;

    /// `Err` with a message when `ty` is larger than the limit (or its size overflows), or has
    /// more than [`Limits::MAX_RANK`] dimensions.
    pub fn check(&self, ty: &TensorType) -> Result<(), String> {
        if ty.rank() > Self::MAX_RANK {
            return Err(format!(
                "a {} tensor of rank {}, over the limit of {} dimensions",
                ty.dtype,
                ty.rank(),
                Self::MAX_RANK
            ));
        }
        // An empty dimension makes the tensor empty, but loops and reductions still multiply
        // the others: their product (each 0 counted as 1) is bounded as well.
        let extents = ty
            .shape
            .iter()
            .try_fold(ty.dtype.size(), |n, &d| n.checked_mul(d.max(1)));
        if ty.numel() == 0 && extents.is_none_or(|b| b > self.max_bytes) {
            return Err(format!(
                "{ty} is empty, but its other dimensions multiply past the limit of {} bytes",
                self.max_bytes
            ));
        }
        match ty.checked_bytes() {
            Some(b) if b <= self.max_bytes => Ok(()),
            Some(b) => Err(format!(
                "{ty} is {b} bytes, over the limit of {} bytes (raise it with Build::max_tensor_bytes / --max-tensor-bytes if the target can hold it)",
                self.max_bytes
            )),
            None => Err(format!(
                "the size of {ty} overflows the address space (the limit is {} bytes)",
                self.max_bytes
            )),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::for_target(usize::BITS, Limits::DEFAULT_CEILING)
    }
}

/// Row-major strides in elements of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_lists_and_codes() {
        assert!(DType::numeric().iter().all(|d| *d != DType::Bool));
        assert_eq!(DType::numeric().len(), 10);
        assert!(DType::ints().iter().all(|d| d.is_int()));
        assert_eq!(DType::ints().len(), 8);
        for d in ALL_DTYPES {
            assert_eq!(DType::from_onnx(d.onnx_code()), Some(d));
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::from_onnx(10), Some(DType::F16));
        assert_eq!(DType::from_onnx(8), None, "STRING is not an element type");
        assert_eq!(DType::U8.wrap_int(300), 44);
        assert_eq!(DType::I8.wrap_int(200), -56);
        assert_eq!(DType::U64.wrap_int(-1), u64::MAX as i128);
        assert!(DType::byte_sized().iter().all(|d| d.bits() == 8 * d.size()));
        assert!(ALL_DTYPES
            .iter()
            .filter(|d| !DType::byte_sized().contains(d))
            .all(|d| d.size() == 1 && (d.is_byte_float() || d.is_sub_byte_int())));
    }

    /// The sub-byte integers wrap as two's complement of their width: every value of their
    /// range is itself, and each value outside lands on the one congruent to it.
    #[test]
    fn sub_byte_ints_wrap() {
        for d in [DType::I4, DType::U4, DType::I2, DType::U2] {
            let (lo, hi) = d.int_range().unwrap();
            let m = 1i128 << d.bits();
            assert_eq!(hi - lo + 1, m, "{d}");
            assert!(d.is_int() && d.is_sub_byte_int() && !d.is_float());
            assert_eq!(d.is_unsigned(), lo == 0);
            for v in -300i128..300 {
                let w = d.wrap_int(v);
                assert!((lo..=hi).contains(&w), "{d} {v} -> {w}");
                assert_eq!((w - v).rem_euclid(m), 0, "{d} {v} -> {w}");
            }
        }
        assert_eq!(DType::I4.wrap_int(8), -8);
        assert_eq!(DType::I4.wrap_int(-9), 7);
        assert_eq!(DType::U4.wrap_int(-1), 15);
        assert_eq!(DType::I2.wrap_int(2), -2);
        assert_eq!(DType::U2.wrap_int(5), 1);
    }

    /// Every FLOAT4E2M1 code decodes and encodes back to itself; between the codes values round
    /// to the nearer, ties to the even code; beyond 6 (and infinity) saturates; NaN becomes a zero
    /// of the opposite sign (as `ml_dtypes` converts it: the values below are its results).
    #[test]
    fn float4e2m1_round_trip() {
        let d = DType::F4E2M1;
        let values = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        for b in 0..16u8 {
            let v = d.decode_byte(b).unwrap();
            let mag = values[(b & 7) as usize];
            assert_eq!(v, if b & 8 != 0 { -mag } else { mag });
            assert_eq!(v.is_sign_negative(), b & 8 != 0, "-0 is 0x8");
            assert_eq!(d.encode_byte(v), Some(b), "code {b:#x} = {v}");
        }
        let x = [
            0.24,
            0.25,
            0.26,
            0.75,
            1.25,
            1.75,
            2.5,
            3.5,
            5.0,
            5.01,
            7.0,
            -0.0,
            -0.1,
            -2.6,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let want = [0, 0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 8, 8, 13, 7, 15];
        for (x, w) in x.into_iter().zip(want) {
            assert_eq!(d.encode_byte(x), Some(w), "{x}");
        }
        assert_eq!(d.encode_byte(f64::NAN), Some(8));
        assert_eq!(d.encode_byte(-f64::NAN), Some(0));
    }

    /// Every FLOAT8E8M0 byte is a power of two (0xff NaN) and encodes back to itself in every
    /// rounding mode (but 2^-127 rounding up); between powers the modes differ as ONNX's reference (`to_float8e8m0`)
    /// has them (the bytes below are its results).
    #[test]
    fn float8e8m0_rounding() {
        use E8M0Round::{Down, Nearest, Up};
        for b in 0..=255u8 {
            let v = e8m0_decode(b);
            if b == 0xff {
                assert!(v.is_nan());
            } else {
                assert_eq!(v, 2f64.powi(b as i32 - 127));
            }
            for round in [Up, Down, Nearest] {
                for saturate in [true, false] {
                    // 2^-127 is an f32 subnormal with a fraction: rounding up gives 2^-126.
                    let want = if b == 0 && round == Up { 1 } else { b };
                    assert_eq!(e8m0_encode(v, round, saturate), want, "{b} {round:?}");
                }
            }
        }
        let x = [
            0.0,
            1.0,
            1.5,
            1.75,
            0.75,
            3.0,
            2f64.powi(-127),
            2f64.powi(-128),
            2f64.powi(-126) * 0.75,
            3e38,
            2f64.powi(127),
            f64::INFINITY,
            f64::NAN,
            -4.0,
            1e-45,
        ];
        let want: [(E8M0Round, bool, [u8; 15]); 6] = [
            (
                Up,
                true,
                [
                    0, 127, 128, 128, 127, 129, 1, 1, 1, 254, 254, 255, 255, 129, 1,
                ],
            ),
            (
                Down,
                true,
                [
                    0, 127, 127, 127, 126, 128, 0, 0, 0, 254, 254, 255, 255, 129, 0,
                ],
            ),
            (
                Nearest,
                true,
                [
                    0, 127, 128, 128, 127, 129, 0, 0, 1, 254, 254, 255, 255, 129, 0,
                ],
            ),
            (
                Up,
                false,
                [
                    0, 127, 128, 128, 127, 129, 1, 1, 1, 255, 254, 255, 255, 129, 1,
                ],
            ),
            (
                Down,
                false,
                [
                    0, 127, 127, 127, 126, 128, 0, 0, 0, 254, 254, 255, 255, 129, 0,
                ],
            ),
            (
                Nearest,
                false,
                [
                    0, 127, 128, 128, 127, 129, 0, 0, 1, 255, 254, 255, 255, 129, 0,
                ],
            ),
        ];
        for (round, saturate, bytes) in want {
            for (&x, &b) in x.iter().zip(&bytes) {
                assert_eq!(
                    e8m0_encode(x, round, saturate),
                    b,
                    "{x} {round:?} {saturate}"
                );
            }
        }
        // The plain conversion rounds to nearest: every code comes back.
        for b in 0..=255u8 {
            let d = DType::F8E8M0;
            assert_eq!(d.encode_byte(d.decode_byte(b).unwrap()), Some(b));
        }
        assert_eq!(DType::F8E8M0.encode_byte(1.4), Some(127));
        assert_eq!(DType::F8E8M0.encode_byte(1.5), Some(128));
    }

    /// Every byte of every 8-bit float decodes and encodes back to itself (NaN to NaN); values
    /// between two neighbours round to the nearer, ties to the even one; beyond the largest
    /// finite value saturates.
    #[test]
    fn float8_round_trip() {
        for d in [
            DType::F8E4M3FN,
            DType::F8E4M3FNUZ,
            DType::F8E5M2,
            DType::F8E5M2FNUZ,
        ] {
            let f = d.float8().unwrap();
            for b in 0..=255u8 {
                let v = f.decode(b);
                if v.is_nan() {
                    assert!(f.decode(f.encode(v)).is_nan());
                } else if v.is_infinite() {
                    assert_eq!(f.decode(f.encode(v)), v.signum() * f.max, "{d} saturates");
                } else if !(v == 0.0 && b == 0x80) {
                    assert_eq!(f.encode(v), b, "{d} byte {b:#x} = {v}");
                }
            }
            assert_eq!(f.decode(f.encode(1e9)), f.max);
            assert_eq!(f.decode(f.encode(-1e9)), -f.max);
        }
        let e4 = DType::F8E4M3FN.float8().unwrap();
        assert_eq!(e4.decode(e4.encode(1.0 + 1.0 / 16.0)), 1.0, "a tie to even");
        assert_eq!(
            e4.decode(e4.encode(1.0 + 3.0 / 16.0)),
            1.25,
            "a tie to even, up"
        );
        assert_eq!(e4.decode(0x01), 2f64.powi(-9), "the smallest subnormal");
    }
}
