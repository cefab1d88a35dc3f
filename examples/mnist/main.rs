//! Runs the MNIST-style CNN on a synthetic digit and prints the predicted class and latency.
//!
//! `cargo run --release --example mnist`
use std::time::Instant;

use example_mnist::{sample_digit, Mnist};

fn main() {
    let mut model = Mnist::new();
    let x = sample_digit();
    let logits: &[[f32; 10]; 1] = model.run(&x);
    let class = (0..10)
        .max_by(|&a, &b| logits[0][a].total_cmp(&logits[0][b]))
        .unwrap();
    println!("logits: {:?}", logits[0]);
    println!("predicted class: {class}");

    let runs = 1000;
    let start = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(model.run(std::hint::black_box(&x)));
    }
    let per = start.elapsed().as_secs_f64() * 1e6 / runs as f64;
    println!(
        "latency: {per:.1} us per run (mean of {runs}, 1 thread, arena {} bytes)",
        Mnist::ARENA_SIZE
    );
}
