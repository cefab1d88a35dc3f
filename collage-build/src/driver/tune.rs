//! What `collage tune` measures for a model: every candidate kernel the placement search may
//! price, the transition penalties, then the kernels of the placement those measurements choose.
use std::sync::Arc;

use super::{compile_passed, Options};
use crate::backend;
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::te::{BufId, Program};
use crate::tune::measure;
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
    let t = crate::driver::tune_transitions(opts, target, cache, work, progress)?;
    if t > 0 {
        save(cache)?;
    }
    let n = tune_candidates(g, opts, target, cache, work, budget, save, progress)?;
    let chosen = Options {
        cache: Some(Arc::new(cache.clone())),
        ..opts.clone()
    };
    let c = compile_passed(g.clone(), "tune", &chosen, target)?;
    let m = crate::tune::measure::tune_kernels(&c, target, cache, work, budget, save, progress)?;
    Ok(t + n + m)
}
