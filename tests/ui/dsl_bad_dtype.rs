collage::model! {
    Bad {
        input x: f16[1, 4];
        output y = relu(x);
    }
}

fn main() {}
