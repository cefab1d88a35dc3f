//! Operators of the `misc` family.
use super::Constructor;

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[];
