//! Placement on real models: the `c` backend's rule proposes fused candidates, the analytic model
//! prices them, and the search returns an exact cover of the graph.
use std::path::{Path, PathBuf};

use collage_build::backend;
use collage_build::partition::place::{analytic_cost, node_work, place};
use collage_build::partition::search::{SearchLimits, StopReason};

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
