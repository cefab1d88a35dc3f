//! Every node of mnist_cnn and resnet18 (the model tests' files, written by `.ci/run`) on `dnnl`,
//! as one part (a placement record, as `collage tune --evolve` writes): convolutions run on
//! oneDNN's convolution primitive with their bias, residual `Add` (sum post-op) and `Relu` fused
//! as post-ops, pooling on its pooling primitive; outputs match ONNX Runtime's.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::BackendId;
use crate::driver::{self, Options};
use crate::driver::run;
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
