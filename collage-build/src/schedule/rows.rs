//! Row groups (GraphTurbo §3–4 over Welder's connected tiles): chains of stages of any length,
//! split along the leading output dimensions they share, run as one loop of instances.
//!
//! Welder's observation is that a chain of memory-bound operators — the scores of an attention
//! and the three passes of its softmax, the mean, variance and normalisation of a LayerNorm —
//! need not send their intermediates to memory: connected at a level of the hierarchy where one
//! tile's data fits, each intermediate is written and read back while it is still in the cache.
//! Here the tile is a block of positions of the dimensions every member iterates outermost
//! (batch, head and query rows of an attention; rows of tokens of a LayerNorm): a member reads
//! the members before it only at its own position of those dimensions (`x[i0, i1, i2, r]` for an
//! output `[i0, i1, i2, ..]`), so one instance runs every member over its block alone, in order.
//! A member's output that only members read then lives in a per-thread scratch slot of one
//! instance ([`RowGroup::scratch`]), never in a full-size buffer.
//!
//! Split information: the block is a multiple of every member's granule in every variant (a
//! register-blocked member's rows per tile, [`crate::te::RowTrips`]). Tile propagation gives what
//! one instance reads; a stage joins a group only when the instance step of the smallest block —
//! the scratch slots, the members' other operands over the block, their outputs — fits half of
//! the build target's L2 (a matmul whose whole weight every block would read again stays out),
//! or fits twice L2 and pays by Welder's traffic model ([`pays`]: the scratch's round trip to
//! memory it saves outweighs what its instances read again from the last-level cache — an
//! expansion at 112x112 whose 800 KB input every block of channels reads).
//! Among the blocks of a power-of-two count of granules whose step fits and that leave at least
//! [`MIN_INSTANCES`](super::group::MIN_INSTANCES) instances (all that fit when none does), the
//! block is the largest whose scratch slots fit half of L1d — the intermediates meet their
//! readers in L1 — else the smallest (they meet in L2, the least of them live);
//! `--schedule-seed` draws it among those that fit. Binding: the instances go in contiguous
//! shares to `min(instances, 32)` slots (scratch met in L2: `min(instances, cores)`, a slot
//! per core reused instance after instance), one `parallel_for` over the slots; the seed draws the
//! slots too (any count from one: fewer slots, less scratch, fewer threads).
use crate::fusion::tile::propagate;
use crate::schedule::kernel::Draw;
use crate::target::Target;
use crate::te::{BufId, Exec, Expr, Isa, Program, RowGroup, Src};

use super::group::{lcm, slots, MIN_INSTANCES};

/// The leading dimensions at which stage `b` reads buffer `a` at its own position: the most `k`
/// such that every load of `a` in `b` has `i0, .., i(k-1)` as its first indices over equal
/// extents (0 when a flat load reads it).
fn aligned(p: &Program, a: BufId, b: BufId) -> usize {
    let (Some(sb), sa) = (p.stage(b), &p.bufs[a.index()].ty.shape) else {
        return 0;
    };
    // The loads index `a`'s buffer; its stage iterates its own shape (a reshape view of it):
    // positions agree where all three shapes do.
    let own = p.stage(a).map_or(sa, |st| &st.ty.shape);
    let most = sa
        .iter()
        .zip(&sb.ty.shape)
        .zip(own)
        .take_while(|((x, y), z)| x == y && y == z)
        .count();
    let mut k = most;
    let mut any = false;
    // `i_j`, or `i_j + r` over a reduction of extent 1 (a depthwise convolution's channel
    // within its group).
    let unit = |r: &u32| {
        sb.reduce
            .as_ref()
            .is_some_and(|red| red.extents.get(*r as usize) == Some(&1))
    };
    let at = |i: &Expr, j: usize| match i {
        Expr::Var(v) => *v as usize == j,
        Expr::Bin(crate::te::BinOp::Add, l, r) => match (&**l, &**r) {
            (Expr::Var(v), Expr::RVar(u)) | (Expr::RVar(u), Expr::Var(v)) => {
                *v as usize == j && unit(u)
            }
            _ => false,
        },
        _ => false,
    };
    let mut visit = |e: &Expr| match e {
        Expr::Load(Src::Buf(x), idx) if *x == a => {
            any = true;
            let lead = idx
                .iter()
                .enumerate()
                .take_while(|(j, i)| at(i, *j))
                .count();
            k = k.min(lead);
        }
        Expr::LoadFlat(Src::Buf(x), _) if *x == a => k = 0,
        _ => {}
    };
    sb.body.visit(&mut visit);
    if let Some(f) = sb.reduce.as_ref().and_then(|r| r.finalize.as_ref()) {
        f.visit(&mut visit);
    }
    if any {
        k
    } else {
        0
    }
}

/// Whether stage `b` may be a member of a row group at all: a generated stage with a plan in
/// every variant, in no panel group or band group, with no empty dimension (nothing to split).
fn candidate(p: &Program, b: BufId) -> bool {
    p.stage(b)
        .is_some_and(|st| st.exec == Exec::Generated && !st.ty.shape.contains(&0))
        && p.plans[b.index()].len() == Isa::ALL.len()
        && !p.groups.iter().any(|g| g.producer == b || g.consumer == b)
        && p.row_group_of(b).is_none()
        && !p.bufs[b.index()].packed
}

/// The granules of `stages` split along `dims` leading dimensions, every member's in every
/// variant, as the least common multiple of those within a row (`row`, the last dimension's
/// extent) and that of the row and those larger; `None` when a member's plan cannot be split
/// there.
fn granules(p: &Program, stages: &[BufId], dims: usize) -> Option<(usize, usize)> {
    let (mut small, mut large) = (1, 1);
    for &b in stages {
        let shape = &p.stage(b).expect("a member is a stage").ty.shape;
        for plan in &p.plans[b.index()] {
            let t = plan.row_trips(shape, dims)?;
            if t.granule <= t.row {
                small = lcm(small, t.granule);
            } else {
                large = lcm(large, t.granule);
            }
            large = lcm(large, t.row);
        }
    }
    Some((small, large))
}

/// Instances of `block` positions over `rows` positions in rows of `row`: chunks of every row
/// below a row, else whole rows.
fn instances(rows: usize, row: usize, block: usize) -> usize {
    if block < row {
        rows / row * row.div_ceil(block)
    } else {
        rows.div_ceil(block)
    }
}

/// The blocks a group of granules `(small, large)` may take, smallest first: chunks of a row
/// (powers of two times `small`, when no granule is larger than a row), then whole rows (powers
/// of two times `large`).
fn block_sizes(rows: usize, row: usize, (small, large): (usize, usize)) -> Vec<usize> {
    let mut v = Vec::new();
    if large == row {
        let mut b = small;
        while b < row {
            v.push(b);
            b *= 2;
        }
    }
    let mut b = large;
    loop {
        v.push(b);
        if b >= rows {
            break;
        }
        b *= 2;
    }
    v
}

/// The output box of a block of `block` positions of the first `dims` dimensions of `shape`:
/// the block's rows from the innermost of those dimensions outwards, the rest whole.
fn block_tile(shape: &[usize], dims: usize, block: usize) -> Vec<usize> {
    let mut tile = shape.to_vec();
    let mut left = block;
    for k in (0..dims).rev() {
        tile[k] = left.min(shape[k]).max(1);
        left = left.div_ceil(shape[k]);
    }
    tile
}

/// The members' outputs read only by members (and no graph output): the scratch.
fn scratch(p: &Program, stages: &[BufId], readers: &[Vec<BufId>]) -> Vec<BufId> {
    stages
        .iter()
        .copied()
        .filter(|&b| {
            !p.outputs.contains(&b)
                && !readers[b.index()].is_empty()
                && readers[b.index()].iter().all(|r| stages.contains(r))
        })
        .collect()
}

/// Bytes one instance of `block` positions keeps live: the scratch slots, and each member's
/// other operands over the block and its output when it is not scratch.
fn step_bytes(p: &Program, stages: &[BufId], dims: usize, block: usize, sc: &[BufId]) -> usize {
    let mut bytes = 0;
    for &b in stages {
        let st = p.stage(b).expect("a member is a stage");
        let tile = block_tile(&st.ty.shape, dims, block);
        let out: usize = tile.iter().product::<usize>() * st.ty.dtype.size();
        bytes += out;
        bytes += propagate(p, st, &tile, None)
            .iter()
            .filter(|r| !sc.contains(&r.buf))
            .map(|r| r.bytes())
            .sum::<usize>();
    }
    bytes
}

/// Bytes from memory worth as much time as one byte read again from the last-level cache:
/// the ratio of the two bandwidths a core sees (measured on Zen 4 and Sapphire Rapids: 41 and
/// 110 GB/s for two threads of one core, 2.7; 2.5 rounds it down).
pub const MEMORY_PER_CACHE: f64 = 2.5;

/// Bytes the members' operands other than members are read beyond once, over `instances`
/// instances of `block` positions: an operand that every instance reads whole (the input of an
/// expansion split along its output channels) is read again by each.
fn reread_bytes(p: &Program, stages: &[BufId], dims: usize, block: usize) -> usize {
    let shape = &p.stage(stages[0]).expect("a member is a stage").ty.shape;
    let rows: usize = shape[..dims].iter().product();
    let n = instances(rows, shape[dims - 1], block);
    let mut bytes = 0;
    for &b in stages {
        let st = p.stage(b).expect("a member is a stage");
        let tile = block_tile(&st.ty.shape, dims, block);
        for r in propagate(p, st, &tile, None) {
            if stages.contains(&r.buf) {
                continue;
            }
            let whole = p.bufs[r.buf.index()].ty.bytes();
            bytes += (r.bytes() * n).saturating_sub(whole);
        }
    }
    bytes
}

/// Whether a group whose step at `block` exceeds half of L2 (but fits twice L2) still pays, by
/// Welder's traffic model: its scratch's round trip, which it saves, costs more than reading
/// the operands that every instance reads again from the last-level cache. A scratch tensor
/// larger than half of the last-level cache makes its round trip through memory
/// ([`MEMORY_PER_CACHE`] cache bytes a byte); a smaller one meets its reader in that cache, at
/// the rate of the bytes read again (MobileNetV2's 4.8 MB expansion at 112x112 in a 32 MB
/// L3: its 24 channel blocks read the 800 KB input again, 19 MB, for 9.6 MB saved).
fn pays(
    p: &Program,
    stages: &[BufId],
    dims: usize,
    block: usize,
    sc: &[BufId],
    last_level: usize,
) -> bool {
    let saved: f64 = sc
        .iter()
        .map(|&b| {
            let through_memory = p.bufs[b.index()].ty.bytes() > last_level / 2;
            let rate = if through_memory {
                MEMORY_PER_CACHE
            } else {
                1.0
            };
            saved_bytes(p, &[b]) as f64 * rate
        })
        .sum();
    saved > reread_bytes(p, stages, dims, block) as f64
}

/// Memory traffic scratch buffers `sc` save against their stages apart: each written to memory
/// and read back.
fn saved_bytes(p: &Program, sc: &[BufId]) -> usize {
    sc.iter().map(|&b| 2 * p.bufs[b.index()].ty.bytes()).sum()
}

/// The row groups of planned program `p` for `target` (see the module's text); `seed` draws
/// each group's block among those that fit.
pub fn plan_row_groups(p: &Program, target: &Target, seed: Option<u64>) -> Vec<RowGroup> {
    let cpu = target.host_cpu();
    let (cap, near, most) = (cpu.l2 / 2, cpu.l1d / 2, cpu.l2 * 2);
    let last_level = cpu.l3.max(cpu.l2);
    let readers = p.readers();
    // Open groups: members in order and the dimensions they share.
    let mut open: Vec<(Vec<BufId>, usize)> = Vec::new();
    let mut of: Vec<Option<usize>> = vec![None; p.bufs.len()];
    let fits = |stages: &[BufId], dims: usize| -> bool {
        let Some(gs) = granules(p, stages, dims) else {
            return false;
        };
        let shape = &p.stage(stages[0]).expect("a member is a stage").ty.shape;
        let rows: usize = shape[..dims].iter().product();
        let first = block_sizes(rows, shape[dims - 1], gs)[0];
        // A group of one instance is none (a member joining at the batch dimension alone).
        if instances(rows, shape[dims - 1], first) < 2 {
            return false;
        }
        let sc = scratch(p, stages, &readers);
        let step = step_bytes(p, stages, dims, first, &sc);
        step <= cap || (step <= most && pays(p, stages, dims, first, &sc, last_level))
    };
    for b in p.buf_ids() {
        if !candidate(p, b) {
            continue;
        }
        let st = p.stage(b).expect("a candidate is a stage");
        let mut reads: Vec<BufId> = st.reads().collect();
        reads.sort_unstable();
        reads.dedup();
        // The groups `b` reads members of, and the dimensions it shares with each.
        let mut best: Option<(usize, usize)> = None;
        let mut seen: Vec<usize> = Vec::new();
        for &a in &reads {
            let Some(gi) = of[a.index()] else { continue };
            if seen.contains(&gi) {
                continue;
            }
            seen.push(gi);
            let (members, dims) = &open[gi];
            let dims = reads
                .iter()
                .filter(|x| members.contains(x))
                .map(|&x| aligned(p, x, b))
                .fold(*dims, usize::min);
            if dims == 0 {
                continue;
            }
            // Stages between the group's first member and `b` that are not members run before
            // the group: they must read none of its members.
            let first = members[0].index();
            let between_ok = (first + 1..b.index()).all(|x| {
                let x = BufId::new(x);
                members.contains(&x)
                    || p.stage(x)
                        .is_none_or(|sx| sx.reads().all(|r| !members.contains(&r)))
            });
            let mut with: Vec<BufId> = members.clone();
            with.push(b);
            if between_ok && fits(&with, dims) && best.is_none_or(|(_, d)| dims > d) {
                best = Some((gi, dims));
            }
        }
        match best {
            Some((gi, dims)) => {
                open[gi].0.push(b);
                open[gi].1 = dims;
                of[b.index()] = Some(gi);
            }
            None => {
                of[b.index()] = Some(open.len());
                open.push((vec![b], st.ty.rank()));
            }
        }
    }
    let mut draw = seed.map(|s| Draw::new(s ^ 0x726f_7773));
    // The slots from a stream of their own, so that a seed draws the blocks it drew before.
    let mut draw_slots = seed.map(|s| Draw::new(s ^ 0x0073_6c6f_7473));
    let mut groups = Vec::new();
    for (stages, dims) in open {
        if stages.len() < 2 {
            continue;
        }
        let Some(gs) = granules(p, &stages, dims) else {
            continue;
        };
        let shape = &p.stage(stages[0]).expect("a member is a stage").ty.shape;
        let rows: usize = shape[..dims].iter().product();
        let row = shape[dims - 1];
        let sc = scratch(p, &stages, &readers);
        // A group keeps at least one intermediate out of memory, or it is none.
        if sc.is_empty() {
            continue;
        }
        // The blocks whose step fits, else those whose traffic pays (see `pays`).
        let sizes = block_sizes(rows, row, gs);
        let mut blocks: Vec<usize> = sizes
            .iter()
            .copied()
            .take_while(|&b| step_bytes(p, &stages, dims, b, &sc) <= cap)
            .collect();
        if blocks.is_empty() {
            blocks = sizes
                .into_iter()
                .take_while(|&b| {
                    step_bytes(p, &stages, dims, b, &sc) <= most
                        && pays(p, &stages, dims, b, &sc, last_level)
                })
                .collect();
        }
        // Enough instances for every core of a larger machine, where the granule allows.
        let many: Vec<usize> = blocks
            .iter()
            .copied()
            .filter(|&b| instances(rows, row, b) >= MIN_INSTANCES)
            .collect();
        let blocks = if many.is_empty() { blocks } else { many };
        let Some(&smallest) = blocks.first() else {
            continue;
        };
        let slots_bytes = |b: usize| -> usize {
            sc.iter()
                .map(|&x| {
                    let buf = &p.bufs[x.index()];
                    buf.ty.numel() / rows * b * buf.ty.dtype.size()
                })
                .sum()
        };
        // The scratch meets its readers in L1 where one instance's slots fit half of it (the
        // largest such block), else in L2 (the smallest block: the least live).
        let block = match draw.as_mut() {
            Some(d) => blocks[d.below(blocks.len() as u64) as usize],
            None => blocks
                .iter()
                .copied()
                .rfind(|&b| slots_bytes(b) <= near)
                .unwrap_or(smallest),
        };
        let instances = instances(rows, row, block);
        if instances < 2 {
            continue;
        }
        // Scratch met in L2 is a large share of it: one slot per core of the target, which
        // its thread reuses instance after instance (fresh slots per instance would write
        // their lines back to memory); scratch met in L1 takes a slot per instance up to
        // MAX_SLOTS, for the threads of a larger machine.
        let bound = if slots_bytes(block) > near {
            instances.min(cpu.cores.max(1))
        } else {
            instances
        };
        let slots = slots(bound, draw_slots.as_mut());
        groups.push(RowGroup {
            stages,
            dims,
            rows,
            row,
            block,
            instances,
            slots,
            scratch: sc,
            band: None,
        });
    }
    groups
}

/// What `collage explain` shows of a row group: the block of one instance, the bytes its step
/// keeps live, the level its scratch meets at, the memory traffic the scratch saves, and a band
/// group's recomputed rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowGroupInfo {
    /// The first member's output extents per instance.
    pub tile: Vec<usize>,
    /// Bytes one instance keeps live (scratch slots, the members' other operands over the
    /// block, their outputs).
    pub footprint: usize,
    /// Where a member's scratch is read back: `L1` when one instance's slots fit half of L1d,
    /// else `L2`.
    pub level: super::Level,
    /// Bytes of scratch one instance writes and reads (every scratch buffer's slot).
    pub slot_bytes: usize,
    /// Memory traffic the scratch saves against the members apart: each scratch buffer
    /// written to memory and read back.
    pub saved: usize,
    /// A band group's rows of its first member computed over all bands, and the image's rows
    /// (their excess is the recomputed halo); `None` for a split along leading dimensions.
    pub recomputed: Option<(usize, usize)>,
}

/// [`RowGroupInfo`] of `g` in `p` for `target`.
pub fn describe(p: &Program, g: &RowGroup, target: &Target) -> RowGroupInfo {
    let shape = &p.stage(g.stages[0]).expect("a member is a stage").ty.shape;
    let (tile, foot, recomputed) = match &g.band {
        Some(band) => {
            let (tile, foot, rows) = super::bands::describe(p, g, band);
            (tile, foot, Some(rows))
        }
        None => (
            block_tile(shape, g.dims, g.block),
            step_bytes(p, &g.stages, g.dims, g.block, &g.scratch),
            None,
        ),
    };
    let cpu = target.host_cpu();
    let slot_bytes = g
        .scratch
        .iter()
        .map(|&b| g.slot_bytes(&p.bufs[b.index()]))
        .sum();
    RowGroupInfo {
        tile,
        footprint: foot,
        level: if slot_bytes <= cpu.l1d / 2 {
            super::Level::L1
        } else {
            super::Level::L2
        },
        slot_bytes,
        saved: saved_bytes(p, &g.scratch),
        recomputed,
    }
}
