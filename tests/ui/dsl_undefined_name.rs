collage::model! {
    Bad {
        input x: f32[1, 4];
        let h = relu(x);
        output y = h + z;
    }
}

fn main() {}
