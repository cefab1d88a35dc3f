collage::model!(Ocr = "ocr.onnx", batch = 1, width = 64..=32);

fn main() {}
