//! Helpers shared by the integration tests.
use collage_build::backend::BackendId;
use collage_build::driver::Options;

/// For every library backend registered (`BackendId::ALL`) and available here, the options that
/// force it first (`--greedy --backends LIB,c`), so it computes every contraction it can take. A
/// library CI requires (`COLLAGE_REQUIRE_BACKENDS=gemm,blas,dnnl`) but that is missing is a
/// failure, not a skip.
#[allow(dead_code)] // the test crates that share this module use one helper or the other
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

/// The kernel plans the C emitter printed (`/* plan: .. */` before each kernel function), by
/// function name.
#[allow(dead_code)] // the test crates that share this module use one helper or the other
pub fn printed_plans(c_source: &str) -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    let mut plan: Option<&str> = None;
    for line in c_source.lines() {
        if let Some(text) = line.strip_prefix("/* plan: ") {
            plan = Some(text.strip_suffix(" */").expect("a closed comment"));
        } else if let Some(rest) = line.strip_prefix("static void ") {
            if let Some(text) = plan.take() {
                let fname = rest.split('(').next().unwrap().to_string();
                out.insert(fname, text.to_string());
            }
        }
    }
    out
}
