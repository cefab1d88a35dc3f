fn main() {
    // `ocr.onnx`'s input is `x: [batch, 3, height, width]`, every dimension but the channels
    // symbolic, as exporters write it.
    if let Err(e) = collage_build::Build::new()
        // Sizes in build.rs: one model per batch size, 32x96 images.
        .onnx("ocr.onnx")
        .dim("height", 32)
        .dim("width", 96)
        .variants("batch", [1, 2, 4])
        // Sizes in the source: `model!(.., x: [1, 3, 48, 160])` in lib.rs, found by the scan.
        .scan(".")
        .compile()
    {
        panic!("collage: {e}");
    }
}
