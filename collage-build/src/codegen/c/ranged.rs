//! The C of a program served over a range of one dimension ([`Ranged`]): every stage one
//! loop nest whose extents are read at run time, the leading dimensions split among threads,
//! the last one the inner loop (which the C compiler vectorises where it can).
//!
//! The entry point takes the run-time size as one more input after the model's: `I[n]`
//! points to an `int64_t`. It computes the program's parameters from it into the
//! parameter buffer, which the kernels read as the last input.

use super::{
    accumulate, comment, finalize_c, profile_counters, scalar, stage_title, Emitter, PRELUDE,
};
use crate::codegen::writer::CWriter;
use crate::schedule::Location;
use crate::te::{BufKind, Expr, Ranged, Src};

/// Work (elements times reduction points at the largest size) below which a stage runs on
/// the calling thread: a pool dispatch costs microseconds.
const PARALLEL_WORK: usize = 1 << 15;

/// Emits the C translation unit of `r`; `locs` gives every buffer's location.
pub fn emit_ranged(r: &Ranged, locs: &[Location], symbol: &str, header: &str) -> String {
    let p = &r.program;
    let mut out = CWriter::new();
    out.line(format!("/* {} */", comment(header)));
    out.raw(PRELUDE);
    profile_counters(&mut out, p, symbol);
    let Location::Input(np) = locs[r.param_buf.index()] else {
        panic!("the parameter buffer is an input")
    };
    let pb = r.param_buf;
    let mut calls = Vec::new();
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
            "static void k{id}(void *vctx, int64_t begin, int64_t end) {{"
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
        for (k, e) in shape.iter().enumerate() {
            out.line(format!("const int64_t n{k} = {};", em.expr(e)));
        }
        let extents = r.reduces[id.index()].clone().unwrap_or_default();
        for (k, e) in extents.iter().enumerate() {
            out.line(format!("const int64_t e{k} = {};", em.expr(e)));
        }
        out.open("for (int64_t o = begin; o < end; ++o) {");
        // The leading dimensions from `o`; the last one is the inner loop.
        let lead = rank.saturating_sub(1);
        let mut rem = "o".to_string();
        for k in (0..lead).rev() {
            if k == 0 {
                out.line(format!("const int64_t i{k} = {rem};"));
            } else {
                out.line(format!("const int64_t i{k} = {rem} % n{k};"));
                rem = format!("({rem} / n{k})");
            }
        }
        if rank > 0 {
            let l = rank - 1;
            out.open(format!("for (int64_t i{l} = 0; i{l} < n{l}; ++i{l}) {{"));
        }
        let vars: Vec<Expr> = (0..rank).map(Expr::var).collect();
        let flat = em.expr(&r.flatten_iter(&vars, id));
        match &st.reduce {
            None => out.line(format!("b{id}[{flat}] = {};", em.expr(&st.body))),
            Some(red) => {
                out.line(format!("{cty} acc = {};", scalar(red.op.init(st.ty.dtype))));
                for k in 0..extents.len() {
                    out.open(format!("for (int64_t r{k} = 0; r{k} < e{k}; ++r{k}) {{"));
                }
                let v = em.expr(&st.body);
                out.line(accumulate(red.op, st.ty.dtype, "acc", &v));
                for _ in 0..extents.len() {
                    out.close("}");
                }
                out.line(format!("b{id}[{flat}] = {};", finalize_c(&em, red)));
            }
        }
        if rank > 0 {
            out.close("}");
        }
        out.close("}");
        out.close("}");
        // The outer trips at run time; threads where the largest size has the work.
        let outer: Vec<String> = shape[..rank.saturating_sub(1)]
            .iter()
            .map(|e| format!("({})", em.expr(e)))
            .collect();
        let n_outer = if outer.is_empty() {
            "1".to_string()
        } else {
            outer.join(" * ")
        };
        let work = st.ty.numel()
            * st.reduce
                .as_ref()
                .map_or(1, |r| r.extents.iter().product::<usize>().max(1));
        if work >= PARALLEL_WORK && rank > 1 {
            calls.push(format!(
                "rt->parallel_for(rt->pool, {n_outer}, k{id}, &ctx);"
            ));
        } else {
            calls.push(format!("k{id}(&ctx, 0, {n_outer});"));
        }
        calls.push(format!("CL_TICK(collage_{symbol}_profile_ns, {id});"));
    }
    out.line("");
    out.open(format!("void collage_{symbol}_run(const collage_rt *rt, uint8_t *A, const uint8_t *W, const void *const *I) {{"));
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
    for c in &calls {
        out.line(c);
    }
    out.close("}");
    out.into_string()
}
