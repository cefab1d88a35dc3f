//! Runs the text-recognition CNN at the sizes `build.rs` and `lib.rs` bound, and prints the best
//! class of every column.
//!
//! `cargo run --release --example ocr`
use example_ocr::{best_classes, sample_line, Ocr, OcrBatches};

fn main() {
    let mut batches = OcrBatches::new();
    let x = sample_line::<4, 32, 96>();
    let logits = batches.run_batch_4(&x);
    for (n, l) in logits.iter().enumerate() {
        println!("batch of 4, 32x96, image {n}: {:?}", best_classes(l));
    }
    let one = batches.run_batch_1(&sample_line::<1, 32, 96>());
    println!("batch of 1, 32x96: {:?}", best_classes(&one[0]));

    let mut ocr = Ocr::new();
    let logits = ocr.run(&sample_line::<1, 48, 160>());
    println!("48x160: {:?}", best_classes(&logits[0]));
    println!(
        "arenas: {} bytes for the three batch sizes, {} bytes for 48x160",
        OcrBatches::ARENA_SIZE,
        Ocr::ARENA_SIZE
    );
}
