//! Partition rules: composable values that propose candidate sub-graphs for a backend.
//!
//! A backend states what it can run as a [`PartitionRule`] built from base rules (op types, op
//! kinds, dataflow patterns) and combinators (composite marking, fusion combiners, union, validity
//! filtering, host placement). [`PartitionRule::candidates`] turns a rule into [`Candidate`]s:
//! possibly overlapping sub-graphs, each remembering the rule that made it, in a deterministic
//! order (by first node, then node set, then rule name).
//!
//! Patterns form a small dataflow language ([`Pattern`]) with a text form:
//! `Relu(Add(MatMul(*, *[const]), *))`, `(Relu(*) | Sigmoid(*))`, `?(*)[kind=Broadcast]`.
use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use super::index_set::IndexSet;
use super::sub_graph::{DataflowView, SubGraph, SubGraphConfig};
use crate::ir::{DType, Graph, ValueId};
use crate::ops::OpKind;

/// The most matches one pattern yields at one root node; alternatives beyond are dropped.
pub const MAX_MATCHES_PER_ROOT: usize = 64;

/// The most candidates one [`PartitionRule::Combine`] holds; combining stops once reached.
pub const MAX_COMBINED_CANDIDATES: usize = 10_000;

/// The most unions [`Combiner::TupleArg`] forms for one consumer entry node.
pub const MAX_TUPLE_ARG_UNIONS: usize = 16;

/// A condition on a matched value and the node producing it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Predicate {
    /// The value has this rank (text: `rank=N`).
    Rank(usize),
    /// The value has this element type (text: `dtype=f32`).
    DType(DType),
    /// The value is a compile-time constant (text: `const`).
    Const,
    /// Input `i` of the producing node is a compile-time constant (text: `const_input=i`).
    ConstInput(usize),
    /// The producing node has this operator kind (text: `kind=Broadcast`).
    Kind(OpKind),
    /// The value has exactly one consumer and is not a graph output (text: `one_use`).
    OneUse,
}

impl Predicate {
    /// True if the predicate holds for `v` (`None`: an omitted optional input).
    fn holds(&self, view: &DataflowView, graph: &Graph, v: Option<ValueId>) -> bool {
        let Some(v) = v else { return false };
        let ty = graph.values.get(v.0 as usize).and_then(|d| d.ty.as_ref());
        let producer = view.producer(v);
        match self {
            Predicate::Rank(r) => ty.is_some_and(|t| t.rank() == *r),
            Predicate::DType(d) => ty.is_some_and(|t| t.dtype == *d),
            Predicate::Const => view.is_const(v),
            Predicate::ConstInput(i) => producer.is_some_and(
                |n| matches!(graph.nodes[n].inputs.get(*i), Some(Some(c)) if view.is_const(*c)),
            ),
            Predicate::Kind(k) => producer.is_some_and(|n| view.kind(n) == *k),
            Predicate::OneUse => !view.is_graph_output(v) && view.consumers(v).len() == 1,
        }
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Predicate::Rank(r) => write!(f, "rank={r}"),
            Predicate::DType(d) => write!(f, "dtype={d}"),
            Predicate::Const => f.write_str("const"),
            Predicate::ConstInput(i) => write!(f, "const_input={i}"),
            Predicate::Kind(k) => write!(f, "kind={k:?}"),
            Predicate::OneUse => f.write_str("one_use"),
        }
    }
}

/// A dataflow pattern, matched against a value and the nodes producing it.
///
/// Inputs match positionally: an operator pattern with `k` inputs matches a node whose inputs
/// beyond the `k`-th are all omitted; an omitted input matches only [`Pattern::Wildcard`].
/// Every node matched by an operator pattern is part of the match; wildcards consume nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// A node of this op type whose inputs match (text: `Add(*, *)`).
    Op(String, Vec<Pattern>),
    /// A node of any op type whose inputs match (text: `?(*, *)`).
    OpAny(Vec<Pattern>),
    /// Any value, including graph inputs, constants and omitted inputs (text: `*`).
    Wildcard,
    /// Any of the alternatives; every alternative that matches gives its own matches
    /// (text: `(a | b)`).
    Alt(Vec<Pattern>),
    /// The pattern, where the predicate holds of the value (text: `pattern[predicate]`).
    Pred {
        /// The pattern.
        pattern: Box<Pattern>,
        /// The condition on the value it matches.
        pred: Predicate,
    },
}

impl Pattern {
    /// `op_type(inputs...)`.
    pub fn op(op_type: &str, inputs: Vec<Pattern>) -> Pattern {
        Pattern::Op(op_type.to_string(), inputs)
    }

    /// This pattern, restricted to values where `pred` holds.
    pub fn with(self, pred: Predicate) -> Pattern {
        Pattern::Pred {
            pattern: Box::new(self),
            pred,
        }
    }

    /// Every way the pattern matches rooted at `node` (matched through the node's first output),
    /// as the sets of matched nodes, ascending and without repeats. Matches that do not contain
    /// `node` (a wildcard root) are left out. `view` must be the view of `graph`.
    pub fn match_at(&self, view: &DataflowView, graph: &Graph, node: usize) -> Vec<IndexSet> {
        let Some(&v) = view.output_values(node).first() else {
            return Vec::new();
        };
        let mut r: Vec<IndexSet> = Matcher { view, graph }
            .value(self, Some(v))
            .into_iter()
            .filter(|s| s.contains(node))
            .collect();
        r.sort();
        r.dedup();
        r
    }

    /// Every match at every node, overlapping ones included, ascending and without repeats.
    /// `view` must be the view of `graph`.
    pub fn matches(&self, view: &DataflowView, graph: &Graph) -> Vec<IndexSet> {
        let mut r: Vec<IndexSet> = (0..view.len())
            .flat_map(|n| self.match_at(view, graph, n))
            .collect();
        r.sort();
        r.dedup();
        r
    }
}

/// Matches patterns against values of one graph.
struct Matcher<'a> {
    view: &'a DataflowView,
    graph: &'a Graph,
}

impl Matcher<'_> {
    /// Every set of nodes by which `p` matches `v` (`None`: an omitted input).
    fn value(&self, p: &Pattern, v: Option<ValueId>) -> Vec<IndexSet> {
        match p {
            Pattern::Wildcard => vec![self.view.empty_set()],
            Pattern::Op(op_type, inputs) => self.node(Some(op_type), inputs, v),
            Pattern::OpAny(inputs) => self.node(None, inputs, v),
            Pattern::Alt(alts) => {
                let mut r: Vec<IndexSet> = alts.iter().flat_map(|a| self.value(a, v)).collect();
                r.sort();
                r.dedup();
                r.truncate(MAX_MATCHES_PER_ROOT);
                r
            }
            Pattern::Pred { pattern, pred } => {
                if pred.holds(self.view, self.graph, v) {
                    self.value(pattern, v)
                } else {
                    Vec::new()
                }
            }
        }
    }

    /// Matches of an operator pattern at the node producing `v`.
    fn node(&self, op_type: Option<&str>, inputs: &[Pattern], v: Option<ValueId>) -> Vec<IndexSet> {
        let Some(n) = v.and_then(|v| self.view.producer(v)) else {
            return Vec::new();
        };
        if op_type.is_some_and(|t| t != self.view.op_type(n)) {
            return Vec::new();
        }
        let node_inputs = &self.graph.nodes[n].inputs;
        if node_inputs.iter().skip(inputs.len()).any(|i| i.is_some()) {
            return Vec::new();
        }
        let mut acc = vec![IndexSet::singleton(self.view.len(), n)];
        for (k, p) in inputs.iter().enumerate() {
            let alts = self.value(p, node_inputs.get(k).copied().flatten());
            if alts.is_empty() {
                return Vec::new();
            }
            let mut next: Vec<IndexSet> = acc
                .iter()
                .flat_map(|a| alts.iter().map(move |b| a.union(b)))
                .collect();
            next.sort();
            next.dedup();
            next.truncate(MAX_MATCHES_PER_ROOT);
            acc = next;
        }
        acc
    }
}

impl fmt::Display for Pattern {
    /// The text form, which [`Pattern::from_str`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let args = |f: &mut fmt::Formatter<'_>, inputs: &[Pattern]| {
            f.write_str("(")?;
            for (i, p) in inputs.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{p}")?;
            }
            f.write_str(")")
        };
        match self {
            Pattern::Op(op_type, inputs) => {
                f.write_str(op_type)?;
                args(f, inputs)
            }
            Pattern::OpAny(inputs) => {
                f.write_str("?")?;
                args(f, inputs)
            }
            Pattern::Wildcard => f.write_str("*"),
            Pattern::Alt(alts) => {
                f.write_str("(")?;
                for (i, p) in alts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" | ")?;
                    }
                    write!(f, "{p}")?;
                }
                f.write_str(")")
            }
            Pattern::Pred { pattern, pred } => write!(f, "{pattern}[{pred}]"),
        }
    }
}

/// A pattern's text could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pattern {text:?}: expected {expected} at offset {offset}")]
pub struct ParsePatternError {
    /// The text.
    pub text: String,
    /// The byte offset of the problem.
    pub offset: usize,
    /// What was expected there.
    pub expected: &'static str,
}

impl FromStr for Pattern {
    type Err = ParsePatternError;

    /// Reads the text form: `*`, `Op(p, ...)`, `?(p, ...)`, `(p | p ...)`, and any of those
    /// followed by `[predicate]`s.
    fn from_str(s: &str) -> Result<Pattern, ParsePatternError> {
        let mut p = Parser { s, pos: 0 };
        let r = p.pattern()?;
        p.skip_ws();
        if p.pos != s.len() {
            return Err(p.err("end of pattern"));
        }
        Ok(r)
    }
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, expected: &'static str) -> ParsePatternError {
        ParsePatternError {
            text: self.s.to_string(),
            offset: self.pos,
            expected,
        }
    }

    fn skip_ws(&mut self) {
        let rest = &self.s[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.s[self.pos..].starts_with(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char, expected: &'static str) -> Result<(), ParsePatternError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.err(expected))
        }
    }

    fn ident(&mut self) -> &str {
        self.skip_ws();
        let rest = &self.s[self.pos..];
        let n = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        self.pos += n;
        &rest[..n]
    }

    fn pattern(&mut self) -> Result<Pattern, ParsePatternError> {
        let mut p = self.primary()?;
        while self.eat('[') {
            let pred = self.predicate()?;
            self.expect(']', "`]`")?;
            p = p.with(pred);
        }
        Ok(p)
    }

    fn primary(&mut self) -> Result<Pattern, ParsePatternError> {
        if self.eat('*') {
            return Ok(Pattern::Wildcard);
        }
        if self.eat('(') {
            let mut alts = vec![self.pattern()?];
            while self.eat('|') {
                alts.push(self.pattern()?);
            }
            self.expect(')', "`|` or `)`")?;
            return Ok(if alts.len() == 1 {
                alts.pop().expect("one alternative")
            } else {
                Pattern::Alt(alts)
            });
        }
        let any = self.eat('?');
        let name = if any {
            String::new()
        } else {
            let name = self.ident().to_string();
            if name.is_empty() {
                return Err(self.err("`*`, `?`, `(` or an op type"));
            }
            name
        };
        self.expect('(', "`(` after the op type")?;
        let mut inputs = Vec::new();
        if !self.eat(')') {
            loop {
                inputs.push(self.pattern()?);
                if self.eat(')') {
                    break;
                }
                self.expect(',', "`,` or `)`")?;
            }
        }
        Ok(if any {
            Pattern::OpAny(inputs)
        } else {
            Pattern::Op(name, inputs)
        })
    }

    fn predicate(&mut self) -> Result<Predicate, ParsePatternError> {
        self.skip_ws();
        let start = self.pos;
        let key = self.ident().to_string();
        let value = |p: &mut Self| -> Result<String, ParsePatternError> {
            p.expect('=', "`=`")?;
            Ok(p.ident().to_string())
        };
        let bad = |p: &mut Self, expected: &'static str| -> Result<Predicate, ParsePatternError> {
            p.pos = start;
            Err(p.err(expected))
        };
        match key.as_str() {
            "const" => Ok(Predicate::Const),
            "one_use" => Ok(Predicate::OneUse),
            "rank" => match value(self)?.parse() {
                Ok(r) => Ok(Predicate::Rank(r)),
                Err(_) => bad(self, "a rank"),
            },
            "const_input" => match value(self)?.parse() {
                Ok(i) => Ok(Predicate::ConstInput(i)),
                Err(_) => bad(self, "an input index"),
            },
            "dtype" => match DType::parse(&value(self)?) {
                Some(d) => Ok(Predicate::DType(d)),
                None => bad(self, "an element type (f32, i64, ...)"),
            },
            "kind" => match parse_kind(&value(self)?) {
                Some(k) => Ok(Predicate::Kind(k)),
                None => bad(self, "an op kind (Elementwise, Broadcast, ...)"),
            },
            _ => bad(
                self,
                "a predicate (rank=, dtype=, const, const_input=, kind=, one_use)",
            ),
        }
    }
}

fn parse_kind(s: &str) -> Option<OpKind> {
    Some(match s {
        "Elementwise" => OpKind::Elementwise,
        "Broadcast" => OpKind::Broadcast,
        "Injective" => OpKind::Injective,
        "Reduction" => OpKind::Reduction,
        "OutElementwiseFusable" => OpKind::OutElementwiseFusable,
        "Opaque" => OpKind::Opaque,
        _ => return None,
    })
}

/// A part of a candidate to be compiled as one composite function (a library call such as a
/// fused matmul+bias+relu), named after the rule that matched it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CompositeRegion {
    /// The rule that matched it.
    pub name: String,
    /// Its nodes.
    pub nodes: IndexSet,
}

/// A sub-graph a rule proposes to run on its backend.
///
/// Ordered by sub-graph (first node, then node set), then rule name, composites, host flag.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Candidate {
    /// The nodes.
    pub sub_graph: SubGraph,
    /// The rule that made it: an op type, a pattern rule's name, or names joined by `+` for
    /// combined candidates.
    pub rule_name: String,
    /// Composite functions inside, disjoint, ascending.
    pub composites: Vec<CompositeRegion>,
    /// Made by [`PartitionRule::Host`]: the nodes stay on the host and cost nothing.
    pub host: bool,
}

impl Candidate {
    /// A plain candidate.
    pub fn new(sub_graph: SubGraph, rule_name: impl Into<String>) -> Self {
        Candidate {
            sub_graph,
            rule_name: rule_name.into(),
            composites: Vec::new(),
            host: false,
        }
    }

    /// The candidate of the nodes of both, its rule name joining both names.
    fn merge(&self, view: &DataflowView, other: &Candidate) -> Candidate {
        let mut composites: Vec<CompositeRegion> = self
            .composites
            .iter()
            .chain(&other.composites)
            .cloned()
            .collect();
        composites.sort();
        composites.dedup();
        Candidate {
            sub_graph: self.sub_graph.union(view, &other.sub_graph),
            rule_name: join_names(&self.rule_name, &other.rule_name),
            composites,
            host: self.host && other.host,
        }
    }

    /// What identifies a candidate inside one combine run.
    fn key(&self) -> Key {
        (self.sub_graph.inside().clone(), self.composites.clone())
    }
}

/// `a+b`, keeping each `+`-separated name once, in order of appearance.
fn join_names(a: &str, b: &str) -> String {
    let mut names: Vec<&str> = Vec::new();
    for n in a.split('+').chain(b.split('+')) {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names.join("+")
}

impl fmt::Display for Candidate {
    /// `{1,2} MatMul+Add`, then ` composite NAME{..}` per composite and ` host` if on the host.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.sub_graph, self.rule_name)?;
        for c in &self.composites {
            write!(f, " composite {}{}", c.name, c.nodes)?;
        }
        if self.host {
            f.write_str(" host")?;
        }
        Ok(())
    }
}

/// A way [`PartitionRule::Combine`] grows candidates by joining touching ones, after TVM's
/// combiner rules. A union is only formed when it is convex and within the combine's depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combiner {
    /// Joins a candidate with a candidate reading its outputs when both are at most
    /// [`OpKind::Injective`] (chains of elementwise, broadcast and injective operators).
    AllSimple,
    /// Joins an upstream candidate of kind at most `upstream` with a downstream candidate
    /// reading its outputs of kind at most `downstream`.
    ByKind {
        /// The largest kind of the producing candidate.
        upstream: OpKind,
        /// The largest kind of the consuming candidate.
        downstream: OpKind,
    },
    /// Joins an injective candidate whose entry node reads several nodes (a concatenation) with
    /// one injective candidate producing each of them, all at once.
    TupleArg,
    /// Joins a candidate with the nodes feeding it that compute from constants only.
    Constant,
}

impl Combiner {
    /// An out-elementwise-fusable candidate (matmul, conv) absorbs its elementwise and broadcast
    /// consumers.
    pub const OUT_ELEMENTWISE: Combiner = Combiner::ByKind {
        upstream: OpKind::OutElementwiseFusable,
        downstream: OpKind::Broadcast,
    };

    /// The combiners that mimic operator fusion: epilogues into contractions and reductions,
    /// elementwise prologues into reductions, injective chains, concatenations, constants.
    pub fn fuse_ops() -> Vec<Combiner> {
        vec![
            Combiner::OUT_ELEMENTWISE,
            Combiner::ByKind {
                upstream: OpKind::Broadcast,
                downstream: OpKind::Reduction,
            },
            Combiner::AllSimple,
            Combiner::TupleArg,
            Combiner::Constant,
        ]
    }

    /// For pairwise combiners, whether `up` feeding `down` may join.
    fn fires(&self, up: &Candidate, down: &Candidate) -> bool {
        let (u, d) = (up.sub_graph.kind(), down.sub_graph.kind());
        match *self {
            Combiner::AllSimple => u <= OpKind::Injective && d <= OpKind::Injective,
            Combiner::ByKind {
                upstream,
                downstream,
            } => u <= upstream && d <= downstream,
            Combiner::TupleArg | Combiner::Constant => false,
        }
    }
}

impl fmt::Display for Combiner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Combiner::ByKind {
                upstream,
                downstream,
            } => write!(f, "ByKind({upstream:?}->{downstream:?})"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// A composable description of the sub-graphs a backend can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionRule {
    /// One single-node candidate per node of these op types, named by the op type.
    OpPredicate(Vec<String>),
    /// One single-node candidate per node of these kinds, named by the op type.
    OpKindRule(Vec<OpKind>),
    /// One candidate per match of the pattern (overlapping matches included), named `name`.
    PatternRule {
        /// The rule's name, given to its candidates.
        name: String,
        /// The pattern.
        pattern: Pattern,
    },
    /// The inner candidates, each marked as one composite function named by its rule name
    /// (replacing composites marked inside).
    Composite(Box<PartitionRule>),
    /// The inner candidates and every union the combiners form from them, repeated until no new
    /// candidate appears (or [`MAX_COMBINED_CANDIDATES`] is reached).
    Combine {
        /// The rule giving the starting candidates.
        inner: Box<PartitionRule>,
        /// How candidates are joined.
        combiners: Vec<Combiner>,
        /// Unions deeper than this are not formed; `None` for no limit.
        max_depth: Option<usize>,
    },
    /// The candidates of every rule.
    Union(Vec<PartitionRule>),
    /// The inner candidates that are valid under the configuration.
    OnlyValid {
        /// The rule giving the candidates.
        inner: Box<PartitionRule>,
        /// The limits.
        config: SubGraphConfig,
    },
    /// One single-node candidate, marked as staying on the host, per node of these op types;
    /// named `host.` and the op type.
    Host(Vec<String>),
}

impl PartitionRule {
    /// [`PartitionRule::OpPredicate`] over `op_types`.
    pub fn ops(op_types: &[&str]) -> Self {
        PartitionRule::OpPredicate(op_types.iter().map(|s| s.to_string()).collect())
    }

    /// [`PartitionRule::OpKindRule`] over `kinds`.
    pub fn kinds(kinds: &[OpKind]) -> Self {
        PartitionRule::OpKindRule(kinds.to_vec())
    }

    /// [`PartitionRule::PatternRule`].
    pub fn pattern(name: &str, pattern: Pattern) -> Self {
        PartitionRule::PatternRule {
            name: name.to_string(),
            pattern,
        }
    }

    /// [`PartitionRule::Composite`] over `inner`.
    pub fn composite(inner: PartitionRule) -> Self {
        PartitionRule::Composite(Box::new(inner))
    }

    /// [`PartitionRule::Combine`] over `inner` without a depth limit (long elementwise chains then
    /// yield every sub-chain, up to [`MAX_COMBINED_CANDIDATES`]; set `max_depth` to bound them).
    pub fn combine(inner: PartitionRule, combiners: Vec<Combiner>) -> Self {
        PartitionRule::Combine {
            inner: Box::new(inner),
            combiners,
            max_depth: None,
        }
    }

    /// [`PartitionRule::OnlyValid`] over `inner`.
    pub fn only_valid(inner: PartitionRule, config: SubGraphConfig) -> Self {
        PartitionRule::OnlyValid {
            inner: Box::new(inner),
            config,
        }
    }

    /// [`PartitionRule::Host`] over `op_types`.
    pub fn host(op_types: &[&str]) -> Self {
        PartitionRule::Host(op_types.iter().map(|s| s.to_string()).collect())
    }

    /// Every candidate the rule proposes for `graph`, sorted, without repeats. `view` must be the
    /// view of `graph`.
    pub fn candidates(&self, view: &DataflowView, graph: &Graph) -> Vec<Candidate> {
        let mut r = self.raw_candidates(view, graph);
        r.sort();
        r.dedup();
        r
    }

    fn raw_candidates(&self, view: &DataflowView, graph: &Graph) -> Vec<Candidate> {
        let single = |keep: &dyn Fn(usize) -> bool, host: bool| -> Vec<Candidate> {
            (0..view.len())
                .filter(|&i| keep(i))
                .map(|i| {
                    let op = view.op_type(i);
                    let mut c = Candidate::new(
                        SubGraph::single(view, i),
                        if host {
                            format!("host.{op}")
                        } else {
                            op.into()
                        },
                    );
                    c.host = host;
                    c
                })
                .collect()
        };
        match self {
            PartitionRule::OpPredicate(ops) => {
                single(&|i| ops.iter().any(|o| o == view.op_type(i)), false)
            }
            PartitionRule::OpKindRule(kinds) => single(&|i| kinds.contains(&view.kind(i)), false),
            PartitionRule::Host(ops) => single(&|i| ops.iter().any(|o| o == view.op_type(i)), true),
            PartitionRule::PatternRule { name, pattern } => pattern
                .matches(view, graph)
                .into_iter()
                .map(|s| Candidate::new(SubGraph::new(view, s), name.clone()))
                .collect(),
            PartitionRule::Composite(inner) => inner
                .candidates(view, graph)
                .into_iter()
                .map(|mut c| {
                    c.composites = vec![CompositeRegion {
                        name: c.rule_name.clone(),
                        nodes: c.sub_graph.inside().clone(),
                    }];
                    c
                })
                .collect(),
            PartitionRule::Combine {
                inner,
                combiners,
                max_depth,
            } => combine(view, inner.candidates(view, graph), combiners, *max_depth),
            PartitionRule::Union(rules) => rules
                .iter()
                .flat_map(|r| r.raw_candidates(view, graph))
                .collect(),
            PartitionRule::OnlyValid { inner, config } => inner
                .raw_candidates(view, graph)
                .into_iter()
                .filter(|c| c.sub_graph.is_valid(view, config))
                .collect(),
        }
    }
}

impl fmt::Display for PartitionRule {
    /// A one-line description of the rule tree.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartitionRule::OpPredicate(ops) => write!(f, "ops({})", ops.join(", ")),
            PartitionRule::OpKindRule(kinds) => write!(f, "kinds({kinds:?})"),
            PartitionRule::PatternRule { name, pattern } => write!(f, "pattern {name} = {pattern}"),
            PartitionRule::Composite(inner) => write!(f, "composite({inner})"),
            PartitionRule::Combine {
                inner,
                combiners,
                max_depth,
            } => {
                let cs: Vec<String> = combiners.iter().map(|c| c.to_string()).collect();
                write!(f, "combine[{}", cs.join(", "))?;
                if let Some(d) = max_depth {
                    write!(f, "; max_depth={d}")?;
                }
                write!(f, "]({inner})")
            }
            PartitionRule::Union(rules) => {
                f.write_str("union(")?;
                for (i, r) in rules.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{r}")?;
                }
                f.write_str(")")
            }
            PartitionRule::OnlyValid { inner, config } => {
                write!(f, "only_valid{config}({inner})")
            }
            PartitionRule::Host(ops) => write!(f, "host({})", ops.join(", ")),
        }
    }
}

/// What identifies a candidate inside one combine run: its nodes and composites.
type Key = (IndexSet, Vec<CompositeRegion>);

/// Where one combine round puts its new candidates: it refuses repeats of the run and stops at
/// the run's cap. Whether a union is new or was refused before is asked before the union is built
/// (a sub-graph's boundary, convexity and depth cost a walk over the graph each): joins of many
/// candidates reach the same node sets over and over. The expanded ONNX rotary-embedding test
/// (23 nodes after folding, the importer fuzz target's slowest seed) tries 3 million joins for
/// 3,335 candidates.
struct Fresh<'a> {
    /// Keys of every candidate of the run.
    seen: &'a mut HashSet<Key>,
    /// Node sets found not convex or too deep in this run (a property of the set alone).
    refused: &'a mut HashSet<IndexSet>,
    /// How many more candidates the run holds.
    room: usize,
    /// This round's candidates.
    out: Vec<Candidate>,
}

impl Fresh<'_> {
    fn full(&self) -> bool {
        self.out.len() >= self.room
    }

    /// Whether a candidate of `key` could still be added (not seen, not refused, room left).
    fn wants(&self, key: &Key) -> bool {
        !self.full() && !self.seen.contains(key) && !self.refused.contains(&key.0)
    }

    /// Adds `c` unless its key was seen or the round is full.
    fn add(&mut self, c: Candidate) {
        if !self.full() && self.seen.insert(c.key()) {
            self.out.push(c);
        }
    }
}

/// The state of one combine round.
struct Round<'a> {
    view: &'a DataflowView,
    /// Every candidate so far.
    all: &'a [Candidate],
    /// Candidates from this index on appeared in the previous round.
    first_new: usize,
    max_depth: Option<usize>,
    /// Per node: the candidates having it as an entry node.
    entry_of: Vec<Vec<usize>>,
}

impl Round<'_> {
    fn is_new(&self, i: usize) -> bool {
        i >= self.first_new
    }

    /// Adds the union of `parts` if they are disjoint, convex together and within the depth
    /// limit, and it is new.
    fn join(&self, parts: &[&Candidate], fresh: &mut Fresh) {
        let mut inside = self.view.empty_set();
        for p in parts {
            if p.sub_graph.inside().intersects(&inside) {
                return;
            }
            inside.union_with(p.sub_graph.inside());
        }
        // The key `merge` makes: the nodes, and the composites sorted without repeats.
        let mut composites: Vec<CompositeRegion> = parts
            .iter()
            .flat_map(|p| p.composites.iter().cloned())
            .collect();
        composites.sort();
        composites.dedup();
        let key = (inside, composites);
        if !fresh.wants(&key) {
            return;
        }
        let mut merged = parts[0].clone();
        for p in &parts[1..] {
            merged = merged.merge(self.view, p);
        }
        if self.fits(&merged.sub_graph) {
            fresh.add(merged);
        } else {
            fresh.refused.insert(key.0);
        }
    }

    /// Convex and within the depth limit.
    fn fits(&self, sub_graph: &SubGraph) -> bool {
        sub_graph.is_convex() && self.max_depth.is_none_or(|d| sub_graph.depth() <= d)
    }

    /// Pairwise joins of an upstream candidate with a downstream one reading it.
    fn simple(&self, combiner: &Combiner, fresh: &mut Fresh) {
        // `seen_by[j] == i`: candidate j is already among up i's downstream ones (a candidate
        // with several entry nodes reading `up` is listed once per node).
        let mut seen_by = vec![usize::MAX; self.all.len()];
        let mut downs: Vec<usize> = Vec::new();
        for (i, up) in self.all.iter().enumerate() {
            if fresh.full() {
                return;
            }
            downs.clear();
            for c in up.sub_graph.consumers().iter() {
                for &j in &self.entry_of[c] {
                    if j != i && seen_by[j] != i && (self.is_new(i) || self.is_new(j)) {
                        seen_by[j] = i;
                        downs.push(j);
                    }
                }
            }
            downs.sort_unstable();
            for &j in &downs {
                let down = &self.all[j];
                if combiner.fires(up, down) {
                    self.join(&[up, down], fresh);
                }
            }
        }
    }

    /// Joins of an injective consumer with one injective producer candidate per node feeding
    /// one of its multi-input entry nodes.
    fn tuple_arg(&self, fresh: &mut Fresh) {
        let n = self.view.len();
        let mut exit_of: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (j, c) in self.all.iter().enumerate() {
            if c.sub_graph.kind() <= OpKind::Injective {
                for e in c.sub_graph.exit() {
                    exit_of[e].push(j);
                }
            }
        }
        for (i, consumer) in self.all.iter().enumerate() {
            if fresh.full() {
                return;
            }
            if consumer.sub_graph.kind() > OpKind::Injective {
                continue;
            }
            for e in consumer.sub_graph.entry() {
                let feeders: Vec<usize> = self
                    .view
                    .inputs(e)
                    .iter()
                    .copied()
                    .filter(|&p| !consumer.sub_graph.inside().contains(p))
                    .collect();
                if feeders.len() < 2 {
                    continue;
                }
                let options: Vec<Vec<usize>> = feeders
                    .iter()
                    .map(|&p| exit_of[p].iter().copied().filter(|&j| j != i).collect())
                    .collect();
                if options.iter().any(|o: &Vec<usize>| o.is_empty()) {
                    continue;
                }
                let mut choices: Vec<Vec<usize>> = vec![vec![i]];
                for opts in &options {
                    choices = choices
                        .iter()
                        .flat_map(|c| {
                            opts.iter().map(move |&j| {
                                let mut c = c.clone();
                                c.push(j);
                                c
                            })
                        })
                        .take(MAX_TUPLE_ARG_UNIONS)
                        .collect();
                }
                for choice in choices {
                    if !choice.iter().any(|&j| self.is_new(j)) {
                        continue;
                    }
                    let parts: Vec<&Candidate> = choice.iter().map(|&j| &self.all[j]).collect();
                    self.join(&parts, fresh);
                }
            }
        }
    }

    /// Joins of each new candidate with the constant-only nodes feeding it.
    fn constant(&self, fresh: &mut Fresh) {
        for c in &self.all[self.first_new..] {
            let consts: Vec<usize> = c
                .sub_graph
                .producers()
                .iter()
                .filter(|&p| self.view.is_const_only(p))
                .collect();
            if consts.is_empty() {
                continue;
            }
            let mut inside = c.sub_graph.inside().clone();
            for p in consts {
                inside.insert(p);
            }
            let key = (inside, c.composites.clone());
            if !fresh.wants(&key) {
                continue;
            }
            let sub_graph = SubGraph::new(self.view, key.0.clone());
            if self.fits(&sub_graph) {
                fresh.add(Candidate {
                    sub_graph,
                    ..c.clone()
                });
            } else {
                fresh.refused.insert(key.0);
            }
        }
    }
}

/// Grows `base` with the combiners until no new candidate appears.
fn combine(
    view: &DataflowView,
    base: Vec<Candidate>,
    combiners: &[Combiner],
    max_depth: Option<usize>,
) -> Vec<Candidate> {
    let mut seen: HashSet<Key> = HashSet::new();
    let mut refused: HashSet<IndexSet> = HashSet::new();
    let mut all: Vec<Candidate> = base.into_iter().filter(|c| seen.insert(c.key())).collect();
    let mut first_new = 0;
    while first_new < all.len() && all.len() < MAX_COMBINED_CANDIDATES {
        let mut entry_of: Vec<Vec<usize>> = vec![Vec::new(); view.len()];
        for (j, c) in all.iter().enumerate() {
            for e in c.sub_graph.entry() {
                entry_of[e].push(j);
            }
        }
        let round = Round {
            view,
            all: &all,
            first_new,
            max_depth,
            entry_of,
        };
        let mut fresh = Fresh {
            seen: &mut seen,
            refused: &mut refused,
            room: MAX_COMBINED_CANDIDATES - all.len(),
            out: Vec::new(),
        };
        for combiner in combiners {
            match combiner {
                Combiner::AllSimple | Combiner::ByKind { .. } => round.simple(combiner, &mut fresh),
                Combiner::TupleArg => round.tuple_arg(&mut fresh),
                Combiner::Constant => round.constant(&mut fresh),
            }
        }
        let mut fresh = fresh.out;
        first_new = all.len();
        fresh.sort();
        all.extend(fresh);
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::TensorType;
    use crate::partition::sub_graph::testing::Builder;

    fn shown(sets: &[IndexSet]) -> Vec<String> {
        sets.iter().map(|s| s.to_string()).collect()
    }

    fn shown_candidates(cs: &[Candidate]) -> Vec<String> {
        cs.iter().map(|c| c.to_string()).collect()
    }

    fn pat(s: &str) -> Pattern {
        s.parse().expect("pattern parses")
    }

    fn view(b: &Builder) -> DataflowView {
        DataflowView::new(&b.g)
    }

    /// n0 = MatMul(x, w); n1 = Add(n0, b1); n2 = Add(n0, b2): two matches sharing the matmul.
    fn shared_matmul() -> Builder {
        let mut b = Builder::new();
        let x = b.input("x");
        let w = b.konst("w");
        let b1 = b.input("b1");
        let b2 = b.input("b2");
        let m = b.node("MatMul", &[x, w]);
        let a1 = b.node("Add", &[m, b1]);
        let a2 = b.node("Add", &[m, b2]);
        b.output(a1);
        b.output(a2);
        b
    }

    /// x → n0 Add → n1 Relu → n2 Add → n3 Relu.
    fn add_relu_chain() -> Builder {
        let mut b = Builder::new();
        let x = b.input("x");
        let y = b.input("y");
        let a1 = b.node("Add", &[x, y]);
        let r1 = b.node("Relu", &[a1]);
        let a2 = b.node("Add", &[r1, y]);
        let r2 = b.node("Relu", &[a2]);
        b.output(r2);
        b
    }

    /// n0 MatMul → n1 Add → n2 Relu.
    fn matmul_add_relu() -> Builder {
        let mut b = Builder::new();
        let x = b.input("x");
        let w = b.konst("w");
        let bias = b.konst("b");
        let m = b.node("MatMul", &[x, w]);
        let a = b.node("Add", &[m, bias]);
        let r = b.node("Relu", &[a]);
        b.output(r);
        b
    }

    #[test]
    fn pattern_finds_overlapping_matches() {
        let b = shared_matmul();
        let v = view(&b);
        let m = pat("Add(MatMul(*, *), *)").matches(&v, &b.g);
        assert_eq!(shown(&m), ["{0,1}", "{0,2}"]);
        // The matmul alone is not an Add root.
        assert!(pat("Add(MatMul(*, *), *)").match_at(&v, &b.g, 0).is_empty());
    }

    #[test]
    fn alternatives_give_every_match_at_one_root() {
        let mut b = Builder::new();
        let x = b.input("x");
        let m1 = b.node("MatMul", &[x, x]);
        let m2 = b.node("MatMul", &[x, x]);
        let a = b.node("Add", &[m1, m2]);
        b.output(a);
        let v = view(&b);
        let p = pat("(Add(MatMul(*, *), *) | Add(*, MatMul(*, *)))");
        assert_eq!(shown(&p.match_at(&v, &b.g, 2)), ["{0,2}", "{1,2}"]);
        let both = pat("Add(MatMul(*, *), MatMul(*, *))");
        assert_eq!(shown(&both.matches(&v, &b.g)), ["{0,1,2}"]);
    }

    #[test]
    fn relu_add_chains() {
        let b = add_relu_chain();
        let v = view(&b);
        assert_eq!(
            shown(&pat("Relu(Add(*, *))").matches(&v, &b.g)),
            ["{0,1}", "{2,3}"]
        );
        assert_eq!(
            shown(&pat("Relu(Add(Relu(Add(*, *)), *))").matches(&v, &b.g)),
            ["{0,1,2,3}"]
        );
        assert_eq!(
            shown(&pat("Relu(?(*, *))").matches(&v, &b.g)),
            ["{0,1}", "{2,3}"]
        );
        // Arity is checked: Add has two inputs.
        assert!(pat("Relu(Add(*))").matches(&v, &b.g).is_empty());
        // A wildcard-rooted pattern matches no node.
        assert!(pat("*").matches(&v, &b.g).is_empty());
    }

    #[test]
    fn predicates() {
        let mut b = matmul_add_relu();
        let x = b.g.inputs[0];
        let t = TensorType::new(DType::F32, vec![2, 2, 2]);
        let r3 = b.node_with("Relu", &[], &[x], t);
        b.output(r3);
        let v = view(&b);
        let g = &b.g;
        assert_eq!(shown(&pat("Relu(*)[rank=2]").matches(&v, g)), ["{2}"]);
        assert_eq!(shown(&pat("Relu(*)[rank=3]").matches(&v, g)), ["{3}"]);
        assert_eq!(shown(&pat("Relu(*)[dtype=f32]").matches(&v, g)).len(), 2);
        assert!(pat("Relu(*)[dtype=i64]").matches(&v, g).is_empty());
        assert_eq!(
            shown(&pat("MatMul(*, *)[const_input=1]").matches(&v, g)),
            ["{0}"]
        );
        assert!(pat("MatMul(*, *)[const_input=0]").matches(&v, g).is_empty());
        assert_eq!(
            shown(&pat("Add(MatMul(*, *[const]), *[const])").matches(&v, g)),
            ["{0,1}"]
        );
        assert!(pat("Add(MatMul(*[const], *), *)").matches(&v, g).is_empty());
        assert_eq!(
            shown(&pat("?(*)[kind=Broadcast]").matches(&v, g)),
            ["{2}", "{3}"]
        );
        assert_eq!(
            shown(&pat("Relu(Add(*, *)[one_use])").matches(&v, g)),
            ["{1,2}"]
        );
    }

    #[test]
    fn pattern_text_round_trips() {
        for s in [
            "Relu(Add(MatMul(*, *[const]), *))",
            "(Relu(*) | Sigmoid(*))[rank=4][dtype=f32]",
            "?(*, *)[kind=OutElementwiseFusable]",
            "Conv(*, *[const_input=1], *)[one_use]",
            "Shape()",
        ] {
            assert_eq!(pat(s).to_string(), s);
        }
        let e = "Relu(*".parse::<Pattern>().unwrap_err();
        assert_eq!((e.offset, e.expected), (6, "`,` or `)`"));
        let e = "Relu(*)[size=3]".parse::<Pattern>().unwrap_err();
        assert_eq!(e.offset, 8);
        assert!("Relu(*) x".parse::<Pattern>().is_err());
        assert!("(* | )".parse::<Pattern>().is_err());
    }

    #[test]
    fn base_rules() {
        let b = matmul_add_relu();
        let v = view(&b);
        let ops = PartitionRule::ops(&["MatMul", "Relu"]).candidates(&v, &b.g);
        assert_eq!(shown_candidates(&ops), ["{0} MatMul", "{2} Relu"]);
        let kinds = PartitionRule::kinds(&[OpKind::Broadcast]).candidates(&v, &b.g);
        assert_eq!(shown_candidates(&kinds), ["{1} Add", "{2} Relu"]);
        let host = PartitionRule::host(&["Add"]).candidates(&v, &b.g);
        assert_eq!(shown_candidates(&host), ["{1} host.Add host"]);
        let p = PartitionRule::pattern("dense", pat("Add(MatMul(*, *), *)"));
        assert_eq!(shown_candidates(&p.candidates(&v, &b.g)), ["{0,1} dense"]);
        let comp = PartitionRule::composite(p).candidates(&v, &b.g);
        assert_eq!(
            shown_candidates(&comp),
            ["{0,1} dense composite dense{0,1}"]
        );
    }

    #[test]
    fn union_keeps_overlaps_and_rule_names_in_order() {
        let b = matmul_add_relu();
        let v = view(&b);
        let rule = PartitionRule::Union(vec![
            PartitionRule::pattern("dense_relu", pat("Relu(Add(MatMul(*, *), *))")),
            PartitionRule::ops(&["Relu", "MatMul"]),
            PartitionRule::pattern("dense", pat("Add(MatMul(*, *), *)")),
            PartitionRule::kinds(&[OpKind::OutElementwiseFusable]),
        ]);
        let cs = rule.candidates(&v, &b.g);
        assert_eq!(
            shown_candidates(&cs),
            [
                "{0} MatMul",
                "{0,1} dense",
                "{0,1,2} dense_relu",
                "{2} Relu"
            ]
        );
    }

    #[test]
    fn out_elementwise_absorbs_consumers() {
        let b = matmul_add_relu();
        let v = view(&b);
        let all_kinds = PartitionRule::kinds(&[OpKind::Broadcast, OpKind::OutElementwiseFusable]);
        let rule = PartitionRule::combine(all_kinds.clone(), vec![Combiner::OUT_ELEMENTWISE]);
        assert_eq!(
            shown_candidates(&rule.candidates(&v, &b.g)),
            [
                "{0} MatMul",
                "{0,1} MatMul+Add",
                "{0,1,2} MatMul+Add+Relu",
                "{1} Add",
                "{1,2} Add+Relu",
                "{2} Relu"
            ]
        );
        // AllSimple leaves the matmul alone.
        let simple = PartitionRule::combine(all_kinds.clone(), vec![Combiner::AllSimple]);
        assert_eq!(
            shown_candidates(&simple.candidates(&v, &b.g)),
            ["{0} MatMul", "{1} Add", "{1,2} Add+Relu", "{2} Relu"]
        );
        // The depth limit bounds the unions.
        let shallow = PartitionRule::Combine {
            inner: Box::new(all_kinds),
            combiners: vec![Combiner::OUT_ELEMENTWISE],
            max_depth: Some(2),
        };
        assert_eq!(shallow.candidates(&v, &b.g).len(), 5);
    }

    #[test]
    fn combine_never_forms_non_convex_unions() {
        // n0 Relu → n1 Exp → n2 Add(n0, n1): {n0, n2} would leave through n1 and re-enter.
        let mut b = Builder::new();
        let x = b.input("x");
        let a = b.node("Relu", &[x]);
        let e = b.node("Exp", &[a]);
        let d = b.node("Add", &[a, e]);
        b.output(d);
        let v = view(&b);
        let rule = PartitionRule::combine(
            PartitionRule::ops(&["Relu", "Add"]),
            vec![Combiner::AllSimple],
        );
        assert_eq!(
            shown_candidates(&rule.candidates(&v, &b.g)),
            ["{0} Relu", "{2} Add"]
        );
        let all = PartitionRule::combine(
            PartitionRule::ops(&["Relu", "Exp", "Add"]),
            vec![Combiner::AllSimple],
        );
        let cs = all.candidates(&v, &b.g);
        assert!(cs.iter().all(|c| c.sub_graph.is_convex()));
        assert!(cs.iter().any(|c| c.sub_graph.len() == 3));
        assert!(!cs.iter().any(|c| c.sub_graph.to_string() == "{0,2}"));
    }

    #[test]
    fn tuple_arg_joins_all_producers_of_a_concat() {
        let mut b = Builder::new();
        let x = b.input("x");
        let y = b.input("y");
        let r1 = b.node("Relu", &[x]);
        let r2 = b.node("Exp", &[y]);
        let t = TensorType::new(DType::F32, vec![4, 2]);
        let c = b.node_with("Concat", &[("axis", 0)], &[r1, r2], t);
        b.output(c);
        let v = view(&b);
        let rule = PartitionRule::combine(
            PartitionRule::ops(&["Relu", "Exp", "Concat"]),
            vec![Combiner::TupleArg],
        );
        assert_eq!(
            shown_candidates(&rule.candidates(&v, &b.g)),
            [
                "{0} Relu",
                "{0,1,2} Concat+Relu+Exp",
                "{1} Exp",
                "{2} Concat"
            ]
        );
    }

    #[test]
    fn constant_combiner_absorbs_constant_subexpressions() {
        let mut b = Builder::new();
        let x = b.input("x");
        let w = b.konst("w");
        let wt = b.node_with(
            "Transpose",
            &[],
            &[w],
            TensorType::new(DType::F32, vec![2, 2]),
        );
        let m = b.node("MatMul", &[x, wt]);
        b.output(m);
        let v = view(&b);
        assert!(v.is_const_only(0) && !v.is_const_only(1));
        let rule =
            PartitionRule::combine(PartitionRule::ops(&["MatMul"]), vec![Combiner::Constant]);
        assert_eq!(
            shown_candidates(&rule.candidates(&v, &b.g)),
            ["{0,1} MatMul", "{1} MatMul"]
        );
    }

    #[test]
    fn only_valid_filters_and_composites_survive_combining() {
        let b = shared_matmul();
        let v = view(&b);
        let dense =
            PartitionRule::composite(PartitionRule::pattern("dense", pat("Add(MatMul(*, *), *)")));
        let rule = PartitionRule::only_valid(
            PartitionRule::combine(
                PartitionRule::Union(vec![dense, PartitionRule::ops(&["Add"])]),
                vec![Combiner::AllSimple],
            ),
            SubGraphConfig {
                allow_taps: false,
                ..Default::default()
            },
        );
        // {0,1} and {0,2} tap the matmul (it also feeds the other Add outside): rejected.
        let cs = rule.candidates(&v, &b.g);
        assert_eq!(shown_candidates(&cs), ["{1} Add", "{2} Add"]);
        let loose = PartitionRule::only_valid(
            PartitionRule::composite(PartitionRule::pattern("dense", pat("Add(MatMul(*, *), *)"))),
            SubGraphConfig::default(),
        );
        assert_eq!(
            shown_candidates(&loose.candidates(&v, &b.g)),
            [
                "{0,1} dense composite dense{0,1}",
                "{0,2} dense composite dense{0,2}"
            ]
        );
        // A composite joined with an elementwise consumer keeps its composite region.
        let c = matmul_add_relu();
        let cv = view(&c);
        let joined = PartitionRule::combine(
            PartitionRule::Union(vec![
                PartitionRule::composite(PartitionRule::pattern(
                    "dense",
                    pat("Add(MatMul(*, *), *)"),
                )),
                PartitionRule::ops(&["Relu"]),
            ]),
            vec![Combiner::OUT_ELEMENTWISE],
        );
        assert_eq!(
            shown_candidates(&joined.candidates(&cv, &c.g)),
            [
                "{0,1} dense composite dense{0,1}",
                "{0,1,2} dense+Relu composite dense{0,1}",
                "{2} Relu"
            ]
        );
    }

    #[test]
    fn rules_print_as_one_line() {
        let rule = PartitionRule::only_valid(
            PartitionRule::combine(
                PartitionRule::Union(vec![
                    PartitionRule::ops(&["MatMul"]),
                    PartitionRule::pattern("dense", pat("Add(MatMul(*, *), *)")),
                ]),
                vec![Combiner::AllSimple, Combiner::OUT_ELEMENTWISE],
            ),
            SubGraphConfig {
                max_exits: Some(1),
                ..Default::default()
            },
        );
        assert_eq!(
            rule.to_string(),
            "only_valid{max_exits=1, max_depth=none, allow_taps=true}(combine[AllSimple, \
             ByKind(OutElementwiseFusable->Broadcast)](union(ops(MatMul); pattern dense = \
             Add(MatMul(*, *), *))))"
        );
    }
}
