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

/// The rewrites a ranged program is tried with: each must take the same form at every size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rewrites {
    /// 3x3 convolutions as Winograd (`passes::winograd::run_any_size`).
    winograd: bool,
    /// Windows read padded copies of their inputs ([`crate::schedule::pad::pad_windows`]).
    pad: bool,
}

/// The graph and program of `model` with `range.dim` bound to `size`.
fn lower_at(
    model: &Path,
    opts: &Options,
    range: &DimRange,
    size: usize,
    rw: Rewrites,
) -> Result<(Graph, Program)> {
    let bindings = opts.bindings.clone().dim(range.dim.clone(), size);
    let mut g = onnx::load_with(model, &bindings)?;
    g.limits = opts.limits();
    crate::passes::run(&mut g, &crate::passes::pipeline_ranged(rw.winograd))?;
    let mut p = codegen::lower_graph_as(&g, &|_| (1, None), true)?;
    te::fuse(&mut p);
    te::hoist_invariant_factors(&mut p);
    if rw.pad {
        crate::schedule::pad::pad_windows(&mut p);
        // Unguarded now, convolutions vectorise along their output channels.
        crate::schedule::layout::ranged_channel_weights(&mut p);
    }
    Ok((g, p))
}

/// Rounds of samples added where the samples so far leave an integer's function open.
const MORE_SAMPLE_ROUNDS: usize = 6;

/// Compiles `model` (its other symbolic dimensions bound by `opts.bindings`) over `range`.
pub fn compile_ranged(
    model: &Path,
    opts: &Options,
    range: &DimRange,
    symbol: &str,
) -> Result<CompiledRanged> {
    // Winograd convolutions, and windows that read padded copies of their inputs (then their
    // contractions vectorise along the row), where every size agrees on them; else without
    // the one, then the other (the last error is the plain program's).
    let mut tries = vec![
        Rewrites {
            winograd: !opts.no_winograd,
            pad: true,
        },
        Rewrites {
            winograd: false,
            pad: true,
        },
        Rewrites {
            winograd: false,
            pad: false,
        },
    ];
    tries.dedup();
    // An error importing or lowering the model is the same under every rewrite: only the
    // samples' disagreement tries the next.
    let last = tries.len() - 1;
    for (k, rw) in tries.into_iter().enumerate() {
        match ranged_program(model, opts, range, rw)? {
            Ok((graph, r)) => return emit(graph, r, range, symbol),
            Err(e) if k == last => return Err(e),
            Err(_) => {}
        }
    }
    unreachable!("the last try returns")
}

/// What a try at a ranged program gives: the graph and the program, or why the samples do not
/// make one program (the outer error is the model's own: importing or lowering it).
type Attempt = Result<Result<(Graph, Ranged)>>;

/// The graph of `model` and its program over `range` under the rewrites `rw`, verified and
/// finished.
fn ranged_program(model: &Path, opts: &Options, range: &DimRange, rw: Rewrites) -> Attempt {
    let (sizes, check) = range.samples();
    let mut samples = Vec::with_capacity(sizes.len());
    let mut graph = None;
    for &s in &sizes {
        let (g, p) = lower_at(model, opts, range, s, rw)?;
        graph.get_or_insert(g);
        samples.push((s, p));
    }
    let graph = graph.expect("a range has sizes");
    let fail = |detail: String| range_error(&graph, range, detail);
    let merged = |samples: &[(usize, Program)]| {
        Ranged::from_samples(&range.dim, range.lo, range.hi, samples).map_err(fail)
    };
    let mut r = match merged(&samples) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    // Where the samples leave an integer's function open (the constant term of a floor), a
    // sample where the candidates differ decides; a few rounds, then an error rather than a
    // guess.
    for _ in 0..MORE_SAMPLE_ROUNDS {
        if r.wanted.is_empty() {
            break;
        }
        for &d in r.wanted.iter().take(6) {
            let (_, p) = lower_at(model, opts, range, d, rw)?;
            samples.push((d, p));
        }
        r = match merged(&samples) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
    }
    if let Some(&d) = r.wanted.first() {
        return Ok(Err(fail(format!(
            "after {} samples, some integer of the program is still more than one function of the size (they differ at {d})",
            samples.len()
        ))));
    }
    drop(samples);
    if let Some(d) = check {
        let (_, p) = lower_at(model, opts, range, d, rw)?;
        if let Err(e) = r.verify(d, &p) {
            return Ok(Err(fail(e)));
        }
    }
    // Below 2 the program is the same formula; the model must agree on its signature.
    for d in range.lo..range.lo.max(2) {
        let (_, p) = lower_at(model, opts, range, d, rw)?;
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
            return Ok(Err(fail(format!(
                "at size {d} the model's inputs or outputs have other shapes than at the other sizes (a Squeeze of the dimension?); serve the range from 2"
            ))));
        }
    }
    r.finish();
    Ok(Ok((graph, r)))
}

/// The error of `graph` served over `range`: what `detail` says.
fn range_error(graph: &Graph, range: &DimRange, detail: String) -> Error {
    Error::Model {
        model: graph.name.clone(),
        detail: format!(
            "served over {}..={} of `{}`: {detail}",
            range.lo, range.hi, range.dim
        ),
    }
}

/// The C and the rest of a build of `r`.
fn emit(graph: Graph, r: Ranged, range: &DimRange, symbol: &str) -> Result<CompiledRanged> {
    let fail = |detail: String| range_error(&graph, range, detail);
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

/// Compiles `model` over `range`, runs it on the inputs in `data` (`input_<i>.pb`, at their
/// run-time shapes) and compares with `output_<i>.pb` where present.
pub fn run_on_data(
    model: &Path,
    data: &Path,
    work: &Path,
    exec: &collage_runtime::Executor,
    opts: &Options,
    range: &DimRange,
) -> Result<Vec<super::run::OutputCheck>> {
    let inputs = super::run::read_inputs(data)?;
    let c = compile_ranged(model, opts, range, "ranged")?;
    let mut m = crate::native::RangedModel::build(&c.compiled, &c.ranged, work, "-O1")?;
    let got = m.run(&inputs, exec)?;
    let mut checks = Vec::new();
    for (i, t) in got.iter().enumerate() {
        let path = data.join(format!("output_{i}.pb"));
        if path.exists() {
            let want = super::run::read_pb(&path)?;
            let (pass, max_abs_err) = crate::tensor::compare(t, &want);
            checks.push(super::run::OutputCheck {
                index: i,
                name: c.compiled.outputs[i].name.clone(),
                pass,
                max_abs_err,
            });
        }
    }
    Ok(checks)
}

/// One size of a ranged build against the build bound to that size (median milliseconds).
#[derive(Clone, Debug)]
pub struct RangedTiming {
    /// The size.
    pub size: usize,
    /// The ranged build.
    pub ranged_ms: f64,
    /// The build bound to the size.
    pub bound_ms: f64,
}

/// Rounds of [`bench`]: each size's two builds are timed alternately this many times.
const ROUNDS: u32 = 8;

/// Times the build of `model` over `range` at each of `sizes` against a build bound to each
/// size, on pseudo-random inputs, alternating the two [`ROUNDS`] times (`3 * min_time` in
/// all for each) and keeping the smallest round median of each.
pub fn bench(
    model: &Path,
    opts: &Options,
    range: &DimRange,
    sizes: &[usize],
    threads: usize,
    min_time: std::time::Duration,
    work: &Path,
) -> Result<Vec<RangedTiming>> {
    let exec = collage_runtime::Executor::with_threads(threads);
    let c = compile_ranged(model, opts, range, "ranged")?;
    let mut m =
        crate::native::RangedModel::build(&c.compiled, &c.ranged, &work.join("ranged"), "-O3")?;
    // The time of three rounds of `min_time` each, in more shorter ones: a slow phase of a
    // shared host (seconds long) then spoils fewer of them.
    let round = min_time.mul_f64(3.0 / ROUNDS as f64);
    let median = |f: &mut dyn FnMut()| -> f64 {
        for _ in 0..5 {
            f();
        }
        let mut t = Vec::new();
        let start = std::time::Instant::now();
        while start.elapsed() < round || t.len() < 10 {
            let s = std::time::Instant::now();
            f();
            t.push(s.elapsed().as_secs_f64() * 1e3);
        }
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let mut out = Vec::new();
    for &d in sizes {
        if !(range.lo..=range.hi).contains(&d) {
            return Err(Error::Data {
                name: range.dim.clone(),
                detail: format!("{d} is outside the range {}..={}", range.lo, range.hi),
            });
        }
        let bound = Options {
            bindings: opts.bindings.clone().dim(range.dim.clone(), d),
            ..opts.clone()
        };
        let mut l =
            super::run::load_model(model, None, &work.join(format!("bound{d}")), "-O3", &bound)?;
        let inputs: Vec<crate::ir::Tensor> = l
            .model
            .inputs
            .iter()
            .map(|io| crate::tensor::pseudo_random(&io.ty))
            .collect();
        m.size_of(&inputs)?;
        let (mut r, mut b) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..ROUNDS {
            r = r.min(median(&mut || {
                m.run(&inputs, &exec).expect("checked inputs");
            }));
            b = b.min(median(&mut || l.model.run_unchecked(&inputs, &exec)));
        }
        out.push(RangedTiming {
            size: d,
            ranged_ms: r,
            bound_ms: b,
        });
    }
    Ok(out)
}

/// Compiles `model` over `range` and writes its generated sources to `out` (`collage compile
/// --dim-range`): the Rust glue, the C, the weights and the text IR at the largest size.
pub fn emit_sources(
    model: &Path,
    out: &Path,
    opts: &Options,
    range: &DimRange,
) -> Result<Vec<std::path::PathBuf>> {
    let file = model
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let symbol = crate::ir::sanitize(file.trim_end_matches(".onnx"));
    let r = compile_ranged(model, opts, range, &symbol)?;
    std::fs::create_dir_all(out).map_err(crate::error::io_err(out))?;
    let c = &r.compiled;
    let weights_file = format!("{symbol}.weights");
    let files = [
        (
            out.join(format!("{symbol}.rs")),
            crate::codegen::rust::emit_ranged(c, &r.ranged, &weights_file).into_bytes(),
        ),
        (
            out.join(format!("{symbol}.c")),
            c.c_source.clone().into_bytes(),
        ),
        (out.join(&weights_file), c.weights.clone()),
        (
            out.join(format!("{symbol}.ir.txt")),
            c.graph.to_string().into_bytes(),
        ),
    ];
    for (p, bytes) in &files {
        std::fs::write(p, bytes).map_err(crate::error::io_err(p))?;
    }
    Ok(files.into_iter().map(|(p, _)| p).collect())
}
