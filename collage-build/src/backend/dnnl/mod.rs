//! The `dnnl` backend: matrix products (MatMul, Gemm, convolutions lowered to a GEMM over an
//! im2col buffer) by oneDNN's `dnnl_sgemm` (`-ldnnl`, OpenMP runtime `-lgomp`), called directly
//! from the generated C with its elementwise consumers as an in-place epilogue. Compiled in with
//! the `dnnl` feature (default); offered only when a test program calling `dnnl_sgemm` links
//! here, so a machine without oneDNN simply does not get the backend.
use std::sync::OnceLock;

use super::gemm::GemmLibrary;

/// The `dnnl` backend.
pub fn backend() -> GemmLibrary {
    GemmLibrary { name: "dnnl" }
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
