//! `Model::run` performs no heap allocation (a counting global allocator), serially and on the pool.
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

#[test]
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
