//! The ONNX frontend: protobuf decoding (`prost`, schema compiled in pure Rust), initializers,
//! external data, and the mapping of nodes onto registered operators.
mod bind;
#[allow(missing_docs, clippy::all)]
pub mod proto;
mod tensor;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use prost::Message;

use crate::error::{io_err, Error, Result};
use crate::ir::control::ControlFlow;
use crate::ir::{DType, Graph, Node, TensorType, ValueId};
use crate::ops::{self, Attr, Attrs, OpCx};
pub use bind::Bindings;
pub use tensor::{tensor_from_proto, tensor_to_proto};

/// Reads and imports an ONNX model file whose inputs have static shapes.
pub fn load(path: &Path) -> Result<Graph> {
    load_with(path, &Bindings::default())
}

/// Reads and imports an ONNX model file, its symbolic input dimensions bound by `bindings`.
pub fn load_with(path: &Path, bindings: &Bindings) -> Result<Graph> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    import_bytes_with(&bytes, path, bindings)
}

/// The names of the run-time inputs of the ONNX model file at `path` (graph inputs that are not
/// initializers), in order, without importing it.
pub fn input_names(path: &Path) -> Result<Vec<String>> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    let model = proto::ModelProto::decode(bytes.as_slice()).map_err(|e| Error::Decode {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    let Some(g) = model.graph else {
        return Ok(Vec::new());
    };
    let inits: std::collections::HashSet<&str> =
        g.initializer.iter().map(|t| t.name.as_str()).collect();
    Ok(g.input
        .iter()
        .filter(|vi| !inits.contains(vi.name.as_str()))
        .map(|vi| vi.name.clone())
        .collect())
}

/// Imports an ONNX model from bytes; `path` names it in errors and locates external data.
pub fn import_bytes(bytes: &[u8], path: &Path) -> Result<Graph> {
    import_bytes_with(bytes, path, &Bindings::default())
}

/// [`import_bytes`] with the symbolic input dimensions bound by `bindings`.
pub fn import_bytes_with(bytes: &[u8], path: &Path, bindings: &Bindings) -> Result<Graph> {
    let model = proto::ModelProto::decode(bytes).map_err(|e| Error::Decode {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    let Some(graph) = model.graph.as_ref() else {
        return Err(Error::Decode {
            path: path.to_path_buf(),
            detail: "the model has no graph".into(),
        });
    };
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .unwrap_or(if model.opset_import.is_empty() { 1 } else { 0 });
    let base = path.parent().unwrap_or(Path::new("."));
    let name = if graph.name.is_empty() {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        graph.name.clone()
    };
    let mut g = Graph::new(name.clone());
    let model_err = |detail: String| Error::Model {
        model: name.clone(),
        detail,
    };
    let mut by_name: HashMap<String, ValueId> = HashMap::new();

    for init in &graph.initializer {
        let t = tensor_from_proto(init, base)
            .map_err(|e| model_err(format!("initializer `{}`: {e}", init.name)))?;
        let v = g.add_const(init.name.clone(), t);
        by_name.insert(init.name.clone(), v);
    }
    // Run-time inputs (an initializer with a default value, IR < 4 style, is a constant), their
    // shapes resolved with the bindings first: one error names every unbound dimension.
    let mut tensors = Vec::new();
    for vi in &graph.input {
        if by_name.contains_key(&vi.name) {
            continue;
        }
        tensors.push((
            vi.name.as_str(),
            tensor_type(vi).map_err(|e| model_err(format!("input `{}`: {e}", vi.name)))?,
        ));
    }
    let shapes = bind::resolve(&tensors, bindings).map_err(&model_err)?;
    for vi in &graph.input {
        if by_name.contains_key(&vi.name) {
            continue;
        }
        let ty = value_type(vi, &shapes[&vi.name])
            .map_err(|e| model_err(format!("input `{}`: {e}", vi.name)))?;
        let v = g.add_value(vi.name.clone(), Some(ty));
        g.inputs.push(v);
        by_name.insert(vi.name.clone(), v);
    }

    let mut unsupported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let scope = Scope {
        opset,
        base,
        prefix: "",
    };
    let nodes = import_nodes(&graph.node, &mut g, &mut by_name, &scope, &mut unsupported)?;
    g.nodes = nodes;
    if !unsupported.is_empty() {
        return Err(Error::UnsupportedOps {
            ops: unsupported.into_iter().collect(),
        });
    }
    for vo in &graph.output {
        let v = by_name.get(&vo.name).copied().ok_or_else(|| {
            model_err(format!("output `{}` is not produced by any node", vo.name))
        })?;
        g.outputs.push(v);
    }
    Ok(g)
}

/// Operators with graph attributes that inference expands ([`crate::ir::control`]), by registry
/// key; a registered one (`FlexAttention`) only when it has graph attributes.
const CONTROL_FLOW: &[&str] = &["If", "Loop", "Scan", "ai.onnx.preview:FlexAttention"];

/// Where nodes are imported: the opset, the folder of external data, and the prefix of the names
/// of nodes and values (a body's, so that its copies stay apart).
struct Scope<'a> {
    opset: i64,
    base: &'a Path,
    prefix: &'a str,
}

/// Imports `nodes`: values are added to `g` (`by_name` maps ONNX names to them, and is extended),
/// the nodes returned; unknown operators are collected in `unsupported` (their outputs still get
/// values, so that every unsupported operator is reported at once).
fn import_nodes(
    nodes: &[proto::NodeProto],
    g: &mut Graph,
    by_name: &mut HashMap<String, ValueId>,
    scope: &Scope,
    unsupported: &mut BTreeMap<String, Vec<String>>,
) -> Result<Vec<Node>> {
    let mut used_names: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let mut node_name = if node.name.is_empty() {
            format!("{}{}_{i}", scope.prefix, node.op_type)
        } else {
            format!("{}{}", scope.prefix, node.name)
        };
        let count = used_names.entry(node_name.clone()).or_insert(0);
        *count += 1;
        if *count > 1 {
            node_name = format!("{node_name}_{}", *count - 1);
        }
        let default_domain = node.domain.is_empty() || node.domain == "ai.onnx";
        // Operators of other domains are registered as `domain:op_type`
        // (`ai.onnx.preview.training:Adam`).
        let key = if default_domain {
            node.op_type.clone()
        } else {
            format!("{}:{}", node.domain, node.op_type)
        };
        // (a `:` in a default-domain op type names no operator)
        let named = !(default_domain && node.op_type.contains(':'));
        let ctor = named.then(|| ops::lookup(&key)).flatten();
        let has_graph = node.attribute.iter().any(|a| a.g.is_some());
        let control = CONTROL_FLOW
            .iter()
            .find(|c| named && **c == key)
            .copied()
            .filter(|_| ctor.is_none() || has_graph);
        if ctor.is_none() && control.is_none() {
            let op = if node.domain.is_empty() {
                node.op_type.clone()
            } else {
                format!("{}:{}", node.domain, node.op_type)
            };
            unsupported.entry(op).or_default().push(node_name);
            for out in &node.output {
                let v = g.add_value(format!("{}{out}", scope.prefix), None);
                by_name.insert(out.clone(), v);
            }
            continue;
        }
        let node_err = |error| Error::Node {
            node: node_name.clone(),
            op: node.op_type.clone(),
            error,
        };
        let (attrs, bodies) = attrs(node, scope.base, control.is_some()).map_err(node_err)?;
        let op: Arc<dyn ops::Operator> = match (control, ctor) {
            (None, Some(ctor)) => ctor(&OpCx {
                attrs: &attrs,
                opset: scope.opset,
                n_inputs: node.input.len(),
                n_outputs: node.output.len(),
            })
            .map_err(node_err)?,
            (control, _) => Arc::new(ControlFlow {
                op_type: control.expect("a control-flow op (checked above)"),
                attrs,
                bodies,
                opset: scope.opset,
                base: scope.base.to_path_buf(),
                scope: by_name.clone(),
            }),
        };
        let mut inputs = Vec::new();
        for inp in &node.input {
            if inp.is_empty() {
                inputs.push(None);
            } else {
                let v = by_name.get(inp).copied().ok_or_else(|| {
                    node_err(crate::error::OpError::expected(
                        "inputs defined before use",
                        format!("undefined value `{inp}`"),
                    ))
                })?;
                inputs.push(Some(v));
            }
        }
        while inputs.last() == Some(&None) {
            inputs.pop();
        }
        let mut outputs = Vec::new();
        for out in &node.output {
            let v = g.add_value(
                if out.is_empty() {
                    format!("{node_name}_unused")
                } else {
                    format!("{}{out}", scope.prefix)
                },
                None,
            );
            if !out.is_empty() {
                by_name.insert(out.clone(), v);
            }
            outputs.push(v);
        }
        out.push(Node {
            name: node_name,
            op,
            inputs,
            outputs,
        });
    }
    Ok(out)
}

/// Imports one body of control-flow node `cf` into `g`: its formal inputs are bound to `inputs`,
/// names it does not define resolve in the node's scope. Returns the body's nodes (to be
/// inferred in order) and the values of its outputs.
pub fn import_body(
    bytes: &[u8],
    g: &mut Graph,
    inputs: &[ValueId],
    cf: &ControlFlow,
    prefix: &str,
) -> Result<(Vec<Node>, Vec<ValueId>)> {
    let model = g.name.clone();
    let err = |detail: String| Error::Model {
        model: model.clone(),
        detail: format!("body `{prefix}`: {detail}"),
    };
    let body = proto::GraphProto::decode(bytes).map_err(|e| err(e.to_string()))?;
    let base = cf.base.as_path();
    if body.input.len() != inputs.len() {
        return Err(err(format!(
            "{} inputs, the node gives {}",
            body.input.len(),
            inputs.len()
        )));
    }
    let mut by_name = cf.scope.clone();
    for (vi, &v) in body.input.iter().zip(inputs) {
        by_name.insert(vi.name.clone(), v);
    }
    for init in &body.initializer {
        let t = tensor_from_proto(init, base)
            .map_err(|e| err(format!("initializer `{}`: {e}", init.name)))?;
        let v = g.add_const(format!("{prefix}{}", init.name), t);
        by_name.insert(init.name.clone(), v);
    }
    let mut unsupported = BTreeMap::new();
    let scope = Scope {
        opset: cf.opset,
        base,
        prefix,
    };
    let nodes = import_nodes(&body.node, g, &mut by_name, &scope, &mut unsupported)?;
    if !unsupported.is_empty() {
        return Err(Error::UnsupportedOps {
            ops: unsupported.into_iter().collect(),
        });
    }
    let outputs = body
        .output
        .iter()
        .map(|o| {
            by_name
                .get(&o.name)
                .copied()
                .ok_or_else(|| err(format!("output `{}` is not produced", o.name)))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((nodes, outputs))
}

/// The tensor type of a graph input, or why it is not one.
fn tensor_type(vi: &proto::ValueInfoProto) -> Result<&proto::type_proto::Tensor, String> {
    use proto::type_proto::Value;
    match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(Value::TensorType(t)) => Ok(t),
        _ => Err("only tensor inputs are supported".into()),
    }
}

/// A graph input's type: its element type, and its shape as resolved ([`bind::resolve`]).
fn value_type(vi: &proto::ValueInfoProto, shape: &[usize]) -> Result<TensorType, String> {
    let t = tensor_type(vi)?;
    let dtype = DType::from_onnx(t.elem_type).ok_or_else(|| {
        format!(
            "element type {} is not supported",
            DType::onnx_name(t.elem_type)
        )
    })?;
    Ok(TensorType::new(dtype, shape.to_vec()))
}

/// A node's attributes, and its graph attributes encoded (only a control-flow node may have
/// them).
fn attrs(
    node: &proto::NodeProto,
    base: &Path,
    control: bool,
) -> Result<(Attrs, BTreeMap<String, Arc<Vec<u8>>>), crate::error::OpError> {
    use proto::attribute_proto::AttributeType as T;
    let mut m = BTreeMap::new();
    let mut bodies = BTreeMap::new();
    for a in &node.attribute {
        let v = match T::try_from(a.r#type).unwrap_or(T::Undefined) {
            T::Graph if control => {
                let g = a.g.as_ref().ok_or_else(|| {
                    crate::error::OpError::expected(
                        format!("attribute `{}` to hold a graph", a.name),
                        "nothing",
                    )
                })?;
                bodies.insert(a.name.clone(), Arc::new(g.encode_to_vec()));
                continue;
            }
            T::Int => Attr::Int(a.i),
            T::Float => Attr::Float(a.f),
            T::String => Attr::Str(String::from_utf8_lossy(&a.s).into_owned()),
            T::Ints => Attr::Ints(a.ints.clone()),
            T::Floats => Attr::Floats(a.floats.clone()),
            T::Strings => Attr::Strs(
                a.strings
                    .iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect(),
            ),
            T::Tensor => {
                let t = a.t.as_ref().ok_or_else(|| {
                    crate::error::OpError::expected(
                        format!("attribute `{}` to hold a tensor", a.name),
                        "nothing",
                    )
                })?;
                Attr::Tensor(tensor_from_proto(t, base).map_err(|e| {
                    crate::error::OpError::Unsupported(format!("attribute `{}`: {e}", a.name))
                })?)
            }
            other => {
                return Err(crate::error::OpError::Unsupported(format!(
                    "attribute `{}` of type {other:?}",
                    a.name
                )))
            }
        };
        m.insert(a.name.clone(), v);
    }
    Ok((Attrs(m), bodies))
}
