collage::model! {
    Bad {
        input x: f32[1, 4];
        output y = frobnicate(x);
    }
}

fn main() {}
