//! oneDNN primitives for stages placed on the `dnnl` backend ([`Exec::Dnnl`]): which buffers a
//! primitive reads and writes, which of the fused elementwise consumers become its bias and
//! post-ops (sum for a residual add, ReLU), and the C that creates the primitives once per model
//! instance and runs them.
//!
//! The C side (`dnnl_prims.c`, appended to the prelude when a program has such stages) keeps every
//! primitive of a model in a `cl_dnnl_lib`: `collage_<model>_lib_new(rt)` creates them for the
//! runtime's thread count (the Rust glue does this in `Model::new` and frees it on drop), `run`
//! binds pointers and executes. Callers without an instance (`run_in`, measurement harnesses)
//! pass a null `lib`: the entry point then builds one process-wide state on first use and runs
//! under a mutex.
use std::fmt::Write;

use super::c::Place;
use crate::ir::DType;
use crate::te::{BinOp, BufKind, DnnlKind, DnnlPrim, Exec, Expr, Program, Src, Stage};

/// The C helpers (oneDNN's header, the primitive table and its execution).
pub const PRELUDE: &str = include_str!("dnnl_prims.c");

/// How one stage runs on a oneDNN primitive.
#[derive(Clone, Debug, PartialEq)]
pub struct DnnlCall {
    /// The primitive and its geometry.
    pub prim: DnnlPrim,
    /// The input activation buffer.
    pub src: u32,
    /// The weights (convolution).
    pub wei: Option<u32>,
    /// The bias, per output channel, applied by the primitive.
    pub bias: Option<u32>,
    /// A same-shaped tensor added to the result (put into the destination first, then the
    /// primitive's sum post-op accumulates onto it).
    pub residual: Option<u32>,
    /// ReLU as the primitive's last post-op.
    pub relu: bool,
    /// What of the finalize the primitive does not compute, applied in place afterwards
    /// ([`Expr::Acc`] = the primitive's result); `None` when nothing is left.
    pub epilogue: Option<Expr>,
}

/// The stages of `p` computed by oneDNN primitives, in program order (their site numbers).
pub fn sites(p: &Program) -> Vec<u32> {
    p.bufs
        .iter()
        .enumerate()
        .filter(|(_, b)| matches!(&b.kind, BufKind::Stage(st) if matches!(st.exec, Exec::Dnnl(_))))
        .map(|(i, _)| i as u32)
        .collect()
}

fn is_zero(e: &Expr) -> bool {
    matches!(e, Expr::Const(c) if c.is_zero())
}

/// The terms of a sum (`a + (b + c)` → `[a, b, c]`).
fn terms(e: &Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::Bin(BinOp::Add, a, b) => {
            terms(a, out);
            terms(b, out);
        }
        _ => out.push(e.clone()),
    }
}

fn count_acc(e: &Expr) -> usize {
    let mut n = 0;
    e.visit(&mut |x| n += usize::from(*x == Expr::Acc));
    n
}

/// Recognises the primitive's operands and splits a convolution's finalize into bias, post-ops
/// and what is left for an in-place loop. `None` if the body does not read the operands the
/// primitive needs (a placement bug).
pub fn dnnl_call(p: &Program, id: u32, st: &Stage, prim: DnnlPrim) -> Option<DnnlCall> {
    let f32 = |b: u32| p.bufs[b as usize].ty.dtype == DType::F32 && !p.bufs[b as usize].packed;
    let src_shape = [prim.n, prim.ic, prim.ih, prim.iw].map(|v| v as usize);
    let (mut src, mut wei) = (None, None);
    st.body.visit(&mut |x| {
        if let Expr::Load(Src::Buf(b), idx) = x {
            let shape = &p.bufs[*b as usize].ty.shape;
            if idx.first() == Some(&Expr::var(0)) && shape[..] == src_shape[..] {
                src = src.or(Some(*b));
            } else if prim.kind == DnnlKind::Conv && idx.first() == Some(&Expr::var(1)) {
                wei = wei.or(Some(*b));
            }
        }
    });
    let src = src.filter(|&b| f32(b))?;
    if prim.kind != DnnlKind::Conv {
        // Pooling computes its whole finalize (the average's divisor); fusion adds nothing.
        return Some(DnnlCall {
            prim,
            src,
            wei: None,
            bias: None,
            residual: None,
            relu: false,
            epilogue: None,
        });
    }
    let wei = wei.filter(|&b| f32(b))?;
    let fin = st
        .reduce
        .as_ref()
        .and_then(|r| r.finalize.clone())
        .unwrap_or(Expr::Acc);
    let vars: Vec<Expr> = (0..st.ty.rank()).map(Expr::var).collect();
    let flat = Expr::flatten(&vars, &st.ty.shape);
    // A per-output-channel vector: `[oc]`, or a broadcast shape such as `[oc, 1, 1]`, read at
    // the channel.
    let is_bias = |e: &Expr| match e {
        Expr::Load(Src::Buf(b), idx) => {
            let shape = &p.bufs[*b as usize].ty.shape;
            let channel = idx.iter().position(|i| *i == Expr::var(1));
            f32(*b)
                && channel.is_some_and(|c| shape[c] == prim.oc as usize)
                && idx.iter().zip(shape).enumerate().all(|(k, (i, &d))| {
                    Some(k) == channel || (d == 1 && matches!(i, Expr::Const(c) if c.is_zero()))
                })
        }
        Expr::LoadFlat(Src::Buf(b), f) => {
            f32(*b) && **f == Expr::var(1) && p.bufs[*b as usize].ty.numel() == prim.oc as usize
        }
        _ => false,
    };
    let is_residual = |e: &Expr| match e {
        Expr::Load(Src::Buf(b), idx) => {
            *b != id
                && idx[..] == vars[..]
                && p.bufs[*b as usize].ty.shape == st.ty.shape
                && f32(*b)
        }
        Expr::LoadFlat(Src::Buf(b), f) => {
            *b != id && **f == flat && p.bufs[*b as usize].ty.numel() == st.ty.numel() && f32(*b)
        }
        _ => false,
    };
    let mut call = DnnlCall {
        prim,
        src,
        wei: Some(wei),
        bias: None,
        residual: None,
        relu: false,
        epilogue: None,
    };
    let buf = |e: &Expr| match e {
        Expr::Load(Src::Buf(b), _) | Expr::LoadFlat(Src::Buf(b), _) => *b,
        _ => unreachable!("a load"),
    };
    if count_acc(&fin) != 1 {
        call.epilogue = Some(fin).filter(|f| *f != Expr::Acc);
        return Some(call);
    }
    // The whole finalize as post-ops: [relu](Acc [+ bias] [+ residual]).
    let (relu, sum) = match &fin {
        Expr::Bin(BinOp::Max, a, b) if is_zero(b) => (true, (**a).clone()),
        Expr::Bin(BinOp::Max, a, b) if is_zero(a) => (true, (**b).clone()),
        e => (false, e.clone()),
    };
    let mut ts = Vec::new();
    terms(&sum, &mut ts);
    let (mut bias, mut residual, mut acc, mut other) = (None, None, 0, 0);
    for t in &ts {
        if *t == Expr::Acc {
            acc += 1;
        } else if bias.is_none() && is_bias(t) {
            bias = Some(buf(t));
        } else if residual.is_none() && is_residual(t) {
            residual = Some(buf(t));
        } else {
            other += 1;
        }
    }
    if acc == 1 && other == 0 {
        call.bias = bias;
        call.residual = residual;
        call.relu = relu;
        return Some(call);
    }
    // Otherwise only the bias, where the finalize adds it straight to the accumulator.
    let mut stripped = false;
    let rest = fin.rewrite(&mut |x| match x {
        Expr::Bin(BinOp::Add, a, b) if !stripped => {
            let (acc_side, other_side) = if **a == Expr::Acc { (a, b) } else { (b, a) };
            (**acc_side == Expr::Acc && is_bias(other_side)).then(|| {
                stripped = true;
                call.bias = Some(buf(other_side));
                Expr::Acc
            })
        }
        _ => None,
    });
    call.epilogue = Some(rest).filter(|f| *f != Expr::Acc);
    Some(call)
}

/// How the primitives of a program hand tensors to each other, per site: the site producing its
/// input (`src_from`) and its residual (`res_from`), and whether its own output may stay in
/// oneDNN's layout (`blockable`): it is a convolution without an in-place epilogue, not a model
/// output, and every reader is a convolution site reading it only as input or residual. Whether
/// the layouts really match is known when the primitives are created; the C side then skips the
/// reorders of the edges that match (`cl_dnnl_lib_build`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// The site whose output is this site's input, or -1.
    pub src_from: i64,
    /// The site whose output is this site's residual, or -1.
    pub res_from: i64,
    /// The output may be left in oneDNN's layout for its readers.
    pub blockable: bool,
}

/// The [`Link`] of every site (`sites[i]` computed by `calls[i]`).
pub fn links(p: &Program, sites: &[u32], calls: &[DnnlCall]) -> Vec<Link> {
    let site_of = |b: u32| sites.binary_search(&b).ok();
    // A producer whose output is the primitive's own result (no loop after it changes it).
    let producer = |b: Option<u32>| -> i64 {
        b.and_then(site_of)
            .filter(|&k| calls[k].prim.kind == DnnlKind::Conv && calls[k].epilogue.is_none())
            .map_or(-1, |k| k as i64)
    };
    let readers = p.readers();
    let mut out: Vec<Link> = calls
        .iter()
        .map(|c| Link {
            src_from: if c.prim.kind == DnnlKind::Conv {
                producer(Some(c.src))
            } else {
                -1
            },
            res_from: producer(c.residual),
            blockable: false,
        })
        .collect();
    for (k, &b) in sites.iter().enumerate() {
        let c = &calls[k];
        if c.prim.kind != DnnlKind::Conv || c.epilogue.is_some() || p.outputs.contains(&b) {
            continue;
        }
        let only_linked = readers[b as usize].iter().all(|&r| {
            let Some(j) = site_of(r) else {
                return false;
            };
            let rc = &calls[j];
            let linked = (out[j].src_from == k as i64 && rc.src == b)
                || (out[j].res_from == k as i64 && rc.residual == Some(b));
            let other = rc.wei == Some(b)
                || rc.bias == Some(b)
                || (rc.src == b && out[j].src_from != k as i64)
                || rc
                    .epilogue
                    .as_ref()
                    .is_some_and(|e| e.sources().contains(&Src::Buf(b)));
            linked && !other
        });
        out[k].blockable = only_linked && !readers[b as usize].is_empty();
    }
    out
}

fn kind_name(k: DnnlKind) -> &'static str {
    match k {
        DnnlKind::Conv => "CL_DNNL_CONV",
        DnnlKind::MaxPool => "CL_DNNL_MAXPOOL",
        DnnlKind::AvgPoolExcludePad => "CL_DNNL_AVGPOOL_EXCLUDE",
        DnnlKind::AvgPoolIncludePad => "CL_DNNL_AVGPOOL_INCLUDE",
    }
}

/// The per-model part: the primitive table, the constructor and destructor the Rust glue calls
/// (`collage_<symbol>_lib_new` / `_lib_free`), and the process-wide state for callers without an
/// instance. `calls` are the program's primitive calls in site order.
pub fn emit_table(out: &mut String, symbol: &str, calls: &[DnnlCall], links: &[Link]) {
    let n = calls.len();
    writeln!(
        out,
        "\n/* oneDNN primitives of this model, created once per instance. */"
    )
    .unwrap();
    writeln!(out, "static const cl_dnnl_desc cl_{symbol}_descs[{n}] = {{").unwrap();
    for (c, l) in calls.iter().zip(links) {
        let d = &c.prim;
        writeln!(
            out,
            "    {{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}}},",
            kind_name(d.kind),
            d.n, d.ic, d.ih, d.iw, d.oc, d.oh, d.ow, d.kh, d.kw, d.sh, d.sw, d.dh, d.dw,
            d.pt, d.pl, d.pb, d.pr, d.groups,
            i32::from(c.bias.is_some()),
            i32::from(c.residual.is_some()),
            i32::from(c.relu),
            l.src_from,
            l.res_from,
            i32::from(l.blockable),
        )
        .unwrap();
    }
    out.push_str("};\n");
    writeln!(
        out,
        "typedef struct {{ cl_dnnl_lib L; cl_dnnl_site s[{n}]; }} cl_{symbol}_lib;
void *collage_{symbol}_lib_new(const collage_rt *rt) {{
    cl_{symbol}_lib *x = (cl_{symbol}_lib *)calloc(1, sizeof *x);
    if (x == NULL) {{ fputs(\"collage dnnl: out of memory\\n\", stderr); abort(); }}
    cl_dnnl_lib_build(&x->L, cl_{symbol}_descs, {n}, x->s, rt->threads);
    return x;
}}
void collage_{symbol}_lib_free(void *lib) {{
    if (lib == NULL) return;
    cl_dnnl_lib_clear(&((cl_{symbol}_lib *)lib)->L);
    free(lib);
}}
static cl_{symbol}_lib cl_{symbol}_shared;
static pthread_mutex_t cl_{symbol}_mutex = PTHREAD_MUTEX_INITIALIZER;"
    )
    .unwrap();
}

/// The start of the entry point for callers without an instance: run on the process-wide state
/// (built, or rebuilt for another thread count, under the lock).
pub fn emit_shared_entry(out: &mut String, symbol: &str, n: usize) {
    writeln!(
        out,
        "    if (rt->lib == NULL) {{
        collage_rt own = *rt;
        pthread_mutex_lock(&cl_{symbol}_mutex);
        if (cl_{symbol}_shared.L.sites == NULL || cl_{symbol}_shared.L.threads != rt->threads) {{
            cl_dnnl_lib_clear(&cl_{symbol}_shared.L);
            cl_dnnl_lib_build(&cl_{symbol}_shared.L, cl_{symbol}_descs, {n}, cl_{symbol}_shared.s, rt->threads);
        }}
        own.lib = &cl_{symbol}_shared;
        collage_{symbol}_run(&own, A, W, I);
        pthread_mutex_unlock(&cl_{symbol}_mutex);
        return;
    }}"
    )
    .unwrap();
}

/// Emits `static void {fname}(const collage_rt *rt, collage_ctx *ctx)`: primitive `site` of
/// `symbol` computing stage `id` (the residual, if any, is where the sum post-op starts from).
pub fn emit_call(
    out: &mut String,
    places: &[Place],
    symbol: &str,
    site: usize,
    id: u32,
    call: &DnnlCall,
    fname: &str,
) {
    let ptr = |b: u32| super::library::buf_ptr(places, b);
    let dst = ptr(id).replace("const float", "float");
    writeln!(
        out,
        "static void {fname}(const collage_rt *rt, collage_ctx *ctx) {{"
    )
    .unwrap();
    writeln!(out, "    float *dst = {dst};").unwrap();
    let opt = |b: Option<u32>| b.map_or("NULL".to_string(), ptr);
    let (a1, a2, a3) = if call.prim.kind == DnnlKind::Conv {
        (opt(call.wei), "dst".to_string(), opt(call.bias))
    } else {
        ("dst".to_string(), "NULL".to_string(), "NULL".to_string())
    };
    writeln!(
        out,
        "    cl_dnnl_exec(&((cl_{symbol}_lib *)rt->lib)->L, {site}, {}, {a1}, {a2}, {a3}, {});\n}}",
        ptr(call.src),
        opt(call.residual)
    )
    .unwrap();
}
