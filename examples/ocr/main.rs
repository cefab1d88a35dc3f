//! Runs the text-recognition CNN at the sizes `build.rs` and `lib.rs` bound, and prints the best
//! class of every column.
//!
//! `cargo run --release --example ocr`
use example_ocr::{best_classes, sample_line, Ocr, OcrAnyWidth, OcrBatches};

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
    // One build, any width in 32..=320: the image with its shape, the logits with theirs.
    let mut any = OcrAnyWidth::new();
    let wide = sample_line::<1, 32, 200>();
    let (logits, shape) = any
        .run(
            wide.as_flattened().as_flattened().as_flattened(),
            [1, 3, 32, 200],
        )
        .unwrap();
    let best: Vec<usize> = logits
        .chunks(12)
        .map(|c| (0..12).max_by(|&a, &b| c[a].total_cmp(&c[b])).unwrap())
        .collect();
    println!("32x200 on the ranged build, logits {shape:?}: {best:?}");
    match any.run(&[0.0; 3 * 32 * 400], [1, 3, 32, 400]) {
        Err(e) => println!("32x400: {e}"),
        Ok(_) => unreachable!("400 is outside the range"),
    }
    println!(
        "arenas: {} bytes for the three batch sizes, {} bytes for 48x160, {} bytes for widths up to 320",
        OcrBatches::ARENA_SIZE,
        Ocr::ARENA_SIZE,
        OcrAnyWidth::ARENA_SIZE
    );
}
