//! Scheduling: the schedule of each generated stage (`kernel`: the knobs the code generator
//! consumes), stages grouped into loops of instances (`group`, GraphTurbo), and memory planning
//! of the activation arena and where every buffer lives ([`Place`]).
mod arena;
pub mod group;
pub mod kernel;

pub use arena::{buf_ptr, plan_arena, ArenaPlan, Interval, Place};
pub use group::{plan_groups, GroupInfo};
pub use kernel::Schedule;
