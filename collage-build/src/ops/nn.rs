//! Operators of the `nn` family.
use super::Constructor;

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[];

/// The epsilon of a BatchNormalization operator, or `None` for any other operator.
pub fn batchnorm_epsilon(_op: &dyn super::Operator) -> Option<f64> {
    None
}

/// True for a Conv operator.
pub fn is_conv(op: &dyn super::Operator) -> bool {
    op.op_type() == "Conv"
}
