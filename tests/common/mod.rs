//! Helpers shared by the integration tests.
use collage_build::pipeline::Options;

/// For every library backend available here, the options that force it first
/// (`--greedy --backends LIB,c`), so it computes every contraction it can take. A library CI
/// requires (`COLLAGE_REQUIRE_BACKENDS=gemm,blas,dnnl`) but that is missing is a failure, not a
/// skip.
pub fn library_first() -> Vec<(&'static str, Options)> {
    let required = std::env::var("COLLAGE_REQUIRE_BACKENDS").unwrap_or_default();
    let mut out = Vec::new();
    for lib in ["gemm", "blas", "dnnl"] {
        if collage_build::backend::by_name(lib).is_none() {
            assert!(
                !required.split(',').any(|b| b == lib),
                "backend {lib} is required (COLLAGE_REQUIRE_BACKENDS) but not available"
            );
            eprintln!("backend {lib} is not available here; skipped");
            continue;
        }
        let opts = Options {
            backends: format!("{lib},c"),
            greedy: true,
            ..Options::default()
        };
        out.push((lib, opts));
    }
    out
}
