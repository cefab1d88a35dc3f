//! Scheduling: the schedule of each generated stage (`kernel`: the knobs the code generator
//! consumes) and memory planning of the activation arena.
mod arena;
pub mod kernel;

pub use arena::{plan_arena, ArenaPlan, Interval};
pub use kernel::Schedule;
