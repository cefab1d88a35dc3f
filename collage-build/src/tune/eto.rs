//! ETO's reuse-pair selection (VLDB'22, §4 and §6), over loop nests: which kernels are tuned
//! from scratch and which reuse the best plan of a similar kernel, chosen to spend the fewest
//! measurement trials.
//!
//! A kernel is a [`Nest`]: a family (its type and sketch set: in this compiler the plan kinds
//! that fit it, with the ranks of its loops) and the extent of every loop. Two kernels of one
//! type form a *reuse pair* when one nest dominates the other (Def. 2: every extent of one is
//! at least the other's); the pair's edge goes from the kernel whose plans can be realised for
//! the other ([`Nest::serves`]). The *optimisation choice graph* has a root, one node per kernel, an
//! edge root → v costing v's tuning from scratch and an edge u → v per reuse pair costing v's
//! tuning by reuse from u; the cheapest way to tune every kernel is its min-cost arborescence
//! ([`min_arborescence`], Chu–Liu/Edmonds; `petgraph` has none, so it is written here). A 1-hop
//! *bridge* (Def. 5) is a virtual kernel whose extents are the element-wise minimum of two
//! kernels that are no reuse pair: both dominate it, so it links them; [`select`] adds bridges
//! while they lower the tree's cost (a greedy stand-in for the directed Steiner tree the paper
//! solves approximately).
use std::collections::HashSet;

/// What a plan kind tells of the computation it fits (ETO's operator type), for the kinds that
/// tell one: a contraction register-blocks or vectorises along its output channels, a
/// depthwise window runs on planes, a pooling window slides, a map is elementwise, a scan
/// carries a value along its loop. `plain` and `row` fit many computations and tell none.
fn class(kind: &str) -> Option<&'static str> {
    match kind {
        "register-blocked" | "channel-vectorised" => Some("contraction"),
        "depthwise" => Some("depthwise"),
        "window" => Some("window"),
        "elementwise" => Some("elementwise"),
        "scan" => Some("scan"),
        _ => None,
    }
}

/// The classes of `kinds` ([`class`]), sorted, each once: a type.
fn classes<'a>(kinds: impl IntoIterator<Item = &'a str>) -> Vec<&'static str> {
    let mut t: Vec<&'static str> = kinds.into_iter().filter_map(class).collect();
    t.sort_unstable();
    t.dedup();
    t
}

/// A kernel's loop nest, as reuse pairs see it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nest {
    /// Type and sketch set: the plan kinds that fit, then the ranks of the output and the
    /// reduction (`register-blocked,row,plain/3/1`); see [`Nest::serves`].
    pub family: String,
    /// Every loop's extent (output dimensions, then reduction ones).
    pub extents: Vec<usize>,
}

impl Nest {
    /// A nest of `family` with `extents`.
    pub fn new(family: impl Into<String>, extents: Vec<usize>) -> Nest {
        Nest {
            family: family.into(),
            extents,
        }
    }

    /// The family's plan kinds (its sketch set) and the rest of it (the ranks of its loops).
    fn kinds_and_ranks(&self) -> (Vec<&str>, &str) {
        match self.family.split_once('/') {
            Some((kinds, ranks)) => (kinds.split(',').collect(), ranks),
            None => (vec![self.family.as_str()], ""),
        }
    }

    /// The plan kinds that fit (the family's sketch set).
    pub fn kinds(&self) -> Vec<&str> {
        self.kinds_and_ranks().0
    }

    /// The family's type: the ranks of its loops and the classes of the kinds that tell what it
    /// computes ([`class`]): a convolution whose rows are too short to register-block (its
    /// kinds: channel-vectorised, plain) is a contraction as a product that register-blocks is,
    /// never a plain reduction.
    fn type_of(&self) -> (Vec<&'static str>, &str) {
        let (kinds, ranks) = self.kinds_and_ranks();
        (classes(kinds), ranks)
    }

    /// Whether a plan of `self` can be realised for `o`: both of one type (ETO's operator
    /// type), and every plan kind that fits `self` fits `o` (the kinds that fit a kernel
    /// depend on its extents: a larger kernel of the same type may fit more of them).
    pub fn serves(&self, o: &Nest) -> bool {
        if self.family == o.family {
            return true;
        }
        let theirs = o.kinds();
        self.type_of() == o.type_of() && self.kinds().iter().all(|k| theirs.contains(k))
    }

    /// Whether `self` has `o`'s rank and every extent at least `o`'s.
    fn covers(&self, o: &Nest) -> bool {
        self.extents.len() == o.extents.len()
            && self.extents.iter().zip(&o.extents).all(|(a, b)| a >= b)
    }

    /// Whether `self` dominates `o` (Def. 2): `self` serves `o`, same rank, every extent at
    /// least `o`'s.
    pub fn dominates(&self, o: &Nest) -> bool {
        self.serves(o) && self.covers(o)
    }

    /// Whether `self` and `o` form a reuse pair (either dominates the other).
    pub fn reuse_pair(&self, o: &Nest) -> bool {
        self.dominates(o) || o.dominates(self)
    }

    /// Whether `o` may be tuned by reuse of `self`'s best plan: they form a reuse pair and
    /// `self`'s plans can be realised for `o` (the edge `self → o` of the choice graph).
    pub fn reuse_source(&self, o: &Nest) -> bool {
        self.serves(o) && (self.covers(o) || o.covers(self))
    }

    /// Whether `self` is of `o`'s type and ranks and at least as large in every loop: a
    /// kernel whose loops, shrunk, give `o` (a bridge).
    pub fn encloses(&self, o: &Nest) -> bool {
        self.type_of() == o.type_of() && self.covers(o)
    }

    /// The 1-hop bridge of `self` and `o` (Def. 5): the element-wise minimum of their
    /// extents, of the kinds both fit (so that it serves both), for two nests of one type and
    /// rank that are no reuse pair, and only where the kinds both fit are of that type (a
    /// contraction's bridge that fits only the plain kind would tune nothing of either).
    pub fn bridge(&self, o: &Nest) -> Option<Nest> {
        let (kinds, ranks) = self.kinds_and_ranks();
        let theirs = o.kinds();
        let common: Vec<&str> = kinds.into_iter().filter(|k| theirs.contains(k)).collect();
        let family = if ranks.is_empty() {
            common.join(",")
        } else {
            format!("{}/{ranks}", common.join(","))
        };
        (self.type_of() == o.type_of()
            && classes(common.iter().copied()) == self.type_of().0
            && !common.is_empty()
            && self.extents.len() == o.extents.len()
            && !self.reuse_source(o)
            && !o.reuse_source(self))
        .then(|| Nest {
            family,
            extents: self
                .extents
                .iter()
                .zip(&o.extents)
                .map(|(a, b)| *a.min(b))
                .collect(),
        })
    }

    /// How far apart two nests are: the sum over loops of `|log2(a / b)|` (0 for equal nests).
    pub fn distance(&self, o: &Nest) -> f64 {
        self.extents
            .iter()
            .zip(&o.extents)
            .map(|(&a, &b)| ((a.max(1) as f64) / (b.max(1) as f64)).log2().abs())
            .sum()
    }
}

/// A directed edge `from → to` of weight `cost`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Edge {
    /// Tail.
    pub from: usize,
    /// Head.
    pub to: usize,
    /// Weight.
    pub cost: f64,
}

/// The min-cost arborescence of the graph on nodes `0..n` rooted at `root` (Chu–Liu/Edmonds,
/// O(n·|edges|)): the index in `edges` of every node's incoming edge (`None` for the root), or
/// `None` when some node is unreachable from the root.
pub fn min_arborescence(n: usize, root: usize, edges: &[Edge]) -> Option<Vec<Option<usize>>> {
    // Edges into the root and self-loops never belong to an arborescence.
    let live: Vec<usize> = (0..edges.len())
        .filter(|&i| edges[i].to != root && edges[i].from != edges[i].to)
        .collect();
    let chosen = edmonds(n, root, edges, &live)?;
    let mut parent = vec![None; n];
    for i in chosen {
        parent[edges[i].to] = Some(i);
    }
    Some(parent)
}

/// Chu–Liu/Edmonds on the edges `live` of `edges` (none into `root`, no self-loop): the chosen
/// edges' indices.
fn edmonds(n: usize, root: usize, edges: &[Edge], live: &[usize]) -> Option<Vec<usize>> {
    // The cheapest edge into every node (ties: the lowest index, for determinism).
    let mut best: Vec<Option<usize>> = vec![None; n];
    for &i in live {
        let e = edges[i];
        if best[e.to].is_none_or(|b| e.cost < edges[b].cost) {
            best[e.to] = Some(i);
        }
    }
    if (0..n).any(|v| v != root && best[v].is_none()) {
        return None;
    }
    // A cycle among the cheapest edges, if any.
    let Some(cycle) = find_cycle(n, root, edges, &best) else {
        return Some((0..n).filter_map(|v| best[v]).collect());
    };
    // Contract the cycle into one node `c`; an edge entering it at `v` costs what it saves
    // over `v`'s cheapest edge.
    let in_cycle: HashSet<usize> = cycle.iter().copied().collect();
    let mut id = vec![usize::MAX; n];
    let mut next = 0;
    for (v, slot) in id.iter_mut().enumerate() {
        if !in_cycle.contains(&v) {
            *slot = next;
            next += 1;
        }
    }
    let c = next;
    for &v in &cycle {
        id[v] = c;
    }
    let mut sub = Vec::new();
    let mut origin = Vec::new();
    for &i in live {
        let e = edges[i];
        let (a, b) = (id[e.from], id[e.to]);
        if a == b {
            continue;
        }
        let cost = if b == c {
            e.cost - edges[best[e.to].expect("checked")].cost
        } else {
            e.cost
        };
        sub.push(Edge {
            from: a,
            to: b,
            cost,
        });
        origin.push(i);
    }
    let all: Vec<usize> = (0..sub.len()).collect();
    let picked = edmonds(c + 1, id[root], &sub, &all)?;
    // Expand: the edge entering the cycle replaces the cycle's edge into its head.
    let mut out: Vec<usize> = picked.iter().map(|&j| origin[j]).collect();
    let entering = picked
        .iter()
        .map(|&j| origin[j])
        .find(|&i| id[edges[i].to] == c)
        .expect("an arborescence enters the contracted cycle");
    for &v in &cycle {
        if v != edges[entering].to {
            out.push(best[v].expect("checked"));
        }
    }
    Some(out)
}

/// A cycle of the graph whose only edges are `best` (one into every non-root node), as its
/// nodes.
fn find_cycle(n: usize, root: usize, edges: &[Edge], best: &[Option<usize>]) -> Option<Vec<usize>> {
    // 0: unvisited, 1: on the current walk, 2: done.
    let mut state = vec![0u8; n];
    state[root] = 2;
    for start in 0..n {
        let mut walk = Vec::new();
        let mut v = start;
        while state[v] == 0 {
            state[v] = 1;
            walk.push(v);
            v = edges[best[v].expect("every non-root node has one")].from;
        }
        if state[v] == 1 {
            let at = walk.iter().position(|&w| w == v).expect("on the walk");
            return Some(walk[at..].to_vec());
        }
        for w in walk {
            state[w] = 2;
        }
    }
    None
}

/// How a kernel of a [`Selection`] is tuned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// It is tuned already (the cache holds its plan): nothing to do.
    Tuned,
    /// Searched from scratch.
    Scratch,
    /// Tuned by reuse from node `.0`'s best plan.
    Reuse(usize),
}

/// Which kernels to tune how: the arborescence over the kernels and the bridges it uses.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// Each node's source (kernels, then bridge candidates); `None` for a bridge left out.
    pub source: Vec<Option<Source>>,
    /// The estimated trials of the whole tree.
    pub cost: f64,
}

impl Selection {
    /// The nodes in the tree in an order that tunes every source before what reuses it
    /// (breadth first from the root; ties in node order).
    pub fn order(&self) -> Vec<usize> {
        let n = self.source.len();
        let mut out: Vec<usize> = (0..n)
            .filter(|&v| matches!(self.source[v], Some(Source::Tuned | Source::Scratch)))
            .collect();
        let mut k = 0;
        while k < out.len() {
            let u = out[k];
            out.extend((0..n).filter(|&v| self.source[v] == Some(Source::Reuse(u))));
            k += 1;
        }
        out
    }

    /// How many nodes are tuned from scratch, by reuse, and how many of those are bridges
    /// (`given` kernels come first).
    pub fn counts(&self, given: usize) -> (usize, usize, usize) {
        let scratch = self
            .source
            .iter()
            .filter(|s| **s == Some(Source::Scratch))
            .count();
        let reuse = self
            .source
            .iter()
            .filter(|s| matches!(s, Some(Source::Reuse(_))))
            .count();
        let bridges = self.source[given.min(self.source.len())..]
            .iter()
            .filter(|s| s.is_some())
            .count();
        (scratch, reuse, bridges)
    }
}

/// The 1-hop bridges of `kernels` ([`Nest::bridge`] of every two), without repeats and
/// without the kernels' own nests, in a deterministic order.
pub fn bridges(kernels: &[Nest]) -> Vec<Nest> {
    let mut out: Vec<Nest> = Vec::new();
    for (i, a) in kernels.iter().enumerate() {
        for b in &kernels[i + 1..] {
            if let Some(g) = a.bridge(b) {
                if !kernels.contains(&g) && !out.contains(&g) {
                    out.push(g);
                }
            }
        }
    }
    out.sort();
    out
}

/// The arborescence over the nodes `used` of `nodes`, with `tuned` kernels free from the
/// root: every used node's source, and the tree's cost.
fn arborescence(
    nodes: &[Nest],
    used: &[usize],
    tuned: &[bool],
    scratch: &dyn Fn(usize) -> f64,
    reuse: &dyn Fn(usize, usize) -> f64,
) -> (Vec<Option<Source>>, f64) {
    let root = used.len();
    let free = |v: usize| tuned.get(v).copied().unwrap_or(false);
    let mut edges = Vec::new();
    for (j, &v) in used.iter().enumerate() {
        edges.push(Edge {
            from: root,
            to: j,
            cost: if free(v) { 0.0 } else { scratch(v) },
        });
        if free(v) {
            continue;
        }
        for (i, &u) in used.iter().enumerate() {
            if u != v && nodes[u].reuse_source(&nodes[v]) {
                edges.push(Edge {
                    from: i,
                    to: j,
                    cost: reuse(u, v),
                });
            }
        }
    }
    let parent = min_arborescence(root + 1, root, &edges).expect("the root reaches every node");
    let mut cost = 0.0;
    let mut source = vec![None; nodes.len()];
    for (j, &v) in used.iter().enumerate() {
        let e = edges[parent[j].expect("a non-root node")];
        cost += e.cost;
        source[v] = Some(if e.from != root {
            Source::Reuse(used[e.from])
        } else if free(v) {
            Source::Tuned
        } else {
            Source::Scratch
        });
    }
    (source, cost)
}

/// The reuse pairs chosen to tune the first `given` of `nodes` (the kernels; the rest are
/// bridge candidates, [`bridges`]) in the fewest estimated trials: tuning node `v` from
/// scratch costs `scratch(v)`, by reuse from `u` costs `reuse(u, v)`; kernels marked `tuned`
/// cost nothing and may be sources. Bridges are added one at a time, the one that lowers the
/// tree's cost most first, while any does (a bridge is a kernel to tune too, so one that
/// nobody reuses only adds its cost and is never kept).
pub fn select(
    nodes: &[Nest],
    given: usize,
    tuned: &[bool],
    scratch: &dyn Fn(usize) -> f64,
    reuse: &dyn Fn(usize, usize) -> f64,
) -> Selection {
    let mut used: Vec<usize> = (0..given).collect();
    let (mut source, mut cost) = arborescence(nodes, &used, tuned, scratch, reuse);
    let mut left: Vec<usize> = (given..nodes.len()).collect();
    loop {
        let mut best: Option<(usize, Vec<Option<Source>>, f64)> = None;
        for (i, &b) in left.iter().enumerate() {
            let mut with = used.clone();
            with.push(b);
            let (s, c) = arborescence(nodes, &with, tuned, scratch, reuse);
            if c < best.as_ref().map_or(cost, |b| b.2) - 1e-9 {
                best = Some((i, s, c));
            }
        }
        let Some((i, s, c)) = best else { break };
        used.push(left.remove(i));
        source = s;
        cost = c;
    }
    Selection { source, cost }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nest(e: &[usize]) -> Nest {
        Nest::new("bmm", e.to_vec())
    }

    #[test]
    fn dominance_and_reuse_pairs() {
        let a = nest(&[1, 64, 14, 14, 64, 3, 3]);
        let b = nest(&[1, 64, 28, 28, 64, 1, 1]);
        let c = nest(&[1, 64, 14, 14, 64, 1, 1]);
        assert!(!a.dominates(&b) && !b.dominates(&a) && !a.reuse_pair(&b));
        assert!(a.dominates(&c) && b.dominates(&c) && !c.dominates(&a));
        assert!(a.reuse_pair(&c) && c.reuse_pair(&b));
        assert!(a.dominates(&a), "a nest dominates itself");
        // The paper's example: the bridge of a and b is c.
        assert_eq!(a.bridge(&b), Some(c.clone()));
        assert_eq!(a.bridge(&c), None, "a reuse pair needs no bridge");
        // Other families and ranks are never compared.
        let conv = Nest::new("conv", c.extents.clone());
        assert!(!conv.reuse_pair(&c) && conv.bridge(&b).is_none());
        assert!(!nest(&[2, 2]).reuse_pair(&nest(&[2, 2, 2])));
        assert_eq!(nest(&[4, 8]).distance(&nest(&[1, 8])), 2.0);
    }

    /// Kernels of one type whose sketch sets differ (the kinds that fit depend on extents): a
    /// plan of the kernel that fits fewer kinds can be realised for one that fits more, not the
    /// other way round, and another type (a row reduction beside a contraction) never serves.
    /// A convolution over rows too short to register-block (channel-vectorised or plain) is a
    /// contraction: a plain reduction of its ranks never serves it, and its bridge with a
    /// register-blocked product is none when the two share only the plain kind (that bridge
    /// would tune neither's plans). Pooling windows are a type of their own.
    #[test]
    fn channel_vectorised_kernels_are_contractions() {
        let conv = Nest::new("channel-vectorised,plain/3/1", vec![1, 64, 12544, 147]);
        let conv2 = Nest::new("channel-vectorised,plain/3/1", vec![1, 128, 784, 576]);
        let mean = Nest::new("plain/3/1", vec![1, 64, 49, 147]);
        let gemm = Nest::new("register-blocked,row,plain/3/1", vec![1, 128, 196, 64]);
        assert!(!mean.serves(&conv) && !conv.serves(&mean));
        assert!(conv.bridge(&mean).is_none() && mean.bridge(&conv).is_none());
        assert!(!gemm.serves(&conv) && !conv.serves(&gemm));
        assert!(conv.bridge(&gemm).is_none());
        // Two channel-vectorised convolutions are one type; their bridge serves both.
        let b = conv.bridge(&conv2).expect("a bridge");
        assert_eq!(b.extents, vec![1, 64, 784, 147]);
        assert!(b.reuse_source(&conv) && b.reuse_source(&conv2));
        let pool = Nest::new("window,plain/4/2", vec![1, 64, 56, 56, 3, 3]);
        let reduce = Nest::new("plain/4/2", vec![1, 64, 56, 56, 3, 3]);
        assert!(!reduce.serves(&pool) && !pool.serves(&reduce));
    }

    #[test]
    fn a_smaller_sketch_set_serves_a_larger_one_of_its_type() {
        let few = Nest::new("register-blocked,plain/3/1", vec![1, 96, 12544, 16]);
        let many = Nest::new(
            "channel-vectorised,register-blocked,row,plain/3/1",
            vec![1, 64, 196, 384],
        );
        let row = Nest::new("row,plain/3/1", vec![1, 96, 12544, 16]);
        assert!(few.serves(&many) && !many.serves(&few));
        assert!(!row.serves(&many) && !row.serves(&few) && !few.serves(&row));
        // Not a reuse pair (16 < 384 but 96 > 64): their bridge fits the kinds both fit.
        assert!(!few.reuse_source(&many) && !many.reuse_source(&few));
        let b = few.bridge(&many).expect("a bridge");
        assert_eq!(
            b,
            Nest::new("register-blocked,plain/3/1", vec![1, 64, 196, 16])
        );
        assert!(b.reuse_source(&few) && b.reuse_source(&many));
        assert!(few.encloses(&b) && many.encloses(&b) && !row.encloses(&b));
        // Dominated in every loop: the edge goes from the fewer kinds to the more, either way
        // round in size.
        let small = Nest::new("register-blocked,plain/3/1", vec![1, 16, 196, 16]);
        assert!(small.reuse_source(&many) && !many.reuse_source(&small));
        assert!(row.bridge(&many).is_none(), "no bridge across types");
        // The same family is a reuse pair whichever way.
        let big = Nest::new("register-blocked,plain/3/1", vec![1, 96, 12544, 32]);
        assert!(few.reuse_source(&big) && big.reuse_source(&few));
    }

    /// The cheapest arborescence by trying every choice of one incoming edge per node.
    fn brute(n: usize, root: usize, edges: &[Edge]) -> Option<f64> {
        let into: Vec<Vec<usize>> = (0..n)
            .map(|v| {
                (0..edges.len())
                    .filter(|&i| edges[i].to == v && edges[i].from != v && v != root)
                    .collect()
            })
            .collect();
        let mut best: Option<f64> = None;
        let mut pick = vec![0usize; n];
        loop {
            let ok = (0..n).all(|v| v == root || !into[v].is_empty());
            if !ok {
                return None;
            }
            // Every node must reach the root through its parents.
            let parent = |v: usize| edges[into[v][pick[v]]].from;
            let reaches = (0..n).all(|v| {
                let mut w = v;
                for _ in 0..n {
                    if w == root {
                        return true;
                    }
                    w = parent(w);
                }
                w == root
            });
            if reaches {
                let c: f64 = (0..n)
                    .filter(|&v| v != root)
                    .map(|v| edges[into[v][pick[v]]].cost)
                    .sum();
                best = Some(best.map_or(c, |b: f64| b.min(c)));
            }
            // Next combination.
            let mut v = 0;
            loop {
                if v == n {
                    return best;
                }
                if v != root && pick[v] + 1 < into[v].len() {
                    pick[v] += 1;
                    break;
                }
                pick[v] = 0;
                v += 1;
            }
        }
    }

    #[test]
    fn arborescence_matches_brute_force_on_random_graphs() {
        let mut draw = crate::schedule::kernel::Draw::new(11);
        for case in 0..300 {
            let n = 2 + draw.below(5) as usize;
            let root = draw.below(n as u64) as usize;
            let mut edges = Vec::new();
            for from in 0..n {
                for to in 0..n {
                    if from != to && draw.below(100) < 55 {
                        edges.push(Edge {
                            from,
                            to,
                            cost: draw.below(20) as f64,
                        });
                    }
                }
            }
            let got = min_arborescence(n, root, &edges);
            let want = brute(n, root, &edges);
            match (got, want) {
                (None, None) => {}
                (Some(parent), Some(w)) => {
                    // A valid arborescence: every node but the root has one edge into it, and
                    // following them reaches the root.
                    assert!(parent[root].is_none());
                    for v in 0..n {
                        let mut w = v;
                        for _ in 0..=n {
                            if w == root {
                                break;
                            }
                            let e = edges[parent[w].expect("an edge into a non-root node")];
                            assert_eq!(e.to, w);
                            w = e.from;
                        }
                        assert_eq!(w, root, "case {case}: node {v} does not reach the root");
                    }
                    let c: f64 = parent.iter().flatten().map(|&i| edges[i].cost).sum();
                    assert_eq!(c, w, "case {case}: {edges:?}");
                }
                (g, w) => panic!("case {case}: got {g:?}, brute force {w:?}"),
            }
        }
    }

    /// The five batch matmuls of BERT-Base (batch, rows, columns, reduction), the paper's Figure
    /// 6 case: the two attention products are no reuse pair with anything, the three dense
    /// layers form four pairs.
    fn bert_base() -> Vec<Nest> {
        vec![
            nest(&[12, 128, 128, 64]),
            nest(&[12, 128, 64, 128]),
            nest(&[1, 128, 768, 768]),
            nest(&[1, 128, 3072, 768]),
            nest(&[1, 128, 768, 3072]),
        ]
    }

    fn scratch(_: usize) -> f64 {
        1000.0
    }

    /// A reuse costs more the farther apart the two nests are.
    fn reuse_in(nodes: &[Nest]) -> impl Fn(usize, usize) -> f64 + '_ {
        |u, v| (100.0 + 150.0 * nodes[u].distance(&nodes[v])).min(1000.0)
    }

    #[test]
    fn bridges_lower_the_trees_cost_in_the_papers_figure_6_case() {
        let ks = bert_base();
        let pairs = ks
            .iter()
            .enumerate()
            .flat_map(|(i, a)| ks.iter().enumerate().map(move |(j, b)| (i, j, a, b)))
            .filter(|(i, j, a, b)| i != j && a.reuse_pair(b))
            .count();
        assert_eq!(pairs, 4, "four reuse pairs, as in the paper");
        let none = vec![false; ks.len()];
        let plain = select(&ks, ks.len(), &none, &scratch, &reuse_in(&ks));
        // Three searched from scratch (both attention products and one dense layer), two
        // dense layers by reuse: cheaper than searching all five.
        assert_eq!(plain.counts(5), (3, 2, 0), "{plain:?}");
        assert!(plain.cost < 5000.0);
        let mut nodes = ks.clone();
        nodes.extend(bridges(&ks));
        assert!(nodes.len() > 5);
        let bridged = select(&nodes, ks.len(), &none, &scratch, &reuse_in(&nodes));
        let (_, _, used) = bridged.counts(5);
        assert!(used > 0, "bridges were added: {bridged:?}");
        assert!(
            bridged.cost < plain.cost,
            "{} !< {}",
            bridged.cost,
            plain.cost
        );
        // Every bridge kept is a source of some kernel.
        for b in 5..nodes.len() {
            if bridged.source[b].is_some() {
                assert!(
                    bridged.source.contains(&Some(Source::Reuse(b))),
                    "{bridged:?}"
                );
            }
        }
        // The order tunes every source first, and every node of the tree once.
        let order = bridged.order();
        assert_eq!(order.len(), 5 + used);
        for (k, &v) in order.iter().enumerate() {
            if let Some(Source::Reuse(u)) = bridged.source[v] {
                assert!(order[..k].contains(&u));
            }
        }
    }

    #[test]
    fn tuned_kernels_are_free_sources() {
        let ks = bert_base();
        let mut tuned = vec![false; ks.len()];
        tuned[2] = true;
        let s = select(&ks, ks.len(), &tuned, &scratch, &reuse_in(&ks));
        assert_eq!(s.source[2], Some(Source::Tuned));
        assert_eq!(s.source[3], Some(Source::Reuse(2)));
        assert_eq!(s.source[4], Some(Source::Reuse(2)));
    }
}
