//! Coarse-grained scheduling (GraphTurbo §3–4): stages grouped into one loop of instances.
//!
//! The group formed today is a materialised injective producer stored in column panels (an
//! im2col buffer) and the one register-blocked contraction that reads it along its row (the
//! convolution's GEMM). Split information: the consumer's last output dimension splits into
//! instances of `cols` columns, whole panels of the producer and whole register tiles of the
//! consumer; every other dimension stays whole. Tile propagation
//! ([`fusion::tile::propagate`](crate::fusion::tile::propagate)) gives what one instance reads
//! of the producer: every row of `cols` columns, one slot. An instance fills its slot and the
//! consumer computes its columns from it while the slot is still in the core's L2, so the
//! producer's output never goes to memory and is never read back. Instances are bound to at most
//! [`MAX_SLOTS`] threads at once, each with its own slot of the arena; the producer's buffer is
//! those slots, not its whole output.
use crate::fusion::tile::{footprint, propagate};
use crate::schedule::kernel::Draw;
use crate::target::Target;
use crate::te::{BufId, BufKind, Exec, Expr, Group, Program, RedOp, Src, PANEL};

/// The most scratch slots of a group (instances in flight at once, one per thread).
pub const MAX_SLOTS: usize = 32;

/// The fewest instances a group is formed with: its instances are all the parallelism the two
/// stages keep, so fewer would idle the cores of a larger machine (a transformer's attention
/// scores over 197 tokens would be 4 instances).
pub const MIN_INSTANCES: usize = 16;

/// Groups `p`'s stages. `tile_widths` gives, for a stage the code generator register-blocks,
/// the widths (in columns) of its register tile in every instruction-set variant, and `None`
/// for a stage it does not; instances are whole tiles of each.
///
/// A group's knobs are its instance's columns (a multiple of the smallest instance: whole
/// panels and tiles) and its slots. Untuned, an instance is the smallest (the least live, so
/// the slot stays in L2) and the slots are `min(instances, MAX_SLOTS)`; `seed` draws both,
/// among the column counts whose step still fits half of L2 and leaves two instances, and any
/// slot count from one.
pub fn plan_groups(
    p: &Program,
    target: &Target,
    tile_widths: &dyn Fn(&Program, BufId) -> Option<Vec<usize>>,
    seed: Option<u64>,
) -> Vec<Group> {
    let l2 = target.host_cpu().l2;
    let mut draw = seed.map(|s| Draw::new(s ^ 0x7061_6e65_6c73));
    let readers = p.readers();
    let mut groups = Vec::new();
    for (a, buf) in p.buf_ids().zip(&p.bufs) {
        let BufKind::Stage(prod) = &buf.kind else {
            continue;
        };
        let mut rs = readers[a.index()].clone();
        rs.sort_unstable();
        rs.dedup();
        if prod.reduce.is_some()
            || prod.exec != Exec::Generated
            || !buf.packed
            || p.outputs.contains(&a)
            || rs.len() != 1
        {
            continue;
        }
        let b = rs[0];
        let Some(cons) = p.stage(b) else { continue };
        let rank = cons.ty.rank();
        let ok_consumer = cons.exec == Exec::Generated
            && cons.reduce.as_ref().is_some_and(|r| r.op == RedOp::Sum)
            && rank >= 1
            && buf.ty.shape.last() == cons.ty.shape.last()
            && reads_along_row(&cons.body, a, rank as u32 - 1)
            && !cons
                .reduce
                .as_ref()
                .and_then(|r| r.finalize.as_ref())
                .is_some_and(|f| f.sources().contains(&Src::Buf(a)));
        if !ok_consumer {
            continue;
        }
        let Some(widths) = tile_widths(p, b) else {
            continue;
        };
        let unit = widths.iter().fold(PANEL, |c, &w| lcm(c, w.max(1)));
        let n = cons.ty.shape[rank - 1];
        let fits = |cols: usize| -> bool {
            // The instance's tile of the consumer and what it reads: one slot of the producer
            // must be all of its rows over the instance's columns, and the whole step must fit
            // in L2.
            let mut tile = cons.ty.shape.clone();
            tile[rank - 1] = cols.min(n);
            let region = propagate(p, cons, &tile, None);
            let slot_ok = region.iter().any(|r| {
                r.buf == a && {
                    let s = &buf.ty.shape;
                    r.extents.len() == s.len()
                        && r.extents[..s.len() - 1] == s[..s.len() - 1]
                        && r.extents[s.len() - 1] == cols.min(n)
                }
            });
            slot_ok && footprint(p, cons, &tile, None) <= l2 / 2
        };
        if n.div_ceil(unit) < MIN_INSTANCES || !fits(unit) {
            continue;
        }
        let cols = match draw.as_mut() {
            Some(d) => {
                let choices: Vec<usize> = (0..4)
                    .map(|j| unit << j)
                    .take_while(|&c| n.div_ceil(c) >= 2 && fits(c))
                    .collect();
                choices[d.below(choices.len() as u64) as usize]
            }
            None => unit,
        };
        let instances = n.div_ceil(cols);
        let slots = slots(instances, draw.as_mut());
        groups.push(Group {
            producer: a,
            consumer: b,
            cols,
            instances,
            slots,
        });
    }
    groups
}

/// The scratch slots of a group of `instances`: `min(instances, MAX_SLOTS)` (one per thread
/// of a large machine), or with `draw` any count from one to that.
pub(super) fn slots(instances: usize, draw: Option<&mut Draw>) -> usize {
    let most = instances.min(MAX_SLOTS);
    match draw {
        Some(d) => 1 + d.below(most as u64) as usize,
        None => most,
    }
}

/// Whether every load of `a` in `body` walks the row (`Var(row)` last, nowhere else), as a
/// panel-packed operand of a register-blocked contraction is read.
fn reads_along_row(body: &Expr, a: BufId, row: u32) -> bool {
    let mut any = false;
    let mut ok = true;
    body.visit(&mut |e| match e {
        Expr::Load(Src::Buf(b), idx) if *b == a => {
            any = true;
            ok &= idx.last() == Some(&Expr::Var(row))
                && idx[..idx.len() - 1].iter().all(|i| {
                    let mut uses = false;
                    i.visit(&mut |x| uses |= *x == Expr::Var(row));
                    !uses
                });
        }
        Expr::LoadFlat(Src::Buf(b), _) if *b == a => ok = false,
        _ => {}
    });
    any && ok
}

/// The greatest common divisor of `a` and `b` (`gcd(a, 0) = a`).
pub(crate) fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The least common multiple of `a` and `b` (both positive).
pub(super) fn lcm(a: usize, b: usize) -> usize {
    a / gcd(a, b) * b
}

/// What `collage explain` shows of a group: the consumer's instance tile, the producer's region
/// one instance reads (propagated backwards), the memory level of the edge between them, the
/// bytes one instance keeps live, and the predicted memory traffic with and without the group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// The consumer's output extents per instance.
    pub tile: Vec<usize>,
    /// The producer's extents one instance reads (one slot).
    pub region: Vec<usize>,
    /// Bytes one instance step keeps live (its slot, the consumer's other operands, its output).
    pub footprint: usize,
    /// Where the producer's slot stays between being written and read: `L2` when the step fits
    /// half of L2, else `L3`.
    pub level: super::Level,
    /// Predicted memory traffic in bytes of the two stages as a group: the producer's inputs,
    /// the consumer's other operands per instance, its output.
    pub traffic: usize,
    /// The same two stages apart: the producer's output also goes to memory and comes back.
    pub traffic_apart: usize,
}

/// [`GroupInfo`] of `g` in `p`.
pub fn describe(p: &Program, g: &Group, target: &Target) -> GroupInfo {
    let cons = p.stage(g.consumer).expect("a group's consumer is a stage");
    let prod = p.stage(g.producer).expect("a group's producer is a stage");
    let rank = cons.ty.rank();
    let mut tile = cons.ty.shape.clone();
    tile[rank - 1] = g.cols.min(tile[rank - 1]);
    let regions = propagate(p, cons, &tile, None);
    let region = regions
        .iter()
        .find(|r| r.buf == g.producer)
        .map_or_else(|| prod.ty.shape.clone(), |r| r.extents.clone());
    let others: usize = regions
        .iter()
        .filter(|r| r.buf != g.producer)
        .map(|r| r.bytes())
        .sum();
    let prod_in: usize = propagate(p, prod, &prod.ty.shape, None)
        .iter()
        .map(|r| r.bytes())
        .sum();
    let foot = footprint(p, cons, &tile, None);
    let l2 = target.host_cpu().l2;
    let traffic = prod_in + g.instances * others + cons.ty.bytes();
    GroupInfo {
        tile,
        region,
        footprint: foot,
        level: if foot <= l2 / 2 {
            super::Level::L2
        } else {
            super::Level::L3
        },
        traffic,
        traffic_apart: traffic + 2 * prod.ty.bytes(),
    }
}
