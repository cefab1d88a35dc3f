//! Scheduling: the schedule of each generated stage (`kernel`: the knobs the code generator
//! consumes) and memory planning of the activation arena and where every buffer lives ([`Place`]).
mod arena;
pub mod kernel;

pub use arena::{buf_ptr, plan_arena, ArenaPlan, Interval, Place};
pub use kernel::Schedule;
