fn main() {
    if let Err(e) = collage_build::Build::new().onnx("mnist.onnx").compile() {
        panic!("collage: {e}");
    }
}
