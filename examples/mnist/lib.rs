//! The MNIST-style CNN of `mnist.onnx` (made by `make_model.py`), compiled by `build.rs`.

collage::model!(pub Mnist = "mnist.onnx");

/// A 28x28 test image: a vertical stroke, like a hand-written "1".
pub fn sample_digit() -> [[[[f32; 28]; 28]; 1]; 1] {
    let mut x = [[[[0.0f32; 28]; 28]; 1]; 1];
    for (r, row) in x[0][0].iter_mut().enumerate().skip(4).take(20) {
        for (c, v) in row.iter_mut().enumerate() {
            let d = (c as f32 - 14.0 - (r as f32 - 14.0) * 0.15).abs();
            *v = (1.0 - d / 2.0).max(0.0);
        }
    }
    x
}
