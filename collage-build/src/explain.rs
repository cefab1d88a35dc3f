//! Kernel reports for `collage explain` and `collage tune`: every generated kernel with the nodes it
//! came from, its schedule, an analytic cost estimate and, when the cost cache has it, its measured
//! latency. Kernels are keyed in the cache by a canonical signature of their tensor expression, so
//! the same kernel in another model (same computation, shapes and weight layouts) shares an entry.
//!
//! The placement report ([`render_placement`], [`html_page`]) shows every partition with its
//! backend, cost and the best alternative the search rejected.
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use collage_runtime::Executor;

use crate::codegen::c::{schedule_of, Schedule};
use crate::codegen::Compiled;
use crate::error::{Error, Result};
use crate::measure::{self, kernel_program, MeasureBudget};
use crate::te::{BinOp, BufKind, Expr, Program, Scalar, Stage};
use crate::tune::{CostCache, Entry, Key, TargetFingerprint};

/// One generated kernel.
#[derive(Clone, Debug)]
pub struct KernelReport {
    /// Stage buffer id in the program (`k<id>` in the generated C).
    pub id: u32,
    /// The stage name (the node it came from; fused stages keep their last node's name).
    pub name: String,
    /// The backend that computes it (`c`: generated loops; else a library call).
    pub backend: &'static str,
    /// The loop schedule (of generated kernels).
    pub schedule: Schedule,
    /// Its knobs (generated reductions; for AVX-512's 16 lanes): the stage's own or the
    /// target's default.
    pub knobs: Option<crate::schedule::Schedule>,
    /// Output type.
    pub output: String,
    /// Body evaluations.
    pub work: usize,
    /// Analytic estimate in microseconds (one thread).
    pub estimate_us: f64,
    /// The cache key.
    pub key: Key,
    /// The cached measurement, if any.
    pub measured: Option<Entry>,
}

/// FNV-1a (64-bit) of a string: stable across runs and machines, for names and keys.
pub(crate) fn fnv64(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The cache key of stage `id` of `p`: the hash of the stage's canonical text
/// ([`Stage::canonical_text`], operands renumbered via [`kernel_program`]), the operands'
/// layouts, and its input and output types.
pub fn kernel_key(p: &Program, id: u32, target: &TargetFingerprint) -> Key {
    let k = kernel_program(p, id);
    let mut inputs = Vec::new();
    let mut layout = String::new();
    let mut stage_text = String::new();
    for b in &k.bufs {
        match &b.kind {
            BufKind::Stage(st) => stage_text = st.canonical_text(),
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
    let output = p.bufs[id as usize].ty.to_string();
    let backend = p.stage(id).map_or("c", |s| s.exec.backend());
    Key::new(target.clone(), backend, signature, inputs, [output])
}

/// Rough single-thread throughput per schedule, in body evaluations per microsecond: the analytic
/// model used when the cache has no measurement. Calibrated on the measured kernels of the six
/// benchmark models (`collage tune`, every backend; AMD EPYC Zen 4, AVX-512, one thread): the
/// work-weighted rates were register-blocked 42k (46k on the large products of bert_layer and
/// the Fire modules, which decide between generated code and a library), row 2.1k, plain 1.6k
/// and elementwise 1.3k evaluations per microsecond (work-weighted: mostly im2col gathers), and
/// libraries 43k-46k multiply-adds. Elementwise stages are estimated by [`elementwise_rate`].
fn rate(s: Schedule) -> f64 {
    match s {
        Schedule::RegisterBlocked => 46_000.0,
        Schedule::Row => 2_000.0,
        Schedule::Plain => 1_500.0,
        Schedule::Plane => 8_000.0,
        Schedule::Elementwise => 1_300.0,
    }
}

/// Rough single-thread throughput of library GEMMs and oneDNN primitives, in multiply-adds per
/// microsecond (measured alongside [`rate`]: on a par with register-blocked generated code).
const LIBRARY_RATE: f64 = 44_000.0;

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

/// The analytic single-thread estimate of stage `st` of `p`, microseconds.
pub fn estimate_us(p: &Program, st: &Stage) -> f64 {
    match st.exec {
        crate::te::Exec::Generated => {
            let rate = match schedule_of(p, st, 16) {
                Schedule::Elementwise => elementwise_rate(st),
                s => rate(s),
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
                .unwrap_or(st.work() as f64 / LIBRARY_RATE);
            let epilogue = st
                .reduce
                .as_ref()
                .and_then(|r| r.finalize.as_ref())
                .map_or(0.0, |_| st.ty.numel() as f64 / 4_000.0);
            call + LIBRARY_CALL_US + epilogue
        }
    }
}

/// Every kernel of a compiled model, with measurements from `cache` where present.
pub fn kernels(
    c: &Compiled,
    target: &TargetFingerprint,
    cache: Option<&CostCache>,
) -> Vec<KernelReport> {
    let p = &c.program;
    measure::stages(p)
        .into_iter()
        .map(|id| {
            let st = p.stage(id).expect("a stage");
            let schedule = schedule_of(p, st, 16);
            let key = kernel_key(p, id, target);
            let measured = cache.and_then(|c| c.get(&key)).cloned();
            KernelReport {
                id,
                name: st.name.clone(),
                backend: st.exec.backend(),
                schedule,
                knobs: (st.exec == crate::te::Exec::Generated && st.reduce.is_some())
                    .then(|| crate::schedule::Schedule::of(st, 16)),
                output: p.bufs[id as usize].ty.to_string(),
                work: st.work(),
                estimate_us: estimate_us(p, st),
                key,
                measured,
            }
        })
        .collect()
}

/// Node names of `nodes`, with op types, shortened for a report line.
fn node_list(g: &crate::ir::Graph, nodes: &[usize], max: usize) -> String {
    let mut names: Vec<String> = nodes
        .iter()
        .take(max)
        .map(|&n| format!("{}({})", g.nodes[n].name, g.nodes[n].op.op_type()))
        .collect();
    if nodes.len() > max {
        names.push(format!("+{} more", nodes.len() - max));
    }
    names.join(" ")
}

/// The placement report: the search's statistics, then one line per partition (backend, cost,
/// whether measured, the nodes, and the best alternative with its cost), then the use of each
/// backend.
pub fn render_placement(c: &Compiled) -> String {
    let mut out = String::new();
    let Some(info) = &c.placement else {
        return out;
    };
    let pl = &info.placement;
    writeln!(
        out,
        "placement of {}: {} partitions over {} nodes; backends offered: {}; {}, {} candidates, {:.2} ms; total {:.1} us (kernels + transitions, one thread)",
        c.name,
        pl.parts.len(),
        c.graph.nodes.len(),
        info.backends.join(","),
        pl.stop,
        pl.candidates,
        pl.elapsed.as_secs_f64() * 1e3,
        pl.cost_us
    )
    .unwrap();
    writeln!(
        out,
        "{:>4}  {:<5} {:>10}  {:<8}  {:<40}  best alternative",
        "part", "backend", "cost us", "source", "nodes"
    )
    .unwrap();
    for (i, part) in pl.parts.iter().enumerate() {
        let alt = match info.alternatives.get(i).and_then(|a| a.as_ref()) {
            Some((b, rule, cost)) => format!("{b} {cost:.1} us ({rule})"),
            None => "-".into(),
        };
        let src = if info.measured.get(i).copied().unwrap_or(false) {
            "measured"
        } else {
            "analytic"
        };
        writeln!(
            out,
            "{:>4}  {:<5} {:>10.1}  {:<8}  {:<40}  {alt}",
            i,
            part.backend,
            part.cost_us,
            src,
            node_list(&c.graph, &part.nodes, 4)
        )
        .unwrap();
    }
    let mut per: BTreeMap<&str, (usize, usize, f64)> = BTreeMap::new();
    for part in &pl.parts {
        let e = per.entry(part.backend.name()).or_default();
        e.0 += 1;
        e.1 += part.nodes.len();
        e.2 += part.cost_us;
    }
    let uses: Vec<String> = per
        .iter()
        .map(|(b, (p, n, cost))| format!("{b}: {p} partitions, {n} nodes, {cost:.1} us"))
        .collect();
    writeln!(out, "backends used: {}", uses.join("; ")).unwrap();
    if info.misses > 0 {
        writeln!(
            out,
            "{} of {} kernel costs are analytic estimates (not in the cache)",
            info.misses,
            info.misses + info.hits
        )
        .unwrap();
    }
    out
}

/// The `explain --html` page: the graph coloured by backend and the partition table.
pub fn html_page(c: &Compiled, ks: &[KernelReport]) -> crate::html::Page {
    let g = &c.graph;
    let mut part_of = vec![0usize; g.nodes.len()];
    let mut backend_of = vec!["c"; g.nodes.len()];
    let mut parts = Vec::new();
    if let Some(info) = &c.placement {
        for (i, part) in info.placement.parts.iter().enumerate() {
            for &n in &part.nodes {
                part_of[n] = i;
                backend_of[n] = part.backend.name();
            }
            let alt = match info.alternatives.get(i).and_then(|a| a.as_ref()) {
                Some((b, rule, cost)) => format!("{b}: {cost:.1} us ({rule})"),
                None => "-".into(),
            };
            let measured = info.measured.get(i).copied().unwrap_or(false);
            parts.push(crate::html::PartRow {
                index: i,
                backend: part.backend.to_string(),
                nodes: node_list(g, &part.nodes, 6),
                kernel: part.rule.clone(),
                estimated_us: part.cost_us,
                measured_us: measured.then_some(part.cost_us),
                alternative: alt,
            });
        }
    }
    let mut producer = std::collections::HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for v in &n.outputs {
            producer.insert(*v, i);
        }
    }
    let mut edges = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for v in n.inputs.iter().flatten() {
            if let Some(&p) = producer.get(v) {
                edges.push((p, i));
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    let nodes = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| crate::html::Node {
            name: n.name.clone(),
            op: n.op.op_type().to_string(),
            shape: n
                .outputs
                .first()
                .map(|&v| g.ty(v).to_string())
                .unwrap_or_default(),
            part: part_of[i],
            backend: backend_of[i].to_string(),
        })
        .collect();
    let mut summary = vec![("model".to_string(), c.name.clone())];
    if let Some(info) = &c.placement {
        summary.push(("backends offered".into(), info.backends.join(", ")));
        summary.push((
            "search".into(),
            format!(
                "{} ({} candidates, {:.2} ms)",
                info.placement.stop,
                info.placement.candidates,
                info.placement.elapsed.as_secs_f64() * 1e3
            ),
        ));
        summary.push((
            "placement cost".into(),
            format!("{:.1} us (one thread)", info.placement.cost_us),
        ));
        summary.push((
            "cost sources".into(),
            format!("{} measured, {} analytic kernels", info.hits, info.misses),
        ));
    }
    let total: f64 = ks.iter().map(|k| k.estimate_us).sum();
    summary.push((
        "kernels".into(),
        format!(
            "{} generated or library kernels, {total:.1} us estimated",
            ks.len()
        ),
    ));
    crate::html::Page {
        title: format!("collage explain: {}", c.name),
        summary,
        nodes,
        edges,
        parts,
    }
}

/// The text report: one line per kernel, then the totals.
pub fn render_text(model: &str, ks: &[KernelReport]) -> String {
    let mut out = String::new();
    writeln!(out, "model {model}: {} kernels", ks.len()).unwrap();
    writeln!(
        out,
        "{:>5}  {:<28} {:<16} {:<22} {:>12} {:>12} {:>12}  knobs",
        "id", "kernel (last node)", "schedule", "output", "work", "est. us", "measured us"
    )
    .unwrap();
    let (mut est, mut meas, mut missing) = (0.0, 0.0, 0);
    for k in ks {
        let m = match &k.measured {
            Some(e) => {
                meas += e.median_us;
                format!("{:.2}", e.median_us)
            }
            None => {
                missing += 1;
                "-".to_string()
            }
        };
        est += k.estimate_us;
        writeln!(
            out,
            "{:>5}  {:<28} {:<16} {:<22} {:>12} {:>12.2} {:>12}  {}",
            format!("k{}", k.id),
            truncate(&k.name, 28),
            if k.backend == "c" {
                format!("{:?}", k.schedule)
            } else {
                format!("{} call", k.backend)
            },
            truncate(&k.output, 22),
            k.work,
            k.estimate_us,
            m,
            k.knobs.map_or("-".to_string(), |s| s.to_string())
        )
        .unwrap();
    }
    writeln!(
        out,
        "total: estimated {est:.1} us; measured {meas:.1} us over {} of {} kernels",
        ks.len() - missing,
        ks.len()
    )
    .unwrap();
    if missing > 0 {
        writeln!(
            out,
            "{missing} kernels have no measurement: run `collage tune MODEL --cache FILE`"
        )
        .unwrap();
    }
    out
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('~');
        t
    }
}

/// Measures every kernel of `c` missing from `cache` (one shared library for all of them), adds
/// the results, and calls `progress(done, total)` after each. Returns how many were measured.
pub fn tune(
    c: &Compiled,
    target: &TargetFingerprint,
    cache: &mut CostCache,
    work: &Path,
    budget: MeasureBudget,
    save: &mut dyn FnMut(&CostCache) -> Result<()>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<usize> {
    let p = &c.program;
    let todo: Vec<(u32, Key)> = measure::stages(p)
        .into_iter()
        .map(|id| (id, kernel_key(p, id, target)))
        .filter(|(_, k)| cache.get(k).is_none())
        .collect();
    let total = todo.len();
    progress(0, total);
    if todo.is_empty() {
        return Ok(0);
    }
    let ids: Vec<u32> = todo.iter().map(|(id, _)| *id).collect();
    let mut harnesses = measure::build_kernels(p, &ids, work, "-O3")?;
    let exec = Executor::Serial;
    for (i, ((id, key), h)) in todo.into_iter().zip(harnesses.iter_mut()).enumerate() {
        let m = h.time(&exec, &budget);
        let mut params = BTreeMap::new();
        params.insert(
            "schedule".to_string(),
            format!("{:?}", schedule_of(p, p.stage(id).unwrap(), 16)),
        );
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
