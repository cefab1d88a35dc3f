//! Kernel plans: the one place that decides a generated stage's loop shape. [`plan_stage`]
//! chooses a [`KernelPlan`] for a stage, an instruction-set variant and a CPU, legalising the
//! stage's chosen kind and knobs (`Stage::choice`, else the target's defaults) to what fits it;
//! [`plan_program`] does so for every stage of a program, once, and the program keeps the
//! result (`Program::plans`). The C emitter prints those plans and decides nothing itself;
//! groups, the pricer, `explain` and the goldens read them too.
//!
//! The order of preference: a depthwise window over image planes ([`plane`]), a contraction
//! vectorised along its channels ([`channel`]), a register-blocked contraction, a row
//! reduction; else a loop nest over the output — for a reduction a padded window ([`window`])
//! or the plain one, for an injective stage with its last dimension split or its guard turned
//! into ranges.
mod channel;
mod plane;
mod window;
pub(crate) use window::{pairs as window_pairs, separable as separable_window};

use std::borrow::Cow;

use crate::ir::{strides, DType};
use crate::schedule::analysis::{
    coef, conjuncts, contiguous_along, contiguous_along_r, load_coef, mergeable_from, split_body,
    split_factor, uses_var, vectorizable,
};
use crate::schedule::group::gcd;
use crate::schedule::kernel::{gemm_defaults, random_choice, row_defaults, Draw};
use crate::target::{Cpu, Target};
use crate::te::{
    BinOp, BufId, BufKind, Exec, Expr, GemmPlan, Guard, InjectivePlan, Isa, KernelPlan, PlainPlan,
    PlanChoice, PlanKind, Program, RedOp, RowPlan, Scalar, ScanPlan, Src, Stage, UnOp, WindowPlan,
};
pub(crate) use channel::{aligned_tiles, paired_body, ranged_channel_plan};
pub(crate) use plane::MAX_LANES;

/// Bytes of a cache line: the step of the prefetches.
pub(crate) const CACHE_LINE: usize = 64;

/// The order in which a stage's kinds are tried when nothing is chosen: the first that fits
/// is its default plan.
const ORDER: [PlanKind; 8] = [
    PlanKind::Scan,
    PlanKind::Plane,
    PlanKind::Channel,
    PlanKind::RegisterBlocked,
    PlanKind::Row,
    PlanKind::Window,
    PlanKind::Plain,
    PlanKind::Elementwise,
];

/// The plan of stage `st` of `p` for the variant `isa` on `cpu`: `choice` realised for the
/// stage (its knobs legalised) when its kind fits the stage, else the first kind of [`ORDER`]
/// that fits, with the target's default knobs.
pub fn plan_stage(
    p: &Program,
    st: &Stage,
    isa: Isa,
    cpu: &Cpu,
    choice: Option<PlanChoice>,
) -> KernelPlan {
    let mut plan = choice
        .and_then(|c| plan_kind(p, st, isa, cpu, c.kind(), Some(c)))
        .or_else(|| {
            ORDER
                .iter()
                .find_map(|&k| plan_kind(p, st, isa, cpu, k, None))
        })
        .expect("every stage has a loop nest: plain or elementwise");
    // The thread split: the tasks go to the pool where there are several and the work pays
    // for the fork.
    let parallel = plan.n_outer() > 1 && worth_parallel(p, st);
    plan.set_parallel(parallel);
    plan
}

/// The kinds that fit stage `st` (for `isa` on `cpu`), in [`ORDER`]: what a tuner or a seed
/// may choose among.
pub fn kinds_that_fit(p: &Program, st: &Stage, isa: Isa, cpu: &Cpu) -> Vec<PlanKind> {
    ORDER
        .into_iter()
        .filter(|&k| plan_kind(p, st, isa, cpu, k, None).is_some())
        .collect()
}

/// The register-blocked plan of stage `st` with the target's default knobs, if that kind fits
/// it: for a program served over a range of sizes (`te::Range`), whose shapes are the largest
/// size's and whose run-time integers are parameter reads — which the analyses here take for
/// no constant step, so a plan only vectorises along a row whose step is the same at every
/// size.
pub(crate) fn default_gemm(p: &Program, st: &Stage, isa: Isa, cpu: &Cpu) -> Option<GemmPlan> {
    match plan_kind(p, st, isa, cpu, PlanKind::RegisterBlocked, None)? {
        KernelPlan::Gemm(g) => Some(g),
        _ => None,
    }
}

/// The plan of kind `kind` for `st`, with the knobs of `choice` (a choice of that kind) or
/// the target's defaults; `None` if the kind does not fit the stage.
fn plan_kind(
    p: &Program,
    st: &Stage,
    isa: Isa,
    cpu: &Cpu,
    kind: PlanKind,
    choice: Option<PlanChoice>,
) -> Option<KernelPlan> {
    let lanes = isa.lanes();
    let shape = &st.ty.shape;
    let rank = shape.len();
    let row_reduce = || {
        st.reduce.is_some()
            && rank >= 1
            && shape[rank - 1] >= 4
            && contiguous_along(p, &st.body, rank as u32 - 1)
    };
    match (kind, st.reduce.as_ref()) {
        (PlanKind::Elementwise, None) => {
            let copy = match choice {
                Some(PlanChoice::Elementwise { copy }) => copy,
                _ => true,
            };
            Some(KernelPlan::Injective(injective_plan(p, st, cpu, copy)))
        }
        (_, None) | (PlanKind::Elementwise, Some(_)) => None,
        (PlanKind::Plane, Some(_)) => {
            let knobs = match choice {
                Some(PlanChoice::Plane {
                    parts,
                    band,
                    flat,
                    chan,
                    prefetch,
                }) => Some(plane::PlaneKnobs {
                    parts,
                    band,
                    flat,
                    chan,
                    prefetch,
                }),
                _ => None,
            };
            plane::plane_plan(p, st, knobs).map(KernelPlan::Plane)
        }
        (PlanKind::Channel, Some(_)) => {
            let knobs = match choice {
                Some(PlanChoice::Channel {
                    vecs,
                    rows,
                    kc,
                    groups,
                }) => Some((vecs, rows, kc, groups)),
                _ => None,
            };
            channel::channel_plan(p, st, isa, cpu, knobs).map(KernelPlan::Channel)
        }
        (PlanKind::RegisterBlocked, Some(_)) if row_reduce() => {
            let (vecs, rows, prefetch) = match choice {
                Some(PlanChoice::Gemm {
                    vecs,
                    rows,
                    prefetch,
                }) => (vecs as usize, rows as usize, prefetch as usize),
                _ => {
                    let (v, r) = gemm_defaults(shape[rank - 1], isa, cpu);
                    (v, r, 1)
                }
            };
            gemm_plan(p, st, cpu, lanes, vecs, rows, prefetch).map(KernelPlan::Gemm)
        }
        (PlanKind::Row, Some(_)) if row_reduce() && shape[rank - 1] <= MAX_ACC_ROW => {
            let (jam, acc) = match choice {
                Some(PlanChoice::Row { jam, acc }) => (jam as usize, acc),
                _ => row_defaults(cpu),
            };
            Some(KernelPlan::Row(row_plan(p, st, jam, acc)))
        }
        (PlanKind::Window, Some(r)) => {
            let outer = outer_dims(shape);
            if rank <= outer || !(8..=4096).contains(&shape[rank - 1]) {
                return None;
            }
            // An unpadded pool where its row fills a vector (on shorter rows the passes over
            // the row of accumulators cost more than the scalar window: SqueezeNet's 13-wide
            // pool 136 -> 265 us, its 55-wide one 353 -> 177 us); else a padded window.
            // On a row narrower than a vector, an unpadded stride-2 pair of columns still
            // vectorises ([`window::pairs`]).
            let narrow_pairs = |w: &crate::te::Window| {
                isa.lanes() >= 8
                    && shape[rank - 1] >= isa.lanes() / 2
                    && window::pairs(
                        p,
                        w,
                        r,
                        rank as u32 - 1,
                        &Expr::Var(rank as u32 + 4),
                        st.ty.dtype,
                    )
                    .is_some()
            };
            let window = window::unpadded(&st.body, r.op, st.ty.dtype)
                .filter(|w| shape[rank - 1] >= isa.lanes() || narrow_pairs(w))
                .or_else(|| window::split(&st.body, r.op.init(st.ty.dtype), rank as u32 - 1))?;
            Some(KernelPlan::Window(WindowPlan {
                outer,
                n_outer: shape[..outer].iter().product(),
                parallel: false,
                window,
            }))
        }
        (PlanKind::Scan, Some(_)) => scan_plan(st).map(KernelPlan::Scan),
        (PlanKind::Plain, Some(r)) => {
            let outer = outer_dims(shape);
            // Vectorised only over a long enough innermost reduction: a pooling window's three
            // columns cost more as a vector (setup, horizontal reduction) than as scalars.
            let last_r = r.extents.len().saturating_sub(1);
            let simd = !matches!(choice, Some(PlanChoice::Plain { simd: false, .. }))
                && matches!(r.op, RedOp::Sum | RedOp::Max | RedOp::Min)
                && st.ty.dtype.is_float()
                && r.extents.last().is_some_and(|&e| e >= MIN_SIMD_REDUCTION)
                && contiguous_along_r(p, &st.body, last_r as u32);
            let e_last = r.extents.last().copied().unwrap_or(0);
            let chains = match choice {
                Some(PlanChoice::Plain { chains, .. }) => chains as usize,
                _ => default_chains(e_last, lanes),
            };
            // More than one chain only where every chain gets a whole vector of an f32 row; a
            // power of two (the tree that combines them halves the block).
            let chains = if simd && st.ty.dtype == DType::F32 {
                let c = chains.clamp(1, (e_last / lanes).max(1));
                1 << c.ilog2()
            } else {
                1
            };
            Some(KernelPlan::Plain(PlainPlan {
                outer,
                n_outer: shape[..outer].iter().product(),
                parallel: false,
                simd,
                chains,
            }))
        }
        _ => None,
    }
}

/// An injective stage's loop nest; `copy`: copy a guarded stride-1 f32 load in whole vectors
/// where there is one.
fn injective_plan(p: &Program, st: &Stage, cpu: &Cpu, copy: bool) -> InjectivePlan {
    let shape = &st.ty.shape;
    let rank = shape.len();
    let outer = injective_outer_dims(shape);
    let n_outer = shape[..outer].iter().product();
    // The innermost index read only as `i / W` and `i % W` (an im2col over a flattened image):
    // two loops, so no division is left per element.
    let split = if rank > outer {
        split_factor(&st.body, rank as u32 - 1, shape[rank - 1])
    } else {
        None
    };
    // A body `guard ? value : 0` with the guard affine in the innermost loop variable
    // (padding): that loop runs as three ranges (zeros, values, zeros).
    // The loop variable the guard is split for: the last dimension's, or with a split the inner
    // split variable (`rank > outer` here, so the rank is at least one).
    let v = match split {
        Some(_) => rank as u32 + 1,
        None => (rank as u32).saturating_sub(1),
    };
    let guard = if rank > outer {
        let body = match split {
            Some(w) => split_body(&st.body, rank - 1, w),
            None => st.body.clone(),
        };
        let zero = Scalar::from_f64(st.ty.dtype, 0.0);
        window::split(&body, zero, v).filter(|g| {
            // With the split, the flattened index must not appear in the guard (it is
            // defined inside the loop).
            split.is_none()
                || g.bounds
                    .iter()
                    .map(|b| &b.num)
                    .chain(&g.invariant)
                    .all(|e| !uses_var(e, rank as u32 - 1))
        })
    } else {
        None
    };
    // A guarded value that is an f32 load walking its source with stride 1 along the loop (an
    // im2col's shifted row) is copied in whole vectors.
    let copy = copy
        && guard.as_ref().is_some_and(|g| {
            st.ty.dtype == DType::F32
                && matches!(&g.value, Expr::Load(Src::Buf(b), _) | Expr::LoadFlat(Src::Buf(b), _)
                    if p.bufs[b.index()].ty.dtype == DType::F32 && !p.bufs[b.index()].packed)
                && load_coef(p, &g.value, v) == Some(1)
        });
    // (A panel-packed output, or a group member's slice, keeps the nest: the printer checks.)
    let flat = if split.is_none() && guard.is_none() && rank > outer {
        mergeable_from(p, &st.body, shape, outer)
    } else {
        None
    };
    let block = if split.is_none() && guard.is_none() && flat.is_none() {
        transpose_block(p, st, cpu, outer)
    } else {
        None
    };
    InjectivePlan {
        outer,
        n_outer,
        parallel: false,
        split,
        guard,
        copy,
        flat,
        block,
    }
}

/// The positions of the last outer dimension an injective stage over `outer` outer dimensions
/// runs together ([`InjectivePlan::block`]), or none.
///
/// A transpose: a load walks its source with stride 1 along the last outer dimension and with
/// a stride of at least a line along the last one, so a row of the output reads one element of
/// each of that many lines. The next row reads the next element of the same lines, from L1 if
/// they stayed there: an L1 of 64 sets (every x86 core's, 32 KiB 8-way or 48 KiB 12-way) keeps
/// `ways` lines of each set the stride maps them to, a stride of `k` lines `64 / gcd(k, 64)`
/// sets. Past twice that the walk misses L1 for every element, and a cache line's elements of
/// the last outer dimension (the largest power of two of them dividing it, from 4 on) run
/// together. Measured on Zen 5 (48 KiB, 12 ways), one thread: encoder512's key transpose
/// (512 lines 1 KiB apart in 4 sets) 104 -> 33 us; BERT's (128 lines 3 KiB apart, 4 sets)
/// 35 -> 15 us at two threads; ViT's (197 lines 768 B apart in 16 sets, which hold 192) 6.6 ->
/// 9.1 us, so not there: its lines mostly stay, and the run's scattered stores cost more.
fn transpose_block(p: &Program, st: &Stage, cpu: &Cpu, outer: usize) -> Option<usize> {
    const SETS: usize = 64;
    let shape = &st.ty.shape;
    let rank = shape.len();
    if outer == 0 || rank != outer + 1 || st.reduce.is_some() || shape[rank - 1] < 4 {
        return None;
    }
    let ways = (cpu.l1d / (SETS * CACHE_LINE)).max(1);
    let lines = shape[rank - 1];
    let (q, l) = (outer as u32 - 1, rank as u32 - 1);
    let mut transposed = false;
    st.body.visit(&mut |e| {
        let Expr::Load(Src::Buf(b), _) = e else {
            return;
        };
        let src = &p.bufs[b.index()];
        if src.packed || load_coef(p, e, q) != Some(1) {
            return;
        }
        let Some(along) = load_coef(p, e, l) else {
            return;
        };
        let bytes = along.unsigned_abs() as usize * src.ty.dtype.size();
        if bytes < CACHE_LINE {
            return;
        }
        let sets = if bytes.is_multiple_of(CACHE_LINE) {
            SETS / gcd(bytes / CACHE_LINE, SETS)
        } else {
            SETS
        };
        transposed |= lines > 2 * sets * ways;
    });
    if !transposed {
        return None;
    }
    let mut b = CACHE_LINE / st.ty.dtype.size().max(1);
    while b >= 4 && !shape[outer - 1].is_multiple_of(b) {
        b /= 2;
    }
    (b >= 4).then_some(b)
}

/// The stage a plan is chosen for at buffer `b`: a generated stage itself; for a library call,
/// the in-place epilogue the generated code runs after it, if any (`rest`: what of a library
/// call's finalize the call leaves, which its backend knows).
pub fn planned_stage<'p>(p: &'p Program, b: BufId, rest: &Rest<'_>) -> Option<Cow<'p, Stage>> {
    let st = p.stage(b)?;
    match &st.exec {
        Exec::Generated => Some(Cow::Borrowed(st)),
        Exec::Library { .. } => rest(p, b).map(|f| Cow::Owned(st.epilogue_stage(b, &f))),
    }
}

/// What of library stage `b`'s finalize its call leaves to run in place after it.
pub type Rest<'a> = dyn Fn(&Program, BufId) -> Option<Expr> + 'a;

/// The plans of every stage of `p` for `target`, indexed by buffer, each with one plan per
/// variant of [`Isa::ALL`] (none for buffers that are not stages, or that a library call
/// computes whole: `rest` says what of a library call's finalize is left). A stage's own
/// choice (`Stage::choice`) is realised where its kind fits; with `seed`, every other stage
/// draws a kind (its default half of the time, else any kind that fits it) and a point of that
/// kind's space (tests of the whole space: results must not change, only speed), from the
/// seed, its buffer and the variant.
pub fn plan_program(
    p: &Program,
    target: &Target,
    rest: &Rest<'_>,
    seed: Option<u64>,
) -> Vec<Vec<KernelPlan>> {
    let cpu = &*target.host_cpu();
    p.buf_ids()
        .map(|b| match planned_stage(p, b, rest) {
            Some(st) => {
                // The kind is drawn once for the stage (the same in every variant where the
                // same kinds fit): its default half of the time, else any kind that fits.
                let stage_seed =
                    seed.map(|s| s ^ u64::from(b.0).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let pick = stage_seed.map(|s| {
                    let mut d = Draw::new(s);
                    (d.below(2) == 1, d.below(1 << 16) as usize)
                });
                Isa::ALL
                    .iter()
                    .map(|&isa| {
                        let drawn = || {
                            let (any, k) = pick?;
                            let kinds = kinds_that_fit(p, &st, isa, cpu);
                            let kind = if any {
                                kinds[k % kinds.len()]
                            } else {
                                kinds[0]
                            };
                            let mut draw = Draw::new(
                                stage_seed?
                                    ^ (isa.index() as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03),
                            );
                            Some(random_choice(kind, &mut draw))
                        };
                        plan_stage(p, &st, isa, cpu, st.choice.or_else(drawn))
                    })
                    .collect()
            }
            None => Vec::new(),
        })
        .collect()
}

/// The widths in columns of the register tile of stage `b` in every variant, if it is
/// register-blocked in all of them (groups make their instances whole tiles).
pub fn tile_widths(p: &Program, b: BufId) -> Option<Vec<usize>> {
    let plans = p.plans.get(b.index())?;
    if plans.is_empty() {
        return None;
    }
    plans.iter().map(KernelPlan::tile_width).collect()
}

/// The library GEMM calls of `p` whose blocks go to the thread pool: those whose work pays for
/// the fork ([`worth_parallel`], the rule of the generated stages' thread split).
pub fn parallel_calls(p: &Program) -> Vec<BufId> {
    p.buf_ids()
        .filter(|&b| {
            p.stage(b).is_some_and(|st| {
                matches!(
                    st.exec,
                    Exec::Library {
                        call: crate::te::LibraryCall::Gemm,
                        ..
                    }
                ) && worth_parallel(p, st)
            })
        })
        .collect()
}

/// Weight bytes above which a smaller stage is still split across threads: streaming weights is
/// memory-bound, and two cores fetch them faster than one.
const PARALLEL_WEIGHT_BYTES: usize = 256 << 10;

/// Whether a stage is worth splitting across threads (a `parallel_for` costs a few microseconds).
pub fn worth_parallel(p: &Program, st: &Stage) -> bool {
    st.work() >= PARALLEL_WORK
        || (st.work() >= PARALLEL_WORK / 8 && const_bytes(p, st) >= PARALLEL_WEIGHT_BYTES)
}

/// Bytes of constants a stage reads.
fn const_bytes(p: &Program, st: &Stage) -> usize {
    let mut srcs = st.body.sources();
    srcs.sort();
    srcs.dedup();
    srcs.iter()
        .filter_map(|s| match s {
            Src::Buf(b) if matches!(p.bufs[b.index()].kind, BufKind::Const(_)) => {
                Some(p.bufs[b.index()].ty.bytes())
            }
            _ => None,
        })
        .sum()
}

/// Work (body evaluations) above which a stage's tasks are handed to `parallel_for`: with the
/// pool's workers spinning between stages a split costs about a microsecond, less than 16K
/// evaluations take (docs/PERFORMANCE.md has the measurements).
const PARALLEL_WORK: usize = 1 << 14;

/// Largest row of accumulators kept on the stack by the row-reduction schedule.
pub(crate) const MAX_ACC_ROW: usize = 4096;

/// How many leading output dimensions form the flattened outer (parallel) loop.
pub(crate) fn outer_dims(shape: &[usize]) -> usize {
    let mut prod = 1;
    for (k, &d) in shape.iter().enumerate() {
        prod *= d;
        if prod >= 64 {
            return k + 1;
        }
    }
    shape.len()
}

/// [`outer_dims`] for an injective stage: a last dimension of 16 or more stays an inner loop
/// (contiguous, vectorisable, no division per element), unless it is the only dimension.
pub(crate) fn injective_outer_dims(shape: &[usize]) -> usize {
    let rank = shape.len();
    let nd = outer_dims(shape);
    if rank >= 2 && shape[rank - 1] >= 16 {
        nd.min(rank - 1)
    } else {
        nd
    }
}

pub(crate) fn guard(body: &Expr, op: RedOp, dtype: DType, v: u32, rank: usize) -> Option<Guard> {
    let Expr::Select(c, a, b) = body else {
        return None;
    };
    let Expr::Const(z) = b.as_ref() else {
        return None;
    };
    if *z != op.init(dtype) && !(op == RedOp::Sum && z.is_zero()) {
        return None;
    }
    let mut cs = Vec::new();
    conjuncts(c, &mut cs);
    let mut g = Guard {
        lo: vec![],
        hi: vec![],
        hoisted: vec![],
        value: (**a).clone(),
    };
    let zero: Vec<Expr> = (0..rank)
        .map(|k| {
            if k as u32 == v {
                Expr::i(0)
            } else {
                Expr::var(k)
            }
        })
        .collect();
    for t in cs {
        let Expr::Bin(cmp @ (BinOp::Ge | BinOp::Gt | BinOp::Lt | BinOp::Le), l, r) = &t else {
            if uses_var(&t, v) {
                return None;
            }
            g.hoisted.push(t);
            continue;
        };
        let d = (**l).clone().sub((**r).clone());
        match coef(&d, v) {
            Some(0) if !uses_var(&d, v) => g.hoisted.push(t.clone()),
            Some(1) => {
                // v + d0 (cmp) 0
                let neg = Expr::i(0).sub(d.subst_vars(&zero));
                match cmp {
                    BinOp::Ge => g.lo.push(neg),
                    BinOp::Gt => g.lo.push(neg.add(Expr::i(1))),
                    BinOp::Lt => g.hi.push(neg),
                    _ => g.hi.push(neg.add(Expr::i(1))),
                }
            }
            Some(-1) => {
                // d0 - v (cmp) 0
                let d0 = d.subst_vars(&zero);
                match cmp {
                    BinOp::Ge => g.hi.push(d0.add(Expr::i(1))),
                    BinOp::Gt => g.hi.push(d0),
                    BinOp::Lt => g.lo.push(d0.add(Expr::i(1))),
                    _ => g.lo.push(d0),
                }
            }
            _ => return None,
        }
    }
    Some(g)
}

/// The scan plan of a cumulative reduction (CumSum, as `ops::reduce::cumulative` lowers it):
/// one reduction variable as long as output dimension `a`, a body `take ? value : init` with
/// `take` comparing the reduction variable with `i_a` (`r0 <= i_a`: inclusive, forwards), and
/// `value` free of `i_a`. `None` for any other reduction, or one whose accumulators (a position
/// of every dimension after `a`) would not fit on the stack.
fn scan_plan(st: &Stage) -> Option<ScanPlan> {
    let r = st.reduce.as_ref()?;
    let shape = &st.ty.shape;
    if r.extents.len() != 1 {
        return None;
    }
    let Expr::Select(take, value, other) = &st.body else {
        return None;
    };
    if **other != Expr::Const(r.op.init(st.ty.dtype)) {
        return None;
    }
    let Expr::Bin(cmp, j, i) = &**take else {
        return None;
    };
    let (Expr::RVar(0), &Expr::Var(a)) = (&**j, &**i) else {
        return None;
    };
    let (reverse, exclusive) = match cmp {
        BinOp::Le => (false, false),
        BinOp::Lt => (false, true),
        BinOp::Ge => (true, false),
        BinOp::Gt => (true, true),
        _ => return None,
    };
    let axis = a as usize;
    let inner: usize = shape.get(axis + 1..)?.iter().product();
    if shape.get(axis) != Some(&r.extents[0])
        || uses_var(value, a)
        || inner == 0
        || inner * st.ty.dtype.size() > MAX_ACC_BYTES
    {
        return None;
    }
    let value = value.rewrite(&mut |x| matches!(x, Expr::RVar(0)).then(|| Expr::var(axis)));
    Some(ScanPlan {
        axis,
        outer: axis,
        n_outer: shape[..axis].iter().product(),
        parallel: false,
        reverse,
        exclusive,
        value,
    })
}

/// Shortest innermost reduction a plain schedule vectorises (`#pragma omp simd`).
pub(crate) const MIN_SIMD_REDUCTION: usize = 16;

/// Most independent accumulators of a vectorised reduction without a choice: four vectors
/// cover the add's latency (3-4 cycles) at one add a cycle.
pub(crate) const CHAINS: usize = 4;

/// The accumulators of a vectorised reduction over `e` elements of `lanes`-wide vectors
/// without a choice: the most (up to [`CHAINS`], a power of two) whose block of `chains`
/// vectors the row fills at least twice; one for a shorter row, where the tree that combines
/// the chains would cost what they save. A softmax's row of 512 keys: four chains, 8 blocks.
pub(crate) fn default_chains(e: usize, lanes: usize) -> usize {
    let mut c = CHAINS;
    while c > 1 && e < 2 * c * lanes {
        c /= 2;
    }
    c
}

/// Largest accumulator block (bytes) kept on the stack.
pub(crate) const MAX_ACC_BYTES: usize = 64 * 1024;

/// The row-reduction plan of `st` (see [`RowPlan`]).
fn row_plan(p: &Program, st: &Stage, max_jam: usize, acc: u32) -> RowPlan {
    let shape = &st.ty.shape;
    let rank = shape.len();
    let v = rank - 1;
    let r = st.reduce.as_ref().expect("a reduction");
    let guard = guard(&st.body, r.op, st.ty.dtype, v as u32, rank);
    let value = guard.as_ref().map_or(&st.body, |g| &g.value);
    // Loads that walk the row: the jammed dimension must not appear in them.
    let mut row_loads = Vec::new();
    value.visit(&mut |e| {
        if let Expr::Load(Src::Buf(b), idx) = e {
            let strides = strides(&p.bufs[b.index()].ty.shape);
            let c = idx.iter().zip(&strides).try_fold(0i64, |acc, (ie, &s)| {
                Some(acc + coef(ie, v as u32)? * s as i64)
            });
            if c == Some(1) {
                row_loads.push(e.clone());
            }
        }
    });
    let row_bytes = shape[v] * st.ty.dtype.size();
    let mut jam = None;
    for k in (0..v).rev() {
        let free = row_loads.iter().all(|l| !uses_var(l, k as u32))
            && guard.as_ref().is_none_or(|g| {
                g.lo.iter()
                    .chain(&g.hi)
                    .chain(&g.hoisted)
                    .all(|e| !uses_var(e, k as u32))
            });
        if !free || shape[k] < 2 {
            continue;
        }
        if let Some(j) = (2..=max_jam)
            .rev()
            .find(|j| shape[k].is_multiple_of(*j) && j * row_bytes <= MAX_ACC_BYTES)
        {
            jam = Some((k, j));
            break;
        }
    }
    let outer: Vec<usize> = (0..v).collect();
    let jn = jam.map_or(1, |(_, j)| j);
    // Tiles of the row small enough that jn rows of accumulators fit the schedule's bytes.
    let per_tile = ((acc as usize / (jn * st.ty.dtype.size())).max(16) / 16) * 16;
    let tile = shape[v].min(per_tile);
    let n_tiles = shape[v].div_ceil(tile);
    let n_outer = outer
        .iter()
        .map(|&k| {
            if jam.is_some_and(|(jk, _)| jk == k) {
                shape[k] / jn
            } else {
                shape[k]
            }
        })
        .product::<usize>()
        * n_tiles;
    RowPlan {
        v,
        jam,
        max_jam,
        acc,
        tile,
        outer,
        n_outer,
        parallel: false,
        guard,
    }
}

/// The row loads whose tile ahead a task prefetches while it computes its own: those of
/// unpacked tensors that stream (at least the target's L2 per core: their next tile then comes
/// from L3 or memory unless it is fetched ahead), when the tile's rows of them over the whole
/// reduction (`points` steps, `tw` columns) fit half of the L1d, so that the tile being
/// computed stays. A pointwise convolution over a 112x112 image reads 32 rows of 64 pixels per
/// tile; the hardware's prefetchers follow few of those streams at once and restart at every
/// page.
fn prefetched(p: &Program, cpu: &Cpu, points: usize, row_loads: &[Expr], tw: usize) -> Vec<Expr> {
    let mut streams: Vec<Expr> = Vec::new();
    for e in row_loads {
        let (Expr::Load(s, _) | Expr::LoadFlat(s, _)) = e else {
            continue;
        };
        let Src::Buf(b) = s else { continue };
        let b = &p.bufs[b.index()];
        if !b.packed && b.ty.bytes() >= cpu.l2 && !streams.contains(e) {
            streams.push(e.clone());
        }
    }
    if points * tw * 4 * streams.len() > cpu.l1d / 2 {
        return Vec::new();
    }
    streams
}

/// The register-blocked plan of `st`, if it is a contraction-like f32 sum (see [`GemmPlan`]).
fn gemm_plan(
    p: &Program,
    st: &Stage,
    cpu: &Cpu,
    lanes: usize,
    vecs: usize,
    rows: usize,
    prefetch: usize,
) -> Option<GemmPlan> {
    let r = st.reduce.as_ref()?;
    if r.op != RedOp::Sum || st.ty.dtype != DType::F32 {
        return None;
    }
    let shape = &st.ty.shape;
    let v = shape.len() - 1;
    let mut body_ok = true;
    st.body.visit(&mut |e| {
        body_ok &= !matches!(
            e,
            Expr::Acc
                | Expr::Bin(BinOp::Max | BinOp::Min, ..)
                | Expr::Un(UnOp::Erf | UnOp::Exp | UnOp::ExpNonPos, _)
        )
    });
    if shape[v] < lanes || !body_ok || !vectorizable(p, &st.body, v as u32) {
        return None;
    }
    let mut row_loads = Vec::new();
    st.body.visit(&mut |e| {
        if matches!(e, Expr::Load(..) | Expr::LoadFlat(..)) && load_coef(p, e, v as u32) == Some(1)
        {
            row_loads.push(e.clone());
        }
    });
    // The knobs, legalised: no wider than the row, rows that divide a dimension.
    let vecs = vecs.min(shape[v] / lanes).max(1);
    // The rows: the largest count up to the knob's that divides the dimension, unless that is
    // under half the knob's (a prime count of rows, such as a transformer's 197 tokens), where
    // blocks of the knob's rows run with a shorter last block.
    let mut jam = None;
    let mut jam_rem = 0;
    for k in (0..v).rev() {
        if shape[k] < 2 || row_loads.iter().any(|l| uses_var(l, k as u32)) {
            continue;
        }
        match (2..=rows).rev().find(|j| shape[k].is_multiple_of(*j)) {
            Some(j) if 2 * j >= rows => jam = Some((k, j)),
            _ if shape[k] >= rows && rows >= 2 => {
                jam = Some((k, rows));
                jam_rem = shape[k] % rows;
            }
            Some(j) => jam = Some((k, j)),
            None => continue,
        }
        break;
    }
    // Column tiles outermost among the jammed rows: one tile of the row-walking operand stays
    // in cache while every block of rows uses it.
    let mut outer: Vec<usize> = (0..v)
        .filter(|&k| jam.is_none_or(|(jk, _)| jk != k))
        .collect();
    if let Some((jk, _)) = jam {
        outer.push(jk);
    }
    let jn = jam.map_or(1, |(_, j)| j);
    let n_tiles = shape[v].div_ceil(vecs * lanes);
    let n_outer = outer
        .iter()
        .map(|&k| {
            if jam.is_some_and(|(jk, _)| jk == k) {
                shape[k].div_ceil(jn)
            } else {
                shape[k]
            }
        })
        .product::<usize>()
        * n_tiles;
    // Prefetches reach `prefetch` tiles ahead (past the row's end they fetch the rows after
    // it; a prefetch never faults).
    let streams = if prefetch > 0 {
        prefetched(p, cpu, r.extents.iter().product(), &row_loads, vecs * lanes)
    } else {
        Vec::new()
    };
    Some(GemmPlan {
        v,
        jam,
        jam_rem,
        lanes,
        vecs,
        rows,
        outer,
        n_outer,
        parallel: false,
        // No streams, no distance: the plan's text says `prefetch=0`.
        prefetch_tiles: if streams.is_empty() { 0 } else { prefetch },
        prefetch: streams,
    })
}
