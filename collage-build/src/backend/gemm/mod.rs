//! The `gemm` backend: matrix products (MatMul, Gemm, and convolutions that lower to a GEMM over
//! an im2col buffer) computed by the pure-Rust `gemm` crate, which the generated C reaches through
//! the runtime's `sgemm` callback (`collage_runtime::RawRt`). Elementwise consumers (bias, ReLU,
//! residual add) join the product as an in-place epilogue.
use super::Backend;
use crate::ops::OpKind;
use crate::partition::rule::{Combiner, PartitionRule};
use crate::partition::sub_graph::SubGraphConfig;

/// The operators whose contraction a GEMM library can compute.
pub const CONTRACTIONS: &[&str] = &["MatMul", "Gemm", "Conv"];

/// The rule shared by GEMM libraries: one contraction, optionally followed by a chain of
/// elementwise and broadcast consumers (its epilogue), single exit, at most 4 nodes deep. Whether
/// a matched contraction really is an f32 GEMM (grouped convolutions, direct small convolutions
/// are not), and that a candidate contains one, is decided when it is lowered and priced: other
/// candidates are dropped.
pub fn gemm_rule() -> PartitionRule {
    let anchors = PartitionRule::ops(CONTRACTIONS);
    let epilogues = PartitionRule::kinds(&[OpKind::Elementwise, OpKind::Broadcast]);
    let grown = PartitionRule::Combine {
        inner: Box::new(PartitionRule::Union(vec![anchors, epilogues])),
        combiners: vec![Combiner::OUT_ELEMENTWISE],
        max_depth: Some(4),
    };
    PartitionRule::only_valid(
        grown,
        SubGraphConfig {
            max_exits: Some(1),
            max_depth: Some(4),
            allow_taps: false,
        },
    )
}

/// A backend whose kernels are library GEMM calls (`gemm`, `blas`): they share
/// [`gemm_rule`] and differ only in the library the generated code calls.
#[derive(Debug)]
pub struct GemmLibrary {
    /// The backend.
    pub id: super::BackendId,
    /// Its C helpers ([`Backend::c_prelude`]).
    pub c_prelude: &'static str,
    /// Its libraries ([`Backend::links`]).
    pub links: &'static [&'static str],
    /// Its block GEMM function ([`Backend::gemm_fn`]).
    pub gemm_fn: &'static str,
    /// Whether that function takes any strides ([`Backend::any_strides`]).
    pub any_strides: bool,
}

impl Backend for GemmLibrary {
    fn id(&self) -> super::BackendId {
        self.id
    }

    fn supports(&self, op_type: &str, _kind: OpKind) -> bool {
        CONTRACTIONS.contains(&op_type)
    }

    fn rule(&self) -> PartitionRule {
        gemm_rule()
    }

    fn library(&self) -> bool {
        true
    }

    fn c_prelude(&self) -> &'static str {
        self.c_prelude
    }

    fn links(&self) -> &'static [&'static str] {
        self.links
    }

    fn gemm_fn(&self) -> Option<&'static str> {
        Some(self.gemm_fn)
    }

    fn any_strides(&self) -> bool {
        self.any_strides
    }
}

/// Fill and stroke of the backend's nodes in `collage explain --html`.
pub const COLOUR: (&str, &str) = ("#d8f0d2", "#3d8a36");

/// The backend (always available).
pub fn open() -> Result<Box<dyn super::Backend>, super::Unavailable> {
    Ok(Box::new(backend()))
}

/// The `gemm` backend (always available: the crate is a dependency of the runtime).
pub fn backend() -> GemmLibrary {
    GemmLibrary {
        id: super::BackendId::Gemm,
        c_prelude: "",
        links: &[],
        // The runtime's callback into the `gemm` crate.
        gemm_fn: "rt->sgemm",
        any_strides: true,
    }
}
