//! What a new user does, outside this workspace: `cargo new app`, path dependencies on this
//! checkout, the README's `build.rs` and `src/main.rs` (an ONNX binding and a `model!` DSL block),
//! then `RUSTFLAGS=-D warnings cargo run --release` and `cargo clippy -- -D warnings`, for Cargo's
//! default edition and for the older ones. The crate denies warnings and
//! `unsafe_op_in_unsafe_fn` itself, so generated glue that is not clean code of every edition fails
//! here. The printed outputs must equal those of the workspace's own examples (same models).
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CHECKOUT: &str = env!("CARGO_MANIFEST_DIR");

/// The body of the README's ```` ```rust ```` block whose first line is `first`.
fn readme_block(first: &str) -> String {
    let readme = std::fs::read_to_string(Path::new(CHECKOUT).join("README.md")).unwrap();
    let start = readme
        .find(&format!("```rust\n{first}\n"))
        .unwrap_or_else(|| panic!("README.md has no rust block starting with {first:?}"));
    let body = &readme[start + "```rust\n".len()..];
    body[..body.find("```").expect("README block is closed")].to_string()
}

/// A `cargo` command for the new crate, with none of the outer build's variables.
fn cargo(dir: &Path, target: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.args(args).current_dir(dir);
    // The outer build's settings go; the toolchain choice (`RUSTUP_*`, `CARGO_HOME`) stays.
    for (k, _) in std::env::vars() {
        let build_var = (k.starts_with("CARGO_") && k != "CARGO_HOME")
            || k.starts_with("__CARGO")
            || k.starts_with("RUSTC")
            || k.ends_with("RUSTFLAGS")
            || k == "RUSTDOCFLAGS";
        if build_var {
            c.env_remove(&k);
        }
    }
    c.env_remove("COLLAGE_TUNE")
        .env("CARGO_TARGET_DIR", target)
        .env("RUSTFLAGS", "-D warnings")
        .env("CARGO_TERM_COLOR", "never");
    let out = c.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "`cargo {}` failed in {}:\n{}\n{}",
        args.join(" "),
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every `f32` in a `Debug`-printed array.
fn floats(s: &str) -> Vec<f32> {
    s.split(|c: char| !(c.is_ascii_digit() || "-.eE".contains(c)))
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse()
                .unwrap_or_else(|_| panic!("not a number: {t:?} in {s}"))
        })
        .collect()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}: {got:?} vs {want:?}"
        );
    }
}

/// Lines of `cargo` output that are diagnostics (rustc's, Clippy's or a build script's).
fn diagnostics(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("warning") || l.starts_with("error"))
        .map(str::to_string)
        .collect()
}

/// Creates the crate with `cargo new` (`edition`: `None` = Cargo's default) and returns its folder.
fn new_crate(root: &Path, target: &Path, name: &str, edition: Option<&str>) -> PathBuf {
    let dir = root.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = vec!["new", "--vcs", "none", "--bin"];
    if let Some(e) = edition {
        args.extend(["--edition", e]);
    }
    let path = dir.to_str().unwrap();
    args.push(path);
    cargo(root, target, &args);

    // Path dependencies on this checkout, as the README says to depend on unpublished crates.
    let manifest = dir.join("Cargo.toml");
    let mut toml = std::fs::read_to_string(&manifest).unwrap();
    if let Some(e) = edition {
        assert!(toml.contains(&format!("edition = \"{e}\"")), "{toml}");
    }
    assert!(toml.trim_end().ends_with("[dependencies]"), "{toml}");
    let checkout = Path::new(CHECKOUT);
    toml.push_str(&format!(
        "collage = {{ path = {:?} }}\n\n[build-dependencies]\ncollage-build = {{ path = {:?} }}\n",
        checkout,
        checkout.join("collage-build")
    ));
    std::fs::write(&manifest, toml).unwrap();
    // The workspace's resolved versions, so the test needs nothing newer than CI already has.
    std::fs::copy(checkout.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    std::fs::copy(
        checkout.join("examples/mnist/mnist.onnx"),
        dir.join("mnist.onnx"),
    )
    .unwrap();
    std::fs::copy(
        checkout.join("examples/mlp_dsl/mlp.safetensors"),
        dir.join("mlp.safetensors"),
    )
    .unwrap();

    let mut build_rs = readme_block("// build.rs");
    if edition == Some("2018") {
        // The README's `panic!("collage: {e}")` is 2021 code: in 2018 a lone panic argument is
        // not a format string. The user's code, not generated code; spelled the 2018 way.
        let (new, old) = (r#"panic!("collage: {}", e)"#, r#"panic!("collage: {e}")"#);
        assert!(
            build_rs.contains(old),
            "README's build.rs changed:\n{build_rs}"
        );
        build_rs = build_rs.replace(old, new);
    }
    std::fs::write(dir.join("build.rs"), build_rs).unwrap();
    let main = readme_block("// src/main.rs");
    let print = "println!(\"{y:?}\");";
    assert!(main.contains(print), "README's main.rs no longer prints y");
    // Also run the DSL model, so both bindings are used code.
    let main = main.replace(
        print,
        &format!("{print}\n    println!(\"{{:?}}\", Mlp::new().run(&[[0.5f32; 784]]));"),
    );
    std::fs::write(
        dir.join("src/main.rs"),
        format!("#![deny(warnings)]\n#![deny(unsafe_op_in_unsafe_fn)]\n\n{main}"),
    )
    .unwrap();
    dir
}

#[test]
fn fresh_cargo_new_crate_builds_warning_free_and_runs() {
    let root = std::env::temp_dir().join(format!("collage-new-crate-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    // One target folder for every edition: the dependencies are built once.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("new-crate-target");

    // The references: the workspace's examples compile the same two models.
    let mnist = example_mnist::Mnist::new().run(&[[[[0.0f32; 28]; 28]; 1]; 1])[0];
    let mlp = example_mlp_dsl::Mlp::new().run(&[[0.5f32; 784]])[0];

    for (name, edition) in [
        ("app_default", None),
        ("app_2021", Some("2021")),
        ("app_2018", Some("2018")),
    ] {
        let dir = new_crate(&root, &target, name, edition);
        let run = cargo(&dir, &target, &["run", "--release", "--quiet"]);
        assert!(
            diagnostics(&run).is_empty(),
            "{name}: diagnostics:\n{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let stdout = String::from_utf8_lossy(&run.stdout).to_string();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{name}: output:\n{stdout}");
        assert_close(&floats(lines[0]), &mnist, &format!("{name}: Mnist"));
        assert_close(&floats(lines[1]), &mlp, &format!("{name}: Mlp"));

        let clippy = cargo(
            &dir,
            &target,
            &["clippy", "--release", "--quiet", "--", "-D", "warnings"],
        );
        assert!(
            diagnostics(&clippy).is_empty(),
            "{name}: clippy:\n{}",
            String::from_utf8_lossy(&clippy.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
