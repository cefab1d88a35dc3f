//! Two compiles of the same model give byte-identical generated sources (glue, C, weights).
use std::path::{Path, PathBuf};

fn sources(model: &Path) -> Vec<Vec<u8>> {
    let g = collage_build::frontend::onnx::load(model).unwrap();
    let c = collage_build::compile_graph(g, "m").unwrap();
    let dir = std::env::temp_dir().join(format!(
        "collage-det-{}-{}",
        std::process::id(),
        model.file_stem().unwrap().to_string_lossy()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let files = collage_build::write_sources(&c, &dir).unwrap();
    let bytes = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}

fn models() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bench = std::env::var_os("COLLAGE_BENCH_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/bench/models"));
    let mut v = vec![root.join("examples/mnist/mnist.onnx")];
    for m in ["mlp", "mnist_cnn", "resnet18", "bert_layer"] {
        let p = bench.join(format!("{m}.onnx"));
        assert!(p.exists(), "{} is missing: run .ci/run", p.display());
        v.push(p);
    }
    v
}

#[test]
fn two_compiles_are_byte_identical() {
    for m in models() {
        let (a, b) = (sources(&m), sources(&m));
        assert_eq!(a.len(), 3);
        for (x, y) in a.iter().zip(&b) {
            assert!(
                x == y,
                "{}: generated sources differ between two compiles",
                m.display()
            );
        }
    }
}
