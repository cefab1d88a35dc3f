//! What the fuzz targets share: the compile options and the pipeline from a graph to generated
//! source text.
use std::path::Path;

use collage_build::driver::{self, Options};
use collage_build::ir::Graph;
use collage_build::tune::TargetFingerprint;

/// The largest tensor (and arena) a fuzzed model may have: small, so that no input can make the
/// compiler allocate gigabytes legitimately.
pub const MAX_TENSOR_BYTES: u64 = 4 << 20;

/// A folder that does not exist: a fuzzed model's external data and DSL weight files are looked
/// up under it and are never found.
pub const NOWHERE: &str = "/nonexistent-collage-fuzz";

/// The model path given to the importer (errors name it; external data is looked up beside it).
pub fn model_path() -> &'static Path {
    Path::new("/nonexistent-collage-fuzz/model.onnx")
}

/// Generated C on the `c` backend, placement by search, no cost cache, no C compiler run.
pub fn options() -> Options {
    Options {
        backends: "c".into(),
        greedy: false,
        cache: None,
        // This machine without running `cc --version`.
        target: Some(TargetFingerprint::current("fuzz")),
        threads: 1,
        max_tensor_bytes: MAX_TENSOR_BYTES,
        schedule_seed: None,
        no_layout: false,
        no_groups: false,
        no_winograd: false,
        bindings: Default::default(),
    }
}

/// Compiles `g` up to the generated C and Rust glue. Errors are fine (bad input); panics,
/// hangs and huge allocations are findings.
pub fn compile_to_source(g: Graph) {
    let Ok(c) = driver::compile(g, "fuzz", &options()) else {
        return;
    };
    assert!(!c.c_source.is_empty(), "a compiled model has C source");
    let glue = collage_build::codegen::rust::emit(&c, "fuzz.weights");
    assert!(!glue.is_empty(), "a compiled model has Rust glue");
    assert!(
        c.arena_size as u64 <= MAX_TENSOR_BYTES,
        "arena of {} bytes over the limit",
        c.arena_size
    );
}

/// Run once before fuzzing (`fuzz_target!(init: ..)`): gives the thread an alternate signal
/// stack and marks SIGSEGV's handler to run on it, a flag libFuzzer keeps when it installs its
/// own. Rust's runtime does this in its `main`, which a fuzz target (libFuzzer's `main`) never
/// runs: without it a stack overflow kills the process with no report and no reproducer. A
/// sanitizer that handles SIGSEGV already (AddressSanitizer) is left alone.
pub fn init() {
    const SIZE: usize = 1 << 18;
    // SAFETY: plain libc calls on zeroed or filled-in structs; the alternate stack is leaked, so
    // it lives as long as the process, and is big enough for libFuzzer's crash handler.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut old) != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return;
        }
        let stack: &'static mut [u8] = Box::leak(vec![0u8; SIZE].into_boxed_slice());
        let ss = libc::stack_t {
            ss_sp: stack.as_mut_ptr().cast(),
            ss_flags: 0,
            ss_size: SIZE,
        };
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        sa.sa_flags = libc::SA_ONSTACK;
        let ok = libc::sigaltstack(&ss, std::ptr::null_mut()) == 0
            && libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut()) == 0;
        assert!(ok, "cannot set up the alternate signal stack");
    }
}

/// The largest single allocation a fuzz target may make. The inputs are at most 1 MiB and every
/// tensor at most [`MAX_TENSOR_BYTES`], so an allocation this large means a size the compiler
/// took from the input without checking it: the target aborts (a crash libFuzzer reports) instead
/// of allocating. This also works without a sanitizer, whose allocator would otherwise enforce
/// libFuzzer's `-malloc_limit_mb`.
pub const MAX_ALLOCATION: usize = 256 << 20;

/// mimalloc (the system allocator with the `system-allocator` feature), refusing allocations over
/// [`MAX_ALLOCATION`]. Not the system allocator by default: without a sanitizer, libFuzzer's
/// timeout handler runs in the signal handler and allocates with glibc's `malloc`; had the alarm
/// interrupted the target inside that same `malloc`, it would deadlock instead of reporting.
pub struct CappedAlloc;

fn check_size(size: usize) {
    if size > MAX_ALLOCATION {
        eprintln!(
            "==collage-fuzz== allocation of {size} bytes, over the limit of {MAX_ALLOCATION}"
        );
        std::process::abort();
    }
}

#[cfg(not(feature = "system-allocator"))]
use mimalloc::MiMalloc as Inner;
#[cfg(feature = "system-allocator")]
use std::alloc::System as Inner;

// SAFETY: every call goes to the inner allocator unchanged, after a size check that only aborts.
unsafe impl std::alloc::GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        check_size(layout.size());
        // SAFETY: the caller's contract is the inner allocator's.
        unsafe { Inner.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        check_size(layout.size());
        // SAFETY: as above.
        unsafe { Inner.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        check_size(new_size);
        // SAFETY: as above.
        unsafe { Inner.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as above.
        unsafe { Inner.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CappedAlloc = CappedAlloc;
