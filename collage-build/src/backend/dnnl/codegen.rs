//! oneDNN primitives for stages placed on the `dnnl` backend ([`crate::te::Exec::Library`] with a window call: convolution,
//! pooling): which buffers a primitive reads and writes,
//! which of the fused elementwise consumers become its bias and post-ops (sum for a residual
//! add, ReLU), how convolutions hand their outputs to each other, and the C that creates the
//! primitives once per model instance and runs them.
//!
//! The C side (`prims.c`, appended to the prelude when a program has such stages) keeps every
//! primitive of a model in a `cl_dnnl_lib`: `collage_<model>_lib_new(rt)` creates them for the
//! runtime's thread count (the Rust glue does this in `Model::new` and frees it on drop), `run`
//! binds pointers and executes. Callers without an instance (`run_in`, measurement harnesses)
//! pass a null `lib`: the entry point then builds one process-wide state on first use and runs
//! under a mutex.
use std::fmt::Write;

use crate::schedule::{buf_ptr, Location};
use crate::ir::DType;
use crate::te::{BinOp, BufId, BufKind, Expr, Program, Src, Stage, WindowKind, WindowOp};

/// The C helpers (oneDNN's header, the primitive table and its execution).
pub const PRELUDE: &str = include_str!("prims.c");

/// How one stage runs on a oneDNN primitive.
#[derive(Clone, Debug, PartialEq)]
pub struct DnnlCall {
    /// The primitive and its geometry.
    pub prim: WindowOp,
    /// The input activation buffer.
    pub src: BufId,
    /// The weights (convolution).
    pub wei: Option<BufId>,
    /// The bias (per output channel), applied by the primitive.
    pub bias: Option<BufId>,
    /// A same-shaped tensor added to the result (put into the destination first, then the
    /// primitive's sum post-op accumulates onto it).
    pub residual: Option<BufId>,
    /// ReLU as the primitive's last post-op.
    pub relu: bool,
    /// The weights are a constant of the model: converted to the primitive's layout once.
    pub wei_const: bool,
    /// What of the finalize the primitive does not compute, applied in place afterwards
    /// ([`Expr::Acc`] = the primitive's result); `None` when nothing is left.
    pub epilogue: Option<Expr>,
}

impl DnnlCall {
    fn conv(&self) -> bool {
        self.prim.kind == WindowKind::Conv
    }
}

/// The stages of `p` computed by oneDNN primitives ([`crate::te::Exec::Library`] with a window call), in program order (their
/// site numbers).
pub fn sites(p: &Program) -> Vec<BufId> {
    p.bufs
        .iter()
        .enumerate()
        .filter(|(_, b)| matches!(&b.kind, BufKind::Stage(st) if st.exec.window().is_some()))
        .map(|(i, _)| BufId::new(i))
        .collect()
}

/// The call of site `id` (a stage listed by [`sites`]): the primitive's operands and, for a
/// convolution, its finalize split into bias, post-ops and epilogue; `None` if the body does not
/// read the operands the primitive needs (a placement bug).
pub fn call(p: &Program, id: BufId, st: &Stage) -> Option<DnnlCall> {
    let prim = *st.exec.window()?;
    let src_shape = [prim.n, prim.ic, prim.ih, prim.iw].map(|v| v as usize);
    let (mut src, mut wei) = (None, None);
    st.body.visit(&mut |x| {
        if let Expr::Load(Src::Buf(b), idx) = x {
            let shape = &p.bufs[b.index()].ty.shape;
            if idx.first() == Some(&Expr::var(0)) && shape[..] == src_shape[..] {
                src = src.or(Some(*b));
            } else if prim.kind == WindowKind::Conv && idx.first() == Some(&Expr::var(1)) {
                wei = wei.or(Some(*b));
            }
        }
    });
    let src = src.filter(|&b| f32_buf(p, b))?;
    let mut call = DnnlCall {
        prim,
        src,
        wei: None,
        bias: None,
        residual: None,
        relu: false,
        wei_const: false,
        epilogue: None,
    };
    if prim.kind != WindowKind::Conv {
        // Pooling computes its whole finalize (the average's divisor); fusion adds nothing.
        return Some(call);
    }
    let wei = wei.filter(|&b| f32_buf(p, b))?;
    call.wei = Some(wei);
    call.wei_const = is_const(p, wei);
    split_finalize(p, id, st, &mut call);
    Some(call)
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

fn is_const(p: &Program, b: BufId) -> bool {
    matches!(p.bufs[b.index()].kind, BufKind::Const(_))
}

fn f32_buf(p: &Program, b: BufId) -> bool {
    p.bufs[b.index()].ty.dtype == DType::F32 && !p.bufs[b.index()].packed
}

/// Splits the finalize of convolution stage `id` into the primitive's bias (a per-channel
/// vector read at the channel `Var(1)`), residual (same shape) and ReLU post-ops, and what is left
/// for an in-place loop.
fn split_finalize(p: &Program, id: BufId, st: &Stage, call: &mut DnnlCall) {
    let fin = st
        .reduce
        .as_ref()
        .and_then(|r| r.finalize.clone())
        .unwrap_or(Expr::Acc);
    let vars: Vec<Expr> = (0..st.ty.rank()).map(Expr::var).collect();
    let flat = Expr::flatten(&vars, &st.ty.shape);
    let (at, extent) = (Expr::var(1), call.prim.oc as usize);
    // `[oc]`, or a broadcast shape such as `[oc, 1, 1]`, read at the channel.
    let is_bias = |e: &Expr| match e {
        Expr::Load(Src::Buf(b), idx) => {
            let shape = &p.bufs[b.index()].ty.shape;
            let pos = idx.iter().position(|i| *i == at);
            f32_buf(p, *b)
                && pos.is_some_and(|c| shape[c] == extent)
                && idx.iter().zip(shape).enumerate().all(|(k, (i, &d))| {
                    Some(k) == pos || (d == 1 && matches!(i, Expr::Const(c) if c.is_zero()))
                })
        }
        Expr::LoadFlat(Src::Buf(b), f) => {
            f32_buf(p, *b) && **f == at && p.bufs[b.index()].ty.numel() == extent
        }
        _ => false,
    };
    let is_residual = |e: &Expr| match e {
        Expr::Load(Src::Buf(b), idx) => {
            *b != id
                && idx[..] == vars[..]
                && p.bufs[b.index()].ty.shape == st.ty.shape
                && f32_buf(p, *b)
        }
        Expr::LoadFlat(Src::Buf(b), f) => {
            *b != id
                && **f == flat
                && p.bufs[b.index()].ty.numel() == st.ty.numel()
                && f32_buf(p, *b)
        }
        _ => false,
    };
    let buf = |e: &Expr| match e {
        Expr::Load(Src::Buf(b), _) | Expr::LoadFlat(Src::Buf(b), _) => *b,
        _ => unreachable!("a load"),
    };
    if count_acc(&fin) != 1 {
        call.epilogue = Some(fin).filter(|f| *f != Expr::Acc);
        return;
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
        return;
    }
    // Otherwise only the bias, where the finalize adds it straight to the accumulator.
    let mut stripped = None;
    let rest = fin.rewrite(&mut |x| match x {
        Expr::Bin(BinOp::Add, a, b) if stripped.is_none() => {
            let (acc_side, other_side) = if **a == Expr::Acc { (a, b) } else { (b, a) };
            (**acc_side == Expr::Acc && is_bias(other_side)).then(|| {
                stripped = Some(buf(other_side));
                Expr::Acc
            })
        }
        _ => None,
    });
    call.bias = stripped;
    call.epilogue = Some(rest).filter(|f| *f != Expr::Acc);
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
pub fn links(p: &Program, sites: &[BufId], calls: &[DnnlCall]) -> Vec<Link> {
    let site_of = |b: BufId| sites.binary_search(&b).ok();
    // A producer whose output is the primitive's own result (no loop after it changes it).
    let producer = |b: Option<BufId>| -> i64 {
        b.and_then(site_of)
            .filter(|&k| calls[k].conv() && calls[k].epilogue.is_none())
            .map_or(-1, |k| k as i64)
    };
    let readers = p.readers();
    let mut out: Vec<Link> = calls
        .iter()
        .map(|c| {
            if c.conv() {
                Link {
                    src_from: producer(Some(c.src)),
                    res_from: producer(c.residual),
                    blockable: false,
                }
            } else {
                Link {
                    src_from: -1,
                    res_from: -1,
                    blockable: false,
                }
            }
        })
        .collect();
    for (k, &b) in sites.iter().enumerate() {
        let c = &calls[k];
        if !c.conv() || c.epilogue.is_some() || p.outputs.contains(&b) {
            continue;
        }
        let only_linked = readers[b.index()].iter().all(|&r| {
            let Some(j) = site_of(r) else {
                return false;
            };
            let rc = &calls[j];
            let linked = (out[j].src_from == k as i64 && rc.src == b)
                || (out[j].res_from == k as i64 && rc.residual == Some(b));
            let other = rc.wei == Some(b)
                || rc.bias == Some(b)
                || rc
                    .epilogue
                    .as_ref()
                    .is_some_and(|e| e.sources().contains(&Src::Buf(b)));
            linked && !other
        });
        out[k].blockable = only_linked && !readers[b.index()].is_empty();
    }
    out
}

fn kind_name(k: WindowKind) -> &'static str {
    match k {
        WindowKind::Conv => "CL_DNNL_CONV",
        WindowKind::MaxPool => "CL_DNNL_MAXPOOL",
        WindowKind::AvgPoolExcludePad => "CL_DNNL_AVGPOOL_EXCLUDE",
        WindowKind::AvgPoolIncludePad => "CL_DNNL_AVGPOOL_INCLUDE",
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
        let w = [
            d.n, d.ic, d.ih, d.iw, d.oc, d.oh, d.ow, d.kh, d.kw, d.sh, d.sw, d.dh, d.dw, d.pt,
            d.pl, d.pb, d.pr, d.groups,
        ];
        let nums: Vec<String> = w
            .iter()
            .copied()
            .chain([
                i64::from(c.bias.is_some()),
                i64::from(c.residual.is_some()),
                i64::from(c.relu),
                i64::from(c.wei_const),
                l.src_from,
                l.res_from,
                i64::from(l.blockable),
            ])
            .map(|v| v.to_string())
            .collect();
        writeln!(out, "    {{{}, {}}},", kind_name(d.kind), nums.join(", ")).unwrap();
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
static pthread_mutex_t cl_{symbol}_mutex = PTHREAD_MUTEX_INITIALIZER;
/* Unloading the library (or the process ending) frees the process-wide state. */
__attribute__((destructor)) static void cl_{symbol}_unload(void) {{
    cl_dnnl_lib_clear(&cl_{symbol}_shared.L);
}}"
    )
    .unwrap();
}

/// The start of the entry point: parallel loops move onto OpenMP's team (see `prims.c`),
/// and callers without an instance run on the process-wide state (built, or rebuilt for another
/// thread count, under the lock).
pub fn emit_shared_entry(out: &mut String, symbol: &str, n: usize) {
    writeln!(
        out,
        "    collage_rt omp_rt;
    if (rt->threads > 1 && rt->parallel_for != cl_omp_parallel_for_ && GOMP_parallel) {{
        omp_rt = *rt;
        omp_rt.pool = (const void *)(intptr_t)rt->threads;
        omp_rt.parallel_for = cl_omp_parallel_for_;
        rt = &omp_rt;
    }}
    if (rt->lib == NULL) {{
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
    locs: &[Location],
    symbol: &str,
    site: usize,
    id: BufId,
    call: &DnnlCall,
    fname: &str,
) {
    let ptr = |b: BufId| buf_ptr(locs, b);
    let dst = ptr(id).replace("const float", "float");
    writeln!(
        out,
        "static void {fname}(const collage_rt *rt, collage_ctx *ctx) {{"
    )
    .unwrap();
    writeln!(out, "    float *dst = {dst};").unwrap();
    let opt = |b: Option<BufId>| b.map_or("NULL".to_string(), ptr);
    let (a0, a1, a2, a3) = if call.conv() {
        (
            ptr(call.src),
            opt(call.wei),
            "dst".to_string(),
            opt(call.bias),
        )
    } else {
        (
            ptr(call.src),
            "dst".to_string(),
            "NULL".to_string(),
            "NULL".to_string(),
        )
    };
    writeln!(
        out,
        "    cl_dnnl_exec(&((cl_{symbol}_lib *)rt->lib)->L, {site}, {a0}, {a1}, {a2}, {a3}, {});\n}}",
        opt(call.residual)
    )
    .unwrap();
}

/// The oneDNN primitives of one program ([`super::super::WindowCalls`]).
pub struct Primitives<'a> {
    program: &'a Program,
    symbol: &'a str,
    sites: Vec<BufId>,
    calls: Vec<DnnlCall>,
}

impl<'a> Primitives<'a> {
    /// The primitives of `p`, if it has any.
    pub fn new(p: &'a Program, symbol: &'a str) -> Option<Primitives<'a>> {
        let sites = sites(p);
        if sites.is_empty() {
            return None;
        }
        let calls = sites
            .iter()
            .map(|&id| {
                let st = p.stage(id).expect("a stage");
                call(p, id, st).unwrap_or_else(|| {
                    panic!(
                        "stage {} on dnnl does not read its primitive's operands (placement bug)",
                        st.name
                    )
                })
            })
            .collect();
        Some(Primitives {
            program: p,
            symbol,
            sites,
            calls,
        })
    }
}

impl super::super::WindowCalls for Primitives<'_> {
    fn emit_unit(&self, out: &mut String) {
        out.push_str("/* collage-link: pthread */\n");
        out.push_str(PRELUDE);
        let links = links(self.program, &self.sites, &self.calls);
        emit_table(out, self.symbol, &self.calls, &links);
    }

    fn emit_call(&self, out: &mut String, locs: &[Location], id: BufId, fname: &str) -> Option<Expr> {
        let site = self.sites.binary_search(&id).expect("a primitive site");
        let call = &self.calls[site];
        emit_call(out, locs, self.symbol, site, id, call, fname);
        call.epilogue.clone()
    }

    fn epilogue(&self, id: BufId) -> Option<Expr> {
        let site = self.sites.binary_search(&id).expect("a primitive site");
        self.calls[site].epilogue.clone()
    }

    fn emit_entry(&self, out: &mut String) {
        emit_shared_entry(out, self.symbol, self.sites.len());
    }
}

