//! One arena for all intermediate tensors, planned at build time by liveness with best-fit reuse
//! ("greedy by size": largest buffers first, each at the lowest offset free during its lifetime).
//! Large buffers are moved within a page ([`SKEW_FROM`]): tensors whose sizes are multiples of
//! 4 KiB would otherwise all start at the same offset in a page, so that a kernel's loads from
//! one and stores to another, row by row, fall in the same L1 sets and alias in the CPU's 4 KiB
//! store-to-load check (a pointwise convolution over 112x112 planes ran at 60% of its speed).
//! Also where every buffer lives at run time ([`Location`]: an input, the weights or the arena) and
//! the C pointer to it in a kernel ([`buf_ptr`]).
use crate::te::BufId;

/// Where every buffer lives at run time.
#[derive(Clone, Debug)]
pub enum Location {
    /// `inputs[i]`.
    Input(usize),
    /// `weights + offset`.
    Weight(usize),
    /// `arena + offset`.
    Arena(usize),
    /// Nothing (dead buffer).
    None,
}

/// The C expression of buffer `b`'s first element as `const float *` (inside a kernel taking
/// `collage_ctx *ctx`).
pub fn buf_ptr(locs: &[Location], b: BufId) -> String {
    match locs[b.index()] {
        Location::Input(i) => format!("(const float *)ctx->I[{i}]"),
        Location::Weight(o) => format!("(const float *)(ctx->W + {o})"),
        Location::Arena(o) => format!("(const float *)(ctx->A + {o})"),
        Location::None => panic!("a library call reads dead buffer {b}"),
    }
}

/// A buffer to lay out in the arena: its size and the steps during which it is live (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveRange {
    /// Bytes.
    pub size: usize,
    /// The step that writes it.
    pub first: usize,
    /// The last step that reads it.
    pub last: usize,
}

/// The placement: one offset per interval and the arena's size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaPlan {
    /// Offset of each interval, in input order.
    pub offsets: Vec<usize>,
    /// Total bytes.
    pub size: usize,
}

/// Alignment of every buffer in the arena.
pub const ALIGN: usize = 64;

/// Buffers of at least this many bytes get a slot of a page more, and start in it at the
/// cache-line offset farthest (within a page) from the buffers live at the same time.
pub const SKEW_FROM: usize = 16 * 1024;

/// The page whose offsets [`SKEW_FROM`] spreads.
const PAGE: usize = 4096;

fn align(x: usize) -> usize {
    // Saturating: an arena that does not fit the address space is rejected by its caller.
    x.div_ceil(ALIGN).saturating_mul(ALIGN)
}

/// Places `bufs` so that buffers live at the same time never overlap. Deterministic.
pub fn plan_arena(bufs: &[LiveRange]) -> ArenaPlan {
    let mut order: Vec<usize> = (0..bufs.len()).collect();
    order.sort_by(|&a, &b| bufs[b].size.cmp(&bufs[a].size).then(a.cmp(&b)));
    let mut offsets = vec![0usize; bufs.len()];
    // Each placed buffer's slot: `[start, end)`, its offset inside.
    let mut slots = vec![(0usize, 0usize); bufs.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut size = 0;
    for i in order {
        let b = bufs[i];
        let live: Vec<usize> = placed
            .iter()
            .copied()
            .filter(|&j| bufs[j].first <= b.last && b.first <= bufs[j].last)
            .collect();
        let mut busy: Vec<(usize, usize)> = live.iter().map(|&j| slots[j]).collect();
        busy.sort();
        let skewed = b.size >= SKEW_FROM;
        // Best fit: the smallest gap that holds the buffer, else the end.
        let need = align(b.size).saturating_add(if skewed { PAGE - ALIGN } else { 0 });
        let mut best: Option<(usize, usize)> = None;
        let mut cursor = 0;
        for (s, e) in busy.iter().copied() {
            if s > cursor && s - cursor >= need && best.is_none_or(|(_, g)| s - cursor < g) {
                best = Some((cursor, s - cursor));
            }
            cursor = cursor.max(e);
        }
        let off = best.map(|(o, _)| o).unwrap_or(cursor);
        let skew = if skewed {
            let phases: Vec<usize> = live
                .iter()
                .filter(|&&j| bufs[j].size >= SKEW_FROM)
                .map(|&j| offsets[j] % PAGE)
                .collect();
            farthest_phase(off, &phases)
        } else {
            0
        };
        offsets[i] = off + skew;
        slots[i] = (off, off.saturating_add(need));
        size = size.max(off.saturating_add(need));
        placed.push(i);
    }
    ArenaPlan { offsets, size }
}

/// The skew (a multiple of [`ALIGN`] below a page) that puts a slot starting at `off` farthest,
/// within a page, from every offset of `phases`; the smallest such skew.
fn farthest_phase(off: usize, phases: &[usize]) -> usize {
    let circular = |a: usize, b: usize| {
        let d = a.abs_diff(b);
        d.min(PAGE - d)
    };
    (0..PAGE / ALIGN)
        .map(|k| k * ALIGN)
        .max_by_key(|&skew| {
            let at = (off + skew) % PAGE;
            let nearest = phases
                .iter()
                .map(|&p| circular(at, p))
                .min()
                .unwrap_or(PAGE);
            // Prefer the smallest skew among equals.
            (nearest, core::cmp::Reverse(skew))
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buffers live at the same time never share a byte.
    fn assert_no_live_overlap(bufs: &[LiveRange], p: &ArenaPlan) {
        for i in 0..bufs.len() {
            for j in 0..i {
                let (a, b) = (bufs[i], bufs[j]);
                if a.first <= b.last && b.first <= a.last {
                    let (ai, bj) = (p.offsets[i], p.offsets[j]);
                    assert!(
                        ai + a.size <= bj || bj + b.size <= ai,
                        "{i} and {j} overlap"
                    );
                }
            }
        }
    }

    #[test]
    fn live_buffers_never_overlap_and_dead_ones_are_reused() {
        let bufs = [
            LiveRange {
                size: 100,
                first: 0,
                last: 1,
            },
            LiveRange {
                size: 200,
                first: 1,
                last: 2,
            },
            LiveRange {
                size: 100,
                first: 2,
                last: 3,
            },
            LiveRange {
                size: 50,
                first: 3,
                last: 4,
            },
        ];
        let p = plan_arena(&bufs);
        assert_no_live_overlap(&bufs, &p);
        assert!(p.size < bufs.iter().map(|b| align(b.size)).sum::<usize>());
    }

    /// Three large page-multiple buffers live together start at three different offsets within
    /// a page, as far apart as the page allows; small ones are not moved.
    #[test]
    fn large_buffers_live_together_start_apart_within_a_page() {
        let big = |first, last| LiveRange {
            size: 12 * PAGE,
            first,
            last,
        };
        let bufs = [
            big(0, 2),
            big(1, 2),
            big(2, 3),
            LiveRange {
                size: 256,
                first: 0,
                last: 3,
            },
        ];
        let p = plan_arena(&bufs);
        let phase = |i: usize| p.offsets[i] % PAGE;
        assert_eq!(phase(0), 0);
        assert_eq!(phase(1), PAGE / 2);
        // The third lies a quarter page from both others.
        assert_eq!(phase(2), PAGE / 4);
        assert_eq!(p.offsets[3] % ALIGN, 0);
        assert_no_live_overlap(&bufs, &p);
        assert!(bufs
            .iter()
            .zip(&p.offsets)
            .all(|(b, o)| o + b.size <= p.size));
    }
}
