//! The `dnnl` backend: matrix products (MatMul, Gemm, convolutions lowered to a GEMM over an
//! im2col buffer) by oneDNN's `dnnl_sgemm` (`-ldnnl`, OpenMP runtime `-lgomp`), called directly
//! from the generated C with its elementwise consumers as an in-place epilogue. Compiled in with
//! the `dnnl` feature (default); offered only when a test program calling `dnnl_sgemm` links
//! here, so a machine without oneDNN simply does not get the backend.
use std::sync::OnceLock;

use super::gemm::{gemm_rule, CONTRACTIONS};
use super::Backend;
use crate::ops::OpKind;
use crate::partition::rule::PartitionRule;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct DnnlBackend;

impl Backend for DnnlBackend {
    fn name(&self) -> &'static str {
        "dnnl"
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

    fn link_libs(&self) -> &'static [&'static str] {
        &["dnnl", "gomp"]
    }
}

const PROBE: &str = "#include <stdint.h>\nint dnnl_sgemm(char, char, int64_t, int64_t, int64_t, \
float, const float *, int64_t, const float *, int64_t, float, float *, int64_t);\nint main(void) \
{ float a = 1, b = 2, c = 0; return dnnl_sgemm('N', 'N', 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1) \
== 0 && c == 2.0f ? 0 : 1; }\n";

/// Whether oneDNN links on this machine (probed once per process; `COLLAGE_NO_DNNL` disables).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        cfg!(feature = "dnnl")
            && std::env::var_os("COLLAGE_NO_DNNL").is_none()
            && crate::native::probe_link(PROBE, &["dnnl", "gomp"])
    })
}
