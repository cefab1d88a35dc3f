collage::model!(Ocr = "ocr.onnx", batch = 1, batch = 2);

fn main() {}
