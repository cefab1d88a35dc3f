//! The `model!` DSL frontend (filled in below).
