//! A two-layer MLP declared in Rust with the `model!` DSL; weights come from `mlp.safetensors`
//! (made by `make_weights.py`).

collage::model! {
    pub Mlp {
        input x: f32[1, 784];
        weights "mlp.safetensors";
        let h = relu(x @ w1 + b1);
        output y = h @ w2 + b2;
    }
}
