//! Backends: who can run which sub-graph. Each backend lives in its own folder and states its
//! capability only as a [`PartitionRule`] (plus whether it is usable on this machine); the
//! placement search (`partition::place`) chooses among the candidates of all of them.
//!
//! - `c`: C kernels generated from tensor expressions (always available);
//! - `gemm`: matrix products by the pure-Rust `gemm` crate, called back through the runtime;
//! - `blas`: matrix products by a system CBLAS (OpenBLAS), feature `blas`, detected at build time;
//! - `dnnl`: oneDNN, feature `dnnl`, detected at build time.
use crate::error::{Error, Result};
use crate::ops::OpKind;
use crate::partition::rule::PartitionRule;

pub mod blas;
pub mod c;
pub mod dnnl;
pub mod gemm;

pub use c::CBackend;
pub use gemm::GemmLibrary;

/// A code-generation or library backend.
pub trait Backend: std::fmt::Debug + Send + Sync {
    /// The short name used on the command line (`c`, `gemm`, ...).
    fn name(&self) -> &'static str;
    /// Whether the backend can run an operator of this type and kind (for `--greedy`).
    fn supports(&self, op_type: &str, kind: OpKind) -> bool;
    /// The sub-graphs the backend can run as one kernel, as a partition rule.
    fn rule(&self) -> PartitionRule;
    /// Whether the backend's contraction stages are library calls (`Exec::Gemm`).
    fn library(&self) -> bool {
        false
    }
}

/// Every backend compiled into this `collage-build`, available on this machine or not, in the
/// default priority order.
pub const ALL: &[&str] = &["c", "gemm", "blas", "dnnl"];

/// The backend named `name`, if it is compiled in and usable here.
pub fn by_name(name: &str) -> Option<Box<dyn Backend>> {
    match name {
        "c" => Some(Box::new(CBackend)),
        "gemm" => Some(Box::new(gemm::backend())),
        "blas" if blas::available() => Some(Box::new(blas::backend())),
        "dnnl" if dnnl::available() => Some(Box::new(dnnl::backend())),
        _ => None,
    }
}

/// The backends available in this build and on this machine.
pub fn available() -> Vec<Box<dyn Backend>> {
    ALL.iter().filter_map(|n| by_name(n)).collect()
}

/// The backends named in `list` (comma-separated, in priority order), or every available one for
/// an empty list. Unknown or unavailable names are an error naming what is available.
pub fn select(list: &str) -> Result<Vec<Box<dyn Backend>>> {
    let names: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if names.is_empty() {
        return Ok(available());
    }
    let mut out: Vec<Box<dyn Backend>> = Vec::new();
    let mut bad = Vec::new();
    for n in names {
        match by_name(n) {
            Some(b) if !out.iter().any(|x| x.name() == n) => out.push(b),
            Some(_) => {}
            None => bad.push(n.to_string()),
        }
    }
    if !bad.is_empty() {
        let have: Vec<&str> = available().iter().map(|b| b.name()).collect();
        return Err(Error::Usage(format!(
            "unknown or unavailable backend(s) {}; available here: {}",
            bad.join(", "),
            have.join(", ")
        )));
    }
    Ok(out)
}
