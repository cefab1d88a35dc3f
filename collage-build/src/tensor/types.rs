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
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::Bool => 1,
        }
    }

    /// True for F32 and F64.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// True for I32 and I64.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// The C type that stores one element.
    pub fn c_type(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F64 => "double",
            DType::I32 => "int32_t",
            DType::I64 => "int64_t",
            DType::Bool => "uint8_t",
        }
    }

    /// The Rust type that stores one element.
    pub fn rust_type(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }

    /// The ONNX `TensorProto.DataType` code.
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F64 => 11,
        }
    }

    /// The type for an ONNX `TensorProto.DataType` code, if supported.
    pub fn from_onnx(code: i32) -> Option<DType> {
        Some(match code {
            1 => DType::F32,
            6 => DType::I32,
            7 => DType::I64,
            9 => DType::Bool,
            11 => DType::F64,
            _ => return None,
        })
    }

    /// The ONNX name of a `TensorProto.DataType` code, for messages.
    pub fn onnx_name(code: i32) -> &'static str {
        const NAMES: [&str; 24] = [
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
        ];
        NAMES.get(code as usize).copied().unwrap_or("UNKNOWN")
    }

    /// Parses the text-IR / DSL name (`f32`, `i64`, ...).
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "f32" => DType::F32,
            "f64" => DType::F64,
            "i32" => DType::I32,
            "i64" => DType::I64,
            "bool" => DType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rust_type())
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

    /// `Err` with a message when `ty` is larger than the limit (or its size overflows).
    pub fn check(&self, ty: &TensorType) -> Result<(), String> {
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
