//! Two blocks in one file, and a binding that is not a block.
collage::model!(pub Mnist = "mnist.onnx");

collage::model! {
    pub A {
        input x: f64[4];
        output y = exp(log(abs(x) + 1.0)) * sqrt(x) / tanh(x);
    }
}

mod inner {
    collage::model! {
        B {
            input x: i32[2, 2];
            let z = matmul(x, x);
            output y = min(max(z, [1, 2]), [3, 4]);
            output w = split(x, axis = 0);
        }
    }
}
