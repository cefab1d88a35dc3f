//! Generated models on many threads at once: a `Model` is `Send`; N threads x M runs, each thread
//! with its own models (serial and on their own pools) or all sharing one thread pool, give results
//! bit-identical to the same model run alone on one thread with the same thread count.
use std::sync::Arc;

use collage::runtime::{Executor, ThreadPool};
use example_mlp_dsl::Mlp;
use example_mnist::Mnist;

const THREADS: usize = 4;
const RUNS: usize = 25;

fn assert_send<T: Send + 'static>() {}

#[test]
fn models_are_send() {
    assert_send::<Mnist>();
    assert_send::<Mlp>();
}

/// A digit image that differs per `seed`, so that runs on different threads compute different
/// results and a mixed-up arena or input would show.
fn digit(seed: usize) -> [[[[f32; 28]; 28]; 1]; 1] {
    let mut x = example_mnist::sample_digit();
    for (r, row) in x[0][0].iter_mut().enumerate() {
        for (c, v) in row.iter_mut().enumerate() {
            *v += ((r * 31 + c * 17 + seed * 7) % 13) as f32 / 26.0;
        }
    }
    x
}

fn features(seed: usize) -> [[f32; 784]; 1] {
    let mut x = [[0.0f32; 784]; 1];
    for (i, v) in x[0].iter_mut().enumerate() {
        *v = ((i * 37 + seed * 11) % 101) as f32 / 101.0 - 0.3;
    }
    x
}

/// The outputs of both models for input `seed`, as bits.
fn outputs(mnist: &mut Mnist, mlp: &mut Mlp, seed: usize) -> Vec<u32> {
    let mut bits: Vec<u32> = mnist.run(&digit(seed))[0]
        .iter()
        .map(|v| v.to_bits())
        .collect();
    bits.extend(mlp.run(&features(seed))[0].iter().map(|v| v.to_bits()));
    bits
}

/// Every thread's `RUNS` runs (inputs differ per thread and run) against the results of
/// `reference_threads` computed alone on this thread.
fn check_concurrent(
    reference_threads: usize,
    make: impl Fn() -> (Mnist, Mlp) + Send + Sync + 'static,
) {
    let make = Arc::new(make);
    let expected: Vec<Vec<u32>> = {
        let mut mnist = Mnist::with_threads(reference_threads);
        let mut mlp = Mlp::with_threads(reference_threads);
        (0..THREADS * RUNS)
            .map(|s| outputs(&mut mnist, &mut mlp, s))
            .collect()
    };
    let expected = Arc::new(expected);
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let make = make.clone();
            let expected = expected.clone();
            std::thread::spawn(move || {
                let (mut mnist, mut mlp) = make();
                for r in 0..RUNS {
                    let seed = (t * RUNS + r * 7) % (THREADS * RUNS);
                    let got = outputs(&mut mnist, &mut mlp, seed);
                    assert!(
                        got == expected[seed],
                        "thread {t}, run {r}: results differ from the model run alone"
                    );
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a model thread failed");
    }
}

#[test]
fn separate_serial_models_on_many_threads() {
    check_concurrent(1, || (Mnist::new(), Mlp::new()));
}

#[test]
fn separate_models_with_their_own_pools_on_many_threads() {
    check_concurrent(2, || (Mnist::with_threads(2), Mlp::with_threads(2)));
}

#[test]
fn models_sharing_one_thread_pool_on_many_threads() {
    let pool = Arc::new(ThreadPool::new(2));
    check_concurrent(2, move || {
        (
            Mnist::with_executor(Executor::Shared(pool.clone())),
            Mlp::with_executor(Executor::Shared(pool.clone())),
        )
    });
}

/// Models created and dropped over and over (each with its pool, on several threads): what a
/// model holds is released (LeakSanitizer checks it in `.ci/sanitize`) and the results stay.
#[test]
fn models_created_and_dropped_repeatedly() {
    let expected = outputs(&mut Mnist::new(), &mut Mlp::new(), 3);
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let expected = expected.clone();
            std::thread::spawn(move || {
                for threads in [1, 2, 1, 3] {
                    let got = outputs(
                        &mut Mnist::with_threads(threads),
                        &mut Mlp::with_threads(threads),
                        3,
                    );
                    // Bit-identical across thread counts too: the parallel loops split
                    // independent outputs, never a sum.
                    assert!(got == expected, "{threads} thread(s): results differ");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a model thread failed");
    }
}
