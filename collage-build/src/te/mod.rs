//! Tensor expressions: the compute definition of every operator.
//!
//! An operator lowers to one or more [`Stage`]s. A stage defines every element of its output as an
//! [`Expr`] over the output index variables (`Var(k)`), optionally reduced over reduction variables
//! (`RVar(k)`), reading its inputs through [`Expr::Load`]. The one description drives the C code
//! generator, the constant folder (an interpreter), and fusion (inlining and epilogues).
mod backend;
mod expr;
mod fuse;
mod interp;
mod plan;
mod print;
mod program;
mod range;
mod simplify;

pub(crate) use backend::backend_list;
pub use backend::BackendId;
pub use expr::{
    bcast_index, BinOp, Exec, Expr, LibraryCall, RedOp, Reduce, Scalar, Src, Stage, UnOp,
    WindowKind, WindowOp,
};
pub use fuse::{fuse, hoist_invariant_factors};
#[cfg(test)]
pub(crate) use interp::run_program;
pub use interp::{eval_stages, Evaluator};
pub use plan::{
    Axis, Bound, ChannelPlan, GemmPlan, Guard, InjectivePlan, Isa, KernelPlan, PlainPlan,
    PlanChoice, PlanKind, PlanePlan, RowPlan, RowTrips, ScanPlan, Window, WindowPlan,
};
pub use print::fnv64;
pub use program::{Band, BufId, BufKind, Buffer, Group, Program, RowGroup, PANEL};
pub use range::{Ranged, Sym};
pub(crate) use simplify::affine_terms;
pub use simplify::{simplify, simplify_stage};
