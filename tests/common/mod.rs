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

/// The graph of the one `model!` block in `source` (a snippet file at `path`), with the weights
/// its `# weights name: [dims], ...` comment lines declare written to `work/weights.safetensors`
/// (pseudo-random in [-1, 1)).
#[allow(dead_code)] // the test crates that share this module use one helper or the other
pub fn snippet_graph(
    path: &std::path::Path,
    source: &str,
    work: &std::path::Path,
) -> collage_build::ir::Graph {
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for line in source.lines() {
        let Some(decl) = line.trim_start().strip_prefix("# weights ") else {
            continue;
        };
        for item in decl.split("],") {
            let (name, dims) = item.split_once(':').unwrap();
            let dims: Vec<usize> = dims
                .trim()
                .trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .map(|d| d.trim().parse().unwrap())
                .collect();
            let n: usize = dims.iter().product();
            let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ tensors.len() as u64;
            let data: Vec<u8> = (0..n)
                .flat_map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0).to_le_bytes()
                })
                .collect();
            tensors.push((name.trim().to_string(), dims, data));
        }
    }
    if !tensors.is_empty() {
        let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
            .iter()
            .map(|(n, d, b)| {
                let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, d.clone(), b)
                    .unwrap();
                (n.clone(), v)
            })
            .collect();
        safetensors::serialize_to_file(views, &None, &work.join("weights.safetensors")).unwrap();
    }
    let found = collage_build::frontend::dsl::parse_source(source, path);
    assert_eq!(found.len(), 1, "{}: one model! block", path.display());
    let found = found.into_iter().next().unwrap().unwrap();
    found.to_graph(work).unwrap()
}
