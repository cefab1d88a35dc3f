//! Code generation: lowering the graph to a [`Program`], fusion, arena planning, C kernels and the
//! Rust glue.
pub mod c;
pub mod library;
pub mod rust;
pub mod writer;

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{OpError, Result};
use crate::ir::{Graph, Tensor, TensorType, ValueId};
use crate::ops::LowerCx;
use crate::schedule::{plan_arena, LiveRange};
use crate::target::Target;
use crate::te::{self, BufId, BufKind, Program, Src, Stage};
pub use c::Location;

/// A model input or output as seen by the generated code.
#[derive(Clone, Debug, PartialEq)]
pub struct Io {
    /// The source name.
    pub name: String,
    /// Its type.
    pub ty: TensorType,
    /// For outputs: the offset in the arena.
    pub offset: usize,
}

/// Everything the compiler produces for one model.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The model name.
    pub name: String,
    /// The C symbol prefix: the entry point is `collage_<symbol>_run`.
    pub symbol: String,
    /// The generated C translation unit.
    pub c_source: String,
    /// The weight blob (64-byte aligned pieces).
    pub weights: Vec<u8>,
    /// The arena size in bytes.
    pub arena_size: usize,
    /// The run-time inputs.
    pub inputs: Vec<Io>,
    /// The outputs.
    pub outputs: Vec<Io>,
    /// The fused program (for inspection).
    pub program: Program,
    /// The optimised graph (for inspection).
    pub graph: Graph,
    /// What placement decided (absent for single-backend compiles).
    pub placement: Option<crate::partition::place::PlacementInfo>,
    /// What the user should hear of (a cached plan that no longer parses or fits its kernel),
    /// one message each.
    pub warnings: Vec<String>,
}

/// Lowers every node of `g` (after the pass pipeline) into one [`Program`], every stage tagged
/// with its node's index as `part` and generated.
pub fn lower_graph(g: &Graph) -> Result<Program> {
    lower_graph_with(g, &|n| (n as u32, None))
}

/// Where one node runs: the fusion region (`part`) of its stages and, for a library backend, its
/// id (the node's contraction stages that are GEMMs become library calls).
pub type NodeAssign<'a> = &'a dyn Fn(usize) -> (u32, Option<crate::backend::BackendId>);

/// The execution of a stage whose node runs on `backend`: a library call when the backend is a
/// GEMM library and the stage is a GEMM it can take, else generated.
pub fn exec_for(p: &Program, st: &Stage, backend: Option<crate::backend::BackendId>) -> te::Exec {
    let Some(lib) = backend.and_then(|b| b.lookup().ok()) else {
        return te::Exec::Generated;
    };
    let b = lib.id();
    let probe = Stage {
        exec: te::Exec::gemm(b),
        ..st.clone()
    };
    match library::gemm_call(p, &probe) {
        // BLAS-style interfaces take one unit stride per operand; the `gemm` crate any strides.
        Some(g) if lib.any_strides() || library::blas_strides_ok(&g) => te::Exec::gemm(b),
        _ => te::Exec::Generated,
    }
}

/// [`lower_graph`] with each node's stages placed by `assign`.
pub fn lower_graph_with(g: &Graph, assign: NodeAssign) -> Result<Program> {
    lower_graph_as(g, assign, false)
}

/// [`lower_graph_with`]; `uniform`: every operator lowered the same way at every size (no
/// choice by size: [`LowerCx::uniform`]), for a program served over a range.
pub fn lower_graph_as(g: &Graph, assign: NodeAssign, uniform: bool) -> Result<Program> {
    let mut p = Program::default();
    let mut buf_of: HashMap<ValueId, BufId> = HashMap::new();
    for (i, &v) in g.inputs.iter().enumerate() {
        let b = p.push(g.value(v).name.clone(), g.ty(v).clone(), BufKind::Input(i));
        buf_of.insert(v, b);
        p.inputs.push(b);
        p.input_names.push(g.value(v).name.clone());
    }
    let buf = |p: &mut Program, buf_of: &mut HashMap<ValueId, BufId>, v: ValueId| -> BufId {
        if let Some(&b) = buf_of.get(&v) {
            return b;
        }
        let k: Arc<Tensor> = g
            .konst(v)
            .expect("undefined value is caught by the verifier")
            .clone();
        let b = p.push(g.value(v).name.clone(), k.ty.clone(), BufKind::Const(k));
        buf_of.insert(v, b);
        b
    };
    for (ni, node) in g.nodes.iter().enumerate() {
        let (part, backend) = assign(ni);
        let err = |error: OpError| node.error(error);
        let (inputs, consts) = node.input_facts(g);
        let outputs: Vec<TensorType> = node.outputs.iter().map(|&o| g.ty(o).clone()).collect();
        let mut cx = LowerCx {
            inputs: &inputs,
            consts: &consts,
            outputs: &outputs,
            stages: vec![],
            name: node.name.clone(),
            direct: false,
            uniform,
        };
        // On a backend that takes windows, an operator with a window form is lowered to its
        // direct form: one reduction stage that the library's primitive computes.
        let window_backend = backend
            .and_then(|b| b.lookup().ok())
            .filter(|b| b.takes_windows())
            .map(|b| b.id());
        let prim = window_backend.and_then(|_| node.op.window(&cx));
        cx.direct = prim.is_some();
        let srcs = node.op.lower(&mut cx).map_err(err)?;
        let prim = prim.filter(|_| cx.stages.len() == 1 && cx.stages[0].reduce.is_some());
        let arg_bufs: Vec<Option<BufId>> = node
            .inputs
            .iter()
            .map(|v| v.map(|v| buf(&mut p, &mut buf_of, v)))
            .collect();
        let mut local_bufs: Vec<BufId> = Vec::new();
        let resolve = |s: Src, local: &[BufId]| -> Src {
            match s {
                Src::Arg(i) => {
                    Src::Buf(arg_bufs[i as usize].expect("lowering reads a present input"))
                }
                Src::Local(j) => Src::Buf(local[j as usize]),
                b => b,
            }
        };
        for st in cx.stages {
            let body = st.body.map_src(&|s| resolve(s, &local_bufs));
            let reduce = st.reduce.map(|mut r| {
                r.finalize = r.finalize.map(|f| f.map_src(&|s| resolve(s, &local_bufs)));
                r
            });
            let mut st = Stage {
                body,
                reduce,
                part,
                ..st
            };
            if let Some(prim) = prim {
                st.exec = te::Exec::Library {
                    backend: window_backend.expect("a window backend"),
                    call: te::LibraryCall::Window(Box::new(prim)),
                };
            } else if st.reduce.is_some() {
                st.exec = exec_for(&p, &st, backend);
            }
            let b = p.push(st.name.clone(), st.ty.clone(), BufKind::Stage(st));
            local_bufs.push(b);
        }
        for (k, (&o, s)) in node.outputs.iter().zip(&srcs).enumerate() {
            let Src::Buf(b) = resolve(*s, &local_bufs) else {
                unreachable!()
            };
            if p.bufs[b.index()].ty != outputs[k] {
                return Err(err(OpError::expected(
                    format!("lowered output {k} of type {}", outputs[k]),
                    &p.bufs[b.index()].ty,
                )));
            }
            if matches!(p.bufs[b.index()].kind, BufKind::Stage(_)) {
                p.bufs[b.index()].name = g.value(o).name.clone();
            }
            buf_of.insert(o, b);
        }
    }
    for &v in &g.outputs {
        let mut b = buf(&mut p, &mut buf_of, v);
        if !matches!(p.bufs[b.index()].kind, BufKind::Stage(_)) || p.outputs.contains(&b) {
            let ty = p.bufs[b.index()].ty.clone();
            let body = te::Expr::load_flat(
                Src::Buf(b),
                te::Expr::flatten(
                    &(0..ty.rank()).map(te::Expr::var).collect::<Vec<_>>(),
                    &ty.shape,
                ),
            );
            b = p.push(
                g.value(v).name.clone(),
                ty.clone(),
                BufKind::Stage(Stage {
                    name: format!("copy_{}", g.value(v).name),
                    ty,
                    body,
                    reduce: None,
                    materialize: false,
                    part: 0,
                    exec: te::Exec::Generated,
                    choice: None,
                }),
            );
        }
        p.outputs.push(b);
        p.output_names.push(g.value(v).name.clone());
    }
    Ok(p)
}

/// Gives every buffer its [`Location`]: inputs by position, constants in the weight blob, stages
/// in the arena. Returns the locations, the weight blob and the arena size. ("Place" names one
/// idea only: placing sub-graphs on backends, `driver::place`.)
pub fn locate(p: &Program) -> (Vec<Location>, Vec<u8>, usize) {
    let mut locs = vec![Location::None; p.bufs.len()];
    let mut weights = Vec::new();
    let mut readers = p.readers();
    // A group's producer runs inside its consumer's task (`k<a>_fill` in `g<b>`): what it reads
    // is read at the consumer's step, and must stay live until then.
    for g in &p.groups {
        for r in readers.iter_mut() {
            if r.contains(&g.producer) && !r.contains(&g.consumer) {
                r.push(g.consumer);
            }
        }
    }
    // A row group runs where its last member stands: what any member reads is read then.
    for g in &p.row_groups {
        for r in readers.iter_mut() {
            if r.iter().any(|x| g.stages.contains(x)) && !r.contains(&g.last()) {
                r.push(g.last());
            }
        }
    }
    let end = p.bufs.len();
    let mut intervals = Vec::new();
    let mut stage_ids = Vec::new();
    for (i, b) in p.bufs.iter().enumerate() {
        match &b.kind {
            BufKind::Input(k) => locs[i] = Location::Input(*k),
            BufKind::Const(_) => {
                let off = weights.len().div_ceil(64) * 64;
                weights.resize(off, 0);
                weights.extend_from_slice(&b.stored_bytes().expect("a constant"));
                locs[i] = Location::Weight(off);
            }
            BufKind::Stage(_) => {
                let last = if p.outputs.contains(&BufId::new(i)) {
                    end
                } else {
                    readers[i].iter().copied().max().map_or(i, |r| r.index())
                };
                intervals.push(LiveRange {
                    size: p.arena_bytes(BufId::new(i)).max(1),
                    first: i,
                    last,
                });
                stage_ids.push(i);
            }
            BufKind::Dead => {}
        }
    }
    let plan = plan_arena(&intervals);
    for (k, &i) in stage_ids.iter().enumerate() {
        locs[i] = Location::Arena(plan.offsets[k]);
    }
    (locs, weights, plan.size)
}

/// The first line of a generated C file.
fn header(model: &str) -> String {
    format!(
        "@generated by collage-build {} for model {model:?}. Do not edit.",
        env!("CARGO_PKG_VERSION"),
    )
}

/// Puts the constants of several compiled models (the variants of one model, `Build::variants`)
/// in one weight blob, each distinct constant once: the model's initializers, which every
/// variant holds, are stored once in the binary. Every model's C is printed again for its offsets
/// in the blob, which is returned; the models' own `weights` are emptied.
pub fn share_weights(cs: &mut [Compiled]) -> Vec<u8> {
    let mut blob: Vec<u8> = Vec::new();
    // Content hash → offsets of constants with that hash (compared byte for byte).
    let mut seen: std::collections::HashMap<u64, Vec<(usize, usize)>> = Default::default();
    for c in cs.iter_mut() {
        let (mut locs, _, _) = locate(&c.program);
        for (i, b) in c.program.bufs.iter().enumerate() {
            if !matches!(locs[i], Location::Weight(_)) {
                continue;
            }
            let bytes = b.stored_bytes().expect("a constant");
            let h = {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut h);
                h.finish()
            };
            let same = seen.entry(h).or_default();
            let off = match same
                .iter()
                .find(|&&(o, n)| n == bytes.len() && blob[o..o + n] == bytes[..])
            {
                Some(&(o, _)) => o,
                None => {
                    let o = blob.len().div_ceil(64) * 64;
                    blob.resize(o, 0);
                    blob.extend_from_slice(&bytes);
                    same.push((o, bytes.len()));
                    o
                }
            };
            locs[i] = Location::Weight(off);
        }
        c.c_source = c::emit(&c.program, &locs, &c.symbol, &header(&c.name));
        c.weights = Vec::new();
    }
    blob
}

/// The switches of the steps after lowering: what `driver::Options` says, never an
/// environment variable read here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Switches {
    /// Leave weights and convolutions as lowered: no packing in panels, no transposed weights,
    /// no direct convolutions (and so no groups, which are made of panels).
    pub no_layout: bool,
    /// Form no groups.
    pub no_groups: bool,
    /// Draw every stage's plan from the space from this seed (tests of the whole space).
    pub seed: Option<u64>,
}

/// What the steps after lowering read and report.
pub struct StepCx<'a> {
    /// The target the plans are chosen for.
    pub target: &'a Target,
    /// The switches.
    pub switches: Switches,
    /// The plans a tuning run recorded, by kernel.
    pub cached: Option<&'a CachedPlan<'a>>,
    /// What the user should hear of.
    pub warnings: Vec<String>,
}

/// One step of the pipeline after lowering: a name and its function.
pub type Step = (&'static str, fn(&mut Program, &mut StepCx<'_>));

/// The pipeline after lowering, up to the arena, in order (as `passes::PIPELINE` is for the
/// graph): fusion, the layout decisions (convolutions reading their padded input, transposed
/// and panel-packed weights: `schedule::layout`), every stage's kernel plan
/// (`schedule::plan`), groups (`schedule::group`, whose instances are whole tiles of the
/// plans), and the plans a tuning run recorded (which plan and group again). The same for a
/// whole model and for the candidates the placement search prices; the arena ([`locate`]) and
/// the C ([`c::emit`]) follow.
pub const PIPELINE: &[Step] = &[
    ("fuse", |p, _| te::fuse(p)),
    ("layout", |p, cx| {
        if !cx.switches.no_layout {
            crate::schedule::layout::pack_weights(p);
        }
    }),
    ("plan", |p, cx| plan(p, cx.target, cx.switches.seed)),
    ("group", group),
    ("tuned plans", |p, cx| {
        if let Some(cached) = cx.cached {
            apply_cached_plans(p, cx, cached);
        }
    }),
];

/// Runs `steps` on `p` in order.
pub fn run_steps(p: &mut Program, steps: &[Step], cx: &mut StepCx<'_>) {
    for (_, step) in steps {
        step(p, cx);
    }
}

/// The groups of a planned program ([`crate::schedule::plan_groups`]).
fn group(p: &mut Program, cx: &mut StepCx<'_>) {
    p.groups.clear();
    p.row_groups.clear();
    if !cx.switches.no_layout && !cx.switches.no_groups {
        p.groups = crate::schedule::plan_groups(
            p,
            cx.target,
            &crate::schedule::tile_widths,
            cx.switches.seed,
        );
    }
    if !cx.switches.no_groups {
        // Band groups first: their members join no row group.
        p.row_groups = crate::schedule::plan_band_groups(p, cx.target, cx.switches.seed);
        let rows = crate::schedule::plan_row_groups(p, cx.target, cx.switches.seed);
        p.row_groups.extend(rows);
    }
}

/// Where a build finds a kernel's chosen plan: the text a tuning run recorded for kernel `id`
/// of a planned program (the cost cache's entry for its key), if any.
pub type CachedPlan<'a> = dyn Fn(&Program, BufId) -> Option<String> + 'a;

/// Applies the plans `cached` holds to the kernels of the planned program `p` (each stage's
/// `choice`), then plans and groups it again. A plan that does not parse, or whose kind no
/// longer fits its stage, is left out with a warning naming the kernel: the kernel keeps its
/// default plan, never a wrong one.
fn apply_cached_plans(p: &mut Program, cx: &mut StepCx<'_>, cached: &CachedPlan<'_>) {
    let cpu = &*cx.target.host_cpu();
    let mut chosen = Vec::new();
    for id in p.buf_ids() {
        let Some(st) = p.stage(id) else { continue };
        if st.exec != te::Exec::Generated || p.plans[id.index()].is_empty() {
            continue;
        }
        let Some(text) = cached(p, id) else { continue };
        let name = &st.name;
        match text.parse::<te::PlanChoice>() {
            Err(e) => cx.warnings.push(format!(
                "kernel k{id} ({name}): its cached plan `{text}` does not parse ({e}); it runs its default plan"
            )),
            Ok(choice) => {
                let fits = te::Isa::ALL.iter().any(|&isa| {
                    crate::schedule::plan::kinds_that_fit(p, st, isa, cpu).contains(&choice.kind())
                });
                if fits {
                    chosen.push((id, choice));
                } else {
                    cx.warnings.push(format!(
                        "kernel k{id} ({name}): its cached plan `{text}` no longer fits the kernel (a {} plan does not apply to it); it runs its default plan",
                        choice.kind_name()
                    ));
                }
            }
        }
    }
    if chosen.is_empty() {
        return;
    }
    for (id, choice) in chosen {
        if let BufKind::Stage(st) = &mut p.bufs[id.index()].kind {
            st.choice = Some(choice);
        }
    }
    plan(p, cx.target, cx.switches.seed);
    group(p, cx);
}

/// Chooses every stage's kernel plan for `target` and stores them on `p` (`Program::plans`),
/// and the thread split of its library GEMM calls (`Program::parallel_calls`): what the C
/// emitter prints. A library call's in-place epilogue is planned from what its
/// backend leaves of its finalize; `seed` draws plans from the space.
pub fn plan(p: &mut Program, target: &Target, seed: Option<u64>) {
    let windows = c::library_backends(p).into_iter().find_map(|id| {
        id.lookup()
            .ok()
            .and_then(|b| b.window_calls(p, "").map(|w| w.epilogues(p)))
    });
    let rest = |p: &Program, b: BufId| -> Option<te::Expr> {
        let st = p.stage(b)?;
        match &st.exec {
            te::Exec::Library {
                call: te::LibraryCall::Window(_),
                ..
            } => windows.as_ref().and_then(|w| w.get(&b).cloned().flatten()),
            _ => st.gemm_epilogue(),
        }
    };
    p.plans = crate::schedule::plan_program(p, target, &rest, seed);
    p.parallel_calls = crate::schedule::parallel_calls(p);
}

/// Compiles a graph that has been through the pass pipeline, each node's stages placed by
/// `assign`: lowering, fusion, memory placement, C code.
pub fn compile_assigned(g: Graph, symbol: &str, assign: NodeAssign) -> Result<Compiled> {
    compile_scheduled(g, symbol, assign, Switches::default(), None)
}

/// [`compile_assigned`] under `switches` (a seed draws every stage's plan from the space: tests
/// of the whole plan space), with the kernels' plans that `cached` holds (a tuning run's)
/// applied: lowering, then [`PIPELINE`], the arena and the C.
pub fn compile_scheduled(
    g: Graph,
    symbol: &str,
    assign: NodeAssign,
    switches: Switches,
    cached: Option<&CachedPlan<'_>>,
) -> Result<Compiled> {
    let mut p = lower_graph_with(&g, assign)?;
    let target = Target::for_build();
    let mut cx = StepCx {
        target: &target,
        switches,
        cached,
        warnings: Vec::new(),
    };
    run_steps(&mut p, PIPELINE, &mut cx);
    let warnings = cx.warnings;
    let (locs, weights, arena_size) = locate(&p);
    if arena_size > g.limits.max_bytes {
        return Err(crate::error::Error::Model {
            model: g.name.clone(),
            detail: format!(
                "the activation arena needs {arena_size} bytes, over the limit of {} bytes (raise it with Build::max_tensor_bytes / --max-tensor-bytes if the target can hold it)",
                g.limits.max_bytes
            ),
        });
    }
    let c_source = c::emit(&p, &locs, symbol, &header(&g.name));
    let (inputs, outputs) = io_of(&p, &locs);
    Ok(Compiled {
        name: g.name.clone(),
        symbol: symbol.to_string(),
        c_source,
        weights,
        arena_size,
        inputs,
        outputs,
        program: p,
        graph: g,
        placement: None,
        warnings,
    })
}

/// The inputs and outputs of `p` (laid out by `locs`) for a [`Compiled`]: inputs by pointer,
/// outputs at their arena offsets.
pub fn io_of(p: &Program, locs: &[Location]) -> (Vec<Io>, Vec<Io>) {
    let io = |b: BufId, name: &String, offset: usize| Io {
        name: name.clone(),
        ty: p.bufs[b.index()].ty.clone(),
        offset,
    };
    let inputs = p
        .inputs
        .iter()
        .zip(&p.input_names)
        .map(|(&b, n)| io(b, n, 0))
        .collect();
    let outputs = p
        .outputs
        .iter()
        .zip(&p.output_names)
        .map(|(&b, n)| {
            let Location::Arena(off) = locs[b.index()] else {
                unreachable!("outputs are stages in the arena")
            };
            io(b, n, off)
        })
        .collect();
    (inputs, outputs)
}

/// A stage's plan names its operands by buffer (`schedule::plan`): renumbering a program's
/// buffers renumbers its plans and changes nothing else. Here, above the planner, because it
/// compiles whole programs.
#[cfg(test)]
mod plan_renumbering {

    use crate::codegen::{self, Switches};
    use crate::ir::ValueId;
    use crate::ir::{DType, Graph, TensorType};
    use crate::ops::Attr;
    use crate::target::Target;
    use crate::te::{BufId, BufKind, Buffer, KernelPlan, Program, Src};
    use crate::tensor::Tensor;

    /// Adds a node of the registered operator `op` with `attrs` on `inputs` to `g`.
    fn node(g: &mut Graph, op: &str, attrs: &[(&str, Attr)], inputs: &[ValueId]) -> ValueId {
        let o = crate::ops::testing::build(op, attrs, 17, inputs.len(), 1).unwrap();
        let out = g.add_value(format!("{op}_out"), None);
        let name = format!("{op}_{}", g.nodes.len());
        g.add_node(
            name,
            o,
            inputs.iter().map(|&v| Some(v)).collect(),
            vec![out],
        );
        out
    }

    fn weights(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
        Tensor::from_f32(shape, &v)
    }

    /// A depthwise 3x3 convolution, a pointwise one over a 1 MiB image, a padded 3x3 one and a
    /// padded pooling: stages whose plans name their operands (a depthwise plane, prefetched
    /// loads, guards).
    fn program(switches: Switches) -> Program {
        let mut g = Graph::new("renumbered");
        let x = g.add_value("x", Some(TensorType::new(DType::F32, [1, 64, 64, 64])));
        g.inputs.push(x);
        let pads = ("pads", Attr::Ints(vec![1, 1, 1, 1]));
        let k3 = ("kernel_shape", Attr::Ints(vec![3, 3]));
        let dw = g.add_const("dw", weights(&[64, 1, 3, 3]));
        let d = node(
            &mut g,
            "Conv",
            &[pads.clone(), k3.clone(), ("group", Attr::Int(64))],
            &[x, dw],
        );
        let r = node(&mut g, "Relu", &[], &[d]);
        let pw = g.add_const("pw", weights(&[64, 64, 1, 1]));
        let c = node(&mut g, "Conv", &[], &[r, pw]);
        let w3 = g.add_const("w3", weights(&[16, 64, 3, 3]));
        let c3 = node(&mut g, "Conv", &[pads.clone(), k3.clone()], &[c, w3]);
        let m = node(&mut g, "MaxPool", &[pads, k3], &[c3]);
        g.outputs.push(m);
        crate::passes::run(&mut g, crate::passes::PIPELINE).unwrap();
        codegen::compile_scheduled(g, "renumbered", &|n| (n as u32 + 1, None), switches, None)
            .unwrap()
            .program
    }

    /// `p` with every buffer one place later (a dead buffer first), planned again.
    fn shifted(p: &Program) -> Program {
        let up = |s: Src| match s {
            Src::Buf(b) => Src::Buf(BufId(b.0 + 1)),
            s => s,
        };
        let mut q = Program {
            bufs: vec![Buffer {
                name: "dead".into(),
                ty: TensorType::new(DType::F32, [1]),
                kind: BufKind::Dead,
                packed: false,
            }],
            inputs: p.inputs.iter().map(|b| BufId(b.0 + 1)).collect(),
            outputs: p.outputs.iter().map(|b| BufId(b.0 + 1)).collect(),
            input_names: p.input_names.clone(),
            output_names: p.output_names.clone(),
            groups: p
                .groups
                .iter()
                .map(|g| crate::te::Group {
                    producer: BufId(g.producer.0 + 1),
                    consumer: BufId(g.consumer.0 + 1),
                    ..g.clone()
                })
                .collect(),
            row_groups: p
                .row_groups
                .iter()
                .map(|g| crate::te::RowGroup {
                    stages: g.stages.iter().map(|b| BufId(b.0 + 1)).collect(),
                    scratch: g.scratch.iter().map(|b| BufId(b.0 + 1)).collect(),
                    ..g.clone()
                })
                .collect(),
            plans: Vec::new(),
            parallel_calls: Vec::new(),
            absorbed: p
                .absorbed
                .iter()
                .map(|(b, k)| (BufId(b.0 + 1), BufId(k.0 + 1)))
                .collect(),
        };
        for b in &p.bufs {
            let mut b = b.clone();
            if let BufKind::Stage(st) = &mut b.kind {
                st.body = st.body.map_src(&up);
                if let Some(f) = st.reduce.as_mut().and_then(|r| r.finalize.as_mut()) {
                    *f = f.map_src(&up);
                }
            }
            q.bufs.push(b);
        }
        codegen::plan(&mut q, &Target::for_build(), None);
        q
    }

    /// A stage's plan depends on its program only through the stage and its operands, and
    /// names the operands by buffer: renumbering the buffers renumbers the plans and changes
    /// nothing else (what a kernel cut out of its program, with its operands renumbered, is
    /// planned to).
    #[test]
    fn renumbered_buffers_renumber_the_plans() {
        let mut named = [false; 3];
        for no_layout in [false, true] {
            let p = program(Switches {
                no_layout,
                ..Switches::default()
            });
            let q = shifted(&p);
            assert!(q.plans[0].is_empty());
            for b in 0..p.bufs.len() {
                let renumbered: Vec<KernelPlan> = p.plans[b]
                    .iter()
                    .map(|pl| pl.map_bufs(&|x: BufId| BufId(x.0 + 1)))
                    .collect();
                assert_eq!(
                    q.plans[b + 1],
                    renumbered,
                    "buffer {b} (no_layout {no_layout})"
                );
                if q.plans[b + 1] != p.plans[b] {
                    match &p.plans[b][0] {
                        KernelPlan::Plane(_) => named[0] = true,
                        KernelPlan::Gemm(g) if !g.prefetch.is_empty() => named[1] = true,
                        KernelPlan::Injective(i) if i.guard.is_some() => named[2] = true,
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(
            named, [true; 3],
            "a depthwise plane, prefetched loads and a guard each name a buffer"
        );
    }
}
