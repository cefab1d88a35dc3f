//! The graph: values, nodes in topological order, inputs and outputs.
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::{Tensor, TensorType};
use crate::ops::Operator;

/// A value (tensor) of the graph; prints as `%N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

/// A node of the graph; prints as `nN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// What the graph knows of a value.
#[derive(Clone, Debug)]
pub struct ValueData {
    /// The source name (ONNX value name or DSL identifier).
    pub name: String,
    /// The type, once inferred.
    pub ty: Option<TensorType>,
    /// The value, when known at compile time.
    pub konst: Option<Arc<Tensor>>,
}

/// An operator application.
#[derive(Clone, Debug)]
pub struct Node {
    /// The source name (unique within the graph after import).
    pub name: String,
    /// The operator and its attributes.
    pub op: Arc<dyn Operator>,
    /// Inputs; `None` for an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Outputs.
    pub outputs: Vec<ValueId>,
}

/// A model graph. Nodes are kept in topological order.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// The model name.
    pub name: String,
    /// Every value.
    pub values: Vec<ValueData>,
    /// Nodes in topological order.
    pub nodes: Vec<Node>,
    /// Run-time inputs, in signature order.
    pub inputs: Vec<ValueId>,
    /// Outputs, in signature order.
    pub outputs: Vec<ValueId>,
    /// The largest tensor and arena the model may have (checked by shape inference and after
    /// arena planning).
    pub limits: super::Limits,
}

impl Node {
    /// Wraps an operator error with this node's name and op type.
    pub fn error(&self, error: crate::error::OpError) -> crate::error::Error {
        crate::error::Error::Node {
            node: self.name.clone(),
            op: self.op.op_type().to_string(),
            error,
        }
    }

    /// The types (where inferred) and compile-time values of this node's inputs, as operators see them.
    pub fn input_facts(&self, g: &Graph) -> (Vec<Option<TensorType>>, Vec<Option<Arc<Tensor>>>) {
        let types = self
            .inputs
            .iter()
            .map(|v| v.and_then(|v| g.value(v).ty.clone()))
            .collect();
        let consts = self
            .inputs
            .iter()
            .map(|v| v.and_then(|v| g.konst(v).cloned()))
            .collect();
        (types, consts)
    }
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Self {
        Graph {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Adds a value.
    pub fn add_value(&mut self, name: impl Into<String>, ty: Option<TensorType>) -> ValueId {
        self.values.push(ValueData {
            name: name.into(),
            ty,
            konst: None,
        });
        ValueId(self.values.len() as u32 - 1)
    }

    /// Adds a constant value.
    pub fn add_const(&mut self, name: impl Into<String>, t: Tensor) -> ValueId {
        let ty = Some(t.ty.clone());
        self.values.push(ValueData {
            name: name.into(),
            ty,
            konst: Some(Arc::new(t)),
        });
        ValueId(self.values.len() as u32 - 1)
    }

    /// Appends a node; its inputs must already be defined.
    pub fn add_node(
        &mut self,
        name: impl Into<String>,
        op: Arc<dyn Operator>,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<ValueId>,
    ) -> NodeId {
        self.nodes.push(Node {
            name: name.into(),
            op,
            inputs,
            outputs,
        });
        NodeId(self.nodes.len() as u32 - 1)
    }

    /// The value's data.
    pub fn value(&self, v: ValueId) -> &ValueData {
        &self.values[v.0 as usize]
    }

    /// The value's data, mutably.
    pub fn value_mut(&mut self, v: ValueId) -> &mut ValueData {
        &mut self.values[v.0 as usize]
    }

    /// The value's type; panics if not yet inferred (callers run after shape inference).
    pub fn ty(&self, v: ValueId) -> &TensorType {
        self.value(v).ty.as_ref().expect("type inferred")
    }

    /// The value's compile-time contents, if known.
    pub fn konst(&self, v: ValueId) -> Option<&Arc<Tensor>> {
        self.value(v).konst.as_ref()
    }

    /// For every value, the nodes that read it (in node order).
    pub fn consumers(&self) -> HashMap<ValueId, Vec<usize>> {
        let mut m: HashMap<ValueId, Vec<usize>> = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for v in n.inputs.iter().flatten() {
                let e = m.entry(*v).or_default();
                if e.last() != Some(&i) {
                    e.push(i);
                }
            }
        }
        m
    }

    /// For every value, the node that produces it.
    pub fn producers(&self) -> HashMap<ValueId, usize> {
        let mut m = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for v in &n.outputs {
                m.insert(*v, i);
            }
        }
        m
    }
}

impl fmt::Display for Graph {
    /// The text IR: one line per input, constant and node.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ty = |v: ValueId| {
            self.value(v)
                .ty
                .as_ref()
                .map(|t| t.to_string())
                .unwrap_or_else(|| "?".into())
        };
        writeln!(f, "graph {:?} {{", self.name)?;
        for &v in &self.inputs {
            writeln!(f, "  input {v}: {} {:?}", ty(v), self.value(v).name)?;
        }
        let mut used: Vec<ValueId> = self
            .nodes
            .iter()
            .flat_map(|n| n.inputs.iter().flatten().copied())
            .collect();
        used.extend(self.outputs.iter().copied());
        used.sort();
        used.dedup();
        for v in used {
            if self.konst(v).is_some() {
                writeln!(f, "  const {v}: {} {:?}", ty(v), self.value(v).name)?;
            }
        }
        for n in &self.nodes {
            let outs: Vec<String> = n
                .outputs
                .iter()
                .map(|&o| format!("{o}: {}", ty(o)))
                .collect();
            let ins: Vec<String> = n
                .inputs
                .iter()
                .map(|i| i.map(|v| v.to_string()).unwrap_or_else(|| "_".into()))
                .collect();
            writeln!(
                f,
                "  {} = {}({}) {:?}  # {:?}",
                outs.join(", "),
                n.op.op_type(),
                ins.join(", "),
                n.op,
                n.name
            )?;
        }
        let outs: Vec<String> = self.outputs.iter().map(|v| v.to_string()).collect();
        writeln!(f, "  output {}", outs.join(", "))?;
        f.write_str("}\n")
    }
}
