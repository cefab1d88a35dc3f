//! The `model!` DSL example against a reference computed here in f64 from the same weights.
use safetensors::SafeTensors;

fn tensor(st: &SafeTensors, name: &str) -> Vec<f64> {
    st.tensor(name)
        .unwrap()
        .data()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
        .collect()
}

#[test]
fn mlp_dsl_matches_reference() {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/mlp_dsl/mlp.safetensors"
    ))
    .unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let (w1, b1, w2, b2) = (
        tensor(&st, "w1"),
        tensor(&st, "b1"),
        tensor(&st, "w2"),
        tensor(&st, "b2"),
    );
    let mut x = [[0.0f32; 784]; 1];
    for (i, v) in x[0].iter_mut().enumerate() {
        *v = ((i * 29 % 97) as f32 / 97.0) - 0.5;
    }
    let h: Vec<f64> = (0..32)
        .map(|j| {
            ((0..784)
                .map(|k| x[0][k] as f64 * w1[k * 32 + j])
                .sum::<f64>()
                + b1[j])
                .max(0.0)
        })
        .collect();
    let want: Vec<f64> = (0..10)
        .map(|j| (0..32).map(|k| h[k] * w2[k * 10 + j]).sum::<f64>() + b2[j])
        .collect();
    let mut m = example_mlp_dsl::Mlp::new();
    let got = m.run(&x);
    for j in 0..10 {
        let (g, w) = (got[0][j] as f64, want[j]);
        assert!(
            (g - w).abs() <= 1e-4 + 1e-3 * w.abs(),
            "y[{j}] = {g}, want {w}"
        );
    }
}
