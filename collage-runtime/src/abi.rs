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
        }
    }

    /// The C context for one call; valid while `self` is borrowed.
    pub fn raw(&self) -> RawRt {
        match self {
            Executor::Serial => RawRt {
                pool: core::ptr::null(),
                parallel_for: serial_parallel_for,
            },
            #[cfg(feature = "std")]
            Executor::Pool(p) => p.raw(),
        }
    }
}
