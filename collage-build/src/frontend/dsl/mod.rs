//! The `model!` DSL frontend: finds `model! { .. }` blocks in Rust sources and builds graphs.
//!
//! The grammar lives in `collage-macros/src/syntax.rs`, shared with the macro so that both report
//! the same errors (the macro with spans in the editor, the build script with file:line:column).
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};

use crate::error::{io_err, Error, Result};
use crate::ir::{DType, Graph, Tensor, TensorType, ValueId};
use crate::ops::{self, Attr, Attrs, OpCx};

#[allow(dead_code)]
#[path = "../../../../collage-macros/src/syntax.rs"]
mod syntax;

pub use syntax::ModelDef;
pub(crate) use syntax::{binding_key, bound_symbol, ranged_key};

/// A model found in a file: a DSL block, or an ONNX model bound with sizes
/// (`model!(Ocr = "ocr.onnx", x: [1, 3, 48, 320])`).
pub struct Found {
    /// The model type name.
    pub name: String,
    /// The source file.
    pub file: PathBuf,
    kind: Kind,
}

enum Kind {
    Dsl(ModelDef),
    Onnx {
        path: String,
        bindings: crate::frontend::onnx::Bindings,
        /// A dimension served over a range: name, smallest and largest size.
        range: Option<(String, usize, usize)>,
    },
}

/// The symbol of a DSL model: `dsl_<name in lower case>`.
pub fn symbol_for_dsl(name: &str) -> String {
    format!("dsl_{}", crate::ir::sanitize(name))
}

fn dsl_err(file: &Path, model: &str, e: &syn::Error) -> Error {
    let start = e.span().start();
    Error::Dsl {
        file: file.display().to_string(),
        line: start.line,
        column: start.column + 1,
        model: model.to_string(),
        detail: e.to_string(),
    }
}

/// Every `.rs` file under `dir` (sorted) with the DSL blocks it contains.
pub fn scan_dir(dir: &Path) -> Result<Vec<(PathBuf, Vec<Result<Found>>)>> {
    let mut files = Vec::new();
    collect_rs(dir, &mut files)?;
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(io_err(&f))?;
        if !text.contains("model!") {
            continue;
        }
        let models = parse_source(&text, &f);
        out.push((f, models));
    }
    Ok(out)
}

/// How deeply the brackets of a `model!` block may nest. `syn` builds its token buffer
/// recursively, one level per bracket, so a deeper block is refused before it could overflow the
/// stack.
pub const MAX_BLOCK_NESTING: usize = 256;

/// The DSL blocks (`model! { .. }`) of the Rust source `text`, each parsed and checked, in order;
/// `file` names the source in errors. A file that does not lex as Rust tokens has none (rustc
/// reports it).
///
/// The blocks are found on the file's tokens, not on a Rust syntax tree: `syn`'s parser recurses
/// per nested expression, type or `else if`, and a deep one (20,000 unary minus signs, or a long
/// generated `else if` chain, which rustc compiles) overflowed the stack of the build script.
/// Like a syntax tree's macros, the tokens of other macros' inputs (`macro_rules!` bodies,
/// `quote!`) and of attributes are not searched.
pub fn parse_source(text: &str, file: &Path) -> Vec<Result<Found>> {
    let Ok(tokens) = without_shebang(text).parse::<TokenStream>() else {
        return Vec::new();
    };
    model_blocks(tokens)
        .into_iter()
        .filter_map(|(tokens, block)| {
            if block {
                Some(parse_block(tokens, file))
            } else {
                parse_binding(tokens, file).map(Ok)
            }
        })
        .collect()
}

/// A `model!(Name = "m.onnx", ..)` with sizes; `None` for one without (compiled by
/// `Build::onnx`).
fn parse_binding(tokens: TokenStream, file: &Path) -> Option<Found> {
    // One that does not parse is left to the macro, which reports it where it is written.
    let b = syn::parse2::<syntax::OnnxBinding>(tokens).ok()?;
    if !b.is_bound() {
        return None;
    }
    let mut bindings = crate::frontend::onnx::Bindings::new();
    for (k, v) in &b.dims {
        bindings = bindings.dim(k.clone(), *v);
    }
    for (k, v) in &b.shapes {
        bindings = bindings.input_shape(k.clone(), v.clone());
    }
    Some(Found {
        name: b.name.to_string(),
        file: file.to_path_buf(),
        kind: Kind::Onnx {
            path: b.path.value(),
            bindings,
            range: b.range.clone(),
        },
    })
}

/// A `model! { .. }` block, parsed and checked.
fn parse_block(tokens: TokenStream, file: &Path) -> Result<Found> {
    if let Some(span) = nested_deeper_than(tokens.clone(), MAX_BLOCK_NESTING) {
        let e = syn::Error::new(
            span,
            format!("brackets nested more than {MAX_BLOCK_NESTING} levels deep"),
        );
        return Err(dsl_err(file, "?", &e));
    }
    let def = syn::parse2::<ModelDef>(tokens).map_err(|e| dsl_err(file, "?", &e))?;
    syntax::check(&def, &|_| None).map_err(|e| dsl_err(file, &def.name.to_string(), &e))?;
    Ok(Found {
        name: def.name.to_string(),
        file: file.to_path_buf(),
        kind: Kind::Dsl(def),
    })
}

/// `text` without a byte order mark and a `#!` interpreter line (kept as an empty line, so that
/// positions do not move), as `syn::parse_file` reads it.
fn without_shebang(text: &str) -> &str {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match text.strip_prefix("#!") {
        Some(rest) if !rest.trim_start().starts_with('[') => {
            text.find('\n').map_or("", |i| &text[i..])
        }
        _ => text,
    }
}

/// The input of every `model!` invocation in `tokens`, in order, and whether it holds a braced
/// block (a DSL model) or not (`Name = "m.onnx", ..`). The walk keeps its own stack: the lexer's
/// tokens nest as deeply as the file's brackets.
fn model_blocks(tokens: TokenStream) -> Vec<(TokenStream, bool)> {
    let mut found = Vec::new();
    let mut stack: Vec<(Vec<TokenTree>, usize)> = vec![(tokens.into_iter().collect(), 0)];
    while let Some((tts, i)) = stack.last_mut() {
        let Some(tt) = tts.get(*i) else {
            stack.pop();
            continue;
        };
        let punct =
            |k: usize, c: char| matches!(tts.get(k), Some(TokenTree::Punct(p)) if p.as_char() == c);
        let group = |k: usize| match tts.get(k) {
            Some(TokenTree::Group(g)) => Some(g.clone()),
            _ => None,
        };
        match tt {
            // `name! ( .. )`: a macro's input is only searched when it is `model!`'s.
            TokenTree::Ident(name) if punct(*i + 1, '!') => {
                let body = if name == "macro_rules" {
                    *i + 3
                } else {
                    *i + 2
                };
                if let Some(g) = group(body) {
                    let has_block = g.stream().into_iter().any(
                        |t| matches!(t, TokenTree::Group(ref b) if b.delimiter() == Delimiter::Brace),
                    );
                    if name == "model" {
                        found.push((g.stream(), has_block));
                    }
                    *i = body + 1;
                } else {
                    *i += 1;
                }
            }
            // Attributes: `#[..]` and `#![..]`.
            TokenTree::Punct(p) if p.as_char() == '#' => {
                let body = if punct(*i + 1, '!') { *i + 2 } else { *i + 1 };
                *i = match group(body) {
                    Some(g) if g.delimiter() == Delimiter::Bracket => body + 1,
                    _ => *i + 1,
                };
            }
            TokenTree::Group(g) => {
                let inner = g.stream().into_iter().collect();
                *i += 1;
                stack.push((inner, 0));
            }
            _ => *i += 1,
        }
    }
    found
}

/// The opening bracket of the first group nested deeper than `max` in `tokens`, if any.
fn nested_deeper_than(tokens: TokenStream, max: usize) -> Option<Span> {
    let mut stack = vec![tokens.into_iter()];
    while let Some(level) = stack.last_mut() {
        match level.next() {
            Some(TokenTree::Group(g)) => {
                if stack.len() >= max {
                    return Some(g.span_open());
                }
                stack.push(g.stream().into_iter());
            }
            Some(_) => {}
            None => {
                stack.pop();
            }
        }
    }
    None
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let p = e.map_err(io_err(dir))?.path();
        if p.is_dir() {
            collect_rs(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

struct Builder<'a> {
    g: Graph,
    names: Vec<(String, ValueId)>,
    weights: Option<(PathBuf, safetensors::SafeTensors<'a>)>,
    file: PathBuf,
    model: String,
    counter: usize,
}

impl Builder<'_> {
    fn err(&self, span: proc_macro2::Span, detail: String) -> Error {
        dsl_err(&self.file, &self.model, &syn::Error::new(span, detail))
    }

    fn lookup(&mut self, id: &syn::Ident) -> Result<ValueId> {
        let name = id.to_string();
        if let Some((_, v)) = self.names.iter().rev().find(|(n, _)| *n == name) {
            return Ok(*v);
        }
        let (path, st) = self
            .weights
            .as_ref()
            .ok_or_else(|| self.err(id.span(), format!("`{name}` is not defined")))?;
        let view = st.tensor(&name).map_err(|_| {
            self.err(
                id.span(),
                format!(
                    "`{name}` is not an input, a `let`, or a tensor of {}",
                    path.display()
                ),
            )
        })?;
        let dtype = match view.dtype() {
            safetensors::Dtype::F32 => DType::F32,
            safetensors::Dtype::F64 => DType::F64,
            safetensors::Dtype::I32 => DType::I32,
            safetensors::Dtype::I64 => DType::I64,
            safetensors::Dtype::BOOL => DType::Bool,
            safetensors::Dtype::I8 => DType::I8,
            safetensors::Dtype::U8 => DType::U8,
            safetensors::Dtype::I16 => DType::I16,
            safetensors::Dtype::U16 => DType::U16,
            safetensors::Dtype::U32 => DType::U32,
            safetensors::Dtype::U64 => DType::U64,
            other => {
                return Err(self.err(
                    id.span(),
                    format!("weight `{name}` has unsupported dtype {other:?}"),
                ))
            }
        };
        let t = Tensor::from_bytes(TensorType::new(dtype, view.shape()), view.data().to_vec())
            .ok_or_else(|| {
                self.err(
                    id.span(),
                    format!("weight `{name}`: data size does not match its shape"),
                )
            })?;
        let v = self.g.add_const(name.clone(), t);
        self.names.push((name, v));
        Ok(v)
    }

    fn node(
        &mut self,
        op_type: &str,
        attrs: Attrs,
        inputs: Vec<ValueId>,
        span: proc_macro2::Span,
    ) -> Result<ValueId> {
        let ctor = ops::lookup(op_type)
            .ok_or_else(|| self.err(span, format!("operator {op_type} is not supported")))?;
        let op = ctor(&OpCx {
            attrs: &attrs,
            opset: 21,
            n_inputs: inputs.len(),
            n_outputs: 1,
        })
        .map_err(|e| self.err(span, e.to_string()))?;
        self.counter += 1;
        let name = format!("{op_type}_{}", self.counter);
        let out = self.g.add_value(format!("{name}_out"), None);
        self.g
            .add_node(name, op, inputs.into_iter().map(Some).collect(), vec![out]);
        Ok(out)
    }

    fn expr(&mut self, e: &syntax::DExpr) -> Result<ValueId> {
        use syntax::DExpr as D;
        match e {
            D::Name(id) => self.lookup(id),
            D::Num(v, _) => Ok(self
                .g
                .add_const("scalar", Tensor::from_f32(&[], &[*v as f32]))),
            D::List(v, _) => Ok(self.g.add_const("list", Tensor::from_i64(&[v.len()], v))),
            D::Neg(a, span) => {
                let a = self.expr(a)?;
                self.node("Neg", Attrs::default(), vec![a], *span)
            }
            D::Bin(k, a, b, span) => {
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                self.node(k.op_type(), Attrs::default(), vec![a, b], *span)
            }
            D::Call { func, args, attrs } => {
                let op_type = syntax::op_type_of(&func.to_string())
                    .ok_or_else(|| self.err(func.span(), format!("unknown function `{func}`")))?;
                let inputs = args
                    .iter()
                    .map(|a| self.expr(a))
                    .collect::<Result<Vec<_>>>()?;
                let mut m = std::collections::BTreeMap::new();
                for (k, v) in attrs {
                    let a = match v {
                        syntax::AttrValue::Int(i) => Attr::Int(*i),
                        syntax::AttrValue::Float(f) => Attr::Float(*f as f32),
                        syntax::AttrValue::Str(s) => Attr::Str(s.clone()),
                        syntax::AttrValue::Ints(v) => Attr::Ints(v.clone()),
                    };
                    m.insert(k.to_string(), a);
                }
                self.node(op_type, Attrs(m), inputs, func.span())
            }
        }
    }
}

impl Found {
    /// The file key of the generated sources, `model!` computes the same: `dsl_<name>` for a DSL
    /// block, the model path's key and a hash of the sizes for a bound ONNX model.
    pub fn symbol(&self) -> String {
        match &self.kind {
            Kind::Dsl(_) => symbol_for_dsl(&self.name),
            Kind::Onnx {
                path,
                bindings,
                range,
            } => {
                let key = match range {
                    Some((d, lo, hi)) => ranged_key(&bindings.key(), d, *lo, *hi),
                    None => bindings.key(),
                };
                bound_symbol(&crate::ir::sanitize(path.trim_end_matches(".onnx")), &key)
            }
        }
    }

    /// The ONNX model file and its bindings, for a bound ONNX model.
    pub fn onnx(&self) -> Option<(&str, &crate::frontend::onnx::Bindings)> {
        match &self.kind {
            Kind::Onnx { path, bindings, .. } => Some((path, bindings)),
            Kind::Dsl(_) => None,
        }
    }

    /// The dimension a bound ONNX model serves over a range (`width = 32..=1024`): its name,
    /// smallest and largest sizes.
    pub fn range(&self) -> Option<(&str, usize, usize)> {
        match &self.kind {
            Kind::Onnx {
                range: Some((d, lo, hi)),
                ..
            } => Some((d, *lo, *hi)),
            _ => None,
        }
    }

    /// Builds the graph; weight files and ONNX models are read relative to `root` (the crate's
    /// manifest folder).
    pub fn to_graph(&self, root: &Path) -> Result<Graph> {
        let def = match &self.kind {
            Kind::Dsl(def) => def,
            Kind::Onnx { path, bindings, .. } => {
                return crate::frontend::onnx::load_with(&root.join(path), bindings)
            }
        };
        let mut weight_bytes: Option<(PathBuf, Vec<u8>)> = None;
        for it in &def.items {
            if let syntax::Item::Weights(p) = it {
                let path = root.join(p.value());
                let bytes = std::fs::read(&path).map_err(io_err(&path))?;
                weight_bytes = Some((path, bytes));
            }
        }
        let weights = match &weight_bytes {
            Some((p, b)) => Some((
                p.clone(),
                safetensors::SafeTensors::deserialize(b).map_err(|e| Error::Decode {
                    path: p.clone(),
                    detail: format!("not a safetensors file: {e}"),
                })?,
            )),
            None => None,
        };
        let mut b = Builder {
            g: Graph::new(self.name.clone()),
            names: vec![],
            weights,
            file: self.file.clone(),
            model: self.name.clone(),
            counter: 0,
        };
        for it in &def.items {
            match it {
                syntax::Item::Input { name, dtype, dims } => {
                    let d = DType::parse(&dtype.to_string())
                        .ok_or_else(|| b.err(dtype.span(), format!("unknown dtype `{dtype}`")))?;
                    let shape = dims
                        .iter()
                        .map(|l| {
                            l.base10_parse::<usize>()
                                .map_err(|e| b.err(l.span(), e.to_string()))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let v =
                        b.g.add_value(name.to_string(), Some(TensorType::new(d, shape)));
                    b.g.inputs.push(v);
                    b.names.push((name.to_string(), v));
                }
                syntax::Item::Weights(_) => {}
                syntax::Item::Let { name, expr } | syntax::Item::Output { name, expr } => {
                    let v = b.expr(expr)?;
                    let v = if matches!(it, syntax::Item::Output { .. }) {
                        // Outputs are named values of their own, so the same value can be output twice.
                        let out = b.node("Identity", Attrs::default(), vec![v], name.span())?;
                        b.g.value_mut(out).name = name.to_string();
                        b.g.outputs.push(out);
                        out
                    } else {
                        v
                    };
                    b.names.push((name.to_string(), v));
                }
            }
        }
        let _ = Arc::new(());
        Ok(b.g)
    }
}
