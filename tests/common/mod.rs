//! Helpers shared by the integration tests.
use collage_build::backend::BackendId;
use collage_build::driver::Options;

/// For every library backend registered (`BackendId::ALL`) and available here, the options that
/// force it first (`--greedy --backends LIB,c`), so it computes every contraction it can take. A
/// library CI requires (`COLLAGE_REQUIRE_BACKENDS=gemm,blas,dnnl`) but that is missing is a
/// failure, not a skip.
pub fn library_first() -> Vec<(&'static str, Options)> {
    let required = std::env::var("COLLAGE_REQUIRE_BACKENDS").unwrap_or_default();
    let mut out = Vec::new();
    for id in BackendId::ALL {
        let lib = id.name();
        let backend = match id.lookup() {
            Ok(b) if !b.library() => continue,
            Ok(b) => b,
            Err(why) => {
                assert!(
                    !required.split(',').any(|b| b == lib),
                    "backend {lib} is required (COLLAGE_REQUIRE_BACKENDS): {why}"
                );
                eprintln!("{why}; skipped");
                continue;
            }
        };
        let opts = Options {
            backends: format!("{},c", backend.name()),
            greedy: true,
            ..Options::default()
        };
        out.push((lib, opts));
    }
    out
}
