collage::model!(Ocr = "ocr.onnx", x [1, 3, 32, 96]);

fn main() {}
