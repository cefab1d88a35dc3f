//! Golden filetests: every stage of the compiler printed as text, for the example model and the
//! model tests, against the files in `tests/golden/` — the graph IR after the pass pipeline
//! (`<model>.ir.txt`), the tensor-expression program after placement and fusion (`.te.txt`), the
//! kernel plan of every generated stage (`.sched.txt`), the arena plan (`.arena.txt`) and the
//! cost-cache key of every kernel (`.keys.txt`).
//! Models compile on the `c` backend alone, without a cost cache, so the text is the same on
//! every machine. Regenerate with `COLLAGE_BLESS=1 cargo test --test filetests` after an intended
//! change, and review the diff.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

mod common;

use collage_build::codegen::{self, Location};
use collage_build::driver::{self, Options};
use collage_build::te::{BufId, BufKind, Isa, PlanChoice};
use collage_build::tune::cache::TargetFingerprint;
use collage_build::tune::{measure, price};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn models_dir() -> PathBuf {
    std::env::var_os("COLLAGE_BENCH_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/bench/models"))
}

/// Compares `got` with `tests/golden/<file>` (or writes it under `COLLAGE_BLESS`); returns a
/// message when they differ.
fn golden(file: &str, got: &str) -> Option<String> {
    let path = root().join("tests/golden").join(file);
    if std::env::var_os("COLLAGE_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    if want == got {
        return None;
    }
    let line = want
        .lines()
        .zip(got.lines())
        .position(|(a, b)| a != b)
        .unwrap_or(want.lines().count().min(got.lines().count()));
    Some(format!(
        "{file} differs from line {}: want {:?}, got {:?} (if intended, rerun with COLLAGE_BLESS=1)",
        line + 1,
        want.lines().nth(line).unwrap_or("<end>"),
        got.lines().nth(line).unwrap_or("<end>")
    ))
}

/// Prints every stage of `model` and compares each text with its golden file.
fn check(name: &str, model: &Path) {
    assert!(
        model.exists(),
        "{} is missing: run .ci/run",
        model.display()
    );
    let mut g = collage_build::frontend::onnx::load(model).unwrap();
    collage_build::passes::run(&mut g, collage_build::passes::PIPELINE).unwrap();
    let ir = g.to_string();
    let opts = Options {
        backends: "c".into(),
        ..Options::default()
    };
    let c = driver::compile(g, name, &opts).unwrap();
    let p = &c.program;
    plans_are_the_printed_ones(&c);
    let te = p.to_string();
    let sched = format!(
        "# kernel plans of the generated stages (AVX-512, 16 f32 lanes)\n{}",
        plan_lines(p)
    );
    let (places, weights, size) = codegen::locate(p);
    let mut arena = format!(
        "# arena {size} bytes, weights {} bytes: [first, last) byte of every stage\n",
        weights.len()
    );
    for (k, place) in places.iter().enumerate() {
        if let Location::Arena(off) = place {
            let bytes = p.arena_bytes(BufId::new(k));
            writeln!(arena, "b{k} [{off}, {})", off + bytes).unwrap();
        }
    }
    // The cost-cache keys (without the machine): a changed key would orphan every cached
    // measurement of the kernel.
    let target = TargetFingerprint::current("golden");
    let mut keys =
        String::from("# cost-cache keys of the kernels: backend, signature, inputs -> output\n");
    for id in measure::stages(p) {
        let k = price::kernel_key(p, id, &target);
        writeln!(
            keys,
            "b{id} {} {} {} -> {}",
            k.backend,
            k.signature,
            k.inputs.join(" "),
            k.outputs.join(" ")
        )
        .unwrap();
    }
    let errors: Vec<String> = [
        (format!("{name}.ir.txt"), ir),
        (format!("{name}.te.txt"), te),
        (format!("{name}.sched.txt"), sched),
        (format!("{name}.arena.txt"), arena),
        (format!("{name}.keys.txt"), keys),
    ]
    .iter()
    .filter_map(|(file, text)| golden(file, text))
    .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// Every stage's plan, for every variant, is the one the emitter printed above its kernel; its
/// text parses back to its choice, and that choice realised again for the stage gives the same
/// plan; what `explain` reports is the same text.
fn plans_are_the_printed_ones(c: &codegen::Compiled) {
    let p = &c.program;
    let printed = common::printed_plans(&c.c_source);
    let target = collage_build::target::Target::for_build();
    let cpu = target.cpu().unwrap();
    let mut planned = 0;
    for b in p.buf_ids() {
        let Some(st) = p.stage(b) else { continue };
        for isa in Isa::ALL {
            let Some(plan) = p.plan(b, isa) else { continue };
            let text = plan.to_string();
            let names = ["", "_fill", "_inst", "_row"].map(|s| format!("k{b}{}{s}", isa.suffix()));
            let shown = names.iter().find_map(|n| printed.get(n));
            assert_eq!(shown, Some(&text), "{}: stage b{b} ({isa})", c.name);
            let choice: PlanChoice = text.parse().unwrap();
            assert_eq!(choice, plan.choice(), "{}: b{b} ({isa}): {text}", c.name);
            let again = collage_build::schedule::plan_stage(p, st, isa, cpu, Some(choice));
            assert_eq!(&again, plan, "{}: b{b} ({isa}): {text}", c.name);
            planned += 1;
        }
    }
    assert!(planned > 0, "{}: no plans", c.name);
    let target = TargetFingerprint::current("golden");
    for k in collage_build::report::kernels(c, &target, None) {
        let avx512 = p.plan(k.id, Isa::Avx512).map(|pl| pl.to_string());
        assert_eq!(
            k.plan.map(|pl| pl.to_string()),
            avx512,
            "{}: k{}",
            c.name,
            k.id
        );
    }
}

#[test]
fn mnist_example() {
    check("mnist", &root().join("examples/mnist/mnist.onnx"));
}

macro_rules! model_filetests {
    ($($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                let name = stringify!($name);
                check(name, &models_dir().join(format!("{name}.onnx")));
            }
        )*
    };
}

model_filetests!(
    mlp,
    mnist_cnn,
    resnet18,
    bert_layer,
    squeezenet,
    mobilenetv3,
    mobilenetv2,
    vit
);

/// Small plan filetests (`tests/plans/*.plan`): a `model!` snippet (with its weights' shapes on
/// a `# weights name: [dims], ..` line: the test writes them, pseudo-random, to
/// `weights.safetensors`) and, after a `----` line, the kernel plan of every generated stage
/// (AVX-512), compiled on `c` alone. A difference is shown as a diff; `COLLAGE_BLESS=1` writes
/// the plans in place.
#[test]
fn plan_filetests() {
    let dir = root().join("tests/plans");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "plan"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "plan filetests in {}", dir.display());
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let (source, want) = match text.split_once("\n----\n") {
            Some((s, w)) => (s.to_string(), w.to_string()),
            None => (text.clone(), String::new()),
        };
        let got = plans_of_snippet(path, &source);
        if got == want {
            continue;
        }
        if std::env::var_os("COLLAGE_BLESS").is_some() {
            std::fs::write(path, format!("{}\n----\n{got}", source.trim_end())).unwrap();
            continue;
        }
        let mut diff = format!("{}:\n", path.display());
        let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
        for i in 0..w.len().max(g.len()) {
            match (w.get(i), g.get(i)) {
                (Some(a), Some(b)) if a == b => writeln!(diff, "  {a}").unwrap(),
                (a, b) => {
                    if let Some(a) = a {
                        writeln!(diff, "- {a}").unwrap();
                    }
                    if let Some(b) = b {
                        writeln!(diff, "+ {b}").unwrap();
                    }
                }
            }
        }
        failures.push(diff);
    }
    assert!(
        failures.is_empty(),
        "plans differ (if intended, rerun with COLLAGE_BLESS=1):\n{}",
        failures.join("\n")
    );
}

/// The plan lines of the `model!` snippet `source` (from `path`).
fn plans_of_snippet(path: &Path, source: &str) -> String {
    let work = std::env::temp_dir().join(format!(
        "collage-plans-{}-{}",
        std::process::id(),
        path.file_stem().unwrap().to_string_lossy()
    ));
    std::fs::create_dir_all(&work).unwrap();
    let g = common::snippet_graph(path, source, &work);
    // A snippet that tests a direct convolution's plan says so (`# options: no-winograd`).
    let opts = Options {
        backends: "c".into(),
        no_winograd: source
            .lines()
            .any(|l| l.starts_with("# options:") && l.contains("no-winograd")),
        ..Options::default()
    };
    let c = driver::compile(g, "plan", &opts).unwrap();
    let _ = std::fs::remove_dir_all(&work);
    plans_are_the_printed_ones(&c);
    plan_lines(&c.program)
}

/// Every stage's AVX-512 plan (`library call` for a stage a library computes whole), one line
/// each, then the groups and the tile graph: the text of the `.sched.txt` goldens and of the
/// plan filetests.
fn plan_lines(p: &collage_build::te::Program) -> String {
    let mut out = String::new();
    for (k, b) in p.bufs.iter().enumerate() {
        if let BufKind::Stage(st) = &b.kind {
            let plan = p
                .plan(BufId::new(k), Isa::Avx512)
                .map_or("library call".to_string(), |pl| pl.to_string());
            writeln!(out, "b{k} {:?}: {plan}", st.name).unwrap();
        }
    }
    for g in &p.groups {
        writeln!(
            out,
            "group g{}: b{} -> b{}, {} instances of {} columns in {} slots",
            g.consumer, g.producer, g.consumer, g.instances, g.cols, g.slots
        )
        .unwrap();
    }
    for g in &p.row_groups {
        let list = |bs: &[BufId]| bs.iter().map(|b| format!("b{b}")).collect::<Vec<_>>();
        writeln!(
            out,
            "row group r{}: {}; {} instances of {} positions of {} leading dimensions in {} slots; scratch {}",
            g.last(),
            list(&g.stages).join(" -> "),
            g.instances,
            g.block,
            g.dims,
            g.slots,
            list(&g.scratch).join(" ")
        )
        .unwrap();
    }
    let target = collage_build::target::Target::for_build();
    out.push_str(&collage_build::schedule::tile_graph(p, &target).render(p));
    out
}
