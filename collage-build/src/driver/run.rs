//! The work behind the CLI: running models on `.pb` data, the conformance runner, the benchmark.
use crate::driver::Options;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use collage_runtime::Executor;
use prost::Message;

use crate::error::{io_err, Error, OpError, Result};
use crate::frontend::onnx::{self, proto::TensorProto, tensor_from_proto, tensor_to_proto};
use crate::ir::{sanitize, DType, Graph, Tensor};
use crate::native::NativeModel;
use crate::tensor::{compare, pseudo_random};

/// Reads an ONNX `TensorProto` file.
pub fn read_pb(path: &Path) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    let t = TensorProto::decode(bytes.as_slice()).map_err(|e| Error::Decode {
        path: path.into(),
        detail: e.to_string(),
    })?;
    tensor_from_proto(&t, path.parent().unwrap_or(Path::new("."))).map_err(|detail| Error::Decode {
        path: path.into(),
        detail,
    })
}

/// Writes an ONNX `TensorProto` file.
pub fn write_pb(path: &Path, t: &Tensor, name: &str) -> Result<()> {
    std::fs::write(path, tensor_to_proto(t, name).encode_to_vec()).map_err(io_err(path))
}

/// Replaces graph input `name` by the constant `t` (to specialise value-dependent shapes).
pub fn bind_input(g: &mut Graph, name: &str, t: Tensor) -> Result<()> {
    let pos = g
        .inputs
        .iter()
        .position(|&v| g.value(v).name == name)
        .ok_or_else(|| Error::Data {
            name: name.into(),
            detail: "no such graph input".into(),
        })?;
    let v = g.inputs.remove(pos);
    let vd = g.value_mut(v);
    if vd.ty.as_ref() != Some(&t.ty) {
        return Err(Error::Data {
            name: name.into(),
            detail: format!(
                "expected {}, got {}",
                vd.ty.as_ref().map(|t| t.to_string()).unwrap_or_default(),
                t.ty
            ),
        });
    }
    vd.konst = Some(std::sync::Arc::new(t));
    Ok(())
}

/// A compiled model plus which of its original inputs were bound to constants.
pub struct Loaded {
    /// The loaded model.
    pub model: NativeModel,
    /// Original input positions still taken at run time.
    pub runtime_inputs: Vec<usize>,
    /// Names of inputs bound to the given data because shapes depend on their values.
    pub bound: Vec<String>,
    /// What the compiler made of it.
    pub compiled: crate::codegen::Compiled,
}

/// Compiles `model` for running here. If a shape depends on the value of a graph input and `data`
/// has a value for it, the input is bound to that value (Collage compiles static shapes) and the
/// compile is retried.
pub fn load_model(
    model: &Path,
    data: Option<&[Tensor]>,
    work: &Path,
    opt: &str,
    opts: &Options,
) -> Result<Loaded> {
    load_model_with(model, data, work, opt, opts, false)
}

/// [`load_model`], `profiled` a build that times every kernel ([`NativeModel::build_with`]).
pub fn load_model_with(
    model: &Path,
    data: Option<&[Tensor]>,
    work: &Path,
    opt: &str,
    opts: &Options,
    profiled: bool,
) -> Result<Loaded> {
    // Inputs whose shapes neither the model nor the bindings fix take the shapes of the data.
    let mut bindings = opts.bindings.clone();
    if let Some(data) = data {
        for (n, t) in onnx::input_names(model)?.into_iter().zip(data) {
            bindings
                .shapes
                .entry(n)
                .or_insert_with(|| t.ty.shape.clone());
        }
    }
    let g0 = onnx::load_with(model, &bindings)?;
    let names: Vec<String> = g0
        .inputs
        .iter()
        .map(|&v| g0.value(v).name.clone())
        .collect();
    let mut bound: Vec<String> = Vec::new();
    loop {
        let mut g = g0.clone();
        for b in &bound {
            let i = names.iter().position(|n| n == b).unwrap();
            bind_input(&mut g, b, data.unwrap()[i].clone())?;
        }
        let symbol = sanitize(
            model
                .file_stem()
                .map(|s| s.to_string_lossy())
                .as_deref()
                .unwrap_or("model"),
        );
        match crate::driver::compile(g, &symbol, opts) {
            Ok(c) => {
                let runtime_inputs = (0..names.len())
                    .filter(|i| !bound.contains(&names[*i]))
                    .collect();
                let model = NativeModel::build_with(&c, work, opt, profiled)?;
                return Ok(Loaded {
                    model,
                    runtime_inputs,
                    bound,
                    compiled: c,
                });
            }
            Err(Error::Node {
                error: OpError::NeedsConstant { graph_inputs, .. },
                ..
            }) if data.is_some()
                && !graph_inputs.is_empty()
                && graph_inputs
                    .iter()
                    .all(|n| names.contains(n) && !bound.contains(n)) =>
            {
                bound.extend(graph_inputs);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Runs `model` on `x` with its own instance state (as `Model::run`) and with the process-wide
/// one (as `Model::run_in`, rebuilt per thread count), on 1, 2 and 5 threads (5: more than a CI
/// machine's cores, and coprime with the models' batch counts, so library products split
/// unevenly), and compares each output with `want` ([`compare`]); the first mismatch as text.
pub fn check_threads(
    model: &mut NativeModel,
    x: &Tensor,
    want: &Tensor,
) -> std::result::Result<(), String> {
    for shared in [false, true] {
        for threads in [1, 2, 5] {
            let exec = Executor::with_threads(threads);
            let xs = std::slice::from_ref(x);
            let got = if shared {
                model.run_shared(xs, &exec)
            } else {
                model.run(xs, &exec)
            }
            .map_err(|e| e.to_string())?;
            let (ok, err) = compare(&got[0], want);
            if !ok {
                return Err(format!(
                    "{threads} threads, shared state {shared}: max |got - want| = {err}"
                ));
            }
        }
    }
    Ok(())
}

/// The tensors of `dir/input_<i>.pb`, in order (the ONNX backend test layout).
pub fn read_inputs(dir: &Path) -> Result<Vec<Tensor>> {
    files(dir, "input").iter().map(|p| read_pb(p)).collect()
}

fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for i in 0.. {
        let p = dir.join(format!("{prefix}_{i}.pb"));
        if !p.exists() {
            break;
        }
        v.push(p);
    }
    v
}

/// The outcome of comparing one output.
#[derive(Debug, Clone)]
pub struct OutputCheck {
    /// Output position.
    pub index: usize,
    /// Output name.
    pub name: String,
    /// Within tolerance.
    pub pass: bool,
    /// Largest absolute difference.
    pub max_abs_err: f64,
}

/// Runs `model` on `data/input_<i>.pb`, writes `data/got_<i>.pb` when `write` is set, and compares
/// with `data/output_<i>.pb` where present.
pub fn run_on_data(
    model: &Path,
    data: &Path,
    work: &Path,
    write: bool,
    exec: &Executor,
    opts: &Options,
) -> Result<Vec<OutputCheck>> {
    let inputs: Vec<Tensor> = files(data, "input")
        .iter()
        .map(|p| read_pb(p))
        .collect::<Result<_>>()?;
    let mut loaded = load_model(model, Some(&inputs), work, "-O1", opts)?;
    let rt_inputs: Vec<Tensor> = loaded
        .runtime_inputs
        .iter()
        .map(|&i| inputs[i].clone())
        .collect();
    let got = loaded.model.run(&rt_inputs, exec)?;
    let wants = files(data, "output");
    let mut checks = Vec::new();
    for (i, t) in got.iter().enumerate() {
        let name = loaded.model.outputs[i].name.clone();
        if write {
            write_pb(&data.join(format!("got_{i}.pb")), t, &name)?;
        }
        if let Some(w) = wants.get(i) {
            let want = read_pb(w)?;
            let (pass, max_abs_err) = compare(t, &want);
            checks.push(OutputCheck {
                index: i,
                name,
                pass,
                max_abs_err,
            });
        }
    }
    Ok(checks)
}

/// One conformance test's outcome.
#[derive(Debug, Clone)]
pub struct TestResult {
    /// The test name.
    pub name: String,
    /// `None` if it passed; else why not.
    pub failure: Option<String>,
}

/// Runs every test listed in `dir/scope.txt` (with `all`, every test folder of `dir`) on `jobs`
/// threads; `filter` keeps names containing it.
pub fn conformance(
    dir: &Path,
    jobs: usize,
    filter: Option<&str>,
    all: bool,
    work: &Path,
    opts: &Options,
) -> Result<Vec<TestResult>> {
    let tests = if all {
        conformance_all(dir)?
    } else {
        conformance_scope(dir)?
    };
    let tests: Vec<String> = tests
        .into_iter()
        .filter(|n| filter.is_none_or(|f| n.contains(f)))
        .collect();
    conformance_tests(dir, &tests, jobs, work, opts)
}

/// Every node test of `dir` (its `test_*` folders holding a `model.onnx`), sorted.
pub fn conformance_all(dir: &Path) -> Result<Vec<String>> {
    let mut tests: Vec<String> = std::fs::read_dir(dir)
        .map_err(io_err(dir))?
        .flatten()
        .filter(|e| e.path().join("model.onnx").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("test_"))
        .collect();
    tests.sort();
    Ok(tests)
}

/// The in-scope node tests of `dir` (its `scope.txt`), in order.
pub fn conformance_scope(dir: &Path) -> Result<Vec<String>> {
    let scope_path = dir.join("scope.txt");
    let scope = std::fs::read_to_string(&scope_path).map_err(io_err(&scope_path))?;
    Ok(scope
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect())
}

/// Runs the named node tests of `dir` ([`conformance`] with an explicit list).
pub fn conformance_tests(
    dir: &Path,
    tests: &[String],
    jobs: usize,
    work: &Path,
    opts: &Options,
) -> Result<Vec<TestResult>> {
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(name) = tests.get(i) else { break };
                let failure = run_test(&dir.join(name), &work.join(name), opts);
                results.lock().unwrap().push((
                    i,
                    TestResult {
                        name: name.clone(),
                        failure,
                    },
                ));
            });
        }
    });
    let mut r = results.into_inner().unwrap();
    r.sort_by_key(|(i, _)| *i);
    Ok(r.into_iter().map(|(_, t)| t).collect())
}

fn run_test(dir: &Path, work: &Path, opts: &Options) -> Option<String> {
    let model = dir.join("model.onnx");
    let exec = Executor::Serial;
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    sets.sort();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(
        || -> Result<Option<String>> {
            for set in &sets {
                for c in run_on_data(&model, set, work, false, &exec, opts)? {
                    if !c.pass {
                        return Ok(Some(format!(
                            "output {} ({}) max_abs_err={}",
                            c.index, c.name, c.max_abs_err
                        )));
                    }
                }
            }
            Ok(None)
        },
    ));
    let _ = std::fs::remove_dir_all(work);
    match res {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Some(e.to_string().replace('\n', " ")),
        Err(p) => Some(format!(
            "PANIC {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

/// Latency statistics of a benchmark.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// Median latency in ms.
    pub median_ms: f64,
    /// 90th percentile latency in ms.
    pub p90_ms: f64,
    /// Timed runs.
    pub runs: usize,
}

/// Compiles `model` with full optimisation, feeds it `input` (or deterministic pseudo-random data),
/// warms up, then runs for at least `min_time` and 10 runs.
pub fn bench(
    model: &Path,
    input: Option<Vec<Tensor>>,
    threads: usize,
    min_time: Duration,
    work: &Path,
    opts: &Options,
) -> Result<BenchResult> {
    let mut loaded = load_model(model, input.as_deref(), work, "-O3", opts)?;
    let mut times = timed_runs(&mut loaded, input, threads, min_time)?;
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    Ok(BenchResult {
        median_ms: pct(0.5),
        p90_ms: pct(0.9),
        runs: times.len(),
    })
}

/// Feeds `loaded` `input` (or deterministic pseudo-random data), warms up with 10 runs, then
/// runs for at least `min_time` and 10 runs; the milliseconds of each timed run, in order.
pub fn timed_runs(
    loaded: &mut Loaded,
    input: Option<Vec<Tensor>>,
    threads: usize,
    min_time: Duration,
) -> Result<Vec<f64>> {
    let inputs: Vec<Tensor> = match input {
        Some(v) => loaded
            .runtime_inputs
            .iter()
            .map(|&i| v[i].clone())
            .collect(),
        None => loaded
            .model
            .inputs
            .iter()
            .map(|io| pseudo_random(&io.ty))
            .collect(),
    };
    loaded.model.check(&inputs)?;
    let exec = Executor::with_threads(threads);
    for _ in 0..10 {
        loaded.model.run_unchecked(&inputs, &exec);
    }
    // What the warm-up runs counted in a profiled build is not the timed runs'.
    loaded.model.take_profile();
    let mut times = Vec::new();
    let start = Instant::now();
    while start.elapsed() < min_time || times.len() < 10 {
        let t = Instant::now();
        loaded.model.run_unchecked(&inputs, &exec);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(times)
}

/// Reads a raw little-endian f32 file as a tensor of `shape`.
pub fn read_raw_f32(path: &Path, shape: &[usize]) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    Tensor::from_bytes(crate::ir::TensorType::new(DType::F32, shape), bytes).ok_or_else(|| {
        Error::Data {
            name: path.display().to_string(),
            detail: format!("size does not match f32{shape:?}"),
        }
    })
}
