//! The command line binds symbolic dimensions for every command that takes a model: `--dim
//! NAME=N` and `--input-shape INPUT=D0,D1,..`, checked here on the OCR example's model
//! (`x: [batch, 3, height, width]`) and the symbolic-sequence transformer against ONNX Runtime's
//! outputs (`tests/support/symbolic_models.py`, run by `.ci/run`).
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn data() -> PathBuf {
    std::env::var_os("COLLAGE_SYMBOLIC_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/symbolic"))
}

fn collage(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_collage"))
        .args(args)
        .output()
        .expect("collage runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn every_model_command_takes_dims_and_input_shapes() {
    let ocr = root().join("examples/ocr/ocr.onnx");
    let ocr = ocr.to_str().unwrap();
    let out = std::env::temp_dir().join(format!("collage-cli-bind-{}", std::process::id()));
    let out_s = out.to_str().unwrap();

    let o = collage(&["compile", ocr, "--out", out_s]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("3 input dimension(s)") && t.contains("--dim batch=N"),
        "{t}"
    );

    let o = collage(&[
        "compile",
        ocr,
        "--out",
        out_s,
        "--dim",
        "batch=2",
        "--input-shape",
        "x=2,3,48,160",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let glue = std::fs::read_to_string(out.join("ocr.rs")).unwrap();
    assert!(glue.contains("x: &[[[[f32; 160]; 48]; 3]; 2]"), "{glue}");

    let case = data().join("ocr_2x48x160");
    let case_s = case.to_str().unwrap();
    assert!(case.exists(), "{} is missing: run .ci/run", case.display());
    let o = collage(&[
        "run",
        ocr,
        "--data",
        case_s,
        "--dim",
        "batch=2",
        "--dim",
        "height=48",
        "--dim",
        "width=160",
    ]);
    assert!(
        o.status.success() && text(&o).contains("PASS logits"),
        "{}",
        text(&o)
    );
    // A binding that contradicts the data is an error naming both, not a wrong run.
    let o = collage(&["run", ocr, "--data", case_s, "--dim", "batch=3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("`batch` is bound to 3"), "{}", text(&o));

    let o = collage(&["explain", ocr, "--input-shape", "x=1,3,32,96"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = collage(&[
        "bench",
        ocr,
        "--seconds",
        "0.05",
        "--input-shape",
        "x=1,3,32,96",
    ]);
    assert!(
        o.status.success() && text(&o).contains("median"),
        "{}",
        text(&o)
    );

    let bert = data().join("tiny_bert_dyn.onnx");
    let bert_case = data().join("tiny_bert_1x7");
    let o = collage(&[
        "run",
        bert.to_str().unwrap(),
        "--data",
        bert_case.to_str().unwrap(),
        "--dim",
        "batch=1",
        "--dim",
        "sequence=7",
    ]);
    assert!(
        o.status.success() && text(&o).contains("PASS last_hidden_state"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&out);
}
