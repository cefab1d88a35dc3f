//! The multi-backend compile: price every backend's candidates (cost cache, else the analytic
//! model), place (Collage search, or the fixed-priority `--greedy` baseline), and generate code
//! that follows the placement.
//!
//! Code follows a placement like this: every node of a library part (`gemm`, `blas`) forms its own
//! fusion region, its contraction becomes a library call and its elementwise nodes an in-place
//! epilogue; the nodes placed on `c` share one region, inside which the generator's own fusion
//! decides the kernels (so adjacent `c` parts may fuse with each other, never with a library part).
use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::{self, Backend, BackendId};
use crate::codegen::{self, Compiled};
use crate::error::{Error, Result};
use crate::explain::{estimate_us, kernel_key};
use crate::ir::Graph;
use crate::measure;
use crate::partition::place::{place, Part, Placement, PlacementInfo};
use crate::partition::rule::Candidate;
use crate::partition::search::{SearchLimits, StopReason};
use crate::te::{self, BufId, BufKind, Program};
use crate::tune::{CostCache, Key, TargetFingerprint};

/// How to compile.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Comma-separated backend names in priority order (`c,gemm`); empty: every available one.
    pub backends: String,
    /// Replace the search by the fixed-priority rule: every node goes to the first backend in
    /// the list that supports it.
    pub greedy: bool,
    /// Measured kernel costs.
    pub cache: Option<Arc<CostCache>>,
    /// The target the cache is read for (default: this machine with the current C compiler).
    pub target: Option<TargetFingerprint>,
    /// The thread count the model will mostly run on (0: one): placements recorded by
    /// `collage tune --evolve` are per thread count.
    pub threads: usize,
    /// The ceiling of [`crate::ir::Limits`] in bytes (0: the default, 64 GiB); never more than
    /// the target's address space.
    pub max_tensor_bytes: u64,
    /// Draw every generated reduction stage's schedule at random from this seed instead of the
    /// target's default (tests of the schedule space; the output must not change).
    pub schedule_seed: Option<u64>,
}

impl Options {
    /// The size limits a graph compiled with these options is checked against.
    pub fn limits(&self) -> crate::ir::Limits {
        let ceiling = match self.max_tensor_bytes {
            0 => crate::ir::Limits::DEFAULT_CEILING,
            n => n,
        };
        crate::ir::Limits::for_build_target(ceiling)
    }
}

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

/// A placement as a cache parameter: `backend:node,node;backend:node...`.
pub fn encode_parts(parts: &[Part]) -> String {
    parts
        .iter()
        .map(|p| {
            let nodes: Vec<String> = p.nodes.iter().map(|n| n.to_string()).collect();
            format!("{}:{}", p.backend, nodes.join(","))
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// The parts of a recorded placement, if it is one for these backends and covers each of the
/// `n_nodes` nodes exactly once.
fn decode_parts(
    text: &str,
    names: &[&'static str],
    n_nodes: usize,
) -> Option<Vec<(&'static str, Vec<usize>)>> {
    let mut seen = vec![false; n_nodes];
    let mut parts = Vec::new();
    for part in text.split(';') {
        let (backend, nodes) = part.split_once(':')?;
        let backend = *names.iter().find(|&&n| n == backend)?;
        let mut list = Vec::new();
        for n in nodes.split(',') {
            let n: usize = n.parse().ok()?;
            if n >= n_nodes || std::mem::replace(&mut seen[n], true) {
                return None;
            }
            list.push(n);
        }
        parts.push((backend, list));
    }
    seen.iter().all(|&s| s).then_some(parts)
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
        for (i, b) in p.bufs.iter().enumerate() {
            if let BufKind::Stage(st) = &b.kind {
                if (st.part as usize) < n_nodes {
                    node_stages[st.part as usize].push(i as BufId);
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
                let buf = &low.p.bufs[b as usize];
                let kind = match &buf.kind {
                    BufKind::Const(t) => BufKind::Const(t.clone()),
                    _ => BufKind::Input(p.inputs.len()),
                };
                let nb = p.push(buf.name.clone(), buf.ty.clone(), kind);
                if !matches!(p.bufs[nb as usize].kind, BufKind::Const(_)) {
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
            let read_outside = low.readers[id as usize].iter().any(|&r| !inside(r));
            if read_outside || low.p.outputs.contains(&id) {
                p.outputs.push(nb);
                p.output_names.push(low.p.bufs[id as usize].name.clone());
            }
        }
        if library && !any_library {
            return None;
        }
        if p.outputs.is_empty() {
            // Nothing to compute (a node that forwards its input): no kernel, no cost.
            return Some(p);
        }
        te::fuse(&mut p);
        if std::env::var_os("COLLAGE_NO_PACK").is_none() {
            codegen::c::pack_weights(&mut p);
        }
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
                None => estimate_us(&p, p.stage(id).expect("a stage")),
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

/// Places `g` (after the pass pipeline) on the backends of `opts`.
pub fn place_graph(g: &Graph, opts: &Options, target: &TargetFingerprint) -> Result<PlacementInfo> {
    let backends = backend::select(&opts.backends)?;
    let names: Vec<&'static str> = backends.iter().map(|b| b.name()).collect();
    let cache = opts.cache.as_deref();
    let mut pricer = Pricer::new(g, cache, target)?;
    if opts.greedy {
        return greedy(g, &backends, &mut pricer, cache, target);
    }
    let mut priced: Vec<(usize, Vec<usize>, String, f64, bool)> = Vec::new();
    let mut placement = place(
        g,
        &backends,
        &mut |b, c: &Candidate| {
            let nodes: Vec<usize> = c.sub_graph.inside().iter().collect();
            let (cost, measured) = pricer.price(&nodes, backends[b].as_ref())?;
            priced.push((b, nodes, c.rule_name.clone(), cost, measured));
            Some(cost)
        },
        &|a, b| transition(cache, target, names[a], names[b]),
        SearchLimits::default(),
    )?;
    if let Some(rec) = cache.and_then(|c| c.get(&placement_key(g, target, &names, opts.threads))) {
        if let Some(parts) = recorded(g, rec, &backends, &mut pricer, &mut priced) {
            placement.cost_us = estimate(g, &parts, cache, target);
            placement.parts = parts;
            placement.stop = StopReason::Recorded {
                median_ns: (rec.median_us * 1e3).round() as u64,
                threads: opts.threads.max(1),
            };
        }
    }
    let alternatives = placement
        .parts
        .iter()
        .map(|part| {
            priced
                .iter()
                .filter(|(b, nodes, _, _, _)| {
                    *nodes == part.nodes && names[*b] != part.backend.name()
                })
                .min_by(|x, y| x.3.total_cmp(&y.3))
                .map(|(b, _, rule, cost, _)| (names[*b].to_string(), rule.clone(), *cost))
        })
        .collect();
    let measured = placement
        .parts
        .iter()
        .map(|part| {
            priced.iter().any(|(b, nodes, rule, _, m)| {
                *m && names[*b] == part.backend.name() && *nodes == part.nodes && *rule == part.rule
            })
        })
        .collect();
    let (hits, misses) = pricer.counts();
    Ok(PlacementInfo {
        placement,
        backends: names,
        misses,
        hits,
        alternatives,
        measured,
        greedy: false,
    })
}

/// The parts of the placement recorded in `rec` (by `collage tune --evolve`), priced (and added
/// to `priced`), or `None` if it does not fit this graph and these backends (then the search's
/// placement stands).
fn recorded(
    g: &Graph,
    rec: &crate::tune::Entry,
    backends: &[Box<dyn Backend>],
    pricer: &mut Pricer,
    priced: &mut Vec<(usize, Vec<usize>, String, f64, bool)>,
) -> Option<Vec<Part>> {
    let names: Vec<&'static str> = backends.iter().map(|b| b.name()).collect();
    let decoded = decode_parts(rec.params.get("parts")?, &names, g.nodes.len())?;
    let mut parts = Vec::new();
    for (backend, nodes) in decoded {
        let b = names.iter().position(|&n| n == backend)?;
        let rule = priced
            .iter()
            .find(|(pb, pn, _, _, _)| *pb == b && *pn == nodes)
            .map_or_else(|| "recorded".to_string(), |x| x.2.clone());
        let (cost_us, measured) = pricer.price(&nodes, backends[b].as_ref())?;
        priced.push((b, nodes.clone(), rule.clone(), cost_us, measured));
        parts.push(Part {
            backend: backends[b].id(),
            nodes,
            rule,
            cost_us,
        });
    }
    Some(parts)
}

/// The estimated cost of `parts`: their costs plus a transition penalty for every value that
/// crosses between backends.
fn estimate(
    g: &Graph,
    parts: &[Part],
    cache: Option<&CostCache>,
    target: &TargetFingerprint,
) -> f64 {
    let mut backend_of = vec![""; g.nodes.len()];
    for p in parts {
        for &n in &p.nodes {
            backend_of[n] = p.backend.name();
        }
    }
    let mut cost_us: f64 = parts.iter().map(|p| p.cost_us).sum();
    let view = crate::partition::sub_graph::DataflowView::new(g);
    for n in 0..g.nodes.len() {
        for &pn in view.inputs(n) {
            cost_us += transition(cache, target, backend_of[pn], backend_of[n]);
        }
    }
    cost_us
}

/// The fixed-priority baseline: every node on the first backend (in priority order) that
/// supports it and can run it alone.
fn greedy(
    g: &Graph,
    backends: &[Box<dyn Backend>],
    pricer: &mut Pricer,
    cache: Option<&CostCache>,
    target: &TargetFingerprint,
) -> Result<PlacementInfo> {
    let start = std::time::Instant::now();
    let mut parts: Vec<Part> = Vec::new();
    let mut measured = Vec::new();
    for (n, node) in g.nodes.iter().enumerate() {
        let op = node.op.op_type();
        let kind = node.op.kind();
        let chosen = backends.iter().find_map(|be| {
            if !be.supports(op, kind) {
                return None;
            }
            pricer.price(&[n], be.as_ref()).map(|c| (be.id(), c))
        });
        let Some((backend, (cost_us, was_measured))) = chosen else {
            return Err(Error::Model {
                model: g.name.clone(),
                detail: format!(
                    "--greedy: no backend in the list runs node `{}` ({op})",
                    node.name
                ),
            });
        };
        parts.push(Part {
            backend,
            nodes: vec![n],
            rule: op.to_string(),
            cost_us,
        });
        measured.push(was_measured);
    }
    let cost_us = estimate(g, &parts, cache, target);
    let (hits, misses) = pricer.counts();
    let n_parts = parts.len();
    Ok(PlacementInfo {
        placement: Placement {
            parts,
            cost_us,
            stop: StopReason::Greedy,
            candidates: n_parts,
            elapsed: start.elapsed(),
        },
        backends: backends.iter().map(|b| b.name()).collect(),
        misses,
        hits,
        alternatives: vec![None; n_parts],
        measured,
        greedy: true,
    })
}

/// The fusion region and library of every node under `info`: the parts get regions 1, 2, ...
/// (library `None` for generated code).
pub fn assignment(g: &Graph, info: &PlacementInfo) -> Vec<(u32, Option<BackendId>)> {
    assignment_of(g, &info.placement.parts)
}

/// [`assignment`] for a list of parts.
pub fn assignment_of(g: &Graph, parts: &[Part]) -> Vec<(u32, Option<BackendId>)> {
    let mut a = vec![(0u32, None); g.nodes.len()];
    // Every part is its own fusion region, generated code included: fusion then builds exactly
    // the kernels the placement priced (inlining a producer of another part into a contraction
    // can cost it its register-blocked schedule, which the search never saw).
    for (next, part) in (1u32..).zip(parts) {
        let lib = part.backend.lookup().is_ok_and(|b| b.library());
        for &n in &part.nodes {
            a[n] = (next, lib.then_some(part.backend));
        }
    }
    a
}

/// Compiles an imported graph on the backends of `opts`: passes, placement, lowering that
/// follows it, fusion, arena, C and glue.
pub fn compile(mut g: Graph, symbol: &str, opts: &Options) -> Result<Compiled> {
    g.limits = opts.limits();
    crate::passes::run(&mut g, crate::passes::PIPELINE)?;
    let target = opts
        .target
        .clone()
        .unwrap_or_else(|| TargetFingerprint::current(&crate::toolchain::c_compiler_version()));
    compile_passed(g, symbol, opts, &target)
}

/// [`compile`] for a graph already through the pass pipeline.
pub fn compile_passed(
    g: Graph,
    symbol: &str,
    opts: &Options,
    target: &TargetFingerprint,
) -> Result<Compiled> {
    let info = place_graph(&g, opts, target)?;
    let assign = assignment(&g, &info);
    let mut c = codegen::compile_scheduled(g, symbol, &|n| assign[n], opts.schedule_seed)?;
    c.placement = Some(info);
    Ok(c)
}

/// Every kernel the placement search may price for `g` (after the pass pipeline) on the backends
/// of `opts` and that `cache` lacks: one `(program, stage, key)` per distinct key.
pub fn candidate_kernels(
    g: &Graph,
    opts: &Options,
    target: &TargetFingerprint,
    cache: &CostCache,
) -> Result<Vec<(Arc<Program>, BufId, Key)>> {
    let backends = backend::select(&opts.backends)?;
    let pricer = Pricer::new(g, None, target)?;
    let view = crate::partition::sub_graph::DataflowView::new(g);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for be in &backends {
        let mut node_sets: Vec<Vec<usize>> = be
            .rule()
            .candidates(&view, g)
            .iter()
            .map(|c| c.sub_graph.inside().iter().collect())
            .collect();
        // The greedy baseline prices single nodes.
        node_sets.extend((0..g.nodes.len()).map(|n| vec![n]));
        node_sets.sort();
        node_sets.dedup();
        for nodes in node_sets {
            let Some(p) = pricer.part_program(&nodes, be.id(), be.library()) else {
                continue;
            };
            let p = Arc::new(p);
            for id in measure::stages(&p) {
                let key = kernel_key(&p, id, target);
                if cache.get(&key).is_none() && seen.insert(key.clone()) {
                    out.push((p.clone(), id, key));
                }
            }
        }
    }
    Ok(out)
}

/// Measures every kernel of [`candidate_kernels`] (in batches, one shared library each), adds the
/// results to `cache` and calls `save` after each batch and `progress(done, total)` after each
/// kernel. Returns how many were measured.
#[allow(clippy::too_many_arguments)]
pub fn tune_candidates(
    g: &Graph,
    opts: &Options,
    target: &TargetFingerprint,
    cache: &mut CostCache,
    work: &std::path::Path,
    budget: measure::MeasureBudget,
    save: &mut dyn FnMut(&CostCache) -> Result<()>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<usize> {
    const BATCH: usize = 48;
    let todo = candidate_kernels(g, opts, target, cache)?;
    let total = todo.len();
    progress(0, total);
    let exec = collage_runtime::Executor::Serial;
    let mut done = 0;
    for batch in todo.chunks(BATCH) {
        let items: Vec<(&Program, BufId)> =
            batch.iter().map(|(p, id, _)| (p.as_ref(), *id)).collect();
        let mut hs = measure::build_kernel_set(&items, work, "-O3")?;
        for ((p, id, key), h) in batch.iter().zip(hs.iter_mut()) {
            let m = h.time(&exec, &budget);
            let st = p.stage(*id).expect("a stage");
            let mut params = std::collections::BTreeMap::new();
            params.insert(
                "schedule".to_string(),
                match st.exec {
                    te::Exec::Generated => {
                        format!("{:?}", codegen::c::schedule_of(p, st, 16))
                    }
                    ref e => format!("{} call", e.backend()),
                },
            );
            let bad = |e: String| Error::Model {
                model: g.name.clone(),
                detail: format!("kernel {}: {e}", st.name),
            };
            let entry = crate::tune::Entry::new(m.median_us, m.p90_us, m.samples, params)
                .map_err(|e| bad(e.to_string()))?;
            cache
                .insert(key.clone(), entry)
                .map_err(|e| bad(e.to_string()))?;
            done += 1;
            progress(done, total);
        }
        save(cache)?;
    }
    Ok(total)
}

/// Everything `collage tune` measures for `g` (after the pass pipeline): the transition penalty
/// between every two backends ([`crate::refine::tune_transitions`]), the candidates of every
/// backend ([`tune_candidates`]), then the kernels of the placement those measurements choose.
/// Returns how many entries were measured.
#[allow(clippy::too_many_arguments)]
pub fn tune_model(
    g: &Graph,
    opts: &Options,
    target: &TargetFingerprint,
    cache: &mut CostCache,
    work: &std::path::Path,
    budget: measure::MeasureBudget,
    save: &mut dyn FnMut(&CostCache) -> Result<()>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<usize> {
    let t = crate::refine::tune_transitions(opts, target, cache, work, progress)?;
    if t > 0 {
        save(cache)?;
    }
    let n = tune_candidates(g, opts, target, cache, work, budget, save, progress)?;
    let chosen = Options {
        cache: Some(Arc::new(cache.clone())),
        ..opts.clone()
    };
    let c = compile_passed(g.clone(), "tune", &chosen, target)?;
    let m = crate::explain::tune(&c, target, cache, work, budget, save, progress)?;
    Ok(t + n + m)
}
