//! Operators of the `index` family: slicing, gathering, padding and rearranging elements.
use super::Constructor;

/// The registry of this family.
pub const OPS: &[(&str, Constructor)] = &[];
