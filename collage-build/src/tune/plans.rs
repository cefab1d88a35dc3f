//! Tuning kernel plans the way ETO does (VLDB'22): the kernels of a placement are measured
//! with other plans from their space (`te::PlanChoice`), a few from scratch and the rest by
//! reusing the best plan of a similar kernel, as the min-cost arborescence of [`super::eto`]
//! says; each cache entry then records the best plan, its time and where it came from.
//!
//! - **A kernel's space**: every plan kind that fits its stage, every knob over its range
//!   (long ranges in powers of two), each point legalised by the planner and kept once per
//!   distinct plan; the default plan first, the rest ranked by a register-tile and traffic
//!   model ([`model_us`], Welder's traffic over the plan's tile).
//! - **From scratch**: a two-level search ([`scratch_rounds`]): the model's top k/4 are measured
//!   (the default plan among them), then the model's best k/8 of the plans one knob step away
//!   from the fastest of those — 3k/8 trials that also reach plans the model ranks past its
//!   top k. A space of at most 3k/8 plans is measured whole; the exhaustive baseline
//!   (`reuse: false`) measures the model's top k of every kernel in one round.
//! - **By reuse** from a tuned kernel: its best choice realised for this kernel, then the
//!   model's best of the choices one knob step away from it — more of them the farther the two
//!   loop nests are apart ([`reuse_trials`]): ETO's pruned range around the source's plan.
//! - **Bridges**: a 1-hop bridge is a real kernel too — one of the two kernels' own programs
//!   with its loops shrunk to the element-wise minimum (it reads a subset of what that kernel
//!   reads, so it is safe to run); it is tuned like the others and never stored.
//!
//! A kernel whose best trial is slower than its default plan's measurement (already in the
//! cache) keeps the default. That measurement, made by `tune`'s first pass (every kernel's
//! cost, the same budget, this machine's variant), also stands for the default wherever a
//! search or a reuse would measure it: it is not a trial. The trials an exhaustive tuning
//! would make (top-k of every kernel, less the defaults measured already) are counted beside,
//! for the report.
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;

use collage_runtime::Executor;

use super::eto::{self, Nest, Source};
use super::measure::{self, build_kernel_set_with, kernel_program, MeasureBudget, Measurement};
use super::price::kernel_key;
use super::{CostCache, Entry, Key, TargetFingerprint};
use crate::error::{Error, Result};
use crate::schedule::plan::{kinds_that_fit, plan_stage};
use crate::target::{Cpu, Target};
use crate::te::{BufId, Exec, Isa, KernelPlan, PlanChoice, PlanKind, Program};

/// What a plan-tuning run does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlanTuning {
    /// Plans measured for a kernel tuned from scratch.
    pub top_k: usize,
    /// Reuse plans between kernels (ETO); `false` tunes every kernel from scratch (the
    /// exhaustive top-k baseline).
    pub reuse: bool,
    /// Add 1-hop bridge kernels where they make the tree cheaper.
    pub bridges: bool,
    /// Stop after this many trials (kernels not reached keep their default plan and are
    /// tuned by the next run).
    pub max_trials: Option<usize>,
    /// Stop after this many seconds (likewise).
    pub max_seconds: Option<f64>,
    /// Tune the plans of this vector variant instead of the machine's (a narrower one: the
    /// kernels are measured with `Isa::defines`): a test hook, so that every variant's plans
    /// are tuned and checked on the widest machine. Record them under a fingerprint of a
    /// machine with that variant.
    pub isa: Option<Isa>,
}

impl Default for PlanTuning {
    /// ETO with bridges, the top 16 plans of a kernel searched from scratch, no budget.
    fn default() -> Self {
        PlanTuning {
            top_k: 16,
            reuse: true,
            bridges: true,
            max_trials: None,
            max_seconds: None,
            isa: None,
        }
    }
}

/// What a plan-tuning run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanReport {
    /// Kernels whose plans were tuned in this run.
    pub kernels: usize,
    /// Of them, searched from scratch.
    pub scratch: usize,
    /// Of them, tuned by reuse.
    pub reused: usize,
    /// Bridge kernels tuned.
    pub bridges: usize,
    /// Of the kernels tuned, those that run the same program as another (another layer of
    /// the same shape): they share its plan and measurement, no trial of their own.
    pub shared: usize,
    /// Kernels that were tuned already (sources for the others).
    pub already: usize,
    /// Plans measured (a default plan that the first pass measured is not measured again).
    pub trials: usize,
    /// Plans an exhaustive tuning (top-k of every kernel, less the defaults measured already)
    /// would have measured.
    pub exhaustive_trials: usize,
    /// Of them, for the kernels that do not run the same program as another.
    pub distinct_trials: usize,
    /// Kernels whose best plan is not the default one.
    pub improved: usize,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl std::fmt::Display for PlanReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plans of {} kernels tuned ({} searched, {} by reuse, {} the same program as another, {} bridges; {} tuned before) in {} trials ({} for top-k of every kernel, {} of every distinct one), {:.1} s; {} run a plan other than the default",
            self.kernels,
            self.scratch,
            self.reused,
            self.shared,
            self.bridges,
            self.already,
            self.trials,
            self.exhaustive_trials,
            self.distinct_trials,
            self.seconds,
            self.improved
        )
    }
}

/// The instruction-set variant the generated code runs on this machine.
pub fn host_isa() -> Isa {
    match Target::host().cpu().map(|c| c.isa) {
        Some(crate::target::VectorIsa::Avx512) => Isa::Avx512,
        Some(crate::target::VectorIsa::Avx2) => Isa::Avx2,
        _ => Isa::Base,
    }
}

/// The loop nest of a kernel's stage for reuse pairs: the family is the plan kinds that fit
/// it with the ranks of its output and reduction; the extents are the output's, then the
/// reduction's.
pub fn nest(p: &Program, id: BufId, isa: Isa, cpu: &Cpu) -> Nest {
    let st = p.stage(id).expect("a stage");
    let kinds: Vec<&str> = kinds_that_fit(p, st, isa, cpu)
        .iter()
        .map(|k| k.name())
        .collect();
    let red = st.reduce.as_ref().map_or(&[][..], |r| &r.extents[..]);
    let mut extents = st.ty.shape.clone();
    extents.extend_from_slice(red);
    Nest::new(
        format!("{}/{}/{}", kinds.join(","), st.ty.rank(), red.len()),
        extents,
    )
}

/// A nest as text (`family x1 x2 ...`), for the cache; [`parse_nest`] reads it back.
pub fn nest_text(n: &Nest) -> String {
    let e: Vec<String> = n.extents.iter().map(|x| x.to_string()).collect();
    format!("{} {}", n.family, e.join("x"))
}

/// Reads [`nest_text`].
pub fn parse_nest(s: &str) -> Option<Nest> {
    let (family, e) = s.rsplit_once(' ')?;
    let extents = e
        .split('x')
        .map(|x| x.parse().ok())
        .collect::<Option<Vec<usize>>>()?;
    Some(Nest::new(family, extents))
}

/// The values a knob's range is searched over: all of a short range, powers of two of a long
/// one.
fn knob_values(lo: u32, hi: u32) -> Vec<u32> {
    if hi - lo < 64 {
        (lo..=hi).collect()
    } else {
        let mut v = Vec::new();
        let mut x = lo.next_power_of_two();
        while x <= hi {
            v.push(x);
            x = x.saturating_mul(2);
        }
        v
    }
}

/// Every point of `kind`'s knob grid ([`knob_values`] of each range).
fn grid(kind: PlanKind) -> Vec<PlanChoice> {
    let ranges = PlanChoice::ranges(kind);
    let mut points: Vec<Vec<u32>> = vec![Vec::new()];
    for &(_, lo, hi) in ranges {
        points = points
            .into_iter()
            .flat_map(|p| {
                knob_values(lo, hi).into_iter().map(move |v| {
                    let mut q = p.clone();
                    q.push(v);
                    q
                })
            })
            .collect();
    }
    points
        .into_iter()
        .map(|vals| {
            PlanChoice::from_knobs(kind, &|k| {
                let i = ranges.iter().position(|r| r.0 == k).expect("a knob");
                vals[i]
            })
        })
        .collect()
}

/// `k` (a kernel's standalone program) with its stage `id` planned with `choice`, and for a
/// group's consumer grouped again; `None` when the choice breaks the kernel's group (its
/// measurement would no longer be the kernel's).
fn with_choice(k: &Program, id: BufId, choice: PlanChoice, target: &Target) -> Option<Program> {
    let mut t = k.clone();
    if let crate::te::BufKind::Stage(st) = &mut t.bufs[id.index()].kind {
        st.choice = Some(choice);
    }
    crate::codegen::plan(&mut t, target, None);
    if !k.groups.is_empty() {
        t.groups = crate::schedule::plan_groups(&t, target, &crate::schedule::tile_widths, None);
        if t.groups.len() != k.groups.len() {
            return None;
        }
    }
    Some(t)
}

/// Adds choice `c` realised for kernel `id` of `p` to `to`, with its [`model_us`], when it is of
/// `c`'s kind (the kind fits), in neither `to` nor `seen` yet, and for a group's consumer keeps
/// the group.
#[allow(clippy::too_many_arguments)]
fn add_new(
    p: &Program,
    id: BufId,
    isa: Isa,
    cpu: &Cpu,
    target: &Target,
    c: PlanChoice,
    seen: &[(PlanChoice, KernelPlan)],
    to: &mut Vec<(PlanChoice, KernelPlan, f64)>,
) {
    let plan = plan_stage(p, p.stage(id).expect("a stage"), isa, cpu, Some(c));
    if plan.kind() == c.kind()
        && !seen.iter().any(|(_, q)| *q == plan)
        && !to.iter().any(|(_, q, _)| *q == plan)
        && (p.groups.is_empty() || with_choice(p, id, plan.choice(), target).is_some())
    {
        let cost = model_us(p, id, &plan, cpu);
        to.push((plan.choice(), plan, cost));
    }
}

/// The distinct plans of kernel `id` of `p` for `isa`: the default first, then every other
/// legal plan of every kind that fits (for a group's consumer, that keeps the group), ranked by
/// [`model_us`] (ties in grid order).
pub fn space(
    p: &Program,
    id: BufId,
    isa: Isa,
    cpu: &Cpu,
    target: &Target,
) -> Vec<(PlanChoice, KernelPlan)> {
    let st = p.stage(id).expect("a stage");
    let default = plan_stage(p, st, isa, cpu, st.choice);
    let mut out = vec![(default.choice(), default)];
    let mut rest = Vec::new();
    for kind in kinds_that_fit(p, st, isa, cpu) {
        for c in grid(kind) {
            add_new(p, id, isa, cpu, target, c, &out, &mut rest);
        }
    }
    rest.sort_by(|a, b| a.2.total_cmp(&b.2));
    out.extend(rest.into_iter().map(|(c, p, _)| (c, p)));
    out
}

/// A model of a plan's single-thread time, microseconds, for ranking a kernel's plans (never
/// for pricing): the contraction plans' multiply-adds at a peak rate slowed by edge tiles that
/// are partly empty, by the operand loads of a register tile (rows + vectors per step) and by
/// spills past the vector registers, plus Welder's memory traffic of the plan's tile at an
/// L2 bandwidth; other kinds rank by traffic alone, or keep the grid order.
pub fn model_us(p: &Program, id: BufId, plan: &KernelPlan, cpu: &Cpu) -> f64 {
    const FMA_PER_US: f64 = 2.0 * 16.0 * 3000.0; // two 16-lane FMAs a cycle at 3 GHz
    const L2_BYTES_PER_US: f64 = 64.0 * 3000.0;
    let st = p.stage(id).expect("a stage");
    let shape = &st.ty.shape;
    let red: usize = st.reduce.as_ref().map_or(1, |r| r.extents.iter().product());
    let fill = |n: usize, t: usize| n as f64 / (n.div_ceil(t.max(1)) * t.max(1)) as f64;
    let tiled = |v: usize, w: usize, j: Option<(usize, usize)>| {
        let mut tile = vec![1; shape.len()];
        tile[v] = w.min(shape[v]);
        if let Some((d, n)) = j {
            tile[d] = n.min(shape[d]);
        }
        tile
    };
    let traffic =
        |tile: &[usize]| crate::fusion::tile::traffic(p, st, tile) as f64 / L2_BYTES_PER_US;
    match plan {
        KernelPlan::Gemm(g) => {
            let w = g.vecs * g.lanes;
            let rows = g.jam.map_or(1, |(_, n)| n);
            let m = g.jam.map_or(1, |(d, _)| shape[d]);
            let eff = fill(shape[g.v], w) * fill(m, rows);
            let loads = (g.vecs + rows) as f64 / (g.vecs * rows) as f64;
            let regs = rows * g.vecs + g.vecs + 1;
            let spill = if regs > 32 { 2.0 } else { 1.0 };
            let lanes = g.lanes as f64 / 16.0;
            // Prefetches further ahead than the next tile keep their lines in L1 longer: 2%
            // per tile (the model has no term for their timing; this ranks the next tile's
            // first, so that a few measurements are not all spent on distances of one tile).
            let ahead = 1.0 + 0.02 * g.prefetch_tiles.saturating_sub(1) as f64;
            st.work() as f64 / (FMA_PER_US * lanes) / eff * (1.0 + loads) * spill * ahead
                + traffic(&tiled(g.v, w, g.jam))
        }
        KernelPlan::Channel(c) => {
            let w = c.vecs * c.lanes;
            let eff = fill(shape[c.c], w) * fill(shape[c.row], c.rows);
            let loads = (c.vecs + c.rows) as f64 / (c.vecs * c.rows) as f64;
            let regs = c.rows * c.vecs + c.vecs + 1;
            let spill = if regs > 32 { 2.0 } else { 1.0 };
            // A reduction block whose weights and inputs overflow L1 streams them from L2.
            let block = c.kc.min(red) * (w + c.rows) * 4;
            let l1 = if block > cpu.l1d { 1.3 } else { 1.0 };
            let lanes = c.lanes as f64 / 16.0;
            // Tiles over a flattened image that do not start aligned to its rows keep an
            // address per column: a quarter more per broadcast, shared by the tile's vectors
            // (mnist_cnn's 5x5 convolution at 14x14 measured 5.1 against 4.0 us aligned).
            let width =
                crate::schedule::analysis::split_factor(&st.body, c.row as u32, shape[c.row]);
            let unaligned = if crate::schedule::plan::aligned_tiles(c.rows, c.group, width) {
                1.0
            } else {
                1.0 + 0.25 / c.vecs as f64
            };
            st.work() as f64 / (FMA_PER_US * lanes) / eff * (1.0 + loads) * spill * l1 * unaligned
                + traffic(&tiled(c.c, w, Some((c.row, c.rows))))
        }
        KernelPlan::Row(r) => traffic(&tiled(r.v, r.tile, r.jam)),
        _ => 0.0,
    }
}

/// The trials of a search from scratch over a space of `size` plans with `k` the top-k
/// setting, in its two rounds: all of the space in one round when it holds at most 3k/8 plans
/// (`k` for the exhaustive baseline, `hierarchical` false), else k/4 of the model's top, then
/// k/8 around the fastest of them.
pub fn scratch_rounds(size: usize, k: usize, hierarchical: bool) -> (usize, usize) {
    if !hierarchical {
        (size.min(k), 0)
    } else {
        let (first, second) = ((k / 4).max(1), (k / 8).max(1));
        if size <= first + second {
            (size, 0)
        } else {
            (first, second)
        }
    }
}

/// Plans measured when kernel `to` reuses `from`'s best plan: that plan realised for `to`, and
/// one more per unit of distance between the nests, rounded (up to 4), but never more than `to`'s
/// space holds. Also the estimate the arborescence prices a reuse pair with.
pub fn reuse_trials(from: &Nest, to: &Nest, space: usize) -> usize {
    (1 + (from.distance(to).round() as usize).min(4)).min(space)
}

/// The plans to measure for a kernel reusing `source`: `source` realised for it, then the
/// best by [`model_us`] of the choices one knob step away from it (each knob alone, its next
/// and previous value in [`knob_values`]), `n` in all, distinct.
fn reuse_candidates(
    p: &Program,
    id: BufId,
    isa: Isa,
    cpu: &Cpu,
    target: &Target,
    source: PlanChoice,
    n: usize,
) -> Vec<(PlanChoice, KernelPlan)> {
    let st = p.stage(id).expect("a stage");
    let first = plan_stage(p, st, isa, cpu, Some(source));
    let mut out = vec![(first.choice(), first)];
    let kind = source.kind();
    let knobs = source.knobs();
    let mut near = Vec::new();
    for (i, &(name, lo, hi)) in PlanChoice::ranges(kind).iter().enumerate() {
        let values = knob_values(lo, hi);
        let at = values
            .iter()
            .position(|&v| v >= knobs[i].1)
            .unwrap_or(values.len() - 1);
        for j in [at.checked_sub(1), Some(at + 1)].into_iter().flatten() {
            let Some(&v) = values.get(j) else { continue };
            let c = PlanChoice::from_knobs(kind, &|k| {
                if k == name {
                    v
                } else {
                    knobs.iter().find(|x| x.0 == k).expect("a knob").1
                }
            });
            add_new(p, id, isa, cpu, target, c, &out, &mut near);
        }
    }
    near.sort_by(|a, b| a.2.total_cmp(&b.2));
    out.extend(
        near.into_iter()
            .take(n.saturating_sub(1))
            .map(|(c, p, _)| (c, p)),
    );
    out
}

/// `k` (a kernel's standalone program) with its stage's loops shrunk to `extents`: a bridge
/// kernel. Its stage reads a subset of what `k`'s reads (every index is a function of the
/// loop variables, now over a sub-box), so it runs safely on `k`'s operands.
fn shrink(k: &Program, extents: &[usize], target: &Target) -> Program {
    let mut b = k.clone();
    let out = b.outputs.first().expect("a kernel output").index();
    let buf = &mut b.bufs[out];
    if let crate::te::BufKind::Stage(st) = &mut buf.kind {
        // The stage's own shape (its buffer may be a view of another rank).
        let rank = st.ty.rank();
        st.ty.shape = extents[..rank].to_vec();
        if let Some(r) = st.reduce.as_mut() {
            r.extents = extents[rank..].to_vec();
        }
        st.name = format!("{}_bridge", st.name);
        buf.ty.shape = st.ty.shape.clone();
    }
    crate::codegen::plan(&mut b, target, None);
    b
}

/// Whether the kernels of keys `a` and `b` run the same program: their signatures agree but
/// for the operator's name (the layout and the stage's canonical hash), and so do their
/// backend and operand types.
fn same_program(a: &Key, b: &Key) -> bool {
    let body = |k: &'_ Key| k.signature.split_once(' ').map(|(_, rest)| rest.to_owned());
    a.backend == b.backend
        && a.inputs == b.inputs
        && a.outputs == b.outputs
        && a.target == b.target
        && matches!((body(a), body(b)), (Some(x), Some(y)) if x == y)
}

/// An entry's measurement.
fn measured(e: &Entry) -> Measurement {
    Measurement {
        median_us: e.median_us,
        p90_us: e.p90_us,
        samples: e.samples,
    }
}

/// One node of the tuning tree: a kernel of the program, a tuned entry of the cache, or a
/// bridge.
struct Node {
    /// The nest.
    nest: Nest,
    /// Its standalone program and stage (none for a cache entry).
    prog: Option<(Program, BufId)>,
    /// The kernel's cache key (none for a bridge).
    key: Option<Key>,
    /// How it is named in provenance.
    name: String,
    /// Its space (empty for a cache entry).
    space: Vec<(PlanChoice, KernelPlan)>,
    /// The plans measured in the first round of a search from scratch.
    first: Vec<(PlanChoice, Measurement)>,
    /// The best choice once tuned, with its time.
    best: Option<(PlanChoice, Measurement)>,
}

/// Tunes the plans of the generated kernels of `programs` (planned programs: the placements a
/// tuning run chose) into `cache`: see the module documentation. `progress(message, done,
/// total)` names each kernel and where its plans come from; `save` runs after each batch.
#[allow(clippy::too_many_arguments)]
pub fn tune_plans(
    programs: &[&Program],
    model: &str,
    fingerprint: &TargetFingerprint,
    cache: &mut CostCache,
    work: &Path,
    budget: MeasureBudget,
    settings: &PlanTuning,
    save: &mut dyn FnMut(&CostCache) -> Result<()>,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<PlanReport> {
    let start = Instant::now();
    let target = Target::for_build();
    let cpu = target.host_cpu().into_owned();
    let host = host_isa();
    let isa = settings.isa.unwrap_or(host);
    if isa < host {
        return Err(Error::Usage(format!(
            "cannot tune the {isa} variant's plans on a machine whose widest variant is {host}"
        )));
    }
    let defines = if isa == host {
        isa.only()
    } else {
        isa.defines()
    };
    let mut report = PlanReport::default();
    // The kernels: generated, outside groups, one per key.
    let mut nodes: Vec<Node> = Vec::new();
    let mut tuned: Vec<bool> = Vec::new();
    // Kernels that run the same program as a node: (that node, their key).
    let mut twins: Vec<(usize, Key)> = Vec::new();
    for (p, id) in programs
        .iter()
        .flat_map(|p| measure::stages(p).into_iter().map(move |id| (*p, id)))
    {
        let st = p.stage(id).expect("a stage");
        if st.exec != Exec::Generated || p.plans[id.index()].is_empty() {
            continue;
        }
        let key = kernel_key(p, id, fingerprint);
        if nodes.iter().any(|n| n.key.as_ref() == Some(&key))
            || twins.iter().any(|(_, t)| *t == key)
        {
            continue;
        }
        let done = cache
            .get(&key)
            .and_then(|e| e.params.get("tuned"))
            .is_some();
        // A kernel that computes what a kernel still to tune computes, on operands of the same
        // types (another layer of the same shape), runs the same program: it shares its plan
        // and measurement (the exhaustive baseline measures every kernel).
        if !done && settings.reuse {
            if let Some(v) = nodes
                .iter()
                .zip(&tuned)
                .position(|(n, &t)| !t && n.key.as_ref().is_some_and(|k| same_program(k, &key)))
            {
                twins.push((v, key));
                continue;
            }
        }
        let k = kernel_program(p, id);
        let kid = *k.outputs.first().expect("a kernel output");
        let n = nest(&k, kid, isa, &cpu);
        let space = if done {
            Vec::new()
        } else {
            space(&k, kid, isa, &cpu, &target)
        };
        if !done && space.len() <= 1 {
            continue; // one plan: nothing to tune
        }
        let best = done
            .then(|| cache.get(&key))
            .flatten()
            .and_then(|e| Some((e.params.get("plan")?.parse().ok()?, e)))
            .map(|(c, e): (PlanChoice, &Entry)| (c, measured(e)));
        tuned.push(done);
        nodes.push(Node {
            nest: n,
            prog: Some((k, kid)),
            key: Some(key),
            name: format!("k{id} ({})", st.name),
            space,
            first: Vec::new(),
            best,
        });
    }
    report.already = tuned.iter().filter(|&&t| t).count();
    // Tuned entries of the cache (other models' kernels) of a type met here are sources too.
    let kernels = nodes.len();
    for (key, e) in cache.entries_for_target(fingerprint) {
        if nodes.iter().any(|n| n.key.as_ref() == Some(key)) {
            continue;
        }
        let (Some(_), Some(nt), Some(pl)) = (
            e.params.get("tuned"),
            e.params.get("nest").and_then(|s| parse_nest(s)),
            e.params
                .get("plan")
                .and_then(|s| s.parse::<PlanChoice>().ok()),
        ) else {
            continue;
        };
        if !nodes[..kernels].iter().any(|n| nt.serves(&n.nest)) {
            continue;
        }
        tuned.push(true);
        nodes.push(Node {
            nest: nt,
            prog: None,
            key: Some(key.clone()),
            name: format!("{} {}", key.backend, key.signature),
            space: Vec::new(),
            first: Vec::new(),
            best: Some((pl, measured(e))),
        });
    }
    let given = nodes.len();
    // Bridges between kernels still to tune: shrink the smallest kernel that dominates one.
    if settings.reuse && settings.bridges {
        let open: Vec<Nest> = nodes
            .iter()
            .zip(&tuned)
            .filter(|(n, &t)| !t && n.prog.is_some())
            .map(|(n, _)| n.nest.clone())
            .collect();
        for g in eto::bridges(&open) {
            // A group's kernel is not shrunk: its producer's shape would no longer match.
            let from = nodes
                .iter()
                .filter(|n| n.prog.as_ref().is_some_and(|(k, _)| k.groups.is_empty()))
                .filter(|n| n.nest.encloses(&g))
                .min_by_key(|n| n.nest.extents.iter().product::<usize>());
            let Some((k, kid)) = from.and_then(|n| n.prog.as_ref()) else {
                continue;
            };
            let b = shrink(k, &g.extents, &target);
            // The shrunk kernel may fit more kinds than both ends do: the bridge is tuned over
            // the kinds of its nest alone, so that its best plan serves both.
            let realised = nest(&b, *kid, isa, &cpu);
            if realised.extents != g.extents {
                continue;
            }
            let g = if realised.serves(&g) {
                realised
            } else if g.serves(&realised) {
                g
            } else {
                continue;
            };
            let kinds = g.kinds();
            let space: Vec<_> = space(&b, *kid, isa, &cpu, &target)
                .into_iter()
                .filter(|(c, _)| kinds.contains(&c.kind().name()))
                .collect();
            if space.is_empty() {
                continue;
            }
            nodes.push(Node {
                name: format!("bridge {}", nest_text(&g)),
                nest: g,
                prog: Some((b, *kid)),
                key: None,
                space,
                first: Vec::new(),
                best: None,
            });
        }
    }
    let sizes: Vec<usize> = nodes.iter().map(|n| n.space.len().max(1)).collect();
    let size = |v: usize| sizes[v];
    let k = settings.top_k.max(1);
    let rounds = |v: usize| scratch_rounds(size(v), k, settings.reuse);
    // A kernel's default plan, measured by the run's first pass (the cost of every kernel, same
    // budget, this machine's variant): a trial that would measure it again takes that time.
    // (Bridges, after the `given` nodes, have no key and no first pass.)
    let defaults: Vec<Option<Measurement>> = nodes
        .iter()
        .enumerate()
        .map(|(v, n)| {
            let first = n.space.first()?.0;
            let e = cache.get(n.key.as_ref()?)?;
            let cached = e.params.get("plan")?.parse::<PlanChoice>().ok()?;
            let open = v < given && !tuned[v];
            (open && isa == host && cached == first).then(|| measured(e))
        })
        .collect();
    let known = |v: usize| usize::from(defaults[v].is_some());
    // Both searches from scratch measure the default first.
    let scratch = |v: usize| {
        let (a, b) = rounds(v);
        (a + b - known(v)) as f64
    };
    let nests: Vec<Nest> = nodes.iter().map(|n| n.nest.clone()).collect();
    let reuse = |u: usize, v: usize| reuse_trials(&nests[u], &nests[v], size(v)) as f64;
    // The baseline measures every kernel, twins too.
    // (A twin's default was measured in the first pass as well.)
    report.distinct_trials = (0..given)
        .filter(|&v| !tuned[v])
        .map(|v| size(v).min(k) - known(v))
        .sum::<usize>();
    report.exhaustive_trials = report.distinct_trials
        + twins
            .iter()
            .map(|&(v, _)| size(v).min(k) - known(v))
            .sum::<usize>();
    let sel = if settings.reuse {
        eto::select(&nests, given, &tuned, &scratch, &reuse)
    } else {
        eto::Selection {
            source: (0..given)
                .map(|v| {
                    Some(if tuned[v] {
                        Source::Tuned
                    } else {
                        Source::Scratch
                    })
                })
                .chain((given..nodes.len()).map(|_| None))
                .collect(),
            cost: 0.0,
        }
    };
    // Tune level by level: a node's source is tuned in an earlier batch.
    let order = sel.order();
    // Steps: one per node, two for a search from scratch in two rounds.
    let total = order
        .iter()
        .map(|&v| match sel.source[v] {
            Some(Source::Tuned) => 0,
            Some(Source::Reuse(_)) => 1,
            _ if rounds(v).1 > 0 => 2,
            _ => 1,
        })
        .sum();
    let mut done_count = 0;
    let mut pending: Vec<usize> = order
        .into_iter()
        .filter(|&v| sel.source[v] != Some(Source::Tuned))
        .collect();
    let exec = Executor::Serial;
    let over = |report: &PlanReport| {
        settings.max_trials.is_some_and(|m| report.trials >= m)
            || settings
                .max_seconds
                .is_some_and(|s| start.elapsed().as_secs_f64() >= s)
    };
    while !pending.is_empty() && !over(&report) {
        let ready: Vec<usize> = pending
            .iter()
            .copied()
            .filter(|&v| match sel.source[v] {
                Some(Source::Reuse(u)) => nodes[u].best.is_some(),
                _ => true,
            })
            .collect();
        if ready.is_empty() {
            break; // a source failed to tune: its dependants keep their defaults
        }
        pending.retain(|v| !ready.contains(v));
        // The trials of every ready node; a default plan already measured is not measured again.
        let mut trials: Vec<(usize, PlanChoice, Program, BufId)> = Vec::new();
        let mut results: HashMap<usize, Vec<(PlanChoice, Measurement)>> = HashMap::new();
        for &v in &ready {
            let (prog, kid) = nodes[v]
                .prog
                .as_ref()
                .expect("a node to tune has a program");
            let (cands, how) = match sel.source[v] {
                Some(Source::Reuse(u)) => {
                    let src = nodes[u].best.as_ref().expect("ready").0;
                    let n = reuse_trials(&nodes[u].nest, &nodes[v].nest, size(v));
                    (
                        reuse_candidates(prog, *kid, isa, &cpu, &target, src, n),
                        format!("reusing {}", nodes[u].name),
                    )
                }
                _ if nodes[v].first.is_empty() => (
                    nodes[v].space.iter().take(rounds(v).0).cloned().collect(),
                    "from scratch".to_string(),
                ),
                _ => {
                    // The second round: around the first round's fastest plan.
                    let tried = &nodes[v].first;
                    let best = tried
                        .iter()
                        .min_by(|a, b| a.1.median_us.total_cmp(&b.1.median_us))
                        .expect("a first round")
                        .0;
                    // Every neighbour, ranked by the model; the tried ones left out below.
                    let near = reuse_candidates(prog, *kid, isa, &cpu, &target, best, usize::MAX);
                    (
                        near.into_iter()
                            .filter(|(c, _)| !tried.iter().any(|t| t.0 == *c))
                            .take(rounds(v).1)
                            .collect(),
                        "from scratch, around its best".to_string(),
                    )
                }
            };
            done_count += 1;
            progress(
                &format!("{} {how} ({} plans)", nodes[v].name, cands.len()),
                done_count,
                total,
            );
            for (c, _) in cands {
                if let Some(m) = defaults[v].filter(|_| c == nodes[v].space[0].0) {
                    results.entry(v).or_default().push((c, m));
                    continue;
                }
                if let Some(t) = with_choice(prog, *kid, c, &target) {
                    trials.push((v, c, t, *kid));
                }
            }
        }
        // Measure them, in batches of one shared library each.
        for batch in trials.chunks(48) {
            let items: Vec<(&Program, BufId)> =
                batch.iter().map(|(_, _, t, id)| (t, *id)).collect();
            let mut hs = build_kernel_set_with(&items, work, "-O3", defines)?;
            for ((v, c, _, _), h) in batch.iter().zip(hs.iter_mut()) {
                let m = h.time(&exec, &budget);
                results.entry(*v).or_default().push((*c, m));
            }
            report.trials += batch.len();
        }
        for &v in &ready {
            let mut ms = results.remove(&v).unwrap_or_default();
            if !matches!(sel.source[v], Some(Source::Reuse(_))) {
                if nodes[v].first.is_empty() && rounds(v).1 > 0 && !ms.is_empty() {
                    // The first round of a search from scratch: the second comes next.
                    nodes[v].first = ms;
                    pending.push(v);
                    continue;
                }
                ms.extend(nodes[v].first.iter().copied());
            }
            if ms.is_empty() {
                continue;
            }
            let best = ms
                .iter()
                .min_by(|a, b| a.1.median_us.total_cmp(&b.1.median_us))
                .expect("at least one trial");
            let mut best = *best;
            match sel.source[v] {
                Some(Source::Reuse(_)) => report.reused += 1,
                _ => report.scratch += 1,
            }
            let Some(key) = nodes[v].key.clone() else {
                report.bridges += 1;
                nodes[v].best = Some(best);
                continue;
            };
            report.kernels += 1;
            // The default plan's measurement (same budget, same run) is kept when no trial
            // beats it.
            let default = nodes[v].space[0].0;
            if let Some(e) = cache.get(&key) {
                if e.params.get("plan").map(|s| s.parse::<PlanChoice>()) == Some(Ok(default))
                    && e.median_us < best.1.median_us
                {
                    best = (default, measured(e));
                }
            }
            if best.0 != default {
                report.improved += 1;
            }
            nodes[v].best = Some(best);
            let (prog, kid) = nodes[v].prog.as_ref().expect("a kernel");
            // The trials measured here (a default timed by the first pass was not measured).
            let n = ms
                .iter()
                .filter(|m| defaults[v].is_none() || m.0 != default)
                .count();
            let how = match sel.source[v] {
                Some(Source::Reuse(u)) => format!("reused from {}, {n} trials", nodes[u].name),
                _ => format!("searched, {n} trials"),
            };
            let plan = plan_stage(
                prog,
                prog.stage(*kid).expect("a stage"),
                isa,
                &cpu,
                Some(best.0),
            );
            let mut params = BTreeMap::new();
            params.insert("plan".to_string(), plan.to_string());
            params.insert("nest".to_string(), nest_text(&nodes[v].nest));
            params.insert("tuned".to_string(), how);
            let m = best.1;
            let bad = |e: String| Error::Model {
                model: model.to_string(),
                detail: format!("kernel {}: {e}", nodes[v].name),
            };
            let entry = Entry::new(m.median_us, m.p90_us, m.samples, params)
                .map_err(|e| bad(e.to_string()))?;
            for (_, twin) in twins.iter().filter(|(t, _)| *t == v) {
                let mut shared = entry.clone();
                shared.params.insert(
                    "tuned".to_string(),
                    format!("same program as {}", nodes[v].name),
                );
                cache
                    .insert(twin.clone(), shared)
                    .map_err(|e| bad(e.to_string()))?;
                report.kernels += 1;
                report.shared += 1;
            }
            cache.insert(key, entry).map_err(|e| bad(e.to_string()))?;
        }
        save(cache)?;
    }
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knob_grids_cover_short_ranges_and_powers_of_two() {
        assert_eq!(knob_values(1, 4), vec![1, 2, 3, 4]);
        assert_eq!(knob_values(64, 1000), vec![64, 128, 256, 512]);
        assert_eq!(grid(PlanKind::Window), vec![PlanChoice::Window]);
        assert_eq!(grid(PlanKind::RegisterBlocked).len(), 4 * 8 * 5);
    }

    #[test]
    fn searches_from_scratch_take_two_rounds_of_the_top_k() {
        // The exhaustive baseline: the top k in one round.
        assert_eq!(scratch_rounds(40, 16, false), (16, 0));
        assert_eq!(scratch_rounds(3, 16, false), (3, 0));
        // ETO: k/4, then k/8 around the best; a small space at once.
        assert_eq!(scratch_rounds(40, 16, true), (4, 2));
        assert_eq!(scratch_rounds(6, 16, true), (6, 0));
        assert_eq!(scratch_rounds(7, 16, true), (4, 2));
        assert_eq!(scratch_rounds(40, 2, true), (1, 1));
    }

    #[test]
    fn same_programs_differ_only_in_the_operator_name() {
        let fp = TargetFingerprint::current("cc");
        let key = |sig: &str, input: &str| Key::new(fp.clone(), "c", sig, [input], ["f32[64,256]"]);
        let a = key("Conv_16_winograd rr #db807d000b6cd70a", "f32[64,256]");
        assert!(same_program(
            &a,
            &key("Conv_27_winograd rr #db807d000b6cd70a", "f32[64,256]")
        ));
        assert!(!same_program(
            &a,
            &key("Conv_27_winograd rr #db807d000b6cd70b", "f32[64,256]")
        ));
        assert!(!same_program(
            &a,
            &key("Conv_27_winograd rp #db807d000b6cd70a", "f32[64,256]")
        ));
        assert!(!same_program(
            &a,
            &key("Conv_27_winograd rr #db807d000b6cd70a", "f32[64,128]")
        ));
    }

    #[test]
    fn nests_round_trip_through_text() {
        let n = Nest::new("register-blocked,row/2/1", vec![128, 768, 768]);
        assert_eq!(parse_nest(&nest_text(&n)), Some(n));
        assert_eq!(parse_nest("x"), None);
    }

    #[test]
    fn reuse_costs_grow_with_distance_and_stop_at_the_space() {
        let a = Nest::new("f", vec![128, 768, 768]);
        let b = Nest::new("f", vec![128, 3072, 768]);
        assert_eq!(reuse_trials(&a, &a, 50), 1);
        assert_eq!(reuse_trials(&a, &b, 50), 3);
        assert_eq!(reuse_trials(&a, &b, 2), 2);
    }
}
