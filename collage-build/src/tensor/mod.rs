//! Tensor values and their types: element types, static shapes, constant tensors and the size
//! limits of a build. The base every other room builds on (tensor expressions, operators, the
//! graph IR); it depends on nothing else in the crate.
mod types;
mod value;

pub use types::{
    e8m0_decode, e8m0_encode, strides, DType, E8M0Round, Float8, Float8Kind, Limits, TensorType,
    ALL_DTYPES,
};
pub use value::{compare, pseudo_random, Tensor};
