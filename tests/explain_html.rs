//! `collage explain --html`: the page for a model placed from a measured cache opens in headless
//! Chromium without errors (`tests/support/check_html.sh`). CI requires Chromium
//! (`COLLAGE_REQUIRE_CHROMIUM=1`); elsewhere a machine without it skips the check.
use std::path::PathBuf;
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
    let out = Command::new("bash")
        .arg(root.join("tests/support/check_html.sh"))
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) && stderr.contains("no chromium found") {
        assert!(
            std::env::var_os("COLLAGE_REQUIRE_CHROMIUM").is_none(),
            "Chromium is required (COLLAGE_REQUIRE_CHROMIUM) but not installed"
        );
        eprintln!("no Chromium here: the page check is skipped");
        return;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("html ok"),
        "check_html failed ({:?}):\n{stdout}\n{stderr}",
        out.status.code()
    );
    let nodes: usize = stdout
        .trim()
        .trim_start_matches("html ok: ")
        .trim_end_matches(" nodes")
        .parse()
        .unwrap();
    assert_eq!(nodes, c.graph.nodes.len(), "{stdout}");
}
