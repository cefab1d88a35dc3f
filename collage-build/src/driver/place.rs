//! Placement of a graph on the offered backends: every backend's rule proposes candidates
//! ([`problem`]), the [`Pricer`] prices them, the search picks the cheapest exact cover
//! ([`place`]); or the placement `collage tune --evolve` recorded in the cache, or the
//! fixed-priority `--greedy` baseline.
use std::time::Instant;

use super::Options;
use crate::backend::{self, Backend};
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::partition::place::{Part, Placement, PlacementInfo};
use crate::partition::rule::Candidate;
use crate::partition::search::{search, SearchCandidate, SearchLimits, SearchProblem, StopReason};
use crate::partition::sub_graph::DataflowView;
use crate::tune::price::{placement_key, transition, Pricer};
use crate::tune::{CostCache, TargetFingerprint};

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

/// Places `g` (after the pass pipeline) on the backends of `opts`.
pub fn place_graph(g: &Graph, opts: &Options, target: &TargetFingerprint) -> Result<PlacementInfo> {
    let backends = backend::select(&opts.backends)?;
    let names: Vec<&'static str> = backends.iter().map(|b| b.name()).collect();
    let cache = opts.cache.as_deref();
    let mut pricer = Pricer::new(g, cache, target)?;
    pricer.switches = opts.switches();
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

/// The search problem of placing `g` (after the pass pipeline) on `backends`: every backend's
/// candidates priced by `cost(backend index, candidate)` (`None` drops the candidate: the backend
/// cannot run it after all), the dataflow edges, and `transition_us` between every two backends.
pub fn problem(
    g: &Graph,
    backends: &[Box<dyn Backend>],
    cost: &mut dyn FnMut(usize, &Candidate) -> Option<f64>,
    transition_us: &dyn Fn(usize, usize) -> f64,
) -> SearchProblem {
    let view = DataflowView::new(g);
    let mut cands: Vec<(usize, Candidate)> = Vec::new();
    for (b, be) in backends.iter().enumerate() {
        for c in be.rule().candidates(&view, g) {
            cands.push((b, c));
        }
    }
    let mut edges = Vec::new();
    for n in 0..view.len() {
        for &p in view.inputs(n) {
            edges.push((p, n));
        }
    }
    let n_backends = backends.len();
    SearchProblem {
        n_nodes: view.len(),
        candidates: cands
            .iter()
            .filter_map(|(b, c)| {
                Some(SearchCandidate {
                    nodes: c.sub_graph.inside().iter().collect(),
                    backend: *b,
                    cost: cost(*b, c)?.max(0.0),
                    label: c.rule_name.clone(),
                })
            })
            .collect(),
        n_backends,
        transition: (0..n_backends)
            .map(|a| {
                (0..n_backends)
                    .map(|b| if a == b { 0.0 } else { transition_us(a, b) })
                    .collect()
            })
            .collect(),
        edges,
    }
}

/// The parts of a placement given as chosen candidate indices of `problem`.
pub fn parts_of(
    problem: &SearchProblem,
    chosen: &[usize],
    backends: &[Box<dyn Backend>],
) -> Vec<Part> {
    chosen
        .iter()
        .map(|&i| Part {
            backend: backends[problem.candidates[i].backend].id(),
            nodes: problem.candidates[i].nodes.clone(),
            rule: problem.candidates[i].label.clone(),
            cost_us: problem.candidates[i].cost,
        })
        .collect()
}

/// Places `g` (after the pass pipeline) on `backends`: the search over [`problem`]'s candidates.
pub fn place(
    g: &Graph,
    backends: &[Box<dyn Backend>],
    cost: &mut dyn FnMut(usize, &Candidate) -> Option<f64>,
    transition_us: &dyn Fn(usize, usize) -> f64,
    limits: SearchLimits,
) -> Result<Placement> {
    let start = Instant::now();
    let problem = problem(g, backends, cost, transition_us);
    let model_err = |detail: String| Error::Model {
        model: g.name.clone(),
        detail,
    };
    let r = search(&problem, limits).map_err(|e| model_err(format!("placement search: {e}")))?;
    if !r.has_placement() {
        return Err(model_err(format!("no placement: {}", r.stop)));
    }
    Ok(Placement {
        parts: parts_of(&problem, &r.chosen, backends),
        cost_us: r.cost,
        stop: r.stop,
        candidates: problem.candidates.len(),
        elapsed: start.elapsed(),
    })
}
