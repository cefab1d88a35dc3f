//! A small persistent thread pool for generated `parallel_for` loops.
//!
//! Workers are started once; a call publishes one job (a task pointer, its context and the range),
//! and the caller waits until every chunk is done — not until every worker has looked: a worker
//! the OS has not scheduled yet (another process on its core) costs nothing when the others took
//! its share.
//!
//! The range is cut into one contiguous share per thread (the caller is thread 0), and each thread
//! claims chunks of its own share first, in order, from that share's atomic counter; then it
//! claims what is left of the others'. So thread `t` runs the `t`-th slice of every loop unless
//! another thread was late: the generated kernels order their iterations by output position
//! (row bands, pixel tiles), so a layer reads mostly what the same core wrote in the layer before,
//! from its own cache, instead of half of it from the other cores'. The counters never go back:
//! job `k` owns the claims `[base_k, base_k + stride_k)` of every share's counter, and when it is
//! done each counter is moved to `base_k + stride_k`, where the next job starts, so a worker that
//! wakes late with a finished job's description finds nothing left to claim and never runs a
//! stale task. No allocation happens per call. Workers spin briefly on the job
//! counter before sleeping, and the caller spins before waiting, so back-to-back loops of one model
//! run do not pay a sleep/wake-up each (tens of microseconds); both yield their core now and then
//! while spinning, so that a thread sharing it (the caller, or a worker with a chunk) runs.
//!
//! One pool may serve several models on several threads: calls take turns, one loop at a time.
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::vec::Vec;

use crate::abi::{RawRt, Task};

#[derive(Clone, Copy)]
struct Job {
    task: Task,
    ctx: *mut c_void,
    /// The job's claims are `[base, base + stride)` of each share's counter in
    /// [`Shared::shares`]; claim `c` of share `t` is iteration `t * stride + c - base`.
    base: u64,
    n: u64,
    /// Iterations per share (the last share may be shorter, or empty).
    stride: u64,
    chunk: u64,
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

/// Spin iterations between two yields of the core.
const YIELD_EVERY: u32 = 1 << 8;

/// One spin of a wait loop: a pause, and every [`YIELD_EVERY`] spins a yield of the core.
fn spin(spins: u32) {
    if spins % YIELD_EVERY == YIELD_EVERY - 1 {
        std::thread::yield_now();
    } else {
        core::hint::spin_loop();
    }
}

struct Shared {
    state: Mutex<State>,
    /// Mirrors `State::generation` for lock-free polling.
    published: AtomicU64,
    /// Workers blocked on `start` (a call notifies only when some are).
    sleepers: AtomicUsize,
    /// The caller is blocked on `done` (the thread finishing the last chunk notifies only then).
    caller_waiting: AtomicBool,
    /// Workers that have started.
    started: AtomicUsize,
    start: Condvar,
    /// Each thread's share's next claim: they only ever grow (see [`Job::base`]).
    shares: Vec<AtomicU64>,
    /// Where every share's counter stands between jobs: the next job's base.
    base: AtomicU64,
    /// Iterations of the current job done.
    finished: AtomicU64,
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
            shares: (0..threads.max(1)).map(|_| AtomicU64::new(0)).collect(),
            base: AtomicU64::new(0),
            finished: AtomicU64::new(0),
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
                        worker(&s, i)
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
        let n = n as u64;
        let stride = n.div_ceil(threads as u64);
        let chunk = stride.div_ceil(4).max(1);
        let sh = &*self.shared;
        // The last job moved every share's counter to its end, which is this job's base.
        let base = sh.base.load(Ordering::SeqCst);
        let job = Job {
            task,
            ctx,
            base,
            n,
            stride,
            chunk,
        };
        sh.finished.store(0, Ordering::SeqCst);
        {
            let mut st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
            st.job = Some(job);
            st.generation += 1;
            sh.published.store(st.generation, Ordering::SeqCst);
        }
        if sh.sleepers.load(Ordering::SeqCst) > 0 {
            sh.start.notify_all();
        }
        run_chunks(sh, job, 0);
        let mut spins = 0;
        while sh.finished.load(Ordering::SeqCst) != n && spins < SPIN {
            spin(spins);
            spins += 1;
        }
        if sh.finished.load(Ordering::SeqCst) != n {
            let mut g = sh.done_lock.lock().unwrap_or_else(|e| e.into_inner());
            sh.caller_waiting.store(true, Ordering::SeqCst);
            while sh.finished.load(Ordering::SeqCst) != n {
                g = sh.done.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            sh.caller_waiting.store(false, Ordering::SeqCst);
            drop(g);
        }
        // Every claim of this job succeeded; move each counter past the job's range (a late worker
        // still holding this job then finds nothing, and the next job starts there).
        for share in &sh.shares {
            share.fetch_max(base + stride, Ordering::SeqCst);
        }
        sh.base.store(base + stride, Ordering::SeqCst);
        sh.state.lock().unwrap_or_else(|e| e.into_inner()).job = None;
    }
}

/// Claims and runs chunks of `job` until none is left: first of thread `me`'s own share, then of
/// the others' in turn.
fn run_chunks(sh: &Shared, job: Job, me: usize) {
    let threads = sh.shares.len();
    for k in 0..threads {
        run_share(sh, job, (me + k) % threads);
    }
}

/// Claims and runs chunks of share `t` of `job` until none is left. A claim is a compare-and-swap
/// that never passes the share's end, so a claim outside the job's range (the counter has moved
/// on to a later job) fails.
fn run_share(sh: &Shared, job: Job, t: usize) {
    let first = t as u64 * job.stride;
    let len = job.n.saturating_sub(first).min(job.stride);
    let end = job.base + len;
    let counter = &sh.shares[t];
    let mut at = counter.load(Ordering::SeqCst);
    loop {
        if at < job.base || at >= end {
            return;
        }
        let to = (at + job.chunk).min(end);
        match counter.compare_exchange_weak(at, to, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => {
                let (b, e) = (first + at - job.base, first + to - job.base);
                // SAFETY: see `ThreadPool::run`: the caller blocks until every claimed chunk is
                // done, which keeps `ctx` alive; claimed ranges are disjoint.
                unsafe { (job.task)(job.ctx, b as i64, e as i64) };
                let done = sh.finished.fetch_add(to - at, Ordering::SeqCst) + (to - at);
                if done == job.n && sh.caller_waiting.load(Ordering::SeqCst) {
                    let _g = sh.done_lock.lock().unwrap_or_else(|e| e.into_inner());
                    sh.done.notify_all();
                }
                at = counter.load(Ordering::SeqCst);
            }
            Err(now) => at = now,
        }
    }
}

fn worker(sh: &Shared, me: usize) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0;
        while sh.published.load(Ordering::SeqCst) == seen && spins < SPIN {
            spin(spins);
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
            run_chunks(sh, job, me);
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

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU32;
    use std::sync::Arc;
    use std::vec::Vec;

    /// Counts each iteration it is given, after a short wait (so that chunks are still running
    /// on other threads when the caller's share is done).
    unsafe extern "C" fn count(ctx: *mut c_void, begin: i64, end: i64) {
        // SAFETY: every caller passes a `Vec<AtomicU32>` of at least `end` entries.
        let hits = unsafe { &*(ctx as *const Vec<AtomicU32>) };
        for h in &hits[begin as usize..end as usize] {
            for _ in 0..100 {
                core::hint::spin_loop();
            }
            h.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Runs `n` iterations on `pool` and checks each ran exactly once.
    fn once_each(pool: &ThreadPool, n: usize) {
        let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
        let rt = pool.raw();
        let ctx = &hits as *const Vec<AtomicU32> as *mut c_void;
        // SAFETY: `count` reads `ctx` as the vector it is, which outlives the call.
        unsafe { (rt.parallel_for)(rt.pool, n as i64, count, ctx) };
        for (i, h) in hits.iter().enumerate() {
            assert_eq!(h.load(Ordering::SeqCst), 1, "iteration {i} of {n}");
        }
    }

    #[test]
    fn every_iteration_runs_exactly_once() {
        for threads in 1..=5 {
            let pool = ThreadPool::new(threads);
            for n in [0, 1, 2, 3, 7, 8, 9, 64, 100, 1000, 4097] {
                for _ in 0..20 {
                    once_each(&pool, n);
                }
            }
        }
    }

    /// More threads than this machine has cores: workers are often not scheduled when a loop
    /// starts or ends, and wake with a finished job's description.
    #[test]
    fn oversubscribed_pools_run_every_iteration_once() {
        let pool = ThreadPool::new(12);
        for i in 0..2000 {
            once_each(&pool, 1 + i % 97);
        }
    }

    /// One pool, loops from several threads at once: they take turns, each whole.
    #[test]
    fn a_shared_pool_serves_several_threads() {
        let pool = Arc::new(ThreadPool::new(3));
        let callers: Vec<_> = (0..4)
            .map(|t| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    for i in 0..300 {
                        once_each(&pool, 1 + (i * 7 + t) % 211);
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().expect("a caller thread");
        }
    }
}
