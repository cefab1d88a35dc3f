//! The build-script facade: `Build::new().onnx(..).scan(..).compile()`.
use std::path::{Path, PathBuf};

use crate::codegen::Compiled;
use crate::error::{io_err, Error, Result};
use crate::frontend::onnx::Bindings;
use crate::ir::Graph;

/// Compiles models from `build.rs`.
///
/// ```no_run
/// collage_build::Build::new()
///     .onnx("models/mnist.onnx")
///     // an exported model with symbolic dimensions: sizes for them
///     .onnx("models/ocr.onnx")
///     .dim("batch", 1)
///     .input_shape("x", [1, 3, 48, 320])
///     .scan("src")
///     .compile()
///     .unwrap();
/// ```
#[derive(Clone, Debug, Default)]
pub struct Build {
    onnx: Vec<OnnxModel>,
    /// Calls that bind nothing (`dim` before any `onnx`), reported by `compile`.
    misuse: Vec<String>,
    scan: Vec<PathBuf>,
    cost_cache: Option<PathBuf>,
    backends: String,
    greedy: bool,
    no_winograd: bool,
    threads: usize,
    max_tensor_bytes: u64,
    out_dir: Option<PathBuf>,
    manifest_dir: Option<PathBuf>,
    cargo: bool,
}

/// An ONNX model to compile, with sizes for its symbolic dimensions.
#[derive(Clone, Debug)]
struct OnnxModel {
    path: PathBuf,
    bindings: Bindings,
    /// A dimension compiled at each of these sizes, one variant each.
    variants: Option<(String, Vec<usize>)>,
    /// A dimension served over a range of sizes by one set of kernels.
    range: Option<crate::driver::range::DimRange>,
}

impl OnnxModel {
    /// The model's graph, or one per variant.
    fn graphs(&self, full: &Path) -> Result<Vec<(Option<String>, Graph)>> {
        let Some((dim, sizes)) = &self.variants else {
            return Ok(vec![(
                None,
                crate::frontend::onnx::load_with(full, &self.bindings)?,
            )]);
        };
        if sizes.is_empty() {
            return Err(Error::Model {
                model: full.display().to_string(),
                detail: format!("Build::variants(\"{dim}\", ..) lists no sizes"),
            });
        }
        let mut out = Vec::new();
        for &n in sizes {
            let suffix = format!("{}_{n}", crate::ir::sanitize(dim));
            if out.iter().any(|(s, _)| s == &Some(suffix.clone())) {
                return Err(Error::Model {
                    model: full.display().to_string(),
                    detail: format!("Build::variants(\"{dim}\", ..) lists the size {n} twice"),
                });
            }
            let b = self.bindings.clone().dim(dim.clone(), n);
            out.push((Some(suffix), crate::frontend::onnx::load_with(full, &b)?));
        }
        Ok(out)
    }
}

/// A model to compile: its file key, where it comes from, and its graphs (one per variant, with
/// the variant's method suffix).
type Job = (String, String, Result<Vec<(Option<String>, Graph)>>);

/// A model served over a range of a dimension: its file key, where it comes from, its file,
/// its other bindings and the range.
type RangedJob = (
    String,
    String,
    PathBuf,
    Bindings,
    crate::driver::range::DimRange,
);

/// One model compiled by [`Build::compile`].
#[derive(Clone, Debug)]
pub struct BuiltModel {
    /// The model name (ONNX graph name or DSL type name).
    pub name: String,
    /// The symbol: generated files are `$OUT_DIR/collage/<symbol>.{rs,c,weights}`.
    pub symbol: String,
    /// Arena bytes.
    pub arena_size: usize,
    /// Weight bytes.
    pub weight_bytes: usize,
    /// The generated files.
    pub files: Vec<PathBuf>,
}

/// What [`Build::compile`] produced.
#[derive(Clone, Debug, Default)]
pub struct Built {
    /// Every compiled model.
    pub models: Vec<BuiltModel>,
}

/// The symbol (file key) of a model path, shared by `build.rs` and `model!`: the path as written,
/// without `.onnx`, with every non-alphanumeric character replaced by `_`.
pub fn symbol_for(path: &str) -> String {
    crate::ir::sanitize(path.trim_end_matches(".onnx"))
}

impl Build {
    /// A build for the current Cargo package (paths are relative to `CARGO_MANIFEST_DIR`; outputs go
    /// to `$OUT_DIR/collage`).
    pub fn new() -> Self {
        Build {
            cargo: true,
            ..Default::default()
        }
    }

    /// Compiles an ONNX model; bind it with `collage::model!(Name = "<same path>")`.
    pub fn onnx(mut self, path: impl Into<PathBuf>) -> Self {
        self.onnx.push(OnnxModel {
            path: path.into(),
            bindings: Bindings::new(),
            variants: None,
            range: None,
        });
        self
    }

    /// The model added last by [`Build::onnx`], or a misuse noted for `compile`.
    fn last(&mut self, call: &str) -> Option<&mut OnnxModel> {
        if self.onnx.is_empty() {
            self.misuse.push(format!(
                "Build::{call} binds a dimension of the model added last by .onnx(..), and none was added before it"
            ));
        }
        self.onnx.last_mut()
    }

    /// Binds every input dimension named `name` (its ONNX `dim_param`) of the model added last
    /// by [`Build::onnx`] to `size`: `.onnx("ocr.onnx").dim("batch", 1)`.
    pub fn dim(mut self, name: &str, size: usize) -> Self {
        if let Some(m) = self.last("dim") {
            m.bindings.dims.insert(name.to_string(), size);
        }
        self
    }

    /// Binds the input `name` of the model added last by [`Build::onnx`] to `shape` (named or
    /// unnamed `?` dimensions alike; its static dimensions must agree):
    /// `.onnx("ocr.onnx").input_shape("x", [1, 3, 48, 320])`.
    pub fn input_shape(mut self, name: &str, shape: impl AsRef<[usize]>) -> Self {
        if let Some(m) = self.last("input_shape") {
            m.bindings
                .shapes
                .insert(name.to_string(), shape.as_ref().to_vec());
        }
        self
    }

    /// Compiles the model added last by [`Build::onnx`] once for each of `sizes` of its
    /// dimension `dim` (a `dim_param`): one `Model` type with a method per size,
    /// `run_<dim>_<size>` (`run_batch_8`), sharing one arena (the largest variant's) and one copy
    /// of the weights. `.onnx("ocr.onnx").variants("batch", [1, 8, 32])`.
    pub fn variants(mut self, dim: &str, sizes: impl AsRef<[usize]>) -> Self {
        if let Some(m) = self.last("variants") {
            m.variants = Some((dim.to_string(), sizes.as_ref().to_vec()));
        }
        self
    }

    /// Serves the dimension `dim` (a `dim_param`) of the model added last by [`Build::onnx`]
    /// over `sizes` with one set of kernels whose extent along it is read at run time, the
    /// arena planned for the largest size: `.onnx("ocr.onnx").dim("height", 32)
    /// .dim_range("width", 32..=1024)`. Its `Model::run` takes each input as a slice with its
    /// run-time shape and returns each output with its shape; a size outside the range is an
    /// error. Bind the model's other symbolic dimensions to sizes.
    pub fn dim_range(mut self, dim: &str, sizes: std::ops::RangeInclusive<usize>) -> Self {
        match crate::driver::range::DimRange::new(dim, *sizes.start(), *sizes.end()) {
            Ok(r) => {
                if let Some(m) = self.last("dim_range") {
                    m.range = Some(r);
                }
            }
            Err(e) => self.misuse.push(format!("Build::dim_range: {e}")),
        }
        self
    }

    /// Compiles every `model! { .. }` DSL block found in `.rs` files under `dir`.
    pub fn scan(mut self, dir: impl Into<PathBuf>) -> Self {
        self.scan.push(dir.into());
        self
    }

    /// The checked-in cost cache the placement search reads (read-only during normal builds).
    pub fn cost_cache(mut self, path: impl Into<PathBuf>) -> Self {
        self.cost_cache = Some(path.into());
        self
    }

    /// Restricts placement to these backends, in priority order (`"c,gemm"`); default: every
    /// backend available on the build machine (`c`, `gemm`, and `blas` / `dnnl` when their
    /// libraries link).
    pub fn backends(mut self, list: &str) -> Self {
        self.backends = list.to_string();
        self
    }

    /// Fixed-priority placement instead of the search (see `collage compile --greedy`).
    pub fn greedy(mut self, on: bool) -> Self {
        self.greedy = on;
        self
    }

    /// Whether 3x3 convolutions may run as Winograd F(4x4 / 2x2, 3x3) on the generated code
    /// (default on; see `collage compile --no-winograd`).
    pub fn winograd(mut self, on: bool) -> Self {
        self.no_winograd = !on;
        self
    }

    /// The thread count the models will mostly run on (default one): a placement that
    /// `collage tune --evolve --threads N` recorded in the cost cache for this count is used.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }

    /// The largest tensor and activation arena a model may have, in bytes (default 64 GiB; never
    /// more than the target's address space). A model file is untrusted input: one whose sizes
    /// exceed this is an error naming the node and the size, not a build that allocates them.
    pub fn max_tensor_bytes(mut self, bytes: u64) -> Self {
        self.max_tensor_bytes = bytes;
        self
    }

    /// Overrides `$OUT_DIR` (for use outside build scripts).
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Overrides `$CARGO_MANIFEST_DIR`.
    pub fn manifest_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.manifest_dir = Some(dir.into());
        self
    }

    /// Generates sources only: no C compilation and no `cargo:` lines (for tests and inspection).
    pub fn sources_only(mut self) -> Self {
        self.cargo = false;
        self
    }

    fn root(&self) -> PathBuf {
        self.manifest_dir
            .clone()
            .or_else(|| std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("."))
    }

    /// Compiles every model. All errors are collected and returned together.
    pub fn compile(self) -> Result<Built> {
        let root = self.root();
        let out = self
            .out_dir
            .clone()
            .or_else(|| std::env::var_os("OUT_DIR").map(PathBuf::from))
            .ok_or_else(|| Error::Model {
                model: "*".into(),
                detail: "OUT_DIR is not set: call compile() from build.rs or set out_dir()".into(),
            })?
            .join("collage");
        std::fs::create_dir_all(&out).map_err(io_err(&out))?;
        let target =
            crate::tune::TargetFingerprint::current(&crate::toolchain::c_compiler_version());
        let mut opts = crate::driver::Options {
            backends: self.backends.clone(),
            greedy: self.greedy,
            cache: None,
            target: Some(target.clone()),
            threads: self.threads,
            max_tensor_bytes: self.max_tensor_bytes,
            schedule_seed: None,
            no_layout: false,
            no_groups: false,
            no_winograd: self.no_winograd,
            bindings: Bindings::default(),
        };
        if !self.misuse.is_empty() {
            return Err(Error::Model {
                model: "*".into(),
                detail: self.misuse.join("; "),
            });
        }
        let mut cache_path = None;
        if let Some(cache) = &self.cost_cache {
            let path = root.join(cache);
            self.rerun(&path);
            if path.exists() {
                // A corrupt cache is an error; one measured on other machines only is not (a
                // crate's checked-in cache must not break its users' builds): it is ignored with
                // a warning, and placement falls back to the analytic model.
                match crate::tune::CostCache::load_for_target(&path, &target) {
                    Ok(c) => opts.cache = Some(std::sync::Arc::new(c)),
                    Err(e @ crate::tune::CacheError::ForeignTarget { .. }) => self.warn(&format!(
                        "{e}; placement uses the analytic cost model (add this machine's measurements with COLLAGE_TUNE=1 cargo build)"
                    )),
                    Err(e) => return Err(e.into()),
                }
            }
            cache_path = Some(path);
        }
        let mut jobs: Vec<Job> = Vec::new();
        let mut ranged: Vec<RangedJob> = Vec::new();
        for m in &self.onnx {
            let full = root.join(&m.path);
            self.rerun(&full);
            // A bound model's label names its sizes (and so is not offered a `collage tune`
            // command line without them).
            let mut label = full.display().to_string();
            if !m.bindings.is_empty() || m.variants.is_some() {
                let mut sizes = m.bindings.key();
                if let Some((d, n)) = &m.variants {
                    let n: Vec<String> = n.iter().map(|n| n.to_string()).collect();
                    sizes = format!("{sizes};{d} in {}", n.join(","));
                }
                label = format!("{label} ({})", sizes.trim_start_matches(';'));
            }
            let symbol = symbol_for(&m.path.to_string_lossy());
            if let Some(r) = &m.range {
                if m.variants.is_some() {
                    return Err(Error::Model {
                        model: label,
                        detail: "Build::variants and Build::dim_range on one model: serve one dimension over a range, or compile it per size".into(),
                    });
                }
                let label = format!("{label} ({}={}..={})", r.dim, r.lo, r.hi);
                ranged.push((symbol, label, full, m.bindings.clone(), r.clone()));
                continue;
            }
            jobs.push((symbol, label, m.graphs(&full)));
        }
        for dir in &self.scan {
            let full = root.join(dir);
            self.rerun(&full);
            for (file, found) in crate::frontend::dsl::scan_dir(&full)? {
                self.rerun(&file);
                for m in found {
                    let label = file.display().to_string();
                    jobs.push(match m {
                        Ok(m) if m.range().is_some() => {
                            let (Some((path, b)), Some((d, lo, hi))) = (m.onnx(), m.range()) else {
                                unreachable!("a range binds an ONNX model")
                            };
                            if ranged.iter().any(|j| j.0 == m.symbol()) {
                                continue;
                            }
                            let full = root.join(path);
                            self.rerun(&full);
                            let r =
                                crate::driver::range::DimRange::new(d, lo, hi).map_err(|e| {
                                    Error::Model {
                                        model: full.display().to_string(),
                                        detail: e,
                                    }
                                })?;
                            let label = format!(
                                "{} (model! in {label}, {})",
                                full.display(),
                                crate::frontend::dsl::ranged_key(&b.key(), d, lo, hi)
                            );
                            ranged.push((m.symbol(), label, full, b.clone(), r));
                            continue;
                        }
                        Ok(m) => {
                            // The same model bound to the same sizes in two `model!`s is
                            // one set of files that both include.
                            if m.onnx().is_some() && jobs.iter().any(|j| j.0 == m.symbol()) {
                                continue;
                            }
                            let label = match m.onnx() {
                                Some((path, b)) => {
                                    let full = root.join(path);
                                    self.rerun(&full);
                                    format!("{} (model! in {label}, {})", full.display(), b.key())
                                }
                                None => label,
                            };
                            (
                                m.symbol(),
                                label,
                                m.to_graph(&root).map(|g| vec![(None, g)]),
                            )
                        }
                        Err(e) => ("dsl".into(), label, Err(e)),
                    });
                }
            }
        }
        // `COLLAGE_TUNE=1 cargo build`: measure what the placement needs and update the cache
        // first (works for DSL models too, which `collage tune` cannot read);
        // `COLLAGE_TUNE=evolve` also refines the placement end to end (`collage tune --evolve`)
        // for the thread count of `threads()`.
        let tune_var = std::env::var("COLLAGE_TUNE").unwrap_or_default();
        let tune = !tune_var.is_empty() && tune_var != "0";
        let evolve = tune_var == "evolve";
        if self.cargo {
            println!("cargo:rerun-if-env-changed=COLLAGE_TUNE");
        }
        if tune && cache_path.is_none() {
            self.warn(
                "COLLAGE_TUNE is set but this build has no cost cache to measure into: add .cost_cache(\"collage-cache.toml\") to collage_build::Build in build.rs",
            );
        }
        if let (true, Some(path)) = (tune, &cache_path) {
            // Keep other machines' entries: the file may hold several targets.
            let mut cache = if path.exists() {
                crate::tune::CostCache::load(path)?
            } else {
                crate::tune::CostCache::new()
            };
            for (_, label, gs) in &jobs {
                let Ok(gs) = gs else { continue };
                for (_, g) in gs {
                    self.tune_one(
                        g.clone(),
                        label,
                        &out,
                        &opts,
                        &target,
                        &mut cache,
                        path,
                        evolve,
                    )?;
                }
            }
            opts.cache = Some(std::sync::Arc::new(cache));
        }
        let mut built = Built::default();
        let mut errors = Vec::new();
        let mut misses = Vec::new();
        // Two models written to the same files would overwrite each other.
        let mut symbols = std::collections::BTreeMap::new();
        let labels = jobs
            .iter()
            .map(|j| (&j.0, &j.1))
            .chain(ranged.iter().map(|j| (&j.0, &j.1)));
        for (symbol, label) in labels {
            if let Some(first) = symbols.insert(symbol.clone(), label.clone()) {
                errors.push(Error::Model {
                    model: label.clone(),
                    detail: format!("compiled twice ({first} too): each model is added once"),
                });
            }
        }
        for (symbol, label, g) in jobs {
            match g.and_then(|g| self.compile_one(g, &symbol, &label, &out, &opts)) {
                Ok((m, warning)) => {
                    misses.extend(warning);
                    built.models.push(m)
                }
                Err(e) => errors.push(e),
            }
        }
        for (symbol, label, full, bindings, range) in &ranged {
            match self.compile_ranged_one(symbol, label, full, bindings, range, &out, &opts) {
                Ok(m) => built.models.push(m),
                Err(e) => errors.push(e),
            }
        }
        // One warning for the whole build: the kernels priced without measurements and the
        // command that measures them.
        if !misses.is_empty() && cache_path.is_some() {
            let cache = cache_path.as_ref().map_or("a cost cache".to_string(), |p| {
                if p.exists() {
                    format!("the cost cache {}", p.display())
                } else {
                    format!("the cost cache {} (missing)", p.display())
                }
            });
            let n: usize = misses.iter().map(|(n, _)| n).sum();
            let file = cache_path
                .as_ref()
                .map_or("collage-cache.toml".to_string(), |p| {
                    p.display().to_string()
                });
            // The CLI reads ONNX files only; `COLLAGE_TUNE=1` covers every model and needs
            // nothing beyond the build itself.
            let cli: Vec<String> = misses
                .iter()
                .filter(|(_, m)| m.ends_with(".onnx"))
                .map(|(_, m)| format!("collage tune {m} --cache {file}"))
                .collect();
            let cli = if cli.is_empty() {
                String::new()
            } else {
                format!(", or with the CLI: {}", cli.join(" && "))
            };
            self.warn(&format!(
                "{n} kernel costs are not in {cache}; placement used the analytic cost model for them. Measure them with `COLLAGE_TUNE=1 cargo build --release` (nothing else to install){cli}"
            ));
        }
        for e in &errors {
            self.warn(&e.to_string());
        }
        match errors.len() {
            0 => Ok(built),
            1 => Err(errors.pop().unwrap()),
            _ => Err(Error::Model {
                model: "*".into(),
                detail: errors
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n"),
            }),
        }
    }

    /// A `cargo:warning` line (one per line of `msg`) when running under Cargo.
    fn warn(&self, msg: &str) {
        if self.cargo {
            for line in msg.lines() {
                println!("cargo:warning=collage: {line}");
            }
        }
    }

    fn rerun(&self, p: &Path) {
        if self.cargo {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }

    /// Measures every kernel the placement of `g` may need (candidates, then the chosen
    /// placement's kernels) that `cache` lacks, saving the cache to `path` as it goes.
    #[allow(clippy::too_many_arguments)]
    fn tune_one(
        &self,
        mut g: Graph,
        label: &str,
        out: &Path,
        opts: &crate::driver::Options,
        target: &crate::tune::TargetFingerprint,
        cache: &mut crate::tune::CostCache,
        path: &Path,
        evolve: bool,
    ) -> Result<()> {
        g.limits = opts.limits();
        crate::passes::run(
            &mut g,
            &crate::driver::pipeline(&opts.backends, opts.no_winograd)?,
        )?;
        let report = crate::driver::tune_graph(
            &g,
            opts,
            target,
            cache,
            &out.join("tune"),
            Some(&crate::tune::plans::PlanTuning::default()),
            evolve.then(|| crate::driver::EvolveSettings::on(self.threads)),
            &mut |c| c.save(path).map_err(Into::into),
            &mut |_, _, _| {},
            &mut |_| {},
        )?;
        self.warn(&format!(
            "COLLAGE_TUNE: {label} into {}: {report}",
            path.display()
        ));
        Ok(())
    }

    /// Compiles one model (each of its variants); also returns (kernels priced without
    /// measurement, model source) when there were any.
    fn compile_one(
        &self,
        graphs: Vec<(Option<String>, Graph)>,
        symbol: &str,
        source: &str,
        out: &Path,
        opts: &crate::driver::Options,
    ) -> Result<(BuiltModel, Option<(usize, String)>)> {
        let source = source.to_string();
        let mut cs = Vec::new();
        let mut suffixes = Vec::new();
        for (suffix, g) in graphs {
            let sym = match &suffix {
                Some(s) => format!("{symbol}_{s}"),
                None => symbol.to_string(),
            };
            cs.push(crate::driver::compile(g, &sym, opts)?);
            suffixes.push(suffix);
        }
        let misses: usize = cs
            .iter()
            .filter_map(|c| c.placement.as_ref())
            .map(|p| p.misses)
            .sum();
        for w in cs.iter().flat_map(|c| &c.warnings) {
            self.warn(&format!("model {source}: {w}"));
        }
        let misses = (misses > 0).then_some((misses, source));
        let (files, c_files, weight_bytes) =
            if suffixes.iter().all(Option::is_none) && cs.len() == 1 {
                let files = write_sources(&cs[0], out)?;
                let c = vec![files[1].clone()];
                (files, c, cs[0].weights.len())
            } else {
                let names: Vec<&str> = suffixes
                    .iter()
                    .map(|s| s.as_deref().unwrap_or(""))
                    .collect();
                write_variant_sources(symbol, &names, &mut cs, out)?
            };
        let c = &cs[0];
        if self.cargo {
            let mut libs: Vec<String> = cs
                .iter()
                .flat_map(|c| crate::toolchain::link_libs(&c.c_source))
                .collect();
            libs.sort_unstable();
            libs.dedup();
            for lib in libs {
                println!("cargo:rustc-link-lib={lib}");
            }
            self.cc_compile(symbol, &c_files)?;
        }
        Ok((
            BuiltModel {
                name: c.name.clone(),
                symbol: symbol.to_string(),
                arena_size: cs.iter().map(|c| c.arena_size).max().unwrap_or(0),
                weight_bytes,
                files,
            },
            misses,
        ))
    }

    /// Compiles the generated C of model `symbol` (`c_files`) into the crate (Cargo only).
    fn cc_compile(&self, symbol: &str, c_files: &[PathBuf]) -> Result<()> {
        cc::Build::new()
            .files(c_files)
            .std("c99")
            .opt_level(3)
            .flag_if_supported("-fno-math-errno")
            .flag_if_supported("-fno-trapping-math")
            .flag_if_supported("-ffp-contract=fast")
            .flag_if_supported("-fopenmp-simd")
            .warnings(false)
            .try_compile(&format!("collage_{symbol}"))
            .map_err(|e| Error::CCompile {
                path: c_files[0].clone(),
                detail: e.to_string(),
            })
    }

    /// Compiles the model `full` served over `range` (its other dimensions bound by
    /// `bindings`) and writes its glue, C and weights.
    #[allow(clippy::too_many_arguments)]
    fn compile_ranged_one(
        &self,
        symbol: &str,
        label: &str,
        full: &Path,
        bindings: &Bindings,
        range: &crate::driver::range::DimRange,
        out: &Path,
        opts: &crate::driver::Options,
    ) -> Result<BuiltModel> {
        let opts = crate::driver::Options {
            bindings: bindings.clone(),
            ..opts.clone()
        };
        let r =
            crate::driver::range::compile_ranged(full, &opts, range, symbol).map_err(
                |e| match e {
                    Error::Model { detail, .. } => Error::Model {
                        model: label.to_string(),
                        detail,
                    },
                    e => e,
                },
            )?;
        let c = &r.compiled;
        let weights_file = format!("{symbol}.weights");
        let glue = crate::codegen::rust::emit_ranged(c, &r.ranged, &weights_file);
        let c_file = out.join(format!("{symbol}.c"));
        let files = vec![
            (out.join(format!("{symbol}.rs")), glue.into_bytes()),
            (out.join(&weights_file), c.weights.clone()),
            (c_file.clone(), c.c_source.clone().into_bytes()),
        ];
        write_if_changed(&files)?;
        if self.cargo {
            self.cc_compile(symbol, &[c_file])?;
        }
        Ok(BuiltModel {
            name: c.name.clone(),
            symbol: symbol.to_string(),
            arena_size: c.arena_size,
            weight_bytes: c.weights.len(),
            files: files.into_iter().map(|(p, _)| p).collect(),
        })
    }

    /// Compiles `model` and writes its generated sources (glue, C, weights, text IR) to `out`.
    pub fn emit_sources(model: &Path, out: &Path) -> Result<Vec<PathBuf>> {
        Self::emit_sources_with(model, out, &crate::driver::Options::default())
    }

    /// [`Build::emit_sources`] with explicit placement options.
    pub fn emit_sources_with(
        model: &Path,
        out: &Path,
        opts: &crate::driver::Options,
    ) -> Result<Vec<PathBuf>> {
        let g = crate::frontend::onnx::load_with(model, &opts.bindings)?;
        let symbol = symbol_for(
            &model
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        let c = crate::driver::compile(g, &symbol, opts)?;
        for w in &c.warnings {
            eprintln!("warning: {w}");
        }
        std::fs::create_dir_all(out).map_err(io_err(out))?;
        let mut files = write_sources(&c, out)?;
        let ir = out.join(format!("{symbol}.ir.txt"));
        std::fs::write(&ir, c.graph.to_string()).map_err(io_err(&ir))?;
        files.push(ir);
        Ok(files)
    }
}

/// Writes the variants of one model: `<symbol>.rs` (one `Model` type with a method per
/// variant, `run_<suffix>`), one weight blob `<symbol>.weights` the variants share
/// ([`crate::codegen::share_weights`], which prints each variant's C again for it, in `cs`), and
/// `<symbol>_<suffix>.c` per variant. Returns every file written, the C files and the blob's size.
pub fn write_variant_sources(
    symbol: &str,
    suffixes: &[&str],
    cs: &mut [Compiled],
    out: &Path,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>, usize)> {
    let blob = crate::codegen::share_weights(cs);
    let weights_file = format!("{symbol}.weights");
    let name = cs.first().map_or(symbol, |c| c.name.as_str());
    let refs: Vec<(Option<&str>, &Compiled)> =
        suffixes.iter().map(|s| Some(*s)).zip(cs.iter()).collect();
    let glue = crate::codegen::rust::emit_variants(name, &refs, blob.len(), &weights_file);
    let blob_len = blob.len();
    let mut files = vec![
        (out.join(format!("{symbol}.rs")), glue.into_bytes()),
        (out.join(&weights_file), blob),
    ];
    files.extend(cs.iter().map(|c| {
        (
            out.join(format!("{}.c", c.symbol)),
            c.c_source.clone().into_bytes(),
        )
    }));
    write_if_changed(&files)?;
    let c_files = files[2..].iter().map(|(p, _)| p.clone()).collect();
    Ok((
        files.into_iter().map(|(p, _)| p).collect(),
        c_files,
        blob_len,
    ))
}

/// Writes each file whose contents differ, keeping the mtime of unchanged files so Cargo and cc
/// do not rebuild needlessly.
fn write_if_changed(files: &[(PathBuf, Vec<u8>)]) -> Result<()> {
    for (p, bytes) in files {
        if std::fs::read(p).ok().as_deref() != Some(bytes.as_slice()) {
            std::fs::write(p, bytes).map_err(io_err(p))?;
        }
    }
    Ok(())
}

/// Writes `<symbol>.rs`, `<symbol>.c` and `<symbol>.weights` to `out`.
pub fn write_sources(c: &Compiled, out: &Path) -> Result<Vec<PathBuf>> {
    let weights_file = format!("{}.weights", c.symbol);
    let files = [
        (
            out.join(format!("{}.rs", c.symbol)),
            crate::codegen::rust::emit(c, &weights_file).into_bytes(),
        ),
        (
            out.join(format!("{}.c", c.symbol)),
            c.c_source.clone().into_bytes(),
        ),
        (out.join(&weights_file), c.weights.clone()),
    ];
    write_if_changed(&files)?;
    Ok(files.into_iter().map(|(p, _)| p).collect())
}
