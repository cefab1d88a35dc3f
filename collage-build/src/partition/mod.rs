//! Collage placement (PACT'22, TVM Collage RFC): sub-graphs, partition rules, candidates, and the
//! search for the cheapest assignment of sub-graphs to backends.
pub mod index_set;
pub mod place;
pub mod rule;
pub mod search;
pub mod sub_graph;
