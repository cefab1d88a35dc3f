//! The channel-vectorised plan (`te::ChannelPlan`): contractions over short rows vectorised along
//! their output channels; `codegen/c/channel.rs` prints it.
use crate::fusion::tile::best_of;
use crate::schedule::analysis::{
    channel_axis, load_coef, ranged_channel_axis, split_factor, vectorizable, NARROW_TILE,
    NARROW_VECTOR,
};
use crate::schedule::kernel::gemm_defaults;
use crate::target::Cpu;
use crate::te::{ChannelPlan, Expr, Isa, Program, Stage};

/// The most accumulator vectors of a register tile with 32 vector registers (AVX-512), and with
/// 16 (AVX2, SSE): the rest hold the weight vectors and a broadcast.
const ACCS_32: usize = 24;
const ACCS_16: usize = 12;

/// Reduction block (rows of `w'`) without a schedule: with a tile of 64 channels, 64 KiB of
/// weights per block.
const KC: usize = 256;

/// Tasks a stage is split into at least (when it has that many column blocks): the
/// parallelism of a few cores.
const MIN_TASKS: usize = 16;

/// The share of the L2 one task's step may keep (its block of the reduction: the columns'
/// inputs, the block of weights, the accumulated outputs): the other half holds the next
/// step's lines as they stream in and the outputs on their way out.
const L2_SHARE: usize = 2;

/// The channel-vectorised plan of `st` for `lanes` f32 lanes, if it contracts along a channel
/// axis ([`channel_axis`]); `knobs` (vectors of channels, columns per tile, reduction block,
/// column groups), when given, replace the defaults, each legalised. Without knobs, the column
/// groups (the thread split) come from the traffic model ([`column_groups`]).
pub(crate) fn channel_plan(
    p: &Program,
    st: &Stage,
    isa: Isa,
    cpu: &Cpu,
    knobs: Option<(u8, u8, u16, u16)>,
) -> Option<ChannelPlan> {
    // An f32 sum over one reduction variable (blocked), checked by `channel_axis`; the
    // weight transposed (its channels contiguous).
    let c = channel_axis(p, st)?;
    plan_along(p, st, c, isa, cpu, knobs)
}

/// The channel-vectorised plan of a stage of a program served over a range of sizes
/// ([`ranged_channel_axis`]; its shape the largest size's), with the default knobs. The
/// reduction block is of the first reduction variable (the input channels), the others run
/// whole inside it; the column groups are a few register tiles each (the traffic model reads the largest size only, and
/// the row is shorter at run time).
pub(crate) fn ranged_channel_plan(
    p: &Program,
    st: &Stage,
    isa: Isa,
    cpu: &Cpu,
) -> Option<ChannelPlan> {
    let c = ranged_channel_axis(p, st)?;
    let mut cp = plan_along(p, st, c, isa, cpu, None)?;
    // Groups of a few register tiles: the row at run time may be a fraction of the largest
    // size's, and its tasks must still split among the cores.
    cp.group = cp.group.min(cp.rows * RANGED_GROUP_TILES);
    cp.n_groups = st.ty.shape[cp.row].div_ceil(cp.group);
    Some(cp)
}

/// Register tiles of columns per task of a ranged program's channel plan.
const RANGED_GROUP_TILES: usize = 4;

/// The channel-vectorised plan of `st` along channel dimension `c`.
fn plan_along(
    p: &Program,
    st: &Stage,
    c: usize,
    isa: Isa,
    cpu: &Cpu,
    knobs: Option<(u8, u8, u16, u16)>,
) -> Option<ChannelPlan> {
    let lanes = isa.lanes();
    let r = st.reduce.as_ref()?;
    let shape = &st.ty.shape;
    let mut unit = false;
    st.body.visit(&mut |e| {
        unit |= matches!(e, Expr::Load(..)) && load_coef(p, e, c as u32) == Some(1)
    });
    if !unit || !vectorizable(p, &st.body, c as u32) {
        return None;
    }
    let row = shape.len() - 1;
    let want_vecs = match knobs {
        Some((v, _, _, _)) => v as usize,
        None => gemm_defaults(shape[c], isa, cpu).0,
    };
    // Channels that are not whole vectors of the variant's are whole tiles of three narrower
    // ones, or exactly one narrower vector (`channel_axis` admits no other).
    let vecs = (1..=want_vecs.clamp(1, 4))
        .rev()
        .find(|k| shape[c].is_multiple_of(k * lanes));
    let (vecs, lanes) = match vecs {
        Some(v) => (v, lanes),
        None if shape[c].is_multiple_of(NARROW_TILE) => (3, NARROW_TILE / 3),
        None if shape[c] == NARROW_VECTOR => (1, NARROW_VECTOR),
        None => return None,
    };
    let budget = if isa.vector_registers() >= 32 {
        ACCS_32
    } else {
        ACCS_16
    };
    // Eight channels in a variant of sixteen lanes: two columns a vector, over a flattened
    // image of even width whose reduction is one block (the sums start at zero and go back to
    // the scratch unpaired once), the body a weight vector times one column's input.
    let width = split_factor(&st.body, row as u32, shape[row]);
    let pairable = isa.lanes() == 16
        && lanes == 8
        && vecs == 1
        && width.is_some_and(|w| w.is_multiple_of(2))
        && r.extents.len() == 1
        && paired_body(p, st, c, row).is_some();
    let rows = match knobs {
        Some((_, r, _, _)) => r as usize,
        // One vector of channels: a broadcast per multiply-add, each at its own address
        // unless the tiles align to the image's rows. With more, the tile's columns are
        // fewer and each broadcast serves every vector: its columns stay the budget's.
        None if vecs == 1 => aligned_rows(budget, width),
        None => budget / vecs,
    }
    .clamp(1, shape[row]);
    let tile = vecs * lanes;
    // The block of the first reduction variable: rows of `w'` over the points of the others.
    let inner: usize = r.extents[1..].iter().product();
    let kc = (match knobs {
        Some((_, _, kc, _)) => (kc as usize).clamp(1, 1024),
        None => KC,
    } / inner.max(1))
    .clamp(1, r.extents[0].max(1));
    let n_tiles = shape[c] / tile;
    let others: usize = (0..shape.len())
        .filter(|&d| d != c && d != row)
        .map(|d| shape[d])
        .product();
    let blocks = shape[row].div_ceil(rows);
    let split = match knobs {
        Some((_, _, _, g)) => (g as usize).clamp(1, blocks),
        None => {
            let capacity = cpu.l2 / L2_SHARE;
            // A channel tile's weights (every point of the reduction) past the L2 share are
            // read again from beyond L2 by each more column group: then one task a core
            // suffices (the tasks are equal). ResNet-18's 3x3 layers of 512 channels at 7x7
            // (1.2 MB of weights a tile of 64): 16 tasks -> 8, the model 7.13 -> 6.91 ms on
            // 2 cores of a Zen 5 (1 MB L2 a core); each tile's weights are streamed once.
            let weights = r.extents.iter().product::<usize>() * tile * st.ty.dtype.size();
            let least = if weights > capacity {
                cpu.cores.max(1)
            } else {
                MIN_TASKS
            };
            let want = least.div_ceil(n_tiles * others).clamp(1, blocks);
            if r.extents.len() == 1 {
                column_groups(p, st, (c, row), tile, rows, kc, want, capacity)
            } else {
                want
            }
        }
    };
    let group = blocks.div_ceil(split) * rows;
    let n_groups = shape[row].div_ceil(group);
    let paired = pairable
        && kc >= r.extents[0]
        && crate::schedule::group::gcd(rows, group).is_multiple_of(2)
        && aligned_tiles(rows, group, width);
    Some(ChannelPlan {
        c,
        row,
        lanes,
        vecs,
        rows,
        kc,
        group,
        n_tiles,
        n_groups,
        n_outer: others * n_tiles * n_groups,
        parallel: false,
        paired,
    })
}

/// The body of a channel-vectorised stage as `weight * column`: a load that moves along the
/// channels `c` and not along the row, times one that moves along the row and not the
/// channels (a convolution's weight and its input pixel), in either order.
pub(crate) fn paired_body(p: &Program, st: &Stage, c: usize, row: usize) -> Option<(Expr, Expr)> {
    let Expr::Bin(crate::te::BinOp::Mul, a, b) = &st.body else {
        return None;
    };
    let load = |e: &Expr| matches!(e, Expr::Load(..) | Expr::LoadFlat(..));
    let along = |e: &Expr, v: usize| crate::schedule::analysis::is_vector(e, v as u32);
    let weight =
        |e: &Expr| load(e) && along(e, c) && !along(e, row) && vectorizable(p, e, c as u32);
    let column = |e: &Expr| load(e) && along(e, row) && !along(e, c);
    if weight(a) && column(b) {
        Some(((**a).clone(), (**b).clone()))
    } else if weight(b) && column(a) {
        Some(((**b).clone(), (**a).clone()))
    } else {
        None
    }
}

/// Columns per register tile, at most `budget`, for a row that is an image of width `width`
/// flattened (a small convolution's output pixels): where a tile of at least half the budget
/// covers whole image rows or stays inside one, the largest such, so that each column's input
/// is a constant offset from the tile's first (`codegen/c/channel.rs`, `aligned_columns`);
/// else the budget. mnist_cnn's 5x5 convolutions, Zen 5, AVX-512, two threads: 16 channels at
/// 14x14, tiles of 23 columns -> 14, 5.1 -> 4.0 us; 8 channels at 28x28, 24 -> 14, 2.7 -> 1.9
/// us.
pub(crate) fn aligned_rows(budget: usize, width: Option<usize>) -> usize {
    let Some(w) = width else { return budget };
    (budget.div_ceil(2).max(2)..=budget)
        .rev()
        .find(|&r| r.is_multiple_of(w) || w.is_multiple_of(r))
        .unwrap_or(budget)
}

/// Whether the tiles of a channel plan with `rows` columns per tile and `group` columns per
/// task read a flattened image of width `width` (if it is one) at constant offsets from each
/// tile's first column: every tile then starts at a multiple of `gcd(rows, group)`, which with
/// the width must divide one the other.
pub(crate) fn aligned_tiles(rows: usize, group: usize, width: Option<usize>) -> bool {
    let Some(w) = width else { return true };
    let a = crate::schedule::group::gcd(rows, group);
    rows <= 1 || (a > 1 && (a.is_multiple_of(w) || w.is_multiple_of(a)))
}

/// How many column groups each channel tile's columns are split into, by Welder's traffic
/// model ([`best_of`]): a split into `n` groups (`want`, enough tasks for the cores, times a
/// power of two, so that the tasks still divide evenly among a power-of-two count of threads,
/// up to one register tile of columns per task) makes a task's tile `tile` channels by
/// `ceil(blocks / n) * rows` columns; among the splits whose step (a reduction block of `kc`)
/// fits `capacity` bytes, the one with the least traffic (every task reads its columns' inputs
/// and its channels' weights whole, so fewer, larger tasks read less). When none fits, the
/// smallest tiles.
#[allow(clippy::too_many_arguments)]
fn column_groups(
    p: &Program,
    st: &Stage,
    (c, row): (usize, usize),
    tile: usize,
    rows: usize,
    kc: usize,
    want: usize,
    capacity: usize,
) -> usize {
    let shape = &st.ty.shape;
    let blocks = shape[row].div_ceil(rows);
    let mut splits: Vec<(usize, Vec<usize>)> = Vec::new();
    let counts = (0..).map(|j| want << j).take_while(|&n| n < blocks);
    for n in counts.chain([blocks]) {
        let columns = blocks.div_ceil(n) * rows;
        if splits
            .last()
            .is_some_and(|(_, t)| t[row] == columns.min(shape[row]))
        {
            continue;
        }
        let mut t = vec![1; shape.len()];
        t[c] = tile;
        t[row] = columns.min(shape[row]);
        splits.push((n, t));
    }
    let tiles = splits.iter().map(|(_, t)| t.clone()).collect();
    match best_of(p, st, tiles, capacity, Some(&[kc]), 1).first() {
        Some((best, _)) => splits
            .iter()
            .find(|(_, t)| t == best)
            .map_or(want, |(n, _)| *n),
        None => blocks,
    }
}

#[cfg(test)]
mod tests {
    use super::{aligned_rows, aligned_tiles};

    /// Every tile start a multiple of `gcd(rows, group)`, every column inside the tile: the
    /// column's image row and column follow from the tile's by constants exactly when
    /// `aligned_tiles` says so (checked by brute force over the starts), and `aligned_rows`
    /// picks the largest aligned tile of at least half the budget.
    #[test]
    fn aligned_tiles_match_brute_force() {
        for w in 2..=30usize {
            for rows in 1..=24usize {
                for group in [rows, 2 * rows, 3 * rows, 5 * rows] {
                    let n = 4 * w * group;
                    let starts = (0..n.div_ceil(group))
                        .flat_map(|g| (0..group.div_ceil(rows)).map(move |t| g * group + t * rows));
                    // The offset of column j from the tile's first is the same at every start.
                    let flat = |p: usize| (p / w) * (w + 4) + p % w;
                    let mut constant = true;
                    let mut first: Option<Vec<usize>> = None;
                    for s in starts {
                        let offs: Vec<usize> = (0..rows).map(|j| flat(s + j) - flat(s)).collect();
                        constant &= first.get_or_insert_with(|| offs.clone()) == &offs;
                    }
                    if aligned_tiles(rows, group, Some(w)) {
                        assert!(constant, "w {w} rows {rows} group {group}");
                    }
                }
            }
            let r = aligned_rows(24, Some(w));
            assert!(
                (12..=24).contains(&r) && (r.is_multiple_of(w) || w.is_multiple_of(r)) || r == 24,
                "w {w}: {r}"
            );
        }
        assert_eq!(aligned_rows(24, Some(14)), 14);
        assert_eq!(aligned_rows(24, Some(7)), 21);
        assert_eq!(aligned_rows(24, Some(28)), 14);
        assert_eq!(aligned_rows(24, None), 24);
        assert_eq!(aligned_rows(6, Some(7)), 6);
    }
}
