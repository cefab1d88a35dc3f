//! Errors of the compiler. Every user-facing error names what went wrong and where: the node, its
//! operator and what was expected.
use std::path::PathBuf;

use thiserror::Error;

/// A problem with one operator instance, before the driver adds the node name and op.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum OpError {
    /// An input, attribute or type was not what the operator accepts.
    #[error("expected {expected}, got {got}")]
    Expected {
        /// What the operator accepts.
        expected: String,
        /// What it was given.
        got: String,
    },
    /// An input must be known at compile time (shapes are static) but is computed at run time.
    #[error(
        "input {index} ({what}) must be a compile-time constant: shapes are static in Collage; \
             pass it as an initializer or bind the graph input to a value"
    )]
    NeedsConstant {
        /// Input position.
        index: usize,
        /// What the input means to the operator.
        what: &'static str,
        /// The graph inputs the value depends on, when known.
        graph_inputs: Vec<String>,
    },
    /// A valid ONNX feature this compiler does not implement.
    #[error("not supported: {0}")]
    Unsupported(String),
}

impl OpError {
    /// Shorthand for [`OpError::Expected`].
    pub fn expected(expected: impl Into<String>, got: impl std::fmt::Display) -> Self {
        OpError::Expected {
            expected: expected.into(),
            got: got.to_string(),
        }
    }
}

/// A compiler error.
#[derive(Debug, Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a valid ONNX model (truncated, corrupted, or not protobuf).
    #[error("{}: not a valid ONNX model: {detail}", path.display())]
    Decode {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        detail: String,
    },
    /// Operators this compiler does not support, all of them at once.
    #[error("unsupported operators ({} kinds): {}", ops.len(), ops.iter().map(|(op, nodes)| format!("{op} (nodes: {})", nodes.join(", "))).collect::<Vec<_>>().join("; "))]
    UnsupportedOps {
        /// Op type and the nodes that use it, sorted by op type.
        ops: Vec<(String, Vec<String>)>,
    },
    /// A node is invalid or cannot be compiled.
    #[error("node `{node}` ({op}): {error}")]
    Node {
        /// Node name.
        node: String,
        /// Op type.
        op: String,
        /// What is wrong.
        error: OpError,
    },
    /// The model as a whole is invalid (a missing input type, a dangling value, ...).
    #[error("model `{model}`: {detail}")]
    Model {
        /// Model name.
        model: String,
        /// What is wrong.
        detail: String,
    },
    /// An IR invariant was broken after a pass: a compiler bug.
    #[error("internal error after pass `{pass}`: {detail}")]
    Verify {
        /// The pass that ran last.
        pass: &'static str,
        /// The broken invariant.
        detail: String,
    },
    /// The C compiler failed.
    #[error("C compiler failed on {}: {detail}", path.display())]
    CCompile {
        /// The generated source.
        path: PathBuf,
        /// Compiler output.
        detail: String,
    },
    /// Loading or calling a compiled model failed.
    #[error("loading compiled model {}: {detail}", path.display())]
    Load {
        /// The shared library.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// A `model!` DSL block is invalid.
    #[error("{file}:{line}:{column}: model! {model}: {detail}")]
    Dsl {
        /// The source file.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The model name.
        model: String,
        /// What is wrong.
        detail: String,
    },
    /// The cost cache cannot be used (corrupt, foreign target, ...): a `tune::CacheError`,
    /// boxed because the cache sits above this module (`From<CacheError>` is in `tune`).
    #[error(transparent)]
    Cache(Box<dyn std::error::Error + Send + Sync>),
    /// Bad options (an unknown backend, ...).
    #[error("{0}")]
    Usage(String),
    /// Bad input data given to `run` (wrong shape or dtype).
    #[error("input `{name}`: {detail}")]
    Data {
        /// The graph input.
        name: String,
        /// What is wrong.
        detail: String,
    },
}

/// Result with the compiler's [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}
