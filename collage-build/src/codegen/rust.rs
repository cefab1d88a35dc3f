//! The Rust glue for a compiled model (filled in below).
