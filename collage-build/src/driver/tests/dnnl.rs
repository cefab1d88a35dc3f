//! Every node of mnist_cnn and resnet18 (the model tests' files, written by `.ci/run`) on `dnnl`,
//! as one part (a placement record, as `collage tune --evolve` writes): convolutions run on
//! oneDNN's convolution primitive with their bias, residual `Add` (sum post-op) and `Relu` fused
//! as post-ops, pooling on its pooling primitive; outputs match ONNX Runtime's.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::BackendId;
use crate::driver::run;
use crate::driver::{self, Options};
use crate::tune::{CostCache, Entry, TargetFingerprint};

fn models_dir() -> PathBuf {
    std::env::var_os("COLLAGE_BENCH_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench/models"))
}

#[test]
fn primitives_with_fused_post_ops_match_onnx_runtime() {
    let required = std::env::var("COLLAGE_REQUIRE_BACKENDS").unwrap_or_default();
    if let Err(why) = BackendId::Dnnl.lookup() {
        assert!(!required.split(',').any(|b| b == "dnnl"), "{why}");
        eprintln!("{why}; skipped");
        return;
    }
    let target = TargetFingerprint::current(&crate::toolchain::c_compiler_version());
    for name in ["mnist_cnn", "resnet18"] {
        let dir = models_dir();
        let model = dir.join(format!("{name}.onnx"));
        assert!(
            model.exists(),
            "{} is missing: run .ci/run",
            model.display()
        );
        let mut g = crate::frontend::onnx::load(&model).unwrap();
        crate::passes::run(&mut g, crate::passes::PIPELINE).unwrap();
        let all: Vec<String> = (0..g.nodes.len()).map(|i| i.to_string()).collect();
        let mut params = BTreeMap::new();
        params.insert("parts".to_string(), format!("dnnl:{}", all.join(",")));
        let mut cache = CostCache::new();
        let key = crate::tune::price::placement_key(&g, &target, &["dnnl", "c"], 1);
        cache
            .insert(key, Entry::new(1.0, 1.0, 1, params).unwrap())
            .unwrap();
        let opts = Options {
            backends: "dnnl,c".into(),
            cache: Some(Arc::new(cache)),
            target: Some(target.clone()),
            ..Options::default()
        };
        let c = driver::compile_passed(g, "m", &opts, &target).unwrap();
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
        // The same placement built and run, against ONNX Runtime's output.
        let work = std::env::temp_dir().join(format!("collage-dnnl-{name}-{}", std::process::id()));
        let mut loaded = run::load_model(&model, None, &work, "-O2", &opts).unwrap();
        let in_ty = loaded.model.inputs[0].ty.clone();
        let out_ty = loaded.model.outputs[0].ty.clone();
        let x = run::read_raw_f32(&dir.join(format!("{name}.input.f32")), &in_ty.shape).unwrap();
        let want =
            run::read_raw_f32(&dir.join(format!("{name}.ort_out.f32")), &out_ty.shape).unwrap();
        if let Err(e) = run::check_threads(&mut loaded.model, &x, &want) {
            panic!("{name} on dnnl: {e}");
        }
        let _ = std::fs::remove_dir_all(&work);
    }
}

use crate::ir::{DType, Graph, TensorType};
use crate::native::NativeModel;
use crate::ops::{lookup, Attr, Attrs, OpCx};
use crate::tensor::{compare, pseudo_random};

/// `y = Conv(x, w)` with both a model input: 16 channels, 3x3, padded.
fn conv_of_inputs() -> Graph {
    let mut g = Graph::new("conv_w");
    let x = g.add_value("x", Some(TensorType::new(DType::F32, [1, 16, 12, 12])));
    let w = g.add_value("w", Some(TensorType::new(DType::F32, [16, 16, 3, 3])));
    g.inputs.extend([x, w]);
    let mut a = std::collections::BTreeMap::new();
    a.insert("pads".to_string(), Attr::Ints(vec![1, 1, 1, 1]));
    let attrs = Attrs(a);
    let op = lookup("Conv").unwrap()(&OpCx {
        attrs: &attrs,
        opset: 17,
        n_inputs: 2,
        n_outputs: 1,
    })
    .unwrap();
    let y = g.add_value("y", None);
    g.add_node("conv", op, vec![Some(x), Some(w)], vec![y]);
    g.outputs.push(y);
    g
}

/// Weights that are a model input change between runs: on `dnnl`, where constant weights
/// are converted to the primitive's layout once, these are converted on every run. The
/// primitives (and their reorders) also run on a thread other than the one that made them.
#[test]
fn weights_that_are_inputs_are_converted_on_every_run() {
    if !crate::backend::dnnl::available() {
        return;
    }
    let work = std::env::temp_dir().join(format!("collage-dnnl-w-{}", std::process::id()));
    let build = |backends: &str| {
        let opts = Options {
            backends: backends.into(),
            greedy: true,
            ..Options::default()
        };
        let c = driver::compile(conv_of_inputs(), "conv_w", &opts).unwrap();
        if backends == "dnnl,c" {
            assert!(c.c_source.contains("{CL_DNNL_CONV, "), "not on a primitive");
        }
        NativeModel::build(&c, &work.join(backends.replace(',', "_")), "-O2").unwrap()
    };
    let (mut on_dnnl, mut generated) = (build("dnnl,c"), build("c"));
    let x = pseudo_random(&on_dnnl.inputs[0].ty);
    let w1 = pseudo_random(&on_dnnl.inputs[1].ty);
    let flipped: Vec<f32> = w1.to_f32().iter().map(|v| 0.5 - 2.0 * v).collect();
    let w2 = crate::ir::Tensor::from_f32(&on_dnnl.inputs[1].ty.shape, &flipped);
    let exec = collage_runtime::Executor::Serial;
    for w in [&w1, &w2, &w1] {
        let inputs = [x.clone(), w.clone()];
        let got = on_dnnl.run(&inputs, &exec).unwrap();
        let want = generated.run(&inputs, &exec).unwrap();
        let (ok, err) = compare(&got[0], &want[0]);
        assert!(ok, "max |dnnl - c| = {err}");
    }
    // The instance (created by the first run above, on this thread) runs on another thread.
    let inputs = [x.clone(), w2.clone()];
    let want = generated.run(&inputs, &exec).unwrap();
    let got = std::thread::scope(|s| {
        s.spawn(|| on_dnnl.run(&inputs, &collage_runtime::Executor::Serial))
            .join()
            .unwrap()
    })
    .unwrap();
    let (ok, err) = compare(&got[0], &want[0]);
    assert!(ok, "on another thread: max |dnnl - c| = {err}");
    let _ = std::fs::remove_dir_all(&work);
}
