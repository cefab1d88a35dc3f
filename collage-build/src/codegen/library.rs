//! Library calls for stages placed on a GEMM library backend (`gemm`, `blas`, ...): recognising
//! a contraction as a (batched) GEMM over strided operands, and the C that calls the library.
//!
//! The generated call goes through one job description (`cl_gemm_job`, in the prelude): on one
//! thread every product is one library call; on more, the products are split into as many
//! (batch element, row or column block) tasks as divide evenly over the runtime's threads, run by
//! its `parallel_for`, each calling the library single-threaded, so thread counts are the
//! runtime's, whatever the library.
use super::writer::CWriter;
use crate::ir::DType;
use crate::schedule::{buf_ptr, Location};
use crate::te::{BinOp, BufId, Expr, Program, RedOp, Src, Stage};

/// An index expression as `c + r * RVar(0) + sum(vars[k] * Var(k))`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Affine {
    vars: Vec<i64>,
    r: i64,
    c: i64,
}

impl Affine {
    fn var(&self, k: usize) -> i64 {
        self.vars.get(k).copied().unwrap_or(0)
    }

    fn is_const(&self) -> bool {
        self.r == 0 && self.vars.iter().all(|&v| v == 0)
    }

    fn combine(mut self, o: &Affine, s: i64) -> Affine {
        if self.vars.len() < o.vars.len() {
            self.vars.resize(o.vars.len(), 0);
        }
        for (k, &v) in o.vars.iter().enumerate() {
            self.vars[k] += s * v;
        }
        self.r += s * o.r;
        self.c += s * o.c;
        self
    }

    fn scale(mut self, s: i64) -> Affine {
        self.vars.iter_mut().for_each(|v| *v *= s);
        self.r *= s;
        self.c *= s;
        self
    }
}

/// The strict affine form of an index expression (one reduction variable), or `None`.
fn affine(e: &Expr) -> Option<Affine> {
    match e {
        Expr::Var(k) => {
            let mut a = Affine::default();
            a.vars.resize(*k as usize + 1, 0);
            a.vars[*k as usize] = 1;
            Some(a)
        }
        Expr::RVar(0) => Some(Affine {
            r: 1,
            ..Affine::default()
        }),
        Expr::Const(c) if c.dtype() == DType::I64 => Some(Affine {
            c: c.as_i64(),
            ..Affine::default()
        }),
        Expr::Bin(BinOp::Add, a, b) => Some(affine(a)?.combine(&affine(b)?, 1)),
        Expr::Bin(BinOp::Sub, a, b) => Some(affine(a)?.combine(&affine(b)?, -1)),
        Expr::Bin(BinOp::Mul, a, b) => {
            let (a, b) = (affine(a)?, affine(b)?);
            if a.is_const() {
                Some(b.scale(a.c))
            } else if b.is_const() {
                Some(a.scale(b.c))
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The buffer and flat element offset of a load, as an affine form.
fn load_offset(p: &Program, e: &Expr) -> Option<(BufId, Affine)> {
    match e {
        Expr::Load(Src::Buf(b), idx) => {
            let shape = &p.bufs[b.index()].ty.shape;
            let mut acc = Affine::default();
            let mut stride = 1i64;
            for (ie, &d) in idx.iter().zip(shape).rev() {
                acc = acc.combine(&affine(ie)?, stride);
                stride *= d as i64;
            }
            Some((*b, acc))
        }
        Expr::LoadFlat(Src::Buf(b), f) => Some((*b, affine(f)?)),
        _ => None,
    }
}

/// One operand of a GEMM: `buf[off + batch offset + row * rs + col * cs]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operand {
    /// The buffer.
    pub buf: BufId,
    /// Constant element offset.
    pub off: i64,
    /// Element stride per batch index (one per batch dimension of the output).
    pub batch: Vec<i64>,
    /// Row stride (M for A, K for B).
    pub rs: i64,
    /// Column stride (K for A, N for B).
    pub cs: i64,
}

/// A stage recognised as `C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]` with C dense row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GemmCall {
    /// Batch dimensions (the output's leading dimensions).
    pub batch: Vec<usize>,
    /// Rows.
    pub m: usize,
    /// Columns.
    pub n: usize,
    /// Reduction length.
    pub k: usize,
    /// Left operand.
    pub a: Operand,
    /// Right operand.
    pub b: Operand,
}

/// Recognises `st` as a GEMM: an f32 sum reduction over one variable whose body is the product of
/// two loads with affine offsets, one independent of the column and one of the row.
pub fn gemm_call(p: &Program, st: &Stage) -> Option<GemmCall> {
    let r = st.reduce.as_ref()?;
    if r.op != RedOp::Sum || r.extents.len() != 1 || st.ty.dtype != DType::F32 {
        return None;
    }
    let shape = &st.ty.shape;
    let rank = shape.len();
    if rank == 0 {
        return None;
    }
    let Expr::Bin(BinOp::Mul, x, y) = &st.body else {
        return None;
    };
    let (bx, ax) = load_offset(p, x)?;
    let (by, ay) = load_offset(p, y)?;
    for b in [bx, by] {
        let buf = &p.bufs[b.index()];
        if buf.ty.dtype != DType::F32 || buf.packed {
            return None;
        }
    }
    // Output variables: batch 0..nb, then m (when rank >= 2), then n.
    let nv = rank as u32;
    let (mv, nvar) = if rank >= 2 {
        (Some(nv - 2), nv - 1)
    } else {
        (None, 0)
    };
    let nb = rank.saturating_sub(2);
    let m = if rank >= 2 { shape[rank - 2] } else { 1 };
    let n = shape[rank - 1];
    let k = r.extents[0];
    let mcoef = |a: &Affine| mv.map_or(0, |v| a.var(v as usize));
    // A is the operand that does not move with n, B the one that does not move with m.
    let (a, b) = if ax.var(nvar as usize) == 0 && mcoef(&ay) == 0 {
        ((bx, ax), (by, ay))
    } else if ay.var(nvar as usize) == 0 && mcoef(&ax) == 0 {
        ((by, ay), (bx, ax))
    } else {
        return None;
    };
    let operand = |(buf, f): (BufId, Affine), rs: i64, cs: i64| Operand {
        buf,
        off: f.c,
        batch: (0..nb).map(|d| f.var(d)).collect(),
        rs,
        cs,
    };
    let a = {
        let rs = mcoef(&a.1);
        let cs = a.1.r;
        operand(a, rs, cs)
    };
    let b = {
        let rs = b.1.r;
        let cs = b.1.var(nvar as usize);
        operand(b, rs, cs)
    };
    if a.off < 0 || b.off < 0 {
        return None;
    }
    Some(GemmCall {
        batch: shape[..nb].to_vec(),
        m,
        n,
        k,
        a,
        b,
    })
}

/// The C helpers library stages use (appended to the prelude when a program has any).
pub const PRELUDE: &str = r#"
#ifndef CL_GEMM_PRELUDE
#define CL_GEMM_PRELUDE
/* Library GEMM: C[m, n] = sum_k A[m, k] B[k, n], strided operands, C dense with leading dimension ldc. */
typedef void (*cl_sgemm_fn)(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs, int64_t a_cs,
                            const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t ldc);
/* Batch offsets of A and B for batch element t (generated per kernel). */
typedef void (*cl_gemm_offsets_fn)(int64_t t, int64_t *a_off, int64_t *b_off);
typedef struct {
    cl_sgemm_fn f;
    cl_gemm_offsets_fn offsets;
    int64_t m, n, k, a_rs, a_cs, b_rs, b_cs, ldc, c_bs, batch;
    int parallel; /* worth splitting over threads (decided at build time, as for generated stages) */
    int64_t blocks, block;
    int by_rows;
    const float *a, *b;
    float *c;
} cl_gemm_job;
/* Tasks are (batch element, block) pairs; a block is a range of rows or of columns. */
static inline void cl_gemm_task(void *v, int64_t begin, int64_t end) {
    const cl_gemm_job *j = (const cl_gemm_job *)v;
    for (int64_t i = begin; i < end; ++i) {
        int64_t t = i / j->blocks, lo = (i % j->blocks) * j->block, hi = lo + j->block, ao, bo;
        j->offsets(t, &ao, &bo);
        const float *a = j->a + ao, *b = j->b + bo;
        float *c = j->c + t * j->c_bs;
        if (j->by_rows) {
            if (hi > j->m) hi = j->m;
            j->f(hi - lo, j->n, j->k, a + lo * j->a_rs, j->a_rs, j->a_cs, b, j->b_rs, j->b_cs, c + lo * j->ldc, j->ldc);
        } else {
            if (hi > j->n) hi = j->n;
            j->f(j->m, hi - lo, j->k, a, j->a_rs, j->a_cs, b + lo * j->b_cs, j->b_rs, j->b_cs, c + lo, j->ldc);
        }
    }
}
static inline int64_t cl_gcd(int64_t a, int64_t b) { while (b) { int64_t r = a % b; a = b; b = r; } return a; }
/* The BLAS-style layout of strided operands (mirrors blas_strides_ok): an operand is read
   untransposed when its column stride is 1; leading dimensions are made valid for unit extents. */
typedef struct { int na, nb; int64_t lda, ldb; } cl_blas_layout;
static inline cl_blas_layout cl_blas_layout_of(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs,
                                               int64_t b_rs, int64_t b_cs) {
    cl_blas_layout l;
    l.na = (a_cs == 1 || k == 1) && (a_rs >= k || m == 1);
    l.nb = (b_cs == 1 || n == 1) && (b_rs >= n || k == 1);
    l.lda = l.na ? (m == 1 ? (k > 1 ? k : 1) : a_rs) : (k == 1 ? (m > 1 ? m : 1) : a_cs);
    l.ldb = l.nb ? (k == 1 ? (n > 1 ? n : 1) : b_rs) : (n == 1 ? (k > 1 ? k : 1) : b_cs);
    return l;
}
/* Runs every product of the batch. One thread: each product in one library call (the library
   blocks for the caches itself). More threads: tasks = batch x blocks with blocks = T / gcd(batch, T),
   so the tasks divide evenly over T threads; a product is split along its larger output dimension,
   so that each block re-reads the smaller operand (rows re-read B, columns re-read A). */
static inline void cl_gemm(const collage_rt *rt, cl_gemm_job *j) {
    int64_t threads = j->parallel ? rt->threads : 1;
    j->by_rows = j->m >= j->n;
    j->blocks = 1;
    j->block = j->by_rows ? j->m : j->n;
    if (threads > 1) {
        int64_t dim = j->block, want = threads / cl_gcd(j->batch, threads);
        int64_t block = ((dim + want - 1) / want + 15) / 16 * 16;
        j->block = block < dim ? block : dim;
        j->blocks = (dim + j->block - 1) / j->block;
    }
    int64_t tasks = j->batch * j->blocks;
    if (threads <= 1 || tasks < 2) cl_gemm_task(j, 0, tasks);
    else rt->parallel_for(rt->pool, tasks, cl_gemm_task, j);
}
#endif
"#;

/// Whether a BLAS call can take these strides (one of each operand's strides is 1 and the other
/// a valid leading dimension); the `gemm` crate takes any strides.
pub fn blas_strides_ok(g: &GemmCall) -> bool {
    let (m, n, k) = (g.m as i64, g.n as i64, g.k as i64);
    let a_ok = (g.a.cs == 1 || k == 1) && (g.a.rs >= k || m == 1)
        || (g.a.rs == 1 || m == 1) && (g.a.cs >= m || k == 1);
    let b_ok = (g.b.cs == 1 || n == 1) && (g.b.rs >= n || k == 1)
        || (g.b.rs == 1 || k == 1) && (g.b.cs >= k || n == 1);
    a_ok && b_ok
}

/// Emits `static void {fname}(const collage_rt *rt, collage_ctx *ctx)` computing stage `id` (a
/// GEMM) into its buffer through `cl_gemm` (tasks of batch elements and row or column blocks),
/// preceded by `{fname}_off`, the batch offsets of its operands.
pub fn emit_gemm(
    out: &mut CWriter,
    locs: &[Location],
    id: BufId,
    g: &GemmCall,
    backend: crate::backend::BackendId,
    fname: &str,
    parallel: bool,
) {
    let f = backend
        .lookup()
        .ok()
        .and_then(|b| b.gemm_fn())
        .unwrap_or_else(|| panic!("backend {backend} places GEMMs but names no GEMM function"));
    let ptr = |b: BufId| buf_ptr(locs, b);
    let Location::Arena(co) = locs[id.index()] else {
        panic!("GEMM stage {id} is not in the arena")
    };
    let nb: usize = g.batch.iter().product();
    // Unravel the batch index and form each operand's batch offset.
    let mut a_off = format!("{}", g.a.off);
    let mut b_off = format!("{}", g.b.off);
    let mut rem = "t".to_string();
    for d in (0..g.batch.len()).rev() {
        let idx = if d == 0 {
            rem.clone()
        } else {
            format!("({rem} % {})", g.batch[d])
        };
        if g.a.batch[d] != 0 {
            a_off += &format!(" + {idx} * {}", g.a.batch[d]);
        }
        if g.b.batch[d] != 0 {
            b_off += &format!(" + {idx} * {}", g.b.batch[d]);
        }
        rem = format!("({rem} / {})", g.batch[d]);
    }
    out.open(format!(
        "static void {fname}_off(int64_t t, int64_t *a_off, int64_t *b_off) {{"
    ));
    out.line("(void)t;");
    out.line(format!("*a_off = {a_off};"));
    out.line(format!("*b_off = {b_off};"));
    out.close("}");
    out.open(format!(
        "static void {fname}(const collage_rt *rt, collage_ctx *ctx) {{"
    ));
    out.line(format!("const float *a = {};", ptr(g.a.buf)));
    out.line(format!("const float *b = {};", ptr(g.b.buf)));
    out.line(format!("float *c = (float *)(ctx->A + {co});"));
    let (m, n, k) = (g.m, g.n, g.k);
    out.line(format!(
        "cl_gemm_job j = {{{f}, {fname}_off, {m}, {n}, {k}, {}, {}, {}, {}, {n}, {}, {nb}, {}, 0, 0, 0, a, b, c}};",
        g.a.rs,
        g.a.cs,
        g.b.rs,
        g.b.cs,
        m * n,
        i32::from(parallel)
    ));
    out.line("cl_gemm(rt, &j);");
    out.close("}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::TensorType;
    use crate::te::{BufKind, Exec, Reduce};

    fn mm(p: &mut Program, a_shape: Vec<usize>, b_shape: Vec<usize>, body: Expr) -> Stage {
        let a = p.push("a", TensorType::new(DType::F32, a_shape), BufKind::Input(0));
        let b = p.push("b", TensorType::new(DType::F32, b_shape), BufKind::Input(1));
        assert_eq!((a, b), (BufId(0), BufId(1)));
        Stage {
            name: "mm".into(),
            ty: TensorType::new(DType::F32, vec![2, 3, 5]),
            body,
            reduce: Some(Reduce {
                op: RedOp::Sum,
                extents: vec![4],
                finalize: None,
            }),
            materialize: false,
            part: 0,
            exec: Exec::gemm(crate::backend::BackendId::Blas),
            choice: None,
        }
    }

    #[test]
    fn batched_matmul_and_transposed_operand() {
        let mut p = Program::default();
        // C[b, m, n] = A[b, m, r] * B[n, r] (B transposed, shared by the batch).
        let body = Expr::load(
            Src::Buf(BufId(0)),
            vec![Expr::var(0), Expr::var(1), Expr::rvar(0)],
        )
        .mul(Expr::load(
            Src::Buf(BufId(1)),
            vec![Expr::var(2), Expr::rvar(0)],
        ));
        let st = mm(&mut p, vec![2, 3, 4], vec![5, 4], body);
        let g = gemm_call(&p, &st).expect("a GEMM");
        assert_eq!((g.m, g.n, g.k, g.batch.clone()), (3, 5, 4, vec![2]));
        assert_eq!((g.a.rs, g.a.cs, g.a.batch.clone()), (4, 1, vec![12]));
        assert_eq!((g.b.rs, g.b.cs, g.b.batch.clone()), (1, 4, vec![0]));
        assert!(blas_strides_ok(&g));
    }

    #[test]
    fn rejects_non_affine_and_non_product_bodies() {
        let mut p = Program::default();
        let div = Expr::load(
            Src::Buf(BufId(0)),
            vec![Expr::var(0), Expr::var(1), Expr::rvar(0).div(Expr::i(2))],
        )
        .mul(Expr::load(
            Src::Buf(BufId(1)),
            vec![Expr::var(2), Expr::rvar(0)],
        ));
        let st = mm(&mut p, vec![2, 3, 4], vec![5, 4], div);
        assert!(gemm_call(&p, &st).is_none());
        let mut p = Program::default();
        let sum = Expr::load(
            Src::Buf(BufId(0)),
            vec![Expr::var(0), Expr::var(1), Expr::rvar(0)],
        )
        .add(Expr::load(
            Src::Buf(BufId(1)),
            vec![Expr::var(2), Expr::rvar(0)],
        ));
        let st = mm(&mut p, vec![2, 3, 4], vec![5, 4], sum);
        assert!(gemm_call(&p, &st).is_none());
        // Both operands move with m and n: not a product of matrices.
        let mut p = Program::default();
        let both = Expr::load(
            Src::Buf(BufId(0)),
            vec![Expr::var(0), Expr::var(1), Expr::var(2)],
        )
        .mul(Expr::load(
            Src::Buf(BufId(1)),
            vec![Expr::var(2), Expr::rvar(0)],
        ));
        let st = mm(&mut p, vec![2, 3, 5], vec![5, 4], both);
        assert!(gemm_call(&p, &st).is_none());
    }
}
