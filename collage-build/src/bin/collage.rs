//! `collage`: compile, run, test and benchmark models from the command line.
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use std::sync::Arc;

use collage_build::driver::run as tools;
use collage_build::driver::Options;
use collage_build::tune::{CostCache, TargetFingerprint};
use collage_runtime::Executor;

#[derive(Parser)]
#[command(
    name = "collage",
    version,
    about = "Ahead-of-time deep-learning compiler for Rust"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write the generated sources (C kernels, Rust glue, weights, IR) for inspection.
    Compile {
        /// The ONNX model.
        model: PathBuf,
        /// Output folder.
        #[arg(short, long, default_value = "collage-out")]
        out: PathBuf,
        /// The thread count the placement is for (a placement recorded by `collage tune --evolve
        /// --threads N` for it is used).
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Serve one dimension over a range with one set of kernels: `--dim-range width=32..=1024`
        /// (its other symbolic dimensions bound with --dim / --input-shape).
        #[arg(long = "dim-range", value_name = "NAME=LO..=HI", value_parser = collage_build::driver::range::DimRange::parse)]
        dim_range: Option<collage_build::driver::range::DimRange>,
        #[command(flatten)]
        place: PlaceArgs,
    },
    /// Compile and run on `input_<i>.pb` files; write `got_<i>.pb` and compare with `output_<i>.pb`.
    Run {
        /// The ONNX model.
        model: PathBuf,
        /// Folder with `input_<i>.pb` (and optionally `output_<i>.pb`).
        #[arg(long)]
        data: PathBuf,
        /// Threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Serve one dimension over a range with one set of kernels: `--dim-range width=32..=1024`
        /// (its other symbolic dimensions bound with --dim / --input-shape).
        #[arg(long = "dim-range", value_name = "NAME=LO..=HI", value_parser = collage_build::driver::range::DimRange::parse)]
        dim_range: Option<collage_build::driver::range::DimRange>,
        #[command(flatten)]
        place: PlaceArgs,
    },
    /// Run every test listed in DIR/scope.txt (ONNX backend node test layout).
    Conformance {
        /// The test folder.
        dir: PathBuf,
        /// Parallel jobs.
        #[arg(short, long, default_value_t = 2)]
        jobs: usize,
        /// Only tests whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// A file listing expected failures (`test  reason`): they are reported, not counted.
        #[arg(long)]
        expected_failures: Option<PathBuf>,
        /// Every test folder of DIR, not only those scope.txt lists (the whole node suite;
        /// `tests/support/node_suite.py` counts the outcome per category).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        place: PlaceArgs,
    },
    /// Print the placement (every partition: backend, nodes, cost, best alternative) and every
    /// kernel (schedule, estimated and measured cost).
    Explain {
        /// The ONNX model.
        model: PathBuf,
        /// Also write a self-contained HTML page drawing the graph coloured by backend.
        #[arg(long)]
        html: Option<PathBuf>,
        /// Also run the model and time every kernel inside the runs (as `bench --profile`):
        /// the table after the kernels, and a bar chart on the `--html` page
        #[arg(long)]
        profile: bool,
        /// The thread count the placement is for (a placement recorded by `collage tune --evolve
        /// --threads N` for it is used).
        #[arg(long, default_value_t = 1)]
        threads: usize,
        #[command(flatten)]
        place: PlaceArgs,
    },
    /// Measure every kernel missing from the cost cache and add it (resumable: measured kernels
    /// are saved as they finish and skipped next time).
    Tune {
        /// The ONNX model.
        model: PathBuf,
        /// The cost cache to fill (created if missing).
        #[arg(long)]
        cache: PathBuf,
        /// Backends whose candidates are measured (default: every available one).
        #[arg(long, default_value = "")]
        backends: String,
        /// Then refine the placement by end-to-end measurement: evolutionary search seeded with
        /// the search's placement, against the baselines (`c`, `--greedy LIB,c`, the placement
        /// a build without the cache makes); the fastest is
        /// recorded in the cache and used by builds.
        #[arg(long)]
        evolve: bool,
        /// Threads the end-to-end measurements of --evolve run on.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Generations of --evolve.
        #[arg(long, default_value_t = 4)]
        generations: usize,
        /// Placements per generation of --evolve.
        #[arg(long, default_value_t = 6)]
        population: usize,
        /// Seconds --evolve may spend compiling and timing placements (no generation starts
        /// that would end past it; the final rounds follow); 0: no limit.
        #[arg(long, default_value_t = collage_build::driver::EVOLVE_SECONDS)]
        evolve_seconds: f64,
        /// k: `--exhaustive` measures the top k of the model's ranking of every kernel; ETO's
        /// searches from scratch measure k/4 of them, then k/8 around the fastest.
        #[arg(long, default_value_t = 16)]
        top_k: usize,
        /// Tune every kernel's plans from scratch (top-k each), with no reuse between kernels:
        /// the exhaustive baseline ETO is compared with.
        #[arg(long)]
        exhaustive: bool,
        /// Reuse plans between kernels without bridge kernels.
        #[arg(long)]
        no_bridges: bool,
        /// Do not tune plans: measure the default plans only.
        #[arg(long)]
        no_plans: bool,
        /// Stop plan tuning after this many trials (`500`) or seconds (`120s`); the kernels not
        /// reached keep their default plans, and the next run goes on from there.
        #[arg(long)]
        budget: Option<String>,
        #[command(flatten)]
        bind: BindArgs,
    },
    /// Cost cache maintenance.
    Cache {
        #[command(subcommand)]
        cmd: CacheCmd,
    },
    /// Measure latency (median and p90 over at least 3 s).
    Bench {
        /// The ONNX model.
        model: PathBuf,
        /// Threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Raw little-endian f32 input file (default: deterministic pseudo-random data).
        #[arg(long, conflicts_with = "data")]
        input: Option<PathBuf>,
        /// Folder with `input_<i>.pb`, one per input (as `run --data`): real data for models
        /// with several or integer inputs, whose speed can depend on the values (a mask).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Minimum timed seconds.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Time every kernel inside the runs: a table of kernels, slowest first, with their
        /// share of the run, achieved GFLOP/s or GB/s and fraction of the machine's roofline
        #[arg(long)]
        profile: bool,
        /// Serve one dimension over a range with one set of kernels: `--dim-range width=32..=1024`
        /// (its other symbolic dimensions bound with --dim / --input-shape).
        #[arg(long = "dim-range", value_name = "NAME=LO..=HI", value_parser = collage_build::driver::range::DimRange::parse)]
        dim_range: Option<collage_build::driver::range::DimRange>,
        /// With --dim-range: the sizes to time (repeatable; default both ends and the middle),
        /// each against a build bound to it.
        #[arg(long = "at", value_name = "SIZE", requires = "dim_range")]
        at: Vec<usize>,
        #[command(flatten)]
        place: PlaceArgs,
    },
}

/// How kernels are placed on backends.
#[derive(clap::Args, Clone, Debug, Default)]
struct PlaceArgs {
    /// Backends to choose from, in priority order (e.g. `c,gemm`); default: every available one.
    #[arg(long, default_value = "")]
    backends: String,
    /// Fixed-priority placement: every node on the first backend in --backends that supports it
    /// (the baseline the search must beat).
    #[arg(long)]
    greedy: bool,
    /// Cost cache with measurements (from `collage tune`); without it, placement uses the
    /// analytic cost model.
    #[arg(long)]
    cache: Option<PathBuf>,
    /// The largest tensor and activation arena the model may have, in bytes (default 64 GiB,
    /// never more than the target's address space): a larger one is an error naming the node.
    #[arg(long, default_value_t = collage_build::ir::Limits::DEFAULT_CEILING)]
    max_tensor_bytes: u64,
    /// Draw every generated stage's plan at random from this seed (tests the plan space:
    /// results must not change, only speed); the cache's recorded plans are not applied then.
    #[arg(long)]
    schedule_seed: Option<u64>,
    /// Leave weights and convolutions as lowered: no panels, transposed weights or direct
    /// convolutions, and so no groups (debugging).
    #[arg(long)]
    no_layout: bool,
    /// Form no groups (debugging).
    #[arg(long)]
    no_groups: bool,
    /// Keep 3x3 convolutions direct instead of Winograd F(4x4 / 2x2, 3x3) (results closer to
    /// a direct convolution's rounding).
    #[arg(long)]
    no_winograd: bool,
    #[command(flatten)]
    bind: BindArgs,
}

/// Sizes for a model's symbolic input dimensions.
#[derive(clap::Args, Clone, Debug, Default)]
struct BindArgs {
    /// Bind every input dimension named NAME (its ONNX dim_param) to N: `--dim batch=1`
    /// (repeatable).
    #[arg(long = "dim", value_name = "NAME=N", value_parser = collage_build::frontend::onnx::Bindings::parse_dim)]
    dims: Vec<(String, usize)>,
    /// Bind an input to a whole shape, named and unnamed (`?`) dimensions alike:
    /// `--input-shape x=1,3,48,320` (repeatable).
    #[arg(long = "input-shape", value_name = "INPUT=D0,D1,..", value_parser = collage_build::frontend::onnx::Bindings::parse_shape)]
    shapes: Vec<(String, Vec<usize>)>,
}

impl BindArgs {
    fn bindings(&self) -> collage_build::frontend::onnx::Bindings {
        let mut b = collage_build::frontend::onnx::Bindings::new();
        for (k, v) in &self.dims {
            b = b.dim(k.clone(), *v);
        }
        for (k, v) in &self.shapes {
            b = b.input_shape(k.clone(), v.clone());
        }
        b
    }
}

impl PlaceArgs {
    /// [`PlaceArgs::options`] for a model that runs on `threads` threads.
    fn options_for(&self, threads: usize) -> collage_build::Result<Options> {
        Ok(Options {
            threads,
            ..self.options()?
        })
    }

    fn options(&self) -> collage_build::Result<Options> {
        let target = TargetFingerprint::current(&collage_build::toolchain::c_compiler_version());
        let cache = self
            .cache
            .as_ref()
            .map(|p| CostCache::load_for_target(p, &target))
            .transpose()?
            .map(Arc::new);
        Ok(Options {
            backends: self.backends.clone(),
            greedy: self.greedy,
            cache,
            target: Some(target),
            threads: 0,
            max_tensor_bytes: self.max_tensor_bytes,
            schedule_seed: self.schedule_seed,
            no_layout: self.no_layout,
            no_groups: self.no_groups,
            no_winograd: self.no_winograd,
            bindings: self.bind.bindings(),
        })
    }
}

/// `collage cache ...`.
#[derive(Subcommand)]
enum CacheCmd {
    /// Check that a cache file is valid and measured on this machine.
    Check {
        /// The cache.
        file: PathBuf,
    },
    /// Merge two caches, keeping the better-supported entry per key.
    Merge {
        /// First cache.
        a: PathBuf,
        /// Second cache.
        b: PathBuf,
        /// Output file.
        #[arg(short, long)]
        out: PathBuf,
    },
}

/// The scratch folder of a command; `COLLAGE_WORK_DIR` pins it (and keeps it, e.g. for profiling).
fn work_dir(tag: &str) -> PathBuf {
    match std::env::var_os("COLLAGE_WORK_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::temp_dir().join(format!("collage-{tag}-{}", std::process::id())),
    }
}

fn remove_work(dir: &Path) {
    if std::env::var_os("COLLAGE_WORK_DIR").is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Output piped into a command that stops reading early (`collage explain M | head`) ends the
/// process quietly, as with other command-line tools, instead of a panic in `println!` (Rust
/// programs ignore SIGPIPE by default).
#[cfg(unix)]
fn default_sigpipe() {
    extern "C" {
        fn signal(sig: i32, handler: usize) -> usize;
    }
    const SIGPIPE: i32 = 13; // Linux, macOS and the BSDs
    const SIG_DFL: usize = 0;
    // SAFETY: `signal` is the C library's; it runs before any other thread exists.
    unsafe {
        signal(SIGPIPE, SIG_DFL);
    }
}

fn main() -> ExitCode {
    #[cfg(unix)]
    default_sigpipe();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> collage_build::Result<ExitCode> {
    match cli.cmd {
        Cmd::Compile {
            model,
            out,
            threads,
            dim_range,
            place,
        } => {
            let opts = place.options_for(threads)?;
            if let Some(r) = dim_range {
                for f in collage_build::driver::range::emit_sources(&model, &out, &opts, &r)? {
                    println!("wrote {}", f.display());
                }
                return Ok(ExitCode::SUCCESS);
            }
            let written = collage_build::Build::emit_sources_with(&model, &out, &opts)?;
            for f in written {
                println!("wrote {}", f.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run {
            model,
            data,
            threads,
            dim_range,
            place,
        } => {
            let opts = place.options_for(threads)?;
            let work = work_dir("run");
            let exec = Executor::with_threads(threads);
            let checks = match &dim_range {
                Some(r) => {
                    collage_build::driver::range::run_on_data(&model, &data, &work, &exec, &opts, r)
                }
                None => tools::run_on_data(&model, &data, &work, true, &exec, &opts),
            };
            remove_work(&work);
            let mut ok = true;
            for c in checks? {
                if c.pass {
                    println!("PASS {} max_abs_err={:e}", c.name, c.max_abs_err);
                } else {
                    ok = false;
                    println!("FAIL {} max_abs_err={:e}", c.name, c.max_abs_err);
                }
            }
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Cmd::Conformance {
            dir,
            jobs,
            filter,
            expected_failures,
            all,
            place,
        } => {
            let opts = place.options()?;
            let expected = match &expected_failures {
                Some(p) => read_expected(p)?,
                None => Vec::new(),
            };
            let work = work_dir("conformance");
            let results = tools::conformance(&dir, jobs, filter.as_deref(), all, &work, &opts)?;
            remove_work(&work);
            let (mut passed, mut failed, mut xfail, mut xpass) = (0, 0, 0, 0);
            for r in &results {
                let is_expected = expected.iter().any(|n| n == &r.name);
                match (&r.failure, is_expected) {
                    (None, false) => passed += 1,
                    (None, true) => {
                        passed += 1;
                        xpass += 1;
                        println!(
                            "XPASS {} (listed as an expected failure; remove it from the list)",
                            r.name
                        );
                    }
                    (Some(why), true) => {
                        xfail += 1;
                        println!("XFAIL {} {}", r.name, why);
                    }
                    (Some(why), false) => {
                        failed += 1;
                        println!("FAIL {} {}", r.name, why);
                    }
                }
            }
            if !expected.is_empty() {
                println!("{xfail} expected failures, {xpass} unexpected passes");
            }
            println!("{passed} passed, {} failed", failed + xfail);
            Ok(if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Cmd::Explain {
            model,
            html,
            profile,
            threads,
            place,
        } => {
            let opts = place.options_for(threads)?;
            let c = compile(&model, &opts)?;
            let target = opts.target.clone().expect("set by options()");
            let ks = collage_build::report::kernels(&c, &target, opts.cache.as_deref());
            print!("{}", collage_build::report::render_placement(&c));
            print!("{}", collage_build::report::render_text(&c.name, &ks));
            print!(
                "{}",
                collage_build::report::render_groups(&collage_build::report::groups(
                    &c,
                    &collage_build::target::Target::for_build()
                ))
            );
            print!(
                "{}",
                collage_build::report::render_row_groups(&collage_build::report::row_groups(
                    &c,
                    &collage_build::target::Target::for_build()
                ))
            );
            print!(
                "{}",
                collage_build::report::render_tile_graph(
                    &c,
                    &collage_build::target::Target::for_build()
                )
            );
            warn_misses(&c, place.cache.as_deref(), &model, &place.bind);
            let pr = if profile {
                let work = work_dir("profile");
                let pr = collage_build::driver::profile::profile(
                    &model,
                    None,
                    threads,
                    Duration::from_secs(3),
                    &work,
                    &opts,
                );
                remove_work(&work);
                let pr = pr?;
                print!("{}", collage_build::driver::profile::render(&pr));
                Some(pr)
            } else {
                None
            };
            if let Some(path) = html {
                let mut page = collage_build::report::html_page(&c, &ks);
                if let Some(pr) = &pr {
                    collage_build::driver::profile::add_to_page(&mut page, pr);
                }
                std::fs::write(&path, collage_build::report::html::render(&page)).map_err(
                    |source| collage_build::Error::Io {
                        path: path.clone(),
                        source,
                    },
                )?;
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Tune {
            model,
            cache: path,
            backends,
            evolve,
            threads,
            generations,
            population,
            evolve_seconds,
            top_k,
            exhaustive,
            no_bridges,
            no_plans,
            budget,
            bind,
        } => {
            let mut plans = collage_build::tune::plans::PlanTuning {
                top_k: top_k.max(1),
                reuse: !exhaustive,
                bridges: !no_bridges,
                ..Default::default()
            };
            match budget.as_deref().map(str::trim) {
                None => {}
                Some(b) => match b.strip_suffix('s') {
                    Some(secs) => {
                        plans.max_seconds = Some(secs.parse().map_err(|_| {
                            collage_build::Error::Usage(format!(
                                "--budget {b}: expected a number of trials (500) or seconds (120s)"
                            ))
                        })?)
                    }
                    None => {
                        plans.max_trials = Some(b.parse().map_err(|_| {
                            collage_build::Error::Usage(format!(
                                "--budget {b}: expected a number of trials (500) or seconds (120s)"
                            ))
                        })?)
                    }
                },
            }
            let target =
                TargetFingerprint::current(&collage_build::toolchain::c_compiler_version());
            let mut cache = if path.exists() {
                CostCache::load_for_target(&path, &target)?
            } else {
                CostCache::new()
            };
            let mut g = collage_build::frontend::onnx::load_with(&model, &bind.bindings())?;
            collage_build::passes::run(
                &mut g,
                &collage_build::driver::pipeline(&backends, false)?,
            )?;
            let opts = Options {
                backends,
                target: Some(target.clone()),
                ..Options::default()
            };
            let work = work_dir("tune");
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:30}] {pos}/{len} kernels ({eta} left)",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(format!("tuning {}", g.name));
            let evolve = evolve.then(|| collage_build::driver::EvolveSettings {
                params: collage_build::partition::search::EvolveParams {
                    population: population.max(1),
                    generations,
                    ..Default::default()
                },
                seconds: (evolve_seconds > 0.0).then_some(evolve_seconds),
                ..collage_build::driver::EvolveSettings::on(threads)
            });
            let report = collage_build::driver::tune_graph(
                &g,
                &opts,
                &target,
                &mut cache,
                &work,
                (!no_plans).then_some(&plans),
                evolve,
                &mut |cache| cache.save(&path).map_err(Into::into),
                &mut |what, done, total| {
                    bar.set_message(format!("tuning {}: {what}", g.name));
                    bar.set_length(total as u64);
                    bar.set_position(done as u64);
                },
                &mut |line| {
                    bar.finish_and_clear();
                    eprintln!("  {line}")
                },
            );
            bar.finish_and_clear();
            remove_work(&work);
            let report = report?;
            println!("{report}; {} entries in {}", cache.len(), path.display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Cache { cmd } => match cmd {
            CacheCmd::Check { file } => {
                let target =
                    TargetFingerprint::current(&collage_build::toolchain::c_compiler_version());
                let cache = CostCache::load_for_target(&file, &target)?;
                println!(
                    "{}: {} entries, valid for {}",
                    file.display(),
                    cache.len(),
                    target
                );
                Ok(ExitCode::SUCCESS)
            }
            CacheCmd::Merge { a, b, out } => {
                let merged = CostCache::merge(CostCache::load(&a)?, CostCache::load(&b)?);
                merged.save(&out)?;
                println!("wrote {} ({} entries)", out.display(), merged.len());
                Ok(ExitCode::SUCCESS)
            }
        },
        Cmd::Bench {
            model,
            threads,
            json,
            input,
            data,
            seconds,
            profile,
            dim_range,
            at,
            place,
        } => {
            let opts = place.options_for(threads)?;
            let work = work_dir("bench");
            if let Some(r) = dim_range {
                let sizes = if at.is_empty() {
                    vec![r.lo, (r.lo + r.hi) / 2, r.hi]
                } else {
                    at
                };
                let t = collage_build::driver::range::bench(
                    &model,
                    &opts,
                    &r,
                    &sizes,
                    threads,
                    Duration::from_secs_f64(seconds / 3.0),
                    &work,
                );
                remove_work(&work);
                for t in t? {
                    if json {
                        println!("{{\"dim\": {:?}, \"size\": {}, \"ranged_ms\": {}, \"bound_ms\": {}, \"threads\": {threads}}}", r.dim, t.size, t.ranged_ms, t.bound_ms);
                    } else {
                        println!(
                            "{}={}: ranged {:.4} ms, bound {:.4} ms ({:.2}x) ({threads} thread(s))",
                            r.dim,
                            t.size,
                            t.ranged_ms,
                            t.bound_ms,
                            t.ranged_ms / t.bound_ms
                        );
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            let input = match (input, data) {
                (_, Some(d)) => Some(tools::read_inputs(&d)?),
                (Some(p), None) => {
                    let g = collage_build::frontend::onnx::load_with(&model, &opts.bindings)?;
                    let ty = g.ty(g.inputs[0]).clone();
                    Some(vec![tools::read_raw_f32(&p, &ty.shape)?])
                }
                (None, None) => None,
            };
            if profile {
                let pr = collage_build::driver::profile::profile(
                    &model,
                    input,
                    threads,
                    Duration::from_secs_f64(seconds),
                    &work,
                    &opts,
                );
                remove_work(&work);
                let pr = pr?;
                if json {
                    println!("{}", collage_build::driver::profile::to_json(&pr));
                } else {
                    print!("{}", collage_build::driver::profile::render(&pr));
                }
                return Ok(ExitCode::SUCCESS);
            }
            let r = tools::bench(
                &model,
                input,
                threads,
                Duration::from_secs_f64(seconds),
                &work,
                &opts,
            );
            remove_work(&work);
            let r = r?;
            let name = model
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if json {
                println!("{{\"model\": {:?}, \"median_ms\": {}, \"p90_ms\": {}, \"runs\": {}, \"threads\": {}}}", name, r.median_ms, r.p90_ms, r.runs, threads);
            } else {
                println!(
                    "{name}: median {:.4} ms, p90 {:.4} ms over {} runs ({threads} thread(s))",
                    r.median_ms, r.p90_ms, r.runs
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// One warning when placement priced kernels without measurements: how many, and the command
/// that measures them.
fn warn_misses(c: &collage_build::Compiled, cache: Option<&Path>, model: &Path, bind: &BindArgs) {
    // The command to run, with the model's bindings.
    let mut model = model.display().to_string();
    for (k, v) in &bind.dims {
        model.push_str(&format!(" --dim {k}={v}"));
    }
    for (k, v) in &bind.shapes {
        let v: Vec<String> = v.iter().map(|d| d.to_string()).collect();
        model.push_str(&format!(" --input-shape {k}={}", v.join(",")));
    }
    for w in &c.warnings {
        eprintln!("warning: {w}");
    }
    if let Some(msg) = c
        .placement
        .as_ref()
        .and_then(|p| p.miss_warning(cache, &model))
    {
        eprintln!("warning: {msg}");
    }
}

fn compile(model: &Path, opts: &Options) -> collage_build::Result<collage_build::Compiled> {
    let g = collage_build::frontend::onnx::load_with(model, &opts.bindings)?;
    let symbol = collage_build::ir::sanitize(
        model
            .file_stem()
            .map(|s| s.to_string_lossy())
            .as_deref()
            .unwrap_or("model"),
    );
    collage_build::driver::compile(g, &symbol, opts)
}

fn read_expected(p: &Path) -> collage_build::Result<Vec<String>> {
    let text = std::fs::read_to_string(p).map_err(|source| collage_build::Error::Io {
        path: p.into(),
        source,
    })?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect())
}
