//! Pricing: what a kernel, a candidate and a crossing between backends cost. A kernel's cost is
//! its measurement in the cost cache under [`kernel_key`], else the analytic estimate
//! ([`estimate_us`]); a candidate's ([`Pricer`]) is the sum over the kernels the code generator
//! would build for it; a crossing's is a cached `transition` entry, else
//! [`DEFAULT_TRANSITION_US`].
use std::collections::HashMap;

use super::measure::{self, kernel_program};
use super::{CostCache, Key, TargetFingerprint};
use crate::backend::{Backend, BackendId};
use crate::codegen;
use crate::error::Result;
use crate::ir::Graph;
use crate::te::{self, fnv64, BinOp, BufId, BufKind, Expr, Program, Scalar, Stage};
use crate::te::{Isa, KernelPlan, PlanKind};

/// The analytic penalty for a value crossing between two backends, in microseconds, used when
/// the cache has no measured one: library calls run in the same arena and layout, so a crossing
/// costs what a kernel boundary costs (the consumer cannot fuse the producer).
pub const DEFAULT_TRANSITION_US: f64 = 0.5;

/// The cache key of the measured transition penalty from backend `a` to `b`.
pub fn transition_key(target: &TargetFingerprint, a: &str, b: &str) -> Key {
    Key::new(
        target.clone(),
        "transition",
        format!("{a}->{b}"),
        Vec::<String>::new(),
        Vec::<String>::new(),
    )
}

/// The cache key of the placement `collage tune --evolve` recorded for `g` (after the pass
/// pipeline) on the backends `names` for `threads` threads: the graph's text IR (FNV-1a hash),
/// the backend list and the thread count.
pub fn placement_key(g: &Graph, target: &TargetFingerprint, names: &[&str], threads: usize) -> Key {
    let hash = crate::te::fnv64(&g.to_string());
    let types = |vs: &[crate::ir::ValueId]| -> Vec<String> {
        vs.iter().map(|&v| g.ty(v).to_string()).collect()
    };
    Key::new(
        target.clone(),
        "placement",
        format!(
            "graph {hash:016x} on {}, {} thread(s)",
            names.join(","),
            threads.max(1)
        ),
        types(&g.inputs),
        types(&g.outputs),
    )
}

/// The cache key of stage `id` of `p`: the hash of the stage's canonical text
/// ([`Stage::canonical_text`], operands renumbered via [`kernel_program`]), the operands'
/// layouts, and its input and output types.
pub fn kernel_key(p: &Program, id: BufId, target: &TargetFingerprint) -> Key {
    let k = kernel_program(p, id);
    let mut inputs = Vec::new();
    let mut layout = String::new();
    let mut stage_text = String::new();
    for b in &k.bufs {
        match &b.kind {
            // A group's kernel is its producer and its consumer.
            BufKind::Stage(st) if stage_text.is_empty() => stage_text = st.canonical_text(),
            BufKind::Stage(st) => {
                stage_text = format!(
                    "group {} {stage_text} -> {}",
                    k.groups.len(),
                    st.canonical_text()
                )
            }
            BufKind::Dead => {}
            _ => {
                inputs.push(b.ty.to_string());
                layout.push(if b.packed { 'p' } else { 'r' });
            }
        }
    }
    let op = p
        .stage(id)
        .map(|s| {
            s.name
                .rsplit_once('_')
                .map_or(s.name.as_str(), |(a, _)| a)
                .trim_end_matches(|c: char| c.is_ascii_digit() || c == '_')
                .to_string()
        })
        .unwrap_or_default();
    let signature = format!("{op} {layout} #{:016x}", fnv64(&stage_text));
    let output = p.bufs[id.index()].ty.to_string();
    let backend = p.stage(id).map_or("c", |s| s.exec.backend());
    Key::new(target.clone(), backend, signature, inputs, [output])
}

/// The analytic estimate of kernel `id` of `p` ([`measure::stages`]): its stage's, and for a
/// group's consumer its producer's too (the group's kernel runs both).
pub fn kernel_estimate_us(p: &Program, id: BufId) -> f64 {
    let own = estimate_us(p, id);
    own + p
        .groups
        .iter()
        .filter(|g| g.consumer == id)
        .map(|g| estimate_us(p, g.producer))
        .sum::<f64>()
}

/// Rough single-thread throughput per schedule, in body evaluations per microsecond: the analytic
/// model used when the cache has no measurement. Calibrated on the measured kernels of the six
/// benchmark models (`collage tune`, every backend; AMD EPYC Zen 4, AVX-512, one thread): the
/// work-weighted rates were register-blocked 42k (46k on the large products of bert_layer and
/// the Fire modules, which decide between generated code and a library), row 2.1k, plain 1.6k (since recalibrated: below)
/// and elementwise 1.3k evaluations per microsecond (work-weighted: mostly im2col gathers), and
/// libraries 43k-46k multiply-adds; depthwise planes 13k (8k-18k on MobileNetV2's 3x3 layers,
/// strided ones the slowest); channel-vectorised contractions 52k (ResNet-18's and
/// MobileNetV2's short rows, both 52k). Elementwise stages are estimated by [`elementwise_rate`].
fn rate(s: PlanKind) -> f64 {
    match s {
        PlanKind::RegisterBlocked => 46_000.0,
        PlanKind::Channel => 52_000.0,
        PlanKind::Row => 2_000.0,
        // Recalibrated on the generated pools (Intel Xeon, Sapphire Rapids class, AVX-512, one
        // thread): ResNet-18's padded 3x3 window 3.4k, SqueezeNet's three 3x3 pools 3.4k-3.5k
        // and its global average pool 2.8k evaluations per microsecond (one rate for both).
        PlanKind::Plain | PlanKind::Window => 3_300.0,
        PlanKind::Plane => 13_000.0,
        PlanKind::Elementwise => 1_300.0,
        // Not calibrated: a running sum, one dependent step per element, rated as elementwise
        // stages are.
        PlanKind::Scan => 1_300.0,
    }
}

/// The share of [`rate`] a channel-vectorised plan of 8-lane vectors in the AVX-512 variant
/// (`schedule::analysis::NARROW_TILE`) keeps on Intel cores: with two 512-bit FMA units they
/// issue two 256-bit multiply-adds a cycle, half the peak — where AMD Zen 4 splits a 512-bit
/// operation in two and loses nothing (measured there: 46k-48k multiply-adds per
/// microsecond on dbnet's 3x3 96 -> 24 layers, one thread). From the port counts, not measured.
const INTEL_NARROW: f64 = 0.5;

/// Rough single-thread throughput of library GEMMs and oneDNN primitives, in multiply-adds per
/// microsecond (measured alongside [`rate`]: on a par with register-blocked generated code).
const LIBRARY_RATE: f64 = 44_000.0;

/// How much faster oneDNN's GEMM runs than [`LIBRARY_RATE`] says on Intel cores, relative to
/// the generated register-blocked code: measured on bert_layer's products (`collage tune`, one
/// thread; Intel Xeon, Sapphire Rapids class, AVX-512): oneDNN 860 us against the generated
/// 925 us on the 128x768x768 products, 3.54 ms against 3.91 ms on 3072 to 768 (3.66 ms
/// generated against 4.08 ms on 768 to 3072), and it scales better on two threads — where on
/// AMD Zen 4 the two are on a par. The other libraries measured no faster than generated code.
const INTEL_DNNL_GEMM: f64 = 1.12;

/// The GEMM rate of library `backend` on the machine the build runs on
/// ([`crate::target::host_vendor`]).
fn library_rate(backend: &str) -> f64 {
    if backend == "dnnl" && crate::target::host_vendor() == "GenuineIntel" {
        LIBRARY_RATE * INTEL_DNNL_GEMM
    } else {
        LIBRARY_RATE
    }
}

/// Fixed cost of one library call (argument set-up, packing start-up), microseconds.
const LIBRARY_CALL_US: f64 = 1.0;

/// Single-thread throughput of an elementwise stage, elements per microsecond, by what its body
/// does per element (measured on the six benchmark models, Zen 4, one thread): a flat index
/// decomposed with integer divisions (im2col over flattened pixels) 0.2k-1.1k, a transcendental
/// (softmax's `exp`) 0.4k, an output past the L2 cache (large im2col buffers) 0.9k-1.7k, and a
/// cached, division-free body (activations, residual adds, concatenations, small im2col) 1.3k-13k,
/// mostly 3k-6k.
fn elementwise_rate(st: &Stage) -> f64 {
    let (mut divides, mut expensive) = (false, false);
    st.body.visit(&mut |e| match e {
        Expr::Bin(BinOp::Div | BinOp::Mod, _, b) if matches!(**b, Expr::Const(Scalar::I64(_))) => {
            divides = true
        }
        Expr::Un(op, _) if op.is_expensive() => expensive = true,
        _ => {}
    });
    if expensive {
        500.0
    } else if divides || st.ty.bytes() > 2 << 20 {
        1_000.0
    } else {
        4_000.0
    }
}

/// The analytic single-thread estimate of stage `id` of `p` (a planned program), microseconds:
/// its work at the rate of its AVX-512 plan's kind.
pub fn estimate_us(p: &Program, id: BufId) -> f64 {
    let st = p.stage(id).expect("a stage");
    match st.exec {
        crate::te::Exec::Generated => {
            let plan = p
                .plan(id, Isa::Avx512)
                .unwrap_or_else(|| panic!("stage {} is not planned", st.name));
            let kind = plan.kind();
            // A scan takes one step per element, not the reduction's work (its masked length).
            if kind == PlanKind::Scan {
                return st.ty.numel() as f64 / rate(kind) + 0.05;
            }
            let rate = match (kind, plan) {
                (PlanKind::Elementwise, _) => elementwise_rate(st),
                (_, KernelPlan::Channel(c))
                    if c.lanes < Isa::Avx512.lanes()
                        && crate::target::host_vendor() == "GenuineIntel" =>
                {
                    rate(kind) * INTEL_NARROW
                }
                (s, _) => rate(s),
            };
            st.work() as f64 / rate + 0.05
        }
        crate::te::Exec::Library { .. } => {
            // The backend's own model of its calls, else a GEMM library's rate.
            let call = st
                .exec
                .backend_id()
                .lookup()
                .ok()
                .and_then(|b| b.call_estimate_us(st))
                .unwrap_or(st.work() as f64 / library_rate(st.exec.backend()));
            let epilogue = st
                .reduce
                .as_ref()
                .and_then(|r| r.finalize.as_ref())
                .map_or(0.0, |_| st.ty.numel() as f64 / 4_000.0);
            call + LIBRARY_CALL_US + epilogue
        }
    }
}

/// A lowering of the whole graph that candidates take their stages from.
struct Lowered {
    p: Program,
    readers: Vec<Vec<BufId>>,
    node_stages: Vec<Vec<BufId>>,
}

impl Lowered {
    fn new(p: Program, n_nodes: usize) -> Self {
        let readers = p.readers();
        let mut node_stages = vec![Vec::new(); n_nodes];
        for (i, b) in p.buf_ids().zip(&p.bufs) {
            if let BufKind::Stage(st) = &b.kind {
                if (st.part as usize) < n_nodes {
                    node_stages[st.part as usize].push(i);
                }
            }
        }
        Lowered {
            p,
            readers,
            node_stages,
        }
    }
}

/// Prices candidates: lowers the candidate's nodes alone, fuses them as the code generator
/// would, and sums the cached (or estimated) cost of the resulting kernels.
pub struct Pricer<'a> {
    generic: Lowered,
    /// For each available backend that takes windows, the graph lowered with operators that
    /// have a window form in their direct form (one window-call stage each).
    windows: Vec<(BackendId, Lowered)>,
    cache: Option<&'a CostCache>,
    target: &'a TargetFingerprint,
    /// Kernel costs looked up so far, by key (a kernel priced twice is counted once).
    seen: HashMap<Key, bool>,
    /// The code generator's switches the candidates are laid out under (the compiled model's).
    pub switches: codegen::Switches,
}

impl<'a> Pricer<'a> {
    /// A pricer for `g` (after the pass pipeline).
    pub fn new(
        g: &Graph,
        cache: Option<&'a CostCache>,
        target: &'a TargetFingerprint,
    ) -> Result<Self> {
        let n = g.nodes.len();
        let generic = Lowered::new(codegen::lower_graph(g)?, n);
        let mut windows = Vec::new();
        for b in crate::backend::available() {
            if b.takes_windows() {
                let id = b.id();
                let p = codegen::lower_graph_with(g, &|i| (i as u32, Some(id)))?;
                windows.push((id, Lowered::new(p, n)));
            }
        }
        Ok(Pricer {
            generic,
            windows,
            cache,
            target,
            seen: HashMap::new(),
            switches: codegen::Switches::default(),
        })
    }

    /// The kernels of `nodes` run on `backend` (library or generated), as a fused program, or
    /// `None` when a library backend would compute none of it (not a GEMM it can take).
    pub fn part_program(
        &self,
        nodes: &[usize],
        backend: BackendId,
        library: bool,
    ) -> Option<Program> {
        let low = self
            .windows
            .iter()
            .find(|(b, _)| *b == backend)
            .map_or(&self.generic, |(_, l)| l);
        let mut ids: Vec<BufId> = nodes
            .iter()
            .flat_map(|&n| low.node_stages[n].iter().copied())
            .collect();
        ids.sort_unstable();
        let inside = |b: BufId| ids.binary_search(&b).is_ok();
        let mut p = Program::default();
        let mut map: HashMap<BufId, BufId> = HashMap::new();
        let mut any_library = false;
        for &id in &ids {
            let st = low.p.stage(id).expect("a stage");
            for b in measure::stage_sources(st) {
                if inside(b) || map.contains_key(&b) {
                    continue;
                }
                let buf = &low.p.bufs[b.index()];
                let kind = match &buf.kind {
                    BufKind::Const(t) => BufKind::Const(t.clone()),
                    _ => BufKind::Input(p.inputs.len()),
                };
                let nb = p.push(buf.name.clone(), buf.ty.clone(), kind);
                if !matches!(p.bufs[nb.index()].kind, BufKind::Const(_)) {
                    p.inputs.push(nb);
                    p.input_names.push(buf.name.clone());
                }
                map.insert(b, nb);
            }
            let mut st = st.clone();
            let remap = |s: te::Src| match s {
                te::Src::Buf(b) => te::Src::Buf(map[&b]),
                other => other,
            };
            st.body = st.body.map_src(&remap);
            if let Some(f) = st.reduce.as_mut().and_then(|r| r.finalize.as_mut()) {
                *f = f.map_src(&remap);
            }
            st.part = 0;
            if library && st.reduce.is_some() && st.exec.window().is_none() {
                st.exec = codegen::exec_for(&p, &st, Some(backend));
            }
            any_library |= library && st.exec != te::Exec::Generated;
            let nb = p.push(st.name.clone(), st.ty.clone(), BufKind::Stage(st));
            map.insert(id, nb);
            let read_outside = low.readers[id.index()].iter().any(|&r| !inside(r));
            if read_outside || low.p.outputs.contains(&id) {
                p.outputs.push(nb);
                p.output_names.push(low.p.bufs[id.index()].name.clone());
            }
        }
        if library && !any_library {
            return None;
        }
        let target = crate::target::Target::for_build();
        if p.outputs.is_empty() {
            // Nothing to compute (a node that forwards its input): no kernel, no cost.
            codegen::plan(&mut p, &target, None);
            return Some(p);
        }
        // The compiled model's steps up to the arena, under its switches.
        let mut cx = codegen::StepCx {
            target: &target,
            switches: codegen::Switches {
                seed: None,
                ..self.switches
            },
            cached: None,
            warnings: Vec::new(),
        };
        codegen::run_steps(&mut p, codegen::PIPELINE, &mut cx);
        Some(p)
    }

    /// The cost of a candidate on a backend in microseconds, and whether every kernel of it was
    /// measured; `None` if the backend cannot run it.
    pub fn price(&mut self, nodes: &[usize], be: &dyn Backend) -> Option<(f64, bool)> {
        let p = self.part_program(nodes, be.id(), be.library())?;
        let mut total = 0.0;
        let mut all_measured = true;
        for id in measure::stages(&p) {
            let key = kernel_key(&p, id, self.target);
            let hit = self.cache.and_then(|c| c.get(&key));
            total += match hit {
                Some(e) => e.median_us,
                None => kernel_estimate_us(&p, id),
            };
            all_measured &= hit.is_some();
            self.seen.entry(key).or_insert(hit.is_some());
        }
        Some((total, all_measured))
    }

    /// (hits, misses) over every distinct kernel priced so far.
    pub fn counts(&self) -> (usize, usize) {
        let hits = self.seen.values().filter(|&&h| h).count();
        (hits, self.seen.len() - hits)
    }
}

/// The transition penalty from backend `a` to `b`: measured (cache), else the default.
pub(crate) fn transition(
    cache: Option<&CostCache>,
    target: &TargetFingerprint,
    a: &str,
    b: &str,
) -> f64 {
    if a == b {
        return 0.0;
    }
    cache
        .and_then(|c| c.get(&transition_key(target, a, b)))
        .map_or(DEFAULT_TRANSITION_US, |e| e.median_us)
}
