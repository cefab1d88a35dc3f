//! Golden text IR: the example model after the pass pipeline, printed. Regenerate with
//! `COLLAGE_BLESS=1 cargo test --test ir_golden` after an intended change.
use std::path::Path;

#[test]
fn mnist_example_ir_after_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut g =
        collage_build::frontend::onnx::load(&root.join("examples/mnist/mnist.onnx")).unwrap();
    collage_build::passes::run(&mut g, collage_build::passes::PIPELINE).unwrap();
    let got = g.to_string();
    let golden = root.join("tests/golden/mnist.ir.txt");
    if std::env::var_os("COLLAGE_BLESS").is_some() {
        std::fs::write(&golden, &got).unwrap();
    }
    let want = std::fs::read_to_string(&golden).expect("golden file (COLLAGE_BLESS=1 writes it)");
    assert_eq!(
        got, want,
        "the optimised IR changed; if intended, rerun with COLLAGE_BLESS=1"
    );
}
