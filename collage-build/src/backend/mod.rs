//! Backends: who can run which sub-graph. Today only the `c` backend (generated C kernels) exists;
//! the placement search (Collage) and library backends build on this trait.
use crate::ops::OpKind;

/// A code-generation or library backend.
pub trait Backend: std::fmt::Debug {
    /// The short name used on the command line (`c`, `gemm`, ...).
    fn name(&self) -> &'static str;
    /// Whether the backend can run an operator of this type and kind.
    fn supports(&self, op_type: &str, kind: OpKind) -> bool;
}

/// The default backend: C kernels generated from tensor expressions, compiled with the system C
/// compiler. Supports every registered operator.
#[derive(Debug, Default)]
pub struct CBackend;

impl Backend for CBackend {
    fn name(&self) -> &'static str {
        "c"
    }

    fn supports(&self, op_type: &str, _kind: OpKind) -> bool {
        crate::ops::lookup(op_type).is_some()
    }
}

/// The backends available in this build, by name.
pub fn available() -> Vec<Box<dyn Backend>> {
    vec![Box::new(CBackend)]
}
