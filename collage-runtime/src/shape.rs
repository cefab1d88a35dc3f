//! Checking the run-time shapes of a model served over a range of one dimension.

use core::fmt;

/// Why a model served over a range of a dimension refused a run: nothing was computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeError {
    /// The dimension's size, as input `input` gives it, is outside the range compiled for.
    OutOfRange {
        /// The input that gives the size.
        input: &'static str,
        /// The dimension's name.
        dim: &'static str,
        /// The size given.
        got: usize,
        /// The smallest size served.
        lo: usize,
        /// The largest size served.
        hi: usize,
    },
    /// Dimension `axis` of input `input` is not the size the model needs there (a static
    /// dimension, or what the range's size makes of it).
    Dim {
        /// The input.
        input: &'static str,
        /// The axis.
        axis: usize,
        /// Its size as given.
        got: usize,
        /// Its size as the model needs it.
        expected: usize,
    },
    /// Input `input` holds another number of elements than its shape.
    Len {
        /// The input.
        input: &'static str,
        /// Elements given.
        got: usize,
        /// The product of its shape.
        expected: usize,
    },
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeError::OutOfRange {
                input,
                dim,
                got,
                lo,
                hi,
            } => write!(
                f,
                "input `{input}`: `{dim}` = {got} is outside the range {lo}..={hi} the model was compiled for"
            ),
            ShapeError::Dim {
                input,
                axis,
                got,
                expected,
            } => write!(
                f,
                "input `{input}`: dimension {axis} is {got}, expected {expected}"
            ),
            ShapeError::Len {
                input,
                got,
                expected,
            } => write!(
                f,
                "input `{input}`: {got} elements for a shape of {expected}"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ShapeError {}

/// `floor((a d + b) / c)` (`c > 0`): a run-time dimension's size as a function of the range's
/// size `d`, as the generated glue computes it.
pub const fn ranged_dim(d: usize, a: i64, b: i64, c: i64) -> usize {
    let v = (a * d as i64 + b).div_euclid(c);
    if v < 0 {
        0
    } else {
        v as usize
    }
}
