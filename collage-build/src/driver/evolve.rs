//! Measurements of whole programs, for what kernel costs cannot say: the transition penalty
//! between two backends, and graph-level refinement of the placement by end-to-end measurement
//! (`collage tune --evolve`).
//!
//! Transition penalty from backend `a` to `b`: a probe of two identical contractions in a chain
//! (`x[32,256] · W0 · W1`, every node in its own fusion region) is compiled with the first node on
//! `a` and the second on `b`, and timed end to end as `P(a,b)`. The kernels of `P(a,a)` and
//! `P(b,b)` are the same two kernels per backend, so `P(a,b) - (P(a,a) + P(b,b)) / 2` is what
//! crossing costs beyond the kernels themselves (clamped at zero: a crossing never pays back).
//!
//! Evolution: the search's placement seeds [`evolve_batched`]; every placement it proposes is
//! compiled and timed end to end; the baselines (`c` alone, `--greedy LIB,c` for every library,
//! and the placement a build without the cache makes) and each library's maximal fusion
//! ([`largest_on`]) are timed too. The search's and the baselines' programs and the fastest few
//! others are then re-timed side by side in rotated rounds, and the winner is recorded in the
//! cost cache under [`placement_key`], where normal builds find it.
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::place::{self, encode_parts, place_graph};
use super::EvolveSettings;
use super::{assignment_of, Options};
use crate::backend::{self, Backend};
use crate::codegen::{self, Compiled};
use crate::error::{Error, Result};
use crate::ir::{DType, Graph, Tensor, TensorType};
use crate::ops::{lookup, Attrs, OpCx};
use crate::partition::place::Part;
use crate::partition::search::{evolve_batched, largest_on, search, SearchLimits};
use crate::tune::measure::{self, MeasureBudget, Measurement};
use crate::tune::price::{placement_key, transition, transition_key, Pricer};
use crate::tune::{CostCache, Entry, TargetFingerprint};

/// Distinct programs re-timed in the final rounds of [`evolve_model`] beside the search's and
/// the baselines'.
const FINALISTS: usize = 3;

/// Final rounds of [`evolve_model`].
const ROUNDS: usize = 5;

/// The budget of one end-to-end measurement.
pub fn end_to_end_budget() -> MeasureBudget {
    MeasureBudget {
        warmup: 5,
        min_runs: 20,
        min_time: std::time::Duration::from_millis(200),
    }
}

/// `x[32,256] · W0[256,256] · W1[256,256]`, after the pass pipeline.
fn transition_probe() -> Result<Graph> {
    let mut g = Graph::new("transition_probe");
    let x = g.add_value("x", Some(TensorType::new(DType::F32, [32, 256])));
    g.inputs.push(x);
    let mut v = x;
    for i in 0..2u32 {
        let vals: Vec<f32> = (0..256 * 256)
            .map(|k| ((k * 37 + i as usize * 11) % 101) as f32 / 101.0 - 0.5)
            .collect();
        let w = g.add_const(format!("w{i}"), Tensor::from_f32(&[256, 256], &vals));
        let ctor = lookup("MatMul").expect("MatMul is registered");
        let op = ctor(&OpCx {
            attrs: &Attrs::default(),
            opset: 17,
            n_inputs: 2,
            n_outputs: 1,
        })
        .map_err(|e| Error::Model {
            model: g.name.clone(),
            detail: e.to_string(),
        })?;
        let out = g.add_value(format!("y{i}"), None);
        g.add_node(format!("mm{i}"), op, vec![Some(v), Some(w)], vec![out]);
        v = out;
    }
    g.outputs.push(v);
    crate::passes::run(&mut g, crate::passes::PIPELINE)?;
    Ok(g)
}

/// Compiles `g` with node `n` in region `n + 1` on `on[n]`.
fn compile_probe(g: &Graph, on: [&dyn Backend; 2]) -> Result<Compiled> {
    let lib = |b: &dyn Backend| b.library().then(|| b.id());
    let assign = [(1u32, lib(on[0])), (2u32, lib(on[1]))];
    codegen::compile_assigned(g.clone(), "transition_probe", &|n| assign[n])
}

/// Measures the transition penalty between every two of `opts`' backends that `cache` lacks and
/// adds them (`transition` entries). Returns how many were measured.
pub fn tune_transitions(
    opts: &Options,
    target: &TargetFingerprint,
    cache: &mut CostCache,
    work: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<usize> {
    let backends = backend::select(&opts.backends)?;
    let mut todo = Vec::new();
    for a in &backends {
        for b in &backends {
            if a.name() != b.name()
                && cache
                    .get(&transition_key(target, a.name(), b.name()))
                    .is_none()
            {
                todo.push((a.as_ref(), b.as_ref()));
            }
        }
    }
    if todo.is_empty() {
        return Ok(0);
    }
    let g = transition_probe()?;
    let budget = end_to_end_budget();
    let mut same: BTreeMap<&str, Measurement> = BTreeMap::new();
    let total = todo.len();
    progress(0, total);
    for (i, (a, b)) in todo.into_iter().enumerate() {
        for be in [a, b] {
            if !same.contains_key(be.name()) {
                let c = compile_probe(&g, [be, be])?;
                same.insert(be.name(), measure::end_to_end(&c, work, "-O3", 1, budget)?);
            }
        }
        let c = compile_probe(&g, [a, b])?;
        let m = measure::end_to_end(&c, work, "-O3", 1, budget)?;
        let base = (same[a.name()].median_us + same[b.name()].median_us) / 2.0;
        // Nanosecond resolution, as the measurements (keeps the file diff-friendly).
        let ns = |us: f64| (us * 1e3).round() / 1e3;
        let median = ns((m.median_us - base).max(0.0));
        let p90 = ns(median + (m.p90_us - m.median_us).max(0.0));
        let mut params = BTreeMap::new();
        params.insert(
            "probe".to_string(),
            "x[32,256] . W0[256,256] . W1[256,256]".to_string(),
        );
        let entry = Entry::new(median, p90, m.samples, params).map_err(|e| Error::Model {
            model: g.name.clone(),
            detail: format!("transition {}->{}: {e}", a.name(), b.name()),
        })?;
        cache
            .insert(transition_key(target, a.name(), b.name()), entry)
            .map_err(|e| Error::Model {
                model: g.name.clone(),
                detail: e.to_string(),
            })?;
        progress(i + 1, total);
    }
    Ok(total)
}

/// `g` compiled with the placement `parts`.
fn compile_parts(g: &Graph, parts: &[Part]) -> Result<Compiled> {
    let assign = assignment_of(g, parts);
    codegen::compile_assigned(g.clone(), "evolve", &|n| assign[n])
}

/// What [`evolve_model`] measured, in microseconds (end-to-end medians).
#[derive(Clone, Debug)]
pub struct Evolution {
    /// The search's placement.
    pub search_us: f64,
    /// Every baseline: `c`, `greedy LIB,c` for each library offered, and `untuned` (the
    /// placement a build without the cache makes).
    pub baselines: Vec<(String, f64)>,
    /// The final rounds: the search's, the baselines' and the fastest other distinct programs
    /// re-timed side by side (where each came from, lowest round median).
    pub finals: Vec<(String, f64)>,
    /// The fastest placement of the final rounds.
    pub best_us: f64,
    /// Where the fastest came from: `search`, `evolution` or a baseline's name.
    pub best_from: String,
    /// Placements compiled and timed.
    pub evaluations: usize,
    /// Seconds after which the evolution stopped proposing placements, out of its budget
    /// (`EvolveSettings::seconds`); `None` when it ran every generation.
    pub stopped: Option<f64>,
}

/// `collage tune --evolve`: refines the placement of `g` (after the pass pipeline) by end-to-end
/// measurement on `settings.threads` threads (see the module documentation) and records the
/// fastest in `cache`. `log` receives one line per measured placement.
pub fn evolve_model(
    g: &Graph,
    opts: &Options,
    target: &TargetFingerprint,
    cache: &mut CostCache,
    work: &Path,
    settings: EvolveSettings,
    log: &mut dyn FnMut(&str),
) -> Result<Evolution> {
    let EvolveSettings {
        threads,
        params,
        seconds,
    } = settings;
    let started = std::time::Instant::now();
    let backends = backend::select(&opts.backends)?;
    let names: Vec<&'static str> = backends.iter().map(|b| b.name()).collect();
    let snapshot = Arc::new(cache.clone());
    let budget = end_to_end_budget();
    let model_err = |detail: String| Error::Model {
        model: g.name.clone(),
        detail,
    };
    let mut evaluations = 0;
    // Times placements; also returns the hash of each one's generated C, which tells placements
    // that differ only in how `c` nodes are grouped (the same program) apart from others. A
    // program timed before is not compiled and timed again: its first timing stands. The
    // programs not timed before are compiled side by side first, then timed one at a time.
    let mut timed: std::collections::HashMap<u64, Measurement> = Default::default();
    // How long the last batch took: a batch is not started when it would end past the budget.
    let last_batch = std::cell::Cell::new(std::time::Duration::ZERO);
    let mut time = |batch: &[Vec<Part>]| -> Result<Vec<(Measurement, u64)>> {
        let t0 = std::time::Instant::now();
        evaluations += batch.len();
        let mut fresh: Vec<(u64, Compiled)> = Vec::new();
        let mut srcs = Vec::with_capacity(batch.len());
        for parts in batch {
            let c = compile_parts(g, parts)?;
            let src = crate::te::fnv64(&c.c_source);
            if !timed.contains_key(&src) && fresh.iter().all(|(s, _)| *s != src) {
                fresh.push((src, c));
            }
            srcs.push(src);
        }
        let models: Vec<&Compiled> = fresh.iter().map(|(_, c)| c).collect();
        measure::prebuild_models(&models, work, "-O3")?;
        for (src, c) in &fresh {
            let m = measure::end_to_end(c, work, "-O3", threads, budget)?;
            timed.insert(*src, m);
        }
        last_batch.set(t0.elapsed());
        Ok(srcs.into_iter().map(|s| (timed[&s], s)).collect())
    };
    let out_of_time = || {
        seconds.is_some_and(|b| {
            started.elapsed() + last_batch.get() > std::time::Duration::from_secs_f64(b)
        })
    };

    // The search's placement, over the same problem the evolution mutates.
    let mut pricer = Pricer::new(g, Some(&snapshot), target)?;
    let transition = |a: usize, b: usize| transition(Some(&snapshot), target, names[a], names[b]);
    let problem = place::problem(
        g,
        &backends,
        &mut |b, c| {
            let nodes: Vec<usize> = c.sub_graph.inside().iter().collect();
            pricer.price(&nodes, backends[b].as_ref()).map(|p| p.0)
        },
        &transition,
    );
    let r = search(&problem, SearchLimits::default())
        .map_err(|e| model_err(format!("placement search: {e}")))?;
    if !r.has_placement() {
        return Err(model_err(format!("no placement: {}", r.stop)));
    }
    // The search's placement, the baselines (`c` alone, `greedy LIB,c` for every library) and
    // maximal fusion on each library (its largest candidates first: what the per-kernel costs
    // cannot see, e.g. oneDNN convolutions handing their outputs to each other in their own
    // layout, shows end to end), timed as one batch.
    let search_parts = place::parts_of(&problem, &r.chosen, &backends);
    let mut labelled: Vec<(String, Vec<Part>)> = vec![("search".to_string(), search_parts)];
    let mut lists = Vec::new();
    if names.contains(&"c") {
        lists.push(("c".to_string(), "c".to_string(), false, true));
        for lib in names.iter().filter(|&&n| n != "c") {
            lists.push((format!("greedy {lib},c"), format!("{lib},c"), true, true));
        }
    }
    // What a build without the cache runs (analytic prices): per-kernel measurements taken
    // standalone, on one thread, can place worse than the model's estimates.
    lists.push(("untuned".to_string(), opts.backends.clone(), false, false));
    let n_baselines = lists.len();
    for (label, list, greedy, cached) in lists {
        let o = Options {
            backends: list,
            greedy,
            cache: cached.then(|| snapshot.clone()),
            target: Some(target.clone()),
            threads,
            ..Options::default()
        };
        labelled.push((label, place_graph(g, &o, target)?.placement.parts));
    }
    for (b, lib) in names.iter().enumerate().filter(|(_, &n)| n != "c") {
        let Some(chosen) = largest_on(&problem, b, SearchLimits::default())
            .map_err(|e| model_err(format!("placement search: {e}")))?
        else {
            continue;
        };
        labelled.push((
            format!("largest {lib}"),
            place::parts_of(&problem, &chosen, &backends),
        ));
    }
    let batch: Vec<Vec<Part>> = labelled.iter().map(|(_, p)| p.clone()).collect();
    let ms = time(&batch)?;
    let search_m = ms[0].0;
    let mut baselines = Vec::new();
    // Every placement timed: (where it came from, parts, median, program hash).
    let mut all: Vec<(String, Vec<Part>, f64, u64)> = Vec::new();
    for (i, ((label, parts), (m, src))) in labelled.into_iter().zip(ms).enumerate() {
        if i == 0 {
            log(&format!("search placement: {:.1} us", m.median_us));
        } else {
            log(&format!("{label}: {:.1} us", m.median_us));
        }
        if (1..=n_baselines).contains(&i) {
            baselines.push((label.clone(), m.median_us));
        }
        all.push((label, parts, m.median_us, src));
    }

    // Evolution, seeded with the search's placement.
    let mut failure = None;
    let mut stopped = None;
    let mut measured: Vec<(Vec<usize>, f64, u64)> = Vec::new();
    evolve_batched(
        &problem,
        &r.chosen,
        &mut |batch| {
            let mut scores = vec![f64::INFINITY; batch.len()];
            if failure.is_some() || stopped.is_some() {
                return scores;
            }
            // Out of time: the generations left score nothing (never better than the seed).
            if out_of_time() {
                stopped = Some(started.elapsed().as_secs_f64());
                return scores;
            }
            // The seed is the search's placement, timed already.
            let mut todo = Vec::new();
            for (i, c) in batch.iter().enumerate() {
                if *c == r.chosen {
                    scores[i] = search_m.median_us;
                } else {
                    todo.push(i);
                }
            }
            let parts: Vec<Vec<Part>> = todo
                .iter()
                .map(|&i| place::parts_of(&problem, &batch[i], &backends))
                .collect();
            match time(&parts) {
                Ok(ms) => {
                    for (&i, (m, src)) in todo.iter().zip(ms) {
                        log(&format!("evolution candidate: {:.1} us", m.median_us));
                        measured.push((batch[i].clone(), m.median_us, src));
                        scores[i] = m.median_us;
                    }
                }
                Err(e) => failure = Some(e),
            }
            scores
        },
        params,
    )
    .map_err(|e| model_err(format!("evolution: {e}")))?;
    if let Some(e) = failure {
        return Err(e);
    }
    if let Some(t) = stopped {
        log(&format!(
            "evolution stopped after {t:.0} s ({} placements timed): the budget is {:.0} s",
            evaluations,
            seconds.unwrap_or_default()
        ));
    }
    for (chosen, us, src) in measured {
        all.push((
            "evolution".to_string(),
            place::parts_of(&problem, &chosen, &backends),
            us,
            src,
        ));
    }

    // Final rounds: the search's and the baselines' programs and the fastest few others,
    // loaded side by side and re-timed in rotated rounds (one timing of a program differs from
    // the next by several per cent here, so a first timing alone never rules a baseline out);
    // the lowest round median wins.
    let mandatory = 1 + n_baselines;
    all[mandatory..].sort_by(|a, b| a.2.total_cmp(&b.2));
    // Placements that differ only in how `c` nodes are grouped give the same program: one
    // finalist each, named after the search or a baseline rather than the evolution when it is one.
    let mut finalists: Vec<(String, Vec<Part>, measure::Harness)> = Vec::new();
    let mut sources: std::collections::HashMap<u64, usize> = Default::default();
    let mut others = 0;
    for (k, (label, parts, _, src)) in all.into_iter().enumerate() {
        if let Some(&i) = sources.get(&src) {
            if finalists[i].0 == "evolution" {
                finalists[i].0 = label;
            }
        } else if k < mandatory || others < FINALISTS {
            others += usize::from(k >= mandatory);
            let h = measure::build_model(&compile_parts(g, &parts)?, work, "-O3")?;
            sources.insert(src, finalists.len());
            finalists.push((label, parts, h));
        }
    }
    let exec = collage_runtime::Executor::with_threads(threads);
    let mut lowest: Vec<Option<Measurement>> = vec![None; finalists.len()];
    for round in 0..ROUNDS {
        for k in 0..finalists.len() {
            let i = (k + round) % finalists.len();
            let m = finalists[i].2.time(&exec, &budget);
            if lowest[i].is_none_or(|l| m.median_us < l.median_us) {
                lowest[i] = Some(m);
            }
        }
    }
    let rounds: Vec<(String, f64)> = finalists
        .iter()
        .zip(&lowest)
        .map(|((label, _, _), m)| (label.clone(), m.map_or(f64::INFINITY, |m| m.median_us)))
        .collect();
    let win = (0..finalists.len())
        .min_by(|&a, &b| rounds[a].1.total_cmp(&rounds[b].1))
        .ok_or_else(|| model_err("no placement was timed".into()))?;
    let m = lowest[win].expect("every finalist is timed");
    let (from, parts, _) = finalists.swap_remove(win);
    let mut p = BTreeMap::new();
    p.insert("parts".to_string(), encode_parts(&parts));
    p.insert("threads".to_string(), threads.to_string());
    p.insert("from".to_string(), from.clone());
    let entry = Entry::new(m.median_us, m.p90_us.max(m.median_us), m.samples, p)
        .map_err(|e| model_err(format!("placement record: {e}")))?;
    cache
        .insert(placement_key(g, target, &names, threads), entry)
        .map_err(|e| model_err(e.to_string()))?;
    Ok(Evolution {
        search_us: search_m.median_us,
        baselines,
        finals: rounds,
        best_us: m.median_us,
        best_from: from,
        evaluations,
        stopped,
    })
}
