//! The system C toolchain: which compiler, probing whether a library links, the libraries a
//! generated unit names, and building a unit into a shared library (with `COLLAGE_CC_CACHE`, a
//! cache of built libraries). Backends probe their libraries through it; the native runner and
//! the measurement harness build with it.
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// The C compiler command: `$CC`, else `cc`.
pub fn c_compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// The first line of `cc --version`, for the cost cache's target fingerprint.
pub fn c_compiler_version() -> String {
    Command::new(c_compiler())
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Whether `source` (a C program) compiles and links against `libs` with the C compiler: how
/// optional library backends are detected.
pub fn probe_link(source: &str, libs: &[&str]) -> bool {
    let dir = std::env::temp_dir().join(format!(
        "collage-probe-{}-{}",
        std::process::id(),
        libs.join("-")
    ));
    if std::fs::create_dir_all(&dir).is_err() {
        return false;
    }
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    let ok = std::fs::write(&src, source).is_ok()
        && Command::new(c_compiler())
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .args(libs.iter().map(|l| format!("-l{l}")))
            .output()
            .is_ok_and(|o| o.status.success())
        && Command::new(&exe)
            .output()
            .is_ok_and(|o| o.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    ok
}

/// The libraries a generated translation unit must be linked with: its `/* collage-link: NAME */`
/// lines (written by the code generator for library backends), in order.
pub fn link_libs(c_source: &str) -> Vec<String> {
    c_source
        .lines()
        .filter_map(|l| l.strip_prefix("/* collage-link: "))
        .filter_map(|l| l.strip_suffix(" */"))
        .map(str::to_string)
        .fold(Vec::new(), |mut v, l| {
            if !v.contains(&l) {
                v.push(l);
            }
            v
        })
}

/// The C compiler's flags besides the optimisation level. `-fopenmp-simd` as `Build` compiles
/// for Cargo: the generated `#pragma omp simd` loops vectorise, so what is measured is what a
/// user's build runs.
const CFLAGS: [&str; 6] = [
    "-std=c99",
    "-fPIC",
    "-shared",
    "-fno-math-errno",
    "-ffp-contract=fast",
    "-fopenmp-simd",
];

/// Compiles C source into a shared library at `out` (`-O2` unless `opt` says otherwise), linking
/// the libraries its `collage-link` lines name.
///
/// With `COLLAGE_CC_CACHE` set to a directory, libraries are kept there by the hash of their
/// source, compiler and flags, and a source compiled before is copied instead of compiled again
/// (benchmark scripts that build the same placement many times; the source is compared byte for
/// byte, so a hash collision only costs a compilation).
pub fn build_shared(c_path: &Path, out: &Path, opt: &str) -> Result<()> {
    let source = std::fs::read_to_string(c_path).unwrap_or_default();
    let cached = std::env::var_os("COLLAGE_CC_CACHE").map(|dir| {
        let key = crate::te::fnv64(&format!(
            "{}\0{}\0{opt} {}\0{source}",
            c_compiler(),
            c_compiler_version(),
            CFLAGS.join(" ")
        ));
        let dir = PathBuf::from(dir);
        (
            dir.join(format!("{key:016x}.c")),
            dir.join(format!("{key:016x}.so")),
        )
    });
    if let Some((c, so)) = &cached {
        if std::fs::read_to_string(c).is_ok_and(|s| s == source) && std::fs::copy(so, out).is_ok() {
            return Ok(());
        }
    }
    compile_shared(c_path, out, opt, &link_libs(&source))?;
    if let Some((c, so)) = &cached {
        // Best effort: a cache that cannot be written only costs the next compilation. Files
        // are renamed into place, the library before its source, which marks the entry complete.
        let _ = std::fs::create_dir_all(c.parent().expect("a file in the cache"));
        let tmp = |p: &Path| p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::copy(out, tmp(so)).is_ok() && std::fs::rename(tmp(so), so).is_ok() {
            let _ = std::fs::write(tmp(c), &source).and_then(|_| std::fs::rename(tmp(c), c));
        }
    }
    Ok(())
}

fn compile_shared(c_path: &Path, out: &Path, opt: &str, libs: &[String]) -> Result<()> {
    let res = Command::new(c_compiler())
        .arg(opt)
        .args(CFLAGS)
        .args(if opt == "-O1" {
            &["-DCOLLAGE_NO_DISPATCH"][..]
        } else {
            &[][..]
        })
        .arg("-o")
        .arg(out)
        .arg(c_path)
        .args(libs.iter().map(|l| format!("-l{l}")))
        .arg("-lm")
        .output()
        .map_err(|e| Error::CCompile {
            path: c_path.to_path_buf(),
            detail: format!("cannot run `{}`: {e}", c_compiler()),
        })?;
    if !res.status.success() {
        let detail = String::from_utf8_lossy(&res.stderr)
            .chars()
            .take(4000)
            .collect();
        return Err(Error::CCompile {
            path: c_path.to_path_buf(),
            detail,
        });
    }
    Ok(())
}
