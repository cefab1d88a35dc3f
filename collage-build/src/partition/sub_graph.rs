//! Sub-graphs of a model graph: sets of nodes with their boundary, and the validity check that
//! decides whether a set of nodes can become one kernel.
//!
//! Node indices are the graph's node positions, a topological order: every producer comes before
//! its consumers. Graph inputs and constants are values, not nodes.
use std::fmt;

use super::index_set::IndexSet;
use crate::ir::{Graph, ValueId};
use crate::ops::OpKind;

/// What the partitioner needs to know of one node.
#[derive(Clone, Debug)]
struct NodeInfo {
    op_type: &'static str,
    kind: OpKind,
    /// Producer nodes of the inputs, ascending, without repeats.
    inputs: Vec<usize>,
    /// Consumer nodes of the outputs, ascending, without repeats.
    outputs: Vec<usize>,
    /// Present input values, ascending, without repeats.
    in_values: Vec<ValueId>,
    /// Output values, in node order.
    out_values: Vec<ValueId>,
    /// Produces a graph output.
    external: bool,
    /// Reads a run-time value that no node produces (a graph input).
    reads_graph_input: bool,
    /// Computes from compile-time constants only: every present input is a constant or the
    /// output of such a node (vacuously true without inputs).
    const_only: bool,
}

/// The dataflow structure of a [`Graph`], indexed by node position: producers and consumers of
/// every node through its values.
#[derive(Clone, Debug)]
pub struct DataflowView {
    nodes: Vec<NodeInfo>,
    /// Per value: the node producing it.
    producer: Vec<Option<usize>>,
    /// Per value: the nodes reading it, ascending.
    consumers: Vec<Vec<usize>>,
    /// Per value: known at compile time.
    is_const: Vec<bool>,
    /// Per value: a graph output.
    is_output: Vec<bool>,
}

impl DataflowView {
    /// The view of `graph`, whose nodes must be in topological order.
    pub fn new(graph: &Graph) -> Self {
        let nv = graph.values.len();
        let mut producer = vec![None; nv];
        for (i, n) in graph.nodes.iter().enumerate() {
            for v in &n.outputs {
                if let Some(p) = producer.get_mut(v.0 as usize) {
                    *p = Some(i);
                }
            }
        }
        let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); nv];
        for (i, n) in graph.nodes.iter().enumerate() {
            for v in n.inputs.iter().flatten() {
                if let Some(c) = consumers.get_mut(v.0 as usize) {
                    if c.last() != Some(&i) {
                        c.push(i);
                    }
                }
            }
        }
        let is_const: Vec<bool> = graph.values.iter().map(|v| v.konst.is_some()).collect();
        let mut is_output = vec![false; nv];
        for v in &graph.outputs {
            if let Some(o) = is_output.get_mut(v.0 as usize) {
                *o = true;
            }
        }
        let value_const = |v: ValueId| is_const.get(v.0 as usize).copied().unwrap_or(false);
        let value_producer = |v: ValueId| producer.get(v.0 as usize).copied().flatten();
        let nodes = graph
            .nodes
            .iter()
            .map(|n| {
                let mut in_values: Vec<ValueId> = n.inputs.iter().flatten().copied().collect();
                in_values.sort();
                in_values.dedup();
                let mut inputs: Vec<usize> = in_values
                    .iter()
                    .filter_map(|&v| value_producer(v))
                    .collect();
                inputs.sort();
                inputs.dedup();
                let mut outputs: Vec<usize> = n
                    .outputs
                    .iter()
                    .flat_map(|v| consumers.get(v.0 as usize).into_iter().flatten())
                    .copied()
                    .collect();
                outputs.sort();
                outputs.dedup();
                NodeInfo {
                    op_type: n.op.op_type(),
                    kind: n.op.kind(),
                    reads_graph_input: in_values
                        .iter()
                        .any(|&v| value_producer(v).is_none() && !value_const(v)),
                    const_only: false,
                    external: n
                        .outputs
                        .iter()
                        .any(|v| is_output.get(v.0 as usize).copied().unwrap_or(false)),
                    inputs,
                    outputs,
                    in_values,
                    out_values: n.outputs.clone(),
                }
            })
            .collect::<Vec<NodeInfo>>();
        let mut nodes = nodes;
        for i in 0..nodes.len() {
            let const_only = nodes[i].in_values.iter().all(|&v| {
                value_const(v) || value_producer(v).is_some_and(|p| p < i && nodes[p].const_only)
            });
            nodes[i].const_only = const_only;
        }
        DataflowView {
            nodes,
            producer,
            consumers,
            is_const,
            is_output,
        }
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True if the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The empty set over this graph's nodes.
    pub fn empty_set(&self) -> IndexSet {
        IndexSet::new(self.len())
    }

    /// The set of `nodes` over this graph's nodes.
    ///
    /// # Panics
    /// If a node index is out of range.
    pub fn set_of(&self, nodes: impl IntoIterator<Item = usize>) -> IndexSet {
        IndexSet::from_indices(self.len(), nodes)
    }

    /// Node `i`'s op type.
    pub fn op_type(&self, i: usize) -> &'static str {
        self.nodes[i].op_type
    }

    /// Node `i`'s operator kind.
    pub fn kind(&self, i: usize) -> OpKind {
        self.nodes[i].kind
    }

    /// The nodes producing node `i`'s inputs, ascending.
    pub fn inputs(&self, i: usize) -> &[usize] {
        &self.nodes[i].inputs
    }

    /// The nodes reading node `i`'s outputs, ascending.
    pub fn outputs(&self, i: usize) -> &[usize] {
        &self.nodes[i].outputs
    }

    /// Node `i`'s present input values, ascending, without repeats.
    pub fn input_values(&self, i: usize) -> &[ValueId] {
        &self.nodes[i].in_values
    }

    /// Node `i`'s output values.
    pub fn output_values(&self, i: usize) -> &[ValueId] {
        &self.nodes[i].out_values
    }

    /// True if node `i` produces a graph output.
    pub fn is_external(&self, i: usize) -> bool {
        self.nodes[i].external
    }

    /// True if node `i` reads a graph input (a run-time value no node produces).
    pub fn reads_graph_input(&self, i: usize) -> bool {
        self.nodes[i].reads_graph_input
    }

    /// True if node `i` computes from compile-time constants only (its inputs are constants or
    /// outputs of such nodes).
    pub fn is_const_only(&self, i: usize) -> bool {
        self.nodes[i].const_only
    }

    /// The node producing `v`; `None` for graph inputs and constants.
    pub fn producer(&self, v: ValueId) -> Option<usize> {
        self.producer.get(v.0 as usize).copied().flatten()
    }

    /// The nodes reading `v`, ascending.
    pub fn consumers(&self, v: ValueId) -> &[usize] {
        self.consumers
            .get(v.0 as usize)
            .map_or(&[], |c| c.as_slice())
    }

    /// True if `v` is known at compile time.
    pub fn is_const(&self, v: ValueId) -> bool {
        self.is_const.get(v.0 as usize).copied().unwrap_or(false)
    }

    /// True if `v` is a graph output.
    pub fn is_graph_output(&self, v: ValueId) -> bool {
        self.is_output.get(v.0 as usize).copied().unwrap_or(false)
    }

    /// True if no path leaves `set` and re-enters it: no node outside the set is both reachable
    /// from the set and reaches it. The empty set is convex.
    pub fn is_convex(&self, set: &IndexSet) -> bool {
        let (Some(first), Some(last)) = (set.first(), set.last()) else {
            return true;
        };
        // Sweep [first, last] in topological order; `tainted` marks outside nodes reachable from
        // the set. Nodes after `last` cannot reach the set, nodes before `first` cannot be reached.
        let mut tainted = IndexSet::new(self.len());
        for i in first..=last {
            let from_set_or_tainted = self.nodes[i]
                .inputs
                .iter()
                .any(|&p| set.contains(p) || tainted.contains(p));
            if set.contains(i) {
                if self.nodes[i].inputs.iter().any(|&p| tainted.contains(p)) {
                    return false;
                }
            } else if from_set_or_tainted {
                tainted.insert(i);
            }
        }
        true
    }
}

/// Limits on the sub-graphs a backend accepts as one kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubGraphConfig {
    /// The most exit nodes (nodes whose outputs leave the sub-graph); `None` for no limit.
    pub max_exits: Option<usize>,
    /// The most nodes on a path inside the sub-graph; `None` for no limit.
    pub max_depth: Option<usize>,
    /// Whether an exit node may also feed nodes inside the sub-graph.
    pub allow_taps: bool,
}

impl Default for SubGraphConfig {
    /// No limits, taps allowed.
    fn default() -> Self {
        SubGraphConfig {
            max_exits: None,
            max_depth: None,
            allow_taps: true,
        }
    }
}

impl fmt::Display for SubGraphConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lim = |l: Option<usize>| l.map_or_else(|| "none".to_string(), |n| n.to_string());
        write!(
            f,
            "{{max_exits={}, max_depth={}, allow_taps={}}}",
            lim(self.max_exits),
            lim(self.max_depth),
            self.allow_taps
        )
    }
}

/// Why a sub-graph is not valid under a [`SubGraphConfig`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The sub-graph has no node.
    Empty,
    /// A path leaves the sub-graph and re-enters it.
    NotConvex,
    /// More exit nodes than allowed.
    TooManyExits {
        /// Exit nodes of the sub-graph.
        exits: usize,
        /// The limit.
        max: usize,
    },
    /// A path inside is longer than allowed.
    TooDeep {
        /// The sub-graph's depth.
        depth: usize,
        /// The limit.
        max: usize,
    },
    /// An exit node also feeds a node inside, and taps are not allowed.
    Tap {
        /// The exit node.
        node: usize,
    },
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::Empty => f.write_str("empty"),
            Invalid::NotConvex => f.write_str("not convex"),
            Invalid::TooManyExits { exits, max } => write!(f, "{exits} exits, at most {max}"),
            Invalid::TooDeep { depth, max } => write!(f, "depth {depth}, at most {max}"),
            Invalid::Tap { node } => write!(f, "exit node {node} also feeds the sub-graph"),
        }
    }
}

/// A set of nodes of one graph with its boundary.
///
/// Equality, hashing and order look at the node set only; everything else is derived from it.
/// The order is by first node, then lexicographic over the nodes.
#[derive(Clone, Debug)]
pub struct SubGraph {
    inside: IndexSet,
    entry: IndexSet,
    exit: IndexSet,
    producers: IndexSet,
    consumers: IndexSet,
    inputs: Vec<ValueId>,
    consts: Vec<ValueId>,
    outputs: Vec<ValueId>,
    depth: usize,
    kind: OpKind,
    convex: bool,
}

impl SubGraph {
    /// The sub-graph of `view` made of the nodes in `inside`.
    pub fn new(view: &DataflowView, inside: IndexSet) -> Self {
        let n = view.len();
        let mut entry = IndexSet::new(n);
        let mut exit = IndexSet::new(n);
        let mut producers = IndexSet::new(n);
        let mut consumers = IndexSet::new(n);
        let mut inputs = Vec::new();
        let mut consts = Vec::new();
        let mut outputs = Vec::new();
        let mut depths = vec![0usize; n];
        let mut depth = 0;
        let mut kind = OpKind::Elementwise;
        for i in inside.iter() {
            let node = &view.nodes[i];
            kind = kind.max(node.kind);
            let mut is_entry = false;
            for &v in &node.in_values {
                match view.producer(v) {
                    Some(p) if inside.contains(p) => {}
                    Some(p) => {
                        is_entry = true;
                        producers.insert(p);
                        inputs.push(v);
                    }
                    None if view.is_const(v) => consts.push(v),
                    None => {
                        is_entry = true;
                        inputs.push(v);
                    }
                }
            }
            if is_entry {
                entry.insert(i);
            }
            let mut is_exit = false;
            for &v in &node.out_values {
                let leaves = view.is_graph_output(v)
                    || view.consumers(v).iter().any(|&c| !inside.contains(c));
                if leaves {
                    is_exit = true;
                    outputs.push(v);
                }
            }
            for &c in &node.outputs {
                if !inside.contains(c) {
                    consumers.insert(c);
                }
            }
            if is_exit {
                exit.insert(i);
            }
            let d = 1 + node
                .inputs
                .iter()
                .filter(|&&p| inside.contains(p))
                .map(|&p| depths[p])
                .max()
                .unwrap_or(0);
            depths[i] = d;
            depth = depth.max(d);
        }
        for v in [&mut inputs, &mut consts, &mut outputs] {
            v.sort();
            v.dedup();
        }
        let convex = view.is_convex(&inside);
        SubGraph {
            inside,
            entry,
            exit,
            producers,
            consumers,
            inputs,
            consts,
            outputs,
            depth,
            kind,
            convex,
        }
    }

    /// The sub-graph of the single node `i`.
    pub fn single(view: &DataflowView, i: usize) -> Self {
        SubGraph::new(view, view.set_of([i]))
    }

    /// The nodes inside.
    pub fn inside(&self) -> &IndexSet {
        &self.inside
    }

    /// Inside nodes reading a value from outside: from an outside node or a graph input
    /// (constants do not count).
    pub fn entry(&self) -> &IndexSet {
        &self.entry
    }

    /// Inside nodes with an output read outside or that is a graph output.
    pub fn exit(&self) -> &IndexSet {
        &self.exit
    }

    /// Outside nodes whose outputs are read inside.
    pub fn producers(&self) -> &IndexSet {
        &self.producers
    }

    /// Outside nodes reading an output of an inside node.
    pub fn consumers(&self) -> &IndexSet {
        &self.consumers
    }

    /// Run-time values read inside and not produced inside (outside nodes' outputs and graph
    /// inputs), ascending.
    pub fn inputs(&self) -> &[ValueId] {
        &self.inputs
    }

    /// Compile-time constants read inside, ascending.
    pub fn consts(&self) -> &[ValueId] {
        &self.consts
    }

    /// Values produced inside and read outside or returned by the graph, ascending.
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }

    /// The most nodes on one path inside (1 for a single node, 0 when empty).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The largest operator kind inside (in [`OpKind`]'s order); `Elementwise` when empty.
    pub fn kind(&self) -> OpKind {
        self.kind
    }

    /// True if no path leaves the sub-graph and re-enters it.
    pub fn is_convex(&self) -> bool {
        self.convex
    }

    /// The number of nodes inside.
    pub fn len(&self) -> usize {
        self.inside.len()
    }

    /// True if no node is inside.
    pub fn is_empty(&self) -> bool {
        self.inside.is_empty()
    }

    /// The first inside node.
    pub fn first(&self) -> Option<usize> {
        self.inside.first()
    }

    /// Checks the sub-graph can become one kernel under `config`: non-empty, convex, and within
    /// the limits.
    pub fn validate(&self, view: &DataflowView, config: &SubGraphConfig) -> Result<(), Invalid> {
        if self.is_empty() {
            return Err(Invalid::Empty);
        }
        if !self.convex {
            return Err(Invalid::NotConvex);
        }
        let exits = self.exit.len();
        if let Some(max) = config.max_exits.filter(|&m| exits > m) {
            return Err(Invalid::TooManyExits { exits, max });
        }
        if let Some(max) = config.max_depth.filter(|&m| self.depth > m) {
            return Err(Invalid::TooDeep {
                depth: self.depth,
                max,
            });
        }
        if !config.allow_taps {
            if let Some(node) = self
                .exit
                .iter()
                .find(|&e| view.outputs(e).iter().any(|&c| self.inside.contains(c)))
            {
                return Err(Invalid::Tap { node });
            }
        }
        Ok(())
    }

    /// True if [`SubGraph::validate`] accepts the sub-graph.
    pub fn is_valid(&self, view: &DataflowView, config: &SubGraphConfig) -> bool {
        self.validate(view, config).is_ok()
    }

    /// True if some output of `self` is read by a node of `other` (the sets may overlap).
    pub fn feeds(&self, other: &SubGraph) -> bool {
        self.consumers.intersects(&other.inside)
    }

    /// The sub-graph of the nodes of both.
    pub fn union(&self, view: &DataflowView, other: &SubGraph) -> SubGraph {
        SubGraph::new(view, self.inside.union(&other.inside))
    }
}

impl PartialEq for SubGraph {
    fn eq(&self, other: &Self) -> bool {
        self.inside == other.inside
    }
}

impl Eq for SubGraph {}

impl std::hash::Hash for SubGraph {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inside.hash(state);
    }
}

impl Ord for SubGraph {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.inside.cmp(&other.inside)
    }
}

impl PartialOrd for SubGraph {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for SubGraph {
    /// The node set, as `{1,3,4}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inside, f)
    }
}

/// Small graphs for the partitioner's tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::collections::BTreeMap;

    use crate::ir::{DType, Graph, Tensor, TensorType, ValueId};
    use crate::ops::{lookup, Attr, Attrs, OpCx};

    /// A graph under construction whose values are all `f32[2,2]` unless said otherwise.
    pub(crate) struct Builder {
        pub(crate) g: Graph,
    }

    impl Builder {
        pub(crate) fn new() -> Self {
            Builder {
                g: Graph::new("test"),
            }
        }

        fn ty() -> TensorType {
            TensorType::new(DType::F32, vec![2, 2])
        }

        /// A graph input.
        pub(crate) fn input(&mut self, name: &str) -> ValueId {
            let v = self.g.add_value(name, Some(Self::ty()));
            self.g.inputs.push(v);
            v
        }

        /// A constant.
        pub(crate) fn konst(&mut self, name: &str) -> ValueId {
            self.g
                .add_const(name, Tensor::from_f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0]))
        }

        /// A node of `op` with integer attributes; returns its output.
        pub(crate) fn node_with(
            &mut self,
            op: &str,
            ints: &[(&str, i64)],
            inputs: &[ValueId],
            ty: TensorType,
        ) -> ValueId {
            let attrs = Attrs(
                ints.iter()
                    .map(|(k, v)| (k.to_string(), Attr::Int(*v)))
                    .collect::<BTreeMap<_, _>>(),
            );
            let ctor = lookup(op).expect("registered op");
            let op = ctor(&OpCx {
                attrs: &attrs,
                opset: 17,
                n_inputs: inputs.len(),
                n_outputs: 1,
            })
            .expect("op constructed");
            let name = format!("n{}", self.g.nodes.len());
            let out = self.g.add_value(format!("{name}_out"), Some(ty));
            self.g.add_node(
                name,
                op,
                inputs.iter().map(|&v| Some(v)).collect(),
                vec![out],
            );
            out
        }

        /// A node of `op` without attributes; returns its output.
        pub(crate) fn node(&mut self, op: &str, inputs: &[ValueId]) -> ValueId {
            self.node_with(op, &[], inputs, Self::ty())
        }

        /// Marks `v` as a graph output.
        pub(crate) fn output(&mut self, v: ValueId) {
            self.g.outputs.push(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::Builder;
    use super::*;

    /// a → b, a → c, b → d, c → d (node indices 0..4); d is the graph output.
    fn diamond() -> (Graph, DataflowView) {
        let mut b = Builder::new();
        let x = b.input("x");
        let a = b.node("Relu", &[x]);
        let bb = b.node("Exp", &[a]);
        let c = b.node("Neg", &[a]);
        let d = b.node("Add", &[bb, c]);
        b.output(d);
        let view = DataflowView::new(&b.g);
        (b.g, view)
    }

    fn sg(view: &DataflowView, nodes: &[usize]) -> SubGraph {
        SubGraph::new(view, view.set_of(nodes.iter().copied()))
    }

    #[test]
    fn view_links_producers_and_consumers() {
        let (_, view) = diamond();
        assert_eq!(view.len(), 4);
        assert_eq!(view.inputs(3), &[1, 2]);
        assert_eq!(view.outputs(0), &[1, 2]);
        assert!(view.reads_graph_input(0) && !view.reads_graph_input(1));
        assert!(view.is_external(3) && !view.is_external(2));
        assert_eq!(view.op_type(3), "Add");
        assert_eq!(view.kind(0), OpKind::Broadcast);
    }

    #[test]
    fn diamond_convexity() {
        let (_, view) = diamond();
        let cfg = SubGraphConfig::default();
        let ad = sg(&view, &[0, 3]);
        assert!(!ad.is_convex());
        assert_eq!(ad.validate(&view, &cfg), Err(Invalid::NotConvex));
        let all = sg(&view, &[0, 1, 2, 3]);
        assert!(all.is_valid(&view, &cfg));
        assert!(sg(&view, &[0, 1]).is_valid(&view, &cfg));
        assert!(sg(&view, &[1, 2, 3]).is_valid(&view, &cfg));
        assert!(!sg(&view, &[0, 1, 3]).is_valid(&view, &cfg));
        // Disconnected but convex: b and c do not reach each other.
        assert!(sg(&view, &[1, 2]).is_valid(&view, &cfg));
        assert_eq!(
            SubGraph::new(&view, view.empty_set()).validate(&view, &cfg),
            Err(Invalid::Empty)
        );
    }

    #[test]
    fn boundary_of_sub_graphs() {
        let (g, view) = diamond();
        let all = sg(&view, &[0, 1, 2, 3]);
        assert_eq!(all.entry().to_string(), "{0}");
        assert_eq!(all.exit().to_string(), "{3}");
        assert_eq!(all.inputs(), &g.inputs[..]);
        assert_eq!(all.outputs(), &g.outputs[..]);
        assert_eq!(all.depth(), 3);
        assert_eq!(all.kind(), OpKind::Broadcast);
        let bc = sg(&view, &[1, 2]);
        assert_eq!(bc.entry().to_string(), "{1,2}");
        assert_eq!(bc.exit().to_string(), "{1,2}");
        assert_eq!(bc.producers().to_string(), "{0}");
        assert_eq!(bc.consumers().to_string(), "{3}");
        assert_eq!(bc.inputs(), view.output_values(0));
        assert_eq!(bc.outputs().len(), 2);
        assert_eq!(bc.depth(), 1);
        assert!(sg(&view, &[0]).feeds(&bc));
        assert!(!bc.feeds(&sg(&view, &[0])));
    }

    #[test]
    fn constants_are_not_entries() {
        let mut b = Builder::new();
        let x = b.input("x");
        let w = b.konst("w");
        let r = b.node("Relu", &[x]);
        let m = b.node("MatMul", &[r, w]);
        b.output(m);
        let view = DataflowView::new(&b.g);
        let s = sg(&view, &[0, 1]);
        assert_eq!(s.entry().to_string(), "{0}");
        assert_eq!(s.consts(), &[w]);
        assert_eq!(s.inputs(), &[x]);
        assert_eq!(s.kind(), OpKind::OutElementwiseFusable);
        assert!(!view.is_const_only(1) && view.is_const(w));
    }

    #[test]
    fn exit_and_depth_limits() {
        let (_, view) = diamond();
        let bc = sg(&view, &[1, 2]);
        let one_exit = SubGraphConfig {
            max_exits: Some(1),
            ..Default::default()
        };
        assert_eq!(
            bc.validate(&view, &one_exit),
            Err(Invalid::TooManyExits { exits: 2, max: 1 })
        );
        assert!(sg(&view, &[0, 1, 2, 3]).is_valid(&view, &one_exit));
        let shallow = SubGraphConfig {
            max_depth: Some(2),
            ..Default::default()
        };
        assert_eq!(
            sg(&view, &[0, 1, 2, 3]).validate(&view, &shallow),
            Err(Invalid::TooDeep { depth: 3, max: 2 })
        );
        assert!(sg(&view, &[0, 1]).is_valid(&view, &shallow));
    }

    #[test]
    fn taps() {
        let (_, view) = diamond();
        // a is an exit (c reads it outside) and also feeds b inside.
        let ab = sg(&view, &[0, 1]);
        assert_eq!(ab.exit().to_string(), "{0,1}");
        let no_taps = SubGraphConfig {
            allow_taps: false,
            ..Default::default()
        };
        assert_eq!(ab.validate(&view, &no_taps), Err(Invalid::Tap { node: 0 }));
        assert!(sg(&view, &[0, 1, 2, 3]).is_valid(&view, &no_taps));
    }

    #[test]
    fn order_equality_and_display() {
        let (_, view) = diamond();
        let mut v = [sg(&view, &[1, 2]), sg(&view, &[0, 3]), sg(&view, &[1])];
        v.sort();
        let shown: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        assert_eq!(shown, ["{0,3}", "{1}", "{1,2}"]);
        assert_eq!(sg(&view, &[1]).union(&view, &sg(&view, &[2])), v[2]);
        assert_eq!(
            SubGraphConfig::default().to_string(),
            "{max_exits=none, max_depth=none, allow_taps=true}"
        );
    }
}
