//! The `blas` backend: matrix products by the system CBLAS (OpenBLAS, `-lopenblas`), called
//! directly from the generated C. Compiled in with the `blas` feature (default); offered only
//! when a test program using `cblas_sgemm` compiles and links here, so a machine without the
//! library simply does not get the backend.
use std::sync::OnceLock;

use super::gemm::GemmLibrary;

/// The `blas` backend.
pub fn backend() -> GemmLibrary {
    GemmLibrary { name: "blas" }
}

const PROBE: &str = "void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, \
const float *, int, float, float *, int);\nint main(void) { float a = 1, b = 2, c = 0; \
cblas_sgemm(101, 111, 111, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1); return c == 2.0f ? 0 : 1; }\n";

/// Whether CBLAS links on this machine (probed once per process; `COLLAGE_NO_BLAS` disables).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        cfg!(feature = "blas")
            && std::env::var_os("COLLAGE_NO_BLAS").is_none()
            && crate::native::probe_link(PROBE, &["openblas"])
    })
}
