//! A text-recognition CNN exported with symbolic dimensions (`ocr.onnx`, made by
//! `make_model.py`: `x: [batch, 3, height, width]`), compiled at sizes chosen at build time.

// Sizes in build.rs (`.dim(..)` and `.variants("batch", [1, 2, 4])`): one type with a `run_batch_N`
// method per batch size, sharing one arena and one copy of the weights.
collage::model!(pub OcrBatches = "ocr.onnx");

// Sizes where the model is bound: one 48x160 image (`build.rs` scans this file for it).
collage::model!(pub Ocr = "ocr.onnx", x: [1, 3, 48, 160]);

// One build for every width from 32 to 320 (32 rows high): `run` takes the image as a slice with
// its shape and returns the logits with theirs, one column per 4 pixels of width.
collage::model!(pub OcrAnyWidth = "ocr.onnx", batch = 1, height = 32, width = 32..=320);

/// A synthetic text line: dark vertical strokes on a light background, `N` images of `H`x`W`.
pub fn sample_line<const N: usize, const H: usize, const W: usize>() -> [[[[f32; W]; H]; 3]; N] {
    let mut x = [[[[0.9f32; W]; H]; 3]; N];
    for (n, img) in x.iter_mut().enumerate() {
        for plane in img.iter_mut() {
            for (r, row) in plane.iter_mut().enumerate() {
                for (c, v) in row.iter_mut().enumerate() {
                    if (c + 3 * n) % 11 < 3 && r > H / 5 && r < H - H / 5 {
                        *v = 0.1;
                    }
                }
            }
        }
    }
    x
}

/// The best class of every column of `logits`.
pub fn best_classes<const C: usize>(logits: &[[f32; 12]; C]) -> [usize; C] {
    let mut out = [0; C];
    for (o, col) in out.iter_mut().zip(logits) {
        *o = (0..12).max_by(|&a, &b| col[a].total_cmp(&col[b])).unwrap();
    }
    out
}
