//! Running a compiled model inside the compiler process: the C code is built into a shared
//! library with the system C compiler and loaded. Used by `collage run`, `conformance` and `bench`.
use std::path::{Path, PathBuf};
use std::process::Command;

use collage_runtime::{Aligned, Arena, Executor, RawRt};

use crate::codegen::{Compiled, Io};
use crate::error::{io_err, Error, Result};
use crate::ir::Tensor;

type RunFn = unsafe extern "C" fn(
    rt: *const RawRt,
    arena: *mut u8,
    weights: *const u8,
    inputs: *const *const u8,
);

type LibNewFn = unsafe extern "C" fn(rt: *const RawRt) -> *mut std::ffi::c_void;
type LibFreeFn = unsafe extern "C" fn(lib: *mut std::ffi::c_void);

/// The per-instance library state of a loaded model (its oneDNN primitives), kept as the Rust
/// glue's `Model` keeps it: one for the executor's thread count, created on first use. Must be
/// dropped before the shared library it comes from is unloaded.
#[derive(Default)]
pub(crate) struct InstanceState {
    fns: Option<(LibNewFn, LibFreeFn)>,
    instance: Option<(usize, collage_runtime::Library)>,
}

impl InstanceState {
    /// The state functions of entry point `symbol` in `lib`, if the model has any.
    pub(crate) fn load(lib: &libloading::Library, symbol: &str) -> Self {
        let name = |suffix: &str| format!("collage_{symbol}_lib_{suffix}");
        // SAFETY: generated state functions have exactly these signatures.
        let fns = unsafe {
            match (
                lib.get::<LibNewFn>(name("new").as_bytes()),
                lib.get::<LibFreeFn>(name("free").as_bytes()),
            ) {
                (Ok(n), Ok(f)) => Some((*n, *f)),
                _ => None,
            }
        };
        InstanceState {
            fns,
            instance: None,
        }
    }

    /// Points `rt.lib` at the instance state for `threads` threads (built if needed).
    pub(crate) fn bind(&mut self, rt: &mut RawRt, threads: usize) {
        let Some((new, free)) = self.fns else {
            return;
        };
        if self.instance.as_ref().is_none_or(|(t, _)| *t != threads) {
            self.instance = None;
            // SAFETY: the constructor and destructor belong to the same entry point.
            let lib = unsafe { collage_runtime::Library::new(new(rt), free) };
            self.instance = Some((threads, lib));
        }
        rt.lib = self.instance.as_ref().expect("just built").1.as_ptr();
    }
}

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
        let key = crate::explain::fnv64(&format!(
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

/// A compiled model loaded into this process.
pub struct NativeModel {
    // First: dropped before the library is unloaded.
    state: InstanceState,
    _lib: libloading::Library,
    run: RunFn,
    arena: Arena,
    weights: Vec<Aligned<[u8; 64]>>,
    /// The model's inputs.
    pub inputs: Vec<Io>,
    /// The model's outputs.
    pub outputs: Vec<Io>,
    /// The shared library.
    pub path: PathBuf,
}

impl NativeModel {
    /// Writes the C source to `dir`, compiles it and loads it.
    pub fn build(c: &Compiled, dir: &Path, opt: &str) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let c_path = dir.join(format!("{}.c", c.symbol));
        std::fs::write(&c_path, &c.c_source).map_err(io_err(&c_path))?;
        let so = dir.join(format!("lib{}.so", c.symbol));
        build_shared(&c_path, &so, opt)?;
        // SAFETY: the library was just built from our generated C code, which has no constructors.
        let lib = unsafe { libloading::Library::new(&so) }.map_err(|e| Error::Load {
            path: so.clone(),
            detail: e.to_string(),
        })?;
        let sym = format!("collage_{}_run", c.symbol);
        // SAFETY: the generated entry point has exactly the `RunFn` signature.
        let run: RunFn = unsafe {
            *lib.get::<RunFn>(sym.as_bytes()).map_err(|e| Error::Load {
                path: so.clone(),
                detail: e.to_string(),
            })?
        };
        let mut weights = vec![Aligned([0u8; 64]); c.weights.len().div_ceil(64)];
        // SAFETY: `weights` holds at least `c.weights.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                c.weights.as_ptr(),
                weights.as_mut_ptr() as *mut u8,
                c.weights.len(),
            )
        };
        Ok(NativeModel {
            state: InstanceState::load(&lib, &c.symbol),
            _lib: lib,
            run,
            arena: Arena::new(c.arena_size),
            weights,
            inputs: c.inputs.clone(),
            outputs: c.outputs.clone(),
            path: so,
        })
    }

    /// Runs the model on `inputs` (checked against the signature) and returns copies of the outputs.
    pub fn run(&mut self, inputs: &[Tensor], exec: &Executor) -> Result<Vec<Tensor>> {
        self.check(inputs)?;
        self.run_unchecked(inputs, exec);
        Ok(self.outputs.iter().map(|o| self.output(o)).collect())
    }

    /// Checks that `inputs` match the signature.
    pub fn check(&self, inputs: &[Tensor]) -> Result<()> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::Data {
                name: "*".into(),
                detail: format!(
                    "the model takes {} inputs, got {}",
                    self.inputs.len(),
                    inputs.len()
                ),
            });
        }
        for (t, io) in inputs.iter().zip(&self.inputs) {
            if t.ty != io.ty {
                return Err(Error::Data {
                    name: io.name.clone(),
                    detail: format!("expected {}, got {}", io.ty, t.ty),
                });
            }
        }
        Ok(())
    }

    /// [`NativeModel::run`] without an instance state, as `Model::run_in` runs: a model with
    /// oneDNN primitives then uses the process-wide ones, under their lock.
    pub fn run_shared(&mut self, inputs: &[Tensor], exec: &Executor) -> Result<Vec<Tensor>> {
        self.check(inputs)?;
        self.call(inputs, exec.raw());
        Ok(self.outputs.iter().map(|o| self.output(o)).collect())
    }

    /// Runs without checking or copying outputs (for timing); `inputs` must match the signature.
    /// A model with library state runs on an instance of it, as `Model::run` does.
    pub fn run_unchecked(&mut self, inputs: &[Tensor], exec: &Executor) {
        let mut rt = exec.raw();
        self.state.bind(&mut rt, exec.threads());
        self.call(inputs, rt);
    }

    fn call(&mut self, inputs: &[Tensor], rt: RawRt) {
        let ptrs: Vec<*const u8> = inputs.iter().map(|t| t.data.as_ptr()).collect();
        // SAFETY: the arena and weights have the sizes the code was generated for and inputs match
        // the signature (checked by the caller).
        unsafe {
            (self.run)(
                &rt,
                self.arena.as_mut_ptr(),
                self.weights.as_ptr() as *const u8,
                ptrs.as_ptr(),
            )
        };
    }

    fn output(&self, o: &Io) -> Tensor {
        let n = o.ty.bytes();
        // SAFETY: the output lies inside the arena at the planned offset.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.arena.as_ptr().add(o.offset), n) }.to_vec();
        Tensor::from_bytes(o.ty.clone(), bytes).expect("size matches")
    }
}
