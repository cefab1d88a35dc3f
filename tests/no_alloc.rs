//! `Model::run` performs no heap allocation (a counting global allocator), serially and on the pool.
//!
//! This test binary has its own `main` (`harness = false` in Cargo.toml): the libtest harness
//! allocates on its own threads while tests run, which a process-wide counter would see.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::SeqCst) {
            ALLOCS.fetch_add(1, Ordering::SeqCst);
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNTING.load(Ordering::SeqCst) {
            ALLOCS.fetch_add(1, Ordering::SeqCst);
        }
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

unsafe extern "C" fn touch(ctx: *mut core::ffi::c_void, begin: i64, end: i64) {
    let sum = unsafe { &*(ctx as *const std::sync::atomic::AtomicI64) };
    sum.fetch_add(end - begin, Ordering::SeqCst);
}

fn thread_pool_loops_do_not_allocate() {
    let exec = collage_runtime::Executor::with_threads(2);
    let rt = exec.raw();
    let sum = std::sync::atomic::AtomicI64::new(0);
    let ctx = &sum as *const _ as *mut core::ffi::c_void;
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..100 {
        // SAFETY: `touch` reads `ctx` as the AtomicI64 it is.
        unsafe { (rt.parallel_for)(rt.pool, 1000, touch, ctx) };
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(ALLOCS.load(Ordering::SeqCst), 0, "parallel_for allocated");
    assert_eq!(
        sum.load(Ordering::SeqCst),
        100 * 1000,
        "every iteration ran exactly once"
    );
}

fn run_does_not_allocate() {
    let x = example_mnist::sample_digit();
    for threads in [1, 2] {
        let mut m = example_mnist::Mnist::with_threads(threads);
        let first = m.run(&x)[0];
        ALLOCS.store(0, Ordering::SeqCst);
        COUNTING.store(true, Ordering::SeqCst);
        let mut sum = 0.0;
        for _ in 0..20 {
            sum += m.run(&x)[0][0];
        }
        COUNTING.store(false, Ordering::SeqCst);
        assert_eq!(
            ALLOCS.load(Ordering::SeqCst),
            0,
            "run allocated with {threads} thread(s)"
        );
        assert!(sum.is_finite() && first.iter().all(|v| v.is_finite()));
    }
}

fn main() {
    thread_pool_loops_do_not_allocate();
    run_does_not_allocate();
    println!("no_alloc: 2 passed, 0 failed");
}
