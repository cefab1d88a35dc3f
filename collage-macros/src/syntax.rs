//! The syntax of the `model!` DSL, shared by the macro (for spanned errors) and by `collage-build`
//! (which compiles the blocks it finds when scanning sources).
//!
//! ```text
//! model! {
//!     pub Mlp {
//!         input x: f32[1, 784];
//!         weights "weights/mlp.safetensors";
//!         let h = relu(x @ w1 + b1);
//!         output y = h @ w2 + b2;
//!     }
//! }
//! ```
//! Expressions: `a @ b` (MatMul), `* /` (same precedence as `@`), `+ -`, unary `-`, parentheses,
//! numeric literals (scalars), `[..]` integer lists, and calls `op(args.., attr = value)` where `op`
//! is the snake_case name of an ONNX operator (`relu`, `softmax`, `global_average_pool`, ...).
use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{braced, bracketed, parenthesized, Ident, LitFloat, LitInt, LitStr, Token, Visibility};

/// One `model!` block.
pub struct ModelDef {
    /// The visibility of the generated type.
    pub vis: Visibility,
    /// The type name.
    pub name: Ident,
    /// Statements in order.
    pub items: Vec<Item>,
}

/// A statement.
pub enum Item {
    /// `input x: f32[1, 784];`
    Input {
        /// The input name.
        name: Ident,
        /// The element type name.
        dtype: Ident,
        /// Dimensions.
        dims: Vec<LitInt>,
    },
    /// `weights "file.safetensors";`
    Weights(LitStr),
    /// `let h = expr;`
    Let {
        /// The bound name.
        name: Ident,
        /// The value.
        expr: DExpr,
    },
    /// `output y = expr;`
    Output {
        /// The output name.
        name: Ident,
        /// The value.
        expr: DExpr,
    },
}

/// Binary operators of the DSL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinKind {
    /// `@`: MatMul.
    MatMul,
    /// `*`: Mul.
    Mul,
    /// `/`: Div.
    Div,
    /// `+`: Add.
    Add,
    /// `-`: Sub.
    Sub,
}

impl BinKind {
    /// The ONNX op type.
    pub fn op_type(self) -> &'static str {
        match self {
            BinKind::MatMul => "MatMul",
            BinKind::Mul => "Mul",
            BinKind::Div => "Div",
            BinKind::Add => "Add",
            BinKind::Sub => "Sub",
        }
    }
}

/// An attribute value in a call.
pub enum AttrValue {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// Integers.
    Ints(Vec<i64>),
}

/// An expression.
pub enum DExpr {
    /// A name: input, `let`, or weight.
    Name(Ident),
    /// A scalar number.
    Num(f64, Span),
    /// An integer list (a constant i64 tensor).
    List(Vec<i64>, Span),
    /// `-e`.
    Neg(Box<DExpr>, Span),
    /// `a op b`.
    Bin(BinKind, Box<DExpr>, Box<DExpr>, Span),
    /// `f(args, k = v)`.
    Call {
        /// The function.
        func: Ident,
        /// Positional arguments (operator inputs).
        args: Vec<DExpr>,
        /// Keyword arguments (operator attributes).
        attrs: Vec<(Ident, AttrValue)>,
    },
}

impl DExpr {
    /// A span for messages.
    pub fn span(&self) -> Span {
        match self {
            DExpr::Name(i) => i.span(),
            DExpr::Num(_, s) | DExpr::List(_, s) | DExpr::Neg(_, s) | DExpr::Bin(_, _, _, s) => *s,
            DExpr::Call { func, .. } => func.span(),
        }
    }
}

/// The DSL's functions: snake_case name → ONNX op type.
pub const FUNCTIONS: &[(&str, &str)] = &[
    ("abs", "Abs"),
    ("add", "Add"),
    ("average_pool", "AveragePool"),
    ("batch_norm", "BatchNormalization"),
    ("cast", "Cast"),
    ("clip", "Clip"),
    ("concat", "Concat"),
    ("conv", "Conv"),
    ("div", "Div"),
    ("elu", "Elu"),
    ("erf", "Erf"),
    ("exp", "Exp"),
    ("flatten", "Flatten"),
    ("gather", "Gather"),
    ("gelu", "Gelu"),
    ("gemm", "Gemm"),
    ("global_average_pool", "GlobalAveragePool"),
    ("global_max_pool", "GlobalMaxPool"),
    ("hard_sigmoid", "HardSigmoid"),
    ("hard_swish", "HardSwish"),
    ("identity", "Identity"),
    ("layer_norm", "LayerNormalization"),
    ("leaky_relu", "LeakyRelu"),
    ("log", "Log"),
    ("log_softmax", "LogSoftmax"),
    ("matmul", "MatMul"),
    ("max", "Max"),
    ("max_pool", "MaxPool"),
    ("mean", "Mean"),
    ("min", "Min"),
    ("mul", "Mul"),
    ("neg", "Neg"),
    ("pad", "Pad"),
    ("pow", "Pow"),
    ("reciprocal", "Reciprocal"),
    ("reduce_max", "ReduceMax"),
    ("reduce_mean", "ReduceMean"),
    ("reduce_sum", "ReduceSum"),
    ("relu", "Relu"),
    ("reshape", "Reshape"),
    ("sigmoid", "Sigmoid"),
    ("silu", "Swish"),
    ("slice", "Slice"),
    ("softmax", "Softmax"),
    ("softplus", "Softplus"),
    ("split", "Split"),
    ("sqrt", "Sqrt"),
    ("squeeze", "Squeeze"),
    ("sub", "Sub"),
    ("tanh", "Tanh"),
    ("transpose", "Transpose"),
    ("unsqueeze", "Unsqueeze"),
    ("where_", "Where"),
];

/// The ONNX op type of a DSL function.
pub fn op_type_of(func: &str) -> Option<&'static str> {
    FUNCTIONS.iter().find(|(f, _)| *f == func).map(|(_, o)| *o)
}

/// Element types the DSL accepts.
pub const DTYPES: &[&str] = &["f32", "f64", "i32", "i64", "bool"];

impl Parse for ModelDef {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let vis: Visibility = input.parse()?;
        let name: Ident = input.parse()?;
        let body;
        braced!(body in input);
        let mut items = Vec::new();
        while !body.is_empty() {
            items.push(body.parse()?);
        }
        Ok(ModelDef { vis, name, items })
    }
}

impl Parse for Item {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let la = input.lookahead1();
        let item = if input.peek(Token![let]) {
            input.parse::<Token![let]>()?;
            let name: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            Item::Let {
                name,
                expr: parse_expr_tree(input)?,
            }
        } else if la.peek(Ident) {
            let kw: Ident = input.parse()?;
            match kw.to_string().as_str() {
                "input" => {
                    let name: Ident = input.parse()?;
                    input.parse::<Token![:]>()?;
                    let dtype: Ident = input.parse()?;
                    if !DTYPES.contains(&dtype.to_string().as_str()) {
                        return Err(syn::Error::new(
                            dtype.span(),
                            format!(
                                "unknown element type `{dtype}`: expected one of {}",
                                DTYPES.join(", ")
                            ),
                        ));
                    }
                    let dims_tokens;
                    bracketed!(dims_tokens in input);
                    let dims = dims_tokens
                        .parse_terminated(LitInt::parse, Token![,])?
                        .into_iter()
                        .collect();
                    Item::Input { name, dtype, dims }
                }
                "weights" => Item::Weights(input.parse()?),
                "output" => {
                    let name: Ident = input.parse()?;
                    input.parse::<Token![=]>()?;
                    Item::Output {
                        name,
                        expr: parse_expr_tree(input)?,
                    }
                }
                other => {
                    return Err(syn::Error::new(
                        kw.span(),
                        format!("expected `input`, `weights`, `let` or `output`, found `{other}`"),
                    ))
                }
            }
        } else {
            return Err(la.error());
        };
        input.parse::<Token![;]>()?;
        Ok(item)
    }
}

fn peek_bin(input: ParseStream) -> Option<(BinKind, u8)> {
    if input.peek(Token![@]) {
        Some((BinKind::MatMul, 2))
    } else if input.peek(Token![*]) {
        Some((BinKind::Mul, 2))
    } else if input.peek(Token![/]) {
        Some((BinKind::Div, 2))
    } else if input.peek(Token![+]) {
        Some((BinKind::Add, 1))
    } else if input.peek(Token![-]) {
        Some((BinKind::Sub, 1))
    } else {
        None
    }
}

/// How deeply an expression may nest: parentheses, unary minus, call arguments and operands
/// of binary operators all count, and so does every term of a chain like `a + b + c` (its tree
/// is that deep). The parser and every later walk over the tree recurse, so a deeper expression
/// is an error rather than a stack overflow of the compiler.
pub const MAX_NESTING: usize = 256;

fn too_deep(span: Span) -> syn::Error {
    syn::Error::new(
        span,
        format!(
            "expression nested more than {MAX_NESTING} levels deep: split it with `let` bindings"
        ),
    )
}

/// An expression; its tree is at most [`MAX_NESTING`] deep.
fn parse_expr_tree(input: ParseStream) -> syn::Result<DExpr> {
    Ok(parse_expr(input, 0, 1)?.0)
}

/// An expression of operators binding tighter than `min_prec`, and the height of its tree;
/// `level` is how deeply the parser has recursed.
fn parse_expr(input: ParseStream, min_prec: u8, level: usize) -> syn::Result<(DExpr, usize)> {
    let (mut lhs, mut height) = parse_unary(input, level)?;
    while let Some((kind, prec)) = peek_bin(input) {
        if prec <= min_prec {
            break;
        }
        let span = input.span();
        let _: proc_macro2::TokenTree = input.parse()?;
        let (rhs, rhs_height) = parse_expr(input, prec, level + 1)?;
        height = height.max(rhs_height) + 1;
        if height > MAX_NESTING {
            return Err(too_deep(span));
        }
        lhs = DExpr::Bin(kind, Box::new(lhs), Box::new(rhs), span);
    }
    Ok((lhs, height))
}

fn parse_int_list(input: ParseStream) -> syn::Result<(Vec<i64>, Span)> {
    let span = input.span();
    let content;
    bracketed!(content in input);
    let mut v = Vec::new();
    while !content.is_empty() {
        let neg = content.peek(Token![-]);
        if neg {
            content.parse::<Token![-]>()?;
        }
        let lit: LitInt = content.parse()?;
        let x: i64 = lit.base10_parse()?;
        v.push(if neg { -x } else { x });
        if !content.is_empty() {
            content.parse::<Token![,]>()?;
        }
    }
    Ok((v, span))
}

/// A unary expression (a leaf, `-e`, `(e)` or a call) and the height of its tree.
fn parse_unary(input: ParseStream, level: usize) -> syn::Result<(DExpr, usize)> {
    if level > MAX_NESTING {
        return Err(too_deep(input.span()));
    }
    if input.peek(Token![-]) {
        let span = input.span();
        input.parse::<Token![-]>()?;
        let (e, height) = parse_unary(input, level + 1)?;
        if height >= MAX_NESTING {
            return Err(too_deep(span));
        }
        return Ok((DExpr::Neg(Box::new(e), span), height + 1));
    }
    if input.peek(syn::token::Paren) {
        let content;
        parenthesized!(content in input);
        return parse_expr(&content, 0, level + 1);
    }
    if input.peek(syn::token::Bracket) {
        let (v, span) = parse_int_list(input)?;
        return Ok((DExpr::List(v, span), 1));
    }
    if input.peek(LitFloat) {
        let l: LitFloat = input.parse()?;
        return Ok((DExpr::Num(l.base10_parse()?, l.span()), 1));
    }
    if input.peek(LitInt) {
        let l: LitInt = input.parse()?;
        return Ok((DExpr::Num(l.base10_parse::<i64>()? as f64, l.span()), 1));
    }
    let name: Ident = input.parse()?;
    if !input.peek(syn::token::Paren) {
        return Ok((DExpr::Name(name), 1));
    }
    if op_type_of(&name.to_string()).is_none() {
        return Err(syn::Error::new(
            name.span(),
            format!(
                "unknown function `{name}`; known: {}",
                FUNCTIONS
                    .iter()
                    .map(|(f, _)| *f)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let content;
    parenthesized!(content in input);
    let mut args = Vec::new();
    let mut attrs = Vec::new();
    let mut height = 0;
    while !content.is_empty() {
        if content.peek(Ident) && content.peek2(Token![=]) {
            let k: Ident = content.parse()?;
            content.parse::<Token![=]>()?;
            attrs.push((k, parse_attr(&content)?));
        } else {
            if !attrs.is_empty() {
                return Err(content.error("positional arguments must come before attributes"));
            }
            let (arg, arg_height) = parse_expr(&content, 0, level + 1)?;
            height = height.max(arg_height);
            args.push(arg);
        }
        if !content.is_empty() {
            content.parse::<Token![,]>()?;
        }
    }
    if height >= MAX_NESTING {
        return Err(too_deep(name.span()));
    }
    Ok((
        DExpr::Call {
            func: name,
            args,
            attrs,
        },
        height + 1,
    ))
}

fn parse_attr(input: ParseStream) -> syn::Result<AttrValue> {
    if input.peek(LitStr) {
        return Ok(AttrValue::Str(input.parse::<LitStr>()?.value()));
    }
    if input.peek(syn::token::Bracket) {
        return Ok(AttrValue::Ints(parse_int_list(input)?.0));
    }
    let neg = input.peek(Token![-]);
    if neg {
        input.parse::<Token![-]>()?;
    }
    let s = if neg { -1.0 } else { 1.0 };
    if input.peek(LitFloat) {
        return Ok(AttrValue::Float(
            s * input.parse::<LitFloat>()?.base10_parse::<f64>()?,
        ));
    }
    let l: LitInt = input.parse()?;
    Ok(AttrValue::Int(s as i64 * l.base10_parse::<i64>()?))
}

/// Checks names: every name used is an input, an earlier `let`/`output`, or (when `weights` is
/// given) possibly a weight; duplicates are errors; at least one output. `is_weight` says whether a
/// name is in the weights file (`None` when the file could not be read: names are then not checked).
pub fn check(def: &ModelDef, is_weight: &dyn Fn(&str) -> Option<bool>) -> syn::Result<()> {
    let mut defined: Vec<String> = Vec::new();
    let mut outputs = 0;
    let mut has_weights = false;
    fn walk(
        e: &DExpr,
        defined: &[String],
        has_weights: bool,
        is_weight: &dyn Fn(&str) -> Option<bool>,
    ) -> syn::Result<()> {
        match e {
            DExpr::Name(n) => {
                let s = n.to_string();
                if defined.contains(&s) {
                    return Ok(());
                }
                match (has_weights, is_weight(&s)) {
                    (true, Some(true)) | (true, None) => Ok(()),
                    (true, Some(false)) => Err(syn::Error::new(n.span(), format!("`{s}` is not an input, a `let`, or a tensor of the weights file"))),
                    (false, _) => Err(syn::Error::new(n.span(), format!("`{s}` is not defined (inputs and `let`s must come before use; weights need a `weights \"file.safetensors\";` line)"))),
                }
            }
            DExpr::Num(..) | DExpr::List(..) => Ok(()),
            DExpr::Neg(a, _) => walk(a, defined, has_weights, is_weight),
            DExpr::Bin(_, a, b, _) => {
                walk(a, defined, has_weights, is_weight)?;
                walk(b, defined, has_weights, is_weight)
            }
            DExpr::Call { args, .. } => args
                .iter()
                .try_for_each(|a| walk(a, defined, has_weights, is_weight)),
        }
    }
    for it in &def.items {
        let (name, expr) = match it {
            Item::Input { name, .. } => (name, None),
            Item::Weights(_) => {
                has_weights = true;
                continue;
            }
            Item::Let { name, expr } => (name, Some(expr)),
            Item::Output { name, expr } => {
                outputs += 1;
                (name, Some(expr))
            }
        };
        if let Some(e) = expr {
            walk(e, &defined, has_weights, is_weight)?;
        }
        let s = name.to_string();
        if defined.contains(&s) {
            return Err(syn::Error::new(
                name.span(),
                format!("`{s}` is defined twice"),
            ));
        }
        defined.push(s);
    }
    if outputs == 0 {
        return Err(syn::Error::new(
            def.name.span(),
            format!("model `{}` has no `output`", def.name),
        ));
    }
    Ok(())
}

/// `model!(Vis Name = "path.onnx")`, optionally with sizes for the model's symbolic input
/// dimensions: `model!(pub Ocr = "ocr.onnx", x: [1, 3, 48, 320], batch = 1)` (an input's whole
/// shape, `name: [..]`, or a named dimension, `name = N`; names that are not Rust identifiers are
/// written as strings: `"input.1": [1, 3]`).
pub struct OnnxBinding {
    /// The visibility of the generated type.
    pub vis: Visibility,
    /// The type name.
    pub name: Ident,
    /// The model file, relative to the crate's manifest.
    pub path: LitStr,
    /// Named dimensions and their sizes.
    pub dims: Vec<(String, usize)>,
    /// Inputs and their whole shapes.
    pub shapes: Vec<(String, Vec<usize>)>,
    /// A named dimension served over a range of sizes, `width = 32..=1024`: its name, smallest
    /// and largest sizes.
    pub range: Option<(String, usize, usize)>,
}

impl Parse for OnnxBinding {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let vis = input.parse()?;
        let name = input.parse()?;
        input.parse::<Token![=]>()?;
        let path: LitStr = input.parse()?;
        let (mut dims, mut shapes): (Vec<(String, usize)>, Vec<(String, Vec<usize>)>) =
            (Vec::new(), Vec::new());
        let mut range: Option<(String, usize, usize)> = None;
        while input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let (key, span) = if input.peek(LitStr) {
                let s: LitStr = input.parse()?;
                (s.value(), s.span())
            } else {
                let id = input.call(Ident::parse_any)?;
                (id.to_string(), id.span())
            };
            if dims.iter().any(|(k, _)| *k == key)
                || shapes.iter().any(|(k, _)| *k == key)
                || range.as_ref().is_some_and(|(k, _, _)| *k == key)
            {
                return Err(syn::Error::new(span, format!("`{key}` is bound twice")));
            }
            if input.peek(Token![=]) {
                input.parse::<Token![=]>()?;
                let n: LitInt = input.parse()?;
                if input.peek(Token![..=]) {
                    input.parse::<Token![..=]>()?;
                    let hi: LitInt = input.parse()?;
                    let (lo, hi): (usize, usize) = (n.base10_parse()?, hi.base10_parse()?);
                    if range.is_some() {
                        return Err(syn::Error::new(
                            span,
                            "one dimension may be served over a range; bind the others to sizes",
                        ));
                    }
                    if lo == 0 || lo >= hi {
                        return Err(syn::Error::new(
                            n.span(),
                            format!("the range {lo}..={hi} of `{key}`: expected 1 <= low < high"),
                        ));
                    }
                    range = Some((key, lo, hi));
                    continue;
                }
                dims.push((key, n.base10_parse()?));
            } else if input.peek(Token![:]) {
                input.parse::<Token![:]>()?;
                let content;
                bracketed!(content in input);
                let ds = content.parse_terminated(LitInt::parse, Token![,])?;
                shapes.push((
                    key,
                    ds.iter()
                        .map(|d| d.base10_parse())
                        .collect::<syn::Result<_>>()?,
                ));
            } else {
                return Err(syn::Error::new(
                    span,
                    format!("expected `{key} = SIZE` (a named dimension), `{key} = LOW..=HIGH` (a dimension served over a range) or `{key}: [D0, D1, ..]` (an input's shape)"),
                ));
            }
        }
        if !input.is_empty() {
            return Err(
                input.error("expected `,` and a binding (`batch = 1` or `x: [1, 3, 224, 224]`)")
            );
        }
        Ok(OnnxBinding {
            vis,
            name,
            path,
            dims,
            shapes,
            range,
        })
    }
}

use syn::ext::IdentExt;

impl OnnxBinding {
    /// Whether any dimension is bound (the model is then compiled by `Build::scan`, not
    /// `Build::onnx`).
    pub fn is_bound(&self) -> bool {
        !self.dims.is_empty() || !self.shapes.is_empty() || self.range.is_some()
    }

    /// The canonical text of the bindings; equal to `collage_build`'s `Bindings::key` (and,
    /// with a range, [`ranged_key`]).
    pub fn key(&self) -> String {
        let key = binding_key(
            self.dims.iter().map(|(k, v)| (k.as_str(), *v)),
            self.shapes.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
        );
        match &self.range {
            Some((d, lo, hi)) => ranged_key(&key, d, *lo, *hi),
            None => key,
        }
    }
}

/// The canonical text of bindings `key` with dimension `dim` served over `lo..=hi`.
pub fn ranged_key(key: &str, dim: &str, lo: usize, hi: usize) -> String {
    if key.is_empty() {
        format!("{dim}={lo}..={hi}")
    } else {
        format!("{key};{dim}={lo}..={hi}")
    }
}

/// The canonical text of a set of bindings: the named dimensions sorted (`batch=1`), then the
/// input shapes sorted (`x:1,3,48,320`), joined by `;`.
pub fn binding_key<'a>(
    dims: impl Iterator<Item = (&'a str, usize)>,
    shapes: impl Iterator<Item = (&'a str, &'a [usize])>,
) -> String {
    let mut d: Vec<String> = dims.map(|(k, v)| format!("{k}={v}")).collect();
    d.sort();
    let mut s: Vec<String> = shapes
        .map(|(k, v)| {
            let v: Vec<String> = v.iter().map(|x| x.to_string()).collect();
            format!("{k}:{}", v.join(","))
        })
        .collect();
    s.sort();
    d.extend(s);
    d.join(";")
}

/// The file key of an ONNX model bound by `model!(..)` with sizes: the model's own key (its path
/// sanitized), two underscores and a hash of the bindings' key (FNV-1a, 64 bits): distinct
/// bindings of one model get distinct files.
pub fn bound_symbol(path_symbol: &str, key: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{path_symbol}__{h:016x}")
}
