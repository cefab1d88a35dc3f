//! The `model!` DSL frontend: finds `model! { .. }` blocks in Rust sources and builds graphs.
//!
//! The grammar lives in `collage-macros/src/syntax.rs`, shared with the macro so that both report
//! the same errors (the macro with spans in the editor, the build script with file:line:column).
use std::path::{Path, PathBuf};
use std::sync::Arc;

use syn::visit::Visit;

use crate::error::{io_err, Error, Result};
use crate::ir::{DType, Graph, Tensor, TensorType, ValueId};
use crate::ops::{self, Attr, Attrs, OpCx};

#[allow(dead_code)]
#[path = "../../../../collage-macros/src/syntax.rs"]
mod syntax;

pub use syntax::ModelDef;

/// A DSL block found in a file.
pub struct Found {
    /// The model type name.
    pub name: String,
    /// The source file.
    pub file: PathBuf,
    def: ModelDef,
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

struct MacroFinder {
    found: Vec<proc_macro2::TokenStream>,
}

impl<'ast> Visit<'ast> for MacroFinder {
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        if m.path.segments.last().is_some_and(|s| s.ident == "model") {
            let has_block = m.tokens.clone().into_iter().any(|t| matches!(t, proc_macro2::TokenTree::Group(ref g) if g.delimiter() == proc_macro2::Delimiter::Brace));
            if has_block {
                self.found.push(m.tokens.clone());
            }
        }
        syn::visit::visit_macro(self, m);
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

/// How deeply the brackets of a scanned source may nest. `syn` parses a file recursively, one
/// level per bracket, so a deeper file is refused before it could overflow the stack.
pub const MAX_SOURCE_NESTING: usize = 256;

/// The DSL blocks (`model! { .. }`) of the Rust source `text`, each parsed and checked, in order;
/// `file` names the source in errors. A file that is not valid Rust has none (rustc reports it);
/// one whose brackets nest deeper than [`MAX_SOURCE_NESTING`] is one error.
pub fn parse_source(text: &str, file: &Path) -> Vec<Result<Found>> {
    // The lexer (and dropping its tokens) does not recurse: measure the nesting on its output.
    if let Ok(tokens) = text.parse::<proc_macro2::TokenStream>() {
        if let Some(span) = nested_deeper_than(tokens, MAX_SOURCE_NESTING) {
            let e = syn::Error::new(
                span,
                format!("brackets nested more than {MAX_SOURCE_NESTING} levels deep"),
            );
            return vec![Err(dsl_err(file, "?", &e))];
        }
    }
    let Ok(parsed) = syn::parse_file(text) else {
        return Vec::new();
    };
    let mut finder = MacroFinder { found: vec![] };
    finder.visit_file(&parsed);
    finder
        .found
        .into_iter()
        .map(|tokens| match syn::parse2::<ModelDef>(tokens) {
            Ok(def) => {
                syntax::check(&def, &|_| None)
                    .map_err(|e| dsl_err(file, &def.name.to_string(), &e))?;
                Ok(Found {
                    name: def.name.to_string(),
                    file: file.to_path_buf(),
                    def,
                })
            }
            Err(e) => Err(dsl_err(file, "?", &e)),
        })
        .collect()
}

/// The opening bracket of the first group nested deeper than `max` in `tokens`, if any.
fn nested_deeper_than(tokens: proc_macro2::TokenStream, max: usize) -> Option<proc_macro2::Span> {
    let mut stack = vec![tokens.into_iter()];
    while let Some(level) = stack.last_mut() {
        match level.next() {
            Some(proc_macro2::TokenTree::Group(g)) => {
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
    /// Builds the graph; weight files are read relative to `root` (the crate's manifest folder).
    pub fn to_graph(&self, root: &Path) -> Result<Graph> {
        let mut weight_bytes: Option<(PathBuf, Vec<u8>)> = None;
        for it in &self.def.items {
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
        for it in &self.def.items {
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
