//! Bad input gives clear errors, never panics: truncated or corrupted files, unknown operators
//! (all listed at once), mismatched shapes, symbolic dimensions.
use std::path::Path;

use collage_build::frontend::onnx::{import_bytes, proto};
use collage_build::{compile_graph, Error};
use prost::Message;

fn vi(name: &str, shape: &[i64]) -> proto::ValueInfoProto {
    use proto::tensor_shape_proto::{dimension::Value, Dimension};
    let dims = shape
        .iter()
        .map(|&d| Dimension {
            value: Some(if d >= 0 {
                Value::DimValue(d)
            } else {
                Value::DimParam("N".into())
            }),
            ..Default::default()
        })
        .collect();
    proto::ValueInfoProto {
        name: name.into(),
        r#type: Some(proto::TypeProto {
            value: Some(proto::type_proto::Value::TensorType(
                proto::type_proto::Tensor {
                    elem_type: 1,
                    shape: Some(proto::TensorShapeProto { dim: dims }),
                },
            )),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> proto::NodeProto {
    proto::NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn model(
    nodes: Vec<proto::NodeProto>,
    inputs: Vec<proto::ValueInfoProto>,
    outputs: &[&str],
) -> Vec<u8> {
    proto::ModelProto {
        ir_version: 8,
        opset_import: vec![proto::OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(proto::GraphProto {
            name: "t".into(),
            node: nodes,
            input: inputs,
            output: outputs.iter().map(|o| vi(o, &[])).collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn compile(bytes: &[u8]) -> Result<(), Error> {
    let g = import_bytes(bytes, Path::new("test.onnx"))?;
    compile_graph(g, "t").map(|_| ())
}

#[test]
fn truncated_and_corrupted_files_are_errors_not_panics() {
    let good = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/mnist/mnist.onnx"
    ))
    .unwrap();
    assert!(compile(&good).is_ok());
    for cut in [1, 10, good.len() / 3, good.len() / 2, good.len() - 7] {
        let e = compile(&good[..cut]).expect_err("a truncated file must not compile");
        assert!(e.to_string().contains("test.onnx"), "{e}");
    }
    // Flip bytes all over the file: every outcome must be a value, not a panic.
    for i in (0..good.len()).step_by(97) {
        let mut bad = good.clone();
        bad[i] ^= 0x5a;
        let r = std::panic::catch_unwind(|| compile(&bad).map_err(|e| e.to_string()));
        assert!(r.is_ok(), "corrupting byte {i} panicked");
    }
    let e = compile(b"this is not an onnx file").unwrap_err();
    assert!(matches!(e, Error::Decode { .. }), "{e}");
}

#[test]
fn all_unknown_ops_are_listed_at_once() {
    let bytes = model(
        vec![
            node("Frobnicate", "f1", &["x"], &["a"]),
            node("Relu", "r", &["a"], &["b"]),
            node("Twiddle", "t1", &["b"], &["c"]),
            node("Frobnicate", "f2", &["c"], &["y"]),
        ],
        vec![vi("x", &[2, 3])],
        &["y"],
    );
    let e = compile(&bytes).unwrap_err();
    match &e {
        Error::UnsupportedOps { ops } => {
            assert_eq!(ops.len(), 2);
            assert_eq!(
                ops[0],
                (
                    "Frobnicate".to_string(),
                    vec!["f1".to_string(), "f2".to_string()]
                )
            );
            assert_eq!(ops[1], ("Twiddle".to_string(), vec!["t1".to_string()]));
        }
        other => panic!("wrong error: {other}"),
    }
}

#[test]
fn mismatched_shapes_name_the_node_and_op() {
    let bytes = model(
        vec![node("Add", "the_add", &["a", "b"], &["y"])],
        vec![vi("a", &[2, 3]), vi("b", &[4, 5])],
        &["y"],
    );
    let e = compile(&bytes).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Node { .. }), "{msg}");
    assert!(
        msg.contains("the_add") && msg.contains("Add") && msg.contains("broadcast"),
        "{msg}"
    );
}

#[test]
fn symbolic_dimensions_are_explained() {
    let bytes = model(
        vec![node("Relu", "r", &["x"], &["y"])],
        vec![vi("x", &[-1, 3])],
        &["y"],
    );
    let msg = compile(&bytes).unwrap_err().to_string();
    assert!(msg.contains("symbolic") && msg.contains("`x`"), "{msg}");
}

#[test]
fn undefined_inputs_are_errors() {
    let bytes = model(
        vec![node("Relu", "r", &["nope"], &["y"])],
        vec![vi("x", &[3])],
        &["y"],
    );
    let msg = compile(&bytes).unwrap_err().to_string();
    assert!(msg.contains("nope") && msg.contains("`r`"), "{msg}");
}
