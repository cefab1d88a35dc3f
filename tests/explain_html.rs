//! `collage explain --html`: the page for a model placed from a measured cache opens in headless
//! Chromium without errors (`tests/support/check_html.sh`). CI requires Chromium
//! (`COLLAGE_REQUIRE_CHROMIUM=1`); elsewhere a machine without it skips the check.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use collage_build::driver::{self, Options};
use collage_build::tune::CostCache;

#[test]
fn explain_page_opens_in_headless_chromium() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The example's checked-in cache, read for the machine that measured it (whatever this one
    // is), so the page shows the placement those measurements choose.
    let cache = CostCache::load(root.join("examples/mnist/collage-cache.toml")).unwrap();
    let target = cache.targets()[0].clone();
    let opts = Options {
        cache: Some(Arc::new(cache)),
        target: Some(target.clone()),
        ..Options::default()
    };
    let g = collage_build::frontend::onnx::load(&root.join("examples/mnist/mnist.onnx")).unwrap();
    let c = driver::compile(g, "mnist", &opts).unwrap();
    let ks = collage_build::report::kernels(&c, &target, opts.cache.as_deref());
    let page = collage_build::report::html::render(&collage_build::report::html_page(&c, &ks));
    let dir = std::env::temp_dir().join(format!("collage-html-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mnist.html");
    std::fs::write(&path, &page).unwrap();
    let stdout = check_page(&root, &path);
    let _ = std::fs::remove_dir_all(&dir);
    let Some(stdout) = stdout else { return };
    let nodes: usize = stdout
        .trim()
        .trim_start_matches("html ok: ")
        .trim_end_matches(" nodes")
        .parse()
        .unwrap();
    assert_eq!(nodes, c.graph.nodes.len(), "{stdout}");
}

/// `collage explain --profile` / `bench --profile`: a profiled run of the example times every
/// kernel the tuner knows of (`tune::measure::stages`, a row group's members as one) inside the
/// runs, the kernel times add up to
/// no more than the runs they were taken in, and the page with its chart opens in Chromium.
#[test]
fn profile_times_every_kernel_and_the_page_draws_it() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let model = root.join("examples/mnist/mnist.onnx");
    let opts = Options::default();
    let dir = std::env::temp_dir().join(format!("collage-profile-test-{}", std::process::id()));
    let pr = driver::profile::profile(
        &model,
        None,
        2,
        std::time::Duration::from_millis(200),
        &dir.join("work"),
        &opts,
    )
    .unwrap();
    let g = collage_build::frontend::onnx::load(&model).unwrap();
    let c = driver::compile(g, "mnist", &opts).unwrap();
    let mut ids: Vec<_> = pr.kernels.iter().map(|k| k.id).collect();
    ids.sort_unstable();
    // A row group runs as one loop: the profile times it as one kernel, under its last stage.
    let p = &c.program;
    let launched: Vec<_> = collage_build::tune::measure::stages(p)
        .into_iter()
        .filter(|&b| {
            !p.row_groups
                .iter()
                .any(|g| g.stages.contains(&b) && g.last() != b)
        })
        .collect();
    assert_eq!(ids, launched, "{}", driver::profile::render(&pr));
    assert!(pr.kernels.iter().all(|k| k.us > 0.0 && k.flops > 0.0));
    assert!(
        pr.kernels.windows(2).all(|w| w[0].us >= w[1].us),
        "slowest first"
    );
    // The ticks are read inside the timed calls.
    assert!(
        pr.kernel_ms() <= pr.mean_ms * (1.0 + 1e-9),
        "{}",
        driver::profile::render(&pr)
    );
    let text = driver::profile::render(&pr);
    for k in &pr.kernels {
        assert!(text.contains(&format!("k{} ", k.id)), "{text}");
    }
    // No cache: the kernels' keys only need some target.
    let target = collage_build::tune::TargetFingerprint::current("cc");
    let ks = collage_build::report::kernels(&c, &target, None);
    let mut page = collage_build::report::html_page(&c, &ks);
    collage_build::driver::profile::add_to_page(&mut page, &pr);
    let html = collage_build::report::html::render(&page);
    assert!(html.contains("<svg id=\"profile\""));
    assert_eq!(
        html.matches("<g class=\"bar\">").count(),
        pr.kernels.len().min(collage_build::report::html::MAX_BARS)
            + usize::from(pr.kernels.len() > collage_build::report::html::MAX_BARS)
    );
    let path = dir.join("mnist.html");
    std::fs::write(&path, &html).unwrap();
    check_page(&root, &path);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens the page at `path` in headless Chromium (`tests/support/check_html.sh`) and returns
/// what the check printed; `None` where there is no Chromium and CI does not require it.
fn check_page(root: &Path, path: &Path) -> Option<String> {
    let out = Command::new("bash")
        .arg(root.join("tests/support/check_html.sh"))
        .arg(path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) && stderr.contains("no chromium found") {
        assert!(
            std::env::var_os("COLLAGE_REQUIRE_CHROMIUM").is_none(),
            "Chromium is required (COLLAGE_REQUIRE_CHROMIUM) but not installed"
        );
        eprintln!("no Chromium here: the page check is skipped");
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("html ok"),
        "check_html failed ({:?}):\n{stdout}\n{stderr}",
        out.status.code()
    );
    Some(stdout)
}
