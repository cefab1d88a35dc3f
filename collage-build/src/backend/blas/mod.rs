//! The `blas` backend: matrix products by the system CBLAS (OpenBLAS, `-lopenblas`), called
//! directly from the generated C. Compiled in with the `blas` feature (default); offered only
//! when a test program using `cblas_sgemm` compiles and links here, so a machine without the
//! library simply does not get the backend.
use std::sync::OnceLock;

use super::gemm::GemmLibrary;

/// Fill and stroke of the backend's nodes in `collage explain --html`.
pub const COLOUR: (&str, &str) = ("#fde3c8", "#c0692a");

/// The backend if the `blas` feature is on and CBLAS links here.
pub fn open() -> Result<Box<dyn super::Backend>, super::Unavailable> {
    super::optional(
        super::BackendId::Blas,
        cfg!(feature = "blas"),
        available,
        || Box::new(backend()),
        NEEDS,
    )
}

/// The `blas` backend.
pub fn backend() -> GemmLibrary {
    GemmLibrary {
        id: super::BackendId::Blas,
        c_prelude: C_PRELUDE,
        links: &["openblas"],
        gemm_fn: "cl_blas_sgemm",
        any_strides: false,
    }
}

const PROBE: &str = "void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, \
const float *, int, float, float *, int);\nint main(void) { float a = 1, b = 2, c = 0; \
cblas_sgemm(101, 111, 111, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1); return c == 2.0f ? 0 : 1; }\n";

/// The BLAS (cblas) adapter, declared without the header (the ABI is fixed by the standard:
/// row-major 101, no transpose 111, transpose 112), compiled in when a program uses `blas`.
pub const C_PRELUDE: &str = r#"
#ifndef CL_BLAS_PRELUDE
#define CL_BLAS_PRELUDE
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);
/* OpenBLAS runs its own threads unless told otherwise; every call here is already one block of a
   parallel loop, so it runs on one thread (weak: absent in other BLAS implementations). */
void openblas_set_num_threads(int) __attribute__((weak));
static inline void cl_blas_sgemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_rs, int64_t a_cs,
                          const float *b, int64_t b_rs, int64_t b_cs, float *c, int64_t ldc) {
    static int single = 0;
    if (!single) { if (openblas_set_num_threads) openblas_set_num_threads(1); single = 1; }
    cl_blas_layout l = cl_blas_layout_of(m, n, k, a_rs, a_cs, b_rs, b_cs);
    cblas_sgemm(101, l.na ? 111 : 112, l.nb ? 111 : 112, (int)m, (int)n, (int)k, 1.0f, a, (int)l.lda, b,
                (int)l.ldb, 0.0f, c, (int)ldc);
}
#endif
"#;

/// What the backend needs on the build machine, for the "not available" error.
pub const NEEDS: &str =
    "`cblas_sgemm` to link with `-lopenblas` (Debian: libopenblas-dev) and `COLLAGE_NO_BLAS` unset";

/// Whether CBLAS links on this machine (probed once per process; `COLLAGE_NO_BLAS` disables).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        cfg!(feature = "blas")
            && std::env::var_os("COLLAGE_NO_BLAS").is_none()
            && crate::toolchain::probe_link(PROBE, &["openblas"])
    })
}
