fn main() {
    if let Err(e) = collage_build::Build::new()
        .onnx("mnist.onnx")
        // Measured kernel costs for this machine (regenerate: `COLLAGE_TUNE=1 cargo build`).
        .cost_cache("collage-cache.toml")
        .compile()
    {
        panic!("collage: {e}");
    }
}
