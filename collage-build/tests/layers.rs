//! Imports run one way: a room (a folder or top-level file of `collage-build/src`) uses only the
//! rooms below it in [`ORDER`] (the layers of `docs/ARCHITECTURE.md`). Every `.rs` file is read
//! and its references to other rooms collected: `crate::room` paths (in code and in doc links),
//! the items of `use crate::{room::.., ..}` groups, and `super::` chains that climb to the crate
//! root. `lib.rs`, `build.rs` (the `Build` API) and `bin/` are the top and may use every room.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The rooms, bottom to top. A room may use the rooms before it, never one after it.
const ORDER: &[&str] = &[
    "error",
    "tensor",
    "te",
    "ops",
    "ir",
    "frontend",
    "passes",
    "target",
    "toolchain",
    "partition",
    "fusion",
    "schedule",
    "backend",
    "codegen",
    "native",
    "tune",
    "report",
    "driver",
];

/// Above every room: the crate root, the build-script API and the binaries.
const TOP: &[&str] = &["lib", "build", "bin"];

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without plain `//` comments (doc comments stay: rustdoc resolves their links).
fn code_and_docs(src: &str) -> String {
    src.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[i..].starts_with("///") && !l[i..].starts_with("//!") => {
                // A `//` inside a string literal is rare in this crate and only hides text.
                &l[..i]
            }
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segment of every top-level item of the `{..}` group starting at `s`.
fn group_heads(s: &str) -> Vec<&str> {
    let mut heads = Vec::new();
    let (mut depth, mut start) = (0usize, 1usize);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' | ',' if depth == 1 => {
                heads.push(ident_at(s[start..i].trim_start()));
                start = i + 1;
                if c == '}' {
                    break;
                }
            }
            '}' => depth -= 1,
            _ => {}
        }
    }
    heads
}

/// The module path of a file (`a/b.rs`: `[a, b]`; `a/mod.rs`: `[a]`).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// Every room name `src` refers to.
fn references(src: &str, module: &[String]) -> BTreeSet<String> {
    let src = code_and_docs(src);
    let mut found = BTreeSet::new();
    for (i, _) in src.match_indices("crate::") {
        if i > 0 && src[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        {
            continue;
        }
        let rest = &src[i + "crate::".len()..];
        if rest.starts_with('{') {
            found.extend(group_heads(rest).into_iter().map(str::to_string));
        } else {
            found.insert(ident_at(rest).to_string());
        }
    }
    for (i, _) in src.match_indices("super::") {
        if i > 0 && src[..i].ends_with("super::") {
            continue;
        }
        let mut rest = &src[i..];
        let mut ups = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            ups += 1;
            rest = r;
        }
        if ups == module.len() {
            if rest.starts_with('{') {
                found.extend(group_heads(rest).into_iter().map(str::to_string));
            } else {
                found.insert(ident_at(rest).to_string());
            }
        }
    }
    found
}

#[test]
fn rooms_use_only_the_rooms_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files.sort();
    let rank = |room: &str| ORDER.iter().position(|&r| r == room);
    let mut rooms_seen = BTreeSet::new();
    let mut bad = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let module = module_path(rel);
        let room = module[0].as_str();
        rooms_seen.insert(room.to_string());
        if TOP.contains(&room) {
            continue;
        }
        let Some(mine) = rank(room) else {
            bad.push(format!(
                "{}: room `{room}` is not in the layer order (add it to ORDER here and to docs/ARCHITECTURE.md)",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for used in references(&text, &module) {
            match rank(&used) {
                Some(theirs) if theirs > mine => bad.push(format!(
                    "{}: `{room}` uses `{used}`, which is above it",
                    rel.display()
                )),
                None if TOP.contains(&used.as_str()) => bad.push(format!(
                    "{}: `{room}` uses the top (`{used}`)",
                    rel.display()
                )),
                _ => {}
            }
        }
    }
    for room in ORDER {
        assert!(
            rooms_seen.contains(*room),
            "`{room}` is in ORDER but not in src/"
        );
    }
    assert!(
        bad.is_empty(),
        "imports that run upward:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_scanner_sees_paths_groups_and_super_chains() {
    let module = vec!["backend".to_string(), "dnnl".to_string()];
    let text = "use crate::{codegen::c::Place, te::{Expr, Stage}};\n\
                /// [`Model`](crate::driver::Options)\n\
                // crate::report in a plain comment\n\
                fn f() { super::super::native::x(); super::gemm::y(); $crate::tune::z(); }";
    let got: Vec<String> = references(text, &module).into_iter().collect();
    assert_eq!(got, ["codegen", "driver", "native", "te"]);
}
