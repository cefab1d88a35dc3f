fn main() {
    let mut m = example_mnist::Mnist::new();
    let x = [[[[0.0f32; 27]; 28]; 1]; 1];
    let _ = m.run(&x);
}
