//! Binding an ONNX model's symbolic dimensions to sizes at build time.
//!
//! Exported models rarely have static input shapes: `x: [batch, 3, height, width]` (named
//! `dim_param`s) or `[?, 3, ?, ?]` (no size at all). Collage compiles static shapes, so every
//! such dimension is bound before import: a named one by name ([`Bindings::dim`]), any one by the
//! input's whole shape ([`Bindings::input_shape`]). A named dimension that one input's shape binds
//! is bound in every input that shares the name (`input_ids` and `attention_mask` both `[batch,
//! seq]`). What is left unbound is one error naming every such dimension of every input, with the
//! three ways to bind it.
use std::collections::BTreeMap;

use super::proto;

/// Sizes for a model's symbolic dimensions: by `dim_param` name, and by input (a whole shape).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bindings {
    /// `dim_param` name → size.
    pub dims: BTreeMap<String, usize>,
    /// Input name → its whole shape.
    pub shapes: BTreeMap<String, Vec<usize>>,
}

impl Bindings {
    /// No bindings: every input must have a static shape.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds every dimension named `name` (its `dim_param`) to `size`.
    pub fn dim(mut self, name: impl Into<String>, size: usize) -> Self {
        self.dims.insert(name.into(), size);
        self
    }

    /// Binds the input `name` to `shape` (its static dimensions must agree).
    pub fn input_shape(mut self, name: impl Into<String>, shape: impl Into<Vec<usize>>) -> Self {
        self.shapes.insert(name.into(), shape.into());
        self
    }

    /// Whether nothing is bound.
    pub fn is_empty(&self) -> bool {
        self.dims.is_empty() && self.shapes.is_empty()
    }

    /// Parses the CLI's `NAME=N` (`--dim batch=1`).
    pub fn parse_dim(s: &str) -> Result<(String, usize), String> {
        let (name, n) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: expected NAME=SIZE, e.g. batch=1"))?;
        let n = n
            .trim()
            .parse()
            .map_err(|_| format!("`{s}`: the size `{n}` is not a non-negative integer"))?;
        Ok((name.trim().to_string(), n))
    }

    /// Parses the CLI's `NAME=D0,D1,..` (`--input-shape x=1,3,48,320`).
    pub fn parse_shape(s: &str) -> Result<(String, Vec<usize>), String> {
        let (name, dims) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: expected INPUT=D0,D1,.., e.g. x=1,3,224,224"))?;
        let dims = if dims.trim().is_empty() {
            Vec::new() // a scalar input
        } else {
            dims.split(',')
                .map(|d| {
                    d.trim().parse().map_err(|_| {
                        format!("`{s}`: the dimension `{d}` is not a non-negative integer")
                    })
                })
                .collect::<Result<_, _>>()?
        };
        Ok((name.trim().to_string(), dims))
    }

    /// A canonical text of the bindings (`batch=1;x:1,3,48,320`): equal bindings, equal text;
    /// the same text `model!(..)` computes for its bindings.
    pub fn key(&self) -> String {
        crate::frontend::dsl::binding_key(
            self.dims.iter().map(|(k, v)| (k.as_str(), *v)),
            self.shapes.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
        )
    }
}

/// One input dimension as the model declares it.
#[derive(Clone, Debug, PartialEq)]
enum Decl {
    Static(usize),
    Named(String),
    Unknown,
}

fn decls(t: &proto::type_proto::Tensor) -> Result<Option<Vec<Decl>>, String> {
    use proto::tensor_shape_proto::dimension::Value as D;
    let Some(s) = &t.shape else { return Ok(None) };
    s.dim
        .iter()
        .map(|d| match &d.value {
            Some(D::DimValue(v)) if *v >= 0 => usize::try_from(*v)
                .map(Decl::Static)
                .map_err(|_| format!("dimension {v} is too large")),
            Some(D::DimParam(p)) if !p.is_empty() => Ok(Decl::Named(p.clone())),
            _ => Ok(Decl::Unknown),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The resolved shapes of the graph inputs (by name, those that are tensors and not
/// initializers), or an error text: every unbound dimension at once, or the first conflict.
pub(super) fn resolve(
    inputs: &[(&str, &proto::type_proto::Tensor)],
    b: &Bindings,
) -> Result<BTreeMap<String, Vec<usize>>, String> {
    let mut declared = Vec::new();
    for (name, t) in inputs {
        declared.push((*name, decls(t).map_err(|e| format!("input `{name}`: {e}"))?));
    }
    for name in b.shapes.keys() {
        if !inputs.iter().any(|(n, _)| n == name) {
            let names: Vec<String> = inputs.iter().map(|(n, _)| format!("`{n}`")).collect();
            return Err(format!(
                "an input shape is given for `{name}`, which is not an input of the model (its inputs: {})",
                names.join(", ")
            ));
        }
    }
    // Named dimensions: the explicit bindings, then what the given input shapes imply.
    let mut named: BTreeMap<String, (usize, String)> = b
        .dims
        .iter()
        .map(|(k, v)| (k.clone(), (*v, format!("dim {k}={v}"))))
        .collect();
    let all_named: Vec<&str> = declared
        .iter()
        .flat_map(|(_, d)| d.iter().flatten())
        .filter_map(|d| match d {
            Decl::Named(p) => Some(p.as_str()),
            _ => None,
        })
        .collect();
    for k in b.dims.keys() {
        if !all_named.contains(&k.as_str()) {
            let mut known: Vec<&str> = all_named.clone();
            known.sort_unstable();
            known.dedup();
            return Err(format!(
                "dimension `{k}` is bound, but no input has a dimension of that name (the model's named dimensions: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                }
            ));
        }
    }
    for (name, d) in &declared {
        let (Some(shape), Some(d)) = (b.shapes.get(*name), d) else {
            continue;
        };
        if shape.len() != d.len() {
            return Err(format!(
                "input `{name}` has {} dimensions, but the shape bound to it has {} ({shape:?})",
                d.len(),
                shape.len()
            ));
        }
        for (i, (decl, &n)) in d.iter().zip(shape).enumerate() {
            match decl {
                Decl::Static(s) if *s != n => {
                    return Err(format!(
                        "input `{name}`: dimension {i} is {s} in the model, but the shape bound to the input says {n}"
                    ))
                }
                Decl::Named(p) => {
                    let by = format!("input shape of `{name}`");
                    match named.get(p) {
                        Some((m, from)) if *m != n => {
                            return Err(format!(
                                "dimension `{p}` is bound to {m} ({from}) and to {n} ({by})"
                            ))
                        }
                        Some(_) => {}
                        None => {
                            named.insert(p.clone(), (n, by));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = BTreeMap::new();
    let mut unbound = Vec::new();
    for (name, d) in &declared {
        if let Some(shape) = b.shapes.get(*name) {
            out.insert(name.to_string(), shape.clone());
            continue;
        }
        let Some(d) = d else {
            unbound.push(format!("`{name}` (no shape at all)"));
            continue;
        };
        let mut shape = Vec::new();
        for (i, decl) in d.iter().enumerate() {
            match decl {
                Decl::Static(s) => shape.push(*s),
                Decl::Named(p) => match named.get(p) {
                    Some((n, _)) => shape.push(*n),
                    None => unbound.push(format!("`{name}` dimension {i} (`{p}`)")),
                },
                Decl::Unknown => unbound.push(format!("`{name}` dimension {i} (unnamed)")),
            }
        }
        out.insert(name.to_string(), shape);
    }
    if !unbound.is_empty() {
        return Err(unbound_message(&declared, &unbound));
    }
    Ok(out)
}

/// The error for unbound dimensions: each of them, then the three ways to bind them, with the
/// model's own input names and dimension names filled in.
fn unbound_message(declared: &[(&str, Option<Vec<Decl>>)], unbound: &[String]) -> String {
    // The first unbound named dimension, for the `.dim` example.
    let params: Vec<&str> = unbound
        .iter()
        .filter_map(|u| u.split_once("(`").map(|(_, p)| p.trim_end_matches("`)")))
        .collect();
    // An example: the first input with an unbound dimension, 1 in each place it needs a size.
    let (ex_name, ex_shape) = declared
        .iter()
        .find(|(_, d)| match d {
            Some(d) => d.iter().any(|x| !matches!(x, Decl::Static(_))),
            None => true,
        })
        .map(|(n, d)| {
            let shape: Vec<String> = match d {
                Some(d) => d
                    .iter()
                    .map(|x| match x {
                        Decl::Static(s) => s.to_string(),
                        _ => "N".to_string(),
                    })
                    .collect(),
                None => vec!["N".into()],
            };
            (n.to_string(), shape)
        })
        .unwrap_or_default();
    let rust_ident = !ex_name.is_empty()
        && ex_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !ex_name.starts_with(|c: char| c.is_ascii_digit());
    let macro_name = if rust_ident {
        ex_name.clone()
    } else {
        format!("{ex_name:?}")
    };
    let mut ways = Vec::new();
    if let Some(p) = params.first() {
        ways.push(format!(
            "in build.rs, `.dim(\"{p}\", N)` or `.input_shape(\"{ex_name}\", [{}])` after `.onnx(..)`",
            ex_shape.join(", ")
        ));
        ways.push(format!(
            "in `model!(Name = \"..\", {macro_name}: [{}])` (with `.scan(\"src\")` in build.rs)",
            ex_shape.join(", ")
        ));
        ways.push(format!(
            "on the command line, `--dim {p}=N` or `--input-shape {ex_name}={}`",
            ex_shape.join(",")
        ));
    } else {
        ways.push(format!(
            "in build.rs, `.input_shape(\"{ex_name}\", [{}])` after `.onnx(..)`",
            ex_shape.join(", ")
        ));
        ways.push(format!(
            "in `model!(Name = \"..\", {macro_name}: [{}])` (with `.scan(\"src\")` in build.rs)",
            ex_shape.join(", ")
        ));
        ways.push(format!(
            "on the command line, `--input-shape {ex_name}={}`",
            ex_shape.join(",")
        ));
    }
    format!(
        "{} input dimension(s) have no static size: {}. Collage compiles static shapes: bind them {}",
        unbound.len(),
        unbound.join(", "),
        ways.join("; or ")
    )
}
