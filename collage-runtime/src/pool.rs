//! A small persistent thread pool for generated `parallel_for` loops.
//!
//! Workers are started once; a call publishes one job (a task pointer, its context and the range),
//! every thread (the caller too) takes chunks from an atomic counter, and the caller waits until all
//! chunks are done. No allocation happens per call. Workers spin briefly on the job counter before
//! sleeping, and the caller spins before waiting, so back-to-back loops of one model run do not pay
//! a sleep/wake-up each (tens of microseconds).
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::vec::Vec;

use crate::abi::{RawRt, Task};

#[derive(Clone, Copy)]
struct Job {
    task: Task,
    ctx: *mut c_void,
    n: i64,
    chunk: i64,
}

struct State {
    generation: u64,
    job: Option<Job>,
    shutdown: bool,
}

// SAFETY: the context pointer is only dereferenced by the task while the caller of `parallel_for`
// blocks, which keeps the pointee alive; the task is a plain function.
unsafe impl Send for State {}

/// Spin iterations before a worker sleeps or the caller waits on a condition variable.
const SPIN: u32 = 1 << 16;

struct Shared {
    state: Mutex<State>,
    /// Mirrors `State::generation` for lock-free polling.
    published: AtomicU64,
    /// Workers blocked on `start` (a call notifies only when some are).
    sleepers: AtomicUsize,
    /// The caller is blocked on `done` (the last worker notifies only then).
    caller_waiting: AtomicBool,
    /// Workers that have started.
    started: AtomicUsize,
    start: Condvar,
    next: AtomicI64,
    busy: AtomicUsize,
    done_lock: Mutex<()>,
    done: Condvar,
}

/// A fixed set of worker threads plus the calling thread.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    call: Mutex<()>,
}

impl core::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads())
            .finish()
    }
}

impl ThreadPool {
    /// A pool whose loops run on `threads` threads (the caller plus `threads - 1` workers).
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                generation: 0,
                job: None,
                shutdown: false,
            }),
            published: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            caller_waiting: AtomicBool::new(false),
            started: AtomicUsize::new(0),
            start: Condvar::new(),
            next: AtomicI64::new(0),
            busy: AtomicUsize::new(0),
            done_lock: Mutex::new(()),
            done: Condvar::new(),
        });
        let workers: Vec<JoinHandle<()>> = (1..threads.max(1))
            .map(|i| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(std::format!("collage-{i}"))
                    .spawn(move || {
                        s.started.fetch_add(1, Ordering::SeqCst);
                        worker(&s)
                    })
                    .expect("spawn collage worker thread")
            })
            .collect();
        // Return only once every worker runs, so that thread start-up (which allocates) never
        // overlaps a later `run`.
        while shared.started.load(Ordering::SeqCst) < workers.len() {
            std::thread::yield_now();
        }
        ThreadPool {
            shared,
            workers,
            call: Mutex::new(()),
        }
    }

    /// Threads in all, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// The C context that routes `parallel_for` to this pool.
    pub fn raw(&self) -> RawRt {
        RawRt {
            pool: self as *const ThreadPool as *const c_void,
            parallel_for: pool_parallel_for,
            sgemm: crate::abi::sgemm,
            threads: self.threads() as i64,
            lib: core::ptr::null_mut(),
        }
    }

    fn run(&self, n: i64, task: Task, ctx: *mut c_void) {
        if n <= 0 {
            return;
        }
        let threads = self.threads() as i64;
        if threads == 1 || n == 1 {
            // SAFETY: the generated caller guarantees `task`/`ctx` form a valid pair.
            unsafe { task(ctx, 0, n) };
            return;
        }
        let _one_at_a_time = self.call.lock().unwrap_or_else(|e| e.into_inner());
        let chunk = (n + threads * 4 - 1) / (threads * 4);
        let sh = &*self.shared;
        sh.next.store(0, Ordering::SeqCst);
        sh.busy.store(self.workers.len(), Ordering::SeqCst);
        {
            let mut st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
            st.job = Some(Job {
                task,
                ctx,
                n,
                chunk: chunk.max(1),
            });
            st.generation += 1;
            sh.published.store(st.generation, Ordering::SeqCst);
        }
        if sh.sleepers.load(Ordering::SeqCst) > 0 {
            sh.start.notify_all();
        }
        run_chunks(
            sh,
            Job {
                task,
                ctx,
                n,
                chunk: chunk.max(1),
            },
        );
        let mut spins = 0;
        while sh.busy.load(Ordering::SeqCst) != 0 && spins < SPIN {
            core::hint::spin_loop();
            spins += 1;
        }
        if sh.busy.load(Ordering::SeqCst) != 0 {
            let mut g = sh.done_lock.lock().unwrap_or_else(|e| e.into_inner());
            sh.caller_waiting.store(true, Ordering::SeqCst);
            while sh.busy.load(Ordering::SeqCst) != 0 {
                g = sh.done.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            sh.caller_waiting.store(false, Ordering::SeqCst);
            drop(g);
        }
        sh.state.lock().unwrap_or_else(|e| e.into_inner()).job = None;
    }
}

fn run_chunks(sh: &Shared, job: Job) {
    loop {
        let b = sh.next.fetch_add(job.chunk, Ordering::SeqCst);
        if b >= job.n {
            break;
        }
        let e = (b + job.chunk).min(job.n);
        // SAFETY: see `ThreadPool::run`; ranges are disjoint.
        unsafe { (job.task)(job.ctx, b, e) };
    }
}

fn worker(sh: &Shared) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0;
        while sh.published.load(Ordering::SeqCst) == seen && spins < SPIN {
            core::hint::spin_loop();
            spins += 1;
        }
        let job = {
            let mut st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
            while st.generation == seen && !st.shutdown {
                sh.sleepers.fetch_add(1, Ordering::SeqCst);
                st = sh.start.wait(st).unwrap_or_else(|e| e.into_inner());
                sh.sleepers.fetch_sub(1, Ordering::SeqCst);
            }
            if st.shutdown {
                return;
            }
            seen = st.generation;
            st.job
        };
        if let Some(job) = job {
            run_chunks(sh, job);
        }
        if sh.busy.fetch_sub(1, Ordering::SeqCst) == 1 && sh.caller_waiting.load(Ordering::SeqCst) {
            let _g = sh.done_lock.lock().unwrap_or_else(|e| e.into_inner());
            sh.done.notify_all();
        }
    }
}

unsafe extern "C" fn pool_parallel_for(pool: *const c_void, n: i64, task: Task, ctx: *mut c_void) {
    // SAFETY: `pool` was produced by `ThreadPool::raw` on a pool that outlives the call.
    let pool = unsafe { &*(pool as *const ThreadPool) };
    pool.run(n, task, ctx);
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shutdown = true;
        self.shared.start.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
