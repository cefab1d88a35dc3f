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
        .env_remove("LD_PRELOAD")
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
    // Neither the compiler nor the probe runs under the sanitizers' runtimes the sanitiser job
    // preloads into the test process (LeakSanitizer fails the compiler on its own leaks).
    let ok = std::fs::write(&src, source).is_ok()
        && Command::new(c_compiler())
            .env_remove("LD_PRELOAD")
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .args(libs.iter().map(|l| format!("-l{l}")))
            .output()
            .is_ok_and(|o| o.status.success())
        && Command::new(&exe)
            .env_remove("LD_PRELOAD")
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

/// The C compiler's flags besides the optimisation level, as `Build` compiles for Cargo, so
/// that what is measured is what a user's build runs: `-fopenmp-simd` so that the generated
/// `#pragma omp simd` loops vectorise; `-fno-trapping-math` (no floating-point exception is
/// ever unmasked, and no value changes) so that floor and ceil vectorise, whose vector
/// rounding instructions raise the inexact flag that the scalar ones suppress.
const CFLAGS: [&str; 7] = [
    "-std=c99",
    "-fPIC",
    "-shared",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=fast",
    "-fopenmp-simd",
];

/// Compiles C source into a shared library at `out` (`-O2` unless `opt` says otherwise), linking
/// the libraries its `collage-link` lines name.
///
/// With `COLLAGE_SANITIZE` set (`address,undefined`, as `-fsanitize=` takes it), the library is
/// compiled with those sanitizers, every report fatal ([`sanitizer_flags`]): the sanitiser job
/// of CI (`.ci/sanitize`) runs the conformance and model tests so, the sanitizers' runtimes
/// preloaded into the test process.
///
/// With `COLLAGE_CC_CACHE` set to a directory, libraries are kept there by the hash of their
/// source, compiler and flags, and a source compiled before is copied instead of compiled again
/// (benchmark scripts that build the same placement many times; the source is compared byte for
/// byte, so a hash collision only costs a compilation).
pub fn build_shared(c_path: &Path, out: &Path, opt: &str) -> Result<()> {
    build_shared_with(c_path, out, opt, &[])
}

/// [`build_shared`] with preprocessor symbols defined (`CL_PROFILE`: a profiled build).
pub fn build_shared_with(c_path: &Path, out: &Path, opt: &str, defines: &[&str]) -> Result<()> {
    let source = std::fs::read_to_string(c_path).unwrap_or_default();
    let cached = std::env::var_os("COLLAGE_CC_CACHE").map(|dir| {
        let key = crate::te::fnv64(&format!(
            "{}\0{}\0{opt} {} {} {}\0{source}",
            c_compiler(),
            c_compiler_version(),
            CFLAGS.join(" "),
            defines.join(" "),
            sanitizer_flags().join(" ")
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
    compile_shared(c_path, out, opt, defines, &link_libs(&source))?;
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

/// The flags `COLLAGE_SANITIZE` adds (none when it is unset or empty): the sanitizers, every
/// report an abort (`-fno-sanitize-recover=all`, so that a test fails, not only prints), frame
/// pointers and line tables for the reports' stacks.
pub fn sanitizer_flags() -> Vec<String> {
    match std::env::var("COLLAGE_SANITIZE") {
        Ok(s) if !s.trim().is_empty() => vec![
            format!("-fsanitize={}", s.trim()),
            "-fno-sanitize-recover=all".into(),
            "-fno-omit-frame-pointer".into(),
            "-g".into(),
        ],
        _ => Vec::new(),
    }
}

fn compile_shared(
    c_path: &Path,
    out: &Path,
    opt: &str,
    defines: &[&str],
    libs: &[String],
) -> Result<()> {
    let sanitizers = sanitizer_flags();
    // Sanitised code at -O1, as the sanitizers' manuals advise: a report is about the source, not
    // the optimiser, and big units compile in half the time.
    let level = if sanitizers.is_empty() { opt } else { "-O1" };
    let res = Command::new(c_compiler())
        .arg(level)
        .args(CFLAGS)
        .args(sanitizers)
        // The sanitiser job preloads the sanitizers' runtimes into the test process (a library
        // built with them must find them loaded first); the compiler need not run under them.
        .env_remove("LD_PRELOAD")
        // At -O1 without a chosen variant, the baseline alone (half the C to compile); a
        // caller that chooses one (`Isa::defines`, a test of a variant's plans) gets it.
        .args(if opt == "-O1" && defines.is_empty() {
            &["-DCOLLAGE_NO_DISPATCH"][..]
        } else {
            &[][..]
        })
        .args(defines.iter().map(|d| format!("-D{d}")))
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
