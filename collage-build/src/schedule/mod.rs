//! Scheduling: memory planning of the activation arena.
mod arena;

pub use arena::{plan_arena, ArenaPlan, Interval};
