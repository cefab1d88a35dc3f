//! The `dnnl` backend: oneDNN (`-ldnnl`, OpenMP runtime `-lgomp`), called from the generated C
//! through its C API header (`dnnl.h`).
//!
//! - 2-D convolutions (grouped, strided, dilated, padded) run on oneDNN's convolution primitive,
//!   with the bias and the fused consumers as its post-ops where they have that form: a residual
//!   `Add` as the sum post-op, `Relu` as an eltwise post-op; other consumers run in place after
//!   the call;
//! - 2-D `MaxPool` / `AveragePool` run on its pooling primitive;
//! - MatMul, Gemm and the other convolutions run as GEMMs by `dnnl_sgemm` (over an im2col
//!   buffer for convolutions), with the consumers as an in-place epilogue.
//!
//! Primitives are created when a model instance is (`codegen::dnnl`), never in `run`. Compiled
//! in with the `dnnl` feature (default); offered only when a test program including `dnnl.h`
//! compiles and links here, so a machine without oneDNN simply does not get the backend.
use std::sync::OnceLock;

use super::gemm::{gemm_rule, CONTRACTIONS};
use super::Backend;
use crate::ops::OpKind;
use crate::partition::rule::PartitionRule;

/// The pooling operators with a oneDNN primitive.
pub const POOLS: &[&str] = &["MaxPool", "AveragePool"];

/// The `dnnl` backend.
#[derive(Debug)]
pub struct DnnlBackend;

impl Backend for DnnlBackend {
    fn name(&self) -> &'static str {
        "dnnl"
    }

    fn supports(&self, op_type: &str, _kind: OpKind) -> bool {
        CONTRACTIONS.contains(&op_type) || POOLS.contains(&op_type)
    }

    /// The GEMM libraries' rule (a contraction and its elementwise consumers), and every
    /// pooling node on its own. Whether a node's geometry fits a primitive (2-D, f32, no
    /// window wholly in the padding, ...) is decided when it is lowered: a candidate computing
    /// nothing on oneDNN is dropped.
    fn rule(&self) -> PartitionRule {
        PartitionRule::Union(vec![gemm_rule(), PartitionRule::ops(POOLS)])
    }

    fn library(&self) -> bool {
        true
    }
}

/// The `dnnl` backend.
pub fn backend() -> DnnlBackend {
    DnnlBackend
}

const PROBE: &str = "#include <stdint.h>\n#include <dnnl.h>\nint main(void) { float a = 1, b = 2, \
c = 0; dnnl_engine_t e; if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success) return 1; \
dnnl_engine_destroy(e); return dnnl_sgemm('N', 'N', 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1) \
== dnnl_success && c == 2.0f ? 0 : 1; }\n";

/// Whether oneDNN (header and library) works on this machine (probed once per process;
/// `COLLAGE_NO_DNNL` disables).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        cfg!(feature = "dnnl")
            && std::env::var_os("COLLAGE_NO_DNNL").is_none()
            && crate::native::probe_link(PROBE, &["dnnl", "gomp"])
    })
}
