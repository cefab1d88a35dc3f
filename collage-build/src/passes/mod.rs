//! Graph passes, run as an explicit ordered pipeline with the verifier after each.
mod batchnorm;
mod control;
mod dce;
mod deconv;
mod einsum;
mod infer;

use crate::error::Result;
use crate::ir::{verify, Graph};

pub use infer::infer_and_fold;

/// One pass: a name for messages and the function.
pub type Pass = (&'static str, fn(&mut Graph) -> Result<()>);

/// The default pipeline: shape inference with constant folding, BatchNorm folding, transposed
/// convolutions as a product and a fold (`deconv`), einsums that are matrix products as
/// `MatMul`s (`einsum`), and dead-code elimination.
pub const PIPELINE: &[Pass] = &[
    ("infer", infer_and_fold),
    ("fold_batchnorm", batchnorm::run),
    ("deconv", deconv::run),
    ("einsum", einsum::run),
    ("dce", dce::run),
];

/// Runs `passes` in order, verifying the graph after each.
pub fn run(g: &mut Graph, passes: &[Pass]) -> Result<()> {
    verify(g, "import")?;
    for (name, pass) in passes {
        pass(g)?;
        verify(g, name)?;
    }
    Ok(())
}
