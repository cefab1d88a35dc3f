//! The kernel measurer behind `collage tune` (DESIGN §3, items 4 and 7): a stage of a fused
//! [`Program`] is cut out into a standalone [`kernel_program`] (its operands become model inputs,
//! constants stay constants so that weight layouts and packing are unchanged), compiled with the
//! ordinary code generator and timed on deterministic pseudo-random data.
//!
//! [`measure_program`] compiles the kernels of every stage of a program into one translation unit
//! and one shared library (one entry point per stage), so that measuring a model costs one C
//! compile. [`end_to_end`] times the whole model, to check the additive cost model (end-to-end
//! latency against the sum of the kernels' costs).
//!
//! Timed runs call the generated entry point directly with buffers prepared beforehand: nothing is
//! allocated inside the timed loop. Kernels are timed with warm caches (their operands stay resident
//! between runs), the usual convention of auto-tuners.
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use collage_runtime::{Aligned, Arena, Executor, RawRt};

use super::price::kernel_key;
use super::{CostCache, Entry, Key, TargetFingerprint};
use crate::codegen::{self, Compiled};
use crate::error::{io_err, Error, Result};
use crate::ir::{Tensor, TensorType};
use crate::schedule::Location;
use crate::te::{BufId, BufKind, Buffer, Isa, Program, Src, Stage};
use crate::tensor::pseudo_random;
use crate::toolchain::build_shared_with;

type RunFn = unsafe extern "C" fn(
    rt: *const RawRt,
    arena: *mut u8,
    weights: *const u8,
    inputs: *const *const u8,
);

/// Most samples one timing keeps (8 MiB of `f64`); a timing stops there even before `min_time`.
pub const MAX_SAMPLES: usize = 1 << 20;

/// How long to time a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeasureBudget {
    /// Untimed runs before timing (at least one is always made: the first run pays page faults).
    pub warmup: u32,
    /// Timed runs at least (at least one).
    pub min_runs: u32,
    /// Time spent in timed runs at least (unless the sample buffer fills first: see
    /// [`Harness::time`]).
    pub min_time: Duration,
}

impl Default for MeasureBudget {
    /// 5 warm-up runs, then at least 10 runs and 20 ms.
    fn default() -> Self {
        MeasureBudget {
            warmup: 5,
            min_runs: 10,
            min_time: Duration::from_millis(20),
        }
    }
}

/// Latency statistics of one kernel or model, over sorted samples (nearest-rank percentiles).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Median latency in microseconds.
    pub median_us: f64,
    /// 90th percentile latency in microseconds.
    pub p90_us: f64,
    /// Number of timed runs.
    pub samples: u32,
}

impl Measurement {
    /// Statistics of `samples` (microseconds; sorted in place). Panics when `samples` is empty.
    pub fn from_samples(samples: &mut [f64]) -> Self {
        assert!(!samples.is_empty(), "no samples");
        samples.sort_by(f64::total_cmp);
        Measurement {
            median_us: nearest_rank(samples, 0.5),
            p90_us: nearest_rank(samples, 0.9),
            samples: samples.len() as u32,
        }
    }
}

/// The `q`-quantile of sorted, non-empty `v` by the nearest-rank method: `v[ceil(q n) - 1]`.
fn nearest_rank(v: &[f64], q: f64) -> f64 {
    let n = v.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    v[rank - 1]
}

/// The kernels of `p`, by their stage buffers in program order: every stage but a group's
/// producer, which runs inside its consumer's kernel ([`kernel_program`]).
pub fn stages(p: &Program) -> Vec<BufId> {
    p.buf_ids()
        .filter(|&b| p.stage(b).is_some() && !p.groups.iter().any(|g| g.producer == b))
        .collect()
}

/// Every buffer a stage reads (body and `finalize`), sorted, without duplicates.
pub(crate) fn stage_sources(st: &Stage) -> Vec<BufId> {
    let mut srcs = st.body.sources();
    if let Some(f) = st.reduce.as_ref().and_then(|r| r.finalize.as_ref()) {
        srcs.extend(f.sources());
    }
    let mut ids: Vec<BufId> = srcs
        .into_iter()
        .filter_map(|s| match s {
            Src::Buf(b) => Some(b),
            _ => None,
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The operands of kernel `stage` of `p` ([`stages`]), sorted: what its stage reads, and for a
/// group's consumer what its producer reads in place of the producer.
pub fn kernel_sources(p: &Program, stage: BufId) -> Vec<BufId> {
    let st = p.stage(stage).expect("a stage");
    let mut sources = stage_sources(st);
    if let Some(g) = p.groups.iter().find(|g| g.consumer == stage) {
        let prod = p.stage(g.producer).expect("a group's producer is a stage");
        sources.retain(|&b| b != g.producer);
        sources.extend(stage_sources(prod));
        sources.sort_unstable();
        sources.dedup();
    }
    sources
}

/// A program that computes only `stage` of `p`: every buffer the stage reads becomes a model input
/// (in buffer order), except constants, which stay constants with their layout (`packed`, and the
/// transposition already applied by weight packing); the stage, with its body, reduction and
/// `materialize` flag and its `packed` flag, is the only output. `Src::Buf` ids are remapped.
/// The consumer of a group brings its producer and the group: what the producer reads becomes
/// the inputs, and the kernel is the two stages run as one loop of instances.
///
/// # Panics
/// If `stage` is not a stage of `p`, or it reads a dead buffer (a fusion bug).
pub fn kernel_program(p: &Program, stage: BufId) -> Program {
    let st = p
        .stage(stage)
        .unwrap_or_else(|| panic!("buffer {stage} is not a stage"));
    let mut k = Program::default();
    let mut map: HashMap<BufId, BufId> = HashMap::new();
    // A group's consumer: its kernel computes the producer too (into its scratch slots).
    let group = p.groups.iter().find(|g| g.consumer == stage);
    for b in kernel_sources(p, stage) {
        let buf = &p.bufs[b.index()];
        let kind = match &buf.kind {
            BufKind::Const(t) => BufKind::Const(t.clone()),
            BufKind::Input(_) | BufKind::Stage(_) => {
                k.inputs.push(BufId::new(k.bufs.len()));
                k.input_names.push(buf.name.clone());
                BufKind::Input(k.inputs.len() - 1)
            }
            BufKind::Dead => panic!("stage {stage} reads dead buffer {b}"),
        };
        k.bufs.push(Buffer {
            name: buf.name.clone(),
            ty: buf.ty.clone(),
            kind,
            packed: buf.packed,
        });
        map.insert(b, BufId::new(k.bufs.len() - 1));
    }
    // The producer's buffer comes next (it reads none of itself).
    if let Some(g) = group {
        map.insert(g.producer, BufId::new(k.bufs.len()));
    }
    let remap = |s: Src| match s {
        Src::Buf(b) => Src::Buf(map[&b]),
        other => other,
    };
    if let Some(g) = group {
        let pb = &p.bufs[g.producer.index()];
        let mut prod = p.stage(g.producer).expect("checked").clone();
        prod.body = prod.body.map_src(&remap);
        k.bufs.push(Buffer {
            name: pb.name.clone(),
            ty: pb.ty.clone(),
            kind: BufKind::Stage(prod),
            packed: pb.packed,
        });
        k.groups.push(crate::te::Group {
            producer: BufId::new(k.bufs.len() - 1),
            consumer: BufId::new(k.bufs.len()),
            ..g.clone()
        });
    }
    let mut st = st.clone();
    st.body = st.body.map_src(&remap);
    if let Some(f) = st.reduce.as_mut().and_then(|r| r.finalize.as_mut()) {
        *f = f.map_src(&remap);
    }
    let own = &p.bufs[stage.index()];
    k.bufs.push(Buffer {
        name: own.name.clone(),
        ty: own.ty.clone(),
        kind: BufKind::Stage(st),
        packed: own.packed,
    });
    k.outputs.push(BufId::new(k.bufs.len() - 1));
    k.output_names.push(own.name.clone());
    // The kernel alone is planned as it was in its program: its stage and operands are the same,
    // renumbered, and so is its plan (a plan names its stage's operands by buffer).
    codegen::plan(&mut k, &crate::target::Target::for_build(), None);
    let renumbered = |plans: &Vec<crate::te::KernelPlan>| -> Vec<crate::te::KernelPlan> {
        plans.iter().map(|pl| pl.map_bufs(&|b| map[&b])).collect()
    };
    debug_assert_eq!(
        k.plans.last(),
        p.plans.get(stage.index()).map(renumbered).as_ref(),
        "kernel k{stage} planned alone differs from its plan in the program"
    );
    k
}

/// The text of the plan stage `id` of `p` runs with on this machine (the variant the generated
/// code dispatches to here), or `<backend> call` for a library call: what the cost cache records
/// beside a measurement.
pub fn plan_text(p: &Program, id: BufId) -> String {
    if let Some(st) = p
        .stage(id)
        .filter(|st| st.exec != crate::te::Exec::Generated)
    {
        return format!("{} call", st.exec.backend());
    }
    let isa = match crate::target::Target::host().cpu().map(|c| c.isa) {
        Some(crate::target::VectorIsa::Avx512) => Isa::Avx512,
        Some(crate::target::VectorIsa::Avx2) => Isa::Avx2,
        _ => Isa::Base,
    };
    p.plan(id, isa)
        .map_or_else(|| "unplanned".to_string(), |pl| pl.to_string())
}

/// A 64-byte aligned, zeroed byte buffer of at least `bytes` bytes (at least one block).
fn aligned(bytes: usize) -> Vec<Aligned<[u8; 64]>> {
    vec![Aligned([0u8; 64]); bytes.div_ceil(64).max(1)]
}

fn bytes_mut(v: &mut [Aligned<[u8; 64]>]) -> &mut [u8] {
    // SAFETY: `Aligned<[u8; 64]>` is 64 plain bytes without padding.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, v.len() * 64) }
}

/// The stored bytes of `t` in the layout of a buffer (`packed`: column panels, see `te::PANEL`).
fn store_layout(t: &Tensor, packed: bool) -> Vec<u8> {
    Buffer {
        name: String::new(),
        ty: t.ty.clone(),
        kind: BufKind::Const(Arc::new(t.clone())),
        packed,
    }
    .stored_bytes()
    .expect("a constant")
}

/// The logical tensor of type `ty` from its stored bytes (the inverse of `store_layout`).
fn load_layout(ty: &TensorType, stored: &[u8], packed: bool) -> Tensor {
    if !packed {
        return Tensor::from_bytes(ty.clone(), stored[..ty.bytes()].to_vec()).expect("size");
    }
    let n = *ty.shape.last().unwrap_or(&1);
    let rows = ty.numel() / n.max(1);
    let es = ty.dtype.size();
    let mut data = vec![0u8; ty.bytes()];
    for r in 0..rows {
        for c in 0..n {
            let dst = (r * n + c) * es;
            let src = ((c / crate::te::PANEL) * rows * crate::te::PANEL
                + r * crate::te::PANEL
                + c % crate::te::PANEL)
                * es;
            data[dst..dst + es].copy_from_slice(&stored[src..src + es]);
        }
    }
    Tensor::from_bytes(ty.clone(), data).expect("size")
}

/// A run-time input or output buffer of a harness.
#[derive(Debug)]
struct Slot {
    name: String,
    ty: TensorType,
    packed: bool,
    /// Input: its own buffer; output: unused.
    data: Vec<Aligned<[u8; 64]>>,
    /// Output: the offset in the arena.
    offset: usize,
}

/// One loaded entry point with everything it needs: arena, weights and input buffers (filled with
/// [`pseudo_random`] data). [`Harness::run`] calls the entry point and allocates nothing.
pub struct Harness {
    run: RunFn,
    arena: Arena,
    weights: Vec<Aligned<[u8; 64]>>,
    inputs: Vec<Slot>,
    /// `inputs[i].data` pointers, handed to the entry point.
    ptrs: Vec<*const u8>,
    outputs: Vec<Slot>,
    /// The entry point's symbol.
    pub symbol: String,
    /// The shared library it lives in.
    pub path: PathBuf,
    /// The model's per-instance library state (oneDNN primitives), if it has one.
    state: crate::native::InstanceState,
    // Last, so that the library is unloaded after everything else is dropped.
    _lib: Arc<libloading::Library>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("symbol", &self.symbol)
            .field("path", &self.path)
            .field("arena", &self.arena.len())
            .field("inputs", &self.inputs.len())
            .field("outputs", &self.outputs.len())
            .finish()
    }
}

/// What a harness is built from, before loading.
struct Spec {
    symbol: String,
    weights: Vec<u8>,
    arena_size: usize,
    /// (name, type, packed) of every run-time input.
    inputs: Vec<(String, TensorType, bool)>,
    /// (name, type, packed, arena offset) of every output.
    outputs: Vec<(String, TensorType, bool, usize)>,
}

impl Harness {
    fn new(spec: Spec, lib: Arc<libloading::Library>, path: &Path) -> Result<Self> {
        let sym = format!("collage_{}_run", spec.symbol);
        // SAFETY: generated entry points have exactly the `RunFn` signature.
        let run: RunFn = unsafe {
            *lib.get::<RunFn>(sym.as_bytes()).map_err(|e| Error::Load {
                path: path.to_path_buf(),
                detail: e.to_string(),
            })?
        };
        let state = crate::native::InstanceState::load(&lib, &spec.symbol);
        let mut weights = aligned(spec.weights.len());
        bytes_mut(&mut weights)[..spec.weights.len()].copy_from_slice(&spec.weights);
        let inputs: Vec<Slot> = spec
            .inputs
            .into_iter()
            .map(|(name, ty, packed)| {
                let stored = store_layout(&pseudo_random(&ty), packed);
                let mut data = aligned(stored.len());
                bytes_mut(&mut data)[..stored.len()].copy_from_slice(&stored);
                Slot {
                    name,
                    ty,
                    packed,
                    data,
                    offset: 0,
                }
            })
            .collect();
        let ptrs = inputs
            .iter()
            .map(|s| s.data.as_ptr() as *const u8)
            .collect();
        let outputs = spec
            .outputs
            .into_iter()
            .map(|(name, ty, packed, offset)| Slot {
                name,
                ty,
                packed,
                data: Vec::new(),
                offset,
            })
            .collect();
        Ok(Harness {
            run,
            arena: Arena::new(spec.arena_size),
            weights,
            inputs,
            ptrs,
            outputs,
            symbol: spec.symbol,
            path: path.to_path_buf(),
            state,
            _lib: lib,
        })
    }

    /// The run-time inputs: name and type.
    pub fn inputs(&self) -> impl Iterator<Item = (&str, &TensorType)> {
        self.inputs.iter().map(|s| (s.name.as_str(), &s.ty))
    }

    /// Replaces the data of input `i` (given in logical layout; packed inputs are packed here).
    pub fn set_input(&mut self, i: usize, t: &Tensor) -> Result<()> {
        let slot = self.inputs.get_mut(i).ok_or_else(|| Error::Data {
            name: format!("#{i}"),
            detail: "no such input".into(),
        })?;
        if t.ty != slot.ty {
            return Err(Error::Data {
                name: slot.name.clone(),
                detail: format!("expected {}, got {}", slot.ty, t.ty),
            });
        }
        let stored = store_layout(t, slot.packed);
        // The buffer keeps its address: `ptrs` stays valid.
        bytes_mut(&mut slot.data)[..stored.len()].copy_from_slice(&stored);
        Ok(())
    }

    /// Runs the entry point once, as `Model::run` does: a model with library state gets an
    /// instance of it for `exec`'s thread count (created on the first run for that count).
    /// Allocates nothing after that.
    pub fn run(&mut self, exec: &Executor) {
        let mut rt = exec.raw();
        self.state.bind(&mut rt, exec.threads());
        self.call(&rt);
    }

    /// Runs the entry point once without an instance state, as `Model::run_in` does (a model
    /// with library state then uses the process-wide one, under its lock).
    pub fn run_shared(&mut self, exec: &Executor) {
        self.call(&exec.raw());
    }

    fn call(&mut self, rt: &RawRt) {
        // SAFETY: arena, weights and inputs have the sizes and layouts the code was generated for
        // (inputs hold their stored size), and `ptrs` points at the input buffers.
        unsafe {
            (self.run)(
                rt,
                self.arena.as_mut_ptr(),
                self.weights.as_ptr() as *const u8,
                self.ptrs.as_ptr(),
            )
        };
    }

    /// A copy of output `i` after the last run, in logical layout (packed outputs are unpacked).
    pub fn output(&self, i: usize) -> Tensor {
        let o = &self.outputs[i];
        let size = Buffer {
            name: String::new(),
            ty: o.ty.clone(),
            kind: BufKind::Dead,
            packed: o.packed,
        }
        .stored_size();
        // SAFETY: the output's stored bytes lie inside the arena at the planned offset.
        let stored = unsafe { std::slice::from_raw_parts(self.arena.as_ptr().add(o.offset), size) };
        load_layout(&o.ty, stored, o.packed)
    }

    /// The inputs' stored bytes (for tests).
    #[cfg(test)]
    fn input_bytes(&self, i: usize) -> &[u8] {
        let v = &self.inputs[i].data;
        // SAFETY: as in `bytes_mut`.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 64) }
    }

    /// Warms up, then times runs until both `min_runs` and `min_time` are reached. The sample
    /// buffer is sized before timing starts (for `min_runs`, and twice the runs `min_time` takes
    /// at the fastest warm-up run's speed, at most [`MAX_SAMPLES`]) and the timed loop allocates
    /// nothing: it also stops when that buffer is full.
    pub fn time(&mut self, exec: &Executor, budget: &MeasureBudget) -> Measurement {
        // The fastest warm-up run estimates the run time (the first pays page faults and cold
        // caches), which sizes the sample buffer.
        let mut per_run = f64::INFINITY;
        for _ in 0..budget.warmup.max(1) {
            let t = Instant::now();
            self.run(exec);
            per_run = per_run.min(t.elapsed().as_secs_f64());
        }
        let min_runs = (budget.min_runs.max(1) as usize).min(MAX_SAMPLES);
        let expect = (budget.min_time.as_secs_f64() / per_run.max(1e-9)).ceil() as usize;
        let cap = min_runs
            .max(expect.saturating_mul(2).saturating_add(16))
            .min(MAX_SAMPLES);
        let mut samples: Vec<f64> = Vec::with_capacity(cap);
        let start = Instant::now();
        while samples.len() < min_runs
            || (start.elapsed() < budget.min_time && samples.len() < samples.capacity())
        {
            let t = Instant::now();
            self.run(exec);
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Measurement::from_samples(&mut samples)
    }
}

/// A deterministic 64-bit FNV-1a hash (content-addressed file names).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `source` compiled into a shared library in `work`, named by its content (with `opt` and
/// `defines`): a library built before (a placement timed again, a finalist) is not rebuilt.
fn compile_shared(
    source: &str,
    stem: &str,
    work: &Path,
    opt: &str,
    defines: &[&str],
) -> Result<PathBuf> {
    std::fs::create_dir_all(work).map_err(io_err(work))?;
    let h = fnv1a(&[
        source.as_bytes(),
        opt.as_bytes(),
        defines.join(" ").as_bytes(),
    ]);
    let name = format!("{stem}_{h:016x}");
    let so = work.join(format!("lib{name}.so"));
    if !so.exists() {
        // Per thread: models compiled side by side (`prebuild_models`) may share a stem.
        let tag = format!("{}.{:?}", std::process::id(), std::thread::current().id());
        let tag: String = tag.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        let c_path = work.join(format!("{name}.{tag}.c"));
        std::fs::write(&c_path, source).map_err(io_err(&c_path))?;
        let tmp = work.join(format!("lib{name}.{tag}.tmp.so"));
        build_shared_with(&c_path, &tmp, opt, defines)?;
        std::fs::rename(&tmp, &so).map_err(io_err(&so))?;
    }
    Ok(so)
}

/// Compiles the shared libraries of `models` side by side, one per core, so that
/// [`build_model`] then only loads them: what end-to-end measurements of many placements
/// (`collage tune --evolve`) spend most of their time on. The first error is returned.
pub fn prebuild_models(models: &[&Compiled], work: &Path, opt: &str) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let defines = host_only();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..cores.min(models.len()))
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(c) = models.get(i) else {
                            return Ok(());
                        };
                        compile_shared(&c.c_source, &c.symbol, work, opt, defines)?;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    results.into_iter().collect()
}

/// Writes `source` to `work`, compiles it with [`build_shared_with`] (unless `work` holds the
/// library already) and loads it. Files are named by a hash of the source, the flags and the
/// defines, and the library is compiled under a temporary name and renamed, so a library that
/// this process still has loaded is never overwritten in place.
fn compile_and_load(
    source: &str,
    stem: &str,
    work: &Path,
    opt: &str,
    defines: &[&str],
) -> Result<(Arc<libloading::Library>, PathBuf)> {
    let so = compile_shared(source, stem, work, opt, defines)?;
    // SAFETY: the library was just built from generated C code, which has no constructors.
    let lib = unsafe { libloading::Library::new(&so) }.map_err(|e| Error::Load {
        path: so.clone(),
        detail: e.to_string(),
    })?;
    Ok((Arc::new(lib), so))
}

/// The end of the shared prelude of every translation unit `codegen::c::emit` writes.
const PRELUDE_END: &str = "#define CL_DISPATCH 1\n#endif\n";

/// Joins translation units written by `codegen::c::emit` (with the same header) into one: the
/// prelude once, then each unit's kernels with their `static` functions renamed by the
/// preprocessor (`run` → `run__u<i>`, ...), so that only the distinct entry points are shared.
fn join_units(units: &[String]) -> Result<String> {
    let bad = |detail: String| Error::Model {
        model: "measure".into(),
        detail,
    };
    let split = |u: &str| -> Result<usize> {
        u.find(PRELUDE_END)
            .map(|i| i + PRELUDE_END.len())
            .ok_or_else(|| bad("unexpected C translation unit: no prelude".into()))
    };
    let Some(first) = units.first() else {
        return Ok(String::new());
    };
    let prelude = &first[..split(first)?];
    let mut out = prelude.to_string();
    for (i, u) in units.iter().enumerate() {
        let at = split(u)?;
        if &u[..at] != prelude {
            return Err(bad("C translation units with different preludes".into()));
        }
        let body = &u[at..];
        let mut names: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix("static void "))
            .filter_map(|r| r.split('(').next())
            .filter(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'))
            .collect();
        names.sort_unstable();
        names.dedup();
        out.push_str(&format!("\n/* ---- unit {i} ---- */\n"));
        for n in &names {
            out.push_str(&format!("#define {n} {n}__u{i}\n"));
        }
        out.push_str(body);
        for n in &names {
            out.push_str(&format!("#undef {n}\n"));
        }
    }
    Ok(out)
}

/// Builds the kernels of `stages` of `p` into one shared library in `work` (one C file, one entry
/// point `collage_k<stage>_run` per stage) and loads one [`Harness`] per stage, in order.
pub fn build_kernels(
    p: &Program,
    stages: &[BufId],
    work: &Path,
    opt: &str,
) -> Result<Vec<Harness>> {
    let items: Vec<(&Program, BufId)> = stages.iter().map(|&s| (p, s)).collect();
    build_kernel_set(&items, work, opt)
}

/// [`build_kernels`] for stages of several programs (e.g. the candidates of a placement search):
/// one [`Harness`] per `(program, stage)`, in order. The kernels are split into as many shared
/// libraries as the machine has cores (at least 4 kernels each), compiled at the same time.
pub fn build_kernel_set(
    items: &[(&Program, BufId)],
    work: &Path,
    opt: &str,
) -> Result<Vec<Harness>> {
    build_kernel_set_with(items, work, opt, host_only())
}

/// What measurements compile: the variant this machine runs and the baseline (`Isa::only`).
fn host_only() -> &'static [&'static str] {
    crate::tune::plans::host_isa().only()
}

/// [`build_kernel_set`] compiled with preprocessor symbols defined (`Isa::defines`: the kernels
/// run a narrower variant than the machine's).
pub fn build_kernel_set_with(
    items: &[(&Program, BufId)],
    work: &Path,
    opt: &str,
    defines: &[&str],
) -> Result<Vec<Harness>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = cores.min(items.len().div_ceil(4)).max(1);
    let per = items.len().div_ceil(jobs).max(1);
    let built: Vec<Result<Unit>> = std::thread::scope(|s| {
        let threads: Vec<_> = items
            .chunks(per)
            .map(|chunk| s.spawn(move || compile_unit(chunk, work, opt, defines)))
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a compile thread does not panic"))
            .collect()
    });
    let mut out = Vec::with_capacity(items.len());
    for unit in built {
        let (specs, lib, so) = unit?;
        for s in specs {
            out.push(Harness::new(s, lib.clone(), &so)?);
        }
    }
    Ok(out)
}

/// A compiled shared library of kernels: their specs, the library and its path.
type Unit = (Vec<Spec>, Arc<libloading::Library>, PathBuf);

/// Compiles the kernels of `items` into one shared library in `work` (one C file, one entry
/// point per kernel).
fn compile_unit(
    items: &[(&Program, BufId)],
    work: &Path,
    opt: &str,
    defines: &[&str],
) -> Result<Unit> {
    let header = format!(
        "@generated by collage-build {}: kernel measurement harness. Do not edit.",
        env!("CARGO_PKG_VERSION")
    );
    let mut units = Vec::with_capacity(items.len());
    let mut specs = Vec::with_capacity(items.len());
    for (i, &(p, s)) in items.iter().enumerate() {
        let k = kernel_program(p, s);
        let (locs, weights, arena_size) = codegen::locate(&k);
        let symbol = format!("k{i}_{s}");
        units.push(codegen::c::emit(&k, &locs, &symbol, &header));
        let out = k.outputs[0];
        let Location::Arena(offset) = locs[out.index()] else {
            unreachable!("a stage output lives in the arena")
        };
        let ob = &k.bufs[out.index()];
        specs.push(Spec {
            symbol,
            weights,
            arena_size,
            inputs: k
                .inputs
                .iter()
                .map(|&b| {
                    let b = &k.bufs[b.index()];
                    (b.name.clone(), b.ty.clone(), b.packed)
                })
                .collect(),
            outputs: vec![(ob.name.clone(), ob.ty.clone(), ob.packed, offset)],
        });
    }
    let source = join_units(&units)?;
    let (lib, so) = compile_and_load(&source, "kernels", work, opt, defines)?;
    Ok((specs, lib, so))
}

/// Builds and loads a whole compiled model as a [`Harness`] (inputs filled with [`pseudo_random`]).
pub fn build_model(c: &Compiled, work: &Path, opt: &str) -> Result<Harness> {
    build_model_with(c, work, opt, host_only())
}

/// [`build_model`] compiled with preprocessor symbols defined (`Isa::defines`).
pub fn build_model_with(c: &Compiled, work: &Path, opt: &str, defines: &[&str]) -> Result<Harness> {
    let (lib, so) = compile_and_load(&c.c_source, &c.symbol, work, opt, defines)?;
    let spec = Spec {
        symbol: c.symbol.clone(),
        weights: c.weights.clone(),
        arena_size: c.arena_size,
        inputs: c
            .inputs
            .iter()
            .zip(&c.program.inputs)
            .map(|(io, &b)| {
                (
                    io.name.clone(),
                    io.ty.clone(),
                    c.program.bufs[b.index()].packed,
                )
            })
            .collect(),
        outputs: c
            .outputs
            .iter()
            .zip(&c.program.outputs)
            .map(|(io, &b)| {
                (
                    io.name.clone(),
                    io.ty.clone(),
                    c.program.bufs[b.index()].packed,
                    io.offset,
                )
            })
            .collect(),
    };
    Harness::new(spec, lib, &so)
}

/// Builds the kernel of `stage` of `p` alone (see [`kernel_program`]) with `codegen::c::emit` at
/// optimisation level `opt` (e.g. `-O3`), and times it on `threads` threads.
pub fn measure_stage(
    p: &Program,
    stage: BufId,
    work: &Path,
    opt: &str,
    threads: usize,
    budget: MeasureBudget,
) -> Result<Measurement> {
    let mut h = build_kernels(p, &[stage], work, opt)?;
    let exec = Executor::with_threads(threads);
    Ok(h[0].time(&exec, &budget))
}

/// Times the kernel of every stage of `p` (in program order), all built into one shared library.
pub fn measure_program(
    p: &Program,
    work: &Path,
    opt: &str,
    threads: usize,
    budget: MeasureBudget,
) -> Result<Vec<(BufId, Measurement)>> {
    let ids = stages(p);
    let mut hs = build_kernels(p, &ids, work, opt)?;
    let exec = Executor::with_threads(threads);
    Ok(ids
        .into_iter()
        .zip(hs.iter_mut())
        .map(|(s, h)| (s, h.time(&exec, &budget)))
        .collect())
}

/// Times the whole compiled model `c` on pseudo-random inputs (to compare with the sum of its
/// kernels' costs).
pub fn end_to_end(
    c: &Compiled,
    work: &Path,
    opt: &str,
    threads: usize,
    budget: MeasureBudget,
) -> Result<Measurement> {
    let mut h = build_model(c, work, opt)?;
    let exec = Executor::with_threads(threads);
    Ok(h.time(&exec, &budget))
}

/// Measures every kernel of `c` missing from `cache` (one shared library for all of them), adds
/// the results, and calls `progress(done, total)` after each. Returns how many were measured.
pub fn tune_kernels(
    c: &Compiled,
    target: &TargetFingerprint,
    cache: &mut CostCache,
    work: &Path,
    budget: MeasureBudget,
    save: &mut dyn FnMut(&CostCache) -> Result<()>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<usize> {
    let p = &c.program;
    let todo: Vec<(BufId, Key)> = stages(p)
        .into_iter()
        .map(|id| (id, kernel_key(p, id, target)))
        .filter(|(_, k)| cache.get(k).is_none())
        .collect();
    let total = todo.len();
    progress(0, total);
    if todo.is_empty() {
        return Ok(0);
    }
    let ids: Vec<BufId> = todo.iter().map(|(id, _)| *id).collect();
    let mut harnesses = build_kernels(p, &ids, work, "-O3")?;
    let exec = Executor::Serial;
    for (i, ((id, key), h)) in todo.into_iter().zip(harnesses.iter_mut()).enumerate() {
        let m = h.time(&exec, &budget);
        let mut params = BTreeMap::new();
        params.insert("plan".to_string(), plan_text(p, id));
        let entry =
            Entry::new(m.median_us, m.p90_us, m.samples, params).map_err(|e| Error::Model {
                model: c.name.clone(),
                detail: format!("kernel k{id}: {e}"),
            })?;
        cache.insert(key, entry).map_err(|e| Error::Model {
            model: c.name.clone(),
            detail: format!("kernel k{id}: {e}"),
        })?;
        save(cache)?;
        progress(i + 1, total);
    }
    Ok(total)
}

/// The default measurement budget of `collage tune`.
pub fn default_budget() -> MeasureBudget {
    MeasureBudget {
        warmup: 5,
        min_runs: 20,
        min_time: Duration::from_millis(50),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ir::{DType, Graph, ValueId};
    use crate::ops::{lookup, Attr, Attrs, OpCx};
    use crate::te::Evaluator;

    const TINY: MeasureBudget = MeasureBudget {
        warmup: 1,
        min_runs: 3,
        min_time: Duration::from_millis(2),
    };

    fn node(g: &mut Graph, op: &str, attrs: Attrs, inputs: Vec<ValueId>) -> ValueId {
        let ctor = lookup(op).unwrap();
        let o = ctor(&OpCx {
            attrs: &attrs,
            opset: 17,
            n_inputs: inputs.len(),
            n_outputs: 1,
        })
        .unwrap();
        let out = g.add_value(format!("{op}_out"), None);
        g.add_node(
            format!("{op}_{}", g.nodes.len()),
            o,
            inputs.into_iter().map(Some).collect(),
            vec![out],
        );
        out
    }

    fn weights(shape: &[usize], seed: u64) -> Tensor {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect();
        Tensor::from_f32(shape, &v)
    }

    /// x[16, 64] · W[64, 64] (constant) → Relu → Softmax.
    fn mlp() -> Compiled {
        let mut g = Graph::new("mlp");
        let x = g.add_value("x", Some(TensorType::new(DType::F32, [16, 64])));
        g.inputs.push(x);
        let w = g.add_const("w", weights(&[64, 64], 3));
        let y = node(&mut g, "MatMul", Attrs::default(), vec![x, w]);
        let r = node(&mut g, "Relu", Attrs::default(), vec![y]);
        let s = node(&mut g, "Softmax", Attrs::default(), vec![r]);
        g.outputs.push(s);
        compile(g, "mlp")
    }

    /// `g` through the pass pipeline and the code generator, as generated code (`c`), every
    /// node its own fusion region as placed code has (the driver, which places, is above this
    /// room).
    fn compile(mut g: Graph, symbol: &str) -> Compiled {
        crate::passes::run(&mut g, crate::passes::PIPELINE).unwrap();
        codegen::compile_assigned(g, symbol, &|n| (n as u32 + 1, None)).unwrap()
    }

    /// A convolution on a large image: its im2col buffer is a packed, materialised stage.
    fn conv() -> Compiled {
        let mut g = Graph::new("conv");
        let x = g.add_value("x", Some(TensorType::new(DType::F32, [1, 3, 40, 40])));
        g.inputs.push(x);
        let w = g.add_const("w", weights(&[12, 3, 3, 3], 11));
        let b = g.add_const("b", weights(&[12], 12));
        let mut a = BTreeMap::new();
        a.insert("pads".to_string(), Attr::Ints(vec![1, 1, 1, 1]));
        a.insert("kernel_shape".to_string(), Attr::Ints(vec![3, 3]));
        let y = node(&mut g, "Conv", Attrs(a), vec![x, w, b]);
        let r = node(&mut g, "Relu", Attrs::default(), vec![y]);
        g.outputs.push(r);
        // Generated code: im2col and the contraction are two kernels.
        compile(g, "conv")
    }

    /// Every buffer's value by the interpreter, with the model inputs pseudo-random.
    fn interpret(p: &Program) -> Vec<Option<Tensor>> {
        let mut vals: Vec<Option<Tensor>> = Vec::with_capacity(p.bufs.len());
        for b in &p.bufs {
            let v = match &b.kind {
                BufKind::Input(_) => Some(pseudo_random(&b.ty)),
                BufKind::Const(t) => Some(t.as_ref().clone()),
                BufKind::Stage(st) => {
                    let resolve = |s: Src| -> &Tensor {
                        let Src::Buf(k) = s else { unreachable!() };
                        vals[k.index()].as_ref().expect("read before written")
                    };
                    // A stage fused across a reshape iterates its producer's shape; the buffer
                    // has the same flat layout in its own shape.
                    Some(Evaluator { src: &resolve }.stage(st).reshaped(&b.ty.shape))
                }
                BufKind::Dead => None,
            };
            vals.push(v);
        }
        vals
    }

    fn work(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("collage-measure-{name}-{}", std::process::id()))
    }

    #[test]
    fn kernel_program_keeps_one_stage_and_its_operands() {
        // The convolution's im2col (1600 columns in panels) and its GEMM are a group: one kernel
        // of two stages.
        assert_eq!(conv().program.groups.len(), 1);
        for c in [mlp(), conv()] {
            let p = &c.program;
            let ids = stages(p);
            assert!(ids.len() >= 2, "{p:?}");
            for &s in &ids {
                let k = kernel_program(p, s);
                let n_stages = k
                    .bufs
                    .iter()
                    .filter(|b| matches!(b.kind, BufKind::Stage(_)))
                    .count();
                let grouped = p.groups.iter().any(|g| g.consumer == s);
                assert_eq!(n_stages, 1 + usize::from(grouped));
                assert_eq!(k.groups.len(), usize::from(grouped));
                let out = *k.outputs.last().unwrap();
                assert_eq!(k.outputs, vec![out]);
                assert_eq!(out.index(), k.bufs.len() - 1);
                assert_eq!(k.bufs[out.index()].ty, p.bufs[s.index()].ty);
                assert_eq!(k.bufs[out.index()].packed, p.bufs[s.index()].packed);
                // The operands, in order: non-constants are inputs, constants stay constants with
                // their layout.
                let srcs = kernel_sources(p, s);
                assert_eq!(k.bufs.len(), srcs.len() + n_stages);
                let mut n_in = 0;
                for (j, &b) in srcs.iter().enumerate() {
                    let (orig, new) = (&p.bufs[b.index()], &k.bufs[j]);
                    assert_eq!(orig.ty, new.ty);
                    assert_eq!(orig.packed, new.packed);
                    match (&orig.kind, &new.kind) {
                        (BufKind::Const(a), BufKind::Const(b)) => assert!(Arc::ptr_eq(a, b)),
                        (BufKind::Input(_) | BufKind::Stage(_), BufKind::Input(i)) => {
                            assert_eq!(*i, n_in);
                            assert_eq!(k.inputs[n_in], BufId::new(j));
                            n_in += 1;
                        }
                        (a, b) => panic!("buffer {b:?} became {a:?}"),
                    }
                }
                assert_eq!(k.inputs.len(), n_in);
                // The stages read the operands (and a group's consumer its producer).
                let mut read: Vec<BufId> = k
                    .buf_ids()
                    .filter_map(|b| k.stage(b))
                    .flat_map(stage_sources)
                    .filter(|&b| k.stage(b).is_none())
                    .collect();
                read.sort_unstable();
                read.dedup();
                assert_eq!(read, (0..srcs.len()).map(BufId::new).collect::<Vec<_>>());
            }
        }
        // The matmul reads the model input and the (packed) constant weight.
        let c = mlp();
        let mm = stages(&c.program)[0];
        let k = kernel_program(&c.program, mm);
        assert_eq!(k.inputs.len(), 1);
        assert!(matches!(
            k.bufs[k.inputs[0].index()].kind,
            BufKind::Input(0)
        ));
        let consts: Vec<&Buffer> = k
            .bufs
            .iter()
            .filter(|b| matches!(b.kind, BufKind::Const(_)))
            .collect();
        assert_eq!(consts.len(), 1);
        assert!(
            consts[0].packed,
            "64 columns: the weight is stored in panels"
        );
        // Apart (not a group), the convolution reads a packed im2col stage as a packed input.
        let mut p = conv().program;
        p.groups.clear();
        let packed_inputs: usize = stages(&p)
            .into_iter()
            .map(|s| {
                let k = kernel_program(&p, s);
                k.inputs
                    .iter()
                    .filter(|&&b| k.bufs[b.index()].packed)
                    .count()
            })
            .sum();
        assert!(packed_inputs >= 1, "{p:?}");
    }

    #[test]
    fn kernels_compute_the_models_intermediate_results() {
        for c in [mlp(), conv()] {
            let p = &c.program;
            let want = interpret(p);
            let ids = stages(p);
            let dir = work(&format!("k-{}", c.symbol));
            let exec = Executor::Serial;
            let mut hs = build_kernels(p, &ids, &dir, "-O2").unwrap();
            assert_eq!(hs.len(), ids.len());
            for (&s, h) in ids.iter().zip(hs.iter_mut()) {
                let k = kernel_program(p, s);
                let srcs = kernel_sources(p, s);
                let mut i = 0;
                for (j, &b) in srcs.iter().enumerate() {
                    if matches!(k.bufs[j].kind, BufKind::Input(_)) {
                        h.set_input(i, want[b.index()].as_ref().unwrap()).unwrap();
                        i += 1;
                    }
                }
                h.run(&exec);
                let got = h.output(0);
                let (ok, err) = crate::tensor::compare(&got, want[s.index()].as_ref().unwrap());
                assert!(
                    ok,
                    "{}: stage {s} ({}): max error {err}",
                    c.symbol,
                    p.bufs[s.index()].name
                );
            }
            // The whole model agrees with the interpreter too.
            let mut m = build_model(&c, &dir, "-O2").unwrap();
            for (i, &b) in p.inputs.iter().enumerate() {
                m.set_input(i, want[b.index()].as_ref().unwrap()).unwrap();
            }
            m.run(&exec);
            let (ok, err) =
                crate::tensor::compare(&m.output(0), want[p.outputs[0].index()].as_ref().unwrap());
            assert!(ok, "{}: model output: max error {err}", c.symbol);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn inputs_are_deterministic_and_packed_like_the_buffer() {
        let c = conv();
        let dir = work("det");
        let ids = stages(&c.program);
        let a = build_kernels(&c.program, &ids, &dir, "-O1").unwrap();
        let b = build_kernels(&c.program, &ids, &dir, "-O1").unwrap();
        for (ha, hb) in a.iter().zip(&b) {
            for i in 0..ha.inputs.len() {
                assert_eq!(ha.input_bytes(i), hb.input_bytes(i));
                let slot = &ha.inputs[i];
                let t = pseudo_random(&slot.ty);
                let stored = store_layout(&t, slot.packed);
                assert_eq!(&ha.input_bytes(i)[..stored.len()], &stored[..]);
                assert_eq!(load_layout(&slot.ty, &stored, slot.packed).data, t.data);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn measurements_are_positive_and_ordered() {
        let c = mlp();
        let p = &c.program;
        let dir = work("time");
        let ids = stages(p);
        let one = measure_stage(p, ids[0], &dir, "-O2", 1, TINY).unwrap();
        assert!(
            one.median_us > 0.0 && one.p90_us >= one.median_us,
            "{one:?}"
        );
        assert!(one.samples >= TINY.min_runs);
        let all = measure_program(p, &dir, "-O2", 2, TINY).unwrap();
        assert_eq!(all.iter().map(|(s, _)| *s).collect::<Vec<_>>(), ids);
        for (s, m) in &all {
            assert!(
                m.median_us > 0.0 && m.p90_us >= m.median_us,
                "stage {s}: {m:?}"
            );
            assert!(m.samples >= TINY.min_runs);
        }
        let e2e = end_to_end(&c, &dir, "-O2", 1, TINY).unwrap();
        assert!(
            e2e.median_us > 0.0 && e2e.p90_us >= e2e.median_us,
            "{e2e:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut v = vec![5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        let m = Measurement::from_samples(&mut v);
        assert_eq!((m.median_us, m.p90_us, m.samples), (5.0, 9.0, 10));
        let m = Measurement::from_samples(&mut [3.0]);
        assert_eq!((m.median_us, m.p90_us), (3.0, 3.0));
        let m = Measurement::from_samples(&mut [2.0, 1.0]);
        assert_eq!((m.median_us, m.p90_us), (1.0, 2.0));
    }

    #[test]
    fn joined_units_rename_static_functions() {
        let c = mlp();
        let p = &c.program;
        let units: Vec<String> = stages(p)
            .into_iter()
            .map(|s| {
                let k = kernel_program(p, s);
                let (locs, _, _) = codegen::locate(&k);
                codegen::c::emit(&k, &locs, &format!("k{s}"), "h")
            })
            .collect();
        let joined = join_units(&units).unwrap();
        assert_eq!(joined.matches(PRELUDE_END).count(), 1);
        assert!(joined.contains("#define run run__u0\n"));
        assert!(joined.contains("#define run run__u1\n"));
    }
}
