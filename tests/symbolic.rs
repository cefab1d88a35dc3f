//! Exported models with symbolic input dimensions, bound at build time, against ONNX Runtime's
//! outputs (`tests/support/symbolic_models.py`, run by `.ci/run`, writes them): the OCR example's
//! model (`x: [batch, 3, height, width]`) bound by name, by input shape and from the data, at three
//! sizes; a BERT-style layer whose `sequence` is symbolic at 1, 7, 128 and 512 tokens; a CNN and a
//! transformer encoder exported by paddle2onnx (`tests/support/export_models.py`); the error for
//! what is left unbound; and the `Build` routes (variants sharing weights, misuse).
use std::path::{Path, PathBuf};

use collage_build::driver::range::{compile_ranged, DimRange};
use collage_build::driver::run::{self as tools, read_pb};
use collage_build::driver::Options;
use collage_build::frontend::onnx::{self, Bindings};
use collage_build::ir::Tensor;
use collage_build::native::RangedModel;
use collage_runtime::Executor;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn data_dir() -> PathBuf {
    std::env::var_os("COLLAGE_SYMBOLIC_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(ROOT).join("target/symbolic"))
}

fn ocr_model() -> PathBuf {
    Path::new(ROOT).join("examples/ocr/ocr.onnx")
}

fn pbs(case: &Path, prefix: &str) -> Vec<Tensor> {
    (0..)
        .map(|i| case.join(format!("{prefix}_{i}.pb")))
        .take_while(|p| p.exists())
        .map(|p| read_pb(&p).unwrap())
        .collect()
}

/// A case's inputs and ONNX Runtime's outputs.
fn case_data(case: &str) -> (Vec<Tensor>, Vec<Tensor>) {
    let dir = data_dir().join(case);
    assert!(
        dir.join("output_0.pb").exists(),
        "{} is missing: run .ci/run (tests/support/symbolic_models.py)",
        dir.display()
    );
    (pbs(&dir, "input"), pbs(&dir, "output"))
}

/// Compiles `model` with `bindings` (and, when `from_data`, the shapes of the case's inputs),
/// runs it on the case's inputs, all of them taken at run time, and compares with ONNX Runtime.
fn check(model: &Path, case: &str, bindings: Bindings, from_data: bool) {
    let (inputs, wants) = case_data(case);
    let work = std::env::temp_dir().join(format!("collage-symbolic-{case}-{}", std::process::id()));
    let opts = Options {
        bindings,
        ..Options::default()
    };
    let data = from_data.then_some(inputs.as_slice());
    let mut loaded = tools::load_model(model, data, &work, "-O1", &opts)
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    assert!(
        loaded.bound.is_empty(),
        "{case}: inputs were bound to constants"
    );
    for (io, t) in loaded.model.inputs.iter().zip(&inputs) {
        assert_eq!(io.ty, t.ty, "{case}: input {}", io.name);
    }
    let got = loaded.model.run(&inputs, &Executor::Serial).unwrap();
    for (i, (g, w)) in got.iter().zip(&wants).enumerate() {
        let (pass, err) = collage_build::tensor::compare(g, w);
        assert!(
            pass,
            "{case}: output {i} differs from ONNX Runtime's by {err}"
        );
    }
    assert_eq!(got.len(), wants.len());
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn ocr_matches_onnx_runtime_bound_by_name_by_shape_and_from_data() {
    for (n, h, w) in [(1, 32, 96), (2, 48, 160), (3, 64, 64)] {
        let case = format!("ocr_{n}x{h}x{w}");
        let by_name = Bindings::new()
            .dim("batch", n)
            .dim("height", h)
            .dim("width", w);
        check(&ocr_model(), &case, by_name, false);
        let by_shape = Bindings::new().input_shape("x", [n, 3, h, w]);
        check(&ocr_model(), &case, by_shape, false);
        check(&ocr_model(), &case, Bindings::new(), true);
    }
}

#[test]
fn transformer_with_a_symbolic_sequence_matches_onnx_runtime() {
    let model = data_dir().join("tiny_bert_dyn.onnx");
    for (b, s) in [(1, 1), (1, 7), (1, 128), (1, 512), (2, 16)] {
        // `input_ids` and `attention_mask` share `batch` and `sequence`: one binding of each.
        let b = Bindings::new().dim("batch", b).dim("sequence", s);
        check(
            &model,
            &format!("tiny_bert_{}x{s}", b.dims["batch"]),
            b,
            false,
        );
    }
    // One input's shape binds the dimensions the other input shares by name.
    let b = Bindings::new().input_shape("input_ids", [2, 16]);
    check(&model, "tiny_bert_2x16", b, false);
}

/// Models exported by paddle2onnx (`tests/support/export_models.py`), as a production OCR
/// pipeline exports them: every symbolic dimension named `DynamicDimension.N`, so bound by the
/// inputs' shapes.
#[test]
fn paddle2onnx_exports_match_onnx_runtime() {
    let crnn = data_dir().join("crnn_paddle.onnx");
    for (n, h, w) in [(1, 32, 100), (2, 48, 160), (3, 64, 64)] {
        let b = Bindings::new().input_shape("x", [n, 3, h, w]);
        check(&crnn, &format!("crnn_paddle_{n}x{h}x{w}"), b, false);
    }
    // `ids` and `mask` share their dimensions' names: the shape of `ids` binds `mask` too.
    let encoder = data_dir().join("encoder_paddle.onnx");
    for (b, s) in [(1, 1), (1, 7), (1, 128), (1, 512), (2, 16)] {
        let bind = Bindings::new().input_shape("ids", [b, s]);
        check(&encoder, &format!("encoder_paddle_{b}x{s}"), bind, false);
    }
}

/// The `dim_param` names of input `input`'s dimensions in `model` (`""` where none): an
/// exporter's generated names (paddle2onnx's `DynamicDimension.N`) change between exports.
fn dim_names(model: &Path, input: &str) -> Vec<String> {
    use onnx::proto::tensor_shape_proto::dimension::Value;
    use prost::Message;
    let bytes = std::fs::read(model).unwrap();
    let m = onnx::proto::ModelProto::decode(bytes.as_slice()).unwrap();
    let vi = m
        .graph
        .unwrap()
        .input
        .into_iter()
        .find(|i| i.name == input)
        .unwrap();
    let Some(onnx::proto::type_proto::Value::TensorType(t)) = vi.r#type.and_then(|t| t.value)
    else {
        panic!("a tensor input")
    };
    t.shape
        .unwrap()
        .dim
        .into_iter()
        .map(|d| match d.value {
            Some(Value::DimParam(p)) => p,
            _ => String::new(),
        })
        .collect()
}

/// The OCR model with its dimensions made as paddle2onnx writes them: no name, no size.
fn unnamed_ocr() -> Vec<u8> {
    use prost::Message;
    let bytes = std::fs::read(ocr_model()).unwrap();
    let mut m = onnx::proto::ModelProto::decode(bytes.as_slice()).unwrap();
    let g = m.graph.as_mut().unwrap();
    for vi in g.input.iter_mut().chain(g.output.iter_mut()) {
        let Some(onnx::proto::type_proto::Value::TensorType(t)) =
            vi.r#type.as_mut().and_then(|t| t.value.as_mut())
        else {
            panic!("a tensor input")
        };
        for d in &mut t.shape.as_mut().unwrap().dim {
            if matches!(
                d.value,
                Some(onnx::proto::tensor_shape_proto::dimension::Value::DimParam(
                    _
                ))
            ) {
                d.value = None;
            }
        }
    }
    m.encode_to_vec()
}

#[test]
fn the_unbound_error_names_every_dimension_and_every_way_to_bind_it() {
    let e = onnx::load(&ocr_model()).unwrap_err().to_string();
    for want in [
        "3 input dimension(s) have no static size",
        "`x` dimension 0 (`batch`)",
        "`x` dimension 2 (`height`)",
        "`x` dimension 3 (`width`)",
        ".dim(\"batch\", N)",
        ".input_shape(\"x\", [N, 3, N, N])",
        "model!(Name = \"..\", x: [N, 3, N, N])",
        "--dim batch=N",
        "--input-shape x=N,3,N,N",
    ] {
        assert!(e.contains(want), "{want:?} not in: {e}");
    }
    // Bound in part: only what is left is named.
    let e = onnx::load_with(
        &ocr_model(),
        &Bindings::new().dim("batch", 1).dim("width", 8),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("1 input dimension(s)") && e.contains("(`height`)"),
        "{e}"
    );
    assert!(!e.contains("(`batch`)") && !e.contains("(`width`)"), "{e}");
    // Unnamed dimensions: by position, and bound by the input's shape only.
    let bytes = unnamed_ocr();
    let path = Path::new("paddle.onnx");
    let e = onnx::import_bytes(&bytes, path).unwrap_err().to_string();
    for want in [
        "`x` dimension 0 (unnamed)",
        "`x` dimension 2 (unnamed)",
        "`x` dimension 3 (unnamed)",
        "--input-shape x=N,3,N,N",
    ] {
        assert!(e.contains(want), "{want:?} not in: {e}");
    }
    let g = onnx::import_bytes_with(
        &bytes,
        path,
        &Bindings::new().input_shape("x", [2, 3, 48, 160]),
    )
    .unwrap();
    assert_eq!(g.ty(g.inputs[0]).shape, [2, 3, 48, 160]);
}

#[test]
fn bindings_that_disagree_with_the_model_are_errors() {
    let m = ocr_model();
    let err = |b: Bindings| onnx::load_with(&m, &b).unwrap_err().to_string();
    let e = err(Bindings::new().input_shape("x", [1, 4, 32, 96]));
    assert!(
        e.contains("dimension 1 is 3 in the model") && e.contains("says 4"),
        "{e}"
    );
    let e = err(Bindings::new().input_shape("x", [1, 3, 32]));
    assert!(e.contains("has 4 dimensions") && e.contains("has 3"), "{e}");
    let e = err(Bindings::new().input_shape("y", [1, 3, 32, 96]));
    assert!(
        e.contains("`y`, which is not an input") && e.contains("`x`"),
        "{e}"
    );
    let e = err(Bindings::new().dim("btach", 1));
    assert!(
        e.contains("`btach`") && e.contains("`batch`, `height`, `width`"),
        "{e}"
    );
    let e = err(Bindings::new()
        .dim("batch", 2)
        .input_shape("x", [1, 3, 32, 96]));
    assert!(
        e.contains("`batch` is bound to 2") && e.contains("and to 1"),
        "{e}"
    );
}

fn build_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "collage-symbolic-build-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn variants_share_one_weight_blob_and_get_a_method_each() {
    let out = build_dir("variants");
    let built = collage_build::Build::new()
        .manifest_dir(Path::new(ROOT).join("examples/ocr"))
        .out_dir(&out)
        .sources_only()
        .onnx("ocr.onnx")
        .dim("height", 32)
        .dim("width", 96)
        .variants("batch", [1, 2, 4])
        .compile()
        .unwrap();
    assert_eq!(built.models.len(), 1);
    let dir = out.join("collage");
    let glue = std::fs::read_to_string(dir.join("ocr.rs")).unwrap();
    for n in [1, 2, 4] {
        assert!(glue.contains(&format!("pub fn run_batch_{n}(")), "{glue}");
        assert!(
            glue.contains(&format!("x: &[[[[f32; 96]; 32]; 3]; {n}]")),
            "{glue}"
        );
        assert!(dir.join(format!("ocr_batch_{n}.c")).exists());
    }
    // The weights once: the size of one variant's blob compiled alone.
    let one = build_dir("one");
    collage_build::Build::new()
        .manifest_dir(Path::new(ROOT).join("examples/ocr"))
        .out_dir(&one)
        .sources_only()
        .onnx("ocr.onnx")
        .input_shape("x", [4, 3, 32, 96])
        .compile()
        .unwrap();
    let shared = std::fs::metadata(dir.join("ocr.weights")).unwrap().len();
    let alone = std::fs::metadata(one.join("collage/ocr.weights"))
        .unwrap()
        .len();
    assert_eq!(shared, alone, "three variants store the weights once");
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&one);
}

#[test]
fn build_misuse_is_an_error() {
    let e = collage_build::Build::new()
        .out_dir(build_dir("misuse"))
        .sources_only()
        .dim("batch", 1)
        .onnx("x.onnx")
        .compile()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Build::dim") && e.contains("none was added before it"),
        "{e}"
    );
    let e = collage_build::Build::new()
        .manifest_dir(Path::new(ROOT).join("examples/ocr"))
        .out_dir(build_dir("twice"))
        .sources_only()
        .onnx("ocr.onnx")
        .input_shape("x", [1, 3, 32, 96])
        .onnx("ocr.onnx")
        .input_shape("x", [2, 3, 32, 96])
        .compile()
        .unwrap_err()
        .to_string();
    assert!(e.contains("compiled twice"), "{e}");
    let e = collage_build::Build::new()
        .out_dir(build_dir("empty-range"))
        .sources_only()
        .onnx("ocr.onnx")
        .dim_range("width", 64..=64)
        .compile()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Build::dim_range") && e.contains("64..=64"),
        "{e}"
    );
    let e = collage_build::Build::new()
        .manifest_dir(Path::new(ROOT).join("examples/ocr"))
        .out_dir(build_dir("range-and-variants"))
        .sources_only()
        .onnx("ocr.onnx")
        .dim("height", 32)
        .variants("batch", [1, 2])
        .dim_range("width", 32..=64)
        .compile()
        .unwrap_err()
        .to_string();
    assert!(e.contains("Build::variants and Build::dim_range"), "{e}");
}

#[test]
fn a_range_built_from_build_rs_gets_a_run_over_slices_and_shapes() {
    let out = build_dir("range");
    collage_build::Build::new()
        .manifest_dir(Path::new(ROOT).join("examples/ocr"))
        .out_dir(&out)
        .sources_only()
        .onnx("ocr.onnx")
        .dim("batch", 1)
        .dim("height", 32)
        .dim_range("width", 32..=320)
        .compile()
        .unwrap();
    let glue = std::fs::read_to_string(out.join("collage/ocr.rs")).unwrap();
    for want in [
        "pub fn run(",
        "x: &[f32]",
        "x_shape: [usize; 4]",
        "(&[f32], [usize; 3])",
        "ShapeError",
        "pub const RANGE: (&'static str, usize, usize) = (\"width\", 32, 320);",
    ] {
        assert!(glue.contains(want), "{want} in {glue}");
    }
    // Left unbound, the other dimensions are the usual error.
    let e = collage_build::Build::new()
        .manifest_dir(Path::new(ROOT).join("examples/ocr"))
        .out_dir(build_dir("range-unbound"))
        .sources_only()
        .onnx("ocr.onnx")
        .dim_range("width", 32..=320)
        .compile()
        .unwrap_err()
        .to_string();
    assert!(e.contains("batch") && e.contains("height"), "{e}");
    let _ = std::fs::remove_dir_all(&out);
}

/// The example crate: `model!(Ocr = "ocr.onnx", x: [1, 3, 48, 160])` (found by `build.rs`'s scan)
/// and `OcrBatches` (`.variants("batch", [1, 2, 4])` at 32x96), against ONNX Runtime.
#[test]
fn the_example_crates_bound_models_match_onnx_runtime() {
    fn case<const N: usize, const H: usize, const W: usize>(
        name: &str,
    ) -> ([[[[f32; W]; H]; 3]; N], Tensor) {
        let dir = data_dir().join(name);
        let x = read_pb(&dir.join("input_0.pb")).unwrap();
        assert_eq!(x.ty.shape, [N, 3, H, W]);
        let mut a = [[[[0f32; W]; H]; 3]; N];
        let flat: Vec<f32> = x.to_f32();
        for (d, s) in a.iter_mut().flatten().flatten().flatten().zip(&flat) {
            *d = *s;
        }
        (a, read_pb(&dir.join("output_0.pb")).unwrap())
    }
    fn same(got: &[f32], want: &Tensor, what: &str) {
        let want = want.to_f32();
        assert_eq!(got.len(), want.len(), "{what}");
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 + 1e-3 * w.abs(), "{what}: {g} vs {w}");
        }
    }
    let mut ocr = example_ocr::Ocr::new();
    let (x, want) = case::<1, 48, 160>("ocr_1x48x160");
    same(
        ocr.run(&x).as_flattened().as_flattened(),
        &want,
        "Ocr 1x3x48x160",
    );
    let mut batches = example_ocr::OcrBatches::new();
    let (x, want) = case::<1, 32, 96>("ocr_1x32x96");
    same(
        batches.run_batch_1(&x).as_flattened().as_flattened(),
        &want,
        "batch 1",
    );
    let (x, want) = case::<2, 32, 96>("ocr_2x32x96");
    same(
        batches.run_batch_2(&x).as_flattened().as_flattened(),
        &want,
        "batch 2",
    );
    let (x, want) = case::<4, 32, 96>("ocr_4x32x96");
    same(
        batches.run_batch_4(&x).as_flattened().as_flattened(),
        &want,
        "batch 4",
    );
    // `model!(OcrAnyWidth = "ocr.onnx", batch = 1, height = 32, width = 32..=320)`: one build,
    // both ends of the range and three widths inside.
    let mut any = example_ocr::OcrAnyWidth::new();
    for w in [32, 45, 96, 201, 320] {
        let (x, want) = case_data(&format!("ocr_1x32x{w}"));
        let (got, shape) = any.run(&x[0].to_f32(), [1, 3, 32, w]).unwrap();
        assert_eq!(shape.to_vec(), want[0].ty.shape, "width {w}");
        same(got, &want[0], &format!("OcrAnyWidth at width {w}"));
    }
    let e = any.run(&[0.0; 3 * 32 * 16], [1, 3, 32, 16]).unwrap_err();
    assert!(
        e.to_string().contains("16 is outside the range 32..=320"),
        "{e}"
    );
    let e = any.run(&[0.0; 3 * 32 * 64], [1, 3, 48, 64]).unwrap_err();
    assert!(
        e.to_string().contains("dimension 2 is 48, expected 32"),
        "{e}"
    );
    let e = any.run(&[0.0; 10], [1, 3, 32, 64]).unwrap_err();
    assert!(e.to_string().contains("10 elements"), "{e}");
}

/// `Build::scan` finds `model!` bindings with sizes and compiles each distinct one once, under the
/// file key the macro computes (the glue's input type shows the sizes).
#[test]
fn scanned_bindings_compile_once_per_distinct_sizes() {
    let dir = build_dir("scan");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::copy(ocr_model(), dir.join("ocr.onnx")).unwrap();
    std::fs::write(
        dir.join("src/a.rs"),
        "collage::model!(pub A = \"ocr.onnx\", x: [1, 3, 32, 96]);\n\
         collage::model!(pub Wide = \"ocr.onnx\", batch = 2, height = 32, width = 128);\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/b.rs"),
        "collage::model!(pub B = \"ocr.onnx\", x: [1, 3, 32, 96]);\n\
         collage::model!(pub Plain = \"ocr.onnx\");\n",
    )
    .unwrap();
    let out = dir.join("out");
    let built = collage_build::Build::new()
        .manifest_dir(&dir)
        .out_dir(&out)
        .sources_only()
        .scan("src")
        .compile()
        .unwrap();
    assert_eq!(
        built.models.len(),
        2,
        "A and B are one model; Plain is Build::onnx's"
    );
    let mut inputs: Vec<String> = built
        .models
        .iter()
        .map(|m| {
            assert!(m.symbol.starts_with("ocr__"), "{}", m.symbol);
            let glue = std::fs::read_to_string(&m.files[0]).unwrap();
            let at = glue.find("x: &").unwrap();
            glue[at..at + glue[at..].find(')').unwrap()].to_string()
        })
        .collect();
    inputs.sort();
    assert_eq!(
        inputs,
        [
            "x: &[[[[f32; 128]; 32]; 3]; 2]",
            "x: &[[[[f32; 96]; 32]; 3]; 1]"
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Compiles `model` over `range` (its other dimensions bound by `bindings`) and runs the one
/// build on each case's inputs at their run-time shapes, against ONNX Runtime's outputs.
fn check_range(model: &Path, bindings: Bindings, range: DimRange, cases: &[String]) -> RangedModel {
    let opts = Options {
        bindings,
        ..Options::default()
    };
    let tag = format!("{}_{}", range.dim, std::process::id());
    let c = compile_ranged(model, &opts, &range, "ranged").unwrap_or_else(|e| panic!("{e}"));
    let work = std::env::temp_dir().join(format!("collage-range-{tag}"));
    let mut m = RangedModel::build(&c.compiled, &c.ranged, &work, "-O1").unwrap();
    for case in cases {
        let (inputs, wants) = case_data(case);
        for exec in [
            Executor::Serial,
            Executor::Pool(collage_runtime::ThreadPool::new(2)),
        ] {
            let got = m
                .run(&inputs, &exec)
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(got.len(), wants.len());
            for (i, (g, w)) in got.iter().zip(&wants).enumerate() {
                assert_eq!(g.ty, w.ty, "{case}: output {i}");
                let (pass, err) = collage_build::tensor::compare(g, w);
                assert!(
                    pass,
                    "{case}: output {i} differs from ONNX Runtime's by {err}"
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    m
}

#[test]
fn a_transformer_served_over_1_to_512_tokens_matches_onnx_runtime_at_each_size() {
    let cases: Vec<String> = [1, 7, 128, 512]
        .iter()
        .map(|s| format!("tiny_bert_1x{s}"))
        .collect();
    let m = check_range(
        &data_dir().join("tiny_bert_dyn.onnx"),
        Bindings::new().dim("batch", 1),
        DimRange::new("sequence", 1, 512).unwrap(),
        &cases,
    );
    // A size outside the range, or inputs that disagree on it, are errors.
    let ids = |s: usize| Tensor::from_i64(&[1, s], &vec![3; s]);
    let e = m.size_of(&[ids(513), ids(513)]).unwrap_err().to_string();
    assert!(e.contains("513") && e.contains("1..=512"), "{e}");
    let e = m.size_of(&[ids(9), ids(8)]).unwrap_err().to_string();
    assert!(
        e.contains("attention_mask") && e.contains("expected"),
        "{e}"
    );
}

#[test]
fn one_build_serves_a_range_of_widths_or_heights_and_matches_onnx_runtime() {
    // The OCR example's model over widths 32..=320: both ends and three sizes inside.
    let cases: Vec<String> = [32, 45, 96, 201, 320]
        .iter()
        .map(|w| format!("ocr_1x32x{w}"))
        .collect();
    let m = check_range(
        &ocr_model(),
        Bindings::new().dim("batch", 1).dim("height", 32),
        DimRange::new("width", 32, 320).unwrap(),
        &cases,
    );
    assert_eq!(m.range(), ("width", 32, 320));
    let x = |w: usize| Tensor::from_f32(&[1, 3, 32, w], &vec![0.5; 3 * 32 * w]);
    let e = m.size_of(&[x(321)]).unwrap_err().to_string();
    assert!(e.contains("321") && e.contains("32..=320"), "{e}");
    let e = m
        .size_of(&[Tensor::from_f32(&[1, 3, 48, 64], &vec![0.5; 3 * 48 * 64])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected f32[1,3,32,64]"), "{e}");
    // Over its height, which the model averages (the mean's scale, 1 / height, is computed at
    // run time).
    let cases: Vec<String> = [16, 24, 32, 40, 64]
        .iter()
        .map(|h| format!("ocr_1x{h}x96"))
        .collect();
    check_range(
        &ocr_model(),
        Bindings::new().dim("batch", 1).dim("width", 96),
        DimRange::new("height", 16, 64).unwrap(),
        &cases,
    );
}

#[test]
fn paddle2onnx_exports_are_served_over_a_range() {
    let dir = data_dir();
    // A CNN (BatchNorm, HardSigmoid, MaxPool, a mean over the height) over its width.
    let crnn = dir.join("crnn_paddle.onnx");
    let d = dim_names(&crnn, "x");
    let cases: Vec<String> = [32, 45, 100, 201, 320]
        .iter()
        .map(|w| format!("crnn_paddle_1x32x{w}"))
        .collect();
    check_range(
        &crnn,
        Bindings::new().dim(&d[0], 1).dim(&d[2], 32),
        DimRange::new(&d[3], 32, 320).unwrap(),
        &cases,
    );
    // A transformer encoder over its sequence length.
    let encoder = dir.join("encoder_paddle.onnx");
    let d = dim_names(&encoder, "ids");
    let cases: Vec<String> = [1, 7, 128, 512]
        .iter()
        .map(|s| format!("encoder_paddle_1x{s}"))
        .collect();
    check_range(
        &encoder,
        Bindings::new().dim(&d[0], 1),
        DimRange::new(&d[1], 1, 512).unwrap(),
        &cases,
    );
}
