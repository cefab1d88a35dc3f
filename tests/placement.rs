//! Placement on real models: the `c` backend's rule proposes fused candidates, the analytic model
//! prices them, and the search returns an exact cover of the graph.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use collage_build::backend::{self, BackendId};
use collage_build::driver::place::place;
use collage_build::driver::{self, Options};
use collage_build::partition::place::{analytic_cost, node_work};
use collage_build::partition::search::{SearchLimits, StopReason};
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
    let todo = driver::candidate_kernels(&g, &opts, target, &cache).unwrap();
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
    let target = TargetFingerprint::current(&collage_build::toolchain::c_compiler_version());
    let compile = |us: f64| {
        let opts = Options {
            backends: "c,gemm".into(),
            cache: Some(Arc::new(gemm_cache(&g, &target, us))),
            target: Some(target.clone()),
            ..Options::default()
        };
        driver::compile(g.clone(), "m", &opts).unwrap()
    };
    let fast = compile(0.001);
    let info = fast.placement.as_ref().unwrap();
    let on_gemm = info
        .placement
        .parts
        .iter()
        .filter(|p| p.backend == BackendId::Gemm)
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
    assert!(info
        .placement
        .parts
        .iter()
        .all(|p| p.backend == BackendId::C));
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
    let c = driver::compile(g.clone(), "m", &opts).unwrap();
    let info = c.placement.as_ref().unwrap();
    assert_eq!(info.placement.stop, StopReason::Greedy);
    for part in &info.placement.parts {
        let op = c.graph.nodes[part.nodes[0]].op.op_type();
        let lib = ["MatMul", "Gemm", "Conv"].contains(&op);
        assert_eq!(
            part.backend == BackendId::Gemm,
            lib,
            "{op} on {}",
            part.backend
        );
    }
    let bad = Options {
        backends: "c,nosuch".into(),
        ..Options::default()
    };
    let e = driver::compile(g, "m", &bad).unwrap_err().to_string();
    assert!(
        e.contains("nosuch") && e.contains("available here: c"),
        "{e}"
    );
}

fn mnist_passed() -> collage_build::ir::Graph {
    let mut g = mnist();
    collage_build::passes::run(&mut g, collage_build::passes::PIPELINE).unwrap();
    g
}

/// A placement recorded in the cache (as `collage tune --evolve` does) is the one builds use, for
/// its backend list and thread count only; a record that does not cover the graph is ignored.
#[test]
fn recorded_placement_is_followed() {
    let g = mnist_passed();
    let target = TargetFingerprint::current(&collage_build::toolchain::c_compiler_version());
    let greedy = Options {
        backends: "gemm,c".into(),
        greedy: true,
        ..Options::default()
    };
    let want = driver::place_graph(&g, &greedy, &target).unwrap();
    let record = |parts: String| {
        let mut params = std::collections::BTreeMap::new();
        params.insert("parts".to_string(), parts);
        let mut cache = CostCache::new();
        let key = collage_build::tune::price::placement_key(&g, &target, &["c", "gemm"], 2);
        cache
            .insert(key, Entry::new(10.0, 11.0, 5, params).unwrap())
            .unwrap();
        Arc::new(cache)
    };
    let opts = |cache: &Arc<CostCache>, threads: usize| Options {
        backends: "c,gemm".into(),
        cache: Some(cache.clone()),
        target: Some(target.clone()),
        threads,
        ..Options::default()
    };
    let good = record(driver::encode_parts(&want.placement.parts));
    let got = driver::place_graph(&g, &opts(&good, 2), &target).unwrap();
    assert_eq!(
        got.placement.stop,
        StopReason::Recorded {
            median_ns: 10_000,
            threads: 2
        }
    );
    let summary =
        |i: &collage_build::partition::place::PlacementInfo| -> Vec<(BackendId, Vec<usize>)> {
            i.placement
                .parts
                .iter()
                .map(|p| (p.backend, p.nodes.clone()))
                .collect()
        };
    assert_eq!(summary(&got), summary(&want));
    assert!(summary(&got).iter().any(|(b, _)| *b == BackendId::Gemm));
    let c = driver::compile_passed(g.clone(), "m", &opts(&good, 2), &target).unwrap();
    assert!(
        c.c_source.contains("rt->sgemm"),
        "the record was not compiled"
    );
    // Another thread count: the search decides.
    let other = driver::place_graph(&g, &opts(&good, 1), &target).unwrap();
    assert!(matches!(
        other.placement.stop,
        StopReason::Optimal | StopReason::StateLimit { .. }
    ));
    // Records that do not fit: a node missing, a node twice, an unknown backend.
    for bad in ["c:0", "c:0,0", "blas:0"] {
        let n = g.nodes.len();
        let rest: Vec<String> = (1..n).map(|i| i.to_string()).collect();
        let text = format!("{bad};c:{}", rest.join(","));
        let text = if bad == "c:0" { bad.to_string() } else { text };
        let got = driver::place_graph(&g, &opts(&record(text.clone()), 2), &target).unwrap();
        assert!(
            !matches!(got.placement.stop, StopReason::Recorded { .. }),
            "{text} was followed"
        );
    }
}

/// `collage tune` measures the transition penalty of every backend pair once; `--evolve` times
/// the search's placement, the baselines (the untuned placement among them) and the evolution's
/// placements end to end, re-times them in final rounds and records the winner, which placement
/// then follows.
#[test]
fn transitions_and_evolution_are_measured_and_recorded() {
    let g = mnist_passed();
    let target = TargetFingerprint::current(&collage_build::toolchain::c_compiler_version());
    let work = std::env::temp_dir().join(format!("collage-evolve-test-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let opts = Options {
        backends: "c,gemm".into(),
        target: Some(target.clone()),
        ..Options::default()
    };
    let mut cache = CostCache::new();
    let mut calls = 0;
    let n =
        collage_build::driver::tune_transitions(&opts, &target, &mut cache, &work, &mut |_, _| {
            calls += 1
        })
        .unwrap();
    assert_eq!(n, 2);
    assert!(calls >= 2);
    for (a, b) in [("c", "gemm"), ("gemm", "c")] {
        let e = cache
            .get(&collage_build::tune::price::transition_key(&target, a, b))
            .unwrap_or_else(|| panic!("no {a}->{b} entry"));
        assert!(e.median_us >= 0.0 && e.p90_us >= e.median_us, "{e:?}");
    }
    let again =
        collage_build::driver::tune_transitions(&opts, &target, &mut cache, &work, &mut |_, _| {})
            .unwrap();
    assert_eq!(again, 0, "measured transitions are not measured again");

    let params = collage_build::partition::search::EvolveParams {
        population: 2,
        generations: 1,
        ..Default::default()
    };
    let settings = collage_build::driver::EvolveSettings {
        threads: 1,
        params,
        seconds: None,
    };
    let r = collage_build::driver::evolve_model(
        &g,
        &opts,
        &target,
        &mut cache,
        &work,
        settings,
        &mut |_| {},
    )
    .unwrap();
    // Out of time once the search's and the baselines' batch is timed: no evolution.
    let quick = collage_build::driver::evolve_model(
        &g,
        &opts,
        &target,
        &mut cache.clone(),
        &work,
        collage_build::driver::EvolveSettings {
            seconds: Some(0.0),
            ..settings
        },
        &mut |_| {},
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(&work);
    assert!(quick.stopped.is_some(), "{quick:?}");
    assert!(quick.evaluations <= r.evaluations, "{quick:?} {r:?}");
    assert!(quick.finals.iter().all(|f| f.0 != "evolution"), "{quick:?}");
    assert!(r.stopped.is_none(), "{r:?}");
    let names: Vec<&str> = r.baselines.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["c", "greedy gemm,c", "untuned"]);
    assert!(r.evaluations >= 4, "{r:?}");
    // The final rounds re-time the search's and the baselines' distinct programs and at most
    // three others; the winner is the lowest.
    assert!(!r.finals.is_empty() && r.finals.len() <= 1 + 3 + 3, "{r:?}");
    let lowest = r.finals.iter().map(|f| f.1).fold(f64::INFINITY, f64::min);
    assert_eq!(r.best_us, lowest, "{r:?}");
    assert!(r.finals.iter().any(|f| f.0 == r.best_from), "{r:?}");
    let with = Options {
        cache: Some(Arc::new(cache)),
        threads: 1,
        ..opts
    };
    let info = driver::place_graph(&g, &with, &target).unwrap();
    let StopReason::Recorded { median_ns, threads } = info.placement.stop else {
        panic!("the evolved placement is not used: {}", info.placement.stop)
    };
    assert_eq!(threads, 1);
    assert_eq!(median_ns, (r.best_us * 1e3).round() as u64);
}
