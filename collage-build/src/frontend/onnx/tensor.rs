//! Conversion between ONNX `TensorProto` and [`Tensor`], including external data.
use std::path::Path;

use super::proto::{tensor_proto::DataLocation, TensorProto};
use crate::ir::{DType, Tensor, TensorType};

/// Decodes a `TensorProto`; `base` is the model's folder, for external data.
pub fn tensor_from_proto(t: &TensorProto, base: &Path) -> Result<Tensor, String> {
    let dtype = DType::from_onnx(t.data_type).ok_or_else(|| {
        format!(
            "element type {} is not supported",
            DType::onnx_name(t.data_type)
        )
    })?;
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        if d < 0 {
            return Err(format!("negative dimension {d}"));
        }
        shape.push(usize::try_from(d).map_err(|_| format!("dimension {d} is too large"))?);
    }
    let ty = TensorType::new(dtype, shape);
    // Sizes are checked before anything is read or allocated (the graph's limit is applied by
    // shape inference; this only keeps the arithmetic in range).
    let limits = crate::ir::Limits::for_target(usize::BITS, u64::MAX);
    limits.check(&ty)?;
    let n = ty.numel();
    // The types of fewer than 8 bits are packed in ONNX (two or four to a byte, the first in
    // the low bits); here they are one to a byte.
    let per_byte = 8 / dtype.bits().min(8);
    let expect = if per_byte > 1 {
        n.div_ceil(per_byte)
    } else {
        ty.bytes()
    };
    let raw: Vec<u8> = if t.data_location == DataLocation::External as i32 {
        let get = |k: &str| {
            t.external_data
                .iter()
                .find(|e| e.key == k)
                .map(|e| e.value.clone())
        };
        let loc = get("location").ok_or("external data without a location")?;
        if Path::new(&loc).is_absolute() || loc.contains("..") {
            return Err(format!(
                "external data location `{loc}` must be a relative path inside the model's folder"
            ));
        }
        let offset: u64 = get("offset")
            .map(|s| {
                s.parse()
                    .map_err(|_| format!("bad external data offset `{s}`"))
            })
            .transpose()?
            .unwrap_or(0);
        let len: u64 = get("length")
            .map(|s| {
                s.parse()
                    .map_err(|_| format!("bad external data length `{s}`"))
            })
            .transpose()?
            .unwrap_or(expect as u64);
        if len != expect as u64 {
            return Err(format!(
                "external data length {len} does not match {ty} ({expect} bytes)"
            ));
        }
        let path = base.join(&loc);
        use std::io::{Read, Seek, SeekFrom};
        let io = |e: std::io::Error| format!("external data {}: {e}", path.display());
        let mut file = std::fs::File::open(&path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        if offset.checked_add(len).is_none_or(|end| end > file_len) {
            return Err(format!(
                "external data {} ({file_len} bytes) is shorter than offset {offset} + length {len}",
                path.display()
            ));
        }
        // Only this tensor's range is read (one file often holds every weight of the model).
        let mut data = vec![0u8; expect];
        file.seek(SeekFrom::Start(offset)).map_err(io)?;
        file.read_exact(&mut data).map_err(io)?;
        data
    } else if !t.raw_data.is_empty() {
        t.raw_data.clone()
    } else if per_byte > 1 {
        // int32_data holds the packed bytes, one per value.
        if t.int32_data.len() != expect {
            return Err(format!(
                "{} values for {ty} ({expect} packed bytes)",
                t.int32_data.len()
            ));
        }
        t.int32_data.iter().map(|&v| v as u8).collect()
    } else {
        // The typed fields of `TensorProto`: floats, doubles, int64s; uint64_data for UINT32
        // and UINT64; int32_data for the other integer types and BOOL.
        let got = match dtype {
            DType::F32 => t.float_data.len(),
            DType::F64 => t.double_data.len(),
            DType::I64 => t.int64_data.len(),
            DType::U32 | DType::U64 => t.uint64_data.len(),
            DType::I32
            | DType::Bool
            | DType::I8
            | DType::U8
            | DType::I16
            | DType::U16
            | DType::F16
            | DType::BF16
            | DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F8E8M0 => t.int32_data.len(),
            DType::F4E2M1 | DType::I4 | DType::U4 | DType::I2 | DType::U2 => {
                unreachable!("packed types are read above")
            }
        };
        if got != n {
            return Err(format!("{} values for shape {:?}", got, ty.shape));
        }
        let mut out = Tensor::zeros(ty.clone());
        match dtype {
            DType::F32 => {
                t.float_data
                    .iter()
                    .enumerate()
                    .take(n)
                    .for_each(|(i, v)| out.set_f64(i, *v as f64));
            }
            DType::F64 => {
                t.double_data
                    .iter()
                    .enumerate()
                    .take(n)
                    .for_each(|(i, v)| out.set_f64(i, *v));
            }
            DType::I64 => {
                t.int64_data
                    .iter()
                    .enumerate()
                    .take(n)
                    .for_each(|(i, v)| out.set_i64(i, *v));
            }
            DType::U32 | DType::U64 => {
                t.uint64_data
                    .iter()
                    .enumerate()
                    .take(n)
                    .for_each(|(i, v)| out.set_int(i, *v as i128));
            }
            // The narrow floats' int32_data hold their bits.
            DType::F16 | DType::BF16 => {
                for (i, v) in t.int32_data.iter().enumerate().take(n) {
                    out.data[2 * i..2 * i + 2].copy_from_slice(&(*v as u16).to_le_bytes());
                }
            }
            DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F8E8M0 => {
                for (i, v) in t.int32_data.iter().enumerate().take(n) {
                    out.data[i] = *v as u8;
                }
            }
            DType::I32
            | DType::Bool
            | DType::I8
            | DType::U8
            | DType::I16
            | DType::U16
            | DType::F4E2M1
            | DType::I4
            | DType::U4
            | DType::I2
            | DType::U2 => {
                t.int32_data
                    .iter()
                    .enumerate()
                    .take(n)
                    .for_each(|(i, v)| out.set_int(i, *v as i128));
            }
        }
        return Ok(out);
    };
    if per_byte > 1 {
        if raw.len() != expect {
            return Err(format!(
                "data size {} does not match {ty} ({expect} packed bytes)",
                raw.len()
            ));
        }
        return Ok(unpack(ty, &raw));
    }
    Tensor::from_bytes(ty.clone(), raw)
        .ok_or_else(|| format!("data size does not match {ty} ({expect} bytes)"))
}

/// A tensor of a type of fewer than 8 bits from its packed bytes (element `i` in bits
/// `(i % k) * bits` up of byte `i / k`, `k` elements to a byte): the signed integers
/// sign-extended, FLOAT4E2M1 as its code.
fn unpack(ty: TensorType, packed: &[u8]) -> Tensor {
    let bits = ty.dtype.bits();
    let per_byte = 8 / bits;
    let mask = (1u8 << bits) - 1;
    let mut out = Tensor::zeros(ty);
    for (i, b) in out.data.iter_mut().enumerate() {
        let v = (packed[i / per_byte] >> ((i % per_byte) * bits)) & mask;
        *b = match out.ty.dtype {
            DType::I4 | DType::I2 => out.ty.dtype.wrap_int(v as i128) as i8 as u8,
            _ => v,
        };
    }
    out
}

/// The packed bytes of a tensor of a type of fewer than 8 bits (the inverse of [`unpack`]; the
/// unused bits of the last byte are zero).
fn pack(t: &Tensor) -> Vec<u8> {
    let bits = t.ty.dtype.bits();
    let per_byte = 8 / bits;
    let mask = (1u8 << bits) - 1;
    let mut out = vec![0u8; t.data.len().div_ceil(per_byte)];
    for (i, &b) in t.data.iter().enumerate() {
        out[i / per_byte] |= (b & mask) << ((i % per_byte) * bits);
    }
    out
}

/// Encodes a tensor as a `TensorProto` with raw data (packed for the types of fewer than 8
/// bits).
pub fn tensor_to_proto(t: &Tensor, name: &str) -> TensorProto {
    TensorProto {
        name: name.to_string(),
        data_type: t.ty.dtype.onnx_code(),
        dims: t.ty.shape.iter().map(|&d| d as i64).collect(),
        raw_data: if t.ty.dtype.bits() < 8 {
            pack(t)
        } else {
            t.data.clone()
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The types of fewer than 8 bits: ONNX packs them (the first element in the low bits, the
    /// last byte padded) in raw_data and, one packed byte per value, in int32_data; decoding
    /// unpacks them one to a byte (sign-extended), encoding packs them again.
    #[test]
    fn sub_byte_types_are_packed_in_onnx() {
        let base = Path::new(".");
        let proto = |d: DType, n: i64, raw: Vec<u8>, ints: Vec<i32>| TensorProto {
            data_type: d.onnx_code(),
            dims: vec![n],
            raw_data: raw,
            int32_data: ints,
            ..Default::default()
        };
        // INT4 7, -8, -1 (odd: the high half of the last byte is padding).
        let t = tensor_from_proto(&proto(DType::I4, 3, vec![0x87, 0x0f], vec![]), base).unwrap();
        assert_eq!(t.to_i64(), [7, -8, -1]);
        assert_eq!(t.data, [7, 0xf8, 0xff]);
        assert_eq!(tensor_to_proto(&t, "t").raw_data, [0x87, 0x0f]);
        let t = tensor_from_proto(&proto(DType::U4, 3, vec![], vec![0x87, 0x0f]), base).unwrap();
        assert_eq!(t.to_i64(), [7, 8, 15]);
        // UINT2 / INT2: four to a byte.
        let t = tensor_from_proto(&proto(DType::U2, 5, vec![0b1110_0100, 0b11], vec![]), base);
        let t = t.unwrap();
        assert_eq!(t.to_i64(), [0, 1, 2, 3, 3]);
        assert_eq!(tensor_to_proto(&t, "t").raw_data, [0b1110_0100, 0b11]);
        let t = tensor_from_proto(&proto(DType::I2, 4, vec![0b1110_0100], vec![]), base).unwrap();
        assert_eq!(t.to_i64(), [0, 1, -2, -1]);
        // FLOAT4E2M1: the codes 0x1 (0.5) and 0xf (-6).
        let t = tensor_from_proto(&proto(DType::F4E2M1, 2, vec![0xf1], vec![]), base).unwrap();
        assert_eq!(t.to_f64(), [0.5, -6.0]);
        assert_eq!(tensor_to_proto(&t, "t").raw_data, [0xf1]);
        // A packed length that does not match the shape is an error.
        for (raw, ints) in [(vec![1, 2, 3], vec![]), (vec![], vec![1])] {
            let e = tensor_from_proto(&proto(DType::I4, 3, raw, ints), base).unwrap_err();
            assert!(e.contains("packed bytes"), "{e}");
        }
        // FLOAT8E8M0 is one byte per value.
        let t = tensor_from_proto(&proto(DType::F8E8M0, 2, vec![], vec![127, 255]), base);
        let t = t.unwrap().to_f64();
        assert!(t[0] == 1.0 && t[1].is_nan());
    }
}
