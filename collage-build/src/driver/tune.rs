//! What `collage tune` measures for a model: every candidate kernel the placement search may
//! price, the transition penalties, then the kernels of the placement those measurements choose.
use std::sync::Arc;

use super::{compile_passed, Options};
use crate::backend;
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::te::{BufId, Program};
use crate::tune::measure;
use crate::tune::plans::{tune_plans, PlanReport, PlanTuning};
use crate::tune::price::{kernel_key, Pricer};
use crate::tune::{CostCache, Key, TargetFingerprint};

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
            params.insert("plan".to_string(), crate::tune::measure::plan_text(p, *id));
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
/// between every two backends ([`crate::driver::tune_transitions`]), the candidates of every
/// backend ([`tune_candidates`]), then the kernels of the placement those measurements choose,
/// then (with `plans`) those kernels' plans ([`crate::tune::plans::tune_plans`], ETO). Returns
/// how many entries were measured, and the plan tuning's report.
#[allow(clippy::too_many_arguments)]
pub fn tune_model(
    g: &Graph,
    opts: &Options,
    target: &TargetFingerprint,
    cache: &mut CostCache,
    work: &std::path::Path,
    budget: measure::MeasureBudget,
    plans: Option<&PlanTuning>,
    save: &mut dyn FnMut(&CostCache) -> Result<()>,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<(usize, Option<PlanReport>)> {
    let (t, n, m) = {
        let mut kernels = |d: usize, t: usize| progress("measuring kernels", d, t);
        let t = crate::driver::tune_transitions(opts, target, cache, work, &mut kernels)?;
        if t > 0 {
            save(cache)?;
        }
        let n = tune_candidates(g, opts, target, cache, work, budget, save, &mut kernels)?;
        let c = compile_passed(g.clone(), "tune", &chosen_with(opts, cache), target)?;
        let m = crate::tune::measure::tune_kernels(
            &c,
            target,
            cache,
            work,
            budget,
            save,
            &mut kernels,
        )?;
        (t, n, m)
    };
    // The plans of the placement the measurements choose, and of the one the generated code
    // alone would run (whose tuned plans may win the placement back from a library).
    let report = match plans {
        Some(settings) => {
            let chosen = chosen_with(opts, cache);
            let mut programs = vec![compile_passed(g.clone(), "tune", &chosen, target)?.program];
            let offered = backend::select(&opts.backends)?;
            if offered.len() > 1 && offered.iter().any(|b| b.name() == "c") {
                let c_only = Options {
                    backends: "c".to_string(),
                    ..chosen
                };
                programs.push(compile_passed(g.clone(), "tune", &c_only, target)?.program);
            }
            let programs: Vec<&Program> = programs.iter().collect();
            Some(tune_plans(
                &programs, &g.name, target, cache, work, budget, settings, save, progress,
            )?)
        }
        None => None,
    };
    Ok((t + n + m, report))
}

/// `opts` reading `cache`.
fn chosen_with(opts: &Options, cache: &CostCache) -> Options {
    Options {
        cache: Some(Arc::new(cache.clone())),
        ..opts.clone()
    }
}

/// What `collage tune` and `COLLAGE_TUNE` builds do after measuring: nothing, or refine the
/// placement end to end on `threads` threads with `params` (`--evolve`).
#[derive(Clone, Copy, Debug)]
pub struct EvolveSettings {
    /// Threads the end-to-end measurements run on.
    pub threads: usize,
    /// The evolutionary search's population and generations.
    pub params: crate::partition::search::EvolveParams,
    /// Seconds after which no more placements are compiled and timed (counted from the start
    /// of the refinement; a generation is not started when the last one's time would overrun
    /// it); the final rounds follow. `None`: every generation runs.
    pub seconds: Option<f64>,
}

/// [`EvolveSettings::on`]'s budget: with `collage tune`'s own measurements (under two minutes on
/// the benchmark models, 2 cores) the whole run stays within five minutes.
pub const EVOLVE_SECONDS: f64 = 180.0;

impl EvolveSettings {
    /// The default refinement on `threads` threads: 4 generations of 6 placements, within
    /// [`EVOLVE_SECONDS`].
    pub fn on(threads: usize) -> EvolveSettings {
        EvolveSettings {
            threads: threads.max(1),
            params: crate::partition::search::EvolveParams {
                population: 6,
                generations: 4,
                ..Default::default()
            },
            seconds: Some(EVOLVE_SECONDS),
        }
    }
}

/// What one tuning run did, for its caller to print.
#[derive(Clone, Debug)]
pub struct TuneReport {
    /// Cache entries measured (kernels, candidates, transition penalties).
    pub measured: usize,
    /// The plan tuning (ETO), when asked for.
    pub plans: Option<PlanReport>,
    /// The end-to-end refinement, when asked for, with its thread count.
    pub evolution: Option<(usize, super::Evolution)>,
}

impl std::fmt::Display for TuneReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "measured {} entries", self.measured)?;
        if let Some(p) = &self.plans {
            write!(f, "; {p}")?;
        }
        if let Some((threads, r)) = &self.evolution {
            let list = |v: &[(String, f64)]| -> String {
                v.iter()
                    .map(|(n, us)| format!("{n} {us:.1} us"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            write!(
                f,
                "; evolve ({} placements timed end to end on {threads} thread(s){}): search {:.1} us; baselines: {}; final rounds: {}; recorded the fastest, from {}: {:.1} us",
                r.evaluations,
                r.stopped
                    .map(|t| format!(", stopped at its time budget after {t:.0} s"))
                    .unwrap_or_default(),
                r.search_us,
                list(&r.baselines),
                list(&r.finals),
                r.best_from,
                r.best_us
            )?;
        }
        Ok(())
    }
}

/// The one tuning entry point, shared by `collage tune` and `COLLAGE_TUNE` builds: measures
/// what `g` (after the pass pipeline) needs into `cache` and tunes its kernels' plans with
/// `plans` ([`tune_model`], saved through `save` after each step, so a run is resumable), then
/// with `evolve` refines its placement end to end ([`super::evolve_model`]) and saves again.
/// `progress(what, done, total)` follows the measurements. `work` is removed either way.
#[allow(clippy::too_many_arguments)]
pub fn tune_graph(
    g: &Graph,
    opts: &Options,
    target: &TargetFingerprint,
    cache: &mut CostCache,
    work: &std::path::Path,
    plans: Option<&PlanTuning>,
    evolve: Option<EvolveSettings>,
    save: &mut dyn FnMut(&CostCache) -> Result<()>,
    progress: &mut dyn FnMut(&str, usize, usize),
    log: &mut dyn FnMut(&str),
) -> Result<TuneReport> {
    let run = |cache: &mut CostCache,
               save: &mut dyn FnMut(&CostCache) -> Result<()>,
               progress: &mut dyn FnMut(&str, usize, usize),
               log: &mut dyn FnMut(&str)|
     -> Result<TuneReport> {
        let budget = measure::default_budget();
        let (measured, plans) =
            tune_model(g, opts, target, cache, work, budget, plans, save, progress)?;
        save(cache)?;
        let evolution = match evolve {
            Some(e) => {
                let r = super::evolve_model(g, opts, target, cache, work, e, log)?;
                save(cache)?;
                Some((e.threads, r))
            }
            None => None,
        };
        Ok(TuneReport {
            measured,
            plans,
            evolution,
        })
    };
    let r = run(cache, save, progress, log);
    let _ = std::fs::remove_dir_all(work);
    r
}
