//! `tune` fills a cost cache with one measurement per kernel, resumes without re-measuring, and
//! `explain` reads the measurements back; the cache round-trips through its file.
use std::time::Duration;

use collage_build::report;
use collage_build::tune::measure::{self, MeasureBudget};
use collage_build::tune::{CostCache, TargetFingerprint};

#[test]
fn tune_then_explain_reads_every_kernel_back() {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/mnist/mnist.onnx");
    let g = collage_build::frontend::onnx::load(model.as_ref()).unwrap();
    let c = collage_build::compile_graph(g, "mnist").unwrap();
    let target = TargetFingerprint::current(&collage_build::toolchain::c_compiler_version());
    let dir = std::env::temp_dir().join(format!("collage-tune-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cache.toml");
    let budget = MeasureBudget {
        warmup: 1,
        min_runs: 3,
        min_time: Duration::from_millis(1),
    };
    let mut cache = CostCache::new();
    let mut saves = 0;
    let mut last = (0, 0);
    let n = measure::tune_kernels(
        &c,
        &target,
        &mut cache,
        &dir,
        budget,
        &mut |c| {
            saves += 1;
            c.save(&path).map_err(Into::into)
        },
        &mut |done, total| last = (done, total),
    )
    .unwrap();
    let kernels = report::kernels(&c, &target, None).len();
    assert_eq!(n, kernels);
    assert_eq!(saves, kernels, "saved after every kernel (resumable)");
    assert_eq!(last, (kernels, kernels));
    // Resuming measures nothing new.
    let mut reloaded = CostCache::load_for_target(&path, &target).unwrap();
    let again = measure::tune_kernels(
        &c,
        &target,
        &mut reloaded,
        &dir,
        budget,
        &mut |_| Ok(()),
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(again, 0);
    let reports = report::kernels(&c, &target, Some(&reloaded));
    assert!(reports.iter().all(|k| k
        .measured
        .as_ref()
        .is_some_and(|e| e.median_us > 0.0 && e.p90_us >= e.median_us)));
    let text = report::render_text(&c.name, &reports);
    assert!(
        text.contains(&format!("over {kernels} of {kernels} kernels")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
