//! Runs the DSL-declared MLP once and prints its output.
//!
//! `cargo run --release --example mlp_dsl`
use example_mlp_dsl::Mlp;

fn main() {
    let mut model = Mlp::new();
    let mut x = [[0.0f32; 784]; 1];
    for (i, v) in x[0].iter_mut().enumerate() {
        *v = ((i * 37 % 101) as f32 / 101.0) - 0.5;
    }
    let y: &[[f32; 10]; 1] = model.run(&x);
    println!("y = {:?}", y[0]);
}
