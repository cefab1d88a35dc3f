//! Fusion on tensor expressions: injective producers are inlined into their readers, and
//! elementwise consumers of a reduction become its epilogue (`finalize`).
use super::{BufId, BufKind, Exec, Expr, Program, Src, Stage};

/// Largest producer body (in expression nodes) inlined into a reduction's inner loop.
const CHEAP_NODES: usize = 48;

fn is_trivial(st: &Stage) -> bool {
    st.reduce.is_none()
        && matches!(
            st.body,
            Expr::Load(..) | Expr::LoadFlat(..) | Expr::Const(_)
        )
        && st.body.cost().1 == 0
}

fn is_cheap(st: &Stage) -> bool {
    let (n, hard) = st.body.cost();
    hard == 0 && n <= CHEAP_NODES
}

fn has_select(e: &Expr) -> bool {
    let mut found = false;
    e.visit(&mut |x| found |= matches!(x, Expr::Select(..)));
    found
}

fn count_loads(e: &Expr, b: BufId) -> usize {
    let mut n = 0;
    e.visit(&mut |x| {
        if let Expr::Load(Src::Buf(k), _) | Expr::LoadFlat(Src::Buf(k), _) = x {
            if *k == b {
                n += 1;
            }
        }
    });
    n
}

/// Fuses `p` in place. Buffers that no stage reads any more and that are not outputs become
/// [`BufKind::Dead`].
pub fn fuse(p: &mut Program) {
    let before = p.readers();
    let stages: Vec<bool> = p
        .bufs
        .iter()
        .map(|b| matches!(b.kind, BufKind::Stage(_)))
        .collect();
    // Epilogues first, so that an elementwise consumer of a contraction (a bias add) is computed
    // once per output element instead of being inlined into every reader's inner loop; then
    // inlining, which can expose more epilogues.
    fuse_epilogues(p);
    mark_dead(p);
    inline_injective(p);
    mark_dead(p);
    hoist_factors(p);
    mark_dead(p);
    fuse_epilogues(p);
    mark_dead(p);
    record_absorbed(p, &stages, &before);
    let shapes: Vec<Vec<usize>> = p.bufs.iter().map(|b| b.ty.shape.clone()).collect();
    for b in &mut p.bufs {
        if let BufKind::Stage(st) = &mut b.kind {
            super::simplify_stage(st);
            st.body = super::simplify::rejoin_loads(&st.body, &shapes);
            if let Some(f) = st.reduce.as_mut().and_then(|r| r.finalize.as_mut()) {
                *f = super::simplify::rejoin_loads(f, &shapes);
            }
        }
    }
}

fn inline_injective(p: &mut Program) {
    let readers = p.readers();
    for c in 0..p.bufs.len() {
        let BufKind::Stage(cst) = &p.bufs[c].kind else {
            continue;
        };
        let c_reduces = cst.reduce.is_some();
        let c_part = cst.part;
        // A copy made to be materialised (a matmul's computed right-hand side, packed for it):
        // it reads each element of its source once.
        let c_copy = cst.materialize && cst.exec == Exec::Generated && is_trivial(cst);
        let can_inline = |k: BufId, e: &Expr| -> bool {
            let Some(pst) = p.stage(k) else { return false };
            if pst.reduce.is_some() || pst.materialize || pst.exec != Exec::Generated {
                return false;
            }
            // A pure index remapping (reshape, transpose) is a view: it is inlined into readers
            // in any partition; anything else only inside its own, or into a copy that reads
            // each of its elements once (attention's key and value, a bias added and the heads
            // transposed in one partition, copied for the matmul in the next: the copy
            // computes them, and the transposed tensor never goes to memory; both are
            // generated code).
            if is_trivial(pst) {
                return true;
            }
            let relayout = c_copy
                && is_cheap(pst)
                && readers[k.index()] == [BufId::new(c)]
                && pst.ty.numel() == cst.ty.numel();
            if pst.part != c_part && !relayout {
                return false;
            }
            // A producer that chooses between sources or padding (Concat, Pad) would put a
            // branch on every term of a contraction's inner loop and keep it from being register
            // blocked: it is computed once into memory instead (SqueezeNet's squeeze convolutions
            // read their Fire module's Concat: 8x slower inlined).
            if c_reduces && has_select(&pst.body) {
                return false;
            }
            // An elementwise function of a contraction's output becomes that contraction's
            // epilogue (computed once per element) rather than a term of this one's inner loop.
            if c_reduces && is_epilogue(p, &readers, k) {
                return false;
            }
            let single_reader = readers[k.index()].len() == 1;
            let cheap = is_cheap(pst);
            single_reader && (cheap || (!c_reduces && count_loads(e, k) == 1))
        };
        let rewrite = |e: &Expr| -> Expr {
            e.rewrite(&mut |x| match x {
                Expr::Load(Src::Buf(k), idx) if can_inline(*k, e) => {
                    Some(p.stage(*k).unwrap().body.subst_vars(idx))
                }
                Expr::LoadFlat(Src::Buf(k), f) if can_inline(*k, e) => {
                    let pst = p.stage(*k).unwrap();
                    Some(pst.body.subst_vars(&Expr::unflatten(f, &pst.ty.shape)))
                }
                _ => None,
            })
        };
        // A library call reads its operands from memory: nothing is inlined into its body.
        let body = if cst.exec == Exec::Generated {
            rewrite(&cst.body)
        } else {
            cst.body.clone()
        };
        let fin = cst
            .reduce
            .as_ref()
            .and_then(|r| r.finalize.as_ref())
            .map(rewrite);
        if let BufKind::Stage(cst) = &mut p.bufs[c].kind {
            cst.body = body;
            if let Some(r) = cst.reduce.as_mut() {
                r.finalize = fin;
            }
        }
    }
}

/// Whether stage `k` (elementwise) can become the epilogue of a reduction it reads
/// ([`fuse_epilogues`]): it reads a generated contraction of its own partition, size and type
/// only at the element it computes, and every other reader of that contraction is read by `k`
/// alone (a stage inlined into `k`: the Sigmoid of a SiLU, the HardSigmoid of a HardSwish).
fn is_epilogue(p: &Program, readers: &[Vec<BufId>], k: BufId) -> bool {
    let Some(kst) = p.stage(k) else { return false };
    if kst.reduce.is_some() || kst.exec != Exec::Generated {
        return false;
    }
    body_bufs(&kst.body).into_iter().any(|r| {
        let generated = p
            .stage(r)
            .is_some_and(|rst| rst.reduce.is_some() && rst.exec == Exec::Generated);
        // Every other reader is an elementwise stage only `k` reads (inlined into it):
        // then `k` is the contraction's only reader once inlining is done.
        generated
            && takes_epilogue(p, r, kst)
            && readers[r.index()].iter().all(|&q| {
                q == k
                    || (readers[q.index()] == [k]
                        && p.stage(q).is_some_and(|s| {
                            s.reduce.is_none() && s.exec == Exec::Generated && !s.materialize
                        }))
            })
    })
}

/// The buffers `e` loads, sorted, each once.
fn body_bufs(e: &Expr) -> Vec<BufId> {
    let mut v: Vec<BufId> = e
        .sources()
        .into_iter()
        .filter_map(|s| match s {
            Src::Buf(b) => Some(b),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Whether `e` reads a reduction variable.
fn reads_rvar(e: &Expr) -> bool {
    let mut found = false;
    e.visit(&mut |x| found |= matches!(x, Expr::RVar(_)));
    found
}

/// Whether `e` is a product (of any depth) one of whose factors is a load of `b`, with `b`
/// read nowhere else in it.
fn is_factor(e: &Expr, b: BufId) -> bool {
    let load_of = |x: &Expr| matches!(x, Expr::Load(Src::Buf(k), _) | Expr::LoadFlat(Src::Buf(k), _) if *k == b);
    match e {
        x if load_of(x) => true,
        Expr::Bin(super::BinOp::Mul, l, r) => {
            (is_factor(l, b) && count_loads(r, b) == 0)
                || (is_factor(r, b) && count_loads(l, b) == 0)
        }
        _ => false,
    }
}

/// Hoists a factor that does not vary along a sum's reduction out of it: a sum reduction that
/// reads, as one factor of its product, an elementwise quotient `x / y` (or product `x * y`)
/// whose `y` at the read position does not depend on the reduction variables (the softmax's
/// row sum read by the product with V, a per-row scale) reads `x` in its place and divides (or
/// multiplies) its accumulator by `y` once per output. The quotient is then never computed into
/// memory: the softmax's normalisation pass disappears into the next product's epilogue. Both
/// stages are generated code, so this crosses partitions (the softmax and the product are
/// placed apart): what moves is one load into the product's loop and one division into its
/// epilogue.
fn hoist_factors(p: &mut Program) {
    let readers = p.readers();
    for c in 0..p.bufs.len() {
        let BufKind::Stage(cst) = &p.bufs[c].kind else {
            continue;
        };
        let Some(red) = &cst.reduce else { continue };
        if red.op != super::RedOp::Sum || cst.exec != Exec::Generated {
            continue;
        }
        for k in body_bufs(&cst.body) {
            let Some(pst) = p.stage(k) else { continue };
            let fin_reads = red.finalize.as_ref().is_some_and(|f| count_loads(f, k) > 0);
            if pst.reduce.is_some()
                || pst.materialize
                || pst.exec != Exec::Generated
                || readers[k.index()] != [BufId::new(c)]
                || p.outputs.contains(&k)
                || p.bufs[k.index()].packed
                || fin_reads
                || !is_factor(&cst.body, k)
            {
                continue;
            }
            let Expr::Bin(op @ (super::BinOp::Div | super::BinOp::Mul), x, y) = &pst.body else {
                continue;
            };
            // `x`'s cost moves into the reduction's inner loop: only a cheap one.
            let (n, hard) = x.cost();
            if hard != 0 || n > CHEAP_NODES {
                continue;
            }
            // The factor at the position the reduction reads.
            let mut at: Option<(Expr, Expr)> = None;
            cst.body.visit(&mut |e| match e {
                Expr::Load(Src::Buf(b), idx) if *b == k => {
                    at = Some((x.subst_vars(idx), y.subst_vars(idx)));
                }
                Expr::LoadFlat(Src::Buf(b), f) if *b == k => {
                    let idx = Expr::unflatten(f, &pst.ty.shape);
                    at = Some((x.subst_vars(&idx), y.subst_vars(&idx)));
                }
                _ => {}
            });
            let Some((xs, ys)) = at else { continue };
            if reads_rvar(&ys) {
                continue;
            }
            let body = cst.body.rewrite(&mut |e| match e {
                Expr::Load(Src::Buf(b), _) | Expr::LoadFlat(Src::Buf(b), _) if *b == k => {
                    Some(xs.clone())
                }
                _ => None,
            });
            let prev = red.finalize.clone().unwrap_or(Expr::Acc);
            let scaled = Expr::Bin(*op, Box::new(Expr::Acc), Box::new(ys));
            let fin = prev.rewrite(&mut |e| matches!(e, Expr::Acc).then(|| scaled.clone()));
            if let BufKind::Stage(cst) = &mut p.bufs[c].kind {
                cst.body = body;
                cst.reduce.as_mut().expect("a reduction").finalize = Some(fin);
            }
            break;
        }
    }
}

/// The factors of `e`'s product tree (`e` itself when it is not a product).
fn factors(e: &Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::Bin(super::BinOp::Mul, a, b) => {
            factors(a, out);
            factors(b, out);
        }
        x => out.push(x.clone()),
    }
}

/// A float sum whose body is a product with factors that vary along none of the reduction
/// variables applies them once to its accumulator: `sum_r a_r * c = c * sum_r a_r`. A ranged
/// program lowers everything as one part, so the softmax's reciprocal row sum is inlined into
/// the product with V before [`hoist_factors`] sees it as a stage; here it leaves that
/// product's inner loop for its epilogue, as the static pipeline's does.
pub fn hoist_invariant_factors(p: &mut Program) {
    for b in &mut p.bufs {
        let BufKind::Stage(st) = &mut b.kind else {
            continue;
        };
        let Some(red) = &st.reduce else { continue };
        if red.op != super::RedOp::Sum || st.exec != Exec::Generated || !st.ty.dtype.is_float() {
            continue;
        }
        let mut fs = Vec::new();
        factors(&st.body, &mut fs);
        let (free, rest): (Vec<Expr>, Vec<Expr>) = fs.into_iter().partition(|f| !reads_rvar(f));
        if free.is_empty() || rest.is_empty() {
            continue;
        }
        let product = |v: Vec<Expr>| {
            v.into_iter()
                .reduce(|a, b| Expr::bin(super::BinOp::Mul, a, b))
                .expect("not empty")
        };
        let scale = product(free);
        let scaled = Expr::bin(super::BinOp::Mul, Expr::Acc, scale);
        let prev = red.finalize.clone().unwrap_or(Expr::Acc);
        let fin = prev.rewrite(&mut |e| matches!(e, Expr::Acc).then(|| scaled.clone()));
        st.body = product(rest);
        st.reduce.as_mut().expect("a reduction").finalize = Some(fin);
    }
}

fn is_identity_load(idx: &[Expr]) -> bool {
    idx.iter().enumerate().all(|(k, e)| *e == Expr::var(k))
}

/// Whether elementwise stage `cst` can become the epilogue of reduction `k`, readers aside:
/// the same partition, size and type, `k` neither an output nor packed nor a pooling primitive
/// (which computes its own finalize and nothing else), and every read of `k` in `cst` the
/// element `cst` computes (the same flat position).
fn takes_epilogue(p: &Program, k: BufId, cst: &Stage) -> bool {
    let Some(pst) = p.stage(k) else { return false };
    let kbuf = &p.bufs[k.index()];
    let pooling = pst
        .exec
        .window()
        .is_some_and(|d| d.kind != super::WindowKind::Conv);
    if pst.reduce.is_none()
        || pooling
        || pst.part != cst.part
        || p.outputs.contains(&k)
        || kbuf.packed
        || pst.ty.numel() != cst.ty.numel()
        || pst.ty.dtype != cst.ty.dtype
    {
        return false;
    }
    let c_vars: Vec<Expr> = (0..cst.ty.rank()).map(Expr::var).collect();
    let c_flat = Expr::flatten(&c_vars, &cst.ty.shape);
    let mut ok = true;
    cst.body.visit(&mut |x| match x {
        Expr::Load(Src::Buf(b), idx) if *b == k => {
            ok &= is_identity_load(idx) && kbuf.ty.shape == cst.ty.shape
        }
        Expr::LoadFlat(Src::Buf(b), f) if *b == k => ok &= **f == c_flat,
        _ => {}
    });
    ok
}

fn fuse_epilogues(p: &mut Program) {
    let mut readers = p.readers();
    for c in 0..p.bufs.len() {
        let BufKind::Stage(cst) = &p.bufs[c].kind else {
            continue;
        };
        if cst.reduce.is_some() {
            continue;
        }
        for k in body_bufs(&cst.body) {
            let Some(pst) = p.stage(k) else { continue };
            let Some(red) = &pst.reduce else { continue };
            let BufKind::Stage(cst) = &p.bufs[c].kind else {
                unreachable!()
            };
            if readers[k.index()] != [BufId::new(c)] || !takes_epilogue(p, k, cst) {
                continue;
            }
            let prev = red.finalize.clone().unwrap_or(Expr::Acc);
            let mut body = cst.body.clone();
            if pst.ty.shape != cst.ty.shape {
                // The fused stage iterates P's shape; C's index variables follow from the flat position.
                let p_vars: Vec<Expr> = (0..pst.ty.rank()).map(Expr::var).collect();
                let flat = Expr::flatten(&p_vars, &pst.ty.shape);
                body = body.subst_vars(&Expr::unflatten(&flat, &cst.ty.shape));
            }
            let fin = body.rewrite(&mut |x| match x {
                Expr::Load(Src::Buf(b), _) | Expr::LoadFlat(Src::Buf(b), _) if *b == k => {
                    Some(prev.clone())
                }
                _ => None,
            });
            let mut fused = pst.clone();
            fused.name = cst.name.clone();
            fused.ty.dtype = cst.ty.dtype;
            fused.reduce.as_mut().unwrap().finalize = Some(fin);
            p.bufs[c].kind = BufKind::Stage(fused);
            p.bufs[k.index()].kind = BufKind::Dead;
            readers = p.readers();
            break;
        }
    }
}

/// Records in `p.absorbed` which kernels compute the stages fusion removed or copied into
/// their readers: `stages` marks the buffers that were stages before fusion and `before` holds
/// every buffer's readers then. A pre-fusion reader `r` of stage `b` that is a kernel now and no
/// longer reads `b` computes `b` itself; a reader that fusion removed passes `b` on to the
/// kernels that compute it. Readers have higher indices than what they read, so one pass from
/// the last buffer down sees every reader's kernels first.
fn record_absorbed(p: &mut Program, stages: &[bool], before: &[Vec<BufId>]) {
    let after = p.readers();
    let live = |b: BufId| matches!(p.bufs[b.index()].kind, BufKind::Stage(_));
    let mut homes: Vec<Vec<BufId>> = vec![Vec::new(); stages.len()];
    let mut out = Vec::new();
    for b in (0..stages.len()).rev() {
        if !stages[b] {
            continue;
        }
        let id = BufId::new(b);
        let mut into: Vec<BufId> = Vec::new();
        for &r in &before[b] {
            if live(r) {
                into.push(r);
            } else {
                into.extend(homes[r.index()].iter().copied());
            }
        }
        into.sort_unstable();
        into.dedup();
        into.retain(|&k| k != id && !after[b].contains(&k));
        out.extend(into.iter().map(|&k| (id, k)));
        if !live(id) {
            homes[b] = into;
        }
    }
    p.absorbed.extend(out);
    p.absorbed.sort_unstable();
    p.absorbed.dedup();
}

fn mark_dead(p: &mut Program) {
    loop {
        let readers = p.readers();
        let mut changed = false;
        for (i, b) in p.bufs.iter_mut().enumerate() {
            if matches!(b.kind, BufKind::Stage(_) | BufKind::Const(_))
                && readers[i].is_empty()
                && !p.outputs.contains(&BufId::new(i))
            {
                b.kind = BufKind::Dead;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}
