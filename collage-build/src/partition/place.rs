//! Placements over real graphs: the parts a placement chooses ([`Part`], [`Placement`]), what it
//! decided for reports ([`PlacementInfo`]), and the simple analytic cost of a candidate
//! ([`analytic_cost`] over [`node_work`]). The driver (`driver::place`) collects every backend's
//! candidates, prices them from the cost cache and searches for the cheapest exact cover; code
//! then follows the placement.
use std::sync::Arc;
use std::time::Duration;

use super::rule::Candidate;
use super::search::StopReason;
use crate::error::Result;
use crate::ir::{Graph, Tensor, TensorType};
use crate::ops::LowerCx;
use crate::te::BackendId;

/// One chosen sub-graph.
#[derive(Clone, Debug)]
pub struct Part {
    /// The backend that runs it.
    pub backend: BackendId,
    /// Node indices (graph order).
    pub nodes: Vec<usize>,
    /// The rule that proposed it.
    pub rule: String,
    /// Its cost in microseconds.
    pub cost_us: f64,
}

/// The result of the placement search (`driver::place::place`).
#[derive(Clone, Debug)]
pub struct Placement {
    /// The chosen sub-graphs, by first node.
    pub parts: Vec<Part>,
    /// Total cost (kernels plus transitions), microseconds.
    pub cost_us: f64,
    /// Why the search stopped.
    pub stop: StopReason,
    /// Candidates considered, over all backends.
    pub candidates: usize,
    /// Time spent generating candidates and searching.
    pub elapsed: Duration,
}

/// What placement decided, for reports.
#[derive(Clone, Debug)]
pub struct PlacementInfo {
    /// The chosen parts, their costs and the search's statistics.
    pub placement: Placement,
    /// The backends that were offered, in priority order.
    pub backends: Vec<&'static str>,
    /// Kernels priced by the analytic model because the cache had no measurement.
    pub misses: usize,
    /// Kernels priced from the cache.
    pub hits: usize,
    /// For every part: the cheapest other candidate covering the same nodes (backend, rule,
    /// cost), if any.
    pub alternatives: Vec<Option<(String, String, f64)>>,
    /// Per part: whether its cost is measured (every kernel of it in the cache).
    pub measured: Vec<bool>,
    /// Whether `--greedy` made the placement.
    pub greedy: bool,
}

impl PlacementInfo {
    /// The one warning for kernels priced without measurements: their count and the command
    /// that measures them; `None` when every kernel was measured.
    pub fn miss_warning(&self, cache: Option<&std::path::Path>, model: &str) -> Option<String> {
        if self.misses == 0 {
            return None;
        }
        let total = self.misses + self.hits;
        let file = cache.map_or("collage-cache.toml".to_string(), |p| {
            p.display().to_string()
        });
        let source = if cache.is_some() {
            format!("are not in the cost cache {file}")
        } else {
            "have no measurement (no cost cache given)".to_string()
        };
        Some(format!(
            "{} of {total} candidate kernel costs {source}; placement used the analytic model for them. Measure them with: collage tune {} --cache {file}",
            self.misses, model
        ))
    }
}

/// Body evaluations of every node (from its tensor-expression lowering): the work measure of the
/// analytic cost model.
pub fn node_work(g: &Graph) -> Result<Vec<usize>> {
    g.nodes
        .iter()
        .map(|node| {
            let (inputs, consts) = node.input_facts(g);
            let outputs: Vec<TensorType> = node.outputs.iter().map(|&o| g.ty(o).clone()).collect();
            let consts: Vec<Option<Arc<Tensor>>> = consts;
            let mut cx = LowerCx {
                inputs: &inputs,
                consts: &consts,
                outputs: &outputs,
                stages: vec![],
                name: node.name.clone(),
                direct: false,
                uniform: false,
            };
            node.op.lower(&mut cx).map_err(|e| node.error(e))?;
            Ok(cx.stages.iter().map(|s| s.work()).sum())
        })
        .collect()
}

/// The analytic cost of running `c` as one kernel of the `c` backend: work at a nominal rate,
/// plus the bytes crossing its boundary at a nominal bandwidth, plus a fixed launch cost.
pub fn analytic_cost(g: &Graph, work: &[usize], c: &Candidate) -> f64 {
    const EVALS_PER_US: f64 = 20_000.0;
    const BYTES_PER_US: f64 = 20_000.0;
    const LAUNCH_US: f64 = 0.5;
    let evals: usize = c.sub_graph.inside().iter().map(|n| work[n]).sum();
    let bytes: usize = c
        .sub_graph
        .inputs()
        .iter()
        .chain(c.sub_graph.outputs())
        .map(|&v| g.ty(v).bytes())
        .sum();
    evals as f64 / EVALS_PER_US + bytes as f64 / BYTES_PER_US + LAUNCH_US
}
