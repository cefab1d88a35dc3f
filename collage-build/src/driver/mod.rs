//! The driver: the whole-model operations, on top of every other room. `compile` runs the
//! passes, places the graph on the offered backends ([`place`]: prices every backend's candidates
//! from the cost cache, else the analytic model, and searches, or takes the fixed-priority
//! `--greedy` baseline), and generates code that follows the placement; [`tune`] measures what
//! `collage tune` measures; [`evolve`] refines placements by end-to-end measurement; [`run`]
//! runs compiled models on data (the CLI's `run`, `conformance` and `bench`).
//!
//! Code follows a placement like this ([`assignment`]): every part is its own fusion region; a
//! library part's contractions become library calls and its elementwise nodes an in-place
//! epilogue, a `c` part's are generated, fused by the generator within the part; so fusion builds
//! exactly the kernels the search priced.
use std::sync::Arc;

use crate::backend::BackendId;
use crate::codegen::{self, Compiled};
use crate::error::Result;
use crate::ir::Graph;
use crate::partition::place::{Part, PlacementInfo};
use crate::tune::{CostCache, TargetFingerprint};

pub mod evolve;
pub mod place;
pub mod profile;
pub mod range;
pub mod run;
#[cfg(test)]
mod tests;
pub mod tune;

pub use evolve::{end_to_end_budget, evolve_model, tune_transitions, Evolution};
pub use place::{encode_parts, place_graph};
pub use tune::{
    candidate_kernels, tune_candidates, tune_graph, tune_model, EvolveSettings, TuneReport,
    EVOLVE_SECONDS,
};

/// The compiler's steps after lowering, in order (`codegen::PIPELINE`; the graph's are
/// `passes::PIPELINE`): fuse, layout, plan, group, tuned plans; then the arena and the C. The
/// placement search prices its candidates through the same steps.
pub use crate::codegen::PIPELINE as CODEGEN_PIPELINE;

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
    /// Draw every generated stage's plan at random from this seed instead of the target's
    /// default (tests of the plan space; the output must not change). The plans recorded in
    /// the cache are not applied then; its costs still guide the placement.
    pub schedule_seed: Option<u64>,
    /// Leave weights and convolutions as lowered (no panels, transposed weights or direct
    /// convolutions, and so no groups): a debugging switch.
    pub no_layout: bool,
    /// Form no groups: a debugging switch.
    pub no_groups: bool,
    /// Keep 3x3 convolutions direct instead of Winograd F(m x m, 3x3) (`pipeline`):
    /// for results closer to a direct convolution's rounding.
    pub no_winograd: bool,
    /// Sizes for the model's symbolic input dimensions (used where a command loads the model
    /// file itself: `collage compile / run / bench / explain`).
    pub bindings: crate::frontend::onnx::Bindings,
}

impl Options {
    /// The switches of the code generator's steps ([`codegen::PIPELINE`]).
    pub fn switches(&self) -> codegen::Switches {
        codegen::Switches {
            no_layout: self.no_layout,
            no_groups: self.no_groups,
            seed: self.schedule_seed,
        }
    }

    /// The size limits a graph compiled with these options is checked against.
    pub fn limits(&self) -> crate::ir::Limits {
        let ceiling = match self.max_tensor_bytes {
            0 => crate::ir::Limits::DEFAULT_CEILING,
            n => n,
        };
        crate::ir::Limits::for_build_target(ceiling)
    }
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

/// The graph's passes for a build on the backends of `backends` (a `--backends` list, empty
/// for every available one): `passes::pipeline_for`, with the Winograd rewrite unless
/// `no_winograd` or a library backend that runs `Conv` comes before `c` in the list (the
/// rewritten node runs only on `c`, so a list that puts a library first keeps its `Conv`s).
pub fn pipeline(backends: &str, no_winograd: bool) -> Result<Vec<crate::passes::Pass>> {
    let mut winograd = false;
    for b in crate::backend::select(backends)? {
        if b.id() == BackendId::C {
            winograd = !no_winograd;
            break;
        }
        if b.supports("Conv", crate::ops::OpKind::OutElementwiseFusable) {
            break;
        }
    }
    Ok(crate::passes::pipeline_for(winograd))
}

/// Compiles an imported graph with the default options (every available backend, no cost
/// cache): see [`compile`].
pub fn compile_graph(g: Graph, symbol: &str) -> Result<Compiled> {
    compile(g, symbol, &Options::default())
}

/// Compiles an imported graph on the backends of `opts`: passes, placement, lowering that
/// follows it, fusion, arena, C and glue.
pub fn compile(mut g: Graph, symbol: &str, opts: &Options) -> Result<Compiled> {
    g.limits = opts.limits();
    crate::passes::run(&mut g, &pipeline(&opts.backends, opts.no_winograd)?)?;
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
    // The plans a tuning run recorded for this target's kernels.
    let cached = |p: &crate::te::Program, id: crate::te::BufId| {
        let cache = opts.cache.as_deref()?;
        let key = crate::tune::price::kernel_key(p, id, target);
        cache.get(&key)?.params.get("plan").cloned()
    };
    let mut c = codegen::compile_scheduled(
        g,
        symbol,
        &|n| assign[n],
        opts.switches(),
        // A schedule seed draws every plan (a test of the plan space): recorded plans would
        // take that draw back, so they apply only without one.
        (opts.cache.is_some() && opts.schedule_seed.is_none())
            .then_some(&cached as &codegen::CachedPlan<'_>),
    )?;
    c.placement = Some(info);
    Ok(c)
}
