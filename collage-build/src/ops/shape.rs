//! Operators of the `shape` family.
use super::Constructor;

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[];
