//! Initializers stored as ONNX external data (a side file with offset and length) load and run;
//! a location that leaves the model's folder is refused.
use collage_build::frontend::onnx::{self, proto};
use collage_build::ir::Tensor;
use collage_runtime::Executor;
use prost::Message;

fn model(location: &str, offset: usize) -> Vec<u8> {
    let vi = |name: &str| proto::ValueInfoProto {
        name: name.into(),
        r#type: Some(proto::TypeProto {
            value: Some(proto::type_proto::Value::TensorType(
                proto::type_proto::Tensor {
                    elem_type: 1,
                    shape: Some(proto::TensorShapeProto {
                        dim: vec![proto::tensor_shape_proto::Dimension {
                            value: Some(proto::tensor_shape_proto::dimension::Value::DimValue(4)),
                            ..Default::default()
                        }],
                    }),
                },
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    let kv = |k: &str, v: String| proto::StringStringEntryProto {
        key: k.into(),
        value: v,
    };
    let w = proto::TensorProto {
        name: "w".into(),
        dims: vec![4],
        data_type: 1,
        data_location: proto::tensor_proto::DataLocation::External as i32,
        external_data: vec![
            kv("location", location.into()),
            kv("offset", offset.to_string()),
            kv("length", "16".into()),
        ],
        ..Default::default()
    };
    proto::ModelProto {
        ir_version: 8,
        opset_import: vec![proto::OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(proto::GraphProto {
            name: "ext".into(),
            node: vec![proto::NodeProto {
                op_type: "Add".into(),
                name: "add".into(),
                input: vec!["x".into(), "w".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            initializer: vec![w],
            input: vec![vi("x")],
            output: vec![vi("y")],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn external_data_is_read_at_its_offset() {
    let dir = std::env::temp_dir().join(format!("collage-ext-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut blob = vec![0xAAu8; 8];
    for v in [1.0f32, 2.0, 3.0, 4.0] {
        blob.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(dir.join("weights.bin"), &blob).unwrap();
    std::fs::write(dir.join("m.onnx"), model("weights.bin", 8)).unwrap();
    let g = onnx::load(&dir.join("m.onnx")).unwrap();
    let c = collage_build::compile_graph(g, "ext").unwrap();
    let mut m = collage_build::native::NativeModel::build(&c, &dir.join("work"), "-O1").unwrap();
    let y = m
        .run(
            &[Tensor::from_f32(&[4], &[10.0, 20.0, 30.0, 40.0])],
            &Executor::Serial,
        )
        .unwrap();
    assert_eq!(y[0].to_f32(), vec![11.0, 22.0, 33.0, 44.0]);

    std::fs::write(dir.join("bad.onnx"), model("../weights.bin", 8)).unwrap();
    let e = onnx::load(&dir.join("bad.onnx")).unwrap_err().to_string();
    assert!(e.contains("relative path inside the model's folder"), "{e}");
    std::fs::write(dir.join("short.onnx"), model("weights.bin", 20)).unwrap();
    let e = onnx::load(&dir.join("short.onnx")).unwrap_err().to_string();
    assert!(e.contains("shorter than"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
