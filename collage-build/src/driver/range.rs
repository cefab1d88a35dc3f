//! Compiling a model served over a range of one dimension (`--dim-range width=32..=1024`):
//! one set of kernels whose extent along the dimension is a run-time value, the arena planned
//! for the largest size ([`crate::te::Ranged`] says how the program is derived).
//!
//! The model is imported, passed and lowered (every node on generated code, fused as one
//! part) at several sizes of the range: both ends (from 2; a size of 1 changes how ONNX
//! broadcasts), the sizes next to them and two in the middle. The program derived from them
//! is then checked against the one lowered at a size that was not a sample, and at the sizes
//! below 2 the model's inputs and outputs must have the shapes the program gives them there.

use std::path::Path;

use super::Options;
use crate::codegen::{self, Compiled};
use crate::error::{Error, Result};
use crate::frontend::onnx;
use crate::ir::Graph;
use crate::te::{self, BufId, Program, Ranged};

/// A dimension served over a range of sizes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DimRange {
    /// The `dim_param` name.
    pub dim: String,
    /// Smallest size (at least 1).
    pub lo: usize,
    /// Largest size.
    pub hi: usize,
}

impl DimRange {
    /// Parses the CLI's `NAME=LO..=HI` (`--dim-range width=32..=1024`).
    pub fn parse(s: &str) -> std::result::Result<DimRange, String> {
        let (name, range) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: expected NAME=LO..=HI, e.g. width=32..=1024"))?;
        let (lo, hi) = range
            .split_once("..=")
            .ok_or_else(|| format!("`{s}`: expected NAME=LO..=HI, e.g. width=32..=1024"))?;
        let num = |x: &str| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| format!("`{s}`: `{x}` is not a size"))
        };
        DimRange::new(name.trim(), num(lo)?, num(hi)?)
    }

    /// `lo..=hi` of `dim`: `1 <= lo < hi`.
    pub fn new(dim: &str, lo: usize, hi: usize) -> std::result::Result<DimRange, String> {
        if lo == 0 || lo >= hi {
            return Err(format!(
                "the range {lo}..={hi} of `{dim}`: expected 1 <= low < high (bind one size with a dimension binding)"
            ));
        }
        Ok(DimRange {
            dim: dim.to_string(),
            lo,
            hi,
        })
    }

    /// The sizes the program is derived from, largest first, and the size it is checked at
    /// (none when every size of the range is a sample).
    fn samples(&self) -> (Vec<usize>, Option<usize>) {
        let lo = self.lo.max(2);
        let hi = self.hi;
        let mid = lo + (hi - lo) / 2;
        let mut s: Vec<usize> = [hi, hi - 1, mid + 1, mid, lo + 1, lo]
            .into_iter()
            .filter(|&x| (lo..=hi).contains(&x))
            .collect();
        s.sort_unstable_by(|a, b| b.cmp(a));
        s.dedup();
        let check = (lo..=hi)
            .map(|k| lo + (k - lo) * 7 % (hi - lo + 1))
            .find(|x| !s.contains(x));
        (s, check)
    }
}

/// A model compiled over a range: the C and arena as [`Compiled`] (its inputs and outputs at
/// the largest size, the run-time size one more input), and the program's run-time shapes.
pub struct CompiledRanged {
    /// What a build embeds and runs.
    pub compiled: Compiled,
    /// The program, its parameters and run-time shapes.
    pub ranged: Ranged,
}

/// The graph and program of `model` with `range.dim` bound to `size`.
fn lower_at(
    model: &Path,
    opts: &Options,
    range: &DimRange,
    size: usize,
) -> Result<(Graph, Program)> {
    let bindings = opts.bindings.clone().dim(range.dim.clone(), size);
    let mut g = onnx::load_with(model, &bindings)?;
    g.limits = opts.limits();
    crate::passes::run(&mut g, &crate::passes::pipeline_for(false))?;
    let mut p = codegen::lower_graph_as(&g, &|_| (1, None), true)?;
    te::fuse(&mut p);
    Ok((g, p))
}

/// Compiles `model` (its other symbolic dimensions bound by `opts.bindings`) over `range`.
pub fn compile_ranged(
    model: &Path,
    opts: &Options,
    range: &DimRange,
    symbol: &str,
) -> Result<CompiledRanged> {
    let (sizes, check) = range.samples();
    let mut samples = Vec::with_capacity(sizes.len());
    let mut graph = None;
    for &s in &sizes {
        let (g, p) = lower_at(model, opts, range, s)?;
        graph.get_or_insert(g);
        samples.push((s, p));
    }
    let graph = graph.expect("a range has sizes");
    let fail = |detail: String| Error::Model {
        model: graph.name.clone(),
        detail: format!(
            "served over {}..={} of `{}`: {detail}",
            range.lo, range.hi, range.dim
        ),
    };
    let mut r = Ranged::from_samples(&range.dim, range.lo, range.hi, &samples).map_err(fail)?;
    drop(samples);
    if let Some(d) = check {
        let (_, p) = lower_at(model, opts, range, d)?;
        r.verify(d, &p).map_err(fail)?;
    }
    // Below 2 the program is the same formula; the model must agree on its signature.
    for d in range.lo..range.lo.max(2) {
        let (_, p) = lower_at(model, opts, range, d)?;
        let io = |q: &Program, ids: &[BufId], ranged: bool| -> Vec<Vec<usize>> {
            ids.iter()
                .map(|&b| {
                    if ranged {
                        r.shape_at(b, d)
                    } else {
                        q.bufs[b.index()].ty.shape.clone()
                    }
                })
                .collect()
        };
        let n_in = p.inputs.len();
        if io(&p, &p.inputs, false) != io(&r.program, &r.program.inputs[..n_in], true)
            || io(&p, &p.outputs, false) != io(&r.program, &r.program.outputs, true)
        {
            return Err(fail(format!(
                "at size {d} the model's inputs or outputs have other shapes than at the other sizes (a Squeeze of the dimension?); serve the range from 2"
            )));
        }
    }
    r.finish();
    let p = &r.program;
    let (locs, weights, arena_size) = codegen::locate(p);
    if arena_size > graph.limits.max_bytes {
        return Err(fail(format!(
            "the activation arena needs {arena_size} bytes at the largest size, over the limit of {} bytes",
            graph.limits.max_bytes
        )));
    }
    let c_source = codegen::c::emit_ranged(
        &r,
        &locs,
        symbol,
        &format!(
            "{} over {}..={} of {}",
            graph.name, range.lo, range.hi, range.dim
        ),
    );
    let (inputs, outputs) = codegen::io_of(p, &locs);
    let compiled = Compiled {
        name: graph.name.clone(),
        symbol: symbol.to_string(),
        c_source,
        weights,
        arena_size,
        inputs,
        outputs,
        program: r.program.clone(),
        graph,
        placement: None,
        warnings: Vec::new(),
    };
    Ok(CompiledRanged {
        compiled,
        ranged: r,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_cover_both_ends_and_check_elsewhere() {
        let r = DimRange::new("w", 32, 1024).unwrap();
        let (s, check) = r.samples();
        assert_eq!(s, vec![1024, 1023, 529, 528, 33, 32]);
        let c = check.unwrap();
        assert!((32..=1024).contains(&c) && !s.contains(&c));
        // Every size a sample: nothing left to check.
        let r = DimRange::new("w", 1, 4).unwrap();
        assert_eq!(r.samples(), (vec![4, 3, 2], None));
        assert!(DimRange::parse("w=8..=8").is_err());
        assert!(DimRange::parse("w=0..=8").is_err());
        assert_eq!(
            DimRange::parse("seq = 1..=512").unwrap(),
            DimRange::new("seq", 1, 512).unwrap()
        );
    }
}
