fn main() {
    // `scan` finds the `model! { .. }` block in lib.rs and compiles it.
    if let Err(e) = collage_build::Build::new()
        .scan(".")
        // Measured kernel costs for this machine (regenerate: `COLLAGE_TUNE=1 cargo build`).
        .cost_cache("collage-cache.toml")
        .compile()
    {
        panic!("collage: {e}");
    }
}
