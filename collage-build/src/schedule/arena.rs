//! One arena for all intermediate tensors, planned at build time by liveness with best-fit reuse
//! ("greedy by size": largest buffers first, each at the lowest offset free during its lifetime).
//! Also where every buffer lives at run time ([`Place`]: an input, the weights or the arena) and
//! the C pointer to it in a kernel ([`buf_ptr`]).

/// Where every buffer lives at run time.
#[derive(Clone, Debug)]
pub enum Place {
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
pub fn buf_ptr(places: &[Place], b: u32) -> String {
    match places[b as usize] {
        Place::Input(i) => format!("(const float *)ctx->I[{i}]"),
        Place::Weight(o) => format!("(const float *)(ctx->W + {o})"),
        Place::Arena(o) => format!("(const float *)(ctx->A + {o})"),
        Place::None => panic!("a library call reads dead buffer {b}"),
    }
}

/// A buffer to place: its size and the steps during which it is live (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
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

fn align(x: usize) -> usize {
    // Saturating: an arena that does not fit the address space is rejected by its caller.
    x.div_ceil(ALIGN).saturating_mul(ALIGN)
}

/// Places `bufs` so that buffers live at the same time never overlap. Deterministic.
pub fn plan_arena(bufs: &[Interval]) -> ArenaPlan {
    let mut order: Vec<usize> = (0..bufs.len()).collect();
    order.sort_by(|&a, &b| bufs[b].size.cmp(&bufs[a].size).then(a.cmp(&b)));
    let mut offsets = vec![0usize; bufs.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut size = 0;
    for i in order {
        let b = bufs[i];
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| bufs[j].first <= b.last && b.first <= bufs[j].last)
            .map(|&j| (offsets[j], offsets[j].saturating_add(align(bufs[j].size))))
            .collect();
        busy.sort();
        // Best fit: the smallest gap that holds the buffer, else the end.
        let need = align(b.size);
        let mut best: Option<(usize, usize)> = None;
        let mut cursor = 0;
        for (s, e) in busy.iter().copied() {
            if s > cursor && s - cursor >= need && best.is_none_or(|(_, g)| s - cursor < g) {
                best = Some((cursor, s - cursor));
            }
            cursor = cursor.max(e);
        }
        let off = best.map(|(o, _)| o).unwrap_or(cursor);
        offsets[i] = off;
        size = size.max(off.saturating_add(need));
        placed.push(i);
    }
    ArenaPlan { offsets, size }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_buffers_never_overlap_and_dead_ones_are_reused() {
        let bufs = [
            Interval {
                size: 100,
                first: 0,
                last: 1,
            },
            Interval {
                size: 200,
                first: 1,
                last: 2,
            },
            Interval {
                size: 100,
                first: 2,
                last: 3,
            },
            Interval {
                size: 50,
                first: 3,
                last: 4,
            },
        ];
        let p = plan_arena(&bufs);
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
        assert!(p.size < bufs.iter().map(|b| align(b.size)).sum::<usize>());
    }
}
