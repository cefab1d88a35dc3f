//! The C ABI shared with generated kernels.
use core::ffi::c_void;

/// A loop body the generated C code hands to `parallel_for`: runs iterations `begin..end`.
pub type Task = unsafe extern "C" fn(ctx: *mut c_void, begin: i64, end: i64);

/// The runtime context passed to every generated entry point (`collage_rt` in C).
///
/// `parallel_for(pool, n, task, ctx)` must call `task(ctx, b, e)` on disjoint ranges covering
/// `0..n` and return only when all have finished.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawRt {
    /// Opaque pointer handed back to `parallel_for`.
    pub pool: *const c_void,
    /// Runs `task` over `0..n`.
    pub parallel_for:
        unsafe extern "C" fn(pool: *const c_void, n: i64, task: Task, ctx: *mut c_void),
    /// The `gemm` backend's matrix product ([`SgemmFn`]), single-threaded (kernels call it from
    /// inside their own `parallel_for` blocks).
    pub sgemm: SgemmFn,
    /// How many threads `parallel_for` runs on (1 for the serial executor): library calls size
    /// their blocks by it.
    pub threads: i64,
    /// The model instance's library state ([`Library`]: oneDNN primitives created with the
    /// model), or null: generated code then uses one process-wide state behind a lock.
    pub lib: *mut c_void,
}

/// State that generated code creates for one model instance (the `dnnl` backend's primitives,
/// built once so that `run` creates nothing) and frees when the instance is dropped.
#[derive(Debug)]
pub struct Library {
    ptr: *mut c_void,
    free: unsafe extern "C" fn(*mut c_void),
}

// SAFETY: the state is only used through `RawRt::lib` by one `run` at a time (`run` borrows the
// model mutably), from whichever thread; it holds no thread-affine resources.
unsafe impl Send for Library {}
// SAFETY: shared references give out only the pointer value.
unsafe impl Sync for Library {}

impl Library {
    /// Takes ownership of `ptr`, to be released with `free`.
    ///
    /// # Safety
    /// `ptr` must come from the generated constructor that `free` belongs to.
    pub unsafe fn new(ptr: *mut c_void, free: unsafe extern "C" fn(*mut c_void)) -> Self {
        Library { ptr, free }
    }

    /// The pointer to hand to generated code in [`RawRt::lib`].
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: `new`'s contract: `free` releases `ptr`, exactly once.
        unsafe { (self.free)(self.ptr) }
    }
}

/// `c[i * ldc + j] = sum_p a[i * a_rs + p * a_cs] * b[p * b_rs + j * b_cs]` for `i < m, j < n`.
pub type SgemmFn = unsafe extern "C" fn(
    m: i64,
    n: i64,
    k: i64,
    a: *const f32,
    a_rs: i64,
    a_cs: i64,
    b: *const f32,
    b_rs: i64,
    b_cs: i64,
    c: *mut f32,
    ldc: i64,
);

/// Whether [`RawRt::sgemm`] is the optimised `gemm` crate (feature `gemm`): generated code that
/// places kernels on the `gemm` backend asserts this at compile time.
pub const HAS_GEMM: bool = cfg!(feature = "gemm");

/// The `gemm` backend's product.
///
/// # Safety
/// The pointers must be valid for the strided extents described by the arguments, and `c` must
/// not overlap `a` or `b`.
pub unsafe extern "C" fn sgemm(
    m: i64,
    n: i64,
    k: i64,
    a: *const f32,
    a_rs: i64,
    a_cs: i64,
    b: *const f32,
    b_rs: i64,
    b_cs: i64,
    c: *mut f32,
    ldc: i64,
) {
    if m <= 0 || n <= 0 {
        return;
    }
    #[cfg(feature = "gemm")]
    {
        // SAFETY: forwarded from the caller's contract; `read_dst = false` overwrites `c`.
        unsafe {
            gemm::gemm(
                m as usize,
                n as usize,
                k as usize,
                c,
                1,
                ldc as isize,
                false,
                a,
                a_cs as isize,
                a_rs as isize,
                b,
                b_cs as isize,
                b_rs as isize,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    }
    #[cfg(not(feature = "gemm"))]
    {
        // Reference loops; generated code never selects this (it asserts HAS_GEMM).
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0f32;
                for p in 0..k {
                    // SAFETY: in bounds by the caller's contract.
                    unsafe {
                        acc += *a.offset((i * a_rs + p * a_cs) as isize)
                            * *b.offset((p * b_rs + j * b_cs) as isize)
                    };
                }
                // SAFETY: as above.
                unsafe { *c.offset((i * ldc + j) as isize) = acc };
            }
        }
    }
}

/// The serial `parallel_for`: one call over the whole range.
///
/// # Safety
/// `task` and `ctx` must be a valid pair produced by generated code.
pub unsafe extern "C" fn serial_parallel_for(
    _pool: *const c_void,
    n: i64,
    task: Task,
    ctx: *mut c_void,
) {
    if n > 0 {
        task(ctx, 0, n);
    }
}

/// How a model runs its parallel loops: serially, or on a thread pool (`std`).
#[derive(Debug, Default)]
pub enum Executor {
    /// Every loop runs on the calling thread.
    #[default]
    Serial,
    /// Loops are split across the pool's threads and the caller.
    #[cfg(feature = "std")]
    Pool(crate::ThreadPool),
    /// Loops are split across a pool shared with other executors, on any threads: their loops
    /// take turns on it, one at a time (`Model::with_executor(Executor::Shared(pool.clone()))`
    /// for several models served by one set of threads).
    #[cfg(feature = "std")]
    Shared(std::sync::Arc<crate::ThreadPool>),
}

impl Executor {
    /// An executor with `threads` threads in all (the caller included); `threads <= 1` is serial,
    /// and so is every executor without the `std` feature (no threads to run on).
    pub fn with_threads(threads: usize) -> Self {
        #[cfg(feature = "std")]
        if threads > 1 {
            return Executor::Pool(crate::ThreadPool::new(threads));
        }
        let _ = threads;
        Executor::Serial
    }

    /// The number of threads loops run on.
    pub fn threads(&self) -> usize {
        match self {
            Executor::Serial => 1,
            #[cfg(feature = "std")]
            Executor::Pool(p) => p.threads(),
            #[cfg(feature = "std")]
            Executor::Shared(p) => p.threads(),
        }
    }

    /// The C context for one call; valid while `self` is borrowed.
    pub fn raw(&self) -> RawRt {
        match self {
            Executor::Serial => RawRt {
                pool: core::ptr::null(),
                parallel_for: serial_parallel_for,
                sgemm,
                threads: 1,
                lib: core::ptr::null_mut(),
            },
            #[cfg(feature = "std")]
            Executor::Pool(p) => p.raw(),
            #[cfg(feature = "std")]
            Executor::Shared(p) => p.raw(),
        }
    }
}
