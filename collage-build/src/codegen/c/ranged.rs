//! The C of a program served over a range of one dimension ([`Ranged`]): every stage one
//! loop nest whose extents are read at run time, the leading dimensions split among threads,
//! the last one the inner loop (which the C compiler vectorises where it can).
//!
//! The entry point takes the run-time size as one more input after the model's: `I[n]`
//! points to an `int64_t`. It computes the program's parameters from it into the
//! parameter buffer, which the kernels read as the last input.

use super::channel::ChannelExtents;
use super::{
    accumulate, comment, dispatch, finalize_c, profile_counters, scalar, stage_title, Emitter, Ext,
    GemmExtents, PRELUDE, VARIANTS,
};
use crate::codegen::writer::CWriter;
use crate::schedule::Location;
use crate::target::Cpu;
use crate::te::{BufKind, Expr, Isa, Ranged, Src};

/// Work (elements times reduction points at the largest size) below which a stage runs on
/// the calling thread: a pool dispatch costs microseconds.
const PARALLEL_WORK: usize = 1 << 12;

/// Work of the whole program at the run-time size (every stage's elements times reduction
/// points) below which every stage runs on the calling thread: the pool's dispatches would
/// cost more than they save (tiny_bert at one token, 2 threads: 2.4 -> 1.9 us).
const PROGRAM_WORK: usize = 1 << 17;

/// The kernels of `r` and the `run<suffix>` that calls them (the instruction-set variant
/// `isa`, on `cpu`).
fn emit_run(out: &mut CWriter, r: &Ranged, locs: &[Location], symbol: &str, isa: Isa, cpu: &Cpu) {
    let suffix = isa.suffix();
    let p = &r.program;
    let Location::Input(np) = locs[r.param_buf.index()] else {
        panic!("the parameter buffer is an input")
    };
    let pb = r.param_buf;
    let mut calls = Vec::new();
    // Every stage's work at the run-time size (C), summed in `run` to gate the pool.
    let mut total_work: Vec<String> = Vec::new();
    for (id, b) in p.buf_ids().zip(&p.bufs) {
        let BufKind::Stage(st) = &b.kind else {
            continue;
        };
        let em = Emitter {
            p,
            acc: st.ty.dtype,
            rebase: None,
            band: None,
        };
        let shape = r.iters[id.index()]
            .as_ref()
            .expect("a stage iterates its shape");
        let rank = shape.len();
        out.line("");
        out.line(format!("/* {} */", stage_title(st)));
        out.open(format!(
            "static void k{id}{suffix}(void *vctx, int64_t begin, int64_t end) {{"
        ));
        out.line("collage_ctx *ctx = (collage_ctx *)vctx;");
        out.line(format!(
            "const int64_t *restrict b{pb} = (const int64_t *)ctx->I[{np}];"
        ));
        out.line(format!("(void)b{pb};"));
        let mut srcs = st.body.sources();
        if let Some(f) = st.reduce.as_ref().and_then(|r| r.finalize.as_ref()) {
            srcs.extend(f.sources());
        }
        srcs.sort();
        srcs.dedup();
        for s in &srcs {
            let Src::Buf(b) = s else {
                panic!("unresolved source {s:?}")
            };
            if *b == pb || *b == id {
                continue;
            }
            let ty = p.bufs[b.index()].ty.dtype.c_type();
            let at = match locs[b.index()] {
                Location::Input(i) => format!("ctx->I[{i}]"),
                Location::Weight(o) => format!("(ctx->W + {o})"),
                Location::Arena(o) => format!("(ctx->A + {o})"),
                Location::None => panic!("stage {id} reads dead buffer {b}"),
            };
            out.line(format!("const {ty} *restrict b{b} = (const {ty} *){at};"));
        }
        let Location::Arena(o) = locs[id.index()] else {
            panic!("stage {id} is not in the arena")
        };
        let cty = st.ty.dtype.c_type();
        out.line(format!("{cty} *restrict b{id} = ({cty} *)(ctx->A + {o});"));
        // The parameters once, as locals: the loops' bounds and strides.
        let np = r.params.len();
        for k in 0..np {
            out.line(format!("const int64_t P{k} = b{pb}[{k}]; (void)P{k};"));
        }
        let c = |e: &Expr| hoist(&em.expr(e), pb, np);
        for (k, e) in shape.iter().enumerate() {
            out.line(format!("const int64_t n{k} = {};", c(e)));
        }
        let extents = r.reduces[id.index()].clone().unwrap_or_default();
        for (k, e) in extents.iter().enumerate() {
            out.line(format!("const int64_t e{k} = {};", c(e)));
        }
        // The work at the largest size: a stage with less never pays for the pool.
        let work = st.ty.numel()
            * st.reduce
                .as_ref()
                .map_or(1, |r| r.extents.iter().product::<usize>().max(1));
        // Its trip count, and the work at run time, as C over the parameters (in `run`).
        let run_ext = |e: &Expr| match e {
            Expr::Const(s) => Ext::Lit(s.as_i64() as usize),
            e => Ext::Run(format!("({})", em.expr(e))),
        };
        let run_work = shape
            .iter()
            .chain(&extents)
            .map(|e| run_ext(e).to_string())
            .collect::<Vec<_>>()
            .join(" * ");
        if !run_work.is_empty() {
            total_work.push(format!("({run_work})"));
        }
        // In the kernel, a run-time extent is its local.
        let local = |e: &Expr, name: String| match run_ext(e) {
            Ext::Run(_) => Ext::Run(name),
            lit => lit,
        };
        let dims: Vec<Ext> = shape
            .iter()
            .enumerate()
            .map(|(k, e)| local(e, format!("n{k}")))
            .collect();
        let reduce: Vec<Ext> = extents
            .iter()
            .enumerate()
            .map(|(k, e)| local(e, format!("e{k}")))
            .collect();
        // A convolution over its output channels (its weight transposed in every sample,
        // `schedule::layout::ranged_channel_weights`): a tile of channel vectors by columns of
        // the row, every input value a broadcast, whatever the row's length at run time.
        if let Some(cp) = st
            .reduce
            .as_ref()
            .and_then(|_| crate::schedule::plan::ranged_channel_plan(p, st, isa, cpu))
        {
            let at = |c_var: Option<Expr>| {
                let vars: Vec<Expr> = (0..rank)
                    .map(|k| match &c_var {
                        Some(v) if k == cp.c => v.clone(),
                        _ => Expr::var(k),
                    })
                    .collect();
                em.expr(&r.flatten_iter(&vars, id))
            };
            let offset = |skip: bool| at(skip.then(|| Expr::i(0)));
            // The channel's stride: the offset of channel 1 less that of channel 0.
            let unit: Vec<Expr> = (0..rank).map(|k| Expr::i((k == cp.c) as i64)).collect();
            let x = ChannelExtents {
                dims: dims.clone(),
                reduce: reduce.clone(),
                offset: &offset,
                c_stride: Ext::Run(format!("({})", em.expr(&r.flatten_iter(&unit, id)))),
                row_unit: cp.row + 1 == rank,
            };
            let mut sub = CWriter::new();
            cp.emit_over(&mut sub, &em, id, st, &x);
            for l in hoist(&sub.into_string(), pb, np).lines() {
                out.line(l);
            }
            out.close("}");
            // The tasks: every other dimension, the channel tiles, the row's column groups.
            let mut tasks = vec![
                cp.n_tiles.to_string(),
                run_ext(&shape[cp.row]).ceil_div(cp.group).to_string(),
            ];
            for (k, e) in shape.iter().enumerate() {
                if k != cp.c && k != cp.row {
                    tasks.push(run_ext(e).to_string());
                }
            }
            calls.push(task_call(&tasks.join(" * "), work, &run_work, id, suffix));
            calls.push(format!("CL_TICK(collage_{symbol}_profile_ns, {id});"));
            continue;
        }
        // A contraction along a row whose step is the same at every size: a tile of rows by
        // vectors in registers, the static emitter's register-blocked plan over run-time
        // extents.
        if let Some(gp) = st
            .reduce
            .as_ref()
            .and_then(|_| crate::schedule::plan::default_gemm(p, st, isa, cpu))
        {
            let jk = gp.jam.map(|j| j.0);
            let offset = |j: usize, skip: bool| {
                let vars: Vec<Expr> = (0..rank)
                    .map(|k| {
                        if skip && k == gp.v {
                            Expr::i(0)
                        } else if Some(k) == jk {
                            Expr::var(k).add(Expr::i(j as i64))
                        } else {
                            Expr::var(k)
                        }
                    })
                    .collect();
                em.expr(&r.flatten_iter(&vars, id))
            };
            let x = GemmExtents {
                dims,
                reduce,
                offset: &offset,
            };
            let mut sub = CWriter::new();
            gp.emit_over(&mut sub, &em, id, st, &x);
            for l in hoist(&sub.into_string(), pb, np).lines() {
                out.line(l);
            }
            out.close("}");
            // The tasks: every outer block of rows by every tile of the row.
            let tile = gp.lanes * gp.vecs;
            let mut tasks = vec![run_ext(&shape[gp.v]).ceil_div(tile).to_string()];
            for &k in &gp.outer {
                let n = run_ext(&shape[k]);
                let n = match gp.jam {
                    Some((jk, jn)) if jk == k => n.ceil_div(jn),
                    _ => n,
                };
                tasks.push(n.to_string());
            }
            calls.push(task_call(&tasks.join(" * "), work, &run_work, id, suffix));
            calls.push(format!("CL_TICK(collage_{symbol}_profile_ns, {id});"));
            continue;
        }
        // The inner loop: the last dimension, or for a reduction whose reads step along
        // another one and not along the last (a mean over a transposed layout), that one.
        let last = rank.saturating_sub(1);
        let l = match &st.reduce {
            Some(_) if rank >= 2 && !unit_loads(p, &st.body, last as u32) => (0..last)
                .rev()
                .find(|&k| {
                    (8..=ROW_ACC).contains(&st.ty.shape[k])
                        && unit_loads(p, &st.body, k as u32)
                        && crate::schedule::analysis::contiguous_along(p, &st.body, k as u32)
                })
                .unwrap_or(last),
            _ => last,
        };
        let lead: Vec<usize> = (0..rank).filter(|&k| k != l).collect();
        out.open("for (int64_t o = begin; o < end; ++o) {");
        // The other dimensions from `o`.
        let mut rem = "o".to_string();
        for (q, &k) in lead.iter().enumerate().rev() {
            if q == 0 {
                out.line(format!("const int64_t i{k} = {rem};"));
            } else {
                out.line(format!("const int64_t i{k} = {rem} % n{k};"));
                rem = format!("({rem} / n{k})");
            }
        }
        let vars: Vec<Expr> = (0..rank).map(Expr::var).collect();
        let flat = c(&r.flatten_iter(&vars, id));
        let body = c(&st.body);
        let inner = |out: &mut CWriter| {
            if rank > 0 {
                out.line("#pragma omp simd");
                out.open(format!("for (int64_t i{l} = 0; i{l} < n{l}; ++i{l}) {{"));
            } else {
                out.open("{");
            }
        };
        // The room of the last dimension at the largest size: a row of accumulators when it
        // is wide (the reduction then runs outside a loop along it, which vectorises).
        let row = (rank > 0)
            .then(|| st.ty.shape[l])
            .filter(|&n| (8..=ROW_ACC).contains(&n) && unit_loads(p, &st.body, l as u32))
            // A strided window over a few points (a 2x2 pool): a scalar loop over its
            // outputs, the points unrolled, beats shuffling pairs of vectors per point.
            .filter(|_| {
                let points: usize = st.reduce.as_ref().map_or(1, |r| r.extents.iter().product());
                points > SMALL_WINDOW || max_step(p, &st.body, l as u32).is_some_and(|s| s <= 1)
            });
        // The row's range where a guard holds (`lo`, `hi`): its terms without the row's
        // variable hoisted, those of `i + c >= 0` / `i + c < bound` form its bounds.
        let bounds = |g: &SplitGuard| {
            let ceil = |(e, k): &(Expr, i64)| match k {
                1 => c(e),
                k => format!("cl_ceildiv_i64({}, {k})", c(e)),
            };
            let mut lo = "0".to_string();
            for b in &g.lo {
                lo = format!("cl_max_i64({lo}, {})", ceil(b));
            }
            let mut hi = format!("n{l}");
            for b in &g.hi {
                hi = format!("cl_min_i64({hi}, {})", ceil(b));
            }
            let outer: Vec<String> = g.outer.iter().map(&c).collect();
            (lo, hi, outer)
        };
        // A copy that pads (`cond ? x : constant`): the constant before and after the row's
        // range, the copy inside it, without a select per element.
        let padding = match (&st.reduce, &st.body) {
            (None, Expr::Select(_, _, fill)) if rank > 0 && matches!(**fill, Expr::Const(_)) => {
                split_guard(&st.body, l as u32, fill).map(|g| (g, c(fill)))
            }
            _ => None,
        };
        match (&st.reduce, row, padding) {
            (None, _, Some((g, fill))) => {
                let (lo, hi, outer) = bounds(&g);
                out.line(format!("int64_t lo = {lo}, hi = {hi};"));
                if !outer.is_empty() {
                    out.line(format!(
                        "if (!({})) {{ lo = 0; hi = 0; }}",
                        outer.join(" && ")
                    ));
                }
                out.line(format!("if (lo > n{l}) lo = n{l};"));
                out.line("if (hi < lo) hi = lo;");
                out.line(format!(
                    "for (int64_t i{l} = 0; i{l} < lo; ++i{l}) b{id}[{flat}] = {fill};"
                ));
                let v = invariant_reads(out, &em, &g.value, l as u32, &c);
                out.line("#pragma omp simd");
                out.open(format!("for (int64_t i{l} = lo; i{l} < hi; ++i{l}) {{"));
                out.line(format!("b{id}[{flat}] = {v};"));
                out.close("}");
                out.line(format!(
                    "for (int64_t i{l} = hi; i{l} < n{l}; ++i{l}) b{id}[{flat}] = {fill};"
                ));
            }
            (None, _, None) => {
                let body = invariant_reads(out, &em, &st.body, l as u32, &c);
                inner(out);
                out.line(format!("b{id}[{flat}] = {body};"));
                out.close("}");
            }
            (Some(red), Some(room), _) => {
                let init = scalar(red.op.init(st.ty.dtype));
                out.line(format!("{cty} accr[{room}];"));
                inner(out);
                out.line(format!("accr[i{l}] = {init};"));
                out.close("}");
                // Reads the same along the row whose address divides (a reshaped view's),
                // gathered first over the whole reduction: in the reduction's loops, GCC does
                // not vectorise the row once such an address is in them.
                let hard = divided_reads(&st.body, l as u32);
                let points: usize = red.extents.iter().product();
                let mut body_sub: Vec<(String, String)> = Vec::new();
                if !hard.is_empty() && points <= ROW_ACC {
                    let flat_r = (0..extents.len())
                        .fold("0".to_string(), |a, k| format!("({a} * e{k} + r{k})"));
                    for (j, x) in hard.iter().enumerate() {
                        let ty = em.dtype(x).c_type();
                        out.line(format!("{ty} hv{j}[{points}];"));
                    }
                    for k in 0..extents.len() {
                        out.open(format!("for (int64_t r{k} = 0; r{k} < e{k}; ++r{k}) {{"));
                    }
                    for (j, x) in hard.iter().enumerate() {
                        out.line(format!("hv{j}[{flat_r}] = {};", c(x)));
                        body_sub.push((c(x), format!("hv{j}[{flat_r}]")));
                    }
                    for _ in 0..extents.len() {
                        out.close("}");
                    }
                }
                let c = |e: &Expr| {
                    let mut t = c(e);
                    for (from, to) in &body_sub {
                        t = t.replace(from, to);
                    }
                    t
                };
                for k in 0..extents.len() {
                    out.open(format!("for (int64_t r{k} = 0; r{k} < e{k}; ++r{k}) {{"));
                }
                // A guard whose else is the reduction's identity bounds the row instead (the
                // window's padding): its terms without the row's variable hoisted, those of
                // `i + c >= 0` / `i + c < bound` form the row's first and last position.
                let init = Expr::Const(red.op.init(st.ty.dtype));
                match split_guard(&st.body, l as u32, &init) {
                    Some(g) => {
                        let (lo, hi, outer) = bounds(&g);
                        if !outer.is_empty() {
                            out.open(format!("if ({}) {{", outer.join(" && ")));
                        }
                        out.line(format!("const int64_t lo = {lo}, hi = {hi};"));
                        let v = invariant_reads(out, &em, &g.value, l as u32, &c);
                        out.line("#pragma omp simd");
                        out.open(format!("for (int64_t i{l} = lo; i{l} < hi; ++i{l}) {{"));
                        out.line(accumulate(red.op, st.ty.dtype, &format!("accr[i{l}]"), &v));
                        out.close("}");
                        if !outer.is_empty() {
                            out.close("}");
                        }
                    }
                    None => {
                        let v = invariant_reads(out, &em, &st.body, l as u32, &c);
                        inner(out);
                        out.line(accumulate(red.op, st.ty.dtype, &format!("accr[i{l}]"), &v));
                        out.close("}");
                    }
                }
                for _ in 0..extents.len() {
                    out.close("}");
                }
                inner(out);
                out.line(format!("const {cty} acc = accr[i{l}];"));
                out.line(format!(
                    "b{id}[{flat}] = {};",
                    hoist(&finalize_c(&em, red), pb, np)
                ));
                out.close("}");
            }
            (Some(red), None, _) => {
                if rank > 0 {
                    out.open(format!("for (int64_t i{l} = 0; i{l} < n{l}; ++i{l}) {{"));
                } else {
                    out.open("{");
                }
                out.line(format!("{cty} acc = {};", scalar(red.op.init(st.ty.dtype))));
                // The innermost loop of a long reduction vectorises with lanes of partial
                // results; a float max / min carries NaN in a flag of its own, as OpenMP's
                // combiner may not (the static emitter does the same).
                let n = extents.len();
                let long = n > 0 && red.extents[n - 1] >= 16;
                let float = st.ty.dtype.is_float();
                let clause = match red.op {
                    crate::te::RedOp::Sum if long => Some("reduction(+:acc)"),
                    crate::te::RedOp::Max if long && float => {
                        Some("reduction(max:acc) reduction(|:anynan)")
                    }
                    crate::te::RedOp::Min if long && float => {
                        Some("reduction(min:acc) reduction(|:anynan)")
                    }
                    _ => None,
                };
                let nan_flag = clause.is_some() && red.op != crate::te::RedOp::Sum;
                if nan_flag {
                    out.line("int anynan = 0;");
                }
                for k in 0..n {
                    if k + 1 == n {
                        if let Some(clause) = clause {
                            out.line(format!("#pragma omp simd {clause}"));
                        }
                    }
                    out.open(format!("for (int64_t r{k} = 0; r{k} < e{k}; ++r{k}) {{"));
                }
                if nan_flag {
                    let cmp = if red.op == crate::te::RedOp::Max {
                        ">"
                    } else {
                        "<"
                    };
                    out.line(format!(
                        "const {cty} x = {body}; acc = x {cmp} acc ? x : acc; anynan |= x != x;"
                    ));
                } else {
                    out.line(accumulate(red.op, st.ty.dtype, "acc", &body));
                }
                for _ in 0..n {
                    out.close("}");
                }
                if nan_flag {
                    out.line("if (anynan) acc = NAN;");
                }
                out.line(format!(
                    "b{id}[{flat}] = {};",
                    hoist(&finalize_c(&em, red), pb, np)
                ));
                out.close("}");
            }
        }
        out.close("}");
        out.close("}");
        // The outer trips at run time; threads where the largest size has the work.
        let outer: Vec<String> = lead
            .iter()
            .map(|&k| run_ext(&shape[k]).to_string())
            .collect();
        let n_outer = if outer.is_empty() {
            "1".to_string()
        } else {
            outer.join(" * ")
        };
        calls.push(task_call(&n_outer, work, &run_work, id, suffix));
        calls.push(format!("CL_TICK(collage_{symbol}_profile_ns, {id});"));
    }
    out.line("");
    out.open(format!("static void run{suffix}(const collage_rt *rt, uint8_t *A, const uint8_t *W, const void *const *I) {{"));
    out.line(format!("const int64_t d = *(const int64_t *)I[{np}];"));
    let values: Vec<String> = r.params.iter().map(|s| s.c_expr("d")).collect();
    let values = if values.is_empty() {
        "0".to_string()
    } else {
        values.join(", ")
    };
    out.line(format!(
        "int64_t params[{}] = {{{values}}};",
        r.params.len().max(1)
    ));
    out.line(format!("const void *J[{}];", np + 1));
    out.line(format!("for (int k = 0; k < {np}; ++k) J[k] = I[k];"));
    out.line(format!("J[{np}] = params;"));
    out.line("collage_ctx ctx = {A, W, J, 1};");
    out.line("CL_TICK_START();");
    // The kernels' trip counts read the parameters as the kernels do.
    out.line(format!("const int64_t *restrict b{pb} = params;"));
    out.line(format!("(void)b{pb};"));
    let total = if total_work.is_empty() {
        "0".to_string()
    } else {
        total_work.join(" + ")
    };
    out.line(format!("const int64_t cl_work = {total};"));
    out.line("(void)cl_work;");
    for c in &calls {
        out.line(c);
    }
    out.close("}");
}

/// The call of kernel `k<id><suffix>` over `tasks` tasks (C): on the thread pool where the
/// work at run time (`run_work`, C), and the whole program's (`cl_work`), is enough to pay
/// for it — never when the most it can be
/// (`work`, at the largest size) is not — else on the calling thread.
fn task_call(
    tasks: &str,
    work: usize,
    run_work: &str,
    id: crate::te::BufId,
    suffix: &str,
) -> String {
    let serial = format!("k{id}{suffix}(&ctx, 0, {tasks});");
    if work < PARALLEL_WORK || tasks == "1" {
        return serial;
    }
    let run_work = if run_work.is_empty() { "1" } else { run_work };
    format!(
        "if (cl_work >= {PROGRAM_WORK} && {run_work} >= {PARALLEL_WORK} && {tasks} > 1) rt->parallel_for(rt->pool, {tasks}, k{id}{suffix}, &ctx); else {serial}"
    )
}

/// The widest last dimension (at the largest size) whose reduction keeps a row of
/// accumulators on the stack.
const ROW_ACC: usize = 4096;

/// The most points of a strided window that runs one output at a time.
const SMALL_WINDOW: usize = 16;

/// The coefficient of `Var(v)` in the integer expression `e`, if `e` is affine in it (other
/// variables and parameter reads are constants here).
fn var_coef(e: &Expr, v: u32) -> Option<i64> {
    use crate::te::BinOp;
    if !uses(e, v) {
        return Some(0);
    }
    match e {
        Expr::Var(k) if *k == v => Some(1),
        Expr::Bin(BinOp::Add, a, b) => Some(var_coef(a, v)? + var_coef(b, v)?),
        Expr::Bin(BinOp::Sub, a, b) => Some(var_coef(a, v)? - var_coef(b, v)?),
        // Integer arithmetic only: a float step (`v * 1.5`) is no integer coefficient.
        Expr::Bin(BinOp::Mul, a, b) => match (&**a, &**b) {
            (x, Expr::Const(c)) | (Expr::Const(c), x) if c.dtype().is_int() => {
                Some(var_coef(x, v)? * c.as_i64())
            }
            _ => None,
        },
        Expr::Cast(d, a) if d.is_int() => var_coef(a, v),
        _ => None,
    }
}

fn uses(e: &Expr, v: u32) -> bool {
    let mut yes = false;
    e.visit(&mut |x| yes |= *x == Expr::Var(v));
    yes
}

/// Whether every read in `body` is the same along `Var(v)` or steps by one or two elements (a
/// stride-2 window): a row of accumulators along `v` then reads memory in vectors (two and a
/// shuffle), not gathers.
fn unit_loads(p: &crate::te::Program, body: &Expr, v: u32) -> bool {
    max_step(p, body, v).is_some_and(|s| s <= 2)
}

/// The largest step of a read in `body` along `Var(v)` (in elements), if every read is affine
/// along it and none steps backwards.
fn max_step(p: &crate::te::Program, body: &Expr, v: u32) -> Option<i64> {
    let mut ok = true;
    let mut most = 0;
    body.visit(&mut |x| {
        let c = match x {
            Expr::LoadFlat(_, f) => var_coef(f, v),
            Expr::Load(s, idx) => {
                let Src::Buf(b) = s else { return };
                let st = crate::tensor::strides(&p.bufs[b.index()].ty.shape);
                idx.iter()
                    .zip(st)
                    .try_fold(0i64, |a, (i, s)| Some(a + var_coef(i, v)? * s as i64))
            }
            _ => return,
        };
        match c {
            Some(c) if c >= 0 => most = most.max(c),
            _ => ok = false,
        }
    });
    ok.then_some(most)
}

/// The reads of `e` that are the same along `Var(v)`, outside a select's branches (the guard
/// may be what keeps those in bounds), each once.
fn invariant_loads(e: &Expr, v: u32) -> Vec<Expr> {
    fn collect(x: &Expr, v: u32, out: &mut Vec<Expr>) {
        match x {
            Expr::Load(..) | Expr::LoadFlat(..) if !uses(x, v) && !out.contains(x) => {
                out.push(x.clone());
            }
            Expr::Load(..) | Expr::LoadFlat(..) => {}
            Expr::Select(cond, _, _) => collect(cond, v, out),
            Expr::Un(_, a) | Expr::Cast(_, a) => collect(a, v, out),
            Expr::Bin(_, a, b) => {
                collect(a, v, out);
                collect(b, v, out);
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    collect(e, v, &mut out);
    out
}

/// [`invariant_loads`] whose address divides or takes a remainder.
fn divided_reads(e: &Expr, v: u32) -> Vec<Expr> {
    use crate::te::BinOp;
    let mut reads = invariant_loads(e, v);
    reads.retain(|x| {
        let mut divides = false;
        x.visit(&mut |y| {
            divides |= matches!(y, Expr::Bin(BinOp::Div | BinOp::Mod | BinOp::FMod, ..))
        });
        divides
    });
    reads
}

/// `e` as C with every read that is the same along the row (`Var(v)` unused) read once
/// before it into a local (`h0`, `h1`, ...): a read whose address divides or takes a
/// remainder defeats the C compiler's vectoriser even where it does not vary.
fn invariant_reads(
    out: &mut CWriter,
    em: &Emitter,
    e: &Expr,
    v: u32,
    c: &dyn Fn(&Expr) -> String,
) -> String {
    let reads = invariant_loads(e, v);
    let mut text = c(e);
    for (k, x) in reads.iter().enumerate() {
        let read = c(x);
        if !text.contains(&read) {
            continue;
        }
        let ty = em.dtype(x).c_type();
        out.line(format!("const {ty} h{k} = {read};"));
        text = text.replace(&read, &format!("h{k}"));
    }
    text
}

/// A guard split for a row along `Var(v)` ([`split_guard`]).
struct SplitGuard {
    /// Terms without the variable.
    outer: Vec<Expr>,
    /// Lower bounds of the variable (inclusive): `ceil(e / k)`.
    lo: Vec<(Expr, i64)>,
    /// Upper bounds of the variable (exclusive): `ceil(e / k)`.
    hi: Vec<(Expr, i64)>,
    /// The value where the guard holds.
    value: Expr,
}

/// `body = cond ? value : identity`, with `cond` a conjunction of terms that either do not
/// use `Var(v)` or bound it (`v + c >= 0`, `v + c < b`, their mirrors and strict forms): the
/// row's range where it holds, so that a reduction skips the rest (adding its identity).
fn split_guard(body: &Expr, v: u32, identity: &Expr) -> Option<SplitGuard> {
    use crate::te::BinOp;
    let Expr::Select(cond, value, other) = body else {
        return None;
    };
    if **other != *identity {
        return None;
    }
    let mut terms = Vec::new();
    let mut stack = vec![&**cond];
    while let Some(t) = stack.pop() {
        match t {
            Expr::Bin(BinOp::And, a, b) => {
                stack.push(b);
                stack.push(a);
            }
            t => terms.push(t),
        }
    }
    let at_zero = |e: &Expr| e.rewrite(&mut |x| (*x == Expr::Var(v)).then(|| Expr::i(0)));
    let mut g = SplitGuard {
        outer: Vec::new(),
        lo: Vec::new(),
        hi: Vec::new(),
        value: (**value).clone(),
    };
    for t in terms {
        if !uses(t, v) {
            g.outer.push(t.clone());
            continue;
        }
        let Expr::Bin(op, a, b) = t else { return None };
        // t is `k v + rest OP 0` with rest = a(v=0) - b(v=0); for k > 0: v >= -rest / k
        // (Ge), v > -rest / k (Gt), v < -rest / k (Lt), v <= -rest / k (Le), rounded.
        let k = var_coef(a, v)? - var_coef(b, v)?;
        let rest = at_zero(a).sub(at_zero(b));
        let (k, rest, op) = match (k, op) {
            (k, op) if k > 0 => (k, rest, *op),
            // -k v + rest OP 0  <=>  k v - rest MIRROR(OP) 0
            (k, op) if k < 0 => {
                let mirror = match op {
                    BinOp::Ge => BinOp::Le,
                    BinOp::Gt => BinOp::Lt,
                    BinOp::Lt => BinOp::Gt,
                    BinOp::Le => BinOp::Ge,
                    _ => return None,
                };
                (-k, Expr::i(0).sub(rest), mirror)
            }
            _ => return None,
        };
        let neg = Expr::i(0).sub(rest);
        // ceil((x + 1) / k) for the strict lower bound (floor(x / k) + 1), ceil(x / k) else.
        match op {
            BinOp::Ge => g.lo.push((neg, k)),
            BinOp::Gt => g.lo.push((neg.add(Expr::i(1)), k)),
            BinOp::Lt => g.hi.push((neg, k)),
            BinOp::Le => g.hi.push((neg.add(Expr::i(1)), k)),
            _ => return None,
        }
    }
    Some(g)
}

/// `c` with every read of parameter `k` (`b<pb>[INT64_C(k)]`) replaced by the local `Pk`.
fn hoist(c: &str, pb: crate::te::BufId, np: usize) -> String {
    let mut c = c.to_string();
    for k in 0..np {
        c = c.replace(&format!("b{pb}[INT64_C({k})]"), &format!("P{k}"));
    }
    c
}

/// Emits the C translation unit of `r`; `locs` gives every buffer's location.
pub fn emit_ranged(r: &Ranged, locs: &[Location], symbol: &str, header: &str) -> String {
    let p = &r.program;
    let mut out = CWriter::new();
    out.line(format!("/* {} */", comment(header)));
    out.raw(PRELUDE);
    profile_counters(&mut out, p, symbol);
    out.line("#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(COLLAGE_NO_DISPATCH)");
    out.line("#define CL_DISPATCH 1");
    out.line("#endif");
    // The kernels once per instruction-set variant, as `emit` prints them.
    out.line("#ifdef CL_DISPATCH");
    let target = crate::target::Target::for_build();
    let cpu = &*target.host_cpu();
    for (isa, target, _) in VARIANTS {
        out.line(format!("#ifndef CL_NO_{}", isa.name().to_uppercase()));
        out.line("#pragma GCC push_options");
        out.line(format!("#pragma GCC target(\"{target}\")"));
        emit_run(&mut out, r, locs, symbol, *isa, cpu);
        out.line("#pragma GCC pop_options");
        out.line("#endif");
    }
    out.line("#endif");
    out.line("#if !defined(CL_DISPATCH) || !defined(CL_NO_BASE)");
    emit_run(&mut out, r, locs, symbol, Isa::Base, cpu);
    out.line("#endif");
    out.line("");
    out.open(format!("void collage_{symbol}_run(const collage_rt *rt, uint8_t *A, const uint8_t *W, const void *const *I) {{"));
    dispatch(&mut out);
    out.close("}");
    out.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::te::Scalar;

    #[test]
    fn coefficients_are_integer_steps_only() {
        let v = Expr::var(3);
        let e = v
            .clone()
            .mul(Expr::i(2))
            .sub(Expr::i(1))
            .add(Expr::var(0).mul(Expr::i(7)));
        assert_eq!(var_coef(&e, 3), Some(2));
        assert_eq!(var_coef(&e, 0), Some(7));
        assert_eq!(var_coef(&e, 1), Some(0));
        // A float step, or a float view of the variable, has no integer coefficient.
        let f = v
            .clone()
            .cast(crate::ir::DType::F32)
            .mul(Expr::Const(Scalar::F32(1.5)));
        assert_eq!(var_coef(&f, 3), None);
        assert_eq!(var_coef(&v.clone().cast(crate::ir::DType::F32), 3), None);
        assert_eq!(var_coef(&v.clone().div(Expr::i(2)), 3), None);
    }

    #[test]
    fn guards_split_into_row_bounds_or_not_at_all() {
        let v = || Expr::var(1);
        let x = Expr::Load(crate::te::Src::Buf(crate::te::BufId::new(0)), vec![v()]);
        let zero = Expr::Const(Scalar::F32(0.0));
        // (2 v - 1 >= 0) && (r0 < 3) && (2 v - 1 < 10)  ->  v in [ceil(1/2), ceil(11/2)), if r0 < 3
        let t = v().mul(Expr::i(2)).sub(Expr::i(1));
        let cond = t
            .clone()
            .ge(Expr::i(0))
            .and(Expr::rvar(0).lt(Expr::i(3)))
            .and(t.lt(Expr::i(10)));
        let g = split_guard(&Expr::select(cond, x.clone(), zero.clone()), 1, &zero).unwrap();
        assert_eq!(g.outer.len(), 1);
        assert_eq!((g.lo.len(), g.hi.len()), (1, 1));
        assert_eq!(g.lo[0].1, 2);
        assert_eq!(g.value, x);
        // An else that is not the identity, or a float bound, does not split.
        let cond = v().ge(Expr::i(1));
        assert!(split_guard(
            &Expr::select(cond.clone(), x.clone(), Expr::Const(Scalar::F32(1.0))),
            1,
            &zero
        )
        .is_none());
        let fcond = v()
            .cast(crate::ir::DType::F32)
            .ge(Expr::Const(Scalar::F32(2.5)));
        assert!(split_guard(&Expr::select(fcond, x, zero.clone()), 1, &zero).is_none());
    }
}
