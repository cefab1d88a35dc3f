//! Text as `model!` DSL: a Rust source with `model!` blocks, or (without `model!` in it) the body
//! of one block. Parsed and checked with the grammar the macro shares, built into a graph (weight
//! files are never found) and compiled up to the generated C source and Rust glue.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: collage_fuzz::init(), |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let source = if text.contains("model!") {
        text.to_string()
    } else {
        format!("collage::model! {{\n{text}\n}}")
    };
    let path = std::path::Path::new("/nonexistent-collage-fuzz/lib.rs");
    for found in collage_build::frontend::dsl::parse_source(&source, path) {
        if let Ok(g) = found.and_then(|f| f.to_graph(std::path::Path::new(collage_fuzz::NOWHERE))) {
            collage_fuzz::compile_to_source(g);
        }
    }
    // Every parse registers its text for span locations; nothing refers to those spans now.
    proc_macro2::extra::invalidate_current_thread_spans();
});
