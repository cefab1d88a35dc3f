//! Running a compiled model inside the compiler process: the C code is built into a shared
//! library with the system C compiler ([`crate::toolchain`]) and loaded. Used by `collage run`,
//! `conformance` and `bench`, and by the measurement harness (`tune::measure`).
use std::path::{Path, PathBuf};

use collage_runtime::{Aligned, Arena, Executor, RawRt};

use crate::codegen::{Compiled, Io};
use crate::error::{io_err, Error, Result};
use crate::ir::Tensor;
use crate::toolchain::build_shared_with;

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

/// A profiled build's kernel counters inside its loaded library.
struct Counters {
    ptr: *mut u64,
    len: usize,
}

// SAFETY: the counters belong to the library its `NativeModel` owns, and are read or written only
// through `&mut NativeModel` (its runs and `take_profile`), so one thread at a time.
unsafe impl Send for Counters {}

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
    /// A profiled build's counters (`collage_<symbol>_profile_ns`, one per buffer id).
    profile: Option<Counters>,
}

impl NativeModel {
    /// Writes the C source to `dir`, compiles it and loads it.
    pub fn build(c: &Compiled, dir: &Path, opt: &str) -> Result<Self> {
        Self::build_with(c, dir, opt, false)
    }

    /// [`NativeModel::build`], with `profiled` a build whose run function times every kernel
    /// (`CL_PROFILE`; read with [`NativeModel::take_profile`]).
    pub fn build_with(c: &Compiled, dir: &Path, opt: &str, profiled: bool) -> Result<Self> {
        let defines: &[&str] = if profiled { &["CL_PROFILE"] } else { &[] };
        Self::build_defines(c, dir, opt, defines)
    }

    /// [`NativeModel::build`] with preprocessor symbols defined: `Isa::defines` makes the code
    /// run a narrower instruction-set variant than this machine's widest (a test of that
    /// variant's plans); `CL_PROFILE` times every kernel ([`NativeModel::build_with`]).
    pub fn build_defines(c: &Compiled, dir: &Path, opt: &str, defines: &[&str]) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let c_path = dir.join(format!("{}.c", c.symbol));
        std::fs::write(&c_path, &c.c_source).map_err(io_err(&c_path))?;
        let so = dir.join(format!("lib{}.so", c.symbol));
        build_shared_with(&c_path, &so, opt, defines)?;
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
        let profile = if defines.contains(&"CL_PROFILE") {
            let sym = format!("collage_{}_profile_ns", c.symbol);
            // SAFETY: a profiled build defines the counters as `uint64_t[max(1, bufs)]`.
            let counters =
                unsafe { lib.get::<*mut u64>(sym.as_bytes()) }.map_err(|e| Error::Load {
                    path: so.clone(),
                    detail: e.to_string(),
                })?;
            Some(Counters {
                ptr: *counters,
                len: c.program.bufs.len().max(1),
            })
        } else {
            None
        };
        Ok(NativeModel {
            profile,
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

    /// A profiled build's nanoseconds per kernel (indexed by stage id) summed over the runs
    /// since the last call, which resets them; `None` for a build without profiling.
    pub fn take_profile(&mut self) -> Option<Vec<u64>> {
        let c = self.profile.as_ref()?;
        // SAFETY: the counters live in the loaded library (kept alive by `self`), hold `len`
        // entries, and no run is in progress (`&mut self`).
        let counters = unsafe { std::slice::from_raw_parts_mut(c.ptr, c.len) };
        let v = counters.to_vec();
        counters.fill(0);
        Some(v)
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

/// A model compiled over a range of one dimension ([`crate::te::Ranged`]), loaded: it takes
/// its inputs at their run-time shapes, reads the dimension's size from them, and returns its
/// outputs at theirs.
pub struct RangedModel {
    model: NativeModel,
    ranged: crate::te::Ranged,
}

impl RangedModel {
    /// Writes the C source of `c` (the C of `ranged`) to `dir`, compiles it and loads it.
    pub fn build(c: &Compiled, ranged: &crate::te::Ranged, dir: &Path, opt: &str) -> Result<Self> {
        Self::build_with(c, ranged, dir, opt, false)
    }

    /// [`RangedModel::build`], `profiled` a build that times every kernel
    /// ([`RangedModel::take_profile`]).
    pub fn build_with(
        c: &Compiled,
        ranged: &crate::te::Ranged,
        dir: &Path,
        opt: &str,
        profiled: bool,
    ) -> Result<Self> {
        Ok(RangedModel {
            model: NativeModel::build_with(c, dir, opt, profiled)?,
            ranged: ranged.clone(),
        })
    }

    /// A profiled build's nanoseconds per kernel since the last call ([`NativeModel::take_profile`]).
    pub fn take_profile(&mut self) -> Option<Vec<u64>> {
        self.model.take_profile()
    }

    /// The range served: the dimension's name and its smallest and largest sizes.
    pub fn range(&self) -> (&str, usize, usize) {
        (&self.ranged.dim, self.ranged.lo, self.ranged.hi)
    }

    /// The model's inputs (the parameters left out).
    fn model_inputs(&self) -> &[crate::te::BufId] {
        let p = &self.ranged.program;
        &p.inputs[..p.inputs.len() - 1]
    }

    /// The dimension's size that `inputs` give it, checked against the range and against
    /// every input's shape at that size.
    pub fn size_of(&self, inputs: &[Tensor]) -> Result<usize> {
        let r = &self.ranged;
        let ids = self.model_inputs();
        let err = |name: &str, detail: String| Error::Data {
            name: name.to_string(),
            detail,
        };
        if inputs.len() != ids.len() {
            return Err(err(
                "*",
                format!("the model takes {} inputs, got {}", ids.len(), inputs.len()),
            ));
        }
        let unit = crate::te::Sym::affine(1, 0);
        let d = ids
            .iter()
            .zip(inputs)
            .find_map(|(&b, t)| {
                let k = r.shapes[b.index()]
                    .iter()
                    .position(|e| r.sym_of(e) == Some(unit))?;
                t.ty.shape.get(k).copied()
            })
            .ok_or_else(|| {
                err(
                    "*",
                    format!("no input has `{}` as one of its dimensions", r.dim),
                )
            })?;
        if !(r.lo..=r.hi).contains(&d) {
            return Err(err(
                "*",
                format!(
                    "`{}` = {d} is outside the range {}..={} the model was compiled for",
                    r.dim, r.lo, r.hi
                ),
            ));
        }
        for ((&b, t), name) in ids.iter().zip(inputs).zip(&r.program.input_names) {
            let want =
                crate::ir::TensorType::new(r.program.bufs[b.index()].ty.dtype, r.shape_at(b, d));
            if t.ty != want {
                return Err(err(
                    name,
                    format!("expected {want} (`{}` = {d}), got {}", r.dim, t.ty),
                ));
            }
        }
        Ok(d)
    }

    /// Runs the model on `inputs` at their run-time shapes; the outputs at theirs.
    pub fn run(&mut self, inputs: &[Tensor], exec: &Executor) -> Result<Vec<Tensor>> {
        let d = self.size_of(inputs)?;
        let size = d as i64;
        let mut ptrs: Vec<*const u8> = inputs.iter().map(|t| t.data.as_ptr()).collect();
        ptrs.push(&size as *const i64 as *const u8);
        let mut rt = exec.raw();
        self.model.state.bind(&mut rt, exec.threads());
        // SAFETY: the arena and weights have the sizes the code was generated for (the
        // largest size's), the inputs have the shapes the code reads at size `d` (checked),
        // and `I[n]` points to the size as the generated entry point expects.
        unsafe {
            (self.model.run)(
                &rt,
                self.model.arena.as_mut_ptr(),
                self.model.weights.as_ptr() as *const u8,
                ptrs.as_ptr(),
            )
        };
        let r = &self.ranged;
        Ok(r.program
            .outputs
            .iter()
            .zip(&self.model.outputs)
            .map(|(&b, o)| {
                let ty = crate::ir::TensorType::new(o.ty.dtype, r.shape_at(b, d));
                let n = ty.bytes();
                // SAFETY: the output lies inside the arena at the planned offset, packed at its
                // run-time shape, which is no larger than the largest size's.
                let bytes = unsafe {
                    std::slice::from_raw_parts(self.model.arena.as_ptr().add(o.offset), n)
                }
                .to_vec();
                Tensor::from_bytes(ty, bytes).expect("size matches")
            })
            .collect())
    }
}
