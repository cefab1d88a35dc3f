//! The public benchmark models (`../shared/bench/models.py`, `tests/support/cnn_models.py`) against ONNX Runtime's outputs on their
//! fixed inputs (both written by `.ci/run`): |got - want| <= 1e-4 + 1e-3 |want|.
use std::path::PathBuf;

use collage_build::driver::run as tools;
use collage_build::driver::Options;

mod common;

fn models_dir() -> PathBuf {
    std::env::var_os("COLLAGE_BENCH_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench/models"))
}

/// Checks `name` compiled with the default placement, with generated code alone (`--backends
/// c`: what a machine without the libraries runs, every convolution and fused group in generated
/// code) and, for every available library backend, with that backend forced first (`--greedy
/// --backends LIB,c`), so each library computes every contraction it can take.
fn check(name: &str) {
    check_with(name, &Options::default());
    check_with(
        name,
        &Options {
            backends: "c".into(),
            ..Options::default()
        },
    );
    // The sanitiser job (`.ci/sanitize`, COLLAGE_SANITIZE set) checks the generated code: the
    // library-first builds, where libraries compute the contractions, are left to the plain run.
    if std::env::var_os("COLLAGE_SANITIZE").is_some() {
        return;
    }
    for (_, opts) in common::library_first() {
        check_with(name, &opts);
    }
}

/// Compiles `name` once and runs it on 1, 2 and 5 threads, with instance and process-wide state
/// (`tools::check_threads`).
fn check_with(name: &str, opts: &Options) {
    let dir = models_dir();
    let model = dir.join(format!("{name}.onnx"));
    let reference = dir.join(format!("{name}.ort_out.f32"));
    assert!(
        model.exists() && reference.exists(),
        "{} or its ONNX Runtime output is missing: run .ci/run",
        model.display()
    );
    let work = std::env::temp_dir().join(format!(
        "collage-models-{name}-{}-{}",
        opts.backends.replace(',', "_"),
        std::process::id()
    ));
    let mut loaded = tools::load_model(&model, None, &work, "-O2", opts).unwrap();
    let in_ty = loaded.model.inputs[0].ty.clone();
    let out_ty = loaded.model.outputs[0].ty.clone();
    let x = tools::read_raw_f32(&dir.join(format!("{name}.input.f32")), &in_ty.shape).unwrap();
    let want = tools::read_raw_f32(&reference, &out_ty.shape).unwrap();
    if let Err(e) = tools::check_threads(&mut loaded.model, &x, &want) {
        panic!(
            "{name} (backends {:?}, greedy {}): {e}",
            opts.backends, opts.greedy
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn mlp_matches_onnx_runtime() {
    check("mlp");
}

#[test]
fn mnist_cnn_matches_onnx_runtime() {
    check("mnist_cnn");
}

#[test]
fn resnet18_matches_onnx_runtime() {
    check("resnet18");
}

#[test]
fn bert_layer_matches_onnx_runtime() {
    check("bert_layer");
}

// SqueezeNet 1.1 and MobileNetV3-small as PyTorch exports them (`tests/support/cnn_models.py`):
// Fire modules' concatenations read by convolutions, depthwise convolutions, HardSwish /
// HardSigmoid and squeeze-and-excitation.
#[test]
fn squeezenet_matches_onnx_runtime() {
    check("squeezenet");
}

#[test]
fn mobilenetv3_matches_onnx_runtime() {
    check("mobilenetv3");
}

// MobileNetV2 (inverted residuals, depthwise 3x3, ReLU6 as Clip) and a ViT-style encoder of our
// own (16x16 patch convolution, class token, 6 pre-LN attention blocks, GELU MLPs).
#[test]
fn mobilenetv2_matches_onnx_runtime() {
    check("mobilenetv2");
}

#[test]
fn vit_matches_onnx_runtime() {
    check("vit");
}

// A DBNet-style text detector (`tests/support/cnn_models.py`): an FPN of nearest-neighbour
// Resizes and a head of two ConvTransposes (as a product and a fold, `passes/deconv.rs`).
#[test]
fn dbnet_matches_onnx_runtime() {
    check("dbnet");
}

// A CNN of many similar layers (`tests/support/cnn_models.py`): 3x3 convolutions growing by 16
// channels a layer, the model ETO's plan reuse is measured on.
#[test]
fn convtower_matches_onnx_runtime() {
    check("convtower");
}

// A transformer encoder over 512 tokens (`tests/support/cnn_models.py`): its attentions and
// LayerNorms run as row groups (scores, softmax passes and the product with V per block of
// query rows, the scores only in per-thread scratch).
#[test]
fn encoder512_matches_onnx_runtime() {
    check("encoder512");
}
