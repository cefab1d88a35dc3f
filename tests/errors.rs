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

/// Found by fuzzing: a reduced shape mutated to a rank of about 10^5 (all ones) made the code
/// generator's index unravelling quadratic in the rank. A rank over the limit is an error
/// naming the node and op; a rank at the limit compiles.
#[test]
fn ranks_beyond_the_limit_are_errors() {
    let reshape = |rank: usize| {
        let mut shape = vec![6];
        shape.resize(rank, 1);
        one_node(
            "Reshape",
            Some(&[2, 3]),
            &["x", "s"],
            vec![ints("s", &shape)],
            vec![],
        )
    };
    let msg = compile(&reshape(100)).unwrap_err().to_string();
    assert!(
        msg.contains("Reshape") && msg.contains("rank 100") && msg.contains("64 dimensions"),
        "{msg}"
    );
    compile(&reshape(64)).unwrap();
}

#[test]
fn symbolic_dimensions_are_explained() {
    let bytes = model(
        vec![node("Relu", "r", &["x"], &["y"])],
        vec![vi("x", &[-1, 3])],
        &["y"],
    );
    let msg = compile(&bytes).unwrap_err().to_string();
    assert!(
        msg.contains("no static size")
            && msg.contains("`x` dimension 0 (`N`)")
            && msg.contains("--input-shape x=N,3"),
        "{msg}"
    );
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

// ---------------------------------------------------------------------------------------------
// Hostile sizes: a model file is untrusted input. Shapes and sizes computed from attributes and
// constant inputs must give clear errors (never a panic, never a wrapped size). `cargo test` in
// debug runs these with overflow checks on, so any unchecked arithmetic on the way panics here.

use proto::attribute_proto::AttributeType;

/// An attribute.
enum A {
    I(i64),
    Is(Vec<i64>),
    S(&'static str),
}

fn attr(name: &str, a: A) -> proto::AttributeProto {
    let mut p = proto::AttributeProto {
        name: name.into(),
        ..Default::default()
    };
    match a {
        A::I(v) => {
            p.r#type = AttributeType::Int as i32;
            p.i = v;
        }
        A::Is(v) => {
            p.r#type = AttributeType::Ints as i32;
            p.ints = v;
        }
        A::S(v) => {
            p.r#type = AttributeType::String as i32;
            p.s = v.as_bytes().to_vec();
        }
    }
    p
}

/// A 1-D tensor `name` of ONNX element type `data_type` and `len` elements, without data.
fn vector(name: &str, data_type: i32, len: usize) -> proto::TensorProto {
    proto::TensorProto {
        name: name.into(),
        data_type,
        dims: vec![len as i64],
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> proto::TensorProto {
    proto::TensorProto {
        int64_data: v.to_vec(),
        ..vector(name, 7, v.len())
    }
}

fn int_scalar(name: &str, v: i64) -> proto::TensorProto {
    proto::TensorProto {
        dims: vec![],
        ..ints(name, &[v])
    }
}

fn floats(name: &str, v: &[f32]) -> proto::TensorProto {
    proto::TensorProto {
        float_data: v.to_vec(),
        ..vector(name, 1, v.len())
    }
}

fn float_scalar(name: &str, v: f32) -> proto::TensorProto {
    proto::TensorProto {
        dims: vec![],
        ..floats(name, &[v])
    }
}

/// A one-node model `n` with graph input `x` of `shape` (when given), constant inputs and
/// attributes; opset 21.
fn one_node(
    op: &str,
    x: Option<&[i64]>,
    inputs: &[&str],
    consts: Vec<proto::TensorProto>,
    attrs: Vec<proto::AttributeProto>,
) -> Vec<u8> {
    // `domain:op_type` names an operator of another domain (the registry's spelling).
    let (domain, op) = op.rsplit_once(':').unwrap_or(("", op));
    let mut n = node(op, "n", inputs, &["y"]);
    n.domain = domain.into();
    n.attribute = attrs;
    proto::ModelProto {
        ir_version: 10,
        opset_import: vec![proto::OperatorSetIdProto {
            domain: String::new(),
            version: 21,
        }],
        graph: Some(proto::GraphProto {
            name: "t".into(),
            node: vec![n],
            input: x.map(|s| vi("x", s)).into_iter().collect(),
            output: vec![vi("y", &[])],
            initializer: consts,
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// `op` on input `x` of `shape` with one constant input `t`.
fn with_const(op: &str, shape: &[i64], t: proto::TensorProto) -> Vec<u8> {
    let name = t.name.clone();
    one_node(op, Some(shape), &["x", &name], vec![t], vec![])
}

/// `op` on input `x` of `shape` with one attribute.
fn with_attr(op: &str, shape: &[i64], a: proto::AttributeProto) -> Vec<u8> {
    one_node(op, Some(shape), &["x"], vec![], vec![a])
}

/// Compiles with panics caught: `Ok(Ok)` compiled, `Ok(Err)` a clean error, `Err` a panic.
fn try_compile(bytes: &[u8]) -> Result<Result<(), Error>, String> {
    std::panic::catch_unwind(|| compile(bytes)).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// The error must name the node and op (or, for a whole-model error, the value).
fn assert_clear(e: &Error, op: &str, case: &str) {
    let msg = e.to_string();
    match e {
        Error::Node { node, op: o, .. } => {
            assert!(
                node == "n" && o == op,
                "{case}: error names another node: {msg}"
            )
        }
        Error::Model { .. } => assert!(msg.contains('`'), "{case}: unclear error: {msg}"),
        other => panic!("{case}: unexpected error kind: {other}"),
    }
}

#[test]
fn the_five_hostile_models_of_the_report_are_clear_errors() {
    let two32 = 1i64 << 32;
    let two31 = 1i64 << 31;
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        (
            "input f32[2^32, 2^32] -> Relu",
            "Relu",
            one_node("Relu", Some(&[two32, two32]), &["x"], vec![], vec![]),
        ),
        (
            "Tile with repeats 2^62",
            "Tile",
            with_const("Tile", &[2, 3], ints("r", &[1 << 62, 1])),
        ),
        (
            "Expand to [2^31, 2^31]",
            "Expand",
            with_const("Expand", &[1, 1], ints("s", &[two31, two31])),
        ),
        (
            "Resize with scale 1e30",
            "Resize",
            one_node(
                "Resize",
                Some(&[1, 1, 2, 2]),
                &["x", "", "s"],
                vec![floats("s", &[1.0, 1.0, 1e30, 1e30])],
                vec![],
            ),
        ),
        (
            "Range of 1e30 steps",
            "Range",
            one_node(
                "Range",
                None,
                &["a", "b", "c"],
                vec![
                    float_scalar("a", 0.0),
                    float_scalar("b", 1e30),
                    float_scalar("c", 1.0),
                ],
                vec![],
            ),
        ),
    ];
    for (case, op, bytes) in cases {
        match try_compile(&bytes) {
            Err(p) => panic!("{case}: panicked: {p}"),
            Ok(Ok(())) => panic!("{case}: compiled"),
            Ok(Err(e)) => {
                assert_clear(&e, op, case);
                eprintln!("{case}: {e}");
            }
        }
    }

    // External data at offset u64::MAX.
    let dir = std::env::temp_dir().join(format!("collage-extdata-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("w.bin"), [0u8; 64]).unwrap();
    let mut w = floats("w", &[]);
    w.dims = vec![4];
    w.data_location = proto::tensor_proto::DataLocation::External as i32;
    let kv = |k: &str, v: &str| proto::StringStringEntryProto {
        key: k.into(),
        value: v.into(),
    };
    w.external_data = vec![
        kv("location", "w.bin"),
        kv("offset", &u64::MAX.to_string()),
        kv("length", "16"),
    ];
    let bytes = one_node("Add", Some(&[4]), &["x", "w"], vec![w], vec![]);
    let r = std::panic::catch_unwind(|| {
        import_bytes(&bytes, &dir.join("m.onnx")).and_then(|g| compile_graph(g, "t").map(|_| ()))
    });
    let _ = std::fs::remove_dir_all(&dir);
    let e = r
        .expect("external data at offset u64::MAX panicked")
        .expect_err("external data at offset u64::MAX compiled");
    let msg = e.to_string();
    assert!(
        msg.contains("initializer `w`") && msg.contains("offset"),
        "{msg}"
    );
}

/// Huge integers: as a dimension, repeat count, padding, block size or index they make a tensor
/// no target holds (or index outside one).
const BAD_INTS: [i64; 3] = [1 << 62, i64::MAX, 1 << 40];
/// Values that are valid for some uses (or cleanly rejected) and must never panic anywhere.
const EDGE_INTS: [i64; 5] = [i64::MIN, 0, -1, -2, 1 << 20];
/// Float values no scale or Range operand may take.
const BAD_FLOATS: [f32; 3] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
/// Finite extremes: valid for some uses (a Range of 1e30 steps is not, see the five models).
const EDGE_FLOATS: [f32; 5] = [1e30, -1e30, 0.0, -1.0, 1e-30];

/// A family of models, one per operator and shape-determining attribute or constant input:
/// `build(v)` makes the model with the value under test.
struct Family {
    name: &'static str,
    op: &'static str,
    build: Box<dyn Fn(i64) -> Vec<u8>>,
    /// Whether every value of `BAD_INTS` must be an error (false where a huge value is valid:
    /// ONNX clamps Slice ends, a stride past the input leaves one window, ...).
    bad_must_fail: bool,
}

fn fam(
    name: &'static str,
    op: &'static str,
    bad_must_fail: bool,
    build: impl Fn(i64) -> Vec<u8> + 'static,
) -> Family {
    Family {
        name,
        op,
        build: Box::new(build),
        bad_must_fail,
    }
}

fn int_families() -> Vec<Family> {
    let x23: &'static [i64] = &[2, 3];
    let img: &'static [i64] = &[1, 1, 5, 5];
    let conv = |a: Vec<proto::AttributeProto>| {
        one_node(
            "Conv",
            Some(&[1, 1, 5, 5]),
            &["x", "w"],
            vec![proto::TensorProto {
                dims: vec![1, 1, 3, 3],
                ..floats("w", &[0.5; 9])
            }],
            a,
        )
    };
    let convt = |a: Vec<proto::AttributeProto>| {
        one_node(
            "ConvTranspose",
            Some(&[1, 1, 5, 5]),
            &["x", "w"],
            vec![proto::TensorProto {
                dims: vec![1, 1, 3, 3],
                ..floats("w", &[0.5; 9])
            }],
            a,
        )
    };
    let pool = |op: &'static str, a: Vec<proto::AttributeProto>| {
        one_node(op, Some(&[1, 1, 5, 5]), &["x"], vec![], a)
    };
    let k3 = || attr("kernel_shape", A::Is(vec![3, 3]));
    vec![
        fam("Tile repeats", "Tile", true, move |v| {
            with_const("Tile", x23, ints("r", &[v, 1]))
        }),
        fam("Expand shape", "Expand", true, |v| {
            with_const("Expand", &[1, 2], ints("s", &[v, 2]))
        }),
        fam("Reshape shape", "Reshape", true, move |v| {
            with_const("Reshape", x23, ints("s", &[v, -1]))
        }),
        fam("Reshape allowzero", "Reshape", true, move |v| {
            one_node(
                "Reshape",
                Some(x23),
                &["x", "s"],
                vec![ints("s", &[v, 3])],
                vec![attr("allowzero", A::I(1))],
            )
        }),
        fam("ConstantOfShape shape", "ConstantOfShape", true, |v| {
            one_node(
                "ConstantOfShape",
                None,
                &["s"],
                vec![ints("s", &[v, 4])],
                vec![],
            )
        }),
        fam("Range limit (int)", "Range", true, |v| {
            one_node(
                "Range",
                None,
                &["a", "b", "c"],
                vec![int_scalar("a", 0), int_scalar("b", v), int_scalar("c", 1)],
                vec![],
            )
        }),
        fam("Range delta (int)", "Range", false, |v| {
            one_node(
                "Range",
                None,
                &["a", "b", "c"],
                vec![
                    int_scalar("a", i64::MIN),
                    int_scalar("b", i64::MAX),
                    int_scalar("c", v),
                ],
                vec![],
            )
        }),
        fam("Resize sizes", "Resize", true, |v| {
            one_node(
                "Resize",
                Some(&[1, 1, 2, 2]),
                &["x", "", "", "s"],
                vec![ints("s", &[1, 1, v, v])],
                vec![],
            )
        }),
        fam("Pad pads", "Pad", true, move |v| {
            with_const("Pad", x23, ints("p", &[0, v, 0, v]))
        }),
        fam("Pad negative pads", "Pad", true, move |v| {
            with_const("Pad", x23, ints("p", &[0, v.wrapping_neg(), 0, 0]))
        }),
        fam("Slice ends", "Slice", false, move |v| {
            one_node(
                "Slice",
                Some(x23),
                &["x", "s", "e", "a"],
                vec![ints("s", &[0]), ints("e", &[v]), ints("a", &[1])],
                vec![],
            )
        }),
        fam("Slice steps", "Slice", false, move |v| {
            one_node(
                "Slice",
                Some(x23),
                &["x", "s", "e", "a", "t"],
                vec![
                    ints("s", &[0]),
                    ints("e", &[3]),
                    ints("a", &[1]),
                    ints("t", &[v]),
                ],
                vec![],
            )
        }),
        fam("Split sizes", "Split", true, move |v| {
            one_node(
                "Split",
                Some(x23),
                &["x", "s"],
                vec![ints("s", &[v, 3i64.wrapping_sub(v)])],
                vec![attr("axis", A::I(1))],
            )
        }),
        fam("Concat axis", "Concat", true, move |v| {
            one_node(
                "Concat",
                Some(x23),
                &["x", "x"],
                vec![],
                vec![attr("axis", A::I(v))],
            )
        }),
        fam("Flatten axis", "Flatten", true, move |v| {
            with_attr("Flatten", x23, attr("axis", A::I(v)))
        }),
        fam("Unsqueeze axes", "Unsqueeze", true, move |v| {
            with_const("Unsqueeze", x23, ints("a", &[v]))
        }),
        fam("Squeeze axes", "Squeeze", true, move |v| {
            with_const("Squeeze", x23, ints("a", &[v]))
        }),
        fam("Transpose perm", "Transpose", true, move |v| {
            with_attr("Transpose", x23, attr("perm", A::Is(vec![v, 0])))
        }),
        fam("Gather indices", "Gather", true, move |v| {
            with_const("Gather", x23, ints("i", &[v]))
        }),
        fam("TopK k", "TopK", true, move |v| {
            with_const("TopK", x23, ints("k", &[v]))
        }),
        fam("Trilu k", "Trilu", false, move |v| {
            with_const("Trilu", x23, int_scalar("k", v))
        }),
        fam("CumSum axis", "CumSum", true, move |v| {
            with_const("CumSum", x23, int_scalar("a", v))
        }),
        fam("ReduceSum axes", "ReduceSum", true, move |v| {
            with_const("ReduceSum", x23, ints("a", &[v]))
        }),
        fam("Softmax axis", "Softmax", true, move |v| {
            with_attr("Softmax", x23, attr("axis", A::I(v)))
        }),
        fam("ArgMax axis", "ArgMax", true, move |v| {
            with_attr("ArgMax", x23, attr("axis", A::I(v)))
        }),
        fam("DepthToSpace blocksize", "DepthToSpace", true, |v| {
            with_attr("DepthToSpace", &[1, 4, 2, 2], attr("blocksize", A::I(v)))
        }),
        fam("SpaceToDepth blocksize", "SpaceToDepth", true, |v| {
            with_attr("SpaceToDepth", &[1, 1, 4, 4], attr("blocksize", A::I(v)))
        }),
        fam("Conv strides", "Conv", false, move |v| {
            conv(vec![attr("strides", A::Is(vec![v, 1]))])
        }),
        fam("Conv pads", "Conv", true, move |v| {
            conv(vec![attr("pads", A::Is(vec![v, 0, v, 0]))])
        }),
        fam("Conv dilations", "Conv", true, move |v| {
            conv(vec![attr("dilations", A::Is(vec![v, 1]))])
        }),
        fam("Conv group", "Conv", true, move |v| {
            conv(vec![attr("group", A::I(v))])
        }),
        fam("ConvTranspose strides", "ConvTranspose", true, move |v| {
            convt(vec![attr("strides", A::Is(vec![v, 1]))])
        }),
        fam(
            "ConvTranspose output_padding",
            "ConvTranspose",
            true,
            move |v| {
                convt(vec![
                    attr("strides", A::Is(vec![2, 2])),
                    attr("output_padding", A::Is(vec![v, 0])),
                ])
            },
        ),
        fam(
            "ConvTranspose output_shape",
            "ConvTranspose",
            true,
            move |v| convt(vec![attr("output_shape", A::Is(vec![v, 5]))]),
        ),
        fam("ConvTranspose pads", "ConvTranspose", true, move |v| {
            convt(vec![attr("pads", A::Is(vec![v, 0, v, 0]))])
        }),
        fam("MaxPool kernel", "MaxPool", true, move |v| {
            pool("MaxPool", vec![attr("kernel_shape", A::Is(vec![v, 3]))])
        }),
        fam("MaxPool strides", "MaxPool", false, move |v| {
            pool("MaxPool", vec![k3(), attr("strides", A::Is(vec![v, 1]))])
        }),
        fam("MaxPool pads", "MaxPool", true, move |v| {
            pool("MaxPool", vec![k3(), attr("pads", A::Is(vec![v, 0, v, 0]))])
        }),
        fam("MaxPool dilations", "MaxPool", true, move |v| {
            pool(
                "MaxPool",
                vec![
                    k3(),
                    attr("dilations", A::Is(vec![v, 1])),
                    attr("ceil_mode", A::I(1)),
                ],
            )
        }),
        fam("AveragePool pads", "AveragePool", true, move |v| {
            pool(
                "AveragePool",
                vec![k3(), attr("pads", A::Is(vec![v, 0, v, 0]))],
            )
        }),
        fam(
            "AveragePool strides (ceil)",
            "AveragePool",
            false,
            move |v| {
                pool(
                    "AveragePool",
                    vec![
                        k3(),
                        attr("strides", A::Is(vec![v, 1])),
                        attr("ceil_mode", A::I(1)),
                    ],
                )
            },
        ),
        fam("LRN size", "LRN", false, move |v| {
            with_attr("LRN", img, attr("size", A::I(v)))
        }),
        fam(
            "GroupNormalization num_groups",
            "GroupNormalization",
            true,
            move |v| {
                one_node(
                    "GroupNormalization",
                    Some(&[1, 4, 2, 2]),
                    &["x", "s", "b"],
                    vec![floats("s", &[1.0; 4]), floats("b", &[0.0; 4])],
                    vec![attr("num_groups", A::I(v))],
                )
            },
        ),
        fam(
            "LayerNormalization axis",
            "LayerNormalization",
            true,
            move |v| {
                one_node(
                    "LayerNormalization",
                    Some(x23),
                    &["x", "s"],
                    vec![floats("s", &[1.0; 3])],
                    vec![attr("axis", A::I(v))],
                )
            },
        ),
        fam("Einsum equation (repeat)", "Einsum", false, move |v| {
            let eq = if v > 0 { "ij->ij" } else { "ii->i" };
            with_attr("Einsum", x23, attr("equation", A::S(eq)))
        }),
        fam("Constant value dims", "Constant", true, |v| {
            let mut n = node("Constant", "n", &[], &["y"]);
            let mut t = floats("", &[1.0]);
            t.dims = vec![v, v];
            n.attribute = vec![proto::AttributeProto {
                name: "value".into(),
                r#type: AttributeType::Tensor as i32,
                t: Some(t),
                ..Default::default()
            }];
            model(vec![n], vec![], &["y"])
        }),
        fam("Initializer dims", "Add", true, move |v| {
            let mut t = floats("w", &[1.0]);
            t.dims = vec![v, v];
            one_node("Add", Some(x23), &["x", "w"], vec![t], vec![])
        }),
        fam("Input dims", "Relu", true, |v| {
            one_node("Relu", Some(&[v, v, v]), &["x"], vec![], vec![])
        }),
        fam(
            "Empty input, huge reduction",
            "GlobalAveragePool",
            true,
            |v| {
                one_node(
                    "GlobalAveragePool",
                    Some(&[0, 1, v, v]),
                    &["x"],
                    vec![],
                    vec![],
                )
            },
        ),
        fam("Empty input, huge ReduceSum", "ReduceSum", true, |v| {
            with_const("ReduceSum", &[0, 1, v, v], ints("a", &[1, 2]))
        }),
    ]
}

fn float_families() -> Vec<(&'static str, &'static str, Box<dyn Fn(f32) -> Vec<u8>>)> {
    vec![
        (
            "Resize scales",
            "Resize",
            Box::new(|v| {
                one_node(
                    "Resize",
                    Some(&[1, 1, 2, 2]),
                    &["x", "", "s"],
                    vec![floats("s", &[1.0, 1.0, v, 2.0])],
                    vec![],
                )
            }),
        ),
        (
            "Upsample scales",
            "Upsample",
            Box::new(|v| {
                let mut m = proto::ModelProto::decode(
                    &one_node(
                        "Upsample",
                        Some(&[1, 1, 2, 2]),
                        &["x", "s"],
                        vec![floats("s", &[1.0, 1.0, v, 2.0])],
                        vec![],
                    )[..],
                )
                .unwrap();
                m.opset_import[0].version = 9;
                m.encode_to_vec()
            }),
        ),
        (
            "Range limit (float)",
            "Range",
            Box::new(|v| {
                one_node(
                    "Range",
                    None,
                    &["a", "b", "c"],
                    vec![
                        float_scalar("a", 0.0),
                        float_scalar("b", v),
                        float_scalar("c", 1.0),
                    ],
                    vec![],
                )
            }),
        ),
        (
            "Range delta (float)",
            "Range",
            Box::new(|v| {
                one_node(
                    "Range",
                    None,
                    &["a", "b", "c"],
                    vec![
                        float_scalar("a", 0.0),
                        float_scalar("b", 10.0),
                        float_scalar("c", v),
                    ],
                    vec![],
                )
            }),
        ),
        (
            "Range start (float)",
            "Range",
            Box::new(|v| {
                one_node(
                    "Range",
                    None,
                    &["a", "b", "c"],
                    vec![
                        float_scalar("a", v),
                        float_scalar("b", 10.0),
                        float_scalar("c", 1.0),
                    ],
                    vec![],
                )
            }),
        ),
    ]
}

#[test]
fn shapes_from_attributes_and_constants_are_checked() {
    // (case, op, model, must fail)
    let mut cases: Vec<(String, &str, Vec<u8>, bool)> = Vec::new();
    for f in int_families() {
        let bad = BAD_INTS.iter().map(|&v| (v, f.bad_must_fail));
        for (v, must_fail) in bad.chain(EDGE_INTS.iter().map(|&v| (v, false))) {
            cases.push((format!("{} = {v}", f.name), f.op, (f.build)(v), must_fail));
        }
    }
    for (name, op, build) in float_families() {
        let bad = BAD_FLOATS.iter().map(|&v| (v, true));
        for (v, must_fail) in bad.chain(EDGE_FLOATS.iter().map(|&v| (v, false))) {
            cases.push((format!("{name} = {v}"), op, build(v), must_fail));
        }
    }
    let mut failures = Vec::new();
    let mut errors = 0;
    for (case, op, bytes, must_fail) in &cases {
        match try_compile(bytes) {
            Err(p) => failures.push(format!("{case}: panicked: {p}")),
            Ok(Ok(())) if *must_fail => failures.push(format!("{case}: compiled")),
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                errors += 1;
                assert_clear(&e, op, case);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of the hostile cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(errors > 100, "only {errors} cases were errors");
}

#[test]
fn the_size_ceiling_is_configurable_and_checked_on_the_arena() {
    // f32[1024, 1024] = 4 MiB: over a 1 MiB ceiling as a tensor.
    let bytes = one_node("Relu", Some(&[1024, 1024]), &["x"], vec![], vec![]);
    let opts = |max| collage_build::driver::Options {
        max_tensor_bytes: max,
        ..Default::default()
    };
    let g = import_bytes(&bytes, Path::new("test.onnx")).unwrap();
    let e = collage_build::driver::compile(g, "t", &opts(1 << 20)).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("`x`") && msg.contains("1048576 bytes"),
        "{msg}"
    );
    let g = import_bytes(&bytes, Path::new("test.onnx")).unwrap();
    assert!(collage_build::driver::compile(g, "t", &opts(8 << 20)).is_ok());

    // Two outputs of 3 MiB each that fit one by one, in an arena that does not.
    let bytes = model(
        vec![
            node("Exp", "e", &["x"], &["a"]),
            node("Sin", "s", &["x"], &["b"]),
        ],
        vec![vi("x", &[768, 1024])],
        &["a", "b"],
    );
    let g = import_bytes(&bytes, Path::new("test.onnx")).unwrap();
    let e = collage_build::driver::compile(g, "t", &opts(4 << 20)).unwrap_err();
    assert!(e.to_string().contains("arena"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Findings of the fuzz targets (`fuzz/`, run by `.ci/fuzz`): each was a panic, hang or huge
// allocation on a model file, and is a clean error now.

/// A `Scan` whose scan input is a scalar (nothing to scan along): an index out of bounds in the
/// unrolling (found by `onnx_import`), now an error naming the node and the input.
#[test]
fn a_scan_over_a_scalar_is_an_error_not_a_panic() {
    let body = proto::GraphProto {
        name: "body".into(),
        node: vec![
            node("Add", "add", &["sum_in", "next"], &["sum_out"]),
            node("Identity", "id", &["sum_out"], &["scan_out"]),
        ],
        input: vec![vi("sum_in", &[]), vi("next", &[])],
        output: vec![vi("sum_out", &[]), vi("scan_out", &[])],
        ..Default::default()
    };
    let mut n = node("Scan", "the_scan", &["initial", "x"], &["y", "z"]);
    n.attribute = vec![
        attr("num_scan_inputs", A::I(1)),
        proto::AttributeProto {
            name: "body".into(),
            r#type: AttributeType::Graph as i32,
            g: Some(body),
            ..Default::default()
        },
    ];
    let bytes = model(vec![n], vec![vi("initial", &[]), vi("x", &[])], &["y", "z"]);
    let e = match try_compile(&bytes) {
        Ok(r) => r.unwrap_err(),
        Err(p) => panic!("panicked: {p}"),
    };
    let msg = e.to_string();
    assert!(
        msg.contains("the_scan") && msg.contains("rank >= 1"),
        "{msg}"
    );
}

/// Every operator with fewer (or more) inputs than its schema allows: the elementwise family
/// indexed its inputs unchecked (`Sub(x)` panicked in lowering, found by `onnx_import`).
#[test]
fn every_operator_with_a_wrong_input_count_is_an_error_not_a_panic() {
    let mut failures = Vec::new();
    for op in collage_build::ops::registered() {
        for n in 0..=6 {
            let inputs = vec!["x"; n];
            let bytes = one_node(op, Some(&[2, 3]), &inputs, vec![], vec![]);
            match try_compile(&bytes) {
                Ok(Ok(())) | Ok(Err(_)) => {}
                Err(p) => failures.push(format!("{op} with {n} inputs panicked: {p}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_binary_operator_with_one_input_names_the_node_and_the_missing_input() {
    let bytes = model(
        vec![node("Sub", "the_sub", &["x"], &["y"])],
        vec![vi("x", &[2, 3])],
        &["y"],
    );
    let e = compile(&bytes).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Node { .. }), "{msg}");
    assert!(
        msg.contains("the_sub") && msg.contains("Sub") && msg.contains("input 1"),
        "{msg}"
    );
    let bytes = model(
        vec![node("Relu", "the_relu", &["x", "x"], &["y"])],
        vec![vi("x", &[2, 3])],
        &["y"],
    );
    let msg = compile(&bytes).unwrap_err().to_string();
    assert!(
        msg.contains("the_relu") && msg.contains("at most 1 input"),
        "{msg}"
    );
}

/// `model!` expressions nested (or chained) thousands deep, and deep Rust around the blocks: the
/// recursive parsers (`syn`'s for the file and the brackets of a block, the DSL's for its
/// expressions) overflowed the stack (found by `dsl_parse`). A block deeper than the limit is an
/// error with a position; the Rust around blocks is not parsed.
#[test]
fn deeply_nested_dsl_expressions_are_errors_not_stack_overflows() {
    use collage_build::frontend::dsl::parse_source;
    let n = 20_000;
    let bodies = [
        format!("{}x", "-".repeat(n)),
        format!("{}x{}", "(".repeat(n), ")".repeat(n)),
        format!("{}x{}", "relu(".repeat(n), ")".repeat(n)),
        vec!["x"; n].join(" + "),
        vec!["x"; n].join(" * "),
    ];
    for body in &bodies {
        let src = format!("collage::model! {{ Deep {{ input x: f32[2]; output y = {body}; }} }}");
        let found = parse_source(&src, Path::new("deep.rs"));
        assert_eq!(found.len(), 1);
        let msg = match found.into_iter().next().unwrap() {
            Ok(_) => panic!("{}...: parsed", &body[..20]),
            Err(e) => e.to_string(),
        };
        assert!(
            msg.contains("deep.rs:1:") && msg.contains("nested more than 256 levels"),
            "{msg}"
        );
    }
    // Rust around the blocks that `syn`'s parser recursed into once per unary minus or `else
    // if` (rustc compiles it): the blocks are found on the tokens, the rest is not parsed.
    let src = format!(
        "fn f(a: i32) -> i32 {{ let b = {}1; if a == 0 {{ 0 }} {} else {{ b }} }}\n\
         collage::model! {{ Ok {{ input x: f32[2]; output y = relu(x); }} }}",
        "-".repeat(n),
        (1..n)
            .map(|i| format!("else if a == {i} {{ {i} }}"))
            .collect::<String>(),
    );
    let found = parse_source(&src, Path::new("deep_rust.rs"));
    assert_eq!(found.len(), 1);
    assert!(found[0].as_ref().is_ok_and(|f| f.name == "Ok"));
    // Long but shallow expressions and 200 `let`s in a row are fine.
    let lets: String = (0..200)
        .map(|i| format!("let v{} = relu(v{i} + x * 2.0);", i + 1))
        .collect();
    let src = format!(
        "collage::model! {{ Long {{ input x: f32[2]; let v0 = {}; {lets} output y = v200; }} }}",
        vec!["x"; 200].join(" + ")
    );
    let Ok(found) = parse_source(&src, Path::new("long.rs")).remove(0) else {
        panic!("a long, shallow model does not parse");
    };
    let g = found.to_graph(Path::new(".")).unwrap();
    compile_graph(g, "long").unwrap();
}

/// One value read by thousands of nodes: the placement search labelled every state's boundary
/// by a linear search per entry, so each state cost the square of the boundary (14 s for this
/// 10,000-node model in release, 2.5 s after; found while bounding the fuzz targets' slowest
/// units). The test checks that such a model places and compiles; its time is the fuzz targets'
/// unit timeout's business, not a test's. Release builds only: debug is ten times slower.
#[cfg(not(debug_assertions))]
#[test]
fn a_value_read_by_thousands_of_nodes_places_and_compiles() {
    let branches = 5000;
    let mut nodes = vec![node("Relu", "r", &["x"], &["r0"])];
    for i in 0..branches {
        nodes.push(node("Neg", &format!("n{i}"), &["r0"], &[&format!("b{i}")]));
    }
    let mut acc = "b0".to_string();
    for i in 1..branches {
        let out = format!("s{i}");
        nodes.push(node(
            "Add",
            &format!("a{i}"),
            &[&acc, &format!("b{i}")],
            &[&out],
        ));
        acc = out;
    }
    let bytes = model(nodes, vec![vi("x", &[4, 4])], &[&acc]);
    compile(&bytes).unwrap();
}

/// Names are free text in ONNX: a newline or a `*/` in a node's or tensor's name (found by
/// fuzzing) must not break the generated C's comments. The C must still compile.
#[test]
fn names_with_newlines_and_comment_ends_compile() {
    let hostile = "R\n\r*/x\u{1}";
    let bytes = model(
        vec![node("Relu", hostile, &["input"], &[hostile])],
        vec![vi("input", &[1, 16])],
        &[hostile],
    );
    let g = import_bytes(&bytes, Path::new("test.onnx")).expect("imports");
    let c = compile_graph(g, "t").expect("compiles");
    for line in c.c_source.lines().filter(|l| l.contains("R\\n")) {
        assert!(
            line.trim_end().ends_with("*/"),
            "one comment line: {line:?}"
        );
        assert_eq!(line.matches("*/").count(), 1, "one comment end: {line:?}");
    }
    assert!(
        c.c_source.contains("R\\n\\r* /x\\u{1}"),
        "escaped name in the C"
    );
    let dir = std::env::temp_dir().join(format!("collage-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("m.c");
    std::fs::write(&file, &c.c_source).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(cc)
        .args(["-std=gnu11", "-fsyntax-only"])
        .arg(&file)
        .output()
        .expect("a C compiler");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Empty dimensions through the lowerings that flatten or scan them (a global max pool and an
/// instance norm over an empty image, a CumSum over an empty axis, Einsum with an empty
/// contraction): compiled or a clear error, never a panic.
#[test]
fn empty_dimensions_in_flattened_and_scanned_reductions_do_not_panic() {
    let axis = int_scalar("a", 1);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "GlobalMaxPool",
            one_node("GlobalMaxPool", Some(&[1, 2, 0, 3]), &["x"], vec![], vec![]),
        ),
        (
            "InstanceNormalization",
            one_node(
                "InstanceNormalization",
                Some(&[1, 2, 3, 0]),
                &["x", "s", "b"],
                vec![floats("s", &[1.0, 1.0]), floats("b", &[0.0, 0.0])],
                vec![],
            ),
        ),
        ("CumSum", with_const("CumSum", &[2, 0, 3], axis)),
        (
            "Einsum",
            one_node(
                "Einsum",
                Some(&[2, 0]),
                &["x", "w"],
                vec![proto::TensorProto {
                    dims: vec![0, 3],
                    ..floats("w", &[])
                }],
                vec![attr("equation", A::S("ij,jk->ik"))],
            ),
        ),
    ];
    for (op, bytes) in cases {
        match try_compile(&bytes) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => assert_clear(&e, op, op),
            Err(p) => panic!("{op} panicked: {p}"),
        }
    }
}

/// A schedule seed with a cost cache that records plans: the seed's draw stands (the recorded
/// plans are not applied over it). Here because this file also runs in debug, where a kernel's
/// plan planned alone is checked against its plan in the program.
#[test]
fn a_schedule_seed_with_a_cost_cache_compiles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cache =
        collage_build::tune::CostCache::load(root.join("examples/mnist/collage-cache.toml"))
            .unwrap();
    let g = collage_build::frontend::onnx::load(&root.join("examples/mnist/mnist.onnx")).unwrap();
    for seed in [1, 3, 7] {
        let opts = collage_build::driver::Options {
            cache: Some(std::sync::Arc::new(cache.clone())),
            schedule_seed: Some(seed),
            ..Default::default()
        };
        collage_build::driver::compile(g.clone(), "m", &opts).unwrap();
    }
}
