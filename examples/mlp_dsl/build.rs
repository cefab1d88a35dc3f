fn main() {
    // `scan` finds the `model! { .. }` block in lib.rs and compiles it.
    if let Err(e) = collage_build::Build::new().scan(".").compile() {
        panic!("collage: {e}");
    }
}
