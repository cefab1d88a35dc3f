//! The Collage placement search: among overlapping candidate kernels (each a set of graph nodes on
//! one backend, with a cost), choose a set that covers every node exactly once at minimum total cost.
//!
//! The search works on an abstract [`SearchProblem`] (node indices, candidates, a backend-to-backend
//! transition matrix, data edges) so it does not depend on how candidates are generated or costed.
//! Candidates whose [`Cost`] is not known ([`Cost::as_us`] is `None`) are simply left out of the
//! problem by the caller.
//!
//! # The cost of a placement
//!
//! A placement is a list of chosen candidates that are pairwise disjoint and together cover all
//! nodes; `owner(x)` is the chosen candidate containing node `x`. Its total cost is
//!
//! * the sum of the chosen candidates' costs, plus
//! * for every distinct pair (producer node `u`, consuming candidate `C`) such that some edge
//!   `(u, v)` has `v` in `C` and `owner(u) != C`: `transition[backend(owner(u))][backend(C)]`.
//!
//! So a value crossing into another candidate is charged once per consuming candidate, however many
//! of that candidate's nodes read it; a value read by two different candidates is charged twice;
//! edges inside a candidate are free. Duplicate edges count once and self-loops never count.
//! [`SearchProblem::placement_cost`] evaluates this definition directly and is the reference that
//! [`search`] and [`brute_force`] agree with.
//!
//! # The search
//!
//! [`search`] is Dijkstra over partial placements, after the PACT'22 Collage paper and the TVM
//! Collage RFC: from a state it expands only the candidates that contain the lowest uncovered node
//! and are disjoint from the covered set, so every exact cover is reached along exactly one path,
//! its candidates added in order of their lowest node. The cost of adding candidate `C` is its own
//! cost plus the transition penalties between `C` and the nodes already covered, in both directions:
//! once per covered producer feeding `C`, and once per (node of `C`, covered consuming candidate).
//! Every (producer, consuming candidate) pair is charged exactly once, when the later of its two
//! candidates is added, so the path cost equals the placement's total cost.
//!
//! Because of the penalties, the future cost of a partial placement depends on more than the covered
//! set: it also depends on which candidate (hence backend) covers each *boundary* node, a covered
//! node with an uncovered neighbour. A state is therefore the covered set plus, for each boundary
//! node, its backend and which boundary nodes share a candidate. Two partial placements with the
//! same state have the same completions at the same extra cost, so the search is exact.
//!
//! The search is bounded by [`SearchLimits::max_expanded`] and reports why it stopped
//! ([`StopReason`]); on hitting the limit it returns the best complete placement it can finish
//! greedily from the most promising open states. Ties are broken by insertion order, so results are
//! deterministic.
//!
//! [`evolve`] optionally refines a placement by evolutionary search against a score function that
//! stands in for end-to-end measurement.
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::fmt;

use thiserror::Error;

/// The cost of a kernel or a placement. Missing and failed measurements are variants, never NaN or
/// infinity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cost {
    /// Neither measured nor estimated.
    Unknown,
    /// The kernel cannot run here (it failed to build, to run, or to match the reference).
    Invalid,
    /// Measured latency.
    Measured {
        /// Median latency in microseconds.
        median_us: f64,
        /// 90th-percentile latency in microseconds.
        p90_us: f64,
    },
    /// Latency predicted by an analytic model.
    Estimated {
        /// Predicted latency in microseconds.
        us: f64,
    },
}

impl Cost {
    /// A measurement; [`Cost::Invalid`] unless both numbers are finite and non-negative.
    pub fn measured(median_us: f64, p90_us: f64) -> Cost {
        if is_latency(median_us) && is_latency(p90_us) {
            Cost::Measured { median_us, p90_us }
        } else {
            Cost::Invalid
        }
    }

    /// An estimate; [`Cost::Invalid`] unless `us` is finite and non-negative.
    pub fn estimated(us: f64) -> Cost {
        if is_latency(us) {
            Cost::Estimated { us }
        } else {
            Cost::Invalid
        }
    }

    /// The latency to compare by, in microseconds: the median of a measurement or the estimate.
    /// `None` for [`Cost::Unknown`], [`Cost::Invalid`], and variants holding a non-finite or
    /// negative number.
    pub fn as_us(&self) -> Option<f64> {
        let us = match *self {
            Cost::Measured { median_us, .. } => median_us,
            Cost::Estimated { us } => us,
            Cost::Unknown | Cost::Invalid => return None,
        };
        is_latency(us).then_some(us)
    }

    /// Whether [`Cost::as_us`] gives a number.
    pub fn is_known(&self) -> bool {
        self.as_us().is_some()
    }

    /// A total order for sorting by value: known latencies ascending, then [`Cost::Unknown`], then
    /// [`Cost::Invalid`] (which includes variants holding unusable numbers). A measurement and an
    /// estimate of the same latency compare equal.
    pub fn cmp_by_value(&self, other: &Cost) -> Ordering {
        fn rank(cost: &Cost) -> (u8, f64) {
            match (cost.as_us(), cost) {
                (Some(us), _) => (0, us),
                (None, Cost::Unknown) => (1, 0.0),
                (None, _) => (2, 0.0),
            }
        }
        let (a, b) = (rank(self), rank(other));
        a.0.cmp(&b.0).then(a.1.total_cmp(&b.1))
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Cost::Unknown => f.write_str("unknown"),
            Cost::Invalid => f.write_str("invalid"),
            Cost::Measured { median_us, p90_us } => {
                write!(f, "{median_us:.3}us (p90 {p90_us:.3}us)")
            }
            Cost::Estimated { us } => write!(f, "~{us:.3}us (estimated)"),
        }
    }
}

fn is_latency(us: f64) -> bool {
    us.is_finite() && us >= 0.0
}

/// One candidate kernel: a set of nodes run on one backend.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchCandidate {
    /// The nodes it covers: non-empty, strictly increasing, each `< n_nodes`.
    pub nodes: Vec<usize>,
    /// Which backend runs it, `< n_backends`.
    pub backend: usize,
    /// Its cost in microseconds: finite and non-negative.
    pub cost: f64,
    /// What made it (rule and backend), for explanations.
    pub label: String,
}

/// The input of the placement search. See the [module docs](self) for the cost of a placement.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchProblem {
    /// Number of graph nodes; nodes are `0..n_nodes`, normally in topological order.
    pub n_nodes: usize,
    /// The candidates; they may overlap.
    pub candidates: Vec<SearchCandidate>,
    /// Number of backends.
    pub n_backends: usize,
    /// `transition[a][b]`: penalty in microseconds for a value produced on backend `a` and consumed
    /// on backend `b` by another candidate; `n_backends × n_backends`, finite and non-negative.
    pub transition: Vec<Vec<f64>>,
    /// Data edges (producer node, consumer node).
    pub edges: Vec<(usize, usize)>,
}

/// A malformed problem, placement or parameter set.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SearchError {
    /// A candidate covers no node.
    #[error("candidate {candidate} ({label}) covers no node")]
    EmptyCandidate {
        /// Candidate index.
        candidate: usize,
        /// Candidate label.
        label: String,
    },
    /// A candidate names a node outside the graph.
    #[error(
        "candidate {candidate} ({label}) names node {node}, but the graph has {n_nodes} nodes"
    )]
    NodeOutOfRange {
        /// Candidate index.
        candidate: usize,
        /// Candidate label.
        label: String,
        /// The node.
        node: usize,
        /// Number of nodes.
        n_nodes: usize,
    },
    /// A candidate's nodes are not strictly increasing.
    #[error("candidate {candidate} ({label}): nodes must be strictly increasing")]
    NodesNotSorted {
        /// Candidate index.
        candidate: usize,
        /// Candidate label.
        label: String,
    },
    /// A candidate names a backend that does not exist.
    #[error("candidate {candidate} ({label}) names backend {backend}, but there are {n_backends}")]
    BackendOutOfRange {
        /// Candidate index.
        candidate: usize,
        /// Candidate label.
        label: String,
        /// The backend.
        backend: usize,
        /// Number of backends.
        n_backends: usize,
    },
    /// A candidate's cost is not a finite non-negative number of microseconds.
    #[error("candidate {candidate} ({label}): cost {cost} is not a finite non-negative latency")]
    BadCandidateCost {
        /// Candidate index.
        candidate: usize,
        /// Candidate label.
        label: String,
        /// The cost.
        cost: f64,
    },
    /// The transition matrix is not `n_backends × n_backends`.
    #[error("transition matrix must be {n_backends}x{n_backends}; row {row} has {len} entries")]
    TransitionShape {
        /// Number of backends.
        n_backends: usize,
        /// The first offending row (`n_backends` when the row count is wrong).
        row: usize,
        /// Its length (the row count when the row count is wrong).
        len: usize,
    },
    /// A transition penalty is not a finite non-negative number.
    #[error(
        "transition penalty from backend {from} to {to} is {penalty}, not finite non-negative"
    )]
    BadTransition {
        /// Producing backend.
        from: usize,
        /// Consuming backend.
        to: usize,
        /// The penalty.
        penalty: f64,
    },
    /// An edge names a node outside the graph.
    #[error("edge {producer} -> {consumer} leaves the graph of {n_nodes} nodes")]
    EdgeOutOfRange {
        /// Producer node.
        producer: usize,
        /// Consumer node.
        consumer: usize,
        /// Number of nodes.
        n_nodes: usize,
    },
    /// A placement names a candidate that does not exist.
    #[error("placement names candidate {candidate}, but there are {n_candidates}")]
    UnknownCandidate {
        /// The index.
        candidate: usize,
        /// Number of candidates.
        n_candidates: usize,
    },
    /// Two chosen candidates share a node.
    #[error("node {node} is covered by both candidate {first} and candidate {second}")]
    Overlap {
        /// The node.
        node: usize,
        /// The candidate listed first.
        first: usize,
        /// The candidate listed later.
        second: usize,
    },
    /// No chosen candidate covers a node.
    #[error("node {node} is not covered by the placement")]
    Uncovered {
        /// The lowest uncovered node.
        node: usize,
    },
    /// [`EvolveParams`] are unusable.
    #[error("evolutionary search parameters: {reason}")]
    BadEvolveParams {
        /// What is wrong.
        reason: &'static str,
    },
}

impl SearchProblem {
    /// Checks the shape and numbers of the problem (see the field docs).
    pub fn validate(&self) -> Result<(), SearchError> {
        for (candidate, c) in self.candidates.iter().enumerate() {
            let label = || c.label.clone();
            if c.nodes.is_empty() {
                return Err(SearchError::EmptyCandidate {
                    candidate,
                    label: label(),
                });
            }
            if let Some(&node) = c.nodes.iter().find(|&&x| x >= self.n_nodes) {
                return Err(SearchError::NodeOutOfRange {
                    candidate,
                    label: label(),
                    node,
                    n_nodes: self.n_nodes,
                });
            }
            if c.nodes.windows(2).any(|w| w[0] >= w[1]) {
                return Err(SearchError::NodesNotSorted {
                    candidate,
                    label: label(),
                });
            }
            if c.backend >= self.n_backends {
                return Err(SearchError::BackendOutOfRange {
                    candidate,
                    label: label(),
                    backend: c.backend,
                    n_backends: self.n_backends,
                });
            }
            if !is_latency(c.cost) {
                return Err(SearchError::BadCandidateCost {
                    candidate,
                    label: label(),
                    cost: c.cost,
                });
            }
        }
        if self.transition.len() != self.n_backends {
            return Err(SearchError::TransitionShape {
                n_backends: self.n_backends,
                row: self.n_backends,
                len: self.transition.len(),
            });
        }
        for (from, row) in self.transition.iter().enumerate() {
            if row.len() != self.n_backends {
                return Err(SearchError::TransitionShape {
                    n_backends: self.n_backends,
                    row: from,
                    len: row.len(),
                });
            }
            if let Some((to, &penalty)) = row.iter().enumerate().find(|(_, &p)| !is_latency(p)) {
                return Err(SearchError::BadTransition { from, to, penalty });
            }
        }
        if let Some(&(producer, consumer)) = self
            .edges
            .iter()
            .find(|&&(u, v)| u >= self.n_nodes || v >= self.n_nodes)
        {
            return Err(SearchError::EdgeOutOfRange {
                producer,
                consumer,
                n_nodes: self.n_nodes,
            });
        }
        Ok(())
    }

    /// The total cost of a placement, straight from the definition in the [module docs](self).
    /// Fails when the problem is malformed or `chosen` is not an exact cover.
    pub fn placement_cost(&self, chosen: &[usize]) -> Result<f64, SearchError> {
        self.validate()?;
        let owner = self.owners(chosen)?;
        let mut total: f64 = chosen.iter().map(|&c| self.candidates[c].cost).sum();
        let mut charged = BTreeSet::new();
        for &(u, v) in &self.edges {
            let (from, to) = (owner[u], owner[v]);
            if from != to && charged.insert((u, to)) {
                total +=
                    self.transition[self.candidates[from].backend][self.candidates[to].backend];
            }
        }
        Ok(total)
    }

    /// The chosen candidate covering each node; fails unless `chosen` is an exact cover.
    fn owners(&self, chosen: &[usize]) -> Result<Vec<usize>, SearchError> {
        let mut owner = vec![NONE; self.n_nodes];
        for &c in chosen {
            let cand = self
                .candidates
                .get(c)
                .ok_or(SearchError::UnknownCandidate {
                    candidate: c,
                    n_candidates: self.candidates.len(),
                })?;
            for &x in &cand.nodes {
                if owner[x] != NONE {
                    return Err(SearchError::Overlap {
                        node: x,
                        first: owner[x],
                        second: c,
                    });
                }
                owner[x] = c;
            }
        }
        match owner.iter().position(|&c| c == NONE) {
            Some(node) => Err(SearchError::Uncovered { node }),
            None => Ok(owner),
        }
    }
}

/// Bounds on the work [`search`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchLimits {
    /// Most states the Dijkstra search expands before falling back.
    pub max_expanded: usize,
    /// On hitting `max_expanded`: how many of the cheapest open states to complete greedily.
    pub fallback_starts: usize,
    /// On hitting `max_expanded`: the total number of candidate placements the greedy
    /// completions (which backtrack out of dead ends) may try.
    pub fallback_steps: usize,
}

impl Default for SearchLimits {
    fn default() -> Self {
        SearchLimits {
            max_expanded: 200_000,
            fallback_starts: 16,
            fallback_steps: 100_000,
        }
    }
}

/// Why [`search`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The placement is optimal.
    Optimal,
    /// The state limit was hit; the placement is the cheapest of the complete placements already
    /// reached and the greedy completions of the most promising open states. Not proven optimal.
    StateLimit {
        /// States expanded.
        expanded: usize,
    },
    /// The state limit was hit and no fallback completion was found within its step budget; there
    /// is no placement.
    StateLimitNoPlacement {
        /// States expanded.
        expanded: usize,
    },
    /// No candidate contains this node, so there is no placement.
    NoCover {
        /// The lowest node that no candidate contains.
        first_uncoverable_node: usize,
    },
    /// Every node has a candidate, but no set of disjoint candidates covers all nodes.
    NoExactCover,
    /// No search ran: the fixed-priority rule (`--greedy`) made the placement.
    Greedy,
    /// The placement recorded in the cost cache by `collage tune --evolve`: the fastest measured
    /// end to end (the search's own placement among those measured).
    Recorded {
        /// Its end-to-end median latency, in nanoseconds.
        median_ns: u64,
        /// The thread count it was measured on.
        threads: usize,
    },
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            StopReason::Optimal => f.write_str("optimal"),
            StopReason::StateLimit { expanded } => write!(
                f,
                "state limit reached after {expanded} states; greedy fallback placement"
            ),
            StopReason::StateLimitNoPlacement { expanded } => write!(
                f,
                "state limit reached after {expanded} states; no fallback placement found"
            ),
            StopReason::NoCover {
                first_uncoverable_node,
            } => write!(f, "no candidate contains node {first_uncoverable_node}"),
            StopReason::NoExactCover => {
                f.write_str("no set of disjoint candidates covers every node")
            }
            StopReason::Greedy => f.write_str("fixed-priority rule (--greedy), no search"),
            StopReason::Recorded { median_ns, threads } => write!(
                f,
                "recorded by `collage tune --evolve`: fastest measured end to end ({:.1} us on {threads} thread(s))",
                median_ns as f64 / 1e3
            ),
        }
    }
}

/// What [`search`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult {
    /// Indices of the chosen candidates, in order of their lowest node. Empty exactly when there is
    /// no placement ([`SearchResult::has_placement`] is false) or the graph has no nodes.
    pub chosen: Vec<usize>,
    /// Total cost of `chosen` in microseconds, as [`SearchProblem::placement_cost`] defines it;
    /// `0.0` when there is no placement.
    pub cost: f64,
    /// Why the search stopped.
    pub stop: StopReason,
    /// States expanded.
    pub expanded: usize,
}

impl SearchResult {
    /// Whether `chosen` is a placement (optimal or fallback).
    pub fn has_placement(&self) -> bool {
        matches!(
            self.stop,
            StopReason::Optimal | StopReason::StateLimit { .. }
        )
    }
}

/// Marks "no candidate" in per-node tables (an index, never a cost).
const NONE: usize = usize::MAX;

/// Per-node adjacency and candidate tables derived from a validated problem.
struct Prepared<'p> {
    problem: &'p SearchProblem,
    /// Consumers of each node, sorted, without duplicates or self-loops.
    succ: Vec<Vec<usize>>,
    /// Producers of each node, likewise.
    pred: Vec<Vec<usize>>,
    /// Union of both.
    nbrs: Vec<Vec<usize>>,
    /// Candidates whose lowest node is this node, in index order.
    by_first: Vec<Vec<usize>>,
}

impl<'p> Prepared<'p> {
    fn new(problem: &'p SearchProblem) -> Self {
        let n = problem.n_nodes;
        let (mut succ, mut pred, mut nbrs) = (vec![vec![]; n], vec![vec![]; n], vec![vec![]; n]);
        for &(u, v) in &problem.edges {
            if u != v {
                succ[u].push(v);
                pred[v].push(u);
                nbrs[u].push(v);
                nbrs[v].push(u);
            }
        }
        for list in succ.iter_mut().chain(&mut pred).chain(&mut nbrs) {
            list.sort_unstable();
            list.dedup();
        }
        let mut by_first = vec![vec![]; n];
        for (i, c) in problem.candidates.iter().enumerate() {
            by_first[c.nodes[0]].push(i);
        }
        Prepared {
            problem,
            succ,
            pred,
            nbrs,
            by_first,
        }
    }

    fn backend(&self, candidate: usize) -> usize {
        self.problem.candidates[candidate].backend
    }

    /// Cost of adding candidate `c` to a partial placement: its own cost plus the penalties of the
    /// edges between it and covered nodes. `owner[x]` must name the candidate covering `x` for every
    /// covered neighbour of `c`'s nodes and be [`NONE`] for `c`'s own nodes.
    fn increment(&self, owner: &[usize], c: usize, scratch: &mut Vec<usize>) -> f64 {
        let cand = &self.problem.candidates[c];
        let tr = &self.problem.transition;
        let b = cand.backend;
        let mut total = cand.cost;
        // Covered producers feeding `c`: once per producer.
        scratch.clear();
        for &v in &cand.nodes {
            scratch.extend(self.pred[v].iter().copied().filter(|&u| owner[u] != NONE));
        }
        scratch.sort_unstable();
        scratch.dedup();
        for &u in scratch.iter() {
            total += tr[self.backend(owner[u])][b];
        }
        // Values of `c` read by covered candidates: once per (producer node, consuming candidate).
        for &w in &cand.nodes {
            scratch.clear();
            scratch.extend(
                self.succ[w]
                    .iter()
                    .map(|&v| owner[v])
                    .filter(|&o| o != NONE),
            );
            scratch.sort_unstable();
            scratch.dedup();
            for &d in scratch.iter() {
                total += tr[b][self.backend(d)];
            }
        }
        total
    }

    fn disjoint(&self, covered: &[u64], c: usize) -> bool {
        self.problem.candidates[c]
            .nodes
            .iter()
            .all(|&x| !bit(covered, x))
    }

    /// Greedy completion of a partial placement: at each step, add the candidate with the cheapest
    /// increment among those containing the lowest uncovered node, backtracking out of dead ends.
    /// Returns the added candidates and their total increment, or `None` when `steps` runs out or
    /// no completion exists.
    fn complete_greedily(
        &self,
        owner: &mut [usize],
        covered: &mut [u64],
        steps: &mut usize,
        prefer: Option<usize>,
    ) -> Option<(Vec<usize>, f64)> {
        struct Frame {
            options: Vec<(f64, usize)>,
            next: usize,
        }
        let n = self.problem.n_nodes;
        let mut scratch = Vec::new();
        let mut frames: Vec<Frame> = Vec::new();
        let mut picked: Vec<(usize, f64)> = Vec::new();
        let mut descend = true;
        loop {
            if descend {
                let Some(low) = lowest_unset(covered, n) else {
                    let extra = picked.iter().map(|&(_, inc)| inc).sum();
                    return Some((picked.into_iter().map(|(c, _)| c).collect(), extra));
                };
                let mut options: Vec<(f64, usize)> = self.by_first[low]
                    .iter()
                    .filter(|&&c| self.disjoint(covered, c))
                    .map(|&c| (self.increment(owner, c, &mut scratch), c))
                    .collect();
                // With a preferred backend: its candidates first, largest first.
                let rank = |c: usize| match prefer {
                    Some(b) if self.backend(c) == b => {
                        (0, usize::MAX - self.problem.candidates[c].nodes.len())
                    }
                    Some(_) => (1, 0),
                    None => (0, 0),
                };
                options.sort_by(|a, b| {
                    rank(a.1)
                        .cmp(&rank(b.1))
                        .then(a.0.total_cmp(&b.0))
                        .then(a.1.cmp(&b.1))
                });
                frames.push(Frame { options, next: 0 });
            }
            let depth = frames.len();
            let top = frames.last_mut()?;
            if picked.len() == depth {
                let (c, _) = picked.pop()?;
                for &x in &self.problem.candidates[c].nodes {
                    owner[x] = NONE;
                    clear_bit(covered, x);
                }
            }
            if top.next < top.options.len() {
                if *steps == 0 {
                    return None;
                }
                *steps -= 1;
                let (inc, c) = top.options[top.next];
                top.next += 1;
                for &x in &self.problem.candidates[c].nodes {
                    owner[x] = c;
                    set_bit(covered, x);
                }
                picked.push((c, inc));
                descend = true;
            } else {
                frames.pop();
                descend = false;
            }
        }
    }
}

fn words(n: usize) -> usize {
    n.div_ceil(64)
}

fn bit(set: &[u64], i: usize) -> bool {
    set[i / 64] >> (i % 64) & 1 == 1
}

fn set_bit(set: &mut [u64], i: usize) {
    set[i / 64] |= 1 << (i % 64);
}

fn clear_bit(set: &mut [u64], i: usize) {
    set[i / 64] &= !(1 << (i % 64));
}

fn lowest_unset(set: &[u64], n: usize) -> Option<usize> {
    set.iter()
        .enumerate()
        .find(|(_, &w)| w != u64::MAX)
        .map(|(i, &w)| i * 64 + (!w).trailing_zeros() as usize)
        .filter(|&x| x < n)
}

/// An `f64` ordered by `total_cmp`, for heap keys.
#[derive(Debug, Clone, Copy)]
struct Key(f64);

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0) == Ordering::Equal
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// One search state: a partial placement, represented by the cheapest path found to it.
struct State {
    covered: Vec<u64>,
    /// Covered nodes with an uncovered neighbour, in node order, with the candidate covering each
    /// on the cheapest path found.
    boundary: Vec<(usize, usize)>,
    n_covered: usize,
    dist: f64,
    /// Previous state and the candidate added from it; `None` for the empty placement.
    back: Option<(usize, usize)>,
    closed: bool,
}

/// What identifies a state: the covered set and, per boundary node in node order, its backend and
/// the index (by first appearance) of its candidate among the boundary's candidates.
type StateKey = (Vec<u64>, Vec<(usize, usize)>);

fn state_key(prep: &Prepared<'_>, covered: &[u64], boundary: &[(usize, usize)]) -> StateKey {
    // Candidate -> its index by first appearance. A map, not a search of the list: a boundary
    // can hold thousands of candidates (a value read by thousands of nodes), and a search made
    // every state cost their square.
    let mut seen: HashMap<usize, usize> = HashMap::with_capacity(boundary.len());
    let labels = boundary
        .iter()
        .map(|&(_, c)| {
            let next = seen.len();
            (prep.backend(c), *seen.entry(c).or_insert(next))
        })
        .collect();
    (covered.to_vec(), labels)
}

fn path_of(states: &[State], mut id: usize) -> Vec<usize> {
    let mut path = Vec::new();
    while let Some((prev, c)) = states[id].back {
        path.push(c);
        id = prev;
    }
    path.reverse();
    path
}

/// The placement that frameworks' maximal-fusion rule gives: every node that backend `prefer`
/// can run goes to its largest candidate (scanning nodes in order), the rest to the cheapest
/// candidates; `None` if that leaves the graph uncoverable within `limits.fallback_steps`.
pub fn largest_on(
    problem: &SearchProblem,
    prefer: usize,
    limits: SearchLimits,
) -> Result<Option<Vec<usize>>, SearchError> {
    problem.validate()?;
    let prep = Prepared::new(problem);
    let n = problem.n_nodes;
    let mut owner = vec![NONE; n];
    let mut covered = vec![0; words(n)];
    let mut steps = limits.fallback_steps;
    Ok(prep
        .complete_greedily(&mut owner, &mut covered, &mut steps, Some(prefer))
        .map(|(chosen, _)| chosen))
}

/// Finds the cheapest placement of `problem` by Dijkstra over partial placements (see the
/// [module docs](self)), within `limits`. Fails only when the problem is malformed.
pub fn search(problem: &SearchProblem, limits: SearchLimits) -> Result<SearchResult, SearchError> {
    problem.validate()?;
    let n = problem.n_nodes;
    let no_placement = |stop, expanded| SearchResult {
        chosen: Vec::new(),
        cost: 0.0,
        stop,
        expanded,
    };
    let mut coverable = vec![false; n];
    for c in &problem.candidates {
        for &x in &c.nodes {
            coverable[x] = true;
        }
    }
    if let Some(node) = coverable.iter().position(|&ok| !ok) {
        let stop = StopReason::NoCover {
            first_uncoverable_node: node,
        };
        return Ok(no_placement(stop, 0));
    }

    let prep = Prepared::new(problem);
    let mut states = vec![State {
        covered: vec![0; words(n)],
        boundary: Vec::new(),
        n_covered: 0,
        dist: 0.0,
        back: None,
        closed: false,
    }];
    let mut index: BTreeMap<StateKey, usize> = BTreeMap::new();
    index.insert(state_key(&prep, &states[0].covered, &[]), 0);
    let mut heap = BinaryHeap::new();
    heap.push(Reverse((Key(0.0), 0usize)));
    // Cheapest complete placement reached so far (not yet proven optimal): (cost, state).
    let mut best_goal: Option<(f64, usize)> = None;
    let mut owner = vec![NONE; n];
    let mut scratch = Vec::new();
    let mut expanded = 0;

    while let Some(Reverse((Key(dist), id))) = heap.pop() {
        if states[id].closed || dist > states[id].dist {
            continue;
        }
        if states[id].n_covered == n {
            return Ok(SearchResult {
                chosen: path_of(&states, id),
                cost: dist,
                stop: StopReason::Optimal,
                expanded,
            });
        }
        if expanded >= limits.max_expanded {
            heap.push(Reverse((Key(dist), id)));
            return Ok(fallback(&prep, &states, heap, best_goal, expanded, limits));
        }
        states[id].closed = true;
        expanded += 1;

        let low = lowest_unset(&states[id].covered, n).expect("an incomplete state has a gap");
        for &(x, c) in &states[id].boundary {
            owner[x] = c;
        }
        for &c in &prep.by_first[low] {
            if !prep.disjoint(&states[id].covered, c) {
                continue;
            }
            let cand = &problem.candidates[c];
            let next_dist = dist + prep.increment(&owner, c, &mut scratch);
            let mut covered = states[id].covered.clone();
            for &x in &cand.nodes {
                set_bit(&mut covered, x);
            }
            let n_covered = states[id].n_covered + cand.nodes.len();
            let boundary = merge_boundary(&prep, &covered, &states[id].boundary, &cand.nodes, c);
            let key = state_key(&prep, &covered, &boundary);
            let next = match index.get(&key) {
                Some(&next) => {
                    let s = &mut states[next];
                    if s.closed || next_dist >= s.dist {
                        continue;
                    }
                    s.dist = next_dist;
                    s.back = Some((id, c));
                    s.boundary = boundary;
                    next
                }
                None => {
                    states.push(State {
                        covered,
                        boundary,
                        n_covered,
                        dist: next_dist,
                        back: Some((id, c)),
                        closed: false,
                    });
                    index.insert(key, states.len() - 1);
                    states.len() - 1
                }
            };
            if n_covered == n && best_goal.is_none_or(|(d, _)| next_dist < d) {
                best_goal = Some((next_dist, next));
            }
            heap.push(Reverse((Key(next_dist), next)));
        }
        for &(x, _) in &states[id].boundary {
            owner[x] = NONE;
        }
    }
    Ok(no_placement(StopReason::NoExactCover, expanded))
}

/// The boundary after adding candidate `c` (nodes `added`) to a state with boundary `old`: nodes of
/// either list, in node order, that still have an uncovered neighbour in `covered`.
fn merge_boundary(
    prep: &Prepared<'_>,
    covered: &[u64],
    old: &[(usize, usize)],
    added: &[usize],
    c: usize,
) -> Vec<(usize, usize)> {
    let mut merged = Vec::with_capacity(old.len() + added.len());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < added.len() {
        let entry = if j == added.len() || (i < old.len() && old[i].0 < added[j]) {
            i += 1;
            old[i - 1]
        } else {
            j += 1;
            (added[j - 1], c)
        };
        if prep.nbrs[entry.0].iter().any(|&y| !bit(covered, y)) {
            merged.push(entry);
        }
    }
    merged
}

/// The state-limit fallback: the cheapest of the complete placements already reached and the greedy
/// completions of the empty placement and of the cheapest open states.
fn fallback(
    prep: &Prepared<'_>,
    states: &[State],
    mut heap: BinaryHeap<Reverse<(Key, usize)>>,
    best_goal: Option<(f64, usize)>,
    expanded: usize,
    limits: SearchLimits,
) -> SearchResult {
    let n = prep.problem.n_nodes;
    let mut best: Option<(f64, Vec<usize>)> =
        best_goal.map(|(cost, id)| (cost, path_of(states, id)));
    let mut starts = vec![0];
    while starts.len() <= limits.fallback_starts {
        let Some(Reverse((Key(dist), id))) = heap.pop() else {
            break;
        };
        if !states[id].closed && dist <= states[id].dist && !starts.contains(&id) {
            starts.push(id);
        }
    }
    let mut steps = limits.fallback_steps;
    for id in starts {
        let path = path_of(states, id);
        let mut owner = vec![NONE; n];
        for &c in &path {
            for &x in &prep.problem.candidates[c].nodes {
                owner[x] = c;
            }
        }
        let mut covered = states[id].covered.clone();
        if let Some((rest, extra)) =
            prep.complete_greedily(&mut owner, &mut covered, &mut steps, None)
        {
            let cost = states[id].dist + extra;
            if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                best = Some((cost, path.into_iter().chain(rest).collect()));
            }
        }
    }
    match best {
        Some((cost, chosen)) => SearchResult {
            chosen,
            cost,
            stop: StopReason::StateLimit { expanded },
            expanded,
        },
        None => SearchResult {
            chosen: Vec::new(),
            cost: 0.0,
            stop: StopReason::StateLimitNoPlacement { expanded },
            expanded,
        },
    }
}

/// Enumerates every exact cover and returns the cheapest (the first found among equals) with its
/// [`SearchProblem::placement_cost`], or `None` when there is none. Exponential: for tests and tiny
/// graphs only.
pub fn brute_force(problem: &SearchProblem) -> Result<Option<(Vec<usize>, f64)>, SearchError> {
    fn walk(
        problem: &SearchProblem,
        covered: &mut Vec<bool>,
        chosen: &mut Vec<usize>,
        best: &mut Option<(Vec<usize>, f64)>,
    ) -> Result<(), SearchError> {
        let Some(low) = covered.iter().position(|&c| !c) else {
            let cost = problem.placement_cost(chosen)?;
            if best.as_ref().is_none_or(|(_, b)| cost < *b) {
                *best = Some((chosen.clone(), cost));
            }
            return Ok(());
        };
        for (i, c) in problem.candidates.iter().enumerate() {
            if !c.nodes.contains(&low) || c.nodes.iter().any(|&x| covered[x]) {
                continue;
            }
            c.nodes.iter().for_each(|&x| covered[x] = true);
            chosen.push(i);
            walk(problem, covered, chosen, best)?;
            chosen.pop();
            c.nodes.iter().for_each(|&x| covered[x] = false);
        }
        Ok(())
    }
    problem.validate()?;
    let mut best = None;
    walk(
        problem,
        &mut vec![false; problem.n_nodes],
        &mut Vec::new(),
        &mut best,
    )?;
    Ok(best)
}

/// Parameters of [`evolve`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvolveParams {
    /// Individuals per generation, at least 1.
    pub population: usize,
    /// Generations after the initial population.
    pub generations: usize,
    /// Probability, per node and child, of re-drawing the node's candidate; in `[0, 1]`.
    pub mutation_rate: f64,
    /// Seed of the random number generator; the same seed gives the same result.
    pub seed: u64,
}

impl Default for EvolveParams {
    fn default() -> Self {
        EvolveParams {
            population: 16,
            generations: 20,
            mutation_rate: 0.1,
            seed: 0x5eed_c011_a6e0,
        }
    }
}

/// What [`evolve`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Evolved {
    /// The best placement scored, in order of the candidates' lowest node; never worse than the seed.
    pub chosen: Vec<usize>,
    /// Its score.
    pub score: f64,
    /// Number of calls to the score function (each distinct placement is scored once).
    pub evaluations: usize,
}

/// A small deterministic xorshift64* generator.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`; `n` must be positive.
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Orders scores: finite ones ascending, every non-finite one after them (and equal to each other).
fn score_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_finite(), b.is_finite()) {
        (true, true) => a.total_cmp(&b),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => Ordering::Equal,
    }
}

#[derive(Clone)]
struct Individual {
    /// The candidate covering each node.
    genes: Vec<usize>,
    chosen: Vec<usize>,
    score: f64,
}

/// Graph-level refinement by evolutionary search, seeded with a placement (normally the one from
/// [`search`]) and scored by `score` (lower is better; a stand-in for end-to-end measurement, called
/// with a placement in order of the candidates' lowest node; non-finite scores rank last).
/// [`evolve_batched`] with one placement scored at a time.
pub fn evolve(
    problem: &SearchProblem,
    seed_placement: &[usize],
    score: &mut dyn FnMut(&[usize]) -> f64,
    params: EvolveParams,
) -> Result<Evolved, SearchError> {
    evolve_batched(
        problem,
        seed_placement,
        &mut |batch| batch.iter().map(|c| score(c)).collect(),
        params,
    )
}

/// [`evolve`] with the placements of a generation scored together: `score` receives every
/// placement of one generation not scored before (distinct, in breeding order) and returns their
/// scores in that order, so that a caller measuring end to end can compile them in parallel.
/// The result is the one [`evolve`] gives with the same scores: within a generation, parents are
/// drawn from the previous one and the best so far only seeds the next.
///
/// The genome gives, per node, the candidate (hence backend) covering it. Each generation keeps the
/// best individual so far and breeds the rest: two parents by binary tournament, two-point crossover
/// over node order, then per-node mutation to a random candidate containing the node. A child is
/// repaired into an exact cover by walking nodes in order: the lowest uncovered node takes its
/// gene's candidate if that is disjoint from what is covered, else the cheapest single-node
/// candidate for it, else the cheapest disjoint candidate containing it; a child that cannot be
/// repaired is replaced by its first parent. Deterministic for a given `params.seed`.
pub fn evolve_batched(
    problem: &SearchProblem,
    seed_placement: &[usize],
    score: &mut dyn FnMut(&[Vec<usize>]) -> Vec<f64>,
    params: EvolveParams,
) -> Result<Evolved, SearchError> {
    problem.validate()?;
    if params.population == 0 {
        return Err(SearchError::BadEvolveParams {
            reason: "population must be at least 1",
        });
    }
    if !(0.0..=1.0).contains(&params.mutation_rate) {
        return Err(SearchError::BadEvolveParams {
            reason: "mutation_rate must lie in [0, 1]",
        });
    }
    let seed_genes = problem.owners(seed_placement)?;
    let n = problem.n_nodes;
    let cands = &problem.candidates;
    let cheaper = |&a: &usize, &b: &usize| cands[a].cost.total_cmp(&cands[b].cost).then(a.cmp(&b));
    let mut containing = vec![Vec::new(); n];
    for (i, c) in cands.iter().enumerate() {
        for &x in &c.nodes {
            containing[x].push(i);
        }
    }
    let single: Vec<Option<usize>> = containing
        .iter()
        .map(|cs| {
            cs.iter()
                .copied()
                .filter(|&c| cands[c].nodes.len() == 1)
                .min_by(cheaper)
        })
        .collect();

    let repair = |genes: &[usize]| -> Option<(Vec<usize>, Vec<usize>)> {
        let mut owner = vec![NONE; n];
        let mut chosen = Vec::new();
        for x in 0..n {
            if owner[x] != NONE {
                continue;
            }
            let free = |c: &usize| cands[*c].nodes.iter().all(|&y| owner[y] == NONE);
            let c = Some(genes[x])
                .filter(free)
                .or(single[x])
                .or_else(|| containing[x].iter().copied().filter(free).min_by(cheaper))?;
            for &y in &cands[c].nodes {
                owner[y] = c;
            }
            chosen.push(c);
        }
        Some((owner, chosen))
    };
    let mutate = |genes: &mut [usize], rng: &mut Rng, node: usize| {
        let c = containing[node][rng.below(containing[node].len())];
        for &y in &cands[c].nodes {
            genes[y] = c;
        }
    };
    // Scores a generation's children (a child that could not be repaired is its parent, scored
    // already): the placements not scored before go to `score` in one batch.
    let mut memo: BTreeMap<Vec<usize>, f64> = BTreeMap::new();
    let mut evaluate = |children: Vec<Result<(Vec<usize>, Vec<usize>), Individual>>| {
        let mut todo: Vec<Vec<usize>> = Vec::new();
        for (_, chosen) in children.iter().flatten() {
            if !memo.contains_key(chosen) && !todo.contains(chosen) {
                todo.push(chosen.clone());
            }
        }
        if !todo.is_empty() {
            let scores = score(&todo);
            for (i, chosen) in todo.into_iter().enumerate() {
                memo.insert(chosen, scores.get(i).copied().unwrap_or(f64::NAN));
            }
        }
        children
            .into_iter()
            .map(|c| match c {
                Ok((genes, chosen)) => Individual {
                    score: memo[&chosen],
                    genes,
                    chosen,
                },
                Err(parent) => parent,
            })
            .collect::<Vec<_>>()
    };

    let mut rng = Rng::new(params.seed);
    let mut seed_chosen = seed_placement.to_vec();
    seed_chosen.sort_by_key(|&c| cands[c].nodes[0]);
    let seed = evaluate(vec![Ok((seed_genes, seed_chosen))]).remove(0);
    let mut best = seed.clone();
    let breed = |parents: (&Individual, &Individual), rng: &mut Rng, force: bool| {
        let mut genes = parents.0.genes.clone();
        if n > 0 {
            let (a, b) = (rng.below(n + 1), rng.below(n + 1));
            let (lo, hi) = (a.min(b), a.max(b));
            genes[lo..hi].copy_from_slice(&parents.1.genes[lo..hi]);
            if force {
                let node = rng.below(n);
                mutate(&mut genes, rng, node);
            }
            for x in 0..n {
                if rng.unit() < params.mutation_rate {
                    mutate(&mut genes, rng, x);
                }
            }
        }
        repair(&genes).ok_or_else(|| parents.0.clone())
    };
    let children: Vec<_> = (1..params.population)
        .map(|_| breed((&seed, &seed), &mut rng, true))
        .collect();
    let mut population = vec![seed.clone()];
    for child in evaluate(children) {
        if score_cmp(child.score, best.score) == Ordering::Less {
            best = child.clone();
        }
        population.push(child);
    }
    for _ in 0..params.generations {
        let mut children = Vec::new();
        for _ in 1..params.population {
            let pick = |rng: &mut Rng| {
                let (a, b) = (rng.below(population.len()), rng.below(population.len()));
                if score_cmp(population[b].score, population[a].score) == Ordering::Less {
                    b
                } else {
                    a
                }
            };
            let (p1, p2) = (pick(&mut rng), pick(&mut rng));
            children.push(breed((&population[p1], &population[p2]), &mut rng, false));
        }
        let mut next = vec![best.clone()];
        for child in evaluate(children) {
            if score_cmp(child.score, best.score) == Ordering::Less {
                best = child.clone();
            }
            next.push(child);
        }
        population = next;
    }
    Ok(Evolved {
        chosen: best.chosen,
        score: best.score,
        evaluations: memo.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(nodes: &[usize], backend: usize, cost: f64) -> SearchCandidate {
        SearchCandidate {
            nodes: nodes.to_vec(),
            backend,
            cost,
            label: format!("b{backend}{nodes:?}"),
        }
    }

    fn problem(
        n_nodes: usize,
        candidates: Vec<SearchCandidate>,
        transition: Vec<Vec<f64>>,
        edges: &[(usize, usize)],
    ) -> SearchProblem {
        SearchProblem {
            n_nodes,
            candidates,
            n_backends: transition.len(),
            transition,
            edges: edges.to_vec(),
        }
    }

    /// Maximal fusion takes the preferred backend's largest candidates even where the cheapest
    /// placement would not, and the cheapest candidate for what that backend cannot run.
    #[test]
    fn largest_on_prefers_the_backends_largest_candidates() {
        // 0 -> 1 -> 2 -> 3; backend 1 runs [0, 1, 2], [0, 1], [0] and [3].
        let p = problem(
            4,
            vec![
                cand(&[0], 0, 1.0),
                cand(&[1], 0, 1.0),
                cand(&[2], 0, 1.0),
                cand(&[3], 0, 1.0),
                cand(&[3], 1, 0.5),
                cand(&[0], 1, 5.0),
                cand(&[0, 1], 1, 8.0),
                cand(&[0, 1, 2], 1, 20.0),
                cand(&[3], 0, 0.7),
            ],
            vec![vec![0.0, 0.0], vec![0.0, 0.0]],
            &[(0, 1), (1, 2), (2, 3)],
        );
        let chosen = largest_on(&p, 1, SearchLimits::default()).unwrap().unwrap();
        assert_eq!(chosen, vec![7, 4]);
        // Preferring backend 0 (singletons only): its candidates, cheapest first.
        let chosen = largest_on(&p, 0, SearchLimits::default()).unwrap().unwrap();
        assert_eq!(chosen, vec![0, 1, 2, 8]);
        assert_eq!(p.owners(&chosen).unwrap().len(), 4);
    }

    /// A random DAG of 4..=9 nodes (nodes in topological order) on 2..=3 backends, with random
    /// contiguous ranges and, when `non_contiguous`, random arbitrary subsets as extra candidates.
    /// With `singletons`, every node has a single-node candidate on every backend.
    fn random_problem(rng: &mut Rng, singletons: bool, non_contiguous: bool) -> SearchProblem {
        let n = 4 + rng.below(6);
        let n_backends = 2 + rng.below(2);
        let mut edges = Vec::new();
        for v in 1..n {
            for u in 0..v {
                if rng.unit() < 0.35 {
                    edges.push((u, v));
                }
            }
            if !edges.iter().any(|&(_, w)| w == v) && rng.unit() < 0.7 {
                edges.push((rng.below(v), v));
            }
        }
        let mut candidates = Vec::new();
        for x in 0..n {
            for b in 0..n_backends {
                if singletons || rng.unit() < 0.3 {
                    candidates.push(cand(&[x], b, 1.0 + 9.0 * rng.unit()));
                }
            }
        }
        for _ in 0..3 + rng.below(6) {
            let len = 2 + rng.below(3);
            let start = rng.below(n - 1);
            let nodes: Vec<usize> = (start..(start + len).min(n)).collect();
            candidates.push(cand(&nodes, rng.below(n_backends), 1.0 + 14.0 * rng.unit()));
        }
        if non_contiguous {
            for _ in 0..2 + rng.below(5) {
                let mut nodes: Vec<usize> = (0..n).filter(|_| rng.unit() < 0.35).collect();
                if nodes.len() < 2 {
                    nodes = vec![rng.below(n / 2), n / 2 + rng.below(n - n / 2)];
                }
                candidates.push(cand(&nodes, rng.below(n_backends), 1.0 + 14.0 * rng.unit()));
            }
        }
        let transition = (0..n_backends)
            .map(|a| {
                (0..n_backends)
                    .map(|b| if a == b { rng.unit() } else { 5.0 * rng.unit() })
                    .collect()
            })
            .collect();
        problem(n, candidates, transition, &edges)
    }

    fn assert_exact_cover(p: &SearchProblem, chosen: &[usize]) {
        let mut count = vec![0; p.n_nodes];
        for &c in chosen {
            for &x in &p.candidates[c].nodes {
                count[x] += 1;
            }
        }
        assert!(
            count.iter().all(|&k| k == 1),
            "not an exact cover: {chosen:?}"
        );
    }

    #[test]
    fn cost_orders_known_values_then_unknown_then_invalid() {
        let mut costs = [
            Cost::Invalid,
            Cost::Estimated { us: 3.0 },
            Cost::Unknown,
            Cost::measured(1.0, 2.0),
            Cost::Measured {
                median_us: f64::NAN,
                p90_us: 1.0,
            },
            Cost::estimated(0.5),
        ];
        costs.sort_by(Cost::cmp_by_value);
        let values: Vec<Option<f64>> = costs.iter().map(Cost::as_us).collect();
        assert_eq!(values, [Some(0.5), Some(1.0), Some(3.0), None, None, None]);
        assert_eq!(costs[3], Cost::Unknown);
        assert_eq!(
            Cost::measured(2.0, 2.0).cmp_by_value(&Cost::estimated(2.0)),
            Ordering::Equal
        );
    }

    #[test]
    fn cost_constructors_reject_unusable_numbers_and_display() {
        assert_eq!(Cost::measured(f64::INFINITY, 1.0), Cost::Invalid);
        assert_eq!(Cost::measured(1.0, -1.0), Cost::Invalid);
        assert_eq!(Cost::estimated(f64::NAN), Cost::Invalid);
        assert!(!Cost::Unknown.is_known());
        assert!(Cost::estimated(0.0).is_known());
        assert_eq!(
            Cost::measured(1.5, 2.25).to_string(),
            "1.500us (p90 2.250us)"
        );
        assert_eq!(Cost::estimated(4.0).to_string(), "~4.000us (estimated)");
        assert_eq!(Cost::Unknown.to_string(), "unknown");
        assert_eq!(Cost::Invalid.to_string(), "invalid");
    }

    #[test]
    fn penalty_is_charged_once_per_producer_and_consuming_candidate() {
        // 0 feeds 1 and 2; 1 feeds 3 and 4; 2 feeds 3.
        let edges = [(0, 1), (0, 2), (1, 3), (1, 4), (2, 3), (0, 1)];
        let tr = vec![vec![0.0, 10.0], vec![100.0, 1000.0]];
        let p = problem(
            5,
            vec![
                cand(&[0], 0, 1.0),
                cand(&[1, 2], 1, 2.0),
                cand(&[3, 4], 0, 4.0),
                cand(&[3], 0, 8.0),
                cand(&[4], 1, 16.0),
            ],
            tr,
            &edges,
        );
        // {0}→{1,2}: producer 0 once (10). {1,2}→{3,4}: producers 1 and 2 (100 + 100).
        assert_eq!(p.placement_cost(&[0, 1, 2]).unwrap(), 7.0 + 10.0 + 200.0);
        // {1,2}→{3}: producers 1, 2 (200); {1,2}→{4}: producer 1 (1000).
        assert_eq!(
            p.placement_cost(&[0, 1, 3, 4]).unwrap(),
            27.0 + 10.0 + 200.0 + 1000.0
        );
        let best = search(&p, SearchLimits::default()).unwrap();
        assert_eq!(best.stop, StopReason::Optimal);
        assert_eq!(best.chosen, [0, 1, 2]);
        assert_eq!(best.cost, 217.0);
    }

    #[test]
    fn penalty_accounting_is_exact_when_consumers_are_covered_first() {
        // Candidate {0, 2} is added before node 1, which consumes 0 and feeds 2; a single
        // candidate {1} on the other backend pays both directions.
        let p = problem(
            3,
            vec![
                cand(&[0, 2], 0, 1.0),
                cand(&[1], 1, 1.0),
                cand(&[1], 0, 5.0),
            ],
            vec![vec![0.0, 2.0], vec![3.0, 0.0]],
            &[(0, 1), (1, 2)],
        );
        assert_eq!(p.placement_cost(&[0, 1]).unwrap(), 2.0 + 2.0 + 3.0);
        assert_eq!(p.placement_cost(&[0, 2]).unwrap(), 6.0);
        let r = search(&p, SearchLimits::default()).unwrap();
        assert_eq!((r.chosen.as_slice(), r.cost), ([0, 2].as_slice(), 6.0));
    }

    #[test]
    fn states_with_equal_cover_but_different_candidate_grouping_stay_apart() {
        // Node 2 feeds 3 and 4. Covering {0, 1, 3, 4} as {0,3,4} + {1} costs 3 and leaves one
        // consuming candidate for node 2's value; as {0,3} + {1,4} it costs 2 but leaves two.
        let p = problem(
            5,
            vec![
                cand(&[0, 3, 4], 0, 2.0),
                cand(&[1], 0, 1.0),
                cand(&[0, 3], 0, 1.0),
                cand(&[1, 4], 0, 1.0),
                cand(&[2], 1, 1.0),
            ],
            vec![vec![0.0, 0.0], vec![5.0, 0.0]],
            &[(2, 3), (2, 4)],
        );
        assert_eq!(p.placement_cost(&[2, 3, 4]).unwrap(), 13.0);
        let r = search(&p, SearchLimits::default()).unwrap();
        assert_eq!((r.chosen.as_slice(), r.cost), ([0, 1, 4].as_slice(), 9.0));
    }

    #[test]
    fn dijkstra_matches_brute_force_on_random_graphs() {
        let mut rng = Rng::new(0xc011a6e);
        for case in 0..300 {
            let p = random_problem(&mut rng, true, case % 3 == 0);
            let r = search(&p, SearchLimits::default()).unwrap();
            let (_, want) = brute_force(&p).unwrap().expect("singletons always cover");
            assert_eq!(r.stop, StopReason::Optimal, "case {case}");
            assert_exact_cover(&p, &r.chosen);
            assert!(
                (r.cost - want).abs() < 1e-9,
                "case {case}: {} vs {want}",
                r.cost
            );
            let recomputed = p.placement_cost(&r.chosen).unwrap();
            assert!((r.cost - recomputed).abs() < 1e-9, "case {case}");
        }
    }

    #[test]
    fn dijkstra_matches_brute_force_without_guaranteed_singletons() {
        let mut rng = Rng::new(77);
        let (mut covers, mut none) = (0, 0);
        for case in 0..300 {
            let p = random_problem(&mut rng, false, true);
            let r = search(&p, SearchLimits::default()).unwrap();
            match brute_force(&p).unwrap() {
                Some((_, want)) => {
                    covers += 1;
                    assert_eq!(r.stop, StopReason::Optimal, "case {case}");
                    assert_exact_cover(&p, &r.chosen);
                    assert!((r.cost - want).abs() < 1e-9, "case {case}");
                }
                None => {
                    none += 1;
                    assert!(!r.has_placement() && r.chosen.is_empty(), "case {case}");
                    assert!(matches!(
                        r.stop,
                        StopReason::NoCover { .. } | StopReason::NoExactCover
                    ));
                }
            }
        }
        assert!(covers > 30 && none > 30, "{covers} covers, {none} without");
    }

    #[test]
    fn no_cover_names_the_first_node_without_a_candidate() {
        let p = problem(
            4,
            vec![cand(&[0, 1], 0, 1.0), cand(&[3], 0, 1.0)],
            vec![vec![0.0]],
            &[(0, 1), (1, 2), (2, 3)],
        );
        let r = search(&p, SearchLimits::default()).unwrap();
        assert_eq!(
            r.stop,
            StopReason::NoCover {
                first_uncoverable_node: 2
            }
        );
        assert!(r.chosen.is_empty() && !r.has_placement());
        assert_eq!(brute_force(&p).unwrap(), None);
    }

    #[test]
    fn no_exact_cover_when_candidates_cannot_tile_the_graph() {
        let p = problem(
            3,
            vec![cand(&[0, 1], 0, 1.0), cand(&[1, 2], 0, 1.0)],
            vec![vec![0.0]],
            &[(0, 1), (1, 2)],
        );
        let r = search(&p, SearchLimits::default()).unwrap();
        assert_eq!(r.stop, StopReason::NoExactCover);
        assert_eq!(r.expanded, 2);
    }

    #[test]
    fn state_limit_returns_a_valid_fallback_placement() {
        let mut rng = Rng::new(4242);
        let mut suboptimal = 0;
        for case in 0..100 {
            let p = random_problem(&mut rng, true, case % 2 == 0);
            let optimum = search(&p, SearchLimits::default()).unwrap();
            for max_expanded in [0, 1, 3] {
                let limits = SearchLimits {
                    max_expanded,
                    ..SearchLimits::default()
                };
                let r = search(&p, limits).unwrap();
                if optimum.expanded <= max_expanded {
                    assert_eq!(r, optimum, "case {case}");
                    continue;
                }
                assert_eq!(
                    r.stop,
                    StopReason::StateLimit {
                        expanded: max_expanded
                    }
                );
                assert_eq!(r.expanded, max_expanded);
                assert_exact_cover(&p, &r.chosen);
                assert!((r.cost - p.placement_cost(&r.chosen).unwrap()).abs() < 1e-9);
                assert!(r.cost >= optimum.cost - 1e-9, "case {case}");
                suboptimal += usize::from(r.cost > optimum.cost + 1e-9);
            }
        }
        assert!(suboptimal > 0, "the limit never mattered");
    }

    #[test]
    fn state_limit_fallback_backtracks_out_of_dead_ends_within_its_budget() {
        // Greedy takes the cheap {0,1} first and then cannot cover node 2.
        let p = problem(
            3,
            vec![
                cand(&[0, 1], 0, 1.0),
                cand(&[0], 0, 5.0),
                cand(&[1, 2], 0, 5.0),
            ],
            vec![vec![0.0]],
            &[(0, 1), (1, 2)],
        );
        let zero = |fallback_steps| SearchLimits {
            max_expanded: 0,
            fallback_starts: 0,
            fallback_steps,
        };
        let r = search(&p, zero(10)).unwrap();
        assert_eq!(r.stop, StopReason::StateLimit { expanded: 0 });
        assert_eq!((r.chosen.as_slice(), r.cost), ([1, 2].as_slice(), 10.0));
        let r = search(&p, zero(1)).unwrap();
        assert_eq!(r.stop, StopReason::StateLimitNoPlacement { expanded: 0 });
        assert!(r.chosen.is_empty() && !r.has_placement());
        let r = search(&p, SearchLimits::default()).unwrap();
        assert_eq!((r.stop, r.cost), (StopReason::Optimal, 10.0));
    }

    #[test]
    fn search_is_deterministic() {
        let mut rng = Rng::new(9);
        for _ in 0..50 {
            let p = random_problem(&mut rng, true, true);
            let limits = SearchLimits {
                max_expanded: 5,
                ..SearchLimits::default()
            };
            assert_eq!(search(&p, limits), search(&p, limits));
            let full = SearchLimits::default();
            assert_eq!(search(&p, full), search(&p, full));
        }
    }

    #[test]
    fn empty_graph_is_trivially_optimal() {
        let p = problem(0, vec![], vec![vec![0.0]], &[]);
        let r = search(&p, SearchLimits::default()).unwrap();
        assert_eq!(
            (r.chosen.len(), r.cost, r.stop),
            (0, 0.0, StopReason::Optimal)
        );
        assert_eq!(brute_force(&p).unwrap(), Some((vec![], 0.0)));
    }

    #[test]
    fn malformed_problems_are_rejected() {
        let good = problem(2, vec![cand(&[0, 1], 0, 1.0)], vec![vec![0.0]], &[(0, 1)]);
        assert_eq!(good.validate(), Ok(()));
        let with = |f: &dyn Fn(&mut SearchProblem)| {
            let mut p = good.clone();
            f(&mut p);
            search(&p, SearchLimits::default()).unwrap_err()
        };
        assert!(matches!(
            with(&|p| p.candidates[0].nodes = vec![1, 0]),
            SearchError::NodesNotSorted { candidate: 0, .. }
        ));
        assert!(matches!(
            with(&|p| p.candidates[0].nodes = vec![]),
            SearchError::EmptyCandidate { .. }
        ));
        assert!(matches!(
            with(&|p| p.candidates[0].nodes = vec![0, 2]),
            SearchError::NodeOutOfRange { node: 2, .. }
        ));
        assert!(matches!(
            with(&|p| p.candidates[0].backend = 1),
            SearchError::BackendOutOfRange { backend: 1, .. }
        ));
        assert!(matches!(
            with(&|p| p.candidates[0].cost = f64::NAN),
            SearchError::BadCandidateCost { .. }
        ));
        assert!(matches!(
            with(&|p| p.transition[0][0] = -1.0),
            SearchError::BadTransition { from: 0, to: 0, .. }
        ));
        assert!(matches!(
            with(&|p| p.transition = vec![vec![0.0, 0.0]]),
            SearchError::TransitionShape { row: 0, len: 2, .. }
        ));
        assert!(matches!(
            with(&|p| p.edges.push((0, 5))),
            SearchError::EdgeOutOfRange { consumer: 5, .. }
        ));
    }

    #[test]
    fn placement_cost_rejects_non_covers() {
        let p = problem(
            3,
            vec![
                cand(&[0, 1], 0, 1.0),
                cand(&[1, 2], 0, 1.0),
                cand(&[2], 0, 1.0),
            ],
            vec![vec![0.0]],
            &[],
        );
        assert_eq!(p.placement_cost(&[0, 2]), Ok(2.0));
        assert_eq!(
            p.placement_cost(&[0, 1]),
            Err(SearchError::Overlap {
                node: 1,
                first: 0,
                second: 1
            })
        );
        assert_eq!(
            p.placement_cost(&[0]),
            Err(SearchError::Uncovered { node: 2 })
        );
        assert!(matches!(
            p.placement_cost(&[7]),
            Err(SearchError::UnknownCandidate { candidate: 7, .. })
        ));
    }

    /// A deterministic stand-in for measurement that disagrees with the search's cost model: the
    /// transition penalties are different.
    fn measured(p: &SearchProblem, chosen: &[usize]) -> f64 {
        let mut q = p.clone();
        for (a, row) in q.transition.iter_mut().enumerate() {
            for (b, t) in row.iter_mut().enumerate() {
                *t = *t * 0.5 + ((a * 3 + b) % 4) as f64;
            }
        }
        q.placement_cost(chosen).unwrap()
    }

    fn all_on_backend_zero(p: &SearchProblem) -> Vec<usize> {
        (0..p.n_nodes)
            .map(|x| {
                p.candidates
                    .iter()
                    .position(|c| c.nodes == [x] && c.backend == 0)
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn evolve_never_returns_worse_than_its_seed() {
        let mut rng = Rng::new(31337);
        let params = EvolveParams {
            population: 8,
            generations: 6,
            mutation_rate: 0.2,
            seed: 5,
        };
        let mut improved = 0;
        for case in 0..40 {
            let p = random_problem(&mut rng, true, case % 2 == 0);
            let dp = search(&p, SearchLimits::default()).unwrap().chosen;
            for seed in [dp, all_on_backend_zero(&p)] {
                let seed_score = measured(&p, &seed);
                let mut calls = 0;
                let mut score = |chosen: &[usize]| {
                    calls += 1;
                    measured(&p, chosen)
                };
                let e = evolve(&p, &seed, &mut score, params).unwrap();
                assert_exact_cover(&p, &e.chosen);
                assert!(e.score <= seed_score, "case {case}");
                assert_eq!(e.score, measured(&p, &e.chosen));
                assert_eq!(e.evaluations, calls);
                improved += usize::from(e.score < seed_score);
            }
        }
        assert!(improved > 20, "evolution improved only {improved} seeds");
    }

    #[test]
    fn evolve_is_deterministic_and_keeps_the_seed_when_nothing_scores_better() {
        let mut rng = Rng::new(12);
        let p = random_problem(&mut rng, true, true);
        let seed = all_on_backend_zero(&p);
        let params = EvolveParams::default();
        let run = || evolve(&p, &seed, &mut |c: &[usize]| measured(&p, c), params).unwrap();
        assert_eq!(run(), run());
        let mut flat = |c: &[usize]| if c == seed.as_slice() { 1.0 } else { 2.0 };
        let e = evolve(&p, &seed, &mut flat, params).unwrap();
        assert_eq!((e.chosen, e.score), (seed.clone(), 1.0));
        let mut broken = |c: &[usize]| if c == seed.as_slice() { 3.0 } else { f64::NAN };
        let e = evolve(&p, &seed, &mut broken, params).unwrap();
        assert_eq!((e.chosen, e.score), (seed, 3.0));
    }

    /// A batched evolution scores a generation in one call (and the seed in one), each
    /// placement once, and finds what the one-at-a-time interface finds.
    #[test]
    fn batched_evolution_scores_a_generation_per_call_each_placement_once() {
        let mut rng = Rng::new(77);
        let params = EvolveParams {
            population: 6,
            generations: 4,
            mutation_rate: 0.2,
            seed: 9,
        };
        for case in 0..20 {
            let p = random_problem(&mut rng, true, case % 2 == 0);
            let seed = all_on_backend_zero(&p);
            let one = evolve(&p, &seed, &mut |c: &[usize]| measured(&p, c), params).unwrap();
            let mut calls = 0;
            let mut seen: Vec<Vec<usize>> = Vec::new();
            let batched = evolve_batched(
                &p,
                &seed,
                &mut |batch: &[Vec<usize>]| {
                    calls += 1;
                    for c in batch {
                        assert!(!seen.contains(c), "case {case}: {c:?} scored twice");
                        seen.push(c.clone());
                    }
                    batch.iter().map(|c| measured(&p, c)).collect()
                },
                params,
            )
            .unwrap();
            assert_eq!(one, batched, "case {case}");
            assert!(
                calls <= params.generations + 2,
                "case {case}: {calls} calls"
            );
            assert_eq!(seen.len(), batched.evaluations);
        }
    }

    #[test]
    fn evolve_rejects_bad_seeds_and_parameters() {
        let p = problem(
            2,
            vec![
                cand(&[0], 0, 1.0),
                cand(&[1], 0, 1.0),
                cand(&[0, 1], 0, 1.0),
            ],
            vec![vec![0.0]],
            &[(0, 1)],
        );
        let mut score = |_: &[usize]| 0.0;
        let params = EvolveParams::default();
        assert_eq!(
            evolve(&p, &[0], &mut score, params),
            Err(SearchError::Uncovered { node: 1 })
        );
        assert!(matches!(
            evolve(&p, &[0, 2], &mut score, params),
            Err(SearchError::Overlap { node: 0, .. })
        ));
        for bad in [
            EvolveParams {
                population: 0,
                ..params
            },
            EvolveParams {
                mutation_rate: 1.5,
                ..params
            },
        ] {
            assert!(matches!(
                evolve(&p, &[2], &mut score, bad),
                Err(SearchError::BadEvolveParams { .. })
            ));
        }
    }
}
