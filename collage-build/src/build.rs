//! The build-script facade (filled in below).
use std::path::Path;

/// Placeholder.
pub struct Build;
/// Placeholder.
pub struct Built;

/// The symbol (file key) of a model path, shared by `build.rs` and `model!`.
pub fn symbol_for(path: &str) -> String {
    crate::tools::sanitize(Path::new(path).to_string_lossy().trim_end_matches(".onnx"))
}

impl Build {
    /// Compiles `model` and writes its generated sources to `out`.
    pub fn emit_sources(model: &Path, out: &Path) -> crate::Result<Vec<std::path::PathBuf>> {
        let g = crate::frontend::onnx::load(model)?;
        let c = crate::compile_graph(g, &symbol_for(&model.to_string_lossy()))?;
        std::fs::create_dir_all(out).map_err(crate::error::io_err(out))?;
        let p = out.join(format!("{}.c", c.symbol));
        std::fs::write(&p, &c.c_source).map_err(crate::error::io_err(&p))?;
        Ok(vec![p])
    }
}
