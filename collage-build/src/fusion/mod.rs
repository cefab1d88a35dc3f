//! Tile-graph fusion (Welder, OSDI'23): tile shapes propagated backwards through tensor
//! expressions, the footprint and memory traffic of a tile, and the enumeration of aligned
//! candidate tiles ranked by traffic (`tile`).
pub mod tile;
