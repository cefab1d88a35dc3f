//! Tests of lower rooms that need whole compiled models: they drive the compiler from the top, so
//! they live here rather than beside the code they test.
mod dnnl;
mod fusion;
mod tiles;
mod types;
