//! Placement on real models: the `c` backend's rule proposes fused candidates, the analytic model
//! prices them, and the search returns an exact cover of the graph.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use collage_build::backend;
use collage_build::partition::place::{analytic_cost, node_work, place};
use collage_build::partition::search::{SearchLimits, StopReason};
use collage_build::pipeline::{self, Options};
use collage_build::tune::{CostCache, Entry, TargetFingerprint};

fn placed(model: &Path) {
    let mut g = collage_build::frontend::onnx::load(model).unwrap();
    collage_build::passes::run(&mut g, collage_build::passes::PIPELINE).unwrap();
    let work = node_work(&g).unwrap();
    let backends = backend::available();
    let p = place(
        &g,
        &backends,
        &mut |_, c| Some(analytic_cost(&g, &work, c)),
        &|_, _| 0.0,
        SearchLimits::default(),
    )
    .unwrap();
    let mut covered: Vec<usize> = p
        .parts
        .iter()
        .flat_map(|part| part.nodes.iter().copied())
        .collect();
    covered.sort();
    assert_eq!(
        covered,
        (0..g.nodes.len()).collect::<Vec<_>>(),
        "{}: not an exact cover",
        model.display()
    );
    assert!(
        matches!(p.stop, StopReason::Optimal | StopReason::StateLimit { .. }),
        "{:?}",
        p.stop
    );
    assert!(
        p.parts.len() < g.nodes.len() || g.nodes.len() <= 1,
        "fusion candidates were never chosen"
    );
    println!(
        "{}: {} nodes in {} parts from {} candidates, estimated {:.0} us, {:?} ({:?})",
        model.file_name().unwrap().to_string_lossy(),
        g.nodes.len(),
        p.parts.len(),
        p.candidates,
        p.cost_us,
        p.stop,
        p.elapsed
    );
}

#[test]
fn public_models_get_an_exact_cover() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    placed(&root.join("examples/mnist/mnist.onnx"));
    let bench = std::env::var_os("COLLAGE_BENCH_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/bench/models"));
    for m in ["mlp", "mnist_cnn", "resnet18", "bert_layer"] {
        let p = bench.join(format!("{m}.onnx"));
        assert!(p.exists(), "{} is missing: run .ci/run", p.display());
        placed(&p);
    }
}

fn mnist() -> collage_build::ir::Graph {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    collage_build::frontend::onnx::load(&root.join("examples/mnist/mnist.onnx")).unwrap()
}

/// A cache with every kernel of the `gemm` backend's candidates (and nothing else) at `us`.
fn gemm_cache(g: &collage_build::ir::Graph, target: &TargetFingerprint, us: f64) -> CostCache {
    let mut g = g.clone();
    collage_build::passes::run(&mut g, collage_build::passes::PIPELINE).unwrap();
    let opts = Options {
        backends: "gemm".into(),
        ..Options::default()
    };
    let mut cache = CostCache::new();
    let todo = pipeline::candidate_kernels(&g, &opts, target, &cache).unwrap();
    assert!(
        !todo.is_empty(),
        "the gemm backend proposes no kernel for mnist"
    );
    for (_, _, key) in todo {
        let entry = Entry::new(us, us, 20, Default::default()).unwrap();
        cache.insert(key, entry).unwrap();
    }
    cache
}

/// Placement reads the cost cache: the same model goes to the `gemm` backend where the cache says
/// its kernels are cheap, and stays on `c` where it says they are slow.
#[test]
fn placement_follows_the_cost_cache() {
    let g = mnist();
    let target = TargetFingerprint::current(&collage_build::native::c_compiler_version());
    let compile = |us: f64| {
        let opts = Options {
            backends: "c,gemm".into(),
            cache: Some(Arc::new(gemm_cache(&g, &target, us))),
            target: Some(target.clone()),
            ..Options::default()
        };
        pipeline::compile(g.clone(), "m", &opts).unwrap()
    };
    let fast = compile(0.001);
    let info = fast.placement.as_ref().unwrap();
    let on_gemm = info
        .placement
        .parts
        .iter()
        .filter(|p| p.backend == "gemm")
        .count();
    assert!(
        on_gemm >= 2,
        "cheap gemm kernels were not chosen: {on_gemm} parts"
    );
    assert!(
        fast.c_source.contains("rt->sgemm"),
        "no library call emitted"
    );
    assert!(info.hits > 0 && info.misses > 0);
    let slow = compile(1e6);
    let info = slow.placement.as_ref().unwrap();
    assert!(info.placement.parts.iter().all(|p| p.backend == "c"));
    assert!(!slow.c_source.contains("rt->sgemm"));
}

/// `--greedy` puts every contraction on the first library, and unknown backends are a usage error
/// that names what is available.
#[test]
fn greedy_and_backend_selection() {
    let g = mnist();
    let opts = Options {
        backends: "gemm,c".into(),
        greedy: true,
        ..Options::default()
    };
    let c = pipeline::compile(g.clone(), "m", &opts).unwrap();
    let info = c.placement.as_ref().unwrap();
    assert_eq!(info.placement.stop, StopReason::Greedy);
    for part in &info.placement.parts {
        let op = c.graph.nodes[part.nodes[0]].op.op_type();
        let lib = ["MatMul", "Gemm", "Conv"].contains(&op);
        assert_eq!(part.backend == "gemm", lib, "{op} on {}", part.backend);
    }
    let bad = Options {
        backends: "c,nosuch".into(),
        ..Options::default()
    };
    let e = pipeline::compile(g, "m", &bad).unwrap_err().to_string();
    assert!(
        e.contains("nosuch") && e.contains("available here: c"),
        "{e}"
    );
}
