//! The public benchmark models (`../shared/bench/models.py`, `tests/support/cnn_models.py`) against ONNX Runtime's outputs on their
//! fixed inputs (both written by `.ci/run`): |got - want| <= 1e-4 + 1e-3 |want|.
use std::path::PathBuf;

use collage_build::pipeline::Options;
use collage_build::tools;
use collage_runtime::Executor;

mod common;

fn models_dir() -> PathBuf {
    std::env::var_os("COLLAGE_BENCH_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench/models"))
}

/// Checks `name` compiled with the default placement and, for every available library backend,
/// with that backend forced first (`--greedy --backends LIB,c`), so each library computes every
/// contraction it can take.
fn check(name: &str) {
    check_with(name, &Options::default());
    for (_, opts) in common::library_first() {
        check_with(name, &opts);
    }
}

/// Compiles `name` once and runs it on 1, 2 and 5 threads (5 > the cores of a CI machine, and
/// coprime with the batch counts of the models, so library products are split into uneven blocks).
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
    // Instance state (as `Model::run`), then the process-wide one (as `Model::run_in`), which
    // a model with oneDNN primitives rebuilds for each thread count.
    for shared in [false, true] {
        for threads in [1, 2, 5] {
            let exec = Executor::with_threads(threads);
            let xs = std::slice::from_ref(&x);
            let got = if shared {
                loaded.model.run_shared(xs, &exec)
            } else {
                loaded.model.run(xs, &exec)
            }
            .unwrap();
            let (ok, err) = tools::compare(&got[0], &want);
            assert!(
                ok,
                "{name} ({threads} threads, backends {:?}, greedy {}, shared state {shared}): max |got - want| = {err}",
                opts.backends, opts.greedy
            );
        }
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

/// Every node of mnist_cnn and resnet18 on `dnnl`, as one part (a placement record, as
/// `collage tune --evolve` writes): convolutions run on oneDNN's convolution primitive with their
/// bias, residual `Add` (sum post-op) and `Relu` fused as post-ops, pooling on its pooling
/// primitive.
#[test]
fn dnnl_primitives_with_fused_post_ops_match_onnx_runtime() {
    use std::sync::Arc;

    use collage_build::pipeline;
    use collage_build::tune::{CostCache, Entry, TargetFingerprint};
    if !common::library_first().iter().any(|(l, _)| *l == "dnnl") {
        return;
    }
    let target = TargetFingerprint::current(&collage_build::native::c_compiler_version());
    for name in ["mnist_cnn", "resnet18"] {
        let mut g = collage_build::frontend::onnx::load(&models_dir().join(format!("{name}.onnx")))
            .unwrap();
        collage_build::passes::run(&mut g, collage_build::passes::PIPELINE).unwrap();
        let all: Vec<String> = (0..g.nodes.len()).map(|i| i.to_string()).collect();
        let mut params = std::collections::BTreeMap::new();
        params.insert("parts".to_string(), format!("dnnl:{}", all.join(",")));
        let mut cache = CostCache::new();
        let key = pipeline::placement_key(&g, &target, &["dnnl", "c"], 1);
        cache
            .insert(key, Entry::new(1.0, 1.0, 1, params).unwrap())
            .unwrap();
        let opts = Options {
            backends: "dnnl,c".into(),
            cache: Some(Arc::new(cache)),
            target: Some(target.clone()),
            ..Options::default()
        };
        let c = pipeline::compile_passed(g, "m", &opts, &target).unwrap();
        // The primitive table: kind, geometry, then bias, sum, relu, constant weights,
        // src_from, res_from, blockable.
        let convs: Vec<Vec<i64>> = c
            .c_source
            .lines()
            .filter_map(|l| l.trim().strip_prefix("{CL_DNNL_CONV, "))
            .map(|l| {
                l.trim_end_matches("},")
                    .split(", ")
                    .map(|v| v.parse().unwrap())
                    .collect()
            })
            .collect();
        let flags = |v: &Vec<i64>| v[v.len() - 7..].to_vec();
        assert!(
            convs.iter().any(|v| flags(v)[..3] == [1, 0, 1]),
            "{name}: no convolution with bias and ReLU post-ops"
        );
        assert!(
            c.c_source.contains("{CL_DNNL_MAXPOOL,"),
            "{name}: no pooling primitive"
        );
        if name == "resnet18" {
            assert!(
                convs.iter().any(|v| flags(v)[..3] == [1, 1, 1]),
                "{name}: no convolution with bias, sum and ReLU post-ops"
            );
            // Convolutions feeding convolutions hand over their output in oneDNN's layout.
            assert!(
                convs.iter().filter(|v| flags(v)[6] == 1).count() >= 8,
                "{name}: outputs kept in oneDNN's layout: {convs:?}"
            );
            assert!(convs.iter().any(|v| flags(v)[4] >= 0 && flags(v)[5] >= 0));
        }
        check_with(name, &opts);
    }
}
