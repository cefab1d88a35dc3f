collage::model! {
    NoOutput {
        input x: f32[1, 4];
        let h = relu(x);
    }
}

fn main() {}
