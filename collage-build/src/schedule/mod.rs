//! Scheduling: the knobs of each generated stage (`kernel`), its kernel plan (`plan`: the one
//! loop shape the code generator prints), stages grouped into loops of instances (`group`, GraphTurbo), and memory planning
//! of the activation arena and where every buffer lives ([`Location`]).
pub(crate) mod analysis;
mod arena;
pub mod bands;
pub mod group;
pub mod kernel;
pub mod layout;
pub mod pad;
pub mod plan;
pub mod rows;
pub mod tiles;

pub use arena::{buf_ptr, plan_arena, ArenaPlan, LiveRange, Location};
pub use bands::plan_band_groups;
pub use group::{plan_groups, GroupInfo};
pub use plan::{parallel_calls, plan_program, plan_stage, tile_widths};
pub use rows::{plan_row_groups, RowGroupInfo};
pub use tiles::{tile_graph, Level, TileGraph};
