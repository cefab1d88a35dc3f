//! Bytes as an ONNX model: the importer, then (when it imports) the whole compile pipeline up to
//! the generated C source and Rust glue, on the `c` backend with small size limits.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: collage_fuzz::init(), |data: &[u8]| {
    if let Ok(g) = collage_build::frontend::onnx::import_bytes(data, collage_fuzz::model_path()) {
        collage_fuzz::compile_to_source(g);
    }
});
