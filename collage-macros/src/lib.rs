//! The `model!` macro of Collage for Rust.
//!
//! Two forms:
//! - `model!(pub Mnist = "models/mnist.onnx");` binds the model that `build.rs` compiled with
//!   `collage_build::Build::new().onnx("models/mnist.onnx")` to the type `Mnist`; with sizes for
//!   the model's symbolic input dimensions, `model!(pub Ocr = "ocr.onnx", x: [1, 3, 48, 320])`
//!   (or `batch = 1`), it is `build.rs`'s `.scan("src")` that finds and compiles it;
//! - `model! { pub Mlp { input x: f32[1, 784]; weights "mlp.safetensors"; let h = relu(x @ w1 + b1);
//!   output y = h @ w2 + b2; } }` declares a model in Rust; `build.rs` compiles it when it scans the
//!   file (`Build::new().scan("src")`).
//!
//! Either way the macro expands to the generated glue, `include!`d from `$OUT_DIR/collage/`.
#![warn(missing_docs)]

use proc_macro::TokenStream;
use quote::{format_ident, quote};
use syn::{parse_macro_input, Ident, Visibility};

#[allow(dead_code)]
mod syntax;

/// Must equal `collage_build::ir::sanitize`: both derive the generated file's name from the
/// model path (a proc-macro crate cannot depend on `collage-build`; `tests/ui` and the examples
/// fail to build if the two ever disagree).
fn sanitize(s: &str) -> String {
    let mut s: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 'm');
    }
    s
}

fn expand(
    vis: &Visibility,
    name: &Ident,
    symbol: &str,
    span: proc_macro2::Span,
    missing_hint: String,
) -> proc_macro2::TokenStream {
    if let Some(out) = std::env::var_os("OUT_DIR") {
        let file = std::path::Path::new(&out)
            .join("collage")
            .join(format!("{symbol}.rs"));
        if !file.exists() {
            return syn::Error::new(span, format!("{missing_hint} (no {})", file.display()))
                .to_compile_error();
        }
    } else {
        return syn::Error::new(
            span,
            "OUT_DIR is not set: the crate needs a build.rs that runs collage_build::Build",
        )
        .to_compile_error();
    }
    let module = format_ident!("__collage_{}", name);
    let path = format!("/collage/{symbol}.rs");
    quote! {
        #[doc(hidden)]
        #[allow(non_snake_case)]
        mod #module {
            include!(concat!(env!("OUT_DIR"), #path));
        }
        #vis use #module::Model as #name;
    }
}

/// Binds a model compiled by `build.rs` to a type; see the crate documentation.
#[proc_macro]
pub fn model(input: TokenStream) -> TokenStream {
    let input2: proc_macro2::TokenStream = input.clone().into();
    let is_binding = input2.clone().into_iter().any(|t| matches!(t, proc_macro2::TokenTree::Punct(ref p) if p.as_char() == '='))
        && !input2.clone().into_iter().any(|t| matches!(t, proc_macro2::TokenTree::Group(ref g) if g.delimiter() == proc_macro2::Delimiter::Brace));
    if is_binding {
        let b = parse_macro_input!(input as syntax::OnnxBinding);
        let path_symbol = sanitize(b.path.value().trim_end_matches(".onnx"));
        let (symbol, hint) = if b.is_bound() {
            (
                syntax::bound_symbol(&path_symbol, &b.key()),
                format!("model \"{}\" with `{}` was not compiled: add `.scan(\"src\")` (the folder of this file) to collage_build::Build in build.rs", b.path.value(), b.key()),
            )
        } else {
            (
                path_symbol,
                format!("model \"{}\" was not compiled: add `.onnx(\"{}\")` to collage_build::Build in build.rs", b.path.value(), b.path.value()),
            )
        };
        return expand(&b.vis, &b.name, &symbol, b.path.span(), hint).into();
    }
    let def = parse_macro_input!(input as syntax::ModelDef);
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    let weights: Option<Vec<String>> = def
        .items
        .iter()
        .find_map(|it| match it {
            syntax::Item::Weights(p) => Some(safetensors_names(&manifest.join(p.value()))),
            _ => None,
        })
        .flatten();
    let is_weight = |n: &str| weights.as_ref().map(|w| w.iter().any(|x| x == n));
    if let Err(e) = syntax::check(&def, &is_weight) {
        return e.to_compile_error().into();
    }
    for it in &def.items {
        if let syntax::Item::Weights(p) = it {
            if weights.is_none() {
                return syn::Error::new(
                    p.span(),
                    format!(
                        "cannot read safetensors file {}",
                        manifest.join(p.value()).display()
                    ),
                )
                .to_compile_error()
                .into();
            }
        }
    }
    let symbol = format!("dsl_{}", sanitize(&def.name.to_string()));
    let hint = format!("model `{}` was not compiled: add `.scan(\"src\")` (the folder of this file) to collage_build::Build in build.rs", def.name);
    expand(&def.vis, &def.name, &symbol, def.name.span(), hint).into()
}

/// Tensor names in a safetensors file's header, or `None` if it cannot be read.
fn safetensors_names(path: &std::path::Path) -> Option<Vec<String>> {
    let bytes = std::fs::read(path).ok()?;
    let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as usize;
    let header = std::str::from_utf8(bytes.get(8..8 + n)?).ok()?;
    // The header is a JSON object whose keys are tensor names (plus "__metadata__"); every key is a
    // JSON string followed by `:` at nesting depth 1.
    let mut names = Vec::new();
    let (mut depth, mut in_str, mut esc, mut cur, mut last_str) =
        (0, false, false, String::new(), None::<String>);
    for ch in header.chars() {
        if in_str {
            if esc {
                cur.push(ch);
                esc = false;
            } else if ch == '\\' {
                esc = true;
            } else if ch == '"' {
                in_str = false;
                last_str = Some(std::mem::take(&mut cur));
            } else {
                cur.push(ch);
            }
            continue;
        }
        match ch {
            '"' => in_str = true,
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ':' if depth == 1 => {
                if let Some(s) = last_str.take() {
                    if s != "__metadata__" {
                        names.push(s);
                    }
                }
            }
            c if !c.is_whitespace() && c != ',' => last_str = None,
            _ => {}
        }
    }
    Some(names)
}
