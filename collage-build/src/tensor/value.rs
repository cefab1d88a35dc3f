//! Host tensors: constants, weights, test data.
use std::fmt;

use super::types::{DType, TensorType};

/// A dense row-major tensor with its bytes in little-endian order.
#[derive(Clone, PartialEq)]
pub struct Tensor {
    /// Type and shape.
    pub ty: TensorType,
    /// `ty.bytes()` bytes, little-endian.
    pub data: Vec<u8>,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({}", self.ty)?;
        if self.ty.numel() <= 16 {
            write!(f, " {:?}", self.to_f64())?;
        }
        f.write_str(")")
    }
}

impl Tensor {
    /// A zero-filled tensor.
    pub fn zeros(ty: TensorType) -> Self {
        let n = ty.bytes();
        Tensor {
            ty,
            data: vec![0; n],
        }
    }

    /// A tensor from raw little-endian bytes; `None` if the length does not match.
    pub fn from_bytes(ty: TensorType, data: Vec<u8>) -> Option<Self> {
        (data.len() == ty.bytes()).then_some(Tensor { ty, data })
    }

    /// An f32 tensor.
    pub fn from_f32(shape: &[usize], v: &[f32]) -> Self {
        Tensor {
            ty: TensorType::new(DType::F32, shape),
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// An i64 tensor.
    pub fn from_i64(shape: &[usize], v: &[i64]) -> Self {
        Tensor {
            ty: TensorType::new(DType::I64, shape),
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// A tensor of `dtype` from f64 values (converted as a C cast would).
    pub fn from_f64_as(dtype: DType, shape: &[usize], v: &[f64]) -> Self {
        let mut t = Tensor::zeros(TensorType::new(dtype, shape));
        for (i, &x) in v.iter().enumerate() {
            t.set_f64(i, x);
        }
        t
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.ty.numel()
    }

    /// Element `i` as f64 (integers and bools converted).
    pub fn get_f64(&self, i: usize) -> f64 {
        let d = &self.data;
        match self.ty.dtype {
            DType::F32 => f32::from_le_bytes(d[i * 4..i * 4 + 4].try_into().unwrap()) as f64,
            DType::F64 => f64::from_le_bytes(d[i * 8..i * 8 + 8].try_into().unwrap()),
            DType::F16 => half::f16::from_bits(self.bits16(i)).to_f64(),
            DType::BF16 => half::bf16::from_bits(self.bits16(i)).to_f64(),
            t => match t.decode_byte(d[i]) {
                Some(v) => v,
                None => self.get_int(i) as f64,
            },
        }
    }

    fn bits16(&self, i: usize) -> u16 {
        u16::from_le_bytes([self.data[2 * i], self.data[2 * i + 1]])
    }

    /// Element `i` of an integer or bool tensor, exactly (floats truncated, saturating).
    pub fn get_int(&self, i: usize) -> i128 {
        let n = self.ty.dtype.size();
        let b = &self.data[i * n..i * n + n];
        match self.ty.dtype {
            d if d.is_float() => self.get_f64(i) as i128,
            DType::Bool => (b[0] != 0) as i128,
            DType::I8 | DType::I4 | DType::I2 => b[0] as i8 as i128,
            DType::U8 | DType::U4 | DType::U2 => b[0] as i128,
            DType::I16 => i16::from_le_bytes(b.try_into().unwrap()) as i128,
            DType::U16 => u16::from_le_bytes(b.try_into().unwrap()) as i128,
            DType::I32 => i32::from_le_bytes(b.try_into().unwrap()) as i128,
            DType::U32 => u32::from_le_bytes(b.try_into().unwrap()) as i128,
            DType::I64 => i64::from_le_bytes(b.try_into().unwrap()) as i128,
            DType::U64 => u64::from_le_bytes(b.try_into().unwrap()) as i128,
            _ => unreachable!("floats handled above"),
        }
    }

    /// Element `i` as i64 (floats truncated; unsigned 64-bit values above `i64::MAX` wrap).
    pub fn get_i64(&self, i: usize) -> i64 {
        self.get_int(i) as i64
    }

    /// Sets element `i` of an integer or bool tensor from an i128, wrapped to the type as a C
    /// conversion would (floats: converted).
    pub fn set_int(&mut self, i: usize, x: i128) {
        if self.ty.dtype.is_narrow_float() {
            return self.set_f64(i, x as f64);
        }
        let n = self.ty.dtype.size();
        let w = self.ty.dtype.wrap_int(x);
        let d = &mut self.data[i * n..i * n + n];
        match self.ty.dtype {
            DType::F32 => d.copy_from_slice(&(x as f32).to_le_bytes()),
            DType::F64 => d.copy_from_slice(&(x as f64).to_le_bytes()),
            DType::Bool => d[0] = (x != 0) as u8,
            // Little-endian two's complement: the low bytes are the wrapped value (a sub-byte
            // integer's byte holds its value, sign-extended).
            _ => d.copy_from_slice(&w.to_le_bytes()[..n]),
        }
    }

    /// Sets element `i` from an f64 (converted as a C cast would; out-of-range integers
    /// saturate).
    pub fn set_f64(&mut self, i: usize, x: f64) {
        let d = &mut self.data;
        match self.ty.dtype {
            DType::F32 => d[i * 4..i * 4 + 4].copy_from_slice(&(x as f32).to_le_bytes()),
            DType::F64 => d[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes()),
            DType::F16 => {
                d[i * 2..i * 2 + 2].copy_from_slice(&half::f16::from_f64(x).to_le_bytes())
            }
            DType::BF16 => {
                d[i * 2..i * 2 + 2].copy_from_slice(&half::bf16::from_f64(x).to_le_bytes())
            }
            DType::Bool => d[i] = (x != 0.0) as u8,
            t if t.is_byte_float() => d[i] = t.encode_byte(x).expect("a one-byte float"),
            t => {
                let (lo, hi) = t.int_range().expect("an integer type");
                self.set_int(i, (x as i128).clamp(lo, hi));
            }
        }
    }

    /// Sets element `i` from an i64 (wrapped to the type).
    pub fn set_i64(&mut self, i: usize, x: i64) {
        self.set_int(i, x as i128)
    }

    /// All elements as f64.
    pub fn to_f64(&self) -> Vec<f64> {
        (0..self.numel()).map(|i| self.get_f64(i)).collect()
    }

    /// All elements as i64.
    pub fn to_i64(&self) -> Vec<i64> {
        (0..self.numel()).map(|i| self.get_i64(i)).collect()
    }

    /// All elements as f32 (converting other types).
    pub fn to_f32(&self) -> Vec<f32> {
        (0..self.numel()).map(|i| self.get_f64(i) as f32).collect()
    }

    /// The same data with another shape of equal element count.
    pub fn reshaped(mut self, shape: &[usize]) -> Self {
        assert_eq!(shape.iter().product::<usize>(), self.numel());
        self.ty.shape = shape.to_vec();
        self
    }
}

/// The largest difference between `got` and `want`, and whether it is within the tolerance
/// (float: |got - want| <= 1e-4 + rtol |want|, NaN equals NaN, with rtol 1e-3, and two units in
/// the last place for the 16-bit floats: 2^-10 for f16, 2^-7 for bf16, since a result rounded
/// once from f32 may differ by one from a reference rounded after every step; integers and
/// bools exact).
pub fn compare(got: &Tensor, want: &Tensor) -> (bool, f64) {
    if got.ty.shape != want.ty.shape || got.ty.dtype != want.ty.dtype {
        return (false, f64::INFINITY);
    }
    let rtol = match want.ty.dtype {
        DType::F16 => 1.0 / 1024.0,
        DType::BF16 => 1.0 / 128.0,
        _ => 1e-3,
    };
    let mut ok = true;
    let mut max_err = 0.0f64;
    for i in 0..got.numel() {
        if want.ty.dtype.is_float() {
            let (g, w) = (got.get_f64(i), want.get_f64(i));
            if g.is_nan() && w.is_nan() || g == w {
                continue;
            }
            let err = (g - w).abs();
            max_err = max_err.max(if err.is_nan() { f64::INFINITY } else { err });
            if err.is_nan() || err > 1e-4 + rtol * w.abs() {
                ok = false;
            }
        } else if got.get_int(i) != want.get_int(i) {
            ok = false;
            max_err = max_err.max((got.get_int(i) - want.get_int(i)).unsigned_abs() as f64);
        }
    }
    (ok, max_err)
}

/// Deterministic data in [-1, 1) for a type (integers in [0, 4)).
pub fn pseudo_random(ty: &TensorType) -> Tensor {
    let mut t = Tensor::zeros(ty.clone());
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..t.numel() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let u = (s >> 11) as f64 / (1u64 << 53) as f64;
        match ty.dtype {
            d if d.is_float() => t.set_f64(i, u * 2.0 - 1.0),
            _ => t.set_i64(i, (u * 4.0) as i64),
        }
    }
    t
}
